//! Defaults and overrides (docs/semantics.md, "Defaults and overrides"): the blocks of
//! Gateway policies applied, ahead of time, to the Backend level of every backend behind the
//! Gateway, giving one effective Backend-level policy set per (listener, backend, route
//! class): route-scoped policies (HTTPRoute targets) join the lower set only for requests
//! through their routes. Where the result differs between listeners or routes, the bundle
//! policies are narrowed to their listeners and routes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Ctx;
use crate::load::PolicySpec;
use crate::model::*;
use crate::refs::{is_ns_name, NsName, ObjectName};

use mcp_access_bundle::{self as bundle, Action, BlockKind, Level, Strategy};
use mcp_access_cel::SelfCondition;

mod apply;
mod routes;
mod status;

use apply::apply;
pub(crate) use routes::{BackendRoutes, Class};

/// Condition results per (lower policy, block policy): the lower spec does not change. A
/// block is known by the first block of its object (`Prepared::canon`).
type CondCache = HashMap<String, Vec<Option<Result<bool, String>>>>;

/// Whether a block's condition lets it apply to one backend, and its error if it erred.
type Cond = (bool, Option<String>);

/// Bundle `namespace/name` of each policy -> (its spec as written, its `unset`).
type LowerSpecs = BTreeMap<String, (serde_json::Value, Vec<String>)>;

/// An accepted Gateway policy with a defaults or overrides block, compiled.
#[derive(Debug, Clone)]
pub(crate) struct BlockPolicy {
    /// The policy object.
    pub(crate) object: ObjectName,
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
    /// A dry-run policy's block: applied in the dry-run decision only.
    pub(crate) dry_run: bool,
}

/// A listener: `(gateway namespace, gateway name, listener name)`.
pub(super) type ListenerKey = (String, String, String);

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
    /// Per block, what its applications share (same order as `blocks`).
    prepared: &'a [Prepared],
}

/// What every application of one block shares, made once.
struct Prepared {
    /// Its bundle `namespace/name` (its ExternalAuth merge key).
    key: String,
    /// Its rules' indices (None: it has no rules).
    all: Option<Vec<usize>>,
    /// Per rule, the name of a default not added: `{rule name} of {object}`.
    not_added: Vec<String>,
    /// The index of the first block of the same object: the condition cache's key.
    canon: usize,
}

impl Prepared {
    fn of(blocks: &[&BlockPolicy]) -> Vec<Prepared> {
        blocks
            .iter()
            .enumerate()
            .map(|(k, b)| Prepared {
                key: format!("{}/{}", b.namespace, b.name),
                all: b.rules.as_ref().map(|rs| (0..rs.len()).collect()),
                not_added: b
                    .rules
                    .iter()
                    .flatten()
                    .map(|r| format!("{} of {}", r.name, b.object))
                    .collect(),
                canon: blocks
                    .iter()
                    .position(|x| x.object == b.object)
                    .unwrap_or(k),
            })
            .collect()
    }
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
        is_ns_name(key, ns, name)
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

    /// The bundle policy of a unit on backend `(bns, bname)`, through `routes`.
    fn materialize(
        &self,
        u: &Unit,
        (bns, bname): (&str, &str),
        routes: Option<Vec<String>>,
    ) -> Option<bundle::Policy> {
        let target = bundle::PolicyTarget {
            routes,
            ..backend_target(bns, bname)
        };
        match u {
            Unit::Lower { i, removed } => {
                let mut p = self.lower.get(*i)?.clone();
                p.targets = vec![target];
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
                    targets: vec![target],
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
                        policy: b.object.to_string(),
                        block: Some(b.kind),
                        strategy: Some(b.strategy),
                        note: String::new(),
                    }),
                    mode: bundle::PolicyMode::Enforce,
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
    pub(crate) applied: BTreeSet<ObjectName>,
    /// Blocks whose condition erred (applied anyway).
    pub(crate) condition_errors: BTreeMap<ObjectName, String>,
    /// Lower policies an atomic override removed whole.
    pub(crate) whole: BTreeSet<String>,
    /// Default rules (or ExternalAuth blocks) not added: name -> why.
    pub(crate) not_added: BTreeMap<String, String>,
}

/// What the blocks did on one (listener, backend, route class).
#[derive(Debug, Clone)]
pub(crate) struct EffectRecord {
    pub(crate) backend: NsName,
    pub(crate) listener: ListenerKey,
    /// The route class's names (None: every route).
    pub(crate) routes: Option<BTreeSet<String>>,
    /// The lower policies (bundle `namespace/name`) requests there meet.
    pub(crate) lower: BTreeSet<String>,
    pub(crate) fx: Effects,
}

/// A (listener, route class) pair of one backend: the class is an index into its classes.
type Pair<'l> = (&'l ListenerKey, usize);

