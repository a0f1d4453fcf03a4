//! What the client gets when a request is not let through (docs/semantics.md §5).

use mcp_access_bundle::DenyResponse;
use serde_json::{json, Value};

use crate::policy::{level_str, Denial};

/// A response the filter sends itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// JSON-RPC error codes.
pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;
/// MCP `HeaderMismatch` (SEP-2243): HTTP headers disagree with the body, or one is repeated
/// or missing.
pub const HEADER_MISMATCH: i32 = -32020;

/// A JSON-RPC error object. `id` is the raw JSON text of the request id (already validated by
/// the parser), or None for `null`.
pub fn jsonrpc_error(id: Option<&str>, code: i32, message: &str, data: Option<Value>) -> Vec<u8> {
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

/// A request that is not acceptable MCP (bad JSON, batch, wrong encoding, too large, ...).
pub fn rejection(status: u16, id: Option<&str>, code: i32, message: &str) -> LocalResponse {
    json_response(status, jsonrpc_error(id, code, message, None))
}

/// A policy denial: the authorizer's own response when it denied, else a JSON-RPC error.
pub fn denial(settings: &DenyResponse, d: &Denial, id: Option<&str>) -> LocalResponse {
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
