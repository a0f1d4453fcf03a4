//! `mcp-access test` through the binary: the demo's own tests pass; a case whose decision is
//! not the expected one fails with what differs (exit 7, JUnit failure); a test document that
//! cannot run is an error (exit 1).

use std::path::PathBuf;

use crate::common::{case, run, s, text};

const POLICY: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: only-echo, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: echo
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
    authorization:
      type: Inline
      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/call, params: [echo]}]}
  - name: math
    authorization: {type: CEL, cel: {expression: "request.mcp.tool_name == 'add' && request.mcp.params.arguments.a < 10"}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-echo-soon, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  mode: DryRun
  action: Deny
  rules:
  - name: echo
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [echo]}]}}
"#;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_demo_manifests_pass_their_tests() {
    let dir = case("policy-test", "demo", &[]);
    let junit = dir.join("junit.xml");
    let tests = repo().join("envoy-demo/manifests.test.yaml");
    let out = run(&["test", s(&tests), "--junit", s(&junit)]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(report.contains("ok    beta may not call echo"), "{report}");
    assert!(report.ends_with("14 passed, 0 failed\n"), "{report}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("tests=\"14\"") && xml.contains("failures=\"0\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 14, "{xml}");
}

#[test]
fn a_wrong_expectation_fails_with_what_differs() {
    let tests = r#"apiVersion: test.mcp-access.io/v1alpha1
kind: PolicyTest
metadata: {name: tools}
spec:
  defaults: {gateway: gw, listener: http, caller: {serviceAccount: agents/alpha}}
  cases:
  - name: echo is allowed
    request: {mcp: {tool: echo}}
    expect: {decision: allow, policy: only-echo, rule: echo, dryRun: {decision: deny, policy: mcp/no-echo-soon, rule: echo}}
  - name: add with a small number
    request: {mcp: {tool: add, arguments: {a: 1, b: 2}}}
    expect: {decision: allow, rule: math}
  - name: add with a large number (a wrong expectation)
    request: {mcp: {tool: add, arguments: {a: 100, b: 2}}}
    expect: {decision: allow, rule: math}
  - name: a wrong rule
    request: {mcp: {tool: echo}}
    expect: {decision: allow, rule: math}
"#;
    let dir = case(
        "policy-test",
        "failing",
        &[("p.yaml", POLICY), ("tools.test", tests)],
    );
    let junit = dir.join("junit.xml");
    let out = run(&[
        "test",
        s(&dir.join("tools.test")),
        "-f",
        s(&dir),
        "--junit",
        s(&junit),
    ]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{report}{}", text(&out.stderr));
    assert!(report.contains("  ok    echo is allowed\n"), "{report}");
    assert!(
        report.contains("  ok    add with a small number\n"),
        "{report}"
    );
    assert!(
        report.contains("  FAIL  add with a large number (a wrong expectation)\n          decision: want allow, got deny\n          rule: want math, got null\n"),
        "{report}"
    );
    // The decision as explain shows it, CEL values included.
    assert!(
        report.contains("| decision  DENY 403 at backend (not_allowed)"),
        "{report}"
    );
    assert!(report.contains("request.mcp.params = "), "{report}");
    assert!(report.contains("rule: want math, got echo"), "{report}");
    assert!(report.ends_with("2 passed, 2 failed\n"), "{report}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    assert!(xml.contains("decision: want allow, got deny"), "{xml}");
}

#[test]
fn test_documents_that_cannot_run_are_errors() {
    let dir = case("policy-test", "broken", &[("p.yaml", POLICY)]);
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let head = "apiVersion: test.mcp-access.io/v1alpha1\nkind: PolicyTest\nmetadata: {name: t}\n";
    // A field the format does not have, with where it is.
    let typo = write(
        "typo.test",
        &format!("{head}spec:\n  cases:\n  - name: x\n    request: {{mcp: {{tool: echo, tols: x}}}}\n    expect: {{}}\n"),
    );
    let out = run(&["test", s(&typo), "-f", s(&dir)]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("spec.cases[0].request.mcp") && err.contains("tols"),
        "{err}"
    );
    // No manifests at all.
    let bare = write(
        "bare.test",
        &format!("{head}spec:\n  cases: [{{name: x, expect: {{decision: allow}}}}]\n"),
    );
    let out = run(&["test", s(&bare)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("ERROR no manifests"),
        "{}",
        text(&out.stdout)
    );
    // A policy that is not accepted: compile would refuse the manifests.
    write(
        "bad.yaml",
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: bad, namespace: mcp}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n  action: Allow\n  rules:\n  - name: r\n    authorization: {type: CEL, cel: {expression: 'request.nope'}}\n",
    );
    let t = write(
        "stand-in.test",
        &format!("{head}spec:\n  cases:\n  - name: nothing passes the stand-in\n    request: {{gateway: gw, listener: http, mcp: {{tool: echo}}}}\n    expect: {{decision: deny, level: backend, reason: not_allowed}}\n"),
    );
    let out = run(&["test", s(&t), "-f", s(&dir)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("not accepted: AccessPolicy mcp/bad"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["test", s(&t), "-f", s(&dir), "--allow-not-accepted"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // Not a test document.
    let other = write(
        "other.test",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nspec: {cases: []}\n",
    );
    let out = run(&["test", s(&other)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not a test"),
        "{}",
        text(&out.stderr)
    );
}
