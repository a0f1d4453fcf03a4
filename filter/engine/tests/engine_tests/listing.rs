//! MCP revisions (docs/semantics.md §4.4) and per-caller listings (§5.4), through the flow the
//! host drives: request, decision, then the response filter.

use crate::common;

use common::*;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::listing::{BodyAction, HeadersAction};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::policy::HeaderEdit;
use serde_json::{json, Value};

fn input(spiffe: &str, extra: &[(&str, &str)]) -> HeadersInput {
    post_input(spiffe, extra)
}

fn send(e: &Engine, spiffe: &str, extra: &[(&str, &str)], body: &str) -> (RequestFlow, Next) {
    post_through(e, spiffe, extra, body)
}

fn rejected(a: Next) -> (u16, Value) {
    match a {
        Next::Respond(r) => (r.status, serde_json::from_slice(&r.body).unwrap()),
        other => panic!("expected a response, got {other:?}"),
    }
}

/// Backend policies: alpha may call echo and add, read file:///a and prompt p1; nobody may call
/// `add` (a Deny policy at the Gateway); beta may do nothing but the base protocol.
fn engine_for_listings() -> Engine {
    let allow = json!({"name": "alpha-tools", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Allow", "rules": [{"name": "alpha",
            "source": {"type": "SPIFFE", "spiffe": ALPHA},
            "authorization": {"mcp": {"baseProtocol": "Match", "methods": [
                {"name": "tools/call", "params": ["echo", "add"]},
                {"name": "prompts/get", "params": ["p1"]},
                {"name": "resources/read", "params": ["file:///a"]}]}}},
            {"name": "beta-base", "source": {"type": "SPIFFE", "spiffe": BETA},
             "authorization": {"mcp": {"baseProtocol": "Match"}}}]});
    engine(&bundle(
        vec![allow, deny_tools("no-add", "Gateway", "gw", &["add"])],
        &[],
    ))
}

/// Response headers: a status and Content-Type copies.
fn response(status: u16, types: &[&str]) -> Vec<(String, String)> {
    let mut h = vec![(":status".to_string(), status.to_string())];
    h.extend(
        types
            .iter()
            .map(|t| ("content-type".to_string(), t.to_string())),
    );
    h
}

/// The filter of an allowed listing request.
fn listing_filter(e: &Engine, spiffe: &str, method: &str, extra: &[(&str, &str)]) -> Filter {
    let body = format!(r#"{{"jsonrpc":"2.0","id":"L","method":"{method}","params":{{}}}}"#);
    let (flow, a) = send(e, spiffe, extra, &body);
    Filter::of(&flow, &a).unwrap_or_else(|| panic!("{method}: no listing filter: {a:?}"))
}

/// The filter of the response with `headers` to a request `sent` (the flow and its allow),
/// as the host keeps it: None when the headers show the response carries no listing.
fn response_filter(sent: &(RequestFlow, Next), headers: &[(String, String)]) -> Option<Filter> {
    let mut f = Filter::of(&sent.0, &sent.1)?;
    (f.on_response_headers(headers) == HeadersAction::Rewrite).then_some(f)
}

/// The JSON body through the filter, as the host drives it (two chunks).
fn filter_json(e: &Engine, f: &mut Filter, body: &str) -> Value {
    assert_eq!(
        f.on_headers(&response(200, &["application/json"])),
        HeadersAction::Rewrite
    );
    let half = body.len() / 2;
    assert_eq!(
        f.on_body(e, half, false, |_| panic!("read only at the end")),
        BodyAction::Buffer
    );
    let owned = body.as_bytes().to_vec();
    match f.on_body(e, body.len(), true, move |_| Some(owned)) {
        BodyAction::Replace(out) => serde_json::from_slice(&out).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn names(v: &Value, key: &str, field: &str) -> Vec<String> {
    v["result"][key]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[field].as_str().unwrap().to_string())
        .collect()
}

const TOOLS: &str = r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[
    {"name":"echo","inputSchema":{"type":"object"}},
    {"name":"add","inputSchema":{"type":"object"}},
    {"name":"delete_repo","inputSchema":{"type":"object"}},
    {"inputSchema":{}}],
    "nextCursor":"page-2","ttlMs":5000,"cacheScope":"public"}}"#;

#[test]
fn tools_list_keeps_what_the_caller_could_call() {
    let e = engine_for_listings();
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let v = filter_json(&e, &mut f, TOOLS);
    // add is denied by the Gateway's Deny policy, delete_repo not admitted, a nameless item
    // cannot be judged.
    assert_eq!(names(&v, "tools", "name"), ["echo"]);
    assert_eq!(v["id"], "L");
    assert_eq!(v["result"]["nextCursor"], "page-2", "pagination is kept");
    assert_eq!(v["result"]["ttlMs"], 5000);
    // An older revision has no cacheScope: the server's value is left as it is.
    assert_eq!(v["result"]["cacheScope"], "public");

    let mut f = listing_filter(&e, BETA, "tools/list", &[]);
    let v = filter_json(&e, &mut f, TOOLS);
    assert!(names(&v, "tools", "name").is_empty());
}

#[test]
fn kept_items_are_the_servers_bytes() {
    let e = engine_for_listings();
    // Key order, number spelling and whitespace of kept items stay; an escaped name is judged
    // by what it decodes to (as the client reads it); a nested "name" is not the item's.
    let body = concat!(
        r#"{"id":"L", "result" : {"z":1, "tools" : [ {"name":"\u0065cho"}, {"name":"\u0064elete_repo"}, "#,
        r#"{"x":1.50e3,"name":"echo","schema":{"name":"delete_repo"}} , {"schema":{"name":"echo"}} ], "#,
        r#""cacheScope":"public"},"jsonrpc":"2.0"}"#
    );
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["application/json"]));
    let owned = body.as_bytes().to_vec();
    let BodyAction::Replace(out) = f.on_body(&e, body.len(), true, move |_| Some(owned)) else {
        panic!()
    };
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            r#"{"id":"L", "result" : {"z":1, "tools" : [{"name":"\u0065cho"},{"x":1.50e3,"name":"echo","schema":{"name":"delete_repo"}}], "#,
            r#""cacheScope":"public"},"jsonrpc":"2.0"}"#
        )
    );
    // 2026-07-28: cacheScope replaced where it is, or added first.
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    for (body, want) in [
        (
            r#"{"id":"L","result":{"tools":[],"cacheScope":{"x":1}}}"#,
            r#"{"id":"L","result":{"tools":[],"cacheScope":"private"}}"#,
        ),
        (
            r#"{"id":"L","result":{"tools":[{"name":"echo"}]}}"#,
            r#"{"id":"L","result":{"cacheScope":"private","tools":[{"name":"echo"}]}}"#,
        ),
    ] {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &headers);
        f.on_headers(&response(200, &["application/json"]));
        let owned = body.as_bytes().to_vec();
        let BodyAction::Replace(out) = f.on_body(&e, body.len(), true, move |_| Some(owned)) else {
            panic!()
        };
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}

