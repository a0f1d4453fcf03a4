//! The checks of one policy: its targets, listeners, rules, sources, authorizations and CEL.

use std::collections::HashSet;

use mcp_access_cel::Program;

use super::*;

impl Validator {
    /// `backends`: the (namespace, name) of every backend, so that a target is found at once.
    pub(super) fn policy(
        &mut self,
        b: &Bundle,
        backends: &HashSet<(&str, &str)>,
        at: &str,
        p: &Policy,
    ) {
        self.name(&format!("{at}.name"), &p.name);
        self.check(
            !p.targets.is_empty(),
            || format!("{at}.targets"),
            "a policy needs at least one target",
        );
        self.policy_targets(b, backends, at, (p.level, &p.namespace, &p.targets));
        match (p.action, &p.external_auth) {
            (Action::ExternalAuth, None) => self.fail(
                format!("{at}.externalAuth"),
                "is required when action is ExternalAuth",
            ),
            (Action::ExternalAuth, Some(name)) => self.check(
                b.authorizers.iter().any(|a| &a.name == name),
                || format!("{at}.externalAuth"),
                format!("no authorizer named \"{name}\""),
            ),
            (_, Some(_)) => self.fail(
                format!("{at}.externalAuth"),
                "is only allowed when action is ExternalAuth",
            ),
            _ => {}
        }
        self.policy_listeners(b, at, p);
        self.check(
            p.mode != PolicyMode::EnforceOnly || p.level == Level::Backend,
            || format!("{at}.mode"),
            "EnforceOnly is only for Backend-level policies (those a dry-run defaults/overrides block replaces in the dry-run decision)",
        );
        if let Some(o) = &p.origin {
            self.check(
                !o.policy.is_empty(),
                || format!("{at}.origin.policy"),
                "must name the object the rules came from",
            );
            self.check(
                o.block.is_some() == o.strategy.is_some(),
                || format!("{at}.origin.strategy"),
                "a block's rules have a strategy, a policy's own rules none",
            );
        }
        if let Some(reason) = &p.not_accepted {
            self.check(
                !reason.is_empty(),
                || format!("{at}.notAccepted"),
                "must give the reason the policy was not accepted",
            );
            self.check(
                p.action != Action::ExternalAuth,
                || format!("{at}.notAccepted"),
                "a stand-in for a policy that was not accepted cannot call an authorizer: use action Deny",
            );
            self.check(
                p.action != Action::Allow || p.rules.is_none(),
                || format!("{at}.rules"),
                "an Allow stand-in admits nothing: omit rules",
            );
        }
        let rules = match &p.rules {
            Some(rules) => self.policy_rules(b, at, rules),
            None => Vec::new(),
        };
        let when = self.when(&format!("{at}.when"), &p.when);
        self.conditions.0.push(PolicyConditions { when, rules });
    }

    /// A policy's (or a rate limit's) targets at `level`, `namespace` their default:
    /// gateways (and listeners) or backends of the bundle.
    pub(super) fn policy_targets(
        &mut self,
        b: &Bundle,
        backends: &HashSet<(&str, &str)>,
        at: &str,
        (level, namespace, targets): (Level, &str, &[PolicyTarget]),
    ) {
        for (i, t) in targets.iter().enumerate() {
            let tat = format!("{at}.targets[{i}]");
            let ns = t.namespace.as_deref().unwrap_or(namespace);
            match level {
                Level::Gateway => {
                    let gw = b
                        .gateways
                        .iter()
                        .find(|g| g.name == t.name && g.namespace == ns);
                    match (gw, &t.section_name) {
                        (None, _) => self.fail(
                            format!("{tat}.name"),
                            format!("no gateway {ns}/{} in the bundle", t.name),
                        ),
                        (Some(g), Some(s)) => self.check(
                            g.listeners.iter().any(|l| &l.name == s),
                            || format!("{tat}.sectionName"),
                            format!("gateway {ns}/{} has no listener \"{s}\"", t.name),
                        ),
                        _ => {}
                    }
                    self.check(
                        t.routes.is_none(),
                        || format!("{tat}.routes"),
                        "only Backend targets are narrowed to routes",
                    );
                }
                Level::Backend => {
                    if !backends.contains(&(ns, t.name.as_str())) {
                        self.fail(
                            format!("{tat}.name"),
                            format!("no backend {ns}/{} in the bundle", t.name),
                        );
                    }
                    self.check(
                        t.section_name.is_none(),
                        || format!("{tat}.sectionName"),
                        "only Gateway targets have sections",
                    );
                    if let Some(routes) = &t.routes {
                        let be = b
                            .backends
                            .iter()
                            .find(|x| x.name == t.name && x.namespace == ns);
                        self.target_routes(&tat, (ns, &t.name), be, routes);
                    }
                }
            }
        }
    }

