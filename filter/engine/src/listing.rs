//! Per-caller filtering of listings (docs/semantics.md §5.4): `tools/list`, `prompts/list`,
//! `resources/list` and `resources/templates/list` answers keep only the items the caller
//! could use, judged by [`Engine::item_refusal`] as if each item were called.
//!
//! The answer to a listing request is read whatever its status: a JSON body whole (at most
//! `listings.maxBytes`), an SSE stream event by event as it streams, holding at most one event
//! of `listings.maxBytes`. Any other SSE stream (the GET streams, a POST answered with a
//! stream) is read the same way: there, a JSON-RPC response that does not answer the request
//! the filter saw and whose result holds `tools`, `prompts`, `resources` or
//! `resourceTemplates` arrays is filtered as those listings. Events are rewritten from what
//! was parsed (never passed on as raw bytes the filter did not understand). What cannot be
//! read (malformed, too large, compressed, an unexpected media type) is replaced by a
//! JSON-RPC error, never passed on unfiltered.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use mcp_access_bundle::mcp_methods::{self, Listing, Revision, LISTINGS};

use crate::canonical_json::{Canonicalizer, Digest};
use crate::json::{self, Val};
use crate::jsonrpc::{self, INTERNAL_ERROR};
use crate::pins::{DriftPort, Observed, PinCheck, PinEvent, ToolPins};
use crate::policy::Engine;
use crate::request::{McpOp, Request};

/// The JSON-RPC error message of a listing that could not be filtered.
const UNFILTERABLE: &str = "The server's listing could not be checked for this caller";

/// How the response body is read, decided by its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not yet known (response headers not seen).
    Unknown,
    /// Not read: no listing can be in it.
    Pass,
    /// A 2xx `application/json` answer to a listing request: one message, read whole.
    Json,
    /// A non-2xx answer to a listing request: read whole, passed on unchanged unless it is
    /// a JSON-RPC result (or looks like JSON the filter cannot read).
    Lenient,
    /// `text/event-stream`: events, read one by one.
    Sse,
    /// Cannot be read: the body is replaced by an error (an SSE event when `sse`).
    Refuse { sse: bool },
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
    /// Keep buffering (JSON: the whole body is needed).
    Buffer,
    /// Replace what the host holds (the chunk, or the whole buffered body) with this.
    Replace(Vec<u8>),
}

/// What one JSON-RPC message of the answer is to the filter.
enum Read<'t> {
    /// A result holding listings: the message with only the usable items.
    Filtered(Vec<u8>),
    /// Passed on as it is: an error, a message from the server, a result that lists nothing
    /// (an `input_required` one, the answer to a request that is not a listing, a response
    /// to another request holding no listing).
    Unchanged,
    /// JSON, but not a JSON-RPC message (no `result`, `error` or `method`).
    NotJsonRpc,
    /// Cannot be read (malformed, a batch, a duplicate member the filter reads, a listing
    /// result without its items); its id when it was read.
    Unreadable(Option<&'t [u8]>),
}

/// The filter of one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingFilter {
    /// The listing the request asked for; None: the request is not a listing, only what its
    /// stream carries for other requests can be one.
    listing: Option<&'static Listing>,
    /// The request allowed.
    request: Rc<Request>,
    /// A copy of it, its MCP operation replaced by a call of each item in turn (made when
    /// the first item is judged).
    probe: Option<Box<Request>>,
    /// The listing whose items the probe is set up to judge (its [`LISTINGS`] index).
    probe_listing: Option<u8>,
    /// The request id (raw JSON) of a JSON-RPC request: a response with this id answers it.
    /// Also the id of the error that replaces what cannot be filtered, when that has none.
    id: Option<String>,
    cache_scope: bool,
    max_bytes: usize,
    max_depth: usize,
    mode: Mode,
    /// The error replacing a refused body was sent.
    refused: bool,
    /// SSE: the event being read (at most `max_bytes`).
    pending: PendingEvent,
    /// SSE: an event grew past `max_bytes`; its bytes are dropped up to its end.
    skipping: bool,
    /// SSE, while skipping: whether the last byte seen ended a line (a blank line ends it).
    at_line_start: bool,
    /// SSE: the last byte read was a CR ending a line; a LF right after it is part of it.
    after_cr: bool,
    /// SSE: no event has ended yet (a byte order mark may start the stream).
    stream_start: bool,
    /// The backend's pinned tools: listed tools are held to them (docs/semantics.md §5).
    pins: Option<PinCheck>,
}

