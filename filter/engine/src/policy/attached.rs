//! What the compiled bundle knows without a request, for tools that ask about policies
//! (`mcp-access who-can`): which policies a decision at a target meets, whether a token's
//! claims match a JWT source, and which rules can concern an MCP call.

use std::collections::BTreeSet;

use mcp_access_bundle::{self as bundle, Level};

use super::compiled::{Action, Policy, Source};
use super::{Engine, Mode, PolicyId, View};
use crate::request::{Caller, McpOp, Target};

impl Engine {
    /// Where a request on listener `listener` (`namespace/gateway/listener`) to backend
    /// `backend` (`namespace/name`) through Envoy route `route` is judged, as
    /// [`Engine::target_of`] finds it.
    pub fn target_at(&self, listener: &str, backend: &str, route: Option<&str>) -> Target {
        let b = self.backends.iter().position(|b| b.id == backend);
        let slot = |(i, r): (usize, &str)| {
            let by_route = self.by_route.get(r) == Some(&i);
            self.backends.get(i)?.route_slot(r, by_route)
        };
        Target {
            listener: self.listeners.iter().position(|l| l.id == listener),
            backend: b,
            route: b.zip(route).and_then(slot),
        }
    }

    /// The policies that take part in `view`'s decision at `target`: per level, Gateway
    /// first, most senior first.
    pub fn attached(&self, view: View, target: Target) -> Vec<(Level, &Policy)> {
        let mut out = Vec::new();
        for level in [Level::Gateway, Level::Backend] {
            let Some(ix) = self.level_index(view, level, target) else {
                continue;
            };
            let rules = ix.deny.rules().into_iter().chain(ix.allow.rules());
            let pids: BTreeSet<PolicyId> = ix
                .external_auth
                .iter()
                .copied()
                .chain(rules.map(|r| r.policy))
                .chain(ix.allow_when.iter().copied())
                .collect();
            out.extend(
                pids.into_iter()
                    .filter_map(|p| self.policies.get(p))
                    .map(|p| (level, p)),
            );
        }
        out
    }

    /// Whether a verified token with `claims` (a JSON object: `iss`, `sub`, ...) matches JWT
    /// source `source` as a rule of `mode` reads it (docs/semantics.md §3.7): a string scope
    /// claim holds its space-separated elements. A token of an issuer no provider verifies
    /// matches nothing.
    pub fn token_matches(
        &self,
        claims: &serde_json::Value,
        source: &bundle::JwtSource,
        mode: Mode,
    ) -> bool {
        let Ok(jwt) = self.jwt_principal(claims) else {
            return false;
        };
        let source = Source::Jwt {
            issuer: source.issuer.clone(),
            subject: source.subject.clone(),
            claims: source
                .claims
                .iter()
                .map(|c| (c.name.clone(), c.values.clone()))
                .collect(),
        };
        let caller = Caller {
            jwts: vec![jwt],
            ..Caller::default()
        };
        source.matches(&caller, mode)
    }
}

impl Policy {
    /// How its rules read a request: an Allow rule admits, the others select.
    pub fn mode(&self) -> Mode {
        match self.action {
            Action::Allow => Mode::Admit,
            Action::Deny | Action::ExternalAuth { .. } => Mode::Select,
        }
    }

    /// Whether its rule `index` can concern an MCP call of `method` naming `param`: its MCP
    /// conditions match the call (a rule without any concerns every call). The call's other
    /// attributes (caller, HTTP, CEL) are not looked at.
    pub fn rule_concerns(&self, index: usize, method: &str, param: Option<&str>) -> bool {
        let Some(rule) = self.rules.as_ref().and_then(|r| r.get(index)) else {
            return true;
        };
        let Some(mcp) = rule.authz.as_ref().and_then(|a| a.mcp.as_ref()) else {
            return true;
        };
        let call = McpOp::Call {
            method: mcp_access_bundle::mcp_methods::Method::resolve(method),
            param: param.map(str::to_string),
        };
        mcp.matches(&call, self.mode())
    }
}
