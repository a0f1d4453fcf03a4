//! `mcp-access who-can` through the binary: per listener, each caller the policies tell apart
//! (SPIFFE IDs, ServiceAccounts, classes of verified tokens, every other caller) with the
//! engine's decision, and what decides at run time.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::{case, run, s, text};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const ISSUER: &str = "https://idp.example";

#[test]
fn the_demo_tools() {
    let demo = repo().join("envoy-demo/manifests");
    let provider = "demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=https://auth.demo.mcp-access.local/jwks.json";
    let args = [
        "who-can",
        "-f",
        s(&demo),
        "--trust-domain",
        "example.org",
        "--jwt-provider",
        provider,
        "--backend",
        "demo/tools",
    ];
    let out = run(&[&args[..], &["--tool", "get_weather", "-o", "json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    let decisions = |listener: &str| -> Vec<(String, String)> {
        let l = a["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["listener"] == listener)
            .unwrap();
        l["callers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["caller"].as_str().unwrap().to_string(),
                    c["decision"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        decisions("demo/agents-gateway/mcp-mtls"),
        [
            (
                "spiffe:spiffe://example.org/ns/agents/sa/alpha".into(),
                "allow".into()
            ),
            (
                "spiffe:spiffe://example.org/ns/agents/sa/beta".into(),
                "allow".into()
            ),
            ("any other caller".into(), "deny".into()),
        ]
    );
    assert_eq!(
        decisions("demo/agents-gateway/mcp-jwt"),
        [
            (
                r#"jwt:{"iss":"https://auth.demo.mcp-access.local","sub":"alpha"}"#.into(),
                "allow".into()
            ),
            (
                r#"jwt:{"iss":"https://auth.demo.mcp-access.local","sub":"beta"}"#.into(),
                "allow".into()
            ),
            ("any other caller".into(), "deny".into()),
        ]
    );
    // echo: only alpha; the authorizer decides at run time.
    let out = run(&[&args[..], &["--tool", "echo"]].concat());
    let t = text(&out.stdout);
    assert!(
        t.contains("  ALLOW spiffe:spiffe://example.org/ns/agents/sa/alpha  (ServiceAccount agents/alpha)\n        by gateway demo/gateway-agents rule alpha-any-tool\n        by backend demo/tools-allow-list rule safe-tools\n        run time: authorizer of demo/tools-risk-check (backend) decides"),
        "{t}"
    );
    assert!(
        t.contains("  DENY  spiffe:spiffe://example.org/ns/agents/sa/beta  (ServiceAccount agents/beta)\n        denied at gateway (not_allowed)"),
        "{t}"
    );
    // delete_repo: nobody.
    let out = run(&[&args[..], &["--tool", "delete_repo", "-o", "json"]].concat());
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    for l in a["listeners"].as_array().unwrap() {
        for c in l["callers"].as_array().unwrap() {
            assert_eq!(c["decision"], "deny", "{c}");
        }
    }
}

#[test]
fn spiffe_callers_are_marked_where_no_client_certificate_can_arrive() {
    // The demo's mcp-jwt listener is plain HTTP, mcp-mtls HTTPS with client certificates; an
    // extra Backend-level policy names a ServiceAccount, so both listeners ask about it.
    let d = crate::common::dir("who-can", "plain-http");
    let extra = d.join("ops.yaml");
    std::fs::write(
        &extra,
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: ops, namespace: demo}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n  action: Allow\n  rules:\n  - name: ops\n    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: ops}}\n",
    )
    .unwrap();
    let demo = repo().join("envoy-demo/manifests");
    let provider = "demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=https://auth.demo.mcp-access.local/jwks.json";
    let args = [
        "who-can",
        "-f",
        s(&demo),
        "-f",
        s(&extra),
        "--trust-domain",
        "example.org",
        "--jwt-provider",
        provider,
        "--backend",
        "demo/tools",
        "--tool",
        "echo",
    ];
    let out = run(&[&args[..], &["-o", "json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    let spiffe_on = |listener: &str| -> Vec<Value> {
        a["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["listener"] == listener)
            .flat_map(|l| l["callers"].as_array().unwrap().clone())
            .filter(|c| c["caller"].as_str().unwrap().starts_with("spiffe:"))
            .collect()
    };
    let http = spiffe_on("demo/agents-gateway/mcp-jwt");
    let https = spiffe_on("demo/agents-gateway/mcp-mtls");
    assert!(!http.is_empty() && !https.is_empty(), "{a:#}");
    for c in &http {
        assert!(
            c["cannotArrive"]
                .as_str()
                .unwrap()
                .starts_with("a plain-HTTP listener receives no client certificate"),
            "{c}"
        );
    }
    for c in &https {
        assert!(c.get("cannotArrive").is_none(), "{c}");
    }
    let out = run(&args);
    let t = text(&out.stdout);
    let (mtls, jwt) = t
        .split_once("listener demo/agents-gateway/mcp-jwt")
        .unwrap();
    assert!(
        jwt.contains("  NEVER spiffe:spiffe://example.org/ns/agents/sa/ops  (ServiceAccount agents/ops)\n        cannot arrive here: a plain-HTTP listener receives no client certificate"),
        "{t}"
    );
    assert!(!mtls.contains("NEVER"), "{t}");
}

#[test]
fn token_classes_cel_and_http_conditions() {
    let policies = format!(
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: staff, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: staff
    source: {{type: JWT, jwt: {{issuer: "{ISSUER}", claims: [{{name: groups, values: [staff]}}]}}}}
  - name: ops-in-hours
    source: {{type: ServiceAccount, serviceAccount: {{namespace: agents, name: ops}}}}
    when: [{{predicate: "request.time.getHours() < 18"}}]
  - name: team-header
    source: {{type: ServiceAccount, serviceAccount: {{namespace: agents, name: dev}}}}
    authorization:
      type: Inline
      headers: [{{name: x-team, value: blue}}]
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: no-contractors, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Deny
  rules:
  - name: contractors
    source: {{type: JWT, jwt: {{issuer: "{ISSUER}", claims: [{{name: groups, values: [contractors]}}]}}}}
"#
    );
    let dir = case("who-can", "classes", &[("p.yaml", &policies)]);
    // Listener mtls takes client certificates (SPIFFE IDs arrive there); http is plain HTTP.
    std::fs::write(
        dir.join("base.yaml"),
        crate::common::BASE.replace(
            "{name: mtls, protocol: HTTP, port: 8443}",
            "{name: mtls, protocol: HTTPS, port: 8443, tls: {mode: Terminate, certificateRefs: [{name: cert}]}}",
        ),
    )
    .unwrap();
    let provider = format!("idp=issuer={ISSUER},jwks={ISSUER}/jwks.json");
    let out = run(&[
        "who-can",
        "-f",
        s(&dir),
        "--jwt-provider",
        &provider,
        "--backend",
        "tools",
        "--tool",
        "echo",
    ]);
    let all = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (http, t) = all.split_once("listener mcp/gw/mtls\n").unwrap();
    assert!(
        http.contains("  NEVER spiffe:spiffe://cluster.local/ns/agents/sa/dev"),
        "{all}"
    );
    let line = |caller: &str| {
        t.lines()
            .find(|l| l.contains(caller))
            .unwrap_or_else(|| panic!("no {caller}:\n{t}"))
            .to_string()
    };
    // Each class of token the two JWT sources tell apart: staff only, contractors only, both.
    assert!(
        line(r#"jwt:{"groups":["staff"],"iss":"https://idp.example"}"#).starts_with("  ALLOW"),
        "{t}"
    );
    assert!(
        line(r#"jwt:{"groups":["contractors"],"iss":"https://idp.example"}"#).starts_with("  DENY"),
        "{t}"
    );
    let both = line(r#"jwt:{"groups":["contractors","staff"],"iss":"https://idp.example"}"#);
    assert!(both.starts_with("  DENY") && both.contains("matching {iss https://idp.example, groups in [contractors]} and {iss https://idp.example, groups in [staff]}"), "{t}");
    assert!(
        t.contains("by backend mcp/no-contractors rule contractors"),
        "{t}"
    );
    // A `when` is evaluated at run time; so is a header condition, which the caller alone does
    // not meet.
    assert!(
        t.contains(
            "run time: CEL mcp/staff rule ops-in-hours when[0]: request.time.getHours() < 18"
        ),
        "{t}"
    );
    assert!(
        t.contains(
            "note: backend Allow mcp/staff rule team-header: decided at run time by header x-team"
        ),
        "{t}"
    );
    assert!(line("sa/dev").starts_with("  DENY"), "{t}");
    // A backend nobody routes to, and one that does not exist.
    let out = run(&[
        "who-can",
        "-f",
        s(&dir),
        "--backend",
        "nope",
        "--tool",
        "echo",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no XBackend nope"),
        "{}",
        text(&out.stderr)
    );
}
