//! Per-caller filtering of listings (docs/semantics.md §5.4): `tools/list`, `prompts/list`,
//! `resources/list` and `resources/templates/list` answers keep only the items the caller
//! could use, judged by [`Engine::item_refusal`] as if each item were called.
//!
//! The answer to a listing request is read whatever its status: a JSON body whole (at most
//! `listings.maxBytes`), an SSE stream event by event as it streams, holding at most one event
//! of `listings.maxBytes`. Any other SSE stream (the GET streams, a POST answered with a
//! stream) is read the same way, and so is the JSON answer to a call in a session: there, a
//! JSON-RPC response whose result holds `tools`, `prompts`, `resources` or `resourceTemplates`
//! arrays is filtered as those listings, unless it answers a request of a method the method
//! table does not know (servers that route answers by id alone put a listing asked under the
//! same id on another POST's stream; a JSON answer with none passes byte for byte). Events are rewritten from what
//! was parsed (never passed on as raw bytes the filter did not understand). What cannot be
//! read (malformed, too large, compressed, an unexpected media type) is replaced by a
//! JSON-RPC error, never passed on unfiltered. What a filtering wrote is reused for the same
//! bytes and a caller judged alike ([`reuse`]).

mod framer;
mod items;
mod message;
pub mod reuse;
mod sse;

use std::rc::Rc;

use mcp_access_bundle::mcp_methods::headers::SESSION_ID;
use mcp_access_bundle::mcp_methods::{Listing, Method, Revision, LISTINGS};

use crate::jsonrpc::{self, INTERNAL_ERROR};
use crate::pins::{DriftPort, PinCheck, PinEvent};
use crate::policy::Engine;
use crate::request::{Headers, McpOp, Request};

use framer::SseFramer;
use items::ItemJudge;
use message::Read;
use reuse::{ListingStore, ReuseState};

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
    /// A JSON answer to a request of another known method in a session: read whole, filtered
    /// only if it holds listing arrays (a server routing answers by id may give it the
    /// listing another POST of the session asked under the same id), else passed as it is.
    Own,
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

/// The key of reused answers, their store and the request's id (raw JSON).
type ReuseKey<'f> = (&'f reuse::Key, &'f reuse::ListingStore, Option<&'f str>);

/// What judges a listing's items: the engine and the request allowed (None: no item is
/// usable).
#[derive(Clone, Copy)]
struct Judge<'a> {
    engine: &'a Engine,
    request: Option<&'a Request>,
}

/// The filter of one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingFilter {
    /// The listing the request asked for; None: the request is not a listing, only what its
    /// stream carries for other requests can be one.
    listing: Option<&'static Listing>,
    /// The request id (raw JSON) of a JSON-RPC request: a response with this id answers it.
    /// Also the id of the error that replaces what cannot be filtered, when that has none.
    id: Option<String>,
    /// The request is not a listing but a method of the method table: its own answer holding
    /// listing arrays is filtered too (a server that routes answers by id alone, as the SDKs'
    /// do, gives a listing asked under the same id on another POST to this one's stream).
    own_may_list: bool,
    /// `own_may_list`, and the request belongs to a session (`Mcp-Session-Id`): its JSON answer
    /// is read too. Only a server keeping sessions routes one POST's answer to another.
    own_json: bool,
    cache_scope: bool,
    max_bytes: usize,
    max_depth: usize,
    mode: Mode,
    /// The error replacing a refused body was sent.
    refused: bool,
    /// SSE: how the stream's bytes are cut into events.
    framer: SseFramer,
    /// What judges the items (and holds tools to their pins).
    items: ItemJudge,
    /// Reuse of answers kept by others ([`reuse`]).
    reuse: ReuseState,
}

impl ListingFilter {
    /// Whether `req`, the request this filter answers, is sent upstream asking for
    /// `Accept-Encoding: identity`, so that its answer can be read: a listing, a GET opening
    /// or resuming a stream, a call in a session ([`Mode::Own`]) — when the client asked for
    /// another coding (an edit of the request headers makes Envoy match the route again;
    /// servers do not compress for a client that asked for nothing, and an encoded answer is
    /// refused all the same).
    pub(crate) fn wants_identity(&self, engine: &Engine, req: &Request) -> bool {
        let read = self.listing.is_some()
            || self.own_json
            || req.mcp == McpOp::Transport && req.method == "GET";
        // Nor when a route matches on it: the edit would route the request again (an
        // encoded answer is then refused).
        let routed_on = engine
            .settings
            .route_match_headers
            .iter()
            .any(|h| h == "accept-encoding");
        read && !routed_on
            && req
                .headers
                .iter()
                .any(|(n, v)| n == "accept-encoding" && !v.trim().eq_ignore_ascii_case("identity"))
    }

