//! Envoy's routing as `explain` models it: the listener, the route Gateway API precedence
//! picks, and what the router answers when it does not forward.

use mcp_access_bundle::gateway_api::{
    canonical_host, full_regex, path_prefix_matches, HostPattern,
};
use mcp_access_bundle::{Bundle, UnknownBackend};
use mcp_access_engine::request::Request;
use mcp_access_k8s::{PathMatchKind, RouteAction, RouteEntry, Topology};

use super::request::Prepared;
use super::RequestSpec;
use crate::error::CliError;

/// The `:authority` a client sends: `host` as given when it has a port, else with the
/// listener's port unless that is HTTP's or HTTPS's default (as clients write it). CEL's
/// `request.host` reads it as received (port included); rules and `request.hostname` read
/// the canonical host.
pub(super) fn client_authority(host: &str, port: u16) -> String {
    let after_v6 = host
        .rfind(']')
        .and_then(|i| host.get(i + 1..))
        .unwrap_or(host);
    let has_port = after_v6
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (has_port, port) {
        (true, _) | (false, 80 | 443) => host.to_string(),
        (false, _) => format!("{host}:{port}"),
    }
}

/// The listener the request arrives on: gateway id, listener name, port and hostname; by
/// port alone (no gateway) when no listener has that port.
pub(super) fn pick_listener(
    b: &Bundle,
    spec: &RequestSpec,
) -> Result<(String, String, u16, Option<String>), CliError> {
    let mut all = Vec::new();
    for g in &b.gateways {
        for l in &g.listeners {
            all.push((
                format!("{}/{}", g.namespace, g.name),
                g.name.clone(),
                l.name.clone(),
                l.port,
                l.hostname.clone(),
            ));
        }
    }
    let chosen: Vec<_> = all
        .iter()
        .filter(|(id, name, l, port, _)| {
            spec.gateway.as_ref().is_none_or(|g| g == id || g == name)
                && spec.listener.as_ref().is_none_or(|x| x == l)
                && spec.port.is_none_or(|p| p == *port)
        })
        .collect();
    match chosen.as_slice() {
        [(id, _, l, port, host)] => Ok((id.clone(), l.clone(), *port, host.clone())),
        [] if spec.port.is_some() && spec.gateway.is_none() && spec.listener.is_none() => Ok((
            String::new(),
            String::new(),
            spec.port.unwrap_or_default(),
            None,
        )),
        _ => {
            let names: Vec<String> = all
                .iter()
                .map(|(id, _, l, p, _)| format!("{id} listener {l} (port {p})"))
                .collect();
            Err(format!(
                "say which listener the request arrives on (--gateway, --listener or --port); the bundle has: {}",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ).into())
        }
    }
}

fn path_matches(e: &RouteEntry, path: &str) -> bool {
    let p = path.split(['?', '#']).next().unwrap_or(path);
    match e.path_kind {
        PathMatchKind::Exact => p == e.path,
        PathMatchKind::Prefix => path_prefix_matches(&e.path, p),
        PathMatchKind::Regex => full_regex(&e.path).is_ok_and(|r| r.is_match(p)),
    }
}

fn value_ok(regex: bool, pattern: &str, v: &str) -> bool {
    if regex {
        full_regex(pattern).is_ok_and(|r| r.is_match(v))
    } else {
        pattern == v
    }
}

fn host_ok(patterns: &[String], host: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| HostPattern::new(p).matches(host))
}

/// The route Envoy would pick for the request on a listener (Gateway API precedence).
fn match_route<'a>(
    topo: &'a Topology,
    gateway: &str,
    listener: &str,
    req: &Request,
) -> Option<&'a RouteEntry> {
    let g = topo
        .gateways
        .iter()
        .find(|g| format!("{}/{}", g.namespace, g.name) == gateway)?;
    let l = g.listeners.iter().find(|l| l.name == listener)?;
    let host = req.host.clone();
    let query: Vec<(String, String)> = req
        .path
        .split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let candidates = l.routes.iter().filter(|e| host_ok(&e.hostnames, &host));
    // Routes for this exact host first, as Envoy's virtual host choice does.
    let mut specific: Vec<&RouteEntry> = candidates
        .clone()
        .filter(|e| e.hostnames.iter().any(|h| h == &host))
        .collect();
    let rest: Vec<&RouteEntry> = candidates
        .filter(|e| !e.hostnames.iter().any(|h| h == &host))
        .collect();
    specific.extend(rest);
    let mut ordered = specific;
    ordered.sort_by(|a, b| {
        let ka = !a.hostnames.iter().any(|h| h == &host);
        let kb = !b.hostnames.iter().any(|h| h == &host);
        ka.cmp(&kb).then_with(|| mcp_access_k8s::precedence(a, b))
    });
    ordered.into_iter().find(|e| {
        path_matches(e, &req.canonical_path)
            && e.method.as_ref().is_none_or(|m| m == &req.method)
            && e.headers.iter().all(|h| {
                req.header(&h.name.to_ascii_lowercase())
                    .is_some_and(|v| value_ok(h.regex, &h.value, v))
            })
            && e.query.iter().all(|q| {
                query
                    .iter()
                    .any(|(k, v)| k == &q.name && value_ok(q.regex, &q.value, v))
            })
    })
}

