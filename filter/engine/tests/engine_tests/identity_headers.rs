//! Identity headers (docs/semantics.md §5.7): on an allowed request every identity header of
//! the bundle is removed (in any spelling a server may read as it), then the backend's are set
//! from the caller; a denied request carries nothing.

use crate::common::*;
use mcp_access_engine::flow::{drive, Next, Reply, RequestFlow};
use mcp_access_engine::policy::{Engine, HeaderEdit, HeaderOp};
use mcp_access_engine::request::Headers;
use mcp_access_engine::request::JwtPrincipal;
use serde_json::{json, Value};

const ISSUER: &str = "https://idp.example";

/// `tools` sends its server the SPIFFE ID, the JWT subject and issuer, and two claims;
/// `other` only the team. Only `echo` may be called at `tools`, after an authorizer said yes.
fn identity_bundle() -> Value {
    let mut b = bundle(
        vec![
            inline_tools("only-echo", "Backend", "tools", &["echo"]),
            ext("check", "Backend", "tools", "authz", 0),
        ],
        &["authz"],
    );
    b["identity"]["jwt"] = json!({"providers": [{"issuer": ISSUER, "metadataKey": "idp"}]});
    b["backends"][0]["identityHeaders"] = json!([
        {"name": "x-caller-spiffe", "from": "SPIFFE"},
        {"name": "x-caller-sub", "from": "JWTSubject"},
        {"name": "x-caller-iss", "from": "JWTIssuer"},
        {"name": "x-caller-team", "from": "JWTClaim", "claim": "org.team"},
        {"name": "x-caller-groups", "from": "JWTClaim", "claim": "groups"},
    ]);
    b["backends"][1]["identityHeaders"] =
        json!([{"name": "x-team", "from": "JWTClaim", "claim": "org.team"}]);
    b
}

fn principal(e: &Engine, claims: Value) -> JwtPrincipal {
    e.jwt_principal(&claims).unwrap()
}

/// A tools/call of `tool` by a caller with `spiffe` and `jwts`, with `extra` headers.
fn call(e: &Engine, tool: &str, jwts: Vec<JwtPrincipal>, extra: &[(&str, &str)]) -> Next {
    let mut input = post_input(ALPHA, extra);
    input.caller.jwts = jwts;
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#);
    let a = flow
        .on_body(e, body.len(), true, move |_| Some(body.into_bytes()))
        .next;
    drive(&mut flow, e, a, |_| Reply::Http {
        status: Some(200),
        headers: Headers::from(vec![("x-caller-sub", "from-the-authorizer")]),
        body: vec![],
    })
}

fn edits(next: &Next) -> (Vec<HeaderEdit>, Vec<HeaderEdit>) {
    match next {
        Next::Allow {
            add_headers,
            identity_headers,
            ..
        } => (add_headers.clone(), identity_headers.clone()),
        other => panic!("expected an allow, got {other:?}"),
    }
}

fn removed(edits: &[HeaderEdit]) -> Vec<&str> {
    edits
        .iter()
        .filter(|e| e.op == HeaderOp::Remove)
        .map(|e| e.name.as_str())
        .collect()
}

fn set(edits: &[HeaderEdit]) -> Vec<(&str, &str)> {
    edits
        .iter()
        .filter(|e| e.op == HeaderOp::Set)
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect()
}

const ALL: [&str; 6] = [
    "x-caller-groups",
    "x-caller-iss",
    "x-caller-spiffe",
    "x-caller-sub",
    "x-caller-team",
    "x-team",
];

#[test]
fn every_copy_is_removed_then_the_callers_identity_set() {
    let e = engine(&identity_bundle());
    let jwt = principal(
        &e,
        json!({"iss": ISSUER, "sub": "u1", "org": {"team": "blue"}, "groups": ["a", "b"]}),
    );
    let forged = [
        ("x-caller-sub", "admin"),
        ("x-caller-sub", "root"),
        ("x_caller_sub", "admin"),
        ("x-caller_team", "red"),
        ("x-team", "red"),
    ];
    let (add, identity) = edits(&call(&e, "echo", vec![jwt], &forged));
    // Removals first: every identity header of the bundle, and the spellings with '_'.
    let mut gone = ALL.to_vec();
    gone.extend(["x_caller_sub", "x-caller_team"]);
    assert_eq!(removed(&identity), gone);
    assert!(identity[..gone.len()]
        .iter()
        .all(|e| e.op == HeaderOp::Remove));
    assert_eq!(
        set(&identity),
        [
            ("x-caller-spiffe", ALPHA),
            ("x-caller-sub", "u1"),
            ("x-caller-iss", ISSUER),
            ("x-caller-team", "blue"),
            ("x-caller-groups", "[\"a\",\"b\"]"),
        ]
    );
    // The authorizer's edit comes first; the host applies the identity edits after it.
    assert_eq!(set(&add), [("x-caller-sub", "from-the-authorizer")]);
}

#[test]
fn a_caller_without_that_identity_gets_no_header() {
    let e = engine(&identity_bundle());
    // No JWT: only the SPIFFE ID.
    let (_, identity) = edits(&call(&e, "echo", vec![], &[("x-caller-sub", "admin")]));
    assert_eq!(removed(&identity), ALL);
    assert_eq!(set(&identity), [("x-caller-spiffe", ALPHA)]);
    // No such claim, a value that is no header value, two verified JWTs: absent.
    let odd = principal(
        &e,
        json!({"iss": ISSUER, "sub": "a\nb", "org": {"team": "x\r\ny"}}),
    );
    let (_, identity) = edits(&call(&e, "echo", vec![odd], &[]));
    assert_eq!(
        set(&identity),
        [("x-caller-spiffe", ALPHA), ("x-caller-iss", ISSUER)]
    );
    let one = principal(&e, json!({"iss": ISSUER, "sub": "u1"}));
    let (_, identity) = edits(&call(&e, "echo", vec![one.clone(), one], &[]));
    assert_eq!(set(&identity), [("x-caller-spiffe", ALPHA)]);
}

