//! Per-caller filtering of listing responses (docs/semantics.md §5.4): `tools/list`,
//! `prompts/list`, `resources/list` and `resources/templates/list` answers keep only the items
//! the caller could use, judged by [`Engine::item_denial`] as if each item were called.
//!
//! A JSON answer is read whole (at most `listings.maxBytes`); an SSE answer is read event by
//! event as it streams, each event rewritten from what was parsed (never passed on as raw
//! bytes the filter did not understand), holding at most one event of `listings.maxBytes`.
//! What cannot be filtered (malformed, too large, an unexpected media type) is replaced by a
//! JSON-RPC error echoing the request id, never passed on unfiltered.

use std::borrow::Cow;

use mcp_access_bundle::mcp_methods::{self, Listing, Revision};

use crate::answer::{jsonrpc_error, INTERNAL_ERROR};
use crate::json::{self, Val};
use crate::policy::{Engine, ItemScope};
use crate::request::{McpOp, Request};

/// The JSON-RPC error message of a listing that could not be filtered.
const UNFILTERABLE: &str = "The server's listing could not be checked for this caller";

/// How the response body is read, decided by its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not yet known (response headers not seen).
    Unknown,
    /// Not filtered: a non-2xx answer (an error, not a listing).
    Pass,
    /// `application/json`: one message, read whole.
    Json,
    /// `text/event-stream`: events, read one by one.
    Sse,
    /// Any other media type on a 2xx answer: the body is replaced by an error.
    Refuse,
}

/// What the host does with the response headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersAction {
    /// Leave them.
    Keep,
    /// Remove `Content-Length` (the body will change size) and hold the body as
    /// [`ListingFilter::on_body`] says.
    Rewrite,
}

/// What the host does with a body chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyAction {
    /// Let the chunk go on unchanged.
    Pass,
    /// Keep buffering (JSON: the whole body is needed); `drop_buffer` when what is buffered
    /// will not be used (too large) and may be emptied.
    Buffer { drop_buffer: bool },
    /// Replace what the host holds (the chunk, or the whole buffered JSON body) with this.
    Replace(Vec<u8>),
}

/// The filter of one listing response.
#[derive(Debug)]
pub struct ListingFilter {
    listing: &'static Listing,
    /// The request, its MCP operation replaced by a call of each item in turn.
    probe: Request,
    host: String,
    /// The request id (raw JSON), for the error that replaces what cannot be filtered.
    id: Option<String>,
    cache_scope: bool,
    max_bytes: usize,
    max_depth: usize,
    mode: Mode,
    /// SSE: the event being read (at most `max_bytes`).
    pending: PendingEvent,
    /// SSE: an event grew past `max_bytes`; its bytes are dropped up to its end.
    skipping: bool,
    /// SSE, while skipping: whether the last byte seen ended a line (a blank line ends it).
    at_line_start: bool,
}

