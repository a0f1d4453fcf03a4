//! One request, start to end, as a pure state machine the host adapter drives:
//! headers -> (body) -> parse -> evaluate -> (callouts) -> answer.

use mcp_access_bundle::Level;

use crate::answer::{self, LocalResponse, INVALID_REQUEST, PARSE_ERROR};
use crate::callout::{self, CalloutRequest};
use crate::mcp::{self, ParseError, ParseLimits};
use crate::policy::{level_str, Decision, Engine, Evaluation, Step};
use crate::request::{McpOp, Request};

/// What the host must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Let the request go on (after adding `add_headers`, later replacing earlier).
    Allow { add_headers: Vec<(String, String)> },
    /// Keep holding the request (headers held, body buffered, or callouts in flight).
    Hold,
    /// Make these callouts, report each with [`RequestFlow::dispatched`], then call
    /// [`RequestFlow::resume`].
    Dispatch(Vec<(usize, CalloutRequest)>),
    /// Answer the client with this; the request never goes upstream.
    Respond(LocalResponse),
}

/// How the request ended, for stats, logs and filter state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    pub level: Option<Level>,
    /// `allowed`, a [`Reason`] name, or a rejection reason (`invalid_json`, `body_too_large`, ...).
    pub reason: &'static str,
    pub policy: Option<String>,
    pub rule: Option<String>,
    pub status: Option<u16>,
    pub listener: Option<String>,
    pub backend: Option<String>,
    pub mcp_method: Option<String>,
    pub mcp_param: Option<String>,
    pub caller: Option<String>,
}