/// Per unit of one backend, the pairs it is effective on (in first-seen order).
type Variants<'l> = Vec<(Unit, Vec<Pair<'l>>)>;

/// How one backend's requests divide: its route classes and the (listener, class) pairs that
/// can occur.
struct Shape<'a> {
    classes: &'a [Class],
    pairs: &'a [Pair<'a>],
    routes: &'a BackendRoutes,
}

impl<'a> Shape<'a> {
    /// The pairs where lower policy `i` is met.
    fn pairs_of(&self, i: usize) -> Vec<&Pair<'a>> {
        self.pairs
            .iter()
            .filter(|(_, c)| self.classes.get(*c).is_some_and(|c| c.members.contains(&i)))
            .collect()
    }

    /// Whether lower policy `i` is unchanged wherever it is met (met nowhere: it stays as
    /// written, never dropped).
    fn kept(&self, variants: &Variants<'a>, i: usize) -> bool {
        let mine = self.pairs_of(i);
        if mine.is_empty() {
            return true;
        }
        let as_written = Unit::Lower {
            i,
            removed: Vec::new(),
        };
        variants
            .iter()
            .any(|(u, ps)| *u == as_written && mine.iter().all(|x| ps.contains(*x)))
    }

    /// The routes of classes `cs` as a target's `routes` (None: every route).
    fn routes_of(&self, cs: &BTreeSet<usize>) -> Option<Vec<String>> {
        let mut names = BTreeSet::new();
        for c in cs.iter().filter_map(|c| self.classes.get(*c)) {
            names.extend(c.names.clone()?);
        }
        (!self.routes.covers_all(&names)).then(|| names.into_iter().collect())
    }
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
        let prepared = Prepared::of(&blocks);
        for b in &blocks {
            if let Some(a) = &b.authorizer {
                let mut a = a.clone();
                a.name = format!("{}.{}", b.namespace, b.name);
                authorizers.push(a);
            }
        }
        let raw = self.lower_specs();
        let mut cache = CondCache::new();
        let mut records: Vec<EffectRecord> = Vec::new();
        let mut groups = Groups::default();
        let all_routes = self.backend_routes();
        for (backend, listeners) in self.listeners_per_backend() {
            let (bns, bname) = (backend.namespace.as_str(), backend.name.as_str());
            let reaching = listeners
                .iter()
                .any(|l| blocks.iter().any(|b| block_reaches(b, l)));
            if !reaching {
                continue;
            }
            let lower: Vec<bundle::Policy> = out
                .iter()
                .filter(|p| is_on(p, bns, bname))
                .cloned()
                .map(|mut p| {
                    p.targets = vec![target_on(&p, bns, bname)];
                    p
                })
                .collect();
            let Some(routes) = all_routes.get(&backend) else {
                continue;
            };
            let scopes: Vec<Option<&[String]>> = lower
                .iter()
                .map(|p| p.targets.first().and_then(|t| t.routes.as_deref()))
                .collect();
            let classes = routes.classes(&scopes);
            let pairs: Vec<Pair> = listeners
                .iter()
                .flat_map(|l| {
                    classes
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| routes.feasible(c, l))
                        .map(move |(ci, _)| (l, ci))
                })
                .collect();
            let shape = Shape {
                classes: &classes,
                pairs: &pairs,
                routes,
            };
            let scope = Scope {
                lower: &lower,
                blocks: &blocks,
                prepared: &prepared,
            };
            let (variants, effects) = scope.variants(&shape, &raw, &mut cache);
            let changed = effects.iter().any(|(_, changed)| *changed);
            records.extend(effects.into_iter().map(|(mut r, _)| {
                r.backend = backend.clone();
                r
            }));
            if !changed {
                continue;
            }
            scope.retarget(out, &variants, &shape, (bns, bname));
            groups.add(&scope, variants, &shape, (bns, bname));
        }
        let added = groups.named(out);
        out.retain(|p| !p.targets.is_empty());
        out.extend(added);
        out.sort_by(|a, b| {
            (a.seniority, &a.namespace, &a.name).cmp(&(b.seniority, &b.namespace, &b.name))
        });
        self.effects = records;
        self.block_statuses(&blocks);
    }

    pub(super) fn listeners_per_backend(&self) -> BTreeMap<NsName, Vec<ListenerKey>> {
        let mut map: BTreeMap<NsName, Vec<ListenerKey>> = BTreeMap::new();
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

/// The Backend-level policies of bundle `b` on backend `bns/bname`, each with its target there.
pub(super) fn on_backend<'b>(
    b: &'b bundle::Bundle,
    (bns, bname): (&str, &str),
) -> (Vec<&'b bundle::Policy>, Vec<bundle::PolicyTarget>) {
    let back: Vec<&bundle::Policy> = b.policies.iter().filter(|p| is_on(p, bns, bname)).collect();
    let targets = back.iter().map(|p| target_on(p, bns, bname)).collect();
    (back, targets)
}

