//! Mistakes never open access: each mistake a user makes in manifests, through the binary
//! (exit code, message naming file, document, field and the valid names, nothing written).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{run, s, text, BASE};

fn dir(name: &str) -> PathBuf {
    common::dir("mistakes", name)
}

/// A fresh directory with `base.yaml` and `policy.yaml`.
fn case(name: &str, policy: &str) -> PathBuf {
    common::case("mistakes", name, &[("policy.yaml", policy)])
}

/// `validate`, then `compile -o`, `envoy -o` and `manifests -o`: each exits 3 and writes nothing;
/// returns validate's stderr.
fn refused_everywhere(d: &std::path::Path, validate_code: i32) -> String {
    let out = run(&["validate", "-f", s(d), "--format", "text"]);
    assert_eq!(
        out.status.code(),
        Some(validate_code),
        "{}",
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    // Outside the directory: `-f` reads every .json file in it.
    let written = PathBuf::from(format!("{}.out", d.display()));
    for cmd in [
        vec!["compile", "-f", s(d), "-o", s(&written)],
        vec![
            "envoy",
            "-f",
            s(d),
            "--wasm-path",
            "/f.wasm",
            "-o",
            s(&written),
        ],
        vec![
            "manifests",
            "-f",
            s(d),
            "--platform",
            "istio",
            "--image",
            "r.example/f:1",
            "--digest",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "-o",
            s(&written),
        ],
    ] {
        let out = run(&cmd);
        assert_eq!(out.status.code(), Some(3), "{cmd:?}: {}", text(&out.stderr));
        assert!(!written.exists(), "{cmd:?} wrote {}", written.display());
        assert!(
            text(&out.stderr).contains("--allow-not-accepted"),
            "{}",
            text(&out.stderr)
        );
    }
    err
}

/// The bundle `compile --allow-not-accepted` writes, and its stderr.
fn proceed(d: &std::path::Path) -> (serde_json::Value, String) {
    let b = PathBuf::from(format!("{}.bundle.json", d.display()));
    let out = run(&["compile", "-f", s(d), "--allow-not-accepted", "-o", s(&b)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = serde_json::from_slice(&std::fs::read(&b).unwrap()).unwrap();
    (v, text(&out.stderr))
}

#[test]
fn a_deny_policy_with_the_wrong_target_group_is_refused_and_named() {
    let d = case(
        "group",
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-delete, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: XBackend, name: tools}]
  action: Deny
  rules:
  - name: delete
    authorization:
      type: Inline
      mcp: {methods: [{name: tools/call, params: [delete]}]}
"#,
    );
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("policy.yaml: document 1: AccessPolicy mcp/no-delete")
            && err.contains(
                "spec.targetRefs[0]: target gateway.networking.k8s.io/XBackend is not supported"
            )
            && err.contains("for an XBackend, group: agentic.networking.x-k8s.io"),
        "{err}"
    );
    // Told to proceed: nothing can stand in (the target does not resolve); stderr says what
    // the policy would have restricted.
    let (bundle, err) = proceed(&d);
    assert!(
        bundle["policies"].as_array().unwrap().is_empty(),
        "{bundle}"
    );
    assert!(
        err.contains("AccessPolicy mcp/no-delete (")
            && err.contains("enforced nowhere")
            && err.contains("it would have denied the requests its rules match there"),
        "{err}"
    );
}

