//! OAuth discovery in the generated Envoy (docs/semantics.md §5.6): the protected resource
//! metadata served by direct-response routes, `jwt_authn` verifying no token there, and its
//! own 401s (a missing or invalid token) pointing to the metadata as the filter's do.

use mcp_access_bundle::ProtectedResource;
use serde_json::{json, Value};

use super::T;
use crate::error::CliError;

/// The routes that serve `p` at each of its metadata paths, first in a virtual host of
/// listener `id`: an answer of Envoy's own (no upstream), readable cross-origin.
pub(super) fn metadata_routes(id: &str, p: &ProtectedResource) -> Vec<Value> {
    let body = p.document().to_string();
    let header = |k: &str, v: &str| json!({"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"});
    p.metadata_paths()
        .into_iter()
        .map(|path| {
            json!({
                "name": format!("oauth-protected-resource/{id}{path}"),
                "match": {"path": path},
                "direct_response": {"status": 200, "body": {"inline_string": body}},
                "response_headers_to_add": [
                    header("content-type", "application/json"),
                    header("access-control-allow-origin", "*"),
                    header("access-control-allow-headers", "mcp-protocol-version"),
                ],
            })
        })
        .collect()
}

/// Which of a chain's listeners (by `hostname`) a virtual host's domain belongs to, as the
/// filter finds a request's listener: one whose hostname covers the domain (none covers all),
/// the most specific.
pub(super) fn owner(domain: &str, hostnames: &[Option<&str>]) -> Option<usize> {
    let covers = |h: Option<&str>| match h {
        None => true,
        Some(h) => {
            let h = h.to_ascii_lowercase();
            h == domain
                || mcp_access_bundle::gateway_api::host_matches(&h, domain.trim_start_matches("*."))
        }
    };
    // An exact hostname before a wildcard, a longer wildcard before a shorter one.
    let specificity = |h: Option<&str>| match h {
        None => (0, 0),
        Some(h) if h.starts_with("*.") => (1, h.len()),
        Some(h) => (2, h.len()),
    };
    hostnames
        .iter()
        .enumerate()
        .filter(|(_, h)| covers(**h))
        .max_by_key(|(i, h)| (specificity(**h), usize::MAX - i))
        .map(|(i, _)| i)
}

/// The connection manager's `local_reply_config` for a chain whose listeners have protected
/// resource metadata and whose `jwt_authn` verifies tokens: its 401s (a missing token where
/// one is required, a token it cannot verify) carry the challenge too, with
/// `error="invalid_token"` for the latter (RFC 6750 §3.1). One chain, one metadata: listeners
/// sharing a port that name different ones are refused.
pub(super) fn jwt_replies(
    chain: &str,
    resources: &[&ProtectedResource],
) -> Result<Option<Value>, CliError> {
    let Some(first) = resources.first() else {
        return Ok(None);
    };
    if let Some(other) = resources
        .iter()
        .find(|p| p.metadata_url() != first.metadata_url())
    {
        return Err(format!(
            "listeners on {chain} share one connection manager but name different protected resources ({} and {}): give them their own ports, or one resource",
            first.resource, other.resource
        ).into());
    }
    let challenge = first.challenge();
    let cel = |expression: &str| {
        json!({"extension_filter": {
            "name": "envoy.access_loggers.extension_filters.cel",
            "typed_config": {
                "@type": format!("{T}envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter"),
                "expression": expression,
            },
        }})
    };
    let mapper = |expression: &str, value: String| {
        json!({
            "filter": cel(expression),
            "headers_to_add": [{"header": {"key": "www-authenticate", "value": value},
                                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
        })
    };
    Ok(Some(json!({"mappers": [
        mapper(
            "response.code == 401 && response.code_details == 'jwt_authn_access_denied{Jwt_is_missing}'",
            challenge.clone(),
        ),
        mapper(
            "response.code == 401 && response.code_details.startsWith('jwt_authn_access_denied')",
            format!("{challenge}, error=\"invalid_token\""),
        ),
    ]})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_belongs_to_the_most_specific_listener() {
        let hosts = [None, Some("*.example.com"), Some("mcp.example.com")];
        assert_eq!(owner("*", &hosts), Some(0));
        assert_eq!(owner("other.org", &hosts), Some(0));
        assert_eq!(owner("a.example.com", &hosts), Some(1));
        assert_eq!(owner("*.example.com", &hosts), Some(1));
        assert_eq!(owner("*.a.example.com", &hosts), Some(1));
        assert_eq!(owner("mcp.example.com", &hosts), Some(2));
        assert_eq!(owner("*", &[Some("a.example.com")]), None);
    }
}
