//! What the compiler produces besides the bundle: the status report, and the resolved
//! topology (listeners, routes, clusters) an Envoy configuration and `explain` are made from.

use serde::Serialize;

use crate::refs::{NsName, Target};

/// Status of one object towards one target (a policy's target, a route's parent, a
/// Gateway's listener, an XBackend itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// What the status is about, e.g. `Gateway agents/gw`, `listener https`.
    pub target: Target,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    pub accepted: bool,
    /// `Accepted`, `Invalid`, `Unsupported`, `TargetNotFound`, `LimitPerTargetExceeded`,
    /// `RefNotPermitted`, `Conflicted`, or a Gateway API route/listener reason.
    pub reason: String,
    pub message: String,
    /// Where defaults/overrides meet (docs/semantics.md, "Defaults and overrides"): whether
    /// the policy is enforced at this target as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced: Option<Enforcement>,
}

/// The `Enforced` condition of a policy at one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enforcement {
    /// False only when `Overridden`.
    pub status: bool,
    /// `Enforced`, `PartiallyEnforced` or `Overridden`.
    pub reason: String,
    pub message: String,
}

/// The status of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    /// `file: document n`.
    pub source: String,
    /// Rank in seniority order (policies only; 1 is the most senior).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seniority: Option<u64>,
    /// `metadata.generation` of the object, when the manifest has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub conditions: Vec<TargetStatus>,
}

impl ObjectStatus {
    /// Whether every condition is accepted.
    pub fn accepted(&self) -> bool {
        self.conditions.iter().all(|c| c.accepted)
    }
}

/// An object the API server would reject, with each problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidObject {
    pub(crate) source: String,
    pub(crate) kind: String,
    pub(crate) object: String,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl std::fmt::Display for InvalidObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.source)?;
        if !self.kind.is_empty() {
            write!(f, ": {}", self.kind)?;
            if !self.object.is_empty() {
                write!(f, " {}", self.object)?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// An object of a kind the compiler does not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedObject {
    pub source: String,
    pub api_version: String,
    pub kind: String,
    pub object: String,
}

/// The report `compile` and `validate` print.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// XAccessPolicies, most senior first.
    pub policies: Vec<ObjectStatus>,
    pub gateways: Vec<ObjectStatus>,
    pub routes: Vec<ObjectStatus>,
    pub backends: Vec<ObjectStatus>,
    /// ToolPins.
    #[serde(rename = "toolPins", skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<ObjectStatus>,
    /// RateLimitPolicies, most senior first.
    #[serde(rename = "rateLimitPolicies", skip_serializing_if = "Vec::is_empty")]
    pub rate_limit_policies: Vec<ObjectStatus>,
    /// Objects (or documents) the API server would reject.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalid: Vec<InvalidObject>,
    /// Objects of kinds mcp-access does not read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedObject>,
    /// Things that take effect but probably not as intended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Policies with a target that does not resolve, and what they would have restricted
    /// there (nothing stands in for them at that target).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unenforced: Vec<String>,
}

impl Report {
    /// Whether every object is valid and every status accepted.
    pub fn all_accepted(&self) -> bool {
        self.invalid.is_empty()
            && [
                &self.policies,
                &self.gateways,
                &self.routes,
                &self.backends,
                &self.pins,
                &self.rate_limit_policies,
            ]
            .iter()
            .all(|l| l.iter().all(ObjectStatus::accepted))
    }
}

// ---------------------------------------------------------------------------------------
// Effective policy view

