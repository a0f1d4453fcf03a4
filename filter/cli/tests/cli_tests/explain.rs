//! `explain` on seed 000's example: two ExternalAuth and two InlineTools policies at each
//! level, written as Kubernetes objects, decided by the filter's engine.

use std::collections::BTreeMap;

use mcp_access_cli::explain::{
    explain, parse_assumption, to_text, Assumption, Explanation, RequestSpec,
};
use mcp_access_k8s::{compile, Compiled, Manifests, Options};
use serde_json::Value;

use crate::common::{gateway, route, stream, xbackend};

fn infra() -> String {
    let rule = "  - matches: [{path: {type: PathPrefix, value: /payments/mcp}}]\n    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /mcp}}}]\n    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: payment-service}]\n";
    stream(&[
        gateway("shop", "prod-gateway", &[("http", 8080)]),
        route("shop", "payment-route", "name: prod-gateway", rule),
        xbackend("shop", "payment-service", "payments", 8000, None),
    ])
}

fn policy(name: &str, minute: u32, target: &str, authorization: &str) -> String {
    let (group, kind) = if target == "prod-gateway" {
        ("gateway.networking.k8s.io", "Gateway")
    } else {
        ("agentic.networking.x-k8s.io", "XBackend")
    };
    format!(
        r#"---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {{name: {name}, namespace: shop, creationTimestamp: "2026-01-01T00:{minute:02}:00Z"}}
spec:
  targetRefs: [{{group: {group}, kind: {kind}, name: {target}}}]
  rules:
  - name: payer
    source: {{type: ServiceAccount, serviceAccount: {{namespace: agents, name: payer}}}}
    authorization: {authorization}
"#
    )
}

fn ext(svc: &str) -> String {
    format!("{{type: ExternalAuth, externalAuth: {{protocol: HTTP, backendRef: {{name: {svc}, port: 9000}}, http: {{}}}}}}")
}

fn tools(list: &str) -> String {
    format!("{{type: InlineTools, tools: [{list}]}}")
}

fn eight_policies(reversed: bool) -> Compiled {
    let mut docs = [
        policy(
            "gateway-policy-external-auth-1",
            1,
            "prod-gateway",
            &ext("authz-1"),
        ),
        policy(
            "gateway-policy-external-auth-2",
            2,
            "prod-gateway",
            &ext("authz-2"),
        ),
        policy(
            "gateway-policy-inline-tools-1",
            3,
            "prod-gateway",
            &tools("pay, refund"),
        ),
        policy(
            "gateway-policy-inline-tools-2",
            4,
            "prod-gateway",
            &tools("balance"),
        ),
        policy(
            "backend-policy-external-auth-1",
            5,
            "payment-service",
            &ext("authz-3"),
        ),
        policy(
            "backend-policy-external-auth-2",
            6,
            "payment-service",
            &ext("authz-4"),
        ),
        policy(
            "backend-policy-inline-tools-1",
            7,
            "payment-service",
            &tools("pay"),
        ),
        policy(
            "backend-policy-inline-tools-2",
            8,
            "payment-service",
            &tools("balance"),
        ),
    ];
    if reversed {
        docs.reverse();
    }
    let mut m = Manifests::default();
    m.add_text(
        "seed-000.yaml",
        &format!("{}{}", infra(), docs.concat()),
        "default",
    );
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    let c = compile(&m, &Options::default());
    assert!(c.report.all_accepted(), "{:#?}", c.report);
    c
}

fn ask(c: &Compiled, tool: &str, assume: &[(&str, &str)]) -> Value {
    serde_json::to_value(ask_e(c, tool, assume)).unwrap()
}

fn ask_e(c: &Compiled, tool: &str, assume: &[(&str, &str)]) -> Explanation {
    let spec = RequestSpec {
        path: Some("/payments/mcp".into()),
        service_account: Some("agents/payer".into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        assume: assume
            .iter()
            .map(|(k, v)| (k.to_string(), parse_assumption(v).unwrap()))
            .collect::<BTreeMap<_, _>>(),
        ..RequestSpec::default()
    };
    explain(&c.bundle, Some(&c.topology), &spec).unwrap()
}

fn called(v: &Value) -> Vec<String> {
    v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["policy"]
                .as_str()
                .unwrap()
                .trim_start_matches("shop/")
                .to_string()
        })
        .collect()
}

