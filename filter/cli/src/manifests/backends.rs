//! Gateway API XBackends (`gateway.networking.x-k8s.io`, v1.6, type `ExternalHostname`) on each
//! platform.
//!
//! Envoy Gateway routes only to Service, ServiceImport and its own `Backend`: each such XBackend
//! becomes a `Backend` of the same namespace and name (an FQDN endpoint, TLS from `spec.tls` in
//! the Backend's own `tls` field), and every HTTPRoute that forwards to one is rendered again
//! with those `backendRefs` turned to the Backend (same namespace, name and rules, so it replaces
//! the user's on apply). Envoy Gateway names a rule's cluster `httproute/NS/NAME/rule/I` whatever
//! the backend's kind (`irRouteDestinationName`), so the bundle's cluster names still identify
//! the XBackend. What the Backend cannot express is refused rather than rendered weaker.
//!
//! Istio routes to the XBackend itself: nothing is rendered; what it does not do is said.

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_k8s::{Item, Manifests, RouteAction, Topology};
use serde_json::{json, Map, Value};

use super::{meta, EG_API, GATEWAY_GROUP};
use crate::error::CliError;

const GATEWAY_X_GROUP: &str = "gateway.networking.x-k8s.io";
const EG_GROUP: &str = "gateway.envoyproxy.io";

/// Objects to render besides the filter's, and what to say about them on standard error.
#[derive(Debug, Default)]
pub struct BackendObjects {
    pub objects: Vec<Value>,
    pub notes: Vec<String>,
}

fn is_gateway_xbackend_ref(r: &Value) -> bool {
    r.get("group").and_then(Value::as_str) == Some(GATEWAY_X_GROUP)
        && r.get("kind").and_then(Value::as_str) == Some("XBackend")
}

/// Whether a rule of HTTPRoute `route` (`namespace/name`) forwards to XBackend `id` in the
/// compiled topology (its reference resolved and was permitted).
fn forwards_to(topo: &Topology, route: &str, id: &str) -> bool {
    topo.gateways
        .iter()
        .flat_map(|g| &g.listeners)
        .flat_map(|l| &l.routes)
        .filter(|e| e.route == route)
        .any(|e| match &e.action {
            RouteAction::Forward { clusters, .. } => clusters
                .iter()
                .filter_map(|c| c.backend.as_ref())
                .any(|b| format!("{}/{}", b.namespace, b.name) == id),
            _ => false,
        })
}

/// Every backendRef of an HTTPRoute spec as written.
fn backend_refs(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("backendRefs").and_then(Value::as_array))
        .flatten()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// The Gateway API XBackends of the manifests that compiled (`namespace/name` -> the object).
fn accepted_xbackends<'a, S>(
    items: &'a [Item<S>],
    topo: &Topology,
) -> BTreeMap<String, &'a Item<S>> {
    items
        .iter()
        .filter(|b| b.api_version().split('/').next() == Some(GATEWAY_X_GROUP))
        .filter(|b| {
            topo.backends.iter().any(|m| {
                m.group() == GATEWAY_X_GROUP
                    && m.id.namespace == b.meta.namespace
                    && m.id.name == b.name()
            })
        })
        .map(|b| (format!("{}/{}", b.meta.namespace, b.name()), b))
        .collect()
}

