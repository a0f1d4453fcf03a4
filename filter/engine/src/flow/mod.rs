//! One request, start to end, as a pure state machine the host adapter drives:
//! headers -> (body) -> parse -> evaluate -> (callouts) -> answer.

mod cached;
mod checks;
mod drive;
mod dry_run;
mod gather;
mod limits;
mod outcome;
mod pinned;
mod record;
pub mod records;
mod response;

use std::rc::Rc;

use mcp_access_bundle::gateway_api::canonical_host;
use mcp_access_bundle::mcp_methods::{self, Revision};

use crate::answer::{self, HeaderProblem, LocalResponse, Rejection, Why};
use crate::authz_cache;
use crate::callout::{self, CalloutReport, CalloutRequest, DispatchError};
use crate::canon::canonical_path;
use crate::listing::reuse::ListingStore;
use crate::listing::ListingFilter;
use crate::mcp::{self, ParseError, ParseLimits};
use crate::policy::{
    AuthzCall, AuthzOutcome, Decision, Engine, Evaluation, HeaderEdit, Step, View,
};
use crate::request::{Headers, JwtPrincipal, McpOp, Request, Target};

use checks::{body_limit, header_rejection, McpHeaders};
pub use drive::{drive, Reply};
pub use gather::HeadersInput;
pub use limits::RATE_LIMITED_CODE;
pub use outcome::{Outcome, TRACE_TAG_KEYS};
use pinned::PinGate;
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

/// The callouts that ended with one event: usually none or one, held without allocating.
/// Reads as a slice; iterates by value.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Reports {
    #[default]
    None,
    One(CalloutReport),
    Many(Vec<CalloutReport>),
}

impl Reports {
    fn push(&mut self, report: CalloutReport) {
        *self = match std::mem::take(self) {
            Reports::None => Reports::One(report),
            Reports::One(first) => Reports::Many(vec![first, report]),
            Reports::Many(mut all) => {
                all.push(report);
                Reports::Many(all)
            }
        };
    }
}

impl std::ops::Deref for Reports {
    type Target = [CalloutReport];

    fn deref(&self) -> &[CalloutReport] {
        match self {
            Reports::None => &[],
            Reports::One(r) => std::slice::from_ref(r),
            Reports::Many(all) => all,
        }
    }
}

impl IntoIterator for Reports {
    type Item = CalloutReport;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<CalloutReport>, std::vec::IntoIter<CalloutReport>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Reports::None => (None, Vec::new()),
            Reports::One(r) => (Some(r), Vec::new()),
            Reports::Many(all) => (None, all),
        };
        one.into_iter().chain(many)
    }
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

#[derive(Debug, PartialEq, Eq)]
enum Stage {
    Start,
    Body,
    Deciding,
    Done,
}

/// Per-request state.
#[derive(Debug)]
pub struct RequestFlow {
    stage: Stage,
    req: Option<Request>,
    /// Where its MCP headers are (scanned when the headers arrive).
    mcp_headers: McpHeaders,
    body: Vec<u8>,
    id: Option<String>,
    eval: Option<Evaluation>,
    /// (callout token, evaluation slot, dispatch time in ns)
    tokens: Vec<(u32, usize, u64)>,
    /// Callouts that ended during the current event.
    reports: Reports,
    outcome: Option<Outcome>,
    /// Whether the evaluation keeps a trace (`explain`).
    trace: bool,
    /// The MCP revision the request is judged under (docs/semantics.md §4.4).
    revision: Revision,
    /// `subscriptions/listen`'s resource URIs, each judged as `resources/subscribe`.
    subscriptions: Vec<String>,
    /// `completion/complete`'s prompt or resource, judged as a call of it.
    completion_ref: Option<crate::mcp::CompletionRef>,
    /// Where drift from pinned tools is recorded (the host's, shared by its workers).
    drift: Option<crate::pins::DriftPort>,
    /// Where authorizer answers are kept (the host's, shared by its workers).
    answers: Option<crate::authz_cache::AnswerPort>,
    /// The cache keys of calls in flight, by evaluation slot.
    cache_keys: Vec<(usize, crate::authz_cache::CacheKey)>,
    /// The authorizers whose answers came from the cache.
    cached: Vec<String>,
    /// Where filtered listings are kept for reuse (the host's, one per engine).
    listings: Option<Rc<ListingStore>>,
    /// The filter of an allowed request's response (docs/semantics.md §5.4); dropped when the
    /// response headers show it carries no listing.
    response: Option<ListingFilter>,
    /// Where Local rate limits count (the host's, shared by its workers).
    counters: Option<limits::CounterPort>,
}

