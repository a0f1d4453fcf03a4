//! Differential tests of reused listings: for random listings, callers and streams, the
//! answer a filter gives with reuse is byte for byte (and pin event for pin event) what a
//! filter without reuse gives.

// Compiled in tests only (its `mod` is): what follows is test code.
#[cfg(test)]
use serde_json::{json, Value};

use std::cell::RefCell;
use std::rc::Rc;

use super::reuse::{ListingStore, MAX_BYTES, MAX_ENTRIES};
use super::{BodyAction, ListingFilter};
use crate::canonical_json::digest_of;
use crate::flow::{HeadersInput, Next, RequestFlow};
use crate::policy::Engine;
use crate::request::Headers;
use crate::request::{Caller, Request};
use crate::test_util::Rng;

const TOOLS: usize = 20;

thread_local! {
    /// The store the filters of these tests keep answers in, as a host's one per engine.
    static STORE: RefCell<Rc<ListingStore>> = RefCell::new(Rc::default());
}

fn store() -> Rc<ListingStore> {
    STORE.with(|s| Rc::clone(&s.borrow()))
}

/// A new, empty store, as a host makes with each engine.
fn forget_all() {
    STORE.with(|s| *s.borrow_mut() = Rc::default());
}

fn kept() -> (usize, usize) {
    store().kept()
}

fn tool(i: usize) -> Value {
    json!({"name": format!("t{i}"), "description": format!("tool {i}"),
           "inputSchema": {"type": "object"}})
}

/// Caller a may call the even tools, b the odd ones, anyone with `X-Tier: gold` t10 to t14;
/// a Gateway Deny removes t3. The `pinned` backend pins t0 as listed and t1 otherwise.
fn engine() -> Engine {
    engine_with(None)
}

