//! What the client gets when a request is not let through (docs/semantics.md §5).

use std::borrow::Cow;

use mcp_access_bundle::mcp_methods::Revision;
use mcp_access_bundle::{DenyResponse, Level};
use serde_json::{json, Value};

use crate::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::mcp::ParseError;
use crate::policy::Denial;

/// A response the filter sends itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a request is refused before any policy looks at it (docs/semantics.md §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The path has no canonical form (the text says why).
    InvalidPath(String),
    /// A `Content-Encoding` other than `identity`.
    UnsupportedEncoding,
    /// A POST declaring a media type other than `application/json`.
    UnsupportedMediaType,
    /// A POST without a body.
    EmptyBody,
    /// A body (declared or received) over `limits.maxBodyBytes`.
    BodyTooLarge,
    /// A `Content-Length` that is not a number.
    InvalidContentLength,
    /// The body is not one acceptable JSON-RPC message.
    Message(ParseError),
    /// The MCP headers disagree with the body, are repeated, or are missing (SEP-2243).
    HeaderMismatch(&'static str),
    /// The request names a protocol revision the filter does not accept (docs/semantics.md
    /// §4.4): the version it names.
    UnsupportedRevision(String),
    /// The method is one the request's revision does not have: (method, revision).
    MethodNotInRevision(String, &'static str),
    /// An HTTP GET stream or a session DELETE under a revision without them: (HTTP method,
    /// revision).
    HttpMethodNotInRevision(String, &'static str),
}

impl Rejection {
    /// The HTTP status, the JSON-RPC error code and the reason name for stats and logs: the
    /// one place these are defined.
    pub(crate) fn status_code_reason(&self) -> (u16, i32, &'static str) {
        match self {
            Rejection::InvalidPath(_) => (400, INVALID_REQUEST, "invalid_path"),
            Rejection::UnsupportedEncoding => (415, INVALID_REQUEST, "unsupported_encoding"),
            Rejection::UnsupportedMediaType => (415, INVALID_REQUEST, "unsupported_media_type"),
            Rejection::EmptyBody => (400, PARSE_ERROR, "invalid_json"),
            Rejection::BodyTooLarge => (413, INVALID_REQUEST, "body_too_large"),
            Rejection::InvalidContentLength => (400, INVALID_REQUEST, "invalid_content_length"),
            Rejection::Message(ParseError::Parse(_)) => (400, PARSE_ERROR, "invalid_json"),
            Rejection::Message(ParseError::InvalidRequest(_)) => {
                (400, INVALID_REQUEST, "invalid_request")
            }
            Rejection::Message(ParseError::InvalidParams(_)) => {
                (400, INVALID_PARAMS, "invalid_params")
            }
            Rejection::HeaderMismatch(_) => (400, HEADER_MISMATCH, "header_mismatch"),
            Rejection::UnsupportedRevision(_) => {
                (400, UNSUPPORTED_PROTOCOL_VERSION, "unsupported_revision")
            }
            Rejection::MethodNotInRevision(..) => (404, METHOD_NOT_FOUND, "method_not_in_revision"),
            Rejection::HttpMethodNotInRevision(..) => {
                (405, METHOD_NOT_FOUND, "method_not_in_revision")
            }
        }
    }

    /// The JSON-RPC error message the client reads.
    pub(crate) fn message(&self) -> Cow<'static, str> {
        match self {
            Rejection::InvalidPath(why) => Cow::Owned(why.clone()),
            Rejection::UnsupportedEncoding => "Content-Encoding is not supported".into(),
            Rejection::UnsupportedMediaType => "Content-Type must be application/json".into(),
            Rejection::EmptyBody => "Parse error: empty body".into(),
            Rejection::BodyTooLarge => "Request body exceeds the configured limit".into(),
            Rejection::InvalidContentLength => "Content-Length is not a number".into(),
            Rejection::Message(e) => Cow::Owned(e.to_string()),
            Rejection::HeaderMismatch(problem) => Cow::Borrowed(problem),
            Rejection::UnsupportedRevision(_) => "Unsupported protocol version".into(),
            Rejection::MethodNotInRevision(method, revision) => Cow::Owned(format!(
                "Method not found: {method} is not part of MCP {revision}"
            )),
            Rejection::HttpMethodNotInRevision(method, revision) => Cow::Owned(format!(
                "HTTP {method} is not part of MCP {revision}: every request is a POST"
            )),
        }
    }

    /// `error.data`: the supported revisions and the one asked for (the shape of MCP's
    /// `UnsupportedProtocolVersionError`).
    fn data(&self) -> Option<Value> {
        match self {
            Rejection::UnsupportedRevision(requested) => Some(json!({
                "supported": Revision::ALL.map(Revision::as_str),
                "requested": requested,
            })),
            _ => None,
        }
    }
}

fn json_response(status: u16, body: Vec<u8>) -> LocalResponse {
    LocalResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
    }
}

