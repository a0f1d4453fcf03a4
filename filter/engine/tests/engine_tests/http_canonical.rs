//! Requests are judged on canonical attributes: one agreeing copy of each MCP header, the
//! canonical path, every copy of a repeated header (against the caller), the canonical host.

use crate::common;

use common::*;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Caller;
use serde_json::{json, Value};

/// One request through the flow: headers (pseudo-headers included), then `body` if any.
fn send(
    e: &Engine,
    method: &str,
    path: &str,
    authority: &str,
    extra: &[(&str, &str)],
    body: Option<&str>,
) -> Next {
    let mut headers: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        (":authority".into(), authority.into()),
    ];
    // What an MCP client sends with a body, unless the test gives its own type.
    if body.is_some() && !extra.iter().any(|(n, _)| *n == "content-type") {
        headers.push(("content-type".into(), "application/json".into()));
    }
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    let mut flow = RequestFlow::new();
    let input = HeadersInput {
        peers: None,
        headers: headers.into(),
        end_of_stream: body.is_none(),
        time: None,
        port: 8443,
        route_name: Some("tools-route".into()),
        cluster_name: None,
        caller: Caller {
            credential: false,
            spiffe: Some(ALPHA.into()),
            jwts: vec![],
        },
    };
    let a = flow.on_headers(e, input).next;
    let Some(body) = body else { return a };
    if a != Next::Hold {
        return a;
    }
    let owned = body.as_bytes().to_vec();
    flow.on_body(e, owned.len(), true, move |_| Some(owned))
        .next
}

fn post(e: &Engine, extra: &[(&str, &str)], body: &str) -> Next {
    send(e, "POST", "/mcp", "gw.example.org", extra, Some(body))
}

/// (status, JSON-RPC error code) of a local answer; (0, 0) when the request goes on.
fn answer(a: Next) -> (u16, i64) {
    match a {
        Next::Respond(r) => {
            let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            (r.status, v["error"]["code"].as_i64().unwrap_or(0))
        }
        Next::Allow { .. } => (0, 0),
        other => panic!("unexpected {other:?}"),
    }
}

const ALLOWED: (u16, i64) = (0, 0);
const DENIED: (u16, i64) = (403, -32010);
const MISMATCH: (u16, i64) = (400, -32020);
const BAD_PATH: (u16, i64) = (400, -32600);

fn call(tool: &str, version: Option<&str>) -> String {
    let meta = version.map_or(String::new(), |v| {
        format!(r#","_meta":{{"io.modelcontextprotocol/protocolVersion":"{v}"}}"#)
    });
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}{meta}}}}}"#
    )
}

fn policy(name: &str, action: &str, authorization: Value) -> Value {
    json!({"name": name, "level": "Gateway", "targets": [{"name": "gw"}], "action": action,
           "rules": [{"name": name, "authorization": authorization}]})
}

fn engine_with(policies: Vec<Value>, envoy: Option<Value>) -> Engine {
    let mut b = bundle(policies, &["authz"]);
    if let Some(x) = envoy {
        b["envoy"] = x;
    }
    engine(&b)
}

#[test]
fn mcp_headers_appear_once_and_agree_with_the_body() {
    let e = engine(&bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    ));
    let echo = call("echo", None);
    assert_eq!(
        answer(post(
            &e,
            &[("mcp-method", "tools/call"), ("mcp-name", "echo")],
            &echo
        )),
        ALLOWED
    );
    // Duplicates: even when the first copy agrees.
    for dup in ["mcp-method", "mcp-name", "mcp-protocol-version"] {
        let value = match dup {
            "mcp-method" => "tools/call",
            "mcp-name" => "echo",
            _ => "2025-11-25",
        };
        let a = post(&e, &[(dup, value), (dup, value)], &echo);
        assert_eq!(answer(a), MISMATCH, "{dup} twice");
    }
    let a = post(
        &e,
        &[("mcp-name", "echo"), ("mcp-name", "delete_repo")],
        &echo,
    );
    assert_eq!(answer(a), MISMATCH);
    assert_eq!(
        answer(post(&e, &[("mcp-method", "tools/list")], &echo)),
        MISMATCH
    );
    assert_eq!(
        answer(post(&e, &[("mcp-name", "delete_repo")], &echo)),
        MISMATCH
    );
    // The Base64 sentinel is decoded before comparing; a malformed one never agrees.
    assert_eq!(
        answer(post(&e, &[("mcp-name", "=?base64?ZWNobw==?=")], &echo)),
        ALLOWED
    );
    assert_eq!(
        answer(post(
            &e,
            &[("mcp-name", "=?base64?ZGVsZXRlX3JlcG8=?=")],
            &echo
        )),
        MISMATCH
    );
    assert_eq!(
        answer(post(&e, &[("mcp-name", "=?base64?ZWNobw?=")], &echo)),
        MISMATCH
    );
    let odd = call("=?base64?ZWNobw==?=", None);
    assert_eq!(
        answer(post(&e, &[("mcp-name", "=?base64?ZWNobw==?=")], &odd)),
        MISMATCH
    );
}