/// Envoy Gateway: a `Backend` per Gateway API XBackend an HTTPRoute forwards to, the HTTPRoutes
/// with their references turned to it, and a `ReferenceGrant` for each namespace whose Backends
/// routes of other namespaces refer to (as the XBackend's grant allowed).
pub fn envoy_gateway(
    m: &Manifests,
    topo: &Topology,
    name: &str,
) -> Result<BackendObjects, CliError> {
    let xbackends = accepted_xbackends(&m.backends, topo);
    let mut out = BackendObjects::default();
    for r in &topo.xbackend_refs {
        let agentic = m.routes.iter().any(|x| {
            &format!("{}/{}", x.meta.namespace, x.name()) == r
                && backend_refs(x.raw_spec()).any(|b| {
                    str_at(b, &["kind"]) == Some("XBackend") && !is_gateway_xbackend_ref(b)
                })
        });
        if agentic {
            out.notes.push(format!("HTTPRoute {r} refers to an XBackend of kube-agentic-networking (agentic.networking.x-k8s.io): Envoy Gateway routes only to Service, ServiceImport and its Backend, so it will not route it; refer to the Service the XBackend names (spec.mcp.serviceName and port) instead: mcp-access resolves it to the XBackend"));
        }
    }
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    // Per Backend namespace, per route namespace: the Backend names referred to from there.
    let mut grants: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for r in &m.routes {
        let ns = r.meta.namespace.as_str();
        let mut spec = r.raw_spec().clone();
        let mut turned = false;
        let rules = spec.get_mut("rules").and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten() {
            let refs = rule.get_mut("backendRefs").and_then(Value::as_array_mut);
            for b in refs.into_iter().flatten() {
                if !is_gateway_xbackend_ref(b) {
                    continue;
                }
                let name = str_at(b, &["name"]).unwrap_or_default().to_string();
                let to_ns = str_at(b, &["namespace"]).unwrap_or(ns).to_string();
                let id = format!("{to_ns}/{name}");
                if !xbackends.contains_key(&id) {
                    out.notes.push(format!("HTTPRoute {}/{} refers to XBackend {id}, which is not accepted: no Backend is rendered for it, so Envoy Gateway will not route that reference", ns, r.name()));
                }
                if let Some(o) = b.as_object_mut() {
                    o.insert("group".into(), json!(EG_GROUP));
                    o.insert("kind".into(), json!("Backend"));
                }
                // A grant only where the compiler let the route reach the XBackend (its
                // ReferenceGrant permitted it): never one the user did not give.
                let route_id = format!("{ns}/{}", r.name());
                if to_ns != ns && forwards_to(topo, &route_id, &id) {
                    let from = grants.entry(to_ns.clone()).or_default();
                    from.entry(ns.to_string()).or_default().insert(name);
                } else if to_ns != ns {
                    out.notes.push(format!("HTTPRoute {route_id} refers to XBackend {id}, which it does not reach (no ReferenceGrant permits it, or the route is not attached): no ReferenceGrant is rendered for the Backend"));
                }
                wanted.insert(id);
                turned = true;
            }
        }
        if turned {
            out.objects.push(route(r, spec));
        }
    }
    for id in &wanted {
        if let Some(x) = xbackends.get(id) {
            out.objects.push(backend(
                x.meta.namespace.as_str(),
                x.name(),
                x.raw_spec(),
                &mut out.notes,
            )?);
        }
    }
    if out
        .objects
        .iter()
        .any(|o| str_at(o, &["kind"]) == Some("Backend"))
    {
        out.notes.push("the Backends need the Backend API enabled in the EnvoyGateway config (extensionApis.enableBackend: true); without it Envoy Gateway does not route to them".into());
    }
    for (to_ns, from) in grants {
        out.objects
            .push(reference_grant(&format!("{name}-backends"), &to_ns, &from)?);
    }
    Ok(out)
}

/// The HTTPRoute as written (its labels and annotations, without kubectl's record of the last
/// apply) with `spec` in place of its own.
fn route<S>(r: &Item<S>, spec: Value) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(r.name()));
    metadata.insert("namespace".into(), json!(r.meta.namespace));
    let labels = r.meta.labels();
    if !labels.is_empty() {
        metadata.insert("labels".into(), json!(labels));
    }
    let annotations: BTreeMap<_, _> = r
        .meta
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
        .collect();
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), json!(annotations));
    }
    json!({"apiVersion": r.api_version(), "kind": "HTTPRoute", "metadata": metadata, "spec": spec})
}

/// The `Backend` of XBackend `ns/name` with `spec` (valid for the XBackend CRD: type
/// ExternalHostname, a hostname that is no IP address, a port).
fn backend(ns: &str, name: &str, spec: &Value, notes: &mut Vec<String>) -> Result<Value, CliError> {
    let at = format!("XBackend {ns}/{name}");
    let host = str_at(spec, &["externalHostname", "hostname"]).unwrap_or_default();
    if !host.trim_end_matches('.').contains('.') {
        return Err(format!("{at}: Envoy Gateway refuses an FQDN endpoint without a dot ({host}: \"should be a domain with at least two segments\"); give the external hostname's full name").into());
    }
    let port = spec.pointer("/port/port").cloned().unwrap_or(Value::Null);
    let mut s = Map::new();
    s.insert(
        "endpoints".into(),
        json!([{"fqdn": {"hostname": host, "port": port}}]),
    );
    match str_at(spec, &["protocol"]) {
        Some("H2C") => {
            s.insert("appProtocols".into(), json!(["gateway.envoyproxy.io/h2c"]));
        }
        Some(p @ ("HTTP2" | "TCP")) => notes.push(format!(
            "{at}: spec.protocol {p} has no counterpart in Envoy Gateway's Backend (appProtocols: h2c, ws, wss); the route's protocol decides"
        )),
        _ => {}
    }
    if let Some(tls) = backend_tls(&at, ns, spec.get("tls"))? {
        s.insert("tls".into(), tls);
    }
    Ok(json!({"apiVersion": EG_API, "kind": "Backend", "metadata": meta(name, ns), "spec": s}))
}

