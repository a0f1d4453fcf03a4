//! Decision records read back (docs/semantics.md §3.9): whatever the values a caller can shape
//! (a tool name, a header a rule reads, the other fields of an access-log entry), every record the
//! filter writes is read back, in order, unchanged, from Envoy's log lines and from access-log
//! entries alike; none is lost, split or forged, and no line is reported unreadable.
//!
//! Input: UTF-8 (lossy) values separated by U+001F; each pair of values makes one record (its
//! `name` and an `x-note` header copy), written as a decision log line (even records) or an
//! access-log entry whose other field holds the second value (odd), lines ended by LF or CRLF.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::records::{records, LOG_PREFIX};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let values: Vec<&str> = text.split('\u{1f}').collect();
    let mut log = String::new();
    let mut want: Vec<Value> = Vec::new();
    for (i, pair) in values.chunks(2).enumerate() {
        let (name, note) = (pair[0], pair.get(1).copied().unwrap_or(LOG_PREFIX));
        let record = json!({"decision": "allow", "method": "tools/call", "name": name,
                            "request": {"headers": {"x-note": [note]}}});
        if i % 2 == 0 {
            log.push_str(&format!(
                "[2026-12-04][info][wasm] wasm log mcp_access: {LOG_PREFIX}{record}"
            ));
        } else {
            let entry = json!({"filter_state": record.to_string(), "path": note});
            log.push_str(&entry.to_string());
        }
        log.push_str(if i % 3 == 0 { "\r\n" } else { "\n" });
        want.push(record);
    }
    let (got, bad) = records(log.as_bytes(), "fuzz.log");
    assert!(bad.is_empty(), "{bad:?}\n{log}");
    assert_eq!(got, want, "{log}");
});
