//! The demo written with Gateway API's XBackend (`gateway.networking.x-k8s.io/v1alpha1`)
//! instead of kube-agentic-networking's: `compile` gives the same bundle, the `--backend`
//! options take it, and both kinds side by side compile.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{dir, run, s, text};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const AGENTIC_XBACKEND: &str = "apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata:
  name: tools
  namespace: demo
spec:
  mcp:
    serviceName: tools
    port: 8080
    path: /mcp
";

/// The agentic XBackend as a hostname one (Gateway API's kind has no Service form in v1.6).
const AGENTIC_HOSTNAME: &str = "apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata:
  name: tools
  namespace: demo
spec:
  mcp:
    hostname: tools.demo.example
    port: 8080
";

const GATEWAY_API_XBACKEND: &str = "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: tools
  namespace: demo
spec:
  type: ExternalHostname
  externalHostname:
    hostname: tools.demo.example
  port:
    port: 8080
  protocol: MCP
";

/// The demo's manifests in a fresh directory, with its XBackend replaced by `xbackend` and
/// every reference to it written with `group`.
fn demo(name: &str, xbackend: &str, group: &str) -> PathBuf {
    let d = dir("gateway-xbackend", name);
    for f in ["gateway.yaml", "policies.yaml"] {
        let t = std::fs::read_to_string(repo().join("envoy-demo/manifests").join(f)).unwrap();
        assert!(
            f != "gateway.yaml" || t.contains(AGENTIC_XBACKEND),
            "the demo's XBackend changed"
        );
        let t = t.replace(AGENTIC_XBACKEND, xbackend).replace(
            "group: agentic.networking.x-k8s.io\n",
            &format!("group: {group}\n"),
        );
        std::fs::write(d.join(f), t).unwrap();
    }
    d
}

const ARGS: &[&str] = &[
    "--trust-domain",
    "example.org",
    "--jwt-provider",
    "demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=https://auth.demo.mcp-access.local/jwks.json",
];

fn compile(d: &Path) -> Value {
    let out = run(&[&["compile", "-f", s(d)], ARGS, &["-o", "-"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_demo_with_a_gateway_api_xbackend_compiles_to_the_same_bundle() {
    let gateway_api = demo(
        "gateway-api",
        GATEWAY_API_XBACKEND,
        "gateway.networking.x-k8s.io",
    );
    let agentic = demo("agentic", AGENTIC_HOSTNAME, "agentic.networking.x-k8s.io");
    let (g, a) = (compile(&gateway_api), compile(&agentic));
    assert!(!g["policies"].as_array().unwrap().is_empty());
    assert_eq!(g["policies"], a["policies"]);
    assert_eq!(g["backends"], a["backends"]);
    assert_eq!(g, a);
    // Every policy of the demo is accepted on it.
    let out = run(&[
        &["compile", "-f", s(&gateway_api)],
        ARGS,
        &["-o", "/dev/null", "--report-format", "json"],
    ]
    .concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in report["policies"].as_array().unwrap() {
        for c in p["conditions"].as_array().unwrap() {
            assert_eq!(c["accepted"], true, "{p:#}");
        }
    }
    // `who-can --backend` names it as before.
    let out = run(&[
        &["who-can", "-f", s(&gateway_api)],
        ARGS,
        &["--backend", "demo/tools", "--tool", "echo", "-o", "json"],
    ]
    .concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn both_kinds_side_by_side() {
    // The demo's agentic XBackend stays; a Gateway API one beside it, with its own route and
    // policy.
    let d = dir("gateway-xbackend", "mixed");
    for f in ["gateway.yaml", "policies.yaml"] {
        std::fs::copy(repo().join("envoy-demo/manifests").join(f), d.join(f)).unwrap();
    }
    let extra = format!(
        "{}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: search, namespace: demo}}
spec:
  parentRefs: [{{name: agents-gateway, sectionName: mcp-mtls}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /search}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /mcp}}}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: search, port: 443}}]
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: search-readers, namespace: demo}}
spec:
  targetRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: search}}]
  action: Allow
  rules:
  - name: search
    authorization:
      type: Inline
      mcp:
        methods: [{{name: tools/call, params: [search]}}]
",
        GATEWAY_API_XBACKEND
            .replace("name: tools", "name: search")
            .replace("tools.demo.example", "search.example.com")
            .replace("port: 8080", "port: 443")
    );
    std::fs::write(d.join("search.yaml"), extra).unwrap();
    let b = compile(&d);
    let names: Vec<&str> = b["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search", "tools"]);
    let search = b["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "search-readers")
        .unwrap_or_else(|| panic!("{b:#}"));
    assert_eq!(search["targets"][0]["name"], "search");
    // The demo's own policies still target the agentic one.
    assert!(b["policies"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["targets"][0]["name"] == "tools"));
}

