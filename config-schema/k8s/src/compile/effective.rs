//! Defaults and overrides (docs/semantics.md, "Defaults and overrides"): the blocks of
//! Gateway policies applied, ahead of time, to the Backend level of every backend behind the
//! Gateway, giving one effective Backend-level policy set per (listener, backend). Where the
//! result differs between listeners, the bundle policies are narrowed to their listeners.

use std::collections::{BTreeMap, BTreeSet};

use super::Ctx;
use crate::load::PolicySpec;
use crate::model::*;

use mcp_access_bundle::{self as bundle, Action, BlockKind, Level, Strategy};
use mcp_access_engine::cel::SelfCondition;

/// Condition results per (block policy, lower policy): the lower spec does not change.
type CondCache = BTreeMap<(String, String), Result<bool, String>>;

/// Bundle `namespace/name` of each policy -> (its spec as written, its `unset`).
type LowerSpecs = BTreeMap<String, (serde_json::Value, Vec<String>)>;

/// An accepted Gateway policy with a defaults or overrides block, compiled.
#[derive(Debug, Clone)]
pub(crate) struct BlockPolicy {
    /// `Kind namespace/name`.
    pub(crate) object: String,
    pub(crate) namespace: String,
    /// Its name in the bundle.
    pub(crate) name: String,
    pub(crate) seniority: u64,
    pub(crate) kind: BlockKind,
    pub(crate) strategy: Strategy,
    pub(crate) action: Action,
    pub(crate) rules: Option<Vec<bundle::Rule>>,
    pub(crate) when: Vec<String>,
    pub(crate) authorizer: Option<bundle::Authorizer>,
    /// The compiled `condition` (an error the compiler already reported cannot occur here:
    /// such a policy is not accepted).
    pub(crate) condition: Option<Result<std::sync::Arc<SelfCondition>, String>>,
    /// Gateways (and listeners) it targets.
    pub(crate) targets: Vec<bundle::PolicyTarget>,
}

/// A listener: `(gateway namespace, gateway name, listener name)`.
type ListenerKey = (String, String, String);

/// One effective Backend-level policy of a (listener, backend) pair.
#[derive(Debug, Clone, PartialEq)]
struct Unit {
    policy: bundle::Policy,
    /// From a block: its Gateway policy's seniority and kind.
    block: Option<(u64, BlockKind)>,
}

/// What a block did on one (listener, backend), for the status and the effective view.
#[derive(Debug, Clone, Default)]
pub(crate) struct Effects {
    /// Per lower policy (`namespace/name` in the bundle): rules an override replaced.
    pub(crate) replaced: BTreeMap<String, BTreeSet<String>>,
    /// Per lower policy: `unset` entries refused (overrides).
    pub(crate) unset_refused: BTreeMap<String, BTreeSet<String>>,
    /// Per lower policy: default rules added beside it.
    pub(crate) added: BTreeMap<String, BTreeSet<String>>,
    /// Blocks that took effect here (object names).
    pub(crate) applied: BTreeSet<String>,
    /// Blocks whose condition erred (applied anyway).
    pub(crate) condition_errors: BTreeMap<String, String>,
    /// Lower policies an atomic override removed whole.
    pub(crate) whole: BTreeSet<String>,
    /// Default rules (or ExternalAuth blocks) not added: name -> why.
    pub(crate) not_added: BTreeMap<String, String>,
}

