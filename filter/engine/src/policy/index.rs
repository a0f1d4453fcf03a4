//! The policies attached to each Gateway listener and each Backend, indexed once per bundle:
//! one [`LevelIndex`] per listener, and per backend one for every combination of a listener
//! some of its policies are narrowed to and a route some are scoped to (docs/semantics.md
//! §1.6, §7); and those of the dry-run decision ([`View`], [`DryRunView`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mcp_access_bundle::{self as bundle, Level, PolicyMode, ValidBundle};

use super::{
    compiled, CompileError, CompileProblem, FastMap, LevelIndex, Mode, PolicyId, RuleRef, RuleSet,
};
use crate::pins::ToolPins;
use crate::request::Target;
use mcp_access_bundle::gateway_api::HostPattern;

/// One index per Gateway listener, of the Gateway-level policies attached to it that take
/// part in `view`'s decision.
pub(super) fn index_listeners(
    b: &ValidBundle,
    order: &[&bundle::Policy],
    policies: &[compiled::Policy],
    view: View,
) -> Vec<compiled::Listener> {
    let mut listeners = Vec::new();
    for g in &b.gateways {
        for l in &g.listeners {
            let mut index = LevelIndex::default();
            for (pid, p) in order.iter().enumerate() {
                let attached = p.level == Level::Gateway
                    && p.targets.iter().any(|t| {
                        t.name == g.name
                            && t.namespace.as_deref().unwrap_or(&p.namespace) == g.namespace
                            && t.section_name.as_ref().is_none_or(|s| s == &l.name)
                    });
                if attached {
                    index.attach(pid, policies, view);
                }
            }
            listeners.push(compiled::Listener {
                id: format!("{}/{}/{}", g.namespace, g.name, l.name),
                port: l.port,
                host: l.hostname.as_deref().map(HostPattern::new),
                index,
                discovery: l.protected_resource.as_ref().map(super::Discovery::of),
            });
        }
    }
    listeners
}

/// The backends indexed, and how Envoy's route and cluster names find them.
pub(super) struct BackendIndex {
    pub(super) backends: Vec<compiled::Backend>,
    pub(super) by_route: HashMap<String, usize>,
    pub(super) by_cluster: HashMap<String, usize>,
}

/// A Backend-level policy attached to one backend.
struct Attached {
    pid: PolicyId,
    /// The listeners it is narrowed to (None: every listener).
    listeners: Option<Vec<usize>>,
    /// The route and cluster names it applies through (None: every route).
    routes: Option<Vec<String>>,
}

/// Backend-level policies by the (namespace, name) they target, most senior first, each
/// once with the union of its routes there: one pass over the policies instead of one per
/// backend.
fn targeting<'b>(order: &[&'b bundle::Policy]) -> HashMap<(&'b str, &'b str), Vec<Attached>> {
    let mut out: HashMap<(&str, &str), Vec<Attached>> = HashMap::new();
    for (pid, p) in order.iter().enumerate() {
        if p.level != Level::Backend {
            continue;
        }
        for t in &p.targets {
            let key = (
                t.namespace.as_deref().unwrap_or(&p.namespace),
                t.name.as_str(),
            );
            let list = out.entry(key).or_default();
            match list.last_mut() {
                Some(a) if a.pid == pid => {
                    // Targeted twice: through the routes of both.
                    a.routes = match (a.routes.take(), &t.routes) {
                        (Some(mut mine), Some(more)) => {
                            mine.extend(more.iter().cloned());
                            Some(mine)
                        }
                        _ => None,
                    };
                }
                _ => list.push(Attached {
                    pid,
                    listeners: None,
                    routes: t.routes.clone(),
                }),
            }
        }
    }
    out
}

/// One index per Backend, of the Backend-level policies attached to it (and one per
/// listener and route slot that some of them are narrowed to) that take part in `view`'s
/// decision. Listener narrowing and route slots are those of every policy, whatever `view`:
/// both decisions' backends have the same shape.
pub(super) fn index_backends(
    b: &ValidBundle,
    order: &[&bundle::Policy],
    policies: &[compiled::Policy],
    listeners: &[compiled::Listener],
    view: View,
) -> Result<BackendIndex, CompileError> {
    let mut targeting = targeting(order);
    let mut out = BackendIndex {
        backends: Vec::new(),
        by_route: HashMap::new(),
        by_cluster: HashMap::new(),
    };
    let listener_of = |p: &bundle::Policy, t: &bundle::PolicyTarget| {
        let ns = t.namespace.as_deref().unwrap_or(&p.namespace);
        let id = format!(
            "{ns}/{}/{}",
            t.name,
            t.section_name.as_deref().unwrap_or("")
        );
        listeners.iter().position(|l| l.id == id)
    };
    for (bi, be) in b.backends.iter().enumerate() {
        let mut attached = targeting
            .remove(&(be.namespace.as_str(), be.name.as_str()))
            .unwrap_or_default();
        for a in &mut attached {
            let Some(p) = order.get(a.pid) else { continue };
            if !p.listeners.is_empty() {
                a.listeners = Some(
                    p.listeners
                        .iter()
                        .filter_map(|t| listener_of(p, t))
                        .collect(),
                );
            }
        }
        for r in &be.route_names {
            out.by_route.insert(r.clone(), bi);
        }
        for c in &be.cluster_names {
            out.by_cluster.insert(c.clone(), bi);
        }
        let pins = match &be.pins {
            Some(p) => Some(Arc::new(ToolPins::compile(p).map_err(|e| {
                CompileError {
                    policy: p.source.clone(),
                    problem: CompileProblem::Pins(e),
                }
            })?)),
            None => None,
        };
        out.backends
            .push(backend(be, &attached, policies, pins, view));
    }
    Ok(out)
}

