//! The per-request pipeline the host adapter drives: headers, body, parse, callouts, answer.

use crate::common;

use common::*;
use mcp_access_engine::flow::{CalloutAnswer, HeadersInput, Next, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::policy::HeaderEdit;
use mcp_access_engine::request::Caller;
use mcp_access_engine::request::Headers;
use serde_json::{json, Value};

fn headers(method: &str, extra: &[(&str, &str)]) -> HeadersInput {
    let mut h: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), "/mcp".into()),
        (":authority".into(), "gw.example.org".into()),
    ];
    // What an MCP client sends with a body, unless the test gives its own type.
    if method == "POST" && !extra.iter().any(|(n, _)| *n == "content-type") {
        h.push(("content-type".into(), "application/json".into()));
    }
    h.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    HeadersInput {
        peers: None,
        headers: Headers::from(h),
        end_of_stream: method != "POST",
        time: None,
        port: 8443,
        route_name: Some("tools-route".into()),
        cluster_name: None,
        caller: Caller {
            credential: false,
            spiffe: Some(ALPHA.into()),
            jwts: vec![],
        },
    }
}

fn post(engine: &Engine, body: &[u8], extra: &[(&str, &str)]) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new();
    assert_eq!(
        flow.on_headers(engine, headers("POST", extra)).next,
        Next::Hold
    );
    assert_eq!(
        flow.on_body(engine, body.len() / 2, false, |_| None).next,
        Next::Hold
    );
    let owned = body.to_vec();
    let a = flow
        .on_body(engine, body.len(), true, move |_| Some(owned))
        .next;
    (flow, a)
}

fn respond(a: Next) -> (u16, Value) {
    match a {
        Next::Respond(r) => (
            r.status,
            serde_json::from_slice(&r.body).unwrap_or(Value::Null),
        ),
        other => panic!("expected a response, got {other:?}"),
    }
}

fn tools_engine() -> Engine {
    engine(&bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    ))
}

fn call_body(id: &str, tool: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#)
        .into_bytes()
}

#[test]
fn allowed_call_continues_and_denied_call_gets_jsonrpc_error_with_its_id() {
    let e = tools_engine();
    let (flow, a) = post(&e, &call_body("7", "echo"), &[]);
    assert_eq!(added(&a), Some(vec![]),);
    assert!(flow.outcome().unwrap().allowed);

    let (flow, a) = post(&e, &call_body(r#""req-1""#, "delete_repo"), &[]);
    let (status, body) = respond(a);
    assert_eq!(status, 403);
    assert_eq!(body["id"], "req-1");
    assert_eq!(
        body["error"]["code"], -32010,
        "the default code no MCP SDK uses"
    );
    assert!(
        body["error"].get("data").is_none(),
        "no details unless asked"
    );
    let o = flow.outcome().unwrap();
    assert_eq!((o.allowed, o.reason.as_str()), (false, "not_allowed"));
    assert_eq!(o.mcp_param.as_deref(), Some("delete_repo"));
}

#[test]
fn details_are_exposed_only_when_configured() {
    let mut b = bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    );
    b["denyResponse"] =
        json!({"httpStatus": 401, "jsonRpcCode": -32002, "message": "no", "exposeDetails": true});
    let (_, a) = post(&engine(&b), &call_body("1", "x"), &[]);
    let (status, body) = respond(a);
    assert_eq!(status, 401);
    assert_eq!(body["error"]["data"]["level"], "backend");
    assert_eq!(body["error"]["data"]["reason"], "not_allowed");
}

#[test]
fn malformed_bodies_are_rejected_with_the_right_code() {
    let e = tools_engine();
    let cases: &[(&[u8], i64)] = &[
        (b"{not json", -32700),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}} x"#, -32700),
        (br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, -32600),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"delete_repo"}}"#, -32600),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","n\u0061me":"delete_repo"}}"#, -32600),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#, -32602),
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"ech\xff\"}}", -32700),
    ];
    for (body, code) in cases {
        let (flow, a) = post(&e, body, &[]);
        let (status, v) = respond(a);
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (400, Some(*code)),
            "{}",
            String::from_utf8_lossy(body)
        );
        assert!(!flow.outcome().unwrap().allowed);
    }
}