impl Default for RequestFlow {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestFlow {
    #[inline]
    pub fn new() -> Self {
        RequestFlow {
            stage: Stage::Start,
            req: None,
            mcp_headers: McpHeaders::default(),
            body: Vec::new(),
            id: None,
            eval: None,
            tokens: Vec::new(),
            reports: Reports::None,
            outcome: None,
            trace: false,
            revision: Revision::UNNAMED,
            subscriptions: Vec::new(),
            completion_ref: None,
            drift: None,
            answers: None,
            cache_keys: Vec::new(),
            cached: Vec::new(),
            listings: None,
            response: None,
            counters: None,
        }
    }

    /// This flow records and reads drift from pinned tools in `store` (without one, drift a
    /// listing shows is left out of it but not remembered).
    pub fn with_drift_store(mut self, store: Rc<dyn crate::pins::DriftStore>) -> Self {
        self.drift = Some(crate::pins::DriftPort(store));
        self
    }

    /// This flow reuses filtered listings kept in `store` and keeps its own there (without
    /// one, every listing is filtered afresh).
    pub fn with_listing_store(mut self, store: Rc<ListingStore>) -> Self {
        self.listings = Some(store);
        self
    }

    /// A flow whose evaluation keeps a trace ([`RequestFlow::trace`]), for `explain`.
    pub fn traced() -> Self {
        RequestFlow {
            trace: true,
            ..Self::new()
        }
    }

    /// The evaluation's trace: empty unless [`RequestFlow::traced`] and policies were evaluated.
    pub fn trace(&self) -> &[crate::policy::TraceEntry] {
        self.eval.as_ref().map_or(&[], |ev| ev.trace())
    }

    /// The CEL conditions evaluated, with results and what they read (traced flows only).
    pub fn cel_records(&self) -> &[crate::policy::CelRecord] {
        self.eval.as_ref().map_or(&[], |ev| ev.cel_records())
    }

    /// Whether policies were evaluated (false: a transport check answered first).
    pub fn evaluated(&self) -> bool {
        self.eval.is_some()
    }

    /// The request as the flow sees it, once its headers arrived (and after the decision:
    /// a listing filter judges items as calls made by it).
    pub fn request(&self) -> Option<&Request> {
        self.req.as_ref()
    }

    /// How the request ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Whether a decision has been reached.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The request headers arrived.
    pub fn on_headers(&mut self, engine: &Engine, input: HeadersInput) -> Progress {
        let next = self.headers(engine, input);
        self.progress(next)
    }

    fn headers(&mut self, engine: &Engine, input: HeadersInput) -> Next {
        if self.stage != Stage::Start {
            return Next::Hold;
        }
        // Pseudo-headers become the request's fields; they are not kept among its headers.
        let mut headers = input.headers;
        let take = |name: &str| headers.get(name).map(str::to_owned);
        let method = take(":method").unwrap_or_default();
        let path = take(":path").unwrap_or_default();
        let authority = take(":authority").or_else(|| take("host"));
        headers.retain(|n, _| !n.starts_with(':'));
        let authority = authority.unwrap_or_default();
        let (canonical, bad_path) = match canonical_path(&path, engine.settings.escaped_slashes) {
            Ok(p) => (p, None),
            Err(e) => (String::new(), Some(e)),
        };
        let req = self.req.insert(Request {
            canonical_path: canonical,
            path,
            host: canonical_host(&authority),
            authority,
            port: input.port,
            mcp: McpOp::NotMcp,
            route_name: input.route_name,
            cluster_name: input.cluster_name,
            caller: input.caller,
            headers,
            method,
            time: input.time,
            params: None,
            target: Target::default(),
            peers: input.peers.unwrap_or_default(),
        });
        req.target = engine.target_of(req);
        self.mcp_headers = McpHeaders::scan(req);
        if let Some(e) = bad_path {
            return self.reject(Rejection::InvalidPath(e.to_string()));
        }
        if input.end_of_stream && engine.metadata_fetch(req) {
            return self.metadata_fetch(engine);
        }
        if let Some(r) = header_rejection(req, input.end_of_stream, body_limit(engine)) {
            return self.reject(r);
        }
        if input.end_of_stream {
            let op = McpOp::without_body(
                &req.method,
                req.header(mcp_methods::headers::SESSION_ID).is_some(),
            );
            if let Err(r) = self.judge_versions(None, None) {
                return self.reject(r);
            }
            if op == McpOp::Transport && self.revision.is_stateless() {
                let method = self
                    .req
                    .as_ref()
                    .map(|r| r.method.clone())
                    .unwrap_or_default();
                let revision = self.revision.as_str();
                return self.reject(Rejection::HttpMethodNotInRevision(method, revision));
            }
            return self.decide(engine, op);
        }
        self.stage = Stage::Body;
        Next::Hold
    }