/// A Gateway on plain HTTP, a route to XBackend mcp/tools of Gateway API's kind with `tls`.
fn external(tls: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: mcp}}
spec:
  gatewayClassName: mcp-access
  listeners: [{{name: http, protocol: HTTP, port: 8080}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: tools}}]}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: tools, namespace: mcp}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: tools.example.com}}
  port: {{port: 443}}
{tls}"
    )
}

#[test]
fn envoy_connects_as_spec_tls_says_and_warns_of_plaintext() {
    let d = dir("gateway-xbackend", "tls");
    std::fs::write(
        d.join("ca.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(
        d.join("key.pem"),
        "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let file = d.join("all.yaml");
    let envoy = |extra: &[&str]| {
        let args = [
            &[
                "envoy",
                "-f",
                s(&file),
                "--wasm-path",
                "/f.wasm",
                "-o",
                "json",
            ][..],
            extra,
        ]
        .concat();
        run(&args)
    };
    let cluster = |out: &std::process::Output| -> Value {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["static_resources"]["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "xbackend/mcp/tools")
            .unwrap()
            .clone()
    };
    // Mutual TLS: SNI from validation.hostname, its SANs, its CA ref's file, the client Secret.
    std::fs::write(
        &file,
        external(
            "  tls:
    mode: ClientAndServer
    clientCertificateRef: {name: client}
    validation:
      hostname: mcp.internal
      caCertificateRefs: [{group: '', kind: ConfigMap, name: tools-ca}]
      subjectAltNames: [{type: URI, uri: 'spiffe://example.org/tools'}]
",
        ),
    )
    .unwrap();
    let out = envoy(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("XBackend mcp/tools: spec.tls.validation.caCertificateRefs names mcp/tools-ca: pass its CA as --client-ca mcp/tools-ca=CA.pem"), "{}", text(&out.stderr));
    let ca = d.join("ca.pem");
    let key = d.join("key.pem");
    let cert_key = format!("mcp/client={},{}", s(&ca), s(&key));
    let ca_arg = format!("mcp/tools-ca={}", s(&ca));
    let out = envoy(&["--client-ca", &ca_arg]);
    assert!(
        text(&out.stderr)
            .contains("pass its certificate as --tls-cert mcp/client=CERT.pem,KEY.pem"),
        "{}",
        text(&out.stderr)
    );
    let out = envoy(&["--client-ca", &ca_arg, "--tls-cert", &cert_key]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let tls = &cluster(&out)["transport_socket"]["typed_config"];
    assert_eq!(tls["sni"], "mcp.internal");
    let common = &tls["common_tls_context"];
    assert_eq!(
        common["validation_context"]["trusted_ca"]["filename"],
        s(&ca)
    );
    assert_eq!(
        common["validation_context"]["match_typed_subject_alt_names"],
        serde_json::json!([{"san_type": "URI", "matcher": {"exact": "spiffe://example.org/tools"}}])
    );
    assert_eq!(
        common["tls_certificates"][0]["private_key"]["filename"],
        s(&key)
    );
    // Server only, system CAs: the hostname is the name checked.
    std::fs::write(&file, external("  tls: {mode: ServerOnly, validation: {hostname: tools.example.com, wellKnownCACertificates: System}}\n")).unwrap();
    let out = envoy(&["--upstream-ca", "/etc/ssl/certs/ca-certificates.crt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let tls = &cluster(&out)["transport_socket"]["typed_config"];
    assert_eq!(
        tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"],
        "/etc/ssl/certs/ca-certificates.crt"
    );
    assert_eq!(
        tls["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"][0]
            ["matcher"]["exact"],
        "tools.example.com"
    );
    assert!(
        !text(&out.stderr).contains("plaintext"),
        "{}",
        text(&out.stderr)
    );
    // No TLS: plaintext, a loud warning; --strict refuses it.
    std::fs::write(&file, external("")).unwrap();
    let out = envoy(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cluster(&out).get("transport_socket").is_none());
    let warning =
        "XBackend mcp/tools: ExternalHostname tools.example.com:443 is reached without TLS";
    assert!(
        text(&out.stderr).contains(&format!("warning: {warning}")),
        "{}",
        text(&out.stderr)
    );
    let out = envoy(&["--strict"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("error: {warning}")),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}