/// [`engine`] with `listings.maxBytes` when given.
fn engine_with(max_bytes: Option<usize>) -> Engine {
    let ids = |f: &dyn Fn(usize) -> bool| -> Vec<String> {
        (0..TOOLS)
            .filter(|i| f(*i))
            .map(|i| format!("t{i}"))
            .collect()
    };
    let calls = |tools: Vec<String>| json!({"mcp": {"baseProtocol": "Match", "methods": [{"name": "tools/call", "params": tools}]}});
    let t0 = serde_json::to_vec(&tool(0)).unwrap_or_default();
    let digest = |t: &[u8]| digest_of(t, 64).map(|d| d.to_text()).unwrap_or_default();
    let mut bundle = json!({
        "apiVersion": "mcp-access.io/v1",
        "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools"]},
            {"name": "pinned", "routeNames": ["pinned"], "pins": {"source": "default/pins",
                "tools": [{"name": "t0", "digest": digest(&t0)},
                          {"name": "t1", "digest": digest(b"{\"name\":\"t1\"}")}]}}],
        "policies": [
            {"name": "allow", "level": "Backend", "targets": [{"name": "tools"}, {"name": "pinned"}],
             "action": "Allow", "rules": [
                {"name": "a", "source": {"type": "SPIFFE", "spiffe": "spiffe://example.org/a"},
                 "authorization": calls(ids(&|i| i % 2 == 0))},
                {"name": "b", "source": {"type": "SPIFFE", "spiffe": "spiffe://example.org/b"},
                 "authorization": calls(ids(&|i| i % 2 == 1))},
                {"name": "gold", "authorization": {"headers": [{"name": "X-Tier", "value": "gold"}],
                 "mcp": {"baseProtocol": "Match", "methods": [{"name": "tools/call",
                    "params": ids(&|i| (10..15).contains(&i))}]}}}]},
            {"name": "deny", "level": "Gateway", "targets": [{"name": "gw"}], "action": "Deny",
             "rules": [{"name": "t3", "authorization": {"mcp": {"methods": [
                {"name": "tools/call", "params": ["t3"]}]}}}]}]
    });
    if let Some(max) = max_bytes {
        bundle["listings"] = json!({ "maxBytes": max });
    }
    Engine::from_json(bundle.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// The filter of an allowed `tools/list` of a random caller; None when it is denied.
fn listing_filter(e: &Engine, rng: &mut Rng, request_id: u64) -> Option<(ListingFilter, Request)> {
    listing_filter_with_id(e, rng, request_id, "1")
}

/// [`listing_filter`] of a request whose JSON-RPC id is `id` (raw JSON).
fn listing_filter_with_id(
    e: &Engine,
    rng: &mut Rng,
    request_id: u64,
    id: &str,
) -> Option<(ListingFilter, Request)> {
    let spiffe = [
        None,
        Some("spiffe://example.org/a"),
        Some("spiffe://example.org/b"),
    ];
    let mut headers: Vec<(String, String)> = [
        (":method", "POST"),
        (":path", "/mcp"),
        ("content-type", "application/json"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    // A header no rule reads differs on every request.
    headers.push(("x-request-id".into(), request_id.to_string()));
    if let Some(tier) = [None, Some("gold"), Some("silver")][rng.below(3)] {
        headers.push(("x-tier".into(), tier.into()));
    }
    let mut flow = RequestFlow::new().with_listing_store(store());
    let input = HeadersInput {
        headers: headers.into(),
        port: 8443,
        route_name: Some(["tools", "pinned"][rng.below(2)].into()),
        caller: Caller {
            spiffe: spiffe[rng.below(3)].map(String::from),
            ..Caller::default()
        },
        ..HeadersInput::default()
    };
    flow.on_headers(e, input);
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#).into_bytes();
    match flow.on_body(e, body.len(), true, move |_| Some(body)).next {
        Next::Allow { .. } => Some((flow.response_filter()?.clone(), flow.request()?.clone())),
        _ => None,
    }
}

/// A pool of upstream answers: a few listings (so that they repeat), and some that are not.
fn answers(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut pool = Vec::new();
    for n in 0..6 {
        let tools: Vec<Value> = (0..TOOLS).filter(|_| rng.below(3) > 0).map(tool).collect();
        let mut result = json!({"tools": tools});
        if n % 2 == 1 {
            result["nextCursor"] = json!("c");
        }
        let id = [json!(1), json!("1"), json!(2)][n % 3].clone();
        pool.push(
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                .unwrap_or_default(),
        );
    }
    // The same listings but for a byte near their end.
    let late: Vec<Vec<u8>> = pool
        .iter()
        .filter(|a| a.ends_with(b"\"c\"}}"))
        .map(|a| [&a[..a.len() - 4], b"d\"}}"].concat())
        .collect();
    pool.extend(late);
    let one = pool.first().cloned().unwrap_or_default();
    pool.push(one.get(..one.len() / 2).unwrap_or_default().to_vec());
    pool.push(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"no"}}"#.to_vec());
    pool.push(
        br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t0"},{"name":"t0","name":"t2"}]}}"#
            .to_vec(),
    );
    pool
}

/// The SSE stream of `body` in `style`: events ending with LF, CRLF, CR or mixed line ends, a
/// byte order mark or a comment first.
fn stream_of(body: &[u8], style: usize) -> Vec<u8> {
    let ends: [&[u8]; 5] = [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n"];
    let end = ends[style % ends.len()];
    let mut stream = match style / ends.len() % 3 {
        0 => Vec::new(),
        1 => b"\xEF\xBB\xBF".to_vec(),
        _ => b": hello\r".to_vec(),
    };
    stream.extend_from_slice(b"event: message\ndata: ");
    stream.extend_from_slice(body);
    stream.extend_from_slice(end);
    stream.extend_from_slice(b"data: ");
    stream.extend_from_slice(body);
    stream.extend_from_slice(ends[(style + 1) % ends.len()]);
    stream
}

/// What a filter answers for `body`, fed as JSON or as SSE chunks (`cuts`: chunk sizes, then
/// the stream's style).
fn run(
    e: &Engine,
    f: &mut ListingFilter,
    req: &Request,
    sse: Option<&[usize]>,
    body: &[u8],
) -> (Vec<u8>, Vec<String>) {
    let content_type = if sse.is_some() {
        "text/event-stream"
    } else {
        "application/json"
    };
    f.on_headers(&Headers::from([
        (":status", "200"),
        ("content-type", content_type),
    ]));
    let mut out = Vec::new();
    let mut events = Vec::new();
    let mut push = |a: BodyAction, f: &mut ListingFilter| {
        if let BodyAction::Replace(b) = a {
            out.extend(b);
        }
        events.extend(f.take_pin_events().iter().map(|p| format!("{p:?}")));
    };
    match sse {
        None => {
            let a = f.on_body(e, Some(req), body.len(), true, |_| Some(body.to_vec()));
            push(a, f);
        }
        Some([]) => panic!("no stream style"),
        Some([style, cuts @ ..]) => {
            let stream = stream_of(body, *style);
            let mut rest = &stream[..];
            for cut in cuts.iter().cycle() {
                let (chunk, tail) = rest.split_at(rest.len().min(*cut));
                let a = f.on_body(e, Some(req), chunk.len(), tail.is_empty(), |_| {
                    Some(chunk.to_vec())
                });
                push(a, f);
                rest = tail;
                if rest.is_empty() {
                    break;
                }
            }
        }
    }
    (out, events)
}

/// Compares, for answers a caller asks for a few times in a row (`per_caller`), the answer
/// with reuse to the one without, byte for byte: `ask` picks the filter, the request and the
/// upstream body. Returns how many were compared and how many reused.
fn differential(
    seed: u64,
    per_caller: u64,
    mut ask: impl FnMut(&Engine, &mut Rng, &mut Rng) -> Option<(ListingFilter, Request, Vec<u8>)>,
) -> (u64, u64) {
    let e = engine();
    let mut rng = Rng(seed);
    forget_all();
    let (mut filtered, mut reused_total) = (0, 0);
    for round in 0..3000 {
        let mut caller = Rng(0x9E37_79B9_7F4A_7C15 ^ (round / per_caller));
        let Some((f, req, body)) = ask(&e, &mut caller, &mut rng) else {
            continue;
        };
        let mut cuts: Vec<usize> = vec![caller.below(15)];
        cuts.extend((0..3).map(|_| [1, 2, 7, 64, 300, 100_000][rng.below(6)] + rng.below(3)));
        let sse = (caller.below(2) == 1).then_some(&cuts[..]);
        let fresh = run(&e, &mut f.clone().without_reuse(), &req, sse, &body);
        let mut g = f.clone();
        let reused = run(&e, &mut g, &req, sse, &body);
        reused_total += u64::from(g.take_reused());
        assert_eq!(
            String::from_utf8_lossy(&reused.0),
            String::from_utf8_lossy(&fresh.0),
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(reused, fresh);
        filtered += 1;
        let (entries, bytes) = kept();
        assert!(entries <= MAX_ENTRIES && bytes <= MAX_BYTES);
    }
    (filtered, reused_total)
}

#[test]
fn a_reused_answer_is_the_fresh_filtering_of_the_same_bytes() {
    let pool = answers(&mut Rng(0x2545_F491_4F6C_DD1D));
    // A caller asks a few times in a row (a header no rule reads differs each time).
    let (filtered, reused) = differential(0x2545_F491_4F6C_DD1D, 3, |e, caller, rng| {
        let (f, req) = listing_filter(e, caller, rng.next())?;
        Some((f, req, pool[caller.below(pool.len())].clone()))
    });
    // Most answers were reused: the test compares reuse, not two fresh filterings.
    assert!(filtered > 1000 && reused > 600, "{filtered} {reused}");
}

#[test]
fn pinned_tools_and_an_old_engine_are_never_reused() {
    let mut rng = Rng(7);
    let body = answers(&mut rng).remove(0);
    forget_all();
    {
        let e = engine();
        let mut reused = 0;
        for round in 0..200 {
            if let Some((mut f, req)) = listing_filter(&e, &mut rng, round) {
                let pinned = req.route_name.as_deref() == Some("pinned");
                run(&e, &mut f, &req, None, &body);
                let n = f.take_reused();
                assert!(!pinned || n == 0);
                reused += n;
            }
        }
        assert!(reused > 0);
        assert!(kept().0 > 0);
    }
    // A new engine comes with a new store: nothing kept for the old one is reused.
    forget_all();
    let e = engine();
    let (mut f, req) = std::iter::repeat_with(|| listing_filter(&e, &mut rng, 0))
        .flatten()
        .find(|(_, r)| r.route_name.as_deref() == Some("tools"))
        .unwrap_or_else(|| panic!("no caller"));
    run(&e, &mut f, &req, None, &body);
    assert_eq!(f.take_reused(), 0);
    assert_eq!(kept().0, 1);
    forget_all();
    assert_eq!(kept(), (0, 0));
}

/// Request ids as SDK clients and others write them: numbers of different lengths, strings,
/// strings with escapes, one that is also a tool's name in the listing.
const IDS: [&str; 12] = [
    "1",
    "9",
    "10",
    "12345678901",
    "-3",
    "1.5e3",
    r#""1""#,
    r#""a\"b""#,
    r#""\u0074""#,
    r#""t4""#,
    r#""t6""#,
    r#""é\/x""#,
];

#[test]
fn a_listing_asked_again_under_another_id_is_reused_as_filtered_afresh() {
    let pool = answers(&mut Rng(0x5DEE_CE66_D1CE_4E5B));
    // A caller asks a few times in a row, each time with another id.
    let (filtered, reused) = differential(0x5DEE_CE66_D1CE_4E5B, 4, |e, caller, rng| {
        let id = IDS[rng.below(IDS.len())];
        let (f, req) = listing_filter_with_id(e, caller, rng.next(), id)?;
        // The listing answering that id (its id before or after the result), now and then
        // another id than asked.
        let v: Value = serde_json::from_slice(&pool[caller.below(6)]).unwrap_or_default();
        let result = v["result"].to_string();
        let answered = match rng.below(8) {
            0 => IDS[rng.below(IDS.len())],
            _ => id,
        };
        let body = match caller.below(2) {
            0 => format!(r#"{{"jsonrpc":"2.0","id":{answered},"result":{result}}}"#),
            _ => format!(r#"{{"result":{result},"jsonrpc":"2.0","id":{answered}}}"#),
        };
        Some((f, req, body.into_bytes()))
    });
    // Reuse held across ids: most answers were reused.
    assert!(filtered > 1000 && reused > 900, "{filtered} {reused}");
}

#[test]
fn the_id_is_replaced_at_its_span_only() {
    let e = engine();
    let mut rng = Rng(3);
    forget_all();
    // A listing whose tools are named like the ids asked, their text elsewhere too: only
    // the top-level id changes.
    const HEAD: &str = r#"{"jsonrpc":"2.0","id":"#;
    let body = |id: &str| {
        let tail = r#","result":{"tools":[{"name":"t4","description":"t4 1 12345"},{"name":"t0","id":"t4"}]}}"#;
        format!("{HEAD}{id}{tail}").into_bytes()
    };
    let (f, req) = std::iter::repeat_with(|| listing_filter_with_id(&e, &mut rng, 0, r#""t4""#))
        .flatten()
        .find(|(_, r)| r.route_name.as_deref() == Some("tools") && r.caller.spiffe.is_none())
        .unwrap_or_else(|| panic!("no caller"));
    let first = run(&e, &mut f.clone(), &req, None, &body(r#""t4""#));
    assert_eq!(kept().0, 1, "{}", String::from_utf8_lossy(&first.0));
    for id in ["1", "12345", r#""t4""#, r#""x\"y""#] {
        let mut rng = Rng(3);
        let (f, req) = std::iter::repeat_with(|| listing_filter_with_id(&e, &mut rng, 0, id))
            .flatten()
            .find(|(_, r)| r.route_name.as_deref() == Some("tools") && r.caller.spiffe.is_none())
            .unwrap_or_else(|| panic!("no caller"));
        // The same listing but for its id: reused, the new id in place.
        let bytes = body(id);
        let mut g = f.clone();
        let got = run(&e, &mut g, &req, None, &bytes);
        assert_eq!(g.take_reused(), 1, "{id}");
        assert_eq!(
            got,
            run(&e, &mut f.clone().without_reuse(), &req, None, &bytes)
        );
        let n = HEAD.len();
        let want = [&first.0[..n], id.as_bytes(), &first.0[n + 4..]].concat();
        assert_eq!(
            String::from_utf8_lossy(&got.0),
            String::from_utf8_lossy(&want)
        );
    }
}

#[test]
fn an_event_a_longer_id_makes_too_large_is_not_reused() {
    let body = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"t0"}},{{"name":"t2"}}]}}}}"#
        )
    };
    // The first event of the stream (style 0) is exactly `listings.maxBytes` under id 9.
    let max = b"event: message\ndata: \n\n".len() + body("9").len();
    let e = engine_with(Some(max));
    forget_all();
    // The same caller (on the backend without pins) under either id.
    let filter = |id: &str| {
        (0..)
            .find_map(|n| {
                listing_filter_with_id(&e, &mut Rng(n), 0, id)
                    .filter(|(_, r)| r.route_name.as_deref() == Some("tools"))
            })
            .unwrap_or_else(|| panic!("no caller"))
    };
    let (f, req) = filter("9");
    let first = run(
        &e,
        &mut f.clone(),
        &req,
        Some(&[0, 7]),
        body("9").as_bytes(),
    );
    assert!(kept().0 > 0, "{}", String::from_utf8_lossy(&first.0));
    let (f, req) = filter("10");
    let fresh = run(
        &e,
        &mut f.clone().without_reuse(),
        &req,
        Some(&[0, 7]),
        body("10").as_bytes(),
    );
    let reused = run(
        &e,
        &mut f.clone(),
        &req,
        Some(&[0, 7]),
        body("10").as_bytes(),
    );
    assert!(String::from_utf8_lossy(&fresh.0).contains("could not be checked"));
    assert_eq!(
        String::from_utf8_lossy(&reused.0),
        String::from_utf8_lossy(&fresh.0)
    );
}
