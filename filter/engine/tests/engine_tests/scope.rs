//! OAuth scopes (docs/semantics.md §3.7, §5.6): the `scope` and `scp` claims are sets of
//! space-separated scopes, and a denial of a verified JWT that an Allow rule would admit with
//! more scopes is a 403 `insufficient_scope` challenge naming that rule's scopes.

use std::collections::HashMap;

use crate::common::*;
use mcp_access_engine::flow::{drive, Next, Reply, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::JwtPrincipal;
use serde_json::{json, Value};

const ISSUER: &str = "https://idp.example";
const METADATA: &str = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";

/// A JWT source of `ISSUER` with these claim conditions.
fn jwt_source(claims: Value) -> Value {
    json!({"type": "JWT", "jwt": {"issuer": ISSUER, "claims": claims}})
}

/// An Allow (or Deny) policy at `level` whose rules each admit `tools/call` of `tools` for
/// their source.
fn policy(name: &str, level: &str, action: &str, rules: &[(&str, Value, &[&str])]) -> Value {
    let target = if level == "Gateway" { "gw" } else { "tools" };
    let rules: Vec<Value> = rules
        .iter()
        .map(|(rule, source, tools)| {
            json!({"name": rule, "source": source, "authorization": {"mcp": {
                "methods": [{"name": "tools/call", "params": tools}]}}})
        })
        .collect();
    json!({"name": name, "level": level, "targets": [{"name": target}], "action": action,
           "rules": rules})
}

fn with_jwt(policies: Vec<Value>) -> Value {
    let mut b = bundle(policies, &[]);
    b["identity"]["jwt"] = json!({"providers": [{"issuer": ISSUER, "metadataKey": "idp"}]});
    b
}

/// A policy whose one rule `rule` admits `tools/call` of `echo` for tokens whose `scope`
/// holds one of `scopes`.
fn on_scope(name: &str, level: &str, action: &str, rule: &str, scopes: &[&str]) -> Value {
    let source = jwt_source(json!([{"name": "scope", "values": scopes}]));
    policy(name, level, action, &[(rule, source, &["echo"])])
}

fn token(e: &Engine, claims: Value) -> JwtPrincipal {
    let mut c = claims;
    c["iss"] = json!(ISSUER);
    e.jwt_principal(&c).unwrap()
}

/// Whether a Backend rule with claim condition `{name, values}` admits a caller whose token
/// has `claims`.
fn admits(name: &str, values: &[&str], claims: Value) -> bool {
    let source = jwt_source(json!([{"name": name, "values": values}]));
    let e = engine(&with_jwt(vec![policy(
        "p",
        "Backend",
        "Allow",
        &[("r", source, &["echo"])],
    )]));
    let mut req = call("echo");
    req.caller.jwts = vec![token(&e, claims)];
    is_allow(&run(&e, &req, &HashMap::new()).0)
}

#[test]
fn a_scope_claim_is_a_set_of_space_separated_scopes() {
    assert!(admits("scope", &["b"], json!({"scope": "a b c"})));
    assert!(admits("scope", &["x", "c"], json!({"scope": "a b c"})));
    assert!(!admits("scope", &["a"], json!({"scope": "ab"})));
    assert!(!admits("scope", &["b"], json!({"scope": "a bc"})));
    // Repeated, leading and trailing spaces make no scope.
    assert!(admits("scope", &["b"], json!({"scope": "a  b"})));
    assert!(admits("scope", &["a"], json!({"scope": "  a b "})));
    assert!(admits("scope", &["b"], json!({"scope": "  a b "})));
    // Only ASCII spaces separate (for an Allow rule).
    assert!(!admits("scope", &["b"], json!({"scope": "a\tb"})));
    assert!(!admits("scope", &["a"], json!({"scope": "a\u{a0}b"})));
    // A missing claim, an empty one.
    assert!(!admits("scope", &["a"], json!({"sub": "u1"})));
    assert!(!admits("scope", &["a"], json!({"scope": ""})));
}

#[test]
fn scp_is_a_set_too_as_a_string_or_an_array() {
    assert!(admits("scp", &["y"], json!({"scp": "x y"})));
    assert!(!admits("scp", &["x"], json!({"scp": "xy"})));
    assert!(admits("scp", &["y"], json!({"scp": ["x", "y"]})));
    // Array elements are compared whole, as any list claim's.
    assert!(!admits("scp", &["y"], json!({"scp": ["x y"]})));
    assert!(admits("scope", &["y"], json!({"scope": ["x", "y"]})));
}

#[test]
fn other_claims_and_nested_scopes_are_not_split() {
    assert!(!admits("groups", &["a"], json!({"groups": "a b"})));
    assert!(admits("groups", &["a b"], json!({"groups": "a b"})));
    assert!(!admits("x.scope", &["a"], json!({"x": {"scope": "a b"}})));
    assert!(admits("x.scope", &["a b"], json!({"x": {"scope": "a b"}})));
    assert!(!admits("x.scp", &["a"], json!({"x": {"scp": "a b"}})));
}

#[test]
fn a_deny_rule_on_a_scope_matches_any_token_holding_it() {
    let deny = on_scope("no-admin", "Backend", "Deny", "admins", &["admin"]);
    let allow = policy(
        "all",
        "Backend",
        "Allow",
        &[("any", json!({"type": "Any"}), &["echo"])],
    );
    let e = engine(&with_jwt(vec![deny, allow]));
    let decide = |scope: &str| {
        let mut req = call("echo");
        req.caller.jwts = vec![token(&e, json!({"scope": scope}))];
        is_allow(&run(&e, &req, &HashMap::new()).0)
    };
    assert!(!decide("tools:read admin"));
    assert!(!decide("admin"));
    assert!(decide("tools:read administrator"));
    // Other whitespace separates too for a Deny rule: a server splitting on whitespace
    // would read these tokens as holding `admin` (an Allow rule does not, above).
    for scope in [
        "read\tadmin",
        "read\nadmin",
        "read\u{a0}admin",
        "read\u{3000}admin",
        "\tadmin\t",
    ] {
        assert!(!decide(scope), "{scope:?}");
    }
    assert!(decide("read\tadministrator"));
}

#[test]
fn a_scope_value_that_could_never_match_is_refused() {
    for (name, value) in [
        ("scope", "a b"),
        ("scp", "a b"),
        ("scope", ""),
        ("scope", "a\tb"),
        ("scp", "a\u{a0}b"),
        ("scope", "admin\n"),
    ] {
        let source = jwt_source(json!([{"name": name, "values": ["ok", value]}]));
        let b = with_jwt(vec![policy(
            "p",
            "Backend",
            "Deny",
            &[("r", source, &["echo"])],
        )]);
        let err = Engine::from_json(b.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("jwt.claims[0].values[1]"), "{err}");
        assert!(err.contains("matched per scope"), "{err}");
    }
    // Elsewhere a space is a character like any other.
    let source = jwt_source(json!([{"name": "x.scope", "values": ["a b"]}]));
    engine(&with_jwt(vec![policy(
        "p",
        "Backend",
        "Allow",
        &[("r", source, &["echo"])],
    )]));
}

/// A tools/call of `tool` (id 7) on listener 8443 by a caller with SPIFFE ID `ALPHA` and
/// `claims` in a verified token (none: no token): the flow and its answer.
fn call_with(e: &Engine, tool: &str, claims: Option<Value>) -> (RequestFlow, Next) {
    call_answered(e, tool, claims, 200)
}

/// [`call_with`], any authorizer answering `status`.
fn call_answered(
    e: &Engine,
    tool: &str,
    claims: Option<Value>,
    status: u16,
) -> (RequestFlow, Next) {
    let mut input = post_input(ALPHA, &[]);
    input.caller.jwts = claims.map(|c| token(e, c)).into_iter().collect();
    let mut flow = RequestFlow::traced();
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}"}}}}"#);
    let a = flow
        .on_body(e, body.len(), true, move |_| Some(body.into_bytes()))
        .next;
    let a = drive(&mut flow, e, a, |_| Reply::status(status));
    (flow, a)
}

