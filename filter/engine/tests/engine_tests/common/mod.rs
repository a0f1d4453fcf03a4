//! Shared helpers for the decision-engine tests.
#![allow(clippy::type_complexity)]
#![allow(dead_code)]

use std::collections::HashMap;

use mcp_access_engine::callout::DispatchError;
use mcp_access_engine::flow::{
    drive, CalloutAnswer, Dispatched, HeadersInput, Next, Progress, Reply, RequestFlow,
};
use mcp_access_engine::listing::{BodyAction, HeadersAction, ListingFilter};
use mcp_access_engine::policy::{AuthzOutcome, Decision, Engine, HeaderEdit, Step};
use mcp_access_engine::request::Headers;
use mcp_access_engine::request::{Caller, McpOp, Request};
use serde_json::{json, Value};

pub const ALPHA: &str = "spiffe://example.org/ns/agents/sa/alpha";
pub const BETA: &str = "spiffe://example.org/ns/agents/sa/beta";

/// A bundle with gateway `gw` (listener `https` on 8443) and backend `tools` (route `tools-route`).
pub fn bundle(policies: Vec<Value>, authorizers: &[&str]) -> Value {
    json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "listeners": [
            {"name": "https", "port": 8443},
            {"name": "internal", "port": 9443}
        ]}],
        "backends": [
            {"name": "tools", "routeNames": ["tools-route"]},
            {"name": "other", "clusterNames": ["other-cluster"]}
        ],
        "authorizers": authorizers.iter().map(|a| json!({"name": a, "cluster": format!("{a}-cluster")})).collect::<Vec<_>>(),
        "policies": policies,
    })
}

pub fn engine(b: &Value) -> Engine {
    Engine::from_json(b.to_string().as_bytes()).unwrap()
}

/// An ExternalAuth policy.
pub fn ext(name: &str, level: &str, target: &str, authorizer: &str, seniority: u64) -> Value {
    json!({"name": name, "level": level, "targets": [{"name": target}], "action": "ExternalAuth",
           "externalAuth": authorizer, "seniority": seniority})
}

/// An Allow policy admitting tools/call of `tools` (v0alpha0 InlineTools: base protocol too).
pub fn inline_tools(name: &str, level: &str, target: &str, tools: &[&str]) -> Value {
    // No tools: no method, only the base protocol (as the compiler maps `tools: []`).
    let methods = if tools.is_empty() {
        json!([])
    } else {
        json!([{"name": "tools/call", "params": tools}])
    };
    json!({"name": name, "level": level, "targets": [{"name": target}], "action": "Allow",
           "rules": [{"name": "tools", "authorization": {"mcp": {
               "methods": methods, "baseProtocol": "Match"}}}]})
}

/// A Deny policy matching tools/call of `tools`.
pub fn deny_tools(name: &str, level: &str, target: &str, tools: &[&str]) -> Value {
    json!({"name": name, "level": level, "targets": [{"name": target}], "action": "Deny",
           "rules": [{"name": "tools", "authorization": {"mcp": {
               "methods": [{"name": "tools/call", "params": tools}]}}}]})
}

pub fn call(tool: &str) -> Request {
    request(
        McpOp::Call {
            method: "tools/call".into(),
            param: Some(tool.into()),
        },
        Some(ALPHA),
    )
}

pub fn request(mcp: McpOp, spiffe: Option<&str>) -> Request {
    Request {
        method: "POST".into(),
        path: "/mcp".into(),
        canonical_path: "/mcp".into(),
        authority: "gateway.example.org:8443".into(),
        host: "gateway.example.org".into(),
        port: 8443,
        headers: Headers::from(vec![("content-type", "application/json")]),
        caller: Caller {
            credential: false,
            spiffe: spiffe.map(str::to_string),
            jwts: vec![],
        },
        mcp,
        route_name: Some("tools-route".into()),
        cluster_name: Some("tools-cluster".into()),
        time: None,
        params: None,
        ..Request::default()
    }
}

