//! The Kubernetes objects the compiler reads, as they appear in manifests.
//!
//! Every struct rejects unknown fields (as `kubectl apply --validate=strict` does). Nearly
//! every field is optional here: whether it is required, and which values it may take, is
//! checked by [`crate::validate`] so that the messages name the field the way the API
//! server does. A field that is accepted but never read is named with a leading `_`.

mod authz_cache;
mod backend;
mod pins;
mod ratelimit;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

mod settings;
pub use settings::*;

pub(crate) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
pub(crate) const AGENTIC_GROUP: &str = "agentic.networking.x-k8s.io";
pub(crate) const PROTOTYPE_GROUP: &str = "agentic.prototype.x-k8s.io";
/// Gateway API's experimental group: its `XBackend` (v1.6, GEP-4894).
pub(crate) const GATEWAY_X_GROUP: &str = "gateway.networking.x-k8s.io";
/// The project's own API group (`AccessPolicy`).
pub(crate) const MCP_ACCESS_GROUP: &str = "mcp-access.io";

pub(crate) use authz_cache::ExternalAuthCache;
pub use backend::*;
pub use pins::ToolPinSpec;
pub use ratelimit::RateLimitPolicySpec;
pub(crate) use ratelimit::{window_seconds, LimitSpec, WINDOW};

/// An optional string field's value, or `""`.
pub(crate) fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

/// `metadata` of any object. Fields that only a cluster sets are accepted and not used.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ObjectMeta {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) creation_timestamp: Option<String>,
    pub(crate) labels: Option<BTreeMap<String, String>>,
    pub(crate) annotations: Option<BTreeMap<String, String>>,
    #[serde(rename = "generateName")]
    _generate_name: Option<String>,
    #[serde(rename = "uid")]
    _uid: Option<Value>,
    #[serde(rename = "resourceVersion")]
    _resource_version: Option<Value>,
    pub(crate) generation: Option<Value>,
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
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathMatch {
    /// Exact, PathPrefix (default) or RegularExpression.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["Exact", "PathPrefix", "RegularExpression"]))]
    pub(crate) kind: Option<String>,
    /// The path (an empty PathPrefix is `/`).
    #[schemars(length(max = 1024))]
    pub(crate) value: Option<String>,
}

/// A header or query parameter match.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ValueMatch {
    /// Header name (case-insensitive).
    #[schemars(
        required,
        length(min = 1, max = 256),
        pattern(mcp_access_bundle::http::HEADER_NAME_PATTERN)
    )]
    pub(crate) name: Option<String>,
    /// Exact (default) or RegularExpression.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["Exact", "RegularExpression"]))]
    pub(crate) kind: Option<String>,
    /// Value or pattern.
    #[schemars(required, length(min = 1, max = 4096))]
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

/// A policy target (`LocalPolicyTargetReferenceWithSectionName`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TargetRef {
    /// `gateway.networking.k8s.io` (Gateway, HTTPRoute) or `agentic.networking.x-k8s.io`
    /// (XBackend).
    #[schemars(required, length(max = 253), pattern(crate::check::GROUP))]
    pub(crate) group: Option<String>,
    /// `Gateway`, `XBackend` or (`AccessPolicy` only) `HTTPRoute`.
    #[schemars(required, length(min = 1, max = 63), pattern(crate::check::KIND))]
    pub(crate) kind: Option<String>,
    /// Name of the target, in the policy's namespace.
    #[schemars(required, length(min = 1, max = 253))]
    pub(crate) name: Option<String>,
    /// A Gateway listener, or the `name` of one rule of an HTTPRoute: the policy applies
    /// there only.
    #[schemars(length(min = 1, max = 253), pattern(crate::check::DNS_SUBDOMAIN))]
    pub(crate) section_name: Option<String>,
}

/// Who a rule is about. Without one, a rule matches every caller.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.type) && self.type == 'JWT' ? has(self.jwt) : true",
     "message": "jwt must be specified when type is set to 'JWT'"},
    {"rule": "has(self.jwt) ? (has(self.type) && self.type == 'JWT') : true",
     "message": "type must be 'JWT' when jwt is set"}
]))]
pub(crate) struct RuleSource {
    /// ServiceAccount, SPIFFE or JWT.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["ServiceAccount", "SPIFFE", "JWT"]))]
    pub(crate) kind: Option<String>,
    /// A SPIFFE ID (`spiffe://<trust-domain>/<path>`), matched exactly.
    #[schemars(pattern(mcp_access_bundle::names::SPIFFE_ID_PATTERN))]
    pub(crate) spiffe: Option<String>,
    /// A Kubernetes ServiceAccount (through the trust domain).
    pub(crate) service_account: Option<ServiceAccountRef>,
    /// Claims of a token verified by Envoy's `jwt_authn` filter (AccessPolicy only).
    pub(crate) jwt: Option<JwtSourceSpec>,
}

