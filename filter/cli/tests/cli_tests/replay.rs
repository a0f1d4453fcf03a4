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

/// Gateway mcp/gw (listener http :8080) routing /mcp to XBackend mcp/tools, where an Allow
/// policy admits `tools/call` when the CEL `expression` holds.
fn cel_allowed(expression: &str) -> mcp_access_k8s::Compiled {
    use crate::common::{gateway, load, route, stream, to_xbackend, xbackend};
    let infra = stream(&[
        gateway("mcp", "gw", &[("http", 8080)]),
        route("mcp", "r", "name: gw", &to_xbackend(Some("/mcp"), "tools")),
        xbackend("mcp", "tools", "tools", 8000, Some("/mcp")),
    ]);
    let policy = format!(
        "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {{name: p, namespace: mcp}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]\n  action: Allow\n  rules:\n  - name: when\n    authorization:\n      type: CEL\n      cel: {{expression: {}}}\n",
        serde_json::to_string(expression).unwrap()
    );
    let c = mcp_access_k8s::compile(&load(&infra, &[policy]), &Default::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

/// An allowed `tools/call x` as the filter records it, with `extra` members in `request`.
fn allowed_call(extra: Value) -> Value {
    let mut request = json!({"arguments": null, "headers": {}, "host": "gw.example", "jwt": null,
        "method": "POST", "path": "/mcp", "port": 8080, "revision": "2025-11-25", "route": null});
    for (k, v) in extra.as_object().unwrap() {
        request[k] = v.clone();
    }
    json!({"decision": "allow", "listener": "mcp/gw/http", "backend": "mcp/tools",
           "method": "tools/call", "name": "x", "policy": "mcp/p", "rule": "when",
           "reason": "allowed", "level": "backend", "request": request})
}

#[test]
fn replay_decides_at_the_recorded_time() {
    use mcp_access_cli::replay::replay;
    let c = cel_allowed("request.time.getFullYear() < 2000");
    // 1999-09-09: allowed then, under the same manifests allowed again.
    let r = allowed_call(json!({"time": 936_900_000_000_000_000_i64}));
    let out = replay(&c.bundle, Some(&c.topology), &[r], &Default::default());
    assert_eq!((out.replayed, out.flips.len()), (1, 0), "{out:?}");
}

#[test]
fn replay_skips_a_record_whose_cel_read_what_it_does_not_hold() {
    use mcp_access_cli::replay::replay;
    let c = cel_allowed("request.headers['x-team'] == 'blue'");
    let r = allowed_call(json!({"unrecorded": ["request.headers"]}));
    let out = replay(&c.bundle, Some(&c.topology), &[r], &Default::default());
    assert_eq!((out.replayed, out.flips.len()), (0, 0), "{out:?}");
    let why = "the decision read request.headers, which the record does not hold";
    assert_eq!(out.skipped.get(why), Some(&1), "{out:?}");
}

#[test]
fn replay_skips_a_denial_for_drift_it_cannot_see() {
    use mcp_access_cli::replay::replay;
    let c = cel_allowed("request.mcp.tool_name == 'x'");
    let mut r = allowed_call(json!({}));
    r["decision"] = json!("deny");
    r["reason"] = json!("tool_drifted");
    let out = replay(&c.bundle, Some(&c.topology), &[r], &Default::default());
    assert_eq!((out.replayed, out.flips.len()), (0, 0), "{out:?}");
    assert_eq!(out.skipped.len(), 1, "{out:?}");
    assert!(out.skipped.keys().all(|k| k.contains("drifted")), "{out:?}");
}
