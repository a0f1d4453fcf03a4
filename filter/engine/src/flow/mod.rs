//! One request, start to end, as a pure state machine the host adapter drives:
//! headers -> (body) -> parse -> evaluate -> (callouts) -> answer.

mod drive;
mod dry_run;
mod gather;
mod outcome;
mod record;

use std::rc::Rc;

use mcp_access_bundle::gateway_api::canonical_host;
use mcp_access_bundle::mcp_methods::{self, Revision};

use crate::answer::{self, HeaderProblem, LocalResponse, McpHeader, Rejection, Why};
use crate::callout::{self, CalloutReport, CalloutRequest};
use crate::canon::canonical_path;
use crate::listing::ListingFilter;
use crate::mcp::{self, ParseError, ParseLimits};
use crate::policy::{
    AuthzCall, AuthzOutcome, Decision, Engine, Evaluation, HeaderEdit, Step, View,
};
use crate::request::{McpOp, Request, Target};

pub use drive::{drive, Reply};
pub use gather::HeadersInput;
pub use outcome::{Outcome, TRACE_TAG_KEYS};
pub use record::RecordedRequest;

/// What the host must do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Let the request go on (after applying `add_headers`, in order). `listing` filters the
    /// response (docs/semantics.md §5.4): set when the bundle filters listings, for the
    /// response headers to tell whether the response can carry one.
    Allow {
        add_headers: Vec<HeaderEdit>,
        listing: Option<ListingFilter>,
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

/// How the host dispatched one [`Callout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// [`AuthzCall::slot`] of the callout.
    pub slot: usize,
    /// The host's token for its answer, or why it could not be dispatched.
    pub token: Result<u32, String>,
    /// When it was dispatched (ns).
    pub at_ns: u64,
}

/// What a callout event did: what the host does next, and the callouts that ended with it
/// (for the host's stats and logs).
#[derive(Debug, PartialEq, Eq)]
pub struct Progress {
    pub next: Next,
    pub reports: Vec<CalloutReport>,
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
    /// The request once allowed, shared with the listing filter.
    shared: Option<Rc<Request>>,
    body: Vec<u8>,
    id: Option<String>,
    eval: Option<Evaluation>,
    /// (callout token, evaluation slot, dispatch time in ns)
    tokens: Vec<(u32, usize, u64)>,
    /// Callouts that ended during the current event.
    reports: Vec<CalloutReport>,
    outcome: Option<Outcome>,
    /// Whether the evaluation keeps a trace (`explain`).
    trace: bool,
    /// The MCP revision the request is judged under (docs/semantics.md §4.4).
    revision: Revision,
    /// `subscriptions/listen`'s resource URIs, each judged as `resources/subscribe`.
    subscriptions: Vec<String>,
    /// `completion/complete`'s prompt or resource, judged as a call of it.
    completion_ref: Option<crate::mcp::CompletionRef>,
}

