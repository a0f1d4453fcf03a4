//! RFC 8785 JSON Canonicalization Scheme (JCS), and the SHA-256 digest of canonical JSON: what
//! a ToolPin's `digest` is taken over (docs/pins.md).
//!
//! Canonical JSON is the text's value written with no whitespace, object members sorted by
//! their names' UTF-16 code units, strings escaped as ECMAScript's `JSON.stringify` escapes
//! them (`\"`, `\\`, `\b \t \n \f \r`, other controls as `\u00xx`, everything else as UTF-8),
//! and numbers as ECMAScript's `Number.prototype.toString` writes the double they denote.
//! Numbers are written with `ryu-js` (that algorithm, a maintained crate) with its `small`
//! tables. Measured on the filter's module (wasm-release, then wasm-opt): this module, ryu-js
//! and sha2 are about 4 KB of its code; ryu-js's full tables would add 9 KB more (the whole
//! of pinned tools took the module from 845,460 to about 894,000 bytes). Their cost per
//! listing: docs/performance.md, "P7 with pinned tools".
//!
//! [`Canonicalizer`] is fed the values of a text as the strict reader ([`crate::json`])
//! reports them; [`canonicalize`] reads a whole text with it. Text JCS refuses (duplicate
//! member names, a number that is not a finite double) gives an error. The listing filter
//! digests a pinned tool's listed bytes with [`digest_remembered`], which remembers the
//! digests it took by those bytes (a server sends the same listing again and again).

use std::cell::RefCell;
use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

use crate::json::{self, Val};

/// What [`digest_remembered`] keeps on one thread (a VM is one thread): at most this many
/// bytes of text, and this many digests; past either, it starts again empty.
pub const REMEMBERED_BYTES: usize = 2 << 20;
pub const REMEMBERED_DIGESTS: usize = 8192;

/// Digests taken on this thread, by the text they were taken of (the key is the text itself:
/// a hit is exact), with the bytes of text held and the depth limit they were read with.
#[derive(Default)]
struct Remembered {
    digests: HashMap<Box<[u8]>, Digest>,
    bytes: usize,
    max_depth: usize,
}

thread_local! {
    static REMEMBERED: RefCell<Remembered> = RefCell::new(Remembered::default());
}

/// The SHA-256 digest of canonical JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest of `canonical` (canonical JSON text).
    pub fn of(canonical: &[u8]) -> Digest {
        Digest(Sha256::digest(canonical).into())
    }

    /// `sha256:` and 64 lowercase hex digits: how ToolPins write it.
    pub fn to_text(self) -> String {
        let mut out = String::with_capacity(7 + 64);
        self.push_text(&mut out);
        out
    }

    /// Appends [`Digest::to_text`] to `out`: the digits in a buffer first, then one copy (a
    /// record's chain writes one per request).
    pub fn push_text(self, out: &mut String) {
        let mut digits = [0u8; 64];
        for (pair, b) in digits.chunks_exact_mut(2).zip(self.0) {
            pair.copy_from_slice(&[hex_digit(b >> 4), hex_digit(b)]);
        }
        out.push_str("sha256:");
        out.push_str(std::str::from_utf8(&digits).unwrap_or_default());
    }

    /// Reads `sha256:<64 lowercase hex digits>`.
    pub fn parse(text: &str) -> Option<Digest> {
        let hex = text.strip_prefix("sha256:")?.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let [hi, lo] = <[u8; 2]>::try_from(pair).ok()?;
            *o = (digit(hi)? << 4) | digit(lo)?;
        }
        Some(Digest(out))
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Why a text has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonError(pub String);

impl std::fmt::Display for CanonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One open container.
#[derive(Debug, Clone, Copy)]
enum Frame {
    /// Its members are `members[from..]`.
    Object { from: usize },
    /// `count` elements so far.
    Array { count: usize },
}

/// One member of an open object: its name (decoded, in `names`) and its whole text
/// (`"name":value`, in the arena).
#[derive(Debug, Clone, Copy)]
struct Member {
    name: (usize, usize),
    text: (usize, usize),
}

