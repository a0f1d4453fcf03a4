//! Decision records read back (docs/semantics.md §3.9): whatever the values a caller can shape
//! (a tool name, a header a rule reads, the other fields of an access-log entry), every record the
//! filter writes is read back, in order, unchanged, from Envoy's log lines and from access-log
//! entries alike; none is lost, split or forged, and no line is reported unreadable.
//!
//! Input: UTF-8 (lossy) values separated by U+001F; each pair of values makes two records: one
//! built as JSON (its `name` and an `x-note` header copy), and one the filter itself writes
//! ([`mcp_access_engine::flow::Outcome::to_json`]) for a request through the engine whose tool
//! name is the first value and whose `x-debug` header (a rule reads it) and JWT subject are the
//! second. Each is written as a decision log line (even records) or an access-log entry whose
//! other field holds the second value (odd), lines ended by LF or CRLF.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::records::{records, LOG_PREFIX};
use mcp_access_engine::flow::{HeadersInput, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::{Caller, Headers, JwtPrincipal};
use serde_json::{json, Value};

/// The fuzz bundle with rules of every kind (a header rule reads `x-debug`).
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        match Engine::from_json(include_str!("../bundles/rules.json").as_bytes()) {
            Ok(e) => e,
            Err(e) => panic!("the fixed bundle does not load: {e}"),
        }
    })
}

/// The record the filter writes for a call of tool `name` with `x-debug: note` by a caller
/// whose verified JWT's subject is `note`.
fn written(name: &str, note: &str) -> Value {
    let e = engine();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": name, "arguments": {"note": note}}})
    .to_string();
    let headers = vec![
        (":method", "POST"),
        (":path", "/mcp"),
        (":authority", "gw.example.org"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
        ("x-debug", note),
    ];
    let mut flow = RequestFlow::new();
    let input = HeadersInput {
        peers: None,
        headers: Headers::from(headers),
        end_of_stream: false,
        time: None,
        port: 8443,
        route_name: Some("tools-route".into()),
        cluster_name: None,
        caller: Caller {
            jwts: vec![JwtPrincipal {
                issuer: "https://idp.example".into(),
                subject: Some(note.into()),
                ..JwtPrincipal::default()
            }],
            ..Caller::default()
        },
    };
    flow.on_headers(e, input);
    let len = body.len();
    flow.on_body(e, len, true, move |_| Some(body.into_bytes()));
    let Some(outcome) = flow.outcome() else {
        panic!("the flow ended without an outcome")
    };
    let json = outcome.to_json(e);
    match serde_json::from_str(&json) {
        Ok(v) => v,
        Err(err) => panic!("the filter wrote a record that does not parse ({err}): {json}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let values: Vec<&str> = text.split('\u{1f}').collect();
    let mut log = String::new();
    let mut want: Vec<Value> = Vec::new();
    for (i, pair) in values.chunks(2).enumerate() {
        let (name, note) = (pair[0], pair.get(1).copied().unwrap_or(LOG_PREFIX));
        let record = json!({"decision": "allow", "method": "tools/call", "name": name,
                            "request": {"headers": {"x-note": [note]}}});
        for (j, record) in [record, written(name, note)].into_iter().enumerate() {
            if (i + j) % 2 == 0 {
                log.push_str(&format!(
                    "[2026-12-04][info][wasm] wasm log mcp_access: {LOG_PREFIX}{record}"
                ));
            } else {
                let entry = json!({"filter_state": record.to_string(), "path": note});
                log.push_str(&entry.to_string());
            }
            log.push_str(if (i + j) % 3 == 0 { "\r\n" } else { "\n" });
            want.push(record);
        }
    }
    let (got, bad) = records(log.as_bytes(), "fuzz.log");
    assert!(bad.is_empty(), "{bad:?}\n{log}");
    assert_eq!(got, want, "{log}");
});