/// `req` as the flow has it once its headers arrived: its listener and backend resolved.
pub fn resolved(engine: &Engine, req: &Request) -> Request {
    Request {
        target: engine.target_of(req),
        ..req.clone()
    }
}

pub fn allow() -> AuthzOutcome {
    AuthzOutcome::Allow { headers: vec![] }
}

pub fn deny(status: u16) -> AuthzOutcome {
    AuthzOutcome::Deny {
        status,
        headers: vec![("www-authenticate".into(), "Bearer".into())],
        body: b"no".to_vec(),
    }
}

/// Runs an evaluation to the end, answering each authorizer call from `outcomes` (keyed by
/// policy name). Returns the decision and the batches of policy names called.
pub fn run(
    engine: &Engine,
    req: &Request,
    outcomes: &HashMap<&str, AuthzOutcome>,
) -> (Decision, Vec<Vec<String>>) {
    let req = &resolved(engine, req);
    let mut ev = engine.begin(req, true);
    let mut batches = Vec::new();
    loop {
        match ev.advance(engine, req) {
            Step::Done(d) => return (d, batches),
            Step::Waiting => panic!("waiting with nothing outstanding"),
            Step::Call(calls) => {
                let mut names = Vec::new();
                for c in calls {
                    let id = engine.policies[c.policy].id.clone();
                    let name = id.rsplit('/').next().unwrap().to_string();
                    let o = outcomes
                        .get(name.as_str())
                        .cloned()
                        .unwrap_or_else(|| panic!("no outcome for {name}"));
                    ev.complete(c.slot, o);
                    names.push(name);
                }
                batches.push(names);
            }
        }
    }
}

pub fn is_allow(d: &Decision) -> bool {
    matches!(d, Decision::Allow { .. })
}

/// The headers of a POST to `/mcp` on listener 8443, routed to `tools` (what an MCP client
/// sends: `Content-Type: application/json`), from the caller with SPIFFE ID `spiffe`, plus
/// `extra`.
pub fn post_input(spiffe: &str, extra: &[(&str, &str)]) -> HeadersInput {
    let mut h: Vec<(String, String)> = vec![
        (":method".into(), "POST".into()),
        (":path".into(), "/mcp".into()),
        (":authority".into(), "gw.example.org".into()),
        ("content-type".into(), "application/json".into()),
    ];
    h.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    HeadersInput {
        headers: Headers::from(h),
        end_of_stream: false,
        port: 8443,
        route_name: Some("tools-route".into()),
        cluster_name: None,
        caller: Caller {
            credential: false,
            spiffe: Some(spiffe.into()),
            jwts: vec![],
        },
        time: None,
        peers: None,
    }
}

/// One POST through the flow as the host drives it (headers, then the whole body, then any
/// authorizer answering 200): the flow and what it decided.
pub fn post_through(
    e: &Engine,
    spiffe: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new();
    assert_eq!(
        flow.on_headers(e, post_input(spiffe, extra)).next,
        Next::Hold
    );
    let owned = body.as_bytes().to_vec();
    let a = flow
        .on_body(e, owned.len(), true, move |_| Some(owned))
        .next;
    let a = drive(&mut flow, e, a, |_| Reply::status(200));
    (flow, a)
}

/// The response filter of an allowed request, with the request it judges listed items for,
/// as the host holds them (the host keeps the flow, which keeps the request).
#[derive(Debug, Clone)]
pub struct Filter {
    filter: ListingFilter,
    request: Request,
}

impl Filter {
    /// The filter `flow` made when it allowed with `next`; None: it made none.
    pub fn of(flow: &RequestFlow, next: &Next) -> Option<Filter> {
        let (Next::Allow { .. }, Some(filter)) = (next, flow.response_filter()) else {
            return None;
        };
        Some(Filter {
            filter: ListingFilter::clone(filter),
            request: flow.request()?.clone(),
        })
    }

