//! The whole request flow, driven as the host adapter drives it (headers, body chunks or
//! trailers, callouts and their answers), with arbitrary headers and bodies and a few fixed
//! bundles. Besides never panicking, it checks:
//! - the flow ends exactly once: one Allow or Respond, and after it only Hold (a denied request
//!   is never released later, no callout is made after the decision), and it never hangs once
//!   the body is complete and every callout is answered;
//! - an allowed request has no Content-Encoding but `identity` (in any copy); an allowed POST
//!   carries a valid JSON-RPC message, and any `Mcp-Method` / `Mcp-Name` /
//!   `MCP-Protocol-Version` header appears once and agrees with the body (`Mcp-Name` may use
//!   the Base64 sentinel, the version is compared with `params._meta`'s);
//! - a local answer other than a relayed authorizer denial is a JSON-RPC error echoing the id.
//!
//! The input is text, so seeds stay readable (see seeds/flow):
//! ```text
//! POST port=8443 bundle=1 chunks=2 trailers callouts=200,403,none,fail
//! :path: /mcp
//! mcp-method: tools/call
//!
//! {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}
//! --callout--
//! {"body of the first authorizer answer"}
//! ```
//! Line 1: the HTTP method, then options: `port=`, `bundle=` (index into BUNDLES), `route=`,
//! `cluster=`, `spiffe=`, `jwt=ISSUER|SUBJECT|GROUP,GROUP` (a verified JWT), `eos` (no body), `chunks=` (body chunks before the end), `trailers`
//! (the body ends with trailers), `callouts=` (answers in dispatch order: a status, `none` for
//! no answer, `fail` for a failed dispatch; they arrive in dispatch order: tests/flow.rs
//! has them out of order), `stale`
//! (an answer with an unknown token first). Then header lines `name: value` (names lowercased
//! as Envoy does) up to an empty line; the rest is the body, up to a `--callout--` line.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_bundle::AuthorizerProtocol;
use mcp_access_engine::answer::Why;
use mcp_access_engine::flow::{drive, CalloutAnswer, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::mcp::{parse_message, ParseLimits};
use mcp_access_engine::policy::{Engine, Reason};
use mcp_access_engine::request::{Caller, ClaimValue, Headers, JwtPrincipal};
use serde_json::Value;

/// The bundles the flow runs under: the demo's (compiled from envoy-demo/manifests by
/// `mcp-access envoy`), one with rules of every kind, one with authorizers at both levels, one
/// with an HTTP and a gRPC authorizer.
const BUNDLES: &[&str] = &[
    include_str!("../bundles/demo.json"),
    include_str!("../bundles/rules.json"),
    include_str!("../bundles/authz.json"),
    include_str!("../bundles/grpc.json"),
];

fn engines() -> &'static [Engine] {
    static ENGINES: OnceLock<Vec<Engine>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        BUNDLES
            .iter()
            .map(|b| match Engine::from_json(b.as_bytes()) {
                Ok(e) => e,
                Err(e) => panic!("a fixed bundle does not load: {e}"),
            })
            .collect()
    })
}

#[derive(Debug, Clone)]
enum Answer {
    Status(u16),
    Silent,
    DispatchFails,
}

#[derive(Debug)]
struct Input {
    method: String,
    port: u16,
    bundle: usize,
    route: Option<String>,
    cluster: Option<String>,
    spiffe: Option<String>,
    jwts: Vec<JwtPrincipal>,
    eos: bool,
    chunks: usize,
    trailers: bool,
    answers: Vec<Answer>,
    stale: bool,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    callout_bodies: Vec<Vec<u8>>,
}

fn split_once<'a>(data: &'a [u8], sep: &[u8]) -> (&'a [u8], Option<&'a [u8]>) {
    match data.windows(sep.len()).position(|w| w == sep) {
        Some(i) => (&data[..i], Some(&data[i + sep.len()..])),
        None => (data, None),
    }
}

