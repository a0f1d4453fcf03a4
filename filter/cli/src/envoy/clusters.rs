//! Upstream clusters.

use std::collections::BTreeMap;

use mcp_access_k8s::{BackendModel, BackendTlsModel, Topology};
use serde_json::{json, Value};

use super::{EnvoyOptions, Notes, Resolved, BUFFER_LIMIT, T};
use crate::error::CliError;
use crate::jwt::Jwks;

pub(super) fn lookup<'a, V>(map: &'a BTreeMap<String, V>, ns: &str, name: &str) -> Option<&'a V> {
    map.get(&format!("{ns}/{name}"))
        .or_else(|| map.get(&format!("{name}.{ns}")))
        .or_else(|| map.get(name))
}

pub(super) fn is_ip(h: &str) -> bool {
    h.parse::<std::net::IpAddr>().is_ok()
}

/// `HOST:PORT` as an HTTP authority (an IPv6 address in brackets).
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub(super) fn duration_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

pub(super) fn cluster(
    name: &str,
    host: &str,
    port: u16,
    tls_sni: Option<&str>,
    upstream_ca: &str,
) -> Value {
    let mut c = json!({
        "name": name,
        "type": if is_ip(host) { "STATIC" } else { "STRICT_DNS" },
        "connect_timeout": "5s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": host, "port_value": port}}}}]}]
        }
    });
    if let (Some(sni), Some(obj)) = (tls_sni, c.as_object_mut()) {
        obj.insert(
            "transport_socket".into(),
            json!({
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": format!("{T}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"),
                    "sni": sni,
                    "common_tls_context": {"validation_context": {
                        "trusted_ca": {"filename": upstream_ca},
                        "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": sni}}]
                    }}
                }
            }),
        );
    }
    c
}

/// `namespace/name` as (namespace, name).
fn named(r: &str) -> (&str, &str) {
    r.split_once('/').unwrap_or(("", r))
}

/// The TLS transport socket of a Gateway API XBackend's `spec.tls`: SNI and the names the
/// certificate must hold from `validation` (its hostname or the XBackend's, or its
/// subjectAltNames), trusted CAs from its caCertificateRefs (`--client-ca REF=CA.pem`) or the
/// system's (`wellKnownCACertificates: System`, or no validation: `--upstream-ca`), and with
/// ClientAndServer the client certificate of its clientCertificateRef (`--tls-cert`).
fn backend_tls(b: &BackendModel, t: &BackendTlsModel, o: &EnvoyOptions) -> Result<Value, CliError> {
    let mut cas = Vec::new();
    for r in &t.ca_refs {
        let (ns, name) = named(r);
        let file = lookup(&o.client_cas, ns, name).ok_or_else(|| {
            format!("XBackend {}: spec.tls.validation.caCertificateRefs names {r}: pass its CA as --client-ca {r}=CA.pem", b.id)
        })?;
        cas.push(file.clone());
    }
    let trusted_ca = match cas.as_slice() {
        [] => json!({"filename": o.upstream_ca}),
        [one] => json!({"filename": one}),
        many => {
            let mut pem = String::new();
            for f in many {
                pem.push_str(&std::fs::read_to_string(f).map_err(|e| {
                    format!("XBackend {}: reading CA file {f}: {e} (several caCertificateRefs are inlined, so their files must be readable here)", b.id)
                })?);
                pem.push('\n');
            }
            json!({"inline_string": pem})
        }
    };
    let sans: Vec<Value> = if t.sans.is_empty() {
        vec![json!({"san_type": "DNS", "matcher": {"exact": t.sni}})]
    } else {
        t.sans
            .iter()
            .map(|(kind, v)| json!({"san_type": kind, "matcher": {"exact": v}}))
            .collect()
    };
    let mut common = json!({"validation_context": {
        "trusted_ca": trusted_ca,
        "match_typed_subject_alt_names": sans,
    }});
    if let Some(r) = &t.client_certificate {
        let (ns, name) = named(r);
        let (cert, key) = lookup(&o.tls_certs, ns, name).ok_or_else(|| {
            format!("XBackend {}: spec.tls.clientCertificateRef names Secret {r}: pass its certificate as --tls-cert {r}=CERT.pem,KEY.pem", b.id)
        })?;
        if let Some(obj) = common.as_object_mut() {
            obj.insert(
                "tls_certificates".into(),
                json!([{"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}]),
            );
        }
    }
    Ok(json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"),
            "sni": t.sni,
            "common_tls_context": common,
        }
    }))
}

/// Makes `cluster` speak HTTP/2 to its endpoints (gRPC authorizers), over TLS or plaintext.
pub(crate) fn http2_only(cluster: &mut Value) {
    if let Some(obj) = cluster.as_object_mut() {
        obj.insert(
            "typed_extension_protocol_options".into(),
            json!({"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": format!("{T}envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
                "explicit_http_config": {"http2_protocol_options": {}}
            }}),
        );
    }
}

