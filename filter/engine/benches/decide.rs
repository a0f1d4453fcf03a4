//! Native micro-benchmarks of what the filter does per request and per configuration:
//! parsing a body, the whole request flow (headers, body, parse, decision, outcome JSON) and
//! compiling a bundle. The bundles and bodies are those of the Envoy benchmark (integration/bench/).
//!
//! `cargo bench -p mcp-access-filter --bench decide` runs them under criterion.
//! With `MCP_ACCESS_COUNT=<op>:<n>` the binary instead runs one operation n times and exits,
//! for instruction counting (`valgrind --tool=callgrind`, two values of n, difference / Δn).
//! With `MCP_ACCESS_DUMP=s5` it prints the large bundle (integration/bench/run.py checks it equals its own).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::rc::Rc;
use std::time::Duration;

use criterion::Criterion;
use mcp_access_engine::callout::CalloutRequest;
use mcp_access_engine::flow::{drive, drive_with_limiter, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::mcp::{parse_message, ParseLimits};
use mcp_access_engine::pb::frame;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::ratelimit::global::assumed_answer;
use mcp_access_engine::ratelimit::store::{prepare, MemoryCounterStore};
use mcp_access_engine::receipts::structured::record_struct;
use mcp_access_engine::request::Caller;
use serde_json::{json, Value};

const PORT: u16 = 10000;
const NS: &str = "bench";
const ALLOWED: &str = "echo";
const DENIED: &str = "delete_everything";
const S5_BACKENDS: usize = 100;
const S5_POLICIES: usize = 10;
const S5_TOOLS: usize = 10;
const S5_ROUTED: usize = 42;

fn s5_tool(b: usize, p: usize, t: usize) -> String {
    format!("tool-{b:03}-{p:02}-{t:02}")
}

fn tool_rule(name: &str, tools: &[String]) -> Value {
    json!({"name": name, "authorization": {"mcp": {
        "methods": [{"name": "tools/call", "params": tools}], "baseProtocol": "Match"}}})
}

fn base(backends: Vec<Value>, authorizers: Vec<Value>, policies: Vec<Value>) -> Value {
    json!({
        "apiVersion": "mcp-access.io/v1",
        "gateways": [{"name": "gw", "namespace": NS, "listeners": [{"name": "mcp", "port": PORT}]}],
        "backends": backends,
        "authorizers": authorizers,
        "policies": policies,
        "limits": {"maxBodyBytes": 2 * 1024 * 1024},
    })
}

fn inline_policy() -> Value {
    json!({"name": "allow-echo", "namespace": NS, "level": "Gateway", "targets": [{"name": "gw"}],
           "action": "Allow", "seniority": 1,
           "rules": [tool_rule("echo-only", &[ALLOWED.to_string()])]})
}

fn tools_backend() -> Value {
    json!({"name": "tools", "namespace": NS, "routeNames": ["tools"]})
}

/// S2: the inline tool policy.
fn s2() -> Value {
    base(vec![tools_backend()], vec![], vec![inline_policy()])
}

/// L1: S2 with one Local rate limit charged on every allowed call (integration/bench's
/// `s2_limited`: keyed by the tool name, a limit never reached).
fn s2_limited() -> Value {
    let mut b = s2();
    let limits = json!([{"namespace": NS, "policy": "quotas", "name": "calls", "level": "Backend",
        "targets": [{"name": "tools"}], "rates": [{"limit": 2_147_483_648u64, "windowSeconds": 60}],
        "counters": ["request.mcp.tool_name"], "when": []}]);
    b.as_object_mut()
        .expect("an object")
        .insert("rateLimits".into(), limits);
    b
}

/// G: S2 with one Global rate limit keyed by `request.host`, asked of a RateLimitService
/// (integration/bench/bundles.py `global_limit`).
fn s2_global() -> Value {
    let mut b = s2();
    let limits = json!([{"namespace": NS, "policy": "quotas", "name": "calls", "level": "Backend",
        "mode": "Global", "targets": [{"name": "tools"}],
        "rates": [{"limit": 2_147_483_648u64, "windowSeconds": 3600}],
        "counters": ["request.host"], "when": []}]);
    let o = b.as_object_mut().expect("an object");
    o.insert("rateLimits".into(), limits);
    o.insert(
        "rateLimitService".into(),
        json!({"cluster": "ratelimit", "timeoutMs": 2000, "domain": "mcp-access"}),
    );
    b
}

/// S4: S2 plus two Gateway-level and one Backend-level authorizer.
fn s4() -> Value {
    let mut authorizers = Vec::new();
    let mut policies = vec![inline_policy()];
    for (i, (name, level, target)) in [
        ("gw-authz-0", "Gateway", "gw"),
        ("gw-authz-1", "Gateway", "gw"),
        ("be-authz-0", "Backend", "tools"),
    ]
    .into_iter()
    .enumerate()
    {
        authorizers.push(json!({"name": name, "cluster": format!("authz{i}"),
                                "pathPrefix": "/authz", "timeoutMs": 1000}));
        policies.push(json!({"name": name, "namespace": NS, "level": level,
                             "targets": [{"name": target}], "action": "ExternalAuth",
                             "externalAuth": name, "seniority": 10 + i}));
    }
    base(vec![tools_backend()], authorizers, policies)
}

/// S5: 10,000 tools in 1,000 Backend-level Allow policies over 100 backends (integration/bench/bundles.py).
fn s5() -> Value {
    let mut backends = Vec::new();
    let mut policies = Vec::new();
    for b in 0..S5_BACKENDS {
        let name = format!("backend-{b:03}");
        let route = if b == S5_ROUTED {
            "tools".to_string()
        } else {
            format!("route-{b:03}")
        };
        backends.push(json!({"name": name, "namespace": NS, "routeNames": [route]}));
        for p in 0..S5_POLICIES {
            let tools: Vec<String> = (0..S5_TOOLS).map(|t| s5_tool(b, p, t)).collect();
            policies.push(json!({
                "name": format!("{name}-allow-{p:02}"), "namespace": NS, "level": "Backend",
                "targets": [{"name": name}], "action": "Allow", "seniority": b * S5_POLICIES + p,
                "rules": [tool_rule(&format!("tools-{p:02}"), &tools)],
            }));
        }
    }
    base(backends, vec![], policies)
}

/// How the ten rules of [`ten_rules`] are written.
#[derive(Clone, Copy, PartialEq)]
enum Ten {
    Inline,
    /// `request.mcp.tool_name == '<tool>'`: the engine indexes the rule by its tool.
    Cel,
    /// `request.mcp.tool_name.endsWith('-<i>')`: not indexable, every rule is evaluated.
    CelUnindexed,
}

/// CEL vs inline (issue 10): one Gateway Allow policy of 10 rules, rule i admitting tools/call
/// of `cel-tool-i` under /mcp; the request calls the tool of the last rule.
fn ten_rules(how: Ten) -> Value {
    let rules: Vec<Value> = (0..10)
        .map(|i| {
            let tool = format!("cel-tool-{i}");
            if how == Ten::Cel {
                json!({"name": format!("r{i}"), "authorization": {"cel": format!(
                    "request.url_path.startsWith('/mcp') && request.mcp.tool_name == '{tool}'")}})
            } else if how == Ten::CelUnindexed {
                json!({"name": format!("r{i}"), "authorization": {"cel": format!(
                    "request.url_path.startsWith('/mcp') && request.mcp.tool_name.endsWith('-tool-{i}')")}})
            } else {
                json!({"name": format!("r{i}"), "authorization": {
                    "paths": [{"type": "PathPrefix", "value": "/mcp"}],
                    "mcp": {"methods": [{"name": "tools/call", "params": [tool]}]}}})
            }
        })
        .collect();
    base(
        vec![tools_backend()],
        vec![],
        vec![json!({"name": "ten", "namespace": NS, "level": "Gateway",
                    "targets": [{"name": "gw"}], "action": "Allow", "rules": rules})],
    )
}

/// 1,000 CEL rules: 100 Backend-level Allow policies of 10 KAN-style rules each.
fn cel1000() -> Value {
    let policies: Vec<Value> = (0..100)
        .map(|p| {
            let rules: Vec<Value> = (0..10)
                .map(|r| json!({"name": format!("r{r}"), "authorization": {"cel": format!(
                    "request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && request.mcp.tool_name.matches('^get-{p}-{r}-[a-z]+$')")}}))
                .collect();
            json!({"name": format!("p{p:03}"), "namespace": NS, "level": "Backend",
                   "targets": [{"name": "tools"}], "action": "Allow", "rules": rules})
        })
        .collect();
    base(vec![tools_backend()], vec![], policies)
}

fn call_body(tool: &str, text: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"{text}"}}}}}}"#)
        .into_bytes()
}

