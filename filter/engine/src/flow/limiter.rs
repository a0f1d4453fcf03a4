//! `Global` rate limits in the flow (docs/semantics.md §8.6): after the Local limits of an
//! allowed request were charged, one RateLimitService call asks about its Global ones
//! ([`Next::CallLimiter`]); the request waits in its own stage ([`Limiting`]) for the answer.
//! OK lets it through; `OVER_LIMIT` refuses it and takes its Local charges back; no usable
//! answer follows the limits' failure mode. An answer that is not the one awaited (another
//! token, or after the request ended) changes nothing.

use mcp_access_bundle::{FailureMode, RateLimitService};

use super::finish::Allowed;
use super::limits::{refuse, refused, Pending};
use super::{Next, Progress, RequestFlow, Stage};
use crate::answer::LocalResponse;
use crate::callout::{CalloutRequest, DispatchError};
use crate::ext_authz::{self, Unary};
use crate::policy::Engine;
pub(super) use crate::ratelimit::global::READ_LIMIT;
use crate::ratelimit::global::{self, Verdict};
use crate::ratelimit::store::{refund_all, Charge};
use crate::ratelimit::{Limit, LimitsRecord, Selected};
use crate::request::Headers;

/// The ShouldRateLimit call of `charged` to `service`, as HTTP/2 carries it.
pub(super) fn call<'l>(
    service: &RateLimitService,
    charged: impl IntoIterator<Item = (&'l Limit, &'l Selected)>,
) -> CalloutRequest {
    let message = global::request(service, charged);
    let authority = service.cluster.clone();
    let timeout = service.timeout_ms;
    ext_authz::grpc_callout(&service.cluster, authority, global::PATH, timeout, &message)
}

/// What an answer to a [`call`] of `descriptors` descriptors says: the HTTP `status` (None:
/// none came), headers, trailers and body (read up to [`READ_LIMIT`]).
pub(super) fn interpret(
    status: Option<u16>,
    headers: &Headers,
    trailers: &Headers,
    body: &[u8],
    descriptors: usize,
) -> Verdict {
    let why = match ext_authz::unary(status, headers, trailers, body, READ_LIMIT) {
        Unary::Message(m) => return global::verdict(m, descriptors),
        Unary::NoAnswer => "no answer (timeout, reset or unreachable)".to_string(),
        Unary::Http(s, peek) => {
            let text = String::from_utf8_lossy(peek);
            format!("HTTP status {s} to a gRPC call ({})", text.trim())
        }
        Unary::Status(code, message) => {
            let name = ext_authz::grpc_status_name(code);
            format!("gRPC status {code} ({name}): {message}")
        }
        Unary::TooLong => format!("an answer of {READ_LIMIT} bytes or more"),
        Unary::Malformed(problem) => format!("malformed answer: {problem}"),
    };
    Verdict::Failed(why)
}

/// A request waiting for the RateLimitService.
#[derive(Debug)]
pub(super) struct Limiting {
    allowed: Allowed,
    asking: Pending,
    /// The call's token and when it was dispatched (ns); None until the host reports it.
    token: Option<(u32, u64)>,
}

impl RequestFlow {
    /// `allowed` waits for the RateLimitService: the host is to make the call.
    pub(super) fn ask_limiter(&mut self, engine: &Engine, allowed: Allowed, p: Pending) -> Next {
        let request = engine.settings.rate_limit_service.as_ref().map(|service| {
            let limits = &engine.rate_limits.0;
            call(
                service,
                p.global
                    .iter()
                    .filter_map(|s| Some((limits.get(s.limit)?, s))),
            )
        });
        self.stage = Stage::Limiting(Box::new(Limiting {
            allowed,
            asking: p,
            token: None,
        }));
        match request {
            Some(r) => Next::CallLimiter(r),
            None => self.limited(engine, Verdict::Failed("no rateLimitService".into())),
        }
    }

    /// The host dispatched the call of a [`Next::CallLimiter`] at `at_ns` (its token), or
    /// could not.
    pub fn limiter_dispatched(
        &mut self,
        engine: &Engine,
        token: Result<u32, DispatchError>,
        at_ns: u64,
    ) -> Progress {
        let waiting = matches!(&self.stage, Stage::Limiting(l) if l.token.is_none());
        let next = match token {
            _ if !waiting => Next::Hold,
            Ok(t) => {
                if let Stage::Limiting(l) = &mut self.stage {
                    l.token = Some((t, at_ns));
                }
                Next::Hold
            }
            Err(e) => {
                let cluster = engine.settings.rate_limit_service.as_ref();
                let cluster = cluster.map_or("", |s| s.cluster.as_str());
                let why = format!("not reached: Envoy could not call cluster {cluster} ({e})");
                self.limited(engine, Verdict::Failed(why))
            }
        };
        self.progress(next)
    }