#[test]
fn a_section_name_typo_is_refused_with_the_listener_names_and_stands_in_on_the_gateway() {
    let d = case(
        "section",
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: mtls-only, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: mtl}]
  action: Allow
  rules:
  - name: alpha
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
"#,
    );
    // validate: a reference that leads nowhere (4).
    let err = refused_everywhere(&d, 4);
    assert!(
        err.contains("spec.targetRefs[0]: sectionName: Gateway mcp/gw has no usable listener \"mtl\"; did you mean `mtls`? (valid: http, mtls)"),
        "{err}"
    );
    // Told to proceed: the stand-in admits nothing on every listener of the Gateway.
    let (bundle, _) = proceed(&d);
    let p = &bundle["policies"][0];
    assert_eq!(p["name"], "mtls-only.not-accepted", "{bundle}");
    assert_eq!(p["action"], "Allow");
    assert!(p.get("rules").is_none(), "{p}");
    assert_eq!(
        p["targets"],
        serde_json::json!([{"name": "gw", "namespace": "mcp"}])
    );
    let out = run(&[
        "explain",
        "-f",
        s(&d),
        "--gateway",
        "gw",
        "--listener",
        "mtls",
        "--service-account",
        "agents/alpha",
        "--tool",
        "x",
    ]);
    assert!(
        text(&out.stdout).contains("DENY 403 at gateway"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_rule_name_typo_is_refused_with_the_rule_names_and_stands_in_on_the_route() {
    let d = case(
        "rule",
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: admin, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - name: tools-admin
    matches: [{path: {type: PathPrefix, value: /admin}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: echo-only, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: admin, sectionName: tool-admin}]
  action: Allow
  rules:
  - name: echo
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [echo]}]}}
"#,
    );
    let err = refused_everywhere(&d, 4);
    assert!(
        err.contains("AccessPolicy mcp/echo-only -> HTTPRoute mcp/admin: TargetNotFound")
            && err.contains("every rule of this HTTPRoute admits nothing through this policy")
            && err.contains("spec.targetRefs[0]: sectionName: HTTPRoute mcp/admin has no rule named \"tool-admin\"; did you mean `tools-admin`? (valid: tools-admin)"),
        "{err}"
    );
    // Told to proceed: the stand-in admits nothing through every rule of the route.
    let (bundle, _) = proceed(&d);
    let p = &bundle["policies"][0];
    assert_eq!(p["name"], "echo-only.not-accepted", "{bundle}");
    assert_eq!(p["action"], "Allow");
    assert_eq!(
        p["targets"],
        serde_json::json!([{"name": "tools", "namespace": "mcp",
                            "routes": ["mcp/admin/rule-0/match-0"]}])
    );
}

fn cel_policy(expression: &str) -> String {
    format!(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: cel, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: c
    authorization:
      type: CEL
      cel: {{expression: '{expression}'}}
"#
    )
}

#[test]
fn a_cel_syntax_error_is_refused() {
    let d = case("cel-syntax", &cel_policy("request.mcp.tool_name == "));
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("policy.yaml: document 1: XAccessPolicy mcp/cel")
            && err.contains(
                "Invalid: spec.rules[0].authorization.cel.expression: invalid CEL expression"
            )
            && err.contains("Syntax error"),
        "{err}"
    );
}

#[test]
fn an_unknown_cel_variable_is_refused_with_the_closest_name() {
    let d = case("cel-var", &cel_policy("request.mcp.toolname == \"x\""));
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("unknown variable `request.mcp.toolname`")
            && err.contains("did you mean `request.mcp.tool_name`?"),
        "{err}"
    );
    // Told to proceed: the Allow policy's stand-in admits nothing.
    let (bundle, _) = proceed(&d);
    let p = &bundle["policies"][0];
    assert_eq!(p["name"], "cel.not-accepted", "{bundle}");
    assert!(
        p.get("rules").is_none() && p["notAccepted"].is_string(),
        "{p}"
    );
}

#[test]
fn an_undeclared_jwt_issuer_is_refused_naming_the_flag() {
    let d = case(
        "jwt",
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: jwt, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: j
    source: {type: JWT, jwt: {issuer: "https://idp.example"}}
"#,
    );
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("spec.rules[0].source.jwt.issuer \"https://idp.example\"")
            && err.contains("--jwt-provider NAME=issuer=https://idp.example"),
        "{err}"
    );
    // Declared, it is accepted.
    let out = run(&[
        "validate",
        "-f",
        s(&d),
        "--jwt-provider",
        "idp=issuer=https://idp.example,jwks=/j.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `validate` of file `f` written with `body`: its exit code and stderr.
fn validate_text(f: &std::path::Path, body: &str) -> (Option<i32>, String) {
    std::fs::write(f, body).unwrap();
    let out = run(&["validate", "-f", s(f)]);
    (out.status.code(), text(&out.stderr))
}

#[test]
fn duplicate_yaml_keys_are_an_error_naming_both_lines() {
    // Two files concatenated without `---`: the XBackend's keys repeat in one mapping.
    let d = dir("dup");
    let f = d.join("m.yaml");
    let (code, err) = validate_text(&f, "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {name: tools, namespace: mcp}\nspec:\n  mcp: {serviceName: s, port: 8000}\napiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\n");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("m.yaml: document 1: invalid YAML: duplicate entry with key \"apiVersion\" (the key is on lines 1 and 6)"),
        "{err}"
    );
    // Keys that are not strings are no duplicates (read as strings, as Kubernetes does).
    let (code, err) = validate_text(&f, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: mcp}\ndata:\n  1: x\n  true: y\n");
    assert_eq!(code, Some(0), "{err}");
    // Nested: a targetRef with two names.
    let (code, err) = validate_text(&f, "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: p, namespace: mcp}\nspec:\n  targetRefs:\n  - group: gateway.networking.k8s.io\n    kind: Gateway\n    name: gw\n    name: gw2\n  action: Allow\n");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("duplicate entry with key \"name\"")
            && err.contains("(the key is on lines 8 and 9)"),
        "{err}"
    );
}

