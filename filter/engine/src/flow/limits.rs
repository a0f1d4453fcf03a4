//! Rate limits in the flow (docs/semantics.md §8): an allowed request is charged every limit
//! that selects it before it goes upstream, or refused with 429 and none charged.

use std::rc::Rc;

use serde_json::json;

use crate::answer::{LocalResponse, Why};
use crate::cel_input::CelInput;
use crate::jsonrpc;
use crate::policy::{Engine, Reason};
use crate::ratelimit::store::{charge_all, Charge, Charged, CounterStore, StoreError};
use crate::ratelimit::{Limit, LimitsRecord, Selected, Where};
use crate::request::Request;
use mcp_access_bundle::RateLimitMode;

/// The JSON-RPC code of a rate-limited request: ToolHive's, outside the ranges JSON-RPC
/// (-32768..-32000) and MCP reserve.
pub const RATE_LIMITED_CODE: i32 = 429;

/// The host's counter store as the flow holds it.
#[derive(Clone)]
pub(super) struct CounterPort(pub(super) Rc<dyn CounterStore>);

impl std::fmt::Debug for CounterPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CounterPort")
    }
}

impl super::RequestFlow {
    /// This flow charges Local rate limits in `store` (without one, a request a limit
    /// selects is refused).
    pub fn with_counter_store(mut self, store: Rc<dyn CounterStore>) -> Self {
        self.stores.counters = Some(CounterPort(store));
        self
    }
}

/// What charging an allowed request's limits came to.
pub(super) enum Limited {
    /// Every limit had room (or none selects the request).
    Passed,
    /// Refused with this 429 (nothing charged).
    Refused(LocalResponse),
    /// Its Local limits were charged; its Global ones are to be asked.
    Ask(Pending),
}

/// A request's Global limits to ask about, and its Local charges to take back if refused.
#[derive(Debug)]
pub(super) struct Pending {
    /// The Global limits, in descriptor order, with their buckets.
    pub(super) global: Vec<Selected>,
    /// The Local buckets charged: (limit index, bucket key).
    pub(super) local: Vec<(usize, [u8; 32])>,
    /// When they were charged (s since the epoch).
    pub(super) charged_at: u64,
}

/// Charges the limits of `req`, which the policies allowed (`outcome` records them).
pub(super) fn charge_limits(
    engine: &Engine,
    req: &Request,
    store: Option<&CounterPort>,
    id: Option<&str>,
    outcome: &mut super::Outcome,
) -> Limited {
    match charge(engine, req, store, id) {
        Charging::Done(record, None) => {
            outcome.limits = record;
            Limited::Passed
        }
        Charging::Done(record, Some(response)) => {
            Limited::Refused(refuse(engine, outcome, record, response))
        }
        Charging::Ask(record, asking) => {
            outcome.limits = record;
            Limited::Ask(asking)
        }
    }
}

/// `outcome` of a request its limits refused with `response`, recorded in `record`.
pub(super) fn refuse(
    engine: &Engine,
    outcome: &mut super::Outcome,
    record: LimitsRecord,
    response: LocalResponse,
) -> LocalResponse {
    outcome.level = record
        .refused
        .as_ref()
        .and_then(|r| engine.rate_limits.0.iter().find(|l| &l.id == r))
        .map(|l| l.level());
    outcome.limits = record;
    outcome.reason = Why::Denied(Reason::RateLimited);
    outcome.status = Some(response.status);
    response
}

/// What [`charge`] did.
pub(super) enum Charging {
    /// Decided: the record, and the 429 to answer if a limit refused.
    Done(LimitsRecord, Option<LocalResponse>),
    /// The Local limits were charged; the Global ones are to be asked.
    Ask(LimitsRecord, Pending),
}

