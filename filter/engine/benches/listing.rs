//! The cost of filtering a listing per caller (docs/semantics.md §5.4): a `tools/list` answer of
//! 1,000 tools (each with a description and an input schema, about 300 KB in all), of which
//! the caller may call half and a Deny policy removes some, as one JSON body and as one SSE event
//! arriving in 16 KiB chunks; and the same JSON body from a backend whose ToolPin pins every
//! tool (each tool digested as it is read, docs/semantics.md §5.5). The JSON and SSE ones each
//! filtered afresh, and `_reused`: the same answer for the same caller, reused (issue 25 P7).
//!
//! `cargo bench -p mcp-access-engine --bench listing`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use mcp_access_engine::canonical_json::digest_of;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::listing::{BodyAction, ListingFilter};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Caller;
use mcp_access_engine::request::Headers;
use serde_json::{json, Value};

const TOOLS: usize = 1000;
const CALLER: &str = "spiffe://example.org/ns/agents/sa/alpha";

fn tool(i: usize) -> String {
    format!("tool-{i:04}")
}

fn engine() -> Engine {
    Engine::from_json(bundle(None).to_string().as_bytes()).unwrap()
}

/// The engine with every tool of [`listing`] pinned.
fn pinned_engine() -> Engine {
    let tools: Vec<Value> = listing_tools()
        .iter()
        .map(|t| {
            let text = serde_json::to_vec(t).unwrap();
            json!({"name": t["name"], "digest": digest_of(&text, 64).unwrap().to_text()})
        })
        .collect();
    let pins = json!({"source": "default/pins", "tools": tools});
    Engine::from_json(bundle(Some(pins)).to_string().as_bytes()).unwrap()
}

fn bundle(pins: Option<Value>) -> Value {
    let allowed: Vec<String> = (0..TOOLS).step_by(2).map(tool).collect();
    let denied: Vec<String> = (0..TOOLS).step_by(10).map(tool).collect();
    let mut bundle = json!({
        "apiVersion": "mcp-access.io/v1",
        "gateways": [{"name": "gw", "listeners": [{"name": "mcp", "port": 10000}]}],
        "backends": [{"name": "tools", "routeNames": ["tools"]}],
        "policies": [
            {"name": "allow-half", "level": "Backend", "targets": [{"name": "tools"}],
             "action": "Allow", "rules": [{"name": "alpha",
                "source": {"type": "SPIFFE", "spiffe": CALLER},
                "authorization": {"mcp": {"baseProtocol": "Match",
                    "methods": [{"name": "tools/call", "params": allowed}]}}}]},
            {"name": "deny-some", "level": "Gateway", "targets": [{"name": "gw"}],
             "action": "Deny", "rules": [{"name": "tenth",
                "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": denied}]}}}]},
        ],
    });
    if let Some(p) = pins {
        bundle["backends"][0]["pins"] = p;
    }
    bundle
}

fn listing_tools() -> Vec<Value> {
    (0..TOOLS)
        .map(|i| {
            json!({"name": tool(i), "description": format!("Tool number {i}, which does one thing well."),
                   "inputSchema": {"type": "object", "properties": {
                       "text": {"type": "string", "description": "what to work on"},
                       "count": {"type": "integer", "minimum": 0}}, "required": ["text"]}})
        })
        .collect()
}

fn listing() -> Vec<u8> {
    let tools = listing_tools();
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1,
        "result": {"tools": tools, "nextCursor": "next", "ttlMs": 60000}}))
    .unwrap()
}

/// The listing filter of an allowed tools/list request of the caller.
fn allowed_listing_request(e: &Engine) -> (ListingFilter, RequestFlow) {
    let mut flow = RequestFlow::new();
    let input = HeadersInput {
        headers: Headers::from(vec![
            (":method", "POST"),
            (":path", "/mcp"),
            (":authority", "gw"),
            ("content-type", "application/json"),
        ]),
        end_of_stream: false,
        time: None,
        peers: None,
        port: 10000,
        route_name: Some("tools".into()),
        cluster_name: None,
        caller: Caller {
            credential: false,
            spiffe: Some(CALLER.into()),
            jwts: vec![],
        },
    };
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
    match flow.on_body(e, body.len(), true, move |_| Some(body)).next {
        Next::Allow { .. } => match flow.response_filter() {
            Some(f) => (f.clone(), flow),
            None => panic!("no listing filter"),
        },
        other => panic!("{other:?}"),
    }
}

