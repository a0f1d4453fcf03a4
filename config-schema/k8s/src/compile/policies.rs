//! XAccessPolicies (both API versions) and AccessPolicies: their targets, the limits per target, the
//! fail-closed stand-ins of policies not accepted, and their ExternalAuth authorizers.

use std::collections::{HashMap, HashSet};

use super::backends::BackendMiss;
use super::route_targets::{backend_target, Refusal};
use super::rules::{self, rule_v0, rule_v1, source_v, Problem, RuleCx};
use super::{cond, opt, reason, seniority_order, status, Ctx, Options};
use crate::load::{Item, PolicySpec};
use crate::model::*;
use crate::refs::{NsName, ObjectName};
use crate::types::*;
use mcp_access_bundle::{self as bundle, Action, Bundle, Level};
use mcp_access_cel::a_or_an;

pub(super) mod authorizers;
mod standin;
mod targets;
mod tool_names;

use standin::{restricted, standin};

/// The accepted policies counted at each target, oldest first.
#[derive(Default)]
struct PerTarget {
    all: HashMap<ObjectName, Vec<String>>,
    external_auth: HashMap<ObjectName, Vec<String>>,
}

impl PerTarget {
    /// Counts policy `id` at target `tname` unless more senior policies fill a limit there
    /// (the message then). `counted`: the targets this policy already counts at.
    fn admit(
        &mut self,
        o: &Options,
        tname: &ObjectName,
        id: &str,
        external_auth: bool,
        counted: &mut HashSet<ObjectName>,
    ) -> Result<(), String> {
        if counted.contains(tname) {
            return Ok(());
        }
        let full = |list: &[String], limit: usize, what: &str, flag: &str| {
            (limit > 0 && list.len() >= limit).then(|| {
                format!(
                    "{tname} already has {limit} more senior {what} policies ({}); raise --{flag}",
                    list.join(", ")
                )
            })
        };
        let all = self.all.entry(tname.clone()).or_default();
        let limit = o.max_policies_per_target;
        if let Some(msg) = full(all, limit, "accepted", "max-policies-per-target") {
            return Err(msg);
        }
        if external_auth {
            let ext = self.external_auth.entry(tname.clone()).or_default();
            let limit = o.max_external_auth_per_target;
            if let Some(msg) = full(ext, limit, "ExternalAuth", "max-external-auth-per-target") {
                return Err(msg);
            }
            ext.push(id.to_string());
        }
        all.push(id.to_string());
        counted.insert(tname.clone());
        Ok(())
    }
}

/// The targets of one policy: the statuses, where it is enforced and where its stand-in is.
#[derive(Default)]
struct Targets {
    conds: Vec<TargetStatus>,
    accepted: Vec<bundle::PolicyTarget>,
    standin: Vec<bundle::PolicyTarget>,
    /// Why a target's refusal put a stand-in there (`Reason: message`), the first one.
    standin_why: Option<String>,
    /// Targets that do not resolve: `Kind namespace/name` and why.
    unresolved: Vec<String>,
}

/// What a policy says, compiled, and whether it can be accepted.
struct PolicyContent {
    action: Action,
    /// The policy's `when` predicates (AccessPolicy).
    when: Vec<String>,
    rules: Result<Option<Vec<bundle::Rule>>, Problem>,
    authorizer: Option<bundle::Authorizer>,
    /// Not accepted in a way that leaves no trustworthy selection: the stand-in denies all.
    deny_all: bool,
    problem: Result<(), Problem>,
    /// Where the rules are: `spec`, or `spec.defaults` / `spec.overrides`.
    rules_at: String,
    /// A dry-run policy (docs/semantics.md §3.8): its bundle policy, block or stand-in
    /// takes part in the dry-run decision only.
    dry_run: bool,
}

