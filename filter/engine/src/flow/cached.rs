//! Authorizer calls answered from the host's answer store (docs/semantics.md §3.10), and the
//! answers kept there.

use std::rc::Rc;

use super::{Callout, Deciding, Reports, RequestFlow, Stores};
use crate::authz_cache::{self, AnswerPort, AnswerStore, CacheKey, Kept};
use crate::callout::{CacheUse, CalloutReport};
use crate::policy::{AuthzOutcome, Engine};

impl RequestFlow {
    /// This flow reuses authorizer answers kept in `store` and keeps new ones there, for the
    /// policies that declare a cache (without one, every call goes to its authorizer).
    pub fn with_answer_store(mut self, store: Rc<dyn AnswerStore>) -> Self {
        self.stores.answers = Some(AnswerPort(store));
        self
    }
}

impl Deciding {
    /// Completes the callouts whose answers the store keeps (by the key read off each
    /// callout's request); returns the others, and whether any was answered so.
    pub(super) fn answer_from_cache(
        &mut self,
        engine: &Engine,
        callouts: Vec<(Callout, Option<CacheKey>)>,
        stores: &Stores,
        reports: &mut Reports,
    ) -> (Vec<Callout>, bool) {
        let mut rest = Vec::with_capacity(callouts.len());
        let mut answered = false;
        for (c, key) in callouts {
            let (Some(port), Some(key)) = (&stores.answers, key) else {
                rest.push(c);
                continue;
            };
            match authz_cache::lookup(port.0.as_ref(), &key) {
                Some(kept) => {
                    let name = c.call.authorizer(engine).map_or("?", |a| a.name.as_str());
                    let mut report = CalloutReport::of(name, None, &kept.outcome, None);
                    report.cache = Some(CacheUse::Hit);
                    let slot = c.call.slot;
                    let dry_run_only = self.eval.dry_run_only(slot);
                    report.metadata = kept.metadata.filter(|_| !dry_run_only);
                    reports.push(report);
                    self.inflight.cached.push(name.to_string());
                    self.eval.complete(slot, kept.outcome);
                    answered = true;
                }
                None => {
                    self.inflight.cache_keys.push((c.call.slot, key));
                    rest.push(c);
                }
            }
        }
        (rest, answered)
    }

    /// The authorizer's answer for `slot` arrived: kept when its policy caches it and it is
    /// one the cache keeps (never an error). Returns whether the call was a cache miss.
    pub(super) fn keep_answer(
        &mut self,
        engine: &Engine,
        slot: usize,
        outcome: &AuthzOutcome,
        metadata: Option<&String>,
        stores: &Stores,
    ) -> bool {
        let keys = &mut self.inflight.cache_keys;
        let Some(pos) = keys.iter().position(|(s, _)| *s == slot) else {
            return false;
        };
        let (_, key) = keys.swap_remove(pos);
        let a = self.authorizer_of(engine, slot);
        if let (Some(port), Some(a)) = (&stores.answers, a) {
            if a.cache
                .as_ref()
                .is_some_and(|c| authz_cache::keeps(c, outcome))
            {
                let kept = Kept {
                    outcome: outcome.clone(),
                    metadata: metadata.cloned(),
                };
                authz_cache::store(port.0.as_ref(), a, &key, &kept);
            }
        }
        true
    }
}