    /// The routes a Backend target is narrowed to: names backend `be` is recognised by.
    pub(super) fn target_routes(
        &mut self,
        tat: &str,
        (ns, name): (&str, &str),
        be: Option<&Backend>,
        routes: &[String],
    ) {
        self.check(
            !routes.is_empty(),
            || format!("{tat}.routes"),
            "an empty list would apply the policy to no request: omit routes to apply it through every route",
        );
        let mut seen = HashSet::new();
        for (j, r) in routes.iter().enumerate() {
            let known =
                be.is_some_and(|be| be.route_names.contains(r) || be.cluster_names.contains(r));
            self.check(
                known || be.is_none(),
                || format!("{tat}.routes[{j}]"),
                format!("backend {ns}/{name} has no route or cluster named \"{r}\" (routes are its routeNames or clusterNames)"),
            );
            self.check(
                seen.insert(r.as_str()),
                || format!("{tat}.routes[{j}]"),
                "duplicate route",
            );
        }
    }

    /// The listeners a Backend-level policy is narrowed to.
    pub(super) fn policy_listeners(&mut self, b: &Bundle, at: &str, p: &Policy) {
        self.listeners(b, at, (p.level, &p.namespace, &p.listeners));
    }

    /// The listeners a Backend-level policy or rate limit is narrowed to.
    pub(super) fn listeners(
        &mut self,
        b: &Bundle,
        at: &str,
        (level, namespace, listeners): (Level, &str, &[PolicyTarget]),
    ) {
        for (i, l) in listeners.iter().enumerate() {
            let lat = format!("{at}.listeners[{i}]");
            self.check(
                level == Level::Backend,
                || lat.clone(),
                "only a Backend-level policy is narrowed to listeners",
            );
            self.check(
                l.routes.is_none(),
                || format!("{lat}.routes"),
                "a listener has no routes: narrow the policy's targets instead",
            );
            let ns = l.namespace.as_deref().unwrap_or(namespace);
            let found = b.gateways.iter().any(|g| {
                g.name == l.name
                    && g.namespace == ns
                    && l.section_name
                        .as_ref()
                        .is_some_and(|s| g.listeners.iter().any(|x| &x.name == s))
            });
            self.check(
                found,
                || format!("{lat}.sectionName"),
                format!(
                    "no listener \"{}\" of gateway {ns}/{} in the bundle",
                    l.section_name.as_deref().unwrap_or_default(),
                    l.name
                ),
            );
        }
    }

