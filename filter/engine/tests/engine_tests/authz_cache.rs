//! Authorizer answers reused (docs/semantics.md §3.10), through the request flow with a fake
//! store and clock: hits, misses, expiry, a new bundle, denials only when asked, errors never,
//! and keys that keep callers, tools and chosen headers apart.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::common::*;
use mcp_access_engine::authz_cache::{AnswerStore, SLOT_PREFIX};
use mcp_access_engine::callout::CacheUse;
use mcp_access_engine::flow::{drive, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::pb;
use mcp_access_engine::policy::{Engine, HeaderEdit};
use mcp_access_engine::request::Caller;
use mcp_access_engine::request::Headers;
use prost::Message;
use serde_json::{json, Value};

/// Envoy's shared data as a map, and a clock the test moves (from 2026-01-01).
pub(crate) struct FakeAnswers {
    slots: RefCell<BTreeMap<String, Vec<u8>>>,
    now: Cell<u64>,
}

impl Default for FakeAnswers {
    fn default() -> Self {
        FakeAnswers {
            slots: RefCell::default(),
            now: Cell::new(1_767_225_600 * 1_000_000_000),
        }
    }
}

impl AnswerStore for FakeAnswers {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn get(&self, slot: &str) -> Option<Vec<u8>> {
        self.slots.borrow().get(slot).cloned()
    }
    fn set(&self, slot: &str, record: &[u8]) {
        self.slots.borrow_mut().insert(slot.into(), record.to_vec());
    }
}

impl FakeAnswers {
    fn advance_ms(&self, ms: u64) {
        self.now.set(self.now.get() + ms * 1_000_000);
    }
}

const SEC: u64 = 1_000;

/// A Gateway ExternalAuth policy `ext` calling authorizer `a` with this cache.
fn cached_engine(protocol: &str, cache: Value, extra: Value) -> Engine {
    let mut b = bundle(vec![ext("ext", "Gateway", "gw", "a", 0)], &["a"]);
    let a = b["authorizers"][0].as_object_mut().unwrap();
    a.insert("protocol".into(), protocol.into());
    a.insert("cache".into(), cache);
    if let Some(extra) = extra.as_object() {
        a.extend(extra.clone());
    }
    engine(&b)
}

fn http_cache(extra: Value) -> Value {
    let mut c = json!({"ttlMs": 30_000, "ignoredHeaders": ["authorization"]});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

/// One request, as the host drives it.
struct Call<'a> {
    tool: &'a str,
    caller: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    id: u32,
}

impl<'a> Call<'a> {
    fn tool(tool: &'a str) -> Self {
        Call {
            tool,
            caller: ALPHA,
            headers: vec![],
            id: 1,
        }
    }
}

/// What the authorizer saw and what the flow did: the calls made, the final action, and the
/// authorizers the decision log says answered from the cache.
fn run(
    e: &Engine,
    store: &Rc<FakeAnswers>,
    c: &Call<'_>,
    reply: &Reply,
) -> (usize, Next, Vec<String>) {
    let mut headers: Vec<(String, String)> = [
        (":method", "POST"),
        (":path", "/mcp"),
        (":authority", "gw.example.org"),
        ("content-type", "application/json"),
    ]
    .iter()
    .chain(&c.headers)
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    headers.push(("authorization".into(), format!("Bearer token-{}", c.id)));
    let input = HeadersInput {
        headers: headers.into(),
        port: 8443,
        route_name: Some("tools-route".into()),
        caller: Caller {
            credential: false,
            spiffe: Some(c.caller.into()),
            jwts: vec![],
        },
        ..HeadersInput::default()
    };
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{}","arguments":{{}}}}}}"#,
        c.id, c.tool
    );
    let mut flow = RequestFlow::new().with_answer_store(store.clone());
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let progress = flow.on_body(e, body.len(), true, |_| Some(body.clone().into_bytes()));
    // What the cache answered is reported for the host's counters (one report per hit).
    let hits = progress
        .reports
        .iter()
        .filter(|r| r.cache == Some(CacheUse::Hit) && r.latency_ms.is_none())
        .count();
    let mut calls = 0;
    let end = drive(&mut flow, e, progress.next, |_| {
        calls += 1;
        reply.clone()
    });
    let outcome = flow.outcome().unwrap();
    assert_eq!(hits, outcome.authz_cached.len());
    let json: Value = serde_json::from_str(&outcome.to_json(e)).unwrap();
    if outcome.authz_cached.is_empty() {
        assert!(json.get("authz_cached").is_none());
    } else {
        assert_eq!(json["authz_cached"], json!(outcome.authz_cached));
    }
    (calls, end, outcome.authz_cached.clone())
}

