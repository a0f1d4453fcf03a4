//! `replay` reads decision records by structure: a value inside a record never hides, splits or
//! forges one, and a line that cannot be read is reported by number while the others are read.

use mcp_access_cli::replay::{records, LOG_PREFIX};
use serde_json::{json, Value};

fn record(name: &str) -> Value {
    json!({"decision": "allow", "method": "tools/call", "name": name, "listener": "mcp/gw/l",
           "request": {"headers": {"x-note": format!("{LOG_PREFIX}{{\"decision\":\"deny\"}}")}}})
}

#[test]
fn a_value_holding_the_prefix_hides_no_record() {
    let names = [
        format!("{LOG_PREFIX}x"),
        format!("x\"}} {LOG_PREFIX}{{\"decision\":\"deny\"}}"),
        "plain".to_string(),
        format!("{LOG_PREFIX}{LOG_PREFIX}"),
    ];
    let mut log = String::new();
    for n in &names {
        let r = record(n);
        // Envoy's log line, and an access-log entry whose filter_state is the record.
        log.push_str(&format!(
            "[2026-12-04 00:00:00.000][12][info][wasm] wasm log mcp_access: {LOG_PREFIX}{r}\n"
        ));
        let entry = json!({"method": "POST", "filter_state": r.to_string(), "note": LOG_PREFIX});
        log.push_str(&format!("{entry}\r\n"));
    }
    let (found, bad) = records(log.as_bytes(), "envoy.log");
    assert!(bad.is_empty(), "{bad:?}");
    let got: Vec<&str> = found.iter().map(|r| r["name"].as_str().unwrap()).collect();
    let want: Vec<&str> = names
        .iter()
        .flat_map(|n| [n.as_str(), n.as_str()])
        .collect();
    assert_eq!(got, want);
    assert!(found.iter().all(|r| r["decision"] == "allow"));
}

#[test]
fn an_unreadable_line_is_reported_by_number_and_the_rest_still_read() {
    let good = format!("{LOG_PREFIX}{}", record("echo"));
    let mut log = Vec::new();
    log.extend_from_slice(format!("{good}\n").as_bytes());
    log.extend_from_slice(
        b"[info] mcp-access decision {\"decision\":\"allow\",\"name\":\"\xff\"}\n",
    );
    log.extend_from_slice(format!("{LOG_PREFIX}{{\"decision\": \"allow\", \"name\"\n").as_bytes());
    log.extend_from_slice(b"an unrelated line\n{\"unrelated\": true}\n");
    log.extend_from_slice(format!("{good}\n").as_bytes());
    let (found, bad) = records(&log, "a.log");
    assert_eq!(found.len(), 2);
    let at: Vec<&str> = bad.iter().map(|u| u.at.as_str()).collect();
    assert_eq!(at, ["a.log:2", "a.log:3"], "{bad:?}");
    assert_eq!(bad[0].why, "not UTF-8");
    assert!(bad[1].why.contains("does not parse"), "{bad:?}");
}

#[test]
fn envoy_json_logs_and_entries_without_a_decision() {
    let r = record("echo");
    let envoy_json =
        json!({"time": "t", "level": "info", "msg": format!("wasm log: {LOG_PREFIX}{r}")});
    let undecided = json!({"method": "GET", "filter_state": "-"});
    let log = format!("{envoy_json}\n{undecided}\n");
    let (found, bad) = records(log.as_bytes(), "envoy.json");
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(found, [r]);
}
