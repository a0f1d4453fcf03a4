//! Envoy's routing as `explain` models it: the route it picks ([`Topology::route_for`]), and
//! what the router answers when it does not forward.

use mcp_access_bundle::gateway_api::canonical_host;
use mcp_access_bundle::{Bundle, UnknownBackend};
use mcp_access_k8s::{RouteAction, RouteEntry, RouteProbe, Topology};

use super::request::Prepared;
use super::RequestSpec;
use crate::error::CliError;

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
    let canonical_path =
        mcp_access_engine::canon::canonical_path(&req.path, bundle.envoy.escaped_slashes)
            .unwrap_or_default();
    let host = canonical_host(&req.authority);
    let probe = RouteProbe {
        method: &req.method,
        path: &req.path,
        canonical_path: &canonical_path,
        host: &host,
        headers: &req.headers,
    };
    Ok(match t.route_for(&req.gateway, &req.listener, &probe) {
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