#[test]
fn a_2026_listing_is_marked_private() {
    let e = engine_for_listings();
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let mut f = listing_filter(&e, ALPHA, "tools/list", &headers);
    let v = filter_json(&e, &mut f, TOOLS);
    assert_eq!(v["result"]["cacheScope"], "private");
    let no_scope = r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[],"ttlMs":0}}"#;
    let mut f = listing_filter(&e, ALPHA, "tools/list", &headers);
    let v = filter_json(&e, &mut f, no_scope);
    assert_eq!(
        v["result"]["cacheScope"], "private",
        "even with nothing removed"
    );
}

#[test]
fn prompts_resources_and_templates() {
    let e = engine_for_listings();
    let mut f = listing_filter(&e, ALPHA, "prompts/list", &[]);
    let v = filter_json(
        &e,
        &mut f,
        r#"{"jsonrpc":"2.0","id":"L","result":{"prompts":[{"name":"p1"},{"name":"p2"}]}}"#,
    );
    assert_eq!(names(&v, "prompts", "name"), ["p1"]);

    let mut f = listing_filter(&e, ALPHA, "resources/list", &[]);
    let v = filter_json(
        &e,
        &mut f,
        r#"{"jsonrpc":"2.0","id":"L","result":{"resources":[{"uri":"file:///a","name":"a"},{"uri":"file:///b","name":"b"}]}}"#,
    );
    assert_eq!(names(&v, "resources", "uri"), ["file:///a"]);

    // Templates: alpha may read some URI (a resources/read rule with params), beta none.
    assert_eq!(templates_listed(&e, ALPHA), ["t"]);
    assert!(templates_listed(&e, BETA).is_empty());
}

/// The names of the resource templates `spiffe` is shown from a one-template listing.
fn templates_listed(e: &Engine, spiffe: &str) -> Vec<String> {
    let templates = r#"{"jsonrpc":"2.0","id":"L","result":{"resourceTemplates":[{"uriTemplate":"file:///{p}","name":"t"}]}}"#;
    let mut f = listing_filter(e, spiffe, "resources/templates/list", &[]);
    names(
        &filter_json(e, &mut f, templates),
        "resourceTemplates",
        "name",
    )
}

#[test]
fn a_deny_rule_on_every_read_hides_templates() {
    let deny_reads = json!({"name": "no-reads", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Deny", "rules": [{"name": "reads",
            "authorization": {"mcp": {"methods": [{"name": "resources/read"}]}}}]});
    let e = engine(&bundle(vec![deny_reads], &[]));
    assert!(templates_listed(&e, ALPHA).is_empty());
}

#[test]
fn what_cannot_be_filtered_is_replaced_by_an_error() {
    let e = engine_for_listings();
    let bad = [
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[{"name":"echo"}]}"#,
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":{}}}"#,
        r#"{"jsonrpc":"2.0","id":"L","result":{}}"#,
        // The client would read the second copy, the filter maybe the first.
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[{"name":"echo","name":"delete_repo"}]}}"#,
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[]},"result":{"tools":[{"name":"x"}]}}"#,
    ];
    for body in bad {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let v = filter_json(&e, &mut f, body);
        assert_eq!(v["error"]["code"], -32603, "{body}");
        assert_eq!(v["id"], "L");
        assert!(v.get("result").is_none());
    }
    // An error answer passes as it is.
    let err = r#"{"jsonrpc":"2.0","id":"L","error":{"code":-32000,"message":"busy"}}"#;
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    assert_eq!(filter_json(&e, &mut f, err)["error"]["message"], "busy");
}

#[test]
fn an_oversize_json_listing_is_dropped_and_replaced() {
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"maxBytes": 64});
    let e = engine(&b);
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["application/json; charset=utf-8"]));
    assert_eq!(
        f.on_body(&e, 40, false, |_| panic!("not read")),
        BodyAction::Buffer
    );
    // What is buffered is replaced by the error at once; what follows is dropped.
    let BodyAction::Replace(out) = f.on_body(&e, 65, false, |_| panic!("not read")) else {
        panic!()
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(
        f.on_body(&e, 10, true, |_| panic!("not read")),
        BodyAction::Replace(vec![])
    );
}

#[test]
fn other_media_types_and_error_statuses() {
    let e = engine_for_listings();
    // A 2xx of another media type: replaced (the host sets application/json).
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    assert_eq!(
        f.on_headers(&response(200, &["text/plain"])),
        HeadersAction::Rewrite
    );
    assert_eq!(f.content_type(), Some("application/json"));
    let BodyAction::Replace(out) = f.on_body(&e, 4, true, |_| Some(b"echo".to_vec())) else {
        panic!()
    };
    assert!(String::from_utf8(out).unwrap().contains("-32603"));
    // Two Content-Type headers: which one the client reads is unknown.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let two = ["application/json", "text/event-stream"];
    assert_eq!(f.on_headers(&response(200, &two)), HeadersAction::Rewrite);
    assert_eq!(f.content_type(), Some("application/json"));
}