impl Ctx<'_> {
    pub(super) fn policies(
        &mut self,
        route_headers: &[String],
    ) -> (Vec<bundle::Policy>, Vec<bundle::Authorizer>) {
        let order = seniority_order(&self.m.policies);
        let mut out = Vec::new();
        let mut authorizers: Vec<bundle::Authorizer> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut per_target = PerTarget::default();
        let mut blocks = Vec::new();
        let mut identity = super::identity::IdentityHeaders::default();
        for (rank, i) in order.into_iter().enumerate() {
            let Some(p) = self.m.policies.get(i) else {
                continue;
            };
            let seniority = rank as u64 + 1;
            // XAccessPolicy and AccessPolicy are different kinds: the same name is no conflict.
            let conds = if seen.insert(format!("{}|{}", p.kind, p.id())) {
                // A dry run changes no traffic: its identity headers are sent once enforced.
                let conflict = match super::dry_run::dry_run_of(p) {
                    Ok(true) => Ok(()),
                    _ => identity.record(
                        p,
                        &|k, ns, name| self.resolve_backend(k, ns, name).is_ok(),
                        route_headers,
                    ),
                };
                let (conds, unresolved, warnings) = self.policy(
                    p,
                    (seniority, conflict),
                    &mut per_target,
                    &mut out,
                    &mut authorizers,
                    &mut blocks,
                );
                self.report.unenforced.extend(unresolved);
                self.report.warnings.extend(warnings);
                conds
            } else {
                let ns = &p.meta.namespace;
                let msg = format!("another {} with this namespace/name is defined earlier or is older; it is used instead", p.kind);
                p.spec
                    .target_refs()
                    .iter()
                    .map(|r| {
                        cond(
                            r.object_name(ns),
                            r.section_name.clone(),
                            reason::CONFLICTED,
                            msg.clone(),
                        )
                    })
                    .collect()
            };
            self.report.policies.push(status(p, Some(seniority), conds));
        }
        self.topo.external_auth_policies = super::external_auth_names(&out, &blocks);
        self.apply_blocks_both(&blocks, &mut out, &mut authorizers);
        self.dry_run_statuses();
        self.identity_headers = identity;
        (out, authorizers)
    }

    /// One policy: the bundle policy where it is accepted, its stand-in where it is not;
    /// the status per target. `conflict`: whether its identity headers conflict with a more
    /// senior policy's (then it is not accepted).
    fn policy(
        &self,
        p: &Item<PolicySpec>,
        (seniority, conflict): (u64, Result<(), String>),
        per_target: &mut PerTarget,
        out: &mut Vec<bundle::Policy>,
        authorizers: &mut Vec<bundle::Authorizer>,
        blocks: &mut Vec<super::effective::BlockPolicy>,
    ) -> (Vec<TargetStatus>, Vec<String>, Vec<String>) {
        let level = match p.spec.target_refs().first().map(|r| opt(&r.kind)) {
            Some("Gateway") => Level::Gateway,
            _ => Level::Backend,
        };
        let mut content = self.policy_content(p);
        if let (Ok(()), Err(msg)) = (&content.problem, conflict) {
            content.problem = Err((reason::CONFLICTED, msg));
        }
        let warnings = self.check_tool_names(p, &mut content);
        let mode = if content.dry_run {
            bundle::PolicyMode::DryRun
        } else {
            bundle::PolicyMode::Enforce
        };
        let mut t = self.policy_targets(p, &content, per_target);
        let name = self.bundle_name(p);
        if name != p.meta.name {
            for c in &mut t.conds {
                let sep = if c.message.is_empty() { "" } else { "; " };
                c.message = format!("{}{sep}named {name} in the bundle (an XAccessPolicy has the same namespace/name)", c.message);
            }
        }
        let block = match &p.spec {
            PolicySpec::V1(s) => block_of(s),
            PolicySpec::V0(_) => None,
        };
        if let (Some((field, b)), false) = (block, t.accepted.is_empty()) {
            // Not evaluated at the Gateway level: applied to the backends behind it later.
            blocks.push(block_policy(
                p,
                &name,
                seniority,
                &content,
                (field, b),
                &t.accepted,
            ));
        } else if !t.accepted.is_empty() {
            let mut external_auth = None;
            if let Some(a) = &content.authorizer {
                let mut a = a.clone();
                a.name = format!("{}.{name}", p.meta.namespace);
                external_auth = Some(a.name.clone());
                authorizers.push(a);
            }
            out.push(bundle::Policy {
                name: name.clone(),
                namespace: p.meta.namespace.clone(),
                level,
                targets: t.accepted,
                action: content.action,
                external_auth,
                seniority,
                rules: content.rules.clone().ok().flatten(),
                when: content.when.clone(),
                not_accepted: None,
                listeners: Vec::new(),
                origin: None,
                mode,
            });
        }
        if !t.standin.is_empty() && !self.o.skip_rejected {
            let why = t.standin_why.as_deref();
            out.push(standin(
                p,
                &name,
                (level, seniority),
                (&content, why),
                t.standin,
            ));
        }
        let unresolved = t
            .unresolved
            .iter()
            .map(|u| {
                format!(
                    "{} {} ({}): enforced nowhere: {u}; it would have {}",
                    p.kind,
                    p.id(),
                    p.origin,
                    restricted(&content)
                )
            })
            .collect();
        (t.conds, unresolved, warnings)
    }

    /// The policy's name in the bundle: its own, except for an AccessPolicy that shares its
    /// namespace/name with an XAccessPolicy (two objects, one bundle namespace):
    /// `<name>.accesspolicy`.
    pub(super) fn bundle_name(&self, p: &Item<PolicySpec>) -> String {
        let shared = p.kind == "AccessPolicy"
            && self
                .m
                .policies
                .iter()
                .any(|o| o.kind != p.kind && o.id() == p.id());
        if shared {
            format!("{}.accesspolicy", p.meta.name)
        } else {
            p.meta.name.clone()
        }
    }

    /// Resolves a policy's targets and applies the limits per target.
    fn policy_targets(
        &self,
        p: &Item<PolicySpec>,
        content: &PolicyContent,
        per_target: &mut PerTarget,
    ) -> Targets {
        let mut t = Targets::default();
        let mut counted = HashSet::new();
        let external_auth = content.action == Action::ExternalAuth;
        for (i, r) in p.spec.target_refs().iter().enumerate() {
            let tname = r.object_name(&p.meta.namespace);
            let section = r.section_name.clone();
            let target = match self.find_target(r, p) {
                Err(refusal) => {
                    let msg = format!("spec.targetRefs[{i}]: {}", refusal.message);
                    match refusal.standin {
                        // The stand-in covers what the target surely includes (e.g. every
                        // listener of a Gateway whose sectionName names none).
                        Some((targets, whole)) => {
                            let note = self.standin_note(content).replace("this target", whole);
                            t.conds.push(cond(
                                tname,
                                section,
                                refusal.reason,
                                format!("{msg}{note}"),
                            ));
                            t.standin.extend(targets);
                            t.standin_why
                                .get_or_insert(format!("{}: {}", refusal.reason, refusal.message));
                        }
                        None => {
                            t.unresolved
                                .push(format!("{tname}: {}: {msg}", refusal.reason));
                            t.conds.push(cond(tname, section, refusal.reason, msg));
                        }
                    }
                    continue;
                }
                Ok(target) => target,
            };
            let refused = match &content.problem {
                Err((reason, msg)) => Err((*reason, msg.clone())),
                Ok(()) => per_target
                    .admit(self.o, &tname, &p.id(), external_auth, &mut counted)
                    .map_err(|msg| (reason::LIMIT, msg)),
            };
            match refused {
                Err((reason, msg)) => {
                    let msg = format!("{msg}{}", self.standin_note(content));
                    t.conds.push(cond(tname, section, reason, msg));
                    t.standin.extend(target);
                }
                Ok(()) => {
                    t.conds
                        .push(cond(tname, section, reason::ACCEPTED, inert_rules(content)));
                    t.accepted.extend(target);
                }
            }
        }
        t
    }

    fn standin_note(&self, c: &PolicyContent) -> String {
        if self.o.skip_rejected {
            return "; the policy is not enforced (--skip-rejected)".into();
        }
        if c.dry_run {
            return "; a dry run: its fail-closed stand-in is a dry run too (reported, never enforced)".into();
        }
        match (c.action, c.deny_all) {
            (_, true) => "; enforced fail-closed: every request to this target is denied".into(),
            (Action::Allow, false) => {
                "; enforced fail-closed: this target admits nothing through this policy".into()
            }
            _ => "; enforced fail-closed: requests it selects are denied".into(),
        }
    }

    fn policy_content(&self, p: &Item<PolicySpec>) -> PolicyContent {
        let mut c = match &p.spec {
            PolicySpec::V1(s) => self.content_v1(p, s),
            PolicySpec::V0(s) => self.content_v0(p, s),
        };
        match super::dry_run::dry_run_of(p) {
            Ok(dry_run) => c.dry_run = dry_run,
            // Which was meant is unknown: not accepted, and its stand-in enforced.
            Err(e) if c.problem.is_ok() => c.problem = Err((reason::INVALID, e)),
            Err(_) => {}
        }
        c
    }

    /// v1alpha1 (and the AccessPolicy kind): an action for the whole policy, rules that
    /// select requests, `when` conditions.
    fn content_v1(&self, p: &Item<PolicySpec>, s: &PolicySpecV1) -> PolicyContent {
        match block_of(s) {
            Some((field, b)) => {
                let at = format!("spec.{field}");
                let mut c =
                    self.content_parts(p, &at, (&b.action, &b.external_auth, &b.rules, &b.when));
                if let (Ok(()), Some(cond)) = (&c.problem, &b.condition) {
                    let limits = mcp_access_bundle::CelLimits::default();
                    if let Err(e) = mcp_access_cel::SelfCondition::compile(cond, &limits) {
                        c.problem = Err((reason::INVALID, format!("{at}.condition: {e}")));
                    }
                }
                c
            }
            None => self.content_parts(p, "spec", (&s.action, &s.external_auth, &s.rules, &s.when)),
        }
    }

    /// Action, authorizer, rules and `when` of a policy (or of its block, at `at`).
    #[allow(clippy::type_complexity)]
    fn content_parts(
        &self,
        p: &Item<PolicySpec>,
        at: &str,
        (action, external_auth, rules, when): (
            &Option<String>,
            &Option<ExternalAuth>,
            &Option<Vec<RuleV1>>,
            &Option<Vec<WhenCondition>>,
        ),
    ) -> PolicyContent {
        let ns = &p.meta.namespace;
        let s = Parts {
            action,
            external_auth,
            rules,
            when,
        };
        let action = match opt(s.action) {
            "ExternalAuth" => Action::ExternalAuth,
            "Deny" => Action::Deny,
            _ => Action::Allow,
        };
        let rcx = RuleCx {
            providers: &self.o.jwt_providers,
            cel_limits: &self.settings.limits.cel,
        };
        // `rules: []` is indistinguishable from omitted in Kubernetes: all traffic.
        let rules = s.rules.as_ref().filter(|rs| !rs.is_empty()).map(|rs| {
            rs.iter()
                .enumerate()
                .map(|(i, r)| rule_v1(&format!("{at}.rules[{i}]"), r, &rcx))
                .collect::<Result<Vec<_>, _>>()
        });
        // A policy `when` that does not compile makes the policy not accepted, its rules
        // untrustworthy as a selection (a Deny stand-in then denies everything).
        let (when, when_problem) = match rules::when(at, s.when.as_ref(), &self.settings.limits.cel)
        {
            Ok(w) => (w, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let rules = match (when_problem, rules) {
            (Some(e), _) => Err(e),
            (None, None) => Ok(None),
            (None, Some(Ok(v))) => Ok(Some(v)),
            (None, Some(Err(e))) => Err(e),
        };
        let authorizer = match (&action, &s.external_auth) {
            (Action::ExternalAuth, Some(e)) => {
                Some(self.authorizer(p, &format!("{at}.externalAuth"), e))
            }
            (_, Some(_)) => Some(Err((
                reason::INVALID,
                format!(
                    "{at}.externalAuth is only used with action ExternalAuth, not {}: remove it or set action: ExternalAuth",
                    opt(s.action)
                ),
            ))),
            _ => None,
        };
        let mut c = self.finish_content(p, action, rules, authorizer, ns);
        c.when = when;
        c.rules_at = at.to_string();
        c
    }

    /// v0alpha0: rules that each admit requests, one of them possibly an ExternalAuth rule.
    fn content_v0(&self, p: &Item<PolicySpec>, s: &PolicySpecV0) -> PolicyContent {
        let ns = &p.meta.namespace;
        let rs = s.rules.clone().unwrap_or_default();
        let kind = |r: &RuleV0| r.authorization.as_ref().map(|a| opt(&a.kind).to_string());
        let ext = rs
            .iter()
            .enumerate()
            .find(|(_, r)| kind(r).as_deref() == Some("ExternalAuth"));
        if let (Some((i, _)), true) = (ext, rs.len() > 1) {
            // The authorizer would judge some callers while the other rules admit
            // others: not one policy's meaning. Rejected, and every request denied.
            let others: Vec<String> = rs
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(j, r)| {
                    let what = kind(r).unwrap_or_else(|| "no authorization".into());
                    format!("spec.rules[{j}] ({what})")
                })
                .collect();
            let mut c = self.finish_content(
                p,
                Action::ExternalAuth,
                Err((
                    reason::INVALID,
                    format!(
                        "spec.rules[{i}] is an ExternalAuth rule and a policy with one may have no other rules; move {} to a policy of its own",
                        others.join(", ")
                    ),
                )),
                None,
                ns,
            );
            c.deny_all = true;
            return c;
        }
        match ext {
            Some((i, r)) => {
                let at = format!("spec.rules[{i}]");
                let rule = source_v(&at, r.source.as_ref(), &self.o.jwt_providers).map(|source| {
                    Some(vec![bundle::Rule {
                        name: opt(&r.name).to_string(),
                        source,
                        authorization: None,
                        when: Vec::new(),
                    }])
                });
                let e = r
                    .authorization
                    .as_ref()
                    .and_then(|a| a.external_auth.clone())
                    .unwrap_or_default();
                let authorizer = Some(self.authorizer(
                    p,
                    &format!("spec.rules[{i}].authorization.externalAuth"),
                    &e,
                ));
                self.finish_content(p, Action::ExternalAuth, rule, authorizer, ns)
            }
            None => {
                let rules = rs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let rcx = RuleCx {
                            providers: &self.o.jwt_providers,
                            cel_limits: &self.settings.limits.cel,
                        };
                        rule_v0(&format!("spec.rules[{i}]"), r, &rcx)
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some);
                self.finish_content(p, Action::Allow, rules, None, ns)
            }
        }
    }

    fn finish_content(
        &self,
        p: &Item<PolicySpec>,
        action: Action,
        rules: Result<Option<Vec<bundle::Rule>>, (&'static str, String)>,
        authorizer: Option<Result<bundle::Authorizer, (&'static str, String)>>,
        ns: &str,
    ) -> PolicyContent {
        let mut problem = None;
        if let Err(e) = &rules {
            problem = Some(e.clone());
        }
        let authorizer = match authorizer {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                if problem.is_none() {
                    problem = Some(e);
                }
                None
            }
        };
        // The bundle's own checks (names, identities, regular expressions...) on this policy.
        if problem.is_none() {
            if let Ok(r) = &rules {
                let b = self.one_policy_bundle(p, action, r, authorizer.as_ref(), ns);
                if let Err(e) = mcp_access_bundle::validate(&b) {
                    let field = e.path.replacen("policies[0].", "", 1).replacen(
                        "authorizers[0].",
                        "externalAuth: ",
                        1,
                    );
                    problem = Some((reason::INVALID, format!("{field}: {}", e.message)));
                }
            }
        }
        PolicyContent {
            action,
            when: Vec::new(),
            rules,
            authorizer,
            deny_all: false,
            problem: match problem {
                Some(p) => Err(p),
                None => Ok(()),
            },
            rules_at: "spec".into(),
            dry_run: false,
        }
    }

    /// A bundle holding only policy `p` (on a stand-in gateway), for the bundle's checks.
    fn one_policy_bundle(
        &self,
        p: &Item<PolicySpec>,
        action: Action,
        rules: &Option<Vec<bundle::Rule>>,
        authorizer: Option<&bundle::Authorizer>,
        ns: &str,
    ) -> Bundle {
        Bundle {
            api_version: bundle::API_VERSION.into(),
            identity: self.settings.identity.clone(),
            gateways: vec![bundle::Gateway {
                name: "g".into(),
                namespace: ns.into(),
                listeners: vec![bundle::Listener {
                    name: "l".into(),
                    port: 1,
                    hostname: None,
                    protected_resource: None,
                }],
            }],
            backends: vec![],
            authorizers: authorizer
                .into_iter()
                .cloned()
                .map(|mut a| {
                    a.name = "a".into();
                    a
                })
                .collect(),
            policies: vec![bundle::Policy {
                name: p.meta.name.clone(),
                namespace: ns.into(),
                level: Level::Gateway,
                targets: vec![bundle::PolicyTarget {
                    name: "g".into(),
                    namespace: None,
                    section_name: None,
                    routes: None,
                }],
                action,
                external_auth: authorizer.as_ref().map(|_| "a".to_string()),
                seniority: 0,
                rules: rules.clone(),
                when: Vec::new(),
                not_accepted: None,
                listeners: Vec::new(),
                origin: None,
                mode: bundle::PolicyMode::Enforce,
            }],
            deny_response: Default::default(),
            listings: Default::default(),
            limits: self.settings.limits.clone(),
            envoy: Default::default(),
            rate_limits: Vec::new(),
            rate_limit_service: None,
            decision_records: Default::default(),
        }
    }
}

