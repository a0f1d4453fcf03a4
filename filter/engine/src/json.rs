//! A strict, single-pass JSON reader: RFC 8259 and nothing more (UTF-8 only, no BOM, no
//! trailing data, nesting bounded by the caller), without building a DOM and without
//! recursion (an explicit stack). String runs containing non-ASCII bytes are checked with
//! `std::str::from_utf8` as they are reached. Duplicate keys are detected in every object,
//! comparing keys after escape decoding.
//!
//! What the values mean is the [`Visitor`]'s business: the reader tells it where each value
//! sits (its `Slot`, which the visitor chooses per object member) and hands over the values
//! it cares about, decoded when it asks.
//
// Invariant for all position arithmetic: positions never exceed `bytes.len()`, which is at
// most `isize::MAX`, so adding a small constant to a position cannot overflow `usize`.

use std::borrow::Cow;
use std::collections::HashSet;

/// Objects with more keys than this switch from a linear scan to a hash set for
/// duplicate detection.
const LINEAR_KEYS: usize = 16;

/// Why the input is not JSON (or nests too deeply): a description with the offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError(pub String);

/// A scalar or container start, as handed to [`Visitor::value`].
pub(crate) enum Val<'a> {
    Object,
    Array,
    Str {
        /// The contents, when the visitor wants them ([`Visitor::wants_text`]).
        decoded: Option<Cow<'a, [u8]>>,
        /// The literal with its quotes and escapes.
        raw: &'a [u8],
    },
    Number(&'a [u8]),
    /// `true`, `false` or `null`, as written.
    Literal(&'a [u8]),
}

/// What a JSON document means to its reader.
pub(crate) trait Visitor<'a> {
    /// Where a value sits, as far as the visitor cares.
    type Slot: Copy + PartialEq;
    type Error: From<SyntaxError>;
    /// The slot of the top-level value.
    const ROOT: Self::Slot;
    /// The slot of values the visitor does not care about: members it gives this slot, the
    /// elements of arrays unless [`Visitor::element`] places them, and everything inside an
    /// ignored value. They are read and checked but not handed over.
    const IGNORE: Self::Slot;
    /// The slot of member `key` (decoded) of an object that sits in slot `object` (not
    /// `IGNORE`: the members of an ignored object are ignored).
    fn member(&mut self, object: Self::Slot, key: &[u8]) -> Self::Slot;
    /// The slot of the elements of an array that sits in slot `array` (not `IGNORE`);
    /// by default they are not handed over.
    fn element(&mut self, _array: Self::Slot) -> Self::Slot {
        Self::IGNORE
    }
    /// The object already has a member `key` (whose slot is `slot`); `at` is the key's offset.
    fn duplicate_key(&mut self, slot: Self::Slot, at: usize);
    /// Whether string values in `slot` are wanted decoded.
    fn wants_text(&self, slot: Self::Slot) -> bool;
    /// A value in a slot other than `IGNORE`: a scalar, or an object or array just opened.
    fn value(&mut self, slot: Self::Slot, val: Val<'a>) -> Result<(), Self::Error>;
    /// The value in `slot` (not `IGNORE`) ended: it is `bytes[start..end]`. By default nothing
    /// is done.
    fn closed(&mut self, _slot: Self::Slot, _start: usize, _end: usize) {}
}

/// Reads all of `bytes` as one JSON value with objects and arrays nested at most
/// `max_depth` deep, reporting to `visitor`. A syntax error ends the reading.
pub(crate) fn read<'a, V: Visitor<'a>>(
    bytes: &'a [u8],
    max_depth: usize,
    visitor: &mut V,
) -> Result<(), V::Error> {
    Reader {
        bytes,
        pos: 0,
        max_depth,
        // Room for what a request nests and names (a call's envelope, params and a few
        // arguments) without growing; a listing grows them once or twice.
        stack: Vec::with_capacity(8),
        keys: Vec::with_capacity(32),
        decoded: Vec::new(),
        sets: Vec::new(),
        visitor,
    }
    .run()
}

/// One open object or array.
struct Frame<S> {
    is_object: bool,
    /// Whether this object's keys moved from `Reader::keys` to the top of `Reader::sets`.
    hashed: bool,
    /// The slot the container sits in.
    slot: S,
    /// Start of this object's keys in `Reader::keys`, and of their decoded copies in
    /// `Reader::decoded`.
    keys_start: usize,
    decoded_start: usize,
    /// Offset of the opening bracket.
    start: usize,
}

/// A key of an open object, for duplicate detection: its contents when they hold no escape,
/// else the index of its decoded form in `Reader::decoded`.
#[derive(Clone, Copy)]
enum Key<'a> {
    Plain(&'a [u8]),
    Decoded(usize),
}

/// A key of an open object with its [`tag`].
#[derive(Clone, Copy)]
struct Seen<'a> {
    tag: u64,
    key: Key<'a>,
}