impl Ctx<'_> {
    /// Rewrites the Backend-level policies in `out` to the effective ones.
    pub(super) fn apply_blocks(
        &mut self,
        blocks: &[BlockPolicy],
        out: &mut Vec<bundle::Policy>,
        authorizers: &mut Vec<bundle::Authorizer>,
    ) {
        if blocks.is_empty() {
            return;
        }
        let mut blocks: Vec<&BlockPolicy> = blocks.iter().collect();
        blocks.sort_by_key(|b| b.seniority);
        for b in &blocks {
            if let Some(a) = &b.authorizer {
                let mut a = a.clone();
                a.name = format!("{}.{}", b.namespace, b.name);
                authorizers.push(a);
            }
        }
        let raw = self.lower_specs();
        let mut cache = CondCache::new();
        let mut names: BTreeSet<String> = out
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        let mut effects_all: Vec<(String, ListenerKey, Effects)> = Vec::new();
        let mut added: Vec<bundle::Policy> = Vec::new();
        let mut added_out: Vec<bundle::Policy> = Vec::new();
        for (backend, listeners) in self.listeners_per_backend() {
            let (bns, bname) = backend.split_once('/').unwrap_or(("", &backend));
            let here = |p: &bundle::Policy| {
                p.level == Level::Backend
                    && p.targets.iter().any(|t| {
                        t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns
                    })
            };
            let reaching: Vec<&ListenerKey> = listeners
                .iter()
                .filter(|l| blocks.iter().any(|b| block_reaches(b, l)))
                .collect();
            if reaching.is_empty() {
                continue;
            }
            let lower: Vec<bundle::Policy> = out
                .iter()
                .filter(|p| here(p))
                .cloned()
                .map(|mut p| {
                    p.targets = vec![backend_target(bns, bname)];
                    p
                })
                .collect();
            // `unset` entries of the lower policies: name -> the policy that unsets it.
            let unset: BTreeMap<String, String> = lower
                .iter()
                .flat_map(|p| {
                    let id = lower_id(p);
                    raw.get(&id)
                        .map(|(_, u)| u.clone())
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |n| (n, id.clone()))
                })
                .collect();
            let mut per_listener: Vec<(ListenerKey, Vec<Unit>)> = Vec::new();
            for l in &listeners {
                let mut units: Vec<Unit> = lower
                    .iter()
                    .map(|p| Unit {
                        policy: p.clone(),
                        block: None,
                    })
                    .collect();
                let mut fx = Effects::default();
                for b in blocks.iter().filter(|b| block_reaches(b, l)) {
                    apply(
                        b,
                        (bns, bname),
                        &lower,
                        (&raw, &mut cache, &unset),
                        &mut units,
                        &mut fx,
                    );
                }
                effects_all.push((backend.clone(), l.clone(), fx));
                per_listener.push((l.clone(), units));
            }
            // Unchanged everywhere: nothing to rewrite for this backend.
            let same = per_listener.iter().all(|(_, u)| {
                u.len() == lower.len() && u.iter().zip(&lower).all(|(x, y)| &x.policy == y)
            });
            if same {
                continue;
            }
            let mut variants: Vec<(bundle::Policy, Vec<ListenerKey>)> = Vec::new();
            let mut by_name: std::collections::HashMap<String, Vec<usize>> =
                std::collections::HashMap::new();
            for (l, units) in per_listener {
                for u in units {
                    let slot = by_name.entry(u.policy.name.clone()).or_default();
                    let found = slot
                        .iter()
                        .copied()
                        .find(|&i| variants.get(i).is_some_and(|(p, _)| *p == u.policy));
                    match found.and_then(|i| variants.get_mut(i)) {
                        Some((_, ls)) => ls.push(l.clone()),
                        None => {
                            slot.push(variants.len());
                            variants.push((u.policy, vec![l.clone()]));
                        }
                    }
                }
            }
            // A lower policy unchanged on every listener keeps this backend as a target;
            // the backend leaves the others, whose effective variants replace them.
            let kept: Vec<&bundle::Policy> = lower
                .iter()
                .filter(|lp| {
                    variants
                        .iter()
                        .any(|(p, ls)| p == *lp && ls.len() == listeners.len())
                })
                .collect();
            for p in out.iter_mut().filter(|p| here(p)) {
                let id = (p.namespace.clone(), p.name.clone());
                if kept
                    .iter()
                    .any(|k| (k.namespace.clone(), k.name.clone()) == id)
                {
                    continue;
                }
                p.targets.retain(|t| {
                    !(t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns)
                });
            }
            variants.retain(|(p, ls)| !(ls.len() == listeners.len() && kept.contains(&p)));
            for (mut p, ls) in variants {
                if ls.len() < listeners.len() {
                    p.listeners = ls
                        .iter()
                        .map(|(ns, g, l)| bundle::PolicyTarget {
                            name: g.clone(),
                            namespace: Some(ns.clone()),
                            section_name: Some(l.clone()),
                        })
                        .collect();
                }
                added.push(p);
            }
        }
        // One bundle policy per distinct content: a block's rules that apply alike to many
        // backends are one policy with many targets.
        let mut groups: Vec<bundle::Policy> = Vec::new();
        let mut by_key: std::collections::HashMap<(String, String), Vec<usize>> =
            std::collections::HashMap::new();
        for p in added {
            let key = (
                format!("{}/{}", p.namespace, p.name),
                format!("{:?}", p.listeners),
            );
            let same = |g: &bundle::Policy| {
                g.action == p.action
                    && g.rules == p.rules
                    && g.when == p.when
                    && g.origin == p.origin
                    && g.external_auth == p.external_auth
                    && g.not_accepted == p.not_accepted
                    && g.seniority == p.seniority
            };
            let slot = by_key.entry(key).or_default();
            match slot
                .iter()
                .copied()
                .find(|&i| groups.get(i).is_some_and(same))
            {
                Some(i) => {
                    if let Some(g) = groups.get_mut(i) {
                        g.targets.extend(p.targets);
                    }
                }
                None => {
                    slot.push(groups.len());
                    groups.push(p);
                }
            }
        }
        for mut p in groups {
            let base = match p.targets.as_slice() {
                [t] => format!(
                    "{}.{}.{}",
                    p.name,
                    t.namespace.as_deref().unwrap_or_default(),
                    t.name
                ),
                _ => p.name.clone(),
            };
            let mut name = base.clone();
            let mut k = 1;
            while names.contains(&format!("{}/{name}", p.namespace)) {
                k += 1;
                name = format!("{base}.{k}");
            }
            names.insert(format!("{}/{name}", p.namespace));
            p.name = name;
            added_out.push(p);
        }
        out.retain(|p| !p.targets.is_empty());
        out.extend(added_out);
        out.sort_by(|a, b| {
            (a.seniority, &a.namespace, &a.name).cmp(&(b.seniority, &b.namespace, &b.name))
        });
        self.effects = effects_all;
        self.block_statuses(&blocks);
    }

    /// Per XBackend (`namespace/name`), the listeners whose routes forward to it.
    pub(super) fn listeners_per_backend(&self) -> BTreeMap<String, Vec<ListenerKey>> {
        let mut map: BTreeMap<String, Vec<ListenerKey>> = BTreeMap::new();
        for b in &self.topo.backends {
            map.entry(b.id.clone()).or_default();
        }
        for g in &self.topo.gateways {
            for l in &g.listeners {
                for e in &l.routes {
                    if let RouteAction::Forward { clusters, .. } = &e.action {
                        for c in clusters {
                            if let Some(b) = &c.backend {
                                let key = (g.namespace.clone(), g.name.clone(), l.name.clone());
                                let list = map.entry(b.clone()).or_default();
                                if !list.contains(&key) {
                                    list.push(key);
                                }
                            }
                        }
                    }
                }
            }
        }
        map
    }

    /// Bundle `namespace/name` of each policy -> (its spec as written, its `unset`).
    fn lower_specs(&self) -> LowerSpecs {
        let mut map = BTreeMap::new();
        for p in &self.m.policies {
            let unset = match &p.spec {
                PolicySpec::V1(s) if p.kind == "AccessPolicy" => {
                    s.unset.clone().unwrap_or_default()
                }
                _ => Vec::new(),
            };
            let key = format!("{}/{}", p.meta.namespace, self.bundle_name(p));
            map.entry(key).or_insert((p.raw_spec.clone(), unset));
        }
        map
    }
}