/// A JWT source (`AccessPolicy` only): claims of a token Envoy's `jwt_authn` verified.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct JwtSourceSpec {
    /// The token's `iss`, exactly; a JWT provider must verify this issuer.
    #[schemars(required, length(min = 1, max = 1024))]
    pub(crate) issuer: Option<String>,
    /// The token's `sub`, exactly.
    #[schemars(length(min = 1, max = 1024))]
    pub(crate) subject: Option<String>,
    /// Claims that must all match.
    #[schemars(length(max = 16))]
    pub(crate) claims: Option<Vec<ClaimSpec>>,
}

/// One claim condition of a JWT source: the claim (for an array: one of its elements)
/// equals one of `values` (numbers and booleans by their JSON text); a missing claim does
/// not match. The top-level `scope` and `scp` claims, when strings, are OAuth scope sets:
/// one of their space-separated scopes must equal one of `values`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(self.name in ['scope', 'scp']) || self.values.all(v, v != '' && !v.matches('[\\\\s\\\\p{Z}\\\\x0B\\\\x{85}]'))",
     "message": "a scope claim (scope, scp) is matched per scope: each value must be one scope, non-empty and without spaces or other whitespace"}
]))]
pub(crate) struct ClaimSpec {
    /// Claim name; `a.b` is claim `b` inside claim `a`.
    #[schemars(required, length(min = 1, max = 256))]
    pub(crate) name: Option<String>,
    /// Accepted values.
    #[schemars(required, length(min = 1, max = 16), inner(length(max = 1024)))]
    pub(crate) values: Option<Vec<String>>,
}

/// A request condition (`AccessPolicy` only): a CEL predicate that must hold.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct WhenCondition {
    /// A CEL expression over the request (`request.*`, `source.*`, `jwt.claims`).
    #[schemars(required, length(min = 1, max = 4096))]
    pub(crate) predicate: Option<String>,
}

/// A ServiceAccount.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ServiceAccountRef {
    /// ServiceAccount name.
    #[schemars(required)]
    pub(crate) name: Option<String>,
    /// Its namespace (default: the policy's).
    pub(crate) namespace: Option<String>,
}

/// Gateway API `HTTPExternalAuthFilter`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.protocol == 'GRPC' ? has(self.grpc) : true",
     "message": "grpc must be specified when protocol is set to 'GRPC'"},
    {"rule": "has(self.grpc) ? self.protocol == 'GRPC' : true",
     "message": "protocol must be 'GRPC' when grpc is set"},
    {"rule": "self.protocol == 'HTTP' ? has(self.http) : true",
     "message": "http must be specified when protocol is set to 'HTTP'"},
    {"rule": "has(self.http) ? self.protocol == 'HTTP' : true",
     "message": "protocol must be 'HTTP' when http is set"}
]))]
pub(crate) struct ExternalAuth {
    /// HTTP or GRPC.
    #[schemars(required, extend("enum" = ["HTTP", "GRPC"]))]
    pub(crate) protocol: Option<String>,
    /// The authorizer's Service.
    #[schemars(required)]
    pub(crate) backend_ref: Option<BackendObjectRef>,
    /// gRPC settings.
    pub(crate) grpc: Option<GrpcAuthConfig>,
    /// HTTP settings.
    pub(crate) http: Option<HttpAuthConfig>,
    /// Request body forwarded to the authorizer.
    pub(crate) forward_body: Option<ForwardBody>,
    /// `AccessPolicy` only: what an authorizer that gives no usable answer (timeout, refused
    /// connection, malformed answer) means: `Deny` (default) or `Allow`.
    #[schemars(extend("enum" = ["Deny", "Allow"]))]
    pub(crate) failure_mode: Option<String>,
    /// `AccessPolicy` only: how long to wait for the authorizer (a Gateway API duration such
    /// as `500ms` or `2s`, at most `60s`; default: `FilterSettings` `externalAuth.timeout`,
    /// else 1s).
    #[schemars(pattern(crate::check::DURATION))]
    pub(crate) timeout: Option<String>,
    /// `AccessPolicy` only: reuse of the authorizer's answers (docs/semantics.md §3.10).
    pub(crate) cache: Option<ExternalAuthCache>,
}