/// Builds the canonical text of one value from the reader's events: [`Canonicalizer::value`]
/// for each value (a scalar, or a container opening), [`Canonicalizer::member`] for each
/// member name, [`Canonicalizer::closed`] when a value ends (as the reader reports both).
///
/// The text is written to one arena as the events come, in canonical form: an object's
/// members as they are given, then, when it closes, rewritten in canonical order only if
/// they were not in it. One value after another reuses the memory ([`Canonicalizer::reset`]).
#[derive(Debug, Default)]
pub struct Canonicalizer {
    arena: Vec<u8>,
    /// The decoded names of the open objects' members.
    names: Vec<u8>,
    stack: Vec<Frame>,
    members: Vec<Member>,
    /// Where each open container's text starts.
    starts: Vec<usize>,
    /// The last event was a scalar: the next `closed` ends it, not a container.
    scalar: bool,
    done: Option<(usize, usize)>,
    error: Option<CanonError>,
    scratch: Vec<u8>,
}

impl Canonicalizer {
    pub fn new() -> Canonicalizer {
        Canonicalizer::default()
    }

    /// Ready for another value (the memory is kept).
    pub fn reset(&mut self) {
        self.arena.clear();
        self.names.clear();
        self.stack.clear();
        self.members.clear();
        self.starts.clear();
        self.scalar = false;
        self.done = None;
        self.error = None;
    }

    /// The name (decoded) of the next member of the innermost object.
    pub(crate) fn member(&mut self, name: &[u8]) {
        let Some(Frame::Object { from, .. }) = self.stack.last() else {
            return;
        };
        if self.members.len() > *from {
            self.arena.push(b',');
        }
        let at = self.names.len();
        self.names.extend_from_slice(name);
        let text = self.arena.len();
        push_string(&mut self.arena, name);
        self.arena.push(b':');
        self.members.push(Member {
            name: (at, self.names.len()),
            text: (text, text),
        });
    }

    /// A value: a scalar (strings decoded), or an object or array opened.
    pub(crate) fn value(&mut self, val: &Val<'_>) {
        self.scalar = false;
        if let Some(Frame::Array { count }) = self.stack.last_mut() {
            if *count > 0 {
                self.arena.push(b',');
            }
            *count += 1;
        }
        let start = self.arena.len();
        match val {
            Val::Object => {
                self.arena.push(b'{');
                self.stack.push(Frame::Object {
                    from: self.members.len(),
                });
                self.starts.push(start);
                return;
            }
            Val::Array => {
                self.arena.push(b'[');
                self.stack.push(Frame::Array { count: 0 });
                self.starts.push(start);
                return;
            }
            // A literal without escapes is its own canonical form (JSON has no unescaped
            // control character).
            Val::Str { raw, .. } if !raw.contains(&b'\\') => self.arena.extend_from_slice(raw),
            Val::Str { decoded, .. } => match decoded {
                Some(s) => push_string(&mut self.arena, s),
                None => self.fail("a string was not decoded"),
            },
            Val::Number(raw) => {
                if let Err(e) = push_number(&mut self.arena, raw) {
                    self.fail(&e);
                }
            }
            Val::Literal(word) => self.arena.extend_from_slice(word),
        }
        self.scalar = true;
        self.ended();
    }

    /// A value ended: a scalar just given, or the innermost container.
    pub(crate) fn closed(&mut self) {
        if std::mem::take(&mut self.scalar) {
            return;
        }
        let (Some(frame), Some(start)) = (self.stack.pop(), self.starts.pop()) else {
            return self.fail("a value ended that did not start");
        };
        match frame {
            Frame::Array { .. } => self.arena.push(b']'),
            Frame::Object { from } => self.close_object(start, from),
        }
        if self.stack.is_empty() {
            self.done = Some((start, self.arena.len()));
        } else {
            self.ended();
        }
    }

