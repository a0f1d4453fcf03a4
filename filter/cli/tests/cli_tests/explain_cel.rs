//! `explain` with CEL conditions and JWT callers: each evaluated expression is shown with its
//! result (or error) and the variables it read; `--jwt-claims` stands for a verified token.

use std::process::Command;

use mcp_access_bundle::Bundle;
use mcp_access_cli::explain::{explain, to_text, RequestSpec};
use serde_json::{json, Value};

const ALPHA: &str = "spiffe://example.org/ns/agents/sa/alpha";
const IDP: &str = "https://idp.example";

fn bundle_json() -> Value {
    json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org",
                     "jwt": {"providers": [{"issuer": IDP, "metadataKey": "idp"}]}},
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "policies": [
            {"name": "weekday", "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny",
             "seniority": 1, "when": ["request.mcp.method == 'tools/call'"],
             "rules": [{"name": "no-rm", "authorization": {"cel": "request.mcp.params.arguments.path.startsWith('/etc')"}}]},
            {"name": "staff", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
             "seniority": 2,
             "rules": [
                {"name": "groups", "source": {"type": "JWT", "jwt": {"issuer": IDP,
                    "claims": [{"name": "org.team", "values": ["blue"]}]}},
                 "authorization": {"cel": "'staff' in jwt.claims.groups && request.mcp.tool_name.matches('^get-[a-z]+$')"}},
                {"name": "sa", "when": ["source.service_account.name == 'alpha'"]}
             ]}
        ]
    })
}

fn bundle() -> Bundle {
    mcp_access_bundle::parse_bundle(bundle_json().to_string().as_bytes())
        .unwrap()
        .into_inner()
}

fn spec(tool: &str, args: Value, claims: Option<Value>) -> RequestSpec {
    RequestSpec {
        backend: Some("tools".into()),
        body: Some(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}})
            .to_string(),
        ),
        jwt_claims: claims,
        ..RequestSpec::default()
    }
}

fn staff() -> Value {
    json!({"iss": IDP, "sub": "u1", "groups": ["staff"], "org": {"team": "blue"}})
}

#[test]
fn each_cel_condition_shows_its_result_and_what_it_read() {
    let b = bundle();
    let e = explain(
        &b,
        None,
        &spec("get-weather", json!({"path": "/tmp"}), Some(staff())),
    )
    .unwrap();
    assert_eq!(
        (e.decision.as_str(), e.rule.as_deref()),
        ("allow", Some("groups")),
        "{}",
        to_text(&e)
    );
    let fields: Vec<(&str, Option<&str>, &str, &str)> = e
        .cel
        .iter()
        .map(|c| {
            (
                c.policy.as_str(),
                c.rule.as_deref(),
                c.field.as_str(),
                c.result.as_str(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("default/weekday", None, "when[0]", "true"),
            (
                "default/weekday",
                Some("no-rm"),
                "authorization.cel",
                "false"
            ),
            ("default/staff", Some("groups"), "authorization.cel", "true"),
        ]
    );
    let groups = &e.cel[2];
    assert_eq!(groups.reads["jwt.claims"], staff().to_string());
    assert_eq!(groups.reads["request.mcp.tool_name"], "\"get-weather\"");
    assert_eq!(
        e.cel[1].reads["request.mcp.params"],
        json!({"name": "get-weather", "arguments": {"path": "/tmp"}}).to_string()
    );
    let text = to_text(&e);
    assert!(
        text.contains("cel\n  default/weekday when[0]: request.mcp.method == 'tools/call' -> true"),
        "{text}"
    );
    assert!(text.contains("      jwt.claims = {"), "{text}");

    // The Deny rule's condition holds: denied.
    let e = explain(
        &b,
        None,
        &spec("get-weather", json!({"path": "/etc/passwd"}), Some(staff())),
    )
    .unwrap();
    assert_eq!(
        (e.decision.as_str(), e.reason.as_str(), e.rule.as_deref()),
        ("deny", "deny_policy", Some("no-rm"))
    );
}

#[test]
fn errors_are_shown_and_count_against_the_caller() {
    let b = bundle();
    // No `path` argument: the Deny condition errs, so it holds.
    let e = explain(&b, None, &spec("get-weather", json!({}), Some(staff()))).unwrap();
    assert_eq!(
        (e.decision.as_str(), e.reason.as_str()),
        ("deny", "deny_policy")
    );
    assert!(
        e.cel[1].result.starts_with("error: no such key: path"),
        "{:?}",
        e.cel[1]
    );
    // No JWT: jwt.claims is an empty map; the SA rule's when errs (no SPIFFE identity).
    let e = explain(
        &b,
        None,
        &spec("get-weather", json!({"path": "/tmp"}), None),
    )
    .unwrap();
    assert_eq!(
        (e.decision.as_str(), e.reason.as_str()),
        ("deny", "not_allowed"),
        "{}",
        to_text(&e)
    );
    let sa = e
        .cel
        .iter()
        .find(|c| c.rule.as_deref() == Some("sa"))
        .unwrap();
    assert!(
        sa.result
            .starts_with("error: the caller has no SPIFFE identity"),
        "{sa:?}"
    );
    assert_eq!(
        sa.reads["source.service_account.name"],
        "<the caller has no SPIFFE identity>"
    );
    // With the ServiceAccount: admitted by its rule.
    let mut s = spec("anything", json!({"path": "/tmp"}), None);
    s.spiffe = Some(ALPHA.into());
    let e = explain(&b, None, &s).unwrap();
    assert_eq!(
        (e.decision.as_str(), e.rule.as_deref()),
        ("allow", Some("sa")),
        "{}",
        to_text(&e)
    );
}

#[test]
fn jwt_claims_are_checked_and_dotted_claims_match() {
    let b = bundle();
    let wrong_team = json!({"iss": IDP, "sub": "u1", "groups": ["staff"], "org": {"team": "red"}});
    let e = explain(
        &b,
        None,
        &spec("get-weather", json!({"path": "/tmp"}), Some(wrong_team)),
    )
    .unwrap();
    assert_eq!(e.reason.as_str(), "not_allowed", "{}", to_text(&e));
    for (claims, why) in [
        (json!(["x"]), "must be a JSON object"),
        (json!({"sub": "u1"}), "need `iss`"),
        (
            json!({"iss": "https://other"}),
            "not an issuer in identity.jwt.providers",
        ),
        (json!({"iss": IDP, "sub": 7}), "`sub` must be a string"),
    ] {
        let err = explain(&b, None, &spec("x", json!({}), Some(claims)))
            .unwrap_err()
            .message;
        assert!(err.contains("--jwt-claims") && err.contains(why), "{err}");
    }
}

#[test]
fn the_command_line_takes_jwt_claims() {
    let dir = std::env::temp_dir().join(format!("mcp-access-explain-cel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bundle.json");
    std::fs::write(&path, bundle_json().to_string()).unwrap();
    let run = |claims: &str| {
        Command::new(env!("CARGO_BIN_EXE_mcp-access"))
            .args(["explain", "--bundle"])
            .arg(&path)
            .args([
                "--backend",
                "tools",
                "--tool",
                "get-x",
                "--format",
                "json",
                "--jwt-claims",
                claims,
            ])
            .output()
            .unwrap()
    };
    let out = run(&staff().to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["request"]["caller"], format!("jwt:{IDP}#u1"));
    assert!(v["cel"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    let bad = run("[1]");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--jwt-claims: must be a JSON object"));
    let bad = run("{");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--jwt-claims: not JSON"));
    let _ = std::fs::remove_dir_all(&dir);
}
