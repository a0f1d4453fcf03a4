//! Listeners: TLS, the HTTP connection manager and its filters (jwt_authn, the filter, router).

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_bundle::{Bundle, EscapedSlashes, ProtectedResource, ServedListener};
use mcp_access_k8s::{ListenerModel, Protocol, Topology};
use serde_json::{json, Value};

use super::clusters::lookup;
use super::ecds::{ecds_filter, wasm_filter};
use super::routes::virtual_hosts;
use super::{jwt_required, EnvoyOptions, BUFFER_LIMIT, T};
use crate::error::CliError;
use crate::jwt;

/// The access log of one connection manager. `listener` is the Envoy listener's name,
/// `address:port`, for every filter chain alike (a plain-HTTP chain serves every Gateway
/// listener of its port); the Gateway listener a request was decided on is the decision's
/// own `listener` (`namespace/gateway/listener`, in `filter_state`).
fn access_log(path: &str, listener: &str) -> Value {
    json!([{
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.access_loggers.file.v3.FileAccessLog"),
            "path": path,
            "log_format": {"json_format": {
                "listener": listener,
                "code": "%RESPONSE_CODE%",
                "method": "%REQ(:METHOD)%",
                "path": "%REQ(:PATH)%",
                "route": "%ROUTE_NAME%",
                "upstream": "%UPSTREAM_CLUSTER%",
                "peer_uri_san": "%DOWNSTREAM_PEER_URI_SAN%",
                "filter_state": "%FILTER_STATE(wasm.mcp_access.decision:PLAIN)%"
            }}
        }
    }])
}

