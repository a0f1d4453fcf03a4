//! Where a policy's targetRefs lead: the bundle targets of a Gateway (and its listener), an
//! XBackend of either kind, or an HTTPRoute, or why one leads nowhere.

use super::*;

impl Ctx<'_> {
    /// The bundle targets of one targetRef of policy `p`.
    pub(super) fn find_target(
        &self,
        r: &TargetRef,
        p: &Item<PolicySpec>,
    ) -> Result<Vec<bundle::PolicyTarget>, Refusal> {
        self.find_target_of(r, &p.kind, &p.meta.namespace)
    }

    /// The bundle targets of one targetRef of a policy of kind `policy_kind` in `policy_ns`.
    pub(in crate::compile) fn find_target_of(
        &self,
        r: &TargetRef,
        policy_kind: &str,
        policy_ns: &str,
    ) -> Result<Vec<bundle::PolicyTarget>, Refusal> {
        let group = opt(&r.group);
        let kind = opt(&r.kind);
        let name = opt(&r.name);
        // The project's kinds may target HTTPRoutes.
        let project = matches!(policy_kind, "AccessPolicy" | "RateLimitPolicy");
        if group == GATEWAY_GROUP && kind == "Gateway" {
            return self.gateway_target(r, policy_ns);
        }
        if let Some(xbackend) = BackendKind::of(group, kind) {
            return self.xbackend_target(r, xbackend, policy_ns);
        }
        if group == GATEWAY_GROUP && kind == "HTTPRoute" {
            if !project {
                return Err(Refusal::unresolved(reason::INVALID, format!("{} cannot target an HTTPRoute: write the policy as an AccessPolicy (apiVersion mcp-access.io/v1alpha1), whose targetRefs may name HTTPRoutes", a_or_an(policy_kind))));
            }
            return self.route_targets(r, policy_ns);
        }
        let kinds: &[&str] = if project {
            &["Gateway", "XBackend", "HTTPRoute"]
        } else {
            &["Gateway", "XBackend"]
        };
        let xbackends = format!("XBackends ({GATEWAY_X_GROUP} or {AGENTIC_GROUP})");
        let hint = match kind {
            "Gateway" | "HTTPRoute" => format!("; for {}, group: {GATEWAY_GROUP}", a_or_an(kind)),
            // The group of the XBackend with this name, if there is one.
            "XBackend" => match self
                .backend_index
                .get(&NsName::new(policy_ns, name))
                .and_then(|i| self.topo.backends.get(*i))
            {
                Some(b) => format!("; for an XBackend, group: {}", b.group()),
                None => format!("; for an XBackend, group: {GATEWAY_X_GROUP} or {AGENTIC_GROUP}"),
            },
            _ => super::super::did_you_mean(kind, kinds),
        };
        let routes = if project {
            format!(", {xbackends} or HTTPRoutes ({GATEWAY_GROUP})")
        } else {
            format!(" or {xbackends}")
        };
        Err(Refusal::unresolved(reason::INVALID, format!("target {group}/{kind} is not supported: targets are Gateways ({GATEWAY_GROUP}){routes}{hint}")))
    }

    /// The bundle target of a targetRef to a Gateway (its `sectionName` checked).
    fn gateway_target(
        &self,
        r: &TargetRef,
        policy_ns: &str,
    ) -> Result<Vec<bundle::PolicyTarget>, Refusal> {
        let name = opt(&r.name);
        let Some(g) = self
            .topo
            .gateways
            .iter()
            .find(|g| g.namespace == policy_ns && g.name == name)
        else {
            let metas = self.m.gateways.iter().map(|g| &g.meta);
            let why = if self
                .m
                .gateways
                .iter()
                .any(|g| g.meta.namespace == policy_ns && g.meta.name == name)
            {
                "the Gateway is not accepted or has no usable listener (see gateways)".into()
            } else {
                format!(
                    "no such Gateway in the manifests{}",
                    super::super::elsewhere("Gateway", metas, policy_ns, name)
                )
            };
            return Err(Refusal::unresolved(reason::TARGET_NOT_FOUND, why));
        };
        let whole = bundle::PolicyTarget {
            name: name.to_string(),
            namespace: Some(policy_ns.to_string()),
            section_name: None,
            routes: None,
        };
        if let Some(s) = &r.section_name {
            if !g.listeners.iter().any(|l| &l.name == s) {
                let names: Vec<&str> = g.listeners.iter().map(|l| l.name.as_str()).collect();
                return Err(Refusal {
                    reason: reason::TARGET_NOT_FOUND,
                    message: format!(
                        "sectionName: Gateway {policy_ns}/{name} has no usable listener \"{s}\"{}",
                        super::super::did_you_mean(s, &names)
                    ),
                    standin: Some((vec![whole], "every listener of this Gateway")),
                });
            }
        }
        Ok(vec![bundle::PolicyTarget {
            section_name: r.section_name.clone(),
            ..whole
        }])
    }

    /// The bundle target of a targetRef to an XBackend of either kind (it must speak MCP).
    fn xbackend_target(
        &self,
        r: &TargetRef,
        xbackend: BackendKind,
        policy_ns: &str,
    ) -> Result<Vec<bundle::PolicyTarget>, Refusal> {
        let name = opt(&r.name);
        let bm = match self.resolve_backend(xbackend, policy_ns, name) {
            Ok(bm) => bm,
            Err(miss @ BackendMiss::OtherKind(_)) => {
                return Err(Refusal::unresolved(
                    reason::TARGET_NOT_FOUND,
                    format!(
                        "no accepted XBackend with this name{}",
                        miss.explain(xbackend)
                    ),
                ))
            }
            Err(BackendMiss::NotFound) => {
                let metas = self
                    .m
                    .backends
                    .iter()
                    .filter(|b| b.spec.kind() == xbackend)
                    .map(|b| &b.meta);
                return Err(Refusal::unresolved(
                    reason::TARGET_NOT_FOUND,
                    format!(
                        "no accepted XBackend with this name{}",
                        super::super::elsewhere("XBackend", metas, policy_ns, name)
                    ),
                ));
            }
        };
        if !bm.speaks_mcp() {
            return Err(Refusal {
                reason: reason::UNSUPPORTED,
                message: format!(
                    "XBackend {policy_ns}/{name} has protocol {}: mcp-access authorizes MCP only; set spec.protocol: MCP (or leave it unset) if the server speaks MCP",
                    bm.protocol.as_deref().unwrap_or_default()
                ),
                standin: Some((vec![backend_target(&bm.id, None)], "this XBackend")),
            });
        }
        if r.section_name.is_some() {
            return Err(Refusal::unresolved(
                reason::TARGET_NOT_FOUND,
                "an XBackend has no sections; remove sectionName",
            ));
        }
        Ok(vec![backend_target(&NsName::new(policy_ns, name), None)])
    }
}
