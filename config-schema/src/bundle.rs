//! The policy bundle, version 1: what the filter receives as its plugin configuration.
//!
//! Parsing is strict: unknown fields and wrong types are errors. Semantic checks that serde
//! cannot express live in [`crate::validate`].

use serde::{Deserialize, Serialize};

use crate::settings::*;

pub use mcp_access_cel::{CelLimits, CEL_LIMIT_MAX};

/// The only `apiVersion` this crate reads and writes.
pub const API_VERSION: &str = "mcp-access.io/v1";

/// Default [`Authorizer::max_response_body_bytes`].
pub const DEFAULT_MAX_RESPONSE_BODY_BYTES: u32 = 8 * 1024;

/// A compiled set of access policies for one data plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Bundle {
    /// Must be `mcp-access.io/v1`.
    pub api_version: String,
    /// How callers are identified.
    #[serde(default)]
    pub identity: IdentitySettings,
    /// Gateways and their listeners: the Gateway level of evaluation.
    #[serde(default)]
    pub gateways: Vec<Gateway>,
    /// MCP servers, recognised from Envoy's routing decision: the Backend level.
    #[serde(default)]
    pub backends: Vec<Backend>,
    /// External HTTP authorizers that `ExternalAuth` policies call.
    #[serde(default)]
    pub authorizers: Vec<Authorizer>,
    /// Access policies at both levels.
    #[serde(default)]
    pub policies: Vec<Policy>,
    /// What a client sees when the filter itself denies a request.
    #[serde(default)]
    pub deny_response: DenyResponse,
    /// Request limits.
    #[serde(default)]
    pub limits: Limits,
    /// Per-caller filtering of listing responses (docs/semantics.md §5.4).
    #[serde(default)]
    pub listings: Listings,
    /// How the filter fits into the Envoy it runs in.
    #[serde(default)]
    pub envoy: EnvoySettings,
    /// Rate limits, charged on allowed requests (docs/semantics.md §8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimit>,
    /// The RateLimitService `Global` rate limits ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_service: Option<crate::RateLimitService>,
    /// What the decision records (decision log lines, filter state) carry.
    #[serde(default, skip_serializing_if = "DecisionRecords::is_default")]
    pub decision_records: DecisionRecords,
}

/// Where caller identities come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentitySettings {
    /// SPIFFE trust domain; required when any rule names a ServiceAccount
    /// (`spiffe://<trustDomain>/ns/<namespace>/sa/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// How the caller's SPIFFE ID is read.
    #[serde(default)]
    pub spiffe: SpiffeSettings,
    /// JWT providers whose verified claims Envoy's `jwt_authn` filter leaves in metadata.
    #[serde(default)]
    pub jwt: JwtSettings,
}

/// Where the SPIFFE ID comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SpiffeSource {
    /// The URI SAN of the mTLS peer certificate, as Envoy reports it.
    #[default]
    PeerCertificate,
    /// A request header set by a trusted front proxy (see `header`).
    TrustedHeader,
}

/// SPIFFE ID settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpiffeSettings {
    /// `PeerCertificate` (default) or `TrustedHeader`.
    #[serde(default)]
    pub source: SpiffeSource,
    /// The trusted header; required with `source: TrustedHeader`, rejected otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<TrustedHeader>,
}

/// A header that carries the caller identity, set by a proxy the operator trusts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustedHeader {
    /// Header name (case-insensitive).
    pub name: String,
    /// `Plain`: the value is the SPIFFE ID. `Xfcc`: Envoy's x-forwarded-client-cert; the `URI=`
    /// of its last element is used.
    #[serde(default)]
    pub format: TrustedHeaderFormat,
}

/// Format of a trusted identity header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TrustedHeaderFormat {
    /// The header value is the SPIFFE ID itself.
    #[default]
    Plain,
    /// `x-forwarded-client-cert` syntax.
    Xfcc,
}