/// Status and `WWW-Authenticate` of a denial, after checking its body is the usual error.
fn denial(next: &Next) -> (u16, Option<String>) {
    let Next::Respond(r) = next else {
        panic!("expected a denial, got {next:?}")
    };
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (&body["id"], &body["error"]["code"]),
        (&json!(7), &json!(-32010))
    );
    let challenge = r
        .headers
        .iter()
        .find(|(n, _)| n == "www-authenticate")
        .map(|(_, v)| v.clone());
    (r.status, challenge)
}

fn insufficient(scope: &str) -> Option<String> {
    Some(format!(
        "Bearer error=\"insufficient_scope\", scope=\"{scope}\""
    ))
}

/// Backend `tools`: `echo` for tokens with `tools:read`, `delete` for tokens with
/// `tools:write` whose `groups` hold `ops`.
fn scoped() -> Value {
    with_jwt(vec![policy(
        "scoped",
        "Backend",
        "Allow",
        &[
            (
                "readers",
                jwt_source(json!([{"name": "scope", "values": ["tools:read"]}])),
                &["echo"],
            ),
            (
                "ops-writers",
                jwt_source(json!([
                    {"name": "groups", "values": ["ops"]},
                    {"name": "scp", "values": ["tools:write"]}
                ])),
                &["delete"],
            ),
        ],
    )])
}

