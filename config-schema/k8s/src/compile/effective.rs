//! Defaults and overrides (docs/semantics.md, "Defaults and overrides"): the blocks of
//! Gateway policies applied, ahead of time, to the Backend level of every backend behind the
//! Gateway, giving one effective Backend-level policy set per (listener, backend). Where the
//! result differs between listeners, the bundle policies are narrowed to their listeners.

use std::collections::{BTreeMap, BTreeSet};

use super::Ctx;
use crate::load::PolicySpec;
use crate::model::*;

use mcp_access_bundle::{self as bundle, Action, BlockKind, Level, Strategy};
use mcp_access_cel::SelfCondition;

/// Condition results per (block policy, lower policy): the lower spec does not change.
type CondCache = BTreeMap<(String, String), Result<bool, String>>;

/// Whether a block's condition lets it apply to one backend, and its error if it erred.
type Cond = (bool, Option<String>);

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

/// One effective Backend-level policy of a (listener, backend) pair, by reference: a lower
/// policy (index into that backend's lower policies) without the rules of some names, or a
/// block (index into the blocks, oldest first) with some of its rules (None: as written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Unit {
    Lower { i: usize, removed: Vec<String> },
    Block { k: usize, kept: Option<Vec<usize>> },
}

/// What the units of one backend refer to.
struct Scope<'a> {
    lower: &'a [bundle::Policy],
    blocks: &'a [&'a BlockPolicy],
}

impl Scope<'_> {
    fn action(&self, u: &Unit) -> Option<Action> {
        match u {
            Unit::Lower { i, .. } => self.lower.get(*i).map(|p| p.action),
            Unit::Block { k, .. } => self.blocks.get(*k).map(|b| b.action),
        }
    }

    fn is_override(&self, u: &Unit) -> bool {
        matches!(u, Unit::Block { k, .. } if self.blocks.get(*k).is_some_and(|b| b.kind == BlockKind::Overrides))
    }

    fn is_standin(&self, u: &Unit) -> bool {
        matches!(u, Unit::Lower { i, .. } if self.lower.get(*i).is_some_and(|p| p.not_accepted.is_some()))
    }

    /// The rule names the unit holds.
    fn names<'s>(&'s self, u: &'s Unit) -> Vec<&'s str> {
        match u {
            Unit::Lower { i, removed } => self
                .lower
                .get(*i)
                .and_then(|p| p.rules.as_ref())
                .into_iter()
                .flatten()
                .map(|r| r.name.as_str())
                .filter(|n| !removed.iter().any(|x| x == n))
                .collect(),
            Unit::Block { k, kept } => {
                let rules = self.blocks.get(*k).and_then(|b| b.rules.as_ref());
                match (rules, kept) {
                    (Some(rs), Some(kept)) => kept
                        .iter()
                        .filter_map(|ix| rs.get(*ix))
                        .map(|r| r.name.as_str())
                        .collect(),
                    (Some(rs), None) => rs.iter().map(|r| r.name.as_str()).collect(),
                    (None, _) => Vec::new(),
                }
            }
        }
    }

    /// Whether the unit holds a rule named `name`.
    fn has_name(&self, u: &Unit, name: &str) -> bool {
        match u {
            Unit::Lower { i, removed } => self
                .lower
                .get(*i)
                .and_then(|p| p.rules.as_ref())
                .is_some_and(|rs| {
                    rs.iter().any(|r| r.name == name) && !removed.iter().any(|x| x == name)
                }),
            Unit::Block { k, kept } => {
                let Some(rs) = self.blocks.get(*k).and_then(|b| b.rules.as_ref()) else {
                    return false;
                };
                match kept {
                    Some(kept) => kept
                        .iter()
                        .any(|ix| rs.get(*ix).is_some_and(|r| r.name == name)),
                    None => rs.iter().any(|r| r.name == name),
                }
            }
        }
    }

    /// Whether the unit's ExternalAuth merge key is `key`.
    fn has_key(&self, u: &Unit, key: &str) -> bool {
        let (ns, name) = match u {
            Unit::Lower { i, .. } => match self.lower.get(*i) {
                Some(p) => (&p.namespace, &p.name),
                None => return false,
            },
            Unit::Block { k, .. } => match self.blocks.get(*k) {
                Some(b) => (&b.namespace, &b.name),
                None => return false,
            },
        };
        key.split_once('/') == Some((ns.as_str(), name.as_str()))
    }

    /// Whether the unit has rules (Some) of which none is left.
    fn emptied(&self, u: &Unit) -> bool {
        match u {
            Unit::Lower { i, .. } => {
                self.lower.get(*i).is_some_and(|p| p.rules.is_some()) && self.names(u).is_empty()
            }
            Unit::Block { kept, .. } => kept.as_ref().is_some_and(Vec::is_empty),
        }
    }

    /// The bundle policy of a unit on backend `(bns, bname)`.
    fn materialize(&self, u: &Unit, (bns, bname): (&str, &str)) -> Option<bundle::Policy> {
        match u {
            Unit::Lower { i, removed } => {
                let mut p = self.lower.get(*i)?.clone();
                if !removed.is_empty() {
                    if let Some(rs) = &mut p.rules {
                        rs.retain(|r| !removed.contains(&r.name));
                    }
                    p.origin = Some(bundle::Origin {
                        policy: format!("policy {}", lower_id(&p)),
                        block: None,
                        strategy: None,
                        note: format!("rules replaced by overrides: {}", removed.join(", ")),
                    });
                }
                Some(p)
            }
            Unit::Block { k, kept } => {
                let b = self.blocks.get(*k)?;
                let rules = match (&b.rules, kept) {
                    (Some(rs), Some(kept)) => {
                        Some(kept.iter().filter_map(|ix| rs.get(*ix)).cloned().collect())
                    }
                    (rules, _) => rules.clone(),
                };
                Some(bundle::Policy {
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
                    rules,
                    when: b.when.clone(),
                    not_accepted: None,
                    listeners: Vec::new(),
                    origin: Some(bundle::Origin {
                        policy: b.object.clone(),
                        block: Some(b.kind),
                        strategy: Some(b.strategy),
                        note: String::new(),
                    }),
                })
            }
        }
    }
}

