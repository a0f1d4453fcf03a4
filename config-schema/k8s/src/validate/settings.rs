//! `FilterSettings`: the bundle's own settings, as a cluster-scoped object.

use super::policy::authz_timeout;
use crate::check::{self, Checker};
use crate::types::*;

/// A `FilterSettings` spec: its fields are the bundle's own settings, so the bundle's rules
/// (one home: `mcp_access_bundle::validate`) check them, at the same paths under `spec`.
pub(crate) fn filter_settings(s: &FilterSettingsSpec, c: &mut Checker) {
    if let Some(t) = s.external_auth.as_ref().and_then(|e| e.timeout.as_ref()) {
        authz_timeout("spec.externalAuth.timeout", t, c);
    }
    let mut b = mcp_access_bundle::Bundle {
        api_version: mcp_access_bundle::API_VERSION.into(),
        identity: Default::default(),
        gateways: Vec::new(),
        backends: Vec::new(),
        authorizers: Vec::new(),
        policies: Vec::new(),
        deny_response: s.deny_response.clone().unwrap_or_default(),
        limits: s.limits.clone().unwrap_or_default(),
        listings: s.listings.clone().unwrap_or_default(),
        envoy: Default::default(),
        rate_limits: Vec::new(),
        rate_limit_service: None,
        decision_records: Default::default(),
    };
    if let Some(id) = &s.identity {
        b.identity.trust_domain = id.trust_domain.clone();
        b.identity.spiffe = id.spiffe.clone().unwrap_or_default();
    }
    if let Err(e) = mcp_access_bundle::validate(&b) {
        c.err(
            format!("spec.{}", e.path),
            format!("Invalid value: {}", e.message),
        );
    }
    if let Some(list) = &s.protected_resources {
        protected_resources(list, c);
    }
}

/// `spec.protectedResources`: the CRD's checks, then the bundle's rule for the metadata
/// (one definition: `mcp_access_bundle::oauth`). Whether the listener exists, and serves the
/// resource's host, the compiler checks.
fn protected_resources(list: &[ProtectedResourceSpec], c: &mut Checker) {
    c.max_items("spec.protectedResources", list.len(), 64);
    for (i, p) in list.iter().enumerate() {
        let at = format!("spec.protectedResources[{i}]");
        if c.required(&format!("{at}.targetRef"), &p.target_ref) {
            if let Some(r) = &p.target_ref {
                let rat = format!("{at}.targetRef");
                if let Some(g) = &r.group {
                    c.one_of(&format!("{rat}.group"), g, &[crate::types::GATEWAY_GROUP]);
                }
                if let Some(k) = &r.kind {
                    c.one_of(&format!("{rat}.kind"), k, &["Gateway"]);
                }
                if c.required(&format!("{rat}.namespace"), &r.namespace) {
                    let ns = opt(&r.namespace);
                    c.string(
                        &format!("{rat}.namespace"),
                        ns,
                        1,
                        63,
                        Some(check::DNS_LABEL),
                    );
                }
                if c.required(&format!("{rat}.name"), &r.name) {
                    c.len_between(&format!("{rat}.name"), opt(&r.name), 1, 253);
                }
                if let Some(sn) = &r.section_name {
                    let field = format!("{rat}.sectionName");
                    c.string(&field, sn, 1, 253, Some(check::DNS_SUBDOMAIN));
                }
            }
        }
        let resource = c.required(&format!("{at}.resource"), &p.resource);
        let servers = c.required(
            &format!("{at}.authorizationServers"),
            &p.authorization_servers,
        );
        if let Some(servers) = &p.authorization_servers {
            c.max_items(&format!("{at}.authorizationServers"), servers.len(), 8);
            c.set(&format!("{at}.authorizationServers"), servers);
        }
        if let Some(scopes) = &p.scopes_supported {
            c.max_items(&format!("{at}.scopesSupported"), scopes.len(), 64);
            c.set(&format!("{at}.scopesSupported"), scopes);
        }
        for (field, value, max) in [
            ("resource", &p.resource, 2048),
            ("resourceName", &p.resource_name, 256),
            ("resourceDocumentation", &p.resource_documentation, 2048),
        ] {
            if let Some(v) = value {
                c.len_between(&format!("{at}.{field}"), v, 1, max);
            }
        }
        if let (true, true, Some(pr)) = (resource, servers, protected_resource(p)) {
            for (field, message) in mcp_access_bundle::oauth::problems(&pr, None) {
                c.err(format!("{at}.{field}"), format!("Invalid value: {message}"));
            }
        }
    }
}

/// The metadata of a `protectedResources` entry as the bundle holds it (None without its
/// required fields).
pub(crate) fn protected_resource(
    p: &ProtectedResourceSpec,
) -> Option<mcp_access_bundle::ProtectedResource> {
    Some(mcp_access_bundle::ProtectedResource {
        resource: p.resource.clone()?,
        authorization_servers: p.authorization_servers.clone()?,
        scopes_supported: p.scopes_supported.clone().unwrap_or_default(),
        resource_name: p.resource_name.clone(),
        resource_documentation: p.resource_documentation.clone(),
    })
}