/// JWT settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtSettings {
    /// Providers configured in Envoy's `jwt_authn` filter.
    #[serde(default)]
    pub providers: Vec<JwtProvider>,
}

/// One `jwt_authn` provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtProvider {
    /// The `iss` the provider verifies.
    pub issuer: String,
    /// The provider's `payload_in_metadata` key.
    pub metadata_key: String,
}

/// A Gateway: one Envoy deployment's set of listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Gateway {
    /// Gateway name.
    pub name: String,
    /// Gateway namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Listeners; a request belongs to the one whose port (and hostname, if set) it arrived on.
    pub listeners: Vec<Listener>,
}

/// A Gateway listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Listener {
    /// Listener (section) name.
    pub name: String,
    /// The port Envoy listens on for it (the request's destination port).
    pub port: u16,
    /// Optional host (`:authority` without port) the listener is limited to; `*.` wildcards allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// OAuth protected resource metadata (RFC 9728): a request the filter denies while the
    /// caller presented no credential is answered 401 with a challenge naming it, and a
    /// `GET` of it that Envoy answers itself passes (docs/semantics.md §5.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_resource: Option<crate::oauth::ProtectedResource>,
}

/// An MCP server (XBackend), recognised from Envoy's routing decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Backend {
    /// Backend name.
    pub name: String,
    /// Backend namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Envoy route names (`xds.route_name`) that lead to this backend.
    #[serde(default)]
    pub route_names: Vec<String>,
    /// Envoy upstream cluster names (`xds.cluster_name`) of this backend.
    #[serde(default)]
    pub cluster_names: Vec<String>,
    /// The reviewed definitions of its tools (a ToolPin): listings show only tools that match
    /// them, and calls of other tools are denied (docs/pins.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins: Option<crate::ToolPins>,
    /// Headers this backend receives with the caller's identity on allowed requests; every
    /// client-sent copy of any identity header of the bundle is removed from every allowed
    /// request first (docs/semantics.md §5.7). Needs `envoy.holdHeaders`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity_headers: Vec<crate::identity_headers::IdentityHeader>,
}

/// An external authorizer speaking Envoy's ext_authz protocol: the HTTP service or gRPC
/// (`envoy.service.auth.v3.Authorization/Check`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Authorizer {
    /// Name policies refer to.
    pub name: String,
    /// Envoy cluster the callout goes to (HTTP/2 for `GRPC`).
    pub cluster: String,
    /// `HTTP` (default) or `GRPC`.
    #[serde(default, skip_serializing_if = "AuthorizerProtocol::is_http")]
    pub protocol: AuthorizerProtocol,
    /// `:authority` of the callout; defaults to the client request's host. HTTP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    /// Prefix added to the client request path. HTTP only.
    #[serde(default)]
    pub path_prefix: String,
    /// Callout timeout in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
    /// HTTP: client request headers sent besides the always-sent Host, Method, Path,
    /// Content-Length and Authorization. GRPC: the headers put in the CheckRequest; empty: all
    /// of them, pseudo-headers included (as Envoy's ext_authz does).
    #[serde(default)]
    pub allowed_headers: Vec<String>,
    /// Authorizer response headers an OK answer adds to the upstream request; empty: all but
    /// `Content-Type`, `Date` and `Server`. Dropped even when named: pseudo-headers,
    /// `x-envoy-*`, framing and hop-by-hop headers (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Upgrade`). An answer
    /// that would set `Host`, another `Proxy-*`, `Mcp-Method`, `Mcp-Name`,
    /// `MCP-Protocol-Version`, a header a route matches on, or a malformed header is an error
    /// (the failure mode applies). HTTP only (a gRPC authorizer names its header edits in the
    /// CheckResponse).
    #[serde(default)]
    pub allowed_response_headers: Vec<String>,
    /// Forward up to this many body bytes (0: none). GRPC: as `raw_body`.
    #[serde(default)]
    pub forward_body_max_bytes: u32,
    /// GRPC only: send the caller's certificate (URL-encoded PEM) as
    /// `source.certificate`, as ext_authz's `include_peer_certificate` does.
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_peer_certificate: bool,
    /// Largest denial body relayed to the client (default 8192 bytes, at most 1 MiB). The filter reads at most one
    /// byte more of a denial and nothing of other answers; a larger denial body is not relayed:
    /// the request is still denied with the authorizer's status and headers, an empty body,
    /// and no `Content-Type`/`Content-Encoding`.
    #[serde(default = "default_max_response_body")]
    pub max_response_body_bytes: u32,
    /// What an unreachable authorizer, a timeout or a 5xx means.
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// Reuse of its answers (docs/semantics.md §3.10); none: every request is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::AuthzCache>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The protocol an authorizer speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum AuthorizerProtocol {
    /// Envoy ext_authz HTTP service semantics (default).
    #[default]
    #[serde(rename = "HTTP")]
    Http,
    /// `envoy.service.auth.v3.Authorization/Check` over gRPC.
    #[serde(rename = "GRPC")]
    Grpc,
}