fn mib_body() -> Vec<u8> {
    let empty = call_body(ALLOWED, "").len();
    call_body(ALLOWED, &"x".repeat(1024 * 1024 - empty))
}

fn headers_input(len: usize) -> HeadersInput {
    let h = [
        (":method", "POST".to_string()),
        (":path", "/mcp".to_string()),
        (":authority", format!("127.0.0.1:{PORT}")),
        (":scheme", "http".to_string()),
        ("content-type", "application/json".to_string()),
        ("accept", "application/json, text/event-stream".to_string()),
        ("content-length", len.to_string()),
        (
            "x-request-id",
            "2f0c2a4e-4c53-4a1d-9d3e-5d0c9b0f6a11".to_string(),
        ),
    ];
    HeadersInput {
        peers: None,
        headers: h.iter().map(|(n, v)| (n.to_string(), v.clone())).collect(),
        end_of_stream: false,
        time: None,
        port: PORT,
        route_name: Some("tools".into()),
        cluster_name: Some("upstream".into()),
        caller: Caller::default(),
    }
}

/// One request through the flow as the host drives it, callouts answered 200 at once;
/// returns the final action's kind and the outcome JSON (what the host writes to filter state).
fn request(engine: &Engine, body: &[u8]) -> (bool, String) {
    request_in(engine, body, RequestFlow::new())
}

