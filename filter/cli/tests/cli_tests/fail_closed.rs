//! Policies that once compiled to something weaker than what was written, reproduced the way
//! a user would find them: manifests -> compiler -> `explain` (the filter's engine).

use std::collections::BTreeMap;

use mcp_access_cli::explain::{explain, parse_assumption, RequestSpec};
use mcp_access_k8s::{compile, Compiled, Options};
use serde_json::Value;

use crate::common::{gateway, load, route, stream, to_xbackend, xbackend};

/// Gateway `gw` (listener `http` :8080) in namespace shop; HTTPRoute `route` sends `/mcp` to
/// XBackend `tools`, then has `more_rules`.
pub(crate) fn shop(more_rules: &str) -> String {
    stream(&[
        gateway("shop", "gw", &[("http", 8080)]),
        route(
            "shop",
            "route",
            "name: gw",
            &(to_xbackend(Some("/mcp"), "tools") + more_rules),
        ),
        xbackend("shop", "tools", "tools", 8000, None),
    ])
}

fn build(policies: &str) -> Compiled {
    let m = load(&shop(""), &[policies.to_string()]);
    let c = compile(&m, &Options::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

/// The decision for `agents/<sa>` calling `method` (`param`), with authorizers as assumed.
fn ask(
    c: &Compiled,
    sa: &str,
    method: &str,
    param: Option<&str>,
    assume: &[(&str, &str)],
) -> Value {
    let spec = RequestSpec {
        path: Some("/mcp".into()),
        service_account: Some(format!("agents/{sa}")),
        mcp_method: Some(method.into()),
        param: param.map(str::to_string),
        assume: assume
            .iter()
            .map(|(k, v)| (k.to_string(), parse_assumption(v).unwrap()))
            .collect::<BTreeMap<_, _>>(),
        ..RequestSpec::default()
    };
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap()
}

fn status<'a>(c: &'a Compiled, name: &str) -> &'a mcp_access_k8s::ObjectStatus {
    c.report.policies.iter().find(|p| p.name == name).unwrap()
}

fn called(v: &Value) -> Vec<String> {
    v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["policy"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn external_auth_with_empty_rules_calls_its_authorizer_for_every_request() {
    let c = build(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: check-all, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: ExternalAuth
  externalAuth: {protocol: HTTP, backendRef: {name: opa, port: 9000}, http: {}}
  rules: []
"#,
    );
    assert!(status(&c, "check-all").accepted());
    let p = c
        .bundle
        .policies
        .iter()
        .find(|p| p.name == "check-all")
        .unwrap();
    assert_eq!(p.rules, None, "all traffic is spelled by omitting rules");
    for (sa, method, param) in [
        ("anyone", "tools/call", Some("x")),
        ("other", "initialize", None),
    ] {
        let v = ask(&c, sa, method, param, &[("*", "deny:401")]);
        assert_eq!(called(&v), ["shop/check-all"], "{v:#}");
        assert_eq!(v["decision"], "deny", "{v:#}");
        assert_eq!(v["reason"], "external_auth_denied", "{v:#}");
    }
}

#[test]
fn an_external_auth_rule_beside_other_rules_is_rejected_and_denies_everything() {
    let ext = "authorization: {type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: opa, port: 9000}, http: {}}}";
    for other in [
        "- name: open\n    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: vip}}",
        "- name: cel\n    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: vip}}\n    authorization: {type: CEL, cel: {expression: \"true\"}}",
        "- name: tools\n    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: vip}}\n    authorization: {type: InlineTools, tools: [x]}",
    ] {
        let c = build(&format!(
            r#"apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {{name: mixed, namespace: shop}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  rules:
  - name: judged
    source: {{type: ServiceAccount, serviceAccount: {{namespace: agents, name: judged}}}}
    {ext}
  {other}
"#
        ));
        let st = &status(&c, "mixed").conditions[0];
        assert!(!st.accepted, "{other}: {st:?}");
        assert_eq!(st.reason, "Invalid");
        assert!(
            st.message.contains("ExternalAuth rule")
                && st.message.contains("spec.rules[1]")
                && st.message.contains("every request to this target is denied"),
            "{}",
            st.message
        );
        for sa in ["judged", "vip", "nobody"] {
            let v = ask(&c, sa, "tools/call", Some("x"), &[("*", "allow")]);
            assert_eq!(v["decision"], "deny", "{other} / {sa}: {v:#}");
            assert_eq!(v["policy"], "shop/mixed.not-accepted", "{v:#}");
        }
    }
}

#[test]
fn an_mcp_block_admits_only_what_it_lists() {
    let c = build(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: base-only, namespace: shop}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: base
    authorization:
      type: Inline
      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}
"#,
    );
    assert!(status(&c, "base-only").accepted());
    for (method, param) in [
        ("tools/call", Some("anything")),
        ("prompts/get", Some("p")),
        ("resources/read", Some("file:///etc/passwd")),
        ("resources/subscribe", Some("file:///x")),
        ("sampling/unknown", None),
    ] {
        let v = ask(&c, "a", method, param, &[]);
        assert_eq!(v["decision"], "deny", "{method}: {v:#}");
    }
    for method in [
        "initialize",
        "ping",
        "notifications/initialized",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
        let v = ask(&c, "a", method, None, &[]);
        assert_eq!(v["decision"], "allow", "{method}: {v:#}");
    }
}

#[test]
fn an_mcp_block_that_lists_nothing_is_accepted_with_a_warning_and_admits_nothing() {
    let c = build(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: nothing, namespace: shop}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: empty
    authorization: {type: Inline, mcp: {}}
"#,
    );
    let st = &status(&c, "nothing").conditions[0];
    assert_eq!(st.reason, "Accepted", "{st:?}");
    assert!(
        st.message.contains("spec.rules[0] (empty)")
            && st.message.contains("admits nothing")
            && st
                .message
                .contains("mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS"),
        "{}",
        st.message
    );
    let v = ask(&c, "a", "initialize", None, &[]);
    assert_eq!(v["decision"], "deny", "admits nothing: {v:#}");
}

#[test]
fn category_rules_admit_their_listing_and_no_other_category() {
    let c = build(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: tools-only, namespace: shop}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: tools
    authorization: {type: Inline, mcp: {methods: [{name: tools}]}}
"#,
    );
    for (method, param, want) in [
        ("tools/list", None, "allow"),
        ("tools/call", Some("x"), "allow"),
        ("prompts/list", None, "deny"),
        ("resources/templates/list", None, "deny"),
        ("initialize", None, "deny"),
    ] {
        let v = ask(&c, "a", method, param, &[]);
        assert_eq!(v["decision"], want, "{method}: {v:#}");
    }
}

#[test]
fn external_auth_on_an_allow_policy_is_not_dropped() {
    let c = build(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: confused, namespace: shop}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  externalAuth: {protocol: HTTP, backendRef: {name: opa, port: 9000}, http: {}}
"#,
    );
    let st = &status(&c, "confused").conditions[0];
    assert_eq!(st.reason, "Invalid", "{st:?}");
    assert!(st.message.contains("spec.externalAuth"), "{}", st.message);
    let v = ask(&c, "a", "tools/call", Some("x"), &[]);
    assert_eq!(v["decision"], "deny", "{v:#}");
}
