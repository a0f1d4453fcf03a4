//! Per-item judgement of a listing (docs/semantics.md §5.4) under CEL rules that read
//! `request.mcp.params`: each listed tool must be judged as a call of that tool alone,
//! whatever the listing request's own params hold. The input is the `tools/list` request's
//! params (JSON text, up to the first 0xff byte), then tool names separated by 0xff bytes. The
//! filtered answer must list exactly the tools for which a `tools/call` with params
//! `{"name": tool}` (and nothing else) is allowed through the same flow.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::listing::BodyAction;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::{Caller, Headers};
use serde_json::{json, Value};

/// Allow: the base protocol, `echo` and `add`, names starting with `ok_`, names starting with
/// `p_` when params hold nothing but the name, names the arguments would name; Deny: names
/// ending in `_x`, and any call whose params hold `arguments` asking for `deny`.
const BUNDLE: &str = r#"{"apiVersion": "mcp-access.io/v1",
  "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
  "backends": [{"name": "tools", "routeNames": ["tools"]}],
  "policies": [
    {"name": "allow", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
     "rules": [
      {"name": "base", "authorization": {"mcp": {"baseProtocol": "Match"}}},
      {"name": "named", "authorization": {"cel":
        "request.mcp.method == 'tools/call' && (request.mcp.params.name in ['echo', 'add'] || request.mcp.params.name.startsWith('ok_'))"}},
      {"name": "alone", "authorization": {"cel":
        "request.mcp.method == 'tools/call' && size(request.mcp.params) == 1 && request.mcp.params.name.startsWith('p_')"}},
      {"name": "by-arguments", "authorization": {"cel":
        "request.mcp.method == 'tools/call' && request.mcp.params.arguments.tool == request.mcp.params.name"}}]},
    {"name": "deny", "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny",
     "rules": [
      {"name": "suffix", "authorization": {"cel": "request.mcp.method == 'tools/call' && request.mcp.params.name.endsWith('_x')"}},
      {"name": "asked", "authorization": {"cel": "request.mcp.method == 'tools/call' && 'arguments' in request.mcp.params && request.mcp.params.arguments == 'deny'"}}]}],
  "listings": {"maxBytes": 65536}}"#;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| match Engine::from_json(BUNDLE.as_bytes()) {
        Ok(e) => e,
        Err(e) => panic!("the bundle does not load: {e}"),
    })
}

/// One POST through the flow; the flow (for its listing filter) and what it decided.
fn post(engine: &Engine, body: Vec<u8>) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new();
    let headers = [
        (":method", "POST"),
        (":path", "/mcp"),
        ("content-type", "application/json"),
    ];
    let input = HeadersInput {
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        end_of_stream: false,
        time: None,
        peers: None,
        port: 8443,
        route_name: Some("tools".into()),
        cluster_name: None,
        caller: Caller::default(),
    };
    assert_eq!(flow.on_headers(engine, input).next, Next::Hold);
    let a = flow.on_body(engine, body.len(), true, move |_| Some(body)).next;
    (flow, a)
}

/// Whether a call of `tool` alone is allowed.
fn callable(engine: &Engine, tool: &str) -> bool {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}});
    let (_, a) = post(engine, body.to_string().into_bytes());
    matches!(a, Next::Allow { .. })
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0xff);
    let params = parts.next().unwrap_or_default();
    let Ok(params) = serde_json::from_slice::<Value>(params) else {
        return;
    };
    let names: Vec<String> = parts
        .filter_map(|n| std::str::from_utf8(n).ok())
        .map(str::to_string)
        .collect();
    let engine = engine();
    let request = json!({"jsonrpc": "2.0", "id": "L", "method": "tools/list", "params": params});
    let (flow, a) = post(engine, request.to_string().into_bytes());
    let mut f = match (a, flow.response_filter()) {
        (Next::Allow { .. }, Some(f)) => f.clone(),
        (Next::Allow { .. }, None) => panic!("an allowed tools/list has no listing filter"),
        _ => return,
    };
    f.on_headers(&Headers::from([
        (":status", "200"),
        ("content-type", "application/json"),
    ]));
    let tools: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    let answer = json!({"jsonrpc": "2.0", "id": "L", "result": {"tools": tools}})
        .to_string()
        .into_bytes();
    let answer_len = answer.len();
    let out = match f.on_body(engine, flow.request(), answer.len(), true, move |_| {
        Some(answer)
    }) {
        BodyAction::Replace(out) => out,
        other => panic!("a whole JSON listing was not rewritten: {other:?}"),
    };
    let v: Value = match serde_json::from_slice(&out) {
        Ok(v) => v,
        Err(e) => panic!("the filtered listing is not JSON ({e})"),
    };
    let Some(listed) = v["result"]["tools"].as_array() else {
        // Only a listing over listings.maxBytes is replaced by an error.
        assert!(answer_len > 65536, "no listing: {v}");
        return;
    };
    let got: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    let want: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| callable(engine, n))
        .collect();
    assert_eq!(got, want, "listing request params {params}");
});