/// [`request`] through `flow` (e.g. one with a counter store).
fn request_in(engine: &Engine, body: &[u8], mut flow: RequestFlow) -> (bool, String) {
    let mut action = flow.on_headers(engine, headers_input(body.len())).next;
    if action.is_hold() {
        action = flow
            .on_body(engine, body.len(), true, |_| Some(body.to_vec()))
            .next;
    }
    let last = drive(&mut flow, engine, action, |_| Reply::status(200));
    assert!(!last.is_hold(), "flow stalled");
    let allowed = matches!(last, Next::Allow { .. });
    (allowed, flow.outcome().expect("decided").to_json(engine))
}

struct Fixtures {
    small_allow: Vec<u8>,
    small_deny: Vec<u8>,
    s5_allow: Vec<u8>,
    s5_deny: Vec<u8>,
    mib: Vec<u8>,
    s2_json: Vec<u8>,
    s5_json: Vec<u8>,
    cel1000_json: Vec<u8>,
    ten_call: Vec<u8>,
    cel10: Engine,
    cel10_unindexed: Engine,
    inline10: Engine,
    s2: Engine,
    s4: Engine,
    s5: Engine,
    s2_limited: Engine,
    s2_global: Engine,
    /// The Local limiter's store, prepared as the filter prepares Envoy's shared data.
    counters: Rc<MemoryCounterStore>,
}

