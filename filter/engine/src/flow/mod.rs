//! One request, start to end, as a pure state machine the host adapter drives:
//! headers -> (body) -> parse -> evaluate -> (callouts) -> answer -> (response).
//!
//! Its stages (`Stage`) each hold what the request has there, and each has its file: `start.rs`
//! (headers checked, body read and parsed), `deciding.rs` (policies evaluated, authorizers
//! called), `finish.rs` (the decision or refusal, its outcome and answer), `response.rs` (an
//! allowed request's response read through its listing filter).

mod cached;
mod checks;
mod deciding;
mod drive;
mod dry_run;
mod finish;
mod gates;
mod gather;
mod limiter;
mod limits;
mod outcome;
mod record;
pub mod records;
mod reports;
mod response;
mod start;

use std::rc::Rc;

use mcp_access_bundle::mcp_methods::Revision;

use crate::answer::LocalResponse;
use crate::authz_cache;
use crate::callout::{CalloutRequest, DispatchError};
use crate::listing::reuse::ListingStore;
use crate::listing::ListingFilter;
use crate::mcp::CompletionRef;
use crate::policy::{AuthzCall, Evaluation, HeaderEdit};
use crate::request::{Headers, Request};

use checks::McpHeaders;
pub use drive::{drive, drive_with_limiter, Reply};
pub use gather::HeadersInput;
pub use limits::{selected as selected_limits, RATE_LIMITED_CODE};
pub use outcome::{Outcome, TRACE_TAG_KEYS};
pub use reports::Reports;
pub use response::{BodyProgress, ResponseHeaders};

/// What the host must do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Let the request go on after applying `add_headers`, then `identity_headers`, in order.
    /// An identity header edit that does not take effect must stop the request
    /// ([`RequestFlow::edit_failed`]): the upstream would read the client's copy
    /// (docs/semantics.md §5.7). The response is then handed to the flow
    /// ([`RequestFlow::on_response_headers`]), which filters listings (§5.4).
    Allow {
        add_headers: Vec<HeaderEdit>,
        identity_headers: Vec<HeaderEdit>,
    },
    /// Keep holding the request (headers held, body buffered, or callouts in flight).
    Hold,
    /// Make these callouts, then report them all with [`RequestFlow::dispatched`].
    Dispatch(Vec<Callout>),
    /// Answer the client with this; the request never goes upstream.
    Respond(LocalResponse),
    /// Make this RateLimitService call (`Global` limits, docs/semantics.md §8.6), report it
    /// with [`RequestFlow::limiter_dispatched`]; its answer comes to
    /// [`RequestFlow::on_callout_response`] as an authorizer's does.
    CallLimiter(CalloutRequest),
}

impl Next {
    /// Whether this is [`Next::Hold`].
    pub fn is_hold(&self) -> bool {
        matches!(self, Next::Hold)
    }
}

/// A callout to make: which authorizer the evaluation calls, for which policy and level
/// ([`AuthzCall`]), and the request that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callout {
    pub call: AuthzCall,
    pub request: CalloutRequest,
}

/// An answer to a callout as the host received it: the HTTP status (None: none came: timeout,
/// reset), the response headers, and readers of its trailers and its body (up to a count).
pub struct CalloutAnswer<'h, T, R> {
    pub status: Option<u16>,
    pub headers: &'h Headers,
    pub trailers: T,
    pub read: R,
}

/// How the host dispatched one [`Callout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// [`AuthzCall::slot`] of the callout.
    pub slot: usize,
    /// The host's token for its answer, or why it could not be dispatched.
    pub token: Result<u32, DispatchError>,
    /// When it was dispatched (ns).
    pub at_ns: u64,
}

/// What a request event did: what the host does next, and the callouts that ended with it
/// (for the host's stats and logs), answered by an authorizer or by the cache.
#[derive(Debug, PartialEq, Eq)]
pub struct Progress {
    pub next: Next,
    pub reports: Reports,
}

/// Where the host is when it carries out an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// In the request-headers callback; `body_follows` when the stream did not end there.
    Headers { body_follows: bool },
    /// In a request body or trailers callback.
    Body,
    /// In a callout response: the request is paused and must be resumed explicitly.
    Async,
}

/// What the host returns to Envoy from the callback it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    Pause,
}

impl Phase {
    /// What Envoy is told while the flow holds the request. With a body to come, headers are
    /// only held when `hold_headers` says Envoy allows it (`allow_on_headers_stop_iteration`);
    /// otherwise they go on and the body is held.
    pub fn hold(self, hold_headers: bool) -> Verdict {
        match self {
            Phase::Headers { body_follows: true } if !hold_headers => Verdict::Continue,
            _ => Verdict::Pause,
        }
    }