/// An accepted policy with a defaults or overrides block (`field`), for
/// [`Ctx::apply_blocks`].
fn block_policy(
    p: &Item<PolicySpec>,
    name: &str,
    seniority: u64,
    content: &PolicyContent,
    (field, b): (&str, &Block),
    targets: &[bundle::PolicyTarget],
) -> super::effective::BlockPolicy {
    super::effective::BlockPolicy {
        object: ObjectName::new(&p.kind, p.ns_name()),
        namespace: p.meta.namespace.clone(),
        name: name.to_string(),
        seniority,
        kind: if field == "defaults" {
            bundle::BlockKind::Defaults
        } else {
            bundle::BlockKind::Overrides
        },
        strategy: if opt(&b.strategy) == "merge" {
            bundle::Strategy::Merge
        } else {
            bundle::Strategy::Atomic
        },
        action: content.action,
        rules: content.rules.clone().ok().flatten(),
        when: content.when.clone(),
        authorizer: content.authorizer.clone(),
        condition: b.condition.as_ref().map(|c| {
            mcp_access_cel::SelfCondition::compile(c, &mcp_access_bundle::CelLimits::default())
                .map(std::sync::Arc::new)
                .map_err(|e| e.to_string())
        }),
        targets: targets.to_vec(),
        dry_run: content.dry_run,
    }
}

