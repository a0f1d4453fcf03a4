//! The whole policy language from manifests through the filter's engine (`explain`): every
//! CEL scenario of kube-agentic-networking's end-to-end tests (single rule, multi-rule, macros,
//! all failures, one variable at a time), and the project's AccessPolicy kind (Deny, `when`,
//! its CRD examples).

use mcp_access_cli::explain::{explain, RequestSpec};
use mcp_access_k8s::{compile, Compiled, Manifests, Options};
use serde_json::Value;

use crate::common::{gateway, load, route, stream, to_xbackend, xbackend};

/// KAN's e2e topology, in its own names: a Gateway, a route to the `e2e-mcp-backend` XBackend.
fn kan_infra() -> String {
    stream(&[
        gateway("e2e-test-ns", "e2e-gateway", &[("http", 10001)]),
        route(
            "e2e-test-ns",
            "e2e-route",
            "name: e2e-gateway",
            &to_xbackend(Some("/mcp"), "e2e-mcp-backend"),
        ),
        xbackend(
            "e2e-test-ns",
            "e2e-mcp-backend",
            "mcp-everything",
            3001,
            Some("/mcp"),
        ),
    ])
}

const TESTER: &str = "e2e-test-ns/e2e-tester-sa";

/// A KAN e2e policy: Allow on the backend for the tester's ServiceAccount, the given CEL
/// rules (name, expression) and the rule KAN adds for the base protocol.
fn kan_policy(rules: &[(&str, &str)]) -> String {
    let mut out = String::from(
        "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {name: e2e-cel, namespace: e2e-test-ns}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: e2e-mcp-backend}]\n  action: Allow\n  rules:\n",
    );
    for (name, expr) in rules {
        out.push_str(&format!(
            "  - name: {name}\n    source: {{type: ServiceAccount, serviceAccount: {{name: e2e-tester-sa}}}}\n    authorization:\n      type: CEL\n      cel: {{expression: {}}}\n",
            serde_json::to_string(expr).unwrap()
        ));
    }
    out.push_str("  - name: allow-base-mcp\n    source: {type: ServiceAccount, serviceAccount: {name: e2e-tester-sa}}\n    authorization:\n      type: Inline\n      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}\n");
    out
}