/// A reference to a Service (or another backend kind).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(size(self.group) == 0 && self.kind == 'Service') ? has(self.port) : true",
     "message": "Must have port for Service reference"}
]))]
pub(crate) struct BackendObjectRef {
    /// API group (default: core).
    #[schemars(length(max = 253), pattern(crate::check::GROUP), extend("default" = ""))]
    pub(crate) group: Option<String>,
    /// Kind (default: Service).
    #[schemars(length(min = 1, max = 63), pattern(crate::check::KIND), extend("default" = "Service"))]
    pub(crate) kind: Option<String>,
    /// Name.
    #[schemars(required, length(min = 1, max = 253))]
    pub(crate) name: Option<String>,
    /// Namespace (default: the policy's; another one needs a ReferenceGrant).
    #[schemars(length(min = 1, max = 63), pattern(crate::check::DNS_LABEL))]
    pub(crate) namespace: Option<String>,
    /// Port.
    #[schemars(range(min = 1, max = 65535), extend("format" = "int32"))]
    pub(crate) port: Option<i64>,
}

/// gRPC authorizer settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrpcAuthConfig {
    /// Request headers sent to the authorizer.
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) allowed_headers: Option<Vec<String>>,
}

/// HTTP authorizer settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HttpAuthConfig {
    /// Prefix of the authorization request path.
    #[schemars(length(max = 1024), pattern(crate::check::HTTP_PATH))]
    pub(crate) path: Option<String>,
    /// Request headers sent to the authorizer.
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) allowed_headers: Option<Vec<String>>,
    /// Authorizer response headers copied to the request.
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) allowed_response_headers: Option<Vec<String>>,
}

/// Request body forwarding.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ForwardBody {
    /// Bytes of body forwarded (0: none).
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

/// `XAccessPolicy.spec`, v1alpha1, and `AccessPolicy.spec` (group `mcp-access.io`), which is
/// the same spec plus `action: Deny`, JWT sources and `when` (validation keeps the
/// extensions out of an `XAccessPolicy`, as its CRD does). Its schema is the AccessPolicy
/// CRD's (`crate::crd`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.action) && self.action == 'ExternalAuth' ? has(self.externalAuth) : true",
     "message": "externalAuth must be specified when action is set to 'ExternalAuth'"},
    {"rule": "has(self.externalAuth) ? (has(self.action) && self.action == 'ExternalAuth') : true",
     "message": "externalAuth may only be specified when action is set to 'ExternalAuth'"},
    {"rule": "!(has(self.defaults) && has(self.overrides))",
     "message": "only one of defaults and overrides may be set"},
    {"rule": "(has(self.defaults) || has(self.overrides)) ? !(has(self.action) || has(self.externalAuth) || has(self.rules) || has(self.when)) : has(self.action)",
     "message": "with a defaults or overrides block, action, externalAuth, rules and when belong in the block; without one, action is required"},
    {"rule": "(has(self.defaults) || has(self.overrides)) ? self.targetRefs.all(r, r.kind == 'Gateway') : true",
     "message": "defaults and overrides may only be set on a policy that targets Gateways"},
    {"rule": "has(self.unset) ? self.targetRefs.all(r, r.kind == 'XBackend') : true",
     "message": "unset may only be set on a policy that targets XBackends"},
    {"rule": "has(self.identityHeaders) ? self.targetRefs.all(r, r.kind == 'XBackend') : true",
     "message": "identityHeaders may only be set on a policy that targets XBackends"}
]))]
pub struct PolicySpecV1 {
    /// Gateways, XBackends or (`AccessPolicy` only) HTTPRoutes, all of one kind, the policy
    /// applies to.
    #[schemars(required, length(min = 1, max = 10), extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"rule": "self.all(ref, ref.kind == self[0].kind)",
                                       "message": "All targetRefs must have the same Kind"}]))]
    pub(crate) target_refs: Option<Vec<TargetRef>>,
    /// Allow: admit what a rule matches (the level denies the rest); Deny: deny what a rule
    /// matches; ExternalAuth: ask the authorizer about what a rule matches. Required unless
    /// a defaults or overrides block holds it.
    #[schemars(extend("enum" = ["Allow", "Deny", "ExternalAuth"]))]
    pub(crate) action: Option<String>,
    /// The authorizer (action ExternalAuth).
    pub(crate) external_auth: Option<ExternalAuth>,
    /// Rules; omitted or empty: the policy applies to all traffic.
    #[schemars(length(max = 10), extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"rule": "self.all(r, self.filter(x, x.name == r.name).size() == 1)",
                                       "message": "AccessRule names must be unique"}]))]
    pub(crate) rules: Option<Vec<RuleV1>>,
    /// `AccessPolicy` only: conditions (all must hold) under which the policy applies.
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) when: Option<Vec<WhenCondition>>,
    /// `AccessPolicy` on Gateways only: rules applied to the Backend level of every backend
    /// behind the Gateway, which backend policies may replace, extend or unset.
    pub(crate) defaults: Option<Block>,
    /// `AccessPolicy` on Gateways only: rules applied to the Backend level of every backend
    /// behind the Gateway that backend policies cannot escape.
    pub(crate) overrides: Option<Block>,
    /// `AccessPolicy` on XBackends only: names of merged default rules (or `namespace/name`
    /// of a merged default ExternalAuth block) to remove.
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) unset: Option<Vec<String>>,
    /// `AccessPolicy` on XBackends only: request headers the XBackend's MCP server receives
    /// with the caller's identity on allowed requests. Every copy a client sent of any
    /// identity header is removed first; a header is absent when the caller has no such
    /// identity. Two policies may not give one XBackend the same header with different
    /// values.
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub(crate) identity_headers: Option<Vec<IdentityHeaderSpec>>,
    /// `Enforce` (default) or `DryRun`: a dry-run policy is evaluated beside the others and
    /// what it would change is reported (decision log, filter state, counters), never
    /// enforced. (On an `XAccessPolicy`: the annotation `mcp-access.io/dry-run: "true"`.)
    #[schemars(extend("enum" = ["Enforce", "DryRun"]))]
    pub(crate) mode: Option<String>,
}