/// A summary of a decoded key (its length and first eight bytes): keys with different tags
/// differ, so only keys with the same tag are compared. `bytes[at..at + len]` is the key.
#[inline(always)]
fn tag(bytes: &[u8], at: usize, len: usize) -> u64 {
    let head = match bytes.get(at..).and_then(|s| s.first_chunk::<8>()) {
        Some(w) if len >= 8 => u64::from_le_bytes(*w),
        Some(w) => u64::from_le_bytes(*w) & ((1u64 << (8 * len)) - 1),
        // Near the end of the input: the key's bytes one by one, little-endian as above.
        None => bytes
            .get(at..at + len.min(8))
            .unwrap_or_default()
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
    };
    head ^ ((len as u64) << 56)
}

struct Reader<'a, 'v, V: Visitor<'a>> {
    bytes: &'a [u8],
    /// Where `string_body`, `number` and `literal` start and leave off.
    pos: usize,
    max_depth: usize,
    stack: Vec<Frame<V::Slot>>,
    /// Keys of the open objects that still use linear duplicate detection.
    keys: Vec<Seen<'a>>,
    /// Decoded keys (those with escapes) of the open objects.
    decoded: Vec<Vec<u8>>,
    /// The keys of the open objects with more than `LINEAR_KEYS` keys, innermost last.
    sets: Vec<HashSet<Cow<'a, [u8]>>>,
    visitor: &'v mut V,
}