impl Fixtures {
    /// Everything (`large`: with the S5 engine; counting other operations skips building it).
    fn new(large: bool) -> Fixtures {
        let s2_json = s2().to_string().into_bytes();
        let s5_json = if large {
            s5().to_string().into_bytes()
        } else {
            s2_json.clone()
        };
        let f = Fixtures {
            small_allow: call_body(ALLOWED, "hi"),
            small_deny: call_body(DENIED, "hi"),
            s5_allow: call_body(&s5_tool(S5_ROUTED, S5_POLICIES - 1, S5_TOOLS - 1), "hi"),
            s5_deny: call_body(&s5_tool(S5_ROUTED + 1, 0, 0), "hi"),
            mib: mib_body(),
            s2: Engine::from_json(&s2_json).unwrap(),
            s4: Engine::from_json(s4().to_string().as_bytes()).unwrap(),
            s5: Engine::from_json(&s5_json).unwrap(),
            s2_json,
            s5_json,
            cel1000_json: cel1000().to_string().into_bytes(),
            ten_call: call_body("cel-tool-9", "hi"),
            cel10: Engine::from_json(ten_rules(Ten::Cel).to_string().as_bytes()).unwrap(),
            cel10_unindexed: Engine::from_json(ten_rules(Ten::CelUnindexed).to_string().as_bytes())
                .unwrap(),
            inline10: Engine::from_json(ten_rules(Ten::Inline).to_string().as_bytes()).unwrap(),
            s2_limited: Engine::from_json(s2_limited().to_string().as_bytes()).unwrap(),
            s2_global: Engine::from_json(s2_global().to_string().as_bytes()).unwrap(),
            counters: {
                let store = MemoryCounterStore::default();
                store.now_ns.set(60_000_000_000);
                prepare(&store).unwrap();
                Rc::new(store)
            },
        };
        assert!(request(&f.cel10, &f.ten_call).0);
        assert!(request(&f.cel10_unindexed, &f.ten_call).0);
        assert!(!request(&f.cel10_unindexed, &f.small_deny).0);
        assert!(request(&f.inline10, &f.ten_call).0);
        assert!(!request(&f.cel10, &f.small_deny).0);
        assert!(Engine::from_json(&f.cel1000_json).is_ok());
        // The decisions the benchmark relies on.
        assert!(request(&f.s2, &f.small_allow).0);
        assert!(!request(&f.s2, &f.small_deny).0);
        assert!(request(&f.s4, &f.small_allow).0);
        if large {
            assert!(request(&f.s5, &f.s5_allow).0);
            assert!(!request(&f.s5, &f.s5_deny).0);
        }
        assert!(request(&f.s2, &f.mib).0);
        assert!(f
            .limited(&f.small_allow)
            .1
            .contains("\"limits\":{\"charged\":[\"bench/quotas/calls\"]"));
        let (allowed, record) = f.global(&f.small_allow);
        assert!(allowed && !record.contains("limiterFailed"), "{record}");
        f
    }

    /// An S2 request charged the one Local limit of `s2_limited`.
    fn limited(&self, body: &[u8]) -> (bool, String) {
        let flow = RequestFlow::new().with_counter_store(self.counters.clone());
        request_in(&self.s2_limited, body, flow)
    }
}

impl Fixtures {
    /// An S2 request charged the one Global limit of `s2_global`, the limiter answering OK
    /// as a gRPC server does (the message framed, `grpc-status: 0` in the trailers).
    fn global(&self, body: &[u8]) -> (bool, String) {
        let engine = &self.s2_global;
        let mut flow = RequestFlow::new();
        let mut action = flow.on_headers(engine, headers_input(body.len())).next;
        if action.is_hold() {
            action = flow
                .on_body(engine, body.len(), true, |_| Some(body.to_vec()))
                .next;
        }
        let ok = |call: &CalloutRequest| {
            let message = assumed_answer(&call.body, |_| false).unwrap_or_default();
            Reply::Raw {
                status: Some(200),
                headers: [("content-type", "application/grpc")].into_iter().collect(),
                body: frame(&message),
                trailers: [("grpc-status", "0")].into_iter().collect(),
            }
        };
        let last = drive_with_limiter(&mut flow, engine, action, |_| Reply::status(200), ok);
        let allowed = matches!(last, Next::Allow { .. });
        (allowed, flow.outcome().expect("decided").to_json(engine))
    }
}