/// One identity header (docs/semantics.md §5.7).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.from == 'JWTClaim' ? has(self.claim) : !has(self.claim)",
     "message": "claim must be set when from is JWTClaim, and only then"},
    {"rule": mcp_access_bundle::identity_headers::reserved_rule(),
     "message": "the name is a header with another meaning (host, framing, hop-by-hop, proxy-*, authorization, cookie, content-*, accept-encoding, mcp-*, last-event-id, x-envoy-*, x-forwarded-*, x-request-id)"}
]))]
pub(crate) struct IdentityHeaderSpec {
    /// Header name: lowercase, no `_`.
    #[schemars(
        required,
        length(min = 1, max = 256),
        pattern(mcp_access_bundle::identity_headers::IDENTITY_HEADER_NAME_PATTERN)
    )]
    pub(crate) name: Option<String>,
    /// SPIFFE (the caller's SPIFFE ID), JWTSubject (`sub` of its verified JWT), JWTIssuer
    /// (`iss`) or JWTClaim (the claim `claim` names: a string as it is, any other value as
    /// JSON).
    #[schemars(required, extend("enum" = ["SPIFFE", "JWTSubject", "JWTIssuer", "JWTClaim"]))]
    pub(crate) from: Option<String>,
    /// The claim (from JWTClaim); `a.b` is claim `b` inside claim `a`.
    #[schemars(length(min = 1, max = 256))]
    pub(crate) claim: Option<String>,
}

/// A defaults or overrides block (docs/semantics.md, "Defaults and overrides").
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.action == 'ExternalAuth' ? has(self.externalAuth) : true",
     "message": "externalAuth must be specified when action is set to 'ExternalAuth'"},
    {"rule": "has(self.externalAuth) ? self.action == 'ExternalAuth' : true",
     "message": "externalAuth may only be specified when action is set to 'ExternalAuth'"}
]))]
pub(crate) struct Block {
    /// atomic (default): the block's rules as one set; merge: rule by rule, by name.
    #[schemars(extend("enum" = ["atomic", "merge"]))]
    pub(crate) strategy: Option<String>,
    /// The action of the block's rules.
    #[schemars(required, extend("enum" = ["Allow", "Deny", "ExternalAuth"]))]
    pub(crate) action: Option<String>,
    /// The authorizer (action ExternalAuth).
    pub(crate) external_auth: Option<ExternalAuth>,
    /// Rules; omitted or empty: all traffic.
    #[schemars(length(max = 10), extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"rule": "self.all(r, self.filter(x, x.name == r.name).size() == 1)",
                                       "message": "AccessRule names must be unique"}]))]
    pub(crate) rules: Option<Vec<RuleV1>>,
    /// Request conditions carried by the block's rules.
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) when: Option<Vec<WhenCondition>>,
    /// A CEL expression over a lower policy's spec (`self`), evaluated by the compiler: the
    /// block applies to a backend where it holds for one of its policies of this action.
    #[schemars(length(min = 1, max = 4096))]
    pub(crate) condition: Option<String>,
}

