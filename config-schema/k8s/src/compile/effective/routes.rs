//! Route classes of one backend: route-scoped policies (HTTPRoute targets) make the
//! effective Backend-level policy differ by the route a request came through, so each
//! backend's names (its route names and its cluster) are grouped by the lower policies
//! requests through them meet.

use std::collections::{BTreeMap, BTreeSet};

use super::ListenerKey;
use crate::compile::route_targets::single_backend;
use crate::compile::Ctx;
use crate::refs::NsName;

/// Rules of a route: (index, name).
type Rules<'a> = BTreeSet<(usize, Option<&'a str>)>;

/// The names requests through which meet the same route-scoped policies (None: every name;
/// no lower policy is route-scoped), and the indices of the lower policies they meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Class {
    pub(crate) names: Option<BTreeSet<String>>,
    pub(crate) members: Vec<usize>,
}

/// How one backend is reached: the names it is recognised by, per listener.
pub(crate) struct BackendRoutes {
    /// Route names of the entries that lead to the backend alone, per listener.
    on: BTreeMap<ListenerKey, BTreeSet<String>>,
    /// Every name: those route names and the backend's cluster (requests through other
    /// routes: rules that split traffic, route names the bundle does not list).
    all: BTreeSet<String>,
    /// Route name -> (HTTPRoute `namespace/name`, rule index, rule name).
    rules: BTreeMap<String, (String, usize, Option<String>)>,
    cluster: Option<String>,
}

impl Ctx<'_> {
    /// How each XBackend is reached: one pass over the route entries.
    pub(crate) fn backend_routes(&self) -> BTreeMap<NsName, BackendRoutes> {
        let mut out: BTreeMap<NsName, BackendRoutes> = BTreeMap::new();
        for b in &self.topo.backends {
            out.insert(
                b.id.clone(),
                BackendRoutes {
                    on: BTreeMap::new(),
                    all: BTreeSet::from([b.cluster.clone()]),
                    rules: BTreeMap::new(),
                    cluster: Some(b.cluster.clone()),
                },
            );
        }
        for g in &self.topo.gateways {
            for l in &g.listeners {
                let key = (g.namespace.clone(), g.name.clone(), l.name.clone());
                for e in &l.routes {
                    let Some(r) = single_backend(e).and_then(|id| out.get_mut(id)) else {
                        continue;
                    };
                    r.on.entry(key.clone()).or_default().insert(e.name.clone());
                    r.all.insert(e.name.clone());
                    r.rules.insert(
                        e.name.clone(),
                        (e.route.clone(), e.rule, e.rule_name.clone()),
                    );
                }
            }
        }
        out
    }
}

impl BackendRoutes {
    /// The classes of policies with these route scopes (None: every route): names grouped by
    /// the scoped policies that list them.
    pub(crate) fn classes(&self, scopes: &[Option<&[String]>]) -> Vec<Class> {
        let unscoped: Vec<usize> = (0..scopes.len())
            .filter(|i| scopes.get(*i).is_some_and(Option::is_none))
            .collect();
        if unscoped.len() == scopes.len() {
            return vec![Class {
                names: None,
                members: unscoped,
            }];
        }
        // The cluster is a class of its own: a request known only by it may have come through
        // any route, so route-scoped Allow policies keep its level default-deny.
        let mut by_members: BTreeMap<(bool, Vec<usize>), BTreeSet<String>> = BTreeMap::new();
        for name in &self.all {
            let mut members: Vec<usize> = scopes
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_none_or(|names| names.contains(name)))
                .map(|(i, _)| i)
                .collect();
            members.sort_unstable();
            let by_cluster = self.cluster.as_ref() == Some(name);
            by_members
                .entry((by_cluster, members))
                .or_default()
                .insert(name.clone());
        }
        by_members
            .into_iter()
            .map(|((_, members), names)| Class {
                names: Some(names),
                members,
            })
            .collect()
    }

    /// Whether a request through a name of `c` can arrive on listener `l` (the cluster: on
    /// every listener that reaches the backend).
    pub(crate) fn feasible(&self, c: &Class, l: &ListenerKey) -> bool {
        let Some(names) = &c.names else { return true };
        let here = self.on.get(l);
        names
            .iter()
            .any(|n| here.is_some_and(|h| h.contains(n)) || Some(n) == self.cluster.as_ref())
    }

    /// Whether class `c` holds the backend's cluster (requests by no listed route name).
    pub(crate) fn holds_cluster(&self, c: &Class) -> bool {
        match (&c.names, &self.cluster) {
            (None, _) => true,
            (Some(names), Some(cluster)) => names.contains(cluster),
            (Some(_), None) => false,
        }
    }

    /// Whether `names` are all the names the backend is recognised by.
    pub(crate) fn covers_all(&self, names: &BTreeSet<String>) -> bool {
        self.all.iter().all(|n| names.contains(n))
    }

    /// The HTTPRoutes (`namespace/name`) with a rule among `names`.
    pub(crate) fn http_routes(&self, names: &BTreeSet<String>) -> Vec<String> {
        let routes: BTreeSet<&String> = self
            .rules
            .iter()
            .filter(|(n, _)| names.contains(*n))
            .map(|(_, (route, ..))| route)
            .collect();
        routes.into_iter().cloned().collect()
    }

    /// `names` as users know them: HTTPRoutes (whole, when every rule of theirs that leads
    /// to the backend is there), rules, and the cluster for requests through other routes.
    pub(crate) fn describe(&self, names: &BTreeSet<String>) -> Vec<String> {
        // Per route, its rules leading here, and those among `names`.
        let mut routes: BTreeMap<&str, (Rules, BTreeSet<usize>)> = BTreeMap::new();
        for (n, (route, rule, rule_name)) in &self.rules {
            let entry = routes.entry(route.as_str()).or_default();
            entry.0.insert((*rule, rule_name.as_deref()));
            if names.contains(n) {
                entry.1.insert(*rule);
            }
        }
        let mut out = Vec::new();
        for (route, (rules, chosen)) in routes {
            if chosen.is_empty() {
                continue;
            }
            if chosen.len() == rules.len() {
                out.push(format!("HTTPRoute {route}"));
                continue;
            }
            for (i, name) in rules.iter().filter(|(i, _)| chosen.contains(i)) {
                match name {
                    Some(n) => out.push(format!("HTTPRoute {route} rule {i} ({n})")),
                    None => out.push(format!("HTTPRoute {route} rule {i}")),
                }
            }
        }
        if let Some(c) = self.cluster.as_ref().filter(|c| names.contains(*c)) {
            out.push(format!(
                "other routes to the XBackend (recognised by cluster {c})"
            ));
        }
        out
    }
}
