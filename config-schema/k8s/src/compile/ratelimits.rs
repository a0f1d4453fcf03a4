//! RateLimitPolicies: each limit into the bundle's `rateLimits`, a Gateway's defaults and
//! overrides folded onto the XBackends behind it, and a policy that is not accepted into a
//! fail-closed stand-in (docs/semantics.md §8).

use std::collections::BTreeSet;

use super::{cond, reason, seniority_order, status, Ctx};
use crate::load::Item;
use crate::model::*;
use crate::refs::NsName;
use crate::types::*;
use mcp_access_bundle::{self as bundle, Level, RateLimitMode};

use super::effective::{listener_targets, ListenerKey};

/// What one accepted policy contributes.
struct Accepted {
    /// Its index in the report's `rate_limit_policies`.
    report: usize,
    block: Option<bundle::BlockKind>,
    level: Level,
    targets: Vec<bundle::PolicyTarget>,
    limits: Vec<bundle::RateLimit>,
}

impl Ctx<'_> {
    /// The bundle's rate limits, and the stand-ins (Deny policies) of the RateLimitPolicies
    /// that are not accepted.
    pub(super) fn rate_limits(&mut self) -> (Vec<bundle::RateLimit>, Vec<bundle::Policy>) {
        let m = self.m;
        let mut accepted = Vec::new();
        let mut standins = Vec::new();
        for (rank, i) in seniority_order(&m.rate_limits).into_iter().enumerate() {
            let Some(p) = m.rate_limits.get(i) else {
                continue;
            };
            let content = self.limits_of(p);
            let level = match p.spec.target_refs.as_deref().unwrap_or_default().first() {
                Some(r) if opt(&r.kind) == "Gateway" => Level::Gateway,
                _ => Level::Backend,
            };
            let mut conds = Vec::new();
            let mut targets = Vec::new();
            for (j, r) in p
                .spec
                .target_refs
                .as_deref()
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let tname = r.object_name(&p.meta.namespace);
                let section = r.section_name.clone();
                match self.find_target_of(r, &p.kind, &p.meta.namespace) {
                    Ok(t) => {
                        let c = match &content {
                            Ok(_) => cond(tname, section, reason::ACCEPTED, "limits counted"),
                            Err(msg) => cond(tname, section, reason::INVALID, msg.clone()),
                        };
                        conds.push(c);
                        targets.extend(t);
                    }
                    Err(refusal) => {
                        let msg = format!("spec.targetRefs[{j}]: {}", refusal.message);
                        if let Some((t, _)) = refusal.standin {
                            targets.extend(t);
                        }
                        self.report.unenforced.push(format!(
                            "{} {}: {tname}: {}: {msg}",
                            p.kind,
                            p.id(),
                            refusal.reason
                        ));
                        conds.push(cond(tname, section, refusal.reason, msg));
                    }
                }
            }
            let ok = conds.iter().all(|c| c.accepted);
            self.report
                .rate_limit_policies
                .push(status(p, Some(rank as u64 + 1), conds));
            let report = self.report.rate_limit_policies.len() - 1;
            match content {
                Ok(limits) if ok => accepted.push(Accepted {
                    report,
                    block: block_of(&p.spec),
                    level,
                    limits: limits
                        .into_iter()
                        .map(|l| bundle::RateLimit {
                            level,
                            targets: targets.clone(),
                            ..l
                        })
                        .collect(),
                    targets,
                }),
                // Fail closed: what a broken limit would have limited is denied.
                _ if !targets.is_empty() && !self.o.skip_rejected => {
                    standins.push(standin(p, level, targets));
                }
                _ => {}
            }
        }
        let overrides = self.fold_blocks(&mut accepted, &standins);
        (overrides, standins)
    }

    /// The limits of `p` as bundle limits without targets, or why it is not accepted.
    fn limits_of(&self, p: &Item<RateLimitPolicySpec>) -> Result<Vec<bundle::RateLimit>, String> {
        let s = &p.spec;
        let (field, limits) = match (&s.limits, &s.defaults, &s.overrides) {
            (Some(l), _, _) => ("spec.limits", l),
            (_, Some(b), _) => (
                "spec.defaults.limits",
                b.limits.as_ref().ok_or("spec.defaults.limits: required")?,
            ),
            (_, _, Some(b)) => (
                "spec.overrides.limits",
                b.limits.as_ref().ok_or("spec.overrides.limits: required")?,
            ),
            _ => return Err("spec: one of limits, defaults and overrides is required".into()),
        };
        let mode = match s.mode.as_deref() {
            Some("Global") => RateLimitMode::Global,
            _ => RateLimitMode::Local,
        };
        if mode == RateLimitMode::Global && self.o.rate_limit_service.is_none() {
            return Err("spec.mode: Global limits need a RateLimitService: pass `--rate-limit-service HOST:PORT` to mcp-access (or use mode Local)".into());
        }
        let failure_mode = match s.failure_mode.as_deref() {
            Some("Allow") => bundle::FailureMode::Allow,
            _ => bundle::FailureMode::Deny,
        };
        let cel = &self.settings.limits.cel;
        let mut out = Vec::new();
        for (name, l) in limits {
            let at = format!("{field}.{name}");
            let mut rates = Vec::new();
            for (i, r) in l.rates.as_deref().unwrap_or_default().iter().enumerate() {
                let w = opt(&r.window);
                let window_seconds = window_seconds(w)
                    .and_then(|x| u32::try_from(x).ok())
                    .filter(|x| *x <= bundle::MAX_WINDOW_SECONDS)
                    .ok_or_else(|| format!("{at}.rates[{i}].window: \"{w}\" is longer than 366d: use a shorter window"))?;
                if rates
                    .iter()
                    .any(|x: &bundle::Rate| x.window_seconds == window_seconds)
                {
                    return Err(format!("{at}.rates[{i}].window: another rate of this limit has the same window ({w}): keep the one with the smaller limit"));
                }
                let limit = u64::try_from(r.limit.unwrap_or(0)).unwrap_or(0);
                rates.push(bundle::Rate {
                    limit,
                    window_seconds,
                });
            }
            let mut counters = Vec::new();
            for (i, c) in l.counters.as_deref().unwrap_or_default().iter().enumerate() {
                let e = opt(&c.expression);
                mcp_access_cel::Counter::compile(e, cel)
                    .map_err(|err| format!("{at}.counters[{i}].expression: {err}"))?;
                counters.push(e.to_string());
            }
            let mut when = Vec::new();
            for (i, w) in l.when.as_deref().unwrap_or_default().iter().enumerate() {
                let e = opt(&w.predicate);
                mcp_access_cel::check(e, cel)
                    .map_err(|err| format!("{at}.when[{i}].predicate: {err}"))?;
                when.push(e.to_string());
            }
            out.push(bundle::RateLimit {
                namespace: p.meta.namespace.clone(),
                policy: p.meta.name.clone(),
                name: name.clone(),
                level: Level::Backend,
                targets: Vec::new(),
                listeners: Vec::new(),
                mode,
                failure_mode,
                rates,
                counters,
                when,
                origin: None,
            });
        }
        Ok(out)
    }

    /// The bundle's limits: a Gateway's defaults onto the XBackends behind it that no policy
    /// of their own limits, its overrides onto every XBackend behind it (the lower limits
    /// then not charged on its listeners where it reaches every XBackend they target).
    fn fold_blocks(
        &mut self,
        accepted: &mut [Accepted],
        standins: &[bundle::Policy],
    ) -> Vec<bundle::RateLimit> {
        // XBackends limited by a policy of their own (a stand-in counts: it fails closed).
        let own: BTreeSet<NsName> = accepted
            .iter()
            .filter(|a| a.block.is_none() && a.level == Level::Backend)
            .flat_map(|a| a.targets.iter())
            .chain(
                standins
                    .iter()
                    .filter(|s| s.level == Level::Backend)
                    .flat_map(|s| s.targets.iter()),
            )
            .map(|t| NsName::new(t.namespace.as_deref().unwrap_or_default(), &t.name))
            .collect();
        let all: Vec<ListenerKey> = self
            .topo
            .gateways
            .iter()
            .flat_map(|g| {
                g.listeners
                    .iter()
                    .map(|l| (g.namespace.clone(), g.name.clone(), l.name.clone()))
            })
            .collect();
        // Per override: its listeners and the XBackends behind them.
        let mut overridden: Vec<(BTreeSet<ListenerKey>, BTreeSet<NsName>, String)> = Vec::new();
        for a in accepted.iter_mut().filter(|a| a.block.is_some()) {
            let listeners = self.listeners_of(&a.targets);
            let behind = self.behind(&listeners);
            let id = self
                .report
                .rate_limit_policies
                .get(a.report)
                .map(|s| format!("{}/{}", s.namespace, s.name))
                .unwrap_or_default();
            let reached: BTreeSet<NsName> = match a.block {
                Some(bundle::BlockKind::Defaults) => behind.difference(&own).cloned().collect(),
                _ => behind.clone(),
            };
            let enforced = if reached.is_empty() {
                let why = match a.block {
                    Some(bundle::BlockKind::Defaults) if !behind.is_empty() => {
                        "every XBackend behind its listeners has a RateLimitPolicy of its own"
                    }
                    _ => "no XBackend is behind its listeners",
                };
                Enforcement {
                    status: false,
                    reason: "Overridden".into(),
                    message: why.into(),
                }
            } else {
                let names: Vec<String> = reached.iter().map(|b| b.to_string()).collect();
                Enforcement {
                    status: true,
                    reason: "Enforced".into(),
                    message: format!("charged on the requests to {}", names.join(", ")),
                }
            };
            self.set_enforced(a.report, |_| Some(enforced.clone()));
            let block = a.block;
            let origin = bundle::Origin {
                policy: format!("RateLimitPolicy {id}"),
                block,
                strategy: Some(bundle::Strategy::Atomic),
                note: String::new(),
            };
            let lt = listener_targets(&listeners);
            for l in &mut a.limits {
                l.level = Level::Backend;
                l.targets = reached
                    .iter()
                    .map(|b| super::route_targets::backend_target(b, None))
                    .collect();
                l.listeners = lt.clone();
                l.origin = Some(origin.clone());
            }
            if block == Some(bundle::BlockKind::Overrides) {
                overridden.push((listeners, behind, id));
            }
        }
        let mut out = Vec::new();
        for a in accepted.iter_mut() {
            if a.block.is_none() && a.level == Level::Backend {
                self.apply_overrides(a, &overridden, &all);
            }
            out.extend(a.limits.drain(..).filter(|l| !l.targets.is_empty()));
        }
        out
    }

    /// Narrows lower policy `a`'s limits to the listeners no override takes over.
    fn apply_overrides(
        &mut self,
        a: &mut Accepted,
        overridden: &[(BTreeSet<ListenerKey>, BTreeSet<NsName>, String)],
        all: &[ListenerKey],
    ) {
        let backends: BTreeSet<NsName> = a
            .targets
            .iter()
            .map(|t| NsName::new(t.namespace.as_deref().unwrap_or_default(), &t.name))
            .collect();
        // Listeners where an override reaches every XBackend this policy limits.
        let mut taken: BTreeSet<ListenerKey> = BTreeSet::new();
        let mut by = Vec::new();
        for (listeners, behind, id) in overridden {
            if backends.is_subset(behind) && !listeners.is_empty() {
                taken.extend(listeners.iter().cloned());
                by.push(id.clone());
            }
        }
        let enforced = if taken.is_empty() {
            Enforcement {
                status: true,
                reason: "Enforced".into(),
                message: "limits counted".into(),
            }
        } else {
            let left: BTreeSet<ListenerKey> = all
                .iter()
                .filter(|l| !taken.contains(*l))
                .cloned()
                .collect();
            let lt = listener_targets(&left);
            for l in &mut a.limits {
                l.listeners = lt.clone();
                if left.is_empty() {
                    l.targets.clear();
                }
            }
            let names: Vec<String> = taken
                .iter()
                .map(|(ns, g, l)| format!("{ns}/{g}/{l}"))
                .collect();
            if left.is_empty() {
                Enforcement {
                    status: false,
                    reason: "Overridden".into(),
                    message: format!(
                        "the overrides of {} replace these limits on every listener",
                        by.join(", ")
                    ),
                }
            } else {
                Enforcement {
                    status: true,
                    reason: "PartiallyEnforced".into(),
                    message: format!(
                        "the overrides of {} replace these limits on {}",
                        by.join(", "),
                        names.join(", ")
                    ),
                }
            }
        };
        self.set_enforced(a.report, |_| Some(enforced.clone()));
    }

    /// Sets the `enforced` condition of every accepted target of report entry `i`.
    fn set_enforced(&mut self, i: usize, f: impl Fn(&TargetStatus) -> Option<Enforcement>) {
        if let Some(s) = self.report.rate_limit_policies.get_mut(i) {
            for c in s.conditions.iter_mut().filter(|c| c.accepted) {
                c.enforced = f(c);
            }
        }
    }

    /// The listeners Gateway targets name (a whole Gateway: all its listeners).
    fn listeners_of(&self, targets: &[bundle::PolicyTarget]) -> BTreeSet<ListenerKey> {
        let mut out = BTreeSet::new();
        for t in targets {
            let ns = t.namespace.as_deref().unwrap_or_default();
            for g in self
                .topo
                .gateways
                .iter()
                .filter(|g| g.namespace == ns && g.name == t.name)
            {
                for l in &g.listeners {
                    if t.section_name.as_ref().is_none_or(|s| s == &l.name) {
                        out.insert((g.namespace.clone(), g.name.clone(), l.name.clone()));
                    }
                }
            }
        }
        out
    }

    /// The XBackends the routes of `listeners` forward to.
    fn behind(&self, listeners: &BTreeSet<ListenerKey>) -> BTreeSet<NsName> {
        let mut out = BTreeSet::new();
        for g in &self.topo.gateways {
            for l in &g.listeners {
                if !listeners.contains(&(g.namespace.clone(), g.name.clone(), l.name.clone())) {
                    continue;
                }
                for e in &l.routes {
                    if let RouteAction::Forward { clusters, .. } = &e.action {
                        out.extend(clusters.iter().filter_map(|c| c.backend.clone()));
                    }
                }
            }
        }
        out
    }
}

/// Which block a policy holds.
fn block_of(s: &RateLimitPolicySpec) -> Option<bundle::BlockKind> {
    if s.defaults.is_some() {
        Some(bundle::BlockKind::Defaults)
    } else if s.overrides.is_some() {
        Some(bundle::BlockKind::Overrides)
    } else {
        None
    }
}

/// The stand-in of a RateLimitPolicy that is not accepted: it denies every request at the
/// targets it resolved to (a limit that cannot be counted never lets requests through
/// uncounted).
fn standin(
    p: &Item<RateLimitPolicySpec>,
    level: Level,
    targets: Vec<bundle::PolicyTarget>,
) -> bundle::Policy {
    bundle::Policy {
        name: format!("{}.ratelimitpolicy.not-accepted", p.meta.name),
        namespace: p.meta.namespace.clone(),
        level,
        targets,
        action: bundle::Action::Deny,
        external_auth: None,
        seniority: 0,
        rules: None,
        when: Vec::new(),
        not_accepted: Some(format!(
            "RateLimitPolicy {} is not accepted (see its status): requests it would limit are denied",
            p.id()
        )),
        listeners: Vec::new(),
        origin: None,
        mode: bundle::PolicyMode::Enforce,
    }
}
