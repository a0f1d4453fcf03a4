//! Authorizer answers are checked before they are applied (docs/semantics.md §3.5): an answer
//! that asks for a header that is never applied, a header name that is not a token, a value
//! holding CR, LF, NUL or another control (HTAB aside), or (gRPC) a status that disagrees with the response, is malformed:
//! the failure mode decides, the callout is reported failed, and nothing of it is applied.

use crate::common;

use common::*;
use mcp_access_engine::flow::{HeadersInput, Next, Progress, RequestFlow};
use mcp_access_engine::pb;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::policy::HeaderEdit;
use mcp_access_engine::request::Caller;
use prost::Message;
use serde_json::{json, Value};

const BODY: &[u8] =
    br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;

/// One Gateway ExternalAuth policy calling authorizer `a` (`protocol`, `failureMode`, extra).
fn engine_with(protocol: &str, mode: &str, extra: Value) -> Engine {
    let mut b = bundle(vec![ext("ext", "Gateway", "gw", "a", 0)], &["a"]);
    let a = b["authorizers"][0].as_object_mut().unwrap();
    a.insert("protocol".into(), protocol.into());
    a.insert("failureMode".into(), mode.into());
    if let Some(extra) = extra.as_object() {
        a.extend(extra.clone());
    }
    engine(&b)
}

fn input() -> HeadersInput {
    let headers = [
        (":method", "POST"),
        (":path", "/mcp"),
        (":authority", "gw.example.org"),
        ("content-type", "application/json"),
    ];
    HeadersInput {
        peers: None,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        end_of_stream: false,
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

/// A tools/call whose callout is in flight (token 7).
fn called(e: &Engine) -> RequestFlow {
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, input()).next, Next::Hold);
    let Next::Dispatch(calls) = flow
        .on_body(e, BODY.len(), true, |_| Some(BODY.to_vec()))
        .next
    else {
        panic!("expected the callout")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(
        flow.dispatch(e, calls[0].call.slot, Ok(7), 0).next,
        Next::Hold
    );
    flow
}

fn grpc_answer(mode: &str, resp: &pb::CheckResponse) -> (RequestFlow, Progress) {
    let e = engine_with("GRPC", mode, json!({}));
    let mut flow = called(&e);
    let progress = flow.answer_grpc(&e, 7, Some(0), resp.encode_to_vec(), 0);
    (flow, progress)
}

fn http_answer(
    mode: &str,
    extra: Value,
    status: u16,
    headers: &[(&str, &str)],
) -> (RequestFlow, Progress) {
    let e = engine_with("HTTP", mode, extra);
    let mut flow = called(&e);
    let headers = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let progress = flow.answer(&e, 7, Some(status), headers, Vec::new(), 0);
    (flow, progress)
}

/// Under Deny: the JSON-RPC denial (reason authorizer_error), the callout reported failed
/// with `why`. Under Allow: the call goes on with nothing of the answer applied.
fn assert_malformed(mode: &str, (flow, progress): (RequestFlow, Progress), why: &str, case: &str) {
    let Progress { next, reports } = progress;
    if mode == "Deny" {
        let Next::Respond(r) = &next else {
            panic!("{case}: expected the denial, got {next:?}")
        };
        assert_eq!(r.status, 403, "{case}");
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!(5), json!(-32010)),
            "{case}"
        );
        assert!(
            r.headers.iter().all(|(n, _)| !n.starts_with("x-")),
            "{case}: nothing of the answer relayed: {:?}",
            r.headers
        );
        assert_eq!(
            flow.outcome().unwrap().reason.as_str(),
            "authorizer_error",
            "{case}"
        );
    } else {
        assert_eq!(added(&next), Some(vec![]), "{case}");
    }
    assert_eq!(reports.len(), 1, "{case}");
    assert!(reports[0].failed, "{case}: counted as a callout error");
    assert!(
        reports[0].metadata.is_none(),
        "{case}: no metadata exported"
    );
    let detail = reports[0].detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with("malformed answer") && detail.contains(why),
        "{case}: {detail}"
    );
    assert!(
        !detail.contains('\r') && !detail.contains('\n') && !detail.contains('\0'),
        "{case}: the log line is one line: {detail:?}"
    );
}

fn hvo(key: &str, value: &str) -> pb::HeaderValueOption {
    pb::HeaderValueOption {
        header: Some(pb::HeaderValue {
            key: key.into(),
            value: value.into(),
            raw_value: Vec::new(),
        }),
        append: None,
        append_action: 2,
    }
}

fn status(code: i32) -> Option<pb::RpcStatus> {
    Some(pb::RpcStatus {
        code,
        message: String::new(),
    })
}