impl ListingFilter {
    /// The listing `req` asks for, when the bundle filters listings.
    pub(crate) fn listing_of(engine: &Engine, req: &Request) -> Option<&'static Listing> {
        if !engine.listings.filter {
            return None;
        }
        mcp_methods::listing(req.mcp.method()?)
    }

    /// The filter for a response to `req` (already allowed), when it is a listing and the
    /// bundle filters listings.
    pub(crate) fn for_request(
        engine: &Engine,
        req: &Request,
        id: Option<&str>,
        revision: Revision,
    ) -> Option<ListingFilter> {
        let listing = Self::listing_of(engine, req)?;
        let mut probe = req.clone();
        // Each item is judged as a call of that item alone: never with the listing's params.
        probe.as_item_call(
            listing.judged_as,
            listing.key,
            None,
            engine.cel_needs().params,
        );
        Some(ListingFilter {
            listing,
            host: req.host(),
            probe,
            id: id.map(str::to_string),
            cache_scope: revision.has_cache_scope(),
            max_bytes: usize::try_from(engine.listings.max_bytes).unwrap_or(usize::MAX),
            max_depth: usize::try_from(engine.limits.max_json_depth).unwrap_or(64),
            mode: Mode::Unknown,
            pending: PendingEvent::default(),
            skipping: false,
            at_line_start: true,
        })
    }

    /// The response headers arrived (names lowercase, `:status` included). A 2xx answer is
    /// read as its one `Content-Type` says; one with a `Content-Encoding` other than
    /// `identity`, or without exactly one known media type, cannot be read and is refused.
    pub fn on_headers(&mut self, headers: &[(String, String)]) -> HeadersAction {
        let values = |name: &'static str| {
            headers
                .iter()
                .filter(move |(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let status = values(":status").next().and_then(|s| s.parse::<u16>().ok());
        let success = status.is_some_and(|s| (200..300).contains(&s));
        let encoded =
            values("content-encoding").any(|e| !e.trim().eq_ignore_ascii_case("identity"));
        let essence = |ct: &str| {
            ct.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        };
        let types: Vec<String> = values("content-type").map(essence).collect();
        self.mode = match types.as_slice() {
            _ if !success => Mode::Pass,
            _ if encoded => Mode::Refuse,
            [one] if one == "application/json" => Mode::Json,
            [one] if one == "text/event-stream" => Mode::Sse,
            _ => Mode::Refuse,
        };
        match self.mode {
            Mode::Pass | Mode::Unknown => HeadersAction::Keep,
            Mode::Json | Mode::Sse | Mode::Refuse => HeadersAction::Rewrite,
        }
    }

    /// The media type the body has once rewritten, if the host must set it (and remove any
    /// `Content-Encoding`: the error replacing the body is not encoded).
    pub fn content_type(&self) -> Option<&'static str> {
        match self.mode {
            Mode::Refuse => Some("application/json"),
            _ => None,
        }
    }

    /// Response trailers arrived: the body ended without an end-of-stream body callback.
    /// `read` fetches everything buffered (JSON). SSE events not ended are dropped.
    pub fn on_trailers(
        &mut self,
        engine: &Engine,
        read: impl FnOnce() -> Option<Vec<u8>>,
    ) -> BodyAction {
        match self.mode {
            Mode::Pass => BodyAction::Pass,
            Mode::Sse => {
                self.pending = PendingEvent::default();
                BodyAction::Pass
            }
            Mode::Unknown | Mode::Refuse => BodyAction::Replace(self.error()),
            Mode::Json => {
                let body = read().unwrap_or_default();
                if body.len() > self.max_bytes {
                    return BodyAction::Replace(self.error());
                }
                BodyAction::Replace(self.filter_json(engine, &body))
            }
        }
    }

    /// A body chunk arrived. JSON: `buffered` is the size of everything buffered so far and
    /// `read` fetches it (called at the end of the stream only). SSE: `read` fetches this
    /// chunk (`buffered` bytes).
    pub fn on_body(
        &mut self,
        engine: &Engine,
        buffered: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> BodyAction {
        match self.mode {
            Mode::Pass => BodyAction::Pass,
            Mode::Unknown | Mode::Refuse => self.refuse_body(end_of_stream),
            Mode::Json => {
                if buffered > self.max_bytes {
                    // Too large to filter: what is buffered is dropped, the error replaces it.
                    self.mode = Mode::Refuse;
                    return self.refuse_body(end_of_stream);
                }
                if !end_of_stream {
                    return BodyAction::Buffer { drop_buffer: false };
                }
                let body = read(buffered).unwrap_or_default();
                BodyAction::Replace(self.filter_json(engine, &body))
            }
            Mode::Sse => {
                let chunk = if buffered == 0 {
                    Vec::new()
                } else {
                    read(buffered).unwrap_or_default()
                };
                BodyAction::Replace(self.feed_sse(engine, &chunk, end_of_stream))
            }
        }
    }

    /// The body of an answer that cannot be filtered: the error once, at the end.
    fn refuse_body(&mut self, end_of_stream: bool) -> BodyAction {
        match end_of_stream {
            true => BodyAction::Replace(self.error()),
            false => BodyAction::Buffer { drop_buffer: true },
        }
    }

    /// The JSON-RPC error that replaces what cannot be filtered.
    fn error(&self) -> Vec<u8> {
        jsonrpc_error(self.id.as_deref(), INTERNAL_ERROR, UNFILTERABLE, None)
    }

    /// A whole JSON body: the filtered message, or the error.
    fn filter_json(&mut self, engine: &Engine, body: &[u8]) -> Vec<u8> {
        match self.filter_message(engine, body) {
            Ok(Some(out)) => out,
            Ok(None) => body.to_vec(),
            Err(()) => self.error(),
        }
    }

    /// One JSON-RPC message of the answer, read with the strict reader (no duplicate keys:
    /// the client would read one copy, the filter maybe another; UTF-8 only; nesting bounded).
    /// A response with `result` comes back filtered (`Some`): the server's bytes with the item
    /// array holding only the usable items and, where the revision has it, `cacheScope`
    /// set to `"private"`. An error response or a message from the server comes back
    /// unchanged (`None`); anything else is an error.
    fn filter_message(&mut self, engine: &Engine, text: &[u8]) -> Result<Option<Vec<u8>>, ()> {
        let mut m = MessageShape::new(self.listing);
        json::read(text, self.max_depth, &mut m).map_err(|_| ())?;
        if m.duplicate {
            return Err(());
        }
        let Some(result) = m.result else {
            return match m.method || m.error {
                true => Ok(None),
                false => Err(()),
            };
        };
        if m.method || m.error {
            return Err(());
        }
        // A 2026-07-28 interim result asks the client for input; it lists nothing.
        if m.input_required {
            return Ok(None);
        }
        let Some(items) = m.items else {
            return Err(());
        };
        let scope = engine.item_scope(&self.probe, &self.host);
        // The edits: `cacheScope` set to "private" (or added first in the result), then the
        // item array with only the usable items, written in order of position.
        let cache_edit: Option<(usize, usize, &[u8])> = match (self.cache_scope, m.cache_scope) {
            (false, _) => None,
            (true, Some((start, end))) => Some((start, end, b"\"private\"")),
            (true, None) => Some((result + 1, result + 1, b"\"cacheScope\":\"private\",")),
        };
        let mut out = Vec::with_capacity(text.len() + 32);
        let mut at = 0;
        let splice =
            |out: &mut Vec<u8>, at: &mut usize, (start, end, with): (usize, usize, &[u8])| {
                out.extend_from_slice(text.get(*at..start).ok_or(())?);
                out.extend_from_slice(with);
                *at = end;
                Ok::<(), ()>(())
            };
        if let Some(edit) = cache_edit.filter(|e| e.0 < items.0) {
            splice(&mut out, &mut at, edit)?;
        }
        splice(&mut out, &mut at, (items.0, items.0, b"["))?;
        let mut first = true;
        for item in &m.items_read {
            if !self.usable(engine, scope, item.key.as_deref()) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(text.get(item.start..item.end).ok_or(())?);
        }
        out.push(b']');
        at = items.1;
        if let Some(edit) = cache_edit.filter(|e| e.0 >= items.0) {
            splice(&mut out, &mut at, edit)?;
        }
        out.extend_from_slice(text.get(at..).ok_or(())?);
        Ok(Some(out))
    }

    /// Whether the caller could use the item named `name` (its name or URI, decoded; None:
    /// it has none). Resource templates are judged as a read of some URI.
    fn usable(&mut self, engine: &Engine, scope: ItemScope, name: Option<&[u8]>) -> bool {
        let McpOp::Call { param, .. } = &mut self.probe.mcp else {
            return false;
        };
        match (self.listing.key, name.map(std::str::from_utf8)) {
            (Some(key), Some(Ok(n))) => {
                // The probe's string is reused from item to item.
                let p = param.get_or_insert_with(String::new);
                p.clear();
                p.push_str(n);
                if self.probe.params.is_some() {
                    self.probe.set_item_params(Some(key), Some(n), true);
                }
            }
            // An item without its name or URI cannot be judged, so it is not listed.
            (Some(_), _) => return false,
            (None, _) => *param = None,
        }
        engine
            .item_refusal(scope, &self.probe, &self.host)
            .is_none()
    }

    /// Reads an SSE chunk; returns the rewritten events it completed.
    fn feed_sse(&mut self, engine: &Engine, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while !rest.is_empty() {
            if self.skipping {
                rest = self.skip_event(rest);
                continue;
            }
            let end = self.pending.scan(rest);
            let (take, done) = match end {
                Some(n) => (n, true),
                None => (rest.len(), false),
            };
            let (head, tail) = rest.split_at(take);
            rest = tail;
            if self.pending.bytes.len().saturating_add(head.len()) > self.max_bytes {
                self.pending = PendingEvent::default();
                out.extend_from_slice(&self.sse_error());
                if done {
                    continue;
                }
                self.skipping = true;
                self.at_line_start = head.last() == Some(&b'\n');
                continue;
            }
            self.pending.bytes.extend_from_slice(head);
            if done {
                let event = std::mem::take(&mut self.pending);
                self.rewrite_event(engine, &event, &mut out);
            }
        }
        // An event not ended by a blank line when the stream ends is not dispatched by
        // clients; it is dropped.
        if end_of_stream {
            self.pending = PendingEvent::default();
        }
        out
    }

    /// Drops the bytes of an oversized event up to its end; returns what follows it.
    fn skip_event<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' if self.at_line_start => {
                    self.skipping = false;
                    self.at_line_start = true;
                    return bytes.get(i + 1..).unwrap_or_default();
                }
                b'\n' => self.at_line_start = true,
                b'\r' => {}
                _ => self.at_line_start = false,
            }
        }
        &[]
    }

    /// An SSE event carrying the error.
    fn sse_error(&self) -> Vec<u8> {
        let mut out = b"event: message\ndata: ".to_vec();
        out.extend_from_slice(&self.error());
        out.extend_from_slice(b"\n\n");
        out
    }

    /// One complete SSE event, written again to `out` from its fields: comments dropped, a
    /// `message` event's data filtered. One that is not UTF-8 or has a line holding a lone
    /// `\r` (a client would split there and read other lines than the filter) is replaced
    /// by the error.
    fn rewrite_event(&mut self, engine: &Engine, event: &PendingEvent, out: &mut Vec<u8>) {
        let Some(fields) = SseEvent::parse(event) else {
            return out.extend_from_slice(&self.sse_error());
        };
        if fields.is_empty() {
            return;
        }
        let is_message = fields.event.is_none_or(|e| e == b"message");
        let data: Cow<'_, [u8]> = match fields.data.as_slice() {
            [one] => Cow::Borrowed(one),
            lines => Cow::Owned(lines.join(&b'\n')),
        };
        let data = if is_message && !data.is_empty() {
            // The strict reader checks every byte (UTF-8 included) of what it accepts.
            match self.filter_message(engine, &data) {
                Ok(Some(filtered)) => Some(Cow::Owned(filtered)),
                Ok(None) => Some(data),
                Err(()) => None,
            }
        } else {
            // Passed on as it is: UTF-8 only.
            std::str::from_utf8(&data).is_ok().then_some(data)
        };
        match data {
            Some(data) => fields.write(&data, out),
            None => out.extend_from_slice(&self.sse_error()),
        }
    }
}

