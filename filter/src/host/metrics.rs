//! The filter's metrics: the counters every bundle has, defined once per VM, and the loaded
//! bundle's own (per policy and rule, per dry-run policy).

use std::collections::HashMap;

use mcp_access_engine::policy::{Engine, RuleRef};
use mcp_access_engine::stats::{self, Counter};

use super::abi;

/// Metric ids, defined once per VM when the bundle loads (None: the host refused one).
pub(super) struct Stats {
    pub(super) counters: [Option<u32>; Counter::ALL.len()],
    /// Indexed as [`stats::denial_counter_names`].
    pub(super) denied: Vec<Option<u32>>,
    pub(super) latency: Option<u32>,
    /// A gauge: 1 when this VM signs its receipts' checkpoints ([`RECEIPTS_SIGNED`]).
    pub(super) receipts_signed: Option<u32>,
}

/// 1 when this VM signs its checkpoints, 0 when it has no key or writes no chain.
pub(super) const RECEIPTS_SIGNED: &str = "mcp_access.receipts.signed";

impl Stats {
    pub(super) fn define() -> Stats {
        Stats {
            counters: Counter::ALL.map(|c| abi::define_metric(abi::METRIC_COUNTER, c.name())),
            denied: stats::denial_counter_names()
                .iter()
                .map(|n| abi::define_metric(abi::METRIC_COUNTER, n))
                .collect(),
            latency: abi::define_metric(abi::METRIC_HISTOGRAM, stats::CALLOUT_LATENCY_MS),
            receipts_signed: abi::define_metric(abi::METRIC_GAUGE, RECEIPTS_SIGNED),
        }
    }

    pub(super) fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n` (none: no call) to counter `c`.
    pub(super) fn add(&self, c: Counter, n: u32) {
        if let (true, Some(id)) = (n > 0, self.counters.get(c.index()).copied().flatten()) {
            abi::increment_metric(id, i64::from(n));
        }
    }
}

pub(super) fn increment(id: Option<u32>) {
    if let Some(id) = id {
        abi::increment_metric(id, 1);
    }
}

/// Metric ids of the loaded bundle's own counters (its policies' and rules', its dry-run
/// policies'), defined when a bundle loads; a name defined for an earlier bundle keeps its id.
pub(super) struct BundleStats {
    /// Indexed as [`stats::dry_run_counter_names`].
    pub(super) dry_run: Vec<Option<u32>>,
    /// By deciding policy ([`RuleRef::policy`]): its [allowed, denied], and those of each of
    /// its rules ([`stats::policy_counter_names`]).
    policies: Vec<PolicyCounters>,
    /// By rate limit id: its [charged, refused] ([`stats::limit_counter_names`]).
    limits: HashMap<String, [Option<u32>; 2]>,
}

/// The [allowed, denied] counters of a policy, and of each of its rules by position.
#[derive(Default)]
struct PolicyCounters {
    policy: [Option<u32>; 2],
    rules: Vec<[Option<u32>; 2]>,
}

impl BundleStats {
    pub(super) fn define(engine: &Engine, known: &mut HashMap<String, Option<u32>>) -> BundleStats {
        let mut counter = |n: &String| match known.get(n) {
            Some(id) => *id,
            None => {
                let id = abi::define_metric(abi::METRIC_COUNTER, n);
                known.insert(n.clone(), id);
                id
            }
        };
        let dry_run = stats::dry_run_counter_names(engine)
            .iter()
            .map(&mut counter)
            .collect();
        let policies = stats::policy_counter_names(engine)
            .into_iter()
            .map(|names| match names {
                None => PolicyCounters::default(),
                Some(n) => PolicyCounters {
                    policy: n.policy.each_ref().map(&mut counter),
                    rules: n
                        .rules
                        .iter()
                        .map(|r| r.each_ref().map(&mut counter))
                        .collect(),
                },
            })
            .collect();
        let limits = stats::limit_counter_names(engine)
            .into_iter()
            .map(|(id, names)| (id, names.each_ref().map(&mut counter)))
            .collect();
        BundleStats {
            dry_run,
            policies,
            limits,
        }
    }

    /// Counts the rate limits of a decision: each charged (when none refused), or the one
    /// that refused.
    pub(super) fn count_limits(&self, l: &mcp_access_engine::ratelimit::LimitsRecord) {
        match &l.refused {
            Some(r) => increment(self.limits.get(r).and_then(|ids| ids[1])),
            None => {
                for id in &l.charged {
                    increment(self.limits.get(id).and_then(|ids| ids[0]));
                }
            }
        }
    }

    /// Counts a decision for its deciding policy and rule.
    pub(super) fn count(&self, by: Option<RuleRef>, allowed: bool) {
        let at = usize::from(!allowed);
        let Some((r, ids)) = by.and_then(|r| Some((r, self.policies.get(r.policy)?))) else {
            return;
        };
        increment(ids.policy.get(at).copied().flatten());
        let rule = r.rule.and_then(|i| ids.rules.get(i));
        increment(rule.and_then(|ids| ids.get(at).copied().flatten()));
    }
}