    /// Whether allowing the request must resume it: it was paused by an earlier callback.
    pub fn resumes_on_allow(self) -> bool {
        self == Phase::Async
    }
}

/// Where a request is, holding only what it has there.
#[derive(Debug, Default)]
enum Stage {
    /// No headers yet.
    #[default]
    Start,
    /// The headers passed their checks; the body is being buffered.
    Body(Box<Started>),
    /// The policies are being evaluated; callouts may be in flight.
    Deciding(Box<Deciding>),
    /// Allowed, waiting for the RateLimitService (`limiter.rs`).
    Limiting(Box<limiter::Limiting>),
    /// Decided, or refused before a decision.
    Done(Box<Done>),
}

/// A request whose headers arrived.
#[derive(Debug)]
struct Started {
    req: Request,
    /// Where its MCP headers are (scanned when the headers arrive).
    mcp_headers: McpHeaders,
}

/// What the request's message adds to the request.
#[derive(Debug)]
struct Message {
    /// The JSON-RPC id (raw JSON): the id of every answer the filter gives.
    id: Option<String>,
    /// The MCP revision the request is judged under (docs/semantics.md §4.4).
    revision: Revision,
    /// The items it names besides its own (docs/semantics.md §4).
    named: NamedItems,
}

impl Default for Message {
    fn default() -> Self {
        Message {
            id: None,
            revision: Revision::UNNAMED,
            named: NamedItems::default(),
        }
    }
}

/// The items a request names besides its own, each judged as a call of it alone.
#[derive(Debug, Default)]
struct NamedItems {
    /// `subscriptions/listen`'s resource URIs, each judged as `resources/subscribe`.
    subscriptions: Vec<String>,
    /// `completion/complete`'s prompt or resource, judged as a call of it.
    completion_ref: Option<CompletionRef>,
}

/// A request being decided.
#[derive(Debug)]
struct Deciding {
    req: Request,
    msg: Message,
    /// The body, for the authorizers that are sent it.
    body: Vec<u8>,
    eval: Evaluation,
    inflight: Inflight,
}

/// The authorizer calls of a request being decided.
#[derive(Debug, Default)]
struct Inflight {
    /// (callout token, evaluation slot, dispatch time in ns)
    tokens: Vec<(u32, usize, u64)>,
    /// The cache keys of calls in flight, by evaluation slot.
    cache_keys: Vec<(usize, authz_cache::CacheKey)>,
    /// The authorizers whose answers came from the cache.
    cached: Vec<String>,
}

/// A request that ended: how, and the filter of its response.
#[derive(Debug)]
struct Done {
    req: Request,
    msg: Message,
    /// None: a check answered before the policies were evaluated.
    eval: Option<Evaluation>,
    outcome: Outcome,
    /// The filter of an allowed request's response (docs/semantics.md §5.4); dropped when the
    /// response headers show it carries no listing.
    response: Option<ListingFilter>,
}

/// What the host provides every flow (ports.rs).
#[derive(Debug, Default)]
struct Stores {
    /// Where drift from pinned tools is recorded (the host's, shared by its workers).
    drift: Option<crate::pins::DriftPort>,
    /// Where authorizer answers are kept (the host's, shared by its workers).
    answers: Option<crate::authz_cache::AnswerPort>,
    /// Where filtered listings are kept for reuse (the host's, one per engine).
    listings: Option<Rc<ListingStore>>,
    /// Where Local rate limits count (the host's, shared by its workers).
    counters: Option<limits::CounterPort>,
}

/// Per-request state.
#[derive(Debug, Default)]
pub struct RequestFlow {
    stage: Stage,
    stores: Stores,
    /// Whether the evaluation keeps a trace (`explain`).
    trace: bool,
    /// Callouts that ended during the current event.
    reports: Reports,
}

impl RequestFlow {
    #[inline]
    pub fn new() -> Self {
        RequestFlow::default()
    }

    /// This flow records and reads drift from pinned tools in `store` (without one, drift a
    /// listing shows is left out of it but not remembered).
    pub fn with_drift_store(mut self, store: Rc<dyn crate::pins::DriftStore>) -> Self {
        self.stores.drift = Some(crate::pins::DriftPort(store));
        self
    }

    /// This flow reuses filtered listings kept in `store` and keeps its own there (without
    /// one, every listing is filtered afresh).
    pub fn with_listing_store(mut self, store: Rc<ListingStore>) -> Self {
        self.stores.listings = Some(store);
        self
    }