#[test]
fn duplicate_keys_in_yaml_flow_mappings_and_json_name_both_places() {
    let d = dir("dup-flow");
    let refused = |name: &str, body: &str, want: &str| {
        let (code, err) = validate_text(&d.join(name), body);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(want), "{err}");
    };
    // A flow mapping on one line: both columns.
    refused(
        "flow.yaml",
        "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {name: tools, namespace: mcp, name: tool}\nspec:\n  mcp: {serviceName: s, port: 8000}\n",
        "flow.yaml: document 1: invalid YAML: metadata: duplicate entry with key \"name\" at line 3 column 11 (the key is on line 3, columns 12 and 41)",
    );
    // Over several lines, the second quoted, after a nested mapping with its own keys.
    refused(
        "flow-lines.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {\n  name: a,\n  labels: {name: x},\n  \"name\": b}\n",
        "(the key is on lines 4 and 6, columns 3 and 3)",
    );
    // JSON: serde_json would keep the last silently; refused like YAML, in its document.
    refused(
        "m.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\"}}\n{\"apiVersion\": \"v1\", \"kind\": \"Namespace\",\n \"metadata\": {\"name\": \"b\",\n  \"name\": \"c\"}}\n",
        "m.json: document 2: invalid JSON: duplicate key \"name\" (the key is on lines 3 and 4, columns 15 and 3)",
    );
    // Equal text in different objects is no duplicate.
    let f = d.join("ok.json");
    let (code, err) = validate_text(&f, "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\", \"labels\": {\"name\": \"kind\"}}}\n");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn an_mcp_block_without_methods_is_accepted_with_a_warning_and_the_rest_takes_effect() {
    let d = case(
        "empty-mcp",
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: p, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: nothing
    authorization: {type: Inline, mcp: {}}
  - name: alpha
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
"#,
    );
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.contains(
            "policy   mcp/p -> XBackend mcp/tools: Accepted warning: spec.rules[0] (nothing)"
        ) && report.contains("so the rule admits nothing")
            && report.contains("mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/call, params: [TOOL]}]"),
        "{report}"
    );
    let ask = |sa: &str| text(&explain_at(&d, &["--service-account", sa, "--tool", "x"]).stdout);
    assert!(
        ask("agents/alpha").contains("decision  ALLOW"),
        "{}",
        ask("agents/alpha")
    );
    assert!(
        ask("agents/beta").contains("DENY 403"),
        "{}",
        ask("agents/beta")
    );
}

const RISK: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: risk, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  defaults:
    action: ExternalAuth
    externalAuth: {protocol: HTTP, backendRef: {name: risk, port: 9000}, http: {}}
"#;

/// `explain` with `args` of a request to XBackend tools through listener gw/http.
fn explain_at(d: &std::path::Path, args: &[&str]) -> Output {
    let mut all = vec![
        "explain",
        "-f",
        s(d),
        "--backend",
        "tools",
        "--gateway",
        "gw",
        "--listener",
        "http",
    ];
    all.extend(args);
    run(&all)
}

fn explain(d: &std::path::Path, assume: &str) -> Output {
    explain_at(d, &["--tool", "x", "--assume", assume])
}