/// A whole body through the filter of a `tools/list` answered with these headers.
fn answer(e: &Engine, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut f = listing_filter(e, ALPHA, "tools/list", &[]);
    assert_eq!(f.on_headers(headers), HeadersAction::Rewrite);
    let owned = body.to_vec();
    match f.on_body(e, body.len(), true, move |_| Some(owned)) {
        BodyAction::Replace(out) => out,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_non_2xx_answer_holding_a_listing_is_filtered_like_a_200() {
    let e = engine_for_listings();
    let json = |status| response(status, &["application/json"]);
    // A result under any status is a listing: filtered (whatever the media type says).
    for headers in [
        json(500),
        json(404),
        response(503, &["text/plain"]),
        response(500, &[]),
    ] {
        let v: Value = serde_json::from_slice(&answer(&e, &headers, TOOLS.as_bytes())).unwrap();
        assert_eq!(names(&v, "tools", "name"), ["echo"], "{headers:?}");
    }
    // ... and a result it cannot read or that lacks its items is replaced by the error.
    for bad in [
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[{"name":"delete_repo"}"#,
        r#"{"jsonrpc":"2.0","id":"L","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":"L","result":{"tools":[{"name":"echo","name":"delete_repo"}]}}"#,
        r#"[{"jsonrpc":"2.0","id":"L","result":{"tools":[{"name":"delete_repo"}]}}]"#,
        "\u{feff} {\"result\": oops",
    ] {
        let v: Value = serde_json::from_slice(&answer(&e, &json(500), bad.as_bytes())).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!("L"), json!(-32603)),
            "{bad}"
        );
    }
    // A body that is no JSON-RPC result goes on unchanged, byte for byte.
    for body in [
        &br#"{"jsonrpc":"2.0","id":"L","error":{"code":-32000,"message":"busy"}}"#[..],
        br#"{"detail":"upstream failed"}"#,
        b"<html><body>502 Bad Gateway</body></html>",
        b"upstream connect error",
        b"",
    ] {
        assert_eq!(
            answer(&e, &json(502), body),
            body,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // A compressed or oversize one cannot be read: replaced by the error.
    let mut gzip = json(500);
    gzip.push(("content-encoding".into(), "gzip".into()));
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    assert_eq!(f.on_headers(&gzip), HeadersAction::Rewrite);
    assert_eq!(f.content_type(), Some("application/json"));
    let BodyAction::Replace(out) = f.on_body(&e, 3, true, |_| panic!("not read")) else {
        panic!()
    };
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap()["error"]["code"],
        -32603
    );
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"maxBytes": 64});
    let small = engine(&b);
    let mut f = listing_filter(&small, ALPHA, "tools/list", &[]);
    f.on_headers(&json(500));
    let BodyAction::Replace(out) = f.on_body(&small, 65, false, |_| panic!("not read")) else {
        panic!()
    };
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap()["error"]["code"],
        -32603
    );
    // An SSE answer under a non-2xx status is read as a stream.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let event = format!("data: {}\n\n", TOOLS.replace('\n', ""));
    let out = through(
        &e,
        &mut f,
        &response(500, &["text/event-stream"]),
        &[event.as_bytes()],
    );
    assert_eq!(names(&messages(&out)[0], "tools", "name"), ["echo"]);
    // Ended by trailers: read all the same.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&json(500));
    assert_eq!(f.on_body(&e, 10, false, |_| panic!()), BodyAction::Buffer);
    let BodyAction::Replace(out) = f.on_trailers(&e, || Some(TOOLS.as_bytes().to_vec())) else {
        panic!()
    };
    assert_eq!(
        names(&serde_json::from_slice(&out).unwrap(), "tools", "name"),
        ["echo"]
    );
}

#[test]
fn a_compressed_listing_cannot_be_read_and_is_refused() {
    let e = engine_for_listings();
    // The request asks the server not to compress the listing.
    let (_, a) = send(
        &e,
        ALPHA,
        &[("accept-encoding", "gzip")],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    let Next::Allow { add_headers, .. } = a else {
        panic!("{a:?}")
    };
    assert_eq!(
        add_headers,
        [HeaderEdit::set("accept-encoding", "identity")]
    );
    // A server that compresses anyway: refused.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let mut h = response(200, &["application/json"]);
    h.push(("content-encoding".into(), "gzip".into()));
    assert_eq!(f.on_headers(&h), HeadersAction::Rewrite);
    assert_eq!(f.content_type(), Some("application/json"));
    let BodyAction::Replace(out) = f.on_body(&e, 3, true, |_| Some(b"\x1f\x8b\x08".to_vec()))
    else {
        panic!()
    };
    assert!(String::from_utf8(out).unwrap().contains("-32603"));
}

#[test]
fn a_body_ended_by_trailers_is_filtered_too() {
    let e = engine_for_listings();
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["application/json"]));
    assert_eq!(
        f.on_body(&e, TOOLS.len(), false, |_| panic!("read at the end")),
        BodyAction::Buffer
    );
    let BodyAction::Replace(out) = f.on_trailers(&e, || Some(TOOLS.as_bytes().to_vec())) else {
        panic!()
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(names(&v, "tools", "name"), ["echo"]);
    // Refused answers end with the error; SSE has nothing buffered.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["text/html"]));
    assert!(matches!(f.on_trailers(&e, || None), BodyAction::Replace(_)));
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["text/event-stream"]));
    assert_eq!(
        f.on_trailers(&e, || panic!("nothing buffered")),
        BodyAction::Pass
    );
}

