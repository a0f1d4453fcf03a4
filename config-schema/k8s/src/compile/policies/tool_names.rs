//! The tool names a policy's rules name, against the ToolPins of the backends those rules can
//! reach (docs/semantics.md §1). Where every such backend's ToolPin closes its tool set
//! (`unpinned: Deny`), a name none of them pins can never match: a Deny rule meant to close a
//! tool closes nothing, an Allow list loses a tool. The policy is then not accepted. Where a
//! reached ToolPin leaves the set open (`unpinned: Allow`) such a name is a warning; where a
//! reached backend has no ToolPin, nothing is known about its names. Prompts and resources
//! are not pinned.

use std::collections::BTreeSet;

use mcp_access_bundle as bundle;

use super::{opt, reason, Ctx, PolicyContent, Problem};
use crate::load::{Item, PolicySpec};
use crate::model::RouteAction;
use crate::refs::NsName;

/// A tool name as written and the field it is written at.
struct Named {
    field: String,
    name: String,
}

impl Ctx<'_> {
    /// Makes `content` not accepted for a name no closed ToolPin pins (unless it is not
    /// accepted already), its stand-in then denying all; the warnings for names no open
    /// ToolPin pins.
    pub(super) fn check_tool_names(
        &self,
        p: &Item<PolicySpec>,
        content: &mut PolicyContent,
    ) -> Vec<String> {
        if content.problem.is_err() {
            return Vec::new();
        }
        let (problem, warnings) = self.unmatchable_tool_names(p, content);
        if let Some(problem) = problem {
            content.problem = Err(problem);
            // What a Deny or ExternalAuth policy meant to select is unknown: its stand-in
            // denies everything (an Allow stand-in admits nothing either way).
            content.deny_all = content.action != bundle::Action::Allow;
        }
        warnings
    }

    /// The problem that makes `p` not accepted (a name no closed ToolPin pins) and the
    /// warnings (a name no open ToolPin pins), given its compiled `content`.
    fn unmatchable_tool_names(
        &self,
        p: &Item<PolicySpec>,
        content: &PolicyContent,
    ) -> (Option<Problem>, Vec<String>) {
        let named = tool_names(p, content);
        let reached = self.reached_backends(p);
        // A backend without a ToolPin may serve any name.
        let Some(pins) = reached
            .iter()
            .map(|b| self.pins.get(b))
            .collect::<Option<Vec<&bundle::ToolPins>>>()
        else {
            return (None, Vec::new());
        };
        if named.is_empty() || pins.is_empty() {
            return (None, Vec::new());
        }
        let closed = pins.iter().all(|p| p.unpinned == bundle::Unpinned::Deny);
        let known: BTreeSet<&str> = pins
            .iter()
            .flat_map(|p| p.tools.iter().map(|t| t.name.as_str()))
            .collect();
        let known: Vec<&str> = known.into_iter().collect();
        let backends: Vec<String> = reached.iter().map(NsName::to_string).collect();
        let mut warnings = Vec::new();
        for n in named.iter().filter(|n| !known.contains(&n.name.as_str())) {
            let hint = if known.is_empty() {
                " (its ToolPin pins no tool)".to_string()
            } else {
                super::super::did_you_mean(&n.name, &known)
            };
            let where_ = format!(
                "{}: tool `{}` is pinned by no ToolPin of XBackend {}{hint}",
                n.field,
                n.name,
                backends.join(", ")
            );
            if closed {
                let msg = format!(
                    "{where_}; their ToolPins deny every tool they do not pin (unpinned: Deny), so this name can never match: correct it, or pin the tool (mcp-access pin)"
                );
                return (Some((reason::INVALID, msg)), warnings);
            }
            warnings.push(format!(
                "{} {} ({}): {where_}; it matches only a tool the server lists unpinned (unpinned: Allow)",
                p.kind,
                p.id(),
                p.origin
            ));
        }
        (None, warnings)
    }

    /// The backends a request meets policy `p` at: its XBackend and HTTPRoute targets', and
    /// those behind its Gateway targets' listeners. Targets that do not resolve reach none.
    fn reached_backends(&self, p: &Item<PolicySpec>) -> BTreeSet<NsName> {
        let mut out = BTreeSet::new();
        for r in p.spec.target_refs() {
            let Ok(targets) = self.find_target(r, p) else {
                continue;
            };
            if opt(&r.kind) != "Gateway" {
                out.extend(targets.iter().map(|t| {
                    NsName::new(t.namespace.as_deref().unwrap_or(&p.meta.namespace), &t.name)
                }));
                continue;
            }
            let gateways = self
                .topo
                .gateways
                .iter()
                .filter(|g| g.namespace == p.meta.namespace && g.name == opt(&r.name));
            let listeners = gateways
                .flat_map(|g| &g.listeners)
                .filter(|l| r.section_name.as_ref().is_none_or(|s| *s == l.name));
            for e in listeners.flat_map(|l| &l.routes) {
                if let RouteAction::Forward { clusters, .. } = &e.action {
                    out.extend(clusters.iter().filter_map(|c| c.backend.clone()));
                }
            }
        }
        out
    }
}

/// The tool names `p`'s compiled rules and conditions name, each with the field it is
/// written at: `tools/call` (or `tools`) params, and literals compared with
/// `request.mcp.tool_name` in CEL.
fn tool_names(p: &Item<PolicySpec>, c: &PolicyContent) -> Vec<Named> {
    let at = &c.rules_at;
    let mut out = Vec::new();
    for (k, w) in c.when.iter().enumerate() {
        cel(&mut out, format!("{at}.when[{k}].predicate"), w);
    }
    let rules = c.rules.as_ref().ok().and_then(|r| r.as_ref());
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let at = format!("{at}.rules[{i}]");
        for (k, w) in rule.when.iter().enumerate() {
            cel(&mut out, format!("{at}.when[{k}].predicate"), w);
        }
        let Some(a) = &rule.authorization else {
            continue;
        };
        if let Some(src) = &a.cel {
            cel(&mut out, format!("{at}.authorization.cel.expression"), src);
        }
        let methods = a.mcp.iter().flat_map(|m| m.methods.iter().enumerate());
        for (j, m) in methods {
            if m.name != "tools/call" && m.name != "tools" {
                continue;
            }
            for (k, name) in m.params.iter().flatten().enumerate() {
                let field = match &p.spec {
                    PolicySpec::V0(_) => format!("{at}.authorization.tools[{k}]"),
                    PolicySpec::V1(_) => format!("{at}.authorization.mcp.methods[{j}].params[{k}]"),
                };
                out.push(Named {
                    field,
                    name: name.clone(),
                });
            }
        }
    }
    out
}

/// The literals CEL expression `src` (at `field`) compares `request.mcp.tool_name` with.
fn cel(out: &mut Vec<Named>, field: String, src: &str) {
    if let Ok(prog) = mcp_access_cel::Program::compile(src, &bundle::CelLimits::default()) {
        for name in prog.tool_name_literals() {
            out.push(Named {
                field: field.clone(),
                name: name.to_string(),
            });
        }
    }
}