impl ListingFilter {
    /// The listing `req` asks for, when the bundle filters listings.
    pub(crate) fn listing_of(engine: &Engine, req: &Request) -> Option<&'static Listing> {
        if !engine.listings.filter {
            return None;
        }
        mcp_methods::listing(req.mcp.method()?)
    }

    /// Whether the request (allowed) is sent upstream asking for `Accept-Encoding: identity`,
    /// so that its answer can be read: a listing, or a GET opening or resuming a stream.
    pub(crate) fn wants_identity(engine: &Engine, req: &Request) -> bool {
        Self::listing_of(engine, req).is_some()
            || engine.listings.filter && req.mcp == McpOp::Transport && req.method == "GET"
    }

    /// The filter of the response to `req`, just allowed, when the bundle filters listings.
    /// Its response headers tell whether it may carry a listing ([`ListingFilter::on_headers`]):
    /// any answer to a listing request, an SSE stream answering any other request.
    pub(crate) fn for_allowed(
        engine: &Engine,
        req: &Rc<Request>,
        id: Option<String>,
        revision: Revision,
        drift: Option<DriftPort>,
    ) -> Option<ListingFilter> {
        if !engine.listings.filter {
            return None;
        }
        let backend = req.target.backend.and_then(|b| engine.backends.get(b));
        let pins = backend.and_then(|b| Some(PinCheck::new(&b.id, b.pins.clone()?, drift)));
        let listing = Self::listing_of(engine, req);
        // Only a request's own id tells its answer apart (not a notification's or a reply's).
        let id = match listing {
            Some(_) => id,
            None => id.filter(|_| matches!(req.mcp, McpOp::Call { .. })),
        };
        Some(ListingFilter {
            listing,
            request: Rc::clone(req),
            probe: None,
            probe_listing: None,
            id,
            cache_scope: revision.has_cache_scope(),
            max_bytes: usize::try_from(engine.listings.max_bytes).unwrap_or(usize::MAX),
            max_depth: usize::try_from(engine.limits.max_json_depth).unwrap_or(64),
            mode: Mode::Unknown,
            refused: false,
            pending: PendingEvent::default(),
            skipping: false,
            at_line_start: true,
            after_cr: false,
            stream_start: true,
            pins,
        })
    }

    /// What the listings read so far said about pinned tools (drift, and its end), for the
    /// host's stats and logs; each event is given once.
    pub fn take_pin_events(&mut self) -> Vec<PinEvent> {
        self.pins
            .as_mut()
            .map_or_else(Vec::new, PinCheck::take_events)
    }

    /// The response headers arrived (names lowercase, `:status` included): see [`mode_for`].
    pub fn on_headers(&mut self, headers: &[(String, String)]) -> HeadersAction {
        self.mode = mode_for(self.listing.is_some(), headers);
        match self.mode {
            Mode::Pass | Mode::Unknown => HeadersAction::Keep,
            _ => HeadersAction::Rewrite,
        }
    }

    /// The media type the body has once rewritten, if the host must set it (and remove any
    /// `Content-Encoding`: the error replacing the body is not encoded).
    pub fn content_type(&self) -> Option<&'static str> {
        match self.mode {
            Mode::Refuse { sse: true } => Some("text/event-stream"),
            Mode::Refuse { sse: false } => Some("application/json"),
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
            Mode::Unknown | Mode::Refuse { .. } => self.refuse_body(),
            Mode::Json | Mode::Lenient => {
                let body = read().unwrap_or_default();
                if body.len() > self.max_bytes {
                    return self.refuse_body();
                }
                BodyAction::Replace(self.filter_body(engine, &body))
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
            Mode::Unknown | Mode::Refuse { .. } => self.refuse_body(),
            Mode::Json | Mode::Lenient => {
                if buffered > self.max_bytes {
                    // Too large to filter: what is buffered is replaced by the error.
                    self.mode = Mode::Refuse { sse: false };
                    return self.refuse_body();
                }
                if !end_of_stream {
                    return BodyAction::Buffer;
                }
                let body = read(buffered).unwrap_or_default();
                BodyAction::Replace(self.filter_body(engine, &body))
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

    /// The body of an answer that cannot be filtered: the error at once (a stream may never
    /// end), then nothing.
    fn refuse_body(&mut self) -> BodyAction {
        if std::mem::replace(&mut self.refused, true) {
            return BodyAction::Replace(Vec::new());
        }
        BodyAction::Replace(match self.mode {
            Mode::Refuse { sse: true } => self.sse_error(None),
            _ => self.error(None),
        })
    }

    /// The JSON-RPC error that replaces what cannot be filtered: with the message's id when
    /// it was read, else the request's (null when there is none).
    fn error(&self, id: Option<&[u8]>) -> Vec<u8> {
        let id = id
            .and_then(|i| std::str::from_utf8(i).ok())
            .or(self.id.as_deref());
        jsonrpc::error(id, INTERNAL_ERROR, UNFILTERABLE, None)
    }

    /// An SSE event carrying the error.
    fn sse_error(&self, id: Option<&[u8]>) -> Vec<u8> {
        let mut out = b"event: message\ndata: ".to_vec();
        out.extend_from_slice(&self.error(id));
        out.extend_from_slice(b"\n\n");
        out
    }

    /// A whole body (the answer to the listing request): the filtered message, the body
    /// unchanged, or the error (echoing the request's id: the body answers it). A non-2xx
    /// body is passed on unless it is a JSON-RPC result or JSON the filter cannot read.
    fn filter_body(&mut self, engine: &Engine, body: &[u8]) -> Vec<u8> {
        let lenient = self.mode == Mode::Lenient;
        match self.read_message(engine, body, true) {
            Read::Filtered(out) => out,
            Read::Unchanged => body.to_vec(),
            Read::NotJsonRpc if lenient => body.to_vec(),
            Read::Unreadable(_) if lenient && !looks_like_json(body) => body.to_vec(),
            Read::NotJsonRpc | Read::Unreadable(_) => self.error(None),
        }
    }

    /// One JSON-RPC message, read with the strict reader (UTF-8 only, nesting bounded, no
    /// duplicate of a member the filter reads: the client would read one copy, the filter
    /// maybe another). `answers` when it is known to answer the request (a JSON body); on a
    /// stream, a response answers it when its id is the request's, byte for byte (any other
    /// spelling is read as another request's, which is filtered all the same).
    ///
    /// The answer to a listing request must be a result holding that listing's array (or an
    /// `input_required` result); the answer to another request is passed on. Any other
    /// result is filtered when it holds listing arrays. Filtering keeps the server's bytes
    /// with each listing array holding only the usable items and, where the revision has it,
    /// `cacheScope` set to `"private"`.
    fn read_message<'t>(&mut self, engine: &Engine, text: &'t [u8], answers: bool) -> Read<'t> {
        let mut m = MessageShape {
            // Tool items are canonicalized as they are read when the backend pins its tools.
            pinned: self.pins.as_ref().map(|p| Arc::clone(p.pins())),
            ..MessageShape::default()
        };
        if json::read(text, self.max_depth, &mut m).is_err() || m.batch {
            return Read::Unreadable(None);
        }
        if m.duplicate {
            return Read::Unreadable(m.id.filter(|_| !m.duplicate_id));
        }
        if !m.has_result {
            return match m.method || m.error {
                true => Read::Unchanged,
                false => Read::NotJsonRpc,
            };
        }
        if m.method || m.error {
            return Read::Unreadable(m.id);
        }
        let own = answers
            || self
                .id
                .as_deref()
                .map(str::as_bytes)
                .is_some_and(|i| m.id == Some(i));
        let asked = match (own, self.listing) {
            (true, None) => return Read::Unchanged,
            (true, Some(l)) => Some(l),
            (false, _) => None,
        };
        let Some(result) = m.result else {
            return match asked {
                Some(_) => Read::Unreadable(m.id),
                None => Read::Unchanged,
            };
        };
        if let Some(l) = asked {
            // A 2026-07-28 interim result asks the client for input; it lists nothing.
            if !m.input_required && !m.arrays.iter().any(|a| listing_at(a.0) == Some(l)) {
                return Read::Unreadable(m.id);
            }
        }
        if m.arrays.is_empty() {
            return Read::Unchanged;
        }
        match self.filtered(engine, text, &m, result) {
            Some(out) => Read::Filtered(out),
            None => Read::Unreadable(m.id),
        }
    }

    /// `text` with each listing array of `m` holding only the usable items and `cacheScope`
    /// set where the revision has it; `result` is the offset of the result's `{`.
    fn filtered(
        &mut self,
        engine: &Engine,
        text: &[u8],
        m: &MessageShape<'_>,
        result: usize,
    ) -> Option<Vec<u8>> {
        // The edits, in order of position: `cacheScope` set to "private" (or added first in
        // the result), and each item array with only the usable items.
        let mut cache_edit: Option<(usize, usize, &[u8])> = match (self.cache_scope, m.cache_scope)
        {
            (false, _) => None,
            (true, Some((start, end))) => Some((start, end, b"\"private\"")),
            (true, None) => Some((result + 1, result + 1, b"\"cacheScope\":\"private\",")),
        };
        let mut out = Vec::with_capacity(text.len() + 32);
        let mut at = 0;
        let mut items = m.items_read.iter().peekable();
        for &(index, start, end) in &m.arrays {
            if let Some((s, e, with)) = cache_edit.filter(|c| c.0 < start) {
                out.extend_from_slice(text.get(at..s)?);
                out.extend_from_slice(with);
                at = e;
                cache_edit = None;
            }
            let listing = listing_at(index)?;
            out.extend_from_slice(text.get(at..start)?);
            out.push(b'[');
            let mut first = true;
            while let Some(item) = items.next_if(|i| i.array == index) {
                let pinned = match &mut self.pins {
                    Some(p) => p.listed(item.key.as_deref(), item.observed),
                    None => true,
                };
                if !pinned || !self.usable(engine, (index, listing), item.key.as_deref()) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(text.get(item.start..item.end)?);
            }
            out.push(b']');
            at = end;
        }
        if let Some((s, e, with)) = cache_edit {
            out.extend_from_slice(text.get(at..s)?);
            out.extend_from_slice(with);
            at = e;
        }
        out.extend_from_slice(text.get(at..)?);
        Some(out)
    }

    /// Whether the caller could use the item of `listing` (its [`LISTINGS`] index and entry)
    /// named `name` (its name or URI, decoded; None: it has none). Resource templates are
    /// judged as a read of some URI.
    fn usable(
        &mut self,
        engine: &Engine,
        listing: (u8, &'static Listing),
        name: Option<&[u8]>,
    ) -> bool {
        let (index, listing) = listing;
        let probe = self
            .probe
            .get_or_insert_with(|| Box::new(Request::clone(&self.request)));
        if self.probe_listing != Some(index) {
            // Each item is judged as a call of that item alone: never with the request's params.
            probe.as_item_call(
                listing.judged_as,
                listing.key,
                None,
                engine.cel_needs().params,
            );
            self.probe_listing = Some(index);
        }
        let McpOp::Call { param, .. } = &mut probe.mcp else {
            return false;
        };
        match (listing.key, name.map(std::str::from_utf8)) {
            (Some(key), Some(Ok(n))) => {
                // The probe's string is reused from item to item.
                let p = param.get_or_insert_with(String::new);
                p.clear();
                p.push_str(n);
                if probe.params.is_some() {
                    probe.set_item_params(Some(key), Some(n), true);
                }
            }
            // An item without its name or URI cannot be judged, so it is not listed.
            (Some(_), _) => return false,
            (None, _) => *param = None,
        }
        engine.item_refusal(probe).is_none()
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
            // Scanned no further than one byte past what the event may still hold.
            let room = self.max_bytes.saturating_sub(self.pending.bytes.len());
            let window = rest.get(..room.saturating_add(1)).unwrap_or(rest);
            let (take, done) = match self.pending.scan(window, &mut self.after_cr) {
                Some(n) => (n, true),
                None => (window.len(), false),
            };
            let (head, tail) = rest.split_at(take);
            rest = tail;
            if head.len() > room {
                let line_ended = self.pending.line_start == self.pending.bytes.len() + head.len();
                self.pending = PendingEvent::default();
                self.stream_start = false;
                out.extend_from_slice(&self.sse_error(None));
                if !done {
                    self.skipping = true;
                    self.at_line_start = line_ended;
                }
                continue;
            }
            self.pending.bytes.extend_from_slice(head);
            if done {
                let event = std::mem::take(&mut self.pending);
                self.rewrite_event(engine, &event, &mut out);
                self.stream_start = false;
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
        let mut from = 0;
        if std::mem::take(&mut self.after_cr) && bytes.first() == Some(&b'\n') {
            from = 1;
        }
        while let Some(at) = find_either(bytes, from, b'\n', b'\r') {
            let blank = self.at_line_start && at == from;
            let next = line_end(bytes, at, &mut self.after_cr);
            self.at_line_start = true;
            if blank {
                self.skipping = false;
                return bytes.get(next..).unwrap_or_default();
            }
            from = next;
        }
        if from < bytes.len() {
            self.at_line_start = false;
        }
        &[]
    }

    /// One complete SSE event, written again to `out` from its fields: comments dropped, a
    /// `message` event's data read as a JSON-RPC message. One that is not UTF-8 or whose
    /// message cannot be read is replaced by the error.
    fn rewrite_event(&mut self, engine: &Engine, event: &PendingEvent, out: &mut Vec<u8>) {
        let Some(fields) = SseEvent::parse(event, self.stream_start) else {
            return out.extend_from_slice(&self.sse_error(None));
        };
        if fields.is_empty() {
            return;
        }
        // An empty event type is dispatched as `message` too.
        let is_message = fields.event.is_none_or(|e| e.is_empty() || e == b"message");
        let data: Cow<'_, [u8]> = match fields.data.as_slice() {
            [one] => Cow::Borrowed(one),
            lines => Cow::Owned(lines.join(&b'\n')),
        };
        // On a stream answering no listing request, data that cannot hold a listing member
        // is not parsed.
        let read =
            is_message && !data.is_empty() && (self.listing.is_some() || may_hold_listing(&data));
        let data = if read {
            // The strict reader checks every byte (UTF-8 included) of what it accepts.
            match self.read_message(engine, &data, false) {
                Read::Filtered(filtered) => Ok(Cow::Owned(filtered)),
                Read::Unchanged => Ok(data),
                Read::NotJsonRpc if self.listing.is_none() => Ok(data),
                Read::NotJsonRpc => Err(None),
                Read::Unreadable(id) => Err(id.map(<[u8]>::to_vec)),
            }
        } else {
            // Passed on as it is: UTF-8 only.
            match std::str::from_utf8(&data) {
                Ok(_) => Ok(data),
                Err(_) => Err(None),
            }
        };
        match data {
            Ok(data) => fields.write(&data, out),
            Err(id) => out.extend_from_slice(&self.sse_error(id.as_deref())),
        }
    }
}

/// How a response is read, from its headers (names lowercase, `:status` included).
///
/// The answer to a listing request (`listing`): a 2xx one as its one `Content-Type` says (a
/// `Content-Encoding` other than `identity`, another media type or several: refused); a
/// non-2xx one as SSE if that is its one media type, else whole (refused if encoded).
/// The answer to another request is read only when it is an SSE stream (refused if encoded
/// or of several media types).
fn mode_for(listing: bool, headers: &[(String, String)]) -> Mode {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let (mut types, mut sse, mut json) = (0usize, false, false);
    for ct in values("content-type") {
        let essence = ct.split(';').next().unwrap_or_default().trim();
        types += 1;
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
        json |= essence.eq_ignore_ascii_case("application/json");
    }
    if !listing && !sse {
        return Mode::Pass;
    }
    let encoded = values("content-encoding").any(|e| !e.trim().eq_ignore_ascii_case("identity"));
    let status = values(":status").next().and_then(|s| s.parse::<u16>().ok());
    let success = status.is_some_and(|s| (200..300).contains(&s));
    let one = types == 1;
    match () {
        _ if encoded || (sse && !one) => Mode::Refuse { sse: sse && one },
        _ if sse => Mode::Sse,
        _ if !success => Mode::Lenient,
        _ if json && one => Mode::Json,
        _ => Mode::Refuse { sse: false },
    }
}

/// The listing at `index` of [`LISTINGS`].
fn listing_at(index: u8) -> Option<&'static Listing> {
    LISTINGS.get(usize::from(index))
}