fn ok(headers: Vec<pb::HeaderValueOption>, remove: &[&str]) -> pb::CheckResponse {
    pb::CheckResponse {
        status: status(0),
        ok_response: Some(pb::OkHttpResponse {
            headers,
            headers_to_remove: remove.iter().map(|s| s.to_string()).collect(),
            dynamic_metadata: None,
        }),
        dynamic_metadata: Some(pb::Struct::default()),
        ..Default::default()
    }
}

/// Headers never applied, bad names and bad values, each after a good header that must not
/// be applied either.
const BAD_HEADERS: &[(&str, &str, &str)] = &[
    ("content-length", "0", "never applied"),
    ("Content-Length", "0", "never applied"),
    ("transfer-encoding", "chunked", "never applied"),
    ("host", "evil.example", "never applied"),
    (":path", "/admin", "never applied"),
    (":authority", "evil.example", "never applied"),
    ("connection", "close", "never applied"),
    ("keep-alive", "timeout=5", "never applied"),
    ("te", "trailers", "never applied"),
    ("trailer", "x-t", "never applied"),
    ("upgrade", "websocket", "never applied"),
    ("proxy-authorization", "Basic x", "never applied"),
    ("x-user", "alice\r\nx-admin: true", "CR, LF, NUL"),
    ("x-user", "alice\nx", "CR, LF, NUL"),
    ("x-user", "alice\rx", "CR, LF, NUL"),
    ("x-user", "alice\0", "CR, LF, NUL"),
    ("x-user", "alice\x01", "another control"),
    ("x-user", "alice\x7f", "another control"),
    ("x user", "alice", "not a header name"),
    ("x-user\r\nx-admin", "true", "not a header name"),
    ("", "alice", "not a header name"),
];

#[test]
fn a_grpc_ok_answer_with_a_header_that_cannot_be_applied_is_malformed() {
    for mode in ["Deny", "Allow"] {
        for (name, value, why) in BAD_HEADERS {
            let resp = ok(vec![hvo("x-good", "1"), hvo(name, value)], &[]);
            let case = format!("{mode} {name:?}: {value:?}");
            assert_malformed(mode, grpc_answer(mode, &resp), why, &case);
        }
    }
}

#[test]
fn a_grpc_ok_answer_removing_a_header_that_is_never_applied_is_malformed() {
    for mode in ["Deny", "Allow"] {
        for name in [
            "content-length",
            "transfer-encoding",
            "host",
            ":authority",
            "x y",
        ] {
            let resp = ok(vec![hvo("x-good", "1")], &["x-other", name]);
            let why = if name == "x y" {
                "not a header name"
            } else {
                "never applied"
            };
            assert_malformed(
                mode,
                grpc_answer(mode, &resp),
                why,
                &format!("{mode} remove {name}"),
            );
        }
    }
}

#[test]
fn a_grpc_raw_value_is_checked_like_a_value() {
    let mut h = hvo("x-user", "");
    h.header.as_mut().unwrap().raw_value = b"a\r\nb".to_vec();
    assert_malformed(
        "Deny",
        grpc_answer("Deny", &ok(vec![h], &[])),
        "CR, LF, NUL",
        "raw",
    );
}

#[test]
fn a_grpc_ok_answer_with_a_denied_or_error_response_is_malformed() {
    for mode in ["Deny", "Allow"] {
        let mut resp = ok(vec![hvo("x-good", "1")], &[]);
        resp.denied_response = Some(pb::DeniedHttpResponse {
            status: Some(pb::HttpStatus { code: 403 }),
            headers: vec![],
            body: "no".into(),
        });
        assert_malformed(mode, grpc_answer(mode, &resp), "denied_response", mode);
        let mut resp = ok(vec![hvo("x-good", "1")], &[]);
        resp.error_response = Some(vec![]);
        assert_malformed(mode, grpc_answer(mode, &resp), "error_response", mode);
        // Status unset is OK too.
        let resp = pb::CheckResponse {
            denied_response: Some(pb::DeniedHttpResponse::default()),
            ..Default::default()
        };
        assert_malformed(mode, grpc_answer(mode, &resp), "denied_response", mode);
    }
}

#[test]
fn a_grpc_denial_with_a_header_that_cannot_be_relayed_is_malformed() {
    for mode in ["Deny", "Allow"] {
        for (name, value, why) in BAD_HEADERS {
            let resp = pb::CheckResponse {
                status: status(7),
                denied_response: Some(pb::DeniedHttpResponse {
                    status: Some(pb::HttpStatus { code: 401 }),
                    headers: vec![hvo("x-good", "1"), hvo(name, value)],
                    body: "no".into(),
                }),
                ..Default::default()
            };
            let case = format!("{mode} denial {name:?}: {value:?}");
            assert_malformed(mode, grpc_answer(mode, &resp), why, &case);
        }
    }
}

