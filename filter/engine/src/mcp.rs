//! Strict, single-pass validator and extractor for one MCP JSON-RPC 2.0 message.
//!
//! [`parse_message`] reads the whole body with the strict JSON reader of [`crate::json`]
//! (RFC 8259: UTF-8 only, no BOM, no trailing data, nesting bounded by
//! [`ParseLimits::max_depth`]; no DOM, no recursion) and applies the JSON-RPC / MCP rules the
//! filter relies on as it goes. Duplicate keys are rejected in every object, comparing
//! keys after escape decoding, so the filter and the MCP server cannot disagree on
//! which `method`, `params.name` or `params.uri` a message carries.
//!
//! Errors come back as `(ParseError, Option<String>)` ([`ParseFailure`]): the second item is
//! the message's `id` as raw JSON text when it was read before (or despite) the error,
//! so the caller can echo it in the error reply. It is `None` when the id was absent,
//! not a string or number, given twice, or not reached. JSON-RPC 2.0 wants a null id in
//! replies to parse errors, so callers may drop it for [`ParseError::Parse`].
//!
//! Precedence: any JSON syntax error wins (`Parse`); then the first JSON-RPC structure
//! problem in input order (`InvalidRequest`); then the member checks done at the end
//! (missing `jsonrpc`, kind of message, then `InvalidParams`).

use std::fmt;

use crate::json::{self, into_string, SyntaxError, Val};
use crate::request::McpOp;
use mcp_access_bundle::mcp_methods;
/// Which member of `params` names an item (re-exported: [`CompletionRef`] holds one).
pub use mcp_access_bundle::mcp_methods::Param;

/// Default for [`ParseLimits::max_depth`].
pub(crate) const DEFAULT_MAX_DEPTH: usize = 64;

/// Parser limits.
#[derive(Debug, Clone, Copy)]
pub struct ParseLimits {
    /// Maximum nesting of objects and arrays; the top-level object is depth 1.
    pub max_depth: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// The three shapes of a JSON-RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// `method` and `id`.
    Request,
    /// `method`, no `id`.
    Notification,
    /// `id` and exactly one of `result` / `error`, no `method`.
    Response,
}

/// What the decision needs from one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpMessage {
    pub kind: MessageKind,
    /// JSON-RPC `method` (decoded), None for responses.
    pub method: Option<String>,
    /// The `id` exactly as it appeared in the input (raw JSON text: a string literal with
    /// its quotes and escapes, or a number), to echo back in an error. None when absent.
    pub id: Option<String>,
    /// `params.name` (decoded) for the methods whose [`mcp_methods::Param`] is `Name`
    /// (tools/call, prompts/get).
    pub name: Option<String>,
    /// `params.uri` (decoded) for the methods whose param is `Uri` (resources/read,
    /// resources/subscribe, resources/unsubscribe).
    pub uri: Option<String>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]` (decoded), the per-request
    /// protocol version of MCP 2026-07-28 and later; any other type is `InvalidParams`.
    pub protocol_version: Option<String>,
    /// `initialize`'s `params.protocolVersion` (decoded): the revision the client asks for.
    pub init_version: Option<String>,
    /// `subscriptions/listen`'s `params.notifications.resourceSubscriptions` (decoded): the
    /// resource URIs it subscribes to (MCP 2026-07-28), judged as `resources/subscribe`.
    pub subscriptions: Vec<String>,
    /// `completion/complete`'s `params.ref`: the prompt (`ref/prompt`, by name) or resource
    /// (`ref/resource`, by URI) whose arguments it completes, as the method a caller needs
    /// to use it (`prompts/get`, `resources/read`) and that name or URI.
    pub completion_ref: Option<CompletionRef>,
}

impl McpMessage {
    /// The operation the message performs: a client's response is a reply, anything else
    /// a call of its method naming its `params.name` or `params.uri`.
    pub(crate) fn into_op(self) -> McpOp {
        match self.kind {
            MessageKind::Response => McpOp::Reply,
            MessageKind::Request | MessageKind::Notification => McpOp::Call {
                method: self.method.unwrap_or_default(),
                param: self.name.or(self.uri),
            },
        }
    }
}

/// What a `completion/complete` completes for: judged as a call of it (docs/semantics.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRef {
    /// `prompts/get` or `resources/read`.
    pub judged_as: &'static str,
    /// Which member names it.
    pub key: Param,
    /// The prompt's name or the resource's URI (decoded).
    pub value: String,
}

/// The method whose `params.ref` names a prompt or resource.
pub const COMPLETION_COMPLETE: &str = "completion/complete";

/// Why a message was rejected; maps onto the JSON-RPC error codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not valid JSON (-32700).
    Parse(String),
    /// Valid JSON but not an acceptable JSON-RPC message (-32600).
    InvalidRequest(String),
    /// Missing or non-string `params.name` / `params.uri` where the method needs it (-32602).
    InvalidParams(String),
}

impl ParseError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i32 {
        match self {
            ParseError::Parse(_) => crate::jsonrpc::PARSE_ERROR,
            ParseError::InvalidRequest(_) => crate::jsonrpc::INVALID_REQUEST,
            ParseError::InvalidParams(_) => crate::jsonrpc::INVALID_PARAMS,
        }
    }

    /// The standard JSON-RPC message for [`code`](Self::code).
    pub(crate) fn message(&self) -> &'static str {
        match self {
            ParseError::Parse(_) => "Parse error",
            ParseError::InvalidRequest(_) => "Invalid Request",
            ParseError::InvalidParams(_) => "Invalid params",
        }
    }

    /// What exactly was wrong. Never contains input text, only offsets and byte values.
    pub(crate) fn detail(&self) -> &str {
        match self {
            ParseError::Parse(d) | ParseError::InvalidRequest(d) | ParseError::InvalidParams(d) => {
                d
            }
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message(), self.detail())
    }
}

impl std::error::Error for ParseError {}

impl From<SyntaxError> for ParseError {
    fn from(e: SyntaxError) -> Self {
        ParseError::Parse(e.0)
    }
}

/// An error plus the message's raw `id` when known (see the module docs).
pub(crate) type ParseFailure = (ParseError, Option<String>);

/// Validates `body` as one MCP JSON-RPC message and extracts what the decision needs.
pub fn parse_message(body: &[u8], limits: &ParseLimits) -> Result<McpMessage, ParseFailure> {
    let mut parser = Parser::new();
    let outcome = json::read(body, limits.max_depth, &mut parser);
    let id = parser.id_text();
    match outcome {
        Err(e) => Err((e, id)),
        Ok(()) => parser.finish().map_err(|e| (e, id)),
    }
}

/// Why a method name is malformed, if it is: an empty, `.` or `..` segment, whitespace or a
/// control character (docs/semantics.md §4). Such a name could read as another method to a
/// server that normalizes it (`notifications/../tools/call`, `tools/list `), so it is refused
/// whatever the rules say.
fn malformed_method(method: &str) -> Option<&'static str> {
    if method.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("\"method\" holds whitespace or a control character");
    }
    method
        .split('/')
        .any(|segment| matches!(segment, "" | "." | ".."))
        .then_some("\"method\" has an empty, \".\" or \"..\" segment")
}

// ---------------------------------------------------------------------------------------
// The JSON-RPC rules, applied as the JSON reader (`json::read`) goes
// ---------------------------------------------------------------------------------------

/// Which member a value belongs to, as far as the extraction cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ignore,
    Root,
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Name,
    Uri,
    /// `params._meta`.
    Meta,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`.
    ProtocolVersion,
    /// `params.protocolVersion` (initialize).
    InitVersion,
    /// `params.notifications` (subscriptions/listen).
    Notifications,
    /// `params.notifications.resourceSubscriptions`.
    Subscriptions,
    /// An element of `resourceSubscriptions`.
    SubscriptionUri,
    /// `params.ref` (completion/complete).
    Ref,
    /// `params.ref.type`.
    RefType,
    /// `params.ref.name`.
    RefName,
    /// `params.ref.uri`.
    RefUri,
}

