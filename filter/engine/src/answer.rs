//! What the client gets when a request is not let through (docs/semantics.md §5).

use std::borrow::Cow;

use mcp_access_bundle::DenyResponse;
use serde_json::{json, Value};

use crate::mcp::ParseError;
use crate::policy::{level_str, Denial};

/// A response the filter sends itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// JSON-RPC error codes.
pub(crate) const PARSE_ERROR: i32 = -32700;
pub(crate) const INVALID_REQUEST: i32 = -32600;
pub(crate) const INVALID_PARAMS: i32 = -32602;
/// MCP `HeaderMismatch` (SEP-2243): HTTP headers disagree with the body, or one is repeated
/// or missing.
pub(crate) const HEADER_MISMATCH: i32 = -32020;

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
        }
    }
}

/// A JSON-RPC error object. `id` is the raw JSON text of the request id (already validated by
/// the parser), or None for `null`.
pub(crate) fn jsonrpc_error(
    id: Option<&str>,
    code: i32,
    message: &str,
    data: Option<Value>,
) -> Vec<u8> {
    let mut error = json!({ "code": code, "message": message });
    if let (Some(d), Some(obj)) = (data, error.as_object_mut()) {
        obj.insert("data".into(), d);
    }
    let error = error.to_string();
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{error}}}",
        id.unwrap_or("null")
    )
    .into_bytes()
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
    json_response(status, jsonrpc_error(id, code, &r.message(), None))
}

/// A policy denial: the authorizer's own response when it denied, else a JSON-RPC error.
pub(crate) fn denial(settings: &DenyResponse, d: &Denial, id: Option<&str>) -> LocalResponse {
    if let Some(r) = &d.relay {
        return LocalResponse {
            status: r.status,
            headers: r.headers.clone(),
            body: r.body.clone(),
        };
    }
    let data = settings.expose_details.then(|| {
        json!({
            "level": level_str(d.level),
            "reason": d.reason.as_str(),
            "policy": d.policy,
            "rule": d.rule,
        })
    });
    json_response(
        settings.http_status,
        jsonrpc_error(id, settings.json_rpc_code, &settings.message, data),
    )
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