/// A unit with what identifies it across backends, and its listeners.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum GlobalKey {
    Lower(String, Vec<String>, Vec<ListenerKey>),
    Block(usize, Option<Vec<usize>>, Vec<ListenerKey>),
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
        // Effective policies by what they are (and their listeners): one bundle policy each,
        // with every backend it applies to as a target.
        let mut groups: Vec<(GlobalKey, bundle::Policy)> = Vec::new();
        let mut group_of: std::collections::HashMap<GlobalKey, usize> =
            std::collections::HashMap::new();
        for (backend, listeners) in self.listeners_per_backend() {
            let (bns, bname) = backend.split_once('/').unwrap_or(("", &backend));
            let here = |p: &bundle::Policy| {
                p.level == Level::Backend
                    && p.targets.iter().any(|t| {
                        t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns
                    })
            };
            let reaching = listeners
                .iter()
                .any(|l| blocks.iter().any(|b| block_reaches(b, l)));
            if !reaching {
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
            let scope = Scope {
                lower: &lower,
                blocks: &blocks,
            };
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
            let conds: Vec<Cond> = blocks
                .iter()
                .map(|b| condition(b, &lower, (&raw, &mut cache)))
                .collect();
            let as_written: Vec<Unit> = (0..lower.len())
                .map(|i| Unit::Lower {
                    i,
                    removed: Vec::new(),
                })
                .collect();
            // Per unit, the listeners it is effective on (in first-seen order).
            let mut variants: Vec<(Unit, Vec<ListenerKey>)> = Vec::new();
            let mut changed = false;
            for l in &listeners {
                let mut units = as_written.clone();
                let mut fx = Effects::default();
                for (k, b) in blocks.iter().enumerate() {
                    if block_reaches(b, l) {
                        apply(&scope, k, (&conds, &unset), &mut units, &mut fx);
                    }
                }
                changed |= units != as_written;
                effects_all.push((backend.clone(), l.clone(), fx));
                for u in units {
                    match variants.iter_mut().find(|(x, _)| *x == u) {
                        Some((_, ls)) => ls.push(l.clone()),
                        None => variants.push((u, vec![l.clone()])),
                    }
                }
            }
            if !changed {
                continue;
            }
            // A lower policy unchanged on every listener keeps this backend as a target; the
            // backend leaves the others, whose effective variants replace them.
            let everywhere = |u: &Unit| {
                variants
                    .iter()
                    .any(|(x, ls)| x == u && ls.len() == listeners.len())
            };
            let kept: Vec<String> = as_written
                .iter()
                .filter(|u| everywhere(u))
                .filter_map(|u| match u {
                    Unit::Lower { i, .. } => lower.get(*i).map(lower_id),
                    Unit::Block { .. } => None,
                })
                .collect();
            for p in out.iter_mut().filter(|p| here(p)) {
                if kept.contains(&lower_id(p)) {
                    continue;
                }
                p.targets.retain(|t| {
                    !(t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns)
                });
            }
            for (u, ls) in variants {
                if ls.len() == listeners.len() && as_written.contains(&u) {
                    continue;
                }
                let only = if ls.len() < listeners.len() {
                    ls
                } else {
                    Vec::new()
                };
                let key = match &u {
                    Unit::Lower { i, removed } => GlobalKey::Lower(
                        lower.get(*i).map(lower_id).unwrap_or_default(),
                        removed.clone(),
                        only.clone(),
                    ),
                    Unit::Block { k, kept } => GlobalKey::Block(*k, kept.clone(), only.clone()),
                };
                if let Some(g) = group_of.get(&key).and_then(|&i| groups.get_mut(i)) {
                    g.1.targets.push(backend_target(bns, bname));
                    continue;
                }
                let Some(mut p) = scope.materialize(&u, (bns, bname)) else {
                    continue;
                };
                p.listeners = only
                    .iter()
                    .map(|(ns, g, l)| bundle::PolicyTarget {
                        name: g.clone(),
                        namespace: Some(ns.clone()),
                        section_name: Some(l.clone()),
                    })
                    .collect();
                group_of.insert(key.clone(), groups.len());
                groups.push((key, p));
            }
        }
        let mut added = Vec::new();
        for (_, mut p) in groups {
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
            added.push(p);
        }
        out.retain(|p| !p.targets.is_empty());
        out.extend(added);
        out.sort_by(|a, b| {
            (a.seniority, &a.namespace, &a.name).cmp(&(b.seniority, &b.namespace, &b.name))
        });
        self.effects = effects_all;
        self.block_statuses(&blocks);
    }

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

