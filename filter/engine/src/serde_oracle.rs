//! The strict JSON-RPC reader ([`parse_message`]) held to serde_json: both must agree on
//! whether a body is JSON, and on everything the filter extracts (kind, method, name, uri,
//! protocol versions, subscriptions, completion ref, id) or the error code. One oracle, used
//! by the differential unit test (`mcp_tests.rs`) and the fuzz target `differential`
//! (feature `serde-oracle`).
//! It also holds the RFC 8785 canonical form written by another route ([`canonical`]), for
//! the canonical-JSON unit test and the fuzz target `canonical_json`.
//!
//! The places where the reader is deliberately stricter than serde_json are encoded one by
//! one (see [`expected`]), each as narrow as the rule it stands for:
//! - duplicate keys in any object (compared after escape decoding) are -32600;
//! - nesting deeper than `ParseLimits::max_depth` is -32700;
//! - a batch (top-level array) or any other non-object message is -32600;
//! - the JSON-RPC / MCP member rules of `mcp.rs` (`jsonrpc` must be "2.0", `id` a string or
//!   number, `params` an object or array, `error` an object, the `_meta` protocol version a
//!   string, a method name without empty, `.` or `..` segments, whitespace or control
//!   characters, a `completion/complete` ref naming a prompt or a resource, ...);
//! - a number whose value overflows a double is -32700, as serde_json (without its
//!   `arbitrary_precision` feature) also refuses it ("number out of range").
#![allow(clippy::panic, clippy::indexing_slicing)]

use std::collections::HashSet;
use std::fmt;

use mcp_access_bundle::mcp_methods::{self, Method};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::mcp::{
    parse_message, CompletionRef, McpMessage, MessageKind, Param, ParseError, ParseLimits,
};

/// JSON-RPC error codes the reader answers with.
pub const PARSE: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;

/// Checks `body` against serde_json; panics (naming the body) where they disagree. Returns
/// the reader's verdict: None when it accepted the message, else the error code.
pub fn check(body: &[u8], limits: &ParseLimits) -> Option<i32> {
    let ours = parse_message(body, limits);
    let text = String::from_utf8_lossy(body);
    let (value, shape) = match serde_json::from_slice::<Shape>(body) {
        Ok(shape) => match serde_json::from_slice::<Value>(body) {
            Ok(value) => (value, shape),
            Err(e) => panic!("serde_json read the body once but not twice: {e}"),
        },
        // Includes a number outside f64 (refused by both) and serde_json's own nesting
        // limit (128), above any limit used here.
        Err(e) => {
            assert!(
                matches!(ours, Err((ParseError::Parse(_), _))),
                "serde_json rejects the JSON ({e}), the reader said {ours:?}: {text}"
            );
            return Some(PARSE);
        }
    };
    let want = expected(&value, &shape, limits);
    match (&ours, &want) {
        (Ok(got), Ok(want)) => {
            check_spans(body, got, &value, &text);
            let mut got_no_id = got.clone();
            got_no_id.id = None;
            (got_no_id.params, got_no_id.arguments) = (None, None);
            assert_eq!(
                &got_no_id, want,
                "extraction differs from serde_json: {text}"
            );
            match &got.id {
                Some(raw) => assert_eq!(id_value(raw, &text), value["id"], "id differs: {text}"),
                None => assert!(value.get("id").is_none(), "id lost: {text}"),
            }
            None
        }
        (Err((err, id)), Err(code)) => {
            assert_eq!(err.code(), *code, "error code differs ({err}): {text}");
            let echoed = id.as_deref().map(|raw| id_value(raw, &text));
            // After a parse error the flow drops the id; otherwise the whole body was read,
            // and the id is echoed exactly when it is given once and is a string or number.
            if !matches!(err, ParseError::Parse(_)) {
                let single =
                    shape.id_keys == 1 && (value["id"].is_string() || value["id"].is_number());
                let want_id = single.then(|| value["id"].clone());
                assert_eq!(echoed, want_id, "echoed id ({err}): {text}");
            }
            Some(*code)
        }
        _ => panic!("reader and serde_json disagree: ours {ours:?}, expected {want:?}: {text}"),
    }
}

/// The spans the reader found for `params` and `params.arguments` hold what serde_json reads
/// there (`value`: the whole message); a response has none.
fn check_spans(body: &[u8], got: &McpMessage, value: &Value, text: &str) {
    let read = |span: &Option<std::ops::Range<usize>>| {
        span.clone().map(|r| {
            serde_json::from_slice::<Value>(&body[r])
                .unwrap_or_else(|e| panic!("span unreadable ({e}): {text}"))
        })
    };
    if got.kind == MessageKind::Response {
        assert_eq!((&got.params, &got.arguments), (&None, &None), "{text}");
        return;
    }
    let params = value.get("params");
    assert_eq!(read(&got.params).as_ref(), params, "params span: {text}");
    let arguments = params
        .and_then(Value::as_object)
        .and_then(|p| p.get("arguments"));
    assert_eq!(
        read(&got.arguments).as_ref(),
        arguments,
        "arguments span: {text}"
    );
}

/// What serde_json sees besides the value: duplicate keys (after decoding), nesting depth,
/// and how often `id` occurs in this (top-level) object.
#[derive(Default)]
struct Shape {
    dup: bool,
    depth: usize,
    id_keys: usize,
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut out = Shape::default();
        while let Some(inner) = seq.next_element::<Shape>()? {
            out.dup |= inner.dup;
            out.depth = out.depth.max(inner.depth);
        }
        out.depth += 1;
        Ok(out)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut out = Shape::default();
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let inner = map.next_value::<Shape>()?;
            out.id_keys += usize::from(key == "id");
            out.dup |= !keys.insert(key) || inner.dup;
            out.depth = out.depth.max(inner.depth);
        }
        out.depth += 1;
        Ok(out)
    }
}