#[test]
fn no_filter_when_turned_off_or_not_a_listing_or_denied() {
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"filter": false});
    let e = engine(&b);
    let (flow, a) = send(
        &e,
        ALPHA,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert!(matches!(a, Next::Allow { .. }) && !flow.reads_response());

    let e = engine_for_listings();
    let sent = send(
        &e,
        ALPHA,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#,
    );
    // Its JSON answer is not read.
    assert!(response_filter(&sent, &response(200, &["application/json"])).is_none());
    let only_calls = engine(&bundle(
        vec![
            json!({"name": "calls", "level": "Backend", "targets": [{"name": "tools"}],
            "action": "Allow", "rules": [{"name": "c", "authorization": {"mcp": {"methods": [
                {"name": "tools/call"}]}}}]}),
        ],
        &[],
    ));
    let (_, a) = send(
        &only_calls,
        ALPHA,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert!(matches!(a, Next::Respond(_)));
}

/// SSE chunks through the filter; returns what the client receives.
fn through_sse(e: &Engine, f: &mut Filter, chunks: &[&[u8]]) -> String {
    through(e, f, &response(200, &["text/event-stream"]), chunks)
}

/// SSE chunks through the filter, answered with `headers`; returns what the client receives.
fn through(e: &Engine, f: &mut Filter, headers: &[(String, String)], chunks: &[&[u8]]) -> String {
    assert_eq!(f.on_headers(headers), HeadersAction::Rewrite);
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let owned = c.to_vec();
        let last = i + 1 == chunks.len();
        match f.on_body(e, c.len(), last, move |_| Some(owned)) {
            BodyAction::Replace(b) => out.extend(b),
            other => panic!("{other:?}"),
        }
    }
    String::from_utf8(out).unwrap()
}

/// The JSON of each `data:` event the client would dispatch.
fn messages(sse: &str) -> Vec<Value> {
    sse.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let data: Vec<&str> = e.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            serde_json::from_str(&data.join("\n")).unwrap()
        })
        .collect()
}

#[test]
fn sse_events_are_filtered_as_they_stream() {
    let e = engine_for_listings();
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    let result = TOOLS.replace('\n', "");
    let stream = format!(": keep-alive\r\n\r\nevent: message\r\ndata: {progress}\r\n\r\nevent: message\nid: 7\ndata: {result}\n\n");
    let bytes = stream.as_bytes();
    // Cut everywhere, including inside "\r\n" and the blank line.
    for cut in [1, 13, 16, 40, bytes.len() / 2, bytes.len() - 1] {
        let (a, b) = bytes.split_at(cut);
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let out = through_sse(&e, &mut f, &[a, b, b""]);
        let m = messages(&out);
        assert_eq!(m.len(), 2, "cut {cut}: {out}");
        assert_eq!(m[0]["method"], "notifications/progress");
        assert_eq!(names(&m[1], "tools", "name"), ["echo"]);
        assert!(out.contains("id: 7\n"), "{out}");
        assert!(!out.contains("keep-alive"));
    }
}

#[test]
fn sse_malformed_or_oversize_events_become_errors() {
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"maxBytes": 200});
    let e = engine(&b);
    let big = format!(
        "data: {{\"jsonrpc\":\"2.0\",\"id\":\"L\",\"result\":{{\"tools\":[{}]}}}}\n\n",
        vec![r#"{"name":"delete_repo"}"#; 20].join(",")
    );
    let ok = "data: {\"jsonrpc\":\"2.0\",\"id\":\"L\",\"result\":{\"tools\":[{\"name\":\"echo\"},{\"name\":\"x\"}]}}\n\n";
    let cases: Vec<Vec<u8>> = vec![
        b"data: {not json}\n\n".to_vec(),
        // A lone CR: a client splits lines there.
        b"data: {\"jsonrpc\":\"2.0\",\"id\":\"L\",\"result\":{\"tools\":[]}}\rdata: x\n\n".to_vec(),
        big.into_bytes(),
    ];
    for case in cases {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let mut stream = case.clone();
        stream.extend_from_slice(ok.as_bytes());
        // In chunks of 50 bytes.
        let chunks: Vec<&[u8]> = stream.chunks(50).collect();
        let out = through_sse(&e, &mut f, &chunks);
        let m = messages(&out);
        assert_eq!(m.len(), 2, "{out}");
        assert_eq!(m[0]["error"]["code"], -32603, "{out}");
        assert!(!out.contains("delete_repo"));
        assert_eq!(names(&m[1], "tools", "name"), ["echo"], "{out}");
    }
    // An event the stream ends in the middle of is dropped.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    assert_eq!(
        through_sse(&e, &mut f, &[b"data: {\"jsonrpc\":\"2.0\""]),
        ""
    );
}

#[test]
fn sse_lines_end_with_cr_lf_or_crlf_even_split_across_chunks() {
    let e = engine_for_listings();
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    let result = TOOLS.replace('\n', "");
    let events = [
        ": keep-alive".to_string(),
        format!("event: message\nid: 6\ndata: {progress}"),
        // The listing split over two data lines (where JSON allows a line feed).
        {
            let (a, b) = result.split_at(result.find('[').unwrap() + 1);
            format!("event: message\nid: 7\ndata: {a}\ndata: {b}")
        },
    ];
    // Each line end of another kind than the one before.
    let mut mixed = String::new();
    let ends = ["\r\n", "\n", "\r"];
    for (i, line) in events.join("\n\n").split('\n').enumerate() {
        mixed.push_str(line);
        mixed.push_str(ends[i % 3]);
    }
    mixed.push_str("\r\n");
    let streams = [
        ("LF", events.join("\n\n") + "\n\n"),
        ("CRLF", (events.join("\n\n") + "\n\n").replace('\n', "\r\n")),
        ("CR", (events.join("\n\n") + "\n\n").replace('\n', "\r")),
        ("mixed", mixed),
        // A byte order mark may start the stream.
        (
            "BOM",
            "\u{feff}".to_string() + &(events.join("\n\n") + "\n\n").replace('\n', "\r"),
        ),
    ];
    for (name, stream) in &streams {
        let bytes = stream.as_bytes();
        // Cut everywhere: inside every CRLF, between the CRs of a blank line, ...
        for cut in 1..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
            let out = through_sse(&e, &mut f, &[a, b]);
            let m = messages(&out);
            assert_eq!(m.len(), 2, "{name}, cut {cut}: {out:?}");
            assert_eq!(
                m[0]["method"], "notifications/progress",
                "{name}, cut {cut}"
            );
            assert_eq!(names(&m[1], "tools", "name"), ["echo"], "{name}, cut {cut}");
            assert!(
                out.contains("id: 6\n") && out.contains("id: 7\n"),
                "{name}: {out}"
            );
        }
        // One byte at a time.
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let out = through_sse(&e, &mut f, &chunks);
        assert_eq!(messages(&out).len(), 2, "{name}: {out:?}");
    }
    // A CRLF whose CR ends a chunk and whose LF starts the next is one line end: the LF is
    // not a blank line ending the event early.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let out = through_sse(
        &e,
        &mut f,
        &[
            b"event: message\r",
            b"\ndata: ",
            result.as_bytes(),
            b"\r",
            b"\n\r",
            b"\n",
        ],
    );
    assert_eq!(
        names(&messages(&out)[0], "tools", "name"),
        ["echo"],
        "{out}"
    );
}

