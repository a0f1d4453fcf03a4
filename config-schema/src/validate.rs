//! Strict reading of a bundle: JSON syntax and types (with the path of the offending field),
//! then the semantic checks serde cannot express.

use std::collections::HashSet;
use std::fmt;

use crate::bundle::*;
use crate::http::is_header_name;
use crate::names::{is_dns_subdomain, is_hostname, is_spiffe_id, is_trust_domain};
use crate::{identity_headers, mcp_methods, oauth};

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
/// so whatever takes it (the engine's compiler) cannot be handed an unchecked bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidBundle(Bundle);

impl ValidBundle {
    /// Validates `b`.
    pub fn new(b: Bundle) -> Result<ValidBundle, BundleError> {
        validate(&b)?;
        Ok(ValidBundle(b))
    }

    /// The bundle itself (no longer known to be valid once it can be changed).
    pub fn into_inner(self) -> Bundle {
        self.0
    }
}

impl std::ops::Deref for ValidBundle {
    type Target = Bundle;

    fn deref(&self) -> &Bundle {
        &self.0
    }
}

/// Parses and validates a bundle.
pub fn parse_bundle(json: &[u8]) -> Result<ValidBundle, BundleError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let bundle: Bundle = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        BundleError {
            path: if path == "." { String::new() } else { path },
            message: e.into_inner().to_string(),
        }
    })?;
    de.end().map_err(|e| BundleError {
        path: String::new(),
        message: e.to_string(),
    })?;
    ValidBundle::new(bundle)
}