fn ok_with(headers: &[(&str, &str)]) -> Reply {
    Reply::Http {
        status: Some(200),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: vec![],
    }
}

fn denied() -> Reply {
    Reply::Http {
        status: Some(403),
        headers: Headers::from(vec![("x-why", "nope")]),
        body: b"denied by policy".to_vec(),
    }
}

#[test]
fn an_ok_answer_is_reused_until_its_ttl_passes_with_its_header_edits() {
    let e = cached_engine("HTTP", http_cache(json!({})), json!({}));
    let store = Rc::new(FakeAnswers::default());
    let ok = ok_with(&[("x-user", "u1")]);
    let (calls, first, cached) = run(&e, &store, &Call::tool("echo"), &ok);
    assert_eq!((calls, cached.len()), (1, 0));
    let Next::Allow { add_headers, .. } = &first else {
        panic!("{first:?}")
    };
    assert_eq!(add_headers, &[HeaderEdit::set("x-user", "u1")]);
    // Another request (another JSON-RPC id, another bearer token: ignored) within the TTL.
    store.advance_ms(29 * SEC);
    let again = Call {
        id: 2,
        ..Call::tool("echo")
    };
    let (calls, second, cached) = run(&e, &store, &again, &denied());
    assert_eq!(calls, 0, "answered from the cache");
    assert_eq!(cached, ["a"]);
    let Next::Allow {
        add_headers: again_edits,
        ..
    } = &second
    else {
        panic!("{second:?}")
    };
    assert_eq!(again_edits, add_headers, "the same edits, replayed");
    // At the TTL: asked again.
    store.advance_ms(SEC);
    let (calls, third, _) = run(&e, &store, &again, &denied());
    assert_eq!(calls, 1);
    assert!(matches!(third, Next::Respond(r) if r.status == 403));
    assert_eq!(store.slots.borrow().len(), 1);
    // A clock that went back to before an answer was kept does not stretch its life.
    assert_eq!(run(&e, &store, &again, &ok).0, 1);
    assert_eq!(run(&e, &store, &again, &denied()).0, 0);
    store.now.set(store.now.get() - 60 * SEC * 1_000_000);
    assert_eq!(run(&e, &store, &again, &denied()).0, 1);
}

#[test]
fn a_new_bundle_never_reuses_an_old_ones_answers() {
    let store = Rc::new(FakeAnswers::default());
    let old = cached_engine("HTTP", http_cache(json!({})), json!({}));
    assert_eq!(run(&old, &store, &Call::tool("echo"), &ok_with(&[])).0, 1);
    assert_eq!(run(&old, &store, &Call::tool("echo"), &denied()).0, 0);
    // The same policy and key, in a bundle that differs elsewhere (a longer timeout).
    let new = cached_engine("HTTP", http_cache(json!({})), json!({"timeoutMs": 2000}));
    assert_ne!(old.generation, new.generation);
    let (calls, end, cached) = run(&new, &store, &Call::tool("echo"), &denied());
    assert_eq!((calls, cached.len()), (1, 0));
    assert!(matches!(end, Next::Respond(r) if r.status == 403));
    // The same bundle bytes load to the same generation: workers share answers.
    let again = cached_engine("HTTP", http_cache(json!({})), json!({"timeoutMs": 2000}));
    assert_eq!(again.generation, new.generation);
}