#[test]
fn escaped_key_cannot_smuggle_a_different_tool() {
    // "n\u0061me" is "name": the parser decodes keys, so the decision sees the real tool.
    let e = tools_engine();
    let body =
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"delete_repo"}}"#;
    let (status, _) = respond(post(&e, body, &[]).1);
    assert_eq!(status, 403);
    // A case-folded key is a different key: no name at all -> invalid params.
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"echo"}}"#;
    assert_eq!(respond(post(&e, body, &[]).1).0, 400);
}

#[test]
fn size_encoding_and_content_type_limits() {
    let mut b = bundle(vec![], &[]);
    b["limits"] = json!({"maxBodyBytes": 64});
    let e = engine(&b);
    let mut flow = RequestFlow::new();
    let a = flow
        .on_headers(&e, headers("POST", &[("content-length", "65")]))
        .next;
    assert_eq!(respond(a).0, 413);
    // Without content-length (chunked), the running size decides.
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(&e, headers("POST", &[])).next, Next::Hold);
    assert_eq!(respond(flow.on_body(&e, 65, false, |_| None).next).0, 413);

    let mut flow = RequestFlow::new();
    let a = flow
        .on_headers(&e, headers("POST", &[("content-encoding", "gzip")]))
        .next;
    assert_eq!(respond(a).0, 415);
    let mut flow = RequestFlow::new();
    let a = flow
        .on_headers(&e, headers("POST", &[("content-type", "text/plain")]))
        .next;
    assert_eq!(respond(a).0, 415);
    let mut flow = RequestFlow::new();
    let a = flow
        .on_headers(
            &e,
            headers(
                "POST",
                &[("content-type", "application/json; charset=utf-8")],
            ),
        )
        .next;
    assert_eq!(a, Next::Hold);
}

#[test]
fn mcp_headers_must_agree_with_the_body() {
    let e = tools_engine();
    let body = call_body("1", "echo");
    let (_, a) = post(
        &e,
        &body,
        &[("mcp-method", "tools/call"), ("mcp-name", "echo")],
    );
    assert_eq!(added(&a), Some(vec![]),);
    let (_, a) = post(&e, &body, &[("mcp-method", "tools/list")]);
    assert_eq!(respond(a).0, 400);
    let (_, a) = post(&e, &body, &[("mcp-name", "delete_repo")]);
    assert_eq!(respond(a).0, 400);
}

#[test]
fn requests_without_body_are_decided_at_headers() {
    let e = tools_engine();
    // GET (SSE) and DELETE with a session are base protocol, admitted by InlineTools. The
    // GET stream is asked for uncompressed: the filter reads it (docs/semantics.md §5.4).
    let mut flow = RequestFlow::new();
    assert_eq!(
        added(
            &flow
                .on_headers(&e, headers("GET", &[("accept-encoding", "gzip, br")]))
                .next
        ),
        Some(vec![HeaderEdit::set("accept-encoding", "identity")])
    );
    // A client that asked for no coding (or identity) is left as it is.
    for asked in [&[][..], &[("accept-encoding", " Identity")][..]] {
        let mut flow = RequestFlow::new();
        assert_eq!(
            added(&flow.on_headers(&e, headers("GET", asked)).next),
            Some(vec![])
        );
    }
    let mut flow = RequestFlow::new();
    let a = flow
        .on_headers(&e, headers("DELETE", &[("mcp-session-id", "abc")]))
        .next;
    assert_eq!(added(&a), Some(vec![]),);
    // DELETE without a session is not MCP: an MCP-only allow-list does not admit it.
    let mut flow = RequestFlow::new();
    assert_eq!(
        respond(flow.on_headers(&e, headers("DELETE", &[])).next).0,
        403
    );
    // A POST without a body is not a JSON-RPC message.
    let mut flow = RequestFlow::new();
    let mut h = headers("POST", &[]);
    h.end_of_stream = true;
    assert_eq!(respond(flow.on_headers(&e, h).next).0, 400);
}

fn ext_engine(failure_mode: &str) -> Engine {
    let mut b = bundle(
        vec![
            ext("gw-ext", "Gateway", "gw", "a", 0),
            ext("be-ext", "Backend", "tools", "b", 0),
        ],
        &["a", "b"],
    );
    b["authorizers"][0]["failureMode"] = failure_mode.into();
    b["authorizers"][0]["allowedHeaders"] = json!(["x-team"]);
    b["authorizers"][0]["forwardBodyMaxBytes"] = 10.into();
    b["authorizers"][0]["pathPrefix"] = "/check".into();
    engine(&b)
}