fn parse_input(data: &[u8]) -> Input {
    let (first, rest) = split_once(data, b"\n");
    let first = String::from_utf8_lossy(first);
    let mut words = first.split(' ');
    let mut input = Input {
        method: words.next().unwrap_or("POST").to_string(),
        port: 8443,
        bundle: 0,
        route: Some("tools-route".into()),
        cluster: None,
        spiffe: Some("spiffe://example.org/ns/agents/sa/alpha".into()),
        jwts: Vec::new(),
        eos: false,
        chunks: 0,
        trailers: false,
        answers: Vec::new(),
        stale: false,
        headers: Vec::new(),
        body: Vec::new(),
        callout_bodies: Vec::new(),
    };
    for word in words {
        let (key, value) = word.split_once('=').unwrap_or((word, ""));
        match key {
            "port" => input.port = value.parse().unwrap_or(0),
            "bundle" => input.bundle = value.parse::<usize>().unwrap_or(0) % BUNDLES.len(),
            "route" => input.route = (!value.is_empty()).then(|| value.to_string()),
            "cluster" => input.cluster = (!value.is_empty()).then(|| value.to_string()),
            "spiffe" => input.spiffe = (!value.is_empty()).then(|| value.to_string()),
            "jwt" => {
                let mut parts = value.split('|');
                let issuer = parts.next().unwrap_or_default().to_string();
                let subject = parts.next().map(str::to_string);
                let groups = parts.next().unwrap_or_default().split(',');
                input.jwts.push(JwtPrincipal {
                    texts: Vec::new(),
                    keyed: Vec::new(),
                    issuer,
                    subject,
                    claims: vec![(
                        "groups".into(),
                        ClaimValue::List(groups.map(str::to_string).collect()),
                    )],
                    payload: None,
                });
            }
            "eos" => input.eos = true,
            "chunks" => input.chunks = value.parse::<usize>().unwrap_or(0).min(8),
            "trailers" => input.trailers = true,
            "stale" => input.stale = true,
            "callouts" => {
                input.answers = value
                    .split(',')
                    .map(|a| match a {
                        "none" => Answer::Silent,
                        "fail" => Answer::DispatchFails,
                        s => Answer::Status(s.parse().unwrap_or(200)),
                    })
                    .collect()
            }
            _ => {}
        }
    }
    let Some(mut rest) = rest else {
        return input;
    };
    loop {
        let (line, after) = split_once(rest, b"\n");
        rest = after.unwrap_or_default();
        if line.is_empty() {
            break;
        }
        let line = String::from_utf8_lossy(line);
        // Pseudo-headers start with ':'; the name ends at the next ':'.
        let from = usize::from(line.starts_with(':'));
        let (name, value) = match line[from..].find(':') {
            Some(i) => (&line[..from + i], line[from + i + 1..].trim_start()),
            None => (&line[..], ""),
        };
        input
            .headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        if after.is_none() {
            break;
        }
    }
    let (body, mut callouts) = split_once(rest, b"\n--callout--\n");
    input.body = body.to_vec();
    while let Some(c) = callouts {
        let (one, next) = split_once(c, b"\n--callout--\n");
        input.callout_bodies.push(one.to_vec());
        callouts = next;
    }
    input
}

/// A header's copies.
fn copies<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `=?base64?…?=` decoded (standard alphabet, padding optional), as SEP-2243 defines it.
fn sentinel(value: &str) -> Option<String> {
    let inner = value.strip_prefix("=?base64?")?.strip_suffix("?=")?;
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in inner.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    String::from_utf8(out).ok()
}

