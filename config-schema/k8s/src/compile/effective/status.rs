//! What the blocks did, as the `Enforced` conditions of the policies and as the effective
//! policy of each (listener, backend).

use std::collections::{BTreeSet, HashMap};

use super::{on_backend, BlockPolicy, EffectRecord, Effects};
use crate::compile::Ctx;
use crate::model::*;
use crate::refs::{NsName, ObjectName};
use crate::types::opt;
use mcp_access_bundle::{self as bundle, Action, Level};

fn enforcement(status: bool, reason: &str, message: String) -> Option<Enforcement> {
    Some(Enforcement {
        status,
        reason: reason.to_string(),
        message,
    })
}

/// What the blocks did per (backend, listener, route class).
type AllEffects = [EffectRecord];

/// Whether two route classes share a name (None: every route).
fn overlap(a: Option<&BTreeSet<String>>, b: Option<&BTreeSet<String>>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => !x.is_disjoint(y),
        _ => true,
    }
}

impl Ctx<'_> {
    /// The `Enforced` conditions of block policies and of the Backend-level policies they
    /// meet.
    pub(super) fn block_statuses(&mut self, blocks: &[&BlockPolicy]) {
        let effects = std::mem::take(&mut self.effects);
        self.statuses_from(&effects, blocks);
        self.effects = effects;
    }

    fn statuses_from(&mut self, effects: &AllEffects, blocks: &[&BlockPolicy]) {
        let objects: Vec<&ObjectName> = blocks.iter().map(|b| &b.object).collect();
        // The records of each backend, in order.
        let mut of_backend: HashMap<&NsName, Vec<&EffectRecord>> = HashMap::new();
        for r in effects {
            of_backend.entry(&r.backend).or_default().push(r);
        }
        // Per policy status: its bundle id and, per condition (one per targetRef), the
        // bundle targets an HTTPRoute targetRef resolves to.
        let found: Vec<(usize, String, Vec<Vec<bundle::PolicyTarget>>)> = self
            .report
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                let p = self.m.policies.iter().find(|p| {
                    p.kind == st.kind && p.meta.namespace == st.namespace && p.meta.name == st.name
                })?;
                let routes = p
                    .spec
                    .target_refs()
                    .iter()
                    .map(|r| match opt(&r.kind) {
                        "HTTPRoute" => self.route_targets(r, &p.meta.namespace).unwrap_or_default(),
                        _ => Vec::new(),
                    })
                    .collect();
                Some((
                    i,
                    format!("{}/{}", p.meta.namespace, self.bundle_name(p)),
                    routes,
                ))
            })
            .collect();
        for (i, bid, route_targets) in found {
            let Some(st) = self.report.policies.get_mut(i) else {
                continue;
            };
            let object = ObjectName::new(&st.kind, NsName::new(&st.namespace, &st.name));
            let is_block = objects.contains(&&object);
            for (ci, c) in st.conditions.iter_mut().enumerate() {
                if !c.accepted {
                    continue;
                }
                if is_block {
                    c.enforced = block_enforced(effects, c, &object);
                    continue;
                }
                let on_backend = c.target.object().filter(|o| o.kind == "XBackend");
                let mine: Vec<&Effects> = match on_backend {
                    Some(backend) => of_backend
                        .get(&backend.id)
                        .into_iter()
                        .flatten()
                        .filter(|r| r.lower.contains(&bid))
                        .map(|r| &r.fx)
                        .collect(),
                    None => {
                        let targets = route_targets.get(ci).map(Vec::as_slice).unwrap_or_default();
                        effects
                            .iter()
                            .filter(|r| {
                                r.lower.contains(&bid)
                                    && targets.iter().any(|t| {
                                        t.namespace.as_deref().unwrap_or_default()
                                            == r.backend.namespace
                                            && t.name == r.backend.name
                                            && overlap(
                                                r.routes.as_ref(),
                                                t.routes
                                                    .as_ref()
                                                    .map(|x| x.iter().cloned().collect())
                                                    .as_ref(),
                                            )
                                    })
                            })
                            .map(|r| &r.fx)
                            .collect()
                    }
                };
                if let Some(e) = lower_enforced(&mine, &bid) {
                    c.enforced = e;
                }
            }
        }
    }
}

