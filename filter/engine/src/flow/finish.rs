//! How a request ends ([`Done`]): decided by the policies and the gates after them, let
//! through unjudged (OAuth metadata), or refused by a check; its [`Outcome`] and answer.

use super::gates::{Judged, PinGate};
use super::limits::{charge_limits, Limited};
use super::record::recorded;
use super::{Deciding, Done, Message, Next, Outcome, RequestFlow, Stage};
use crate::answer::{self, Rejection, Why};
use crate::listing::ListingFilter;
use crate::policy::{Decision, Engine, Evaluation, HeaderEdit, RuleRef, View};
use crate::request::{JwtPrincipal, Request};

impl RequestFlow {
    /// The policies decided: the gates after them judge an allowed request, the dry-run
    /// decision is made beside, and the outcome and the host's next step follow.
    pub(super) fn finish(&mut self, engine: &Engine, d: Deciding, decision: Decision) -> Next {
        let Deciding {
            req,
            msg,
            eval,
            inflight,
            ..
        } = d;
        let mut outcome = base_outcome(&req);
        outcome.listener = eval.listener_name(engine);
        outcome.backend = eval.backend_name(engine).map(str::to_string);
        outcome.cel_errors = eval.cel_errors();
        outcome.authorizer_failed = eval.authorizer_failed();
        outcome.authz_cached = inflight.cached;
        let judged = Judged {
            req: &req,
            named: &msg.named,
            eval: &eval,
            drift: self.stores.drift.as_ref(),
        };
        let pins = PinGate::default();
        let decision = match decision {
            Decision::Allow { .. } => judged
                .gates(engine, View::Enforced, &pins)
                .unwrap_or(decision),
            deny => deny,
        };
        outcome.dry_run = judged.dry_run(engine, &decision, &pins);
        outcome.request = Some(recorded(engine, &req, msg.revision));
        let d = match decision {
            Decision::Allow { add_headers, by } => {
                let counters = self.stores.counters.as_ref();
                let id = msg.id.as_deref();
                let limited = charge_limits(engine, &req, counters, id, &mut outcome);
                let allowed = Allowed {
                    req,
                    msg,
                    eval,
                    outcome,
                    add_headers,
                    by,
                };
                return match limited {
                    Limited::Passed => self.allow(engine, allowed),
                    Limited::Refused(refusal) => {
                        let Allowed {
                            req,
                            msg,
                            eval,
                            outcome,
                            ..
                        } = allowed;
                        self.end(req, msg, Some(eval), outcome, None);
                        Next::Respond(refusal)
                    }
                    Limited::Ask(asking) => self.ask_limiter(engine, allowed, asking),
                };
            }
            Decision::Deny(d) => d,
        };
        let challenge = engine.challenge(&req, &d);
        let by = d.by.map(|r| (engine.policy_id(r), engine.rule_name(r)));
        let by = by.unwrap_or_default();
        let response = answer::denial(
            &engine.settings.deny_response,
            &d,
            by,
            msg.id.as_deref(),
            challenge.as_ref(),
        );
        outcome.level = d.level;
        outcome.reason = Why::Denied(d.reason);
        outcome.by = d.by;
        outcome.status = Some(response.status);
        self.end(req, msg, Some(eval), outcome, None);
        Next::Respond(response)
    }

    /// An allowed request whose limits had room goes on: its identity headers, the filter of
    /// its response.
    pub(super) fn allow(&mut self, engine: &Engine, a: Allowed) -> Next {
        let Allowed {
            req,
            msg,
            eval,
            mut outcome,
            mut add_headers,
            by,
        } = a;
        outcome.allowed = true;
        outcome.by = by;
        let identity = engine.identity_edits(&req);
        outcome.identity_omitted = identity.omitted;
        // The response's filter judges items as calls made by the request.
        let (drift, store) = (self.stores.drift.clone(), self.stores.listings.clone());
        let id = msg.id.clone();
        let response = ListingFilter::for_allowed(engine, &req, id, msg.revision, drift, store);
        if response
            .as_ref()
            .is_some_and(|f| f.wants_identity(engine, &req))
        {
            // An answer read to be filtered: ask the server not to compress it.
            add_headers.push(HeaderEdit::set("accept-encoding", "identity"));
        }
        self.end(req, msg, Some(eval), outcome, response);
        Next::Allow {
            add_headers,
            identity_headers: identity.edits,
        }
    }

    /// A fetch of the listener's OAuth metadata that Envoy answers itself (docs/semantics.md
    /// §5.6): it goes on without policy, and with no identity headers (it reaches no upstream).
    pub(super) fn metadata_fetch(&mut self, engine: &Engine, req: Request) -> Next {
        let mut outcome = base_outcome(&req);
        outcome.allowed = true;
        outcome.listener = req
            .target
            .listener
            .and_then(|l| engine.listeners.get(l))
            .map(|l| l.id.clone());
        self.end(req, Message::default(), None, outcome, None);
        Next::Allow {
            add_headers: Vec::new(),
            identity_headers: Vec::new(),
        }
    }

    /// The request is refused by a check (`eval`: the policies' evaluation, if it began).
    pub(super) fn reject(
        &mut self,
        req: Request,
        msg: Message,
        eval: Option<Evaluation>,
        r: Rejection,
    ) -> Next {
        let response = answer::rejection(&r, msg.id.as_deref());
        let mut outcome = base_outcome(&req);
        outcome.reason = Why::Rejected(r.reason());
        outcome.status = Some(response.status);
        self.end(req, msg, eval, outcome, None);
        Next::Respond(response)
    }

    pub(super) fn end(
        &mut self,
        req: Request,
        msg: Message,
        eval: Option<Evaluation>,
        outcome: Outcome,
        response: Option<ListingFilter>,
    ) {
        self.stage = Stage::Done(Box::new(Done {
            req,
            msg,
            eval,
            outcome,
            response,
        }));
    }
}

/// A request the policies and gates allowed, before its limits are charged.
#[derive(Debug)]
pub(super) struct Allowed {
    pub(super) req: Request,
    pub(super) msg: Message,
    pub(super) eval: Evaluation,
    pub(super) outcome: Outcome,
    pub(super) add_headers: Vec<HeaderEdit>,
    pub(super) by: Option<RuleRef>,
}

/// The outcome of `req` before anything is decided: who asked what.
fn base_outcome(req: &Request) -> Outcome {
    Outcome {
        allowed: false,
        level: None,
        reason: Why::Allowed,
        by: None,
        status: None,
        listener: None,
        backend: None,
        mcp_method: req.mcp.method().map(str::to_string),
        mcp_param: req.mcp.param().map(str::to_string),
        caller: req.caller.label(),
        jwt: req.caller.jwts.first().map(JwtPrincipal::label),
        cel_errors: (0, 0),
        dry_run: None,
        authorizer_failed: false,
        request: None,
        authz_cached: Vec::new(),
        identity_omitted: Vec::new(),
        limits: Default::default(),
    }
}
