//! Rate limits through the flow: charged after the access decision allowed, refused with 429
//! and nothing charged, counted per counter value with one "unidentified" bucket, kept across
//! an engine rebuilt from the same limit and reset when the limit changes.

use std::rc::Rc;

use mcp_access_engine::flow::{drive, Next, Reply, RequestFlow, RATE_LIMITED_CODE};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::ratelimit::store::{prepare, MemoryCounterStore};
use serde_json::{json, Value};

use crate::common::{bundle, engine, inline_tools, post_input, ALPHA, BETA};

fn limits(rate_limits: Value) -> Engine {
    let mut b = bundle(
        vec![inline_tools("allow", "Backend", "tools", &["echo", "rm"])],
        &[],
    );
    b["rateLimits"] = rate_limits;
    engine(&b)
}

fn limit(name: &str, limit: u64, counters: Value, when: Value) -> Value {
    json!({"namespace": "mcp", "policy": "quotas", "name": name, "level": "Backend",
           "targets": [{"name": "tools", "namespace": "default"}],
           "rates": [{"limit": limit, "windowSeconds": 60}],
           "counters": counters, "when": when})
}

fn call(tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    )
}

/// One call of `tool` by `spiffe` through a flow charging `store`.
fn post(
    e: &Engine,
    store: &Rc<MemoryCounterStore>,
    spiffe: &str,
    tool: &str,
) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new().with_counter_store(store.clone());
    assert_eq!(flow.on_headers(e, post_input(spiffe, &[])).next, Next::Hold);
    let body = call(tool).into_bytes();
    let a = flow.on_body(e, body.len(), true, move |_| Some(body)).next;
    let a = drive(&mut flow, e, a, |_| Reply::status(200));
    (flow, a)
}

/// A store as the filter prepares it when its configuration is loaded.
fn store() -> Rc<MemoryCounterStore> {
    let s = MemoryCounterStore::default();
    s.now_ns.set(120 * 1_000_000_000);
    prepare(&s).unwrap();
    Rc::new(s)
}

fn refused(next: &Next) -> Option<Value> {
    match next {
        Next::Respond(r) if r.status == 429 => {
            let h = |n: &str| {
                r.headers
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone())
            };
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            let data = &body["error"]["data"];
            assert_eq!(h("retry-after"), Some(data["retryAfter"].to_string()));
            if data["reason"] == "rate_limited" {
                let limit = data["limit"].as_str().unwrap();
                let policy = h("ratelimit-policy").unwrap();
                assert!(policy.starts_with(&format!("\"{limit}\";q=")), "{policy}");
                assert_eq!(
                    h("ratelimit"),
                    Some(format!("\"{limit}\";r=0;t={}", data["retryAfter"]))
                );
            }
            Some(body)
        }
        _ => None,
    }
}

#[test]
fn per_caller_limits_refuse_with_429_and_name_the_limit() {
    let e = limits(json!([limit(
        "calls",
        2,
        json!(["source.principal"]),
        json!([])
    )]));
    let s = store();
    for _ in 0..2 {
        let (flow, next) = post(&e, &s, ALPHA, "echo");
        assert!(matches!(next, Next::Allow { .. }), "{next:?}");
        assert_eq!(flow.outcome().unwrap().limits.charged, ["mcp/quotas/calls"]);
    }
    let (flow, next) = post(&e, &s, ALPHA, "echo");
    let body = refused(&next).expect("the third call is refused");
    assert_eq!(body["error"]["code"], RATE_LIMITED_CODE);
    assert_eq!(body["id"], 7);
    assert_eq!(
        body["error"]["data"],
        json!({"reason": "rate_limited", "limit": "mcp/quotas/calls", "retryAfter": 60})
    );
    let o = flow.outcome().unwrap();
    assert_eq!(
        (o.allowed, o.status, o.reason.as_str()),
        (false, Some(429), "rate_limited")
    );
    assert_eq!(o.limits.refused.as_deref(), Some("mcp/quotas/calls"));
    // Another caller has its own bucket.
    assert!(matches!(post(&e, &s, BETA, "echo").1, Next::Allow { .. }));
    // The next window has room again.
    s.now_ns.set(180 * 1_000_000_000);
    assert!(matches!(post(&e, &s, ALPHA, "echo").1, Next::Allow { .. }));
}

