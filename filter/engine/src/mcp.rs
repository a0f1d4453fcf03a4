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
use std::ops::Range;

use crate::json::{self, into_string, SyntaxError, Val};
use crate::request::McpOp;
/// Which member of `params` names an item (re-exported: [`CompletionRef`] holds one).
pub use mcp_access_bundle::mcp_methods::Param;
use mcp_access_bundle::mcp_methods::{self, Method, MethodSpec, COMPLETION_COMPLETE};

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
    /// JSON-RPC `method` (decoded, resolved against the method table), None for responses.
    pub method: Option<Method>,
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
    /// Where a request's or notification's `params` is in the body (`body[params]`), for
    /// [`params_value`].
    pub params: Option<Range<usize>>,
    /// Where `params.arguments` is, when `params` is an object that has it.
    pub arguments: Option<Range<usize>>,
}

/// The operation a message performs: a client's response is a reply, anything else a call
/// of its method naming `param` (its `params.name` or `params.uri`).
pub(crate) fn op_of(kind: MessageKind, method: Option<Method>, param: Option<String>) -> McpOp {
    match kind {
        MessageKind::Response => McpOp::Reply,
        MessageKind::Request | MessageKind::Notification => McpOp::Call {
            method: method.unwrap_or(Method::Other(String::new())),
            param,
        },
    }
}

/// What of `params` the request's judges and records read, as serde_json values: all of it
/// for CEL (`cel`), else only `params.arguments` (as the one member of an object) for
/// decision records that keep them (`records`); None when neither is wanted or the body has
/// none. `params` and `arguments` are the spans [`parse_message`] found in `body`, so only
/// that slice is read again. The body is valid strict JSON with every number a finite
/// double: serde_json reads it the same way; if it ever could not, the error says so (CEL
/// must not see `params` emptier than the body is).
pub(crate) fn params_value(
    body: &[u8],
    (params, arguments): (Option<Range<usize>>, Option<Range<usize>>),
    cel: bool,
    records: bool,
) -> Result<Option<serde_json::Value>, ParseError> {
    let read = |span: Option<Range<usize>>| match span.and_then(|r| body.get(r)) {
        Some(slice) => serde_json::from_slice(slice)
            .map(Some)
            .map_err(|_| ParseError::Parse("params cannot be read as CEL values".to_owned())),
        None => Ok(None),
    };
    if cel {
        return read(params);
    }
    if !records {
        return Ok(None);
    }
    let arguments = read(arguments)?;
    Ok(arguments
        .map(|a| serde_json::Value::Object([("arguments".to_owned(), a)].into_iter().collect())))
}

/// What a `completion/complete` completes for: judged as a call of it (docs/semantics.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRef {
    /// `prompts/get` or `resources/read`.
    pub judged_as: &'static MethodSpec,
    /// Which member names it.
    pub key: Param,
    /// The prompt's name or the resource's URI (decoded).
    pub value: String,
}

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
    // The raw id, copied only if an error echoes it.
    let id = parser.id_raw();
    match outcome {
        Err(e) => Err((e, id_text(id))),
        Ok(()) => parser.finish().map_err(|e| (e, id_text(id))),
    }
}

/// The raw id as text (a complete, validated JSON token, hence valid UTF-8).
fn id_text(raw: Option<&[u8]>) -> Option<String> {
    raw.and_then(|raw| std::str::from_utf8(raw).ok())
        .map(str::to_owned)
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
        .as_bytes()
        .split(|&b| b == b'/')
        .any(|segment| matches!(segment, b"" | b"." | b".."))
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
    /// `params.arguments` (only its span is kept).
    Arguments,
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
    method: Option<Method>,
    params: ParamsKind,
    /// Where the first `params` and `params.arguments` are.
    params_span: Option<Range<usize>>,
    arguments_span: Option<Range<usize>>,
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
            params_span: None,
            arguments_span: None,
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

    /// The raw id an error echoes (none when it is ambiguous).
    fn id_raw(&self) -> Option<&'a [u8]> {
        if self.id_ambiguous {
            return None;
        }
        self.id
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
        let id = id_text(self.id);
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
                params: None,
                arguments: None,
            });
        };
        if responding {
            return invalid("message has both \"method\" and \"result\"/\"error\"");
        }
        if let Some(problem) = malformed_method(method.as_str()) {
            return invalid(problem);
        }
        let completion_ref = match method.as_str() == COMPLETION_COMPLETE {
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
        if let Some(param) = method.param() {
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
        let listen = method.subscribes_as().is_some();
        if listen && self.subscriptions_bad {
            return Err(ParseError::InvalidParams(format!(
                "{method} requires params.notifications.resourceSubscriptions to be an array of strings"
            )));
        }
        let initialize = method.as_str() == mcp_methods::INITIALIZE;
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
            params: self.params_span,
            arguments: self.arguments_span,
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
            Some("ref/prompt") => (
                mcp_methods::PROMPTS_GET_SPEC,
                Param::Name,
                self.ref_name.take(),
            ),
            Some("ref/resource") => (
                mcp_methods::RESOURCES_READ_SPEC,
                Param::Uri,
                self.ref_uri.take(),
            ),
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
                b"arguments" => Slot::Arguments,
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

    fn closed(&mut self, slot: Slot, start: usize, end: usize) {
        let span = match slot {
            Slot::Params => &mut self.params_span,
            Slot::Arguments => &mut self.arguments_span,
            _ => return,
        };
        // A second one is a duplicate key, already refused.
        if span.is_none() {
            *span = Some(start..end);
        }
    }
}

impl<'a> Parser<'a> {
    /// Applies the JSON-RPC rules for the member a value belongs to.
    fn on_value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), ParseError> {
        match slot {
            Slot::Ignore | Slot::Meta | Slot::Notifications | Slot::Arguments => {}
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
                            // Resolved here, once: a known name is not copied.
                            let known = std::str::from_utf8(&s).ok().and_then(mcp_methods::lookup);
                            self.method = Some(match known {
                                Some(spec) => Method::Known(spec),
                                None => Method::Other(into_string(s)?),
                            });
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
            // Members of `params`: the first string of each is kept.
            Slot::Name => keep_first(&mut self.name, val)?,
            Slot::Uri => keep_first(&mut self.uri, val)?,
            Slot::InitVersion => keep_first(&mut self.init_version, val)?,
            Slot::RefType => keep_first(&mut self.ref_type, val)?,
            Slot::RefName => keep_first(&mut self.ref_name, val)?,
            Slot::RefUri => keep_first(&mut self.ref_uri, val)?,
            Slot::ProtocolVersion => match val {
                Val::Str { .. } => keep_first(&mut self.protocol_version, val)?,
                _ => self.protocol_version_bad = true,
            },
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
        }
        Ok(())
    }
}

/// Keeps the first string value of a member (a repeated key is a duplicate, already refused);
/// a value of another type is left for the method's rules to find missing.
fn keep_first(field: &mut Option<String>, val: Val<'_>) -> Result<(), ParseError> {
    if let Val::Str {
        decoded: Some(s), ..
    } = val
    {
        if field.is_none() {
            *field = Some(into_string(s)?);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