impl AuthorizerProtocol {
    fn is_http(&self) -> bool {
        *self == AuthorizerProtocol::Http
    }
}

/// Outcome when an authorizer cannot give an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FailureMode {
    /// Fail closed (default).
    #[default]
    Deny,
    /// Fail open: treat as an allow without added headers.
    Allow,
}

/// The level a policy acts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Level {
    /// Targets Gateways (optionally one listener); evaluated first.
    Gateway,
    /// Targets Backends; evaluated after the Gateway level allowed.
    Backend,
}

impl Level {
    /// The level's name in stats, logs and callout attributes: `gateway`, `backend`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Level::Gateway => "gateway",
            Level::Backend => "backend",
        }
    }

    /// [`Level::as_str`], or `none` for a denial before or outside the policy levels.
    pub const fn name(level: Option<Level>) -> &'static str {
        match level {
            Some(l) => l.as_str(),
            None => "none",
        }
    }
}

/// What a policy does with the requests its rules select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Action {
    /// Send selected requests to an authorizer; any denial denies.
    ExternalAuth,
    /// Admit what any rule admits; at its level everything else is denied.
    Allow,
    /// Deny what any rule matches.
    Deny,
}

/// An access policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    /// Policy name.
    pub name: String,
    /// Policy namespace (default for ServiceAccount namespaces and target namespaces).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Gateway or Backend: the kind of every target.
    pub level: Level,
    /// Objects the policy attaches to.
    pub targets: Vec<PolicyTarget>,
    /// ExternalAuth, Allow or Deny.
    pub action: Action,
    /// Authorizer name; required for `ExternalAuth`, rejected otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_auth: Option<String>,
    /// Lower is more senior (older); ties broken by namespace/name. Decides which denial is
    /// relayed and the order authorizer headers are applied.
    #[serde(default)]
    pub seniority: u64,
    /// Absent: the policy applies to all traffic (an ExternalAuth policy sends every request,
    /// a Deny policy denies every request, an Allow policy admits every request). Present:
    /// only what a rule matches. An empty list is rejected: omit `rules` for all traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<Rule>>,
    /// CEL predicates, all of which must hold for the policy to apply (docs/semantics.md,
    /// "CEL"). False: the policy does not apply. An error or a non-boolean result: an Allow
    /// policy applies and admits nothing; a Deny or ExternalAuth policy applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<String>,
    /// Set by the compiler on the stand-in of a policy it could not accept (the reason). The
    /// stand-in is enforced fail-closed: an Allow stand-in has no rules and admits nothing
    /// (its level stays default-deny); a Deny stand-in denies what its rules match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_accepted: Option<String>,
    /// Backend level only: the Gateway listeners (`name` the Gateway, `sectionName` the
    /// listener) on whose requests the policy applies; empty: every listener. The compiler
    /// sets it where the effective Backend-level policy differs between listeners
    /// (docs/semantics.md, "Defaults and overrides").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<PolicyTarget>,
    /// Set by the compiler on what it derived from a Gateway policy's defaults/overrides
    /// block, or on a Backend-level policy a block changed: where the rules came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// Which decision the policy takes part in (docs/semantics.md §3.8): `Enforce` (default)
    /// both; `DryRun` only the dry-run decision, which is reported and never enforced;
    /// `EnforceOnly` only the enforced one (the compiler sets it where a dry-run
    /// defaults/overrides block would replace the policy's rules).
    #[serde(default, skip_serializing_if = "PolicyMode::is_enforce")]
    pub mode: PolicyMode,
}