#[test]
fn a_denied_request_consumes_nothing_and_no_partial_charge() {
    let e = limits(json!([
        limit("all", 3, json!([]), json!([])),
        limit("rm", 1, json!([]), json!(["request.mcp.tool_name == 'rm'"])),
    ]));
    let s = store();
    // Denied by the policies (not allowed): no limit is charged.
    let (flow, next) = post(&e, &s, ALPHA, "other");
    assert!(matches!(next, Next::Respond(ref r) if r.status == 403));
    assert!(flow.outcome().unwrap().limits.charged.is_empty());
    assert!(matches!(post(&e, &s, ALPHA, "rm").1, Next::Allow { .. }));
    // rm is full: refused, and "all" is not charged for it.
    assert_eq!(
        refused(&post(&e, &s, ALPHA, "rm").1).unwrap()["error"]["data"]["limit"],
        "mcp/quotas/rm"
    );
    assert!(matches!(post(&e, &s, ALPHA, "echo").1, Next::Allow { .. }));
    assert!(matches!(post(&e, &s, ALPHA, "echo").1, Next::Allow { .. }));
    assert_eq!(
        refused(&post(&e, &s, ALPHA, "echo").1).unwrap()["error"]["data"]["limit"],
        "mcp/quotas/all"
    );
}

#[test]
fn a_counter_without_value_counts_under_one_unidentified_bucket() {
    let e = limits(json!([limit(
        "per-sub",
        1,
        json!(["jwt.claims.sub"]),
        json!([])
    )]));
    let s = store();
    assert!(matches!(post(&e, &s, ALPHA, "echo").1, Next::Allow { .. }));
    // No JWT for either caller: both are counted in the same bucket, never unlimited.
    assert!(refused(&post(&e, &s, BETA, "echo").1).is_some());
}

#[test]
fn counts_survive_a_reload_of_the_same_limit_and_reset_when_it_changes() {
    let s = store();
    let e = limits(json!([limit("calls", 1, json!([]), json!([]))]));
    assert!(matches!(post(&e, &s, ALPHA, "echo").1, Next::Allow { .. }));
    let again = limits(json!([limit("calls", 1, json!([]), json!([]))]));
    assert!(
        refused(&post(&again, &s, ALPHA, "echo").1).is_some(),
        "same definition: same bucket"
    );
    let changed = limits(json!([limit("calls", 2, json!([]), json!([]))]));
    assert!(
        matches!(post(&changed, &s, ALPHA, "echo").1, Next::Allow { .. }),
        "a new definition starts afresh"
    );
}

#[test]
fn without_a_store_a_selected_request_is_refused() {
    let e = limits(json!([limit("calls", 5, json!([]), json!([]))]));
    let mut flow = RequestFlow::new();
    flow.on_headers(&e, post_input(ALPHA, &[]));
    let body = call("echo").into_bytes();
    let a = flow.on_body(&e, body.len(), true, move |_| Some(body)).next;
    let next = drive(&mut flow, &e, a, |_| Reply::status(200));
    assert_eq!(
        refused(&next).unwrap()["error"]["data"]["reason"],
        "rate_limiter_unavailable"
    );
}

#[test]
fn a_refusal_has_its_denial_counter() {
    use mcp_access_engine::stats::{denial_counter, denial_counter_names};
    let e = limits(json!([limit("calls", 1, json!([]), json!([]))]));
    let s = store();
    post(&e, &s, ALPHA, "echo");
    let (flow, _) = post(&e, &s, ALPHA, "echo");
    let o = flow.outcome().unwrap();
    let names = denial_counter_names();
    let name = denial_counter(o.level, o.reason).and_then(|i| names.get(i));
    assert_eq!(
        name.map(String::as_str),
        Some("mcp_access.denied.backend.rate_limited")
    );
}

#[test]
fn without_predicates_only_tool_calls_count_and_errors_charge_only_calls() {
    // A ping: no limit without predicates counts it, and a predicate erring on it (no
    // arguments) selects nothing. A tools/call whose predicate errs is charged.
    let e = limits(json!([
        limit("calls", 1, json!([]), json!([])),
        limit(
            "args",
            1,
            json!([]),
            json!(["request.mcp.params.arguments.missing == 1"])
        ),
    ]));
    let s = store();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for _ in 0..3 {
        let mut flow = RequestFlow::new().with_counter_store(s.clone());
        flow.on_headers(&e, post_input(ALPHA, &[]));
        let body = ping.as_bytes().to_vec();
        let a = flow.on_body(&e, body.len(), true, move |_| Some(body)).next;
        let next = drive(&mut flow, &e, a, |_| Reply::status(200));
        assert!(
            matches!(next, Next::Allow { .. }),
            "a ping is not counted: {next:?}"
        );
        assert!(flow.outcome().unwrap().limits.charged.is_empty());
    }
    let (flow, _) = post(&e, &s, ALPHA, "echo");
    assert_eq!(
        flow.outcome().unwrap().limits.charged,
        ["mcp/quotas/calls", "mcp/quotas/args"]
    );
}

#[test]
fn each_limit_has_charged_and_refused_counters() {
    use mcp_access_engine::stats::limit_counter_names;
    let e = limits(json!([limit("calls", 1, json!([]), json!([]))]));
    assert_eq!(
        limit_counter_names(&e),
        [(
            "mcp/quotas/calls".to_string(),
            [
                "mcp_access.ratelimit.mcp/quotas/calls.charged".to_string(),
                "mcp_access.ratelimit.mcp/quotas/calls.refused".to_string()
            ]
        )]
    );
}