/// Whether a body that is not a JSON-RPC message could be read as JSON by a lenient client:
/// it starts (after whitespace or a byte order mark) with `{` or `[`.
fn looks_like_json(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    body.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|b| matches!(b, b'{' | b'['))
}

/// Whether JSON text may have a member named as a listing's items: it holds an escape, or
/// one of those names between quotes (a member name is written either way).
fn may_hold_listing(text: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = find_either(text, from, b'"', b'\\') {
        let rest = text.get(at + 1..).unwrap_or_default();
        if text.get(at) == Some(&b'\\')
            || LISTINGS.iter().any(|l| {
                rest.strip_prefix(l.items.as_bytes())
                    .is_some_and(|r| r.first() == Some(&b'"'))
            })
        {
            return true;
        }
        from = at + 1;
    }
    false
}

/// The offset after the line end at `at` (a LF, a CR, or a CR and the LF after it); sets
/// `after_cr` when a CR ends `bytes` (a LF may follow in the next chunk).
fn line_end(bytes: &[u8], at: usize, after_cr: &mut bool) -> usize {
    let next = at + 1;
    if bytes.get(at) != Some(&b'\r') {
        return next;
    }
    match bytes.get(next) {
        Some(b'\n') => next + 1,
        Some(_) => next,
        None => {
            *after_cr = true;
            next
        }
    }
}

