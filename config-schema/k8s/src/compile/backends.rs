//! XBackends: the MCP servers policies protect.

use std::collections::HashSet;

use super::{cond, reason, seniority_order, status, Ctx};
use crate::check;
use crate::model::*;
use crate::refs::ObjectName;

impl Ctx<'_> {
    pub(super) fn backends(&mut self) {
        let order = seniority_order(&self.m.backends);
        let mut seen: HashSet<String> = HashSet::new();
        for i in order {
            let Some(b) = self.m.backends.get(i) else {
                continue;
            };
            let id = b.id();
            let mcp = b.spec.mcp.clone().unwrap_or_default();
            let target = ObjectName::new("XBackend", b.ns_name());
            let c = if !seen.insert(id.clone()) {
                cond(target, None, reason::CONFLICTED, "another XBackend with this namespace/name is defined earlier or is older; it is used instead")
            } else if let Some(bad) = mcp
                .service_name
                .as_ref()
                .filter(|s| !check::matches(check::DNS_LABEL, s))
            {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    format!("spec.mcp.serviceName \"{bad}\" is not a Service name (a DNS label)"),
                )
            } else if let Some(bad) = mcp
                .hostname
                .as_ref()
                .filter(|h| !check::matches(check::DNS_SUBDOMAIN, h))
            {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    format!("spec.mcp.hostname \"{bad}\" is not a DNS name"),
                )
            } else if !mcp.path.as_deref().unwrap_or("/mcp").starts_with('/') {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    "spec.mcp.path must start with '/'",
                )
            } else {
                let port = u16::try_from(mcp.port.unwrap_or_default()).unwrap_or_default();
                self.backend_index
                    .insert(b.ns_name(), self.topo.backends.len());
                self.topo.backends.push(BackendModel {
                    id: b.ns_name(),
                    cluster: format!("xbackend/{id}"),
                    service_name: mcp.service_name.clone(),
                    hostname: mcp.hostname.clone(),
                    namespace: b.meta.namespace.clone(),
                    port,
                    path: mcp.path.clone().unwrap_or_else(|| "/mcp".into()),
                });
                cond(target, None, reason::ACCEPTED, "")
            };
            let st = status(b, None, vec![c]);
            self.report.backends.push(st);
        }
    }
}