/// Charges `req`'s Local limits in `store` and makes the RateLimitService call of its Global
/// ones (docs/semantics.md §8.4). No store (or one that fails) refuses a request some Local
/// limit selects: a limit is never skipped. A Local refusal asks no Global limit.
pub(super) fn charge(
    engine: &Engine,
    req: &Request,
    store: Option<&CounterPort>,
    id: Option<&str>,
) -> Charging {
    let mut record = LimitsRecord::default();
    if engine.rate_limits.is_empty() {
        return Charging::Done(record, None);
    }
    let selected: Vec<(&Limit, Selected)> = selected(engine, req)
        .into_iter()
        .filter_map(|s| Some((engine.rate_limits.0.get(s.limit)?, s)))
        .collect();
    record.charged = selected.iter().map(|(l, _)| l.id.clone()).collect();
    let (global, local): (Vec<_>, Vec<_>) = selected
        .into_iter()
        .partition(|(l, _)| l.mode == RateLimitMode::Global);
    let mut charged_at = 0;
    if !local.is_empty() {
        let charges: Vec<Charge<'_>> = local
            .iter()
            .map(|(l, s)| Charge {
                key: s.key,
                rates: &l.rates,
            })
            .collect();
        let Some(store) = store else {
            let first = local.first().map(|(l, _)| l.id.clone()).unwrap_or_default();
            let why = (1, "rate_limiter_unavailable");
            let (r, resp) = refused(record, &first, None, why, id);
            return Charging::Done(r, Some(resp));
        };
        match charge_all(store.0.as_ref(), &charges) {
            Charged::Allowed { evicted, at, .. } => {
                record.evicted = evicted;
                charged_at = at;
            }
            Charged::Refused { index, full } => {
                let l = local.get(index).map(|(l, _)| *l);
                let name = l.map(|l| l.id.clone()).unwrap_or_default();
                let rate = l.and_then(|l| l.rates.get(full.rate)).copied();
                let (r, resp) =
                    refused(record, &name, rate, (full.retry_after, "rate_limited"), id);
                return Charging::Done(r, Some(resp));
            }
            Charged::Failed { index, error } => {
                let name = local
                    .get(index)
                    .map(|(l, _)| l.id.clone())
                    .unwrap_or_default();
                let why = match error {
                    StoreError::Conflict => "rate_limiter_contended",
                    StoreError::Failed(_) => "rate_limiter_unavailable",
                };
                let (r, resp) = refused(record, &name, None, (1, why), id);
                return Charging::Done(r, Some(resp));
            }
        }
    }
    if global.is_empty() {
        return Charging::Done(record, None);
    }
    let pending = Pending {
        global: global.into_iter().map(|(_, s)| s).collect(),
        local: local.iter().map(|(_, s)| (s.limit, s.key)).collect(),
        charged_at,
    };
    Charging::Ask(record, pending)
}

/// The limits `req` is charged, each with its bucket: what the filter charges and `explain`
/// shows.
pub fn selected(engine: &Engine, req: &Request) -> Vec<Selected> {
    let backend = req.target.backend.and_then(|b| engine.backends.get(b));
    let input = CelInput {
        req,
        host: &req.host,
        backend: backend.map(|b| b.id.as_str()),
        trust_domain: engine.settings.identity.trust_domain.as_deref(),
        pins: backend.and_then(|b| b.pins.as_deref()),
    };
    let at = Where {
        listener: req.target.listener,
        backend: req.target.backend,
        recognised: engine
            .recognise(req.route_name.as_deref(), req.cluster_name.as_deref())
            .map(|(_, name)| name),
    };
    engine.rate_limits.select(at, &input)
}

/// The 429 of a request limit `name` refused: `Retry-After`, the IETF `RateLimit-Policy` and
/// `RateLimit` headers of the rate without room, and a JSON-RPC error whose `data` names the
/// limit.
pub(super) fn refused(
    mut record: LimitsRecord,
    name: &str,
    rate: Option<mcp_access_bundle::Rate>,
    (retry_after, reason): (u64, &str),
    id: Option<&str>,
) -> (LimitsRecord, LocalResponse) {
    record.refused = Some(name.to_string());
    let data = json!({"reason": reason, "limit": name, "retryAfter": retry_after});
    let body = jsonrpc::error(id, RATE_LIMITED_CODE, "Rate limit exceeded", Some(data));
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("retry-after".to_string(), retry_after.to_string()),
    ];
    if let Some(r) = rate {
        headers.push((
            "ratelimit-policy".into(),
            format!("\"{name}\";q={};w={}", r.limit, r.window_seconds),
        ));
        headers.push((
            "ratelimit".into(),
            format!("\"{name}\";r=0;t={retry_after}"),
        ));
    }
    let response = LocalResponse {
        status: 429,
        headers,
        body,
    };
    (record, response)
}