#[test]
fn a_well_formed_grpc_answer_is_still_applied() {
    let resp = ok(vec![hvo("X-User", "alice \"a\"\t1")], &["x-gone"]);
    let (_, Progress { next, .. }) = grpc_answer("Deny", &resp);
    let Next::Allow { add_headers, .. } = next else {
        panic!("{next:?}")
    };
    assert_eq!(add_headers.len(), 2);
    assert_eq!(add_headers[0], HeaderEdit::set("x-user", "alice \"a\"\t1"));
    assert_eq!(add_headers[1].name, "x-gone");
}

#[test]
fn an_http_ok_answer_with_a_header_that_cannot_be_applied_is_malformed() {
    // The answer's own framing (content-length, transfer-encoding, connection, ...) is not a
    // header it asks for; `host`, `proxy-*`, bad names and bad values are.
    let asked: Vec<_> = BAD_HEADERS
        .iter()
        .filter(|(n, _, _)| {
            let n = n.to_ascii_lowercase();
            !n.is_empty() && !n.starts_with(':') && !mcp_access_bundle::http::is_framing(&n)
        })
        .collect();
    assert!(asked.len() >= 8, "{asked:?}");
    for mode in ["Deny", "Allow"] {
        for (name, value, why) in &asked {
            // An unlisted header is not applied; only a valid name can be listed.
            let lists = if mcp_access_bundle::http::is_header_name(name) {
                vec![json!([]), json!(["x-good", name])]
            } else {
                vec![json!([])]
            };
            for list in lists {
                let extra = json!({ "allowedResponseHeaders": list });
                let answer = http_answer(mode, extra, 200, &[("x-good", "1"), (name, value)]);
                let case = format!("{mode} {list} {name:?}: {value:?}");
                assert_malformed(mode, answer, why, &case);
            }
        }
    }
}

#[test]
fn an_http_answers_own_framing_is_never_applied() {
    // Even when allowedResponseHeaders names it: content-length: 0 upstream would cut the body.
    let own = [
        ("content-length", "0"),
        ("transfer-encoding", "chunked"),
        ("connection", "close"),
        ("keep-alive", "timeout=5"),
        ("trailer", "x-t"),
    ];
    let names: Vec<&str> = own.iter().map(|(n, _)| *n).chain(["x-good"]).collect();
    for list in [json!([]), json!(names)] {
        let mut headers = own.to_vec();
        headers.push(("x-good", "1"));
        let extra = json!({ "allowedResponseHeaders": list });
        let (_, Progress { next, reports }) = http_answer("Deny", extra, 200, &headers);
        assert_eq!(
            added(&next),
            Some(vec![HeaderEdit::set("x-good", "1")]),
            "{list}"
        );
        assert!(!reports[0].failed);
    }
}

#[test]
fn an_http_denial_with_a_header_that_cannot_be_relayed_is_malformed() {
    for mode in ["Deny", "Allow"] {
        for (name, value) in [
            ("www-authenticate", "Bearer\r\nset-cookie: s=1"),
            ("x-reason", "a\0"),
            ("host", "evil.example"),
            ("proxy-authenticate", "Basic"),
        ] {
            let answer = http_answer(mode, json!({}), 401, &[("x-good", "1"), (name, value)]);
            assert_malformed(mode, answer, "", &format!("{mode} 401 {name}"));
        }
    }
    // Its own framing is dropped, the denial stands.
    let (_, Progress { next, .. }) = http_answer(
        "Deny",
        json!({}),
        401,
        &[
            ("www-authenticate", "Bearer"),
            ("content-length", "0"),
            ("connection", "close"),
        ],
    );
    let Next::Respond(r) = next else {
        panic!("{next:?}")
    };
    assert_eq!(r.status, 401);
    assert!(r
        .headers
        .contains(&("www-authenticate".into(), "Bearer".into())));
}

#[test]
fn an_ok_answer_changing_an_mcp_header_checked_against_the_body_is_malformed() {
    // The filter compared these with the body; an answer rewriting them would have the server
    // read another request than the one decided.
    for mode in ["Deny", "Allow"] {
        for name in ["mcp-name", "Mcp-Method", "mcp-protocol-version"] {
            let resp = ok(vec![hvo("x-good", "1"), hvo(name, "delete_repo")], &[]);
            let case = format!("{mode} gRPC set {name}");
            assert_malformed(
                mode,
                grpc_answer(mode, &resp),
                "checked against the body",
                &case,
            );
            let resp = ok(vec![hvo("x-good", "1")], &[name]);
            let case = format!("{mode} gRPC remove {name}");
            assert_malformed(
                mode,
                grpc_answer(mode, &resp),
                "checked against the body",
                &case,
            );
            let extra = json!({ "allowedResponseHeaders": ["x-good", name] });
            let answer = http_answer(mode, extra, 200, &[("x-good", "1"), (name, "delete_repo")]);
            let case = format!("{mode} HTTP {name}");
            assert_malformed(mode, answer, "checked against the body", &case);
        }
    }
}
