//! The Kubernetes objects the compiler reads, as they appear in manifests.
//!
//! Every struct rejects unknown fields (as `kubectl apply --validate=strict` does). Nearly
//! every field is optional here: whether it is required, and which values it may take, is
//! checked by [`crate::validate`] so that the messages name the field the way the API
//! server does. A field that is accepted but never read is named with a leading `_`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `metadata` of any object. Fields that only a cluster sets are accepted and not used.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ObjectMeta {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) creation_timestamp: Option<String>,
    pub(crate) labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "annotations")]
    _annotations: Option<BTreeMap<String, String>>,
    #[serde(rename = "generateName")]
    _generate_name: Option<String>,
    #[serde(rename = "uid")]
    _uid: Option<Value>,
    #[serde(rename = "resourceVersion")]
    _resource_version: Option<Value>,
    #[serde(rename = "generation")]
    _generation: Option<Value>,
    #[serde(rename = "managedFields")]
    _managed_fields: Option<Value>,
    #[serde(rename = "ownerReferences")]
    _owner_references: Option<Value>,
    #[serde(rename = "finalizers")]
    _finalizers: Option<Value>,
    #[serde(rename = "deletionTimestamp")]
    _deletion_timestamp: Option<Value>,
    #[serde(rename = "deletionGracePeriodSeconds")]
    _deletion_grace_period_seconds: Option<Value>,
    #[serde(rename = "selfLink")]
    _self_link: Option<Value>,
}

/// One object: `apiVersion`, `kind`, `metadata`, `spec` (and a `status` that is not read).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Object<S> {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: Option<S>,
    #[serde(rename = "status")]
    _status: Option<Value>,
}

/// A `Namespace`: only its labels matter (listener `allowedRoutes` selectors).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct NamespaceObject {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(rename = "spec")]
    _spec: Option<Value>,
    #[serde(rename = "status")]
    _status: Option<Value>,
}

// ---------------------------------------------------------------------------------------
// Gateway API

