//! Every way the flow denies or rejects a request has a denial counter defined up front.

use crate::common;

use common::*;
use mcp_access_engine::answer::Why;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::request::Caller;
use mcp_access_engine::stats::{denial_counter, denial_counter_names};
use serde_json::json;

fn input(method: &str, path: &str, port: u16, extra: &[(&str, &str)]) -> HeadersInput {
    let mut headers: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        (":authority".into(), "gw.example.org".into()),
    ];
    // What an MCP client sends with a body, unless the test gives its own type.
    if method == "POST" && !extra.iter().any(|(n, _)| *n == "content-type") {
        headers.push(("content-type".into(), "application/json".into()));
    }
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    HeadersInput {
        peers: None,
        headers: headers.into(),
        end_of_stream: method != "POST",
        time: None,
        port,
        route_name: Some("tools-route".into()),
        cluster_name: None,
        caller: Caller {
            credential: false,
            spiffe: Some(ALPHA.into()),
            jwts: vec![],
        },
    }
}

#[test]
fn every_denial_and_rejection_reason_has_a_counter() {
    let mut b = bundle(
        vec![
            inline_tools("only-echo", "Backend", "tools", &["echo"]),
            json!({"name": "no-rm", "level": "Gateway", "targets": [{"name": "gw"}], "action": "Deny",
                   "rules": [{"name": "rm", "authorization": {"mcp": {"methods": [
                       {"name": "tools/call", "params": ["rm"]}]}}}]}),
        ],
        &[],
    );
    b["limits"] = json!({"maxBodyBytes": 200});
    b["envoy"] = json!({"unknownBackend": "Deny"});
    let e = engine(&b);
    let call = |tool: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#)
    };
    let post = |extra: &[(&str, &str)]| input("POST", "/mcp", 8443, extra);
    let mut unrouted = post(&[]);
    unrouted.route_name = None;
    let cases: Vec<(HeadersInput, Vec<u8>)> = vec![
        (post(&[]), call("get_weather").into_bytes()),
        (post(&[]), call("rm").into_bytes()),
        (input("POST", "/mcp", 1, &[]), call("echo").into_bytes()),
        (unrouted, call("echo").into_bytes()),
        (input("POST", "/a%2", 8443, &[]), Vec::new()),
        (post(&[("content-encoding", "gzip")]), Vec::new()),
        (post(&[("content-type", "text/plain")]), Vec::new()),
        (post(&[("content-length", "x")]), Vec::new()),
        (post(&[("content-length", "201")]), Vec::new()),
        (post(&[]), b"{".to_vec()),
        (
            post(&[]),
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#.to_vec(),
        ),
        (
            post(&[]),
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#.to_vec(),
        ),
        (
            post(&[("mcp-method", "tools/list")]),
            call("echo").into_bytes(),
        ),
        (
            post(&[("mcp-protocol-version", "2024-11-05")]),
            call("echo").into_bytes(),
        ),
        (
            post(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "ping"),
            ]),
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec(),
        ),
    ];
    let names = denial_counter_names();
    let mut seen = Vec::new();
    for (i, (input, body)) in cases.into_iter().enumerate() {
        let mut flow = RequestFlow::new();
        if flow.on_headers(&e, input).next == Next::Hold {
            flow.on_body(&e, body.len(), true, move |_| Some(body));
        }
        let o = flow.outcome().expect("decided");
        assert!(!o.allowed, "case {i}");
        let name = denial_counter(o.level, o.reason).and_then(|i| names.get(i));
        assert!(name.is_some(), "case {i}: no counter for {o:?}");
        seen.push(o.reason);
    }
    // An allowed call whose identity headers the host could not set: refused, with its id.
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(&e, post(&[])).next, Next::Hold);
    let body = call("echo").into_bytes();
    let next = flow.on_body(&e, body.len(), true, move |_| Some(body)).next;
    assert!(matches!(next, Next::Allow { .. }), "{next:?}");
    let Next::Respond(r) = flow.edit_failed().next else {
        panic!("not refused")
    };
    let answer: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!((r.status, &answer["id"]), (500, &json!(1)));
    assert_eq!(answer["error"]["code"], -32603);
    let o = flow.outcome().expect("decided");
    assert!(!o.allowed && denial_counter(o.level, o.reason).is_some());
    seen.push(o.reason);
    // The authorizer reasons are covered by the flow's callout tests, the pins' by pins.rs,
    // rate limits' by ratelimit.rs.
    let mut missing: Vec<&str> = Why::DENIALS
        .iter()
        .filter(|r| !seen.contains(r))
        .map(|r| r.as_str())
        .collect();
    missing.sort();
    assert_eq!(
        missing,
        [
            "authorizer_error",
            "external_auth_denied",
            "rate_limited",
            "tool_drifted",
            "tool_not_pinned"
        ]
    );
}
