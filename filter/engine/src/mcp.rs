//! Strict, single-pass validator and extractor for one MCP JSON-RPC 2.0 message.
//!
//! [`parse_message`] checks the whole body against RFC 8259 (UTF-8 only, no BOM, no
//! trailing data, bounded nesting) and the JSON-RPC / MCP rules the filter relies on,
//! without building a DOM and without recursion (an explicit stack bounded by
//! [`ParseLimits::max_depth`]). String runs containing non-ASCII bytes are checked with
//! `std::str::from_utf8` as they are reached. Duplicate keys are rejected in every object, comparing
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

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use mcp_access_bundle::mcp_methods::{self, Param};

/// Default for [`ParseLimits::max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Objects with more keys than this switch from a linear scan to a hash set for
/// duplicate detection.
const LINEAR_KEYS: usize = 16;

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
            ParseError::Parse(_) => crate::answer::PARSE_ERROR,
            ParseError::InvalidRequest(_) => crate::answer::INVALID_REQUEST,
            ParseError::InvalidParams(_) => crate::answer::INVALID_PARAMS,
        }
    }

    /// The standard JSON-RPC message for [`code`](Self::code).
    pub fn message(&self) -> &'static str {
        match self {
            ParseError::Parse(_) => "Parse error",
            ParseError::InvalidRequest(_) => "Invalid Request",
            ParseError::InvalidParams(_) => "Invalid params",
        }
    }

    /// What exactly was wrong. Never contains input text, only offsets and byte values.
    pub fn detail(&self) -> &str {
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

/// An error plus the message's raw `id` when known (see the module docs).
pub type ParseFailure = (ParseError, Option<String>);

/// Validates `body` as one MCP JSON-RPC message and extracts what the decision needs.
pub fn parse_message(body: &[u8], limits: &ParseLimits) -> Result<McpMessage, ParseFailure> {
    let mut parser = Parser::new(body, *limits);
    let outcome = parser.run();
    let id = parser.id_text();
    match outcome {
        Err(e) => Err((e, id)),
        Ok(()) => parser.finish().map_err(|e| (e, id)),
    }
}

// ---------------------------------------------------------------------------------------
// Parser
//
// Invariant for all position arithmetic: positions never exceed `bytes.len()`, which is at
// most `isize::MAX`, so adding a small constant to a position cannot overflow `usize`.
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
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamsKind {
    Absent,
    Object,
    Array,
    Other,
}

/// One open object or array.
struct Frame<'a> {
    is_object: bool,
    role: Role,
    /// Start of this object's keys in `Parser::keys` (while `set` is None).
    keys_start: usize,
    /// This object's keys once there are more than `LINEAR_KEYS`.
    set: Option<HashSet<Cow<'a, [u8]>>>,
}

/// A scalar or container start, as seen by `on_value`.
enum Val<'a> {
    Object,
    Array,
    Str {
        decoded: Option<Cow<'a, [u8]>>,
        raw: &'a [u8],
    },
    Number(&'a [u8]),
    Literal,
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    limits: ParseLimits,
    stack: Vec<Frame<'a>>,
    /// Decoded keys of the open objects that still use linear duplicate detection.
    keys: Vec<Cow<'a, [u8]>>,
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
}

/// The `_meta` key of the per-request protocol version.
const PROTOCOL_VERSION_KEY: &[u8] = b"io.modelcontextprotocol/protocolVersion";