fn backend_target(ns: &str, name: &str) -> bundle::PolicyTarget {
    bundle::PolicyTarget {
        name: name.to_string(),
        namespace: Some(ns.to_string()),
        section_name: None,
    }
}

/// Whether block policy `b` targets listener `l` (its Gateway, and listener if named).
fn block_reaches(b: &BlockPolicy, (ns, g, l): &ListenerKey) -> bool {
    b.targets.iter().any(|t| {
        &t.name == g
            && t.namespace.as_deref().unwrap_or(&b.namespace) == ns
            && t.section_name.as_ref().is_none_or(|s| s == l)
    })
}

/// The merge key of a unit's rules: rule names, or for ExternalAuth the policy's
/// `namespace/name`.
fn keys(u: &Unit) -> Vec<String> {
    match u.policy.action {
        Action::ExternalAuth => vec![format!("{}/{}", u.policy.namespace, u.policy.name)],
        _ => u
            .policy
            .rules
            .iter()
            .flatten()
            .map(|r| r.name.clone())
            .collect(),
    }
}

fn lower_id(p: &bundle::Policy) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// Applies block `b` to the units of one (listener, backend).
fn apply(
    b: &BlockPolicy,
    (bns, bname): (&str, &str),
    lower: &[bundle::Policy],
    (raw, cache, unset): (&LowerSpecs, &mut CondCache, &BTreeMap<String, String>),
    units: &mut Vec<Unit>,
    fx: &mut Effects,
) {
    let same_action = |p: &bundle::Policy| p.action == b.action && p.not_accepted.is_none();
    // `condition`: holds for at least one lower policy of this action (an empty lower set:
    // the block applies without it; an error: it applies, and the status says so).
    if let Some(cond) = &b.condition {
        let of_action: Vec<&bundle::Policy> = lower.iter().filter(|p| same_action(p)).collect();
        if !of_action.is_empty() {
            let mut holds = false;
            for p in of_action {
                let id = lower_id(p);
                let key = (b.object.clone(), id.clone());
                let result = match cache.get(&key) {
                    Some(r) => r.clone(),
                    None => {
                        let null = serde_json::Value::Null;
                        let v = raw.get(&id).map_or(&null, |(v, _)| v);
                        let r = cond
                            .as_ref()
                            .map_err(Clone::clone)
                            .and_then(|c| c.eval(v).map_err(|e| e.message));
                        cache.insert(key, r.clone());
                        r
                    }
                };
                match result {
                    Ok(true) => holds = true,
                    Ok(false) => {}
                    Err(e) => {
                        fx.condition_errors.insert(b.object.clone(), e);
                        holds = true;
                    }
                }
            }
            if !holds {
                return;
            }
        }
    }
    let origin = |note: String| bundle::Origin {
        policy: b.object.clone(),
        block: Some(b.kind),
        strategy: Some(b.strategy),
        note,
    };
    let mut mine = bundle::Policy {
        name: b.name.clone(),
        namespace: b.namespace.clone(),
        level: Level::Backend,
        targets: vec![backend_target(bns, bname)],
        action: b.action,
        external_auth: b
            .authorizer
            .as_ref()
            .map(|_| format!("{}.{}", b.namespace, b.name)),
        seniority: b.seniority,
        rules: b.rules.clone(),
        when: b.when.clone(),
        not_accepted: None,
        listeners: Vec::new(),
        origin: Some(origin(String::new())),
    };
    let of_action = |u: &Unit| u.policy.action == b.action;
    // Whether the lower set (with the blocks applied so far) has merge key `k`.
    let present = |units: &[Unit], k: &str| {
        units
            .iter()
            .filter(|u| of_action(u))
            .any(|u| match u.policy.action {
                Action::ExternalAuth => keys(u).iter().any(|x| x == k),
                _ => u.policy.rules.iter().flatten().any(|r| r.name == k),
            })
    };
    let set_empty = !units.iter().any(of_action);
    let ext = b.action == Action::ExternalAuth;
    let my_key = format!("{}/{}", b.namespace, b.name);
    let whole = ext || b.rules.is_none();
    match (b.kind, b.strategy) {
        (BlockKind::Defaults, Strategy::Atomic) => {
            if !set_empty {
                return;
            }
        }
        (BlockKind::Defaults, Strategy::Merge) if whole => {
            let unset_by = unset.get(&my_key).or_else(|| unset.get(&b.name));
            if let Some(by) = unset_by {
                fx.not_added.insert(
                    format!("{} of {}", my_key, b.object),
                    format!("unset by {by}"),
                );
                return;
            }
            if (ext && present(units, &my_key)) || (!ext && !set_empty) {
                return;
            }
        }
        (BlockKind::Defaults, Strategy::Merge) => {
            let mut kept = Vec::new();
            for r in b.rules.iter().flatten() {
                let key = format!("{} of {}", r.name, b.object);
                if let Some(by) = unset.get(&r.name) {
                    fx.not_added.insert(key, format!("unset by {by}"));
                    continue;
                }
                if present(units, &r.name) {
                    fx.not_added
                        .insert(key, "a lower rule of that name is kept".into());
                    continue;
                }
                kept.push(r.clone());
            }
            if kept.is_empty() {
                return;
            }
            let names: Vec<String> = kept.iter().map(|r| r.name.clone()).collect();
            for u in units.iter().filter(|u| of_action(u) && u.block.is_none()) {
                fx.added
                    .entry(lower_id(&u.policy))
                    .or_default()
                    .extend(names.iter().cloned());
            }
            mine.rules = Some(kept);
        }
        (BlockKind::Overrides, Strategy::Atomic) => {
            // Replaces everything of this action but more senior overrides.
            let senior: BTreeSet<String> = units
                .iter()
                .filter(|u| of_action(u) && matches!(u.block, Some((_, BlockKind::Overrides))))
                .flat_map(keys)
                .collect();
            for u in units.iter().filter(|u| of_action(u) && u.block.is_none()) {
                if u.policy.not_accepted.is_none() {
                    let mut k = keys(u);
                    if k.is_empty() {
                        k.push("(all traffic)".into());
                    }
                    fx.replaced
                        .entry(lower_id(&u.policy))
                        .or_default()
                        .extend(k);
                    fx.whole.insert(lower_id(&u.policy));
                }
            }
            units.retain(|u| {
                !of_action(u)
                    || u.policy.not_accepted.is_some()
                    || matches!(u.block, Some((_, BlockKind::Overrides)))
            });
            if let Some(rs) = &mut mine.rules {
                rs.retain(|r| !senior.contains(&r.name));
                if rs.is_empty() {
                    return;
                }
            }
        }
        (BlockKind::Overrides, Strategy::Merge) => {
            let senior: BTreeSet<String> = units
                .iter()
                .filter(|u| of_action(u) && matches!(u.block, Some((_, BlockKind::Overrides))))
                .flat_map(keys)
                .collect();
            if ext {
                if senior.contains(&my_key) {
                    return;
                }
                units.retain(|u| !(of_action(u) && keys(u).contains(&my_key)));
            } else if let Some(rs) = &mut mine.rules {
                rs.retain(|r| !senior.contains(&r.name));
                if rs.is_empty() {
                    return;
                }
                let names: BTreeSet<String> = rs.iter().map(|r| r.name.clone()).collect();
                for u in units.iter_mut().filter(|u| of_action(u)) {
                    let id = lower_id(&u.policy);
                    let Some(urs) = &mut u.policy.rules else {
                        continue;
                    };
                    let before = urs.len();
                    let mut gone = Vec::new();
                    urs.retain(|r| {
                        let hit = names.contains(&r.name);
                        if hit {
                            gone.push(r.name.clone());
                        }
                        !hit
                    });
                    if urs.len() != before && u.block.is_none() {
                        fx.replaced.entry(id).or_default().extend(gone);
                        u.policy.origin = Some(bundle::Origin {
                            policy: u
                                .policy
                                .origin
                                .as_ref()
                                .map_or_else(|| id_of(&u.policy), |o| o.policy.clone()),
                            block: None,
                            strategy: None,
                            note: format!("rules replaced by overrides of {}", b.object),
                        });
                    }
                }
                units.retain(|u| u.policy.rules.as_ref().is_none_or(|r| !r.is_empty()));
            }
            // An `unset` of an override is refused (and reported on the lower policy).
            for (n, by) in unset {
                if names_of(&mine).contains(n) || (ext && (n == &my_key || n == &b.name)) {
                    fx.unset_refused
                        .entry(by.clone())
                        .or_default()
                        .insert(n.clone());
                }
            }
        }
    }
    if b.kind == BlockKind::Overrides && b.strategy == Strategy::Atomic {
        for (n, by) in unset {
            if names_of(&mine).contains(n) || (ext && (n == &my_key || n == &b.name)) {
                fx.unset_refused
                    .entry(by.clone())
                    .or_default()
                    .insert(n.clone());
            }
        }
    }
    fx.applied.insert(b.object.clone());
    units.push(Unit {
        policy: mine,
        block: Some((b.seniority, b.kind)),
    });
}