impl<'a, V: Visitor<'a>> Reader<'a, '_, V> {
    /// Reads the whole input: a value, then, while containers are open, what follows a value
    /// in them (`,` and the next member or element, or the closing bracket).
    fn run(&mut self) -> Result<(), V::Error> {
        let bytes = self.bytes;
        if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
            return Err(syntax("UTF-8 byte order mark is not allowed").into());
        }
        let mut pos = skip_ws(bytes, 0);
        if pos >= bytes.len() {
            return Err(syntax(if bytes.is_empty() {
                "empty body"
            } else {
                "body contains only whitespace"
            })
            .into());
        }
        let mut slot = V::ROOT;
        loop {
            // A value at `pos` (whitespace skipped) in `slot`.
            let start = pos;
            match bytes.get(pos).copied() {
                Some(b @ (b'{' | b'[')) => {
                    if self.stack.len() >= self.max_depth {
                        return Err(SyntaxError(format!(
                            "nesting deeper than {} levels at offset {start}",
                            self.max_depth
                        ))
                        .into());
                    }
                    let is_object = b == b'{';
                    self.stack.push(Frame {
                        is_object,
                        hashed: false,
                        slot,
                        keys_start: self.keys.len(),
                        decoded_start: self.decoded.len(),
                        start,
                    });
                    if slot != V::IGNORE {
                        let val = if is_object { Val::Object } else { Val::Array };
                        self.visitor.value(slot, val)?;
                    }
                    pos = skip_ws(bytes, pos + 1);
                    let closer = if is_object { b'}' } else { b']' };
                    if bytes.get(pos) != Some(&closer) {
                        slot = self.first_of(is_object, slot, &mut pos)?;
                        continue;
                    }
                    self.close(pos + 1);
                    pos += 1;
                }
                Some(b'"') if slot == V::IGNORE => pos = self.skip_string(pos + 1)?,
                Some(b'"') => {
                    self.pos = pos + 1;
                    let want = self.visitor.wants_text(slot);
                    let decoded = self.string_body(want)?;
                    pos = self.pos;
                    let raw = bytes.get(start..pos).unwrap_or_default();
                    self.scalar(slot, Val::Str { decoded, raw }, start, pos)?;
                }
                Some(b'-' | b'0'..=b'9') => {
                    self.pos = pos;
                    self.number()?;
                    pos = self.pos;
                    let raw = bytes.get(start..pos).unwrap_or_default();
                    self.scalar(slot, Val::Number(raw), start, pos)?;
                }
                Some(b @ (b't' | b'f' | b'n')) => {
                    let word: &[u8] = match b {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    };
                    self.pos = pos;
                    self.literal(word)?;
                    pos = self.pos;
                    self.scalar(slot, Val::Literal(word), start, pos)?;
                }
                _ => return Err(unexpected(bytes, pos, "expected a value").into()),
            }
            // After a value: close containers until one goes on with a ','.
            loop {
                let Some(&Frame {
                    is_object,
                    slot: container,
                    ..
                }) = self.stack.last()
                else {
                    pos = skip_ws(bytes, pos);
                    if pos < bytes.len() {
                        return Err(SyntaxError(format!("trailing data at offset {pos}")).into());
                    }
                    return Ok(());
                };
                pos = skip_ws(bytes, pos);
                match (bytes.get(pos), is_object) {
                    (Some(b','), _) => {
                        pos = skip_ws(bytes, pos + 1);
                        slot = self.first_of(is_object, container, &mut pos)?;
                        break;
                    }
                    (Some(b'}'), true) | (Some(b']'), false) => {
                        self.close(pos + 1);
                        pos += 1;
                    }
                    (_, true) => return Err(unexpected(bytes, pos, "expected ',' or '}'").into()),
                    (_, false) => return Err(unexpected(bytes, pos, "expected ',' or ']'").into()),
                }
            }
        }
    }

    /// The slot of the next member (its key read, `pos` left at its value) or element of the
    /// innermost container, which sits in `container`.
    #[inline(always)]
    fn first_of(
        &mut self,
        is_object: bool,
        container: V::Slot,
        pos: &mut usize,
    ) -> Result<V::Slot, SyntaxError> {
        if is_object {
            self.member_key(container, pos)
        } else if container == V::IGNORE {
            Ok(V::IGNORE)
        } else {
            Ok(self.visitor.element(container))
        }
    }

    /// Hands a scalar in `slot` to the visitor (unless ignored).
    #[inline(always)]
    fn scalar(
        &mut self,
        slot: V::Slot,
        val: Val<'a>,
        start: usize,
        end: usize,
    ) -> Result<(), V::Error> {
        if slot != V::IGNORE {
            self.visitor.value(slot, val)?;
            self.visitor.closed(slot, start, end);
        }
        Ok(())
    }

    /// Closes the innermost container, whose closing bracket ends at `end`.
    #[inline(always)]
    fn close(&mut self, end: usize) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        if frame.is_object {
            self.keys.truncate(frame.keys_start);
            if self.decoded.len() > frame.decoded_start {
                self.decoded.truncate(frame.decoded_start);
            }
            if frame.hashed {
                self.sets.pop();
            }
        }
        if frame.slot != V::IGNORE {
            self.visitor.closed(frame.slot, frame.start, end);
        }
    }

    /// Reads a string nobody wants whose opening quote is just before `pos`; returns the
    /// offset after its closing quote. A plain ASCII string is read here, any other by
    /// `string_body`.
    #[inline(always)]
    fn skip_string(&mut self, pos: usize) -> Result<usize, SyntaxError> {
        let (end, non_ascii) = scan_plain(self.bytes, pos);
        if !non_ascii && self.bytes.get(end) == Some(&b'"') {
            return Ok(end + 1);
        }
        self.pos = pos;
        self.string_body(false)?;
        Ok(self.pos)
    }

    /// Reads `"key" :` at `pos` (whitespace skipped before it and after it), records the key
    /// for duplicate detection and asks the visitor which slot it names in the object that
    /// sits in `object`.
    #[inline(always)]
    fn member_key(&mut self, object: V::Slot, pos: &mut usize) -> Result<V::Slot, SyntaxError> {
        let bytes = self.bytes;
        let key_at = *pos;
        if bytes.get(key_at) != Some(&b'"') {
            return Err(unexpected(bytes, key_at, "expected a string key"));
        }
        let start = key_at + 1;
        let (end, non_ascii) = scan_plain(bytes, start);
        let (slot, fresh) = match bytes.get(start..end) {
            Some(key) if !non_ascii && bytes.get(end) == Some(&b'"') => {
                *pos = end + 1;
                let slot = match object {
                    ignored if ignored == V::IGNORE => V::IGNORE,
                    _ => self.visitor.member(object, key),
                };
                (slot, self.insert_plain(key, tag(bytes, start, key.len())))
            }
            _ => {
                self.pos = start;
                let key = self.string_body(true)?.unwrap_or_default();
                *pos = self.pos;
                let slot = match object {
                    ignored if ignored == V::IGNORE => V::IGNORE,
                    _ => self.visitor.member(object, &key),
                };
                (slot, self.insert_key(key))
            }
        };
        if !fresh {
            self.visitor.duplicate_key(slot, key_at);
        }
        let mut at = skip_ws(bytes, *pos);
        if bytes.get(at) != Some(&b':') {
            return Err(unexpected(bytes, at, "expected ':'"));
        }
        at = skip_ws(bytes, at + 1);
        *pos = at;
        Ok(slot)
    }

    /// Adds a key without escapes (with its tag) to the innermost object; false if it was
    /// already there.
    #[inline(always)]
    fn insert_plain(&mut self, key: &'a [u8], tag: u64) -> bool {
        let start = match self.stack.last() {
            Some(f) if !f.hashed => f.keys_start,
            _ => return self.insert_key(Cow::Borrowed(key)),
        };
        let existing = self.keys.get(start..).unwrap_or_default();
        for seen in existing {
            if seen.tag == tag && self.text(seen.key) == key {
                return false;
            }
        }
        let count = existing.len();
        self.keys.push(Seen {
            tag,
            key: Key::Plain(key),
        });
        if count >= LINEAR_KEYS {
            self.hash_keys();
        }
        true
    }

    /// Adds a key (decoded) to the innermost object; false if it was already there.
    fn insert_key(&mut self, key: Cow<'a, [u8]>) -> bool {
        let Some(frame) = self.stack.last() else {
            return true;
        };
        if frame.hashed {
            return self.sets.last_mut().is_none_or(|set| set.insert(key));
        }
        let tag = tag(&key, 0, key.len());
        let existing = self.keys.get(frame.keys_start..).unwrap_or_default();
        if existing
            .iter()
            .any(|seen| seen.tag == tag && self.text(seen.key) == key.as_ref())
        {
            return false;
        }
        let count = existing.len();
        let key = match key {
            Cow::Borrowed(k) => Key::Plain(k),
            Cow::Owned(k) => {
                self.decoded.push(k);
                Key::Decoded(self.decoded.len() - 1)
            }
        };
        self.keys.push(Seen { tag, key });
        if count >= LINEAR_KEYS {
            self.hash_keys();
        }
        true
    }

    /// The decoded text of a key.
    #[inline(always)]
    fn text(&self, key: Key<'a>) -> &[u8] {
        match key {
            Key::Plain(k) => k,
            Key::Decoded(i) => self.decoded.get(i).map_or(&[], Vec::as_slice),
        }
    }

    /// Moves the keys of the innermost object into a hash set.
    #[cold]
    fn hash_keys(&mut self) {
        let Some(frame) = self.stack.last_mut() else {
            return;
        };
        let mut set = HashSet::with_capacity(4 * LINEAR_KEYS);
        for seen in self.keys.drain(frame.keys_start..) {
            set.insert(match seen.key {
                Key::Plain(k) => Cow::Borrowed(k),
                Key::Decoded(i) => Cow::Owned(
                    self.decoded
                        .get_mut(i)
                        .map(std::mem::take)
                        .unwrap_or_default(),
                ),
            });
        }
        self.decoded.truncate(frame.decoded_start);
        frame.hashed = true;
        self.sets.push(set);
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), SyntaxError> {
        let end = self.pos + word.len();
        if self.bytes.get(self.pos..end) != Some(word) {
            return Err(SyntaxError(format!(
                "invalid literal at offset {}",
                self.pos
            )));
        }
        self.pos = end;
        Ok(())
    }

    /// Reads a string whose opening quote is just before `self.pos`, leaving `self.pos`
    /// after the closing quote. With `want`, returns the decoded contents (borrowed from
    /// the input when there are no escapes).
    fn string_body(&mut self, want: bool) -> Result<Option<Cow<'a, [u8]>>, SyntaxError> {
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
                    return Err(SyntaxError(format!(
                        "invalid UTF-8 at offset {}",
                        i + e.valid_up_to()
                    )));
                }
            }
            i = end;
            let Some(&b) = bytes.get(i) else {
                return Err(SyntaxError(format!(
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
                    return Err(SyntaxError(format!(
                        "unescaped control character 0x{b:02x} in string at offset {i}"
                    )));
                }
            }
        }
    }

    /// Reads a number per the RFC 8259 grammar.
    fn number(&mut self) -> Result<(), SyntaxError> {
        let bytes = self.bytes;
        let start = self.pos;
        let bad = |what: &str| {
            Err(SyntaxError(format!(
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
        if !fits_double(bytes.get(start..i).unwrap_or_default()) {
            return bad("out of the range of a double");
        }
        self.pos = i;
        Ok(())
    }
}

/// Whether a number (valid per the grammar) has a finite double value. Rules and CEL read
/// numbers as doubles; one that overflows (`1e400`, 400 digits) cannot be read faithfully, so
/// the input is refused rather than read with the value missing (docs/semantics.md §3). Short
/// numbers are decided from their digit counts; only long ones are converted.
fn fits_double(n: &[u8]) -> bool {
    let unsigned = n.strip_prefix(b"-").unwrap_or(n);
    let int_digits = digits(unsigned, 0);
    let exponent = unsigned
        .iter()
        .position(|&b| b == b'e' || b == b'E')
        .and_then(|at| unsigned.get(at + 1..));
    let small = match exponent {
        None => int_digits <= 300,
        Some(e) => {
            let (negative, e) = match e.split_first() {
                Some((b'-', rest)) => (true, rest),
                Some((b'+', rest)) => (false, rest),
                _ => (false, e),
            };
            let value = e.iter().try_fold(0usize, |v, &d| {
                (v < 10_000).then(|| v * 10 + usize::from(d - b'0'))
            });
            match value {
                Some(v) if negative => int_digits <= v.saturating_add(300),
                Some(v) => int_digits.saturating_add(v) <= 300,
                None => false,
            }
        }
    };
    // Converted as serde_json converts it (the value CEL reads comes from serde_json): at the
    // very edge (`1.7976931348623158e308`) its rounding and the standard library's differ.
    small || serde_json::from_slice::<f64>(n).is_ok_and(f64::is_finite)
}

fn syntax(detail: &str) -> SyntaxError {
    SyntaxError(detail.to_owned())
}

/// The offset of the first non-whitespace byte at or after `pos`.
#[inline(always)]
fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(pos) {
        pos += 1;
    }
    pos
}

/// The error for an unexpected byte (or end of input) at `pos`.
#[cold]
fn unexpected(bytes: &[u8], pos: usize, expected: &str) -> SyntaxError {
    match bytes.get(pos) {
        None => SyntaxError(format!("unexpected end of input ({expected})")),
        Some(b) => SyntaxError(format!(
            "unexpected byte 0x{b:02x} at offset {pos} ({expected})"
        )),
    }
}

/// A decoded string as a `String`.
pub(crate) fn into_string(bytes: Cow<'_, [u8]>) -> Result<String, SyntaxError> {
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

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `w` (eight, little-endian) that end a plain run: the high bit of each byte
/// that is '"', '\\' or below 0x20, by the "has zero byte" trick `(x - 1) & !x & 0x80`
/// applied to `x = w ^ c` for '"' and '\\' and as `(w - 0x20) & !w` for bytes below 0x20. A
/// borrow can only mark bytes above a real hit, so the lowest marked byte is exact.
#[inline(always)]
fn word_stops(w: u64) -> u64 {
    let q = w ^ (ONES * u64::from(b'"'));
    let b = w ^ (ONES * u64::from(b'\\'));
    (w.wrapping_sub(ONES * 0x20) & !w | q.wrapping_sub(ONES) & !q | b.wrapping_sub(ONES) & !b)
        & HIGH
}

/// Scans string contents from `i` to the first `"`, `\\` or control character (or the
/// end). Also says whether the run may contain non-ASCII bytes (it may over-report).
#[inline(always)]
fn scan_plain(bytes: &[u8], mut i: usize) -> (usize, bool) {
    let mut high = 0u64;
    // The first word alone: most strings (keys, names) end in it.
    if let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*chunk);
        let hit = word_stops(w);
        high |= w;
        if hit != 0 {
            return (i + (hit.trailing_zeros() / 8) as usize, high & HIGH != 0);
        }
        i += 8;
    }
    // Long strings (a large argument): sixteen bytes or more per step.
    let (end, stopped, non_ascii) = blocks::scan(bytes, i);
    if stopped {
        return (end, non_ascii || high & HIGH != 0);
    }
    i = end;
    if non_ascii {
        high |= HIGH;
    }
    // The tail, shorter than a block.
    while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*chunk);
        let hit = word_stops(w);
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

/// The block loop of [`scan_plain`]: from `i`, whole 16-byte blocks up to the first block
/// holding a byte that ends a plain run. Returns `(end, stopped, non_ascii)`: with `stopped`,
/// `end` is that byte's index; otherwise fewer than 16 bytes are left at `end`. `non_ascii`
/// says whether the blocks read may hold non-ASCII bytes (it may over-report).
///
/// Two implementations: two SWAR words per block (native, and Wasm without SIMD), and Wasm
/// SIMD (simd128) for the filter's module. `filter/tests/host.rs` runs the built module under
/// an interpreter with SIMD against this crate's native build on many strings, so both are
/// checked to stop at the same byte.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
mod blocks {
    use super::{word_stops, HIGH};

    #[inline(always)]
    pub(super) fn scan(bytes: &[u8], mut i: usize) -> (usize, bool, bool) {
        let mut high = 0u64;
        while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<16>()) {
            let (lo, hi) = chunk.split_at(8);
            let (Ok(lo), Ok(hi)) = (<[u8; 8]>::try_from(lo), <[u8; 8]>::try_from(hi)) else {
                break;
            };
            let (w1, w2) = (u64::from_le_bytes(lo), u64::from_le_bytes(hi));
            let (h1, h2) = (word_stops(w1), word_stops(w2));
            high |= w1 | w2;
            if h1 | h2 != 0 {
                let at = match h1 {
                    0 => i + 8 + (h2.trailing_zeros() / 8) as usize,
                    _ => i + (h1.trailing_zeros() / 8) as usize,
                };
                return (at, true, high & HIGH != 0);
            }
            i += 16;
        }
        (i, false, high & HIGH != 0)
    }
}

