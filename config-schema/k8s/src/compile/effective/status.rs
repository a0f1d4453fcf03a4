//! What the blocks did, as the `Enforced` conditions of the policies and as the effective
//! policy of each (listener, backend).

use std::collections::BTreeSet;

use super::{BlockPolicy, Effects, ListenerKey};
use crate::compile::Ctx;
use crate::model::*;
use mcp_access_bundle::{self as bundle, Action, Level};

fn enforcement(status: bool, reason: &str, message: String) -> Option<Enforcement> {
    Some(Enforcement {
        status,
        reason: reason.to_string(),
        message,
    })
}

/// What the blocks did per (backend, listener).
type AllEffects = [(String, ListenerKey, Effects)];

impl Ctx<'_> {
    /// The `Enforced` conditions of block policies and of the Backend-level policies they
    /// meet.
    pub(super) fn block_statuses(&mut self, blocks: &[&BlockPolicy]) {
        let effects = self.effects.clone();
        let objects: Vec<String> = blocks.iter().map(|b| b.object.clone()).collect();
        let bundle_ids: Vec<(usize, String)> = self
            .report
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                let p = self.m.policies.iter().find(|p| {
                    p.kind == st.kind && p.meta.namespace == st.namespace && p.meta.name == st.name
                })?;
                Some((i, format!("{}/{}", p.meta.namespace, self.bundle_name(p))))
            })
            .collect();
        for (i, bid) in bundle_ids {
            let Some(st) = self.report.policies.get_mut(i) else {
                continue;
            };
            let object = format!("{} {}/{}", st.kind, st.namespace, st.name);
            let is_block = objects.contains(&object);
            for c in st.conditions.iter_mut().filter(|c| c.accepted) {
                if is_block {
                    c.enforced = block_enforced(&effects, c, &object);
                    continue;
                }
                let Some(backend) = c.target.strip_prefix("XBackend ") else {
                    continue;
                };
                if let Some(e) = lower_enforced(&effects, backend, &bid) {
                    c.enforced = e;
                }
            }
        }
    }
}

/// Whether block policy `object` took effect at its target `c` (a Gateway, or a listener).
fn block_enforced(effects: &AllEffects, c: &TargetStatus, object: &str) -> Option<Enforcement> {
    let gw = c
        .target
        .strip_prefix("Gateway ")
        .unwrap_or_default()
        .to_string();
    let mine: Vec<&Effects> = effects
        .iter()
        .filter(|(_, (ns, g, l), _)| {
            format!("{ns}/{g}") == gw && c.section_name.as_ref().is_none_or(|s| s == l)
        })
        .map(|(_, _, fx)| fx)
        .collect();
    let errors: Vec<String> = mine
        .iter()
        .filter_map(|fx| fx.condition_errors.get(object).cloned())
        .collect();
    let mut msg = if mine.iter().any(|fx| fx.applied.contains(object)) {
        String::from("Policy has been successfully enforced")
    } else {
        String::new()
    };
    if let Some(e) = errors.first() {
        msg = format!("{msg}; its condition erred or was not boolean, so the block applies: {e}");
    }
    if mine.iter().any(|fx| fx.applied.contains(object)) {
        enforcement(true, "Enforced", msg)
    } else {
        enforcement(
            false,
            "Overridden",
            "Policy has been overridden by the policies of the backends behind the Gateway (or no backend is behind it)".into(),
        )
    }
}

/// How the blocks met Backend-level policy `bid` on `backend`; None when no block reached it.
fn lower_enforced(effects: &AllEffects, backend: &str, bid: &str) -> Option<Option<Enforcement>> {
    let mine: Vec<&Effects> = effects
        .iter()
        .filter(|(b, _, _)| b == backend)
        .map(|(_, _, fx)| fx)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let by = |f: &dyn Fn(&Effects) -> Option<&BTreeSet<String>>| {
        let mut all = BTreeSet::new();
        for fx in &mine {
            if let Some(s) = f(fx) {
                all.extend(s.iter().cloned());
            }
        }
        all
    };
    let replaced = by(&|fx| fx.replaced.get(bid));
    let refused = by(&|fx| fx.unset_refused.get(bid));
    let added = by(&|fx| fx.added.get(bid));
    let applied: BTreeSet<String> = mine
        .iter()
        .flat_map(|fx| fx.applied.iter().cloned())
        .collect();
    let applied = applied.into_iter().collect::<Vec<_>>().join(", ");
    let everywhere = mine.iter().all(|fx| {
        fx.replaced
            .get(bid)
            .is_some_and(|r| r.contains("(all traffic)") || !r.is_empty())
    });
    let defaults = if added.is_empty() {
        String::new()
    } else {
        format!(
            "; the following defaults have been added by {applied}: {}",
            join(&added)
        )
    };
    Some(if replaced.is_empty() && refused.is_empty() {
        enforcement(
            true,
            "Enforced",
            format!("Policy has been successfully enforced{defaults}"),
        )
    } else if everywhere && refused.is_empty() && atomic_everywhere(&mine, bid) {
        enforcement(
            false,
            "Overridden",
            format!("Policy has been overridden by {applied}"),
        )
    } else {
        let mut m = format!("Policy has been successfully enforced. The following rules have been overridden by {applied}: {}", join(&replaced));
        if !refused.is_empty() {
            m.push_str(&format!("; unset of overrides refused: {}", join(&refused)));
        }
        m.push_str(&defaults);
        enforcement(true, "PartiallyEnforced", m)
    })
}