#[test]
fn denials_are_reused_only_when_the_cache_says_so() {
    let store = Rc::new(FakeAnswers::default());
    let ok_only = cached_engine("HTTP", http_cache(json!({})), json!({}));
    for _ in 0..2 {
        let (calls, end, _) = run(&ok_only, &store, &Call::tool("echo"), &denied());
        assert_eq!(calls, 1);
        assert!(matches!(end, Next::Respond(r) if r.status == 403));
    }
    assert!(store.slots.borrow().is_empty());
    let denials = cached_engine("HTTP", http_cache(json!({"denials": true})), json!({}));
    let (calls, first, _) = run(&denials, &store, &Call::tool("echo"), &denied());
    assert_eq!(calls, 1);
    let (calls, second, cached) = run(&denials, &store, &Call::tool("echo"), &ok_with(&[]));
    assert_eq!((calls, cached), (0, vec!["a".to_string()]));
    // The same status, headers and body relayed.
    assert_eq!(second, first);
    // A denial too large to keep (within the authorizer's 8 KiB body cap, but with its key over
    // MAX_RECORD_BYTES) is asked for each time.
    let big = Reply::Http {
        status: Some(403),
        headers: Headers::new(),
        body: vec![b'x'; 8100],
    };
    for _ in 0..2 {
        assert_eq!(run(&denials, &store, &Call::tool("big"), &big).0, 1);
    }
}

#[test]
fn errors_timeouts_and_malformed_answers_are_never_reused() {
    let store = Rc::new(FakeAnswers::default());
    // failureMode Allow: each of these lets the request through, and none is kept.
    let e = cached_engine(
        "HTTP",
        http_cache(json!({"denials": true})),
        json!({"failureMode": "Allow"}),
    );
    let answers = [
        Reply::status(503),
        Reply::Http {
            status: None,
            headers: Headers::new(),
            body: vec![],
        },
        ok_with(&[("x-bad", "a\r\nb")]),
        Reply::NotDispatched,
    ];
    for a in &answers {
        for _ in 0..2 {
            let (calls, end, _) = run(&e, &store, &Call::tool("echo"), a);
            assert_eq!(calls, 1, "{a:?}");
            assert!(matches!(end, Next::Allow { .. }), "{a:?}");
        }
    }
    assert!(store.slots.borrow().is_empty());
}

#[test]
fn keys_keep_callers_tools_and_chosen_headers_apart() {
    let e = cached_engine(
        "HTTP",
        http_cache(
            json!({"keyHeaders": ["x-tenant"], "ignoredHeaders": ["authorization", "x-trace"]}),
        ),
        json!({"allowedHeaders": ["x-tenant", "x-trace"]}),
    );
    let store = Rc::new(FakeAnswers::default());
    let ok = ok_with(&[]);
    let base = Call {
        headers: vec![("x-tenant", "t1"), ("x-trace", "1")],
        ..Call::tool("echo")
    };
    assert_eq!(run(&e, &store, &base, &ok).0, 1);
    assert_eq!(run(&e, &store, &base, &ok).0, 0);
    let misses = [
        Call {
            caller: BETA,
            ..Call {
                headers: base.headers.clone(),
                ..Call::tool("echo")
            }
        },
        Call {
            headers: base.headers.clone(),
            ..Call::tool("other")
        },
        Call {
            headers: vec![("x-tenant", "t2"), ("x-trace", "1")],
            ..Call::tool("echo")
        },
        // Two copies are not one.
        Call {
            headers: vec![("x-tenant", "t1"), ("x-tenant", "t1"), ("x-trace", "1")],
            ..Call::tool("echo")
        },
        Call {
            headers: vec![("x-trace", "1")],
            ..Call::tool("echo")
        },
    ];
    for c in &misses {
        // A denial answers each: had the cache answered, the request would be allowed.
        let (calls, end, _) = run(&e, &store, c, &denied());
        assert_eq!(calls, 1, "{} {:?} {:?}", c.caller, c.tool, c.headers);
        assert!(matches!(end, Next::Respond(_)));
    }
    // A header declared irrelevant does not separate.
    let other_trace = Call {
        headers: vec![("x-tenant", "t1"), ("x-trace", "2")],
        ..Call::tool("echo")
    };
    assert_eq!(run(&e, &store, &other_trace, &denied()).0, 0);
}

