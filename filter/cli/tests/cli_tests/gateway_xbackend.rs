//! The demo written with Gateway API's XBackend (`gateway.networking.x-k8s.io/v1alpha1`)
//! instead of kube-agentic-networking's: `compile` gives the same bundle, the `--backend`
//! options take it, and both kinds side by side compile.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::{dir, run, s, text};

const GX_GROUP: &str = "gateway.networking.x-k8s.io";

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

// ---------------------------------------------------------------------------------------
// `manifests`: Envoy Gateway's Backend, Istio's own XBackend support

/// The demo's Gateway API XBackend with `tls` (YAML lines at `spec.tls`'s indent) and port 8443.
fn with_tls(tls: &str) -> String {
    let mut x = GATEWAY_API_XBACKEND.replace("port: 8080", "port: 8443");
    if !tls.is_empty() {
        x.push_str("  tls:\n");
        x.push_str(tls);
    }
    x
}

const CA_TLS: &str = "    mode: ServerOnly
    validation:
      hostname: tools.demo.example
      caCertificateRefs: [{group: '', kind: ConfigMap, name: tools-ca}]
";

fn manifests(d: &Path, platform: &str) -> (bool, Vec<Value>, String) {
    let out = run(&[
        &["manifests", "-f", s(d)],
        ARGS,
        &[
            "--platform",
            platform,
            "--image",
            "registry.example.com/mcp-access/filter:0.1.0",
            "--digest",
            &format!("sha256:{}", "a".repeat(64)),
            "-o",
            "json",
        ],
    ]
    .concat());
    let items = if out.status.success() {
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        list["items"].as_array().unwrap().clone()
    } else {
        Vec::new()
    };
    (out.status.success(), items, text(&out.stderr))
}

fn kind<'a>(items: &'a [Value], k: &str) -> Vec<&'a Value> {
    items.iter().filter(|o| o["kind"] == k).collect()
}

/// The bundle in the EnvoyExtensionPolicy.
fn eg_bundle(items: &[Value]) -> &Value {
    &kind(items, "EnvoyExtensionPolicy")[0]["spec"]["wasm"][0]["config"]
}

#[test]
fn envoy_gateway_renders_a_backend_and_turns_the_routes_to_it() {
    let d = demo("eg-backend", &with_tls(CA_TLS), GX_GROUP);
    let (ok, items, err) = manifests(&d, "envoy-gateway");
    assert!(ok, "{err}");
    assert!(!err.contains("refers to an XBackend"), "{err}");
    assert!(err.contains("extensionApis.enableBackend: true"), "{err}");
    let backends = kind(&items, "Backend");
    assert_eq!(backends.len(), 1, "{items:#?}");
    let b = backends[0];
    assert_eq!(b["apiVersion"], "gateway.envoyproxy.io/v1alpha1");
    assert_eq!(
        (&b["metadata"]["name"], &b["metadata"]["namespace"]),
        (&json!("tools"), &json!("demo"))
    );
    assert_eq!(
        b["spec"],
        json!({
            "endpoints": [{"fqdn": {"hostname": "tools.demo.example", "port": 8443}}],
            "tls": {
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "tools-ca"}],
                "sni": "tools.demo.example",
            },
        })
    );
    // The demo's HTTPRoute again, same name and rules, its reference turned to the Backend.
    let routes = kind(&items, "HTTPRoute");
    assert_eq!(routes.len(), 1, "{items:#?}");
    let r = routes[0];
    assert_eq!(r["metadata"]["name"], "tools");
    assert_eq!(
        r["spec"]["rules"][0]["backendRefs"],
        json!([{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "tools"}])
    );
    assert_eq!(r["spec"]["parentRefs"].as_array().unwrap().len(), 2);
    // The bundle knows the backend by the rule's cluster, as for a Service.
    let be = &eg_bundle(&items)["backends"][0];
    assert_eq!(be["clusterNames"], json!(["httproute/demo/tools/rule/0"]));
    assert!(kind(&items, "ReferenceGrant").is_empty());

    // The agentic kind is still not routed by Envoy Gateway: the warning stays, nothing added.
    let agentic = demo(
        "eg-agentic",
        AGENTIC_HOSTNAME,
        "agentic.networking.x-k8s.io",
    );
    let (ok, items, err) = manifests(&agentic, "envoy-gateway");
    assert!(ok, "{err}");
    assert!(
        err.contains("HTTPRoute demo/tools refers to an XBackend"),
        "{err}"
    );
    assert!(kind(&items, "Backend").is_empty() && kind(&items, "HTTPRoute").is_empty());
    assert!(!err.contains("enableBackend"), "{err}");
}

#[test]
fn envoy_gateway_backend_tls_follows_spec_tls() {
    let cases = [
        ("", None),
        ("    mode: None\n", None),
        (
            "    mode: ServerOnly\n    validation: {hostname: tools.demo.example, wellKnownCACertificates: System}\n",
            Some(json!({"wellKnownCACertificates": "System", "sni": "tools.demo.example"})),
        ),
        (
            "    mode: ClientAndServer\n    clientCertificateRef: {name: gw-client}\n    validation: {hostname: tools.demo.example, wellKnownCACertificates: System}\n",
            Some(json!({"wellKnownCACertificates": "System", "sni": "tools.demo.example", "clientCertificateRef": {"name": "gw-client"}})),
        ),
    ];
    for (i, (tls, want)) in cases.into_iter().enumerate() {
        let d = demo(&format!("eg-tls-{i}"), &with_tls(tls), GX_GROUP);
        let (ok, items, err) = manifests(&d, "envoy-gateway");
        assert!(ok, "{tls}: {err}");
        let b = kind(&items, "Backend")[0];
        assert_eq!(b["spec"].get("tls"), want.as_ref(), "{tls}");
    }
}