/// SSE: the event being read, with its lines found as its bytes arrive.
#[derive(Debug, Default)]
struct PendingEvent {
    bytes: Vec<u8>,
    /// Its complete lines: spans in `bytes` without the line end (`\n` or `\r\n`).
    lines: Vec<(usize, usize)>,
    /// Start of the line being read, the carriage returns in it so far and the first one's
    /// offset.
    line_start: usize,
    line_crs: usize,
    first_cr: usize,
    /// A line holds a `\r` other than one just before its `\n`.
    lone_cr: bool,
}

impl PendingEvent {
    /// Reads `rest`, which continues the event (it will be appended to `bytes`), up to the
    /// blank line that ends the event (a line of nothing, or of `\r` only); returns the length
    /// of `rest` up to and including that line's `\n`.
    fn scan(&mut self, rest: &[u8]) -> Option<usize> {
        let base = self.bytes.len();
        let mut from = 0;
        while let Some(at) = find_either(rest, from, b'\n', b'\r') {
            from = at + 1;
            let p = base + at;
            if rest.get(at) == Some(&b'\r') {
                if self.line_crs == 0 {
                    self.first_cr = p;
                }
                self.line_crs += 1;
                continue;
            }
            let crlf = self.line_crs == 1 && self.first_cr + 1 == p;
            if self.line_crs > 0 && !crlf {
                self.lone_cr = true;
            }
            let blank = p - self.line_start == self.line_crs;
            if !blank {
                let end = if crlf { p - 1 } else { p };
                self.lines.push((self.line_start, end));
            }
            self.line_start = p + 1;
            self.line_crs = 0;
            if blank {
                return Some(from);
            }
        }
        None
    }
}

