//! Upstream clusters.

use std::collections::BTreeMap;

use mcp_access_k8s::Topology;
use serde_json::{json, Value};

use super::routes::authority;
use super::{EnvoyOptions, Notes, Resolved, BUFFER_LIMIT, T};
use crate::jwt::Jwks;

pub(super) fn lookup<'a, V>(map: &'a BTreeMap<String, V>, ns: &str, name: &str) -> Option<&'a V> {
    map.get(&format!("{ns}/{name}"))
        .or_else(|| map.get(&format!("{name}.{ns}")))
        .or_else(|| map.get(name))
}

pub(super) fn is_ip(h: &str) -> bool {
    h.parse::<std::net::IpAddr>().is_ok()
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

/// The upstream clusters (XBackends, Services, authorizers, remote JWKS) and, per cluster, the
/// Host its routes send (see [`super::routes::route`]).
pub(super) fn upstream_clusters(
    topo: &Topology,
    o: &EnvoyOptions,
    notes: &mut Notes,
) -> (Vec<Value>, BTreeMap<String, String>) {
    let mut clusters = Vec::new();
    let mut host_rewrites: BTreeMap<String, String> = BTreeMap::new();
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
        // Gateway API's XBackend says (`spec.tls.mode`); the agentic kind: TLS to a hostname.
        let tls = resolved
            .and_then(|r| r.tls)
            .unwrap_or(b.tls.unwrap_or(b.hostname.is_some()));
        let sni = if tls {
            Some(b.hostname.clone().unwrap_or_else(|| key.clone()))
        } else {
            None
        };
        if let Some(h) = &b.hostname {
            host_rewrites.insert(b.cluster.clone(), h.clone());
        } else if resolved.is_some() {
            host_rewrites.insert(b.cluster.clone(), authority(&host, port));
        }
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
    (clusters, host_rewrites)
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
