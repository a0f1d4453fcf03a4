//! Strict reading of a bundle: JSON syntax and types (with the path of the offending field),
//! then the semantic checks serde cannot express.

use std::collections::HashSet;
use std::fmt;

use mcp_access_cel::Program;

use crate::bundle::*;
use crate::http::is_header_name;
use crate::names::{is_dns_subdomain, is_hostname, is_spiffe_id, is_trust_domain};
use crate::{identity_headers, mcp_methods, oauth};

pub mod authz_cache;
mod json_path;
mod policy;
mod ratelimit;

pub use ratelimit::LimitConditions;

/// A bundle that cannot be used, with the JSON path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleError {
    /// JSON path such as `policies[2].rules[0].source.spiffe` (empty: the document itself).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "invalid policy bundle: {}", self.message)
        } else {
            write!(
                f,
                "invalid policy bundle at `{}`: {}",
                self.path, self.message
            )
        }
    }
}

impl std::error::Error for BundleError {}

/// A bundle that passed [`validate`]: only [`parse_bundle`] and [`ValidBundle::new`] make one,
/// so whatever takes it (the engine's compiler) cannot be handed an unchecked bundle. Its CEL
/// conditions were compiled while validating (through `mcp-access-cel`, as the engine runs
/// them) and are handed over compiled: [`ValidBundle::take_conditions`].
#[derive(Debug)]
pub struct ValidBundle {
    bundle: Bundle,
    conditions: Conditions,
    limit_conditions: Vec<LimitConditions>,
}

/// The CEL conditions of a valid bundle, compiled, per policy in bundle order.
#[derive(Debug, Default)]
pub struct Conditions(Vec<PolicyConditions>);

/// One policy's compiled CEL conditions: its `when`, and each rule's.
#[derive(Debug, Default)]
pub struct PolicyConditions {
    pub when: Vec<Program>,
    pub rules: Vec<RuleConditions>,
}

/// One rule's compiled CEL conditions: `authorization.cel`, then its `when`.
#[derive(Debug, Default)]
pub struct RuleConditions {
    pub cel: Option<Program>,
    pub when: Vec<Program>,
}

impl Conditions {
    /// The conditions of the policy at `position` in the bundle, handed over once (later:
    /// none).
    pub fn take(&mut self, position: usize) -> PolicyConditions {
        self.0
            .get_mut(position)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

impl ValidBundle {
    /// Validates `b`.
    pub fn new(b: Bundle) -> Result<ValidBundle, BundleError> {
        let v = Validator::run(&b)?;
        Ok(ValidBundle {
            bundle: b,
            conditions: v.conditions,
            limit_conditions: v.limit_conditions,
        })
    }

    /// The bundle itself (no longer known to be valid once it can be changed).
    pub fn into_inner(self) -> Bundle {
        self.bundle
    }

    /// Its compiled CEL conditions (taken once: later calls find none).
    pub fn take_conditions(&mut self) -> Conditions {
        std::mem::take(&mut self.conditions)
    }

    /// The compiled CEL of its rate limits, in bundle order (taken once).
    pub fn take_limit_conditions(&mut self) -> Vec<LimitConditions> {
        std::mem::take(&mut self.limit_conditions)
    }
}

impl std::ops::Deref for ValidBundle {
    type Target = Bundle;

    fn deref(&self) -> &Bundle {
        &self.bundle
    }
}

/// Parses and validates a bundle.
pub fn parse_bundle(json: &[u8]) -> Result<ValidBundle, BundleError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let bundle = <Bundle as serde::Deserialize>::deserialize(&mut de).map_err(|e| {
        let syntax = e.classify() != serde_json::error::Category::Data;
        let at = json_path::offset_of(json, e.line(), e.column(), syntax);
        let message = e.to_string();
        let tag = message.starts_with("unknown variant");
        BundleError {
            path: json_path::path_at(json, at, tag),
            message,
        }
    })?;
    de.end().map_err(|e| BundleError {
        path: String::new(),
        message: e.to_string(),
    })?;
    ValidBundle::new(bundle)
}

/// Semantic validation, CEL conditions compiled; the first problem found is returned.
pub fn validate(b: &Bundle) -> Result<(), BundleError> {
    Validator::run(b).map(|_| ())
}

/// What validating a bundle compiled.
struct Compiled {
    conditions: Conditions,
    limit_conditions: Vec<LimitConditions>,
}

#[derive(Default)]
struct Validator {
    first: Option<BundleError>,
    /// The bundle's CEL limits, once they are known to be valid.
    cel_limits: Option<CelLimits>,
    /// The CEL conditions compiled, one entry per policy validated.
    conditions: Conditions,
    /// The rate limits' CEL compiled, one entry per rate limit validated.
    limit_conditions: Vec<LimitConditions>,
}

const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

impl Validator {
    /// Validates `b`; its compiled CEL conditions, or the first problem.
    fn run(b: &Bundle) -> Result<Compiled, BundleError> {
        let mut v = Validator::default();
        v.bundle(b);
        match v.first {
            Some(e) => Err(e),
            None => Ok(Compiled {
                conditions: v.conditions,
                limit_conditions: v.limit_conditions,
            }),
        }
    }