#[test]
fn the_end_of_a_stream_loses_no_complete_event() {
    let e = engine_for_listings();
    let result = TOOLS.replace('\n', "");
    // An event ended by a CR blank line at the very end of the stream is complete.
    for end in ["\r\r", "\n\n", "\r\n\r\n", "\n\r"] {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let stream = format!("data: {result}{end}");
        let out = through_sse(&e, &mut f, &[stream.as_bytes()]);
        assert_eq!(
            names(&messages(&out)[0], "tools", "name"),
            ["echo"],
            "{end:?}"
        );
    }
    // One the stream ends in the middle of is not dispatched by clients: dropped.
    for unfinished in [
        "data: {\"jsonrpc\":\"2.0\"",
        "data: {}\n",
        "data: {}\r",
        "data: {}\r\n",
    ] {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        assert_eq!(
            through_sse(&e, &mut f, &[unfinished.as_bytes()]),
            "",
            "{unfinished:?}"
        );
    }
    // Ended by trailers: what completed went out with its chunk.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    f.on_headers(&response(200, &["text/event-stream"]));
    let event = format!("data: {result}\r\r");
    let owned = event.clone().into_bytes();
    let BodyAction::Replace(out) = f.on_body(&e, event.len(), false, move |_| Some(owned)) else {
        panic!()
    };
    assert_eq!(messages(&String::from_utf8(out).unwrap()).len(), 1);
    assert_eq!(
        f.on_trailers(&e, || panic!("nothing buffered")),
        BodyAction::Pass
    );
}

#[test]
fn an_event_of_empty_type_is_a_message_and_is_filtered() {
    // Clients dispatch an event whose `event` field is empty as `message` (found by fuzzing:
    // such an event went on unread).
    let e = engine_for_listings();
    let result = TOOLS.replace('\n', "");
    for field in ["event:", "event: ", "event"] {
        let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
        let stream = format!("{field}\ndata: {result}\n\n");
        let out = through_sse(&e, &mut f, &[stream.as_bytes()]);
        assert_eq!(
            names(&messages(&out)[0], "tools", "name"),
            ["echo"],
            "{field}: {out}"
        );
    }
}

/// A request with no body (GET) from `spiffe`, with these extra headers.
fn bodiless(e: &Engine, method: &str, spiffe: &str, extra: &[(&str, &str)]) -> (RequestFlow, Next) {
    let mut h = input(spiffe, extra);
    h.headers.retain(|n, _| n != "content-type");
    h.headers.set(":method", method);
    h.end_of_stream = true;
    let mut flow = RequestFlow::new();
    let a = flow.on_headers(e, h).next;
    (flow, a)
}

/// A response to a listing that does not name the request it answers.
const OTHERS: &str = r#"{"jsonrpc":"2.0","id":41,"result":{"tools":[{"name":"echo"},{"name":"delete_repo"}],"nextCursor":"c"}}"#;