impl Default for RequestFlow {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestFlow {
    pub fn new() -> Self {
        RequestFlow {
            stage: Stage::Start,
            req: None,
            shared: None,
            body: Vec::new(),
            id: None,
            eval: None,
            tokens: Vec::new(),
            reports: Vec::new(),
            outcome: None,
            trace: false,
            revision: Revision::UNNAMED,
            subscriptions: Vec::new(),
            completion_ref: None,
        }
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

    /// The request as the flow sees it, once its headers arrived.
    pub fn request(&self) -> Option<&Request> {
        self.req.as_ref().or(self.shared.as_deref())
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
    pub fn on_headers(&mut self, engine: &Engine, input: HeadersInput) -> Next {
        if self.stage != Stage::Start {
            return Next::Hold;
        }
        // Pseudo-headers are moved out of the list (they are not kept in it), not copied.
        let mut headers = input.headers;
        let mut take = |name: &str| {
            headers
                .iter_mut()
                .find(|(n, _)| n == name)
                .map(|(_, v)| std::mem::take(v))
        };
        let method = take(":method").unwrap_or_default();
        let path = take(":path").unwrap_or_default();
        let authority = take(":authority");
        headers.retain(|(n, _)| !n.starts_with(':'));
        let authority = authority
            .or_else(|| {
                headers
                    .iter()
                    .find(|(n, _)| n == "host")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_default();
        let (canonical, bad_path) = match canonical_path(&path, engine.escaped_slashes) {
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
        if let Some(e) = bad_path {
            return self.reject(Rejection::InvalidPath(e.to_string()));
        }
        if let Some(r) = header_rejection(req, input.end_of_stream, body_limit(engine)) {
            return self.reject(r);
        }
        if input.end_of_stream {
            let op = McpOp::without_body(&req.method, req.header("mcp-session-id").is_some());
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
    ) -> Next {
        if self.stage != Stage::Body {
            return Next::Hold;
        }
        let limit = body_limit(engine);
        if size > limit {
            return self.reject(Rejection::BodyTooLarge);
        }
        if !end_of_stream {
            return Next::Hold;
        }
        let body = if size == 0 {
            Vec::new()
        } else {
            read(size).unwrap_or_default()
        };
        self.body_complete(engine, body)
    }

    /// Request trailers arrived (names lowercase): the body is complete (`read` gets up to
    /// the given byte count). An MCP header sent as a trailer is refused: it was not compared
    /// with the body, and a server may read trailers as headers.
    pub fn on_trailers(
        &mut self,
        engine: &Engine,
        trailers: &[(String, String)],
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
            max_depth: usize::try_from(engine.limits.max_json_depth).unwrap_or(64),
        };
        match mcp::parse_message(&body, &limits) {
            Err((err, id)) => {
                // JSON-RPC: a parse error is answered with a null id.
                if !matches!(err, ParseError::Parse(_)) {
                    self.id = id;
                }
                self.reject(Rejection::Message(err))
            }
            Ok(mut msg) => {
                self.id = msg.id.clone();
                self.body = body;
                let body_version = msg.protocol_version.take();
                let init_version = msg.init_version.take();
                let subscriptions = std::mem::take(&mut msg.subscriptions);
                let completion_ref = msg.completion_ref.take();
                let op = msg.into_op();
                if let Err(r) =
                    self.judge_versions(body_version.as_deref(), init_version.as_deref())
                {
                    return self.reject(r);
                }
                if engine.cel_needs().params || engine.decision_records.arguments {
                    // The body is valid strict JSON with every number a finite double:
                    // serde_json reads it the same way. If it ever could not, CEL must not
                    // see `params` emptier than the body is: the body is refused.
                    let Ok(mut message) = serde_json::from_slice::<serde_json::Value>(&self.body)
                    else {
                        return self.reject(Rejection::Message(ParseError::Parse(
                            "params cannot be read as CEL values".to_owned(),
                        )));
                    };
                    let params = message.get_mut("params").map(serde_json::Value::take);
                    if let Some(req) = self.req.as_mut() {
                        req.params = params;
                    }
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
        for d in results {
            match d.token {
                Ok(token) => self.tokens.push((token, d.slot, d.at_ns)),
                Err(host_status) => {
                    let detail = match self.authorizer_of(engine, d.slot) {
                        Some(a) => callout::dispatch_failure(a, &host_status),
                        None => format!("dispatch failed: {host_status}"),
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

    /// An HTTP callout answered at `now_ns` (`status` None: no response: timeout, reset).
    /// `read` fetches up to the given number of body bytes; it is only called for a body the
    /// flow reads ([`callout::body_read_limit`]: a denial's, at most its cap plus one byte).
    pub fn on_callout_response(
        &mut self,
        engine: &Engine,
        token: u32,
        status: Option<u16>,
        headers: Vec<(String, String)>,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
        now_ns: u64,
    ) -> Progress {
        self.callout_ended(engine, token, now_ns, |a| {
            let limit = callout::body_read_limit(a, status);
            let body = if limit > 0 {
                read(limit).unwrap_or_default()
            } else {
                Vec::new()
            };
            let (outcome, note) = callout::interpret(a, status, headers, body);
            (outcome, note, None)
        })
    }

    /// A gRPC callout ended at `now_ns`: `grpc_status` (None: no answer: timeout, reset,
    /// unreachable) and the CheckResponse of `size` bytes. `read` fetches it; it is only
    /// called for an OK answer of at most the denial body cap plus
    /// [`crate::ext_authz::RESPONSE_SLACK`] bytes (a larger one is not read, and denies).
    pub fn on_grpc_response(
        &mut self,
        engine: &Engine,
        token: u32,
        grpc_status: Option<u32>,
        size: usize,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
        now_ns: u64,
    ) -> Progress {
        self.callout_ended(engine, token, now_ns, |a| {
            let limit = usize::try_from(a.max_response_body_bytes)
                .unwrap_or(usize::MAX)
                .saturating_add(crate::ext_authz::RESPONSE_SLACK);
            let message = match grpc_status {
                Some(0) => (size <= limit).then(|| read(size).unwrap_or_default()),
                // Not OK: the status message (Envoy's reason when it could not reach the
                // authorizer), for the log.
                Some(_) => read(crate::callout::ERROR_BODY_PEEK),
                None => None,
            };
            crate::ext_authz::interpret(a, grpc_status, message.as_deref())
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
        let (outcome, note, metadata) = match self.authorizer_of(engine, slot) {
            Some(a) => {
                let (mut outcome, note, metadata) = interpret(a);
                crate::callout::timed_out(a, latency_ms, &mut outcome);
                (outcome, note, metadata)
            }
            None => {
                let detail = "unknown authorizer".to_string();
                (AuthzOutcome::Error { detail }, None, None)
            }
        };
        let name = self.authorizer_name(engine, slot);
        let mut report = CalloutReport::of(name, Some(latency_ms), &outcome, note);
        // A dry-run authorizer's answer is recorded, never applied.
        let dry_run_only = self.eval.as_ref().is_some_and(|ev| ev.dry_run_only(slot));
        report.metadata = metadata.filter(|_| !dry_run_only);
        self.reports.push(report);
        if let Some(ev) = &mut self.eval {
            ev.complete(slot, outcome);
        }
        let next = self.step(engine);
        self.progress(next)
    }

    /// SEP-2243: `Mcp-Method`, `Mcp-Name` (Base64 sentinel decoded) and
    /// `MCP-Protocol-Version` each appear at most once and agree with the body (the last with
    /// `params._meta`'s protocol version); a request of the header revision (2026-07-28 on)
    /// must carry the headers that revision requires.
    fn header_mismatch(&self, op: &McpOp, body_version: Option<&str>) -> Option<HeaderProblem> {
        let req = self.req.as_ref()?;
        fn once(req: &Request, h: McpHeader) -> Result<Option<&str>, HeaderProblem> {
            let mut copies = mcp_header_values(req, h.name());
            let first = copies.next();
            match copies.next() {
                Some(_) => Err(HeaderProblem::Repeated(h)),
                None => Ok(first),
            }
        }
        let once = |h| once(req, h);
        let (method, name, version) = match (
            once(McpHeader::Method),
            once(McpHeader::Name),
            once(McpHeader::ProtocolVersion),
        ) {
            (Ok(m), Ok(n), Ok(v)) => (m, n, v),
            (Err(p), _, _) | (_, Err(p), _) | (_, _, Err(p)) => return Some(p),
        };
        if let (Some(h), Some(b)) = (version, body_version) {
            if h != b {
                return Some(HeaderProblem::Mismatch(McpHeader::ProtocolVersion));
            }
        }
        if let Some(m) = method {
            if op.method() != Some(m) {
                return Some(HeaderProblem::Mismatch(McpHeader::Method));
            }
        }
        if let Some(n) = name {
            let Some(n) = decode_header_value(n) else {
                return Some(HeaderProblem::BadBase64);
            };
            if op.param() != Some(n.as_ref()) {
                return Some(HeaderProblem::Mismatch(McpHeader::Name));
            }
        }
        let header_revision =
            body_version.is_some() || version.is_some_and(mcp_methods::is_header_revision);
        if header_revision {
            if version.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::ProtocolVersion));
            }
            if method.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::Method));
            }
            let named = op.method().is_some_and(mcp_methods::requires_name_header);
            if named && name.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::Name));
            }
        }
        None
    }

    /// Sets the revision the request is judged under (docs/semantics.md §4.4): the one its
    /// `MCP-Protocol-Version` header or `params._meta` names (first the header), else
    /// 2025-03-26. Every version the request names, the one `initialize` asks for included,
    /// must be a revision the filter accepts. Checked before the headers are compared with
    /// the body, so a client of an unknown revision learns which ones are supported.
    fn judge_versions(
        &mut self,
        body_version: Option<&str>,
        init_version: Option<&str>,
    ) -> Result<(), Rejection> {
        let req = self.req.as_ref();
        let headers = req
            .into_iter()
            .flat_map(|r| mcp_header_values(r, McpHeader::ProtocolVersion.name()));
        let parse =
            |v: &str| Revision::parse(v).ok_or_else(|| Rejection::UnsupportedRevision(v.into()));
        let mut named = None;
        for v in headers.chain(body_version) {
            named = named.or(Some(parse(v)?));
        }
        if let Some(v) = init_version {
            parse(v)?;
        }
        self.revision = named.unwrap_or(Revision::UNNAMED);
        Ok(())
    }

    /// Refuses a method the table knows but the request's revision does not have (methods
    /// the table does not know are left to the policies).
    fn judge_method(&self, op: &McpOp) -> Result<(), Rejection> {
        match op.method() {
            Some(m) if mcp_methods::missing_in(m, self.revision) => Err(
                Rejection::MethodNotInRevision(m.to_string(), self.revision.as_str()),
            ),
            _ => Ok(()),
        }
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
        let (Some(ev), Some(req)) = (self.eval.as_mut(), self.req.as_ref()) else {
            return Next::Hold;
        };
        match ev.advance(engine, req) {
            Step::Waiting => Next::Hold,
            Step::Call(calls) => {
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
                    let request = match a.protocol {
                        mcp_access_bundle::AuthorizerProtocol::Http => {
                            callout::build(a, req, &self.body, c.level, &p.id)
                        }
                        mcp_access_bundle::AuthorizerProtocol::Grpc => CalloutRequest {
                            cluster: a.cluster.clone(),
                            headers: Vec::new(),
                            body: crate::ext_authz::build(
                                a,
                                req,
                                &self.body,
                                self.id.as_deref(),
                                c.level,
                                &p.id,
                            ),
                            timeout_ms: a.timeout_ms,
                            grpc: true,
                        },
                    };
                    out.push(Callout { call: c, request });
                }
                // Even when empty: the host dispatches nothing and reports that, which decides.
                Next::Dispatch(out)
            }
            Step::Done(decision) => self.finish(engine, decision),
        }
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
        let decision = match decision {
            Decision::Allow { .. } => self
                .judge_named_items(engine, View::Enforced)
                .unwrap_or(decision),
            deny => deny,
        };
        outcome.dry_run = self.dry_run(engine, &decision);
        outcome.request = self.recorded(engine);
        match decision {
            Decision::Allow {
                mut add_headers,
                policy,
                rule,
            } => {
                outcome.allowed = true;
                outcome.origin = engine.origin_of(policy.as_deref());
                outcome.policy = policy;
                outcome.rule = rule;
                self.outcome = Some(outcome);
                let req = self.req.as_ref();
                if req.is_some_and(|r| ListingFilter::wants_identity(engine, r)) {
                    // A listing (or a GET stream) is read to be filtered: ask the server not
                    // to compress it.
                    add_headers.push(HeaderEdit::set("accept-encoding", "identity"));
                }
                // The flow is done with the request: the listing filter takes it, and its id.
                let listing = match self.req.take() {
                    Some(r) if engine.listings.filter => {
                        let shared = self.shared.insert(Rc::new(r));
                        ListingFilter::for_allowed(engine, shared, self.id.take(), self.revision)
                    }
                    r => {
                        self.req = r;
                        None
                    }
                };
                Next::Allow {
                    add_headers,
                    listing,
                }
            }
            Decision::Deny(d) => {
                let response = answer::denial(&engine.deny_response, &d, self.id.as_deref());
                outcome.level = d.level;
                outcome.reason = Why::Denied(d.reason);
                outcome.origin = engine.origin_of(d.policy.as_deref());
                outcome.policy = d.policy;
                outcome.rule = d.rule;
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
    pub(super) fn judge_named_items(&self, engine: &Engine, view: View) -> Option<Decision> {
        let method = self.req.as_ref()?.mcp.method()?;
        let subscribes_as = mcp_methods::subscribes_as(method);
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
            .map(|p| match &p.subject {
                Some(sub) => format!("{}#{sub}", p.issuer),
                None => p.issuer.clone(),
            });
        Outcome {
            allowed: false,
            level: None,
            reason: Why::Allowed,
            policy: None,
            origin: None,
            rule: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: req.and_then(|r| r.mcp.method().map(str::to_string)),
            mcp_param: req.and_then(|r| r.mcp.param().map(str::to_string)),
            caller: req
                .and_then(|r| r.caller.spiffe.clone())
                .or_else(|| jwt.as_ref().map(|j| format!("jwt:{j}"))),
            jwt,
            cel_errors: (0, 0),
            dry_run: None,
            authorizer_failed: false,
            request: None,
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

/// The transport checks the headers decide (docs/semantics.md §5.1), in order: encoding, a POST
/// without a body, media type, Content-Length (`limit`: `limits.maxBodyBytes`). Every copy of a
/// repeated header is checked: any one may be what the upstream reads.
fn header_rejection(req: &Request, end_of_stream: bool, limit: usize) -> Option<Rejection> {
    let encoded = req
        .header_values("content-encoding")
        .any(|enc| !enc.trim().eq_ignore_ascii_case("identity"));
    if encoded {
        return Some(Rejection::UnsupportedEncoding);
    }
    let post = req.method == "POST";
    if end_of_stream {
        return post.then_some(Rejection::EmptyBody);
    }
    // A POST carries JSON-RPC: `application/json`, in UTF-8 if a charset is named. A missing
    // type or another charset would let a server read other text than the filter did.
    let mut types = req.header_values("content-type").peekable();
    let untyped = types.peek().is_none();
    if post && (untyped || types.any(|ct| !is_json_utf8(ct))) {
        return Some(Rejection::UnsupportedMediaType);
    }
    let lengths = req
        .header_values("content-length")
        .map(|len| len.trim().parse::<u64>())
        .try_fold(0u64, |max, len| len.map(|l| max.max(l)));
    match lengths {
        Err(_) => Some(Rejection::InvalidContentLength),
        Ok(l) if l > limit as u64 => Some(Rejection::BodyTooLarge),
        Ok(_) => None,
    }
}

/// Every copy of an MCP header (name given in lowercase), a spelling with `_` for `-`
/// included: some servers fold `_` into `-` and would read `mcp_name` as `Mcp-Name`, so it
/// counts as a copy (which must agree with the body and appear once).
fn mcp_header_values<'r>(req: &'r Request, name: &'static str) -> impl Iterator<Item = &'r str> {
    req.headers
        .iter()
        .filter(move |(n, _)| {
            n.len() == name.len()
                && n.bytes()
                    .zip(name.bytes())
                    .all(|(a, b)| a == b || (a == b'_' && b == b'-'))
        })
        .map(|(_, v)| v.as_str())
}

/// Whether a `Content-Type` value is `application/json` with no charset or UTF-8's.
fn is_json_utf8(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        && parts.all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                value.eq_ignore_ascii_case("utf-8") || value.eq_ignore_ascii_case("utf8")
            }
            _ => true,
        })
}

/// `limits.maxBodyBytes` as a byte count.
fn body_limit(engine: &Engine) -> usize {
    usize::try_from(engine.limits.max_body_bytes).unwrap_or(usize::MAX)
}

/// A header value with the SEP-2243 Base64 sentinel (`=?base64?...?=`) decoded; None when the
/// sentinel holds anything but canonical, padded Base64 of UTF-8 text.
fn decode_header_value(v: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(payload) = v
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Some(std::borrow::Cow::Borrowed(v));
    };
    let out = crate::base64::decode(payload.as_bytes())?;
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            path: "/mcp".into(),
            canonical_path: "/mcp".into(),
            authority: "a.example".into(),
            port: 80,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Request::default()
        }
    }

    #[test]
    fn header_checks_in_order() {
        use Rejection::*;
        let json = ("content-type", "application/json; charset=utf-8");
        /// HTTP method, headers, end of stream, expected rejection.
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool, Option<Rejection>);
        let cases: &[Case] = &[
            ("POST", &[json, ("content-length", "10")], false, None),
            (
                "POST",
                &[json, ("content-encoding", " Identity ")],
                false,
                None,
            ),
            (
                "POST",
                &[
                    json,
                    ("content-encoding", "identity"),
                    ("content-encoding", "gzip"),
                ],
                false,
                Some(UnsupportedEncoding),
            ),
            // Encoding comes before an empty body, an empty body before the media type.
            (
                "POST",
                &[("content-encoding", "br")],
                true,
                Some(UnsupportedEncoding),
            ),
            (
                "POST",
                &[("content-type", "text/plain")],
                true,
                Some(EmptyBody),
            ),
            ("GET", &[("content-type", "text/plain")], true, None),
            ("GET", &[("content-type", "text/plain")], false, None),
            (
                "POST",
                &[json, ("content-type", "text/plain")],
                false,
                Some(UnsupportedMediaType),
            ),
            // A POST without a type, or naming another charset: 415.
            ("POST", &[], false, Some(UnsupportedMediaType)),
            (
                "POST",
                &[("content-type", "application/json; charset=iso-8859-1")],
                false,
                Some(UnsupportedMediaType),
            ),
            (
                "POST",
                &[("content-type", "application/json;charset=\"UTF-16\"")],
                false,
                Some(UnsupportedMediaType),
            ),
            (
                "POST",
                &[("content-type", "Application/JSON; Charset=\"UTF-8\"; x=y")],
                false,
                None,
            ),
            ("GET", &[], false, None),
            (
                "POST",
                &[json, ("content-length", "1x")],
                false,
                Some(InvalidContentLength),
            ),
            (
                "POST",
                &[json, ("content-length", "5"), ("content-length", "11")],
                false,
                Some(BodyTooLarge),
            ),
            (
                "PUT",
                &[("content-length", "11")],
                false,
                Some(BodyTooLarge),
            ),
        ];
        for (method, headers, end, want) in cases {
            let got = header_rejection(&request(method, headers), *end, 10);
            assert_eq!(&got, want, "{method} {headers:?} {end}");
        }
    }

    #[test]
    fn only_a_traced_flow_keeps_a_trace() {
        let engine = Engine::from_json(
            br#"{"apiVersion": "mcp-access.io/v1",
                 "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 80}]}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let input = || HeadersInput {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), "/mcp".into()),
            ],
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
        gzip.headers
            .push(("content-encoding".into(), "gzip".into()));
        assert!(matches!(rejected.on_headers(&engine, gzip), Next::Respond(r) if r.status == 415));
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
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["host", "content-type"]);
        // Without :authority, the Host header names the authority (and stays a header).
        let (_, _, authority, headers) = seen(&[(":method", "POST"), ("host", "h.example")]);
        assert_eq!(authority, "h.example");
        assert_eq!(headers, [("host".to_string(), "h.example".to_string())]);
    }

    #[test]
    fn base64_sentinel_is_decoded_strictly() {
        let d = |v| decode_header_value(v).map(|c| c.into_owned());
        assert_eq!(d("get_weather").as_deref(), Some("get_weather"));
        assert_eq!(d("=?base64?ZWNobw==?=").as_deref(), Some("echo"));
        assert_eq!(
            d("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(d("=?base64?IHBhZGRlZCA=?=").as_deref(), Some(" padded "));
        assert_eq!(d("=?base64??=").as_deref(), Some(""));
        assert_eq!(d("=?base64?ZGVs?=").as_deref(), Some("del"));
        // Not the sentinel: taken as it is.
        assert_eq!(
            d("=?BASE64?ZWNobw==?=").as_deref(),
            Some("=?BASE64?ZWNobw==?=")
        );
        // Malformed: unpadded, bad alphabet, non-zero leftover bits, padding inside, not UTF-8.
        for bad in [
            "=?base64?ZWNobw?=",
            "=?base64?ZWNo*w==?=",
            "=?base64?ZWNobx==?=",
            "=?base64?ZW==bw==?=",
            "=?base64?Z===?=",
            "=?base64?/w==?=",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