impl Policy {
    /// The `namespace/name` of the policy the user wrote that this one stands for: the
    /// object its `origin` names where the compiler derived it (a Gateway policy's block, a
    /// lower policy some of whose rules were replaced), else its own. One name per
    /// user-written policy in records, counters, `explain` and `who-can`.
    pub fn written_name(&self) -> String {
        match self.origin.as_ref().and_then(|o| o.policy.split_once(' ')) {
            Some((_, id)) => id.to_string(),
            None => format!("{}/{}", self.namespace, self.name),
        }
    }
}

/// Which decision a policy takes part in: the one the request gets, the dry-run one (the
/// decision with every dry-run policy enforced), or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum PolicyMode {
    /// Both decisions: the policy is enforced.
    #[default]
    Enforce,
    /// Only the dry-run decision: evaluated and reported, never enforced.
    DryRun,
    /// Only the enforced decision: a dry-run block replaces it in the dry-run decision.
    EnforceOnly,
}

impl PolicyMode {
    /// Whether this is the default, [`PolicyMode::Enforce`].
    pub fn is_enforce(&self) -> bool {
        *self == PolicyMode::Enforce
    }

    /// Whether the policy takes part in the enforced decision.
    pub fn enforced(self) -> bool {
        self != PolicyMode::DryRun
    }

    /// Whether the policy takes part in the dry-run decision.
    pub fn in_dry_run(self) -> bool {
        self != PolicyMode::EnforceOnly
    }
}

/// Where a compiled policy's rules came from (decision logs and `explain` show it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Origin {
    /// The object, `Kind namespace/name` (the Gateway policy for a block's rules).
    pub policy: String,
    /// The block the rules came from; absent: the policy's own rules (some replaced or
    /// unset, see `note`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<BlockKind>,
    /// The block's strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// What the compiler did (e.g. which lower rules an override replaced).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// How an origin reads in decision logs and `explain`: `overrides (merge) of <policy>`, or
/// `<policy>; <note>` for a policy's own rules.
impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.block {
            Some(b) => write!(
                f,
                "{} ({}) of {}",
                match b {
                    BlockKind::Defaults => "defaults",
                    BlockKind::Overrides => "overrides",
                },
                match self.strategy {
                    Some(Strategy::Merge) => "merge",
                    _ => "atomic",
                },
                self.policy
            )?,
            None => f.write_str(&self.policy)?,
        }
        if !self.note.is_empty() {
            write!(f, "; {}", self.note)?;
        }
        Ok(())
    }
}

/// A defaults or overrides block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum BlockKind {
    Defaults,
    Overrides,
}

/// How a block meets the lower policies: as one set of rules, or rule by rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    Atomic,
    Merge,
}

/// A policy target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyTarget {
    /// Gateway or Backend name.
    pub name: String,
    /// Defaults to the policy namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Gateway listener name (Gateway level only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Backend level only: the routes through which the policy applies to this backend
    /// (docs/semantics.md §1.6). A request is through one of them when the name the filter
    /// recognised the backend by (Envoy's route name if the bundle lists it, else the
    /// upstream cluster) is in this list; each entry is one of the backend's `routeNames` or
    /// `clusterNames`. Absent: every route. An empty list is rejected. A route-scoped Allow
    /// policy admits only through its routes, but makes the backend's level default-deny for
    /// every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<String>>,
}

