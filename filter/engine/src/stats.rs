//! The filter's metrics: a fixed set, so the host defines each once when the bundle loads and a
//! request only picks ids by index (no names formatted or hashed per request).

use mcp_access_bundle::Level;

use crate::answer::Why;
use crate::policy::{DryRunRecord, Engine};

/// A counter besides the per-denial ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Allowed,
    Denied,
    /// Callouts without a usable answer (not dispatched, no response, 1xx/5xx).
    CalloutErrors,
    /// Callouts the host could not dispatch.
    CalloutDispatchErrors,
    /// CEL condition evaluations that erred or were not boolean (counted against the caller).
    CelErrors,
    /// Of those, evaluations stopped by `limits.cel.maxSteps`.
    CelStepsExceeded,
    /// Pinned tools that listings showed with another definition than their pin's (each
    /// time one is seen).
    PinDrift,
    /// Requests allowed that the dry-run decision denies (docs/semantics.md §3.8).
    DryRunWouldDeny,
    /// Requests denied that the dry-run decision allows.
    DryRunWouldAllow,
    /// Authorizer calls answered from their policy's cache (docs/semantics.md §3.10).
    AuthzCacheHits,
    /// Calls of authorizers whose policy caches answers that the cache could not answer.
    AuthzCacheMisses,
    /// Listing answers (a JSON body, an SSE event) written from a filtering kept for the same
    /// upstream bytes and a caller judged alike, not filtered afresh (`listing::reuse`).
    ListingsReused,
    /// Local rate-limit buckets evicted to make room (docs/semantics.md §8.5).
    RateLimitEvicted,
    /// Requests the RateLimitService gave no usable answer for that a `failureMode: Deny`
    /// limit refused (docs/semantics.md §8.6).
    LimiterFailedRefused,
    /// Of those requests, the ones every limit's `failureMode: Allow` let through.
    LimiterFailedAllowed,
}

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; 15] = [
        Counter::Allowed,
        Counter::Denied,
        Counter::CalloutErrors,
        Counter::CalloutDispatchErrors,
        Counter::CelErrors,
        Counter::CelStepsExceeded,
        Counter::PinDrift,
        Counter::DryRunWouldDeny,
        Counter::DryRunWouldAllow,
        Counter::AuthzCacheHits,
        Counter::AuthzCacheMisses,
        Counter::ListingsReused,
        Counter::RateLimitEvicted,
        Counter::LimiterFailedRefused,
        Counter::LimiterFailedAllowed,
    ];

    /// Position in [`Counter::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn name(self) -> &'static str {
        match self {
            Counter::Allowed => "mcp_access.allowed",
            Counter::Denied => "mcp_access.denied",
            Counter::CalloutErrors => "mcp_access.callout.errors",
            Counter::CalloutDispatchErrors => "mcp_access.callout.dispatch_errors",
            Counter::CelErrors => "mcp_access.cel.errors",
            Counter::CelStepsExceeded => "mcp_access.cel.steps_exceeded",
            Counter::PinDrift => "mcp_access.pins.drift",
            Counter::DryRunWouldDeny => "mcp_access.dry_run.would_deny",
            Counter::DryRunWouldAllow => "mcp_access.dry_run.would_allow",
            Counter::AuthzCacheHits => "mcp_access.authz_cache.hits",
            Counter::AuthzCacheMisses => "mcp_access.authz_cache.misses",
            Counter::ListingsReused => "mcp_access.listings.reused",
            Counter::RateLimitEvicted => "mcp_access.ratelimit.evicted",
            Counter::LimiterFailedRefused => "mcp_access.ratelimit.limiter_failed.refused",
            Counter::LimiterFailedAllowed => "mcp_access.ratelimit.limiter_failed.allowed",
        }
    }
}

/// The counter of a request whose RateLimitService call gave no usable answer (None: it
/// gave one, or none was made): refused by a `failureMode: Deny` limit, or let through.
pub fn limiter_failed_counter(l: &crate::ratelimit::LimitsRecord) -> Option<Counter> {
    l.limiter_failed.as_ref()?;
    Some(if l.refused.is_some() {
        Counter::LimiterFailedRefused
    } else {
        Counter::LimiterFailedAllowed
    })
}