#[test]
fn a_slot_holds_one_answer_and_a_record_that_does_not_read_is_a_miss() {
    let e = cached_engine("HTTP", http_cache(json!({"maxEntries": 1})), json!({}));
    let store = Rc::new(FakeAnswers::default());
    let ok = ok_with(&[]);
    assert_eq!(run(&e, &store, &Call::tool("a"), &ok).0, 1);
    assert_eq!(run(&e, &store, &Call::tool("b"), &ok).0, 1);
    // b took the only slot: a is asked again; the store never grows past maxEntries.
    assert_eq!(run(&e, &store, &Call::tool("a"), &ok).0, 1);
    assert_eq!(run(&e, &store, &Call::tool("a"), &ok).0, 0);
    let slots: Vec<String> = store.slots.borrow().keys().cloned().collect();
    assert_eq!(slots, [format!("{SLOT_PREFIX}default/ext/0")]);
    // Damaged records (truncated, a byte flipped in the answer) are misses.
    let record = store.slots.borrow()[&slots[0]].clone();
    for damaged in [
        record[..record.len() - 1].to_vec(),
        record[..40].to_vec(),
        {
            // The answer's kind (after the key, written and expiry times).
            let mut r = record.clone();
            let key_len = u32::from_le_bytes(record[..4].try_into().unwrap()) as usize;
            r[4 + key_len + 16] = 9;
            r
        },
        Vec::new(),
    ] {
        store.slots.borrow_mut().insert(slots[0].clone(), damaged);
        assert_eq!(run(&e, &store, &Call::tool("a"), &denied()).0, 1);
    }
}

#[test]
fn a_key_sharing_a_slot_never_takes_its_answer() {
    // One slot: every key collides on it, as two keys whose slot hashes were equal would. The
    // whole key is compared on a hit, so b's lookup finds a's record and refuses it.
    let e = cached_engine(
        "HTTP",
        http_cache(json!({"maxEntries": 1, "denials": true})),
        json!({}),
    );
    let store = Rc::new(FakeAnswers::default());
    assert_eq!(run(&e, &store, &Call::tool("a"), &denied()).0, 1);
    let (calls, answer, cached) = run(&e, &store, &Call::tool("b"), &ok_with(&[]));
    assert_eq!((calls, cached), (1, Vec::<String>::new()));
    assert_ne!(answer, run(&e, &store, &Call::tool("a"), &denied()).1);
    // A record whose key differs from b's in its last byte only is refused too.
    let slot = format!("{SLOT_PREFIX}default/ext/0");
    assert_eq!(run(&e, &store, &Call::tool("b"), &ok_with(&[])).0, 1);
    let mut record = store.slots.borrow()[&slot].clone();
    let key_len = u32::from_le_bytes(record[..4].try_into().unwrap()) as usize;
    record[4 + key_len - 1] ^= 1;
    store.slots.borrow_mut().insert(slot, record);
    assert_eq!(run(&e, &store, &Call::tool("b"), &ok_with(&[])).0, 1);
}