/// Policy `p`'s target on backend `bns/bname`: through the routes of all its targets there
/// (None if one of them has none).
fn target_on(p: &bundle::Policy, bns: &str, bname: &str) -> bundle::PolicyTarget {
    let mut routes: Option<Vec<String>> = Some(Vec::new());
    for t in p
        .targets
        .iter()
        .filter(|t| t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns)
    {
        match (&mut routes, &t.routes) {
            (Some(all), Some(more)) => all.extend(more.iter().cloned()),
            _ => routes = None,
        }
    }
    bundle::PolicyTarget {
        routes: routes.map(|mut r| {
            r.sort();
            r.dedup();
            r
        }),
        ..backend_target(bns, bname)
    }
}

fn backend_target(ns: &str, name: &str) -> bundle::PolicyTarget {
    bundle::PolicyTarget {
        name: name.to_string(),
        namespace: Some(ns.to_string()),
        section_name: None,
        routes: None,
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

/// Whether block `b` (`canon`: its key in the cache) applies to a backend with policies
/// `lower` (each with its `namespace/name`) by its `condition`: it holds for at least one
/// lower policy of the block's action, or there is none (an error: it applies, and the
/// message says why).
fn condition(
    (b, canon): (&BlockPolicy, usize),
    lower: &[(&bundle::Policy, String)],
    (raw, cache, blocks): (&LowerSpecs, &mut CondCache, usize),
) -> Cond {
    let Some(cond) = &b.condition else {
        return (true, None);
    };
    let mut of_action = lower
        .iter()
        .filter(|(p, _)| p.action == b.action && p.not_accepted.is_none())
        .peekable();
    if of_action.peek().is_none() {
        return (true, None);
    }
    let mut holds = false;
    let mut error = None;
    for (_, id) in of_action {
        let cached = cache.get(id).and_then(|c| c.get(canon)).cloned().flatten();
        let result = match cached {
            Some(r) => r,
            None => {
                let null = serde_json::Value::Null;
                let v = raw.get(id).map_or(&null, |(v, _)| v);
                let r = cond
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|c| c.eval(v).map_err(|e| e.message));
                let slots = cache
                    .entry(id.clone())
                    .or_insert_with(|| vec![None; blocks]);
                if let Some(slot) = slots.get_mut(canon) {
                    *slot = Some(r.clone());
                }
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

/// Whether `p` is a Backend-level policy of backend `bns/bname`.
fn is_on(p: &bundle::Policy, bns: &str, bname: &str) -> bool {
    p.level == Level::Backend
        && p.targets
            .iter()
            .any(|t| t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns)
}

impl Scope<'_> {
    /// The lower policies of a class as written: one unit each.
    fn as_written(&self, c: &Class) -> Vec<Unit> {
        c.members
            .iter()
            .map(|i| Unit::Lower {
                i: *i,
                removed: Vec::new(),
            })
            .collect()
    }

    /// The blocks applied on each (listener, route class) pair: the units' variants, and per
    /// pair what the blocks did and whether its units differ from the lower policies as
    /// written.
    fn variants<'l>(
        &self,
        shape: &Shape<'l>,
        raw: &LowerSpecs,
        cache: &mut CondCache,
    ) -> (Variants<'l>, Vec<(EffectRecord, bool)>) {
        // Per class: `unset` entries of its lower policies (name -> the policy that unsets
        // it) and the blocks' conditions over them.
        let per_class: Vec<(BTreeMap<String, String>, Vec<Cond>)> = shape
            .classes
            .iter()
            .map(|c| {
                let members: Vec<(&bundle::Policy, String)> = c
                    .members
                    .iter()
                    .filter_map(|i| self.lower.get(*i))
                    .map(|p| (p, lower_id(p)))
                    .collect();
                let unset = members
                    .iter()
                    .flat_map(|(_, id)| {
                        raw.get(id)
                            .map(|(_, u)| u.clone())
                            .unwrap_or_default()
                            .into_iter()
                            .map(move |n| (n, id.clone()))
                    })
                    .collect();
                let n = self.blocks.len();
                let conds = self
                    .blocks
                    .iter()
                    .zip(self.prepared)
                    .map(|(b, pr)| condition((b, pr.canon), &members, (raw, &mut *cache, n)))
                    .collect();
                (unset, conds)
            })
            .collect();
        let mut variants: Variants = Vec::new();
        let mut effects = Vec::new();
        for &(l, ci) in shape.pairs {
            let (Some(class), Some((unset, conds))) = (shape.classes.get(ci), per_class.get(ci))
            else {
                continue;
            };
            let as_written = self.as_written(class);
            let mut units = as_written.clone();
            let mut fx = Effects::default();
            for (k, b) in self.blocks.iter().enumerate() {
                if block_reaches(b, l) {
                    apply(self, k, (conds, unset), &mut units, &mut fx);
                }
            }
            let record = EffectRecord {
                backend: NsName::default(),
                listener: l.clone(),
                routes: class.names.clone(),
                lower: class
                    .members
                    .iter()
                    .filter_map(|i| self.lower.get(*i))
                    .map(lower_id)
                    .collect(),
                fx,
            };
            effects.push((record, units != as_written));
            for u in units {
                let pair = (l, ci);
                match variants.iter_mut().find(|(x, _)| *x == u) {
                    Some((_, ps)) => ps.push(pair),
                    None => variants.push((u, vec![pair])),
                }
            }
        }
        (variants, effects)
    }

    /// A lower policy unchanged wherever it is met keeps this backend as a target; the
    /// backend leaves the others, whose effective variants replace them.
    fn retarget(
        &self,
        out: &mut [bundle::Policy],
        variants: &Variants,
        shape: &Shape<'_>,
        (bns, bname): (&str, &str),
    ) {
        let kept: Vec<String> = (0..self.lower.len())
            .filter(|i| shape.kept(variants, *i))
            .filter_map(|i| self.lower.get(i).map(lower_id))
            .collect();
        for p in out.iter_mut().filter(|p| is_on(p, bns, bname)) {
            if kept.contains(&lower_id(p)) {
                continue;
            }
            p.targets.retain(|t| {
                !(t.name == bname && t.namespace.as_deref().unwrap_or(&p.namespace) == bns)
            });
        }
    }
}

/// Effective policies by what they are (and their listeners): one bundle policy each, with
/// every backend it applies to as a target.
#[derive(Default)]
struct Groups {
    list: Vec<(GlobalKey, bundle::Policy)>,
    index: HashMap<GlobalKey, usize>,
}

impl Groups {
    /// The variants of one backend that differ from its lower policies as written, each
    /// narrowed to the listeners and routes it is effective on.
    fn add(
        &mut self,
        scope: &Scope<'_>,
        variants: Variants,
        shape: &Shape<'_>,
        (bns, bname): (&str, &str),
    ) {
        for (u, ps) in &variants {
            if let Unit::Lower { i, removed } = u {
                if removed.is_empty() && shape.kept(&variants, *i) {
                    continue;
                }
            }
            // Per class, its listeners here; classes on all the listeners they occur on
            // (empty: no narrowing) or on the same ones share one bundle policy.
            let mut by_class: BTreeMap<usize, Vec<&ListenerKey>> = BTreeMap::new();
            for &(l, c) in ps {
                by_class.entry(c).or_default().push(l);
            }
            let mut by_listeners: BTreeMap<Vec<&ListenerKey>, BTreeSet<usize>> = BTreeMap::new();
            for (c, mut ls) in by_class {
                let occurs = shape.pairs.iter().filter(|(_, x)| *x == c).count();
                if ls.len() == occurs {
                    ls.clear();
                }
                ls.sort();
                by_listeners.entry(ls).or_default().insert(c);
            }
            for (only, classes) in by_listeners {
                let routes = shape.routes_of(&classes);
                let only = only.into_iter().cloned().collect();
                self.add_one(scope, u, (bns, bname), routes, only);
            }
        }
    }

    /// One effective policy on one backend, on listeners `only` (empty: all).
    fn add_one(
        &mut self,
        scope: &Scope<'_>,
        u: &Unit,
        (bns, bname): (&str, &str),
        routes: Option<Vec<String>>,
        only: Vec<ListenerKey>,
    ) {
        let key = match u {
            Unit::Lower { i, removed } => GlobalKey::Lower(
                scope.lower.get(*i).map(lower_id).unwrap_or_default(),
                removed.clone(),
                only.clone(),
            ),
            Unit::Block { k, kept } => GlobalKey::Block(*k, kept.clone(), only.clone()),
        };
        if let Some(g) = self.index.get(&key).and_then(|&i| self.list.get_mut(i)) {
            g.1.targets.push(bundle::PolicyTarget {
                routes,
                ..backend_target(bns, bname)
            });
            return;
        }
        let Some(mut p) = scope.materialize(u, (bns, bname), routes) else {
            return;
        };
        p.listeners = listener_targets(&only);
        self.index.insert(key.clone(), self.list.len());
        self.list.push((key, p));
    }

    /// The group policies, each named after its policy (and its one backend), with a number
    /// where the name is taken among `existing` or an earlier group.
    fn named(self, existing: &[bundle::Policy]) -> Vec<bundle::Policy> {
        let mut names: BTreeSet<String> = existing.iter().map(lower_id).collect();
        let mut added = Vec::new();
        for (_, mut p) in self.list {
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
        added
    }
}

/// Listeners as bundle targets (Gateway and sectionName).
pub(super) fn listener_targets<'a>(
    listeners: impl IntoIterator<Item = &'a ListenerKey>,
) -> Vec<bundle::PolicyTarget> {
    listeners
        .into_iter()
        .map(|(ns, g, l)| bundle::PolicyTarget {
            name: g.clone(),
            namespace: Some(ns.clone()),
            section_name: Some(l.clone()),
            routes: None,
        })
        .collect()
}