    pub fn on_headers(&mut self, headers: &[(String, String)]) -> HeadersAction {
        self.filter.on_headers(&Headers::from(headers))
    }

    pub fn content_type(&self) -> Option<&'static str> {
        self.filter.content_type()
    }

    /// The response headers as the host reads them: Content-Type first, then what the
    /// filter asks for.
    pub fn on_response_headers(&mut self, headers: &[(String, String)]) -> HeadersAction {
        let h = Headers::from(headers);
        let first = |name: &str| h.get(name).map(str::to_owned);
        self.filter.on_response_headers(
            h.get("content-type"),
            || first("content-encoding"),
            || h.clone(),
        )
    }

    pub fn on_body(
        &mut self,
        e: &Engine,
        buffered: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> BodyAction {
        let req = Some(&self.request);
        self.filter.on_body(e, req, buffered, end_of_stream, read)
    }

    pub fn on_trailers(
        &mut self,
        e: &Engine,
        read: impl FnOnce() -> Option<Vec<u8>>,
    ) -> BodyAction {
        self.filter.on_trailers(e, Some(&self.request), read)
    }

    pub fn take_pin_events(&mut self) -> Vec<mcp_access_engine::pins::PinEvent> {
        self.filter.take_pin_events()
    }
}

/// The headers an allow adds upstream; None for any other action.
pub fn added(next: &Next) -> Option<Vec<HeaderEdit>> {
    match next {
        Next::Allow { add_headers, .. } => Some(add_headers.clone()),
        _ => None,
    }
}

/// The host's side of the callout protocol, for tests that drive it event by event.
pub trait Host {
    /// Reports the callout for `slot` dispatched with `token` at `at_ns` (Err: it could not be).
    fn dispatch(
        &mut self,
        e: &Engine,
        slot: usize,
        token: Result<u32, String>,
        at_ns: u64,
    ) -> Progress;
    /// An HTTP answer whose body the host holds whole.
    fn answer(
        &mut self,
        e: &Engine,
        token: u32,
        status: Option<u16>,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        now_ns: u64,
    ) -> Progress;
    /// Any answer as it comes over the wire (trailers included).
    fn answer_reply(&mut self, e: &Engine, token: u32, reply: Reply, now_ns: u64) -> Progress;
    /// A gRPC answer: its status and the CheckResponse.
    fn answer_grpc(
        &mut self,
        e: &Engine,
        token: u32,
        status: Option<u32>,
        message: Vec<u8>,
        now_ns: u64,
    ) -> Progress;
}

impl Host for RequestFlow {
    fn dispatch(
        &mut self,
        e: &Engine,
        slot: usize,
        token: Result<u32, String>,
        at_ns: u64,
    ) -> Progress {
        let token = token.map_err(|s| DispatchError::from_status(&s));
        self.dispatched(e, [Dispatched { slot, token, at_ns }])
    }

    fn answer(
        &mut self,
        e: &Engine,
        token: u32,
        status: Option<u16>,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        now_ns: u64,
    ) -> Progress {
        let reply = Reply::Http {
            status,
            headers: Headers::from(headers),
            body,
        };
        self.answer_reply(e, token, reply, now_ns)
    }

    fn answer_reply(&mut self, e: &Engine, token: u32, reply: Reply, now_ns: u64) -> Progress {
        let (status, headers, body, trailers) = reply.wire().unwrap();
        let answer = CalloutAnswer {
            status,
            headers: &headers,
            trailers: || trailers,
            read: |n: usize| Some(body[..n.min(body.len())].to_vec()),
        };
        self.on_callout_response(e, token, answer, now_ns)
    }

    fn answer_grpc(
        &mut self,
        e: &Engine,
        token: u32,
        status: Option<u32>,
        message: Vec<u8>,
        now_ns: u64,
    ) -> Progress {
        self.answer_reply(e, token, Reply::Grpc { status, message }, now_ns)
    }
}