/// A rule: who (source) may do what (authorization).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// Rule name, unique within the policy.
    pub name: String,
    /// Absent: any caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Absent: any request of that caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// CEL predicates, all of which must hold for the rule to match. An error or a
    /// non-boolean result counts against the caller: an Allow rule does not admit, a Deny or
    /// ExternalAuth rule matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<String>,
}

/// Kind of source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SourceType {
    /// Every caller, authenticated or not.
    Any,
    /// An exact SPIFFE ID.
    #[serde(rename = "SPIFFE")]
    Spiffe,
    /// A Kubernetes ServiceAccount, through the trust domain.
    ServiceAccount,
    /// Verified JWT claims.
    #[serde(rename = "JWT")]
    Jwt,
}

/// Who the caller is; exactly the field named by `type` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Source {
    /// Any, SPIFFE, ServiceAccount or JWT.
    #[serde(rename = "type")]
    pub kind: SourceType,
    /// `spiffe://<trust-domain>/<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spiffe: Option<String>,
    /// ServiceAccount; namespace defaults to the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccount>,
    /// JWT conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtSource>,
}

/// A ServiceAccount reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceAccount {
    /// Defaults to the policy namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// ServiceAccount name.
    pub name: String,
}

/// Conditions on a verified JWT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtSource {
    /// Required `iss`; must be one of `identity.jwt.providers`.
    pub issuer: String,
    /// Required `sub`, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Every claim listed must hold.
    #[serde(default)]
    pub claims: Vec<ClaimMatch>,
}

/// A claim condition: the claim (or, for a list claim, one of its elements) equals one of
/// `values`; a missing claim does not match. The top-level `scope` and `scp` claims, when
/// strings, are OAuth scope sets (RFC 9068 §2.2.3): one of their space-separated elements
/// must equal one of `values`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimMatch {
    /// Claim name; a dotted name (`a.b`) addresses a nested claim.
    pub name: String,
    /// Accepted values (strings; numbers and booleans compare by their JSON text).
    pub values: Vec<String>,
}

impl ClaimMatch {
    /// Whether claim `name` is a scope claim: `scope` or `scp`, top-level (a dotted name
    /// such as `x.scope` is not).
    pub fn is_scope(name: &str) -> bool {
        matches!(name, "scope" | "scp")
    }

    /// Why a value of claim `name` is refused: a scope claim matches one scope per value,
    /// so a value with whitespace (which separates scopes for a Deny rule), or an empty one,
    /// could never match (and would silently disable a Deny rule).
    pub const SCOPE_VALUE_PROBLEM: &'static str =
        "a scope claim (scope, scp) is matched per scope: each value must be one scope, non-empty and without spaces or other whitespace";

    /// Whether `value` may be a value of claim `name` ([`ClaimMatch::SCOPE_VALUE_PROBLEM`]).
    pub fn value_fits(name: &str, value: &str) -> bool {
        !Self::is_scope(name) || (!value.is_empty() && !value.contains(char::is_whitespace))
    }

    /// The elements of a scope claim's string value: split on ASCII spaces (RFC 6749), or
    /// with `any_whitespace` on any whitespace too (how a Deny rule reads it: a server that
    /// splits on whitespace sees those elements); empty pieces ignored.
    pub fn scope_elements(value: &str, any_whitespace: bool) -> impl Iterator<Item = &str> {
        value
            .split(move |c: char| c == ' ' || any_whitespace && c.is_whitespace())
            .filter(|e| !e.is_empty())
    }
}

/// What the request must be. Every condition that is set must hold; lists are OR.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Authorization {
    /// MCP conditions; absent: any MCP method (or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpMatch>,
    /// HTTP methods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Request paths, matched on the canonical path: no query, unreserved escapes decoded,
    /// dot segments removed, repeated slashes merged (see `envoy.escapedSlashes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathMatch>,
    /// Header conditions, all of which must hold. A repeated header is judged per copy
    /// against the caller: an Allow rule needs every copy to match, a Deny or ExternalAuth
    /// rule any copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    /// Hosts (`:authority` lower-cased, without port and one trailing dot); a `*.` wildcard
    /// stands for one or more labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Destination ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// A CEL condition that must hold (ANDed with the conditions above). An error or a
    /// non-boolean result counts against the caller, as for `when`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<String>,
}