    fn fail(&mut self, path: impl Into<String>, message: impl Into<String>) {
        if self.first.is_none() {
            self.first = Some(BundleError {
                path: path.into(),
                message: message.into(),
            });
        }
    }

    fn check(&mut self, ok: bool, path: impl FnOnce() -> String, message: impl Into<String>) {
        if !ok {
            self.fail(path(), message);
        }
    }

    fn bundle(&mut self, b: &Bundle) {
        self.check(
            b.api_version == API_VERSION,
            || "apiVersion".into(),
            format!("must be \"{API_VERSION}\", got \"{}\"", b.api_version),
        );
        let (c, max) = (&b.limits.cel, &CEL_LIMIT_MAX);
        let mut limits_ok = true;
        for (value, max, field) in [
            (
                c.max_expression_bytes,
                max.max_expression_bytes,
                "maxExpressionBytes",
            ),
            (c.max_depth, max.max_depth, "maxDepth"),
            (c.max_nodes, max.max_nodes, "maxNodes"),
            (c.max_steps, max.max_steps, "maxSteps"),
        ] {
            let ok = (1..=max).contains(&value);
            limits_ok &= ok;
            self.check(
                ok,
                || format!("limits.cel.{field}"),
                format!("must be between 1 and {max}"),
            );
        }
        // Conditions are compiled under valid limits only (else the limits are the problem).
        if limits_ok {
            self.cel_limits = Some(c.clone());
        }
        self.identity(&b.identity);
        self.gateways(&b.gateways);
        self.backends(&b.backends);
        if let Some(i) = b.backends.iter().position(|x| x.pins.is_some()) {
            // Pins are enforced on the listings the filter reads.
            self.check(
                b.listings.filter,
                || format!("backends[{i}].pins"),
                "pinned tools need listings.filter: true (listings must be read to be held to the pins)",
            );
        }
        self.identity_headers(b);
        for (i, h) in b.envoy.route_match_headers.iter().enumerate() {
            self.check(
                is_header_name(h) && !h.bytes().any(|c| c.is_ascii_uppercase()),
                || format!("envoy.routeMatchHeaders[{i}]"),
                "a header name, lowercase",
            );
        }
        if let Some(l) = b.envoy.listener {
            self.check(
                b.gateways.iter().flat_map(|g| &g.listeners).any(|x| x.port == l.port),
                || "envoy.listener.port".to_string(),
                format!("{} is the port of no listener in gateways[].listeners[] (leave envoy.listener out to read the port from Envoy)", l.port),
            );
        }
        self.authorizers(&b.authorizers);
        let backends: HashSet<(&str, &str)> = b
            .backends
            .iter()
            .map(|x| (x.namespace.as_str(), x.name.as_str()))
            .collect();
        for (i, p) in b.policies.iter().enumerate() {
            self.policy(b, &backends, &format!("policies[{i}]"), p);
        }
        self.rate_limits(b, &backends);
        let mut seen = HashSet::new();
        for (i, p) in b.policies.iter().enumerate() {
            self.check(
                seen.insert((p.namespace.as_str(), p.name.as_str())),
                || format!("policies[{i}].name"),
                format!("duplicate policy {}/{}", p.namespace, p.name),
            );
        }
        let d = &b.deny_response;
        self.check(
            d.http_status == 200 || (400..=599).contains(&d.http_status),
            || "denyResponse.httpStatus".into(),
            "must be 200 or a 4xx or 5xx status",
        );
        self.check(
            (1..=64 * 1024 * 1024).contains(&b.limits.max_body_bytes),
            || "limits.maxBodyBytes".into(),
            "must be between 1 and 67108864",
        );
        self.check(
            (1..=64 * 1024 * 1024).contains(&b.listings.max_bytes),
            || "listings.maxBytes".into(),
            "must be between 1 and 67108864",
        );
        self.check(
            (1..=1024).contains(&b.limits.max_json_depth),
            || "limits.maxJsonDepth".into(),
            "must be between 1 and 1024",
        );
        self.check(
            b.decision_records.receipts.checkpoint_records >= 1,
            || "decisionRecords.receipts.checkpointRecords".into(),
            "must be at least 1",
        );
    }