/// [`scan_plain`]'s block loop with Wasm SIMD: two 16-byte blocks per step, then one.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod blocks {
    use core::arch::wasm32::{
        u8x16_bitmask, u8x16_eq, u8x16_lt, u8x16_splat, v128, v128_any_true, v128_load, v128_or,
    };

    /// The 16 bytes as a vector: one `v128.load` (built lane by lane, LLVM emits 16 loads).
    #[inline(always)]
    fn load(c: &[u8; 16]) -> v128 {
        // SAFETY: `c` is valid for reading 16 bytes, and `v128_load` has no alignment
        // requirement (it emits a load with alignment 1).
        unsafe { v128_load(c.as_ptr().cast::<v128>()) }
    }

    /// Lanes that end a plain run: '"', '\\' or below 0x20 (all ones there).
    #[inline(always)]
    fn stops(v: v128) -> v128 {
        let quote = u8x16_eq(v, u8x16_splat(b'"'));
        let backslash = u8x16_eq(v, u8x16_splat(b'\\'));
        v128_or(u8x16_lt(v, u8x16_splat(0x20)), v128_or(quote, backslash))
    }

    #[inline(always)]
    pub(super) fn scan(bytes: &[u8], mut i: usize) -> (usize, bool, bool) {
        let mut high = u8x16_splat(0);
        // Two blocks per step: one branch for 32 bytes.
        while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<32>()) {
            let (lo, hi) = chunk.split_at(16);
            let (Ok(lo), Ok(hi)) = (<&[u8; 16]>::try_from(lo), <&[u8; 16]>::try_from(hi)) else {
                break;
            };
            let (a, b) = (load(lo), load(hi));
            let (sa, sb) = (stops(a), stops(b));
            high = v128_or(high, v128_or(a, b));
            if v128_any_true(v128_or(sa, sb)) {
                let mask = u32::from(u8x16_bitmask(sa)) | u32::from(u8x16_bitmask(sb)) << 16;
                return (
                    i + mask.trailing_zeros() as usize,
                    true,
                    u8x16_bitmask(high) != 0,
                );
            }
            i += 32;
        }
        if let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<16>()) {
            let a = load(chunk);
            let sa = stops(a);
            high = v128_or(high, a);
            let mask = u8x16_bitmask(sa);
            if mask != 0 {
                return (
                    i + mask.trailing_zeros() as usize,
                    true,
                    u8x16_bitmask(high) != 0,
                );
            }
            i += 16;
        }
        (i, false, u8x16_bitmask(high) != 0)
    }
}

/// Decodes the escape whose backslash is at `at`, appending to `out` if given; returns
/// the index after the escape.
fn escape(bytes: &[u8], at: usize, out: Option<&mut Vec<u8>>) -> Result<usize, SyntaxError> {
    let bad = |what: &str| Err(SyntaxError(format!("{what} at offset {at}")));
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
#[path = "json_tests.rs"]
mod tests;
