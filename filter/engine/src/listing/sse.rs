//! SSE streams: events framed as their bytes arrive ([`SseFramer`], at most
//! `listings.maxBytes` held), then written again from their fields, a `message` event's data
//! filtered as a JSON-RPC message.

use std::borrow::Cow;

use super::framer::{Framed, PendingEvent};
use super::message::{may_hold_listing, Read};
use super::{reuse, Judge, ListingFilter};
use crate::bytes::find_either;

impl ListingFilter {
    /// An SSE event carrying the error.
    pub(super) fn sse_error(&self, id: Option<&[u8]>) -> Vec<u8> {
        let mut out = b"event: message\ndata: ".to_vec();
        out.extend_from_slice(&self.error(id));
        out.extend_from_slice(b"\n\n");
        out
    }

    /// Reads an SSE chunk; returns the rewritten events it completed.
    pub(super) fn feed_sse(
        &mut self,
        judge: Judge<'_>,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_sse(judge, chunk, &mut out);
        if end_of_stream {
            self.end_sse();
        }
        out
    }

    /// The stream ended: an event not ended by a blank line is dropped (clients do not
    /// dispatch it), and so is a kept event being followed.
    pub(super) fn end_sse(&mut self) {
        self.framer.end();
        self.reuse.following = None;
    }

    /// Reads SSE bytes, writing the events they complete to `out`.
    fn read_sse(&mut self, judge: Judge<'_>, chunk: &[u8], out: &mut Vec<u8>) {
        let mut rest = chunk;
        while !rest.is_empty() {
            if self.framer.at_event_start() {
                match self.follow(judge, rest, out) {
                    Followed::Read(n) => {
                        rest = rest.get(n..).unwrap_or_default();
                        continue;
                    }
                    Followed::Differs(f) => {
                        // What matched is read as any event's bytes, then the rest.
                        self.reuse.follow_off = true;
                        let read = f.read_so_far(self.id.as_deref());
                        self.read_sse(judge, &read, out);
                        self.reuse.follow_off = false;
                        continue;
                    }
                    Followed::No => {}
                }
            }
            match self.framer.step(&mut rest, self.max_bytes) {
                Framed::Event { event, first } => self.rewrite_event(judge, &event, first, out),
                Framed::TooLarge => out.extend_from_slice(&self.sse_error(None)),
                Framed::More => {}
            }
        }
    }

    /// At an event's start, or while following a kept event: reads as much of `rest` as is
    /// the kept event's bytes, and writes what was written for them once all are read (the
    /// event ends where the kept one did: its bytes are the same). Bytes that differ from
    /// what was followed are read again as any event's.
    fn follow(&mut self, judge: Judge<'_>, rest: &[u8], out: &mut Vec<u8>) -> Followed {
        let kind = reuse::Kind::Event {
            first: self.framer.first(),
        };
        // A kept event just found has the same bytes as `rest` (as far as both go).
        let (mut f, found) = match self.reuse.following.take() {
            Some(f) => (f, false),
            None if self.reuse.follow_off => return Followed::No,
            None => {
                // An event longer than the kept one (a longer id) must still fit.
                let max = self.max_bytes;
                let kept = self.reuse_key(judge).and_then(|(key, store, id)| {
                    store
                        .kept_from(key, kind, id, rest)
                        .filter(|f| f.remaining(id) <= max)
                });
                match kept {
                    Some(f) => (f, true),
                    None => return Followed::No,
                }
            }
        };
        let id = self.id.as_deref();
        let want = f.remaining(id);
        let n = want.min(rest.len());
        let matches = found || rest.get(..n).is_some_and(|r| f.same_next(id, r));
        let written = match (matches, n < want) {
            (false, _) => None,
            (true, true) => {
                f.at += n;
                self.reuse.following = Some(f);
                return Followed::Read(n);
            }
            (true, false) => f.written(id),
        };
        let Some(written) = written else {
            return Followed::Differs(f);
        };
        out.extend_from_slice(&written);
        self.reuse.count();
        // A CR ending the event: a LF right after it is part of that line's end.
        self.framer.passed_event(f.kept.read.last() == Some(&b'\r'));
        Followed::Read(n)
    }

    /// One complete SSE event, written again to `out` from its fields: comments dropped, a
    /// `message` event's data read as a JSON-RPC message. One that is not UTF-8 or whose
    /// message cannot be read is replaced by the error.
    /// `first`: the stream's first event.
    fn rewrite_event(
        &mut self,
        judge: Judge<'_>,
        event: &PendingEvent,
        first: bool,
        out: &mut Vec<u8>,
    ) {
        let kind = reuse::Kind::Event { first };
        let Some(fields) = SseEvent::parse(event, first) else {
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
        let mut filtered = None;
        let data = if read {
            // The strict reader checks every byte (UTF-8 included) of what it accepts.
            match self.read_message(judge, &data, false) {
                Read::Filtered(f, s) => {
                    filtered = Some(s);
                    Ok(Cow::Owned(f))
                }
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
            Ok(data) => {
                let from = out.len();
                fields.write(&data, out);
                // A filtered event is kept for callers judged alike. Its id is located only
                // in an event of one data line: there the message's bytes are that line's
                // and, written, the end of the event before its blank line.
                let Some((spans, written)) = filtered.zip(out.get(from..)) else {
                    return;
                };
                let one_line = fields.data.len() == 1 && !data.contains(&b'\n');
                let at = one_line
                    .then(|| Some((fields.data_at, written.len().checked_sub(data.len() + 2)?)))
                    .flatten();
                let id = self.id_at(spans.zip(at).map(|(s, _)| s), at.unwrap_or_default());
                let id = self.checked(id, &event.bytes, written);
                if let Some((key, store, _)) = self.reuse_key(judge) {
                    store.keep(key, kind, id, &event.bytes, written);
                }
            }
            Err(id) => out.extend_from_slice(&self.sse_error(id.as_deref())),
        }
    }
}

impl ListingFilter {
    /// `id`, when its spans hold the request's id in the bytes read and written; else the
    /// request's id whole (the bytes match only as they are).
    fn checked(&self, id: reuse::IdAt, read: &[u8], written: &[u8]) -> reuse::IdAt {
        let want = self.id.as_deref().map(str::as_bytes);
        match id {
            reuse::IdAt::Spans {
                read: (rs, re),
                written: (ws, we),
            } if read.get(rs..re) == want && written.get(ws..we) == want => id,
            _ => reuse::IdAt::Exact(self.id.clone()),
        }
    }
}

/// What following a kept event did with the bytes read.
enum Followed {
    /// Read this many (the kept event's, so far or to its end).
    Read(usize),
    /// They differ from the kept event's (of which `at` bytes were read).
    Differs(reuse::Following),
    /// Nothing kept is followed.
    No,
}

/// The fields of one SSE event, borrowed from its bytes.
#[derive(Debug, Default)]
struct SseEvent<'e> {
    event: Option<&'e [u8]>,
    data: Vec<&'e [u8]>,
    /// Where the value of the last data line starts in the event's bytes.
    data_at: usize,
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
                b"data" => {
                    e.data.push(value);
                    e.data_at = end.saturating_sub(value.len());
                }
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
