//! The rate limits a request is charged (docs/semantics.md §8), as `explain` shows them: the
//! filter's own selection (`flow::selected_limits`) and buckets, each Local bucket assumed to
//! have room (`under`, the default) or none (`--assume ns/policy/limit=over`), and the
//! filter's own charging then run against those buckets.

use std::collections::BTreeMap;

use mcp_access_bundle::{Bundle, Rate, RateLimitMode};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::ratelimit::store::{self, Charge, MemoryCounterStore};
use mcp_access_engine::ratelimit::Selected;
use mcp_access_engine::receipts::hex;
use serde::Serialize;

use crate::error::CliError;

/// What a limit's bucket is assumed to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitAssumption {
    /// Room for the request.
    Under,
    /// No room: the request is refused.
    Over,
}

impl LimitAssumption {
    /// `over` or `under`; None for anything else.
    pub fn parse(s: &str) -> Option<LimitAssumption> {
        match s {
            "over" => Some(LimitAssumption::Over),
            "under" => Some(LimitAssumption::Under),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            LimitAssumption::Under => "under",
            LimitAssumption::Over => "over",
        }
    }
}

/// A limit's bucket key: the value of each counter, or the one "unidentified" bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeyView {
    Values(Vec<String>),
    Unidentified(&'static str),
}

/// One limit the request is charged.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitView {
    /// `namespace/policy/limit`.
    pub limit: String,
    pub mode: RateLimitMode,
    pub rates: Vec<Rate>,
    /// The counter expressions, in order.
    pub counters: Vec<String>,
    /// Their values for this request, or `unidentified` (one errs or has no value).
    pub key: KeyView,
    /// SHA-256 of the limit's definition: while it is unchanged, a reload keeps its counts.
    pub digest: String,
    /// The bucket (SHA-256 of the digest and the key) and the store slot it is kept in.
    pub bucket: String,
    pub slot: u32,
    /// `under` (room) or `over` (none), and whether an `--assume` said so.
    pub assumed: &'static str,
    pub given: bool,
}

/// Every `--assume` key with `over`/`under` must name a limit of the bundle.
pub(super) fn check(
    engine: &Engine,
    assume: &BTreeMap<String, LimitAssumption>,
) -> Result<(), CliError> {
    let ids: Vec<&str> = engine.rate_limits.0.iter().map(|l| l.id.as_str()).collect();
    for key in assume.keys() {
        if !ids.contains(&key.as_str()) {
            let known = if ids.is_empty() {
                "the bundle has no rate limits".to_string()
            } else {
                format!("its limits: {}", ids.join(", "))
            };
            return Err(format!(
                "--assume {key}: no rate limit of that name (NAMESPACE/POLICY/LIMIT); {known}"
            )
            .into());
        }
    }
    Ok(())
}

/// The limits a request is charged (`selected`: the filter's selection), as assumed; and
/// notes on assumptions that concern none of them.
pub(super) fn views(
    engine: &Engine,
    bundle: &Bundle,
    selected: &[Selected],
    assume: &BTreeMap<String, LimitAssumption>,
) -> (Vec<LimitView>, Vec<String>) {
    let mut out = Vec::new();
    for s in selected {
        let Some(l) = engine.rate_limits.0.get(s.limit) else {
            continue;
        };
        let given = assume.get(&l.id).copied();
        out.push(LimitView {
            limit: l.id.clone(),
            mode: l.mode,
            rates: l.rates.clone(),
            counters: bundle
                .rate_limits
                .iter()
                .find(|b| b.id() == l.id)
                .map(|b| b.counters.clone())
                .unwrap_or_default(),
            key: match &s.values {
                Some(v) => KeyView::Values(v.clone()),
                None => KeyView::Unidentified("unidentified"),
            },
            digest: hex(&l.digest),
            bucket: hex(&s.key),
            slot: store::slot_number(&s.key),
            assumed: given.unwrap_or(LimitAssumption::Under).as_str(),
            given: given.is_some(),
        });
    }
    let notes = assume
        .keys()
        .filter(|k| !out.iter().any(|v| &v.limit == *k))
        .map(|k| format!("--assume {k}: this request is not charged that limit: the assumption changes nothing"))
        .collect();
    (out, notes)
}

/// A store holding the buckets of `selected` as `assume` says, at `now_ns`.
pub(super) fn assumed_store(
    engine: &Engine,
    selected: &[Selected],
    assume: &BTreeMap<String, LimitAssumption>,
    now_ns: u64,
) -> MemoryCounterStore {
    let buckets: Vec<_> = selected
        .iter()
        .filter_map(|s| {
            let l = engine.rate_limits.0.get(s.limit)?;
            let charge = Charge {
                key: s.key,
                rates: &l.rates,
            };
            Some((charge, assume.get(&l.id) == Some(&LimitAssumption::Over)))
        })
        .collect();
    store::assumed(now_ns, &buckets)
}
