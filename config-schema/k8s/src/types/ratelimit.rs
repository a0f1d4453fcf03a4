//! `RateLimitPolicy` (group `mcp-access.io`): how often the callers of a Gateway, HTTPRoute or
//! XBackend may make the requests its limits select (docs/semantics.md §8). Kuadrant's
//! RateLimitPolicy shape; counters and predicates are CEL of the access policies' vocabulary.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{TargetRef, WhenCondition};

/// A window: a count and a unit (`s`, `m`, `h`, `d`).
pub(crate) const WINDOW: &str = r"^[1-9][0-9]{0,5}[smhd]$";

/// The CRD rule on a limits map: its names are DNS labels (they name counters and answers:
/// `namespace/policy/limit`).
fn limit_names_rules() -> serde_json::Value {
    serde_json::json!([{
        "rule": "self.all(name, name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(name) <= 63)",
        "message": "limit names must be DNS labels (lowercase letters, digits and '-', at most 63)"
    }])
}

/// `RateLimitPolicy.spec`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "[has(self.limits), has(self.defaults), has(self.overrides)].filter(x, x).size() == 1",
     "message": "exactly one of limits, defaults and overrides must be set"},
    {"rule": "(has(self.defaults) || has(self.overrides)) ? self.targetRefs.all(r, r.kind == 'Gateway') : true",
     "message": "defaults and overrides may only be set on a policy that targets Gateways"},
    {"rule": "has(self.failureMode) ? (has(self.mode) && self.mode == 'Global') : true",
     "message": "failureMode is only for mode Global"}
]))]
pub struct RateLimitPolicySpec {
    /// Gateways (optionally one listener), HTTPRoutes or XBackends, all of one kind.
    #[schemars(required, length(min = 1, max = 10), extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"rule": "self.all(ref, ref.kind == self[0].kind)",
                                       "message": "All targetRefs must have the same Kind"}]))]
    pub(crate) target_refs: Option<Vec<TargetRef>>,
    /// `Local` (default): this Envoy's counters; `Global`: the RateLimitService
    /// (`mcp-access envoy --rate-limit-service`), shared by every Envoy using it.
    #[schemars(extend("enum" = ["Local", "Global"]))]
    pub(crate) mode: Option<String>,
    /// `Global` only: what an unreachable limiter or a malformed answer means: `Deny`
    /// (default) or `Allow`.
    #[schemars(extend("enum" = ["Deny", "Allow"]))]
    pub(crate) failure_mode: Option<String>,
    /// The limits, by name (a DNS label).
    #[schemars(extend("maxProperties" = 16, "x-kubernetes-validations" = limit_names_rules()))]
    pub(crate) limits: Option<BTreeMap<String, LimitSpec>>,
    /// On Gateways only: limits for every XBackend behind the Gateway that no
    /// RateLimitPolicy of its own (on it or on an HTTPRoute to it) limits.
    pub(crate) defaults: Option<LimitsBlock>,
    /// On Gateways only: limits for every XBackend behind the Gateway, which replace the
    /// limits of its own RateLimitPolicies there.
    pub(crate) overrides: Option<LimitsBlock>,
}

/// A defaults or overrides block.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LimitsBlock {
    /// `atomic` (the only strategy): the block's limits as one set.
    #[schemars(extend("enum" = ["atomic"]))]
    pub(crate) strategy: Option<String>,
    /// The limits, by name (a DNS label).
    #[schemars(required, extend("minProperties" = 1, "maxProperties" = 16, "x-kubernetes-validations" = limit_names_rules()))]
    pub(crate) limits: Option<BTreeMap<String, LimitSpec>>,
}

/// One limit.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LimitSpec {
    /// At most `limit` requests per `window`, for each rate; a request passes while every
    /// rate has room.
    #[schemars(required, length(min = 1, max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) rates: Option<Vec<RateSpec>>,
    /// CEL expressions (a string, number or bool) whose values name the bucket a request is
    /// counted in (omitted: one bucket). An error or no value counts the request under the
    /// limit's one "unidentified" bucket.
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) counters: Option<Vec<CounterSpec>>,
    /// CEL predicates, all of which must hold for the limit to count the request.
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) when: Option<Vec<WhenCondition>>,
}

/// `limit` requests per `window`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RateSpec {
    /// 1 to 2^31.
    #[schemars(required, range(min = 1, max = 2147483648i64))]
    pub(crate) limit: Option<i64>,
    /// `Ns`, `Nm`, `Nh` or `Nd`, at most 366 days.
    #[schemars(required, pattern(WINDOW))]
    pub(crate) window: Option<String>,
}

/// A counter: a CEL expression over the request.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CounterSpec {
    /// E.g. `source.principal`, `jwt.claims.sub`, `request.mcp.tool_name`.
    #[schemars(required, length(min = 1, max = 4096))]
    pub(crate) expression: Option<String>,
}

/// A window's length in seconds (None: not `Ns|Nm|Nh|Nd`).
pub(crate) fn window_seconds(w: &str) -> Option<u64> {
    let unit = match w.bytes().last()? {
        b's' => 1,
        b'm' => 60,
        b'h' => 3600,
        b'd' => 86_400,
        _ => return None,
    };
    let n: u64 = w.get(..w.len().checked_sub(1)?)?.parse().ok()?;
    n.checked_mul(unit)
}