/// Whether block `b` applies to a backend with policies `lower` by its `condition`: it holds
/// for at least one lower policy of the block's action, or there is none (an error: it
/// applies, and the message says why).
fn condition(
    b: &BlockPolicy,
    lower: &[bundle::Policy],
    (raw, cache): (&LowerSpecs, &mut CondCache),
) -> Cond {
    let Some(cond) = &b.condition else {
        return (true, None);
    };
    let of_action: Vec<&bundle::Policy> = lower
        .iter()
        .filter(|p| p.action == b.action && p.not_accepted.is_none())
        .collect();
    if of_action.is_empty() {
        return (true, None);
    }
    let mut holds = false;
    let mut error = None;
    for p in of_action {
        let id = lower_id(p);
        let key = (b.object.clone(), id);
        let result = match cache.get(&key) {
            Some(r) => r.clone(),
            None => {
                let null = serde_json::Value::Null;
                let v = raw.get(&key.1).map_or(&null, |(v, _)| v);
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
                error = Some(e);
                holds = true;
            }
        }
    }
    (holds, error)
}

/// `namespace/name` of a bundle policy.
fn lower_id(p: &bundle::Policy) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// Applies block `k` to the units of one (listener, backend).
fn apply(
    scope: &Scope<'_>,
    k: usize,
    (conds, unset): (&[Cond], &BTreeMap<String, String>),
    units: &mut Vec<Unit>,
    fx: &mut Effects,
) {
    let Some(b) = scope.blocks.get(k) else { return };
    let lower = scope.lower;
    if let Some((holds, error)) = conds.get(k) {
        if let Some(e) = error {
            fx.condition_errors.insert(b.object.clone(), e.clone());
        }
        if !holds {
            return;
        }
    }
    let of_action = |u: &Unit| scope.action(u) == Some(b.action);
    let ext = b.action == Action::ExternalAuth;
    let my_key = format!("{}/{}", b.namespace, b.name);
    // Whether the lower set (with the blocks applied so far) has merge key `name`.
    let present = |units: &[Unit], name: &str| {
        units.iter().filter(|u| of_action(u)).any(|u| {
            if ext {
                scope.has_key(u, name)
            } else {
                scope.has_name(u, name)
            }
        })
    };
    let set_empty = !units.iter().any(of_action);
    let whole = ext || b.rules.is_none();
    let rule_name = |ix: usize| {
        b.rules
            .as_ref()
            .and_then(|rs| rs.get(ix))
            .map(|r| r.name.clone())
            .unwrap_or_default()
    };
    let all: Option<Vec<usize>> = b.rules.as_ref().map(|rs| (0..rs.len()).collect());
    // Whether a more senior override (applied before) holds merge key `name`.
    let senior = |units: &[Unit], name: &str| {
        units.iter().any(|u| {
            of_action(u)
                && scope.is_override(u)
                && if ext {
                    scope.has_key(u, name)
                } else {
                    scope.has_name(u, name)
                }
        })
    };
    let kept: Option<Vec<usize>> = match (b.kind, b.strategy) {
        (BlockKind::Defaults, Strategy::Atomic) => {
            if !set_empty {
                return;
            }
            None
        }
        (BlockKind::Defaults, Strategy::Merge) if whole => {
            if let Some(by) = unset.get(&my_key).or_else(|| unset.get(&b.name)) {
                fx.not_added.insert(
                    format!("{my_key} of {}", b.object),
                    format!("unset by {by}"),
                );
                return;
            }
            if (ext && present(units, &my_key)) || (!ext && !set_empty) {
                return;
            }
            None
        }
        (BlockKind::Defaults, Strategy::Merge) => {
            let mut kept = Vec::new();
            for ix in all.iter().flatten().copied() {
                let name = rule_name(ix);
                let key = format!("{name} of {}", b.object);
                if let Some(by) = unset.get(&name) {
                    fx.not_added.insert(key, format!("unset by {by}"));
                } else if present(units, &name) {
                    fx.not_added
                        .insert(key, "a lower rule of that name is kept".into());
                } else {
                    kept.push(ix);
                }
            }
            if kept.is_empty() {
                return;
            }
            let names: Vec<String> = kept.iter().map(|ix| rule_name(*ix)).collect();
            for u in units.iter().filter(|u| of_action(u)) {
                if let Unit::Lower { i, .. } = u {
                    if let Some(p) = lower.get(*i) {
                        fx.added
                            .entry(lower_id(p))
                            .or_default()
                            .extend(names.iter().cloned());
                    }
                }
            }
            Some(kept)
        }
        (BlockKind::Overrides, Strategy::Atomic) => {
            // Replaces everything of this action but more senior overrides (and stand-ins).
            for u in units
                .iter()
                .filter(|u| of_action(u) && !scope.is_standin(u))
            {
                if let Unit::Lower { i, .. } = u {
                    let Some(p) = lower.get(*i) else { continue };
                    let mut names: Vec<String> =
                        scope.names(u).into_iter().map(str::to_string).collect();
                    if p.rules.is_none() {
                        names.push("(all traffic)".into());
                    }
                    fx.replaced.entry(lower_id(p)).or_default().extend(names);
                    fx.whole.insert(lower_id(p));
                }
            }
            units.retain(|u| !of_action(u) || scope.is_standin(u) || scope.is_override(u));
            match &all {
                Some(all) => {
                    let kept: Vec<usize> = all
                        .iter()
                        .copied()
                        .filter(|ix| !senior(units, &rule_name(*ix)))
                        .collect();
                    if kept.is_empty() {
                        return;
                    }
                    Some(kept)
                }
                None => None,
            }
        }
        (BlockKind::Overrides, Strategy::Merge) => {
            if ext {
                if senior(units, &my_key) {
                    return;
                }
                units.retain(|u| !(of_action(u) && scope.has_key(u, &my_key)));
                None
            } else if let Some(all) = &all {
                let kept: Vec<usize> = all
                    .iter()
                    .copied()
                    .filter(|ix| !senior(units, &rule_name(*ix)))
                    .collect();
                if kept.is_empty() {
                    return;
                }
                let names: BTreeSet<String> = kept.iter().map(|ix| rule_name(*ix)).collect();
                for u in units.iter_mut() {
                    if scope.action(u) != Some(b.action) {
                        continue;
                    }
                    if !names.iter().any(|n| scope.has_name(u, n)) {
                        continue;
                    }
                    let hit: Vec<String> = scope
                        .names(u)
                        .into_iter()
                        .filter(|n| names.contains(*n))
                        .map(str::to_string)
                        .collect();
                    if hit.is_empty() {
                        continue;
                    }
                    match u {
                        Unit::Lower { i, removed } => {
                            if let Some(p) = lower.get(*i) {
                                fx.replaced
                                    .entry(lower_id(p))
                                    .or_default()
                                    .extend(hit.iter().cloned());
                            }
                            removed.extend(hit);
                            removed.sort();
                            removed.dedup();
                        }
                        Unit::Block { k: bk, kept } => {
                            let rs = scope.blocks.get(*bk).and_then(|x| x.rules.as_ref());
                            let left: Vec<usize> = match kept {
                                Some(kept) => kept.clone(),
                                None => rs.map(|rs| (0..rs.len()).collect()).unwrap_or_default(),
                            };
                            *kept = Some(
                                left.into_iter()
                                    .filter(|ix| {
                                        rs.and_then(|rs| rs.get(*ix))
                                            .is_none_or(|r| !names.contains(&r.name))
                                    })
                                    .collect(),
                            );
                        }
                    }
                }
                units.retain(|u| !scope.emptied(u));
                Some(kept)
            } else {
                None
            }
        }
    };
    if b.kind == BlockKind::Overrides {
        // An `unset` of an override is refused (and reported on the lower policy).
        let mine: Vec<String> = match &kept {
            Some(k) => k.iter().map(|ix| rule_name(*ix)).collect(),
            None => all.iter().flatten().map(|ix| rule_name(*ix)).collect(),
        };
        for (n, by) in unset {
            if mine.contains(n) || (ext && (n == &my_key || n == &b.name)) {
                fx.unset_refused
                    .entry(by.clone())
                    .or_default()
                    .insert(n.clone());
            }
        }
    }
    fx.applied.insert(b.object.clone());
    units.push(Unit::Block { k, kept });
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
