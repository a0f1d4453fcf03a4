//! JSON-RPC 2.0 vocabulary: the error codes the filter answers with and the error object.

use serde_json::Value;

use crate::jsonw::{push_int, push_str};

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
/// by the parser), or None for `null`. The error's members are in alphabetical order (`code`,
/// `data`, `message`), as a `serde_json` map writes them.
pub(crate) fn error(id: Option<&str>, code: i32, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut out = String::with_capacity(64 + message.len());
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    out.push_str(id.unwrap_or("null"));
    out.push_str(",\"error\":{\"code\":");
    push_int(&mut out, i64::from(code));
    if let Some(d) = data {
        out.push_str(",\"data\":");
        out.push_str(&d.to_string());
    }
    out.push_str(",\"message\":");
    push_str(&mut out, message);
    out.push_str("}}");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The response as it was first built (a `serde_json` map, then text).
    fn as_value_map(id: Option<&str>, code: i32, message: &str, data: Option<Value>) -> Vec<u8> {
        let mut error = serde_json::json!({ "code": code, "message": message });
        if let (Some(d), Some(obj)) = (data, error.as_object_mut()) {
            obj.insert("data".into(), d);
        }
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{error}}}",
            id.unwrap_or("null")
        )
        .into_bytes()
    }

    #[test]
    fn errors_are_byte_for_byte_the_value_map() {
        let data = serde_json::json!({"level": "backend", "rule": "r\"1", "policy": null});
        for (id, code, message, data) in [
            (None, PARSE_ERROR, "Parse error", None),
            (Some("7"), INVALID_REQUEST, "bad \"x\"\n\u{1}", None),
            (
                Some("\"a\\\"b\""),
                -32000,
                "Forbidden </script>",
                Some(data),
            ),
            (Some("-1.5e3"), i32::MIN, "", Some(Value::Null)),
        ] {
            assert_eq!(
                String::from_utf8(error(id, code, message, data.clone())),
                String::from_utf8(as_value_map(id, code, message, data))
            );
        }
    }
}