#[test]
fn protocol_version_header_agrees_with_meta_and_the_header_revision_requires_headers() {
    let e = engine(&bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    ));
    let full = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let modern = call("echo", Some("2026-07-28"));
    assert_eq!(answer(post(&e, &full, &modern)), ALLOWED);
    let other = [("mcp-protocol-version", "2025-11-25"), full[1], full[2]];
    assert_eq!(answer(post(&e, &other, &modern)), MISMATCH);
    // 2026-07-28 requires all three (Mcp-Name for tools/call), whichever side says so.
    for missing in 0..3 {
        let h: Vec<_> = full
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != missing)
            .map(|(_, h)| *h)
            .collect();
        assert_eq!(
            answer(post(&e, &h, &modern)),
            MISMATCH,
            "without {:?}",
            full[missing]
        );
        assert_eq!(
            answer(post(&e, &h, &call("echo", None))),
            if missing == 0 { ALLOWED } else { MISMATCH }
        );
    }
    // Earlier revisions: no header is required.
    let legacy = [("mcp-protocol-version", "2025-11-25")];
    assert_eq!(answer(post(&e, &legacy, &call("echo", None))), ALLOWED);
    // A protocol version that is not a string is invalid params.
    let bad = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}"#;
    assert_eq!(answer(post(&e, &[], bad)), (400, -32602));
}

#[test]
fn unparseable_content_length_is_a_bad_request() {
    let e = engine(&bundle(vec![], &[]));
    for len in ["abc", "-1", "1 2", ""] {
        let a = send(
            &e,
            "POST",
            "/mcp",
            "gw.example.org",
            &[("content-length", len)],
            Some("{}"),
        );
        assert_eq!(answer(a), BAD_PATH, "{len:?}");
    }
    let a = send(
        &e,
        "POST",
        "/mcp",
        "gw.example.org",
        &[("content-length", "99999999999")],
        Some("{}"),
    );
    assert_eq!(answer(a).0, 413);
}

fn admin_deny() -> Value {
    policy(
        "no-admin",
        "Deny",
        json!({"paths": [{"type": "PathPrefix", "value": "/mcp/admin"}]}),
    )
}

#[test]
fn path_rules_match_the_canonical_path() {
    let e = engine_with(vec![admin_deny()], None);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let at = |path: &str| answer(send(&e, "POST", path, "gw.example.org", &[], Some(ping)));
    assert_eq!(at("/mcp"), ALLOWED);
    assert_eq!(at("/mcp/administrator"), ALLOWED);
    for p in [
        "/mcp/admin",
        "/mcp/./admin",
        "/mcp/x/../admin",
        "/mcp//admin",
        "/mcp/%61dmin",
        "/mcp/%2e/admin",
        "/mcp/admin?x=1",
        "/mcp\\admin",
        "/mcp/%61dmin/%2E%2E/admin/tools",
    ] {
        assert_eq!(at(p), DENIED, "{p}");
    }
    for p in [
        "/mcp/admin%2ftools",
        "/mcp%2Fadmin",
        "/mcp%5cadmin",
        "/mcp/%00",
        "/mcp/%zz",
        "mcp/admin",
    ] {
        assert_eq!(at(p), BAD_PATH, "{p}");
    }
    // Before any policy: a GET too.
    assert_eq!(
        answer(send(&e, "GET", "/mcp%2F", "gw.example.org", &[], None)),
        BAD_PATH
    );
    // The operator may choose to read %2F / %5C as '/'.
    let d = engine_with(
        vec![admin_deny()],
        Some(json!({"escapedSlashes": "Decode"})),
    );
    let at = |path: &str| answer(send(&d, "POST", path, "gw.example.org", &[], Some(ping)));
    assert_eq!(at("/mcp%2Fadmin"), DENIED);
    assert_eq!(at("/mcp%5cadmin%2ftools"), DENIED);
    assert_eq!(at("/mcp%2Ftools"), ALLOWED);
    assert_eq!(at("/mcp/%00"), BAD_PATH);
}