/// [`scoped`] with policy `p` too.
fn scoped_with(p: Value) -> Engine {
    let mut b = scoped();
    b["policies"].as_array_mut().unwrap().push(p);
    engine(&b)
}

#[test]
fn a_token_short_of_a_scope_a_rule_names_gets_insufficient_scope() {
    let e = engine(&scoped());
    let (flow, next) = call_with(&e, "echo", Some(json!({"scope": "tools:list"})));
    assert_eq!(denial(&next), (403, insufficient("tools:read")));
    let o = flow.outcome().unwrap();
    assert_eq!((o.reason.as_str(), o.status), ("not_allowed", Some(403)));
    assert!(flow
        .trace()
        .iter()
        .any(|t| t.rule.as_deref() == Some("readers")
            && t.event.to_string().contains("insufficient_scope")));
    // The other conditions of the rule hold, the issuer's included: only its scopes fail.
    let (_, next) = call_with(
        &e,
        "delete",
        Some(json!({"groups": ["ops"], "scp": ["tools:read"]})),
    );
    assert_eq!(denial(&next), (403, insufficient("tools:write")));
    // With the scope, allowed.
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "tools:list tools:read"})));
    assert!(matches!(next, Next::Allow { .. }), "{next:?}");
}

#[test]
fn no_challenge_when_another_condition_fails_too() {
    let e = engine(&scoped());
    // No rule admits `other` at all.
    let (_, next) = call_with(&e, "other", Some(json!({"scope": "tools:list"})));
    assert_eq!(denial(&next), (403, None));
    // `delete` needs the ops group as well.
    let (_, next) = call_with(&e, "delete", Some(json!({"groups": ["dev"], "scp": "x"})));
    assert_eq!(denial(&next), (403, None));
    let (_, next) = call_with(&e, "delete", Some(json!({"scp": "x"})));
    assert_eq!(denial(&next), (403, None));
    // No token at all (the SPIFFE ID is no bearer token).
    let (_, next) = call_with(&e, "echo", None);
    assert_eq!(denial(&next), (403, None));
}

