//! Global rate limits through the flow (docs/semantics.md §8.6): one RateLimitService call
//! after the access decision and the Local limits, its answer deciding; Local charges taken
//! back when it refuses or fails closed; the failure modes; answers that come late or are not
//! the one awaited change nothing.

use std::cell::RefCell;
use std::rc::Rc;

use mcp_access_engine::callout::{CalloutRequest, DispatchError};
use mcp_access_engine::flow::{
    drive_with_limiter, CalloutAnswer, Next, Reply, RequestFlow, RATE_LIMITED_CODE,
};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::ratelimit::global::pb;
use mcp_access_engine::ratelimit::store::{prepare, MemoryCounterStore};
use mcp_access_engine::request::Headers;
use prost::Message as _;
use serde_json::{json, Value};

use crate::common::{bundle, engine, inline_tools, post_input, ALPHA};

fn limit(name: &str, mode: &str, failure: &str, rate: u64) -> Value {
    json!({"namespace": "mcp", "policy": "quotas", "name": name, "level": "Backend",
           "targets": [{"name": "tools", "namespace": "default"}], "mode": mode,
           "failureMode": failure,
           "rates": [{"limit": rate, "windowSeconds": 60}],
           "counters": ["source.principal"], "when": []})
}

fn limits(rate_limits: Value) -> Engine {
    let mut b = bundle(
        vec![inline_tools("allow", "Backend", "tools", &["echo", "rm"])],
        &[],
    );
    b["rateLimits"] = rate_limits;
    b["rateLimitService"] = json!({"cluster": "rls", "timeoutMs": 200, "domain": "dom"});
    engine(&b)
}

/// A store as the filter prepares it when its configuration is loaded.
fn store() -> Rc<MemoryCounterStore> {
    let s = MemoryCounterStore::default();
    s.now_ns.set(120 * 1_000_000_000);
    prepare(&s).unwrap();
    Rc::new(s)
}

fn answer(overall: i32, statuses: &[(i32, Option<i64>)]) -> Reply {
    let resp = pb::RateLimitResponse {
        overall_code: overall,
        statuses: statuses
            .iter()
            .map(|(code, reset)| pb::DescriptorStatus {
                code: *code,
                duration_until_reset: reset.map(|seconds| pb::Duration { seconds, nanos: 0 }),
                ..Default::default()
            })
            .collect(),
    };
    Reply::Grpc {
        status: Some(0),
        message: resp.encode_to_vec(),
    }
}

fn ok(n: usize) -> Reply {
    answer(pb::OK, &vec![(pb::OK, None); n])
}

/// The flow to just before its limits: a tools/call of `tool` allowed by the policies.
fn begin(e: &Engine, store: &Rc<MemoryCounterStore>, tool: &str) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new().with_counter_store(store.clone());
    assert_eq!(flow.on_headers(e, post_input(ALPHA, &[])).next, Next::Hold);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    )
    .into_bytes();
    let next = flow.on_body(e, body.len(), true, move |_| Some(body)).next;
    (flow, next)
}

/// One call, the limiter answering `reply`; the calls it was asked.
fn post(
    e: &Engine,
    store: &Rc<MemoryCounterStore>,
    reply: impl Fn() -> Reply,
) -> (RequestFlow, Next, Vec<pb::RateLimitRequest>) {
    let (mut flow, next) = begin(e, store, "echo");
    let asked = RefCell::new(Vec::new());
    let next = drive_with_limiter(
        &mut flow,
        e,
        next,
        |_| Reply::status(200),
        |call: &CalloutRequest| {
            let m = call.body.get(5..).unwrap_or_default();
            asked
                .borrow_mut()
                .push(pb::RateLimitRequest::decode(m).unwrap());
            reply()
        },
    );
    (flow, next, asked.into_inner())
}

fn data(next: &Next) -> Value {
    match next {
        Next::Respond(r) if r.status == 429 => {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(body["error"]["code"], RATE_LIMITED_CODE);
            let retry = r.headers.iter().find(|(k, _)| k == "retry-after");
            assert_eq!(
                retry.map(|(_, v)| v.clone()),
                Some(body["error"]["data"]["retryAfter"].to_string())
            );
            body["error"]["data"].clone()
        }
        other => panic!("not a 429: {other:?}"),
    }
}