/// Whether block policy `object` took effect at its target `c` (a Gateway, or a listener).
fn block_enforced(
    effects: &AllEffects,
    c: &TargetStatus,
    object: &ObjectName,
) -> Option<Enforcement> {
    let gw = c.target.object().filter(|o| o.kind == "Gateway");
    let mine: Vec<&Effects> = effects
        .iter()
        .filter(|r| {
            let (ns, g, l) = &r.listener;
            gw.is_some_and(|gw| gw.id.namespace == *ns && gw.id.name == *g)
                && c.section_name.as_ref().is_none_or(|s| s == l)
        })
        .map(|r| &r.fx)
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

/// How the blocks met Backend-level policy `bid` where it is met (`mine`: on one target);
/// None when no block reached it.
fn lower_enforced(mine: &[&Effects], bid: &str) -> Option<Option<Enforcement>> {
    if mine.is_empty() {
        return None;
    }
    let by = |f: &dyn Fn(&Effects) -> Option<&BTreeSet<String>>| {
        let mut all = BTreeSet::new();
        for fx in mine {
            if let Some(s) = f(fx) {
                all.extend(s.iter().cloned());
            }
        }
        all
    };
    let replaced = by(&|fx| fx.replaced.get(bid));
    let refused = by(&|fx| fx.unset_refused.get(bid));
    let added = by(&|fx| fx.added.get(bid));
    let applied: BTreeSet<&ObjectName> = mine.iter().flat_map(|fx| &fx.applied).collect();
    let applied = applied
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
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
    } else if everywhere && refused.is_empty() && atomic_everywhere(mine, bid) {
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
    /// The effective policy of every (listener, XBackend, route class), from the compiled
    /// bundle: one per (listener, XBackend) unless route-scoped policies make routes differ.
    pub(in crate::compile) fn effective_view(&self, b: &bundle::Bundle) -> Vec<EffectivePolicy> {
        let mut out = Vec::new();
        let all_routes = self.backend_routes();
        for (backend, listeners) in self.listeners_per_backend() {
            let (bns, bname) = (backend.namespace.as_str(), backend.name.as_str());
            let Some(routes) = all_routes.get(&backend) else {
                continue;
            };
            let (back, targets) = on_backend(b, (bns, bname));
            let pins = b
                .backends
                .iter()
                .find(|x| x.namespace == bns && x.name == bname)
                .and_then(|x| x.pins.clone());
            let scopes: Vec<Option<&[String]>> =
                targets.iter().map(|t| t.routes.as_deref()).collect();
            let classes = routes.classes(&scopes);
            for key in &listeners {
                let (gns, g, l) = key;
                let gateway: Vec<&bundle::Policy> = b
                    .policies
                    .iter()
                    .filter(|p| {
                        p.level == Level::Gateway
                            && p.targets.iter().any(|t| {
                                &t.name == g
                                    && t.namespace.as_deref().unwrap_or(&p.namespace) == gns
                                    && t.section_name.as_ref().is_none_or(|s| s == l)
                            })
                    })
                    .collect();
                let on_listener = |p: &&bundle::Policy| {
                    p.listeners.is_empty()
                        || p.listeners.iter().any(|t| {
                            &t.name == g
                                && t.namespace.as_deref().unwrap_or(&p.namespace) == gns
                                && t.section_name.as_deref() == Some(l.as_str())
                        })
                };
                for c in classes.iter().filter(|c| routes.feasible(c, key)) {
                    let here: Vec<&bundle::Policy> = c
                        .members
                        .iter()
                        .filter_map(|i| back.get(*i).copied())
                        .filter(on_listener)
                        .collect();
                    // Requests the filter knows only by the backend's cluster may have come
                    // through the routes of a route-scoped Allow policy: it admits nothing
                    // there but keeps the level default-deny (docs/semantics.md §1.6).
                    let by_cluster = routes.holds_cluster(c);
                    let elsewhere: Vec<(&bundle::Policy, String)> = back
                        .iter()
                        .enumerate()
                        .filter(|(i, p)| {
                            by_cluster
                                && !c.members.contains(i)
                                && p.action == Action::Allow
                                && on_listener(p)
                        })
                        .map(|(i, p)| {
                            let names = scopes
                                .get(i)
                                .copied()
                                .flatten()
                                .map(|n| routes.describe(&n.iter().cloned().collect()))
                                .unwrap_or_default();
                            (*p, names.join(", "))
                        })
                        .collect();
                    let notes = self
                        .effects
                        .iter()
                        .filter(|r| {
                            r.backend == backend
                                && &r.listener == key
                                && overlap(r.routes.as_ref(), c.names.as_ref())
                        })
                        .flat_map(|r| notes_of(&r.fx))
                        .collect();
                    out.push(EffectivePolicy {
                        gateway: format!("{gns}/{g}"),
                        listener: l.clone(),
                        backend: backend.to_string(),
                        routes: c
                            .names
                            .as_ref()
                            .map(|n| routes.describe(n))
                            .unwrap_or_default(),
                        http_routes: c
                            .names
                            .as_ref()
                            .map(|n| routes.http_routes(n))
                            .unwrap_or_default(),
                        levels: vec![
                            level_view("Gateway", gateway.clone(), Vec::new()),
                            level_view("Backend", here, elsewhere),
                        ],
                        notes,
                        pins: pins.clone(),
                    });
                }
            }
        }
        out
    }

    /// Gives each rule of `views` its spelling in the policy object it came from: the
    /// object's `rules` (found by the policy's name in the bundle), or those of its
    /// `defaults` / `overrides` block (by the object's kind and name); then by rule name.
    pub(in crate::compile) fn spell_rules_as_written(&self, views: &mut [EffectivePolicy]) {
        let mut written: HashMap<(String, &str), &serde_json::Value> = HashMap::new();
        for p in &self.m.policies {
            let spec = &p.raw_spec;
            let own = format!("{}/{}", p.meta.namespace, self.bundle_name(p));
            let object = format!("{} {}", p.kind, p.id());
            let lists = [
                (own, spec.get("rules")),
                (
                    object.clone(),
                    spec.get("defaults").and_then(|b| b.get("rules")),
                ),
                (object, spec.get("overrides").and_then(|b| b.get("rules"))),
            ];
            for (key, list) in lists {
                for rule in list.and_then(|l| l.as_array()).into_iter().flatten() {
                    if let Some(name) = rule.get("name").and_then(|n| n.as_str()) {
                        written.entry((key.clone(), name)).or_insert(rule);
                    }
                }
            }
        }
        let entries = views
            .iter_mut()
            .flat_map(|v| v.levels.iter_mut())
            .flat_map(|l| l.steps.iter_mut())
            .flat_map(|s| s.policies.iter_mut());
        for e in entries {
            let key = e.block_of.clone().unwrap_or_else(|| e.policy.clone());
            for r in e.rules.iter_mut().flatten() {
                r.written = written.get(&(key.clone(), r.name.as_str())).map(|rule| {
                    let mut rule = (*rule).clone();
                    if let Some(o) = rule.as_object_mut() {
                        o.remove("name");
                    }
                    rule
                });
            }
        }
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

/// Where a policy's rules came from.
fn from(p: &bundle::Policy) -> String {
    match (&p.origin, &p.not_accepted) {
        (_, Some(why)) => format!("stand-in of a policy not accepted ({why})"),
        (Some(o), None) => o.to_string(),
        (None, None) => "its own rules".into(),
    }
}

/// One level's steps; `elsewhere`: route-scoped Allow policies of routes a request known
/// only by the cluster may have come through, which admit nothing here but keep the level
/// default-deny.
fn level_view(
    level: &str,
    policies: Vec<&bundle::Policy>,
    elsewhere: Vec<(&bundle::Policy, String)>,
) -> EffectiveLevel {
    let steps = [
        (Action::ExternalAuth, "ExternalAuth"),
        (Action::Deny, "Deny"),
        (Action::Allow, "Allow"),
    ]
    .into_iter()
    .filter_map(|(a, name)| {
        let mut entries: Vec<EffectiveEntry> = policies
            .iter()
            .filter(|p| p.action == a)
            .map(|p| EffectiveEntry {
                policy: format!("{}/{}", p.namespace, p.name),
                from: from(p),
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
                                    written: None,
                                }
                            })
                            .collect()
                    })
                },
                authorizer: p.external_auth.clone(),
                mode: mode_of(p),
                block_of: p
                    .origin
                    .as_ref()
                    .filter(|o| o.block.is_some())
                    .map(|o| o.policy.clone()),
            })
            .collect();
        if a == Action::Allow {
            entries.extend(elsewhere.iter().map(|(p, routes)| EffectiveEntry {
                policy: format!("{}/{}", p.namespace, p.name),
                from: format!(
                    "{}, through {routes} only: a request known only by the cluster may have come that way, so it admits nothing here but keeps this level default-deny",
                    from(p)
                ),
                when: p.when.clone(),
                rules: Some(Vec::new()),
                authorizer: None,
                mode: mode_of(p),
                block_of: None,
            }));
        }
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

/// An entry's `mode`: None for an enforced policy.
fn mode_of(p: &bundle::Policy) -> Option<String> {
    match p.mode {
        bundle::PolicyMode::Enforce => None,
        bundle::PolicyMode::DryRun => Some("DryRun".into()),
        bundle::PolicyMode::EnforceOnly => Some("EnforceOnly".into()),
    }
}