/// A rule: a source, an authorization and conditions, all of which must match.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RuleV1 {
    /// Rule name, unique in the policy.
    #[schemars(
        required,
        length(min = 1, max = 63),
        pattern(crate::check::DNS_SUBDOMAIN)
    )]
    pub(crate) name: Option<String>,
    /// Who; omitted: every caller.
    pub(crate) source: Option<RuleSource>,
    /// What; omitted: every request.
    pub(crate) authorization: Option<AuthorizationV1>,
    /// `AccessPolicy` only: conditions (all must hold) under which the rule matches.
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) when: Option<Vec<WhenCondition>>,
}

/// What a rule matches: Inline conditions or a CEL expression.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type == 'CEL' ? has(self.cel) : true",
     "message": "cel must be specified when type is set to 'CEL'"},
    {"rule": "self.type == 'Inline' ? !has(self.cel) : true",
     "message": "cel must not be specified when type is set to 'Inline'"}
]))]
pub(crate) struct AuthorizationV1 {
    /// Inline or CEL.
    #[serde(rename = "type")]
    #[schemars(required, extend("enum" = ["Inline", "CEL"]))]
    pub(crate) kind: Option<String>,
    /// The CEL expression (type CEL).
    pub(crate) cel: Option<CelV1>,
    /// Header conditions, all of which must hold.
    #[schemars(length(max = 10), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) headers: Option<Vec<ValueMatch>>,
    /// Hosts (`*.` wildcards allowed).
    #[schemars(length(max = 10), inner(length(min = 1, max = 253), pattern(mcp_access_bundle::names::HOSTNAME_PATTERN)),
               extend("x-kubernetes-list-type" = "set"))]
    pub(crate) hosts: Option<Vec<String>>,
    /// MCP conditions.
    pub(crate) mcp: Option<McpV1>,
    /// HTTP methods.
    #[schemars(length(max = 9), extend("x-kubernetes-list-type" = "set", "items" = {"type": "string",
        "enum": ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]}))]
    pub(crate) methods: Option<Vec<String>>,
    /// Paths (canonical form).
    #[schemars(length(max = 10), extend("x-kubernetes-list-type" = "atomic"))]
    pub(crate) paths: Option<Vec<PathMatch>>,
    /// Destination ports.
    #[schemars(length(max = 10), inner(range(min = 1, max = 65535)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) ports: Option<Vec<i64>>,
}

/// A CEL authorization.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CelV1 {
    /// A CEL expression over the request that must hold.
    #[schemars(required)]
    pub(crate) expression: Option<String>,
}

/// MCP conditions.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct McpV1 {
    /// Whether the base protocol (initialize, ping, notifications, ...) is matched.
    #[schemars(extend("enum" = ["SKIP_BASE_PROTOCOL_METHODS", "MATCH_BASE_PROTOCOL_METHODS"]))]
    pub(crate) mcp_base_protocol_methods_option: Option<String>,
    /// Methods matched (with `params`: only those names or URIs).
    #[schemars(length(max = 10), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub(crate) methods: Option<Vec<McpMethodV1>>,
}

/// One MCP method.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.params) && self.params.size() > 0 ? self.name in ['prompts/get', 'tools/call', 'resources/subscribe', 'resources/unsubscribe', 'resources/read'] : true",
     "message": "Params can only be specified for get, call, subscribe, unsubscribe, or read methods"}
]))]
pub(crate) struct McpMethodV1 {
    /// Method or category.
    #[schemars(required, extend("enum" = ["tools", "prompts", "resources", "prompts/list", "tools/list",
        "resources/list", "resources/templates/list", "prompts/get", "tools/call",
        "resources/subscribe", "resources/unsubscribe", "resources/read"]))]
    pub(crate) name: Option<String>,
    /// Tool / prompt names or resource URIs.
    #[schemars(length(max = 10), inner(length(max = 20)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) params: Option<Vec<String>>,
}