fn build(infra: &str, policies: &str) -> Compiled {
    let m = load(infra, &[policies.to_string()]);
    let c = compile(&m, &Options::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    for p in &c.report.policies {
        assert!(p.accepted(), "{p:#?}");
    }
    c
}

/// The decision (`allow` / `deny`) for the tester calling `tool` (None: `initialize`).
fn decide(c: &Compiled, sa: &str, tool: Option<&str>, headers: &[(&str, &str)]) -> Value {
    let spec = RequestSpec {
        host: Some("gateway.example".into()),
        path: Some("/mcp".into()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        service_account: Some(sa.into()),
        mcp_method: Some(
            if tool.is_some() {
                "tools/call"
            } else {
                "initialize"
            }
            .into(),
        ),
        param: tool.map(str::to_string),
        ..RequestSpec::default()
    };
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap()
}

fn decision(c: &Compiled, tool: Option<&str>) -> String {
    let v = decide(c, TESTER, tool, &[("mcp-protocol-version", "2025-11-25")]);
    v["decision"].as_str().unwrap().to_string()
}

#[test]
fn kan_single_rule_allows_only_get_sum() {
    let c = build(
        &kan_infra(),
        &kan_policy(&[("allow-get-sum-only", "request.mcp.tool_name == 'get-sum'")]),
    );
    assert_eq!(decision(&c, Some("get-sum")), "allow");
    assert_eq!(decision(&c, Some("echo")), "deny");
    // The base-protocol rule admits initialize: the CEL rule no longer blocks it.
    assert_eq!(decision(&c, None), "allow");
    // Another caller: no rule of theirs.
    let v = decide(&c, "e2e-test-ns/other", Some("get-sum"), &[]);
    assert_eq!(v["decision"], "deny");
}

#[test]
fn kan_all_failures_allows_no_tool() {
    let c = build(
        &kan_infra(),
        &kan_policy(&[("allow-nothing", "request.mcp.tool_name == 'non-existent'")]),
    );
    assert_eq!(decision(&c, Some("get-sum")), "deny");
    assert_eq!(decision(&c, Some("echo")), "deny");
    assert_eq!(decision(&c, None), "allow");
}

#[test]
fn kan_multi_rule_one_match_is_enough() {
    let c = build(
        &kan_infra(),
        &kan_policy(&[
            ("allow-get-sum", "request.mcp.tool_name == 'get-sum'"),
            (
                "allow-non-existent",
                "request.mcp.tool_name == 'non-existent'",
            ),
        ]),
    );
    assert_eq!(decision(&c, Some("get-sum")), "allow");
    assert_eq!(decision(&c, Some("echo")), "deny");
}

#[test]
fn kan_macros_and_functions_work_unchanged() {
    let expr = "request.path.startsWith('/mc') &&\nrequest.headers['mcp-protocol-version'].contains('2025') &&\nrequest.mcp.tool_name.matches('^get-[a-z]+$')";
    let c = build(&kan_infra(), &kan_policy(&[("allow-macros", expr)]));
    assert_eq!(decision(&c, Some("get-sum")), "allow");
    assert_eq!(decision(&c, Some("echo")), "deny");
    // Another protocol revision in the header: the expression is false.
    let v = decide(
        &c,
        TESTER,
        Some("get-sum"),
        &[("mcp-protocol-version", "2026-07-28")],
    );
    assert_eq!(v["decision"], "deny", "{v:#}");
}

#[test]
fn kan_each_variable_alone() {
    // KAN's cases 10-15: each expression admits get-sum, its counterpart does not. As in
    // Envoy's attribute, request.host carries the port the client sent (`endsWith(':10001')`);
    // request.hostname is the canonical host.
    let cases = [
        ("request.path == '/mcp'", "request.path == '/wrong'"),
        ("request.url_path == '/mcp'", "request.url_path == '/wrong'"),
        ("request.method == 'POST'", "request.method == 'GET'"),
        (
            "request.host.endsWith(':10001') && request.hostname == 'gateway.example' && request.port == 10001",
            "request.host.endsWith(':9999')",
        ),
        (
            "request.headers['mcp-protocol-version'] == '2025-11-25'",
            "request.headers['mcp-protocol-version'] == '1999-01-01'",
        ),
    ];
    for (valid, failing) in cases {
        let c = build(&kan_infra(), &kan_policy(&[("var", valid)]));
        assert_eq!(decision(&c, Some("get-sum")), "allow", "{valid}");
        let c = build(&kan_infra(), &kan_policy(&[("var", failing)]));
        assert_eq!(decision(&c, Some("get-sum")), "deny", "{failing}");
    }
}

#[test]
fn kan_request_time() {
    let c = build(
        &kan_infra(),
        &kan_policy(&[("var", "request.time.getFullYear() >= 2025")]),
    );
    assert_eq!(decision(&c, Some("get-sum")), "allow");
    let c = build(
        &kan_infra(),
        &kan_policy(&[("var", "request.time.getFullYear() < 2000")]),
    );
    assert_eq!(decision(&c, Some("get-sum")), "deny");
}

#[test]
fn the_kan_cel_crd_example_compiles() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config-schema/crds/upstream/kube-agentic-networking/examples/valid/cel-policy.yaml"
    ))
    .unwrap();
    let infra = kan_infra()
        .replace("e2e-test-ns", "default")
        .replace("e2e-mcp-backend", "my-backend");
    let c = build(&infra, &text);
    let rules = c.bundle.policies[0].rules.as_ref().unwrap();
    assert!(rules[0].authorization.as_ref().unwrap().cel.is_some());
}

/// The topology the project's CRD examples (config-schema/crds/examples/valid) target.
const EXAMPLE_INFRA: &str = include_str!("../../../../config-schema/crds/examples/targets.yaml");