    /// Whether `req` is a call of a method of the method table that no listing answers.
    fn own_may_list(req: &Request) -> bool {
        matches!(&req.mcp, McpOp::Call { method, .. }
            if method.listing().is_none() && (method.spec().is_some() || method.is_base()))
    }

    /// The filter of the response to `req`, just allowed, when the bundle filters listings.
    /// Its response headers tell whether it may carry a listing ([`ListingFilter::on_headers`]):
    /// any answer to a listing request, an SSE stream answering any other request.
    pub(crate) fn for_allowed(
        engine: &Engine,
        req: &Request,
        id: Option<String>,
        revision: Revision,
        drift: Option<DriftPort>,
        store: Option<Rc<ListingStore>>,
    ) -> Option<ListingFilter> {
        if !engine.settings.listings.filter {
            return None;
        }
        let backend = req.target.backend.and_then(|b| engine.backends.get(b));
        let pins = backend.and_then(|b| Some(PinCheck::new(&b.id, b.pins.clone()?, drift)));
        let listing = req.mcp.called().and_then(Method::listing);
        // Only a request's own id tells its answer apart (not a notification's or a reply's).
        let id = match listing {
            Some(_) => id,
            None => id.filter(|_| matches!(req.mcp, McpOp::Call { .. })),
        };
        let own_may_list = listing.is_none() && Self::own_may_list(req);
        Some(ListingFilter {
            listing,
            id,
            own_may_list,
            own_json: own_may_list && req.headers.get(SESSION_ID).is_some(),
            cache_scope: revision.has_cache_scope(),
            max_bytes: usize::try_from(engine.settings.listings.max_bytes).unwrap_or(usize::MAX),
            max_depth: usize::try_from(engine.settings.limits.max_json_depth).unwrap_or(64),
            mode: Mode::Unknown,
            refused: false,
            framer: SseFramer::default(),
            // Never with pins: their drift is observed per listing.
            reuse: ReuseState::new(store.filter(|_| pins.is_none())),
            items: ItemJudge::new(pins),
        })
    }

    /// Whether the response headers must be read whole to judge the response: always for a
    /// listing request; for any other only when `content_type` (the response's `Content-Type`)
    /// may name an event stream. Otherwise the response is passed as it is, as
    /// [`ListingFilter::on_headers`] would decide. Envoy holds `Content-Type` once (copies are
    /// joined with commas), so its one value is every copy.
    fn needs_headers(&self, content_type: Option<&str>) -> bool {
        self.listing.is_some() || content_type.is_some_and(|ct| essences(ct).any(may_be_stream))
    }

    /// The response headers, read as far as they are needed: `content_type` (Envoy holds it
    /// once), then `content_encoding` (its first copy) for the JSON answer to a call in a
    /// session, or `all` of them ([`ListingFilter::on_headers`]) where
    /// [`ListingFilter::needs_headers`] says. Keep: the response carries no listing and the
    /// filter is done.
    pub fn on_response_headers(
        &mut self,
        content_type: Option<&str>,
        content_encoding: impl FnOnce() -> Option<String>,
        all: impl FnOnce() -> Headers,
    ) -> HeadersAction {
        if self.needs_headers(content_type) {
            return self.on_headers(&all());
        }
        // A client reads a body as JSON by its media type's prefix, as the SDKs do.
        if !(self.own_json && content_type.is_some_and(|ct| essences(ct).any(may_be_json))) {
            self.mode = Mode::Pass;
            return HeadersAction::Keep;
        }
        let encoded =
            content_encoding().is_some_and(|e| !e.trim().eq_ignore_ascii_case("identity"));
        self.mode = match encoded {
            true => Mode::Refuse { sse: false },
            false => Mode::Own,
        };
        HeadersAction::Rewrite
    }

    /// Never reuses an answer kept by another filter, nor keeps its own: each is filtered
    /// afresh (differential tests compare both ways).
    pub fn without_reuse(mut self) -> ListingFilter {
        self.reuse.turn_off();
        self
    }