impl<'a> Parser<'a> {
    fn new(bytes: &'a [u8], limits: ParseLimits) -> Self {
        Parser {
            bytes,
            pos: 0,
            limits,
            stack: Vec::new(),
            keys: Vec::new(),
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

    /// Validates the whole input; records JSON-RPC problems in `self.invalid`.
    fn run(&mut self) -> Result<(), ParseError> {
        if self.bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
            return Err(syntax("UTF-8 byte order mark is not allowed"));
        }
        self.skip_ws();
        if self.pos >= self.bytes.len() {
            return Err(syntax(if self.bytes.is_empty() {
                "empty body"
            } else {
                "body contains only whitespace"
            }));
        }
        // Whether the innermost container was just opened (no value read yet).
        let mut opened = self.value(Slot::Root)?;

        while let Some(is_object) = self.stack.last().map(|f| f.is_object) {
            self.skip_ws();
            let b = self.bytes.get(self.pos).copied();
            let closer = if is_object { b'}' } else { b']' };
            if b == Some(closer) {
                self.pos += 1;
                if let Some(frame) = self.stack.pop() {
                    if frame.is_object {
                        self.keys.truncate(frame.keys_start);
                    }
                }
                opened = false;
                continue;
            }
            if !opened {
                if b != Some(b',') {
                    return Err(self.unexpected(if is_object {
                        "expected ',' or '}'"
                    } else {
                        "expected ',' or ']'"
                    }));
                }
                self.pos += 1;
                self.skip_ws();
            }
            let slot = if is_object {
                self.member_key()?
            } else {
                Slot::Ignore
            };
            opened = self.value(slot)?;
        }

        self.skip_ws();
        if self.pos < self.bytes.len() {
            return Err(ParseError::Parse(format!(
                "trailing data at offset {}",
                self.pos
            )));
        }
        Ok(())
    }

    /// Builds the result once the input is known to be valid JSON.
    fn finish(self) -> Result<McpMessage, ParseError> {
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

        let Some(method) = self.method else {
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
            });
        };
        if responding {
            return invalid("message has both \"method\" and \"result\"/\"error\"");
        }
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
        Ok(McpMessage {
            kind,
            method: Some(method),
            id,
            name,
            uri,
            protocol_version: self.protocol_version,
        })
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn unexpected(&self, expected: &str) -> ParseError {
        match self.bytes.get(self.pos) {
            None => ParseError::Parse(format!("unexpected end of input ({expected})")),
            Some(b) => ParseError::Parse(format!(
                "unexpected byte 0x{b:02x} at offset {} ({expected})",
                self.pos
            )),
        }
    }