fn names_of(p: &bundle::Policy) -> Vec<String> {
    p.rules.iter().flatten().map(|r| r.name.clone()).collect()
}

fn id_of(p: &bundle::Policy) -> String {
    format!("policy {}/{}", p.namespace, p.name)
}

fn enforcement(status: bool, reason: &str, message: String) -> Option<Enforcement> {
    Some(Enforcement {
        status,
        reason: reason.to_string(),
        message,
    })
}

impl Ctx<'_> {
    /// The `Enforced` conditions of block policies and of the Backend-level policies they
    /// meet.
    fn block_statuses(&mut self, blocks: &[&BlockPolicy]) {
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
                    let gw = c
                        .target
                        .strip_prefix("Gateway ")
                        .unwrap_or_default()
                        .to_string();
                    let mine: Vec<&Effects> = effects
                        .iter()
                        .filter(|(_, (ns, g, l), _)| {
                            format!("{ns}/{g}") == gw
                                && c.section_name.as_ref().is_none_or(|s| s == l)
                        })
                        .map(|(_, _, fx)| fx)
                        .collect();
                    let errors: Vec<String> = mine
                        .iter()
                        .filter_map(|fx| fx.condition_errors.get(&object).cloned())
                        .collect();
                    let mut msg = if mine.iter().any(|fx| fx.applied.contains(&object)) {
                        String::from("Policy has been successfully enforced")
                    } else {
                        String::new()
                    };
                    if let Some(e) = errors.first() {
                        msg = format!(
                            "{msg}; its condition erred or was not boolean, so the block applies: {e}"
                        );
                    }
                    c.enforced = if mine.iter().any(|fx| fx.applied.contains(&object)) {
                        enforcement(true, "Enforced", msg)
                    } else {
                        enforcement(
                            false,
                            "Overridden",
                            "Policy has been overridden by the policies of the backends behind the Gateway (or no backend is behind it)".into(),
                        )
                    };
                    continue;
                }
                let Some(backend) = c.target.strip_prefix("XBackend ") else {
                    continue;
                };
                let mine: Vec<&Effects> = effects
                    .iter()
                    .filter(|(b, _, _)| b == backend)
                    .map(|(_, _, fx)| fx)
                    .collect();
                if mine.is_empty() {
                    continue;
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
                let replaced = by(&|fx| fx.replaced.get(&bid));
                let refused = by(&|fx| fx.unset_refused.get(&bid));
                let added = by(&|fx| fx.added.get(&bid));
                let applied: BTreeSet<String> = mine
                    .iter()
                    .flat_map(|fx| fx.applied.iter().cloned())
                    .collect();
                let applied = applied.into_iter().collect::<Vec<_>>().join(", ");
                let everywhere = mine.iter().all(|fx| {
                    fx.replaced
                        .get(&bid)
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
                c.enforced = if replaced.is_empty() && refused.is_empty() {
                    enforcement(
                        true,
                        "Enforced",
                        format!("Policy has been successfully enforced{defaults}"),
                    )
                } else if everywhere && refused.is_empty() && atomic_everywhere(&mine, &bid) {
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
                };
            }
        }
    }
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
    pub(super) fn effective_view(&self, b: &bundle::Bundle) -> Vec<EffectivePolicy> {
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
                    (Some(o), None) => mcp_access_engine::policy::origin_text(o),
                    (None, None) => "its own rules".into(),
                },
                when: p.when.clone(),
                rules: p.rules.as_ref().map(|rs| {
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
                }),
                authorizer: p.external_auth.clone(),
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