/// A backend's indexes: the plain one, and one per (narrowed listener, route slot).
fn backend(
    be: &bundle::Backend,
    attached: &[Attached],
    policies: &[compiled::Policy],
    pins: Option<Arc<ToolPins>>,
    view: View,
) -> compiled::Backend {
    let mut narrowed: Vec<usize> = attached
        .iter()
        .flat_map(|a| a.listeners.iter().flatten().copied())
        .collect();
    crate::order::sort(&mut narrowed);
    narrowed.dedup();
    let (route_slots, mut slots) = route_slots(attached);
    let other_slots = attached.iter().any(|a| a.routes.is_some()).then(|| {
        slots.extend([Vec::new(), Vec::new()]);
        compiled::OtherSlots {
            route: slots.len() - 2,
            cluster: slots.len() - 1,
            by_route_names: attached
                .iter()
                .filter(|a| {
                    a.routes
                        .iter()
                        .flatten()
                        .any(|r| be.route_names.contains(r))
                })
                .map(|a| a.pid)
                .collect(),
        }
    });
    let through = |pid, slot| compiled::through(&slots, other_slots.as_ref(), pid, slot);
    let build = |listener: Option<usize>, slot: Option<usize>| {
        let mut ix = LevelIndex::default();
        for a in attached {
            let on_listener = match &a.listeners {
                None => true,
                Some(ls) => listener.is_some_and(|l| ls.contains(&l)),
            };
            if !on_listener {
                continue;
            }
            match a.routes.as_ref().map(|_| through(a.pid, slot)) {
                None | Some(compiled::Through::Yes) => ix.attach(a.pid, policies, view),
                Some(compiled::Through::Unsure) => ix.attach_presence(a.pid, policies, view),
                Some(compiled::Through::No) => {}
            }
        }
        ix
    };
    let mut scoped = Vec::new();
    let listener_keys = std::iter::once(None).chain(narrowed.iter().copied().map(Some));
    for l in listener_keys {
        let slot_keys = std::iter::once(None).chain((0..slots.len()).map(Some));
        for s in slot_keys {
            if (l, s) != (None, None) {
                scoped.push(((l, s), build(l, s)));
            }
        }
    }
    compiled::Backend {
        id: format!("{}/{}", be.namespace, be.name),
        index: build(None, None),
        scoped,
        narrowed,
        route_slots,
        slots,
        other_slots,
        route_scoped: attached
            .iter()
            .filter(|a| a.routes.is_some())
            .map(|a| (a.pid, a.listeners.clone()))
            .collect(),
        identity_headers: be.identity_headers.clone(),
        pins,
    }
}

/// The names some attached policy is scoped to, each with its slot: names that the same
/// policies apply through share one. Returns (name -> slot, slot -> those policies).
fn route_slots(attached: &[Attached]) -> (FastMap<String, usize>, Vec<Vec<PolicyId>>) {
    let mut by_name: BTreeMap<&str, Vec<PolicyId>> = BTreeMap::new();
    for a in attached {
        for r in a.routes.iter().flatten() {
            let pids = by_name.entry(r.as_str()).or_default();
            if !pids.contains(&a.pid) {
                pids.push(a.pid);
            }
        }
    }
    let mut slots: Vec<Vec<PolicyId>> = Vec::new();
    let mut names = FastMap::default();
    for (name, mut pids) in by_name {
        crate::order::sort(&mut pids);
        let slot = match slots.iter().position(|s| *s == pids) {
            Some(i) => i,
            None => {
                slots.push(pids);
                slots.len() - 1
            }
        };
        names.insert(name.to_string(), slot);
    }
    (names, slots)
}

impl Default for LevelIndex {
    fn default() -> Self {
        LevelIndex {
            external_auth: Vec::new(),
            deny: RuleSet::new(Mode::Select),
            allow: RuleSet::new(Mode::Admit),
            has_allow: false,
            allow_always: false,
            allow_when: Vec::new(),
        }
    }
}