#[test]
fn get_streams_standalone_and_resumed_are_filtered_event_by_event() {
    let e = engine_for_listings();
    let sse = response(200, &["text/event-stream"]);
    let gzip = ("accept-encoding", "gzip");
    for extra in [&[gzip][..], &[gzip, ("last-event-id", "ev-3")][..]] {
        let sent = bodiless(&e, "GET", ALPHA, extra);
        let a = &sent.1;
        // The stream is asked for uncompressed, so that it can be read.
        assert_eq!(
            added(a),
            Some(vec![HeaderEdit::set("accept-encoding", "identity")]),
        );
        let mut f = response_filter(&sent, &sse).expect("a stream filter");
        assert_eq!(f.on_headers(&sse), HeadersAction::Rewrite);
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        let prompts =
            r#"{"jsonrpc":"2.0","id":"p","result":{"prompts":[{"name":"p1"},{"name":"p2"}]}}"#;
        let resources = r#"{"jsonrpc":"2.0","id":2,"result":{"resources":[{"uri":"file:///b"},{"uri":"file:///a"}]}}"#;
        let templates = r#"{"jsonrpc":"2.0","id":3,"result":{"resourceTemplates":[{"uriTemplate":"file:///{p}"}]}}"#;
        let call =
            r#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"\"tools\""}]}}"#;
        let error = r#"{"jsonrpc":"2.0","id":5,"error":{"code":-1,"message":"tools"}}"#;
        // Each chunk gives the client the events it completed, while the stream goes on.
        let mut seen = Vec::new();
        for (i, data) in [note, OTHERS, prompts, resources, templates, call, error]
            .iter()
            .enumerate()
        {
            let chunk = format!("id: ev-{i}\ndata: {data}\n\n");
            let owned = chunk.clone().into_bytes();
            let BodyAction::Replace(out) = f.on_body(&e, chunk.len(), false, move |_| Some(owned))
            else {
                panic!()
            };
            let out = String::from_utf8(out).unwrap();
            assert!(out.contains(&format!("id: ev-{i}\n")), "{out}");
            seen.extend(messages(&out));
        }
        assert_eq!(seen.len(), 7);
        assert_eq!(seen[0]["method"], "notifications/tools/list_changed");
        assert_eq!(names(&seen[1], "tools", "name"), ["echo"], "{extra:?}");
        assert_eq!(
            (
                seen[1]["id"].clone(),
                seen[1]["result"]["nextCursor"].clone()
            ),
            (json!(41), json!("c"))
        );
        assert_eq!(names(&seen[2], "prompts", "name"), ["p1"]);
        assert_eq!(names(&seen[3], "resources", "uri"), ["file:///a"]);
        assert_eq!(
            seen[4]["result"]["resourceTemplates"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(seen[5], serde_json::from_str::<Value>(call).unwrap());
        assert_eq!(seen[6], serde_json::from_str::<Value>(error).unwrap());
    }
    // Beta may read nothing: every listing it is shown is empty, templates included.
    let sent = bodiless(&e, "GET", BETA, &[]);
    let mut f = response_filter(&sent, &sse).unwrap();
    let stream = format!("data: {OTHERS}\n\n");
    let m = messages(&through(&e, &mut f, &sse, &[stream.as_bytes()]));
    assert!(names(&m[0], "tools", "name").is_empty());
}

#[test]
fn a_stream_result_with_several_listings_is_filtered_in_each() {
    let e = engine_for_listings();
    let sent = bodiless(&e, "GET", ALPHA, &[]);
    let sse = response(200, &["text/event-stream"]);
    let mut f = response_filter(&sent, &sse).unwrap();
    let both = r#"{"jsonrpc":"2.0","id":8,"result":{"prompts":[{"name":"p2"},{"name":"p1"}],"x":1,"tools":[{"name":"rm"},{"name":"echo"}]}}"#;
    let out = through(&e, &mut f, &sse, &[format!("data: {both}\n\n").as_bytes()]);
    assert_eq!(
        messages(&out)[0],
        json!({"jsonrpc":"2.0","id":8,"result":{"prompts":[{"name":"p1"}],"x":1,"tools":[{"name":"echo"}]}})
    );
}

#[test]
fn what_a_get_stream_cannot_have_read_becomes_an_error_event() {
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"maxBytes": 300});
    let e = engine(&b);
    let sse = response(200, &["text/event-stream"]);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":"big","result":{{"tools":[{}]}}}}"#,
        vec![r#"{"name":"delete_repo"}"#; 20].join(",")
    );
    let cases = [
        // A response holding a listing whose duplicate name the client reads differently.
        (
            r#"{"jsonrpc":"2.0","id":6,"result":{"tools":[{"name":"echo","name":"rm"}]}}"#
                .to_string(),
            json!(6),
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"result":{"tools":[{"name":"rm"}]},"error":{}}"#.to_string(),
            json!(6),
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"rm"}]}"#.to_string(),
            Value::Null,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"rm"}]}}]"#.to_string(),
            Value::Null,
        ),
        // Too large to hold: its id is never read.
        (big, Value::Null),
    ];
    for (data, id) in cases {
        let sent = bodiless(&e, "GET", ALPHA, &[]);
        let mut f = response_filter(&sent, &sse).unwrap();
        let stream = format!("data: {data}\n\ndata: {OTHERS}\n\n");
        let chunks: Vec<&[u8]> = stream.as_bytes().chunks(64).collect();
        let out = through(&e, &mut f, &sse, &chunks);
        let m = messages(&out);
        assert_eq!(m.len(), 2, "{out}");
        assert_eq!(
            (m[0]["id"].clone(), m[0]["error"]["code"].clone()),
            (id, json!(-32603)),
            "{data}"
        );
        assert!(!out.contains("delete_repo") && !out.contains("rm"), "{out}");
        assert_eq!(names(&m[1], "tools", "name"), ["echo"]);
    }
    // A compressed stream cannot be read: one error event, then nothing.
    let sent = bodiless(&e, "GET", ALPHA, &[]);
    let mut gz = sse.clone();
    gz.push(("content-encoding".into(), "gzip".into()));
    let mut f = response_filter(&sent, &gz).unwrap();
    assert_eq!(f.on_headers(&gz), HeadersAction::Rewrite);
    assert_eq!(f.content_type(), Some("text/event-stream"));
    let BodyAction::Replace(out) = f.on_body(&e, 5, false, |_| panic!("not read")) else {
        panic!()
    };
    let m = messages(&String::from_utf8(out).unwrap());
    assert_eq!(
        (m[0]["id"].clone(), m[0]["error"]["code"].clone()),
        (Value::Null, json!(-32603))
    );
    assert_eq!(
        f.on_body(&e, 5, false, |_| panic!()),
        BodyAction::Replace(vec![])
    );
}

#[test]
fn a_stream_answering_another_request_filters_the_listings_of_other_requests() {
    let e = engine_for_listings();
    let sse = response(200, &["text/event-stream"]);
    let call = r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"echo"}}"#;
    let sent = send(&e, ALPHA, &[], call);
    let a = &sent.1;
    assert_eq!(added(a), Some(vec![]),);
    // Its JSON answer is that call's answer: not read.
    assert!(response_filter(&sent, &response(200, &["application/json"])).is_none());
    assert!(response_filter(&sent, &response(500, &["text/html"])).is_none());
    let mut f = response_filter(&sent, &sse).expect("a stream filter");
    // A response to another request holding listings is filtered; so is one under the call's
    // own id (a server routing answers by id alone gives it a listing asked under that id on
    // another POST). Its own answer holding no listing goes on as it is.
    let own = r#"{"jsonrpc":"2.0","id":"c1","result":{"content":[],"tools":[{"name":"delete_repo"},{"name":"echo"}]}}"#;
    let plain =
        r#"{"jsonrpc":"2.0","id":"c1","result":{"content":[{"type":"text","text":"tools"}]}}"#;
    let stream = format!("data: {OTHERS}\n\ndata: {own}\n\ndata: {plain}\n\n");
    let m = messages(&through(&e, &mut f, &sse, &[stream.as_bytes()]));
    assert_eq!(names(&m[0], "tools", "name"), ["echo"]);
    assert_eq!(names(&m[1], "tools", "name"), ["echo"]);
    assert_eq!(m[1]["id"], "c1");
    assert_eq!(m[2], serde_json::from_str::<Value>(plain).unwrap());
    // What it cannot read is replaced by an error answering the call.
    let mut f = response_filter(&sent, &sse).unwrap();
    let m = messages(&through(
        &e,
        &mut f,
        &sse,
        &[b"data: {\"tools\": oops}\n\n"],
    ));
    assert_eq!(
        (m[0]["id"].clone(), m[0]["error"]["code"].clone()),
        (json!("c1"), json!(-32603))
    );
    // The same on a listing's stream: a response naming another id is filtered as what it
    // holds, not as the listing asked for.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[]);
    let prompts =
        r#"{"jsonrpc":"2.0","id":"zz","result":{"prompts":[{"name":"p2"},{"name":"p1"}]}}"#;
    let stream = format!("data: {prompts}\n\n");
    let m = messages(&through_sse(&e, &mut f, &[stream.as_bytes()]));
    assert_eq!(names(&m[0], "prompts", "name"), ["p1"]);
    // Nothing is read when listings are not filtered, or for a denied request.
    let mut b = bundle(vec![inline_tools("t", "Backend", "tools", &["echo"])], &[]);
    b["listings"] = json!({"filter": false});
    let off = engine(&b);
    let sent = bodiless(&off, "GET", ALPHA, &[]);
    let a = &sent.1;
    assert_eq!(added(a), Some(vec![]),);
    assert!(response_filter(&sent, &sse).is_none());
    let sent = send(
        &e,
        ALPHA,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"}}"#,
    );
    let a = &sent.1;
    assert!(matches!(a, Next::Respond(_)));
    assert!(response_filter(&sent, &sse).is_none());
}