    fn identity(&mut self, id: &IdentitySettings) {
        if let Some(td) = &id.trust_domain {
            self.check(
                is_trust_domain(td),
                || "identity.trustDomain".into(),
                "must be a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')",
            );
        }
        match (id.spiffe.source, &id.spiffe.header) {
            (SpiffeSource::TrustedHeader, None) => self.fail(
                "identity.spiffe.header",
                "is required when source is TrustedHeader",
            ),
            (SpiffeSource::PeerCertificate, Some(_)) => self.fail(
                "identity.spiffe.header",
                "is only allowed when source is TrustedHeader",
            ),
            (_, Some(h)) => self.check(
                is_header_name(&h.name),
                || "identity.spiffe.header.name".into(),
                "must be a valid HTTP header name",
            ),
            _ => {}
        }
        let mut keys = HashSet::new();
        for (i, p) in id.jwt.providers.iter().enumerate() {
            let at = format!("identity.jwt.providers[{i}]");
            self.check(
                !p.issuer.is_empty(),
                || format!("{at}.issuer"),
                "must not be empty",
            );
            self.check(
                !p.metadata_key.is_empty(),
                || format!("{at}.metadataKey"),
                "must not be empty",
            );
            self.check(
                keys.insert(p.metadata_key.as_str()),
                || format!("{at}.metadataKey"),
                "duplicate metadata key",
            );
        }
    }

    fn gateways(&mut self, gateways: &[Gateway]) {
        let mut seen = HashSet::new();
        let mut bound = HashSet::new();
        for (i, g) in gateways.iter().enumerate() {
            let at = format!("gateways[{i}]");
            self.name(&format!("{at}.name"), &g.name);
            self.check(
                seen.insert((g.namespace.as_str(), g.name.as_str())),
                || format!("{at}.name"),
                format!("duplicate gateway {}/{}", g.namespace, g.name),
            );
            self.check(
                !g.listeners.is_empty(),
                || format!("{at}.listeners"),
                "a gateway needs at least one listener",
            );
            let mut names = HashSet::new();
            for (j, l) in g.listeners.iter().enumerate() {
                let lat = format!("{at}.listeners[{j}]");
                self.name(&format!("{lat}.name"), &l.name);
                self.check(
                    names.insert(l.name.as_str()),
                    || format!("{lat}.name"),
                    "duplicate listener name",
                );
                self.check(l.port != 0, || format!("{lat}.port"), "must not be 0");
                if let Some(h) = &l.hostname {
                    self.check(
                        is_hostname(h),
                        || format!("{lat}.hostname"),
                        "must be a hostname, optionally starting with '*.'",
                    );
                }
                self.check(
                    bound.insert((l.port, l.hostname.as_deref())),
                    || format!("{lat}.port"),
                    "another listener already has this port and hostname",
                );
                if let Some(p) = &l.protected_resource {
                    for (field, message) in oauth::problems(p, l.hostname.as_deref()) {
                        self.fail(format!("{lat}.protectedResource.{field}"), message);
                    }
                }
            }
        }
    }