/// The index of the first `a` or `b` in `bytes` at or after `i` (eight bytes at a time).
fn find_either(bytes: &[u8], mut i: usize, a: u8, b: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*chunk);
        let (x, y) = (w ^ (ONES * u64::from(a)), w ^ (ONES * u64::from(b)));
        // A zero byte of x or y is a hit; a borrow only marks bytes above a real hit, so
        // the lowest marked byte is exact.
        let hits = (x.wrapping_sub(ONES) & !x | y.wrapping_sub(ONES) & !y) & HIGH;
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    let tail = bytes.get(i..)?;
    tail.iter().position(|&c| c == a || c == b).map(|p| i + p)
}

/// The fields of one SSE event, borrowed from its bytes.
#[derive(Debug, Default)]
struct SseEvent<'e> {
    event: Option<&'e [u8]>,
    data: Vec<&'e [u8]>,
    id: Option<&'e [u8]>,
    retry: Option<&'e [u8]>,
}

impl<'e> SseEvent<'e> {
    /// The fields of a complete event. None when a line holds a lone `\r` or a line that is
    /// not `data` is not UTF-8 (data lines are checked where they are used).
    fn parse(event: &'e PendingEvent) -> Option<SseEvent<'e>> {
        if event.lone_cr {
            return None;
        }
        let mut e = SseEvent::default();
        for &(start, end) in &event.lines {
            let line = event.bytes.get(start..end)?;
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let (f, v) = line.split_at(colon);
                    let v = v.get(1..).unwrap_or_default();
                    (f, v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &[][..]),
            };
            if field != b"data" {
                std::str::from_utf8(line).ok()?;
            }
            match field {
                // A comment (or an empty line, which cannot be here: it ends the event).
                b"" => {}
                b"event" => e.event = Some(value),
                b"data" => e.data.push(value),
                b"id" if !value.contains(&0) => e.id = Some(value),
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    e.retry = Some(value)
                }
                _ => {}
            }
        }
        Some(e)
    }

    /// Nothing a client would act on (comments only).
    fn is_empty(&self) -> bool {
        self.event.is_none() && self.data.is_empty() && self.id.is_none() && self.retry.is_none()
    }

    /// Writes the event to `out` again, with `data` (split into lines) as its data.
    fn write(&self, data: &[u8], out: &mut Vec<u8>) {
        out.reserve(data.len() + 64);
        for (field, value) in [
            (&b"event"[..], self.event),
            (b"id", self.id),
            (b"retry", self.retry),
        ] {
            if let Some(v) = value {
                out.extend_from_slice(field);
                out.extend_from_slice(b": ");
                out.extend_from_slice(v);
                out.push(b'\n');
            }
        }
        if !self.data.is_empty() {
            let mut at = 0;
            loop {
                let end = find_either(data, at, b'\n', b'\n').unwrap_or(data.len());
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(data.get(at..end).unwrap_or_default());
                out.push(b'\n');
                if end >= data.len() {
                    break;
                }
                at = end + 1;
            }
        }
        out.push(b'\n');
    }
}