/// The fields a policy and a block share.
struct Parts<'a> {
    action: &'a Option<String>,
    external_auth: &'a Option<ExternalAuth>,
    rules: &'a Option<Vec<RuleV1>>,
    when: &'a Option<Vec<WhenCondition>>,
}

/// A policy's defaults or overrides block, with its field name.
pub(super) fn block_of(s: &PolicySpecV1) -> Option<(&'static str, &Block)> {
    match (&s.defaults, &s.overrides) {
        (Some(b), _) => Some(("defaults", b)),
        (None, Some(b)) => Some(("overrides", b)),
        _ => None,
    }
}

/// The warning for rules whose `mcp` block lists no method and skips the base protocol:
/// they match nothing (the rest of the policy takes effect). The fixes it offers work as
/// written: listed methods alone would leave MCP clients unable to `initialize`.
fn inert_rules(c: &PolicyContent) -> String {
    let Ok(Some(rules)) = &c.rules else {
        return String::new();
    };
    let inert: Vec<String> = rules
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.authorization
                .as_ref()
                .and_then(|a| a.mcp.as_ref())
                .is_some_and(|m| {
                    m.methods.is_empty() && m.base_protocol == bundle::BaseProtocol::Skip
                })
        })
        .map(|(i, r)| format!("{}.rules[{i}] ({})", c.rules_at, r.name))
        .collect();
    if inert.is_empty() {
        return String::new();
    }
    let (what, fix) = match c.action {
        Action::Allow => (
            "admits nothing",
            "to admit tools, list them together with the base protocol MCP clients need to connect (initialize, ping, tools/list): `mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/call, params: [TOOL]}]}`; to admit every method, remove authorization.mcp",
        ),
        Action::Deny => (
            "denies nothing",
            "to deny methods, list them: `mcp: {methods: [{name: tools/call, params: [TOOL]}]}`; to deny every method, remove authorization.mcp",
        ),
        Action::ExternalAuth => (
            "sends nothing to the authorizer",
            "to send some methods, list them: `mcp: {methods: [{name: tools/call, params: [TOOL]}]}`; to send every request, remove authorization.mcp",
        ),
    };
    format!(
        "warning: {}: authorization.mcp lists no methods and mcpBaseProtocolMethodsOption is SKIP_BASE_PROTOCOL_METHODS (the default), so the rule {what}; {fix}",
        inert.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_target() {
        let o = Options {
            max_policies_per_target: 2,
            max_external_auth_per_target: 1,
            ..Options::default()
        };
        let mut t = PerTarget::default();
        let gw = &ObjectName::new("Gateway", NsName::new("ns", "g"));
        let mut counted = HashSet::new();
        assert_eq!(t.admit(&o, gw, "ns/a", true, &mut counted), Ok(()));
        // A policy naming the target twice counts once.
        assert_eq!(t.admit(&o, gw, "ns/a", true, &mut counted), Ok(()));
        assert_eq!(
            t.admit(&o, gw, "ns/b", true, &mut HashSet::new()),
            Err("Gateway ns/g already has 1 more senior ExternalAuth policies (ns/a); raise --max-external-auth-per-target".into())
        );
        assert_eq!(t.admit(&o, gw, "ns/c", false, &mut HashSet::new()), Ok(()));
        assert_eq!(
            t.admit(&o, gw, "ns/d", false, &mut HashSet::new()),
            Err("Gateway ns/g already has 2 more senior accepted policies (ns/a, ns/c); raise --max-policies-per-target".into())
        );
        // Another target has its own count; 0 is no limit.
        let other = &ObjectName::new("XBackend", NsName::new("ns", "b"));
        assert_eq!(
            t.admit(&o, other, "ns/d", false, &mut HashSet::new()),
            Ok(())
        );
        let unlimited = Options {
            max_policies_per_target: 0,
            ..Options::default()
        };
        for id in ["ns/e", "ns/f", "ns/g"] {
            assert_eq!(
                t.admit(&unlimited, gw, id, false, &mut HashSet::new()),
                Ok(())
            );
        }
    }
}