    /// The key of reused answers, made when first needed, and the request's id (raw JSON);
    /// None: no reuse.
    fn reuse_key(&mut self, judge: Judge<'_>) -> Option<ReuseKey<'_>> {
        let settings = reuse::Settings {
            cache_scope: self.cache_scope,
        };
        let (key, store) = self.reuse.key(judge.engine, judge.request, settings)?;
        Some((key, store, self.id.as_deref()))
    }

    /// Where a filtered message's id is, for keeping it: at its spans (`at`: offsets of the
    /// message in the bytes read and written) when located, else the request's id whole.
    fn id_at(&self, spans: Option<message::IdSpans>, at: (usize, usize)) -> reuse::IdAt {
        let shift = |(s, e): (usize, usize), by: usize| (s + by, e + by);
        match spans {
            Some((read, written)) => reuse::IdAt::Spans {
                read: shift(read, at.0),
                written: shift(written, at.1),
            },
            None => reuse::IdAt::Exact(self.id.clone()),
        }
    }

    /// How many answers were written from kept ones since the last call (the host counts
    /// them in `mcp_access.listings.reused`).
    pub fn take_reused(&mut self) -> u32 {
        self.reuse.take_count()
    }

    /// What the listings read so far said about pinned tools (drift, and its end), for the
    /// host's stats and logs; each event is given once.
    pub fn take_pin_events(&mut self) -> Vec<PinEvent> {
        self.items.take_pin_events()
    }

    /// The response headers arrived (names lowercase, `:status` included): see [`mode_for`].
    pub fn on_headers(&mut self, headers: &Headers) -> HeadersAction {
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
    /// `read` fetches everything buffered (JSON). SSE events not ended are dropped. `req`: as
    /// for [`ListingFilter::on_body`].
    pub fn on_trailers(
        &mut self,
        engine: &Engine,
        req: Option<&Request>,
        read: impl FnOnce() -> Option<Vec<u8>>,
    ) -> BodyAction {
        let judge = Judge {
            engine,
            request: req,
        };
        match self.mode {
            Mode::Pass => BodyAction::Pass,
            Mode::Sse => {
                self.end_sse();
                BodyAction::Pass
            }
            Mode::Unknown | Mode::Refuse { .. } => self.refuse_body(),
            Mode::Own => {
                let body = read().unwrap_or_default();
                if body.len() > self.max_bytes {
                    self.mode = Mode::Refuse { sse: false };
                    return self.refuse_body();
                }
                self.filter_own(judge, &body)
            }
            Mode::Json | Mode::Lenient => {
                let body = read().unwrap_or_default();
                if body.len() > self.max_bytes {
                    return self.refuse_body();
                }
                BodyAction::Replace(self.filter_body(judge, &body))
            }
        }
    }

    /// A body chunk arrived. JSON: `buffered` is the size of everything buffered so far and
    /// `read` fetches it (called at the end of the stream only). SSE: `read` fetches this
    /// chunk (`buffered` bytes). `req`: the request allowed, which the flow keeps
    /// ([`crate::flow::RequestFlow::request`]); items are judged as calls made by it, so
    /// without it none is listed.
    pub fn on_body(
        &mut self,
        engine: &Engine,
        req: Option<&Request>,
        buffered: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> BodyAction {
        let judge = Judge {
            engine,
            request: req,
        };
        match self.mode {
            Mode::Pass => BodyAction::Pass,
            Mode::Unknown | Mode::Refuse { .. } => self.refuse_body(),
            Mode::Json | Mode::Lenient | Mode::Own => {
                if buffered > self.max_bytes {
                    // Too large to filter: what is buffered is replaced by the error.
                    self.mode = Mode::Refuse { sse: false };
                    return self.refuse_body();
                }
                if !end_of_stream {
                    return BodyAction::Buffer;
                }
                let body = read(buffered).unwrap_or_default();
                match self.mode {
                    Mode::Own => self.filter_own(judge, &body),
                    _ => BodyAction::Replace(self.filter_body(judge, &body)),
                }
            }
            Mode::Sse => {
                let chunk = if buffered == 0 {
                    Vec::new()
                } else {
                    read(buffered).unwrap_or_default()
                };
                BodyAction::Replace(self.feed_sse(judge, &chunk, end_of_stream))
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

    /// A whole body (the answer to the listing request): the filtered message, the body
    /// unchanged, or the error (echoing the request's id: the body answers it). A non-2xx
    /// body is passed on unless it is a JSON-RPC result or JSON the filter cannot read.
    fn filter_body(&mut self, judge: Judge<'_>, body: &[u8]) -> Vec<u8> {
        let lenient = self.mode == Mode::Lenient;
        let kind = reuse::Kind::Body;
        let reused = self.reuse_key(judge).and_then(|(k, store, id)| {
            let f = store.kept_from(k, kind, id, body)?;
            (f.remaining(id) == body.len()).then(|| f.written(id))?
        });
        if let Some(out) = reused {
            self.reuse.count();
            return out;
        }
        match self.read_message(judge, body, true) {
            Read::Filtered(out, spans) => {
                let id = self.id_at(spans, (0, 0));
                if let Some((key, store, _)) = self.reuse_key(judge) {
                    store.keep(key, kind, id, body, &out);
                }
                out
            }
            Read::Unchanged => body.to_vec(),
            Read::NotJsonRpc if lenient => body.to_vec(),
            Read::Unreadable(_) if lenient && !looks_like_json(body) => body.to_vec(),
            Read::NotJsonRpc | Read::Unreadable(_) => self.error(None),
        }
    }
}

impl ListingFilter {
    /// A whole JSON answer to a request that is not a listing ([`Mode::Own`]): passed as it
    /// is unless it holds listing arrays; then filtered, or the error when it cannot be read.
    fn filter_own(&mut self, judge: Judge<'_>, body: &[u8]) -> BodyAction {
        if !message::may_hold_listing(body) {
            return BodyAction::Pass;
        }
        match self.read_message(judge, body, true) {
            Read::Filtered(out, _) => BodyAction::Replace(out),
            Read::Unchanged | Read::NotJsonRpc => BodyAction::Pass,
            Read::Unreadable(_) => BodyAction::Replace(self.error(None)),
        }
    }
}

/// How a response is read, from its headers (names lowercase, `:status` included).
///
/// The answer to a listing request (`listing`): a 2xx one as its one `Content-Type` says (a
/// `Content-Encoding` other than `identity`, another media type or several: refused); a
/// non-2xx one as SSE if that is its one media type, else whole (refused if encoded).
/// The answer to another request is read only when a client could take it for an SSE stream
/// (refused if encoded, of several media types, or of a type that only starts like one).
/// Several media types in one value (joined with commas) count as several.
fn mode_for(listing: bool, headers: &Headers) -> Mode {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
    };
    // Each media type of each copy (a copy may hold several, joined with commas).
    let (mut types, mut sse, mut exact_sse, mut json) = (0usize, false, false, false);
    for essence in values("content-type").flat_map(essences) {
        types += 1;
        sse |= may_be_stream(essence);
        exact_sse |= essence.eq_ignore_ascii_case("text/event-stream");
        json |= essence.eq_ignore_ascii_case("application/json");
    }
    if !listing && !sse {
        return Mode::Pass;
    }
    let encoded = values("content-encoding").any(|e| !e.trim().eq_ignore_ascii_case("identity"));
    let status = values(":status").next().and_then(|s| s.parse::<u16>().ok());
    let success = status.is_some_and(|s| (200..300).contains(&s));
    // Read as an event stream only when it is exactly one: anything a client could take
    // for one otherwise (another type beside it, a longer name) is refused.
    let stream = types == 1 && exact_sse;
    match () {
        _ if encoded || (sse && !stream) => Mode::Refuse { sse: stream },
        _ if sse => Mode::Sse,
        _ if !success => Mode::Lenient,
        _ if json && types == 1 => Mode::Json,
        _ => Mode::Refuse { sse: false },
    }
}

/// The essences (type/subtype, trimmed) of a `Content-Type` value holding one media type or
/// several joined with commas.
fn essences(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
}

/// Whether a client could read a media type as an event stream: SDKs match the prefix
/// (`text/event-stream`, any case).
fn may_be_stream(essence: &str) -> bool {
    essence
        .get(..17)
        .is_some_and(|p| p.eq_ignore_ascii_case("text/event-stream"))
}

/// Whether a client could read a media type as JSON: SDKs match the prefix
/// (`application/json`, any case).
fn may_be_json(essence: &str) -> bool {
    essence
        .get(..16)
        .is_some_and(|p| p.eq_ignore_ascii_case("application/json"))
}

/// The [`LISTINGS`] index of `tools/list`.
const TOOLS: Option<u8> = Some(0);

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

#[cfg(test)]
mod reuse_tests;

#[cfg(test)]
mod tests {
    use super::message::may_hold_listing;
    use super::*;
    use crate::flow::{HeadersInput, Next, RequestFlow};
    use crate::test_util::Rng;

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
    fn sse_filter(e: &Engine, get: bool) -> (ListingFilter, Request) {
        let mut flow = RequestFlow::new();
        let method = if get { "GET" } else { "POST" };
        let input = HeadersInput {
            headers: Headers::from(headers(&[
                (":method", method),
                (":path", "/mcp"),
                ("content-type", "application/json"),
            ])),
            end_of_stream: get,
            port: 8443,
            route_name: Some("tools".into()),
            ..HeadersInput::default()
        };
        let mut a = flow.on_headers(e, input).next;
        if !get {
            let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
            a = flow.on_body(e, body.len(), true, move |_| Some(body)).next;
        }
        let (Next::Allow { .. }, Some(f)) = (&a, flow.response_filter()) else {
            panic!("no filter: {a:?}")
        };
        let mut f = f.clone();
        assert_eq!(f.listing.is_some(), !get);
        f.on_headers(&Headers::from(headers(&SSE)));
        let req = flow
            .request()
            .cloned()
            .unwrap_or_else(|| panic!("no request"));
        (f, req)
    }

    /// The Content-Type alone decides a non-listing answer exactly as the whole headers do:
    /// it passes unless a client could take it for an event stream; what only starts like
    /// one, or holds another type beside one, is refused.
    #[test]
    fn content_type_alone_decides_a_non_listing_answer_as_the_headers_do() {
        let cases: [(&str, Mode); 12] = [
            ("application/json", Mode::Pass),
            ("text/plain", Mode::Pass),
            ("", Mode::Pass),
            ("text/event-stream", Mode::Sse),
            ("Text/Event-Stream; charset=utf-8", Mode::Sse),
            (" text/event-stream ", Mode::Sse),
            ("text/event-streamx", Mode::Refuse { sse: false }),
            ("TEXT/EVENT-STREAM-extra;q=1", Mode::Refuse { sse: false }),
            (
                "application/json,text/event-stream",
                Mode::Refuse { sse: false },
            ),
            (
                "text/event-stream, application/json",
                Mode::Refuse { sse: false },
            ),
            (
                "text/event-stream,text/event-stream",
                Mode::Refuse { sse: false },
            ),
            ("text/event-str", Mode::Pass),
        ];
        let e = Engine::from_json(BUNDLE.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let (f, _) = sse_filter(&e, true);
        assert!(f.listing.is_none(), "a GET stream is not a listing request");
        for (ct, want) in cases {
            let h = headers(&[(":status", "200"), ("content-type", ct)]);
            assert_eq!(mode_for(false, &Headers::from(&h)), want, "{ct:?}");
            assert_eq!(f.needs_headers(Some(ct)), want != Mode::Pass, "{ct:?}");
        }
        assert!(!f.needs_headers(None));
        assert_eq!(
            mode_for(false, &Headers::from(headers(&[(":status", "200")]))),
            Mode::Pass
        );
        // Encoded streams are refused as streams.
        let h = headers(&[SSE[0], SSE[1], ("content-encoding", "gzip")]);
        assert_eq!(
            mode_for(false, &Headers::from(&h)),
            Mode::Refuse { sse: true }
        );
        // A listing request's answer always needs its headers.
        let (f, _) = sse_filter(&e, false);
        assert!(f.needs_headers(Some("application/json")) && f.needs_headers(None));
    }

    /// The SSE reading as the standard says, on the whole text: a byte order mark first is
    /// dropped, lines end with CRLF, LF or CR, an event is its lines up to a blank one.
    fn reference(f: &mut ListingFilter, e: Judge<'_>, stream: &[u8]) -> Vec<u8> {
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

    fn reference_event(f: &mut ListingFilter, e: Judge<'_>, lines: &[&[u8]]) -> Vec<u8> {
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
                Read::Filtered(v, _) => v,
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
            let (mut f, req) = sse_filter(&e, get);
            let judge = Judge {
                engine: &e,
                request: Some(&req),
            };
            let want = reference(&mut f.clone(), judge, &stream);
            let mut got = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(rest.len().min(1 + rng.below(40)));
                got.extend(f.feed_sse(judge, chunk, tail.is_empty()));
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