/// Where a value sits in a listing answer, as far as the filter cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ignore,
    Root,
    Method,
    Error,
    Result,
    ResultType,
    CacheScope,
    Items,
    Item,
    /// The item's name or URI.
    ItemKey,
}

/// One item of a listing: its span and its name or URI (decoded).
struct Item<'a> {
    start: usize,
    end: usize,
    key: Option<Cow<'a, [u8]>>,
}

/// What the filter reads of one JSON-RPC message: which members the message has, and the byte
/// spans of the result, its item array, each item (with its name or URI) and `cacheScope`.
struct MessageShape<'a> {
    listing: &'static Listing,
    duplicate: bool,
    method: bool,
    error: bool,
    /// Offset of the result object's `{`; None: no result, or not an object.
    result: Option<usize>,
    input_required: bool,
    cache_scope: Option<(usize, usize)>,
    /// The item array's span; None: absent or not an array.
    items: Option<(usize, usize)>,
    items_is_array: bool,
    items_read: Vec<Item<'a>>,
    /// The name or URI (decoded) of the item being read.
    item_key: Option<Cow<'a, [u8]>>,
    result_is_object: bool,
}

impl MessageShape<'_> {
    fn new(listing: &'static Listing) -> Self {
        MessageShape {
            listing,
            duplicate: false,
            method: false,
            error: false,
            result: None,
            input_required: false,
            cache_scope: None,
            items: None,
            items_is_array: false,
            items_read: Vec::new(),
            item_key: None,
            result_is_object: false,
        }
    }
}

