//! What the compiler tests share: manifest builders, loading, finding a policy's status.

use mcp_access_bundle::{Backend, Policy};
use mcp_access_k8s::{Compiled, Manifests, ObjectStatus};

/// A Gateway `name` in namespace `ns` of class mcp-access with HTTP `listeners` (name, port).
pub(crate) fn gateway(ns: &str, name: &str, listeners: &[(&str, u16)]) -> String {
    let listeners: String = listeners
        .iter()
        .map(|(l, port)| format!("  - {{name: {l}, protocol: HTTP, port: {port}}}\n"))
        .collect();
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  gatewayClassName: mcp-access\n  listeners:\n{listeners}")
}

/// An HTTPRoute `name` in `ns` with one parentRef (`parent`: the flow mapping's entries) and
/// `rules` (its lines, see [`to_xbackend`]).
pub(crate) fn route(ns: &str, name: &str, parent: &str, rules: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: [{{{parent}}}]\n  rules:\n{rules}")
}

/// A route rule forwarding to XBackend `backend`: requests with `prefix`, or all of them.
pub(crate) fn to_xbackend(prefix: Option<&str>, backend: &str) -> String {
    let refs = format!(
        "backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: {backend}}}]\n"
    );
    match prefix {
        Some(p) => format!("  - matches: [{{path: {{type: PathPrefix, value: {p}}}}}]\n    {refs}"),
        None => format!("  - {refs}"),
    }
}

/// An XBackend `name` in mcp on Service `service` port 8000, at `path` when given.
pub(crate) fn xbackend(name: &str, service: &str, path: Option<&str>) -> String {
    let path = path.map(|p| format!(", path: {p}")).unwrap_or_default();
    format!("apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {{name: {name}, namespace: mcp}}\nspec:\n  mcp: {{serviceName: {service}, port: 8000{path}}}\n")
}

/// YAML documents as one stream.
pub(crate) fn stream(docs: &[String]) -> String {
    docs.join("---\n")
}

/// `infra` and `extra` after it, read as one file `test.yaml` (namespace `default`).
pub(crate) fn load(infra: &str, extra: &str) -> Manifests {
    let mut m = Manifests::default();
    m.add_text("test.yaml", &format!("{infra}---\n{extra}"), "default");
    m
}

/// The item of `items` called `name`.
fn named<'a, T: std::fmt::Debug>(
    items: &'a [T],
    name: &str,
    name_of: impl Fn(&T) -> &str,
) -> &'a T {
    items
        .iter()
        .find(|i| name_of(i) == name)
        .unwrap_or_else(|| panic!("no {name} in {items:#?}"))
}

/// The status of policy `name`.
pub(crate) fn status<'a>(c: &'a Compiled, name: &str) -> &'a ObjectStatus {
    named(&c.report.policies, name, |p| &p.name)
}

/// Bundle policy `name`.
pub(crate) fn policy<'a>(c: &'a Compiled, name: &str) -> &'a Policy {
    named(&c.bundle.policies, name, |p| &p.name)
}

/// Bundle backend `name`.
pub(crate) fn backend<'a>(c: &'a Compiled, name: &str) -> &'a Backend {
    named(&c.bundle.backends, name, |b| &b.name)
}
