//! External authorizer callouts with Envoy ext_authz HTTP-service semantics: what is sent,
//! and what the answer means.

use mcp_access_bundle::{Authorizer, Level};

use crate::policy::{level_str, AuthzOutcome};
use crate::request::{McpOp, Request};

/// Headers the filter sets on every callout; the client's own copies are never forwarded.
pub const CONTEXT_HEADERS: &[&str] = &[
    "x-mcp-method",
    "x-mcp-tool",
    "x-mcp-prompt",
    "x-mcp-resource-uri",
    "x-mcp-source-spiffe",
    "x-mcp-access-level",
    "x-mcp-access-policy",
];

/// An HTTP request to an authorizer, ready for `dispatch_http_call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalloutRequest {
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u32,
}

/// Builds the callout for `authorizer` about `req` (body: the buffered client body).
pub fn build(
    authorizer: &Authorizer,
    req: &Request,
    body: &[u8],
    level: Level,
    policy: &str,
) -> CalloutRequest {
    let max = usize::try_from(authorizer.forward_body_max_bytes).unwrap_or(usize::MAX);
    let forwarded = body.get(..max.min(body.len())).unwrap_or_default();
    let prefix = authorizer.path_prefix.trim_end_matches('/');
    let mut headers = vec![
        (":method".to_string(), req.method.clone()),
        (":path".to_string(), format!("{prefix}{}", req.path)),
        (
            ":authority".to_string(),
            authorizer
                .authority
                .clone()
                .unwrap_or_else(|| req.authority.clone()),
        ),
        ("content-length".to_string(), forwarded.len().to_string()),
    ];
    if forwarded.len() < body.len() {
        headers.push(("x-envoy-auth-partial-body".into(), "true".into()));
    }
    for (name, value) in &req.headers {
        let always = name == "authorization";
        let allowed = always
            || authorizer
                .allowed_headers
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name));
        let reserved = name.starts_with(':')
            || name == "host"
            || name == "content-length"
            || CONTEXT_HEADERS.contains(&name.as_str());
        if allowed && !reserved {
            headers.push((name.clone(), value.clone()));
        }
    }
    if let McpOp::Call { method, param } = &req.mcp {
        headers.push(("x-mcp-method".into(), method.clone()));
        let param_header = match method.as_str() {
            "tools/call" => Some("x-mcp-tool"),
            "prompts/get" => Some("x-mcp-prompt"),
            m if m.starts_with("resources/") => Some("x-mcp-resource-uri"),
            _ => None,
        };
        if let (Some(h), Some(p)) = (param_header, param) {
            headers.push((h.into(), p.clone()));
        }
    }
    if let Some(id) = &req.caller.spiffe {
        headers.push(("x-mcp-source-spiffe".into(), id.clone()));
    }
    headers.push(("x-mcp-access-level".into(), level_str(Some(level)).into()));
    headers.push(("x-mcp-access-policy".into(), policy.into()));
    CalloutRequest {
        cluster: authorizer.cluster.clone(),
        headers,
        body: forwarded.to_vec(),
        timeout_ms: authorizer.timeout_ms,
    }
}

/// Response headers that never travel: pseudo, hop-by-hop, framing, and Envoy's own.
fn is_unforwardable(name: &str) -> bool {
    name.starts_with(':')
        || name.starts_with("x-envoy-")
        || matches!(
            name,
            "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
                | "te"
                | "trailer"
                | "content-length"
                | "host"
        )
}

/// What an authorizer's answer means. `status` is None when no response arrived.
pub fn interpret(
    authorizer: &Authorizer,
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> AuthzOutcome {
    let Some(status) = status else {
        return AuthzOutcome::Error {
            detail: "no response (timeout, reset or unreachable)".into(),
        };
    };
    match status {
        200..=299 => {
            let headers = headers
                .into_iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v))
                .filter(|(n, _)| {
                    if authorizer.allowed_response_headers.is_empty() {
                        !is_unforwardable(n)
                            && !matches!(n.as_str(), "content-type" | "date" | "server")
                    } else {
                        !n.starts_with(':')
                            && authorizer
                                .allowed_response_headers
                                .iter()
                                .any(|a| a.eq_ignore_ascii_case(n))
                    }
                })
                .collect();
            AuthzOutcome::Allow { headers }
        }
        0..=199 | 500..=u16::MAX => AuthzOutcome::Error {
            detail: format!("authorizer answered {status}"),
        },
        _ => AuthzOutcome::Deny {
            status,
            headers: headers
                .into_iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v))
                .filter(|(n, _)| !is_unforwardable(n))
                .collect(),
            body,
        },
    }
}