#[test]
fn subject_and_cel_conditions_must_hold_for_a_challenge() {
    let source = json!({"type": "JWT", "jwt": {"issuer": ISSUER, "subject": "u1",
                        "claims": [{"name": "scope", "values": ["s"]}]}});
    let mut p = policy("p", "Backend", "Allow", &[("r", source, &["echo"])]);
    let e = engine(&with_jwt(vec![p.clone()]));
    let (_, next) = call_with(&e, "echo", Some(json!({"sub": "u2"})));
    assert_eq!(denial(&next), (403, None));
    let (_, next) = call_with(&e, "echo", Some(json!({"sub": "u1"})));
    assert_eq!(denial(&next), (403, insufficient("s")));
    // A CEL condition that is false, or errs (counts against the caller): no challenge.
    for (when, challenged) in [
        ("jwt.claims.sub == 'u1'", true),
        ("jwt.claims.sub == 'u9'", false),
        ("jwt.claims.missing == 'x'", false),
    ] {
        p["rules"][0]["when"] = json!([when]);
        let e = engine(&with_jwt(vec![p.clone()]));
        let (flow, next) = call_with(&e, "echo", Some(json!({"sub": "u1"})));
        let want = if challenged { insufficient("s") } else { None };
        assert_eq!(denial(&next), (403, want), "{when}");
        // Judging the rule for a challenge adds no CEL error to the decision's (which never
        // reached the condition: the source failed first).
        assert_eq!(flow.outcome().unwrap().cel_errors, (0, 0), "{when}");
    }
}

#[test]
fn the_first_qualifying_rule_names_the_scopes_each_once() {
    let rules: [(&str, Value, &[&str]); 2] = [
        (
            "first",
            jwt_source(json!([
                {"name": "scope", "values": ["a", "b"]},
                {"name": "scp", "values": ["b", "c"]}
            ])),
            &["echo"],
        ),
        (
            "second",
            jwt_source(json!([{"name": "scope", "values": ["z"]}])),
            &["echo"],
        ),
    ];
    let e = engine(&with_jwt(vec![policy("p", "Backend", "Allow", &rules)]));
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "q"})));
    assert_eq!(denial(&next), (403, insufficient("a b c")));
}

#[test]
fn deny_rules_authorizers_and_dry_run_policies_give_no_challenge() {
    let deny = on_scope("no-admin", "Backend", "Deny", "admins", &["admin"]);
    let e = scoped_with(deny);
    let (flow, next) = call_with(&e, "echo", Some(json!({"scope": "admin"})));
    assert_eq!(denial(&next), (403, None));
    assert_eq!(flow.outcome().unwrap().reason.as_str(), "deny_policy");

    // An authorizer's denial is relayed as it is.
    let mut b = scoped();
    b["policies"]
        .as_array_mut()
        .unwrap()
        .push(ext("check", "Backend", "tools", "authz", 0));
    b["authorizers"] = json!([{"name": "authz", "cluster": "authz-cluster"}]);
    let e = engine(&b);
    let (_, next) = call_answered(&e, "echo", Some(json!({"scope": "tools:list"})), 401);
    assert_eq!(denial(&next), (401, None));

    // A dry-run policy's rule never challenges: the enforced decision does not have it.
    let mut dry = on_scope("dry", "Backend", "Allow", "r", &["s"]);
    dry["mode"] = json!("DryRun");
    let only_other = policy(
        "other",
        "Backend",
        "Allow",
        &[("r", json!({"type": "Any"}), &["x"])],
    );
    let e = engine(&with_jwt(vec![only_other, dry]));
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "t"})));
    assert_eq!(denial(&next), (403, None));
}

#[test]
fn the_level_that_denies_names_its_rule() {
    // The Gateway admits any token of the issuer; the Backend wants a scope.
    let gateway = policy(
        "gw-any",
        "Gateway",
        "Allow",
        &[("tokens", jwt_source(json!([])), &["echo"])],
    );
    let e = scoped_with(gateway);
    let (flow, next) = call_with(&e, "echo", Some(json!({"scope": "x"})));
    assert_eq!(denial(&next), (403, insufficient("tools:read")));
    assert_eq!(
        flow.outcome()
            .unwrap()
            .level
            .map(|l| format!("{l:?}"))
            .as_deref(),
        Some("Backend")
    );
    // The Gateway wants one too: its denial names its own.
    let gateway = on_scope("gw-scoped", "Gateway", "Allow", "mcp", &["mcp"]);
    let e = scoped_with(gateway);
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "x"})));
    assert_eq!(denial(&next), (403, insufficient("mcp")));
}