#[test]
fn explain_assume_takes_the_name_of_a_gateway_policy_applied_through_its_defaults() {
    let d = case("assume-block", RISK);
    for key in ["risk", "mcp/risk"] {
        let out = explain(&d, &format!("{key}=deny"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let t = text(&out.stdout);
        assert!(
            t.contains("assumed deny:403")
                && t.contains("DENY 403 at backend (external_auth_denied)"),
            "{t}"
        );
    }
}

#[test]
fn explain_assume_of_a_refused_policy_says_how_it_is_enforced() {
    // Cross-namespace authorizer without a ReferenceGrant: not accepted, enforced fail-closed.
    let refused = r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: check, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: ExternalAuth
  externalAuth: {protocol: HTTP, backendRef: {name: risk, namespace: other, port: 9000}, http: {}}
"#;
    let d = case("assume-refused", refused);
    let out = explain(&d, "check=allow");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains("--assume check: policy mcp/check is not accepted (RefNotPermitted")
            && t.contains("enforced fail-closed")
            && t.contains("DENY 403 at backend (deny_policy)"),
        "{t}"
    );
    // Its target does not resolve: nothing stands in; stderr says so.
    let d = case(
        "assume-nowhere",
        &refused.replace("name: tools}", "name: toolz}"),
    );
    let out = explain(&d, "check=allow");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--assume check: XAccessPolicy mcp/check is not accepted (TargetNotFound")
            && text(&out.stderr).contains("enforced nowhere"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_misspelled_target_kind_is_refused_with_the_valid_kinds() {
    let d = case(
        "kind",
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: p, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gatway, name: gw}]
  action: Allow
"#,
    );
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains(
            "spec.targetRefs[0]: target gateway.networking.k8s.io/Gatway is not supported"
        ) && err.contains("did you mean `Gateway`? (valid: Gateway, XBackend)"),
        "{err}"
    );
}

/// An XAccessPolicy `p` that allows at XBackend mcp/tools; `rules`: its `rules:` lines.
fn allow_at_tools(rules: &str) -> String {
    format!(
        "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {{name: p, namespace: mcp}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]\n  action: Allow\n  rules:\n{rules}"
    )
}

/// `explain` of one MCP method for ServiceAccount agents/alpha at the XBackend; its decision line.
fn decide(d: &std::path::Path, method: &[&str]) -> String {
    let out = explain_at(
        d,
        &[&["--service-account", "agents/alpha"], method].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    t.lines()
        .find(|l| l.starts_with("decision"))
        .unwrap_or_else(|| panic!("{t}"))
        .to_string()
}

#[test]
fn the_empty_mcp_block_warning_offers_fixes_that_work_as_written() {
    let policy = |mcp: &str| {
        allow_at_tools(&format!(
            "  - name: alpha\n    source: {{type: ServiceAccount, serviceAccount: {{namespace: agents, name: alpha}}}}\n    authorization: {{type: Inline{mcp}}}\n"
        ))
    };
    let d = case("bp-warning", &policy(", mcp: {}"));
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    let report = text(&out.stdout);
    let fix = "`mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/call, params: [TOOL]}]}`";
    assert!(
        report.contains("spec.rules[0] (alpha): authorization.mcp lists no methods")
            && report.contains(fix)
            && report.contains("to admit every method, remove authorization.mcp"),
        "{report}"
    );
    let initialize = ["--mcp-method", "initialize"];
    assert!(decide(&d, &initialize).contains("DENY 403"));

    // The first fix, as written (TOOL = x): clients connect and call x, nothing else.
    let snippet = fix.trim_matches('`').replace("TOOL", "x");
    let d = case("bp-fix-methods", &policy(&format!(", {snippet}")));
    assert!(decide(&d, &initialize).contains("ALLOW"));
    assert!(decide(&d, &["--mcp-method", "tools/list"]).contains("ALLOW"));
    assert!(decide(&d, &["--tool", "x"]).contains("ALLOW"));
    assert!(decide(&d, &["--tool", "y"]).contains("DENY 403"));
    // Listing methods alone (SKIP) is no fix: an MCP client could not even initialize.
    let d = case(
        "bp-skip",
        &policy(", mcp: {methods: [{name: tools/call, params: [x]}]}"),
    );
    assert!(decide(&d, &initialize).contains("DENY 403"));

    // The second fix: without authorization.mcp every method is admitted.
    let d = case("bp-fix-any", &policy(""));
    for m in [&initialize[..], &["--tool", "y"]] {
        assert!(decide(&d, m).contains("ALLOW"), "{m:?}");
    }

    // In a defaults block the warning names the rule where it is; a Deny rule denies nothing.
    let d = case(
        "bp-defaults",
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: d, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  defaults:
    action: Deny
    rules:
    - name: none
      authorization: {type: Inline, mcp: {}}
"#,
    );
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    let report = text(&out.stdout);
    assert!(
        report.contains("spec.defaults.rules[0] (none): authorization.mcp lists no methods")
            && report.contains("so the rule denies nothing; to deny methods, list them"),
        "{report}"
    );
}

#[test]
fn effective_shows_a_refused_allow_policys_stand_in_as_admitting_nothing() {
    // An unknown CEL variable: not accepted, enforced fail-closed by a stand-in that admits
    // nothing (not "all traffic", which an Allow policy without rules would mean).
    let d = case(
        "effective-standin",
        &allow_at_tools(
            "  - name: bad\n    authorization: {type: CEL, cel: {expression: \"request.nope == 1\"}}\n",
        ),
    );
    let out = run(&["effective", "-f", s(&d), "--backend", "tools"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains("from stand-in of a policy not accepted (Invalid")
            && t.contains("        no traffic: admits nothing (fail-closed)\n")
            && !t.contains("all traffic"),
        "{t}"
    );
    let out = run(&[
        "effective",
        "-f",
        s(&d),
        "--backend",
        "tools",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &v[0]["levels"][1]["steps"][0]["policies"][0];
    assert_eq!(entry["rules"], serde_json::json!([]), "{v:#}");
    assert!(
        decide(&d, &["--tool", "x"]).contains("DENY 403"),
        "the stand-in admits nothing"
    );
}

#[test]
fn the_envoy_gateway_report_names_the_port_clients_use_and_the_one_envoy_listens_on() {
    let d = case("eg-port", &allow_at_tools(""));
    let base = BASE.replace("port: 8080", "port: 80");
    std::fs::write(d.join("base.yaml"), base).unwrap();
    let digest = format!("sha256:{}", "a".repeat(64));
    let out = run(&[
        "manifests",
        "-f",
        s(&d),
        "--platform",
        "envoy-gateway",
        "--image",
        "registry.example/mcp-access:1",
        "--digest",
        &digest,
        "--format",
        "text",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stderr);
    assert!(
        report.contains("listener http: Accepted clients connect to port 80 (the Gateway's Service); Envoy Gateway's Envoy listens on port 10080 in its pod")
            && report.contains("listener mtls: Accepted clients connect to port 8443 (the Gateway's Service), where Envoy Gateway's Envoy listens;")
            && !report.contains("Envoy listens on port 80"),
        "{report}"
    );
    // What the filter is told matches: the bundle's listener port is 10080.
    assert!(
        text(&out.stdout).contains("\"port\": 10080") || text(&out.stdout).contains("port: 10080"),
        "{}",
        text(&out.stdout)
    );
}

/// The warning `envoy` and `manifests` give a listener whose port browsers and Node refuse.
const BLOCKED: &str = "is on the blocked-port list of the Fetch standard (https://fetch.spec.whatwg.org/#port-blocking): browsers and Node (the MCP Inspector, the TypeScript SDK) refuse to connect to it; pick a port not on the list";

#[test]
fn envoy_warns_once_about_a_listener_port_browsers_and_node_refuse() {
    let d = case("fetch-port-envoy", &allow_at_tools(""));
    let envoy = |extra: &[&str]| {
        let args = [&["envoy", "-f", s(&d), "--wasm-path", "/f.wasm"], extra].concat();
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{extra:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("static_resources"),
            "{extra:?}: the configuration is written"
        );
        text(&out.stderr)
    };
    let want =
        format!("Gateway mcp/gw listener http: port 10080 {BLOCKED} (--listen gw/http=PORT)");
    // A --listen override; --strict refuses what is not accepted, not warnings: written.
    for extra in [
        &["--listen", "http=10080", "--listen", "mtls=10443"][..],
        &[
            "--listen",
            "http=10080",
            "--listen",
            "mtls=10443",
            "--strict",
        ],
        &[
            "--listen",
            "gw/http=10080",
            "--listen",
            "mtls=10443",
            "--format",
            "text",
        ],
    ] {
        let err = envoy(extra);
        assert_eq!(err.matches(BLOCKED).count(), 1, "{extra:?}: {err}");
        assert!(err.contains(&want), "{extra:?}: {err}");
    }
    // A Gateway port shifted by --port-offset: 80 + 10000 is 10080.
    std::fs::write(d.join("base.yaml"), BASE.replace("port: 8080", "port: 80")).unwrap();
    let err = envoy(&["--port-offset", "10000"]);
    assert_eq!(err.matches(BLOCKED).count(), 1, "{err}");
    assert!(err.contains("listener http: port 10080 "), "{err}");
    // Ports clients can reach: no warning.
    for extra in [
        &["--listen", "http=10081", "--listen", "mtls=10443"][..],
        &["--port-offset", "10001"],
    ] {
        let err = envoy(extra);
        assert!(!err.contains("port-blocking"), "{extra:?}: {err}");
    }
}

#[test]
fn manifests_warn_once_about_a_gateway_port_browsers_and_node_refuse() {
    let d = case("fetch-port-manifests", &allow_at_tools(""));
    let manifests = |platform: &str| {
        let out = run(&[
            "manifests",
            "-f",
            s(&d),
            "--platform",
            platform,
            "--image",
            "registry.example/mcp-access:1",
            "--digest",
            common::DIGEST,
            "--format",
            "text",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(!out.stdout.is_empty(), "the objects are written");
        text(&out.stderr)
    };
    std::fs::write(
        d.join("base.yaml"),
        BASE.replace("port: 8080", "port: 10080"),
    )
    .unwrap();
    for platform in ["istio", "envoy-gateway"] {
        let err = manifests(platform);
        assert_eq!(err.matches(BLOCKED).count(), 1, "{platform}: {err}");
        assert!(
            err.contains(&format!("warning  Gateway mcp/gw listener http: port 10080 {BLOCKED} (the port of the listener in Gateway mcp/gw)")),
            "{platform}: {err}"
        );
    }
    // Clients connect to the Gateway's port: 10443 is fine, and so is 80, although Envoy
    // Gateway's Envoy listens on 10080 in its pod.
    for port in ["10443", "80"] {
        std::fs::write(
            d.join("base.yaml"),
            BASE.replace("port: 8080", &format!("port: {port}")),
        )
        .unwrap();
        for platform in ["istio", "envoy-gateway"] {
            let err = manifests(platform);
            assert!(!err.contains("port-blocking"), "{port} {platform}: {err}");
        }
    }
}

/// A Gateway whose only listener is HTTPS with certificateRef Secret `gw-cert` (`BASE`'s route
/// and XBackend follow it in `envoy_in`).
const HTTPS: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - name: https
    protocol: HTTPS
    port: 8443
    tls: {mode: Terminate, certificateRefs: [{name: gw-cert}]}
"#;

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

/// `envoy` in directory `d` (relative paths are relative to it) on `HTTPS`, with `extra`.
fn envoy_in(d: &std::path::Path, extra: &[&str]) -> Output {
    let (_, route_and_backend) = BASE.split_once("---\n").unwrap();
    std::fs::write(
        d.join("gw.yaml"),
        format!("{HTTPS}---\n{route_and_backend}"),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_mcp-access"))
        .current_dir(d)
        .args([
            "envoy",
            "-f",
            "gw.yaml",
            "--wasm-path",
            "/x.wasm",
            "-o",
            "-",
        ])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn envoy_writes_checked_absolute_paths_for_certificates_and_jwks() {
    let d = dir("envoy-files");
    for (name, body) in [
        ("cert.pem", CERT),
        ("key.pem", KEY),
        ("ca.pem", CERT),
        (
            "jwks.json",
            r#"{"keys": [{"kty": "EC", "crv": "P-256", "x": "x", "y": "y"}]}"#,
        ),
        ("empty-jwks.json", r#"{"keys": []}"#),
        ("not-json.json", "keys: []"),
    ] {
        std::fs::write(d.join(name), body).unwrap();
    }
    let jwks = |f: &str| format!("idp=issuer=https://idp.example,jwks={f}");
    let ok = [
        "--tls-cert",
        "gw-cert=cert.pem,key.pem",
        "--client-ca",
        "ca.pem",
    ];
    let out = envoy_in(
        &d,
        &[&ok[..], &["--jwt-provider", &jwks("jwks.json")]].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let config = text(&out.stdout);
    let abs = |f: &str| {
        std::path::absolute(d.join(f))
            .unwrap()
            .display()
            .to_string()
    };
    for f in ["cert.pem", "key.pem", "ca.pem", "jwks.json"] {
        assert!(
            config.contains(&format!("filename: {}", abs(f))),
            "{f}: {config}"
        );
    }

    // Each file is checked: it exists and holds what its flag needs.
    for (args, want) in [
        (vec!["--tls-cert", "gw-cert=nope.pem,key.pem"], "--tls-cert gw-cert: cannot read nope.pem"),
        (vec!["--tls-cert", "gw-cert=key.pem,cert.pem"], "--tls-cert gw-cert: key.pem holds no PEM certificate (-----BEGIN CERTIFICATE-----); it holds a private key: give the certificate first (CERT.pem,KEY.pem)"),
        (vec!["--tls-cert", "gw-cert=cert.pem,ca.pem"], "ca.pem holds no PEM private key"),
        (vec!["--tls-cert", "gw-cert=cert.pem,key.pem", "--client-ca", "agents=key.pem"], "--client-ca agents: key.pem holds no PEM certificate"),
        (vec!["--tls-cert", "gw-cert=cert.pem,key.pem", "--jwt-provider", &jwks("missing.json")], "--jwt-provider idp jwks: cannot read missing.json"),
        (vec!["--tls-cert", "gw-cert=cert.pem,key.pem", "--jwt-provider", &jwks("empty-jwks.json")], "empty-jwks.json is no JWKS with a key"),
        (vec!["--tls-cert", "gw-cert=cert.pem,key.pem", "--jwt-provider", &jwks("not-json.json")], "not-json.json is not JSON"),
    ] {
        let out = envoy_in(&d, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(text(&out.stderr).contains(want), "{args:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{args:?}");
    }

    // Files that exist only where Envoy runs: absolute paths, written as given.
    let elsewhere = [
        "--files-where-envoy-runs",
        "--tls-cert",
        "gw-cert=/etc/envoy/c.pem,/etc/envoy/k.pem",
    ];
    let out = envoy_in(&d, &elsewhere);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("filename: /etc/envoy/c.pem"));
    let out = envoy_in(
        &d,
        &[
            "--files-where-envoy-runs",
            "--tls-cert",
            "gw-cert=c.pem,k.pem",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("give the absolute path where Envoy runs"));
}

#[test]
fn envoy_refuses_an_https_listener_whose_certificate_was_not_given() {
    let d = dir("envoy-no-cert");
    let out = envoy_in(&d, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("error: gw.yaml: document 1: Gateway mcp/gw listener https: Secret mcp/gw-cert is not available here: pass --tls-cert gw-cert=<cert.pem>,<key.pem>; without it Envoy would have no listener for it")
            && err.contains("nothing written"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Told to proceed: written without that listener.
    let out = envoy_in(&d, &["--allow-not-accepted"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("port_value: 8443"));
}

#[test]
fn explain_assume_takes_the_name_of_a_lower_external_auth_policy_an_override_replaced() {
    // The Gateway's atomic override replaces the backend's own ExternalAuth policy: the name
    // the user wrote is still a name --assume accepts, and the note says it calls nothing.
    let policies = format!(
        "{}---\n{}",
        RISK.replace("defaults:", "overrides:"),
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: app-check, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: ExternalAuth
  externalAuth: {protocol: HTTP, backendRef: {name: risk, port: 9000}, http: {}}
"#
    );
    let d = case("assume-replaced", &policies);
    for key in ["app-check", "mcp/app-check"] {
        let out = explain(&d, &format!("{key}=deny"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let t = text(&out.stdout);
        assert!(
            t.contains(&format!(
                "--assume {key}: policy mcp/app-check calls no authorizer"
            )) && t.contains("ALLOW"),
            "{t}"
        );
    }
    // The Gateway policy's own name still answers its calls; an unknown name is still an error.
    let out = explain(&d, "risk=deny");
    assert!(text(&out.stdout).contains("DENY 403 at backend (external_auth_denied)"));
    assert_eq!(explain(&d, "app-chek=deny").status.code(), Some(1));
    // who-can names the policy the user wrote, never the derived one (risk.mcp.tools).
    let out = run(&["who-can", "-f", s(&d), "--backend", "tools", "--tool", "x"]);
    let t = text(&out.stdout);
    assert!(
        t.contains("backend mcp/risk: its authorizer decides") && !t.contains("risk.mcp"),
        "{t}"
    );
}

/// A ToolPin of XBackend mcp/tools pinning `delete_repo` and `search` (`unpinned` as given).
fn tool_pin(unpinned: &str) -> String {
    let digest = format!("sha256:{}", "0".repeat(64));
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: ToolPin\nmetadata: {{name: tools, namespace: mcp}}\nspec:\n  targetRef: {{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}\n  unpinned: {unpinned}\n  tools:\n  - {{name: delete_repo, digest: \"{digest}\"}}\n  - {{name: search, digest: \"{digest}\"}}\n"
    )
}

#[test]
fn a_tool_name_no_closed_tool_pin_pins_is_refused_with_the_pinned_names() {
    // The Deny meant to close delete_repo names delete-repo: it would close nothing.
    let d = common::case(
        "mistakes",
        "pinned-name",
        &[
            ("pin.yaml", &tool_pin("Deny")),
            (
                "policy.yaml",
                r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-delete, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Deny
  rules:
  - name: delete
    authorization:
      type: Inline
      mcp: {methods: [{name: tools/call, params: [delete-repo]}]}
"#,
            ),
        ],
    );
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("policy.yaml: document 1: AccessPolicy mcp/no-delete")
            && err.contains("spec.rules[0].authorization.mcp.methods[0].params[0]: tool `delete-repo` is pinned by no ToolPin of XBackend mcp/tools; did you mean `delete_repo`? (valid: delete_repo, search)")
            && err.contains("unpinned: Deny")
            && err.contains("enforced fail-closed: every request to this target is denied"),
        "{err}"
    );
    // Told to proceed: what it meant to deny is unknown, so its stand-in denies everything.
    let (bundle, _) = proceed(&d);
    let standin = &bundle["policies"][0];
    assert_eq!(standin["action"], "Deny", "{bundle}");
    assert!(standin.get("rules").is_none(), "{bundle}");
    // The same slip in a Gateway-level Allow's CEL (the Gateway's only backend is pinned).
    std::fs::write(
        d.join("policy.yaml"),
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: readers, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: Allow
  rules:
  - name: search
    authorization:
      type: CEL
      cel: {expression: "request.mcp.method != 'tools/call' || request.mcp.tool_name in ['serch']"}
"#,
    )
    .unwrap();
    let err = refused_everywhere(&d, 3);
    assert!(
        err.contains("spec.rules[0].authorization.cel.expression: tool `serch` is pinned by no ToolPin of XBackend mcp/tools; did you mean `search`?"),
        "{err}"
    );
}

#[test]
fn a_tool_name_no_open_tool_pin_pins_is_a_warning() {
    let d = common::case(
        "mistakes",
        "pinned-name-open",
        &[
            ("pin.yaml", &tool_pin("Allow")),
            (
                "policy.yaml",
                r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-delete, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Deny
  rules:
  - name: delete
    when: [{predicate: "request.mcp.tool_name == 'delete-repo'"}]
"#,
            ),
        ],
    );
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    let err = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning  AccessPolicy mcp/no-delete (")
            && err.contains("spec.rules[0].when[0].predicate: tool `delete-repo` is pinned by no ToolPin of XBackend mcp/tools; did you mean `delete_repo`?")
            && err.contains("unpinned: Allow"),
        "{err}"
    );
    // A name it pins, or a backend without a ToolPin, says nothing.
    std::fs::remove_file(d.join("pin.yaml")).unwrap();
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !text(&out.stdout).contains("pinned by no ToolPin"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_route_to_the_service_on_another_port_names_route_rule_ports_and_fix_everywhere() {
    let route = |service: &str, port: u16| {
        BASE.replace(
            "backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]",
            &format!("backendRefs: [{{name: {service}, port: {port}}}]"),
        )
    };
    let d = common::dir("mistakes", "route-port");
    std::fs::write(d.join("all.yaml"), route("tools-server", 8001)).unwrap();
    let why = "XBackend mcp/tools: no HTTPRoute attached to a Gateway forwards to it: HTTPRoute mcp/r spec.rules[0] forwards to Service mcp/tools-server port 8001: port 8001 is not the port XBackend mcp/tools gives its Service (8000): set the backendRef's port to 8000, or refer to the XBackend itself (group: agentic.networking.x-k8s.io, kind: XBackend, name: tools)";
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains(&format!("error: dangling reference: {why}")),
        "{}",
        text(&out.stderr)
    );
    // compile, envoy and manifests say the same as a warning, and refuse it under --strict.
    let written = PathBuf::from(format!("{}.out", d.display()));
    let platform = [
        "--platform",
        "istio",
        "--image",
        "r.example/f:1",
        "--digest",
    ];
    let digest = format!("sha256:{}", "0".repeat(64));
    for cmd in [
        vec!["compile", "-f", s(&d)],
        vec!["envoy", "-f", s(&d), "--wasm-path", "/f.wasm"],
        [
            &["manifests", "-f", s(&d)][..],
            &platform[..],
            &[digest.as_str()],
        ]
        .concat(),
    ] {
        let out = run(&[&cmd[..], &["-o", s(&written)]].concat());
        assert_eq!(out.status.code(), Some(0), "{cmd:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("warning: dangling reference: {why}")),
            "{cmd:?}: {}",
            text(&out.stderr)
        );
        std::fs::remove_file(&written)
            .unwrap_or_else(|_| std::fs::remove_dir_all(&written).unwrap());
        let out = run(&[&cmd[..], &["--strict", "-o", s(&written)]].concat());
        assert_eq!(out.status.code(), Some(4), "{cmd:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("error: dangling reference: {why}")),
            "{cmd:?}"
        );
        assert!(!written.exists(), "{cmd:?} wrote {}", written.display());
    }
    // A serviceName a typo away from the Service the route names, on its port.
    std::fs::write(d.join("all.yaml"), route("tools-servr", 8000)).unwrap();
    let out = run(&["validate", "-f", s(&d), "--format", "text"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("HTTPRoute mcp/r spec.rules[0] forwards to Service mcp/tools-servr port 8000: XBackend mcp/tools names serviceName tools-server: correct whichever name is misspelled"),
        "{}",
        text(&out.stderr)
    );
    // A route validate refuses as not accepted is a warning where compile proceeds.
    let mirror = BASE.replace(
        "name: tools}]\n",
        "name: tools}]\n    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: x, port: 1}}}]\n",
    );
    std::fs::write(d.join("all.yaml"), mirror).unwrap();
    let out = run(&["compile", "-f", s(&d), "-o", s(&written)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: ")
            && text(&out.stderr).contains("HTTPRoute mcp/r -> Gateway mcp/gw: not accepted: Unsupported: spec.rules[0].filters[0]: filter type RequestMirror is not supported"),
        "{}",
        text(&out.stderr)
    );
}