#[test]
fn a_grpc_ok_answer_is_reused_with_its_edits() {
    let e = cached_engine(
        "GRPC",
        json!({"ttlMs": 1000, "keyHeaders": ["x-tenant"]}),
        json!({"allowedHeaders": ["x-tenant"]}),
    );
    let store = Rc::new(FakeAnswers::default());
    let resp = pb::CheckResponse {
        status: Some(pb::RpcStatus {
            code: 0,
            message: String::new(),
        }),
        ok_response: Some(pb::OkHttpResponse {
            headers: vec![pb::HeaderValueOption {
                header: Some(pb::HeaderValue {
                    key: "x-user".into(),
                    value: "u1".into(),
                    raw_value: Vec::new(),
                }),
                append: None,
                append_action: 2,
            }],
            headers_to_remove: vec!["x-drop".into()],
            dynamic_metadata: None,
        }),
        ..Default::default()
    };
    let reply = Reply::Grpc {
        status: Some(0),
        message: resp.encode_to_vec(),
    };
    let c = Call {
        headers: vec![("x-tenant", "t1")],
        ..Call::tool("echo")
    };
    let (calls, first, _) = run(&e, &store, &c, &reply);
    assert_eq!(calls, 1);
    let edits = |n: &Next| match n {
        Next::Allow { add_headers, .. } => add_headers.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(edits(&first).len(), 2);
    let (calls, second, cached) = run(
        &e,
        &store,
        &c,
        &Reply::Grpc {
            status: Some(7),
            message: vec![],
        },
    );
    assert_eq!((calls, cached), (0, vec!["a".to_string()]));
    assert_eq!(edits(&second), edits(&first));
    store.advance_ms(SEC);
    assert_eq!(run(&e, &store, &c, &reply).0, 1);
}

#[test]
fn a_bundle_whose_cache_would_omit_what_the_authorizer_is_sent_is_refused() {
    let cases = [
        // HTTP: authorization is always sent.
        (
            "HTTP",
            json!({"ttlMs": 1000}),
            json!({}),
            "authorizers[0].cache.keyHeaders",
            "HTTP: authorization",
        ),
        (
            "HTTP",
            json!({"ttlMs": 1000, "ignoredHeaders": ["authorization"]}),
            json!({"allowedHeaders": ["x-tenant"]}),
            "authorizers[0].cache.keyHeaders",
            "must be in keyHeaders or ignoredHeaders",
        ),
        // gRPC with no allowedHeaders is sent every header.
        (
            "GRPC",
            json!({"ttlMs": 1000}),
            json!({}),
            "authorizers[0].cache.keyHeaders",
            "is sent every header",
        ),
        (
            "HTTP",
            json!({"ttlMs": 3_600_001, "ignoredHeaders": ["authorization"]}),
            json!({}),
            "authorizers[0].cache.ttlMs",
            "3600000",
        ),
        (
            "HTTP",
            json!({"ttlMs": 0, "ignoredHeaders": ["authorization"]}),
            json!({}),
            "authorizers[0].cache.ttlMs",
            "between",
        ),
        (
            "HTTP",
            json!({"ttlMs": 10, "maxEntries": 70000, "ignoredHeaders": ["authorization"]}),
            json!({}),
            "authorizers[0].cache.maxEntries",
            "65536",
        ),
        (
            "HTTP",
            json!({"ttlMs": 10, "keyHeaders": ["X-Up"], "ignoredHeaders": ["authorization"]}),
            json!({}),
            "authorizers[0].cache.keyHeaders",
            "lowercase",
        ),
        (
            "HTTP",
            json!({"ttlMs": 10, "keyClaims": ["a..b"], "ignoredHeaders": ["authorization"]}),
            json!({}),
            "authorizers[0].cache.keyClaims",
            "claim",
        ),
    ];
    for (protocol, cache, extra, path, says) in cases {
        let mut b = bundle(vec![ext("ext", "Gateway", "gw", "a", 0)], &["a"]);
        let a = b["authorizers"][0].as_object_mut().unwrap();
        a.insert("protocol".into(), protocol.into());
        a.insert("cache".into(), cache.clone());
        a.extend(extra.as_object().unwrap().clone());
        let err = Engine::from_json(b.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains(path) && err.contains(says), "{cache}: {err}");
    }
}

/// `callers` distinct callers, each asking once: the store never holds more than `maxEntries`
/// records (docs/semantics.md §3.10), whatever the number of callers. Returns (slots, bytes).
fn fill_with_distinct_callers(callers: u32) -> (usize, usize) {
    let e = cached_engine("HTTP", http_cache(json!({"maxEntries": 256})), json!({}));
    let store = Rc::new(FakeAnswers::default());
    for i in 0..callers {
        let caller = format!("spiffe://example.org/ns/agents/sa/caller-{i}");
        let c = Call {
            caller: &caller,
            ..Call::tool("echo")
        };
        assert_eq!(
            run(&e, &store, &c, &ok_with(&[])).0,
            1,
            "a new caller is asked"
        );
    }
    let slots = store.slots.borrow();
    assert!(slots.len() <= 256, "{} slots", slots.len());
    let bytes: usize = slots.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(slots.values().all(|v| v.len() <= 8192));
    (slots.len(), bytes)
}

#[test]
fn distinct_callers_never_take_more_than_max_entries_slots() {
    let (slots, bytes) = fill_with_distinct_callers(5_000);
    assert_eq!(slots, 256, "5,000 callers fill every slot");
    assert!(bytes <= 256 * 8192);
}

/// The scale goal: a million distinct callers, the same bound (run in release:
/// `cargo test --release -p mcp-access-engine --test engine_tests -- --ignored million`).
#[test]
#[ignore = "a million requests: about a minute in release"]
fn a_million_distinct_callers_stay_within_max_entries() {
    let (slots, bytes) = fill_with_distinct_callers(1_000_000);
    println!("1,000,000 distinct callers: {slots} slots, {bytes} bytes kept");
}