#[test]
fn envoy_gateway_refuses_what_its_backend_cannot_express() {
    let cases = [
        (
            "    mode: ServerOnly\n    validation:\n      hostname: tools.demo.example\n      wellKnownCACertificates: System\n      subjectAltNames: [{type: Hostname, hostname: other.example}]\n",
            "subjectAltNames",
        ),
        (
            "    mode: ServerOnly\n",
            "without spec.tls.validation",
        ),
        (
            "    mode: ServerOnly\n    validation: {hostname: tools.demo.example, wellKnownCACertificates: example.com/cas}\n",
            "knows only System",
        ),
        (
            "    mode: ClientAndServer\n    clientCertificateRef: {name: gw-client, namespace: other}\n    validation: {hostname: tools.demo.example, wellKnownCACertificates: System}\n",
            "only from the Backend's namespace",
        ),
    ];
    for (i, (tls, why)) in cases.into_iter().enumerate() {
        let d = demo(&format!("eg-refused-{i}"), &with_tls(tls), GX_GROUP);
        // The compiler takes it: what is refused is Envoy Gateway's rendering.
        compile(&d);
        let (ok, _, err) = manifests(&d, "envoy-gateway");
        assert!(!ok, "{tls}");
        assert!(
            err.contains("XBackend demo/tools") && err.contains(why),
            "{tls}: {err}"
        );
    }
}

#[test]
fn envoy_gateway_grants_routes_of_another_namespace_the_backend() {
    // The XBackend lives in `tools`; the demo's route (namespace demo) refers to it there, as
    // the ReferenceGrant allows for the XBackend.
    let x = with_tls(CA_TLS).replace("namespace: demo", "namespace: tools");
    let d = demo("eg-cross-ns", &x, GX_GROUP);
    let gw = d.join("gateway.yaml");
    let t = std::fs::read_to_string(&gw).unwrap().replace(
        "kind: XBackend\n      name: tools\n",
        "kind: XBackend\n      name: tools\n      namespace: tools\n",
    );
    let grant = "---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: routes, namespace: tools}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: demo}]\n  to: [{group: gateway.networking.x-k8s.io, kind: XBackend}]\n";
    std::fs::write(&gw, format!("{t}{grant}")).unwrap();
    // Policies on the XBackend move with it (a policy targets only its own namespace).
    let pol = d.join("policies.yaml");
    let docs: Vec<String> = std::fs::read_to_string(&pol)
        .unwrap()
        .split("\n---\n")
        .map(|doc| {
            if doc.contains("kind: XBackend") {
                doc.replace("namespace: demo", "namespace: tools")
            } else {
                doc.to_string()
            }
        })
        .collect();
    std::fs::write(&pol, docs.join("\n---\n")).unwrap();
    let (ok, items, err) = manifests(&d, "envoy-gateway");
    assert!(ok, "{err}");
    let r = kind(&items, "HTTPRoute")[0];
    assert_eq!(
        r["spec"]["rules"][0]["backendRefs"][0],
        json!({"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "tools", "namespace": "tools"})
    );
    assert_eq!(kind(&items, "Backend")[0]["metadata"]["namespace"], "tools");
    let grants = kind(&items, "ReferenceGrant");
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0]["metadata"]["namespace"], "tools");
    assert_eq!(
        grants[0]["spec"],
        json!({
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "demo"}],
            "to": [{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "tools"}],
        })
    );
}

#[test]
fn istio_keeps_the_xbackend_and_says_what_it_does_not_do() {
    let d = demo("istio", &with_tls(CA_TLS), GX_GROUP);
    let (ok, items, err) = manifests(&d, "istio");
    assert!(ok, "{err}");
    // Nothing of the user's is rendered again: Istio routes to the XBackend itself.
    assert!(kind(&items, "Backend").is_empty() && kind(&items, "HTTPRoute").is_empty());
    assert!(err.contains("PILOT_ENABLE_ALPHA_GATEWAY_API=true"), "{err}");
    assert!(
        err.contains("tools.demo.example through its service registry"),
        "{err}"
    );
    assert!(!err.contains("ClientAndServer"), "{err}");
    // Istio's cluster for the hostname.
    let plugin = kind(&items, "WasmPlugin")[0];
    assert_eq!(
        plugin["spec"]["pluginConfig"]["backends"][0]["clusterNames"],
        json!(["outbound|8443||tools.demo.example"])
    );
    let mtls = "    mode: ClientAndServer\n    clientCertificateRef: {name: gw-client}\n    validation:\n      hostname: tools.demo.example\n      caCertificateRefs: [{group: '', kind: Secret, name: a}, {group: '', kind: ConfigMap, name: b}]\n";
    let d = demo("istio-mtls", &with_tls(mtls), GX_GROUP);
    let (ok, _, err) = manifests(&d, "istio");
    assert!(ok, "{err}");
    for want in [
        "does not accept spec.tls.mode ClientAndServer",
        "only the first of spec.tls.validation.caCertificateRefs",
        "only from a ConfigMap",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
}