#[test]
fn an_allowed_call_asks_once_with_one_descriptor_per_global_limit() {
    let e = limits(json!([
        limit("a", "Global", "Deny", 5),
        limit("b", "Global", "Deny", 9)
    ]));
    let (flow, next, asked) = post(&e, &store(), || ok(2));
    assert!(matches!(next, Next::Allow { .. }), "{next:?}");
    assert_eq!(asked.len(), 1);
    let m = &asked[0];
    assert_eq!((m.domain.as_str(), m.hits_addend), ("dom", 1));
    let limits: Vec<_> = m
        .descriptors
        .iter()
        .map(|d| {
            let get = |k: &str| {
                d.entries
                    .iter()
                    .find(|e| e.key == k)
                    .map(|e| e.value.clone())
            };
            (get("mcp_access.limit"), get("mcp_access.counter.0"))
        })
        .collect();
    assert_eq!(
        limits,
        [
            (Some("mcp/quotas/a".into()), Some(ALPHA.into())),
            (Some("mcp/quotas/b".into()), Some(ALPHA.into()))
        ]
    );
    let o = flow.outcome().unwrap();
    assert!(o.allowed);
    assert_eq!(o.limits.charged, ["mcp/quotas/a", "mcp/quotas/b"]);
    assert_eq!(o.limits.limiter_failed, None);
    // A denied request asks nothing.
    let (mut flow, next) = begin(&e, &store(), "delete");
    let asked = RefCell::new(0);
    let next = drive_with_limiter(
        &mut flow,
        &e,
        next,
        |_| Reply::status(200),
        |_| {
            *asked.borrow_mut() += 1;
            ok(2)
        },
    );
    assert!(
        matches!(next, Next::Respond(ref r) if r.status == 403),
        "{next:?}"
    );
    assert_eq!(asked.into_inner(), 0);
}

#[test]
fn over_limit_on_one_of_two_refuses_naming_it_with_the_limiters_reset() {
    let e = limits(json!([
        limit("a", "Global", "Deny", 5),
        limit("b", "Global", "Deny", 9)
    ]));
    let over = || {
        answer(
            pb::OVER_LIMIT,
            &[(pb::OK, Some(50)), (pb::OVER_LIMIT, Some(17))],
        )
    };
    let (flow, next, _) = post(&e, &store(), over);
    assert_eq!(
        data(&next),
        json!({"reason": "rate_limited", "limit": "mcp/quotas/b", "retryAfter": 17})
    );
    let Next::Respond(r) = &next else { panic!() };
    let policy = r.headers.iter().find(|(k, _)| k == "ratelimit-policy");
    assert_eq!(
        policy.map(|(_, v)| v.as_str()),
        Some("\"mcp/quotas/b\";q=9;w=60")
    );
    let o = flow.outcome().unwrap();
    assert_eq!(o.limits.refused.as_deref(), Some("mcp/quotas/b"));
    assert_eq!(o.reason.as_str(), "rate_limited");
    // Without a reset, the window.
    let bare = || answer(pb::OVER_LIMIT, &[]);
    let (_, next, _) = post(&e, &store(), bare);
    assert_eq!(data(&next)["retryAfter"], 60);
    assert_eq!(data(&next)["limit"], "mcp/quotas/a");
}

#[test]
fn a_global_refusal_takes_the_local_charges_back_and_a_local_one_asks_nothing() {
    let e = limits(json!([
        limit("local", "Local", "Deny", 1),
        limit("global", "Global", "Deny", 5)
    ]));
    let s = store();
    let over = || answer(pb::OVER_LIMIT, &[(pb::OVER_LIMIT, None)]);
    for _ in 0..3 {
        let (_, next, asked) = post(&e, &s, over);
        assert_eq!(data(&next)["limit"], "mcp/quotas/global");
        assert_eq!(
            asked[0].descriptors.len(),
            1,
            "only the Global limit is asked"
        );
    }
    // The Local bucket (1 a minute) was never left charged: this call passes.
    let (_, next, _) = post(&e, &s, || ok(1));
    assert!(matches!(next, Next::Allow { .. }), "{next:?}");
    // Now it is full: refused locally, the limiter not asked.
    let (flow, next, asked) = post(&e, &s, || ok(1));
    assert_eq!(data(&next)["limit"], "mcp/quotas/local");
    assert!(asked.is_empty());
    assert_eq!(
        flow.outcome().unwrap().limits.charged,
        ["mcp/quotas/local", "mcp/quotas/global"]
    );
}

/// A limiter's answer, made afresh for each call.
type Answer = Box<dyn Fn() -> Reply>;

