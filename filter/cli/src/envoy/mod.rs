//! A complete Envoy bootstrap (static resources) from the compiled topology and bundle:
//! [`clusters`] for the upstreams, [`routes`] for each HTTPRoute match, [`listeners`] for the
//! listeners with their filter chains, [`ecds`] for the filter delivered by extension config
//! discovery, [`files`] for the certificate, CA and JWKS files the configuration names.

mod clusters;
mod ecds;
mod files;
mod listeners;
mod oauth;
mod otlp;
mod ratelimit;
mod routes;
mod tracing;

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_bundle::Bundle;
use mcp_access_k8s::Topology;
use serde_json::{json, Value};

use crate::error::CliError;
use crate::jwt::JwtProviderSpec;

pub(crate) use clusters::http2_only;
pub use ecds::{ecds_document, publish_ecds, ECDS_FILE, ECDS_NAME};
pub use files::{check_files, listeners_without_files, Pem};
pub(crate) use listeners::normalization;
pub use otlp::Otlp;
pub use ratelimit::RateLimitAddress;
pub use tracing::Tracing;

pub(super) const T: &str = "type.googleapis.com/";
/// Above the bundle's largest body limit, so the filter (not Envoy) answers oversize bodies.
pub(super) const BUFFER_LIMIT: u32 = 2 * 1024 * 1024;

/// Where a service name resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Some(true): TLS; Some(false): plaintext; None: the default for the kind of backend.
    pub(crate) tls: Option<bool>,
}

/// Parses `host:port`, `http://host:port` or `https://host:port`.
pub fn parse_resolve_target(s: &str) -> Result<Resolved, CliError> {
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (Some(true), r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (Some(false), r)
    } else {
        (None, s)
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}`: expected host:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("`{s}`: bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{s}`: empty host").into());
    }
    Ok(Resolved {
        host: host.to_string(),
        port,
        tls,
    })
}

/// Envoy settings that are not in the manifests.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    pub wasm: String,
    pub admin_port: u16,
    pub admin_address: String,
    /// Bind address of listeners whose Gateway names no address.
    pub bind: String,
    /// Service / hostname -> address (`name`, `namespace/name` or `name.namespace`).
    pub resolve: BTreeMap<String, Resolved>,
    /// Secret (`name` or `namespace/name`) -> (certificate chain, private key) files.
    pub tls_certs: BTreeMap<String, (String, String)>,
    /// CA reference (`name`, `namespace/name`, or `""` for the default) -> CA file.
    pub client_cas: BTreeMap<String, String>,
    /// Trusted CAs for TLS towards `hostname` XBackends.
    pub upstream_ca: String,
    pub access_log: Option<String>,
    /// JWT providers: a `jwt_authn` filter before the wasm filter on every listener.
    pub jwt: Vec<JwtProviderSpec>,
    /// Listeners (`LISTENER`, `GATEWAY/LISTENER` or `NAMESPACE/GATEWAY/LISTENER`) whose
    /// `jwt_authn` answers a request without a token 401 instead of passing it on.
    pub jwt_required: Vec<String>,
    /// Deliver the filter's configuration by extension config discovery from this directory's
    /// [`ECDS_FILE`] instead of inline (policy changes without a restart: `mcp-access publish`).
    pub ecds_dir: Option<String>,
    /// Trace every request, with the filter's decision as span tags.
    pub tracing: Option<Tracing>,
    /// Send every decision record to an OTLP collector (docs/audit.md).
    pub otlp: Option<Otlp>,
    /// The RateLimitService of `Global` rate limits.
    pub rate_limit_service: Option<RateLimitAddress>,
}

/// Whether `--jwt-required` names the listener `ns/gw/listener` (`full`); marks the names used.
fn jwt_required(o: &EnvoyOptions, full: &str, used: &mut BTreeSet<String>) -> bool {
    let mut hit = false;
    for r in &o.jwt_required {
        let matches = full == r || (r.matches('/').count() < 2 && full.ends_with(&format!("/{r}")));
        if matches {
            used.insert(r.clone());
            hit = true;
        }
    }
    hit
}

/// What could not be resolved and fell back to a default (printed as notes).
#[derive(Debug, Default)]
pub struct Notes(pub Vec<String>);

/// Renders the bootstrap. Errors name what is missing (certificates, CAs).
pub fn render(
    topo: &Topology,
    bundle: &Bundle,
    o: &EnvoyOptions,
    notes: &mut Notes,
) -> Result<Value, CliError> {
    let (mut clusters, host_rewrites) = clusters::upstream_clusters(topo, o, notes)?;
    if let Some(t) = &o.tracing {
        clusters.push(tracing::collector_cluster(t));
    }
    if let Some(c) = &o.otlp {
        clusters.push(otlp::collector_cluster(c));
    }
    if let Some(r) = &o.rate_limit_service {
        clusters.push(r.cluster());
    }
    let listeners = listeners::listeners(topo, o, bundle, &host_rewrites)?;
    let mut boot = json!({
        "admin": {"address": {"socket_address": {"address": o.admin_address, "port_value": o.admin_port}}},
        "static_resources": {"listeners": listeners, "clusters": clusters}
    });
    if let (Some(_), Some(obj)) = (&o.ecds_dir, boot.as_object_mut()) {
        // Envoy subscribes to a config source only with a node id and cluster.
        obj.insert(
            "node".into(),
            json!({"id": "mcp-access", "cluster": "mcp-access"}),
        );
    }
    Ok(boot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_access_bundle::EscapedSlashes;

    #[test]
    fn normalization_follows_the_escaped_slashes_choice() {
        let reject = normalization(EscapedSlashes::Reject);
        assert_eq!(reject["path_with_escaped_slashes_action"], "REJECT_REQUEST");
        assert_eq!(reject["normalize_path"], true);
        assert_eq!(reject["merge_slashes"], true);
        assert_eq!(
            reject["common_http_protocol_options"]["headers_with_underscores_action"],
            "REJECT_REQUEST"
        );
        let decode = normalization(EscapedSlashes::Decode);
        assert_eq!(
            decode["path_with_escaped_slashes_action"],
            "UNESCAPE_AND_FORWARD"
        );
    }
}