fn kept(out: &[u8]) -> usize {
    let text = std::str::from_utf8(out).unwrap();
    let data = text.strip_prefix("data: ").unwrap_or(text).trim_end();
    let v: Value = serde_json::from_str(data).unwrap();
    v["result"]["tools"].as_array().unwrap().len()
}

fn main() {
    let e = engine();
    let (filter, flow) = allowed_listing_request(&e);
    let body = listing();
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(&body);
    event.extend_from_slice(b"\n\n");

    let pinned = pinned_engine();
    let (pinned_filter, pinned_flow) = allowed_listing_request(&pinned);
    // `reuse`: as a filter does (the same answer for the same caller is reused from the second
    // time on); else each filtering afresh.
    let json_of = |e: &Engine, filter: &ListingFilter, flow: &RequestFlow, reuse: bool| {
        let mut f = filter.clone();
        if !reuse {
            f = f.without_reuse();
        }
        f.on_headers(&Headers::from([
            (":status", "200"),
            ("content-type", "application/json"),
        ]));
        let owned = body.clone();
        match f.on_body(e, flow.request(), body.len(), true, move |_| Some(owned)) {
            BodyAction::Replace(out) => out,
            other => panic!("{other:?}"),
        }
    };
    let json_once = |reuse| json_of(&e, &filter, &flow, reuse);
    let pinned_once = || json_of(&pinned, &pinned_filter, &pinned_flow, true);
    let sse_once = |reuse: bool| {
        let mut f = filter.clone();
        if !reuse {
            f = f.without_reuse();
        }
        f.on_headers(&Headers::from([
            (":status", "200"),
            ("content-type", "text/event-stream"),
        ]));
        let mut out = Vec::new();
        let chunks: Vec<&[u8]> = event.chunks(16 * 1024).collect();
        for (i, c) in chunks.iter().enumerate() {
            let owned = c.to_vec();
            if let BodyAction::Replace(b) = f.on_body(
                &e,
                flow.request(),
                c.len(),
                i + 1 == chunks.len(),
                move |_| Some(owned),
            ) {
                out.extend(b);
            }
        }
        out
    };
    // 500 allowed, of which the 100 multiples of ten are denied.
    for reuse in [false, true, true] {
        assert_eq!(kept(&json_once(reuse)), 400);
        assert_eq!(kept(&sse_once(reuse)), 400);
    }
    // Every tool matches its pin: the same 400.
    assert_eq!(kept(&pinned_once()), 400);
    eprintln!("listing: {} tools, {} bytes", TOOLS, body.len());
    // MCP_ACCESS_COUNT=json:N, sse:N, json_fresh:N, sse_fresh:N or pinned:N runs one filtering N times and exits (instruction counts
    // with callgrind: two values of N, difference / delta N).
    if let Ok(spec) = std::env::var("MCP_ACCESS_COUNT") {
        let (op, n) = spec.split_once(':').unwrap();
        for _ in 0..n.parse::<usize>().unwrap() {
            match op {
                "json" => drop(black_box(json_once(true))),
                "sse" => drop(black_box(sse_once(true))),
                "json_fresh" => drop(black_box(json_once(false))),
                "sse_fresh" => drop(black_box(sse_once(false))),
                "pinned" => drop(black_box(pinned_once())),
                other => panic!("unknown operation {other}"),
            }
        }
        return;
    }

    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    c.bench_function("listing_1000_tools_json", |b| {
        b.iter(|| black_box(json_once(false)))
    });
    c.bench_function("listing_1000_tools_sse_16k_chunks", |b| {
        b.iter(|| black_box(sse_once(false)))
    });
    c.bench_function("listing_1000_tools_json_reused", |b| {
        b.iter(|| black_box(json_once(true)))
    });
    c.bench_function("listing_1000_tools_sse_16k_chunks_reused", |b| {
        b.iter(|| black_box(sse_once(true)))
    });
    c.bench_function("listing_1000_tools_json_pinned", |b| {
        b.iter(|| black_box(pinned_once()))
    });
    c.bench_function("listing_copy_baseline", |b| {
        b.iter(|| black_box(body.clone()))
    });
    c.final_summary();
}