#[test]
fn repeated_headers_are_resolved_against_the_caller() {
    let deny = policy(
        "intruders",
        "Deny",
        json!({"headers": [{"name": "X-Role", "value": "intruder"}]}),
    );
    let allow = policy(
        "tenants",
        "Allow",
        json!({"headers": [{"name": "x-tenant", "value": "acme"}]}),
    );
    let e = engine_with(vec![deny, allow], None);
    let get = |h: &[(&str, &str)]| answer(send(&e, "GET", "/mcp", "gw.example.org", h, None));
    assert_eq!(get(&[("x-tenant", "acme")]), ALLOWED);
    assert_eq!(get(&[("x-tenant", "acme"), ("x-tenant", "acme")]), ALLOWED);
    // Allow: every copy must match.
    assert_eq!(get(&[("x-tenant", "acme"), ("x-tenant", "evil")]), DENIED);
    assert_eq!(get(&[("x-tenant", "evil"), ("x-tenant", "acme")]), DENIED);
    assert_eq!(get(&[]), DENIED);
    // One line holding a comma is one copy, compared whole.
    assert_eq!(get(&[("x-tenant", "acme,evil")]), DENIED);
    // Deny: any copy.
    assert_eq!(
        get(&[
            ("x-tenant", "acme"),
            ("x-role", "user"),
            ("x-role", "intruder")
        ]),
        DENIED
    );
    assert_eq!(
        get(&[
            ("x-tenant", "acme"),
            ("x-role", "intruder"),
            ("x-role", "user")
        ]),
        DENIED
    );
    assert_eq!(
        get(&[("x-tenant", "acme"), ("x-role", "user,intruder")]),
        ALLOWED
    );

    let comma = policy(
        "comma",
        "Allow",
        json!({"headers": [{"name": "x-tenant", "value": "a,b"}]}),
    );
    let e = engine_with(vec![comma], None);
    let get = |h: &[(&str, &str)]| answer(send(&e, "GET", "/mcp", "gw.example.org", h, None));
    assert_eq!(get(&[("x-tenant", "a,b")]), ALLOWED);
    assert_eq!(get(&[("x-tenant", "a"), ("x-tenant", "b")]), DENIED);
}

#[test]
fn external_auth_selects_on_any_copy() {
    let mut ext = ext("audit", "Gateway", "gw", "authz", 1);
    ext["rules"] = json!([{"name": "audited", "authorization": {"headers": [{"name": "x-audit", "value": "yes"}]}}]);
    let e = engine_with(vec![ext], None);
    let get = |h: &[(&str, &str)]| send(&e, "GET", "/mcp", "gw.example.org", h, None);
    assert!(matches!(
        get(&[("x-audit", "no"), ("x-audit", "yes")]),
        Next::Dispatch(_)
    ));
    assert!(matches!(
        get(&[("x-audit", "yes"), ("x-audit", "no")]),
        Next::Dispatch(_)
    ));
    assert_eq!(answer(get(&[("x-audit", "no")])), ALLOWED);
}

#[test]
fn host_rules_match_the_canonical_host() {
    let deny = policy("blocked", "Deny", json!({"hosts": ["blocked.example"]}));
    let allow = policy(
        "ok",
        "Allow",
        json!({"hosts": ["*.ok.example", "ok.example"]}),
    );
    let e = engine_with(vec![deny, allow], None);
    let at = |authority: &str| answer(send(&e, "GET", "/mcp", authority, &[], None));
    for h in [
        "blocked.example",
        "blocked.example.",
        "BLOCKED.example.:8443",
        "blocked.example:1",
    ] {
        assert_eq!(at(h), DENIED, "{h}");
    }
    for h in [
        "a.ok.example",
        "A.Ok.Example.",
        "a.b.ok.example.:8443",
        "ok.example.",
    ] {
        assert_eq!(at(h), ALLOWED, "{h}");
    }
    for h in [
        ".ok.example",
        "..ok.example",
        "x..ok.example",
        "ok.example..",
        "nope.example",
    ] {
        assert_eq!(at(h), DENIED, "{h}");
    }
}

#[test]
fn every_copy_of_encoding_type_and_length_is_checked() {
    let e = engine(&bundle(vec![], &[]));
    let body = Some("{}");
    let at = |h: &[(&str, &str)]| answer(send(&e, "POST", "/mcp", "gw.example.org", h, body));
    let enc = [
        ("content-encoding", "identity"),
        ("content-encoding", "gzip"),
    ];
    assert_eq!(at(&enc).0, 415);
    let ct = [
        ("content-type", "application/json"),
        ("content-type", "text/plain"),
    ];
    assert_eq!(at(&ct).0, 415);
    let len = [("content-length", "2"), ("content-length", "x")];
    assert_eq!(at(&len), BAD_PATH);
}