/// `spec.tls` as the Backend's `tls`: None for mode None (or no `tls`). Envoy Gateway verifies
/// the server with `caCertificateRefs` or `wellKnownCACertificates: System` and, with `sni` set
/// and no SANs, checks the certificate's SAN against it — what BackendTLSPolicy's `hostname`
/// means; it has no `subjectAltNames`.
fn backend_tls(at: &str, ns: &str, tls: Option<&Value>) -> Result<Option<Value>, CliError> {
    let Some(tls) = tls else { return Ok(None) };
    let mode = str_at(tls, &["mode"]).unwrap_or("None");
    if mode == "None" {
        return Ok(None);
    }
    let Some(v) = tls.get("validation") else {
        return Err(format!("{at}: spec.tls.mode {mode} without spec.tls.validation: Envoy Gateway's Backend verifies the server only against caCertificateRefs or wellKnownCACertificates; set spec.tls.validation").into());
    };
    if v.get("subjectAltNames")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(format!("{at}: spec.tls.validation.subjectAltNames: Envoy Gateway's Backend has no subjectAltNames (its tls checks the SAN against sni) and would check the certificate against the hostname instead; remove them (the hostname is then checked) or route this backend yourself with a BackendTLSPolicy").into());
    }
    let mut out = Map::new();
    if let Some(refs) = v
        .get("caCertificateRefs")
        .filter(|r| r.as_array().is_some_and(|a| !a.is_empty()))
    {
        out.insert("caCertificateRefs".into(), refs.clone());
    }
    if let Some(w) = str_at(v, &["wellKnownCACertificates"]) {
        if w != "System" {
            return Err(format!("{at}: spec.tls.validation.wellKnownCACertificates {w}: Envoy Gateway knows only System").into());
        }
        out.insert("wellKnownCACertificates".into(), json!(w));
    }
    if let Some(h) = str_at(v, &["hostname"]) {
        out.insert("sni".into(), json!(h));
    }
    if let Some(c) = tls.get("clientCertificateRef") {
        let cns = str_at(c, &["namespace"]).unwrap_or(ns);
        if cns != ns {
            return Err(format!("{at}: spec.tls.clientCertificateRef in namespace {cns}: Envoy Gateway takes a Backend's client certificate only from the Backend's namespace ({ns})").into());
        }
        out.insert("clientCertificateRef".into(), c.clone());
    }
    Ok(Some(Value::Object(out)))
}

