//! SSE framing: a stream's bytes cut into events as they arrive. Lines end with CRLF, LF or
//! CR (a CR may end one chunk and its LF start the next); a blank line ends an event. At most
//! `max` bytes of one event are held: a longer event is dropped up to its end.

use crate::bytes::find_either;

/// The framing state of one stream between its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SseFramer {
    /// The event being read (boxed: a filter that never reads a stream stays small).
    pending: Option<Box<PendingEvent>>,
    /// An event grew past the bound: its bytes are dropped up to its end.
    skipping: bool,
    /// While skipping: whether the last byte seen ended a line (a blank line ends the event).
    at_line_start: bool,
    /// The last byte read was a CR ending a line; a LF right after it is part of it.
    after_cr: bool,
    /// No event has ended yet (a byte order mark may start the stream).
    stream_start: bool,
}

impl Default for SseFramer {
    fn default() -> Self {
        SseFramer {
            pending: None,
            skipping: false,
            at_line_start: true,
            after_cr: false,
            stream_start: true,
        }
    }
}

/// What one step of framing found.
pub(super) enum Framed {
    /// A complete event; `first`: the stream's first.
    Event {
        event: Box<PendingEvent>,
        first: bool,
    },
    /// An event grew past the bound and is dropped (the reader writes an error in its place).
    TooLarge,
    /// Bytes were read; no event ended.
    More,
}

impl SseFramer {
    /// Nothing of an event is read yet: the next byte starts one.
    pub(super) fn at_event_start(&self) -> bool {
        !self.skipping && !self.after_cr && self.pending.as_ref().is_none_or(|p| p.bytes.is_empty())
    }

    /// No event has ended yet.
    pub(super) fn first(&self) -> bool {
        self.stream_start
    }

    /// An event was read whole in the framer's place (its bytes were a kept event's);
    /// `ends_with_cr`: its last byte is a CR, whose LF may come next.
    pub(super) fn passed_event(&mut self, ends_with_cr: bool) {
        self.stream_start = false;
        self.after_cr = ends_with_cr;
    }

    /// The stream ended: an event not ended by a blank line is dropped (clients do not
    /// dispatch it).
    pub(super) fn end(&mut self) {
        self.pending = None;
    }

    /// Reads from the start of `rest` (advanced past what was read) until an event ends,
    /// grows past `max` bytes, or `rest` is used up; an oversized event's bytes are dropped
    /// up to its end, one step at a time.
    pub(super) fn step(&mut self, rest: &mut &[u8], max: usize) -> Framed {
        if self.skipping {
            *rest = self.skip_event(rest);
            return Framed::More;
        }
        let pending = self.pending.get_or_insert_with(Box::default);
        // Scanned no further than one byte past what the event may still hold.
        let room = max.saturating_sub(pending.bytes.len());
        let window = rest.get(..room.saturating_add(1)).unwrap_or(rest);
        let (take, done) = match pending.scan(window, &mut self.after_cr) {
            Some(n) => (n, true),
            None => (window.len(), false),
        };
        let (head, tail) = rest.split_at(take);
        *rest = tail;
        if head.len() > room {
            let line_ended = pending.line_start == pending.bytes.len() + head.len();
            self.pending = None;
            self.stream_start = false;
            if !done {
                self.skipping = true;
                self.at_line_start = line_ended;
            }
            return Framed::TooLarge;
        }
        pending.bytes.extend_from_slice(head);
        if !done {
            return Framed::More;
        }
        let event = self.pending.take().unwrap_or_default();
        let first = std::mem::replace(&mut self.stream_start, false);
        Framed::Event { event, first }
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

/// An event being read, with its lines found as its bytes arrive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PendingEvent {
    pub(super) bytes: Vec<u8>,
    /// Its complete lines: spans in `bytes` without the line end (CRLF, LF or CR).
    pub(super) lines: Vec<(usize, usize)>,
    /// Start of the line being read.
    line_start: usize,
}

impl PendingEvent {
    /// Reads `rest`, which continues the event (it will be appended to `bytes`), up to the
    /// blank line that ends the event; returns the length of `rest` up to and including that
    /// line's end. `after_cr` carries a CR that ended the previous chunk, whose LF may start
    /// this one.
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
