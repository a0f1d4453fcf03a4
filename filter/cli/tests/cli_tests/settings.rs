//! Everything the bundle can say is reachable from manifests (a `FilterSettings` object and
//! per-policy `externalAuth.failureMode` / `timeout`), and the command line follows kubectl's
//! conventions (`-o` format or file, `-f -`, `-R`, `--version`, `completion`), through the binary.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{run, s, text, BASE};
use serde_json::{json, Value};

const SETTINGS: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: default}
spec:
  denyResponse: {httpStatus: 200, jsonRpcCode: -32042, message: Not for you, exposeDetails: true}
  limits: {maxBodyBytes: 2097152, maxJsonDepth: 64, cel: {maxNodes: 50}}
  listings: {filter: false, maxBytes: 1048576}
  identity:
    trustDomain: example.org
    spiffe: {source: TrustedHeader, header: {name: x-forwarded-client-cert, format: Xfcc}}
  externalAuth: {timeout: 750ms}
  envoy: {unknownBackend: GatewayOnly, escapedSlashes: Decode}
"#;

fn external_auth(kind: &str, extra: &str) -> String {
    common::external_auth(kind, "HTTP", &format!("    http: {{}}\n{extra}"))
}

fn case(name: &str, files: &[(&str, &str)]) -> PathBuf {
    common::case("settings", name, files)
}

fn dir(name: &str) -> PathBuf {
    common::dir("settings", name)
}