    /// Reads `"key" :` (whitespace already skipped before the key), records the key for
    /// duplicate detection and tells which member it names.
    fn member_key(&mut self) -> Result<Slot, ParseError> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return Err(self.unexpected("expected a string key"));
        }
        let key_at = self.pos;
        self.pos += 1;
        let key = self.string_body(true)?.unwrap_or_default();

        let role = self.stack.last().map_or(Role::Other, |f| f.role);
        let slot = match role {
            Role::Top => match key.as_ref() {
                b"jsonrpc" => Slot::Jsonrpc,
                b"id" => Slot::Id,
                b"method" => Slot::Method,
                b"params" => Slot::Params,
                b"result" => Slot::Result,
                b"error" => Slot::Error,
                _ => Slot::Ignore,
            },
            Role::Params => match key.as_ref() {
                b"name" => Slot::Name,
                b"uri" => Slot::Uri,
                b"_meta" => Slot::Meta,
                _ => Slot::Ignore,
            },
            Role::Meta if key.as_ref() == PROTOCOL_VERSION_KEY => Slot::ProtocolVersion,
            Role::Meta => Slot::Ignore,
            Role::Other => Slot::Ignore,
        };

        if !self.insert_key(key) {
            if self.invalid.is_none() {
                self.invalid = Some(ParseError::InvalidRequest(format!(
                    "duplicate key at offset {key_at}"
                )));
            }
            if slot == Slot::Id {
                self.id_ambiguous = true;
            }
        }

        self.skip_ws();
        if self.bytes.get(self.pos) != Some(&b':') {
            return Err(self.unexpected("expected ':'"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(slot)
    }

    /// Adds a key to the innermost object; false if it was already there.
    fn insert_key(&mut self, key: Cow<'a, [u8]>) -> bool {
        let Some(frame) = self.stack.last_mut() else {
            return true;
        };
        if let Some(set) = frame.set.as_mut() {
            return set.insert(key);
        }
        let start = frame.keys_start;
        let existing = self.keys.get(start..).unwrap_or_default();
        if existing.iter().any(|k| k.as_ref() == key.as_ref()) {
            return false;
        }
        self.keys.push(key);
        if self.keys.len().saturating_sub(start) > LINEAR_KEYS {
            let mut set = HashSet::with_capacity(4 * LINEAR_KEYS);
            set.extend(self.keys.drain(start..));
            frame.set = Some(set);
        }
        true
    }

    /// Reads one value starting at `self.pos` (whitespace already skipped). Containers
    /// are only opened here (returns true); `run` reads their contents.
    fn value(&mut self, slot: Slot) -> Result<bool, ParseError> {
        let bytes = self.bytes;
        let start = self.pos;
        let Some(&b) = bytes.get(start) else {
            return Err(self.unexpected("expected a value"));
        };
        match b {
            b'{' | b'[' => {
                if self.stack.len() >= self.limits.max_depth {
                    return Err(ParseError::Parse(format!(
                        "nesting deeper than {} levels at offset {start}",
                        self.limits.max_depth
                    )));
                }
                self.pos += 1;
                let is_object = b == b'{';
                let role = match (slot, is_object) {
                    (Slot::Root, true) => Role::Top,
                    (Slot::Params, true) => Role::Params,
                    (Slot::Meta, true) => Role::Meta,
                    _ => Role::Other,
                };
                self.stack.push(Frame {
                    is_object,
                    role,
                    keys_start: self.keys.len(),
                    set: None,
                });
                if slot != Slot::Ignore {
                    self.on_value(slot, if is_object { Val::Object } else { Val::Array })?;
                }
                return Ok(true);
            }
            b'"' => {
                self.pos += 1;
                let want = matches!(
                    slot,
                    Slot::Jsonrpc | Slot::Method | Slot::Name | Slot::Uri | Slot::ProtocolVersion
                );
                let decoded = self.string_body(want)?;
                if slot != Slot::Ignore {
                    let raw = bytes.get(start..self.pos).unwrap_or_default();
                    self.on_value(slot, Val::Str { decoded, raw })?;
                }
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
                if slot != Slot::Ignore {
                    let raw = bytes.get(start..self.pos).unwrap_or_default();
                    self.on_value(slot, Val::Number(raw))?;
                }
            }
            b't' => self.literal(b"true", slot)?,
            b'f' => self.literal(b"false", slot)?,
            b'n' => self.literal(b"null", slot)?,
            _ => return Err(self.unexpected("expected a value")),
        }
        Ok(false)
    }

    fn literal(&mut self, word: &[u8], slot: Slot) -> Result<(), ParseError> {
        let end = self.pos + word.len();
        if self.bytes.get(self.pos..end) != Some(word) {
            return Err(ParseError::Parse(format!(
                "invalid literal at offset {}",
                self.pos
            )));
        }
        self.pos = end;
        if slot == Slot::Ignore {
            return Ok(());
        }
        self.on_value(slot, Val::Literal)
    }

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
        }
        Ok(())
    }

    /// Reads a string whose opening quote is just before `self.pos`, leaving `self.pos`
    /// after the closing quote. With `want`, returns the decoded contents (borrowed from
    /// the input when there are no escapes).
    fn string_body(&mut self, want: bool) -> Result<Option<Cow<'a, [u8]>>, ParseError> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut i = start;
        // Decoded output, created at the first escape when `want`.
        let mut buf: Option<Vec<u8>> = None;
        // Start of the input not yet copied into `buf`.
        let mut run = start;
        loop {
            let (end, non_ascii) = scan_plain(bytes, i);
            if non_ascii {
                // The run ends at an ASCII byte or the end of input, never inside a
                // well-formed sequence, so validating runs validates the whole string.
                let segment = bytes.get(i..end).unwrap_or_default();
                if let Err(e) = std::str::from_utf8(segment) {
                    return Err(ParseError::Parse(format!(
                        "invalid UTF-8 at offset {}",
                        i + e.valid_up_to()
                    )));
                }
            }
            i = end;
            let Some(&b) = bytes.get(i) else {
                return Err(ParseError::Parse(format!(
                    "unterminated string starting at offset {}",
                    start.saturating_sub(1)
                )));
            };
            match b {
                b'"' => {
                    self.pos = i + 1;
                    if !want {
                        return Ok(None);
                    }
                    let out = match buf {
                        None => Cow::Borrowed(bytes.get(start..i).unwrap_or_default()),
                        Some(mut v) => {
                            v.extend_from_slice(bytes.get(run..i).unwrap_or_default());
                            Cow::Owned(v)
                        }
                    };
                    return Ok(Some(out));
                }
                b'\\' => {
                    if want {
                        let v = buf.get_or_insert_with(Vec::new);
                        v.extend_from_slice(bytes.get(run..i).unwrap_or_default());
                    }
                    i = escape(bytes, i, buf.as_mut())?;
                    run = i;
                }
                _ => {
                    return Err(ParseError::Parse(format!(
                        "unescaped control character 0x{b:02x} in string at offset {i}"
                    )));
                }
            }
        }
    }

    /// Reads a number per the RFC 8259 grammar.
    fn number(&mut self) -> Result<(), ParseError> {
        let bytes = self.bytes;
        let start = self.pos;
        let bad = |what: &str| {
            Err(ParseError::Parse(format!(
                "invalid number at offset {start}: {what}"
            )))
        };
        let mut i = start;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'0') => {
                i += 1;
                if let Some(b'0'..=b'9') = bytes.get(i) {
                    return bad("leading zero");
                }
            }
            Some(b'1'..=b'9') => i = digits(bytes, i + 1),
            _ => return bad("expected a digit"),
        }
        if bytes.get(i) == Some(&b'.') {
            let end = digits(bytes, i + 1);
            if end == i + 1 {
                return bad("expected a digit after '.'");
            }
            i = end;
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            let end = digits(bytes, i);
            if end == i {
                return bad("expected a digit in the exponent");
            }
            i = end;
        }
        self.pos = i;
        Ok(())
    }
}