#[test]
fn a_denied_request_carries_nothing_and_other_backends_lose_the_copies_too() {
    let e = engine(&identity_bundle());
    let next = call(&e, "delete_repo", vec![], &[("x-caller-sub", "admin")]);
    assert!(
        matches!(next, Next::Respond(ref r) if r.status == 403),
        "{next:?}"
    );
    // A request to `other`: its own header set, every other identity header still removed.
    let mut input = post_input(ALPHA, &[("x-caller-spiffe", "spiffe://forged")]);
    input.route_name = None;
    input.cluster_name = Some("other-cluster".into());
    input.caller.jwts = vec![principal(&e, json!({"iss": ISSUER, "org": {"team": 7}}))];
    let mut flow = RequestFlow::new();
    flow.on_headers(&e, input);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec();
    let next = flow.on_body(&e, body.len(), true, move |_| Some(body)).next;
    let (_, identity) = edits(&next);
    assert_eq!(removed(&identity), ALL);
    assert_eq!(set(&identity), [("x-team", "7")]);
}

#[test]
fn without_identity_headers_nothing_is_edited() {
    let e = engine(&bundle(vec![], &[]));
    let mut flow = RequestFlow::new();
    let mut input = post_input(ALPHA, &[("x-caller-sub", "admin")]);
    input.end_of_stream = true;
    input.headers.set(":method", "GET");
    input.headers.retain(|n, _| n != "content-type");
    let (_, identity) = edits(&flow.on_headers(&e, input).next);
    assert!(identity.is_empty());
}

/// The request's outcome after `call`, as the decision record shows it.
fn omitted(e: &Engine, jwts: Vec<JwtPrincipal>) -> (Vec<(String, String)>, Value) {
    let mut input = post_input(ALPHA, &[]);
    input.caller.jwts = jwts;
    let mut flow = RequestFlow::new();
    flow.on_headers(e, input);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
    let a = flow
        .on_body(e, body.len(), true, |_| Some(body.to_vec()))
        .next;
    let next = drive(&mut flow, e, a, |_| Reply::status(200));
    let (_, identity) = edits(&next);
    let set = set(&identity)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let record: Value = serde_json::from_str(&flow.outcome().unwrap().to_json(e)).unwrap();
    (set, record["identity_headers_omitted"].clone())
}

#[test]
fn a_value_a_server_would_read_otherwise_is_left_out_and_the_record_says_why() {
    let e = engine(&identity_bundle());
    // Every HTTP parser strips leading and trailing space and tab: " admin " would be read as
    // "admin", another identity than the caller's.
    let padded = principal(
        &e,
        json!({"iss": ISSUER, "sub": " admin ", "org": {"team": "ops\t"}, "groups": ["a"]}),
    );
    let (set, why) = omitted(&e, vec![padded]);
    assert_eq!(
        set,
        [
            ("x-caller-spiffe".to_string(), ALPHA.to_string()),
            ("x-caller-iss".to_string(), ISSUER.to_string()),
            ("x-caller-groups".to_string(), "[\"a\"]".to_string()),
        ]
    );
    assert_eq!(
        why,
        json!([
            {"name": "x-caller-sub", "reason": "has leading or trailing whitespace"},
            {"name": "x-caller-team", "reason": "has leading or trailing whitespace"},
        ])
    );
    // Every other cause is named too, never the value.
    let odd = principal(&e, json!({"iss": ISSUER, "sub": "a\nb"}));
    let (_, why) = omitted(&e, vec![odd]);
    assert_eq!(
        why,
        json!([
            {"name": "x-caller-sub", "reason": "holds a control character (CR, LF, NUL or another)"},
            {"name": "x-caller-team", "reason": "the JWT has no such claim"},
            {"name": "x-caller-groups", "reason": "the JWT has no such claim"},
        ])
    );
    let (_, why) = omitted(&e, vec![]);
    assert_eq!(
        why[0],
        json!({"name": "x-caller-sub", "reason": "no verified JWT"})
    );
    // A request that lacks nothing records nothing.
    let full = principal(
        &e,
        json!({"iss": ISSUER, "sub": "u1", "org": {"team": "ops"}, "groups": []}),
    );
    assert_eq!(omitted(&e, vec![full]).1, Value::Null);
}

#[test]
fn trailers_lose_every_identity_header_by_the_same_removals() {
    let e = engine(&identity_bundle());
    let names = |edits: Vec<HeaderEdit>| -> Vec<String> {
        assert!(edits.iter().all(|e| e.op == HeaderOp::Remove));
        edits.into_iter().map(|e| e.name).collect()
    };
    let from_trailers = names(e.identity_removals(["x_caller_sub", "x-other", "X-CALLER-SPIFFE"]));
    assert!(
        from_trailers.iter().any(|n| n == "x_caller_sub"),
        "{from_trailers:?}"
    );
    for n in ALL {
        assert!(from_trailers.iter().any(|t| t == n), "{n}");
    }
    assert!(!from_trailers.iter().any(|n| n == "x-other"));
    assert!(engine(&bundle(vec![], &[]))
        .identity_removals(["x-caller-sub"])
        .is_empty());
}