    /// A body chunk arrived; `size` is the total buffered so far. `read` fetches the whole
    /// buffered body and is only called at the end of the stream.
    pub fn on_body(
        &mut self,
        engine: &Engine,
        size: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Progress {
        let next = match () {
            _ if self.stage != Stage::Body => Next::Hold,
            _ if size > body_limit(engine) => self.reject(Rejection::BodyTooLarge),
            _ if !end_of_stream => Next::Hold,
            _ if size == 0 => self.body_complete(engine, Vec::new()),
            _ => {
                let body = read(size).unwrap_or_default();
                self.body_complete(engine, body)
            }
        };
        self.progress(next)
    }

    /// Request trailers arrived (names lowercase): the body is complete (`read` gets up to
    /// the given byte count). An MCP header sent as a trailer is refused: it was not compared
    /// with the body, and a server may read trailers as headers.
    pub fn on_trailers(
        &mut self,
        engine: &Engine,
        trailers: &Headers,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Progress {
        let next = self.trailers(engine, trailers, read);
        self.progress(next)
    }

    fn trailers(
        &mut self,
        engine: &Engine,
        trailers: &Headers,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Next {
        if self.stage != Stage::Body {
            return Next::Hold;
        }
        let mcp_trailer = trailers.iter().any(|(n, _)| {
            n.get(..4)
                .is_some_and(|p| p.eq_ignore_ascii_case("mcp-") || p.eq_ignore_ascii_case("mcp_"))
        });
        if mcp_trailer {
            return self.reject(Rejection::HeaderMismatch(HeaderProblem::Trailer));
        }
        let limit = body_limit(engine);
        let body = read(limit.saturating_add(1)).unwrap_or_default();
        self.body_complete(engine, body)
    }

    fn body_complete(&mut self, engine: &Engine, body: Vec<u8>) -> Next {
        let limit = body_limit(engine);
        if body.len() > limit {
            return self.reject(Rejection::BodyTooLarge);
        }
        let is_post = self.req.as_ref().is_some_and(|r| r.method == "POST");
        if !is_post {
            self.body = body;
            if let Err(r) = self.judge_versions(None, None) {
                return self.reject(r);
            }
            return self.decide(engine, McpOp::NotMcp);
        }
        let limits = ParseLimits {
            max_depth: usize::try_from(engine.settings.limits.max_json_depth).unwrap_or(64),
        };
        match mcp::parse_message(&body, &limits) {
            Err((err, id)) => {
                // JSON-RPC: a parse error is answered with a null id.
                if !matches!(err, ParseError::Parse(_)) {
                    self.id = id;
                }
                self.reject(Rejection::Message(err))
            }
            Ok(msg) => {
                let mcp::McpMessage {
                    kind,
                    method,
                    id,
                    name,
                    uri,
                    protocol_version: body_version,
                    init_version,
                    subscriptions,
                    completion_ref,
                    params,
                    arguments,
                } = msg;
                self.id = id;
                self.body = body;
                let op = mcp::op_of(kind, method, name.or(uri));
                if let Err(r) =
                    self.judge_versions(body_version.as_deref(), init_version.as_deref())
                {
                    return self.reject(r);
                }
                let (cel, records) = (
                    engine.cel_needs().params,
                    engine.settings.decision_records.arguments,
                );
                match mcp::params_value(&self.body, (params, arguments), cel, records) {
                    Ok(params) => {
                        if let Some(req) = self.req.as_mut() {
                            req.params = params;
                        }
                    }
                    Err(e) => return self.reject(Rejection::Message(e)),
                }
                if let Some(problem) = self.header_mismatch(&op, body_version.as_deref()) {
                    return self.reject(Rejection::HeaderMismatch(problem));
                }
                if let Err(r) = self.judge_method(&op) {
                    return self.reject(r);
                }
                self.subscriptions = subscriptions;
                self.completion_ref = completion_ref;
                self.decide(engine, op)
            }
        }
    }

    /// The callouts of a [`Next::Dispatch`] were dispatched (or could not be): the host
    /// reports them all at once.
    pub fn dispatched(
        &mut self,
        engine: &Engine,
        results: impl IntoIterator<Item = Dispatched>,
    ) -> Progress {
        let results = results.into_iter();
        self.tokens.reserve(results.size_hint().0);
        for d in results {
            match d.token {
                Ok(token) => self.tokens.push((token, d.slot, d.at_ns)),
                Err(error) => {
                    let detail = match self.authorizer_of(engine, d.slot) {
                        Some(a) => callout::dispatch_failure(a, &error),
                        None => format!("dispatch failed: {error}"),
                    };
                    let outcome = AuthzOutcome::Error { detail };
                    let name = self.authorizer_name(engine, d.slot);
                    self.reports
                        .push(CalloutReport::of(name, None, &outcome, None));
                    if let Some(ev) = &mut self.eval {
                        ev.complete(d.slot, outcome);
                    }
                }
            }
        }
        let next = self.step(engine);
        self.progress(next)
    }

    fn progress(&mut self, next: Next) -> Progress {
        Progress {
            next,
            reports: std::mem::take(&mut self.reports),
        }
    }

    /// The authorizer of the callout for `slot`.
    fn authorizer_of<'e>(
        &self,
        engine: &'e Engine,
        slot: usize,
    ) -> Option<&'e mcp_access_bundle::Authorizer> {
        self.eval
            .as_ref()
            .and_then(|ev| ev.call_authorizer(slot))
            .and_then(|i| engine.authorizers.get(i))
    }

    fn authorizer_name<'e>(&self, engine: &'e Engine, slot: usize) -> &'e str {
        self.authorizer_of(engine, slot)
            .map_or("?", |a| a.name.as_str())
    }

