//! One JSON-RPC message of an answer: its shape read with the strict JSON reader (members,
//! id, the spans of the result, its listing arrays and their items), then the message written
//! again with only the items the caller could use, each judged as a call of that item.

use mcp_access_bundle::mcp_methods::LISTINGS;
use std::borrow::Cow;

use super::{listing_at, Judge, ListingFilter, TOOLS};
use crate::bytes::find_either;
use crate::canonical_json::digest_remembered;
use crate::json::{self, Val};
use crate::pins::{Observed, PinCheck};

/// What one JSON-RPC message of the answer is to the filter.
pub(super) enum Read<'t> {
    /// A result holding listings: the message with only the usable items, and the spans of
    /// its top-level id in the text read and in the message written when that id is the
    /// request's, byte for byte ([`IdSpans`]).
    Filtered(Vec<u8>, Option<IdSpans>),
    /// Passed on as it is: an error, a message from the server, a result that lists nothing
    /// (an `input_required` one, the answer to a method the table does not know, a response
    /// holding no listing).
    Unchanged,
    /// JSON, but not a JSON-RPC message (no `result`, `error` or `method`).
    NotJsonRpc,
    /// Cannot be read (malformed, a batch, a duplicate member the filter reads, a listing
    /// result without its items); its id when it was read.
    Unreadable(Option<&'t [u8]>),
}

/// The spans (start, end) of a message's top-level id token in the text read and written.
pub(super) type IdSpans = ((usize, usize), (usize, usize));

/// What a listing shows of a tool the pins name: its digest, or Unreadable when it has no
/// canonical form. None for a tool no pin names (only a pinned tool is digested).
fn observed(p: &PinCheck, item: &Item<'_>, text: &[u8], max_depth: usize) -> Option<Observed> {
    let name = std::str::from_utf8(item.key.as_deref()?).ok()?;
    p.pins().get(name)?;
    let listed = text.get(item.start..item.end).unwrap_or_default();
    Some(match digest_remembered(listed, max_depth) {
        Ok(d) => Observed::Digest(d),
        Err(_) => Observed::Unreadable,
    })
}