#[test]
fn the_own_answer_of_a_known_method_is_filtered_of_an_unknown_one_not() {
    // alpha may send any method; nobody may call delete_repo.
    let any = json!({"name": "any", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Allow", "rules": [{"name": "alpha", "source": {"type": "SPIFFE", "spiffe": ALPHA}}]});
    let e = engine(&bundle(
        vec![any, deny_tools("no-rm", "Gateway", "gw", &["delete_repo"])],
        &[],
    ));
    let sse = response(200, &["text/event-stream"]);
    let listed = |method: &str| {
        let req = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"{method}","params":{{}}}}"#);
        let sent = send(&e, ALPHA, &[], &req);
        let mut f = response_filter(&sent, &sse).expect("a stream filter");
        let answer = r#"{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"delete_repo"},{"name":"echo"}]}}"#;
        let stream = format!("data: {answer}\n\n");
        names(
            &messages(&through(&e, &mut f, &sse, &[stream.as_bytes()]))[0],
            "tools",
            "name",
        )
    };
    // A method of the table never answers with a listing of its own: one is another request's.
    assert_eq!(listed("ping"), ["echo"]);
    assert_eq!(listed("logging/setLevel"), ["echo"]);
    // A method the table does not know: its answer is never taken for a listing (§4).
    assert_eq!(listed("x/custom"), ["delete_repo", "echo"]);
}

#[test]
fn a_header_a_route_matches_on_is_never_edited() {
    // Envoy matches the route again after an edit: Accept-Encoding is left as the client sent it.
    let mut b = bundle(vec![], &[]);
    b["envoy"] = json!({"routeMatchHeaders": ["accept-encoding"]});
    let e = engine(&b);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let (_, a) = send(&e, ALPHA, &[("accept-encoding", "gzip")], list);
    assert_eq!(added(&a), Some(vec![]));
    // A compressed listing is then refused, never passed unfiltered.
    let mut f = listing_filter(&e, ALPHA, "tools/list", &[("accept-encoding", "gzip")]);
    let mut h = response(200, &["application/json"]);
    h.push(("content-encoding".into(), "gzip".into()));
    assert_eq!(f.on_response_headers(&h), HeadersAction::Rewrite);
    assert_eq!(f.content_type(), Some("application/json"));
}