    fn backends(&mut self, backends: &[Backend]) {
        let mut seen = HashSet::new();
        let mut routes = HashSet::new();
        let mut clusters = HashSet::new();
        for (i, b) in backends.iter().enumerate() {
            let at = format!("backends[{i}]");
            self.name(&format!("{at}.name"), &b.name);
            self.check(
                seen.insert((b.namespace.as_str(), b.name.as_str())),
                || format!("{at}.name"),
                format!("duplicate backend {}/{}", b.namespace, b.name),
            );
            self.check(
                !(b.route_names.is_empty() && b.cluster_names.is_empty()),
                || format!("{at}.routeNames"),
                "a backend needs routeNames or clusterNames to be recognised",
            );
            for (j, r) in b.route_names.iter().enumerate() {
                self.check(
                    !r.is_empty() && routes.insert(r.as_str()),
                    || format!("{at}.routeNames[{j}]"),
                    "must be non-empty and belong to one backend only",
                );
            }
            for (j, c) in b.cluster_names.iter().enumerate() {
                self.check(
                    !c.is_empty() && clusters.insert(c.as_str()),
                    || format!("{at}.clusterNames[{j}]"),
                    "must be non-empty and belong to one backend only",
                );
            }
            if let Some(pins) = &b.pins {
                self.pins(&format!("{at}.pins"), pins);
            }
        }
    }

    /// A backend's pinned tools: each name once, each digest as ToolPins write them.
    fn pins(&mut self, at: &str, pins: &crate::ToolPins) {
        self.check(
            !pins.source.is_empty(),
            || format!("{at}.source"),
            "must name the ToolPin (namespace/name)",
        );
        let mut names = HashSet::new();
        for (i, t) in pins.tools.iter().enumerate() {
            self.check(
                !t.name.is_empty(),
                || format!("{at}.tools[{i}].name"),
                "must not be empty",
            );
            self.check(
                names.insert(t.name.as_str()),
                || format!("{at}.tools[{i}].name"),
                format!("tool {:?} is pinned twice", t.name),
            );
            self.check(
                crate::is_pin_digest(&t.digest),
                || format!("{at}.tools[{i}].digest"),
                format!(
                    "{:?} is not a digest: sha256: and 64 lowercase hex digits",
                    t.digest
                ),
            );
        }
    }

    /// Each backend's identity headers: valid, each name once, never the trusted identity
    /// header, and only where the filter holds the headers (a client's copy would otherwise
    /// reach the upstream before the filter removes it).
    fn identity_headers(&mut self, b: &Bundle) {
        let trusted = b
            .identity
            .spiffe
            .header
            .as_ref()
            .map(|h| h.name.to_ascii_lowercase());
        for (i, be) in b.backends.iter().enumerate() {
            let mut names = HashSet::new();
            for (j, h) in be.identity_headers.iter().enumerate() {
                let at = format!("backends[{i}].identityHeaders[{j}]");
                for (field, message) in identity_headers::problems(h) {
                    self.fail(format!("{at}.{field}"), message);
                }
                self.check(
                    names.insert(h.name.as_str()),
                    || format!("{at}.name"),
                    "a backend has each identity header once",
                );
                self.check(
                    trusted.as_deref() != Some(h.name.as_str()),
                    || format!("{at}.name"),
                    "is the trusted identity header (identity.spiffe.header)",
                );
                self.check(
                    b.envoy.hold_headers,
                    || format!("{at}.name"),
                    "identity headers need envoy.holdHeaders: true (without it a client's copy reaches the upstream before the filter removes it)",
                );
                self.check(
                    !b.envoy.route_match_headers.iter().any(|r| r.eq_ignore_ascii_case(&h.name)),
                    || format!("{at}.name"),
                    "a route matches on this header (envoy.routeMatchHeaders): Envoy would match the route again once the filter sets it, and could send the request through a route no policy judged; name another header",
                );
            }
        }
    }