#[test]
fn callouts_run_gateway_then_backend_and_relay_denials() {
    let e = ext_engine("Deny");
    let body = call_body("3", "echo");
    let mut flow = RequestFlow::new();
    flow.on_headers(
        &e,
        headers(
            "POST",
            &[
                ("x-team", "blue"),
                ("x-secret", "s"),
                ("x-mcp-tool", "forged"),
            ],
        ),
    );
    let Next::Dispatch(calls) = flow
        .on_body(&e, body.len(), true, |_| Some(body.clone()))
        .next
    else {
        panic!("expected the gateway callout")
    };
    assert_eq!(calls.len(), 1);
    let (slot, req) = (&calls[0].call.slot, &calls[0].request);
    assert_eq!(req.cluster, "a-cluster");
    let h = |n: &str| {
        req.headers
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.as_ref())
            .collect::<Vec<_>>()
    };
    assert_eq!(h(":path"), ["/check/mcp"]);
    assert_eq!(h("x-team"), ["blue"]);
    assert!(
        h("x-secret").is_empty(),
        "only allowed headers are forwarded"
    );
    assert_eq!(
        h("x-mcp-tool"),
        ["echo"],
        "the client's copy is never forwarded"
    );
    assert_eq!(h("x-mcp-method"), ["tools/call"]);
    assert_eq!(h("x-mcp-access-level"), ["gateway"]);
    assert_eq!(h("content-length"), ["10"]);
    assert_eq!(h("x-envoy-auth-partial-body"), ["true"]);
    assert_eq!(req.body, body[..10].to_vec());
    assert_eq!(flow.dispatch(&e, *slot, Ok(11), 0).next, Next::Hold);

    // Gateway allows with a header; the backend callout follows.
    let a = flow
        .answer(
            &e,
            11,
            Some(200),
            vec![
                ("x-user".into(), "alice".into()),
                ("content-type".into(), "text/plain".into()),
            ],
            vec![],
            0,
        )
        .next;
    let Next::Dispatch(calls) = a else {
        panic!("expected the backend callout, got {a:?}")
    };
    assert_eq!(calls[0].request.cluster, "b-cluster");
    assert_eq!(
        flow.dispatch(&e, calls[0].call.slot, Ok(12), 0).next,
        Next::Hold
    );
    // The backend authorizer denies: its status and headers are relayed, its body becomes a
    // JSON-RPC error (the authorizer's body only with exposeDetails).
    let a = flow
        .answer(
            &e,
            12,
            Some(401),
            vec![
                ("www-authenticate".into(), "Bearer realm=\"b\"".into()),
                ("content-type".into(), "text/plain".into()),
            ],
            b"nope".to_vec(),
            0,
        )
        .next;
    match a {
        Next::Respond(r) => {
            assert_eq!(r.status, 401);
            assert!(r
                .headers
                .contains(&("www-authenticate".into(), "Bearer realm=\"b\"".into())));
            let types: Vec<_> = r
                .headers
                .iter()
                .filter(|(n, _)| n == "content-type")
                .collect();
            assert_eq!(
                types,
                [&("content-type".to_string(), "application/json".to_string())]
            );
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(v["id"], 3, "the request id is echoed");
            assert_eq!(v["error"]["code"], -32010);
            assert_eq!(v["error"]["message"], "Access denied");
            assert!(v["error"].get("data").is_none(), "{v}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_authorizer_body_goes_in_error_data_when_details_are_exposed() {
    let mut b = bundle(vec![ext("gw-ext", "Gateway", "gw", "a", 0)], &["a"]);
    b["denyResponse"] = json!({"exposeDetails": true});
    let e = engine(&b);
    for (body, want) in [
        (&b"{\"reason\": \"risky\"}"[..], json!({"reason": "risky"})),
        (&b"plain words"[..], json!("plain words")),
    ] {
        let (mut flow, a) = post(&e, &call_body("\"r\"", "echo"), &[]);
        let Next::Dispatch(calls) = a else {
            panic!("{a:?}")
        };
        flow.dispatch(&e, calls[0].call.slot, Ok(1), 0);
        let a = flow
            .answer(
                &e,
                1,
                Some(403),
                vec![("x-other".into(), "1".into())],
                body.to_vec(),
                0,
            )
            .next;
        let (status, v) = respond(a);
        assert_eq!(status, 403);
        assert_eq!(v["id"], "r");
        assert_eq!(v["error"]["data"]["authorizerStatus"], 403);
        assert_eq!(v["error"]["data"]["authorizerBody"], want);
        assert_eq!(v["error"]["data"]["reason"], "external_auth_denied");
    }
}

#[test]
fn a_policy_denial_may_answer_200() {
    let mut b = bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    );
    b["denyResponse"] = json!({"httpStatus": 200});
    let (_, a) = post(&engine(&b), &call_body("3", "x"), &[]);
    let (status, body) = respond(a);
    assert_eq!((status, body["id"].clone()), (200, json!(3)));
    assert_eq!(body["error"]["code"], -32010);
}

#[test]
fn allowed_callout_headers_reach_the_upstream_request() {
    let e = ext_engine("Deny");
    let mut flow2 = RequestFlow::new();
    let Next::Dispatch(calls) = flow2.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    flow2.dispatch(&e, calls[0].call.slot, Ok(1), 0);
    let Next::Dispatch(calls) = flow2
        .answer(
            &e,
            1,
            Some(204),
            vec![
                ("x-user".into(), "alice".into()),
                ("content-type".into(), "x".into()),
            ],
            vec![],
            0,
        )
        .next
    else {
        panic!()
    };
    flow2.dispatch(&e, calls[0].call.slot, Ok(2), 0);
    let a = flow2.answer(&e, 2, Some(200), vec![], vec![], 0).next;
    assert_eq!(added(&a), Some(vec![HeaderEdit::set("x-user", "alice")]),);
}

#[test]
fn an_authorizer_setting_a_header_a_route_matches_on_follows_the_failure_mode() {
    for (mode, allowed) in [("Deny", false), ("Allow", true)] {
        let mut b = bundle(vec![ext("gw-ext", "Gateway", "gw", "a", 0)], &["a"]);
        b["authorizers"][0]["failureMode"] = mode.into();
        b["envoy"] = json!({"routeMatchHeaders": ["x-user"]});
        let e = engine(&b);
        let mut flow = RequestFlow::new();
        let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
            panic!()
        };
        flow.dispatch(&e, calls[0].call.slot, Ok(1), 0);
        let p = flow.answer(
            &e,
            1,
            Some(200),
            vec![("x-user".into(), "alice".into())],
            vec![],
            0,
        );
        assert!(p.reports[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("x-user")));
        // Never applied: denied, or (failure mode Allow) allowed without the edit.
        match p.next {
            Next::Allow { add_headers, .. } => {
                assert!(allowed, "{mode}");
                assert_eq!(add_headers, vec![]);
            }
            Next::Respond(r) => assert!(!allowed && r.status >= 400, "{mode}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn unknown_cluster_timeout_and_5xx_follow_the_failure_mode() {
    for (mode, allowed) in [("Deny", false), ("Allow", true)] {
        let e = ext_engine(mode);
        // dispatch fails (unknown cluster: BadArgument)
        let mut flow = RequestFlow::new();
        let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
            panic!()
        };
        let a = flow
            .dispatch(&e, calls[0].call.slot, Err("BadArgument".into()), 0)
            .next;
        if allowed {
            assert!(
                matches!(a, Next::Dispatch(_)),
                "{mode}: on to the backend: {a:?}"
            );
        } else {
            let (status, v) = respond(a);
            assert_eq!(status, 403);
            assert_eq!(v["error"]["code"], -32010);
            assert_eq!(flow.outcome().unwrap().reason.as_str(), "authorizer_error");
        }
        // 504 from Envoy (timeout) and no response at all
        for status in [Some(504), Some(503), None] {
            let mut flow = RequestFlow::new();
            let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
                panic!()
            };
            flow.dispatch(&e, calls[0].call.slot, Ok(9), 0);
            let a = flow.answer(&e, 9, status, vec![], vec![], 0).next;
            assert_eq!(
                matches!(a, Next::Dispatch(_)),
                allowed,
                "{mode} {status:?}: {a:?}"
            );
        }
    }
}

#[test]
fn stray_callout_tokens_are_ignored() {
    let e = ext_engine("Deny");
    let mut flow = RequestFlow::new();
    let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    flow.dispatch(&e, calls[0].call.slot, Ok(5), 0);
    assert_eq!(
        flow.answer(&e, 99, Some(200), vec![], vec![], 0).next,
        Next::Hold
    );
    assert!(matches!(
        flow.answer(&e, 5, Some(200), vec![], vec![], 0).next,
        Next::Dispatch(_)
    ));
}

#[test]
fn trailers_end_the_body_and_the_request_is_decided() {
    let e = tools_engine();
    let body = call_body("1", "delete_repo");
    let mut flow = RequestFlow::new();
    flow.on_headers(&e, headers("POST", &[]));
    assert_eq!(
        flow.on_body(&e, body.len(), false, |_| None).next,
        Next::Hold
    );
    let a = flow
        .on_trailers(&e, &Headers::new(), |max| {
            Some(body[..body.len().min(max)].to_vec())
        })
        .next;
    assert_eq!(respond(a).0, 403);
    // Oversize bodies ending in trailers are still refused.
    let mut b = bundle(vec![], &[]);
    b["limits"] = json!({"maxBodyBytes": 10});
    let e = engine(&b);
    let mut flow = RequestFlow::new();
    flow.on_headers(&e, headers("POST", &[]));
    let a = flow
        .on_trailers(&e, &Headers::new(), |max| Some(vec![b' '; max]))
        .next;
    assert_eq!(respond(a).0, 413);
}

#[test]
fn callout_reports_and_body_limits_come_from_the_flow() {
    let mut b = bundle(vec![ext("gw-ext", "Gateway", "gw", "a", 0)], &["a"]);
    b["authorizers"][0]["maxResponseBodyBytes"] = 8.into();
    let e = engine(&b);
    // A dispatch failure is reported as a failed callout without a latency.
    let mut flow = RequestFlow::new();
    let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    let r = flow
        .dispatch(&e, calls[0].call.slot, Err("BadArgument".into()), 0)
        .reports;
    assert_eq!(r.len(), 1);
    assert!(r[0].failed && r[0].latency_ms.is_none() && r[0].authorizer == "a");
    assert!(
        r[0].detail
            .as_deref()
            .unwrap()
            .contains("Envoy has no cluster"),
        "{r:?}"
    );
    // Envoy fails a call at once (InternalFailure) to a cluster with no endpoint, e.g. a DNS
    // name that does not resolve: the log says so and names the cluster.
    let mut flow = RequestFlow::new();
    let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    let r = flow
        .dispatch(&e, calls[0].call.slot, Err("InternalFailure".into()), 0)
        .reports;
    let d = r[0].detail.as_deref().unwrap();
    assert!(
        d.starts_with("not reached: Envoy failed the call at once (InternalFailure): cluster ")
            && d.contains("its DNS name does not resolve"),
        "{d}"
    );

    // A denial: the host may read 9 bytes; the latency runs from dispatch to answer.
    let mut flow = RequestFlow::new();
    let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    flow.dispatch(&e, calls[0].call.slot, Ok(4), 1_000_000);
    let never = |_: usize| -> Option<Vec<u8>> { panic!("an unknown token's body is not read") };
    let stray = flow.on_callout_response(
        &e,
        5,
        CalloutAnswer {
            status: Some(403),
            headers: &Headers::new(),
            trailers: Headers::new,
            read: never,
        },
        0,
    );
    assert!(stray.next.is_hold() && stray.reports.is_empty());
    let mut asked = None;
    let read = |n: usize| {
        asked = Some(n);
        Some(b"123456789"[..n.min(9)].to_vec())
    };
    let progress = flow.on_callout_response(
        &e,
        4,
        CalloutAnswer {
            status: Some(403),
            headers: &Headers::from(vec![("content-type", "text/plain")]),
            trailers: Headers::new,
            read,
        },
        8_000_000,
    );
    assert_eq!(asked, Some(9), "the cap plus one byte");
    let (a, r) = (progress.next, progress.reports);
    let Next::Respond(resp) = a else {
        panic!("{a:?}")
    };
    assert_eq!(resp.status, 403);
    let v: Value = serde_json::from_slice(&resp.body).unwrap();
    assert_eq!(
        v["error"]["code"], -32010,
        "a JSON-RPC error, not the authorizer's body"
    );
    assert!(resp.headers.iter().all(|(_, v)| v != "text/plain"));
    assert_eq!(r[0].latency_ms, Some(7));
    assert!(!r[0].failed && r[0].detail.is_some());
    assert_eq!(
        flow.outcome().unwrap().reason.as_str(),
        "external_auth_denied"
    );
}

#[test]
fn a_jwt_caller_is_named_in_the_decision() {
    use mcp_access_engine::request::JwtPrincipal;
    let e = tools_engine();
    let jwt = JwtPrincipal {
        texts: Vec::new(),
        keyed: Vec::new(),
        issuer: "https://idp.example".into(),
        subject: Some("u1".into()),
        claims: vec![],
        payload: None,
    };
    for (spiffe, caller) in [(None, "jwt:https://idp.example#u1"), (Some(ALPHA), ALPHA)] {
        let mut input = headers("GET", &[]);
        input.caller = Caller {
            credential: false,
            spiffe: spiffe.map(str::to_string),
            jwts: vec![jwt.clone()],
        };
        let mut flow = RequestFlow::new();
        flow.on_headers(&e, input);
        let o = flow.outcome().unwrap();
        assert_eq!(o.caller.as_deref(), Some(caller));
        assert_eq!(o.jwt.as_deref(), Some("https://idp.example#u1"));
        let v: Value = serde_json::from_str(&o.to_json(&e)).unwrap();
        assert_eq!(v["caller"], caller);
        assert_eq!(v["jwt"], "https://idp.example#u1");
    }
}

#[test]
fn answers_may_arrive_in_any_order() {
    // Two Gateway authorizers called together; the second answers first, then the first.
    let b = bundle(
        vec![
            ext("first", "Gateway", "gw", "a", 0),
            ext("second", "Gateway", "gw", "b", 1),
        ],
        &["a", "b"],
    );
    let e = engine(&b);
    let headed = |v: &str| vec![("x-from".to_string(), v.to_string())];
    for order in [[0usize, 1], [1, 0]] {
        let mut flow = RequestFlow::new();
        let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
            panic!()
        };
        assert_eq!(calls.len(), 2);
        for (i, c) in calls.iter().enumerate() {
            let token = u32::try_from(i).unwrap() + 1;
            assert!(flow.dispatch(&e, c.call.slot, Ok(token), 0).next.is_hold());
        }
        let [x, y] = order;
        let name = |i: usize| ["a", "b"][i];
        let token = |i: usize| u32::try_from(i).unwrap() + 1;
        let p = flow.answer(&e, token(x), Some(200), headed(name(x)), vec![], 0);
        assert!(p.next.is_hold(), "{order:?}: waits for the other answer");
        assert_eq!(p.reports[0].authorizer, name(x));
        let p = flow.answer(&e, token(y), Some(200), headed(name(y)), vec![], 0);
        // Both allowed: the Backend level (no authorizer there) allows, edits in seniority
        // order whatever order the answers came in.
        let added = added(&p.next).unwrap_or_else(|| panic!("{order:?}: {:?}", p.next));
        assert_eq!(
            added[..2],
            [
                HeaderEdit::set("x-from", "a"),
                HeaderEdit::set("x-from", "b")
            ],
            "{order:?}"
        );
    }
}

#[test]
fn a_failed_edit_refuses_and_an_answer_still_to_come_changes_nothing() {
    let e = ext_engine("Deny");
    let mut flow = RequestFlow::new();
    let Next::Dispatch(calls) = flow.on_headers(&e, headers("GET", &[])).next else {
        panic!()
    };
    flow.dispatch(&e, calls[0].call.slot, Ok(1), 0);
    let Next::Respond(r) = flow.edit_failed().next else {
        panic!("not refused")
    };
    assert_eq!(r.status, 500);
    let reason = |f: &RequestFlow| f.outcome().map(|o| (o.allowed, o.reason.as_str()));
    assert_eq!(reason(&flow), Some((false, "identity_headers_failed")));
    // The authorizer's allow arrives after: ignored.
    let late = flow.answer(&e, 1, Some(200), vec![], vec![], 0).next;
    assert_eq!(late, Next::Hold);
    assert_eq!(reason(&flow), Some((false, "identity_headers_failed")));
}