fn syntax(detail: &str) -> ParseError {
    ParseError::Parse(detail.to_owned())
}

fn into_string(bytes: Cow<'_, [u8]>) -> Result<String, ParseError> {
    // Strings are UTF-8-validated while scanning and escapes decode to whole characters,
    // so this cannot fail; it is checked rather than assumed.
    let text = match bytes {
        Cow::Borrowed(b) => std::str::from_utf8(b).map(str::to_owned).ok(),
        Cow::Owned(v) => String::from_utf8(v).ok(),
    };
    text.ok_or_else(|| syntax("invalid UTF-8 in string"))
}

/// Index of the first non-digit at or after `i`.
fn digits(bytes: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = bytes.get(i) {
        i += 1;
    }
    i
}

/// Scans string contents from `i` to the first `"`, `\\` or control character (or the
/// end). Also says whether the run may contain non-ASCII bytes (it may over-report).
#[inline]
fn scan_plain(bytes: &[u8], mut i: usize) -> (usize, bool) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut high = 0u64;
    // Eight bytes at a time with the "has zero byte" trick, `(x - 1) & !x & 0x80`, applied
    // to `x = w ^ c` for '"' and '\' and as `(w - 0x20) & !w` for bytes below 0x20. A
    // borrow can only mark bytes above a real hit, so the lowest marked byte is exact.
    while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*chunk);
        let q = w ^ (ONES * u64::from(b'"'));
        let b = w ^ (ONES * u64::from(b'\\'));
        let hit = (w.wrapping_sub(ONES * 0x20) & !w
            | q.wrapping_sub(ONES) & !q
            | b.wrapping_sub(ONES) & !b)
            & HIGH;
        high |= w;
        if hit != 0 {
            let at = i + (hit.trailing_zeros() / 8) as usize;
            return (at, high & HIGH != 0);
        }
        i += 8;
    }
    while let Some(&c) = bytes.get(i) {
        if c < 0x20 || c == b'"' || c == b'\\' {
            break;
        }
        high |= u64::from(c);
        i += 1;
    }
    (i, high & HIGH != 0)
}

