//! XBackends: the MCP servers policies protect, of either kind — Gateway API's
//! (`gateway.networking.x-k8s.io/v1alpha1`, v1.6) or kube-agentic-networking's
//! (`agentic.networking.x-k8s.io/v0alpha0`). Both become one [`BackendModel`]; every
//! reference to an XBackend (route backendRef, policy targetRef, ToolPin targetRef, identity
//! headers) is resolved by [`Ctx::resolve_backend`].

use std::collections::HashMap;
use std::net::IpAddr;

use super::{cond, reason, seniority_order, status, Ctx};
use crate::check;
use crate::load::Item;
use crate::model::*;
use crate::refs::{NsName, ObjectName};
use crate::types::{
    opt, BackendKind, BackendSpec, GatewayBackendTlsSpec, GatewayXBackendSpec, ObjectRef,
    XBackendSpec,
};

/// The MCP path of an XBackend that names none: Gateway API's XBackend has no path field, and
/// the agentic kind's `spec.mcp.path` defaults to it.
pub(crate) const DEFAULT_MCP_PATH: &str = "/mcp";

/// Why a reference to an XBackend finds no accepted one.
pub(crate) enum BackendMiss {
    /// No accepted XBackend of any kind has this namespace/name.
    NotFound,
    /// The accepted XBackend with this namespace/name is of the other kind.
    OtherKind(BackendKind),
}

impl BackendMiss {
    /// The end of a sentence about the reference `kind`: why it finds nothing and the fix.
    pub(crate) fn explain(&self, wanted: BackendKind) -> String {
        match self {
            BackendMiss::NotFound => String::new(),
            BackendMiss::OtherKind(k) => format!(
                ": the XBackend with this name is of group {}, not {}; set group: {}",
                k.group(),
                wanted.group(),
                k.group()
            ),
        }
    }
}

impl Ctx<'_> {
    pub(super) fn backends(&mut self) {
        let order = seniority_order(&self.m.backends);
        // namespace/name -> the group of the XBackend that has it.
        let mut seen: HashMap<NsName, &'static str> = HashMap::new();
        for i in order {
            let Some(b) = self.m.backends.get(i) else {
                continue;
            };
            let kind = b.spec.kind();
            let target = ObjectName::new("XBackend", b.ns_name());
            let c = if let Some(first) = seen.get(&b.ns_name()) {
                let other = if *first == kind.group() {
                    String::new()
                } else {
                    format!(" (of group {first})")
                };
                cond(target, None, reason::CONFLICTED, format!("another XBackend{other} with this namespace/name is defined earlier or is older; it is used instead (policies and the bundle name an XBackend by namespace/name only: rename one)"))
            } else {
                seen.insert(b.ns_name(), kind.group());
                let model = match &b.spec {
                    BackendSpec::Agentic(s) => agentic_model(b, s),
                    BackendSpec::Gateway(s) => gateway_model(b, s),
                };
                match model {
                    Err(message) => cond(target, None, reason::INVALID, message),
                    Ok(model) => {
                        self.backend_index
                            .insert(b.ns_name(), self.topo.backends.len());
                        self.topo.backends.push(model);
                        cond(target, None, reason::ACCEPTED, "")
                    }
                }
            };
            let st = status(b, None, vec![c]);
            self.report.backends.push(st);
        }
    }

    /// The accepted XBackend a reference names: `group` and `kind` as written (one of the two
    /// XBackend kinds), in namespace `ns`. The one place every reference to an XBackend is
    /// resolved.
    pub(crate) fn resolve_backend(
        &self,
        kind: BackendKind,
        ns: &str,
        name: &str,
    ) -> Result<&BackendModel, BackendMiss> {
        let b = self
            .backend_index
            .get(&NsName::new(ns, name))
            .and_then(|i| self.topo.backends.get(*i))
            .ok_or(BackendMiss::NotFound)?;
        if b.kind != kind {
            return Err(BackendMiss::OtherKind(b.kind));
        }
        Ok(b)
    }
}