/// The expected outcome for valid JSON: the extracted message (id compared separately) or
/// an error code. The message's own members here, `params` in [`expected_params`].
fn expected(value: &Value, shape: &Shape, limits: &ParseLimits) -> Result<McpMessage, i32> {
    // Stricter by design: the depth limit.
    if shape.depth > limits.max_depth {
        return Err(PARSE);
    }
    // Stricter by design: one message per body, never a batch.
    let Value::Object(msg) = value else {
        return Err(INVALID_REQUEST);
    };
    // Stricter by design: duplicate keys anywhere.
    if shape.dup {
        return Err(INVALID_REQUEST);
    }
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(INVALID_REQUEST);
    }
    let id = msg.get("id");
    if id.is_some_and(|v| !v.is_string() && !v.is_number()) {
        return Err(INVALID_REQUEST);
    }
    let params = msg.get("params");
    if params.is_some_and(|p| !p.is_object() && !p.is_array()) {
        return Err(INVALID_REQUEST);
    }
    if msg.get("error").is_some_and(|e| !e.is_object()) {
        return Err(INVALID_REQUEST);
    }
    let has_result = msg.contains_key("result");
    let has_error = msg.contains_key("error");
    let method = match msg.get("method") {
        None if (has_result != has_error) && id.is_some() => {
            return Ok(message(MessageKind::Response, None));
        }
        None => return Err(INVALID_REQUEST),
        Some(Value::String(m)) if !has_result && !has_error => m.clone(),
        Some(_) => return Err(INVALID_REQUEST),
    };
    if method.chars().any(|c| c.is_whitespace() || c.is_control())
        || method.split('/').any(|s| matches!(s, "" | "." | ".."))
    {
        return Err(INVALID_REQUEST);
    }
    let kind = match id {
        Some(_) => MessageKind::Request,
        None => MessageKind::Notification,
    };
    let params = params.and_then(Value::as_object);
    expected_params(message(kind, Some(method)), params)
}

/// What the MCP rules read in `params` (None: absent, or an array).
fn expected_params(
    mut m: McpMessage,
    params: Option<&Map<String, Value>>,
) -> Result<McpMessage, i32> {
    let method = m
        .method
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let member = |key: &str| params?.get(key);
    let text = |key: &str| member(key).and_then(Value::as_str).map(str::to_owned);
    match method.as_str() {
        "tools/call" | "prompts/get" => m.name = Some(text("name").ok_or(INVALID_PARAMS)?),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            m.uri = Some(text("uri").ok_or(INVALID_PARAMS)?)
        }
        "initialize" => m.init_version = text("protocolVersion"),
        _ => {}
    }
    // The per-request protocol version (MCP 2026-07-28): a string if present.
    let meta = member("_meta").and_then(Value::as_object);
    m.protocol_version = match meta.and_then(|m| m.get("io.modelcontextprotocol/protocolVersion")) {
        None => None,
        Some(Value::String(v)) => Some(v.clone()),
        Some(_) => return Err(INVALID_PARAMS),
    };
    if method == "subscriptions/listen" {
        let list = member("notifications")
            .and_then(Value::as_object)
            .and_then(|n| n.get("resourceSubscriptions"));
        match list {
            None => {}
            Some(Value::Array(items)) => {
                for i in items {
                    m.subscriptions
                        .push(i.as_str().ok_or(INVALID_PARAMS)?.to_owned());
                }
            }
            Some(_) => return Err(INVALID_PARAMS),
        }
    }
    if method == "completion/complete" {
        let reference = member("ref")
            .and_then(Value::as_object)
            .ok_or(INVALID_PARAMS)?;
        let field = |k: &str| reference.get(k).and_then(Value::as_str);
        let (judged_as, key, value) = match field("type") {
            Some("ref/prompt") => (mcp_methods::PROMPTS_GET_SPEC, Param::Name, field("name")),
            Some("ref/resource") => (mcp_methods::RESOURCES_READ_SPEC, Param::Uri, field("uri")),
            _ => return Err(INVALID_PARAMS),
        };
        m.completion_ref = Some(CompletionRef {
            judged_as,
            key,
            value: value.ok_or(INVALID_PARAMS)?.to_owned(),
        });
    }
    Ok(m)
}

fn message(kind: MessageKind, method: Option<String>) -> McpMessage {
    McpMessage {
        kind,
        method: method.map(Method::from),
        id: None,
        name: None,
        uri: None,
        protocol_version: None,
        init_version: None,
        subscriptions: Vec::new(),
        completion_ref: None,
        params: None,
        arguments: None,
    }
}

/// The raw id text the reader returned, read back by serde_json.
fn id_value(raw: &str, text: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(v) if v.is_string() || v.is_number() => v,
        other => panic!("echoed id {raw:?} is not a JSON string or number ({other:?}): {text}"),
    }
}

/// The RFC 8785 canonical form of `v` by another route than [`crate::canonical_json`]:
/// serde_json's value written recursively, members sorted by UTF-16 code units, numbers as
/// ECMAScript writes them (ryu-js), strings escaped by serde_json (the same set as
/// `JSON.stringify`: `"`, `\\`, and control characters, short forms where there are).
pub fn canonical(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null | Value::Bool(_) | Value::String(_) => {
            out.extend_from_slice(v.to_string().as_bytes())
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            out.extend_from_slice(ryu_js::Buffer::new().format_finite(x).as_bytes());
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        Value::Object(o) => {
            let mut m: Vec<(&String, &Value)> = o.iter().collect();
            m.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::from(k.as_str()).to_string().as_bytes());
                out.push(b':');
                write_canonical(x, out);
            }
            out.push(b'}');
        }
    }
}