/// The answer to a rejected request (`id`: the request's, when known).
pub(crate) fn rejection(r: &Rejection, id: Option<&str>) -> LocalResponse {
    let (status, code, _) = r.status_code_reason();
    json_response(status, jsonrpc::error(id, code, &r.message(), r.data()))
}

/// Headers of an authorizer's denial that describe its own body, which the client does not
/// get: the JSON-RPC error replaces it.
fn describes_relayed_body(name: &str) -> bool {
    matches!(
        name,
        "content-type" | "content-length" | "content-encoding" | "transfer-encoding" | "etag"
    )
}

/// A denial (docs/semantics.md §5.1, §5.2): always a JSON-RPC error echoing `id`, with the
/// bundle's code and message. A policy's denial has the bundle's HTTP status; an authorizer's
/// keeps the authorizer's status and the headers it may set. With `exposeDetails`,
/// `error.data` names level, reason, policy and rule, and for an authorizer its status and
/// body (already capped at its `maxResponseBodyBytes`): as JSON when it is JSON, else as text.
pub(crate) fn denial(settings: &DenyResponse, d: &Denial, id: Option<&str>) -> LocalResponse {
    let data = settings.expose_details.then(|| {
        let mut data = json!({
            "level": Level::name(d.level),
            "reason": d.reason.as_str(),
            "policy": d.policy,
            "rule": d.rule,
        });
        if let (Some(r), Some(obj)) = (&d.relay, data.as_object_mut()) {
            obj.insert("authorizerStatus".into(), r.status.into());
            if !r.body.is_empty() {
                let body = serde_json::from_slice::<Value>(&r.body).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&r.body).into_owned())
                });
                obj.insert("authorizerBody".into(), body);
            }
        }
        data
    });
    let body = jsonrpc::error(id, settings.json_rpc_code, &settings.message, data);
    match &d.relay {
        None => json_response(settings.http_status, body),
        Some(r) => {
            let mut response = json_response(r.status, body);
            response.headers.extend(
                r.headers
                    .iter()
                    .filter(|(n, _)| !describes_relayed_body(n))
                    .cloned(),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rejection_has_its_status_code_and_reason() {
        let cases = [
            (
                Rejection::InvalidPath("bad".into()),
                400,
                -32600,
                "invalid_path",
                "bad",
            ),
            (
                Rejection::UnsupportedEncoding,
                415,
                -32600,
                "unsupported_encoding",
                "Content-Encoding is not supported",
            ),
            (
                Rejection::UnsupportedMediaType,
                415,
                -32600,
                "unsupported_media_type",
                "Content-Type must be application/json",
            ),
            (
                Rejection::EmptyBody,
                400,
                -32700,
                "invalid_json",
                "Parse error: empty body",
            ),
            (
                Rejection::BodyTooLarge,
                413,
                -32600,
                "body_too_large",
                "Request body exceeds the configured limit",
            ),
            (
                Rejection::InvalidContentLength,
                400,
                -32600,
                "invalid_content_length",
                "Content-Length is not a number",
            ),
            (
                Rejection::Message(ParseError::Parse("x".into())),
                400,
                -32700,
                "invalid_json",
                "Parse error: x",
            ),
            (
                Rejection::Message(ParseError::InvalidRequest("y".into())),
                400,
                -32600,
                "invalid_request",
                "Invalid Request: y",
            ),
            (
                Rejection::Message(ParseError::InvalidParams("z".into())),
                400,
                -32602,
                "invalid_params",
                "Invalid params: z",
            ),
            (
                Rejection::HeaderMismatch("Mcp-Method header is required"),
                400,
                -32020,
                "header_mismatch",
                "Mcp-Method header is required",
            ),
            (
                Rejection::UnsupportedRevision("2024-11-05".into()),
                400,
                -32022,
                "unsupported_revision",
                "Unsupported protocol version",
            ),
            (
                Rejection::MethodNotInRevision("initialize".into(), "2026-07-28"),
                404,
                -32601,
                "method_not_in_revision",
                "Method not found: initialize is not part of MCP 2026-07-28",
            ),
            (
                Rejection::HttpMethodNotInRevision("GET".into(), "2026-07-28"),
                405,
                -32601,
                "method_not_in_revision",
                "HTTP GET is not part of MCP 2026-07-28: every request is a POST",
            ),
        ];
        for (r, status, code, reason, message) in cases {
            assert_eq!(r.status_code_reason(), (status, code, reason), "{r:?}");
            // Every rejection has its denial counter.
            assert!(crate::stats::DENIAL_REASONS.contains(&reason), "{r:?}");
            assert_eq!(r.message(), message, "{r:?}");
            if let Rejection::Message(e) = &r {
                assert_eq!(e.code(), code, "{r:?}");
            }
            let response = rejection(&r, Some("7"));
            assert_eq!(response.status, status);
            let body: Value = serde_json::from_slice(&response.body).unwrap();
            assert_eq!(body["id"], 7);
            assert_eq!(body["error"]["code"], code);
            assert_eq!(body["error"]["message"], message);
        }
    }
}