/// What an object is, as far as the extraction cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The message object.
    Top,
    /// The object value of the message's `params`.
    Params,
    /// The object value of `params._meta`.
    Meta,
    /// The object value of `params.notifications`.
    Notifications,
    /// The object value of `params.ref`.
    Ref,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamsKind {
    Absent,
    Object,
    Array,
    Other,
}

struct Parser<'a> {
    /// First JSON-RPC structure error; reported only if the JSON itself is valid.
    invalid: Option<ParseError>,
    jsonrpc_seen: bool,
    id_seen: bool,
    id_ambiguous: bool,
    id: Option<&'a [u8]>,
    method_seen: bool,
    method: Option<String>,
    params: ParamsKind,
    has_result: bool,
    has_error: bool,
    name: Option<String>,
    uri: Option<String>,
    protocol_version: Option<String>,
    /// `params._meta` holds a protocol version that is not a string.
    protocol_version_bad: bool,
    init_version: Option<String>,
    subscriptions: Vec<String>,
    /// `resourceSubscriptions` is not an array of strings.
    subscriptions_bad: bool,
    /// `params.ref` is an object.
    ref_object: bool,
    ref_type: Option<String>,
    ref_name: Option<String>,
    ref_uri: Option<String>,
}

/// The `_meta` key of the per-request protocol version.
const PROTOCOL_VERSION_KEY: &[u8] = b"io.modelcontextprotocol/protocolVersion";

impl<'a> Parser<'a> {
    fn new() -> Self {
        Parser {
            invalid: None,
            jsonrpc_seen: false,
            id_seen: false,
            id_ambiguous: false,
            id: None,
            method_seen: false,
            method: None,
            params: ParamsKind::Absent,
            has_result: false,
            has_error: false,
            name: None,
            uri: None,
            protocol_version: None,
            protocol_version_bad: false,
            init_version: None,
            subscriptions: Vec::new(),
            subscriptions_bad: false,
            ref_object: false,
            ref_type: None,
            ref_name: None,
            ref_uri: None,
        }
    }

    fn id_text(&self) -> Option<String> {
        if self.id_ambiguous {
            return None;
        }
        // The raw id is a complete, validated JSON token, hence valid UTF-8.
        self.id
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .map(str::to_owned)
    }

    fn reject(&mut self, detail: &str) {
        if self.invalid.is_none() {
            self.invalid = Some(ParseError::InvalidRequest(detail.to_owned()));
        }
    }

    /// Builds the result once the input is known to be valid JSON.
    fn finish(mut self) -> Result<McpMessage, ParseError> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let invalid = |d: &str| Err(ParseError::InvalidRequest(d.to_owned()));
        if !self.jsonrpc_seen {
            return invalid("missing \"jsonrpc\" member");
        }
        let id = self
            .id
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .map(str::to_owned);
        let responding = self.has_result || self.has_error;

        let Some(method) = self.method.take() else {
            if !responding {
                return invalid("message has neither \"method\" nor \"result\"/\"error\"");
            }
            if self.has_result && self.has_error {
                return invalid("response has both \"result\" and \"error\"");
            }
            if id.is_none() {
                return invalid("response without \"id\"");
            }
            return Ok(McpMessage {
                kind: MessageKind::Response,
                method: None,
                id,
                name: None,
                uri: None,
                protocol_version: None,
                init_version: None,
                subscriptions: Vec::new(),
                completion_ref: None,
            });
        };
        if responding {
            return invalid("message has both \"method\" and \"result\"/\"error\"");
        }
        if let Some(problem) = malformed_method(&method) {
            return invalid(problem);
        }
        let completion_ref = match method == COMPLETION_COMPLETE {
            true => Some(self.completion_ref()?),
            false => None,
        };
        let kind = if id.is_some() {
            MessageKind::Request
        } else {
            MessageKind::Notification
        };

        let mut name = None;
        let mut uri = None;
        if let Some(param) = mcp_methods::param_of(&method) {
            let (slot, value) = match param {
                Param::Name => (&mut name, self.name),
                Param::Uri => (&mut uri, self.uri),
            };
            if self.params != ParamsKind::Object || value.is_none() {
                return Err(ParseError::InvalidParams(format!(
                    "{method} requires \"params\" to be an object with a string \"{}\"",
                    param.key()
                )));
            }
            *slot = value;
        }
        if self.protocol_version_bad {
            return Err(ParseError::InvalidParams(
                "params._meta protocol version must be a string".to_owned(),
            ));
        }
        let listen = mcp_methods::subscribes_as(&method).is_some();
        if listen && self.subscriptions_bad {
            return Err(ParseError::InvalidParams(format!(
                "{method} requires params.notifications.resourceSubscriptions to be an array of strings"
            )));
        }
        let initialize = method == mcp_methods::INITIALIZE;
        Ok(McpMessage {
            completion_ref,
            kind,
            method: Some(method),
            id,
            name,
            uri,
            protocol_version: self.protocol_version,
            init_version: if initialize { self.init_version } else { None },
            subscriptions: if listen {
                self.subscriptions
            } else {
                Vec::new()
            },
        })
    }
}

impl Parser<'_> {
    /// `completion/complete`'s `params.ref`: a prompt by name or a resource by URI. Anything
    /// else cannot be judged, so it is refused (-32602).
    fn completion_ref(&mut self) -> Result<CompletionRef, ParseError> {
        let bad = |d: &str| ParseError::InvalidParams(format!("{COMPLETION_COMPLETE} {d}"));
        if self.params != ParamsKind::Object || !self.ref_object {
            return Err(bad("requires \"params.ref\" to be an object"));
        }
        let (judged_as, key, value) = match self.ref_type.as_deref() {
            Some("ref/prompt") => ("prompts/get", Param::Name, self.ref_name.take()),
            Some("ref/resource") => ("resources/read", Param::Uri, self.ref_uri.take()),
            _ => {
                return Err(bad(
                    "requires params.ref.type to be \"ref/prompt\" or \"ref/resource\"",
                ))
            }
        };
        let value = value.ok_or_else(|| {
            bad(&format!(
                "requires params.ref to have a string \"{}\"",
                key.key()
            ))
        })?;
        Ok(CompletionRef {
            judged_as,
            key,
            value,
        })
    }
}