/// Checks what an Allow implies about the request.
fn check_allowed(input: &Input, engine: &Engine) {
    for enc in copies(&input.headers, "content-encoding") {
        assert!(
            enc.trim().eq_ignore_ascii_case("identity"),
            "allowed with Content-Encoding {enc:?}"
        );
    }
    if input.method != "POST" {
        return;
    }
    let text = String::from_utf8_lossy(&input.body);
    let limits = ParseLimits {
        max_depth: usize::try_from(engine.settings.limits.max_json_depth).unwrap_or(64),
    };
    let msg = match parse_message(&input.body, &limits) {
        Ok(m) => m,
        Err(e) => panic!("allowed a POST whose body is not a valid message ({e:?}): {text}"),
    };
    let param = msg.name.as_deref().or(msg.uri.as_deref());
    let methods = copies(&input.headers, "mcp-method");
    assert!(
        methods.len() <= 1,
        "allowed with Mcp-Method given {} times",
        methods.len()
    );
    for m in methods {
        assert_eq!(
            Some(m),
            msg.method.as_ref().map(|m| m.as_str()),
            "allowed with a disagreeing Mcp-Method: {text}"
        );
    }
    let versions = copies(&input.headers, "mcp-protocol-version");
    assert!(
        versions.len() <= 1,
        "allowed with MCP-Protocol-Version given {} times",
        versions.len()
    );
    if let (Some(h), Some(b)) = (versions.first(), msg.protocol_version.as_deref()) {
        assert_eq!(
            *h, b,
            "allowed with a protocol version header disagreeing with _meta"
        );
    }
    // From MCP 2026-07-28 on, a POST carries these headers (SEP-2243).
    let revision = versions
        .first()
        .copied()
        .into_iter()
        .chain(msg.protocol_version.as_deref())
        .any(|v| v >= "2026-07-28");
    if revision {
        assert!(
            !versions.is_empty(),
            "allowed a 2026-07-28 POST without MCP-Protocol-Version"
        );
        assert!(
            !copies(&input.headers, "mcp-method").is_empty(),
            "allowed a 2026-07-28 POST without Mcp-Method"
        );
        if matches!(
            msg.method.as_ref().map(|m| m.as_str()),
            Some("tools/call" | "resources/read" | "prompts/get")
        ) {
            assert!(
                !copies(&input.headers, "mcp-name").is_empty(),
                "allowed a 2026-07-28 call without Mcp-Name"
            );
        }
    }
    let names = copies(&input.headers, "mcp-name");
    assert!(
        names.len() <= 1,
        "allowed with Mcp-Name given {} times",
        names.len()
    );
    for n in names {
        let agrees = Some(n) == param || (sentinel(n).as_deref() == param && param.is_some());
        assert!(
            agrees,
            "allowed with a disagreeing Mcp-Name {n:?} (body: {param:?}): {text}"
        );
    }
}

/// Checks a local answer.
fn check_respond(flow: &RequestFlow, body: &[u8], request_body: &[u8]) {
    let relayed = flow
        .outcome()
        .is_some_and(|o| o.reason == Why::Denied(Reason::ExternalAuthDenied));
    assert!(
        flow.outcome().is_some_and(|o| !o.allowed),
        "answered but not recorded as denied"
    );
    if relayed {
        return;
    }
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        // serde_json's limit, not the answer's: the echoed id is a valid number beyond f64.
        Err(e) if e.to_string().starts_with("number out of range") => return,
        Err(e) => panic!(
            "local answer is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        ),
    };
    assert_eq!(v["jsonrpc"], "2.0");
    assert!(v["error"]["code"].is_i64(), "no error code: {v}");
    // The id echoed is the request's (when the body was a message with a readable id) or null.
    if !v["id"].is_null() {
        match serde_json::from_slice::<Value>(request_body) {
            Ok(req) => assert_eq!(v["id"], req["id"], "echoed id differs"),
            // serde_json's limit again: the request holds a number beyond f64 elsewhere.
            Err(e) if e.to_string().starts_with("number out of range") => {}
            Err(e) => panic!("echoed an id from a body that is not JSON ({e})"),
        }
    }
}

struct Driver<'a> {
    engine: &'a Engine,
    input: &'a Input,
    flow: RequestFlow,
    /// Terminal actions seen (Allow or Respond).
    terminal: usize,
    /// Callouts answered so far (the index of the next answer).
    next_answer: usize,
}