/// `Gateway.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewaySpec {
    pub(crate) gateway_class_name: Option<String>,
    pub(crate) listeners: Option<Vec<GatewayListener>>,
    pub(crate) addresses: Option<Vec<GatewayAddress>>,
    pub(crate) infrastructure: Option<Infrastructure>,
    pub(crate) allowed_listeners: Option<AllowedListeners>,
    pub(crate) tls: Option<GatewayTls>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayAddress {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Infrastructure {
    pub(crate) labels: Option<BTreeMap<String, String>>,
    pub(crate) annotations: Option<BTreeMap<String, String>>,
    pub(crate) parameters_ref: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AllowedListeners {
    pub(crate) namespaces: Option<ListenerNamespaces>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListenerNamespaces {
    pub(crate) from: Option<String>,
    pub(crate) selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayListener {
    pub(crate) name: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) port: Option<i64>,
    pub(crate) protocol: Option<String>,
    pub(crate) tls: Option<ListenerTls>,
    pub(crate) allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListenerTls {
    pub(crate) mode: Option<String>,
    pub(crate) certificate_refs: Option<Vec<ObjectRef>>,
    pub(crate) options: Option<BTreeMap<String, String>>,
}

/// A reference to an object by group, kind, name and optional namespace (Secret, ConfigMap,
/// Service, ...).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ObjectRef {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AllowedRoutes {
    pub(crate) namespaces: Option<RouteNamespaces>,
    pub(crate) kinds: Option<Vec<RouteGroupKind>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteNamespaces {
    pub(crate) from: Option<String>,
    pub(crate) selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteGroupKind {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LabelSelector {
    pub(crate) match_labels: Option<BTreeMap<String, String>>,
    pub(crate) match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LabelSelectorRequirement {
    pub(crate) key: Option<String>,
    pub(crate) operator: Option<String>,
    pub(crate) values: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayTls {
    pub(crate) backend: Option<GatewayBackendTls>,
    pub(crate) frontend: Option<FrontendTls>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GatewayBackendTls {
    pub(crate) client_certificate_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct FrontendTls {
    pub(crate) default: Option<TlsConfig>,
    pub(crate) per_port: Option<Vec<PerPortTls>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PerPortTls {
    pub(crate) port: Option<i64>,
    pub(crate) tls: Option<TlsConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TlsConfig {
    pub(crate) validation: Option<FrontendValidation>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct FrontendValidation {
    pub(crate) ca_certificate_refs: Option<Vec<ObjectRef>>,
    pub(crate) mode: Option<String>,
}

/// `HTTPRoute.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRouteSpec {
    pub(crate) parent_refs: Option<Vec<ParentRef>>,
    pub(crate) hostnames: Option<Vec<String>>,
    pub(crate) rules: Option<Vec<RouteRule>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ParentRef {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) section_name: Option<String>,
    pub(crate) port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteRule {
    pub(crate) name: Option<String>,
    pub(crate) matches: Option<Vec<RouteMatch>>,
    pub(crate) filters: Option<Vec<RouteFilter>>,
    pub(crate) backend_refs: Option<Vec<HttpBackendRef>>,
    pub(crate) timeouts: Option<RouteTimeouts>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteMatch {
    pub(crate) path: Option<PathMatch>,
    pub(crate) headers: Option<Vec<ValueMatch>>,
    pub(crate) query_params: Option<Vec<ValueMatch>>,
    pub(crate) method: Option<String>,
}

/// A path match (`HTTPRoute` matches and `XAccessPolicy` v1alpha1 `paths`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) value: Option<String>,
}

/// A header or query parameter match.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ValueMatch {
    pub(crate) name: Option<String>,
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteFilter {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) request_header_modifier: Option<HeaderModifier>,
    pub(crate) response_header_modifier: Option<HeaderModifier>,
    pub(crate) request_mirror: Option<Value>,
    pub(crate) request_redirect: Option<RequestRedirect>,
    pub(crate) url_rewrite: Option<UrlRewrite>,
    pub(crate) extension_ref: Option<Value>,
    pub(crate) cors: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HeaderModifier {
    pub(crate) set: Option<Vec<HeaderValue>>,
    pub(crate) add: Option<Vec<HeaderValue>>,
    pub(crate) remove: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HeaderValue {
    pub(crate) name: Option<String>,
    pub(crate) value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RequestRedirect {
    pub(crate) scheme: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) path: Option<PathModifier>,
    pub(crate) port: Option<i64>,
    pub(crate) status_code: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct UrlRewrite {
    pub(crate) hostname: Option<String>,
    pub(crate) path: Option<PathModifier>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PathModifier {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) replace_full_path: Option<String>,
    pub(crate) replace_prefix_match: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HttpBackendRef {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) port: Option<i64>,
    pub(crate) weight: Option<i64>,
    pub(crate) filters: Option<Vec<RouteFilter>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RouteTimeouts {
    pub(crate) request: Option<String>,
    pub(crate) backend_request: Option<String>,
}

/// `ReferenceGrant.spec` (also GEP-709's `ReferencePolicy`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    pub(crate) from: Option<Vec<GrantFrom>>,
    pub(crate) to: Option<Vec<GrantTo>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrantFrom {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrantTo {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
}

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

/// A policy target (`LocalPolicyTargetReferenceWithSectionName`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TargetRef {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) section_name: Option<String>,
}

/// Rule source (both versions).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RuleSource {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) spiffe: Option<String>,
    pub(crate) service_account: Option<ServiceAccountRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ServiceAccountRef {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
}

/// Gateway API `HTTPExternalAuthFilter`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalAuth {
    pub(crate) protocol: Option<String>,
    pub(crate) backend_ref: Option<BackendObjectRef>,
    pub(crate) grpc: Option<GrpcAuthConfig>,
    pub(crate) http: Option<HttpAuthConfig>,
    pub(crate) forward_body: Option<ForwardBody>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BackendObjectRef {
    pub(crate) group: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrpcAuthConfig {
    pub(crate) allowed_headers: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HttpAuthConfig {
    pub(crate) path: Option<String>,
    pub(crate) allowed_headers: Option<Vec<String>>,
    pub(crate) allowed_response_headers: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ForwardBody {
    pub(crate) max_size: Option<i64>,
}

/// `XAccessPolicy.spec`, v0alpha0.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpecV0 {
    pub(crate) target_refs: Option<Vec<TargetRef>>,
    pub(crate) rules: Option<Vec<RuleV0>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RuleV0 {
    pub(crate) name: Option<String>,
    pub(crate) source: Option<RuleSource>,
    pub(crate) authorization: Option<AuthorizationV0>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AuthorizationV0 {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) external_auth: Option<ExternalAuth>,
    pub(crate) cel: Option<CelV0>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CelV0 {
    pub(crate) expression: Option<String>,
    #[serde(rename = "message")]
    _message: Option<String>,
}

/// `XAccessPolicy.spec`, v1alpha1.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpecV1 {
    pub(crate) target_refs: Option<Vec<TargetRef>>,
    pub(crate) action: Option<String>,
    pub(crate) external_auth: Option<ExternalAuth>,
    pub(crate) rules: Option<Vec<RuleV1>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RuleV1 {
    pub(crate) name: Option<String>,
    pub(crate) source: Option<RuleSource>,
    pub(crate) authorization: Option<AuthorizationV1>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AuthorizationV1 {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) cel: Option<CelV1>,
    pub(crate) headers: Option<Vec<ValueMatch>>,
    pub(crate) hosts: Option<Vec<String>>,
    pub(crate) mcp: Option<McpV1>,
    pub(crate) methods: Option<Vec<String>>,
    pub(crate) paths: Option<Vec<PathMatch>>,
    pub(crate) ports: Option<Vec<i64>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CelV1 {
    pub(crate) expression: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct McpV1 {
    pub(crate) mcp_base_protocol_methods_option: Option<String>,
    pub(crate) methods: Option<Vec<McpMethodV1>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct McpMethodV1 {
    pub(crate) name: Option<String>,
    pub(crate) params: Option<Vec<String>>,
}