/// A ReferenceGrant in `to_ns` letting HTTPRoutes of each namespace of `from` refer to those
/// Backends (at most 16 of each, as the CRD allows).
fn reference_grant(
    name: &str,
    to_ns: &str,
    from: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Value, CliError> {
    let names: BTreeSet<&String> = from.values().flatten().collect();
    if from.len() > 16 || names.len() > 16 {
        return Err(format!("more than 16 namespaces or Backends in one ReferenceGrant for namespace {to_ns}: split the routes").into());
    }
    let from: Vec<Value> = from
        .keys()
        .map(|ns| json!({"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": ns}))
        .collect();
    let to: Vec<Value> = names
        .iter()
        .map(|n| json!({"group": EG_GROUP, "kind": "Backend", "name": n}))
        .collect();
    Ok(json!({
        "apiVersion": format!("{GATEWAY_GROUP}/v1beta1"),
        "kind": "ReferenceGrant",
        "metadata": meta(name, to_ns),
        "spec": {"from": from, "to": to},
    }))
}

/// Istio: HTTPRoutes keep their references to Gateway API XBackends, which Istio routes to
/// itself (read in istio/istio's `pilot/pkg/config/kube/gateway`, `conversion.go` and
/// `backend_policies.go`); nothing is rendered. The notes say what it does not do with them.
pub fn istio(m: &Manifests, topo: &Topology) -> BackendObjects {
    let xbackends = accepted_xbackends(&m.backends, topo);
    let mut out = BackendObjects::default();
    let routed: BTreeSet<String> = m
        .routes
        .iter()
        .flat_map(|r| {
            backend_refs(r.raw_spec())
                .filter(|b| is_gateway_xbackend_ref(b))
                .map(|b| {
                    let ns = str_at(b, &["namespace"]).unwrap_or(&r.meta.namespace);
                    format!("{ns}/{}", str_at(b, &["name"]).unwrap_or_default())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let routed: Vec<(&String, &&Item<_>)> = xbackends
        .iter()
        .filter(|(id, _)| routed.contains(*id))
        .collect();
    if routed.is_empty() {
        return out;
    }
    out.notes.push("Istio routes HTTPRoutes to Gateway API XBackends only with PILOT_ENABLE_ALPHA_GATEWAY_API=true in istiod (otherwise the reference is an invalid kind)".into());
    for (id, x) in routed {
        let spec = x.raw_spec();
        let host = str_at(spec, &["externalHostname", "hostname"]).unwrap_or_default();
        let at = format!("XBackend {id}");
        out.notes.push(format!("{at}: Istio resolves {host} through its service registry: declare it with a ServiceEntry, or Istio reports the backend not found"));
        let Some(tls) = spec.get("tls") else { continue };
        let v = tls.get("validation");
        if str_at(tls, &["mode"]) == Some("ClientAndServer") {
            out.notes.push(format!("{at}: Istio does not accept spec.tls.mode ClientAndServer (no client certificates towards backends): it marks the XBackend not accepted and applies no TLS settings"));
        }
        if let Some(w) = v
            .and_then(|v| str_at(v, &["wellKnownCACertificates"]))
            .filter(|w| *w != "System")
        {
            out.notes.push(format!("{at}: Istio knows no wellKnownCACertificates {w} (only System): it marks the XBackend not accepted"));
        }
        let refs = v
            .and_then(|v| v.get("caCertificateRefs"))
            .and_then(Value::as_array);
        let refs = refs.map(Vec::as_slice).unwrap_or_default();
        if refs.len() > 1 {
            out.notes.push(format!(
                "{at}: Istio uses only the first of spec.tls.validation.caCertificateRefs"
            ));
        }
        if refs
            .first()
            .is_some_and(|r| str_at(r, &["kind"]) != Some("ConfigMap"))
        {
            out.notes.push(format!("{at}: Istio takes CA certificates only from a ConfigMap (caCertificateRefs[0] is not one)"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use mcp_access_k8s::{compile, Options};

    use super::*;

    const INFRA: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: demo}
spec:
  gatewayClassName: mcp-access
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: demo}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: tools, namespace: tools}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: tools, namespace: tools}
spec: {type: ExternalHostname, externalHostname: {hostname: tools.example.com}, port: {port: 443}}
";

    const GRANT: &str = "---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: tools}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: demo}]
  to: [{group: gateway.networking.x-k8s.io, kind: XBackend}]
";

    fn rendered(text: &str) -> BackendObjects {
        let mut m = Manifests::default();
        m.add_text("t.yaml", text, "default");
        assert!(m.problems().is_empty(), "{:?}", m.problems());
        let c = compile(&m, &Options::default());
        envoy_gateway(&m, &c.topology, "mcp-access").unwrap()
    }

    fn kinds(b: &BackendObjects) -> Vec<&str> {
        b.objects
            .iter()
            .filter_map(|o| str_at(o, &["kind"]))
            .collect()
    }

    #[test]
    fn a_reference_grant_only_where_the_user_gave_one() {
        let granted = rendered(&format!("{INFRA}{GRANT}"));
        assert_eq!(kinds(&granted), ["HTTPRoute", "Backend", "ReferenceGrant"]);
        // Without the user's grant the route is turned (Envoy Gateway refuses the reference as
        // the compiler did) but no grant is made up for it.
        let refused = rendered(INFRA);
        assert_eq!(kinds(&refused), ["HTTPRoute", "Backend"]);
        assert!(
            refused
                .notes
                .iter()
                .any(|n| n.contains("no ReferenceGrant is rendered for the Backend")),
            "{:?}",
            refused.notes
        );
    }
}
