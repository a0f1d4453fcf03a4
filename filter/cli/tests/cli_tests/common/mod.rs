//! What the CLI tests share: a small topology, running the binary, fresh directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mcp_access_k8s::{Compiled, Manifests, ObjectStatus};

/// One Gateway (listeners `http` and `mtls`), one HTTPRoute, one XBackend `mcp/tools`.
pub const BASE: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: http, protocol: HTTP, port: 8080}
  - {name: mtls, protocol: HTTP, port: 8443}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: tools, namespace: mcp}
spec:
  mcp: {serviceName: tools-server, port: 8000, path: /mcp}
"#;

/// A Gateway `name` in namespace `ns` of class mcp-access with HTTP `listeners` (name, port).
pub fn gateway(ns: &str, name: &str, listeners: &[(&str, u16)]) -> String {
    let listeners: String = listeners
        .iter()
        .map(|(l, port)| format!("  - {{name: {l}, protocol: HTTP, port: {port}}}\n"))
        .collect();
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  gatewayClassName: mcp-access\n  listeners:\n{listeners}")
}

/// An HTTPRoute `name` in `ns` with one parentRef (`parent`: the flow mapping's entries) and
/// `rules` (its lines, see [`to_xbackend`]).
pub fn route(ns: &str, name: &str, parent: &str, rules: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: [{{{parent}}}]\n  rules:\n{rules}")
}

/// A route rule forwarding to XBackend `backend`: requests with `prefix`, or all of them.
pub fn to_xbackend(prefix: Option<&str>, backend: &str) -> String {
    let refs = format!(
        "backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: {backend}}}]\n"
    );
    match prefix {
        Some(p) => format!("  - matches: [{{path: {{type: PathPrefix, value: {p}}}}}]\n    {refs}"),
        None => format!("  - {refs}"),
    }
}

/// An XBackend `name` in `ns` on Service `service` (`port`), at `path` when given.
pub fn xbackend(ns: &str, name: &str, service: &str, port: u16, path: Option<&str>) -> String {
    let path = path.map(|p| format!(", path: {p}")).unwrap_or_default();
    format!("apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  mcp: {{serviceName: {service}, port: {port}{path}}}\n")
}

/// YAML documents as one stream.
pub fn stream(docs: &[String]) -> String {
    docs.join("---\n")
}

/// `infra` and the `docs` after it, read as one file `test.yaml` (namespace `default`).
pub fn read(infra: &str, docs: &[String]) -> Manifests {
    let mut m = Manifests::default();
    m.add_text(
        "test.yaml",
        &format!("{infra}---\n{}", docs.join("---\n")),
        "default",
    );
    m
}

/// [`read`], refusing any problem in loading them.
pub fn load(infra: &str, docs: &[String]) -> Manifests {
    let m = read(infra, docs);
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    m
}

/// Policy `approvals` of `kind` (AccessPolicy or XAccessPolicy) at XBackend mcp/tools, asking
/// the `protocol` authorizer `approvals`; `rest`: the lines of `externalAuth` after its
/// `backendRef`.
pub fn external_auth(kind: &str, protocol: &str, rest: &str) -> String {
    let api = if kind == "AccessPolicy" {
        "mcp-access.io/v1alpha1"
    } else {
        "agentic.networking.x-k8s.io/v1alpha1"
    };
    format!(
        r#"apiVersion: {api}
kind: {kind}
metadata: {{name: approvals, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: ExternalAuth
  externalAuth:
    protocol: {protocol}
    backendRef: {{name: approvals, port: 9000}}
{rest}"#
    )
}

/// The filter image and its digest as `manifests` is given them.
pub const DIGEST: &str = "sha256:104004ba71a47a3c6d9c736d22d4fd39fb0047237b7c2b3aa49ccbe8a1e0f6e7";
pub const IMAGE: &str = "registry.example.com/mcp-access/filter:0.1.0";

/// A fresh, empty directory for one test case.
pub fn dir(suite: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcp-access-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fresh directory with `base.yaml` ([`BASE`]) and each of `files` (name, text).
pub fn case(suite: &str, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = dir(suite, name);
    std::fs::write(d.join("base.yaml"), BASE).unwrap();
    for (f, text) in files {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

/// Runs the `mcp-access` binary.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-access"))
        .args(args)
        .output()
        .unwrap()
}

/// `mcp-access manifests -f FILES --platform PLATFORM` with the test image, and `extra`.
pub fn manifests_of(files: &str, platform: &str, extra: &[&str]) -> Output {
    let mut args = vec!["manifests", "-f", files, "--platform", platform];
    args.extend(["--image", IMAGE, "--digest", DIGEST]);
    args.extend_from_slice(extra);
    run(&args)
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The status of policy `name` in a compile report.
pub fn status<'a>(c: &'a Compiled, name: &str) -> &'a ObjectStatus {
    c.report
        .policies
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no status for {name}: {:#?}", c.report.policies))
}

/// (reason, message) of the Enforced condition of policy `name` at its first target.
pub fn enforced(c: &Compiled, name: &str) -> (String, String) {
    let st = status(c, name);
    assert!(st.accepted(), "{st:#?}");
    let e = st
        .conditions
        .first()
        .and_then(|c| c.enforced.clone())
        .unwrap_or_else(|| panic!("no Enforced condition: {st:#?}"));
    (e.reason, e.message)
}