impl LevelIndex {
    /// Attaches policy `pid` if it takes part in `view`'s decision.
    pub(super) fn attach(&mut self, pid: PolicyId, policies: &[compiled::Policy], view: View) {
        let Some(p) = policies.get(pid).filter(|p| view.includes(p.mode)) else {
            return;
        };
        match p.action {
            compiled::Action::ExternalAuth { .. } => self.external_auth.push(pid),
            compiled::Action::Deny | compiled::Action::Allow => {
                let set = if p.action == compiled::Action::Deny {
                    &mut self.deny
                } else {
                    self.note_allow(pid, p);
                    &mut self.allow
                };
                match &p.rules {
                    None => set.add(
                        RuleRef {
                            policy: pid,
                            rule: None,
                        },
                        None,
                    ),
                    Some(rules) => {
                        for (i, r) in rules.iter().enumerate() {
                            set.add(
                                RuleRef {
                                    policy: pid,
                                    rule: Some(i),
                                },
                                Some(r),
                            );
                        }
                    }
                }
            }
        }
    }

    /// A route-scoped policy on a request the filter cannot tell came through its routes or
    /// not: an Allow policy admits nothing there, but the level stays default-deny wherever it
    /// applies (its `when`); other actions do nothing there.
    fn attach_presence(&mut self, pid: PolicyId, policies: &[compiled::Policy], view: View) {
        if let Some(p) = policies
            .get(pid)
            .filter(|p| p.action == compiled::Action::Allow && view.includes(p.mode))
        {
            self.note_allow(pid, p);
        }
    }

    /// An Allow policy is attached: the level is default-deny (where its `when` holds).
    fn note_allow(&mut self, pid: PolicyId, p: &compiled::Policy) {
        self.has_allow = true;
        if p.when.is_empty() {
            self.allow_always = true;
        } else {
            self.allow_when.push(pid);
        }
    }
}

/// Which decision: the one the request gets, or the one with dry-run policies enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The decision enforced: policies of mode `Enforce` and `EnforceOnly`.
    Enforced,
    /// The dry-run decision: policies of mode `Enforce` and `DryRun`.
    DryRun,
}

impl View {
    /// Whether a policy of `mode` takes part in this decision.
    pub(crate) fn includes(self, mode: PolicyMode) -> bool {
        match self {
            View::Enforced => mode.enforced(),
            View::DryRun => mode.in_dry_run(),
        }
    }
}

/// The indexes of the dry-run decision, built only when some policy takes part in one
/// decision only, and where they differ from the enforced ones.
#[derive(Debug)]
pub(crate) struct DryRunView {
    pub(crate) listeners: Vec<compiled::Listener>,
    pub(crate) backends: Vec<compiled::Backend>,
    /// Per listener: whether what is attached differs between the two decisions.
    listener_differs: Vec<bool>,
    /// Per backend: likewise, on some listener.
    backend_differs: Vec<bool>,
    /// The policies of mode `DryRun`, most senior first: what per-policy counters count.
    pub(crate) policies: Vec<PolicyId>,
}

impl DryRunView {
    /// The dry-run indexes of a bundle, None when every policy takes part in both decisions.
    pub(super) fn build(
        b: &ValidBundle,
        order: &[&bundle::Policy],
        policies: &[compiled::Policy],
        enforced: (&[compiled::Listener], &[compiled::Backend]),
    ) -> Result<Option<DryRunView>, CompileError> {
        if policies.iter().all(|p| p.mode == PolicyMode::Enforce) {
            return Ok(None);
        }
        let listeners = index_listeners(b, order, policies, View::DryRun);
        let backends = index_backends(b, order, policies, &listeners, View::DryRun)?.backends;
        let listener_differs = enforced
            .0
            .iter()
            .zip(&listeners)
            .map(|(e, d)| !same(&e.index, &d.index))
            .collect();
        let backend_differs = enforced
            .1
            .iter()
            .zip(&backends)
            .map(|(e, d)| {
                // Both have the same shape (listener narrowing and route slots of every
                // policy): each scoped index has its counterpart.
                let keys = e.scoped.iter().chain(&d.scoped).map(|(k, _)| *k);
                !same(&e.index, &d.index)
                    || keys
                        .into_iter()
                        .any(|(l, r)| !same(e.index_for(l, r), d.index_for(l, r)))
            })
            .collect();
        let dry_policies = policies
            .iter()
            .enumerate()
            .filter(|(_, p)| p.mode == PolicyMode::DryRun)
            .map(|(i, _)| i)
            .collect();
        Ok(Some(DryRunView {
            listeners,
            backends,
            listener_differs,
            backend_differs,
            policies: dry_policies,
        }))
    }

    /// Whether a request judged at `target` may get another decision in the dry run.
    pub(super) fn differs(&self, target: Target) -> bool {
        let at = |list: &[bool], i: Option<usize>| i.and_then(|i| list.get(i).copied());
        at(&self.listener_differs, target.listener).unwrap_or(false)
            || at(&self.backend_differs, target.backend).unwrap_or(false)
    }
}

/// Whether two indexes hold the same policies and rules.
fn same(a: &LevelIndex, b: &LevelIndex) -> bool {
    a.external_auth == b.external_auth
        && a.has_allow == b.has_allow
        && a.allow_always == b.allow_always
        && a.allow_when == b.allow_when
        && a.deny.rules() == b.deny.rules()
        && a.allow.rules() == b.allow.rules()
}