#[test]
fn a_json_answer_in_a_session_is_filtered_when_it_holds_a_listing() {
    let e = engine(&bundle(
        vec![
            json!({"name": "any", "level": "Backend", "targets": [{"name": "tools"}],
            "action": "Allow", "rules": [{"name": "alpha", "source": {"type": "SPIFFE", "spiffe": ALPHA}}]}),
            deny_tools("no-rm", "Gateway", "gw", &["delete_repo"]),
        ],
        &[],
    ));
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}}"#;
    let session = [
        ("mcp-session-id", "s-1"),
        ("accept-encoding", "gzip, deflate"),
    ];
    let json = response(200, &["application/json; charset=utf-8"]);
    let leaked =
        r#"{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"delete_repo"},{"name":"echo"}]}}"#;
    // Without a session no server routes another POST's answer here: not read.
    let sent = send(&e, ALPHA, &[], call);
    assert!(response_filter(&sent, &json).is_none());
    // In a session: asked uncompressed, read whole, the listing filtered.
    let sent = send(&e, ALPHA, &session, call);
    assert_eq!(
        added(&sent.1),
        Some(vec![HeaderEdit::set("accept-encoding", "identity")])
    );
    let own = |body: &str| {
        let mut f = response_filter(&sent, &response(200, &["Application/JSON-seq"]))
            .expect("read in a session");
        assert_eq!(
            f.on_body(&e, 3, false, |_| panic!("read only at the end")),
            BodyAction::Buffer
        );
        let owned = body.as_bytes().to_vec();
        f.on_body(&e, body.len(), true, move |_| Some(owned))
    };
    match own(leaked) {
        BodyAction::Replace(out) => {
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(names(&v, "tools", "name"), ["echo"]);
        }
        other => panic!("{other:?}"),
    }
    // The call's own result, an error, a result naming tools in its text: passed as they are.
    for body in [
        r#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"no"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"\"tools\""}]}}"#,
        "not json",
    ] {
        assert_eq!(own(body), BodyAction::Pass, "{body}");
    }
    // A listing the filter cannot read (a repeated key, a batch): the error, never the bytes.
    for body in [
        r#"{"jsonrpc":"2.0","id":5,"id":5,"result":{"tools":[{"name":"delete_repo"}]}}"#,
        r#"[{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"delete_repo"}]}}]"#,
    ] {
        match own(body) {
            BodyAction::Replace(out) => {
                let v: Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(v["error"]["code"], -32603, "{body}");
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    // Compressed anyway: not readable, refused; too large: refused.
    let mut gz = json.clone();
    gz.push(("content-encoding".into(), "gzip".into()));
    let mut f = response_filter(&sent, &gz).expect("refused");
    assert_eq!(f.content_type(), Some("application/json"));
    let mut f2 = response_filter(&sent, &json).unwrap();
    let big = 4 * 1024 * 1024 + 1; // listings.maxBytes by default, and one more
    assert!(matches!(
        f2.on_body(&e, big, false, |_| None),
        BodyAction::Replace(_)
    ));
    assert!(matches!(
        f.on_body(&e, 3, true, |_| None),
        BodyAction::Replace(_)
    ));
    // A method the table does not know: its answer is the server's own business (§4).
    let custom = r#"{"jsonrpc":"2.0","id":5,"method":"x/custom","params":{}}"#;
    assert!(response_filter(&send(&e, ALPHA, &session, custom), &json).is_none());
}

// ----- revisions (docs/semantics.md §4.4) -----

fn admit_all() -> Engine {
    engine(&bundle(vec![], &[]))
}

#[test]
fn an_unsupported_revision_is_refused_with_the_supported_list() {
    let e = admit_all();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for version in ["2024-11-05", "2027-01-01", "latest"] {
        let (_, a) = send(&e, ALPHA, &[("mcp-protocol-version", version)], ping);
        let (status, v) = rejected(a);
        assert_eq!(status, 400, "{version}");
        assert_eq!(v["error"]["code"], -32022);
        assert_eq!(v["error"]["data"]["requested"], version);
        assert_eq!(
            v["error"]["data"]["supported"],
            json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
        );
    }
    // The revision initialize asks for, too.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#;
    assert_eq!(
        rejected(send(&e, ALPHA, &[], init).1).1["error"]["code"],
        -32022
    );
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    assert!(matches!(send(&e, ALPHA, &[], init).1, Next::Allow { .. }));
    // A bodiless request's header is checked too.
    let get = |version: &str, method: &str| {
        let mut h = input(
            ALPHA,
            &[("mcp-protocol-version", version), ("mcp-session-id", "s")],
        );
        h.headers.set(":method", method);
        h.end_of_stream = true;
        RequestFlow::new().on_headers(&e, h).next
    };
    assert_eq!(rejected(get("1999-01-01", "GET")).0, 400);
    // 2026-07-28 has no GET stream and no sessions to DELETE.
    for method in ["GET", "DELETE"] {
        let (status, v) = rejected(get("2026-07-28", method));
        assert_eq!(
            (status, v["error"]["code"].clone()),
            (405, json!(-32601)),
            "{method}"
        );
        assert!(
            matches!(get("2025-11-25", method), Next::Allow { .. }),
            "{method}"
        );
    }
}

#[test]
fn a_method_the_revision_does_not_have_is_not_found() {
    let e = admit_all();
    let v26 = |m: &'static str| [("mcp-protocol-version", "2026-07-28"), ("mcp-method", m)];
    for m in ["initialize", "ping", "logging/setLevel", "tasks/list"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        let (flow, a) = send(&e, ALPHA, &v26(m), &body);
        let (status, v) = rejected(a);
        assert_eq!(
            (status, v["error"]["code"].clone()),
            (404, json!(-32601)),
            "{m}"
        );
        assert_eq!(
            flow.outcome().unwrap().reason.as_str(),
            "method_not_in_revision"
        );
    }
    let sub =
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#;
    assert_eq!(
        rejected(send(&e, ALPHA, &v26("resources/subscribe"), sub).1).0,
        404
    );
    // server/discover only exists in 2026-07-28; a request naming no revision is 2025-03-26.
    let discover = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#;
    assert_eq!(rejected(send(&e, ALPHA, &[], discover).1).0, 404);
    assert!(matches!(
        send(&e, ALPHA, &v26("server/discover"), discover).1,
        Next::Allow { .. }
    ));
    let tasks = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t"}}"#;
    let v25 = [("mcp-protocol-version", "2025-11-25")];
    assert!(matches!(send(&e, ALPHA, &v25, tasks).1, Next::Allow { .. }));
    let v0618 = [("mcp-protocol-version", "2025-06-18")];
    assert_eq!(rejected(send(&e, ALPHA, &v0618, tasks).1).0, 404);
    // Methods the table does not know are left to the policies.
    let custom = r#"{"jsonrpc":"2.0","id":1,"method":"x/custom"}"#;
    assert!(matches!(
        send(&e, ALPHA, &v26("x/custom"), custom).1,
        Next::Allow { .. }
    ));
}

#[test]
fn subscriptions_listen_is_base_protocol_and_its_uris_are_judged_as_subscribe() {
    let allow = json!({"name": "subs", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Allow", "rules": [{"name": "r",
            "authorization": {"mcp": {"baseProtocol": "Match", "methods": [
                {"name": "resources/subscribe", "params": ["file:///a"]}]}}}]});
    let e = engine(&bundle(vec![allow], &[]));
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    let listen = |uris: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"notifications":{{"toolsListChanged":true,"resourceSubscriptions":[{uris}]}}}}}}"#
        )
    };
    assert!(matches!(
        send(&e, ALPHA, &headers, &listen("")).1,
        Next::Allow { .. }
    ));
    let a = send(&e, ALPHA, &headers, &listen(r#""file:///a""#)).1;
    assert!(matches!(a, Next::Allow { .. }), "{a:?}");
    let (flow, a) = send(
        &e,
        ALPHA,
        &headers,
        &listen(r#""file:///a","file:///secret""#),
    );
    let (status, v) = rejected(a);
    assert_eq!((status, v["error"]["code"].clone()), (403, json!(-32010)));
    assert_eq!(flow.outcome().unwrap().reason.as_str(), "not_allowed");
    // Not an array of strings: invalid params.
    let (_, a) = send(&e, ALPHA, &headers, &listen(r#""file:///a",7"#));
    assert_eq!(rejected(a).1["error"]["code"], -32602);
}