    /// Ends the object at `start` whose members are `members[from..]`: as written when they
    /// are in UTF-16 code unit order of their names (not UTF-8 byte order: they differ above
    /// U+FFFF), else written again in that order.
    fn close_object(&mut self, start: usize, from: usize) {
        let names = &self.names;
        let name = |m: &Member| names.get(m.name.0..m.name.1).unwrap_or_default();
        let mine = self.members.get_mut(from..).unwrap_or_default();
        if mine.is_sorted_by(|a, b| utf16_order(name(a), name(b)).is_lt()) {
            self.arena.push(b'}');
        } else {
            mine.sort_by(|a, b| utf16_order(name(a), name(b)));
            let twice = mine
                .windows(2)
                .any(|w| matches!(w, [a, b] if name(a) == name(b)));
            let out = &mut self.scratch;
            out.clear();
            out.push(b'{');
            for (i, m) in mine.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(self.arena.get(m.text.0..m.text.1).unwrap_or_default());
            }
            out.push(b'}');
            self.arena.truncate(start);
            self.arena.extend_from_slice(&self.scratch);
            if twice {
                self.fail("an object has two members of the same name");
            }
        }
        let first_name = self
            .members
            .get(from)
            .map_or(self.names.len(), |m| m.name.0);
        self.members.truncate(from);
        self.names.truncate(first_name);
    }

    /// The value being read ended at the end of the arena: in an object, so did its member.
    fn ended(&mut self) {
        if let Some(Frame::Object { from, .. }) = self.stack.last() {
            let end = self.arena.len();
            match self.members.get_mut(*from..).and_then(|m| m.last_mut()) {
                Some(m) => m.text.1 = end,
                None => self.fail("a member without a name"),
            }
        } else if self.stack.is_empty() {
            self.done = Some((0, self.arena.len()));
        }
    }

    /// A member name appeared twice in an object.
    pub(crate) fn duplicate(&mut self) {
        self.fail("an object has two members of the same name");
    }

    /// The canonical text of the value, once it ended.
    pub fn text(&self) -> Result<&[u8], CanonError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match (self.done, self.stack.is_empty()) {
            (Some((s, e)), true) => Ok(self.arena.get(s..e).unwrap_or_default()),
            _ => Err(CanonError("the value did not end".into())),
        }
    }

    /// The canonical text of the value, once it ended.
    pub fn finish(self) -> Result<Vec<u8>, CanonError> {
        self.text().map(<[u8]>::to_vec)
    }

    fn fail(&mut self, why: &str) {
        if self.error.is_none() {
            self.error = Some(CanonError(why.to_string()));
        }
    }
}

/// The lowercase hex digit of the low four bits of `n`.
fn hex_digit(n: u8) -> u8 {
    match n & 15 {
        d @ 0..=9 => b'0' + d,
        d => b'a' + d - 10,
    }
}

/// Compares two UTF-8 strings by their UTF-16 code units. Byte order is the same unless a
/// string holds a character at or above U+E000 (lead byte 0xEE or more): only then are the
/// strings compared as UTF-16.
fn utf16_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if !a.iter().chain(b).any(|&c| c >= 0xEE) {
        return a.cmp(b);
    }
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    a.encode_utf16().cmp(b.encode_utf16())
}

/// A string literal as JCS writes it (`s` is UTF-8, as the strict reader decodes it): runs
/// that need no escape are copied whole.
fn push_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let mut run = 0;
    for (i, &c) in s.iter().enumerate() {
        let escape: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(s.get(run..i).unwrap_or_default());
        run = i + 1;
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(hex_digit(c >> 4));
            out.push(hex_digit(c));
        } else {
            out.extend_from_slice(escape);
        }
    }
    out.extend_from_slice(s.get(run..).unwrap_or_default());
    out.push(b'"');
}