impl Driver<'_> {
    /// Carries out an action, callouts answered from the input through [`drive`].
    fn handle(&mut self, action: Next) {
        if self.terminal > 0 {
            assert_eq!(action, Next::Hold, "action after the request was decided");
        }
        let (engine, input) = (self.engine, self.input);
        let next_answer = &mut self.next_answer;
        let action = drive(&mut self.flow, engine, action, |call| {
            let i = *next_answer;
            *next_answer += 1;
            let grpc = call
                .authorizer(engine)
                .is_some_and(|a| a.protocol == AuthorizerProtocol::Grpc);
            reply(input, i, grpc)
        });
        match action {
            Next::Hold => {}
            Next::Allow { add_headers, .. } => {
                self.terminal += 1;
                for edit in &add_headers {
                    let name = &edit.name;
                    assert!(
                        !name.starts_with(':'),
                        "an added header is a pseudo-header: {name}"
                    );
                }
                assert!(
                    self.flow.outcome().is_some_and(|o| o.allowed),
                    "allowed but recorded as denied"
                );
                check_allowed(self.input, self.engine);
            }
            Next::Respond(r) => {
                self.terminal += 1;
                check_respond(&self.flow, &r.body, &self.input.body);
            }
            Next::Dispatch(_) | Next::CallLimiter(_) => panic!("drive returned a dispatch"),
        }
    }
}

/// The answer of callout `i`: HTTP with the input's status, headers and callout body; gRPC
/// with status 200 as OK and the callout body as the CheckResponse (arbitrary bytes), another
/// status as that gRPC status (mod 17); none for no answer.
fn reply(input: &Input, i: usize, grpc: bool) -> Reply {
    let body = input.callout_bodies.get(i).cloned().unwrap_or_default();
    let status = match input.answers.get(i) {
        Some(Answer::DispatchFails) => return Reply::NotDispatched,
        Some(Answer::Status(s)) => Some(*s),
        Some(Answer::Silent) | None => None,
    };
    if grpc {
        return Reply::Grpc {
            status: status.map(|s| if s == 200 { 0 } else { u32::from(s) % 17 }),
            message: body,
        };
    }
    Reply::Http {
        status,
        headers: Headers::from(vec![
            ("x-user".to_string(), "u1".to_string()),
            ("www-authenticate".to_string(), "Bearer".to_string()),
            ("content-type".to_string(), "application/json".to_string()),
        ]),
        body,
    }
}

fuzz_target!(|data: &[u8]| {
    let input = parse_input(data);
    let engines = engines();
    let Some(engine) = engines.get(input.bundle) else {
        return;
    };
    let mut headers = vec![(":method".to_string(), input.method.clone())];
    for pseudo in [(":path", "/mcp"), (":authority", "gw.example.org")] {
        if !input.headers.iter().any(|(n, _)| n == pseudo.0) {
            headers.push((pseudo.0.to_string(), pseudo.1.to_string()));
        }
    }
    headers.extend(input.headers.iter().cloned());
    let mut d = Driver {
        engine,
        input: &input,
        flow: RequestFlow::new(),
        terminal: 0,
        next_answer: 0,
    };
    let a = d.flow.on_headers(
        engine,
        HeadersInput {
            peers: Some(Default::default()),
            headers: headers.into(),
            end_of_stream: input.eos,
            time: None,
            port: input.port,
            route_name: input.route.clone(),
            cluster_name: input.cluster.clone(),
            caller: Caller {
                credential: false,
                spiffe: input.spiffe.clone(),
                jwts: input.jwts.clone(),
            },
        },
    ).next;
    d.handle(a);
    if !input.eos {
        let body = &input.body;
        let step = body.len() / (input.chunks + 1);
        for i in 1..=input.chunks {
            let a = d.flow.on_body(engine, step * i, false, |_| None).next;
            d.handle(a);
        }
        let a = if input.trailers {
            d.flow.on_trailers(engine, &Headers::new(), |n| {
                Some(body[..n.min(body.len())].to_vec())
            }).next
        } else {
            d.flow.on_body(engine, body.len(), true, |n| {
                Some(body[..n.min(body.len())].to_vec())
            }).next
        };
        d.handle(a);
    }
    if input.stale {
        let never = |_: usize| -> Option<Vec<u8>> { panic!("a stray answer's body is read") };
        let answer = CalloutAnswer {
            status: Some(200),
            headers: &Headers::new(),
            trailers: Headers::new,
            read: never,
        };
        let p = d.flow.on_callout_response(engine, 9999, answer, 0);
        assert!(p.reports.is_empty(), "a stray answer is reported");
        d.handle(p.next);
    }
    assert_eq!(
        d.terminal, 1,
        "the request was never decided (it would hang)"
    );
    assert!(d.flow.is_done());
});