impl<'a> json::Visitor<'a> for MessageShape<'a> {
    type Slot = Slot;
    type Error = json::SyntaxError;
    const ROOT: Slot = Slot::Root;
    const IGNORE: Slot = Slot::Ignore;

    fn member(&mut self, object: Slot, key: &[u8]) -> Slot {
        match object {
            Slot::Root => match key {
                b"method" => Slot::Method,
                b"error" => Slot::Error,
                b"result" => Slot::Result,
                _ => Slot::Ignore,
            },
            Slot::Result if key == self.listing.items.as_bytes() => Slot::Items,
            Slot::Result if key == b"cacheScope" => Slot::CacheScope,
            Slot::Result if key == b"resultType" => Slot::ResultType,
            Slot::Item if self.listing.key.is_some_and(|k| k.key().as_bytes() == key) => {
                Slot::ItemKey
            }
            _ => Slot::Ignore,
        }
    }

    fn element(&mut self, array: Slot) -> Slot {
        match array {
            Slot::Items if self.items_is_array => Slot::Item,
            _ => Slot::Ignore,
        }
    }

    fn duplicate_key(&mut self, _slot: Slot, _at: usize) {
        self.duplicate = true;
    }

    fn wants_text(&self, slot: Slot) -> bool {
        matches!(slot, Slot::ItemKey | Slot::ResultType)
    }

    fn value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), json::SyntaxError> {
        match (slot, val) {
            (Slot::Method, _) => self.method = true,
            (Slot::Error, _) => self.error = true,
            (Slot::Result, Val::Object) => self.result_is_object = true,
            (Slot::Items, Val::Array) => self.items_is_array = true,
            (Slot::Item, _) => self.item_key = None,
            (
                Slot::ItemKey,
                Val::Str {
                    decoded: Some(s), ..
                },
            ) => {
                self.item_key = Some(s);
            }
            (
                Slot::ResultType,
                Val::Str {
                    decoded: Some(s), ..
                },
            ) => {
                self.input_required = s.as_ref() == b"input_required";
            }
            _ => {}
        }
        Ok(())
    }

    fn closed(&mut self, slot: Slot, start: usize, end: usize) {
        match slot {
            Slot::Result if self.result_is_object => self.result = Some(start),
            Slot::Items if self.items_is_array => self.items = Some((start, end)),
            Slot::CacheScope => self.cache_scope = Some((start, end)),
            Slot::Item => self.items_read.push(Item {
                start,
                end,
                key: self.item_key.take(),
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{HeadersInput, Next, RequestFlow};
    use crate::json::tests::Rng;

    const BUNDLE: &str = r#"{"apiVersion": "mcp-access.io/v1",
      "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
      "backends": [{"name": "tools", "routeNames": ["tools"]}],
      "policies": [{"name": "p", "level": "Backend", "targets": [{"name": "tools"}],
        "action": "Allow", "rules": [{"name": "r", "authorization": {"mcp": {"baseProtocol": "Match",
          "methods": [{"name": "tools/call", "params": ["echo"]}]}}}]}]}"#;

    fn sse_filter(e: &Engine) -> ListingFilter {
        let mut flow = RequestFlow::new();
        let input = HeadersInput {
            headers: [
                (":method", "POST"),
                (":path", "/mcp"),
                ("content-type", "application/json"),
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .to_vec(),
            port: 8443,
            route_name: Some("tools".into()),
            ..HeadersInput::default()
        };
        flow.on_headers(e, input);
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
        let a = flow.on_body(e, body.len(), true, move |_| Some(body));
        assert!(matches!(a, Next::Allow { .. }), "{a:?}");
        let mut f = flow
            .listing_filter(e)
            .unwrap_or_else(|| panic!("no filter"));
        f.on_headers(&[
            (":status".into(), "200".into()),
            ("content-type".into(), "text/event-stream".into()),
        ]);
        f
    }

    /// The SSE reading as it was written first (whole text, `str` lines), to check the
    /// incremental one against: each event is its lines up to a blank one ('\r' ignored).
    fn reference(f: &mut ListingFilter, e: &Engine, stream: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut prev_newline = true;
        for (i, &b) in stream.iter().enumerate() {
            match b {
                b'\n' if prev_newline => {
                    out.extend(reference_event(f, e, &stream[start..=i]));
                    start = i + 1;
                }
                b'\n' => prev_newline = true,
                b'\r' => {}
                _ => prev_newline = false,
            }
        }
        out
    }

    fn reference_event(f: &mut ListingFilter, e: &Engine, event: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            return f.sse_error();
        };
        let (mut name, mut data, mut id, mut retry) = (None, Vec::new(), None, None);
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.contains('\r') {
                return f.sse_error();
            }
            if line.is_empty() || line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => name = Some(value),
                "data" => data.push(value),
                "id" if !value.contains('\0') => id = Some(value),
                "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                    retry = Some(value)
                }
                _ => {}
            }
        }
        if name.is_none() && data.is_empty() && id.is_none() && retry.is_none() {
            return Vec::new();
        }
        let joined = data.join("\n");
        let body = if name.is_none_or(|n| n == "message") && !joined.is_empty() {
            match f.filter_message(e, joined.as_bytes()) {
                Ok(Some(v)) => v,
                Ok(None) => joined.into_bytes(),
                Err(()) => return f.sse_error(),
            }
        } else {
            joined.into_bytes()
        };
        let mut out = Vec::new();
        for (field, value) in [("event", name), ("id", id), ("retry", retry)] {
            if let Some(v) = value {
                out.extend_from_slice(format!("{field}: {v}\n").as_bytes());
            }
        }
        if !data.is_empty() {
            for line in body.split(|&b| b == b'\n') {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        out.push(b'\n');
        out
    }

    #[test]
    fn sse_events_read_as_they_stream_as_the_whole_text_reads_them() {
        let e = Engine::from_json(BUNDLE.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let listing = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"},
 {"name":"rm"}]}}"#;
        let pieces: [&[u8]; 22] = [
            b"data: ",
            b"data:",
            b"data",
            listing.as_bytes(),
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","name":"rm"}]}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
            b"event: message",
            b"event: other",
            b"event:message",
            b"id: 7",
            b"id: a\0b",
            b"retry: 10",
            b"retry: 1x",
            b": comment",
            b"x: y",
            b"\n",
            b"\n",
            b"\r\n",
            b"\r",
            "é".as_bytes(),
            b"\xff",
            b"\xc3",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3000 {
            let mut stream = Vec::new();
            for _ in 0..rng.below(24) {
                stream.extend_from_slice(rng.pick(&pieces));
            }
            // Events end where the reference saw them end: compare on whole events.
            stream.extend_from_slice(b"\n\n");
            let want = reference(&mut sse_filter(&e), &e, &stream);
            let mut f = sse_filter(&e);
            let mut got = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(rest.len().min(1 + rng.below(40)));
                got.extend(f.feed_sse(&e, chunk, tail.is_empty()));
                rest = tail;
            }
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{:?}",
                String::from_utf8_lossy(&stream)
            );
            assert_eq!(got, want);
        }
    }
}