    /// A callout answered at `now_ns` (`status` None: no response: timeout, reset), with its
    /// response `headers` and `trailers` (read only for a gRPC authorizer). `read` fetches up to the given number of body bytes;
    /// it is only called for a body the flow reads (an HTTP authorizer's denial, at most its
    /// cap plus one byte; a gRPC authorizer's answer, [`crate::ext_authz::body_read_limit`]).
    pub fn on_callout_response(
        &mut self,
        engine: &Engine,
        token: u32,
        answer: CalloutAnswer<'_, impl FnOnce() -> Headers, impl FnOnce(usize) -> Option<Vec<u8>>>,
        now_ns: u64,
    ) -> Progress {
        let CalloutAnswer {
            status,
            headers,
            trailers,
            read,
        } = answer;
        self.callout_ended(engine, token, now_ns, |a| {
            let grpc = a.protocol == mcp_access_bundle::AuthorizerProtocol::Grpc;
            let limit = match (grpc, status) {
                (true, Some(_)) => crate::ext_authz::body_read_limit(a),
                (true, None) => 0,
                (false, _) => callout::body_read_limit(a, status),
            };
            let body = if limit > 0 {
                read(limit).unwrap_or_default()
            } else {
                Vec::new()
            };
            if grpc {
                crate::ext_authz::interpret_http(a, status, headers, &trailers(), &body)
            } else {
                let (outcome, note) = callout::interpret(a, status, headers, body);
                (outcome, note, None)
            }
        })
    }

    fn callout_ended(
        &mut self,
        engine: &Engine,
        token: u32,
        now_ns: u64,
        interpret: impl FnOnce(
            &mcp_access_bundle::Authorizer,
        ) -> (AuthzOutcome, Option<String>, Option<String>),
    ) -> Progress {
        let Some(pos) = self.tokens.iter().position(|(t, _, _)| *t == token) else {
            return self.progress(Next::Hold);
        };
        let (_, slot, at) = self.tokens.swap_remove(pos);
        let latency_ms = now_ns.saturating_sub(at) / 1_000_000;
        let (outcome, note, mut metadata) = match self.authorizer_of(engine, slot) {
            Some(a) => {
                let (mut outcome, note, metadata) = interpret(a);
                crate::callout::timed_out(a, latency_ms, &mut outcome);
                crate::callout::refuse_route_matched(
                    &mut outcome,
                    &engine.settings.route_match_headers,
                );
                (outcome, note, metadata)
            }
            None => {
                let detail = "unknown authorizer".to_string();
                (AuthzOutcome::Error { detail }, None, None)
            }
        };
        let miss = self.keep_answer(engine, slot, &outcome, metadata.as_ref());
        let name = self.authorizer_name(engine, slot);
        let mut report = CalloutReport::of(name, Some(latency_ms), &outcome, note);
        report.cache = miss.then_some(callout::CacheUse::Miss);
        // A dry-run authorizer's answer is recorded, never applied.
        let dry_run_only = self.eval.as_ref().is_some_and(|ev| ev.dry_run_only(slot));
        report.metadata = metadata.take().filter(|_| !dry_run_only);
        self.reports.push(report);
        if let Some(ev) = &mut self.eval {
            ev.complete(slot, outcome);
        }
        let next = self.step(engine);
        self.progress(next)
    }

