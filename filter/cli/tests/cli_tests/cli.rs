//! The `mcp-access` binary: exit codes, strict mode, output formats, files written or not.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{dir, run, s, text};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcp-access"))
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quickstart.yaml")
}

/// kube-agentic-networking's CRD examples, vendored in `config-schema/crds/upstream`.
fn examples(kind: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config-schema/crds/upstream/kube-agentic-networking/examples")
        .join(kind);
    assert!(
        dir.is_dir(),
        "the vendored CRD examples are missing at {}",
        dir.display()
    );
    dir
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcp-access-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn compile_writes_the_bundle_and_prints_a_yaml_report() {
    let d = tmp("compile");
    let out_path = d.join("bundle.json");
    let out = run(&[
        "compile",
        "-f",
        fixture().to_str().unwrap(),
        "--trust-domain",
        "example.org",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.starts_with("policies:\n"), "{report}");
    assert!(report.contains("reason: Accepted"), "{report}");
    let bundle = std::fs::read(&out_path).unwrap();
    let b = mcp_access_bundle::parse_bundle(&bundle).unwrap();
    assert_eq!(b.policies.len(), 4);
    assert_eq!(b.identity.trust_domain.as_deref(), Some("example.org"));
    // The filter's engine accepts it.
    mcp_access_engine::policy::Engine::from_json(&bundle).unwrap();
}

#[test]
fn json_report_and_bundle_on_stdout() {
    let out = run(&[
        "compile",
        "-f",
        fixture().to_str().unwrap(),
        "--format",
        "json",
        "-o",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0));
    // Bundle on stdout, report on stderr.
    let bundle: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(bundle["apiVersion"], "mcp-access.io/v1");
    let report: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(report["policies"].as_array().unwrap().len(), 4);
    assert_eq!(report["routes"][0]["conditions"][0]["reason"], "Accepted");
}

#[test]
fn invalid_manifests_exit_1_naming_file_document_object_and_field() {
    let d = tmp("invalid");
    let out_path = d.join("bundle.json");
    let dir = examples("invalid");
    let out = run(&[
        "compile",
        "-f",
        dir.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("backend-both.yaml: document 1: XBackend default/invalid-backend-both: spec.mcp: Invalid value: \"object\": exactly one of the fields in [serviceName hostname] must be set"),
        "{err}"
    );
    assert!(
        err.contains("All targetRefs must have the same Kind"),
        "{err}"
    );
    assert!(!out_path.exists(), "nothing is written");
    // validate: same verdict, report lists them.
    let out = run(&["validate", "-f", dir.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["invalid"].as_array().unwrap().len(), 6);
}

#[test]
fn valid_examples_validate_but_strict_mode_reports_what_is_not_accepted() {
    let dir = examples("valid");
    // The examples' policies target XBackends they do not define: references that lead
    // nowhere, which validate refuses unless told to allow them.
    let out = run(&["validate", "-f", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("dangling reference: XAccessPolicy"));
    // --allow-dangling waives routes and XBackends, not policies that enforce nothing.
    let out = run(&["validate", "-f", dir.to_str().unwrap(), "--allow-dangling"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("enforced nowhere"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "validate",
        "-f",
        dir.to_str().unwrap(),
        "--allow-dangling",
        "--allow-not-accepted",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("reason: TargetNotFound"), "{report}");
    assert!(
        !report.contains("GRPC"),
        "gRPC authorizers are accepted: {report}"
    );
    // Dangling references come first (exit 4), then what is not accepted (exit 3).
    let out = run(&["validate", "-f", dir.to_str().unwrap(), "--strict"]);
    assert_eq!(out.status.code(), Some(4));
    let d = tmp("strict");
    let out_path = d.join("bundle.json");
    let out = run(&[
        "compile",
        "-f",
        dir.to_str().unwrap(),
        "--strict",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("not everything was accepted"));
    assert!(!out_path.exists());
    // Text format: one line per condition.
    let out = run(&["validate", "-f", dir.to_str().unwrap(), "--format", "text"]);
    assert!(
        text(&out.stdout)
            .contains("policy   default/cel-policy -> XBackend default/my-backend: TargetNotFound"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn envoy_renders_a_bootstrap_with_the_listen_port_in_the_bundle() {
    let d = tmp("envoy");
    let cfg = d.join("envoy.json");
    let out = run(&[
        "envoy",
        "-f",
        fixture().to_str().unwrap(),
        "--trust-domain",
        "example.org",
        "--wasm-path",
        "/opt/mcp_access_filter.wasm",
        "--files-where-envoy-runs",
        "--tls-cert",
        "gateway-cert=/certs/server.crt,/certs/server.key",
        "--client-ca",
        "agents-ca=/certs/ca.crt",
        "--resolve",
        "tools-server=127.0.0.1:8000",
        "--resolve",
        "authz/risk-check=http://127.0.0.1:9000",
        "--resolve",
        "beta-review=127.0.0.1:9001",
        "--listen",
        "mcp-https=10443",
        "--bind",
        "127.0.0.1",
        "-o",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    let listener = &v["static_resources"]["listeners"][0];
    assert_eq!(listener["address"]["socket_address"]["port_value"], 10443);
    let chain = &listener["filter_chains"][0];
    let tls = &chain["transport_socket"]["typed_config"];
    assert_eq!(tls["require_client_certificate"], true);
    assert_eq!(
        tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"],
        "/certs/ca.crt"
    );
    let hcm = &chain["filters"][0]["typed_config"];
    // Envoy normalizes paths and hosts as the filter does (the bundle's default: reject %2F).
    assert_eq!(hcm["normalize_path"], true);
    assert_eq!(hcm["merge_slashes"], true);
    assert_eq!(hcm["path_with_escaped_slashes_action"], "REJECT_REQUEST");
    assert_eq!(hcm["strip_trailing_host_dot"], true);
    let wasm = &hcm["http_filters"][0]["typed_config"]["config"];
    assert_eq!(wasm["allow_on_headers_stop_iteration"], true);
    let bundle: serde_json::Value =
        serde_json::from_str(wasm["configuration"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(bundle["gateways"][0]["listeners"][0]["port"], 10443);
    let route = &hcm["route_config"]["virtual_hosts"][0]["routes"][0];
    assert_eq!(route["name"], "mcp/tools-route/rule-0/match-0");
    assert_eq!(route["match"]["path_separated_prefix"], "/tools/mcp");
    assert_eq!(route["route"]["prefix_rewrite"], "/mcp");
    let clusters: Vec<&str> = v["static_resources"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        clusters,
        [
            "xbackend/mcp/tools",
            "authz/authz/risk-check:9000",
            "authz/mcp/beta-review:9001"
        ]
    );

    // A missing certificate leaves the listener out, and the policies that target it are
    // not accepted: nothing is written unless told to proceed.
    let f = fixture();
    let no_cert = [
        "envoy",
        "-f",
        f.to_str().unwrap(),
        "--wasm-path",
        "/x.wasm",
        "--files-where-envoy-runs",
        "--client-ca",
        "agents-ca=/ca.pem",
    ];
    let out = run(&no_cert);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("pass --tls-cert gateway-cert="),
        "{}",
        text(&out.stderr)
    );
    // YAML by default; the listener is reported, the rest rendered.
    let proceed = [&no_cert[..], &["--allow-not-accepted"]].concat();
    let out = run(&proceed);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("pass --tls-cert gateway-cert="),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("static_resources:"));
    let out = run(&[
        "envoy",
        "-f",
        fixture().to_str().unwrap(),
        "--wasm-path",
        "/x.wasm",
        "--strict",
    ]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn explain_prints_the_decision_and_trace() {
    let f = fixture();
    let out = run(&[
        "explain",
        "-f",
        f.to_str().unwrap(),
        "--trust-domain",
        "example.org",
        "--path",
        "/tools/mcp",
        "--service-account",
        "agents/beta",
        "--tool",
        "echo",
        "--assume",
        "backend-beta-review=deny:401",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains(
            "decision  DENY 401 at backend (external_auth_denied): policy mcp/backend-beta-review"
        ),
        "{t}"
    );
    assert!(
        t.contains("gateway  allow         mcp/gateway-agents       beta-two-tools  admitted"),
        "{t}"
    );
    let out = run(&[
        "explain",
        "-f",
        f.to_str().unwrap(),
        "--trust-domain",
        "example.org",
        "--path",
        "/tools/mcp",
        "--spiffe",
        "spiffe://example.org/ns/agents/sa/alpha",
        "--tool",
        "echo",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "allow");
    assert_eq!(v["rule"], "alpha-tools");
    // Errors: exit 1 with a message.
    let out = run(&["explain", "--tool", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("give a --bundle or manifests"));
    let out = run(&[
        "explain",
        "-f",
        f.to_str().unwrap(),
        "--tool",
        "x",
        "--assume",
        "a=maybe",
    ]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn schema_is_the_checked_in_bundle_schema() {
    let out = run(&["schema"]);
    assert_eq!(out.status.code(), Some(0));
    let checked_in = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config-schema/bundle.schema.json"),
    )
    .unwrap();
    assert_eq!(text(&out.stdout), checked_in);
}

#[test]
fn crd_prints_the_checked_in_crds() {
    let out = run(&["crd"]);
    assert_eq!(out.status.code(), Some(0));
    let file = |name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config-schema/crds")
                .join(name),
        )
        .unwrap()
    };
    let all = format!(
        "{}---\n{}---\n{}---\n{}",
        file("mcp-access.io_accesspolicies.yaml"),
        file("mcp-access.io_filtersettings.yaml"),
        file("mcp-access.io_toolpins.yaml"),
        file("mcp-access.io_ratelimitpolicies.yaml")
    );
    assert_eq!(text(&out.stdout), all);
}

#[test]
fn stdin_and_usage_errors() {
    use std::io::Write;
    let mut child = bin()
        .args(["validate", "-f", "-", "--format", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(std::fs::read(fixture()).unwrap().as_slice())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["policies"][0]["source"]
        .as_str()
        .unwrap()
        .starts_with("<stdin>: document 4"));
    let out = run(&["compile"]);
    assert_eq!(out.status.code(), Some(2), "clap usage error");
}

/// The topology the AccessPolicy examples target, and the JWT example.
fn jwt_inputs() -> [String; 2] {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config-schema/crds/examples");
    [dir.join("targets.yaml"), dir.join("valid/jwt.yaml")].map(|p| p.to_str().unwrap().to_string())
}

#[test]
fn jwt_providers_reach_the_bundle_and_an_undeclared_issuer_is_not_accepted() {
    let [infra, jwt] = jwt_inputs();
    let provider = "idp=issuer=https://idp.example.com,jwks=/etc/jwks.json";
    let out = run(&[
        "compile",
        "-f",
        &infra,
        "-f",
        &jwt,
        "--strict",
        "--jwt-provider",
        provider,
        "-o",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bundle: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        bundle["identity"]["jwt"]["providers"],
        serde_json::json!([{"issuer": "https://idp.example.com", "metadataKey": "idp"}])
    );
    // No provider for the issuer: not accepted (--strict: exit 3), the reason names the flag.
    let out = run(&[
        "compile", "-f", &infra, "-f", &jwt, "--strict", "--format", "text",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("no JWT provider verifies this issuer (none is declared)"),
        "{}",
        text(&out.stderr)
    );
    // A malformed provider is a usage error naming the flag.
    let out = run(&["compile", "-f", &infra, "--jwt-provider", "idp=jwks=/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--jwt-provider `idp=jwks=/x`: issuer=ISSUER is required"));
}

#[test]
fn envoy_puts_jwt_authn_before_the_filter_with_its_jwks() {
    let d = tmp("jwt-envoy");
    let [infra, jwt] = jwt_inputs();
    let out_path = d.join("envoy.json");
    let out = run(&[
        "envoy",
        "-f",
        &infra,
        "-f",
        &jwt,
        "--wasm-path",
        "/filter.wasm",
        "--files-where-envoy-runs",
        "--tls-cert",
        "gateway-cert=/tls/cert.pem,/tls/key.pem",
        "--client-ca",
        "agents-ca=/tls/ca.pem",
        "--jwt-provider",
        "idp=issuer=https://idp.example.com,jwks=https://keys.example.com/jwks.json,audience=mcp",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let listener = &cfg["static_resources"]["listeners"][0];
    let hcm = &listener["filter_chains"][0]["filters"][0]["typed_config"];
    let names: Vec<&str> = hcm["http_filters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.jwt_authn",
            "envoy.filters.http.wasm",
            "envoy.filters.http.router"
        ]
    );
    let p = &hcm["http_filters"][0]["typed_config"]["providers"]["idp"];
    assert_eq!(p["issuer"], "https://idp.example.com");
    assert_eq!(p["payload_in_metadata"], "idp");
    assert_eq!(p["audiences"], serde_json::json!(["mcp"]));
    assert_eq!(p["remote_jwks"]["http_uri"]["cluster"], "jwks/idp");
    let cluster = cfg["static_resources"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "jwks/idp")
        .unwrap();
    assert_eq!(
        cluster["transport_socket"]["typed_config"]["sni"],
        "keys.example.com"
    );
    let endpoint = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
    assert_eq!(endpoint["address"]["socket_address"]["port_value"], 443);
}

/// A Gateway in `d` with two HTTP listeners sharing port 80 (one filter chain) and one HTTPS
/// listener of its own (certificate `cert`).
fn two_ports_three_listeners(d: &std::path::Path) -> std::path::PathBuf {
    let gateway = d.join("gateway.yaml");
    std::fs::write(
        &gateway,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: mcp}\n\
         spec:\n  gatewayClassName: mcp-access\n  listeners:\n\
         \x20 - {name: a, protocol: HTTP, port: 80, hostname: a.example}\n\
         \x20 - {name: b, protocol: HTTP, port: 80, hostname: b.example}\n\
         \x20 - {name: s, protocol: HTTPS, port: 443, tls: {mode: Terminate, certificateRefs: [{name: cert}]}}\n",
    )
    .unwrap();
    gateway
}

/// `mcp-access envoy` of `gateway` into `out`, certificate `cert` given, with `extra` arguments.
fn envoy_with_cert(
    gateway: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "envoy",
        "-f",
        gateway.to_str().unwrap(),
        "--wasm-path",
        "/filter.wasm",
        "--files-where-envoy-runs",
        "--tls-cert",
        "cert=/tls/cert.pem,/tls/key.pem",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn the_access_log_names_the_envoy_listener_on_every_chain() {
    let d = tmp("access-log-listener");
    let gateway = two_ports_three_listeners(&d);
    let out_path = d.join("envoy.json");
    let out = envoy_with_cert(
        &gateway,
        &out_path,
        &["--bind", "0.0.0.0", "--access-log", "/dev/stdout"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let mut seen = Vec::new();
    for l in cfg["static_resources"]["listeners"].as_array().unwrap() {
        for chain in l["filter_chains"].as_array().unwrap() {
            let hcm = &chain["filters"][0]["typed_config"];
            let format = &hcm["access_log"][0]["typed_config"]["log_format"]["json_format"];
            assert_eq!(format["listener"], l["name"], "{l:#}");
            seen.push(format["listener"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(seen, ["0.0.0.0:80", "0.0.0.0:443"]);
}

#[test]
fn each_chain_s_bundle_names_its_listener_and_an_ecds_one_none() {
    let d = tmp("served-listener");
    let gateway = two_ports_three_listeners(&d);
    let render = |extra: &[&str]| {
        let out_path = d.join("envoy.json");
        let out = envoy_with_cert(&gateway, &out_path, extra);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
        let mut served = Vec::new();
        for l in cfg["static_resources"]["listeners"].as_array().unwrap() {
            for chain in l["filter_chains"].as_array().unwrap() {
                let filters = &chain["filters"][0]["typed_config"]["http_filters"];
                let wasm =
                    &filters.as_array().unwrap().iter().find(|f| {
                        f["name"] == "envoy.filters.http.wasm" || f["name"] == "mcp_access"
                    });
                let config = &wasm.unwrap()["typed_config"]["config"]["configuration"]["value"];
                served.push(config.as_str().map(|b| {
                    let b: serde_json::Value = serde_json::from_str(b).unwrap();
                    b["envoy"]["listener"].clone()
                }));
            }
        }
        served
    };
    let json = |v: serde_json::Value| Some(v);
    assert_eq!(
        render(&[]),
        [
            json(serde_json::json!({"port": 80, "tls": false})),
            json(serde_json::json!({"port": 443, "tls": true}))
        ]
    );
    // One ECDS resource serves every listener: no bundle inline, none names a listener.
    let ecds = d.join("ecds");
    std::fs::create_dir_all(&ecds).unwrap();
    assert_eq!(render(&["--ecds", ecds.to_str().unwrap()]), [None, None]);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ecds.join("mcp_access.ecds.json")).unwrap())
            .unwrap();
    let bundle = doc["resources"][0]["typed_config"]["config"]["configuration"]["value"]
        .as_str()
        .unwrap();
    let bundle: serde_json::Value = serde_json::from_str(bundle).unwrap();
    assert!(bundle["envoy"].get("listener").is_none(), "{bundle:#}");
}

#[test]
fn jwt_required_takes_allow_missing_off_that_listener_only() {
    let d = tmp("jwt-required");
    let gateway = two_ports_three_listeners(&d);
    let out_path = d.join("envoy.json");
    let render = |extra: &[&str]| envoy_with_cert(&gateway, &out_path, extra);
    let idp = "idp=issuer=https://idp.example.com,jwks=/jwks.json";
    let out = render(&["--jwt-provider", idp, "--jwt-required", "mcp/gw/s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    // jwt_authn's rule on each listener, by its port.
    let rule_of = |port: u64| {
        let l = cfg["static_resources"]["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["address"]["socket_address"]["port_value"] == port)
            .unwrap();
        let jwt = &l["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0];
        assert_eq!(jwt["name"], "envoy.filters.http.jwt_authn");
        (
            jwt["typed_config"]["rules"][0]["requires"].clone(),
            jwt["typed_config"]["bypass_cors_preflight"].clone(),
        )
    };
    assert_eq!(
        rule_of(443),
        (
            serde_json::json!({"provider_name": "idp"}),
            serde_json::json!(true)
        )
    );
    assert_eq!(
        rule_of(80).0,
        serde_json::json!({"requires_any": {"requirements": [{"provider_name": "idp"}, {"allow_missing": {}}]}})
    );
    // Both listeners of port 80: required there too.
    let out = render(&[
        "--jwt-provider",
        idp,
        "--jwt-required",
        "a",
        "--jwt-required",
        "gw/b",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Errors name the flag and what is wrong.
    for (extra, want) in [
        (
            vec!["--jwt-provider", idp, "--jwt-required", "a"],
            "--jwt-required: listener mcp/gw/b shares port 80 with a listener that requires a token",
        ),
        (
            vec!["--jwt-provider", idp, "--jwt-required", "nope"],
            "--jwt-required nope: no such listener (LISTENER, GATEWAY/LISTENER or NAMESPACE/GATEWAY/LISTENER; listeners: mcp/gw/a, mcp/gw/b, mcp/gw/s)",
        ),
        (
            vec!["--jwt-required", "s"],
            "--jwt-required needs a --jwt-provider",
        ),
    ] {
        let out = render(&extra);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        assert!(text(&out.stderr).contains(want), "{extra:?}: {}", text(&out.stderr));
    }
}

/// The worked example of docs/defaults-overrides.md and README.
fn platform_example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/platform-defaults.yaml")
}

#[test]
fn effective_prints_each_level_step_and_origin() {
    let f = platform_example();
    let out = run(&["effective", "-f", f.to_str().unwrap(), "--backend", "wiki"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.starts_with("platform/agents listener mcp -> XBackend platform/wiki\n"),
        "{t}"
    );
    assert!(
        t.contains(
            "platform/risk-check  from overrides (atomic) of AccessPolicy platform/risk-check"
        ),
        "{t}"
    );
    assert!(
        t.contains("from defaults (merge) of AccessPolicy platform/read-only"),
        "{t}"
    );
    assert!(!t.contains("team-x"), "{t}");
    // Each rule under its name, spelled as the policy object (here its defaults block) has it.
    assert!(
        t.contains(concat!(
            "        rule no-write\n",
            "          authorization: {type: Inline, mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, ",
            "methods: [{name: tools/list}, {name: tools/call, params: [search, read_page]}]}}\n"
        )),
        "{t}"
    );
    // JSON: machine-readable, one entry per (listener, backend).
    let out = run(&["effective", "-f", f.to_str().unwrap(), "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pairs: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{} {} {}", e["gateway"], e["listener"], e["backend"]))
        .collect();
    assert_eq!(
        pairs,
        [
            "\"platform/agents\" \"mcp\" \"platform/team-x\"",
            "\"platform/agents\" \"mcp\" \"platform/wiki\""
        ]
    );
    let team_x = &v[0];
    assert_eq!(
        team_x["notes"][0],
        "default no-write of AccessPolicy platform/read-only not added: unset by platform/team-x"
    );
    let allow = &team_x["levels"][1]["steps"][1];
    assert_eq!(allow["step"], "Allow");
    assert_eq!(allow["policies"][0]["from"], "its own rules");
    // Rules as compiled into the bundle, as before.
    assert_eq!(
        allow["policies"][0]["rules"][0],
        serde_json::json!({"name": "team-x-agents", "rule": {
            "authorization": {"mcp": {"baseProtocol": "Match", "methods": [{"name": "tools"}]}},
            "source": {"type": "ServiceAccount", "serviceAccount": {"name": "team-x-agent"}}}})
    );
    // Nothing matches: an error naming why.
    let out = run(&["effective", "-f", f.to_str().unwrap(), "--listener", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no (listener, XBackend) pair matches"));
}

#[test]
fn effective_spells_rules_as_written_quoting_what_yaml_would_misread() {
    let d = dir("effective", "spelled");
    let policy = d.join("policy.yaml");
    std::fs::write(
        &policy,
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: reads, namespace: platform}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: wiki}]
  action: Deny
  rules:
  - name: writes
    when: [{predicate: "request.mcp.tool_name.startsWith('write')"}]
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: ["true", "1"]}]}}
"#,
    )
    .unwrap();
    let f = platform_example();
    let out = run(&[
        "effective",
        "-f",
        s(&f),
        "-f",
        s(&policy),
        "--backend",
        "wiki",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains(concat!(
            "      platform/reads  from its own rules\n",
            "        rule writes\n",
            "          authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [\"true\", \"1\"]}]}}\n",
            "          when: [{predicate: \"request.mcp.tool_name.startsWith('write')\"}]\n",
        )),
        "{t}"
    );
}

#[test]
fn the_report_shows_enforcement() {
    let f = platform_example();
    let out = run(&[
        "validate",
        "-f",
        f.to_str().unwrap(),
        "--format",
        "text",
        "--strict",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("policy   platform/read-only -> Gateway platform/agents: Accepted; Enforced: Policy has been successfully enforced"), "{t}");
    let out = run(&["validate", "-f", f.to_str().unwrap(), "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "team-x")
        .unwrap();
    assert_eq!(p["conditions"][0]["enforced"]["reason"], "Enforced");
}
