//! The two XBackend kinds as manifests spell them: kube-agentic-networking's
//! (`agentic.networking.x-k8s.io`) and Gateway API's (`gateway.networking.x-k8s.io/v1alpha1`,
//! v1.6, GEP-4894), and which one a reference's group and kind name.

use serde::Deserialize;

use super::{ObjectRef, AGENTIC_GROUP, GATEWAY_X_GROUP, PROTOTYPE_GROUP};

// ---------------------------------------------------------------------------------------
// kube-agentic-networking

/// `XBackend.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XBackendSpec {
    pub(crate) mcp: Option<McpBackend>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct McpBackend {
    pub(crate) service_name: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) port: Option<i64>,
    pub(crate) path: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Gateway API XBackend (gateway.networking.x-k8s.io/v1alpha1, GEP-4894)

/// `XBackend.spec` of Gateway API v1.6 (`apisx/v1alpha1/xbackend_types.go`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayXBackendSpec {
    /// `ExternalHostname` (the only type the v1.6 CRD has).
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) port: Option<GatewayBackendPort>,
    pub(crate) external_hostname: Option<ExternalHostnameBackend>,
    /// TCP, HTTP, HTTP2, HTTP11, H2C or MCP; unset: what the route says.
    pub(crate) protocol: Option<String>,
    pub(crate) tls: Option<GatewayBackendTlsSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayBackendPort {
    pub(crate) name: Option<String>,
    pub(crate) port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalHostnameBackend {
    pub(crate) hostname: Option<String>,
}

/// `XBackend.spec.tls`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayBackendTlsSpec {
    pub(crate) mode: Option<String>,
    pub(crate) client_certificate_ref: Option<ObjectRef>,
    pub(crate) validation: Option<BackendTlsValidation>,
}

/// BackendTLSPolicy's `validation`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BackendTlsValidation {
    pub(crate) ca_certificate_refs: Option<Vec<ObjectRef>>,
    #[serde(rename = "wellKnownCACertificates")]
    pub(crate) well_known_ca_certificates: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) subject_alt_names: Option<Vec<SubjectAltName>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SubjectAltName {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) uri: Option<String>,
}

/// Either XBackend kind: kube-agentic-networking's or Gateway API's.
#[derive(Debug, Clone)]
pub enum BackendSpec {
    Agentic(XBackendSpec),
    Gateway(Box<GatewayXBackendSpec>),
}

impl BackendSpec {
    /// Which kind it is.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendSpec::Agentic(_) => BackendKind::Agentic,
            BackendSpec::Gateway(_) => BackendKind::Gateway,
        }
    }
}

/// Which XBackend kind a `group`/`kind` pair names, if either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// `agentic.networking.x-k8s.io` (or its older name `agentic.prototype.x-k8s.io`).
    Agentic,
    /// `gateway.networking.x-k8s.io` (Gateway API v1.6).
    Gateway,
}

impl BackendKind {
    /// The kind a reference with this group and kind names; None: no XBackend.
    pub(crate) fn of(group: &str, kind: &str) -> Option<BackendKind> {
        match (group, kind) {
            (AGENTIC_GROUP | PROTOTYPE_GROUP, "XBackend") => Some(BackendKind::Agentic),
            (GATEWAY_X_GROUP, "XBackend") => Some(BackendKind::Gateway),
            _ => None,
        }
    }

    /// The API group to write in a reference to it.
    pub fn group(self) -> &'static str {
        match self {
            BackendKind::Agentic => AGENTIC_GROUP,
            BackendKind::Gateway => GATEWAY_X_GROUP,
        }
    }
}
