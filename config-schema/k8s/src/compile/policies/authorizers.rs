//! A policy's `externalAuth` as a bundle authorizer, and the Services behind the authorizers'
//! clusters.

use std::collections::BTreeMap;

use crate::check;
use crate::compile::grants::permitted;
use crate::compile::{is_core, reason, Ctx};
use crate::load::{Item, PolicySpec};
use crate::model::*;
use crate::types::*;
use mcp_access_bundle as bundle;

impl Ctx<'_> {
    pub(super) fn authorizer(
        &self,
        p: &Item<PolicySpec>,
        at: &str,
        e: &ExternalAuth,
    ) -> Result<bundle::Authorizer, (&'static str, String)> {
        let Some(b) = &e.backend_ref else {
            return Err((reason::INVALID, format!("{at}.backendRef is required")));
        };
        let group = opt(&b.group);
        let kind = b.kind.as_deref().unwrap_or("Service");
        if !is_core(group) || kind != "Service" {
            return Err((
                reason::INVALID,
                format!("{at}.backendRef must be a core Service, not {group}/{kind}"),
            ));
        }
        let ns = b
            .namespace
            .clone()
            .unwrap_or_else(|| p.meta.namespace.clone());
        let name = opt(&b.name).to_string();
        if !check::matches(check::DNS_LABEL, &name) {
            return Err((
                reason::INVALID,
                format!("{at}.backendRef.name \"{name}\" is not a Service name"),
            ));
        }
        if !permitted(
            self.m,
            (&p.group, &p.kind, &p.meta.namespace),
            ("", "Service", &ns, &name),
        ) {
            return Err((reason::REF_NOT_PERMITTED, format!("{at}.backendRef: no ReferenceGrant in namespace {ns} allows {} objects from {} to refer to Service {name}", p.kind, p.meta.namespace)));
        }
        let grpc = opt(&e.protocol) == "GRPC";
        if grpc && e.http.is_some() {
            return Err((
                reason::INVALID,
                format!("{at}.http applies to protocol HTTP, not GRPC"),
            ));
        }
        if !grpc && e.grpc.is_some() {
            return Err((
                reason::INVALID,
                format!("{at}.grpc applies to protocol GRPC, not HTTP"),
            ));
        }
        let http = e.http.clone().unwrap_or_default();
        let path_prefix = http.path.clone().unwrap_or_default();
        if !path_prefix.is_empty() && !path_prefix.starts_with('/') {
            return Err((
                reason::INVALID,
                format!("{at}.http.path must start with '/'"),
            ));
        }
        let max = e
            .forward_body
            .as_ref()
            .and_then(|f| f.max_size)
            .unwrap_or(0);
        let Ok(forward_body_max_bytes) = u32::try_from(max) else {
            return Err((
                reason::INVALID,
                format!(
                    "{at}.forwardBody.maxSize must be between 0 and {}",
                    u32::MAX
                ),
            ));
        };
        let port = u16::try_from(b.port.unwrap_or_default()).unwrap_or_default();
        let (protocol, allowed_headers) = if grpc {
            let g = e.grpc.clone().unwrap_or_default();
            let headers = g.allowed_headers.unwrap_or_default();
            (bundle::AuthorizerProtocol::Grpc, headers)
        } else {
            let headers = http.allowed_headers.clone().unwrap_or_default();
            (bundle::AuthorizerProtocol::Http, headers)
        };
        let cluster = self.authorizer_cluster(AuthorizerModel {
            cluster: String::new(),
            namespace: ns,
            name,
            port,
            grpc,
        });
        let mut a = bundle::Authorizer {
            name: String::new(),
            cluster,
            protocol,
            authority: None,
            path_prefix,
            timeout_ms: e
                .timeout
                .as_deref()
                .and_then(check::authz_timeout_ms)
                .unwrap_or(self.settings.authz_timeout_ms),
            include_peer_certificate: false,
            allowed_headers,
            allowed_response_headers: http.allowed_response_headers.clone().unwrap_or_default(),
            forward_body_max_bytes,
            max_response_body_bytes: bundle::DEFAULT_MAX_RESPONSE_BODY_BYTES,
            failure_mode: match e.failure_mode.as_deref() {
                Some("Allow") => bundle::FailureMode::Allow,
                _ => bundle::FailureMode::Deny,
            },
            cache: None,
        };
        if let Some(c) = &e.cache {
            a.cache = Some(cache(at, &a, c)?);
        }
        Ok(a)
    }

    /// The cluster of an authorizer Service (`authz/<namespace>/<name>:<port>`, or
    /// `authz-grpc/...` for gRPC), noted with the Service behind it.
    fn authorizer_cluster(&self, mut service: AuthorizerModel) -> String {
        let prefix = if service.grpc {
            GRPC_CLUSTER_PREFIX
        } else {
            HTTP_CLUSTER_PREFIX
        };
        let (ns, name, port) = (&service.namespace, &service.name, service.port);
        service.cluster = format!("{prefix}{ns}/{name}:{port}");
        let cluster = service.cluster.clone();
        let mut services = self.authorizer_services.borrow_mut();
        services.entry(cluster.clone()).or_insert(service);
        cluster
    }
}