/// A number (JSON text) as ECMAScript writes the double it denotes.
fn push_number(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(raw).map_err(|_| "a number is not ASCII".to_string())?;
    // The standard library's conversion is correctly rounded.
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text} is not a number"))?;
    if !value.is_finite() {
        return Err(format!("{text} is out of the range of a double"));
    }
    out.extend_from_slice(ryu_js::Buffer::new().format_finite(value).as_bytes());
    Ok(())
}

/// Where a value sits, for [`canonicalize`]: everything is canonicalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ignore,
    Value,
}

struct Whole(Canonicalizer);

impl<'a> json::Visitor<'a> for Whole {
    type Slot = Slot;
    type Error = json::SyntaxError;
    const ROOT: Slot = Slot::Value;
    const IGNORE: Slot = Slot::Ignore;

    fn member(&mut self, _object: Slot, key: &[u8]) -> Slot {
        self.0.member(key);
        Slot::Value
    }

    fn element(&mut self, _array: Slot) -> Slot {
        Slot::Value
    }

    fn duplicate_key(&mut self, _slot: Slot, _at: usize) {
        self.0.duplicate();
    }

    fn wants_text(&self, _slot: Slot) -> bool {
        true
    }

    fn value(&mut self, _slot: Slot, val: Val<'a>) -> Result<(), json::SyntaxError> {
        self.0.value(&val);
        Ok(())
    }

    fn closed(&mut self, _slot: Slot, _start: usize, _end: usize) {
        self.0.closed();
    }
}

/// The canonical form of a JSON text (UTF-8, objects and arrays nested at most `max_depth`).
pub fn canonicalize(text: &[u8], max_depth: usize) -> Result<Vec<u8>, CanonError> {
    let mut w = Whole(Canonicalizer::new());
    json::read(text, max_depth, &mut w).map_err(|e| CanonError(e.0))?;
    w.0.finish()
}

/// The digest of a JSON text's canonical form.
pub fn digest_of(text: &[u8], max_depth: usize) -> Result<Digest, CanonError> {
    canonicalize(text, max_depth).map(|c| Digest::of(&c))
}

/// Whether serde_json writes `v` as its RFC 8785 canonical text, so a writer may take the
/// digest of that text as it is: every number an integer JCS writes alike (|n| ≤ 2^53), every
/// member name one whose UTF-8 order is its UTF-16 order ([`name_sorts_alike`]). serde_json
/// escapes strings as JCS does and, without `preserve_order`, sorts members by their UTF-8
/// bytes. False is always safe (the text is then canonicalized).
pub fn serde_text_is_canonical(v: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match v {
        J::Null | J::Bool(_) | J::String(_) => true,
        J::Number(n) => n
            .as_i64()
            .map(i64::unsigned_abs)
            .or_else(|| n.as_u64())
            .is_some_and(|n| n <= SAFE_INTEGER),
        J::Array(items) => items.iter().all(serde_text_is_canonical),
        J::Object(m) => m
            .iter()
            .all(|(k, v)| name_sorts_alike(k) && serde_text_is_canonical(v)),
    }
}