#[test]
fn no_usable_answer_follows_the_failure_mode() {
    let failures: [(&str, Answer); 5] = [
        ("not dispatched", Box::new(|| Reply::NotDispatched)),
        (
            "UNAVAILABLE",
            Box::new(|| Reply::Grpc {
                status: Some(14),
                message: b"redis down".to_vec(),
            }),
        ),
        ("overall_code 0", Box::new(|| answer(0, &[(pb::OK, None)]))),
        ("0 statuses", Box::new(|| answer(pb::OK, &[]))),
        (
            "malformed",
            Box::new(|| Reply::Grpc {
                status: Some(0),
                message: b"\xff\xff\xff".to_vec(),
            }),
        ),
    ];
    for (what, reply) in &failures {
        // Deny: refused, the Local charge taken back, the failure recorded.
        let e = limits(json!([
            limit("local", "Local", "Deny", 1),
            limit("global", "Global", "Deny", 5)
        ]));
        let s = store();
        for _ in 0..2 {
            let (flow, next, _) = post(&e, &s, reply);
            let d = data(&next);
            assert_eq!(d["reason"], "rate_limiter_unavailable", "{what}");
            assert_eq!(d["limit"], "mcp/quotas/global", "{what}");
            let o = flow.outcome().unwrap();
            let failed = o.limits.limiter_failed.clone().unwrap_or_default();
            assert!(failed.contains(what), "{what}: {failed}");
            let json = o.to_json(&e);
            assert!(json.contains("\"limiterFailed\":"), "{json}");
        }
        // Allow: through, the failure recorded, the Local charge kept.
        let e = limits(json!([
            limit("local", "Local", "Deny", 1),
            limit("global", "Global", "Allow", 5)
        ]));
        let (flow, next, _) = post(&e, &s, reply);
        assert!(matches!(next, Next::Allow { .. }), "{what}: {next:?}");
        assert!(flow.outcome().unwrap().limits.limiter_failed.is_some());
        let (_, next, _) = post(&e, &s, || ok(1));
        assert_eq!(data(&next)["limit"], "mcp/quotas/local", "{what}");
    }
    // One Deny limit among the asked makes a failure refuse.
    let e = limits(json!([
        limit("open", "Global", "Allow", 5),
        limit("closed", "Global", "Deny", 5)
    ]));
    let (_, next, _) = post(&e, &store(), || Reply::NotDispatched);
    assert_eq!(data(&next)["limit"], "mcp/quotas/closed");
}

fn deliver(flow: &mut RequestFlow, e: &Engine, token: u32, reply: Reply, now_ns: u64) -> Next {
    let (status, headers, body, trailers) = reply.wire().unwrap();
    let answer = CalloutAnswer {
        status,
        headers: &headers,
        trailers: || trailers,
        read: |n: usize| Some(body.get(..n.min(body.len())).unwrap_or_default().to_vec()),
    };
    flow.on_callout_response(e, token, answer, now_ns).next
}

#[test]
fn only_the_awaited_answer_counts_and_a_late_one_changes_nothing() {
    let e = limits(json!([limit("global", "Global", "Deny", 5)]));
    let (mut flow, next) = begin(&e, &store(), "echo");
    assert!(matches!(next, Next::CallLimiter(_)), "{next:?}");
    assert!(flow.limiter_dispatched(&e, Ok(41), 0).next.is_hold());
    // A second report of a dispatch, another token's answer: nothing.
    assert!(flow.limiter_dispatched(&e, Ok(42), 0).next.is_hold());
    assert!(deliver(&mut flow, &e, 42, ok(1), 1).is_hold());
    assert!(flow.outcome().is_none());
    let over = answer(pb::OVER_LIMIT, &[(pb::OVER_LIMIT, Some(3))]);
    assert!(matches!(
        deliver(&mut flow, &e, 41, over, 2),
        Next::Respond(_)
    ));
    let before = flow.outcome().unwrap().to_json(&e);
    // The same token again, now OK: the request has ended.
    assert!(deliver(&mut flow, &e, 41, ok(1), 3).is_hold());
    assert!(flow
        .limiter_dispatched(&e, Err(DispatchError::NoCluster), 4)
        .next
        .is_hold());
    assert_eq!(flow.outcome().unwrap().to_json(&e), before);
    // No answer at the timeout is a timeout.
    let (mut flow, _) = begin(&e, &store(), "echo");
    flow.limiter_dispatched(&e, Ok(1), 0);
    let none = Reply::Raw {
        status: None,
        headers: Headers::new(),
        body: Vec::new(),
        trailers: Headers::new(),
    };
    let next = deliver(&mut flow, &e, 1, none, 200 * 1_000_000);
    assert_eq!(data(&next)["reason"], "rate_limiter_unavailable");
    let failed = flow.outcome().unwrap().limits.limiter_failed.clone();
    assert!(failed
        .unwrap()
        .starts_with("timed out: no answer within 200 ms"));
    // Envoy's timer can fire early on a loaded machine (armed from the loop's cached time): its
    // own UNAVAILABLE "upstream request timeout" counts from three quarters of the timeout, as
    // for authorizers; the same words at half of it, or another error, are not a timeout.
    let ended = |text: &str| {
        let mut trailers = Headers::new();
        trailers.push("grpc-status", "14");
        trailers.push("grpc-message", text);
        let mut headers = Headers::new();
        headers.push("content-type", "application/grpc");
        Reply::Raw {
            status: Some(200),
            headers,
            body: Vec::new(),
            trailers,
        }
    };
    for (text, ms, timed_out) in [
        ("upstream request timeout", 150, true),
        ("upstream request timeout", 100, false),
        ("no healthy upstream", 150, false),
    ] {
        let (mut flow, _) = begin(&e, &store(), "echo");
        flow.limiter_dispatched(&e, Ok(1), 0);
        deliver(&mut flow, &e, 1, ended(text), ms * 1_000_000);
        let failed = flow
            .outcome()
            .unwrap()
            .limits
            .limiter_failed
            .clone()
            .unwrap();
        assert_eq!(failed.starts_with("timed out"), timed_out, "{failed}");
    }
}
