//! What a user expects of the `mcp-access` binary: `validate` fails on references that lead
//! nowhere, `envoy --wasm` checks the file, a Gateway that no agent could connect through is
//! warned about, and `manifests` renders Envoy Gateway and Istio objects.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::common::{self, DIGEST, IMAGE};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-access"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "mcp-access-behaviour-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The demo's manifests (envoy-demo/manifests), the user's path through the demo.
/// The demo's JWT provider: its JWT policy is accepted only with it.
const DEMO_JWT: &str = "demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=/jwks.json";

fn demo() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../envoy-demo/manifests")
        .to_str()
        .unwrap()
        .to_string()
}

/// Gateway `gw` (listener `http` :8080) and XBackend `tools` in namespace `ns`.
fn gateway() -> String {
    common::stream(&[
        common::gateway("ns", "gw", &[("http", 8080)]),
        common::xbackend("ns", "tools", "tools", 8000, Some("/mcp")),
    ])
}

fn route(group: &str, name: &str) -> String {
    format!(
        r#"
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: ns}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs: [{{group: {group}, kind: XBackend, name: {name}}}]
"#
    )
}

fn write(dir: &str, name: &str, body: &str) -> String {
    let p = tmp(dir).join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

fn validate(file: &str, extra: &[&str]) -> Output {
    let mut args = vec!["validate", "-f", file, "--format", "text"];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn validate_passes_complete_manifests() {
    let f = write(
        "ok",
        "m.yaml",
        &(gateway() + &route("agentic.networking.x-k8s.io", "tools")),
    );
    let out = validate(&f, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = validate(&demo(), &["--jwt-provider", DEMO_JWT]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn validate_fails_on_a_misspelled_backend_ref() {
    let f = write(
        "misspelled",
        "m.yaml",
        &(gateway() + &route("agentic.networking.x-k8s.io", "toolz")),
    );
    let out = validate(&f, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("dangling reference: HTTPRoute ns/r")
            && err.contains("XBackend ns/toolz not found"),
        "{err}"
    );
    // The XBackend the misspelled reference meant is now reached by no route.
    assert!(
        err.contains("XBackend ns/tools: no HTTPRoute attached to a Gateway forwards to it"),
        "{err}"
    );
    assert!(err.contains("--allow-dangling"), "{err}");
    // Told otherwise, the same problems are warnings.
    let out = validate(&f, &["--allow-dangling"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("warning  HTTPRoute ns/r"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn validate_fails_on_an_unknown_backend_group() {
    let f = write(
        "group",
        "m.yaml",
        &(gateway() + &route("agentic.networking.k8s.io", "tools")),
    );
    let out = validate(&f, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("InvalidKind") && err.contains("agentic.networking.k8s.io/XBackend"),
        "{err}"
    );
    // A parentRef to a Gateway that does not exist.
    let f = write(
        "parent",
        "m.yaml",
        &(gateway()
            + &route("agentic.networking.x-k8s.io", "tools").replace("name: gw}", "name: gw2}")),
    );
    let out = validate(&f, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("HTTPRoute ns/r -> Gateway ns/gw2: NoMatchingParent"),
        "{err}"
    );
}

#[test]
fn validate_fails_on_an_unreached_backend_and_an_unknown_target() {
    let policy = r#"
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: p, namespace: ns}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: nope}]
  action: Allow
"#;
    let f = write("unreached", "m.yaml", &(gateway() + policy));
    let out = validate(&f, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("XBackend ns/tools: no HTTPRoute attached to a Gateway forwards to it"),
        "{err}"
    );
    assert!(
        err.contains("XAccessPolicy ns/p -> XBackend ns/nope: TargetNotFound"),
        "{err}"
    );
}

#[test]
fn a_gateway_allow_policy_without_base_protocol_is_warned_about() {
    let policy = |option: &str| {
        format!(
            r#"
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: tools-only, namespace: ns}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  action: Allow
  rules:
  - name: tools
    authorization:
      type: Inline
      mcp:
        {option}
        methods: [{{name: tools/call}}]
"#
        )
    };
    let base = gateway() + &route("agentic.networking.x-k8s.io", "tools");
    let closed = write("closed", "m.yaml", &(base.clone() + &policy("")));
    let out = validate(&closed, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.contains("warning  Gateway ns/gw listener http: its Allow policies (ns/tools-only) admit no base protocol traffic"),
        "{report}"
    );
    assert!(report.contains("no agent can connect"), "{report}");
    // The warning is in every report format and from every command that compiles.
    // (compile writes the bundle to standard output and the report to standard error.)
    let out = run(&["compile", "-f", &closed, "--format", "json"]);
    assert!(
        text(&out.stderr).contains("admit no base protocol traffic"),
        "{}",
        text(&out.stderr)
    );
    let open = write(
        "open",
        "m.yaml",
        &(base + &policy("mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS")),
    );
    let out = validate(&open, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("base protocol"),
        "{}",
        text(&out.stdout)
    );
    // The demo's gateway policies let every agent connect (its JWT policy needs its provider).
    let provider = "demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=/jwks.json";
    let out = validate(&demo(), &["--jwt-provider", provider]);
    assert!(
        !text(&out.stdout).contains("base protocol"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn envoy_checks_the_wasm_file_and_writes_its_absolute_path() {
    let d = tmp("wasm");
    let missing = d.join("missing.wasm");
    let out = run(&[
        "envoy",
        "-f",
        &demo(),
        "--jwt-provider",
        DEMO_JWT,
        "--files-where-envoy-runs",
        "--tls-cert",
        "gateway-cert=/c.pem,/k.pem",
        "--client-ca",
        "agents-ca=/ca.pem",
        "--wasm",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--wasm") && err.contains("missing.wasm: no such file"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    std::fs::write(d.join("filter.wasm"), b"\0asm").unwrap();
    let cfg = d.join("envoy.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-access"))
        .current_dir(&d)
        .args([
            "envoy",
            "-f",
            &demo(),
            "--jwt-provider",
            DEMO_JWT,
            "--wasm",
            "filter.wasm",
            "--files-where-envoy-runs",
            "--tls-cert",
            "gateway-cert=/c.pem,/k.pem",
            "--client-ca",
            "agents-ca=/ca.pem",
            "-o",
            cfg.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&cfg).unwrap();
    let abs = std::fs::canonicalize(d.join("filter.wasm")).unwrap();
    let want = format!("\"filename\": \"{}\"", abs.to_str().unwrap());
    assert!(written.contains(&want), "{written}");

    // --wasm-path: a path where Envoy runs, written as given; it must be absolute.
    let out = run(&[
        "envoy",
        "-f",
        &demo(),
        "--allow-not-accepted",
        "--wasm-path",
        "filter.wasm",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--wasm-path filter.wasm: give an absolute path"),
        "{}",
        text(&out.stderr)
    );
    // One of the two is needed.
    let out = run(&["envoy", "-f", &demo()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

fn manifests(platform: &str, extra: &[&str]) -> Output {
    let f = demo();
    let mut args = vec![
        "manifests",
        "-f",
        &f,
        "--jwt-provider",
        DEMO_JWT,
        "--trust-domain",
        "example.org",
        "--platform",
        platform,
        "--image",
        IMAGE,
        "--digest",
        DIGEST,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn docs(out: &Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .split("\n---\n")
        .skip(1)
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect()
}

#[test]
fn manifests_for_envoy_gateway() {
    let out = manifests("envoy-gateway", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objs = docs(&out);
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "EnvoyExtensionPolicy",
            "EnvoyPatchPolicy",
            "ClientTrafficPolicy"
        ]
    );
    let wasm = &objs[0]["spec"]["wasm"][0];
    assert_eq!(wasm["code"]["image"]["url"], IMAGE);
    assert_eq!(wasm["code"]["image"]["sha256"], &DIGEST[7..]);
    assert_eq!(wasm["failOpen"], false);
    let config = &wasm["config"];
    // Envoy Gateway's Envoy listens on 443 + 10000; the backend is matched by the cluster
    // Envoy Gateway names after the HTTPRoute rule.
    assert_eq!(config["gateways"][0]["listeners"][0]["port"], 10443);
    assert_eq!(
        config["backends"][0]["clusterNames"],
        serde_json::json!(["httproute/demo/tools/rule/0"])
    );
    assert_eq!(config["envoy"]["holdHeaders"], true);
    mcp_access_bundle::parse_bundle(serde_json::to_string(config).unwrap().as_bytes()).unwrap();
    let patches = objs[1]["spec"]["jsonPatches"].as_array().unwrap();
    assert_eq!(patches[0]["name"], "authz/demo/risk-check:8080");
    assert_eq!(
        patches[0]["operation"]["value"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
            ["endpoint"]["address"]["socket_address"],
        serde_json::json!({"address": "risk-check.demo.svc.cluster.local", "port_value": 8080})
    );
    assert_eq!(patches[1]["name"], "demo/agents-gateway/mcp-mtls");
    assert_eq!(objs[2]["spec"]["connection"]["bufferLimit"], "2Mi");
    // The v2 naming scheme names listeners by port.
    let out = manifests("envoy-gateway", &["--eg-listener-names", "v2"]);
    assert_eq!(docs(&out)[1]["spec"]["jsonPatches"][1]["name"], "tcp-10443");
}

#[test]
fn manifests_for_istio() {
    let out = manifests("istio", &["--cluster-domain", "corp.local"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objs = docs(&out);
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["WasmPlugin", "EnvoyFilter"]);
    let spec = &objs[0]["spec"];
    assert_eq!(spec["url"], format!("oci://{IMAGE}"));
    assert_eq!(spec["failStrategy"], "FAIL_CLOSE");
    let config = &spec["pluginConfig"];
    assert_eq!(config["envoy"]["holdHeaders"], false);
    assert_eq!(config["gateways"][0]["listeners"][0]["port"], 443);
    assert_eq!(
        config["authorizers"][0]["cluster"],
        "outbound|8080||risk-check.demo.svc.corp.local"
    );
    assert_eq!(
        config["backends"][0]["clusterNames"],
        serde_json::json!(["outbound|8080||tools.demo.svc.corp.local"])
    );
    let hcm = &objs[1]["spec"]["configPatches"][0]["patch"]["value"]["typed_config"];
    assert_eq!(hcm["path_with_escaped_slashes_action"], "REJECT_REQUEST");
}

#[test]
fn manifests_refuses_bad_inputs() {
    let f = demo();
    let with = |platform: &str, image: &str, digest: &str| {
        run(&[
            "manifests",
            "-f",
            &f,
            "--platform",
            platform,
            "--image",
            image,
            "--digest",
            digest,
        ])
    };
    let out = with("istio", IMAGE, "sha256:1234");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("64 hex digits"),
        "{}",
        text(&out.stderr)
    );
    let out = with("istio", "registry.example.com/x@sha256:00", DIGEST);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--digest"),
        "{}",
        text(&out.stderr)
    );
    let out = with("kubernetes", IMAGE, DIGEST);
    assert_eq!(out.status.code(), Some(2));
    // No Gateway: nothing to attach the filter to.
    let f = write(
        "nogw",
        "m.yaml",
        "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {name: t, namespace: ns}\nspec:\n  mcp: {serviceName: t, port: 8000}\n",
    );
    let out = run(&[
        "manifests",
        "-f",
        &f,
        "--platform",
        "istio",
        "--image",
        IMAGE,
        "--digest",
        DIGEST,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nothing to attach the filter to"),
        "{}",
        text(&out.stderr)
    );
}

/// The demo manifests plus a Backend-level ExternalAuth policy with a gRPC authorizer.
fn demo_with_grpc_authorizer(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("mcp-access-grpc-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(demo()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, d.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        d.join("90-grpc.yaml"),
        "apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: grpc-check, namespace: demo}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: ExternalAuth
  externalAuth:
    protocol: GRPC
    backendRef: {name: opa, port: 9191}
    grpc: {allowedHeaders: [authorization]}
",
    )
    .unwrap();
    d.to_str().unwrap().to_string()
}

fn http2(cluster: &serde_json::Value) -> bool {
    cluster["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
        .get("http2_protocol_options")
        .is_some()
}

#[test]
fn grpc_authorizers_get_http2_clusters() {
    let f = demo_with_grpc_authorizer("render");
    let d = std::env::temp_dir().join(format!("mcp-access-grpc-{}-out", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for (resolve, tls) in [
        ("opa=127.0.0.1:9191", false),
        ("opa=https://127.0.0.1:9191", true),
    ] {
        let cfg = d.join("envoy.json");
        let out = run(&[
            "envoy",
            "-f",
            &f,
            "--jwt-provider",
            DEMO_JWT,
            "--files-where-envoy-runs",
            "--tls-cert",
            "gateway-cert=/c.pem,/k.pem",
            "--client-ca",
            "agents-ca=/ca.pem",
            "--trust-domain",
            "example.org",
            "--wasm-path",
            "/opt/f.wasm",
            "--resolve",
            resolve,
            "--upstream-ca",
            "/ca.pem",
            "--format",
            "json",
            "-o",
            cfg.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
        let clusters = v["static_resources"]["clusters"].as_array().unwrap();
        let grpc = clusters
            .iter()
            .find(|c| c["name"].as_str().unwrap().starts_with("authz-grpc/"))
            .unwrap();
        assert!(http2(grpc), "{grpc}");
        assert_eq!(grpc["transport_socket"].is_object(), tls, "{grpc}");
        if tls {
            let t = &grpc["transport_socket"]["typed_config"];
            assert_eq!(t["sni"], "opa");
        }
        // HTTP authorizers keep HTTP/1.1.
        let http = clusters
            .iter()
            .find(|c| c["name"].as_str().unwrap().starts_with("authz/"))
            .unwrap();
        assert!(!http2(http), "{http}");
    }

    let out = run(&[
        "manifests",
        "-f",
        &f,
        "--jwt-provider",
        DEMO_JWT,
        "--trust-domain",
        "example.org",
        "--platform",
        "envoy-gateway",
        "--image",
        IMAGE,
        "--digest",
        DIGEST,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objs = docs(&out);
    let patches = objs[1]["spec"]["jsonPatches"].as_array().unwrap();
    let grpc = patches
        .iter()
        .find(|p| p["name"].as_str().unwrap().starts_with("authz-grpc/"))
        .unwrap();
    assert!(http2(&grpc["operation"]["value"]), "{grpc}");
    let config = &objs[0]["spec"]["wasm"][0]["config"];
    assert!(config["authorizers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["protocol"] == "GRPC" && a["allowedHeaders"][0] == "authorization"));
}