/// SSE: the event being read, with its lines found as its bytes arrive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PendingEvent {
    bytes: Vec<u8>,
    /// Its complete lines: spans in `bytes` without the line end (CRLF, LF or CR).
    lines: Vec<(usize, usize)>,
    /// Start of the line being read.
    line_start: usize,
}

impl PendingEvent {
    /// Reads `rest`, which continues the event (it will be appended to `bytes`), up to the
    /// blank line that ends the event; returns the length of `rest` up to and including that
    /// line's end. Lines end with CRLF, LF or CR; `after_cr` carries a CR that ended the
    /// previous chunk, whose LF may start this one.
    fn scan(&mut self, rest: &[u8], after_cr: &mut bool) -> Option<usize> {
        let base = self.bytes.len();
        let mut from = 0;
        if std::mem::take(after_cr) && rest.first() == Some(&b'\n') {
            from = 1;
            self.line_start = base + 1;
        }
        while let Some(at) = find_either(rest, from, b'\n', b'\r') {
            let p = base + at;
            let next = line_end(rest, at, after_cr);
            let blank = p == self.line_start;
            if !blank {
                self.lines.push((self.line_start, p));
            }
            self.line_start = base + next;
            if blank {
                return Some(next);
            }
            from = next;
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
    /// The fields of a complete event (`first`: the stream's first, which may start with a
    /// byte order mark). None when a line that is not `data` is not UTF-8 (data lines are
    /// checked where they are used).
    fn parse(event: &'e PendingEvent, first: bool) -> Option<SseEvent<'e>> {
        let mut e = SseEvent::default();
        for &(start, end) in &event.lines {
            let mut line = event.bytes.get(start..end)?;
            if first && start == 0 {
                line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
            }
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
                // A comment (or the byte order mark's line).
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

/// Where a value sits in a JSON-RPC message, as far as the filter cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ignore,
    Root,
    Id,
    Method,
    Error,
    Result,
    ResultType,
    CacheScope,
    /// The items of the listing at this index of [`LISTINGS`].
    Items(u8),
    Item(u8),
    /// The item's name or URI.
    ItemKey,
    /// Inside a tool item being canonicalized (its other members).
    InTool,
}

/// The [`LISTINGS`] index of `tools/list`.
const TOOLS: Option<u8> = Some(0);

/// One item of a listing: its array ([`LISTINGS`] index), its span and its name or URI
/// (decoded).
struct Item<'a> {
    array: u8,
    start: usize,
    end: usize,
    key: Option<Cow<'a, [u8]>>,
    /// A tool's definition as listed (when the backend pins its tools).
    observed: Option<Observed>,
}

/// What the filter reads of one JSON-RPC message: which members the message has, its id,
/// and the byte spans of the result, its listing arrays, each item (with its name or URI)
/// and `cacheScope`.
#[derive(Default)]
struct MessageShape<'a> {
    /// A member the filter reads appears twice; the id does.
    duplicate: bool,
    duplicate_id: bool,
    /// The message is an array (a batch).
    batch: bool,
    method: bool,
    error: bool,
    has_result: bool,
    /// Offset of the result object's `{`; None: no result, or not an object.
    result: Option<usize>,
    result_is_object: bool,
    /// The id (raw JSON) when it is a string or a number.
    id: Option<&'a [u8]>,
    input_required: bool,
    cache_scope: Option<(usize, usize)>,
    /// The listing arrays of the result: [`LISTINGS`] index and span, in order.
    arrays: Vec<(u8, usize, usize)>,
    /// Which members of the result named as listing items are arrays (bit per index).
    array_bits: u8,
    items_read: Vec<Item<'a>>,
    /// The name or URI (decoded) of the item being read.
    item_key: Option<Cow<'a, [u8]>>,
    /// The backend's pins, when tool items are canonicalized as they are read.
    pinned: Option<Arc<ToolPins>>,
    /// The canonical form of the tool item being read (`in_tool`), in a reused arena.
    canon: Canonicalizer,
    in_tool: bool,
}

impl MessageShape<'_> {
    /// Whether the event of a value in `slot` belongs to the tool item being canonicalized.
    fn digests(&self, slot: Slot) -> bool {
        self.in_tool && matches!(slot, Slot::Item(_) | Slot::ItemKey | Slot::InTool)
    }
}

impl<'a> json::Visitor<'a> for MessageShape<'a> {
    type Slot = Slot;
    type Error = json::SyntaxError;
    const ROOT: Slot = Slot::Root;
    const IGNORE: Slot = Slot::Ignore;

    fn member(&mut self, object: Slot, key: &[u8]) -> Slot {
        if self.in_tool && object != Slot::Ignore {
            self.canon.member(key);
        }
        match object {
            Slot::Root => match key {
                b"id" => Slot::Id,
                b"method" => Slot::Method,
                b"error" => Slot::Error,
                b"result" => Slot::Result,
                _ => Slot::Ignore,
            },
            Slot::Result => match key {
                b"cacheScope" => Slot::CacheScope,
                b"resultType" => Slot::ResultType,
                _ => LISTINGS
                    .iter()
                    .position(|l| l.items.as_bytes() == key)
                    .and_then(|i| u8::try_from(i).ok())
                    .map_or(Slot::Ignore, Slot::Items),
            },
            Slot::Item(i)
                if listing_at(i)
                    .and_then(|l| l.key)
                    .is_some_and(|k| k.key().as_bytes() == key) =>
            {
                Slot::ItemKey
            }
            Slot::Item(_) | Slot::InTool if self.in_tool => Slot::InTool,
            _ => Slot::Ignore,
        }
    }

    fn element(&mut self, array: Slot) -> Slot {
        match array {
            Slot::Items(i) => Slot::Item(i),
            Slot::InTool => Slot::InTool,
            _ => Slot::Ignore,
        }
    }

    fn duplicate_key(&mut self, slot: Slot, _at: usize) {
        // A duplicate of a member the filter does not read changes nothing it decides
        // (kept items are passed on as the server wrote them). In a tool item held to its pin,
        // it leaves the tool without a canonical form: it matches no pin.
        if slot == Slot::InTool {
            self.canon.duplicate();
        } else if slot != Slot::Ignore {
            self.duplicate = true;
            self.duplicate_id |= slot == Slot::Id;
        }
    }

    fn wants_text(&self, slot: Slot) -> bool {
        matches!(slot, Slot::ItemKey | Slot::ResultType | Slot::InTool)
            || matches!(slot, Slot::Item(i) if self.pinned.is_some() && Some(i) == TOOLS)
    }

    fn value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), json::SyntaxError> {
        if matches!(slot, Slot::Item(i) if self.pinned.is_some() && Some(i) == TOOLS) {
            self.canon.reset();
            self.in_tool = true;
        }
        if self.digests(slot) {
            self.canon.value(&val);
        }
        match (slot, val) {
            (Slot::Root, Val::Array) => self.batch = true,
            (Slot::Id, Val::Str { raw, .. } | Val::Number(raw)) => self.id = Some(raw),
            (Slot::Method, _) => self.method = true,
            (Slot::Error, _) => self.error = true,
            (Slot::Result, val) => {
                self.has_result = true;
                self.result_is_object = matches!(val, Val::Object);
            }
            (Slot::Items(i), Val::Array) => self.array_bits |= 1 << i,
            (Slot::Item(_), _) => self.item_key = None,
            (
                Slot::ItemKey,
                Val::Str {
                    decoded: Some(s), ..
                },
            ) => {
                // A tool that is not pinned needs no digest: the rest of it is not read.
                let unpinned =
                    |p: &ToolPins| std::str::from_utf8(&s).map_or(true, |n| p.get(n).is_none());
                if self.in_tool && self.pinned.as_deref().is_some_and(unpinned) {
                    self.in_tool = false;
                }
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
        if self.digests(slot) {
            self.canon.closed();
        }
        match slot {
            Slot::Result if self.result_is_object => self.result = Some(start),
            Slot::Items(i) if self.array_bits & (1 << i) != 0 => self.arrays.push((i, start, end)),
            Slot::CacheScope => self.cache_scope = Some((start, end)),
            Slot::Item(array) => self.items_read.push(Item {
                array,
                start,
                end,
                key: self.item_key.take(),
                observed: std::mem::take(&mut self.in_tool).then(|| match self.canon.text() {
                    Ok(text) => Observed::Digest(Digest::of(text)),
                    Err(_) => Observed::Unreadable,
                }),
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

    const SSE: [(&str, &str); 2] = [(":status", "200"), ("content-type", "text/event-stream")];

    fn headers(h: &[(&str, &str)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// The filter of an SSE answer to a `tools/list` POST (`get`: to a GET).
    fn sse_filter(e: &Engine, get: bool) -> ListingFilter {
        let mut flow = RequestFlow::new();
        let method = if get { "GET" } else { "POST" };
        let input = HeadersInput {
            headers: headers(&[
                (":method", method),
                (":path", "/mcp"),
                ("content-type", "application/json"),
            ]),
            end_of_stream: get,
            port: 8443,
            route_name: Some("tools".into()),
            ..HeadersInput::default()
        };
        let mut a = flow.on_headers(e, input);
        if !get {
            let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
            a = flow.on_body(e, body.len(), true, move |_| Some(body));
        }
        let Next::Allow {
            listing: Some(mut f),
            ..
        } = a
        else {
            panic!("no filter: {a:?}")
        };
        assert_eq!(f.listing.is_some(), !get);
        f.on_headers(&headers(&SSE));
        f
    }

    /// The SSE reading as the standard says, on the whole text: a byte order mark first is
    /// dropped, lines end with CRLF, LF or CR, an event is its lines up to a blank one.
    fn reference(f: &mut ListingFilter, e: &Engine, stream: &[u8]) -> Vec<u8> {
        let stream = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
        let mut out = Vec::new();
        let mut lines: Vec<&[u8]> = Vec::new();
        let mut rest = stream;
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line = &rest[..end];
            let skip = if rest[end..].starts_with(b"\r\n") {
                2
            } else {
                1
            };
            rest = &rest[end + skip..];
            if line.is_empty() {
                out.extend(reference_event(f, e, &std::mem::take(&mut lines)));
            } else {
                lines.push(line);
            }
        }
        out
    }

    fn reference_event(f: &mut ListingFilter, e: &Engine, lines: &[&[u8]]) -> Vec<u8> {
        let (mut name, mut data, mut id, mut retry) = (None, Vec::new(), None, None);
        for line in lines {
            let Ok(line) = std::str::from_utf8(line) else {
                if line.starts_with(b"data:") || *line == b"data" {
                    let v = &line[line.len().min(5)..];
                    data.push(v.strip_prefix(b" ").unwrap_or(v).to_vec());
                    continue;
                }
                return f.sse_error(None);
            };
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => name = Some(value),
                "data" => data.push(value.as_bytes().to_vec()),
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
        let joined = data.join(&b'\n');
        let message = name.is_none_or(|n| n.is_empty() || n == "message") && !joined.is_empty();
        let body = if message && (f.listing.is_some() || may_hold_listing(&joined)) {
            match f.read_message(e, &joined, false) {
                Read::Filtered(v) => v,
                Read::Unchanged => joined,
                Read::NotJsonRpc if f.listing.is_none() => joined,
                Read::NotJsonRpc => return f.sse_error(None),
                Read::Unreadable(id) => {
                    let id = id.map(<[u8]>::to_vec);
                    return f.sse_error(id.as_deref());
                }
            }
        } else if std::str::from_utf8(&joined).is_ok() {
            joined
        } else {
            return f.sse_error(None);
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
        let pieces: [&[u8]; 27] = [
            b"data: ",
            b"data:",
            b"data",
            listing.as_bytes(),
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","name":"rm"}]}}"#,
            br#"{"jsonrpc":"2.0","id":9,"result":{"prompts":[{"name":"p"}],"tools":[{"name":"rm"}]}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
            b"event: message",
            b"event: other",
            b"event:",
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
            b"\r",
            "é".as_bytes(),
            b"\xff",
            b"\xc3",
            b"\xEF\xBB\xBF",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..4000 {
            let get = round % 2 == 1;
            let mut stream = Vec::new();
            for _ in 0..rng.below(24) {
                stream.extend_from_slice(rng.pick(&pieces));
            }
            // Events end where the reference saw them end: compare on whole events.
            stream.extend_from_slice(b"\n\n");
            let want = reference(&mut sse_filter(&e, get), &e, &stream);
            let mut f = sse_filter(&e, get);
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
                "get {get}: {:?}",
                String::from_utf8_lossy(&stream)
            );
            assert_eq!(got, want);
        }
    }

    #[test]
    fn tools_are_the_listing_pins_hold() {
        let tools = TOOLS.and_then(listing_at).map(|l| (l.method, l.items));
        assert_eq!(tools, Some(("tools/list", "tools")));
    }

    #[test]
    fn only_text_that_may_name_a_listing_member_is_parsed_on_other_streams() {
        for (text, may) in [
            (
                &br#"{"result":{"content":[{"text":"all tools"}]}}"#[..],
                false,
            ),
            (br#"{"result":{"content":[{"text":"tools"}]}}"#, true),
            (br#"{"result":{"tools":[]}}"#, true),
            (br#"{"result":{"resourceTemplates":[]}}"#, true),
            (br#"{"result":{"resources" :[]}}"#, true),
            (br#"{"result":{"tool":[],"prompt":1,"resource":2}}"#, false),
            (br#"{"result":{"\u0074ools":[]}}"#, true),
            (br#"{"result":{"text":"say \"hi\""}}"#, true),
            (b"", false),
            (b"\"", false),
        ] {
            assert_eq!(
                may_hold_listing(text),
                may,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