    /// A policy's `rules`: named uniquely, each with its source, authorization and `when`;
    /// their compiled conditions.
    pub(super) fn policy_rules(
        &mut self,
        b: &Bundle,
        at: &str,
        rules: &[Rule],
    ) -> Vec<RuleConditions> {
        self.check(
            !rules.is_empty(),
            || format!("{at}.rules"),
            "an empty list would apply the policy to nothing: omit `rules` to apply it to all traffic",
        );
        let mut names = HashSet::new();
        let mut conditions = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let rat = format!("{at}.rules[{i}]");
            self.name(&format!("{rat}.name"), &r.name);
            self.check(
                names.insert(r.name.as_str()),
                || format!("{rat}.name"),
                "rule names must be unique within a policy",
            );
            if let Some(s) = &r.source {
                self.source(b, &format!("{rat}.source"), s);
            }
            let cel = r.authorization.as_ref().and_then(|a| {
                self.authorization(&format!("{rat}.authorization"), a);
                let cel = a.cel.as_ref()?;
                self.condition(|| format!("{rat}.authorization.cel"), cel)
            });
            let when = self.when(&format!("{rat}.when"), &r.when);
            conditions.push(RuleConditions { cel, when });
        }
        conditions
    }

    /// `when` conditions, compiled (those that compiled).
    pub(super) fn when(&mut self, at: &str, predicates: &[String]) -> Vec<Program> {
        predicates
            .iter()
            .enumerate()
            .filter_map(|(i, w)| self.condition(|| format!("{at}[{i}]"), w))
            .collect()
    }

    /// A CEL condition at bundle path `at()`, compiled as the engine runs it.
    pub(super) fn condition(
        &mut self,
        at: impl FnOnce() -> String,
        source: &str,
    ) -> Option<Program> {
        if source.trim().is_empty() {
            self.fail(at(), "must be a CEL expression, not empty");
            return None;
        }
        match Program::compile(source, self.cel_limits.as_ref()?) {
            Ok(program) => Some(program),
            Err(e) => {
                self.fail(at(), e.to_string());
                None
            }
        }
    }

    pub(super) fn source(&mut self, b: &Bundle, at: &str, s: &Source) {
        let wants = |k: SourceType| s.kind == k;
        for (set, field, kind) in [
            (s.spiffe.is_some(), "spiffe", SourceType::Spiffe),
            (
                s.service_account.is_some(),
                "serviceAccount",
                SourceType::ServiceAccount,
            ),
            (s.jwt.is_some(), "jwt", SourceType::Jwt),
        ] {
            if set != wants(kind) {
                let msg = if set {
                    format!("is not allowed with type {:?}", s.kind)
                } else {
                    format!("is required with type {:?}", s.kind)
                };
                self.fail(format!("{at}.{field}"), msg);
            }
        }
        if let Some(id) = &s.spiffe {
            self.check(
                is_spiffe_id(id),
                || format!("{at}.spiffe"),
                "must match ^spiffe://[a-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$",
            );
        }
        if let Some(sa) = &s.service_account {
            self.check(
                b.identity.trust_domain.is_some(),
                || format!("{at}.serviceAccount"),
                "needs identity.trustDomain to be set",
            );
            self.name(&format!("{at}.serviceAccount.name"), &sa.name);
            if let Some(ns) = &sa.namespace {
                self.name(&format!("{at}.serviceAccount.namespace"), ns);
            }
        }
        if let Some(j) = &s.jwt {
            self.check(
                b.identity
                    .jwt
                    .providers
                    .iter()
                    .any(|p| p.issuer == j.issuer),
                || format!("{at}.jwt.issuer"),
                format!("\"{}\" is not in identity.jwt.providers", j.issuer),
            );
            for (i, c) in j.claims.iter().enumerate() {
                self.check(
                    !c.name.is_empty(),
                    || format!("{at}.jwt.claims[{i}].name"),
                    "must not be empty",
                );
                self.check(
                    !c.values.is_empty(),
                    || format!("{at}.jwt.claims[{i}].values"),
                    "must list at least one value",
                );
                for (k, v) in c.values.iter().enumerate() {
                    self.check(
                        ClaimMatch::value_fits(&c.name, v),
                        || format!("{at}.jwt.claims[{i}].values[{k}]"),
                        ClaimMatch::SCOPE_VALUE_PROBLEM,
                    );
                }
            }
        }
    }

    pub(super) fn authorization(&mut self, at: &str, a: &Authorization) {
        // An `mcp` block with no method and the base protocol skipped matches nothing: valid
        // (the compiler warns about it).
        if let Some(m) = &a.mcp {
            let mut seen = HashSet::new();
            for (i, method) in m.methods.iter().enumerate() {
                let mat = format!("{at}.mcp.methods[{i}]");
                self.check(
                    mcp_methods::is_rule_name(&method.name),
                    || format!("{mat}.name"),
                    format!("unknown MCP method \"{}\"", method.name),
                );
                self.check(
                    seen.insert(method.name.as_str()),
                    || format!("{mat}.name"),
                    "duplicate method",
                );
                self.check(
                    method.params.as_ref().is_none_or(|p| !p.is_empty()),
                    || format!("{mat}.params"),
                    "an empty list names nothing: omit params to match any name or URI",
                );
                self.check(
                    method.params.is_none()
                        || mcp_methods::takes_params(&method.name),
                    || format!("{mat}.params"),
                    "params can only be specified for get, call, subscribe, unsubscribe, or read methods",
                );
            }
        }
        for (i, m) in a.methods.iter().enumerate() {
            self.check(
                HTTP_METHODS.contains(&m.as_str()),
                || format!("{at}.methods[{i}]"),
                format!("unknown HTTP method \"{m}\""),
            );
        }
        for (i, p) in a.paths.iter().enumerate() {
            let pat = format!("{at}.paths[{i}]");
            match p.kind {
                MatchType::Exact | MatchType::PathPrefix => self.check(
                    p.value.starts_with('/'),
                    || format!("{pat}.value"),
                    "must start with '/'",
                ),
                MatchType::RegularExpression => self.regex(&format!("{pat}.value"), &p.value),
            }
        }
        for (i, h) in a.headers.iter().enumerate() {
            let hat = format!("{at}.headers[{i}]");
            self.check(
                is_header_name(&h.name),
                || format!("{hat}.name"),
                "must be a valid HTTP header name",
            );
            match h.kind {
                MatchType::Exact => {}
                MatchType::PathPrefix => {
                    self.fail(format!("{hat}.type"), "must be Exact or RegularExpression")
                }
                MatchType::RegularExpression => self.regex(&format!("{hat}.value"), &h.value),
            }
        }
        for (i, h) in a.hosts.iter().enumerate() {
            self.check(
                is_hostname(h),
                || format!("{at}.hosts[{i}]"),
                "must be a hostname, optionally starting with '*.'",
            );
        }
        for (i, p) in a.ports.iter().enumerate() {
            self.check(*p != 0, || format!("{at}.ports[{i}]"), "must not be 0");
        }
    }
}