/// Semantic validation; the first problem found is returned.
pub fn validate(b: &Bundle) -> Result<(), BundleError> {
    let mut v = Validator::default();
    v.bundle(b);
    match v.first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[derive(Default)]
struct Validator {
    first: Option<BundleError>,
}

const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

impl Validator {
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
        self.identity(&b.identity);
        self.gateways(&b.gateways);
        self.backends(&b.backends);
        self.identity_headers(b);
        self.authorizers(&b.authorizers);
        let backends: HashSet<(&str, &str)> = b
            .backends
            .iter()
            .map(|x| (x.namespace.as_str(), x.name.as_str()))
            .collect();
        for (i, p) in b.policies.iter().enumerate() {
            self.policy(b, &backends, &format!("policies[{i}]"), p);
        }
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
        let (c, max) = (&b.limits.cel, &CEL_LIMIT_MAX);
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
            self.check(
                (1..=max).contains(&value),
                || format!("limits.cel.{field}"),
                format!("must be between 1 and {max}"),
            );
        }
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

    /// `backends`: the (namespace, name) of every backend, so that a target is found at once.
    fn policy(&mut self, b: &Bundle, backends: &HashSet<(&str, &str)>, at: &str, p: &Policy) {
        self.name(&format!("{at}.name"), &p.name);
        self.check(
            !p.targets.is_empty(),
            || format!("{at}.targets"),
            "a policy needs at least one target",
        );
        self.policy_targets(b, backends, at, p);
        match (p.action, &p.external_auth) {
            (Action::ExternalAuth, None) => self.fail(
                format!("{at}.externalAuth"),
                "is required when action is ExternalAuth",
            ),
            (Action::ExternalAuth, Some(name)) => self.check(
                b.authorizers.iter().any(|a| &a.name == name),
                || format!("{at}.externalAuth"),
                format!("no authorizer named \"{name}\""),
            ),
            (_, Some(_)) => self.fail(
                format!("{at}.externalAuth"),
                "is only allowed when action is ExternalAuth",
            ),
            _ => {}
        }
        self.policy_listeners(b, at, p);
        self.check(
            p.mode != PolicyMode::EnforceOnly || p.level == Level::Backend,
            || format!("{at}.mode"),
            "EnforceOnly is only for Backend-level policies (those a dry-run defaults/overrides block replaces in the dry-run decision)",
        );
        if let Some(o) = &p.origin {
            self.check(
                !o.policy.is_empty(),
                || format!("{at}.origin.policy"),
                "must name the object the rules came from",
            );
            self.check(
                o.block.is_some() == o.strategy.is_some(),
                || format!("{at}.origin.strategy"),
                "a block's rules have a strategy, a policy's own rules none",
            );
        }
        if let Some(reason) = &p.not_accepted {
            self.check(
                !reason.is_empty(),
                || format!("{at}.notAccepted"),
                "must give the reason the policy was not accepted",
            );
            self.check(
                p.action != Action::ExternalAuth,
                || format!("{at}.notAccepted"),
                "a stand-in for a policy that was not accepted cannot call an authorizer: use action Deny",
            );
            self.check(
                p.action != Action::Allow || p.rules.is_none(),
                || format!("{at}.rules"),
                "an Allow stand-in admits nothing: omit rules",
            );
        }
        if let Some(rules) = &p.rules {
            self.policy_rules(b, at, rules);
        }
        self.when(&format!("{at}.when"), &p.when);
    }

    /// A policy's targets: gateways (and listeners) or backends of the bundle.
    fn policy_targets(
        &mut self,
        b: &Bundle,
        backends: &HashSet<(&str, &str)>,
        at: &str,
        p: &Policy,
    ) {
        for (i, t) in p.targets.iter().enumerate() {
            let tat = format!("{at}.targets[{i}]");
            let ns = t.namespace.as_deref().unwrap_or(&p.namespace);
            match p.level {
                Level::Gateway => {
                    let gw = b
                        .gateways
                        .iter()
                        .find(|g| g.name == t.name && g.namespace == ns);
                    match (gw, &t.section_name) {
                        (None, _) => self.fail(
                            format!("{tat}.name"),
                            format!("no gateway {ns}/{} in the bundle", t.name),
                        ),
                        (Some(g), Some(s)) => self.check(
                            g.listeners.iter().any(|l| &l.name == s),
                            || format!("{tat}.sectionName"),
                            format!("gateway {ns}/{} has no listener \"{s}\"", t.name),
                        ),
                        _ => {}
                    }
                    self.check(
                        t.routes.is_none(),
                        || format!("{tat}.routes"),
                        "only Backend targets are narrowed to routes",
                    );
                }
                Level::Backend => {
                    if !backends.contains(&(ns, t.name.as_str())) {
                        self.fail(
                            format!("{tat}.name"),
                            format!("no backend {ns}/{} in the bundle", t.name),
                        );
                    }
                    self.check(
                        t.section_name.is_none(),
                        || format!("{tat}.sectionName"),
                        "only Gateway targets have sections",
                    );
                    if let Some(routes) = &t.routes {
                        let be = b
                            .backends
                            .iter()
                            .find(|x| x.name == t.name && x.namespace == ns);
                        self.target_routes(&tat, (ns, &t.name), be, routes);
                    }
                }
            }
        }
    }

    /// The routes a Backend target is narrowed to: names backend `be` is recognised by.
    fn target_routes(
        &mut self,
        tat: &str,
        (ns, name): (&str, &str),
        be: Option<&Backend>,
        routes: &[String],
    ) {
        self.check(
            !routes.is_empty(),
            || format!("{tat}.routes"),
            "an empty list would apply the policy to no request: omit routes to apply it through every route",
        );
        let mut seen = HashSet::new();
        for (j, r) in routes.iter().enumerate() {
            let known =
                be.is_some_and(|be| be.route_names.contains(r) || be.cluster_names.contains(r));
            self.check(
                known || be.is_none(),
                || format!("{tat}.routes[{j}]"),
                format!("backend {ns}/{name} has no route or cluster named \"{r}\" (routes are its routeNames or clusterNames)"),
            );
            self.check(
                seen.insert(r.as_str()),
                || format!("{tat}.routes[{j}]"),
                "duplicate route",
            );
        }
    }

    /// The listeners a Backend-level policy is narrowed to.
    fn policy_listeners(&mut self, b: &Bundle, at: &str, p: &Policy) {
        for (i, l) in p.listeners.iter().enumerate() {
            let lat = format!("{at}.listeners[{i}]");
            self.check(
                p.level == Level::Backend,
                || lat.clone(),
                "only a Backend-level policy is narrowed to listeners",
            );
            self.check(
                l.routes.is_none(),
                || format!("{lat}.routes"),
                "a listener has no routes: narrow the policy's targets instead",
            );
            let ns = l.namespace.as_deref().unwrap_or(&p.namespace);
            let found = b.gateways.iter().any(|g| {
                g.name == l.name
                    && g.namespace == ns
                    && l.section_name
                        .as_ref()
                        .is_some_and(|s| g.listeners.iter().any(|x| &x.name == s))
            });
            self.check(
                found,
                || format!("{lat}.sectionName"),
                format!(
                    "no listener \"{}\" of gateway {ns}/{} in the bundle",
                    l.section_name.as_deref().unwrap_or_default(),
                    l.name
                ),
            );
        }
    }

    /// A policy's `rules`: named uniquely, each with its source, authorization and `when`.
    fn policy_rules(&mut self, b: &Bundle, at: &str, rules: &[Rule]) {
        self.check(
            !rules.is_empty(),
            || format!("{at}.rules"),
            "an empty list would apply the policy to nothing: omit `rules` to apply it to all traffic",
        );
        let mut names = HashSet::new();
        for (i, r) in rules.iter().enumerate() {
            let rat = format!("{at}.rules[{i}]");
            self.name(&format!("{rat}.name"), &r.name);
            self.check(
                names.insert(r.name.as_str()),
                || format!("{rat}.name"),
                "rule names must be unique within a policy",
            );
            if let Some(s) = &r.source {
                self.source(b, &format!("{rat}.source"), s);
            }
            if let Some(a) = &r.authorization {
                self.authorization(&format!("{rat}.authorization"), a);
            }
            self.when(&format!("{rat}.when"), &r.when);
        }
    }

    /// CEL text is checked by the engine when it compiles the bundle; here only that it is there.
    fn when(&mut self, at: &str, predicates: &[String]) {
        for (i, w) in predicates.iter().enumerate() {
            self.check(
                !w.trim().is_empty(),
                || format!("{at}[{i}]"),
                "must be a CEL expression, not empty",
            );
        }
    }

    fn source(&mut self, b: &Bundle, at: &str, s: &Source) {
        let wants = |k: SourceType| s.kind == k;
        for (set, field, kind) in [
            (s.spiffe.is_some(), "spiffe", SourceType::Spiffe),
            (
                s.service_account.is_some(),
                "serviceAccount",
                SourceType::ServiceAccount,
            ),
            (s.jwt.is_some(), "jwt", SourceType::Jwt),
        ] {
            if set != wants(kind) {
                let msg = if set {
                    format!("is not allowed with type {:?}", s.kind)
                } else {
                    format!("is required with type {:?}", s.kind)
                };
                self.fail(format!("{at}.{field}"), msg);
            }
        }
        if let Some(id) = &s.spiffe {
            self.check(
                is_spiffe_id(id),
                || format!("{at}.spiffe"),
                "must match ^spiffe://[a-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$",
            );
        }
        if let Some(sa) = &s.service_account {
            self.check(
                b.identity.trust_domain.is_some(),
                || format!("{at}.serviceAccount"),
                "needs identity.trustDomain to be set",
            );
            self.name(&format!("{at}.serviceAccount.name"), &sa.name);
            if let Some(ns) = &sa.namespace {
                self.name(&format!("{at}.serviceAccount.namespace"), ns);
            }
        }
        if let Some(j) = &s.jwt {
            self.check(
                b.identity
                    .jwt
                    .providers
                    .iter()
                    .any(|p| p.issuer == j.issuer),
                || format!("{at}.jwt.issuer"),
                format!("\"{}\" is not in identity.jwt.providers", j.issuer),
            );
            for (i, c) in j.claims.iter().enumerate() {
                self.check(
                    !c.name.is_empty(),
                    || format!("{at}.jwt.claims[{i}].name"),
                    "must not be empty",
                );
                self.check(
                    !c.values.is_empty(),
                    || format!("{at}.jwt.claims[{i}].values"),
                    "must list at least one value",
                );
            }
        }
    }

    fn authorization(&mut self, at: &str, a: &Authorization) {
        // An `mcp` block with no method and the base protocol skipped matches nothing: valid
        // (the compiler warns about it).
        if let Some(m) = &a.mcp {
            let mut seen = HashSet::new();
            for (i, method) in m.methods.iter().enumerate() {
                let mat = format!("{at}.mcp.methods[{i}]");
                self.check(
                    mcp_methods::is_rule_name(&method.name),
                    || format!("{mat}.name"),
                    format!("unknown MCP method \"{}\"", method.name),
                );
                self.check(
                    seen.insert(method.name.as_str()),
                    || format!("{mat}.name"),
                    "duplicate method",
                );
                self.check(
                    method.params.as_ref().is_none_or(|p| !p.is_empty()),
                    || format!("{mat}.params"),
                    "an empty list names nothing: omit params to match any name or URI",
                );
                self.check(
                    method.params.is_none()
                        || mcp_methods::takes_params(&method.name),
                    || format!("{mat}.params"),
                    "params can only be specified for get, call, subscribe, unsubscribe, or read methods",
                );
            }
        }
        for (i, m) in a.methods.iter().enumerate() {
            self.check(
                HTTP_METHODS.contains(&m.as_str()),
                || format!("{at}.methods[{i}]"),
                format!("unknown HTTP method \"{m}\""),
            );
        }
        for (i, p) in a.paths.iter().enumerate() {
            let pat = format!("{at}.paths[{i}]");
            match p.kind {
                MatchType::Exact | MatchType::PathPrefix => self.check(
                    p.value.starts_with('/'),
                    || format!("{pat}.value"),
                    "must start with '/'",
                ),
                MatchType::RegularExpression => self.regex(&format!("{pat}.value"), &p.value),
            }
        }
        for (i, h) in a.headers.iter().enumerate() {
            let hat = format!("{at}.headers[{i}]");
            self.check(
                is_header_name(&h.name),
                || format!("{hat}.name"),
                "must be a valid HTTP header name",
            );
            match h.kind {
                MatchType::Exact => {}
                MatchType::PathPrefix => {
                    self.fail(format!("{hat}.type"), "must be Exact or RegularExpression")
                }
                MatchType::RegularExpression => self.regex(&format!("{hat}.value"), &h.value),
            }
        }
        for (i, h) in a.hosts.iter().enumerate() {
            self.check(
                is_hostname(h),
                || format!("{at}.hosts[{i}]"),
                "must be a hostname, optionally starting with '*.'",
            );
        }
        for (i, p) in a.ports.iter().enumerate() {
            self.check(*p != 0, || format!("{at}.ports[{i}]"), "must not be 0");
        }
        if let Some(cel) = &a.cel {
            self.check(
                !cel.trim().is_empty(),
                || format!("{at}.cel"),
                "must be a CEL expression, not empty",
            );
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
