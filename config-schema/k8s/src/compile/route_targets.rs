//! HTTPRoute targets of AccessPolicies (docs/semantics.md §1.6): a policy on a route (or one
//! rule of it, by `sectionName`) is a Backend-level policy on each XBackend the route leads
//! to, narrowed to the names the filter recognises requests through that route by.

use std::collections::{BTreeMap, BTreeSet};

use super::{did_you_mean, reason, seniority_order, Ctx};
use crate::model::*;
use crate::refs::NsName;
use crate::types::TargetRef;
use mcp_access_bundle as bundle;

/// Why a targetRef gives no target: the status reason and message, and where a stand-in goes
/// instead (None: nowhere, the target does not resolve) with the words for it.
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) standin: Option<(Vec<bundle::PolicyTarget>, &'static str)>,
}

impl Refusal {
    pub(super) fn unresolved(reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            message: message.into(),
            standin: None,
        }
    }
}

/// What a route's entries lead to: per XBackend the route names of the entries that forward
/// to it alone, and the rules that split traffic between backends.
#[derive(Default)]
struct Reach {
    names: BTreeMap<NsName, BTreeSet<String>>,
    /// (rule index, the XBackends it splits between)
    split: BTreeMap<usize, BTreeSet<NsName>>,
    /// Whether the route has entries on any listener at all.
    attached: bool,
}

/// The XBackend an entry forwards every request to, when it forwards to one XBackend only
/// (the entries whose route name identifies the backend; `bundle_backends` lists the same).
pub(super) fn single_backend(e: &RouteEntry) -> Option<&NsName> {
    match &e.action {
        RouteAction::Forward { clusters, .. } => match clusters.as_slice() {
            [c] => c.backend.as_ref(),
            _ => None,
        },
        _ => None,
    }
}

impl Ctx<'_> {
    /// The bundle targets of an HTTPRoute targetRef in namespace `ns`: one per XBackend the
    /// route (or the rule `sectionName` names) leads to, narrowed to its route names.
    pub(super) fn route_targets(
        &self,
        r: &TargetRef,
        ns: &str,
    ) -> Result<Vec<bundle::PolicyTarget>, Refusal> {
        let name = r.name.as_deref().unwrap_or_default();
        let id = format!("{ns}/{name}");
        let Some(route) = seniority_order(&self.m.routes)
            .into_iter()
            .filter_map(|i| self.m.routes.get(i))
            .find(|x| x.id() == id)
        else {
            return Err(Refusal::unresolved(
                reason::TARGET_NOT_FOUND,
                "no such HTTPRoute in the manifests",
            ));
        };
        let rules = route.spec.rules.as_deref().unwrap_or_default();
        let whole = || {
            self.route_targets(
                &TargetRef {
                    section_name: None,
                    ..r.clone()
                },
                ns,
            )
        };
        let only = match &r.section_name {
            None => None,
            Some(s) => {
                let named: Vec<usize> = rules
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| x.name.as_deref() == Some(s.as_str()))
                    .map(|(i, _)| i)
                    .collect();
                match named.as_slice() {
                    [i] => Some(*i),
                    found => {
                        let names: Vec<&str> =
                            rules.iter().filter_map(|x| x.name.as_deref()).collect();
                        let (why, message) = if found.is_empty() {
                            let hint = if names.is_empty() {
                                " (its rules have no `name`: name the rule to target it)"
                                    .to_string()
                            } else {
                                did_you_mean(s, &names)
                            };
                            (
                                reason::TARGET_NOT_FOUND,
                                format!(
                                    "sectionName: HTTPRoute {id} has no rule named \"{s}\"{hint}"
                                ),
                            )
                        } else {
                            let at: Vec<String> = found.iter().map(|i| i.to_string()).collect();
                            (reason::INVALID, format!("sectionName: HTTPRoute {id} has more than one rule named \"{s}\" (rules {}): rule names must be unique within a route", at.join(", ")))
                        };
                        return Err(Refusal {
                            reason: why,
                            message,
                            standin: whole().ok().map(|t| (t, "every rule of this HTTPRoute")),
                        });
                    }
                }
            }
        };
        let reach = self.reach(&id, only);
        let what = match (&r.section_name, only) {
            (Some(s), Some(i)) => format!("HTTPRoute {id} rule {i} ({s})"),
            _ => format!("HTTPRoute {id}"),
        };
        if !reach.attached {
            return Err(Refusal::unresolved(
                reason::TARGET_NOT_FOUND,
                format!("{what} is attached to no accepted Gateway listener (see routes): no request goes through it"),
            ));
        }
        if let Some((rule, backends)) = reach.split.iter().next() {
            let list: Vec<String> = backends.iter().map(ToString::to_string).collect();
            let mut all: BTreeSet<NsName> = reach.names.keys().cloned().collect();
            all.extend(reach.split.values().flatten().cloned());
            return Err(Refusal {
                reason: reason::UNSUPPORTED,
                message: format!("rule {rule} of HTTPRoute {id} forwards to more than one backendRef (XBackends {}): a request through it is recognised by the backend it reached, not by the route, so the policy cannot be narrowed to it; give each XBackend a rule of its own, or target the XBackends", list.join(", ")),
                standin: Some((all.iter().map(|b| backend_target(b, None)).collect(), "every XBackend this route leads to")),
            });
        }
        if reach.names.is_empty() {
            return Err(Refusal::unresolved(
                reason::TARGET_NOT_FOUND,
                format!("{what} forwards to no XBackend: no request through it is judged at the Backend level"),
            ));
        }
        Ok(reach
            .names
            .iter()
            .map(|(b, names)| backend_target(b, Some(names.iter().cloned().collect())))
            .collect())
    }

    /// Where route `id` (only rule `only`, if set) leads, over every listener it is on.
    fn reach(&self, id: &str, only: Option<usize>) -> Reach {
        let mut out = Reach::default();
        let entries = self
            .topo
            .gateways
            .iter()
            .flat_map(|g| &g.listeners)
            .flat_map(|l| &l.routes)
            .filter(|e| e.route == id);
        for e in entries {
            out.attached = true;
            if only.is_some_and(|i| i != e.rule) {
                continue;
            }
            if let Some(b) = single_backend(e) {
                out.names
                    .entry(b.clone())
                    .or_default()
                    .insert(e.name.clone());
            } else if let RouteAction::Forward { clusters, .. } = &e.action {
                let xbackends: BTreeSet<NsName> =
                    clusters.iter().filter_map(|c| c.backend.clone()).collect();
                if !xbackends.is_empty() {
                    out.split.entry(e.rule).or_default().extend(xbackends);
                }
            }
        }
        out
    }
}

/// A Backend target for XBackend `id`, narrowed to `routes`.
pub(super) fn backend_target(id: &NsName, routes: Option<Vec<String>>) -> bundle::PolicyTarget {
    bundle::PolicyTarget {
        name: id.name.clone(),
        namespace: Some(id.namespace.clone()),
        section_name: None,
        routes,
    }
}