    fn authorizers(&mut self, authorizers: &[Authorizer]) {
        let mut seen = HashSet::new();
        for (i, a) in authorizers.iter().enumerate() {
            let at = format!("authorizers[{i}]");
            self.name(&format!("{at}.name"), &a.name);
            self.check(
                seen.insert(a.name.as_str()),
                || format!("{at}.name"),
                "duplicate authorizer name",
            );
            self.check(
                !a.cluster.is_empty(),
                || format!("{at}.cluster"),
                "must name an Envoy cluster",
            );
            self.check(
                a.path_prefix.is_empty() || is_path_prefix(&a.path_prefix),
                || format!("{at}.pathPrefix"),
                "must start with '/' and contain only URL path characters",
            );
            self.check(
                (1..=60_000).contains(&a.timeout_ms),
                || format!("{at}.timeoutMs"),
                "must be between 1 and 60000",
            );
            self.check(
                a.max_response_body_bytes <= 1024 * 1024,
                || format!("{at}.maxResponseBodyBytes"),
                "must be at most 1048576 (1 MiB)",
            );
            if let Some((field, message)) =
                a.cache.as_ref().and_then(|c| authz_cache::problem(a, c))
            {
                self.fail(format!("{at}.cache.{field}"), message);
            }
            if let Some(auth) = &a.authority {
                self.check(
                    !auth.is_empty() && auth.bytes().all(|c| c.is_ascii_graphic()),
                    || format!("{at}.authority"),
                    "must be a host[:port]",
                );
            }
            for (j, h) in a.allowed_headers.iter().enumerate() {
                self.check(
                    is_header_name(h),
                    || format!("{at}.allowedHeaders[{j}]"),
                    "must be a valid HTTP header name",
                );
            }
            if a.protocol == AuthorizerProtocol::Grpc {
                // The filter hands Envoy a one-byte-length GrpcService naming the cluster.
                self.check(
                    a.cluster.len() <= 125,
                    || format!("{at}.cluster"),
                    "must be at most 125 bytes for a GRPC authorizer",
                );
                for (field, set) in [
                    ("authority", a.authority.is_some()),
                    ("pathPrefix", !a.path_prefix.is_empty()),
                    (
                        "allowedResponseHeaders",
                        !a.allowed_response_headers.is_empty(),
                    ),
                ] {
                    self.check(
                        !set,
                        || format!("{at}.{field}"),
                        "applies to HTTP authorizers only (protocol is GRPC)",
                    );
                }
            } else {
                self.check(
                    !a.include_peer_certificate,
                    || format!("{at}.includePeerCertificate"),
                    "applies to GRPC authorizers only",
                );
            }
            for (j, h) in a.allowed_response_headers.iter().enumerate() {
                self.check(
                    is_header_name(h),
                    || format!("{at}.allowedResponseHeaders[{j}]"),
                    "must be a valid HTTP header name",
                );
            }
        }
    }

    fn regex(&mut self, at: &str, pattern: &str) {
        if let Err(e) = regex_lite::Regex::new(pattern) {
            self.fail(at, format!("invalid regular expression: {e}"));
        }
    }

    /// Kubernetes object names and rule names: DNS subdomain.
    fn name(&mut self, at: &str, name: &str) {
        self.check(
            is_dns_subdomain(name),
            || at.to_string(),
            format!("\"{name}\" must be a lowercase DNS subdomain name"),
        );
    }
}

fn is_path_prefix(s: &str) -> bool {
    s.starts_with('/')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-/._~!$&'()*+,;=:@%".contains(&c))
}
