//! The checks of the bundle's rate limits and its RateLimitService.

use std::collections::HashSet;

use mcp_access_cel::{Counter, Program};

use super::*;
use crate::ratelimit::*;

/// One rate limit's compiled CEL: its counters and its `when`.
#[derive(Debug, Default)]
pub struct LimitConditions {
    pub counters: Vec<Counter>,
    pub when: Vec<Program>,
}

impl Validator {
    pub(super) fn rate_limits(&mut self, b: &Bundle, backends: &HashSet<(&str, &str)>) {
        let mut seen = HashSet::new();
        for (i, l) in b.rate_limits.iter().enumerate() {
            let at = format!("rateLimits[{i}]");
            self.rate_limit(b, backends, &at, l);
            self.check(
                seen.insert((l.namespace.as_str(), l.policy.as_str(), l.name.as_str())),
                || format!("{at}.name"),
                format!("duplicate rate limit {}", l.id()),
            );
        }
        if let Some(s) = &b.rate_limit_service {
            self.check(
                !s.cluster.is_empty(),
                || "rateLimitService.cluster".into(),
                "must name an Envoy cluster",
            );
            self.check(
                (1..=60_000).contains(&s.timeout_ms),
                || "rateLimitService.timeoutMs".into(),
                "must be between 1 and 60000",
            );
            self.check(
                !s.domain.is_empty() && s.domain.len() <= 253,
                || "rateLimitService.domain".into(),
                "must be 1 to 253 characters",
            );
        }
    }

    fn rate_limit(
        &mut self,
        b: &Bundle,
        backends: &HashSet<(&str, &str)>,
        at: &str,
        l: &RateLimit,
    ) {
        self.name(&format!("{at}.namespace"), &l.namespace);
        self.name(&format!("{at}.policy"), &l.policy);
        self.name(&format!("{at}.name"), &l.name);
        self.check(
            !l.targets.is_empty(),
            || format!("{at}.targets"),
            "a rate limit needs at least one target",
        );
        self.policy_targets(b, backends, at, (l.level, &l.namespace, &l.targets));
        self.listeners(b, at, (l.level, &l.namespace, &l.listeners));
        self.check(
            l.mode == RateLimitMode::Local || b.rate_limit_service.is_some(),
            || format!("{at}.mode"),
            "a Global limit needs rateLimitService (mcp-access envoy --rate-limit-service HOST:PORT)",
        );
        self.check(
            (1..=MAX_RATES).contains(&l.rates.len()),
            || format!("{at}.rates"),
            format!("a limit needs 1 to {MAX_RATES} rates"),
        );
        let mut windows = HashSet::new();
        for (j, r) in l.rates.iter().enumerate() {
            self.check(
                (1..=MAX_RATE_LIMIT).contains(&r.limit),
                || format!("{at}.rates[{j}].limit"),
                format!("must be between 1 and {MAX_RATE_LIMIT}"),
            );
            self.check(
                (1..=MAX_WINDOW_SECONDS).contains(&r.window_seconds),
                || format!("{at}.rates[{j}].windowSeconds"),
                format!("must be between 1 and {MAX_WINDOW_SECONDS} (366 days)"),
            );
            self.check(
                windows.insert(r.window_seconds),
                || format!("{at}.rates[{j}].windowSeconds"),
                "two rates of one limit have this window: keep the smaller limit",
            );
        }
        self.check(
            l.counters.len() <= MAX_COUNTERS,
            || format!("{at}.counters"),
            format!("at most {MAX_COUNTERS} counters"),
        );
        let counters = l
            .counters
            .iter()
            .enumerate()
            .filter_map(|(j, c)| self.counter(|| format!("{at}.counters[{j}]"), c))
            .collect();
        let when = self.when(&format!("{at}.when"), &l.when);
        self.limit_conditions
            .push(LimitConditions { counters, when });
    }

    /// A counter expression at bundle path `at()`, compiled as the engine runs it.
    fn counter(&mut self, at: impl FnOnce() -> String, source: &str) -> Option<Counter> {
        if source.trim().is_empty() {
            self.fail(at(), "must be a CEL expression, not empty");
            return None;
        }
        match Counter::compile(source, self.cel_limits.as_ref()?) {
            Ok(c) => Some(c),
            Err(e) => {
                self.fail(at(), e.to_string());
                None
            }
        }
    }
}
