//! SSE streams: events read as their bytes arrive (at most `listings.maxBytes` held), then
//! written again from their fields, a `message` event's data filtered as a JSON-RPC message.

use std::borrow::Cow;

use super::message::{may_hold_listing, Read};
use super::{reuse, Judge, ListingFilter};

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
        // An event not ended by a blank line when the stream ends is not dispatched by
        // clients; it is dropped.
        if end_of_stream {
            self.pending = None;
            self.following = None;
        }
        out
    }

    /// Reads SSE bytes, writing the events they complete to `out`.
    fn read_sse(&mut self, judge: Judge<'_>, chunk: &[u8], out: &mut Vec<u8>) {
        let mut rest = chunk;
        // The event being read, held in `self` between chunks (boxed: a filter that never
        // reads a stream stays small).
        let mut pending = self.pending.take().unwrap_or_default();
        while !rest.is_empty() {
            if self.skipping {
                rest = self.skip_event(rest);
                continue;
            }
            if pending.bytes.is_empty() && !self.after_cr {
                match self.follow(judge, rest, out) {
                    Followed::Read(n) => {
                        rest = rest.get(n..).unwrap_or_default();
                        continue;
                    }
                    Followed::Differs(f) => {
                        // What matched is read as any event's bytes, then the rest.
                        self.pending = Some(pending);
                        self.follow_off = true;
                        let read = f.read_so_far(self.id.as_deref());
                        self.read_sse(judge, &read, out);
                        self.follow_off = false;
                        pending = self.pending.take().unwrap_or_default();
                        continue;
                    }
                    Followed::No => {}
                }
            }
            // Scanned no further than one byte past what the event may still hold.
            let room = self.max_bytes.saturating_sub(pending.bytes.len());
            let window = rest.get(..room.saturating_add(1)).unwrap_or(rest);
            let (take, done) = match pending.scan(window, &mut self.after_cr) {
                Some(n) => (n, true),
                None => (window.len(), false),
            };
            let (head, tail) = rest.split_at(take);
            rest = tail;
            if head.len() > room {
                let line_ended = pending.line_start == pending.bytes.len() + head.len();
                *pending = PendingEvent::default();
                self.stream_start = false;
                out.extend_from_slice(&self.sse_error(None));
                if !done {
                    self.skipping = true;
                    self.at_line_start = line_ended;
                }
                continue;
            }
            pending.bytes.extend_from_slice(head);
            if done {
                self.rewrite_event(judge, &pending, out);
                *pending = PendingEvent::default();
                self.stream_start = false;
            }
        }
        self.pending = Some(pending);
    }

    /// At an event's start, or while following a kept event: reads as much of `rest` as is
    /// the kept event's bytes, and writes what was written for them once all are read (the
    /// event ends where the kept one did: its bytes are the same). Bytes that differ from
    /// what was followed are read again as any event's.
    fn follow(&mut self, judge: Judge<'_>, rest: &[u8], out: &mut Vec<u8>) -> Followed {
        let kind = reuse::Kind::Event {
            first: self.stream_start,
        };
        // A kept event just found has the same bytes as `rest` (as far as both go).
        let (mut f, found) = match self.following.take() {
            Some(f) => (f, false),
            None if self.follow_off => return Followed::No,
            None => {
                // An event longer than the kept one (a longer id) must still fit.
                let max = self.max_bytes;
                let kept = self.reuse_key(judge).and_then(|(key, id)| {
                    reuse::kept_from(key, kind, id, rest).filter(|f| f.remaining(id) <= max)
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
                self.following = Some(f);
                return Followed::Read(n);
            }
            (true, false) => f.written(id),
        };
        let Some(written) = written else {
            return Followed::Differs(f);
        };
        out.extend_from_slice(&written);
        self.count_reused();
        self.stream_start = false;
        // A CR ending the event: a LF right after it is part of that line's end.
        self.after_cr = f.kept.read.last() == Some(&b'\r');
        Followed::Read(n)
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
    fn rewrite_event(&mut self, judge: Judge<'_>, event: &PendingEvent, out: &mut Vec<u8>) {
        let kind = reuse::Kind::Event {
            first: self.stream_start,
        };
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
                if let Some((key, _)) = self.reuse_key(judge) {
                    reuse::keep(key, kind, id, &event.bytes, written);
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
pub(super) struct PendingEvent {
    pub(super) bytes: Vec<u8>,
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
pub(super) fn find_either(bytes: &[u8], mut i: usize, a: u8, b: u8) -> Option<usize> {
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