/// Decodes the escape whose backslash is at `at`, appending to `out` if given; returns
/// the index after the escape.
fn escape(bytes: &[u8], at: usize, out: Option<&mut Vec<u8>>) -> Result<usize, ParseError> {
    let bad = |what: &str| Err(ParseError::Parse(format!("{what} at offset {at}")));
    let simple = match bytes.get(at + 1) {
        None => return bad("unterminated escape"),
        Some(b'"') => b'"',
        Some(b'\\') => b'\\',
        Some(b'/') => b'/',
        Some(b'b') => 0x08,
        Some(b'f') => 0x0C,
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b't') => b'\t',
        Some(b'u') => {
            let Some(unit) = hex4(bytes, at + 2) else {
                return bad("invalid \\u escape");
            };
            let mut end = at + 6;
            let code = match unit {
                0xD800..=0xDBFF => {
                    let low = if bytes.get(end..end + 2) == Some(b"\\u") {
                        hex4(bytes, end + 2)
                    } else {
                        None
                    };
                    match low {
                        Some(low @ 0xDC00..=0xDFFF) => {
                            end += 6;
                            0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        }
                        _ => return bad("unpaired high surrogate escape"),
                    }
                }
                0xDC00..=0xDFFF => return bad("unpaired low surrogate escape"),
                _ => unit,
            };
            let Some(c) = char::from_u32(code) else {
                return bad("invalid \\u escape");
            };
            if let Some(v) = out {
                let mut tmp = [0u8; 4];
                v.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            }
            return Ok(end);
        }
        Some(_) => return bad("invalid escape"),
    };
    if let Some(v) = out {
        v.push(simple);
    }
    Ok(at + 2)
}