/// Envoy's own request normalization, with the choices the filter makes (it does not rely on
/// them): RFC 3986 path normalization, merged slashes, `%2F` / `%5C` per the bundle's
/// `envoy.escapedSlashes`, one trailing dot of the host removed.
pub(crate) fn normalization(escaped: EscapedSlashes) -> Value {
    json!({
        "normalize_path": true,
        "merge_slashes": true,
        "path_with_escaped_slashes_action": match escaped {
            EscapedSlashes::Reject => "REJECT_REQUEST",
            EscapedSlashes::Decode => "UNESCAPE_AND_FORWARD",
        },
        "strip_trailing_host_dot": true,
        // `mcp_name` must not reach a server that folds `_` into `-` and reads it as Mcp-Name.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    })
}

struct Chain<'a> {
    name: &'a str,
    /// The Envoy listener (`address:port`) the chain belongs to.
    listener: &'a str,
    tls: bool,
    /// `jwt_authn` refuses requests without a token.
    jwt_required: bool,
    /// The protected resource metadata of its listeners.
    protected: Vec<&'a ProtectedResource>,
}

fn hcm(
    c: &Chain<'_>,
    vhosts: Vec<Value>,
    o: &EnvoyOptions,
    bundle: &Bundle,
    port: u16,
) -> Result<Value, CliError> {
    let (name, tls) = (c.name, c.tls);
    let open: Vec<String> = c
        .protected
        .iter()
        .flat_map(|p| p.metadata_paths())
        .collect();
    let mut filters: Vec<Value> = jwt::envoy_filter(&o.jwt, c.jwt_required, &open)
        .into_iter()
        .collect();
    filters.push(match &o.ecds_dir {
        // One configuration every listener shares: the filter reads each request's port.
        Some(dir) => ecds_filter(dir),
        None => wasm_filter(&o.wasm, &served_bundle(bundle, port, tls)?),
    });
    filters.push(json!({"name": "envoy.filters.http.router", "typed_config": {"@type": format!("{T}envoy.extensions.filters.http.router.v3.Router")}}));
    let mut h = json!({
        "@type": format!("{T}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"),
        "stat_prefix": name,
        "codec_type": "AUTO",
        // The :authority keeps its port (CEL's request.host reads it as received, as Envoy's
        // attribute); virtual hosts are matched without it.
        "route_config": {"name": name, "virtual_hosts": vhosts, "ignore_port_in_host_matching": true},
        "http_filters": filters,
        // Callers cannot forge a client certificate header; over TLS the verified one is sent.
        "forward_client_cert_details": if tls { "SANITIZE_SET" } else { "SANITIZE" },
    });
    if let (Some(obj), Value::Object(norm)) = (
        h.as_object_mut(),
        normalization(bundle.envoy.escaped_slashes),
    ) {
        obj.extend(norm);
        if tls {
            obj.insert(
                "set_current_client_cert_details".into(),
                json!({"uri": true}),
            );
        }
        let mut logs = o
            .access_log
            .as_ref()
            .map_or(json!([]), |p| access_log(p, c.listener));
        if let (Some(logs), Some(_)) = (logs.as_array_mut(), &o.otlp) {
            logs.push(super::otlp::access_logger(c.listener));
        }
        if logs.as_array().is_some_and(|l| !l.is_empty()) {
            obj.insert("access_log".into(), logs);
        }
        if o.tracing.is_some() {
            obj.insert("tracing".into(), super::tracing::hcm_tracing());
        }
        if !o.jwt.is_empty() {
            if let Some(replies) = super::oauth::jwt_replies(name, &c.protected)? {
                obj.insert("local_reply_config".into(), replies);
            }
        }
    }
    Ok(json!([{"name": "envoy.filters.network.http_connection_manager", "typed_config": h}]))
}

/// The bundle of one filter chain: with the listener it serves (`envoy.listener`), so that the
/// filter neither asks Envoy for each request's port nor, without TLS, for a certificate.
fn served_bundle(bundle: &Bundle, port: u16, tls: bool) -> Result<String, CliError> {
    let mut b = bundle.clone();
    b.envoy.listener = Some(ServedListener { port, tls });
    Ok(serde_json::to_string(&b).map_err(|e| e.to_string())?)
}

/// `namespace/gateway/listener` -> its protected resource metadata.
fn protected_resources(bundle: &Bundle) -> BTreeMap<String, &ProtectedResource> {
    bundle
        .gateways
        .iter()
        .flat_map(|g| {
            g.listeners.iter().filter_map(move |l| {
                let id = format!("{}/{}/{}", g.namespace, g.name, l.name);
                l.protected_resource.as_ref().map(|p| (id, p))
            })
        })
        .collect()
}

/// The Gateway listeners by the (address, port) Envoy listens on, each with its
/// `namespace/gateway/listener` id.
fn by_address<'t>(
    topo: &'t Topology,
    o: &EnvoyOptions,
) -> BTreeMap<(String, u16), Vec<(String, &'t ListenerModel)>> {
    let mut groups: BTreeMap<(String, u16), Vec<(String, &ListenerModel)>> = BTreeMap::new();
    for g in &topo.gateways {
        let addrs = if g.addresses.is_empty() {
            vec![o.bind.clone()]
        } else {
            g.addresses.clone()
        };
        for l in &g.listeners {
            for a in &addrs {
                groups
                    .entry((a.clone(), l.port))
                    .or_default()
                    .push((format!("{}/{}/{}", g.namespace, g.name, l.name), l));
            }
        }
    }
    groups
}