#[test]
fn the_challenge_names_the_metadata_and_is_403_whatever_the_deny_status() {
    let mut b = scoped();
    b["gateways"][0]["listeners"][0]["protectedResource"] = json!({
        "resource": "https://mcp.example.com/mcp",
        "authorizationServers": ["https://auth.example.com"],
    });
    b["denyResponse"] = json!({"httpStatus": 200});
    let e = engine(&b);
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "x"})));
    let want = format!(
        "Bearer error=\"insufficient_scope\", scope=\"tools:read\", resource_metadata=\"{METADATA}\""
    );
    assert_eq!(denial(&next), (403, Some(want)));
    // Other denials keep the operator's status.
    let (_, next) = call_with(&e, "other", Some(json!({"scope": "x"})));
    assert_eq!(denial(&next), (200, None));
}

#[test]
fn a_scope_that_is_no_scope_token_is_left_out_of_the_challenge() {
    for value in ["a\"b", "a\\b", "a\u{1}b", "a\u{7f}b", "é", "a,b=\"c\""] {
        let source = jwt_source(json!([{"name": "scope", "values": ["fine", value]}]));
        let mut b = with_jwt(vec![policy(
            "p",
            "Backend",
            "Allow",
            &[("r", source, &["echo"])],
        )]);
        b["gateways"][0]["listeners"][0]["protectedResource"] = json!({
            "resource": "https://mcp.example.com/mcp",
            "authorizationServers": ["https://auth.example.com"],
        });
        let e = engine(&b);
        let (_, next) = call_with(&e, "echo", Some(json!({"scope": "x"})));
        let want = format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{METADATA}\"");
        assert_eq!(denial(&next), (403, Some(want)), "{value:?}");
    }
    // Too long for a header: left out too.
    let long: Vec<String> = (0..16).map(|i| format!("{i}{}", "s".repeat(200))).collect();
    let source = jwt_source(json!([{"name": "scope", "values": long}]));
    let e = engine(&with_jwt(vec![policy(
        "p",
        "Backend",
        "Allow",
        &[("r", source, &["echo"])],
    )]));
    let (_, next) = call_with(&e, "echo", Some(json!({"scope": "x"})));
    assert_eq!(
        denial(&next),
        (403, Some("Bearer error=\"insufficient_scope\"".into()))
    );
}

/// A `completion/complete` of prompt `greet` (id 7) by a caller whose verified token has
/// `scope`: the answer.
fn complete_greet(e: &Engine, scope: &str) -> Next {
    let mut input = post_input(ALPHA, &[]);
    input.caller.jwts = vec![token(e, json!({"scope": scope}))];
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"a","value":"b"}}}"#;
    let a = flow
        .on_body(e, body.len(), true, move |_| Some(body.as_bytes().to_vec()))
        .next;
    drive(&mut flow, e, a, |_| Reply::status(200))
}

#[test]
fn a_named_item_short_of_a_scope_gets_the_challenge_too() {
    // Anyone may complete; the prompt completed is judged as prompts/get of it (§4), which
    // needs `prompts:read`.
    let p = json!({"name": "prompts", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Allow", "rules": [
            {"name": "complete", "source": {"type": "Any"},
             "authorization": {"mcp": {"baseProtocol": "Match"}}},
            {"name": "prompt-readers",
             "source": jwt_source(json!([{"name": "scope", "values": ["prompts:read"]}])),
             "authorization": {"mcp": {"methods": [{"name": "prompts/get", "params": ["greet"]}]}}}]});
    let e = engine(&with_jwt(vec![p]));
    assert_eq!(
        denial(&complete_greet(&e, "tools:read")),
        (403, insufficient("prompts:read"))
    );
    let allowed = complete_greet(&e, "tools:read prompts:read");
    assert!(matches!(allowed, Next::Allow { .. }), "{allowed:?}");
}