/// (name, operation) pairs; the name is the criterion id and the MCP_ACCESS_COUNT key.
type Op = fn(&Fixtures);
const OPS: &[(&str, Op)] = &[
    ("parse/tools_call", |f| {
        black_box(parse_message(black_box(&f.small_allow), &ParseLimits::default()).is_ok());
    }),
    ("parse/tools_call_1mib", |f| {
        black_box(parse_message(black_box(&f.mib), &ParseLimits::default()).is_ok());
    }),
    ("request/s2_allowed", |f| {
        black_box(request(&f.s2, black_box(&f.small_allow)));
    }),
    // request/s2_allowed by phase: the header map handed over and read, then the body parsed
    // and decided; the rest of s2_allowed is the decision's JSON (log and filter state).
    ("phase/s2_headers", |f| {
        let mut flow = RequestFlow::new();
        black_box(
            flow.on_headers(&f.s2, headers_input(f.small_allow.len()))
                .next,
        );
    }),
    ("phase/s2_headers_body", |f| {
        let body = black_box(&f.small_allow);
        let mut flow = RequestFlow::new();
        black_box(flow.on_headers(&f.s2, headers_input(body.len())).next);
        black_box(
            flow.on_body(&f.s2, body.len(), true, |_| Some(body.to_vec()))
                .next,
        );
    }),
    // L1: the same call charged one Local rate limit (the store in memory, as a Wasm VM's
    // shared data would hold it).
    ("request/s2_allowed_limited", |f| {
        black_box(f.limited(black_box(&f.small_allow)));
    }),
    // G: the same call charged one Global rate limit (the RateLimitService's call made and
    // its OK answer read, as the host hands it over).
    ("request/s2_allowed_global", |f| {
        black_box(f.global(black_box(&f.small_allow)));
    }),
    // request/s2_allowed with the record also as a Struct (decisionRecords.structured,
    // `envoy --otlp`): the difference is what per-field OTLP attributes cost the filter.
    ("request/s2_allowed_structured", |f| {
        let (allowed, record) = request(&f.s2, black_box(&f.small_allow));
        black_box((allowed, record_struct(&record).unwrap().len()));
    }),
    ("request/s2_denied", |f| {
        black_box(request(&f.s2, black_box(&f.small_deny)));
    }),
    ("request/s4_three_authorizers", |f| {
        black_box(request(&f.s4, black_box(&f.small_allow)));
    }),
    ("request/s5_allowed", |f| {
        black_box(request(&f.s5, black_box(&f.s5_allow)));
    }),
    ("request/s5_denied", |f| {
        black_box(request(&f.s5, black_box(&f.s5_deny)));
    }),
    ("request/inline10_allowed", |f| {
        black_box(request(&f.inline10, black_box(&f.ten_call)));
    }),
    ("request/cel10_allowed", |f| {
        black_box(request(&f.cel10, black_box(&f.ten_call)));
    }),
    ("request/cel10_unindexed_allowed", |f| {
        black_box(request(&f.cel10_unindexed, black_box(&f.ten_call)));
    }),
    ("request/s6_1mib_allowed", |f| {
        black_box(request(&f.s2, black_box(&f.mib)));
    }),
    ("load/s2_bundle", |f| {
        black_box(Engine::from_json(black_box(&f.s2_json)).is_ok());
    }),
    ("load/s5_bundle", |f| {
        black_box(Engine::from_json(black_box(&f.s5_json)).is_ok());
    }),
    ("load/cel1000_bundle", |f| {
        black_box(Engine::from_json(black_box(&f.cel1000_json)).is_ok());
    }),
];

fn count_mode(spec: &str) {
    let (name, n) = spec.rsplit_once(':').expect("MCP_ACCESS_COUNT=<op>:<n>");
    let n: usize = n.parse().expect("iteration count");
    let (_, op) = OPS
        .iter()
        .find(|(k, _)| *k == name)
        .unwrap_or_else(|| panic!("unknown op {name}"));
    let f = Fixtures::new(name.contains("s5"));
    for _ in 0..n {
        op(&f);
    }
}

fn main() {
    if let Ok(which) = std::env::var("MCP_ACCESS_DUMP") {
        let v = match which.as_str() {
            "s2" => s2(),
            "s4" => s4(),
            "s5" => s5(),
            other => panic!("unknown bundle {other}"),
        };
        println!("{v}");
        return;
    }
    if let Ok(spec) = std::env::var("MCP_ACCESS_COUNT") {
        count_mode(&spec);
        return;
    }
    // MCP_ACCESS_LOAD=FILE: loads that bundle once and prints the time (integration/bench/run.py's P8 bundle).
    if let Ok(path) = std::env::var("MCP_ACCESS_LOAD") {
        let text = std::fs::read(&path).unwrap();
        let t = std::time::Instant::now();
        let e = Engine::from_json(&text).unwrap();
        println!("{} policies loaded in {:?}", e.policies.len(), t.elapsed());
        return;
    }
    let f = Fixtures::new(true);
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    for (name, op) in OPS {
        let (group, id) = name.split_once('/').unwrap_or(("ops", name));
        let mut g = c.benchmark_group(group);
        if group == "load" || id.contains("1mib") {
            g.sample_size(10);
        }
        g.bench_function(id, |b| b.iter(|| op(&f)));
        g.finish();
    }
    c.final_summary();
}
