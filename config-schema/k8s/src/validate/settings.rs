//! `FilterSettings`: the bundle's own settings, as a cluster-scoped object.

use super::policy::authz_timeout;
use crate::check::Checker;
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
}
