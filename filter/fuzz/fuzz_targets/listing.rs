//! The listing filter (docs/semantics.md §5.4) on arbitrary upstream answers: the first input
//! byte picks JSON or SSE (low bit) and the chunk size (the rest), the remaining bytes are the
//! body. Besides never panicking, it checks that nothing the caller may not call gets through:
//! every listed tool in what the client receives is one the caller may call (`echo`), and
//! every JSON-RPC message the client can read with a result is a filtered listing or an
//! `input_required` result.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::listing::BodyAction;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Caller;
use serde_json::Value;

const BUNDLE: &str = r#"{"apiVersion": "mcp-access.io/v1",
  "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
  "backends": [{"name": "tools", "routeNames": ["tools"]}],
  "policies": [{"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
    "rules": [{"name": "r", "authorization": {"mcp": {"baseProtocol": "Match",
      "methods": [{"name": "tools/call", "params": ["echo"]}]}}}]}],
  "listings": {"maxBytes": 4096}}"#;

fn setup() -> &'static (Engine, RequestFlow) {
    static SETUP: OnceLock<(Engine, RequestFlow)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let engine = match Engine::from_json(BUNDLE.as_bytes()) {
            Ok(e) => e,
            Err(e) => panic!("the bundle does not load: {e}"),
        };
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
        flow.on_headers(&engine, input);
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
        let a = flow.on_body(&engine, body.len(), true, move |_| Some(body));
        assert!(matches!(a, Next::Allow { .. }), "{a:?}");
        (engine, flow)
    })
}

/// Every JSON-RPC message with a result lists only `echo` (or is an input_required result).
fn check_message(text: &str) {
    // What a client reads: the last of duplicate keys, as serde_json does.
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let Some(result) = v.get("result") else {
        return;
    };
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return;
    }
    let tools = result.get("tools").and_then(Value::as_array);
    let Some(tools) = tools else {
        panic!("a result that is not a filtered listing got through: {text}");
    };
    for t in tools {
        assert_eq!(
            t.get("name").and_then(Value::as_str),
            Some("echo"),
            "{text}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let (engine, flow) = setup();
    let Some(mut f) = flow.listing_filter(engine) else {
        panic!("no listing filter");
    };
    let sse = first & 1 == 1;
    let chunk = usize::from(first >> 1).max(1);
    let media = if sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    f.on_headers(&[
        (":status".into(), "200".into()),
        ("content-type".into(), media.into()),
    ]);
    let mut out = Vec::new();
    let mut buffered = Vec::new();
    let chunks: Vec<&[u8]> = body.chunks(chunk).collect();
    let last = chunks.len().saturating_sub(1);
    for (i, c) in chunks.iter().enumerate() {
        buffered.extend_from_slice(c);
        let held = buffered.clone();
        match f.on_body(engine, held.len(), i == last, move |_| Some(held)) {
            BodyAction::Pass => out.append(&mut buffered),
            BodyAction::Buffer { drop_buffer } => {
                if drop_buffer {
                    buffered.clear();
                }
            }
            BodyAction::Replace(b) => {
                out.extend(b);
                buffered.clear();
            }
        }
    }
    let text = String::from_utf8_lossy(&out);
    if sse {
        for event in text.split("\n\n") {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            check_message(&data.join("\n"));
        }
    } else if !out.is_empty() {
        check_message(&text);
    }
});
