//! `FilterSettings` (group `mcp-access.io`, cluster-scoped): the filter's settings that are
//! not policy.

use schemars::JsonSchema;
use serde::Deserialize;

/// `FilterSettings.spec` (group `mcp-access.io`, cluster-scoped): the settings of the filter
/// that are not policy — the denial a client sees, request limits, listing filtering, where
/// caller identities come from, authorizer defaults and Envoy integration. At most one
/// object; every field is optional and defaults as the bundle does.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilterSettingsSpec {
    /// What a client sees when a policy denies its request.
    pub(crate) deny_response: Option<mcp_access_bundle::DenyResponse>,
    /// Request limits.
    pub(crate) limits: Option<mcp_access_bundle::Limits>,
    /// Per-caller filtering of listings.
    pub(crate) listings: Option<mcp_access_bundle::Listings>,
    /// Where caller identities come from.
    pub(crate) identity: Option<IdentitySettingsSpec>,
    /// Defaults of every ExternalAuth policy's authorizer.
    pub(crate) external_auth: Option<ExternalAuthDefaults>,
    /// How the filter fits into Envoy.
    pub(crate) envoy: Option<EnvoySettingsSpec>,
    /// OAuth protected resource metadata (RFC 9728) per Gateway listener: MCP clients that
    /// get a 401 find the authorization server from it (docs/semantics.md §5.6).
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) protected_resources: Option<Vec<ProtectedResourceSpec>>,
    /// What decision records carry for `mcp-access replay` (tool arguments: opt in).
    pub(crate) decision_records: Option<mcp_access_bundle::DecisionRecords>,
}

/// `FilterSettings.spec.protectedResources[]`: the metadata of the MCP server behind a
/// Gateway listener (or every listener of a Gateway).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProtectedResourceSpec {
    /// The Gateway, and with `sectionName` one of its listeners.
    #[schemars(required)]
    pub(crate) target_ref: Option<ListenerRef>,
    /// The MCP server's canonical URI as clients see it (`https`, or `http` on a loopback
    /// host; no query or fragment; in normal form), e.g. `https://mcp.example.com/mcp`.
    #[schemars(required, length(min = 1, max = 2048))]
    pub(crate) resource: Option<String>,
    /// Issuer identifiers of the authorization servers that issue its tokens.
    #[schemars(required, length(min = 1, max = 8), inner(length(min = 1, max = 2048)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) authorization_servers: Option<Vec<String>>,
    /// Scopes clients may request.
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) scopes_supported: Option<Vec<String>>,
    /// A human-readable name of the MCP server.
    #[schemars(length(min = 1, max = 256))]
    pub(crate) resource_name: Option<String>,
    /// A page with documentation for developers.
    #[schemars(length(min = 1, max = 2048))]
    pub(crate) resource_documentation: Option<String>,
}

/// A Gateway (cluster-scoped objects name its namespace), optionally one of its listeners.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListenerRef {
    /// `gateway.networking.k8s.io`.
    #[schemars(extend("enum" = ["gateway.networking.k8s.io"], "default" = "gateway.networking.k8s.io"))]
    pub(crate) group: Option<String>,
    /// `Gateway`.
    #[schemars(extend("enum" = ["Gateway"], "default" = "Gateway"))]
    pub(crate) kind: Option<String>,
    /// The Gateway's namespace.
    #[schemars(required, length(min = 1, max = 63), pattern(crate::check::DNS_LABEL))]
    pub(crate) namespace: Option<String>,
    /// The Gateway's name.
    #[schemars(required, length(min = 1, max = 253))]
    pub(crate) name: Option<String>,
    /// One listener of it; omitted: every listener.
    #[schemars(length(min = 1, max = 253), pattern(crate::check::DNS_SUBDOMAIN))]
    pub(crate) section_name: Option<String>,
}

/// `FilterSettings.spec.identity`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct IdentitySettingsSpec {
    /// SPIFFE trust domain of ServiceAccount sources (the CLI's `--trust-domain`).
    #[schemars(length(min = 1, max = 255))]
    pub(crate) trust_domain: Option<String>,
    /// Where the caller's SPIFFE ID is read: the mTLS peer certificate (default) or a header a
    /// trusted front proxy sets.
    pub(crate) spiffe: Option<mcp_access_bundle::SpiffeSettings>,
}

/// `FilterSettings.spec.externalAuth`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalAuthDefaults {
    /// Timeout of authorizer calls whose policy sets none (a Gateway API duration, at most
    /// `60s`; the CLI's `--authz-timeout-ms`). There is deliberately no global failure mode:
    /// failing open is chosen per policy, where reviewers see it.
    #[schemars(pattern(crate::check::DURATION))]
    pub(crate) timeout: Option<String>,
}

/// `FilterSettings.spec.envoy`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct EnvoySettingsSpec {
    /// Requests Envoy routes to no XBackend: `Deny` (default) or `GatewayOnly` (the CLI's
    /// `--unknown-backend`).
    pub(crate) unknown_backend: Option<mcp_access_bundle::UnknownBackend>,
    /// A path holding `%2F` or `%5C`: `Reject` (400, default) or `Decode`.
    pub(crate) escaped_slashes: Option<mcp_access_bundle::EscapedSlashes>,
}