/// Whether `text` is a JSON scalar written as JCS writes it: `true`, `false`, `null` or an
/// integer of at most 15 digits without a leading zero.
pub fn scalar_is_canonical(text: &str) -> bool {
    if matches!(text, "true" | "false" | "null" | "0") {
        return true;
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    (1..=15).contains(&digits.len())
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Whether member name `name` sorts among any others by its UTF-8 bytes as JCS sorts by
/// UTF-16 code units: the orders differ only between U+E000..U+FFFF and characters past
/// U+FFFF, whose UTF-8 lead bytes are 0xEE and above.
pub fn name_sorts_alike(name: &str) -> bool {
    !name.bytes().any(|b| b >= 0xEE)
}

/// 2^53: the integers a double holds exactly.
const SAFE_INTEGER: u64 = 1 << 53;

/// [`digest_of`], remembered on this thread by `text` itself: a listing rarely changes while
/// callers ask for it again and again, and canonicalizing and SHA-256 are what digesting a
/// tool costs. The same text always gives the same digest, so a remembered one is the one
/// `digest_of` would give; texts without one are not remembered. Memory is bounded by
/// [`REMEMBERED_BYTES`] and [`REMEMBERED_DIGESTS`].
pub fn digest_remembered(text: &[u8], max_depth: usize) -> Result<Digest, CanonError> {
    REMEMBERED.with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else {
            return digest_of(text, max_depth);
        };
        if r.max_depth != max_depth {
            *r = Remembered {
                max_depth,
                ..Remembered::default()
            };
        }
        if let Some(d) = r.digests.get(text) {
            return Ok(*d);
        }
        let d = digest_of(text, max_depth)?;
        if text.len() <= REMEMBERED_BYTES / 16 {
            if r.bytes + text.len() > REMEMBERED_BYTES || r.digests.len() >= REMEMBERED_DIGESTS {
                r.digests.clear();
                r.bytes = 0;
            }
            r.bytes += text.len();
            r.digests.insert(text.into(), d);
        }
        Ok(d)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        String::from_utf8(canonicalize(text.as_bytes(), 64).unwrap()).unwrap()
    }

    /// RFC 8785 §3.2.2: the sample with every kind of value, and §3.2.4: its UTF-8 bytes.
    #[test]
    fn rfc_8785_main_sample() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let want = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(canon(input), want);
        let hex = "7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72
            75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a
            5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31
            65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37
            5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30
            30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d";
        let bytes: Vec<u8> = hex
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        assert_eq!(canonicalize(input.as_bytes(), 64).unwrap(), bytes);
    }

    /// RFC 8785 §3.2.3: members sorted by UTF-16 code units.
    #[test]
    fn rfc_8785_sorting_sample() {
        let input = r#"{
   "\u20ac": "Euro Sign",
   "\r": "Carriage Return",
   "\ufb33": "Hebrew Letter Dalet With Dagesh",
   "1": "One",
   "\ud83d\ude00": "Emoji: Grinning Face",
   "\u0080": "Control",
   "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
        let out = canon(input);
        let values: Vec<&str> = out
            .split("\":\"")
            .skip(1)
            .map(|v| v.split('"').next().unwrap())
            .collect();
        assert_eq!(
            values,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh"
            ]
        );
        assert!(out.starts_with("{\"\\r\":"), "{out}");
    }

    /// RFC 8785 Appendix B: IEEE 754 doubles and the text JCS writes for each.
    #[test]
    fn rfc_8785_number_samples() {
        let samples = [
            ("0000000000000000", "0"),
            ("8000000000000000", "0"),
            ("0000000000000001", "5e-324"),
            ("8000000000000001", "-5e-324"),
            ("7fefffffffffffff", "1.7976931348623157e+308"),
            ("ffefffffffffffff", "-1.7976931348623157e+308"),
            ("4340000000000000", "9007199254740992"),
            ("c340000000000000", "-9007199254740992"),
            ("4430000000000000", "295147905179352830000"),
            ("44b52d02c7e14af5", "9.999999999999997e+22"),
            ("44b52d02c7e14af6", "1e+23"),
            ("44b52d02c7e14af7", "1.0000000000000001e+23"),
            ("444b1ae4d6e2ef4e", "999999999999999700000"),
            ("444b1ae4d6e2ef4f", "999999999999999900000"),
            ("444b1ae4d6e2ef50", "1e+21"),
            ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
            ("3eb0c6f7a0b5ed8d", "0.000001"),
            ("41b3de4355555553", "333333333.3333332"),
            ("41b3de4355555554", "333333333.33333325"),
            ("41b3de4355555555", "333333333.3333333"),
            ("41b3de4355555556", "333333333.3333334"),
            ("41b3de4355555557", "333333333.33333343"),
            ("becbf647612f3696", "-0.0000033333333333333333"),
            ("43143ff3c1cb0959", "1424953923781206.2"),
        ];
        for (bits, want) in samples {
            let x = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
            // The double written as Rust writes it (round-trips), then read back as JSON.
            let text = format!("{x:e}");
            assert_eq!(canon(&text), want, "{bits}");
            assert_eq!(canon(&format!("[{text}]")), format!("[{want}]"), "{bits}");
        }
        // NaN and Infinity (7fffffffffffffff, 7ff0000000000000) have no JSON text; a number
        // beyond a double's range has no canonical form.
        assert!(canonicalize(b"1e400", 64).is_err());
    }

    #[test]
    fn spellings_of_one_value_have_one_canonical_form() {
        let a = canon(r#"{"b": [1, 2.0, 1e2, -0], "a": {"y": "\u00e9", "x": "\/"}}"#);
        let b = canon("{\"a\":{\"x\":\"/\",\"y\":\"é\"},\"b\":[1.0,2,100,0]}");
        assert_eq!(a, b);
        assert_eq!(a, r#"{"a":{"x":"/","y":"é"},"b":[1,2,100,0]}"#);
        // Controls, U+2028 and DEL: only controls are escaped.
        assert_eq!(
            canon(r#""\u0001\u001f\u007f\u2028""#),
            "\"\\u0001\\u001f\u{7f}\u{2028}\""
        );
    }

    /// Random JSON text: members in any order, nested objects and arrays, escapes.
    fn random_text(rng: &mut crate::test_util::Rng, depth: usize, out: &mut String) {
        let keys = [
            "a",
            "b",
            "name",
            "Z",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\uffff",
            "k\\n",
            "è",
            "10",
        ];
        let scalars = [
            "1",
            "-0",
            "2.50",
            "1e3",
            "0.1",
            "true",
            "null",
            "\"x\\ty\"",
            "\"\\u001f\"",
            "\"ü\"",
        ];
        match (depth, rng.below(4)) {
            (0, _) | (_, 0) => out.push_str(rng.pick(&scalars)),
            (_, 1) => {
                out.push('[');
                for i in 0..rng.below(4) {
                    if i > 0 {
                        out.push(',');
                    }
                    random_text(rng, depth - 1, out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                let mut used: Vec<&str> = Vec::new();
                for _ in 0..rng.below(5) {
                    let k = rng.pick(&keys);
                    if used.contains(&k) {
                        continue;
                    }
                    if !used.is_empty() {
                        out.push_str(" , ");
                    }
                    used.push(k);
                    out.push_str(&format!("\"{k}\" :"));
                    random_text(rng, depth - 1, out);
                }
                out.push('}');
            }
        }
    }

    #[test]
    fn canonical_forms_agree_with_a_recursive_writer() {
        let mut rng = crate::test_util::Rng(0x5EED_CAFE_F00D_0001);
        let mut canon = Canonicalizer::new();
        for _ in 0..3000 {
            let mut text = String::new();
            random_text(&mut rng, 4, &mut text);
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let want = crate::serde_oracle::canonical(&value);
            assert_eq!(
                String::from_utf8_lossy(&canonicalize(text.as_bytes(), 64).unwrap()),
                String::from_utf8_lossy(&want),
                "{text}"
            );
            // The same Canonicalizer, reused.
            canon.reset();
            let mut w = Whole(std::mem::take(&mut canon));
            crate::json::read(text.as_bytes(), 64, &mut w).unwrap();
            assert_eq!(w.0.text().unwrap(), &want[..], "{text}");
            canon = w.0;
        }
    }

    #[test]
    fn duplicate_members_have_no_canonical_form() {
        assert!(canonicalize(br#"{"a":1,"a":2}"#, 64).is_err());
        assert!(canonicalize(br#"{"a":1,"\u0061":1}"#, 64).is_err());
        assert!(canonicalize(br#"[{"x":{"a":1,"a":1}}]"#, 64).is_err());
        assert!(canonicalize(br#"{"a":1,"b":{"a":1}}"#, 64).is_ok());
    }

    #[test]
    fn digests_are_written_and_read_as_toolpins_write_them() {
        // Canonical form first: whitespace and member order do not change the digest.
        let d = digest_of(br#"{ "name" : "echo" }"#, 64).unwrap();
        assert_eq!(
            d.to_text(),
            "sha256:f7817751a90d6baf078dd0e2d98b278faa025d83ccee00eb9b60100ad65bdcb9"
        );
        assert_eq!(Digest::parse(&d.to_text()), Some(d));
        let empty = Digest::of(b"");
        assert_eq!(
            empty.to_text(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        for bad in [
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:e3b0",
            "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85g",
        ] {
            assert_eq!(Digest::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn remembered_digests_are_the_digests_and_memory_stays_bounded() {
        let texts: Vec<Vec<u8>> = (0..3 * REMEMBERED_DIGESTS)
            .map(|i| format!("{{ \"name\": \"tool-{i}\", \"a\": [{i}.0] }}").into_bytes())
            .collect();
        // Twice over, past the entry bound (so it starts again empty along the way).
        for _ in 0..2 {
            for t in &texts {
                assert_eq!(digest_remembered(t, 64), digest_of(t, 64));
            }
        }
        // Text without a canonical form is an error each time, and not remembered.
        for bad in [&b"{\"a\":1,\"a\":2}"[..], b"[[[1]]]", b"{"] {
            for _ in 0..2 {
                assert_eq!(
                    digest_remembered(bad, 2).is_err(),
                    digest_of(bad, 2).is_err()
                );
                assert!(digest_remembered(bad, 2).is_err());
            }
        }
        // Another depth limit starts again: what passed under 64 may not under 2.
        assert!(digest_remembered(b"[[[1]]]", 64).is_ok());
        assert!(digest_remembered(b"[[[1]]]", 2).is_err());
        let big = vec![b'1'; REMEMBERED_BYTES / 16 + 1];
        assert_eq!(digest_remembered(&big, 64), digest_of(&big, 64));
        REMEMBERED.with(|r| {
            let r = r.borrow();
            assert!(r.digests.len() <= REMEMBERED_DIGESTS && r.bytes <= REMEMBERED_BYTES);
            assert!(!r.digests.contains_key(&big[..]));
            assert_eq!(r.bytes, r.digests.keys().map(|k| k.len()).sum::<usize>());
        });
    }

    #[test]
    fn serde_text_said_canonical_is_canonical() {
        let canonical = [
            r#"{"a":1,"b":[true,null,"x\u0001\"y"],"c":{"d":-9007199254740992}}"#,
            r#"{"é":"ü","z":"\u2028"}"#,
            "9007199254740992",
        ];
        let not = [
            "1.5",
            "1e21",
            "100.0",
            "9007199254740993",
            "-9007199254740993",
            r#"{"\ue000":1,"\ud83d\ude00":2}"#,
            r#"[{"a":0.1}]"#,
        ];
        for text in canonical.iter().chain(&not) {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let written = v.to_string();
            let is = canon(&written) == written;
            assert_eq!(
                serde_text_is_canonical(&v),
                canonical.contains(text),
                "{text}"
            );
            // Never claimed when it is not so.
            assert!(is || !serde_text_is_canonical(&v), "{text}");
        }
        // Names past U+FFFF sort before U+E000.. in UTF-16, after in UTF-8.
        let v: serde_json::Value =
            serde_json::from_str(r#"{"\ue000":1,"\ud83d\ude00":2}"#).unwrap();
        assert_ne!(canon(&v.to_string()), v.to_string());
    }

    #[test]
    fn scalars_said_canonical_are_canonical() {
        for (text, is) in [
            ("true", true),
            ("null", true),
            ("0", true),
            ("-12", true),
            ("123456789012345", true),
            ("1234567890123456", false),
            ("-0", false),
            ("01", false),
            ("1.0", false),
            ("1e3", false),
            ("", false),
            ("-", false),
        ] {
            assert_eq!(scalar_is_canonical(text), is, "{text}");
            if is {
                assert_eq!(canon(text), text);
            }
        }
    }
}