fn example(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../config-schema/crds/examples/valid/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn ask(c: &Compiled, spec: RequestSpec) -> Value {
    let spec = RequestSpec {
        path: spec.path.or(Some("/mcp".into())),
        ..spec
    };
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap()
}

#[test]
fn the_deny_example_denies_one_tool_to_everyone_and_nothing_else() {
    let c = build(EXAMPLE_INFRA, &example("deny.yaml"));
    let call = |tool: &str| {
        ask(
            &c,
            RequestSpec {
                spiffe: Some("spiffe://example.org/ns/agents/sa/alpha".into()),
                mcp_method: Some("tools/call".into()),
                param: Some(tool.into()),
                ..RequestSpec::default()
            },
        )
    };
    let v = call("delete_repo");
    assert_eq!(v["decision"], "deny", "{v:#}");
    assert_eq!(v["policy"], "mcp/no-repo-deletion", "{v:#}");
    assert_eq!(v["rule"], "delete-repo", "{v:#}");
    // A Deny policy makes nothing default-deny.
    assert_eq!(call("echo")["decision"], "allow");
}

#[test]
fn the_cel_example_admits_getters_and_denies_by_tool_arguments() {
    let c = build(EXAMPLE_INFRA, &example("cel.yaml"));
    let alpha = "spiffe://example.org/ns/agents/sa/alpha";
    let call = |tool: &str, args: &str| {
        ask(
            &c,
            RequestSpec {
                spiffe: Some(alpha.into()),
                body: Some(format!(
                    r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
                )),
                ..RequestSpec::default()
            },
        )
    };
    assert_eq!(call("get_weather", "{}")["decision"], "allow");
    assert_eq!(call("echo", "{}")["decision"], "deny");
    let v = call("get_rows", r#"{"database":"prod"}"#);
    assert_eq!(v["decision"], "deny", "{v:#}");
    assert_eq!(v["policy"], "mcp/no-prod-database", "{v:#}");
    assert_eq!(
        call("get_rows", r#"{"database":"test"}"#)["decision"],
        "allow"
    );
}

#[test]
fn the_when_example_applies_only_where_its_condition_holds() {
    let c = build(EXAMPLE_INFRA, &example("when.yaml"));
    let deployer = |host: &str, ticket: Option<&str>| {
        ask(
            &c,
            RequestSpec {
                host: Some(host.into()),
                service_account: Some("agents/deployer".into()),
                headers: ticket
                    .map(|t| vec![("x-change-ticket".to_string(), t.to_string())])
                    .unwrap_or_default(),
                mcp_method: Some("tools/call".into()),
                param: Some("restart".into()),
                ..RequestSpec::default()
            },
        )
    };
    // In the EU host the policy applies: only a ticketed call is admitted.
    assert_eq!(
        deployer("mcp.eu.example.com", Some("CHG-42"))["decision"],
        "allow"
    );
    assert_eq!(
        deployer("mcp.eu.example.com", Some("oops"))["decision"],
        "deny"
    );
    assert_eq!(deployer("mcp.eu.example.com", None)["decision"], "deny");
    // Elsewhere the policy does not apply (and no other policy makes the level default-deny).
    assert_eq!(deployer("mcp.us.example.com", None)["decision"], "allow");
}

#[test]
fn the_jwt_example_matches_verified_claims() {
    let mut m = Manifests::default();
    m.add_text(
        "test.yaml",
        &format!("{EXAMPLE_INFRA}---\n{}", example("jwt.yaml")),
        "default",
    );
    let o = Options {
        jwt_providers: vec![mcp_access_bundle::JwtProvider {
            issuer: "https://idp.example.com".into(),
            metadata_key: "idp".into(),
        }],
        ..Options::default()
    };
    let c = compile(&m, &o);
    assert!(c.report.policies[0].accepted(), "{:#?}", c.report);
    let call = |claims: Value, tool: &str| {
        ask(
            &c,
            RequestSpec {
                jwt_claims: Some(claims),
                mcp_method: Some("tools/call".into()),
                param: Some(tool.into()),
                ..RequestSpec::default()
            },
        )["decision"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let iss = "https://idp.example.com";
    let staff_eu =
        serde_json::json!({"iss": iss, "sub": "u1", "groups": ["staff"], "org": {"region": "eu"}});
    assert_eq!(call(staff_eu.clone(), "echo"), "allow");
    assert_eq!(call(staff_eu, "restart"), "deny");
    // Every claim must hold: the nested region (a dotted name), the group.
    let staff_asia = serde_json::json!({"iss": iss, "sub": "u1", "groups": ["staff"], "org": {"region": "asia"}});
    assert_eq!(call(staff_asia, "echo"), "deny");
    let guest =
        serde_json::json!({"iss": iss, "sub": "u2", "groups": ["guest"], "org": {"region": "eu"}});
    assert_eq!(call(guest, "echo"), "deny");
    // The on-call subject may call anything.
    assert_eq!(
        call(
            serde_json::json!({"iss": iss, "sub": "oncall@example.com"}),
            "restart"
        ),
        "allow"
    );
}
