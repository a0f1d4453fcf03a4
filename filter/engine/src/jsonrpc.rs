//! JSON-RPC 2.0 vocabulary: the error codes the filter answers with and the error object.

use serde_json::{json, Value};

/// Not valid JSON.
pub(crate) const PARSE_ERROR: i32 = -32700;
/// Valid JSON but not an acceptable JSON-RPC message.
pub(crate) const INVALID_REQUEST: i32 = -32600;
/// "Method not found".
pub(crate) const METHOD_NOT_FOUND: i32 = -32601;
/// Missing or malformed params.
pub(crate) const INVALID_PARAMS: i32 = -32602;
/// "Internal error".
pub(crate) const INTERNAL_ERROR: i32 = -32603;
/// MCP `HeaderMismatch` (SEP-2243): HTTP headers disagree with the body, or one is repeated
/// or missing.
pub(crate) const HEADER_MISMATCH: i32 = -32020;
/// MCP `UnsupportedProtocolVersion` (2026-07-28): the request names a revision the filter
/// does not accept.
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;

/// A JSON-RPC error response. `id` is the raw JSON text of the request id (already validated
/// by the parser), or None for `null`.
pub(crate) fn error(id: Option<&str>, code: i32, message: &str, data: Option<Value>) -> Vec<u8> {
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
