//! Rate limits in the flow (docs/semantics.md §8): an allowed request is charged every limit
//! that selects it before it goes upstream, or refused with 429 and none charged.

use std::rc::Rc;

use serde_json::json;

use crate::answer::{LocalResponse, Why};
use crate::cel_input::CelInput;
use crate::jsonrpc;
use crate::policy::{Engine, Reason};
use crate::ratelimit::store::{charge_all, Charge, Charged, CounterStore, StoreError};
use crate::ratelimit::{LimitsRecord, Selected, Where};
use crate::request::Request;

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

/// Charges the limits of `req`, which the policies allowed (`outcome` records them): the
/// 429 to answer instead when one has no room.
pub(super) fn charge_limits(
    engine: &Engine,
    req: &Request,
    store: Option<&CounterPort>,
    id: Option<&str>,
    outcome: &mut super::Outcome,
) -> Option<LocalResponse> {
    let (record, response) = charge(engine, req, store, id);
    let level = record
        .refused
        .as_ref()
        .and_then(|r| engine.rate_limits.0.iter().find(|l| &l.id == r))
        .map(|l| l.level());
    outcome.limits = record;
    let response = response?;
    outcome.reason = Why::Denied(Reason::RateLimited);
    outcome.level = level;
    outcome.status = Some(response.status);
    Some(response)
}

/// Charges `req`'s limits in `store`: the record, and the 429 to answer if one refused. No
/// store (or one that fails) refuses a request some limit selects: a limit is never skipped.
pub(super) fn charge(
    engine: &Engine,
    req: &Request,
    store: Option<&CounterPort>,
    id: Option<&str>,
) -> (LimitsRecord, Option<LocalResponse>) {
    let mut record = LimitsRecord::default();
    if engine.rate_limits.is_empty() {
        return (record, None);
    }
    let selected = selected(engine, req);
    let limits: Vec<_> = selected
        .iter()
        .filter_map(|s| engine.rate_limits.0.get(s.limit))
        .collect();
    record.charged = limits.iter().map(|l| l.id.clone()).collect();
    if limits.is_empty() {
        return (record, None);
    }
    let charges: Vec<Charge<'_>> = selected
        .iter()
        .zip(&limits)
        .map(|(s, l)| Charge {
            key: s.key,
            rates: &l.rates,
        })
        .collect();
    let Some(store) = store else {
        let first = limits.first().map(|l| l.id.clone()).unwrap_or_default();
        return refused(record, &first, None, (1, "rate_limiter_unavailable"), id);
    };
    match charge_all(store.0.as_ref(), &charges) {
        Charged::Allowed { evicted, .. } => {
            record.evicted = evicted;
            (record, None)
        }
        Charged::Refused { index, full } => {
            let l = limits.get(index);
            let name = l.map(|l| l.id.clone()).unwrap_or_default();
            let rate = l.and_then(|l| l.rates.get(full.rate)).copied();
            refused(record, &name, rate, (full.retry_after, "rate_limited"), id)
        }
        Charged::Failed { index, error } => {
            let name = limits.get(index).map(|l| l.id.clone()).unwrap_or_default();
            let why = match error {
                StoreError::Conflict => "rate_limiter_contended",
                StoreError::Failed(_) => "rate_limiter_unavailable",
            };
            refused(record, &name, None, (1, why), id)
        }
    }
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
fn refused(
    mut record: LimitsRecord,
    name: &str,
    rate: Option<mcp_access_bundle::Rate>,
    (retry_after, reason): (u64, &str),
    id: Option<&str>,
) -> (LimitsRecord, Option<LocalResponse>) {
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
    (record, Some(response))
}