    fn decide(&mut self, engine: &Engine, op: McpOp) -> Next {
        let Some(req) = self.req.as_mut() else {
            return Next::Hold;
        };
        req.mcp = op;
        self.eval = Some(engine.begin(req, self.trace));
        self.stage = Stage::Deciding;
        self.step(engine)
    }

    fn step(&mut self, engine: &Engine) -> Next {
        loop {
            let (Some(ev), Some(req)) = (self.eval.as_mut(), self.req.as_ref()) else {
                return Next::Hold;
            };
            let calls = match ev.advance(engine, req) {
                Step::Waiting => return Next::Hold,
                Step::Done(decision) => return self.finish(engine, decision),
                Step::Call(calls) => calls,
            };
            let callouts = self.callouts(engine, calls);
            // Calls the cache answers complete at once; then the evaluation goes on.
            let (callouts, answered) = self.answer_from_cache(engine, callouts);
            if callouts.is_empty() && answered {
                continue;
            }
            // Even when empty: the host dispatches nothing and reports that, which decides.
            return Next::Dispatch(callouts);
        }
    }

    /// The callouts of `calls`, each with its cache key when its authorizer's answers are
    /// cached: the key is read off the very request built ([`authz_cache::key_of`]).
    fn callouts(
        &mut self,
        engine: &Engine,
        calls: Vec<AuthzCall>,
    ) -> Vec<(Callout, Option<authz_cache::CacheKey>)> {
        let (Some(ev), Some(req)) = (self.eval.as_mut(), self.req.as_ref()) else {
            return Vec::new();
        };
        let caches = self.answers.is_some();
        let key = |c: &AuthzCall, sent: authz_cache::Sent<'_>| {
            caches
                .then(|| authz_cache::key_of(engine, c, sent, &req.caller))
                .flatten()
        };
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            let (Some(a), Some(p)) = (
                engine.authorizers.get(c.authorizer),
                engine.policies.get(c.policy),
            ) else {
                // Not reachable from a compiled bundle; if it were, the call failed.
                ev.complete(
                    c.slot,
                    AuthzOutcome::Error {
                        detail: "no such authorizer or policy".into(),
                    },
                );
                continue;
            };
            let outgoing = crate::outgoing::Outgoing::build(
                a,
                req,
                &self.body,
                self.id.as_deref(),
                c.level,
                &p.id,
            );
            let cache_key = key(&c, outgoing.sent());
            let request = outgoing.into_request(a);
            out.push((Callout { call: c, request }, cache_key));
        }
        out
    }

    fn finish(&mut self, engine: &Engine, decision: Decision) -> Next {
        self.stage = Stage::Done;
        let (listener, backend) = match (&self.eval, &self.req) {
            (Some(ev), Some(_)) => (
                ev.listener_name(engine),
                ev.backend_name(engine).map(str::to_string),
            ),
            _ => (None, None),
        };
        let mut outcome = self.base_outcome();
        outcome.listener = listener;
        outcome.backend = backend;
        outcome.cel_errors = self.eval.as_ref().map_or((0, 0), |ev| ev.cel_errors());
        outcome.authorizer_failed = self.eval.as_ref().is_some_and(|e| e.authorizer_failed());
        outcome.authz_cached = std::mem::take(&mut self.cached);
        let pins = PinGate::default();
        let decision = match decision {
            Decision::Allow { .. } => self
                .gates(engine, View::Enforced, &pins)
                .unwrap_or(decision),
            deny => deny,
        };
        outcome.dry_run = self.dry_run(engine, &decision, &pins);
        outcome.request = self.recorded(engine);
        match decision {
            Decision::Allow {
                mut add_headers,
                by,
            } => {
                if let Some(refusal) = self.charge_limits(engine, &mut outcome) {
                    self.outcome = Some(outcome);
                    return Next::Respond(refusal);
                }
                outcome.allowed = true;
                outcome.by = by;
                let identity = self.req.as_ref().map(|r| engine.identity_edits(r));
                let identity = identity.unwrap_or_default();
                outcome.identity_omitted = identity.omitted;
                self.outcome = Some(outcome);
                // The response's filter judges items as calls made by the request.
                self.response = match &self.req {
                    Some(r) if engine.settings.listings.filter => {
                        let (drift, store) = (self.drift.clone(), self.listings.clone());
                        let id = self.id.clone();
                        ListingFilter::for_allowed(engine, r, id, self.revision, drift, store)
                    }
                    _ => None,
                };
                let req = self.req.as_ref();
                if let (Some(f), Some(r)) = (&self.response, req) {
                    if f.wants_identity(engine, r) {
                        // An answer read to be filtered: ask the server not to compress it.
                        add_headers.push(HeaderEdit::set("accept-encoding", "identity"));
                    }
                }
                Next::Allow {
                    add_headers,
                    identity_headers: identity.edits,
                }
            }
            Decision::Deny(d) => {
                let challenge = self.req.as_ref().and_then(|r| engine.challenge(r, &d));
                let id = self.id.as_deref();
                let by = d.by.map(|r| (engine.policy_id(r), engine.rule_name(r)));
                let by = by.unwrap_or_default();
                let response = answer::denial(
                    &engine.settings.deny_response,
                    &d,
                    by,
                    id,
                    challenge.as_ref(),
                );
                outcome.level = d.level;
                outcome.reason = Why::Denied(d.reason);
                outcome.by = d.by;
                outcome.status = Some(response.status);
                self.outcome = Some(outcome);
                Next::Respond(response)
            }
        }
    }

    /// A request the policies let through that names other items is denied unless each of
    /// them passes as a call of that item alone (docs/semantics.md §4): a
    /// `subscriptions/listen`'s resource URIs as `resources/subscribe`, a
    /// `completion/complete`'s prompt or resource as `prompts/get` / `resources/read`.
    fn judge_named_items(&self, engine: &Engine, view: View) -> Option<Decision> {
        let subscribes_as = self.req.as_ref()?.mcp.called()?.subscribes_as();
        let subscriptions = self
            .subscriptions
            .iter()
            .filter_map(|uri| subscribes_as.map(|m| (m, mcp_methods::Param::Uri, uri.as_str())));
        let reference = self
            .completion_ref
            .as_ref()
            .map(|r| (r.judged_as, r.key, r.value.as_str()));
        let mut items = subscriptions.chain(reference).peekable();
        items.peek()?;
        let mut probe = self.req.clone()?;
        for (judged_as, key, value) in items {
            // Judged as a call of that item alone: never with the request's own params.
            probe.as_item_call(judged_as, Some(key), Some(value), engine.cel_needs().params);
            if let Some(d) = engine.item_denial_in(view, &probe) {
                return Some(Decision::Deny(d));
            }
        }
        None
    }

    fn base_outcome(&self) -> Outcome {
        let req = self.req.as_ref();
        let jwt = req
            .and_then(|r| r.caller.jwts.first())
            .map(JwtPrincipal::label);
        Outcome {
            allowed: false,
            level: None,
            reason: Why::Allowed,
            by: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: req.and_then(|r| r.mcp.method().map(str::to_string)),
            mcp_param: req.and_then(|r| r.mcp.param().map(str::to_string)),
            caller: req.and_then(|r| r.caller.label()),
            jwt,
            cel_errors: (0, 0),
            dry_run: None,
            authorizer_failed: false,
            request: None,
            authz_cached: Vec::new(),
            identity_omitted: Vec::new(),
            limits: Default::default(),
        }
    }

    /// A fetch of the listener's OAuth metadata that Envoy answers itself (docs/semantics.md
    /// §5.6): it goes on without policy, and with no identity headers (it reaches no upstream).
    fn metadata_fetch(&mut self, engine: &Engine) -> Next {
        self.stage = Stage::Done;
        let mut outcome = self.base_outcome();
        outcome.allowed = true;
        outcome.listener = self.req.as_ref().and_then(|r| {
            let l = engine.listeners.get(r.target.listener?)?;
            Some(l.id.clone())
        });
        self.outcome = Some(outcome);
        Next::Allow {
            add_headers: Vec::new(),
            identity_headers: Vec::new(),
        }
    }

    fn reject(&mut self, r: Rejection) -> Next {
        self.stage = Stage::Done;
        let response = answer::rejection(&r, self.id.as_deref());
        let mut outcome = self.base_outcome();
        outcome.reason = Why::Rejected(r.reason());
        outcome.status = Some(response.status);
        self.outcome = Some(outcome);
        Next::Respond(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