/// `compile -f DIR` (extra flags after): exit 0 and the bundle from standard output.
fn bundle(d: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["compile", "-f", s(d)];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn filter_settings_reach_the_bundle() {
    let d = case("all", &[("settings.yaml", SETTINGS)]);
    let b = bundle(&d, &[]);
    // A header identity can be sent by anyone who reaches Envoy: said loudly.
    let out = run(&["validate", "-f", s(&d), "-o", "text"]);
    assert!(
        text(&out.stdout).contains("spec.identity.spiffe takes the caller's SPIFFE ID from request header x-forwarded-client-cert"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        b["denyResponse"],
        json!({"httpStatus": 200, "jsonRpcCode": -32042, "message": "Not for you", "exposeDetails": true})
    );
    assert_eq!(b["limits"]["maxBodyBytes"], 2097152);
    assert_eq!(b["limits"]["maxJsonDepth"], 64);
    assert_eq!(b["limits"]["cel"]["maxNodes"], 50);
    assert_eq!(
        b["limits"]["cel"]["maxSteps"], 10000,
        "unset fields keep defaults"
    );
    assert_eq!(b["listings"], json!({"filter": false, "maxBytes": 1048576}));
    assert_eq!(b["identity"]["trustDomain"], "example.org");
    assert_eq!(
        b["identity"]["spiffe"],
        json!({"source": "TrustedHeader", "header": {"name": "x-forwarded-client-cert", "format": "Xfcc"}})
    );
    assert_eq!(
        b["envoy"],
        json!({"holdHeaders": true, "unknownBackend": "GatewayOnly", "escapedSlashes": "Decode"})
    );
    // Without the object: the bundle's defaults.
    let plain = bundle(&case("none", &[]), &[]);
    assert_eq!(plain["denyResponse"]["httpStatus"], 403);
    assert_eq!(plain["identity"]["trustDomain"], "cluster.local");
    assert_eq!(plain["envoy"]["unknownBackend"], "Deny");
    // docs/examples/filter-settings.yaml: the defaults, but for the status.
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/filter-settings.yaml"),
    )
    .unwrap();
    let b = bundle(&case("example", &[("s.yaml", &example)]), &[]);
    let mut expected = plain.clone();
    expected["denyResponse"]["httpStatus"] = json!(200);
    assert_eq!(b, expected);
}

#[test]
fn per_policy_failure_mode_and_timeout() {
    let open = external_auth(
        "AccessPolicy",
        "    failureMode: Allow\n    timeout: 250ms\n",
    );
    let d = case("fail-open", &[("p.yaml", &open)]);
    let b = bundle(&d, &[]);
    assert_eq!(b["authorizers"][0]["failureMode"], "Allow");
    assert_eq!(b["authorizers"][0]["timeoutMs"], 250);
    // Unset: Deny, and the timeout of FilterSettings (else --authz-timeout-ms, else 1s).
    let closed = external_auth("AccessPolicy", "");
    let d = case("defaults", &[("p.yaml", &closed)]);
    assert_eq!(bundle(&d, &[])["authorizers"][0]["failureMode"], "Deny");
    assert_eq!(bundle(&d, &[])["authorizers"][0]["timeoutMs"], 1000);
    assert_eq!(
        bundle(&d, &["--authz-timeout-ms", "400"])["authorizers"][0]["timeoutMs"],
        400
    );
    let d = case(
        "from-settings",
        &[("p.yaml", &closed), ("s.yaml", SETTINGS)],
    );
    assert_eq!(bundle(&d, &[])["authorizers"][0]["timeoutMs"], 750);
}

#[test]
fn the_upstream_kind_has_no_failure_mode() {
    let x = external_auth("XAccessPolicy", "    failureMode: Allow\n");
    let d = case("upstream", &[("p.yaml", &x)]);
    let out = run(&["validate", "-f", s(&d), "-o", "text"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("p.yaml: document 1: XAccessPolicy mcp/approvals: spec.externalAuth.failureMode: unknown field \"failureMode\": only an AccessPolicy (group mcp-access.io) has it"), "{err}");
}

#[test]
fn bad_settings_are_refused_naming_file_and_field() {
    for (name, spec, field, says) in [
        (
            "status",
            "denyResponse: {httpStatus: 302}",
            "spec.denyResponse.httpStatus",
            "must be 200 or a 4xx or 5xx status",
        ),
        (
            "steps",
            "limits: {cel: {maxSteps: 0}}",
            "spec.limits.cel.maxSteps",
            "must be between 1 and 1000000",
        ),
        (
            "header",
            "identity: {spiffe: {source: TrustedHeader}}",
            "spec.identity.spiffe.header",
            "is required when source is TrustedHeader",
        ),
        (
            "timeout",
            "externalAuth: {timeout: 2m}",
            "spec.externalAuth.timeout",
            "must be between 1ms and 60s",
        ),
        (
            "misspelled",
            "denyResponse: {httpstatus: 200}",
            "spec.denyResponse",
            "unknown field `httpstatus`",
        ),
    ] {
        let doc = format!(
            "apiVersion: mcp-access.io/v1alpha1\nkind: FilterSettings\nmetadata: {{name: default}}\nspec:\n  {spec}\n"
        );
        let d = case(name, &[("settings.yaml", &doc)]);
        let out = run(&["validate", "-f", s(&d), "-o", "text"]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = text(&out.stderr);
        assert!(
            err.contains("settings.yaml: document 1: FilterSettings") && err.contains(field),
            "{name}: {err}"
        );
        assert!(err.contains(says), "{name}: {err}");
        let written = d.join("out.json");
        let out = run(&["compile", "-f", s(&d), "-o", s(&written)]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(!written.exists(), "{name}: nothing is written");
    }
}

#[test]
fn two_settings_objects_or_a_disagreeing_flag_are_errors() {
    let second = SETTINGS.replace("name: default", "name: other");
    let d = case("two", &[("a.yaml", SETTINGS), ("b.yaml", &second)]);
    let out = run(&["validate", "-f", s(&d), "-o", "text"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("b.yaml: document 1"), "{err}");
    assert!(
        err.contains("a second FilterSettings (the first is") && err.contains("a.yaml"),
        "{err}"
    );
    let d = case("flag", &[("s.yaml", SETTINGS)]);
    let out = run(&["compile", "-f", s(&d), "--trust-domain", "other.org"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("spec.identity.trustDomain")
            && err.contains("--trust-domain gives \"other.org\""),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // The same value in both places is no conflict.
    let b = bundle(&d, &["--trust-domain", "example.org"]);
    assert_eq!(b["identity"]["trustDomain"], "example.org");
}

#[test]
fn cel_limits_of_the_settings_judge_the_policies() {
    let policy = r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: cel, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: big
    authorization:
      type: CEL
      cel: {expression: "request.mcp.method == 'a' || request.mcp.method == 'b' || request.mcp.method == 'c' || request.mcp.method == 'd' || request.mcp.method == 'e' || request.mcp.method == 'f' || request.mcp.method == 'g'"}
"#;
    let ok = case("cel-ok", &[("p.yaml", policy)]);
    bundle(&ok, &[]);
    let small = SETTINGS.replace("maxNodes: 50", "maxNodes: 10");
    let d = case("cel-small", &[("p.yaml", policy), ("s.yaml", &small)]);
    let out = run(&["validate", "-f", s(&d), "-o", "text"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("spec.rules[0].authorization.cel.expression"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn output_follows_kubectl() {
    let d = case("output", &[]);
    // The bundle on standard output (the report on standard error), JSON or YAML.
    let out = run(&["compile", "-f", s(&d)]);
    assert_eq!(out.status.code(), Some(0));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(b["apiVersion"], "mcp-access.io/v1");
    assert!(text(&out.stderr).contains("Accepted"));
    let out = run(&["compile", "-f", s(&d), "-o", "yaml"]);
    let y: Value = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(y, b);
    // A file: its extension picks the format; the report then goes to standard output.
    let f = dir("output-file").join("bundle.yaml");
    let out = run(&["compile", "-f", s(&d), "-o", s(&f)]);
    assert_eq!(out.status.code(), Some(0));
    let y: Value = serde_norway::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(y, b);
    assert!(text(&out.stdout).contains("Accepted"));
    // A format the command cannot write is refused by name.
    let out = run(&["compile", "-f", s(&d), "-o", "text"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("-o json, -o yaml, or -o FILE"));
    // validate, effective: -o selects the format (--format stays an alias).
    let out = run(&["validate", "-f", s(&d), "-o", "json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["policies"].is_array());
    let out = run(&["effective", "-f", s(&d), "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["backend"], "mcp/tools");
    // manifests -o json: one List.
    let out = run(&[
        "manifests",
        "-f",
        s(&d),
        "--platform",
        "istio",
        "--image",
        "registry.example/mcp-access:1",
        "--digest",
        &format!("sha256:{}", "a".repeat(64)),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert!(!list["items"].as_array().unwrap().is_empty());
}

#[test]
fn stdin_recursion_version_and_completion() {
    // -f -: standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-access"))
        .args(["compile", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(BASE.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(b["backends"][0]["name"], "tools");
    // -R: subdirectories only when asked for; without it they are named.
    let d = dir("recursive");
    std::fs::create_dir_all(d.join("nested")).unwrap();
    std::fs::write(d.join("nested/base.yaml"), BASE).unwrap();
    let out = run(&["compile", "-f", s(&d)]);
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(b["backends"], json!([]));
    assert!(
        text(&out.stderr)
            .contains("nested: a subdirectory, not read (-R reads directories recursively)"),
        "{}",
        text(&out.stderr)
    );
    let b = bundle(&d, &["-R"]);
    assert_eq!(b["backends"][0]["name"], "tools");
    // --version and completion.
    let out = run(&["--version"]);
    assert_eq!(
        text(&out.stdout).trim(),
        format!("mcp-access {}", env!("CARGO_PKG_VERSION"))
    );
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(
            script.contains("mcp-access") && script.contains("filename"),
            "{shell}"
        );
    }
}