/// MCP conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpMatch {
    /// Admitted methods. An `mcp` block admits only what it lists: empty admits no tool,
    /// prompt or resource method (then `baseProtocol` must be `Match`).
    #[serde(default)]
    pub methods: Vec<McpMethod>,
    /// Whether base protocol traffic (initialize, ping, notifications/*, completion/*,
    /// logging/*, the listing methods, SSE GET, session DELETE) is admitted.
    #[serde(default)]
    pub base_protocol: BaseProtocol,
}

/// Base protocol option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum BaseProtocol {
    /// Base protocol traffic is not admitted by this rule.
    #[default]
    Skip,
    /// Base protocol traffic is admitted.
    Match,
}

/// One MCP method, or a category (`tools`, `prompts`, `resources`) matching its sub-methods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpMethod {
    /// `tools`, `prompts`, `resources`, `tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`, `tools/call`, `prompts/get`, `resources/read`,
    /// `resources/subscribe` or `resources/unsubscribe`.
    pub name: String,
    /// Tool / prompt names (`params.name`) or resource URIs (`params.uri`). Absent: any;
    /// present: only these (an empty list is rejected). Only for
    /// call/get/read/subscribe/unsubscribe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Vec<String>>,
}

/// Path match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathMatch {
    /// Exact, PathPrefix (segment-wise, Gateway API style) or RegularExpression (full match).
    #[serde(rename = "type", default = "default_path_match")]
    pub kind: MatchType,
    /// Path or pattern.
    pub value: String,
}

/// Header match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderMatch {
    /// Header name (case-insensitive).
    pub name: String,
    /// Exact (default) or RegularExpression (full match).
    #[serde(rename = "type", default)]
    pub kind: MatchType,
    /// Value or pattern.
    pub value: String,
}

/// String match kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum MatchType {
    /// Equal.
    #[default]
    Exact,
    /// Path prefix on segment boundaries (paths only).
    PathPrefix,
    /// Regular expression matching the whole value.
    RegularExpression,
}

fn default_namespace() -> String {
    "default".to_string()
}

fn default_timeout_ms() -> u32 {
    200
}

fn default_path_match() -> MatchType {
    MatchType::PathPrefix
}

fn default_max_response_body() -> u32 {
    DEFAULT_MAX_RESPONSE_BODY_BYTES
}

/// One limit of a `RateLimitPolicy`, charged on requests the access decision allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimit {
    /// The policy's namespace.
    pub namespace: String,
    /// The policy's name.
    pub policy: String,
    /// The limit's name in the policy; `namespace/policy/name` names it in answers, records
    /// and counters.
    pub name: String,
    /// Gateway (the targets are listeners) or Backend.
    pub level: Level,
    /// Where the limit is charged.
    pub targets: Vec<PolicyTarget>,
    /// Backend level only: the Gateway listeners on whose requests the limit is charged;
    /// empty: every listener (set by the compiler for a Gateway's defaults/overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<PolicyTarget>,
    /// `Local` (default): this Envoy's counters; `Global`: the bundle's `rateLimitService`.
    #[serde(default)]
    pub mode: crate::RateLimitMode,
    /// `Global` only: what an unreachable limiter or a malformed answer means (`Deny`
    /// default).
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// At least one; a request passes while every rate has room.
    pub rates: Vec<crate::Rate>,
    /// CEL expressions whose values name the bucket (none: one bucket for every request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<String>,
    /// CEL predicates, all of which must hold for the limit to be charged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<String>,
    /// Where the limit came from when the compiler derived it from a defaults/overrides
    /// block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

impl RateLimit {
    /// `namespace/policy/name`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.policy, self.name)
    }
}