/// The counters of each rate limit, by [`crate::ratelimit::Limit::id`]:
/// `mcp_access.ratelimit.<namespace>/<policy>/<limit>.charged` (requests it let through and
/// counted) and `.refused` (requests it refused).
pub fn limit_counter_names(engine: &Engine) -> Vec<(String, [String; 2])> {
    engine
        .rate_limits
        .0
        .iter()
        .map(|l| {
            let names =
                ["charged", "refused"].map(|what| format!("mcp_access.ratelimit.{}.{what}", l.id));
            (l.id.clone(), names)
        })
        .collect()
}

/// The counters of one dry-run policy: `mcp_access.dry_run.policy.<namespace>/<name>.would_deny`
/// and `.would_allow`, for each of [`Engine::dry_run_policies`] in order (see
/// [`dry_run_counter`]).
pub fn dry_run_counter_names(engine: &Engine) -> Vec<String> {
    engine
        .dry_run_policies()
        .iter()
        .filter_map(|pid| engine.policies.get(*pid))
        .flat_map(|p| {
            ["would_deny", "would_allow"]
                .map(|what| format!("mcp_access.dry_run.policy.{}.{what}", p.id))
        })
        .collect()
}

/// The counters of each enforced policy and of each of its rules, counted for the policy
/// and rule that decide a request: `mcp_access.policy.<namespace>/<name>.allowed` /
/// `.denied`, and `mcp_access.policy.<namespace>/<name>.rule.<rule>.allowed` / `.denied`.
/// One entry per policy of [`Engine::policies`] (None: not enforced, never deciding), with
/// the [allowed, denied] names of the policy and of each of its rules in order
/// ([`crate::policy::RuleRef`] indexes both).
pub fn policy_counter_names(engine: &Engine) -> Vec<Option<PolicyCounterNames>> {
    let of = |at: String| ["allowed", "denied"].map(|what| format!("{at}.{what}"));
    engine
        .policies
        .iter()
        .map(|p| {
            // Decisions name the policy the user wrote (derived policies count there too).
            let id = p.name();
            p.mode.enforced().then(|| PolicyCounterNames {
                policy: of(format!("mcp_access.policy.{id}")),
                rules: p
                    .rules
                    .iter()
                    .flatten()
                    .map(|r| of(format!("mcp_access.policy.{id}.rule.{}", r.name)))
                    .collect(),
            })
        })
        .collect()
}

/// The [allowed, denied] counter names of one policy and of each of its rules.
pub struct PolicyCounterNames {
    pub policy: [String; 2],
    pub rules: Vec<[String; 2]>,
}

/// Index into [`dry_run_counter_names`] of what a dry-run record counts per policy.
pub fn dry_run_counter(record: &DryRunRecord) -> Option<usize> {
    let i = record.counter.filter(|_| record.changed)?;
    Some(i * 2 + usize::from(record.allowed))
}

/// The global counter a dry-run record counts in, if the dry-run decision differs.
pub fn dry_run_total(record: &DryRunRecord) -> Option<Counter> {
    match (record.changed, record.allowed) {
        (false, _) => None,
        (true, false) => Some(Counter::DryRunWouldDeny),
        (true, true) => Some(Counter::DryRunWouldAllow),
    }
}

/// The histogram of callout latencies in milliseconds.
pub const CALLOUT_LATENCY_MS: &str = "mcp_access.callout.latency_ms";

/// Levels a denial is counted under (`none`: before or outside the policy levels).
pub(crate) const LEVELS: [Option<Level>; 3] = [Some(Level::Gateway), Some(Level::Backend), None];