    /// A flow whose evaluation keeps a trace ([`RequestFlow::trace`]), for `explain`.
    pub fn traced() -> Self {
        RequestFlow {
            trace: true,
            ..Self::new()
        }
    }

    /// The policies' evaluation, once it began.
    fn eval(&self) -> Option<&Evaluation> {
        match &self.stage {
            Stage::Deciding(d) => Some(&d.eval),
            Stage::Limiting(l) => Some(&l.allowed().eval),
            Stage::Done(d) => d.eval.as_ref(),
            Stage::Start | Stage::Body(_) => None,
        }
    }

    /// The evaluation's trace: empty unless [`RequestFlow::traced`] and policies were evaluated.
    pub fn trace(&self) -> &[crate::policy::TraceEntry] {
        self.eval().map_or(&[], |ev| ev.trace())
    }

    /// The CEL conditions evaluated, with results and what they read (traced flows only).
    pub fn cel_records(&self) -> &[crate::policy::CelRecord] {
        self.eval().map_or(&[], |ev| ev.cel_records())
    }

    /// Whether policies were evaluated (false: a transport check answered first).
    pub fn evaluated(&self) -> bool {
        self.eval().is_some()
    }

    /// The request as the flow sees it, once its headers arrived (and after the decision:
    /// a listing filter judges items as calls made by it).
    pub fn request(&self) -> Option<&Request> {
        match &self.stage {
            Stage::Start => None,
            Stage::Body(s) => Some(&s.req),
            Stage::Deciding(d) => Some(&d.req),
            Stage::Limiting(l) => Some(&l.allowed().req),
            Stage::Done(d) => Some(&d.req),
        }
    }

    /// How the request ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.stage {
            Stage::Done(d) => Some(&d.outcome),
            _ => None,
        }
    }

    /// Whether a decision has been reached.
    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done(_))
    }

    fn progress(&mut self, next: Next) -> Progress {
        Progress {
            next,
            reports: std::mem::take(&mut self.reports),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Engine;

    #[test]
    fn only_a_traced_flow_keeps_a_trace() {
        let engine = Engine::from_json(
            br#"{"apiVersion": "mcp-access.io/v1",
                 "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 80}]}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let input = || HeadersInput {
            headers: Headers::from(vec![(":method", "GET"), (":path", "/mcp")]),
            end_of_stream: true,
            time: None,
            port: 80,
            ..HeadersInput::default()
        };
        let mut plain = RequestFlow::new();
        let mut traced = RequestFlow::traced();
        assert_eq!(
            plain.on_headers(&engine, input()),
            traced.on_headers(&engine, input())
        );
        assert!(plain.trace().is_empty() && plain.evaluated());
        assert!(!traced.trace().is_empty() && traced.evaluated());
        assert_eq!(traced.request().map(|r| r.method.as_str()), Some("GET"));
        // A transport check answers before any evaluation.
        let mut rejected = RequestFlow::traced();
        let mut gzip = input();
        gzip.headers.push("content-encoding", "gzip");
        assert!(
            matches!(rejected.on_headers(&engine, gzip).next, Next::Respond(r) if r.status == 415)
        );
        assert!(!rejected.evaluated() && rejected.trace().is_empty());
    }

    #[test]
    fn pseudo_headers_become_request_fields() {
        let engine = Engine::from_json(
            br#"{"apiVersion": "mcp-access.io/v1",
                 "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 80}]}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let seen = |headers: &[(&str, &str)]| {
            let mut flow = RequestFlow::new();
            let input = HeadersInput {
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                end_of_stream: false,
                port: 80,
                ..HeadersInput::default()
            };
            flow.on_headers(&engine, input);
            let r = flow
                .request()
                .cloned()
                .unwrap_or_else(|| panic!("no request"));
            (r.method, r.path, r.authority, r.headers)
        };
        let (method, path, authority, headers) = seen(&[
            (":method", "POST"),
            (":path", "/mcp?x=1"),
            (":authority", "gw.example:80"),
            (":scheme", "http"),
            ("host", "other"),
            ("content-type", "application/json"),
            (":path", "/second"),
        ]);
        assert_eq!((method.as_str(), path.as_str()), ("POST", "/mcp?x=1"));
        assert_eq!(authority, "gw.example:80");
        let names: Vec<&str> = headers.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["host", "content-type"]);
        // Without :authority, the Host header names the authority (and stays a header).
        let (_, _, authority, headers) = seen(&[(":method", "POST"), ("host", "h.example")]);
        assert_eq!(authority, "h.example");
        assert_eq!(
            headers,
            Headers::from([("host".to_string(), "h.example".to_string())])
        );
    }
}