#[test]
fn seed_000_eight_policy_example_explained() {
    for reversed in [false, true] {
        let c = eight_policies(reversed);
        for tool in ["pay", "balance"] {
            let v = ask(&c, tool, &[]);
            assert_eq!(v["decision"], "allow", "{tool}: {v:#}");
            assert_eq!(v["backend"], "shop/payment-service");
            assert_eq!(v["request"]["route"], "shop/payment-route/rule-0/match-0");
            // All four authorizers, gateway ones first.
            assert_eq!(
                called(&v),
                [
                    "gateway-policy-external-auth-1",
                    "gateway-policy-external-auth-2",
                    "backend-policy-external-auth-1",
                    "backend-policy-external-auth-2"
                ]
            );
            let admitted = format!(
                "shop/backend-policy-inline-tools-{}",
                if tool == "pay" { 1 } else { 2 }
            );
            assert_eq!(v["policy"], admitted.as_str());
        }
        // refund: the gateway admits it, no backend policy does.
        let v = ask(&c, "refund", &[]);
        assert_eq!(
            (
                v["decision"].as_str(),
                v["level"].as_str(),
                v["reason"].as_str()
            ),
            (Some("deny"), Some("backend"), Some("not_allowed"))
        );
        // transfer: denied at the gateway; backend authorizers never called.
        let v = ask(&c, "transfer", &[]);
        assert_eq!(
            (v["level"].as_str(), v["reason"].as_str()),
            (Some("gateway"), Some("not_allowed"))
        );
        assert_eq!(called(&v).len(), 2);
        // One gateway authorizer denies: its answer is relayed, the backend is never asked.
        let v = ask(&c, "pay", &[("gateway-policy-external-auth-2", "deny:401")]);
        assert_eq!(v["reason"], "external_auth_denied");
        assert_eq!(v["policy"], "shop/gateway-policy-external-auth-2");
        assert_eq!(v["status"], 401);
        assert_eq!(called(&v).len(), 2);
        // Both deny: the most senior denial is relayed (by creationTimestamp, whatever the order).
        let v = ask(
            &c,
            "pay",
            &[
                ("*", "deny:403"),
                ("shop/gateway-policy-external-auth-2", "deny:401"),
            ],
        );
        assert_eq!(v["policy"], "shop/gateway-policy-external-auth-1");
        assert_eq!(v["status"], 403);
        // A backend authorizer fails: fail closed.
        let v = ask(&c, "pay", &[("backend-policy-external-auth-1", "error")]);
        assert_eq!(
            (v["level"].as_str(), v["reason"].as_str()),
            (Some("backend"), Some("authorizer_error"))
        );
        // The authorizer can also be named by its bundle name.
        let v = ask(
            &c,
            "pay",
            &[("shop.backend-policy-external-auth-2", "deny")],
        );
        assert_eq!(v["policy"], "shop/backend-policy-external-auth-2");
    }
}

#[test]
fn trace_names_level_step_policy_rule_and_why() {
    let c = eight_policies(false);
    let e = ask_e(&c, "refund", &[]);
    let v = serde_json::to_value(&e).unwrap();
    let trace = v["trace"].as_array().unwrap();
    let steps: Vec<(String, String, String)> = trace
        .iter()
        .map(|t| {
            (
                t["level"].as_str().unwrap().to_string(),
                t["step"].as_str().unwrap().to_string(),
                t["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        steps.contains(&("gateway".into(), "allow".into(), "admitted".into())),
        "{steps:?}"
    );
    assert_eq!(
        steps.last().unwrap(),
        &("backend".into(), "allow".into(), "no rule admits".into())
    );
    let admitted = trace
        .iter()
        .find(|t| t["step"] == "allow" && t["level"] == "gateway")
        .unwrap();
    assert_eq!(admitted["policy"], "shop/gateway-policy-inline-tools-1");
    assert_eq!(admitted["rule"], "payer");

    let text = to_text(&e);
    assert!(
        text.contains("decision  DENY 403 at backend (not_allowed)"),
        "{text}"
    );
    assert!(text.contains("level    step"), "{text}");
    assert!(text.contains("assumed allow (no --assume given)"), "{text}");
}

#[test]
fn routing_comes_from_the_routes_and_unknown_paths_are_unknown_backends() {
    let c = eight_policies(false);
    let spec = RequestSpec {
        path: Some("/elsewhere".into()),
        service_account: Some("agents/payer".into()),
        mcp_method: Some("tools/call".into()),
        param: Some("pay".into()),
        ..RequestSpec::default()
    };
    let v = serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap();
    assert_eq!(v["reason"], "unknown_backend");
    assert!(v["note"].as_str().unwrap().contains("no HTTPRoute matches"));
    // A body is parsed as the filter parses it.
    let spec = RequestSpec {
        path: Some("/payments/mcp".into()),
        service_account: Some("agents/payer".into()),
        body: Some(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"balance"}}"#.into(),
        ),
        ..RequestSpec::default()
    };
    let v = serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap();
    assert_eq!(v["decision"], "allow");
    assert_eq!(v["request"]["mcp"]["param"], "balance");
    // Another caller is not the payer: nothing admits it at the gateway.
    let spec = RequestSpec {
        backend: Some("payment-service".into()),
        spiffe: Some("spiffe://cluster.local/ns/agents/sa/thief".into()),
        mcp_method: Some("tools/call".into()),
        param: Some("pay".into()),
        ..RequestSpec::default()
    };
    let v = serde_json::to_value(explain(&c.bundle, None, &spec).unwrap()).unwrap();
    assert_eq!(
        (v["level"].as_str(), v["reason"].as_str()),
        (Some("gateway"), Some("not_allowed"))
    );
    assert_eq!(parse_assumption("deny:418").unwrap(), Assumption::Deny(418));
    assert!(parse_assumption("maybe").is_err());
}