/// An agentic XBackend (`spec.mcp`), or why the compiler does not accept it.
fn agentic_model(b: &Item<BackendSpec>, s: &XBackendSpec) -> Result<BackendModel, String> {
    let mcp = s.mcp.clone().unwrap_or_default();
    if let Some(bad) = mcp
        .service_name
        .as_ref()
        .filter(|s| !check::matches(check::DNS_LABEL, s))
    {
        return Err(format!(
            "spec.mcp.serviceName \"{bad}\" is not a Service name (a DNS label)"
        ));
    }
    if let Some(bad) = mcp
        .hostname
        .as_ref()
        .filter(|h| !check::matches(check::DNS_SUBDOMAIN, h))
    {
        return Err(format!("spec.mcp.hostname \"{bad}\" is not a DNS name"));
    }
    let path = mcp.path.clone().unwrap_or_else(|| DEFAULT_MCP_PATH.into());
    if !path.starts_with('/') {
        return Err("spec.mcp.path must start with '/'".into());
    }
    Ok(BackendModel {
        id: b.ns_name(),
        kind: BackendKind::Agentic,
        cluster: format!("xbackend/{}", b.id()),
        service_name: mcp.service_name.clone(),
        hostname: mcp.hostname.clone(),
        namespace: b.meta.namespace.clone(),
        port: u16::try_from(mcp.port.unwrap_or_default()).unwrap_or_default(),
        path,
        protocol: None,
        tls: None,
    })
}

/// A Gateway API XBackend (`type: ExternalHostname`), or why the compiler does not accept it.
fn gateway_model(b: &Item<BackendSpec>, s: &GatewayXBackendSpec) -> Result<BackendModel, String> {
    let hostname = s
        .external_hostname
        .as_ref()
        .map(|e| opt(&e.hostname).to_string())
        .unwrap_or_default();
    // The CRD's pattern lets `10.0.0.1` through; Gateway API forbids IP addresses here.
    if hostname.parse::<IpAddr>().is_ok() {
        return Err(format!("spec.externalHostname.hostname \"{hostname}\" is an IP address: ExternalHostname takes a DNS name (Gateway API allows no IP address there)"));
    }
    let port = s.port.as_ref().and_then(|p| p.port).unwrap_or_default();
    let tls = s
        .tls
        .as_ref()
        .filter(|t| t.mode.is_some() && opt(&t.mode) != "None")
        .map(|t| tls_model(b, t, &hostname));
    Ok(BackendModel {
        id: b.ns_name(),
        kind: BackendKind::Gateway,
        cluster: format!("xbackend/{}", b.id()),
        service_name: None,
        hostname: Some(hostname),
        namespace: b.meta.namespace.clone(),
        port: u16::try_from(port).unwrap_or_default(),
        path: DEFAULT_MCP_PATH.into(),
        protocol: s.protocol.clone(),
        tls: Some(tls),
    })
}

/// `spec.tls` of a Gateway API XBackend whose mode asks for TLS.
fn tls_model(b: &Item<BackendSpec>, t: &GatewayBackendTlsSpec, hostname: &str) -> BackendTlsModel {
    let ns = &b.meta.namespace;
    let refname =
        |r: &ObjectRef| format!("{}/{}", r.namespace.as_deref().unwrap_or(ns), opt(&r.name));
    let v = t.validation.as_ref();
    BackendTlsModel {
        sni: v
            .and_then(|v| v.hostname.clone())
            .unwrap_or_else(|| hostname.to_string()),
        ca_refs: v
            .and_then(|v| v.ca_certificate_refs.as_ref())
            .into_iter()
            .flatten()
            .map(refname)
            .collect(),
        sans: v
            .and_then(|v| v.subject_alt_names.as_ref())
            .into_iter()
            .flatten()
            .map(|s| match opt(&s.kind) {
                "URI" => ("URI".to_string(), opt(&s.uri).to_string()),
                _ => ("DNS".to_string(), opt(&s.hostname).to_string()),
            })
            .collect(),
        client_certificate: t.client_certificate_ref.as_ref().map(refname),
    }
}