/// What Envoy's router does with a request the filter let on, when it does not forward it.
pub(super) enum RouterAnswer {
    NoRoute,
    Redirect(u16),
    Fail(String),
}

/// What Envoy's routing makes of the request: the route and cluster it reports to the
/// filter, a note for the reader, and the router's own answer when it does not forward.
#[derive(Default)]
pub(super) struct Routing {
    pub(super) route: Option<String>,
    pub(super) cluster: Option<String>,
    pub(super) note: Option<String>,
    pub(super) router: Option<RouterAnswer>,
}

/// The route Envoy picks, and so the backend: given by `--route` or `--backend`, else
/// matched in the topology (none given: no route known).
pub(super) fn resolve_routing(
    bundle: &Bundle,
    topo: Option<&Topology>,
    spec: &RequestSpec,
    req: &Prepared,
) -> Result<Routing, CliError> {
    if let Some(r) = &spec.route {
        return Ok(Routing {
            route: Some(r.clone()),
            ..Routing::default()
        });
    }
    if let Some(b) = &spec.backend {
        let be = bundle
            .backends
            .iter()
            .find(|x| &format!("{}/{}", x.namespace, x.name) == b || &x.name == b)
            .ok_or_else(|| format!("no backend {b} in the bundle"))?;
        let route = be.route_names.first().cloned();
        let cluster = be.cluster_names.first().cloned();
        // Policies narrowed to routes of this backend: which route is taken matters.
        let scoped = bundle.policies.iter().any(|p| {
            p.targets.iter().any(|t| {
                t.routes.is_some()
                    && t.name == be.name
                    && t.namespace.as_deref().unwrap_or(&p.namespace) == be.namespace
            })
        });
        let note = scoped.then(|| {
            format!(
                "XBackend {}/{} has policies on HTTPRoutes, so the decision depends on the route: --backend takes {}; give --route (or --path, with manifests) for another",
                be.namespace,
                be.name,
                route
                    .as_deref()
                    .map(|r| format!("route {r}"))
                    .or_else(|| cluster.as_deref().map(|c| format!("cluster {c}")))
                    .unwrap_or_default()
            )
        });
        return Ok(Routing {
            route,
            cluster,
            note,
            ..Routing::default()
        });
    }
    let Some(t) = topo else {
        return Ok(Routing::default());
    };
    let probe = Request {
        method: req.method.clone(),
        canonical_path: mcp_access_engine::canon::canonical_path(
            &req.path,
            bundle.envoy.escaped_slashes,
        )
        .unwrap_or_default(),
        path: req.path.clone(),
        authority: req.authority.clone(),
        host: canonical_host(&req.authority),
        port: req.port,
        headers: req.headers.iter().map(|(n, v)| (n, v)).collect(),
        ..Request::default()
    };
    Ok(match match_route(t, &req.gateway, &req.listener, &probe) {
        Some(e) => routing_of(e),
        None => Routing {
            note: Some(match bundle.envoy.unknown_backend {
                UnknownBackend::Deny => "no HTTPRoute matches: Envoy has no route, the filter denies it as an unknown backend (envoy.unknownBackend: Deny) before Envoy's router would answer 404".into(),
                UnknownBackend::GatewayOnly => "no HTTPRoute matches: Envoy has no route, the filter decides on Gateway-level policies alone (envoy.unknownBackend: GatewayOnly) and what it lets on gets Envoy's 404".into(),
            }),
            router: Some(RouterAnswer::NoRoute),
            ..Routing::default()
        },
    })
}

/// What a matched route entry does with the request.
fn routing_of(e: &RouteEntry) -> Routing {
    let mut out = Routing {
        route: Some(e.name.clone()),
        ..Routing::default()
    };
    match &e.action {
        RouteAction::Forward {
            clusters,
            path_rewrite,
            ..
        } => {
            out.cluster = clusters.first().map(|c| c.cluster.clone());
            if path_rewrite.is_some() {
                out.note = Some("the path is rewritten before it reaches the backend".to_string());
            }
        }
        RouteAction::Redirect { status, .. } => {
            out.note = Some(format!(
                "the route redirects ({status}); the filter decides first"
            ));
            out.router = Some(RouterAnswer::Redirect(*status));
        }
        RouteAction::Fail { message } => {
            out.note = Some(
                "the route has no usable backend (Envoy answers 500); the filter decides first"
                    .into(),
            );
            out.router = Some(RouterAnswer::Fail(message.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hostnames_match_canonical_hosts() {
        let wild = ["*.a.com".to_string()];
        assert!(host_ok(&wild, "x.a.com"));
        assert!(!host_ok(&wild, ".a.com"));
        assert!(!host_ok(&wild, "a.com"));
        assert!(host_ok(&["A.com.".to_string()], "a.com"));
        assert!(host_ok(&[], "anything"));
    }
}