/// Per cluster, the Host its routes send.
pub(super) type HostRewrites = BTreeMap<String, String>;

/// The upstream clusters (XBackends, Services, authorizers, remote JWKS) and their
/// [`HostRewrites`] (the Host each route to a cluster sends).
pub(super) fn upstream_clusters(
    topo: &Topology,
    o: &EnvoyOptions,
    notes: &mut Notes,
) -> Result<(Vec<Value>, HostRewrites), CliError> {
    let mut clusters = Vec::new();
    let mut host_rewrites = HostRewrites::new();
    for b in &topo.backends {
        let key = b
            .service_name
            .clone()
            .or_else(|| b.hostname.clone())
            .unwrap_or_default();
        let resolved = lookup(&o.resolve, &b.namespace, &key);
        let (host, port) = match resolved {
            Some(r) => (r.host.clone(), r.port),
            None => {
                let host = match (&b.service_name, &b.hostname) {
                    (Some(s), _) => format!("{s}.{}.svc.cluster.local", b.namespace),
                    (None, Some(h)) => h.clone(),
                    _ => String::new(),
                };
                if b.service_name.is_some() {
                    notes.0.push(format!(
                        "XBackend {}: no --resolve {key}=HOST:PORT, using DNS {host}:{}",
                        b.id, b.port
                    ));
                }
                (host, b.port)
            }
        };
        if let Some(h) = &b.hostname {
            host_rewrites.insert(b.cluster.clone(), h.clone());
        } else if resolved.is_some() {
            host_rewrites.insert(b.cluster.clone(), authority(&host, port));
        }
        // Gateway API's XBackend says (`spec.tls`), unless --resolve forces plaintext; the
        // agentic kind: TLS to a hostname, unless --resolve says otherwise.
        if let (Some(Some(t)), false) = (&b.tls, resolved.and_then(|r| r.tls) == Some(false)) {
            let mut c = cluster(&b.cluster, &host, port, None, &o.upstream_ca);
            if let Some(obj) = c.as_object_mut() {
                obj.insert("transport_socket".into(), backend_tls(b, t, o)?);
            }
            clusters.push(c);
            continue;
        }
        let tls = match (resolved.and_then(|r| r.tls), &b.tls) {
            (Some(forced), _) => forced,
            (None, Some(t)) => t.is_some(),
            (None, None) => b.hostname.is_some(),
        };
        let sni = tls.then(|| b.hostname.clone().unwrap_or_else(|| key.clone()));
        clusters.push(cluster(
            &b.cluster,
            &host,
            port,
            sni.as_deref(),
            &o.upstream_ca,
        ));
    }
    for s in &topo.services {
        let (r, resolved) = service_address(o, notes, "Service", (&s.namespace, &s.name, s.port));
        if resolved {
            host_rewrites.insert(s.cluster.clone(), authority(&r.host, r.port));
        }
        let sni = (r.tls == Some(true)).then_some(s.name.as_str());
        clusters.push(cluster(&s.cluster, &r.host, r.port, sni, &o.upstream_ca));
    }
    for a in &topo.authorizers {
        let what = "authorizer Service";
        let (r, _) = service_address(o, notes, what, (&a.namespace, &a.name, a.port));
        let sni = (r.tls == Some(true)).then_some(a.name.as_str());
        let mut c = cluster(&a.cluster, &r.host, r.port, sni, &o.upstream_ca);
        if a.grpc {
            http2_only(&mut c);
        }
        clusters.push(c);
    }
    for p in &o.jwt {
        if let (Jwks::Remote { host, port, .. }, Some(name)) = (&p.jwks, p.jwks_cluster()) {
            let mut c = cluster(&name, host, *port, Some(host), &o.upstream_ca);
            if let Some(obj) = c.as_object_mut() {
                // `localhost` and dual-stack names: try IPv4 first, then IPv6.
                obj.insert("dns_lookup_family".into(), json!("V4_PREFERRED"));
            }
            clusters.push(c);
        }
    }
    Ok((clusters, host_rewrites))
}

/// Where a Service (`namespace`, `name`, `port`) is: its `--resolve` (true), else its cluster DNS
/// name, with a note.
fn service_address(
    o: &EnvoyOptions,
    notes: &mut Notes,
    what: &str,
    (namespace, name, port): (&str, &str, u16),
) -> (Resolved, bool) {
    if let Some(r) = lookup(&o.resolve, namespace, name) {
        return (r.clone(), true);
    }
    let host = format!("{name}.{namespace}.svc.cluster.local");
    notes.0.push(format!(
        "{what} {namespace}/{name}: no --resolve {name}=HOST:PORT, using DNS {host}:{port}"
    ));
    (
        Resolved {
            host,
            port,
            tls: Some(false),
        },
        false,
    )
}

/// `HOST:PORT` (`[::1]:80` for IPv6) as host and a port other than 0.
pub(crate) fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    let host = host.trim_matches(['[', ']']);
    (!host.is_empty()).then(|| (host.to_string(), port))
}
