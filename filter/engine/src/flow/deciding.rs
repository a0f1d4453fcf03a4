//! A request being decided: the policies' evaluation stepped on, its authorizer calls made
//! (or answered from the cache) and their answers read, until it decides
//! ([`RequestFlow::finish`]).

use super::{
    Callout, CalloutAnswer, Deciding, Dispatched, Inflight, Message, Next, Progress, Reports,
    RequestFlow, Stage,
};
use crate::authz_cache;
use crate::callout::{self, CalloutReport};
use crate::policy::{AuthzCall, AuthzOutcome, Engine, Step};
use crate::request::{Headers, McpOp, Request};

impl RequestFlow {
    /// The request (its message read) is judged by the policies.
    pub(super) fn decide(
        &mut self,
        engine: &Engine,
        mut req: Request,
        msg: Message,
        body: Vec<u8>,
        op: McpOp,
    ) -> Next {
        req.mcp = op;
        let eval = engine.begin(&req, self.trace);
        self.stage = Stage::Deciding(Box::new(Deciding {
            req,
            msg,
            body,
            eval,
            inflight: Inflight::default(),
        }));
        self.step(engine)
    }

    /// Steps the evaluation on until it waits for answers, calls authorizers or decides.
    fn step(&mut self, engine: &Engine) -> Next {
        let Stage::Deciding(d) = &mut self.stage else {
            return Next::Hold;
        };
        let decision = loop {
            let calls = match d.eval.advance(engine, &d.req) {
                Step::Waiting => return Next::Hold,
                Step::Done(decision) => break decision,
                Step::Call(calls) => calls,
            };
            let callouts = d.callouts(engine, calls, self.stores.answers.is_some());
            // Calls the cache answers complete at once; then the evaluation goes on.
            let (callouts, answered) =
                d.answer_from_cache(engine, callouts, &self.stores, &mut self.reports);
            if callouts.is_empty() && answered {
                continue;
            }
            // Even when empty: the host dispatches nothing and reports that, which decides.
            return Next::Dispatch(callouts);
        };
        match std::mem::take(&mut self.stage) {
            Stage::Deciding(d) => self.finish(engine, *d, decision),
            other => {
                self.stage = other;
                Next::Hold
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
        let next = match &mut self.stage {
            Stage::Deciding(d) => {
                d.dispatched(engine, results, &mut self.reports);
                self.step(engine)
            }
            _ => Next::Hold,
        };
        self.progress(next)
    }

    /// A callout answered at `now_ns` (`status` None: no response: timeout, reset), with its
    /// response `headers` and `trailers` (read only for a gRPC authorizer). `read` fetches up
    /// to the given number of body bytes; it is only called for a body the flow reads (an
    /// HTTP authorizer's denial, at most its cap plus one byte; a gRPC authorizer's answer,
    /// [`crate::ext_authz::body_read_limit`]). An answer the flow no longer waits for (it
    /// decided, or the call is not its own) changes nothing.
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
        if matches!(self.stage, Stage::Limiting(_)) {
            let body = status.and_then(|_| read(super::limiter::READ_LIMIT));
            let answer = (status, headers, &trailers(), &body.unwrap_or_default()[..]);
            return self.on_limiter_response(engine, token, answer, now_ns);
        }
        let interpret = |a: &mcp_access_bundle::Authorizer| {
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
        };
        let ended = match &mut self.stage {
            Stage::Deciding(d) => {
                let stores = &self.stores;
                d.callout_ended(
                    engine,
                    (token, now_ns),
                    interpret,
                    stores,
                    &mut self.reports,
                )
            }
            _ => false,
        };
        let next = if ended { self.step(engine) } else { Next::Hold };
        self.progress(next)
    }
}

impl Deciding {
    /// The authorizer of the callout for `slot`.
    pub(super) fn authorizer_of<'e>(
        &self,
        engine: &'e Engine,
        slot: usize,
    ) -> Option<&'e mcp_access_bundle::Authorizer> {
        self.eval
            .call_authorizer(slot)
            .and_then(|i| engine.authorizers.get(i))
    }

    fn authorizer_name<'e>(&self, engine: &'e Engine, slot: usize) -> &'e str {
        self.authorizer_of(engine, slot)
            .map_or("?", |a| a.name.as_str())
    }

    /// The callouts of `calls`, each with its cache key when `caches` and its authorizer's
    /// answers are cached: the key is read off the very request built
    /// ([`authz_cache::key_of`]).
    fn callouts(
        &mut self,
        engine: &Engine,
        calls: Vec<AuthzCall>,
        caches: bool,
    ) -> Vec<(Callout, Option<authz_cache::CacheKey>)> {
        let req = &self.req;
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
                let detail = "no such authorizer or policy".into();
                self.eval.complete(c.slot, AuthzOutcome::Error { detail });
                continue;
            };
            let outgoing = crate::outgoing::Outgoing::build(
                a,
                req,
                &self.body,
                self.msg.id.as_deref(),
                c.level,
                &p.id,
            );
            let cache_key = key(&c, outgoing.sent());
            let request = outgoing.into_request(a);
            out.push((Callout { call: c, request }, cache_key));
        }
        out
    }

    fn dispatched(
        &mut self,
        engine: &Engine,
        results: impl IntoIterator<Item = Dispatched>,
        reports: &mut Reports,
    ) {
        let results = results.into_iter();
        self.inflight.tokens.reserve(results.size_hint().0);
        for d in results {
            match d.token {
                Ok(token) => self.inflight.tokens.push((token, d.slot, d.at_ns)),
                Err(error) => {
                    let detail = match self.authorizer_of(engine, d.slot) {
                        Some(a) => callout::dispatch_failure(a, &error),
                        None => format!("dispatch failed: {error}"),
                    };
                    let outcome = AuthzOutcome::Error { detail };
                    let name = self.authorizer_name(engine, d.slot);
                    reports.push(CalloutReport::of(name, None, &outcome, None));
                    self.eval.complete(d.slot, outcome);
                }
            }
        }
    }

    /// The answer to the callout `token` (dispatched by this request), interpreted by its
    /// authorizer, completes its call. Returns whether it was one of this request's calls.
    fn callout_ended(
        &mut self,
        engine: &Engine,
        (token, now_ns): (u32, u64),
        interpret: impl FnOnce(
            &mcp_access_bundle::Authorizer,
        ) -> (AuthzOutcome, Option<String>, Option<String>),
        stores: &super::Stores,
        reports: &mut Reports,
    ) -> bool {
        let tokens = &mut self.inflight.tokens;
        let Some(pos) = tokens.iter().position(|(t, _, _)| *t == token) else {
            return false;
        };
        let (_, slot, at) = tokens.swap_remove(pos);
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
        let miss = self.keep_answer(engine, slot, &outcome, metadata.as_ref(), stores);
        let name = self.authorizer_name(engine, slot);
        let mut report = CalloutReport::of(name, Some(latency_ms), &outcome, note);
        report.cache = miss.then_some(callout::CacheUse::Miss);
        // A dry-run authorizer's answer is recorded, never applied.
        let dry_run_only = self.eval.dry_run_only(slot);
        report.metadata = metadata.take().filter(|_| !dry_run_only);
        reports.push(report);
        self.eval.complete(slot, outcome);
        true
    }
}