    /// The answer (HTTP status, headers, trailers, body read up to [`READ_LIMIT`]) to
    /// callout `token` at `now_ns`, if it is the RateLimitService's this request awaits (else
    /// nothing changes).
    pub(super) fn on_limiter_response(
        &mut self,
        engine: &Engine,
        token: u32,
        (status, headers, trailers, body): (Option<u16>, &Headers, &Headers, &[u8]),
        now_ns: u64,
    ) -> Progress {
        let (descriptors, at) = match &self.stage {
            Stage::Limiting(l) => match l.token {
                Some((t, at)) if t == token => (l.asking.global.len(), at),
                _ => return self.progress(Next::Hold),
            },
            _ => return self.progress(Next::Hold),
        };
        let mut verdict = interpret(status, headers, trailers, body, descriptors);
        let timeout = engine.settings.rate_limit_service.as_ref();
        let timeout = timeout.map_or(0, |s| u64::from(s.timeout_ms));
        if let Verdict::Failed(why) = &mut verdict {
            // Envoy ended the call at its timeout: judged as for authorizers.
            let latency = now_ns.saturating_sub(at) / 1_000_000;
            let words = why
                .trim_end_matches(')')
                .ends_with(crate::callout::ENVOY_TIMEOUT);
            if crate::callout::ended_at_timeout(timeout, latency, words) {
                *why = format!("timed out: no answer within {timeout} ms ({why})");
            }
        }
        let next = self.limited(engine, verdict);
        self.progress(next)
    }

    /// The request waiting for the limiter goes on as `verdict` says.
    fn limited(&mut self, engine: &Engine, verdict: Verdict) -> Next {
        let l = match std::mem::take(&mut self.stage) {
            Stage::Limiting(l) => l,
            other => {
                self.stage = other;
                return Next::Hold;
            }
        };
        let Limiting {
            mut allowed,
            asking,
            ..
        } = *l;
        let record = std::mem::take(&mut allowed.outcome.limits);
        let id = allowed.msg.id.as_deref();
        let limit = |i: usize| {
            let s = asking.global.get(i)?;
            engine.rate_limits.0.get(s.limit)
        };
        let (record, response) = match verdict {
            Verdict::Ok => {
                allowed.outcome.limits = record;
                return self.allow(engine, allowed);
            }
            Verdict::Over {
                index,
                reset,
                limit: named,
            } => {
                let l = limit(index);
                let name = l.map(|l| l.id.clone()).unwrap_or_default();
                let rates = l.map_or(&[][..], |l| &l.rates);
                let rate = global::refusing_rate(rates, named);
                let retry = (global::retry_after(rates, reset), "rate_limited");
                refused(record, &name, rate, retry, id)
            }
            Verdict::Failed(why) => {
                let record = LimitsRecord {
                    limiter_failed: Some(why),
                    ..record
                };
                let deny = (0..asking.global.len())
                    .filter_map(limit)
                    .find(|l| l.failure_mode == FailureMode::Deny);
                let Some(l) = deny else {
                    allowed.outcome.limits = record;
                    return self.allow(engine, allowed);
                };
                refused(record, &l.id, None, (1, "rate_limiter_unavailable"), id)
            }
        };
        self.refund(engine, &asking);
        self.refuse_allowed(engine, allowed, record, response)
    }

    /// Takes back the Local charges of a request the limiter refused.
    fn refund(&self, engine: &Engine, asking: &Pending) {
        let Some(store) = &self.stores.counters else {
            return;
        };
        let charges: Vec<Charge<'_>> = asking
            .local
            .iter()
            .filter_map(|(i, key)| {
                let rates = &engine.rate_limits.0.get(*i)?.rates;
                Some(Charge { key: *key, rates })
            })
            .collect();
        refund_all(store.0.as_ref(), &charges, asking.charged_at);
    }

    fn refuse_allowed(
        &mut self,
        engine: &Engine,
        a: Allowed,
        record: LimitsRecord,
        response: LocalResponse,
    ) -> Next {
        let Allowed {
            req,
            msg,
            eval,
            mut outcome,
            ..
        } = a;
        let response = refuse(engine, &mut outcome, record, response);
        self.end(req, msg, Some(eval), outcome, None);
        Next::Respond(response)
    }
}

impl Limiting {
    /// The request and what the policies decided, while it waits.
    pub(super) fn allowed(&self) -> &Allowed {
        &self.allowed
    }

    /// It ends without an answer (an identity edit failed, the stream is torn down).
    pub(super) fn into_allowed(self) -> Allowed {
        self.allowed
    }
}

#[cfg(test)]
#[path = "limiter_tests.rs"]
mod tests;