impl Outcome {
    /// One JSON object: the filter-state value and the decision log line.
    pub fn to_json(&self) -> String {
        // Written by hand: this runs for every request. Keys in alphabetical order and
        // serde_json's escaping, so the bytes are those of the `serde_json::Value` map the
        // document was first built as (a test compares the two).
        let mut out = String::with_capacity(256);
        out.push_str("{\"backend\":");
        push_opt_str(&mut out, self.backend.as_deref());
        out.push_str(",\"caller\":");
        push_opt_str(&mut out, self.caller.as_deref());
        out.push_str(",\"decision\":");
        push_str(&mut out, if self.allowed { "allow" } else { "deny" });
        out.push_str(",\"level\":");
        push_str(&mut out, level_str(self.level));
        out.push_str(",\"listener\":");
        push_opt_str(&mut out, self.listener.as_deref());
        out.push_str(",\"method\":");
        push_opt_str(&mut out, self.mcp_method.as_deref());
        out.push_str(",\"name\":");
        push_opt_str(&mut out, self.mcp_param.as_deref());
        out.push_str(",\"policy\":");
        push_opt_str(&mut out, self.policy.as_deref());
        out.push_str(",\"reason\":");
        push_str(&mut out, self.reason);
        out.push_str(",\"rule\":");
        push_opt_str(&mut out, self.rule.as_deref());
        out.push_str(",\"status\":");
        match self.status {
            Some(s) => out.push_str(&s.to_string()),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
}

fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// A JSON string literal, escaped as serde_json escapes: `"`, `\\` and control characters.
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(s.get(start..i).unwrap_or_default());
        if esc.is_empty() {
            out.push_str(&format!("\\u{b:04x}"));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// Headers-stage facts the host collected.
#[derive(Debug, Clone, Default)]
pub struct HeadersInput {
    /// All request headers, names lowercase, pseudo-headers included.
    pub headers: Vec<(String, String)>,
    pub end_of_stream: bool,
    pub port: u16,
    pub route_name: Option<String>,
    pub cluster_name: Option<String>,
    pub caller: crate::request::Caller,
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
    body: Vec<u8>,
    id: Option<String>,
    eval: Option<Evaluation>,
    /// (callout token, evaluation slot)
    tokens: Vec<(u32, usize)>,
    outcome: Option<Outcome>,
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
            body: Vec::new(),
            id: None,
            eval: None,
            tokens: Vec::new(),
            outcome: None,
        }
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
    pub fn on_headers(&mut self, engine: &Engine, input: HeadersInput) -> Action {
        if self.stage != Stage::Start {
            return Action::Hold;
        }
        let header = |name: &str| {
            input
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let method = header(":method").unwrap_or_default();
        let req = Request {
            path: header(":path").unwrap_or_default(),
            authority: header(":authority")
                .or_else(|| header("host"))
                .unwrap_or_default(),
            port: input.port,
            mcp: McpOp::NotMcp,
            route_name: input.route_name,
            cluster_name: input.cluster_name,
            caller: input.caller,
            headers: input
                .headers
                .into_iter()
                .filter(|(n, _)| !n.starts_with(':'))
                .collect(),
            method,
        };
        self.req = Some(req);
        let Some(req) = self.req.as_ref() else {
            return Action::Hold;
        };

        // Every copy counts: the upstream may apply any of them.
        let encoded = req
            .headers
            .iter()
            .any(|(n, v)| n == "content-encoding" && !v.trim().eq_ignore_ascii_case("identity"));
        if encoded {
            return self.reject(
                415,
                INVALID_REQUEST,
                "unsupported_encoding",
                "Content-Encoding is not supported",
            );
        }
        if input.end_of_stream {
            if req.method == "POST" {
                return self.reject(400, PARSE_ERROR, "invalid_json", "Parse error: empty body");
            }
            let op = McpOp::without_body(&req.method, req.header("mcp-session-id").is_some());
            return self.decide(engine, op);
        }
        if req.method == "POST" {
            if let Some(ct) = req.header("content-type") {
                let essence = ct.split(';').next().unwrap_or_default().trim();
                if !essence.eq_ignore_ascii_case("application/json") {
                    return self.reject(
                        415,
                        INVALID_REQUEST,
                        "unsupported_media_type",
                        "Content-Type must be application/json",
                    );
                }
            }
        }
        let limit = usize::try_from(engine.limits.max_body_bytes).unwrap_or(usize::MAX);
        if let Some(len) = req.header("content-length") {
            if len.trim().parse::<u64>().map_or(true, |l| l > limit as u64) {
                return self.too_large();
            }
        }
        self.stage = Stage::Body;
        Action::Hold
    }

    /// A body chunk arrived; `size` is the total buffered so far. `read` fetches the whole
    /// buffered body and is only called at the end of the stream.
    pub fn on_body(
        &mut self,
        engine: &Engine,
        size: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Action {
        if self.stage != Stage::Body {
            return Action::Hold;
        }
        let limit = usize::try_from(engine.limits.max_body_bytes).unwrap_or(usize::MAX);
        if size > limit {
            return self.too_large();
        }
        if !end_of_stream {
            return Action::Hold;
        }
        let body = if size == 0 {
            Vec::new()
        } else {
            read(size).unwrap_or_default()
        };
        self.body_complete(engine, body)
    }

    /// Request trailers arrived: the body is complete (`read` gets up to the given byte count).
    pub fn on_trailers(
        &mut self,
        engine: &Engine,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> Action {
        if self.stage != Stage::Body {
            return Action::Hold;
        }
        let limit = usize::try_from(engine.limits.max_body_bytes).unwrap_or(usize::MAX);
        let body = read(limit.saturating_add(1)).unwrap_or_default();
        self.body_complete(engine, body)
    }

    fn body_complete(&mut self, engine: &Engine, body: Vec<u8>) -> Action {
        let limit = usize::try_from(engine.limits.max_body_bytes).unwrap_or(usize::MAX);
        if body.len() > limit {
            return self.too_large();
        }
        let is_post = self.req.as_ref().is_some_and(|r| r.method == "POST");
        if !is_post {
            self.body = body;
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
                let reason = match err {
                    ParseError::Parse(_) => "invalid_json",
                    ParseError::InvalidRequest(_) => "invalid_request",
                    ParseError::InvalidParams(_) => "invalid_params",
                };
                self.reject(400, err.code(), reason, &err.to_string())
            }
            Ok(msg) => {
                self.id = msg.id.clone();
                self.body = body;
                let op = McpOp::from_message(msg);
                if let Some(problem) = self.header_mismatch(&op) {
                    return self.reject(400, INVALID_REQUEST, "header_mismatch", problem);
                }
                self.decide(engine, op)
            }
        }
    }

    /// Reports the result of dispatching the callout for `slot`.
    pub fn dispatched(&mut self, slot: usize, result: Result<u32, String>) {
        match result {
            Ok(token) => self.tokens.push((token, slot)),
            Err(detail) => {
                if let Some(ev) = &mut self.eval {
                    ev.complete(
                        slot,
                        crate::policy::AuthzOutcome::Error {
                            detail: format!("dispatch failed: {detail}"),
                        },
                    );
                }
            }
        }
    }

    /// Continues after dispatching.
    pub fn resume(&mut self, engine: &Engine) -> Action {
        self.step(engine)
    }

    /// A callout answered (`status` None: no response: timeout, reset).
    pub fn on_callout_response(
        &mut self,
        engine: &Engine,
        token: u32,
        status: Option<u16>,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Action {
        let Some(pos) = self.tokens.iter().position(|(t, _)| *t == token) else {
            return Action::Hold;
        };
        let (_, slot) = self.tokens.swap_remove(pos);
        let authorizer = self
            .eval
            .as_ref()
            .and_then(|ev| ev.call_authorizer(slot))
            .and_then(|i| engine.authorizers.get(i));
        let outcome = match authorizer {
            Some(a) => callout::interpret(a, status, headers, body),
            None => crate::policy::AuthzOutcome::Error {
                detail: "unknown authorizer".into(),
            },
        };
        if let Some(ev) = &mut self.eval {
            ev.complete(slot, outcome);
        }
        self.step(engine)
    }

    fn header_mismatch(&self, op: &McpOp) -> Option<&'static str> {
        let req = self.req.as_ref()?;
        // Each header must appear at most once: a second copy could say something else.
        let copies = |name: &str| req.headers.iter().filter(|(n, _)| n == name).count();
        if copies("mcp-method") > 1 {
            return Some("Mcp-Method header appears more than once");
        }
        if copies("mcp-name") > 1 {
            return Some("Mcp-Name header appears more than once");
        }
        if let Some(m) = req.header("mcp-method") {
            if op.method() != Some(m) {
                return Some("Mcp-Method header does not match the request body");
            }
        }
        if let Some(n) = req.header("mcp-name") {
            if op.param() != Some(n) {
                return Some("Mcp-Name header does not match the request body");
            }
        }
        None
    }

    fn decide(&mut self, engine: &Engine, op: McpOp) -> Action {
        let Some(req) = self.req.as_mut() else {
            return Action::Hold;
        };
        req.mcp = op;
        self.eval = Some(engine.begin(req, false));
        self.stage = Stage::Deciding;
        self.step(engine)
    }

    fn step(&mut self, engine: &Engine) -> Action {
        let (Some(ev), Some(req)) = (self.eval.as_mut(), self.req.as_ref()) else {
            return Action::Hold;
        };
        match ev.advance(engine, req) {
            Step::Waiting => Action::Hold,
            Step::Call(calls) => {
                let mut out = Vec::with_capacity(calls.len());
                for c in calls {
                    let (Some(a), Some(p)) = (
                        engine.authorizers.get(c.authorizer),
                        engine.policies.get(c.policy),
                    ) else {
                        continue;
                    };
                    out.push((c.slot, callout::build(a, req, &self.body, c.level, &p.id)));
                }
                Action::Dispatch(out)
            }
            Step::Done(decision) => self.finish(engine, decision),
        }
    }

    fn finish(&mut self, engine: &Engine, decision: Decision) -> Action {
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
        match decision {
            Decision::Allow {
                add_headers,
                policy,
                rule,
            } => {
                outcome.allowed = true;
                outcome.policy = policy;
                outcome.rule = rule;
                self.outcome = Some(outcome);
                Action::Allow { add_headers }
            }
            Decision::Deny(d) => {
                let response = answer::denial(&engine.deny_response, &d, self.id.as_deref());
                outcome.level = d.level;
                outcome.reason = d.reason.as_str();
                outcome.policy = d.policy;
                outcome.rule = d.rule;
                outcome.status = Some(response.status);
                self.outcome = Some(outcome);
                Action::Respond(response)
            }
        }
    }

    fn base_outcome(&self) -> Outcome {
        let req = self.req.as_ref();
        Outcome {
            allowed: false,
            level: None,
            reason: "allowed",
            policy: None,
            rule: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: req.and_then(|r| r.mcp.method().map(str::to_string)),
            mcp_param: req.and_then(|r| r.mcp.param().map(str::to_string)),
            caller: req.and_then(|r| r.caller.spiffe.clone()),
        }
    }

    fn reject(&mut self, status: u16, code: i32, reason: &'static str, message: &str) -> Action {
        self.stage = Stage::Done;
        let mut outcome = self.base_outcome();
        outcome.reason = reason;
        outcome.status = Some(status);
        self.outcome = Some(outcome);
        Action::Respond(answer::rejection(status, self.id.as_deref(), code, message))
    }

    fn too_large(&mut self) -> Action {
        self.reject(
            413,
            INVALID_REQUEST,
            "body_too_large",
            "Request body exceeds the configured limit",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document as it was first defined (a `serde_json::Value` map).
    fn as_value_map(o: &Outcome) -> String {
        serde_json::json!({
            "decision": if o.allowed { "allow" } else { "deny" },
            "level": level_str(o.level),
            "reason": o.reason,
            "policy": o.policy,
            "rule": o.rule,
            "status": o.status,
            "listener": o.listener,
            "backend": o.backend,
            "method": o.mcp_method,
            "name": o.mcp_param,
            "caller": o.caller,
        })
        .to_string()
    }

    #[test]
    fn outcome_json_is_byte_for_byte_the_value_map() {
        let full = Outcome {
            allowed: false,
            level: Some(Level::Backend),
            reason: "deny_policy",
            policy: Some("ns/p\"q".into()),
            rule: Some("r\u{1}\n\u{e9}\t\u{8}\u{c}\u{1f}\u{7f}\r".into()),
            status: Some(403),
            listener: Some("ns/gw/l".into()),
            backend: Some("ns/b".into()),
            mcp_method: Some("tools/call".into()),
            mcp_param: Some("</script>\\".into()),
            caller: Some("spiffe://example.org/ns/a/sa/b".into()),
        };
        let empty = Outcome {
            allowed: true,
            level: None,
            reason: "allowed",
            policy: None,
            rule: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: None,
            mcp_param: None,
            caller: None,
        };
        for o in [full, empty] {
            assert_eq!(o.to_json(), as_value_map(&o));
        }
    }
}