/// `mcp_access.denied.<level>.<reason>` for every level and reason ([`Why::DENIALS`]), in
/// index order: see [`denial_counter`].
pub fn denial_counter_names() -> Vec<String> {
    LEVELS
        .iter()
        .flat_map(|l| {
            Why::DENIALS
                .iter()
                .map(move |r| format!("mcp_access.denied.{}.{r}", Level::name(*l)))
        })
        .collect()
}

/// Index into [`denial_counter_names`] of a denial at `level` for `why` (see
/// [`crate::flow::Outcome`]); None for an allowed request.
pub fn denial_counter(level: Option<Level>, why: Why) -> Option<usize> {
    let level = LEVELS.iter().position(|l| *l == level)?;
    Some(level * Why::DENIALS.len() + why.denial_index()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::RejectionKind;
    use crate::policy::Reason;

    #[test]
    fn a_limiter_failure_counts_by_what_the_failure_mode_did() {
        use crate::ratelimit::LimitsRecord;
        let failed = |refused: Option<&str>| LimitsRecord {
            charged: vec!["ns/p/l".into()],
            refused: refused.map(str::to_string),
            limiter_failed: Some("no answer".into()),
            ..LimitsRecord::default()
        };
        assert_eq!(
            limiter_failed_counter(&failed(Some("ns/p/l"))),
            Some(Counter::LimiterFailedRefused)
        );
        assert_eq!(
            limiter_failed_counter(&failed(None)),
            Some(Counter::LimiterFailedAllowed)
        );
        // An answer (OVER_LIMIT refusing, or OK) is no failure.
        let answered = LimitsRecord {
            limiter_failed: None,
            ..failed(Some("ns/p/l"))
        };
        assert_eq!(limiter_failed_counter(&answered), None);
        assert_eq!(limiter_failed_counter(&LimitsRecord::default()), None);
    }

    #[test]
    fn names_are_unique_and_indexes_find_them() {
        let names = denial_counter_names();
        assert_eq!(names.len(), LEVELS.len() * Why::DENIALS.len());
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        let name = |level, reason| denial_counter(level, reason).and_then(|i| names.get(i));
        assert_eq!(
            name(
                Some(Level::Backend),
                Why::Denied(Reason::ExternalAuthDenied)
            )
            .map(String::as_str),
            Some("mcp_access.denied.backend.external_auth_denied")
        );
        assert_eq!(
            name(None, Why::Rejected(RejectionKind::BodyTooLarge)).map(String::as_str),
            Some("mcp_access.denied.none.body_too_large")
        );
        assert_eq!(name(None, Why::Allowed), None);
        // The names and their order, as the counters were first defined.
        let reasons: Vec<&str> = Why::DENIALS.iter().map(|w| w.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "unknown_listener",
                "unknown_backend",
                "external_auth_denied",
                "authorizer_error",
                "deny_policy",
                "not_allowed",
                "tool_not_pinned",
                "tool_drifted",
                "rate_limited",
                "invalid_path",
                "unsupported_encoding",
                "invalid_json",
                "unsupported_media_type",
                "invalid_content_length",
                "body_too_large",
                "invalid_request",
                "invalid_params",
                "header_mismatch",
                "unsupported_revision",
                "method_not_in_revision",
                "identity_headers_failed",
            ]
        );
        for (i, w) in Why::DENIALS.iter().enumerate() {
            assert_eq!(w.denial_index(), Some(i));
        }
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
        let counters: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            counters,
            [
                "mcp_access.allowed",
                "mcp_access.denied",
                "mcp_access.callout.errors",
                "mcp_access.callout.dispatch_errors",
                "mcp_access.cel.errors",
                "mcp_access.cel.steps_exceeded",
                "mcp_access.pins.drift",
                "mcp_access.dry_run.would_deny",
                "mcp_access.dry_run.would_allow",
                "mcp_access.authz_cache.hits",
                "mcp_access.authz_cache.misses",
                "mcp_access.listings.reused",
                "mcp_access.ratelimit.evicted",
                "mcp_access.ratelimit.limiter_failed.refused",
                "mcp_access.ratelimit.limiter_failed.allowed",
            ]
        );
    }
}