impl<'a> json::Visitor<'a> for Parser<'a> {
    type Slot = Slot;
    type Error = ParseError;
    const ROOT: Slot = Slot::Root;
    const IGNORE: Slot = Slot::Ignore;

    /// Which member a key names, by the object it is in.
    fn member(&mut self, object: Slot, key: &[u8]) -> Slot {
        let role = match object {
            Slot::Root => Role::Top,
            Slot::Params => Role::Params,
            Slot::Meta => Role::Meta,
            Slot::Notifications => Role::Notifications,
            Slot::Ref => Role::Ref,
            _ => Role::Other,
        };
        match role {
            Role::Top => match key {
                b"jsonrpc" => Slot::Jsonrpc,
                b"id" => Slot::Id,
                b"method" => Slot::Method,
                b"params" => Slot::Params,
                b"result" => Slot::Result,
                b"error" => Slot::Error,
                _ => Slot::Ignore,
            },
            Role::Params => match key {
                b"name" => Slot::Name,
                b"uri" => Slot::Uri,
                b"_meta" => Slot::Meta,
                b"protocolVersion" => Slot::InitVersion,
                b"notifications" => Slot::Notifications,
                b"ref" => Slot::Ref,
                _ => Slot::Ignore,
            },
            Role::Ref => match key {
                b"type" => Slot::RefType,
                b"name" => Slot::RefName,
                b"uri" => Slot::RefUri,
                _ => Slot::Ignore,
            },
            Role::Notifications if key == b"resourceSubscriptions" => Slot::Subscriptions,
            Role::Notifications => Slot::Ignore,
            Role::Meta if key == PROTOCOL_VERSION_KEY => Slot::ProtocolVersion,
            Role::Meta => Slot::Ignore,
            Role::Other => Slot::Ignore,
        }
    }

    fn element(&mut self, array: Slot) -> Slot {
        match array {
            Slot::Subscriptions => Slot::SubscriptionUri,
            _ => Slot::Ignore,
        }
    }

    fn duplicate_key(&mut self, slot: Slot, key_at: usize) {
        if self.invalid.is_none() {
            self.invalid = Some(ParseError::InvalidRequest(format!(
                "duplicate key at offset {key_at}"
            )));
        }
        if slot == Slot::Id {
            self.id_ambiguous = true;
        }
    }

    fn wants_text(&self, slot: Slot) -> bool {
        matches!(
            slot,
            Slot::Jsonrpc
                | Slot::Method
                | Slot::Name
                | Slot::Uri
                | Slot::ProtocolVersion
                | Slot::InitVersion
                | Slot::SubscriptionUri
                | Slot::RefType
                | Slot::RefName
                | Slot::RefUri
        )
    }

    fn value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), ParseError> {
        self.on_value(slot, val)
    }
}