/// The Envoy listeners: one per (address, port), a filter chain per HTTPS listener (by SNI) or
/// one shared by the plain-HTTP listeners of that port.
pub(super) fn listeners(
    topo: &Topology,
    o: &EnvoyOptions,
    bundle: &Bundle,
    host_rewrites: &BTreeMap<String, String>,
) -> Result<Vec<Value>, CliError> {
    let protected = protected_resources(bundle);
    let metadata_of = |id: &str| protected.get(id).copied();
    let groups = by_address(topo, o);
    if !o.jwt_required.is_empty() && o.jwt.is_empty() {
        return Err(
            "--jwt-required needs a --jwt-provider (the token it requires is verified by one)"
                .into(),
        );
    }
    let mut required_used = BTreeSet::new();
    let mut listeners = Vec::new();
    for ((addr, port), ls) in groups {
        let name = format!("{addr}:{port}");
        let https = ls.iter().any(|(_, l)| l.protocol == Protocol::Https);
        let mut listener = json!({
            "name": name,
            "address": {"socket_address": {"address": addr, "port_value": port}},
            "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        });
        let chains: Vec<Value> = if !https {
            let refs: Vec<&ListenerModel> = ls.iter().map(|(_, l)| *l).collect();
            let metadata: Vec<(&str, Option<&ProtectedResource>)> = ls
                .iter()
                .map(|(id, _)| (id.as_str(), metadata_of(id)))
                .collect();
            let vhosts = virtual_hosts(&refs, &metadata, &name, host_rewrites);
            // Plain-HTTP listeners on one port share one filter chain: all require a token or none.
            let required: Vec<(&String, bool)> = ls
                .iter()
                .map(|(lname, _)| (lname, jwt_required(o, lname, &mut required_used)))
                .collect();
            let jwt_required = required.iter().any(|(_, r)| *r);
            if let Some((other, _)) = required.iter().find(|(_, r)| *r != jwt_required) {
                return Err(format!(
                    "--jwt-required: listener {other} shares port {port} with a listener that requires a token; name every listener on that port, or none"
                ).into());
            }
            let chain = Chain {
                name: &name,
                listener: &name,
                tls: false,
                jwt_required,
                protected: metadata.iter().filter_map(|(_, p)| *p).collect(),
            };
            vec![json!({"filters": hcm(&chain, vhosts, o, bundle, port)?})]
        } else {
            let mut chains = Vec::new();
            for (lname, l) in &ls {
                let own = metadata_of(lname);
                let vhosts = virtual_hosts(&[*l], &[(lname, own)], lname, host_rewrites);
                let c = Chain {
                    name: lname,
                    listener: &name,
                    tls: true,
                    jwt_required: jwt_required(o, lname, &mut required_used),
                    protected: own.into_iter().collect(),
                };
                let mut chain = json!({
                    "filters": hcm(&c, vhosts, o, bundle, port)?,
                    "transport_socket": downstream_tls(lname, l, o)?,
                });
                if let (Some(h), Some(obj)) = (&l.hostname, chain.as_object_mut()) {
                    obj.insert("filter_chain_match".into(), json!({"server_names": [h]}));
                }
                chains.push(chain);
            }
            if let Some(obj) = listener.as_object_mut() {
                obj.insert(
                    "listener_filters".into(),
                    json!([{"name": "envoy.filters.listener.tls_inspector", "typed_config": {
                        "@type": format!("{T}envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector")}}]),
                );
            }
            chains
        };
        if let Some(obj) = listener.as_object_mut() {
            obj.insert("filter_chains".into(), json!(chains));
        }
        listeners.push(listener);
    }
    if let Some(unknown) = o.jwt_required.iter().find(|r| !required_used.contains(*r)) {
        let known: Vec<String> = topo
            .gateways
            .iter()
            .flat_map(|g| {
                g.listeners
                    .iter()
                    .map(move |l| format!("{}/{}/{}", g.namespace, g.name, l.name))
            })
            .collect();
        return Err(format!(
            "--jwt-required {unknown}: no such listener (LISTENER, GATEWAY/LISTENER or NAMESPACE/GATEWAY/LISTENER; listeners: {})",
            known.join(", ")
        ).into());
    }
    Ok(listeners)
}

fn downstream_tls(lname: &str, l: &ListenerModel, o: &EnvoyOptions) -> Result<Value, CliError> {
    let Some(tls) = &l.tls else {
        return Err(format!("listener {lname}: HTTPS without TLS settings").into());
    };
    let mut certs = Vec::new();
    for c in &tls.certificates {
        let (ns, name) = c.split_once('/').unwrap_or(("", c));
        let (cert, key) = lookup(&o.tls_certs, ns, name).ok_or_else(|| {
            format!("listener {lname}: no --tls-cert {name}=<cert.pem>,<key.pem> for Secret {c}")
        })?;
        certs.push(
            json!({"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}),
        );
    }
    let mut common = json!({"tls_certificates": certs, "alpn_protocols": ["h2", "http/1.1"]});
    let mut require = false;
    if let Some(v) = &tls.client_validation {
        let mut files = Vec::new();
        for r in &v.ca_refs {
            let (ns, name) = r.split_once('/').unwrap_or(("", r));
            let f = lookup(&o.client_cas, ns, name).ok_or_else(|| {
                format!("listener {lname}: no --client-ca {name}=<ca.pem> for {r}")
            })?;
            files.push(f.clone());
        }
        if files.len() > 1 {
            return Err(format!("listener {lname}: several client CA references; concatenate them into one --client-ca file").into());
        }
        if let (Some(f), Some(obj)) = (files.first(), common.as_object_mut()) {
            obj.insert(
                "validation_context".into(),
                json!({"trusted_ca": {"filename": f}}),
            );
        }
        require = !v.optional;
    }
    Ok(json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"),
            "require_client_certificate": require,
            "common_tls_context": common
        }
    }))
}