/// Whether every rule of policy `bid` was replaced on every listener (an atomic override).
fn atomic_everywhere(mine: &[&Effects], bid: &str) -> bool {
    mine.iter().all(|fx| {
        fx.replaced
            .get(bid)
            .is_some_and(|r| r.contains("(all traffic)") || fx.whole.contains(bid))
    })
}

fn join(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join(", ")
}

impl Ctx<'_> {
    /// The effective policy of every (listener, XBackend) pair, from the compiled bundle.
    pub(in crate::compile) fn effective_view(&self, b: &bundle::Bundle) -> Vec<EffectivePolicy> {
        let mut out = Vec::new();
        for (backend, listeners) in self.listeners_per_backend() {
            let (bns, bname) = backend.split_once('/').unwrap_or(("", &backend));
            for key in &listeners {
                let (gns, g, l) = key;
                let gateway = b.policies.iter().filter(|p| {
                    p.level == Level::Gateway
                        && p.targets.iter().any(|t| {
                            &t.name == g
                                && t.namespace.as_deref().unwrap_or(&p.namespace) == gns
                                && t.section_name.as_ref().is_none_or(|s| s == l)
                        })
                });
                let back = b.policies.iter().filter(|p| {
                    p.level == Level::Backend
                        && p.targets.iter().any(|t| {
                            t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns
                        })
                        && (p.listeners.is_empty()
                            || p.listeners.iter().any(|t| {
                                &t.name == g
                                    && t.namespace.as_deref().unwrap_or(&p.namespace) == gns
                                    && t.section_name.as_deref() == Some(l.as_str())
                            }))
                });
                let notes = self
                    .effects
                    .iter()
                    .filter(|(bk, lk, _)| bk == &backend && lk == key)
                    .flat_map(|(_, _, fx)| notes_of(fx))
                    .collect();
                out.push(EffectivePolicy {
                    gateway: format!("{gns}/{g}"),
                    listener: l.clone(),
                    backend: backend.clone(),
                    levels: vec![
                        level_view("Gateway", gateway.collect()),
                        level_view("Backend", back.collect()),
                    ],
                    notes,
                });
            }
        }
        out
    }
}

fn notes_of(fx: &Effects) -> Vec<String> {
    let mut out = Vec::new();
    for (p, names) in &fx.replaced {
        out.push(format!("{p}: rules replaced by overrides: {}", join(names)));
    }
    for (p, names) in &fx.unset_refused {
        out.push(format!("{p}: unset of overrides refused: {}", join(names)));
    }
    for (what, why) in &fx.not_added {
        out.push(format!("default {what} not added: {why}"));
    }
    for (b, e) in &fx.condition_errors {
        out.push(format!("{b}: condition erred ({e}); the block applies"));
    }
    out
}

fn level_view(level: &str, policies: Vec<&bundle::Policy>) -> EffectiveLevel {
    let steps = [
        (Action::ExternalAuth, "ExternalAuth"),
        (Action::Deny, "Deny"),
        (Action::Allow, "Allow"),
    ]
    .into_iter()
    .filter_map(|(a, name)| {
        let entries: Vec<EffectiveEntry> = policies
            .iter()
            .filter(|p| p.action == a)
            .map(|p| EffectiveEntry {
                policy: format!("{}/{}", p.namespace, p.name),
                from: match (&p.origin, &p.not_accepted) {
                    (_, Some(why)) => format!("stand-in of a policy not accepted ({why})"),
                    (Some(o), None) => o.to_string(),
                    (None, None) => "its own rules".into(),
                },
                when: p.when.clone(),
                // A refused Allow policy's stand-in admits nothing, whatever its rules were.
                rules: if p.not_accepted.is_some() && p.action == Action::Allow {
                    Some(Vec::new())
                } else {
                    p.rules.as_ref().map(|rs| {
                        rs.iter()
                            .map(|r| {
                                let mut v = serde_json::to_value(r).unwrap_or_default();
                                if let Some(o) = v.as_object_mut() {
                                    o.remove("name");
                                }
                                EffectiveRule {
                                    name: r.name.clone(),
                                    rule: v,
                                }
                            })
                            .collect()
                    })
                },
                authorizer: p.external_auth.clone(),
                mode: match p.mode {
                    bundle::PolicyMode::Enforce => None,
                    bundle::PolicyMode::DryRun => Some("DryRun".into()),
                    bundle::PolicyMode::EnforceOnly => Some("EnforceOnly".into()),
                },
            })
            .collect();
        (!entries.is_empty()).then(|| EffectiveStep {
            step: name.into(),
            policies: entries,
        })
    })
    .collect();
    EffectiveLevel {
        level: level.into(),
        steps,
    }
}