impl<'a> Parser<'a> {
    /// Applies the JSON-RPC rules for the member a value belongs to.
    fn on_value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), ParseError> {
        match slot {
            Slot::Ignore => {}
            Slot::Root => match val {
                Val::Object => {}
                Val::Array => self.reject("batch requests are not supported"),
                _ => self.reject("message must be a JSON object"),
            },
            Slot::Jsonrpc => {
                self.jsonrpc_seen = true;
                let ok = matches!(&val, Val::Str { decoded: Some(s), .. } if s.as_ref() == b"2.0");
                if !ok {
                    self.reject("\"jsonrpc\" must be the string \"2.0\"");
                }
            }
            Slot::Id => {
                if self.id_seen {
                    self.id_ambiguous = true;
                }
                self.id_seen = true;
                match val {
                    Val::Str { raw, .. } | Val::Number(raw) => {
                        if self.id.is_none() {
                            self.id = Some(raw);
                        }
                    }
                    _ => self.reject("\"id\" must be a string or a number"),
                }
            }
            Slot::Method => {
                let first = !self.method_seen;
                self.method_seen = true;
                match val {
                    Val::Str {
                        decoded: Some(s), ..
                    } => {
                        if first {
                            self.method = Some(into_string(s)?);
                        }
                    }
                    _ => self.reject("\"method\" must be a string"),
                }
            }
            Slot::Params => {
                let kind = match val {
                    Val::Object => ParamsKind::Object,
                    Val::Array => ParamsKind::Array,
                    _ => ParamsKind::Other,
                };
                if kind == ParamsKind::Other {
                    self.reject("\"params\" must be an object or an array");
                }
                if self.params == ParamsKind::Absent {
                    self.params = kind;
                }
            }
            Slot::Result => self.has_result = true,
            Slot::Error => {
                self.has_error = true;
                if !matches!(val, Val::Object) {
                    self.reject("\"error\" must be an object");
                }
            }
            Slot::Name => {
                if let Val::Str {
                    decoded: Some(s), ..
                } = val
                {
                    if self.name.is_none() {
                        self.name = Some(into_string(s)?);
                    }
                }
            }
            Slot::Uri => {
                if let Val::Str {
                    decoded: Some(s), ..
                } = val
                {
                    if self.uri.is_none() {
                        self.uri = Some(into_string(s)?);
                    }
                }
            }
            Slot::Meta => {}
            Slot::ProtocolVersion => match val {
                Val::Str {
                    decoded: Some(s), ..
                } => {
                    if self.protocol_version.is_none() {
                        self.protocol_version = Some(into_string(s)?);
                    }
                }
                _ => self.protocol_version_bad = true,
            },
            Slot::InitVersion => {
                if let Val::Str {
                    decoded: Some(s), ..
                } = val
                {
                    if self.init_version.is_none() {
                        self.init_version = Some(into_string(s)?);
                    }
                }
            }
            Slot::Notifications => {}
            Slot::Subscriptions => {
                if !matches!(val, Val::Array) {
                    self.subscriptions_bad = true;
                }
            }
            Slot::SubscriptionUri => match val {
                Val::Str {
                    decoded: Some(s), ..
                } => self.subscriptions.push(into_string(s)?),
                _ => self.subscriptions_bad = true,
            },
            Slot::Ref => self.ref_object = matches!(val, Val::Object),
            Slot::RefType | Slot::RefName | Slot::RefUri => {
                if let Val::Str {
                    decoded: Some(s), ..
                } = val
                {
                    let field = match slot {
                        Slot::RefType => &mut self.ref_type,
                        Slot::RefName => &mut self.ref_name,
                        _ => &mut self.ref_uri,
                    };
                    if field.is_none() {
                        *field = Some(into_string(s)?);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::tests::{in_string, with_arg, Rng};
    use std::collections::HashSet;

    fn parse(body: &[u8]) -> Result<McpMessage, ParseFailure> {
        parse_message(body, &ParseLimits::default())
    }

    fn ok(body: &str) -> McpMessage {
        match parse(body.as_bytes()) {
            Ok(m) => m,
            Err(e) => panic!("expected OK for {body:?}, got {e:?}"),
        }
    }

    fn rejected(body: &[u8]) -> ParseFailure {
        match parse(body) {
            Ok(m) => panic!(
                "expected an error for {:?}, got {m:?}",
                String::from_utf8_lossy(body)
            ),
            Err(e) => e,
        }
    }

    fn code(body: &[u8]) -> i32 {
        rejected(body).0.code()
    }

    const PARSE: i32 = -32700;
    const INVALID_REQUEST: i32 = -32600;
    const INVALID_PARAMS: i32 = -32602;

    // ----- message shapes -----

    #[test]
    fn tools_call_request() {
        let m = ok(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
        );
        assert_eq!(
            m,
            McpMessage {
                kind: MessageKind::Request,
                method: Some("tools/call".into()),
                id: Some("7".into()),
                name: Some("echo".into()),
                uri: None,
                protocol_version: None,
                init_version: None,
                subscriptions: Vec::new(),
                completion_ref: None,
            }
        );
    }

    #[test]
    fn notification_initialized() {
        let m = ok(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(m.kind, MessageKind::Notification);
        assert_eq!(m.method.as_deref(), Some("notifications/initialized"));
        assert_eq!(m.id, None);
    }

    #[test]
    fn request_without_params() {
        let m = ok(r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#);
        assert_eq!(m.kind, MessageKind::Request);
        assert_eq!(m.id.as_deref(), Some(r#""x""#));
        assert_eq!(m.name, None);
    }

    #[test]
    fn responses() {
        let m = ok(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#);
        assert_eq!(m.kind, MessageKind::Response);
        assert_eq!(m.method, None);
        assert_eq!(m.id.as_deref(), Some("3"));
        let m = ok(r#"{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}"#);
        assert_eq!(m.kind, MessageKind::Response);
        // result may be any JSON value, including null
        assert_eq!(
            ok(r#"{"jsonrpc":"2.0","id":4,"result":null}"#).kind,
            MessageKind::Response
        );
    }

    #[test]
    fn bad_responses() {
        for body in [
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":"boom"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"ping","error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{}"#,
        ] {
            assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
        }
    }

    #[test]
    fn jsonrpc_version() {
        for body in [
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0 ","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":null,"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":["2.0"],"id":1,"method":"ping"}"#,
            r#"{"Jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ] {
            assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
        }
        // Same string value, written with an escape.
        ok(r#"{"jsonrpc":"2\u002e0","id":1,"method":"ping"}"#);
    }

    #[test]
    fn id_types() {
        for body in [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        ] {
            let (e, id) = rejected(body.as_bytes());
            assert_eq!(e.code(), INVALID_REQUEST, "{body}");
            assert_eq!(id, None, "{body}");
        }
    }

    #[test]
    fn id_raw_text_is_preserved() {
        for id in [
            r#""a\"b""#,
            "1e3",
            "-0.5",
            "0",
            r#""""#,
            r#""\u00e9\ud83d\ude00""#,
            "12345678901234567890123456789",
            r#""é""#,
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(ok(&body).id.as_deref(), Some(id), "{body}");
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#);
            assert_eq!(ok(&body).id.as_deref(), Some(id), "{body}");
        }
    }

    #[test]
    fn id_returned_with_errors() {
        // InvalidParams
        let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":"q\"1","method":"tools/call"}"#);
        assert_eq!(e.code(), INVALID_PARAMS);
        assert_eq!(id.as_deref(), Some(r#""q\"1""#));
        // InvalidRequest found before the id
        let (e, id) = rejected(br#"{"method":5,"jsonrpc":"2.0","id":9}"#);
        assert_eq!(e.code(), INVALID_REQUEST);
        assert_eq!(id.as_deref(), Some("9"));
        // InvalidRequest decided at the end
        let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":2.5e1,"method":"ping","result":1}"#);
        assert_eq!(e.code(), INVALID_REQUEST);
        assert_eq!(id.as_deref(), Some("2.5e1"));
        // Parse error after the id
        let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":11,"method":"ping","#);
        assert_eq!(e.code(), PARSE);
        assert_eq!(id.as_deref(), Some("11"));
        // Parse error before the id
        let (e, id) = rejected(br#"{"jsonrpc":"2.0","method":"ping",,"id":11}"#);
        assert_eq!(e.code(), PARSE);
        assert_eq!(id, None);
        // Duplicate id: ambiguous, not echoed
        let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":1,"method":"ping","id":2}"#);
        assert_eq!(e.code(), INVALID_REQUEST);
        assert_eq!(id, None);
        let (_, id) = rejected(br#"{"jsonrpc":"2.0","id":1,"method":"ping","\u0069d":1}"#);
        assert_eq!(id, None);
        // An "id" inside params is not the message id
        let (_, id) = rejected(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"id":4}}"#);
        assert_eq!(id, None);
    }

    #[test]
    fn method_must_be_string() {
        for m in ["1", "null", "{}", "[\"tools/call\"]", "true"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{m}}}"#);
            assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
        }
    }

    #[test]
    fn params_must_be_object_or_array() {
        for p in ["1", "null", "\"x\"", "true"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{p}}}"#);
            assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
        }
        ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,2]}"#);
        ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}"#);
    }

    // ----- params.name / params.uri -----

    #[test]
    fn tools_call_and_prompts_get_need_name() {
        for method in ["tools/call", "prompts/get"] {
            for params in [
                "",
                r#","params":{}"#,
                r#","params":["echo"]"#,
                r#","params":{"name":1}"#,
                r#","params":{"name":null}"#,
                r#","params":{"name":{"x":"echo"}}"#,
                r#","params":{"Name":"echo"}"#,
                r#","params":{"uri":"echo"}"#,
                r#","params":{"arguments":{"name":"echo"}}"#,
            ] {
                let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#);
                assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
            }
            // name at the top level is not params.name
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"name":"echo","method":"{method}"}}"#);
            assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
        }
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greet","arguments":{"who":"x"}}}"#,
        );
        assert_eq!(m.name.as_deref(), Some("greet"));
        assert_eq!(m.uri, None);
        // Notifications follow the same rule.
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#),
            INVALID_PARAMS
        );
    }

    #[test]
    fn resources_need_uri() {
        for method in [
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"uri":"file:///a%20b"}}}}"#
            );
            let m = ok(&body);
            assert_eq!(m.uri.as_deref(), Some("file:///a%20b"));
            assert_eq!(m.name, None);
            for params in [
                "",
                r#","params":{}"#,
                r#","params":{"name":"x"}"#,
                r#","params":{"uri":5}"#,
                r#","params":["file:///a"]"#,
            ] {
                let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#);
                assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
            }
        }
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x:\/\/\u00e9"}}"#,
        );
        assert_eq!(m.uri.as_deref(), Some("x://é"));
    }

    #[test]
    fn name_and_uri_only_for_their_methods() {
        let m =
            ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"a","uri":"b"}}"#);
        assert_eq!((m.name, m.uri), (None, None));
        let m =
            ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","uri":"b"}}"#);
        assert_eq!((m.name.as_deref(), m.uri), (Some("a"), None));
    }

    #[test]
    fn params_before_method() {
        let m = ok(
            r#"{"params":{"arguments":{"name":"no"},"name":"echo"},"id":1,"method":"tools/call","jsonrpc":"2.0"}"#,
        );
        assert_eq!(m.method.as_deref(), Some("tools/call"));
        assert_eq!(m.name.as_deref(), Some("echo"));
        let m = ok(r#"{"params":{"uri":"u"},"method":"resources/read","jsonrpc":"2.0","id":"i"}"#);
        assert_eq!(m.uri.as_deref(), Some("u"));
    }

    #[test]
    fn escaped_names_are_decoded() {
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"ec\u0068o"}}"#,
        );
        assert_eq!(m.name.as_deref(), Some("echo"));
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools\/call","p\u0061rams":{"name":"a\"b\\c\n\u00e9\ud83d\ude00"}}"#,
        );
        assert_eq!(m.method.as_deref(), Some("tools/call"));
        assert_eq!(m.name.as_deref(), Some("a\"b\\c\né😀"));
    }

    #[test]
    fn nul_in_method_is_refused_and_kept_in_names() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":{"name":"x"}}"#;
        assert_eq!(code(body), INVALID_REQUEST);
        let m =
            ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ec\u0000ho"}}"#);
        assert_eq!(m.name.as_deref(), Some("ec\0ho"));
    }

    // ----- duplicate keys -----

    #[test]
    fn duplicate_keys() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","m\u0065thod":"ping"}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{},"params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1,"\u0078":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","\ud83d\ude00":1,"😀":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","":1,"":2}"#,
        ] {
            let (e, _) = rejected(body.as_bytes());
            assert_eq!(e.code(), INVALID_REQUEST, "{body}");
            assert!(e.detail().contains("duplicate"), "{body}: {e}");
        }
    }

    #[test]
    fn duplicate_key_deep() {
        let body = with_arg(r#"{"b":{"c":{"d":{"e":1,"f":2,"e":3}}}}"#);
        let (e, id) = rejected(body.as_bytes());
        assert_eq!(e.code(), INVALID_REQUEST);
        assert!(e.detail().contains("duplicate"));
        assert_eq!(id.as_deref(), Some("1"));
        // inside arrays too
        let body = with_arg(r#"[[{"k":1}],[{"k":1,"k":2}]]"#);
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST);
    }

    #[test]
    fn same_key_in_different_objects_is_fine() {
        ok(&with_arg(
            r#"{"a":{"a":{"a":1},"b":{"a":2}},"b":[{"a":1},{"a":1}]}"#,
        ));
        ok(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","params":{"name":"y","method":"z"}}}"#,
        );
    }

    #[test]
    fn keys_are_case_sensitive() {
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"ping","METHOD":"x","params":{"Name":"a","NAME":"b"}}"#,
        );
        assert_eq!(m.method.as_deref(), Some("ping"));
        let m = ok(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"a","name":"b"}}"#,
        );
        assert_eq!(m.name.as_deref(), Some("b"));
    }

    // ----- top level -----

    #[test]
    fn batch_and_non_objects() {
        let (e, id) = rejected(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!(
            e,
            ParseError::InvalidRequest("batch requests are not supported".into())
        );
        assert_eq!(id, None);
        assert_eq!(code(b"[]"), INVALID_REQUEST);
        for body in ["1", "\"x\"", "null", "true", " 0 "] {
            assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
        }
        // An invalid batch is a parse error first.
        assert_eq!(code(b"[{]"), PARSE);
    }

    #[test]
    fn whitespace_and_trailing_data() {
        ok(" \t\r\n{\"jsonrpc\":\"2.0\" , \"method\" :\r\n\"ping\",\t\"id\":1 } \n\t\r ");
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        for tail in [
            " {}", "{}", "x", "\0", ",", "]", "}", " 1", "\u{a0}", "\x0c",
        ] {
            let body = format!("{good}{tail}");
            let (e, id) = rejected(body.as_bytes());
            assert_eq!(e.code(), PARSE, "{body:?}");
            assert_eq!(id.as_deref(), Some("1"));
        }
        for head in ["\x0c", "\u{a0}", "\u{feff}", "\x0b", "\0"] {
            let body = format!("{head}{good}");
            assert_eq!(code(body.as_bytes()), PARSE, "{body:?}");
        }
    }

    // ----- UTF-8 -----

    #[test]
    fn utf8_valid_sequences() {
        for raw in [
            "é",
            "€",
            "😀",
            "\u{7f}",
            "\u{80}",
            "\u{7ff}",
            "\u{800}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fffd}",
            "\u{ffff}",
            "\u{10000}",
            "\u{10ffff}",
            "日本語テキスト with ascii between ü and ß",
        ] {
            let body = in_string(raw.as_bytes());
            assert!(parse(&body).is_ok(), "{raw:?}");
            // also as a decoded name
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{raw}"}}}}"#
            );
            assert_eq!(ok(&body).name.as_deref(), Some(raw));
        }
    }

    // ----- depth -----

    fn nested(depth: usize, open: &str, close: &str) -> String {
        // The message object is depth 1; nest `depth - 1` more levels inside it.
        let inner = depth - 1;
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","x":{}1{}}}"#,
            open.repeat(inner),
            close.repeat(inner)
        )
    }

    #[test]
    fn depth_limit() {
        let limits = ParseLimits::default();
        assert_eq!(limits.max_depth, 64);
        ok(&nested(64, "[", "]"));
        ok(&nested(64, r#"{"a":"#, "}"));
        let (e, id) = rejected(nested(65, "[", "]").as_bytes());
        assert_eq!(e.code(), PARSE);
        assert!(e.detail().contains("nesting"));
        assert_eq!(id.as_deref(), Some("1"));
        assert_eq!(code(nested(65, r#"{"a":"#, "}").as_bytes()), PARSE);
        assert_eq!(code(nested(65, r#"[{"a":"#, "}]").as_bytes()), PARSE);

        let small = ParseLimits { max_depth: 2 };
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1}}"#;
        assert!(parse_message(body, &small).is_ok());
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[]}}"#;
        assert_eq!(parse_message(body, &small).unwrap_err().0.code(), PARSE);
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert_eq!(
            parse_message(body, &ParseLimits { max_depth: 0 })
                .unwrap_err()
                .0
                .code(),
            PARSE
        );
        assert!(parse_message(body, &ParseLimits { max_depth: 1 }).is_ok());
    }

    // ----- what the JSON reader finds, as message errors -----

    #[test]
    fn json_outcomes_in_messages() {
        // Number ids are kept as their raw text.
        for n in [
            "0",
            "-0",
            "1.5e10",
            "-1.5E+10",
            "123456789012345678901234567890",
            "1e-400",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
            assert_eq!(ok(&body).id.as_deref(), Some(n));
        }
        // A number no double holds is refused wherever it is (CEL could not read it).
        for n in ["01", "+1", "1.", "NaN", "1e400", "-1e999"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
            assert_eq!(code(body.as_bytes()), PARSE, "{n}");
        }
        // Valid JSON that is no message object, and invalid JSON.
        assert_eq!(code(b"1"), INVALID_REQUEST);
        assert_eq!(code(b"null"), INVALID_REQUEST);
        assert_eq!(code(b"nul"), PARSE);
        assert_eq!(code(br#"{"a":1"#), PARSE);
        assert_eq!(code(with_arg(r#""\u12""#).as_bytes()), PARSE);
        let (e, _) = rejected(&in_string(b"\xff"));
        assert!(e.detail().contains("UTF-8"), "{e}");
        // Without a depth limit the iterative reader still does not recurse.
        let mut balanced = vec![b'['; 500_000];
        balanced.extend(std::iter::repeat_n(b']', 500_000));
        let unlimited = ParseLimits {
            max_depth: usize::MAX,
        };
        assert_eq!(
            parse_message(&balanced, &unlimited).unwrap_err().0.code(),
            INVALID_REQUEST
        );
    }

    // ----- errors -----

    #[test]
    fn error_codes_and_display() {
        let e = ParseError::Parse("empty body".into());
        assert_eq!((e.code(), e.detail()), (-32700, "empty body"));
        assert_eq!(e.to_string(), "Parse error: empty body");
        let e = ParseError::InvalidRequest("x".into());
        assert_eq!((e.code(), e.message()), (-32600, "Invalid Request"));
        let e = ParseError::InvalidParams("y".into());
        assert_eq!(
            (e.code(), e.to_string()),
            (-32602, "Invalid params: y".into())
        );
        // Details never echo input text.
        let (e, _) = rejected(b"{\"<script>\":\"\xff\"}");
        assert!(!e.detail().contains("script"), "{e}");
    }

    // ----- differential test against serde_json -----

    /// Renders a string literal, escaping characters at random.
    fn gen_string(rng: &mut Rng, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            let forced = matches!(c, '"' | '\\') || (c as u32) < 0x20;
            if !forced && !rng.chance(15) {
                out.push(c);
                continue;
            }
            match (c, rng.below(3)) {
                ('"', 0) => out.push_str("\\\""),
                ('\\', 0) => out.push_str("\\\\"),
                ('/', 0) => out.push_str("\\/"),
                ('\n', 0) => out.push_str("\\n"),
                ('\t', 0) => out.push_str("\\t"),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if rng.chance(50) {
                            out.push_str(&format!("\\u{u:04x}"));
                        } else {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                }
            }
        }
        out.push('"');
    }

    const WORDS: &[&str] = &[
        "",
        "a",
        "name",
        "uri",
        "method",
        "id",
        "jsonrpc",
        "params",
        "result",
        "error",
        "Name",
        "tools/call",
        "prompts/get",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "notifications/initialized",
        "tools/call\0",
        "é😀\u{ffff}",
        "quote\"back\\slash/",
        "line\nbreak\ttab",
        "file:///tmp/x",
        "2.0",
        "completion/complete",
        "ref/prompt",
        "ref/resource",
        "tools/list ",
        "notifications/../tools/call",
        "tools//call",
    ];

    const NUMBERS: &[&str] = &[
        "1e400",
        "-1e999",
        "0",
        "-0",
        "1",
        "42",
        "-7",
        "3.25",
        "1e3",
        "-2.5E-3",
        "1E+2",
        "100000000000000000000",
    ];

    fn ws(rng: &mut Rng, out: &mut String) {
        if rng.chance(20) {
            out.push_str(rng.pick(&[" ", "\n", "\t", "\r\n", "  "]));
        }
    }

    fn gen_value(rng: &mut Rng, depth: usize, out: &mut String) {
        let kind = if depth > 6 {
            rng.below(4)
        } else {
            rng.below(7)
        };
        match kind {
            0 => {
                let w = rng.pick(WORDS);
                gen_string(rng, w, out);
            }
            1 => out.push_str(rng.pick(NUMBERS)),
            2 => out.push_str(rng.pick(&["true", "false", "null"])),
            3 => {
                let w = rng.pick(WORDS);
                gen_string(rng, w, out);
            }
            4 | 5 => {
                out.push('{');
                let n = rng.below(4);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    let k = rng.pick(WORDS);
                    gen_string(rng, k, out);
                    ws(rng, out);
                    out.push(':');
                    gen_value(rng, depth + 1, out);
                }
                out.push('}');
            }
            _ => {
                out.push('[');
                let n = rng.below(4);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    gen_value(rng, depth + 1, out);
                    ws(rng, out);
                }
                out.push(']');
            }
        }
    }

    /// A message-like object: mostly the right members with plausible values.
    fn gen_message(rng: &mut Rng) -> String {
        let mut members: Vec<(&str, String)> = Vec::new();
        let val = |rng: &mut Rng, f: &dyn Fn(&mut Rng, &mut String)| {
            let mut s = String::new();
            f(rng, &mut s);
            s
        };
        if rng.chance(90) {
            let v = if rng.chance(90) {
                val(rng, &|r, o| gen_string(r, "2.0", o))
            } else {
                val(rng, &|r, o| gen_value(r, 1, o))
            };
            members.push(("jsonrpc", v));
        }
        if rng.chance(75) {
            let v = match rng.below(4) {
                0 => rng.pick(NUMBERS).to_string(),
                1 => val(rng, &|r, o| gen_value(r, 1, o)),
                _ => val(rng, &|r, o| {
                    let w = r.pick(WORDS);
                    gen_string(r, w, o)
                }),
            };
            members.push(("id", v));
        }
        if rng.chance(80) {
            let v = if rng.chance(90) {
                val(rng, &|r, o| {
                    let w = r.pick(&WORDS[11..]);
                    gen_string(r, w, o)
                })
            } else {
                val(rng, &|r, o| gen_value(r, 1, o))
            };
            members.push(("method", v));
        }
        if rng.chance(70) {
            let v = if rng.chance(80) {
                val(rng, &|r, o| {
                    o.push('{');
                    let mut first = true;
                    for key in ["name", "uri", "arguments", "Name", "name", "n\\u0061me"] {
                        if r.chance(35) {
                            if !first {
                                o.push(',');
                            }
                            first = false;
                            o.push('"');
                            o.push_str(key);
                            o.push_str("\":");
                            if r.chance(70) {
                                let w = r.pick(WORDS);
                                gen_string(r, w, o);
                            } else {
                                gen_value(r, 2, o);
                            }
                        }
                    }
                    if r.chance(30) {
                        if !first {
                            o.push(',');
                        }
                        first = false;
                        o.push_str("\"ref\":{");
                        let mut inner = true;
                        for key in ["type", "name", "uri"] {
                            if r.chance(70) {
                                if !inner {
                                    o.push(',');
                                }
                                inner = false;
                                o.push('"');
                                o.push_str(key);
                                o.push_str("\":");
                                match r.below(4) {
                                    0 => gen_value(r, 2, o),
                                    1 => gen_string(r, "ref/prompt", o),
                                    2 => gen_string(r, "ref/resource", o),
                                    _ => {
                                        let w = r.pick(WORDS);
                                        gen_string(r, w, o);
                                    }
                                }
                            }
                        }
                        o.push('}');
                    }
                    if r.chance(30) {
                        if !first {
                            o.push(',');
                        }
                        o.push_str("\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":");
                        if r.chance(70) {
                            gen_string(r, "2026-07-28", o);
                        } else {
                            gen_value(r, 1, o);
                        }
                        o.push('}');
                    }
                    o.push('}');
                })
            } else {
                val(rng, &|r, o| gen_value(r, 1, o))
            };
            members.push(("params", v));
        }
        for key in ["result", "error"] {
            if rng.chance(12) {
                let v = val(rng, &|r, o| gen_value(r, 1, o));
                members.push((key, v));
            }
        }
        if rng.chance(10) && !members.is_empty() {
            let dup = members[rng.below(members.len())].clone();
            members.push(dup);
        }
        if rng.chance(20) {
            let v = val(rng, &|r, o| gen_value(r, 1, o));
            members.push((rng.pick(&["Method", "extra", "_meta"]), v));
        }
        // Shuffle.
        for i in (1..members.len()).rev() {
            let j = rng.below(i + 1);
            members.swap(i, j);
        }
        let mut out = String::new();
        ws(rng, &mut out);
        out.push('{');
        for (i, (k, v)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            ws(rng, &mut out);
            gen_string(rng, k, &mut out);
            ws(rng, &mut out);
            out.push(':');
            ws(rng, &mut out);
            out.push_str(v);
        }
        out.push('}');
        ws(rng, &mut out);
        out
    }

    const NOISE: &[u8] = b"{}[]\":,\\u0123456789abcdefABCDEF.eE+-tfnrl \t\n\r\x00\x1f\x7f";
    const HIGH: &[&[u8]] = &[
        b"\xc3\xa9",
        b"\xff",
        b"\x80",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe2\x82",
        b"\xef\xbb\xbf",
        b"\\ud800",
        b"\\udc00",
        b"\\ud83d\\ude00",
    ];

    fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
        for _ in 0..1 + rng.below(3) {
            let len = body.len();
            let at = if len == 0 { 0 } else { rng.below(len + 1) };
            match rng.below(6) {
                0 if at < len => body[at] = rng.pick(NOISE),
                1 => body.insert(at.min(len), rng.pick(NOISE)),
                2 if at < len => {
                    body.remove(at);
                }
                3 => {
                    let seq = rng.pick(HIGH);
                    body.splice(at..at, seq.iter().copied());
                }
                4 => body.truncate(at),
                _ if len > 0 => {
                    // Duplicate a random slice somewhere.
                    let a = rng.below(len);
                    let b = (a + rng.below(12)).min(len);
                    let piece = body[a..b].to_vec();
                    let at = rng.below(len + 1);
                    body.splice(at..at, piece);
                }
                _ => {}
            }
        }
    }

    /// Independent reference: duplicate keys (after decoding) and maximum nesting,
    /// computed by serde_json over the same bytes.
    struct Shape {
        dup: bool,
        depth: usize,
    }

    impl<'de> serde::Deserialize<'de> for Shape {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ShapeVisitor)
        }
    }

    struct ShapeVisitor;

    impl<'de> serde::de::Visitor<'de> for ShapeVisitor {
        type Value = Shape;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_unit<E>(self) -> Result<Shape, E> {
            Ok(Shape {
                dup: false,
                depth: 0,
            })
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
            let mut s = Shape {
                dup: false,
                depth: 0,
            };
            while let Some(e) = a.next_element::<Shape>()? {
                s.dup |= e.dup;
                s.depth = s.depth.max(e.depth);
            }
            s.depth += 1;
            Ok(s)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
            let mut s = Shape {
                dup: false,
                depth: 0,
            };
            let mut seen = HashSet::new();
            while let Some((k, v)) = a.next_entry::<String, Shape>()? {
                s.dup |= !seen.insert(k) | v.dup;
                s.depth = s.depth.max(v.depth);
            }
            s.depth += 1;
            Ok(s)
        }
    }

    /// What the rules say, computed from serde_json's view of the same bytes.
    /// Err carries the expected error code.
    fn reference(body: &[u8], limits: &ParseLimits) -> Option<Result<McpMessage, i32>> {
        use serde_json::Value;
        let shape = match serde_json::from_slice::<Shape>(body) {
            Ok(s) => s,
            // A number out of a double's range is refused as a parse error.
            Err(e) if e.to_string().contains("out of range") => return Some(Err(PARSE)),
            Err(e) if e.to_string().contains("recursion limit") => return Some(Err(PARSE)),
            Err(_) => return Some(Err(PARSE)),
        };
        if body.starts_with(b"\xef\xbb\xbf") || shape.depth > limits.max_depth {
            return Some(Err(PARSE));
        }
        let v: Value = serde_json::from_slice(body).unwrap();
        let invalid = Some(Err(INVALID_REQUEST));
        let Value::Object(obj) = &v else {
            return invalid;
        };
        if shape.dup || obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
            return invalid;
        }
        let id = obj.get("id");
        if let Some(id) = id {
            if !(id.is_string() || id.is_number()) {
                return invalid;
            }
        }
        if let Some(p) = obj.get("params") {
            if !(p.is_object() || p.is_array()) {
                return invalid;
            }
        }
        if let Some(e) = obj.get("error") {
            if !e.is_object() {
                return invalid;
            }
        }
        let responding = obj.contains_key("result") || obj.contains_key("error");
        let method = match obj.get("method") {
            None => {
                if !responding
                    || (obj.contains_key("result") && obj.contains_key("error"))
                    || id.is_none()
                {
                    return invalid;
                }
                return Some(Ok(McpMessage {
                    kind: MessageKind::Response,
                    method: None,
                    id: None, // compared separately
                    name: None,
                    uri: None,
                    protocol_version: None,
                    init_version: None,
                    subscriptions: Vec::new(),
                    completion_ref: None,
                }));
            }
            Some(Value::String(m)) => m.clone(),
            Some(_) => return invalid,
        };
        if responding {
            return invalid;
        }
        let malformed = method.chars().any(|c| c.is_whitespace() || c.is_control())
            || method
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..");
        if malformed {
            return invalid;
        }
        let param = |key: &str| {
            obj.get("params")
                .and_then(|p| p.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let mut completion_ref = None;
        if method == "completion/complete" {
            let r = obj.get("params").and_then(|p| p.get("ref"));
            let field = |k: &str| r.and_then(|r| r.get(k)).and_then(Value::as_str);
            let (judged_as, key, value) = match field("type") {
                _ if !r.is_some_and(Value::is_object) => return Some(Err(INVALID_PARAMS)),
                Some("ref/prompt") => ("prompts/get", Param::Name, field("name")),
                Some("ref/resource") => ("resources/read", Param::Uri, field("uri")),
                _ => return Some(Err(INVALID_PARAMS)),
            };
            let Some(value) = value else {
                return Some(Err(INVALID_PARAMS));
            };
            completion_ref = Some(CompletionRef {
                judged_as,
                key,
                value: value.to_owned(),
            });
        }
        let (mut name, mut uri) = (None, None);
        match method.as_str() {
            "tools/call" | "prompts/get" => {
                name = param("name");
                if name.is_none() || !obj["params"].is_object() {
                    return Some(Err(INVALID_PARAMS));
                }
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                uri = param("uri");
                if uri.is_none() || !obj["params"].is_object() {
                    return Some(Err(INVALID_PARAMS));
                }
            }
            _ => {}
        }
        let version = obj
            .get("params")
            .and_then(|p| p.get("_meta"))
            .filter(|m| m.is_object())
            .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"));
        let protocol_version = match version {
            None => None,
            Some(Value::String(v)) => Some(v.clone()),
            Some(_) => return Some(Err(INVALID_PARAMS)),
        };
        let init_version = (method == "initialize")
            .then(|| param("protocolVersion"))
            .flatten();
        let mut subscriptions = Vec::new();
        if method == "subscriptions/listen" {
            let list = obj
                .get("params")
                .and_then(|p| p.get("notifications"))
                .filter(|n| n.is_object())
                .and_then(|n| n.get("resourceSubscriptions"));
            match list {
                None => {}
                Some(Value::Array(items)) => {
                    for i in items {
                        match i.as_str() {
                            Some(u) => subscriptions.push(u.to_owned()),
                            None => return Some(Err(INVALID_PARAMS)),
                        }
                    }
                }
                Some(_) => return Some(Err(INVALID_PARAMS)),
            }
        }
        Some(Ok(McpMessage {
            kind: if id.is_some() {
                MessageKind::Request
            } else {
                MessageKind::Notification
            },
            method: Some(method),
            id: None,
            name,
            uri,
            protocol_version,
            init_version,
            subscriptions,
            completion_ref,
        }))
    }

    fn check_against_serde(body: &[u8], limits: &ParseLimits, counts: &mut [usize; 4]) {
        let ours = parse_message(body, limits);
        let serde_ok = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
        if ours.is_ok() {
            assert!(serde_ok, "we accepted what serde_json rejects: {body:x?}");
        }
        if !serde_ok {
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                assert!(
                    matches!(ours, Err((ParseError::Parse(_), _))),
                    "serde_json rejects ({e}) but we said {ours:?}: {:?}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        let Some(expected) = reference(body, limits) else {
            return;
        };
        let text = String::from_utf8_lossy(body);
        match (&ours, &expected) {
            (Ok(m), Ok(want)) => {
                counts[0] += 1;
                let mut got = m.clone();
                got.id = None;
                assert_eq!(&got, want, "{text}");
                // The raw id, re-parsed, equals serde_json's id.
                let v: serde_json::Value = serde_json::from_slice(body).unwrap();
                match &m.id {
                    Some(raw) => assert_eq!(
                        serde_json::from_str::<serde_json::Value>(raw).unwrap(),
                        v["id"],
                        "{text}"
                    ),
                    None => assert!(v.get("id").is_none(), "{text}"),
                }
            }
            (Err((e, id)), Err(want)) => {
                counts[match *want {
                    PARSE => 1,
                    INVALID_REQUEST => 2,
                    _ => 3,
                }] += 1;
                assert_eq!(e.code(), *want, "{text}: {e}");
                if let Some(raw) = id {
                    // Any echoed id is a complete JSON string or number.
                    let v: serde_json::Value = serde_json::from_str(raw).unwrap();
                    assert!(v.is_string() || v.is_number(), "{text}");
                }
            }
            _ => panic!("ours {ours:?} vs reference {expected:?}: {text}"),
        }
    }

    #[test]
    fn differential_against_serde_json() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let limits = ParseLimits { max_depth: 8 };
        let mut counts = [0usize; 4];
        for round in 0..20_000 {
            let mut body = gen_message(&mut rng).into_bytes();
            if round % 3 != 0 {
                mutate(&mut rng, &mut body);
            }
            check_against_serde(&body, &limits, &mut counts);
            check_against_serde(&body, &ParseLimits::default(), &mut [0; 4]);
        }
        // Random values (non-messages) too.
        for _ in 0..5_000 {
            let mut s = String::new();
            gen_value(&mut rng, 0, &mut s);
            let mut body = s.into_bytes();
            if rng.chance(50) {
                mutate(&mut rng, &mut body);
            }
            check_against_serde(&body, &limits, &mut counts);
        }
        println!("differential outcomes [ok, parse, invalid request, invalid params]: {counts:?}");
        // Every outcome is well represented.
        assert!(counts.iter().all(|&c| c > 500), "{counts:?}");
    }

    // ----- speed (run with --release --ignored --nocapture) -----

    fn time_it(label: &str, body: &[u8], expect_ok: bool) {
        let limits = ParseLimits::default();
        assert_eq!(parse_message(body, &limits).is_ok(), expect_ok, "{label}");
        let runs = 20;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            std::hint::black_box(parse_message(std::hint::black_box(body), &limits).is_ok());
        }
        let per = start.elapsed() / runs;
        println!("{label}: {} bytes in {per:?}", body.len());
    }

    #[test]
    #[ignore]
    fn speed_1mib() {
        const MIB: usize = 1 << 20;
        let big_string = with_arg(&format!("\"{}\"", "lorem ipsum dolor ".repeat(MIB / 18)));
        time_it("1 MiB ASCII string argument", big_string.as_bytes(), true);

        let escaped = with_arg(&format!(
            "\"{}\"",
            "line\\n\\u00e9 \\\"q\\\" ".repeat(MIB / 20)
        ));
        time_it("1 MiB escaped string argument", escaped.as_bytes(), true);

        let unicode = with_arg(&format!("\"{}\"", "日本語テキスト😀é ".repeat(MIB / 30)));
        time_it("1 MiB non-ASCII string argument", unicode.as_bytes(), true);

        let mut numbers = String::from("[");
        let mut i = 0u64;
        while numbers.len() < MIB {
            numbers.push_str(&format!("{},-{}.5e3,", i * 7919 % 100000, i % 977));
            i += 1;
        }
        numbers.push_str("0]");
        time_it(
            "1 MiB array of numbers",
            with_arg(&numbers).as_bytes(),
            true,
        );

        let mut keys = String::from("{");
        let mut k = 0;
        while keys.len() < MIB {
            keys.push_str(&format!("\"key{k}\":{k},"));
            k += 1;
        }
        keys.push_str("\"end\":0}");
        time_it(
            &format!("1 MiB object with {k} keys"),
            with_arg(&keys).as_bytes(),
            true,
        );

        let nested_small = with_arg(&format!(
            "[{}0]",
            r#"{"a":[1,"x",{"b":null,"c":true}],"d":-2.5}, "#.repeat(MIB / 44)
        ));
        time_it(
            "1 MiB of small nested objects",
            nested_small.as_bytes(),
            true,
        );
    }

    #[test]
    fn malformed_method_names_are_invalid_requests() {
        for m in [
            "tools/list ",
            " tools/list",
            "tools/list/",
            "/tools/list",
            "tools//list",
            "notifications/../tools/call",
            "notifications/./initialized",
            "tools/\\u0000list",
            "tools/list\\n",
            "tools/\\u00a0list",
            "tools/\\u2028list",
            "..",
            "",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
            let (err, id) = rejected(body.as_bytes());
            assert_eq!(
                err.code(),
                crate::jsonrpc::INVALID_REQUEST,
                "{m:?}: {err:?}"
            );
            assert_eq!(id.as_deref(), Some("1"), "{m:?}");
        }
        for m in [
            "tools/list",
            "notifications/initialized",
            "x",
            "a.b/c..d",
            "é/ü",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
            ok(&body);
        }
    }
}