impl ListingFilter {
    /// One JSON-RPC message, read with the strict reader (UTF-8 only, nesting bounded, no
    /// duplicate of a member the filter reads: the client would read one copy, the filter
    /// maybe another). `answers` when it is known to answer the request (a JSON body); on a
    /// stream, a response answers it when its id is the request's, byte for byte (any other
    /// spelling is read as another request's, which is filtered all the same).
    ///
    /// The answer to a listing request must be a result holding that listing's array (or an
    /// `input_required` result); the answer to a request of a method the table does not know
    /// is passed on. Any other result is filtered when it holds listing arrays. Filtering keeps the server's bytes
    /// with each listing array holding only the usable items and, where the revision has it,
    /// `cacheScope` set to `"private"`.
    pub(super) fn read_message<'t>(
        &mut self,
        judge: Judge<'_>,
        text: &'t [u8],
        answers: bool,
    ) -> Read<'t> {
        let read = self.read_shape(judge, text, answers);
        if let (Read::Unreadable(_), Some(p)) = (&read, &mut self.items.pins) {
            p.unreadable(text);
        }
        read
    }

    fn read_shape<'t>(&mut self, judge: Judge<'_>, text: &'t [u8], answers: bool) -> Read<'t> {
        let mut m = MessageShape::default();
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
            (true, None) if !self.own_may_list => return Read::Unchanged,
            (true, Some(l)) => Some(l),
            _ => None,
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
        match self.filtered(judge, text, &m, result) {
            Some(out) => {
                let spans = self.id_spans(text, &out, &m);
                Read::Filtered(out, spans)
            }
            None => Read::Unreadable(m.id),
        }
    }

    /// Where the top-level id of `m` (read from `text`) is in `text` and in `out` (what was
    /// written for it), when it is the request's id byte for byte and both spans hold it. The
    /// edits are all inside the result, a member beside the id: the id is where it was before
    /// the result, shifted by the change of length after it.
    fn id_spans(&self, text: &[u8], out: &[u8], m: &MessageShape<'_>) -> Option<IdSpans> {
        let id = self.id.as_deref()?.as_bytes();
        let (s, e) = m.id_span.filter(|_| m.id == Some(id))?;
        let (rs, re) = m.result.zip(m.result_end)?;
        let (ws, we) = if e <= rs {
            (s, e)
        } else if s >= re {
            let shift = |i: usize| (i + out.len()).checked_sub(text.len());
            (shift(s)?, shift(e)?)
        } else {
            return None;
        };
        let held = text.get(s..e) == Some(id) && out.get(ws..we) == Some(id);
        held.then_some(((s, e), (ws, we)))
    }

    /// `text` with each listing array of `m` holding only the usable items and `cacheScope`
    /// set where the revision has it; `result` is the offset of the result's `{`.
    fn filtered(
        &mut self,
        judge: Judge<'_>,
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
        // The pins judge every listed tool first: a drifted copy of a tool anywhere in the
        // listing holds back every copy of it.
        let pinned: Vec<bool> = match &mut self.items.pins {
            Some(p) => {
                p.begin_listing();
                let judged: Vec<bool> = m
                    .items_read
                    .iter()
                    .map(|item| {
                        Some(item.array) != TOOLS
                            || p.listed(
                                item.key.as_deref(),
                                observed(p, item, text, self.max_depth),
                            )
                    })
                    .collect();
                m.items_read
                    .iter()
                    .zip(judged)
                    .map(|(item, ok)| {
                        ok && !(Some(item.array) == TOOLS && p.drifted_here(item.key.as_deref()))
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let mut items = m.items_read.iter().enumerate().peekable();
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
            while let Some((i, item)) = items.next_if(|(_, i)| i.array == index) {
                // A ToolPin holds tools to their pins; other items are not its concern.
                let pinned = pinned.get(i).copied().unwrap_or(true);
                if !pinned
                    || !self
                        .items
                        .usable(judge, (index, listing), item.key.as_deref())
                {
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
}

/// Whether JSON text may have a member named as a listing's items: it holds an escape, or
/// one of those names between quotes (a member name is written either way).
pub(super) fn may_hold_listing(text: &[u8]) -> bool {
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
}

/// One item of a listing: its array ([`LISTINGS`] index), its span and its name or URI
/// (decoded).
struct Item<'a> {
    array: u8,
    start: usize,
    end: usize,
    key: Option<Cow<'a, [u8]>>,
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
    /// The id (raw JSON) when it is a string or a number, and its span.
    id: Option<&'a [u8]>,
    id_span: Option<(usize, usize)>,
    /// The end of the result object (after its `}`).
    result_end: Option<usize>,
    input_required: bool,
    cache_scope: Option<(usize, usize)>,
    /// The listing arrays of the result: [`LISTINGS`] index and span, in order.
    arrays: Vec<(u8, usize, usize)>,
    /// Which members of the result named as listing items are arrays (bit per index).
    array_bits: u8,
    items_read: Vec<Item<'a>>,
    /// The name or URI (decoded) of the item being read.
    item_key: Option<Cow<'a, [u8]>>,
}

impl<'a> json::Visitor<'a> for MessageShape<'a> {
    type Slot = Slot;
    type Error = json::SyntaxError;
    const ROOT: Slot = Slot::Root;
    const IGNORE: Slot = Slot::Ignore;

    fn member(&mut self, object: Slot, key: &[u8]) -> Slot {
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
            _ => Slot::Ignore,
        }
    }

    fn element(&mut self, array: Slot) -> Slot {
        match array {
            Slot::Items(i) => Slot::Item(i),
            _ => Slot::Ignore,
        }
    }

    fn duplicate_key(&mut self, slot: Slot, _at: usize) {
        // A duplicate of a member the filter does not read changes nothing it decides
        // (kept items are passed on as the server wrote them; a tool held to its pin with one
        // has no canonical form, and matches no pin).
        if slot != Slot::Ignore {
            self.duplicate = true;
            self.duplicate_id |= slot == Slot::Id;
        }
    }

    fn wants_text(&self, slot: Slot) -> bool {
        matches!(slot, Slot::ItemKey | Slot::ResultType)
    }

    fn value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), json::SyntaxError> {
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
            Slot::Result if self.result_is_object => {
                self.result = Some(start);
                self.result_end = Some(end);
            }
            Slot::Id if self.id.is_some() => self.id_span = Some((start, end)),
            Slot::Items(i) if self.array_bits & (1 << i) != 0 => self.arrays.push((i, start, end)),
            Slot::CacheScope => self.cache_scope = Some((start, end)),
            Slot::Item(array) => self.items_read.push(Item {
                array,
                start,
                end,
                key: self.item_key.take(),
            }),
            _ => {}
        }
    }
}