/// Four hex digits at `i` as a number.
fn hex4(bytes: &[u8], i: usize) -> Option<u32> {
    let digits = bytes.get(i..i + 4)?;
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = char::from(d).to_digit(16)?;
        Some((acc << 4) | v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Wraps a JSON value as the `arguments` of an otherwise valid tools/call.
    fn with_arg(value: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"x":{value}}}}}}}"#
        )
    }

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
    fn nul_in_method_is_kept() {
        let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":{"name":"x"}}"#);
        assert_eq!(m.method.as_deref(), Some("tools/call\0"));
        assert_ne!(m.method.as_deref(), Some("tools/call"));
        assert_eq!(m.name, None);
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

    fn big_object(n: usize, extra: &str) -> String {
        let mut s = String::from("{");
        for i in 0..n {
            s.push_str(&format!("\"k{i}\":{i},"));
        }
        s.push_str(extra);
        s.push('}');
        with_arg(&s)
    }

    #[test]
    fn duplicate_detection_in_large_objects() {
        // Around the switch from linear scan to hash set.
        for n in [15, 16, 17, 18, 40] {
            ok(&big_object(n, r#""z":0"#));
            for dup in [0, n / 2, n - 1] {
                let body = big_object(n, &format!("\"k{dup}\":0"));
                assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "n={n} dup={dup}");
                let body = big_object(n, &format!("\"\\u006b{dup}\":0"));
                assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "n={n} dup={dup}");
            }
        }
        // Nested object inside a hashed object keeps its own keys.
        let mut s = String::from("{");
        for i in 0..20 {
            let j = (i + 1) % 20;
            s.push_str(&format!("\"k{i}\":{{\"k{i}\":1,\"k{j}\":2}},"));
        }
        s.push_str("\"end\":0}");
        ok(&with_arg(&s));
    }

    #[test]
    fn hundred_thousand_keys_is_not_quadratic() {
        let start = std::time::Instant::now();
        ok(&big_object(100_000, r#""z":0"#));
        let body = big_object(100_000, r#""k99999":0"#);
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST);
        // Quadratic would be ~5e9 comparisons; linear-ish is well under a second even
        // in debug builds.
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
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

    #[test]
    fn empty_body_and_bom() {
        assert_eq!(code(b""), PARSE);
        assert_eq!(code(b" \n\t\r"), PARSE);
        let mut body = vec![0xEF, 0xBB, 0xBF];
        body.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        let (e, _) = rejected(&body);
        assert_eq!(e.code(), PARSE);
        assert!(e.detail().contains("byte order mark"));
    }

    // ----- UTF-8 -----

    fn in_string(raw: &[u8]) -> Vec<u8> {
        let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"s":""#.to_vec();
        body.extend_from_slice(raw);
        body.extend_from_slice(br#""}}}"#);
        body
    }

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

    #[test]
    fn utf8_invalid_sequences() {
        let cases: &[&[u8]] = &[
            b"\xff",
            b"\xfe",
            b"\x80", // lone continuation
            b"\xbf",
            b"\xc3",                     // truncated
            b"\xe2\x82",                 // truncated
            b"\xf0\x9f\x98",             // truncated
            b"\xc3\x28",                 // bad continuation
            b"\xc0\xaf",                 // overlong '/'
            b"\xc1\xbf",                 // overlong
            b"\xe0\x80\xaf",             // overlong
            b"\xe0\x9f\xbf",             // overlong
            b"\xf0\x80\x80\xaf",         // overlong
            b"\xf0\x8f\xbf\xbf",         // overlong
            b"\xed\xa0\x80",             // U+D800 encoded
            b"\xed\xbf\xbf",             // U+DFFF encoded
            b"\xed\xa0\xbd\xed\xb8\x80", // CESU-8 pair
            b"\xf4\x90\x80\x80",         // > U+10FFFF
            b"\xf5\x80\x80\x80",
            b"\xf8\x88\x80\x80\x80",
            b"ab\xe2\x82\xacc\xe2\x82",
        ];
        for raw in cases {
            let (e, _) = rejected(&in_string(raw));
            assert_eq!(e.code(), PARSE, "{raw:x?}");
            assert!(e.detail().contains("UTF-8"), "{raw:x?}: {e}");
            // Also as a key and as the method.
            let mut body = b"{\"".to_vec();
            body.extend_from_slice(raw);
            body.extend_from_slice(br#"":1,"jsonrpc":"2.0","id":1,"method":"ping"}"#);
            assert_eq!(code(&body), PARSE, "{raw:x?}");
        }
        // Invalid UTF-8 in whitespace / structural position.
        for body in [
            &b"{\"jsonrpc\":\"2.0\",\xff\"id\":1,\"method\":\"ping\"}"[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\xc3\xa9",
            b"\xc2\xa0{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\xe2\x82\xac}",
        ] {
            assert_eq!(code(body), PARSE, "{body:x?}");
        }
        // Unterminated string ending in the middle of a sequence.
        assert_eq!(code(b"{\"a\":\"\xe2\x82"), PARSE);
    }

    #[test]
    fn control_characters_in_strings() {
        for c in [0x00u8, 0x01, 0x08, b'\t', b'\n', b'\r', 0x1b, 0x1f] {
            let (e, _) = rejected(&in_string(&[b'a', c, b'b']));
            assert_eq!(e.code(), PARSE, "{c:#x}");
            let mut key = b"{\"a".to_vec();
            key.push(c);
            key.extend_from_slice(br#"":1,"jsonrpc":"2.0","id":1,"method":"ping"}"#);
            assert_eq!(code(&key), PARSE, "{c:#x}");
        }
        // DEL is not a control character for JSON.
        assert!(parse(&in_string(b"a\x7fb")).is_ok());
        // Control characters after a long plain run (exercises the 8-byte fast path).
        for len in 0..40 {
            let mut raw = vec![b'x'; len];
            raw.push(0x1f);
            raw.extend_from_slice(b"yyyyyyyyy");
            assert_eq!(code(&in_string(&raw)), PARSE, "len {len}");
            let mut raw = vec![b'x'; len];
            raw.extend_from_slice(b"\\\"\xc3\xa9yyyyyyyyy");
            assert!(parse(&in_string(&raw)).is_ok(), "len {len}");
        }
    }

    // ----- escapes -----

    fn decoded_name(escaped: &str) -> Result<String, ParseFailure> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{escaped}"}}}}"#
        );
        parse(body.as_bytes()).map(|m| m.name.unwrap_or_default())
    }

    #[test]
    fn valid_escapes() {
        let cases = [
            (r#"\"\\\/\b\f\n\r\t"#, "\"\\/\u{8}\u{c}\n\r\t"),
            (r"\u0041\u00e9\u20AC\uFFFF", "Aé€\u{ffff}"),
            (r"\ud83d\ude00", "😀"),
            (r"\uD83D\uDE00x", "😀x"),
            (r"\udbff\udfff", "\u{10ffff}"),
            (r"\ud800\udc00", "\u{10000}"),
            (r"a\u0000b", "a\0b"),
            (r"\u005c\u0022", "\\\""),
            (r"plain", "plain"),
            ("", ""),
        ];
        for (escaped, want) in cases {
            assert_eq!(decoded_name(escaped).unwrap(), want, "{escaped}");
        }
    }

    #[test]
    fn invalid_escapes() {
        for escaped in [
            r"\x41",
            r"\U0041",
            r"\'",
            r"\a",
            r"\0",
            r"\u12",
            r"\u12G4",
            r"\u-123",
            r"\u",
            r"\ud800",
            r"\ud800x",
            r"\ud800\n",
            r"\ud800\u0041",
            r"\ud800\ud800",
            r"\udbff\ue000",
            r"\udc00",
            r"\udfff",
            r"\udc00\ud800",
            r"x\ude00\ud83d",
            r"\ud83d\\ude00",
            "\\\u{e9}",
        ] {
            let (e, _) = decoded_name(escaped).unwrap_err();
            assert_eq!(e.code(), PARSE, "{escaped}");
            // The same escape anywhere else in the body is also rejected.
            assert_eq!(code(with_arg(&format!("\"{escaped}\"")).as_bytes()), PARSE);
            assert_eq!(
                code(with_arg(&format!("{{\"{escaped}\":1}}")).as_bytes()),
                PARSE
            );
        }
        // Backslash at the very end of the input.
        assert_eq!(code(br#"{"a":"\"#), PARSE);
        assert_eq!(code(br#"{"a":"\u00"#), PARSE);
    }

    // ----- numbers and literals -----

    #[test]
    fn number_grammar() {
        for n in [
            "0",
            "-0",
            "1",
            "-1",
            "10",
            "1234567890",
            "0.0",
            "-0.0",
            "0.5",
            "1.25",
            "1e5",
            "1E5",
            "1e+5",
            "1e-5",
            "1E-05",
            "0e0",
            "-0e-0",
            "1.5e10",
            "-1.5E+10",
            "123456789012345678901234567890",
            "1e400",
            "0.000001",
        ] {
            ok(&with_arg(n));
            ok(&with_arg(&format!("[{n}]")));
            let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
            assert_eq!(ok(&body).id.as_deref(), Some(n));
        }
        for n in [
            "01",
            "-01",
            "00",
            "+1",
            ".5",
            "-.5",
            "1.",
            "-",
            "--1",
            "1.e5",
            "1e",
            "1e+",
            "1E-",
            "1e5.5",
            "0x10",
            "1_000",
            "Infinity",
            "-Infinity",
            "NaN",
            "1.2.3",
            "- 1",
            "1 2",
            "0.-1",
            "1ee5",
            "\u{0660}",
        ] {
            assert_eq!(code(with_arg(n).as_bytes()), PARSE, "{n}");
            assert_eq!(code(with_arg(&format!("[{n}]")).as_bytes()), PARSE, "{n}");
            let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
            assert_eq!(code(body.as_bytes()), PARSE, "{n}");
        }
        // A number at the very end of the input, and a lone top-level number.
        assert_eq!(code(br#"{"a":1"#), PARSE);
        assert_eq!(code(b"1"), INVALID_REQUEST);
        assert_eq!(code(b"-"), PARSE);
        assert_eq!(code(b"01"), PARSE);
    }

    #[test]
    fn literals() {
        ok(&with_arg("[true,false,null]"));
        for l in [
            "tru",
            "True",
            "TRUE",
            "nul",
            "NULL",
            "fals",
            "truee",
            "nil",
            "undefined",
        ] {
            assert_eq!(code(with_arg(l).as_bytes()), PARSE, "{l}");
        }
        assert_eq!(code(b"nul"), PARSE);
        assert_eq!(code(b"null"), INVALID_REQUEST);
    }

    #[test]
    fn syntax_errors() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping",,"x":1}"#,
            r#"{"jsonrpc":"2.0","id":1 "method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method" "ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1,2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1,2,]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[,1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1 2]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":'ping'}"#,
            r#"{jsonrpc:"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping" /* c */}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} // c"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":"unterminated}"#,
            r#"{,}"#,
            r#"{:1}"#,
            r#"{1:1}"#,
            r#"{"#,
            r#"}"#,
            r#"["#,
            r#""#,
            r#"""#,
        ] {
            assert_eq!(code(body.as_bytes()), PARSE, "{body}");
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

    #[test]
    fn huge_nesting_does_not_overflow() {
        assert_eq!(code(&vec![b'['; 1_000_000]), PARSE);
        assert_eq!(code(r#"{"a":"#.repeat(1_000_000).as_bytes()), PARSE);
        let mut balanced = vec![b'['; 500_000];
        balanced.extend(std::iter::repeat_n(b']', 500_000));
        assert_eq!(code(&balanced), PARSE);
        let unlimited = ParseLimits {
            max_depth: usize::MAX,
        };
        // Without a depth limit the iterative parser still does not recurse.
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

    #[test]
    fn scan_plain_matches_naive() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let alphabet = [
            b'a', b'Z', b' ', b'~', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xff,
        ];
        for _ in 0..20_000 {
            let len = rng.below(40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.chance(80) {
                        b'a' + rng.below(26) as u8
                    } else {
                        rng.pick(&alphabet)
                    }
                })
                .collect();
            for start in 0..=len {
                let want = bytes[start..]
                    .iter()
                    .position(|&c| c < 0x20 || c == b'"' || c == b'\\')
                    .map_or(len, |p| start + p);
                let (end, non_ascii) = scan_plain(&bytes, start);
                assert_eq!(end, want, "{bytes:x?} from {start}");
                if bytes[start..end].iter().any(|&c| c >= 0x80) {
                    assert!(non_ascii, "{bytes:x?} from {start}");
                }
            }
        }
    }

    // ----- differential test against serde_json -----

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn chance(&mut self, percent: usize) -> bool {
            self.below(100) < percent
        }
        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len())]
        }
    }

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
    ];

    const NUMBERS: &[&str] = &[
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
            Err(e) if e.to_string().contains("out of range") => return None,
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
                }));
            }
            Some(Value::String(m)) => m.clone(),
            Some(_) => return invalid,
        };
        if responding {
            return invalid;
        }
        let param = |key: &str| {
            obj.get("params")
                .and_then(|p| p.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
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
                if !e.to_string().contains("out of range") {
                    assert!(
                        matches!(ours, Err((ParseError::Parse(_), _))),
                        "serde_json rejects ({e}) but we said {ours:?}: {:?}",
                        String::from_utf8_lossy(body)
                    );
                }
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
}
