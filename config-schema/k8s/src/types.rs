//! The Kubernetes objects the compiler reads, as they appear in manifests.
//!
//! Every struct rejects unknown fields (as `kubectl apply --validate=strict` does). Nearly
//! every field is optional here: whether it is required, and which values it may take, is
//! checked by [`crate::validate`] so that the messages name the field the way the API
//! server does.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `metadata` of any object. Fields that only a cluster sets are accepted and not used.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub creation_timestamp: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub generate_name: Option<String>,
    pub uid: Option<Value>,
    pub resource_version: Option<Value>,
    pub generation: Option<Value>,
    pub managed_fields: Option<Value>,
    pub owner_references: Option<Value>,
    pub finalizers: Option<Value>,
    pub deletion_timestamp: Option<Value>,
    pub deletion_grace_period_seconds: Option<Value>,
    pub self_link: Option<Value>,
}

/// One object: `apiVersion`, `kind`, `metadata`, `spec` (and a `status` that is not read).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Object<S> {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<S>,
    pub status: Option<Value>,
}

/// A `Namespace`: only its labels matter (listener `allowedRoutes` selectors).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceObject {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<Value>,
    pub status: Option<Value>,
}

// ---------------------------------------------------------------------------------------
// Gateway API

/// `Gateway.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: Option<String>,
    pub listeners: Option<Vec<GatewayListener>>,
    pub addresses: Option<Vec<GatewayAddress>>,
    pub infrastructure: Option<Infrastructure>,
    pub allowed_listeners: Option<AllowedListeners>,
    pub tls: Option<GatewayTls>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayAddress {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Infrastructure {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub parameters_ref: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowedListeners {
    pub namespaces: Option<ListenerNamespaces>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListenerNamespaces {
    pub from: Option<String>,
    pub selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayListener {
    pub name: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<i64>,
    pub protocol: Option<String>,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListenerTls {
    pub mode: Option<String>,
    pub certificate_refs: Option<Vec<ObjectRef>>,
    pub options: Option<BTreeMap<String, String>>,
}

/// A reference to an object by group, kind, name and optional namespace (Secret, ConfigMap,
/// Service, ...).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Option<Vec<RouteGroupKind>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteNamespaces {
    pub from: Option<String>,
    pub selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteGroupKind {
    pub group: Option<String>,
    pub kind: Option<String>,
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: Option<BTreeMap<String, String>>,
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub values: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayTls {
    pub backend: Option<GatewayBackendTls>,
    pub frontend: Option<FrontendTls>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayBackendTls {
    pub client_certificate_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FrontendTls {
    pub default: Option<TlsConfig>,
    pub per_port: Option<Vec<PerPortTls>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PerPortTls {
    pub port: Option<i64>,
    pub tls: Option<TlsConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsConfig {
    pub validation: Option<FrontendValidation>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FrontendValidation {
    pub ca_certificate_refs: Option<Vec<ObjectRef>>,
    pub mode: Option<String>,
}

/// `HTTPRoute.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRouteSpec {
    pub parent_refs: Option<Vec<ParentRef>>,
    pub hostnames: Option<Vec<String>>,
    pub rules: Option<Vec<RouteRule>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ParentRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub section_name: Option<String>,
    pub port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteRule {
    pub name: Option<String>,
    pub matches: Option<Vec<RouteMatch>>,
    pub filters: Option<Vec<RouteFilter>>,
    pub backend_refs: Option<Vec<HttpBackendRef>>,
    pub timeouts: Option<RouteTimeouts>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteMatch {
    pub path: Option<PathMatch>,
    pub headers: Option<Vec<ValueMatch>>,
    pub query_params: Option<Vec<ValueMatch>>,
    pub method: Option<String>,
}

/// A path match (`HTTPRoute` matches and `XAccessPolicy` v1alpha1 `paths`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

/// A header or query parameter match.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValueMatch {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteFilter {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub request_header_modifier: Option<HeaderModifier>,
    pub response_header_modifier: Option<HeaderModifier>,
    pub request_mirror: Option<Value>,
    pub request_redirect: Option<RequestRedirect>,
    pub url_rewrite: Option<UrlRewrite>,
    pub extension_ref: Option<Value>,
    pub cors: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderModifier {
    pub set: Option<Vec<HeaderValue>>,
    pub add: Option<Vec<HeaderValue>>,
    pub remove: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderValue {
    pub name: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestRedirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    pub port: Option<i64>,
    pub status_code: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UrlRewrite {
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub replace_full_path: Option<String>,
    pub replace_prefix_match: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpBackendRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub port: Option<i64>,
    pub weight: Option<i64>,
    pub filters: Option<Vec<RouteFilter>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteTimeouts {
    pub request: Option<String>,
    pub backend_request: Option<String>,
}

/// `ReferenceGrant.spec` (also GEP-709's `ReferencePolicy`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    pub from: Option<Vec<GrantFrom>>,
    pub to: Option<Vec<GrantTo>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrantFrom {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrantTo {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
}

// ---------------------------------------------------------------------------------------
// kube-agentic-networking

/// `XBackend.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XBackendSpec {
    pub mcp: Option<McpBackend>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpBackend {
    pub service_name: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<i64>,
    pub path: Option<String>,
}

/// A policy target (`LocalPolicyTargetReferenceWithSectionName`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub section_name: Option<String>,
}

/// Rule source (both versions).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleSource {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub spiffe: Option<String>,
    pub service_account: Option<ServiceAccountRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceAccountRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// Gateway API `HTTPExternalAuthFilter`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalAuth {
    pub protocol: Option<String>,
    pub backend_ref: Option<BackendObjectRef>,
    pub grpc: Option<GrpcAuthConfig>,
    pub http: Option<HttpAuthConfig>,
    pub forward_body: Option<ForwardBody>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BackendObjectRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrpcAuthConfig {
    pub allowed_headers: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpAuthConfig {
    pub path: Option<String>,
    pub allowed_headers: Option<Vec<String>>,
    pub allowed_response_headers: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForwardBody {
    pub max_size: Option<i64>,
}

/// `XAccessPolicy.spec`, v0alpha0.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpecV0 {
    pub target_refs: Option<Vec<TargetRef>>,
    pub rules: Option<Vec<RuleV0>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleV0 {
    pub name: Option<String>,
    pub source: Option<RuleSource>,
    pub authorization: Option<AuthorizationV0>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthorizationV0 {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub tools: Option<Vec<String>>,
    pub external_auth: Option<ExternalAuth>,
    pub cel: Option<CelV0>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CelV0 {
    pub expression: Option<String>,
    pub message: Option<String>,
}

/// `XAccessPolicy.spec`, v1alpha1.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpecV1 {
    pub target_refs: Option<Vec<TargetRef>>,
    pub action: Option<String>,
    pub external_auth: Option<ExternalAuth>,
    pub rules: Option<Vec<RuleV1>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleV1 {
    pub name: Option<String>,
    pub source: Option<RuleSource>,
    pub authorization: Option<AuthorizationV1>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthorizationV1 {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub cel: Option<CelV1>,
    pub headers: Option<Vec<ValueMatch>>,
    pub hosts: Option<Vec<String>>,
    pub mcp: Option<McpV1>,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<PathMatch>>,
    pub ports: Option<Vec<i64>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CelV1 {
    pub expression: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpV1 {
    pub mcp_base_protocol_methods_option: Option<String>,
    pub methods: Option<Vec<McpMethodV1>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpMethodV1 {
    pub name: Option<String>,
    pub params: Option<Vec<String>>,
}