/// The policies a request through one Gateway listener to one XBackend (through some of its
/// routes) meets, level by level and step by step, each rule with where it came from
/// (`mcp-access effective`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectivePolicy {
    /// `namespace/name` of the Gateway.
    pub gateway: String,
    pub listener: String,
    /// `namespace/name` of the XBackend.
    pub backend: String,
    /// The routes to the XBackend this view is about, where route-scoped policies make them
    /// differ (`HTTPRoute ns/name`, `HTTPRoute ns/name rule i (name)`, other routes by the
    /// cluster); empty: every route.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    /// The HTTPRoutes (`namespace/name`) of `routes`, for selecting views by route.
    #[serde(skip)]
    pub http_routes: Vec<String>,
    pub levels: Vec<EffectiveLevel>,
    /// What defaults/overrides left out here (replaced, unset, not added), and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The XBackend's pinned tools (its ToolPin) with their reviewed annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pins: Option<mcp_access_bundle::ToolPins>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveLevel {
    /// `Gateway` or `Backend`.
    pub level: String,
    pub steps: Vec<EffectiveStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveStep {
    /// `ExternalAuth`, `Deny` or `Allow` (in evaluation order).
    pub step: String,
    pub policies: Vec<EffectiveEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveEntry {
    /// `namespace/name` in the bundle (what decision logs name).
    pub policy: String,
    /// Where its rules came from: the object, or the block and strategy of a Gateway policy.
    pub from: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<String>,
    /// None: all traffic; empty: nothing (the stand-in of an Allow policy not accepted).
    pub rules: Option<Vec<EffectiveRule>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorizer: Option<String>,
    /// `DryRun` (in the dry-run decision only) or `EnforceOnly` (replaced there by a dry-run
    /// block); absent: enforced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The policy object whose `defaults` / `overrides` block the rules came from
    /// (`Kind namespace/name`); None: the policy's own rules.
    #[serde(skip)]
    pub block_of: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveRule {
    pub name: String,
    /// The rule as compiled (source, authorization, when).
    pub rule: serde_json::Value,
    /// The rule as its policy object spells it (without its name), where it has one: a
    /// stand-in's rules do not. For people (`effective`'s text); JSON and YAML keep `rule`.
    #[serde(skip)]
    pub written: Option<serde_json::Value>,
}

// ---------------------------------------------------------------------------------------
// Topology

/// Everything needed to render an Envoy configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub gateways: Vec<GatewayModel>,
    pub backends: Vec<BackendModel>,
    pub services: Vec<ServiceModel>,
    pub authorizers: Vec<AuthorizerModel>,
    /// HTTPRoutes (`namespace/name`) with a backendRef of kind XBackend, which platforms that
    /// route only to Services (Envoy Gateway) cannot route.
    pub xbackend_refs: Vec<String>,
    /// `namespace/name` of each ExternalAuth policy the user wrote (one with an ExternalAuth
    /// block included), even where an override replaced it: the names `--assume` accepts.
    pub external_auth_policies: Vec<String>,
}

impl Topology {
    /// Why no route reaches XBackend `b`, when a route rule forwards to a Service `b` nearly
    /// describes (its `serviceName` on another port, or a name a typo away on its port): per
    /// such rule, the route, the rule, what it forwards to and the fix.
    pub fn near_misses(&self, b: &BackendModel) -> Vec<String> {
        let Some(service) = b.service_name.as_deref() else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        let entries = self
            .gateways
            .iter()
            .flat_map(|g| &g.listeners)
            .flat_map(|l| &l.routes);
        for e in entries {
            let RouteAction::Forward { clusters, .. } = &e.action else {
                continue;
            };
            let services = clusters
                .iter()
                .filter(|w| w.backend.is_none())
                .filter_map(|w| self.services.iter().find(|s| s.cluster == w.cluster))
                .filter(|s| s.namespace == b.namespace);
            for s in services {
                let xb = format!(
                    "refer to the XBackend itself (group: agentic.networking.x-k8s.io, kind: XBackend, name: {})",
                    b.id.name
                );
                let why = if s.name == service && s.port != b.port {
                    format!(
                        "port {} is not the port XBackend {} gives its Service ({}): set the backendRef's port to {}, or {xb}",
                        s.port, b.id, b.port, b.port
                    )
                } else if s.port == b.port && strsim::jaro_winkler(&s.name, service) > 0.85 {
                    format!(
                        "XBackend {} names serviceName {service}: correct whichever name is misspelled, or {xb}",
                        b.id
                    )
                } else {
                    continue;
                };
                let line = format!(
                    "HTTPRoute {} spec.rules[{}] forwards to Service {}/{} port {}: {why}; until then every request it forwards is denied unknown_backend",
                    e.route, e.rule, s.namespace, s.name, s.port
                );
                if !out.contains(&line) {
                    out.push(line);
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayModel {
    pub namespace: String,
    pub name: String,
    /// IP addresses from `spec.addresses` (empty: the CLI's default bind address).
    pub addresses: Vec<String>,
    pub listeners: Vec<ListenerModel>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerModel {
    pub name: String,
    /// The port Envoy listens on (the Gateway's, or the override).
    pub port: u16,
    pub protocol: Protocol,
    pub hostname: Option<String>,
    pub tls: Option<TlsModel>,
    /// Routes attached to this listener, in match-precedence order.
    pub routes: Vec<RouteEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsModel {
    /// `namespace/name` of each certificate Secret.
    pub certificates: Vec<String>,
    /// Client certificate validation, if any.
    pub client_validation: Option<ClientValidation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientValidation {
    /// CA references (`namespace/name`), or `""` for the CLI's default `--client-ca`.
    pub ca_refs: Vec<String>,
    /// AllowInsecureFallback: clients without a certificate are let in.
    pub optional: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatchKind {
    Exact,
    Prefix,
    Regex,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMatchModel {
    pub name: String,
    pub regex: bool,
    pub value: String,
}

/// One HTTPRoute match of one rule, on one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    /// Envoy route name: `<namespace>/<route>/rule-<i>/match-<j>`.
    pub name: String,
    /// `namespace/name` of the HTTPRoute.
    pub route: String,
    pub rule: usize,
    /// The rule's `name`, if it has one (what a policy's `sectionName` names).
    pub rule_name: Option<String>,
    /// Hostnames the entry applies to (empty: any host of the listener).
    pub hostnames: Vec<String>,
    pub path_kind: PathMatchKind,
    pub path: String,
    pub headers: Vec<ValueMatchModel>,
    pub query: Vec<ValueMatchModel>,
    pub method: Option<String>,
    pub action: RouteAction,
    /// Seniority of the route (creation, then namespace/name) for precedence ties.
    pub(crate) route_rank: usize,
    pub(crate) match_index: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderOps {
    pub set: Vec<(String, String)>,
    pub add: Vec<(String, String)>,
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRewrite {
    Full(String),
    /// Replace the matched `prefix` with `replacement`.
    Prefix {
        prefix: String,
        replacement: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedCluster {
    pub cluster: String,
    pub weight: u32,
    /// The XBackend, if it is one.
    pub backend: Option<NsName>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    Forward {
        clusters: Vec<WeightedCluster>,
        host_rewrite: Option<String>,
        path_rewrite: Option<PathRewrite>,
        request_headers: HeaderOps,
        response_headers: HeaderOps,
        timeout_ms: Option<u64>,
    },
    Redirect {
        scheme: Option<String>,
        hostname: Option<String>,
        path: Option<PathRewrite>,
        port: Option<u16>,
        status: u16,
        response_headers: HeaderOps,
    },
    /// No usable backend: Envoy answers 500 itself.
    Fail { message: String },
}

/// An XBackend's Envoy cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendModel {
    pub id: NsName,
    /// Which XBackend kind it was written as.
    pub kind: crate::types::BackendKind,
    pub cluster: String,
    /// The name `--resolve` maps (`serviceName` or `hostname`).
    pub service_name: Option<String>,
    pub hostname: Option<String>,
    pub namespace: String,
    pub port: u16,
    pub(crate) path: String,
    /// Gateway API XBackend's `spec.protocol` (TCP, HTTP, ..., MCP); None: unset, or the
    /// agentic kind (always MCP).
    pub protocol: Option<String>,
    /// How Envoy connects: Gateway API XBackend's `spec.tls` (`Some(None)`: mode None or no
    /// `tls`, plaintext); None: the agentic kind (TLS exactly towards a `hostname`).
    pub tls: Option<Option<BackendTlsModel>>,
}

/// Gateway API XBackend's `spec.tls` with mode ServerOnly or ClientAndServer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTlsModel {
    /// SNI, and the DNS name the certificate must hold when `sans` is empty:
    /// `validation.hostname`, else the XBackend's hostname.
    pub sni: String,
    /// `namespace/name` of each `validation.caCertificateRefs` ConfigMap (none: the system's
    /// CAs, `wellKnownCACertificates: System`, the only other choice the CRD allows).
    pub ca_refs: Vec<String>,
    /// `validation.subjectAltNames`: (`DNS` or `URI`, value).
    pub sans: Vec<(String, String)>,
    /// `namespace/name` of the `clientCertificateRef` Secret (mode ClientAndServer).
    pub client_certificate: Option<String>,
}

impl BackendModel {
    /// Whether its traffic is MCP: the agentic kind, or `protocol` MCP or unset.
    pub fn speaks_mcp(&self) -> bool {
        self.protocol.as_deref().is_none_or(|p| p == "MCP")
    }

    /// The group to write in a reference to it.
    pub fn group(&self) -> &'static str {
        self.kind.group()
    }
}

/// A plain Service an HTTPRoute forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceModel {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

/// The Service an ExternalAuth policy calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizerModel {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub port: u16,
    /// A gRPC authorizer: its cluster speaks HTTP/2.
    pub grpc: bool,
}