/// `externalAuth.cache` in the bundle; refused when the authorizer is sent a header the key
/// neither holds nor declares irrelevant (docs/semantics.md §3.10).
fn cache(
    at: &str,
    a: &bundle::Authorizer,
    c: &ExternalAuthCache,
) -> Result<bundle::AuthzCache, (&'static str, String)> {
    let at = format!("{at}.cache");
    let lower = |l: &Option<Vec<String>>| -> Vec<String> {
        let mut v: Vec<String> = l.iter().flatten().map(|h| h.to_ascii_lowercase()).collect();
        v.sort();
        v.dedup();
        v
    };
    let key = c.key.clone().unwrap_or_default();
    let ttl_ms = c
        .ttl
        .as_deref()
        .and_then(check::authz_timeout_ms)
        .unwrap_or(0);
    let out = bundle::AuthzCache {
        ttl_ms,
        max_entries: c
            .max_entries
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(bundle::authz_cache::DEFAULT_CACHE_ENTRIES),
        denials: c.denials.unwrap_or(false),
        key_headers: lower(&key.headers),
        key_claims: key.claims.clone().unwrap_or_default(),
        ignored_headers: lower(&key.ignored_headers),
    };
    let field = if a.protocol == bundle::AuthorizerProtocol::Grpc {
        "grpc.allowedHeaders"
    } else {
        "http.allowedHeaders"
    };
    match bundle::validate::authz_cache::uncovered_headers(a, &out) {
        None => Err((reason::INVALID, format!("{at}: the GRPC authorizer is sent every request header ({field} is empty), so no key can hold what its answers depend on: name the headers it reads in {field}"))),
        Some(left) if !left.is_empty() => Err((reason::INVALID, format!("{at}.key: the authorizer is sent {} ({}) but the key does not hold it: add it to {at}.key.headers, or to {at}.key.ignoredHeaders if its answers do not depend on it", left.join(", "), if a.protocol == bundle::AuthorizerProtocol::Grpc { field } else { "always authorization, and http.allowedHeaders" }))),
        Some(_) => match bundle::validate::authz_cache::problem(a, &out) {
            Some((f, m)) => Err((reason::INVALID, format!("{at} (bundle {f}): {m}"))),
            None => Ok(out),
        },
    }
}

/// Cluster name prefix of HTTP authorizers.
const HTTP_CLUSTER_PREFIX: &str = "authz/";
/// Cluster name prefix of gRPC authorizers (HTTP/2 clusters).
const GRPC_CLUSTER_PREFIX: &str = "authz-grpc/";

/// The Services behind the bundle authorizers' clusters, once each, in the bundle's order;
/// `services`: the Service of each cluster `authorizer` built.
pub(crate) fn authorizer_models(
    authorizers: &[bundle::Authorizer],
    services: &BTreeMap<String, AuthorizerModel>,
) -> Vec<AuthorizerModel> {
    let mut out: Vec<AuthorizerModel> = Vec::new();
    for a in authorizers {
        if out.iter().any(|x| x.cluster == a.cluster) {
            continue;
        }
        if let Some(m) = services.get(&a.cluster) {
            out.push(m.clone());
        }
    }
    out
}
