//! A request's first stages: its headers checked (docs/semantics.md §5.1), its body buffered
//! and parsed, until the policies can judge it ([`RequestFlow::decide`]).

use mcp_access_bundle::gateway_api::canonical_host;
use mcp_access_bundle::mcp_methods;

use super::checks::{body_limit, header_rejection, judge_method, McpHeaders};
use super::{HeadersInput, Message, NamedItems, Next, Progress, RequestFlow, Stage, Started};
use crate::answer::{HeaderProblem, Rejection};
use crate::canon::canonical_path;
use crate::mcp::{self, ParseError, ParseLimits};
use crate::policy::Engine;
use crate::request::{Headers, McpOp, Request, Target};

impl RequestFlow {
    /// The request headers arrived.
    pub fn on_headers(&mut self, engine: &Engine, input: HeadersInput) -> Progress {
        let next = match self.stage {
            Stage::Start => self.headers(engine, input),
            _ => Next::Hold,
        };
        self.progress(next)
    }

    fn headers(&mut self, engine: &Engine, input: HeadersInput) -> Next {
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
        let mut req = Request {
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
        };
        req.target = engine.target_of(&req);
        let started = Started {
            mcp_headers: McpHeaders::scan(&req),
            req,
        };
        let msg = Message::default();
        if let Some(e) = bad_path {
            return self.reject(
                started.req,
                msg,
                None,
                Rejection::InvalidPath(e.to_string()),
            );
        }
        if input.end_of_stream && engine.metadata_fetch(&started.req) {
            return self.metadata_fetch(engine, started.req);
        }
        let limit = body_limit(engine);
        if let Some(r) = header_rejection(&started.req, input.end_of_stream, limit) {
            return self.reject(started.req, msg, None, r);
        }
        if !input.end_of_stream {
            self.stage = Stage::Body(Box::new(started));
            return Next::Hold;
        }
        let req = &started.req;
        let op = McpOp::without_body(
            &req.method,
            req.header(mcp_methods::headers::SESSION_ID).is_some(),
        );
        let revision = match started.judge_versions(None, None) {
            Ok(revision) => revision,
            Err(r) => return self.reject(started.req, msg, None, r),
        };
        let msg = Message { revision, ..msg };
        if op == McpOp::Transport && revision.is_stateless() {
            let method = started.req.method.clone();
            let r = Rejection::HttpMethodNotInRevision(method, revision.as_str());
            return self.reject(started.req, msg, None, r);
        }
        self.decide(engine, started.req, msg, Vec::new(), op)
    }

    /// The request in its body stage, taken out of the flow to go on to the next.
    fn take_started(&mut self) -> Option<Started> {
        match std::mem::take(&mut self.stage) {
            Stage::Body(s) => Some(*s),
            other => {
                self.stage = other;
                None
            }
        }
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
            _ if !matches!(self.stage, Stage::Body(_)) => Next::Hold,
            _ if !end_of_stream && size <= body_limit(engine) => Next::Hold,
            _ => match self.take_started() {
                None => Next::Hold,
                Some(s) if size > body_limit(engine) => {
                    let msg = Message::default();
                    self.reject(s.req, msg, None, Rejection::BodyTooLarge)
                }
                Some(s) if size == 0 => self.body_complete(engine, s, Vec::new()),
                Some(s) => {
                    let body = read(size).unwrap_or_default();
                    self.body_complete(engine, s, body)
                }
            },
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
        let next = match self.take_started() {
            None => Next::Hold,
            Some(s) => self.trailers(engine, s, trailers, read),
        };
        self.progress(next)
    }

    fn trailers(
        &mut self,
        engine: &Engine,
        started: Started,
        trailers: &Headers,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Next {
        let mcp_trailer = trailers.iter().any(|(n, _)| {
            n.get(..4)
                .is_some_and(|p| p.eq_ignore_ascii_case("mcp-") || p.eq_ignore_ascii_case("mcp_"))
        });
        if mcp_trailer {
            let r = Rejection::HeaderMismatch(HeaderProblem::Trailer);
            return self.reject(started.req, Message::default(), None, r);
        }
        let limit = body_limit(engine);
        let body = read(limit.saturating_add(1)).unwrap_or_default();
        self.body_complete(engine, started, body)
    }

    /// The whole body arrived: parsed and checked against the headers (a POST's), then judged.
    fn body_complete(&mut self, engine: &Engine, mut started: Started, body: Vec<u8>) -> Next {
        let mut msg = Message::default();
        if body.len() > body_limit(engine) {
            return self.reject(started.req, msg, None, Rejection::BodyTooLarge);
        }
        if started.req.method != "POST" {
            return match started.judge_versions(None, None) {
                Ok(revision) => {
                    msg.revision = revision;
                    self.decide(engine, started.req, msg, body, McpOp::NotMcp)
                }
                Err(r) => self.reject(started.req, msg, None, r),
            };
        }
        let limits = ParseLimits {
            max_depth: usize::try_from(engine.settings.limits.max_json_depth).unwrap_or(64),
        };
        let parsed = match mcp::parse_message(&body, &limits) {
            Ok(parsed) => parsed,
            Err((err, id)) => {
                // JSON-RPC: a parse error is answered with a null id.
                if !matches!(err, ParseError::Parse(_)) {
                    msg.id = id;
                }
                return self.reject(started.req, msg, None, Rejection::Message(err));
            }
        };
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
        } = parsed;
        msg.id = id;
        let op = mcp::op_of(kind, method, name.or(uri));
        match started.judge_versions(body_version.as_deref(), init_version.as_deref()) {
            Ok(revision) => msg.revision = revision,
            Err(r) => return self.reject(started.req, msg, None, r),
        }
        let (cel, records) = (
            engine.cel_needs().params,
            engine.settings.decision_records.arguments,
        );
        match mcp::params_value(&body, (params, arguments), cel, records) {
            Ok(params) => started.req.params = params,
            Err(e) => return self.reject(started.req, msg, None, Rejection::Message(e)),
        }
        if let Some(problem) = started.header_mismatch(&op, body_version.as_deref()) {
            let r = Rejection::HeaderMismatch(problem);
            return self.reject(started.req, msg, None, r);
        }
        if let Err(r) = judge_method(&op, msg.revision) {
            return self.reject(started.req, msg, None, r);
        }
        msg.named = NamedItems {
            subscriptions,
            completion_ref,
        };
        self.decide(engine, started.req, msg, body, op)
    }
}
