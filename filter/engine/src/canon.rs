//! The canonical request path that path rules match on.
//!
//! Query and fragment are cut off; percent-encoded unreserved characters (RFC 3986 §2.3) are
//! decoded, the hex digits of every other escape are upper-cased; a `\` is a `/` (as in
//! Envoy's own path normalization); dot segments are removed (RFC 3986 §5.2.4); repeated
//! slashes are merged. A path that is not absolute, holds a NUL or another control
//! character, or a `%` not followed by two hex digits is refused. An encoded `/` or `\`
//! (`%2F`, `%5C`) is refused unless the operator chose [`EscapedSlashes::Decode`].

use std::fmt;

pub use mcp_access_bundle::EscapedSlashes;

/// Why a path has no canonical form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Empty, or not starting with `/`.
    NotAbsolute,
    /// `%2F` or `%5C`, with [`EscapedSlashes::Reject`].
    EscapedSlash,
    /// A raw or percent-encoded NUL.
    Nul,
    /// A raw control character (other than NUL).
    Control,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A `..` after repeated slashes: its meaning depends on whether slashes are merged first.
    Ambiguous,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotAbsolute => "the request path must start with '/'",
            PathError::EscapedSlash => "the request path holds an encoded '/' or '\\' (%2F, %5C)",
            PathError::Nul => "the request path holds a NUL character",
            PathError::Control => "the request path holds a control character",
            PathError::BadEscape => "the request path holds an invalid percent-encoding",
            PathError::Ambiguous => {
                "the request path has a '..' segment after repeated slashes, which servers read differently"
            }
        })
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// The canonical form of `raw` (a `:path`, query allowed), or why it has none.
pub fn canonical_path(raw: &str, escaped: EscapedSlashes) -> Result<String, PathError> {
    let end = raw.find(['?', '#']).unwrap_or(raw.len());
    let path = raw.get(..end).unwrap_or_default().as_bytes();
    if path.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    if is_canonical(path) {
        return Ok(raw.get(..end).unwrap_or_default().to_owned());
    }
    canonical_by_passes(path, escaped)
}

/// [`canonical_path`] of `path` (no query, starting with '/'), pass by pass.
fn canonical_by_passes(path: &[u8], escaped: EscapedSlashes) -> Result<String, PathError> {
    // Pass 1: escapes and backslashes. Only ASCII bytes are inserted or removed, so the
    // output stays valid UTF-8.
    let mut decoded: Vec<u8> = Vec::with_capacity(path.len());
    let mut i = 0;
    while let Some(&b) = path.get(i) {
        i += 1;
        match b {
            0 => return Err(PathError::Nul),
            1..=0x1f | 0x7f => return Err(PathError::Control),
            b'\\' => decoded.push(b'/'),
            b'%' => {
                let (Some(h), Some(l)) = (
                    path.get(i).copied().and_then(hex),
                    path.get(i + 1).copied().and_then(hex),
                ) else {
                    return Err(PathError::BadEscape);
                };
                i += 2;
                let v = (h << 4) | l;
                match v {
                    0 => return Err(PathError::Nul),
                    b'/' | b'\\' => match escaped {
                        EscapedSlashes::Reject => return Err(PathError::EscapedSlash),
                        EscapedSlashes::Decode => decoded.push(b'/'),
                    },
                    v if is_unreserved(v) => decoded.push(v),
                    _ => {
                        decoded.push(b'%');
                        decoded.push(HEX_UPPER.get(usize::from(h)).copied().unwrap_or(b'0'));
                        decoded.push(HEX_UPPER.get(usize::from(l)).copied().unwrap_or(b'0'));
                    }
                }
            }
            _ => decoded.push(b),
        }
    }
    // Pass 2: dot segments (RFC 3986 §5.2.4, on a path known to start with '/'), then
    // empty segments (repeated slashes).
    let canon = resolve(&decoded, false);
    // Where a `..` follows `//`, merging slashes first would give another path (`/a//../b`:
    // `/a/b` here, `/b` for an upstream that merges first). Neither reading is safe to assume.
    if decoded.windows(2).any(|w| w == b"//") && resolve(&decoded, true) != canon {
        return Err(PathError::Ambiguous);
    }
    String::from_utf8(canon).map_err(|_| PathError::BadEscape)
}

/// Whether `path` (starting with '/') is its own canonical form: no escape, backslash, control
/// character, repeated slash or dot segment (what the passes of [`canonical_path`] change).
/// Most requests' paths are; they are copied as they are.
fn is_canonical(path: &[u8]) -> bool {
    let mut segment_start = 0;
    for (i, &b) in path.iter().enumerate() {
        match b {
            0..=0x1f | 0x7f | b'%' | b'\\' => return false,
            b'/' => {
                if i > 0 && !is_plain_segment(path.get(segment_start..i).unwrap_or_default()) {
                    return false;
                }
                segment_start = i + 1;
            }
            _ => {}
        }
    }
    // The last segment may be empty: a trailing '/' is kept.
    let last = path.get(segment_start..).unwrap_or_default();
    last.is_empty() || is_plain_segment(last)
}

/// A segment that neither pass changes: not empty (a repeated slash), not `.` or `..`.
fn is_plain_segment(s: &[u8]) -> bool {
    !matches!(s, b"" | b"." | b"..")
}

/// Removes dot segments, then empty ones; `merge_first`: empty segments (but a trailing one)
/// are dropped before dot segments are removed.
fn resolve(decoded: &[u8], merge_first: bool) -> Vec<u8> {
    // Segments are '/'-separated; the first is empty.
    let mut out: Vec<&[u8]> = Vec::new();
    let mut segments = decoded.split(|&c| c == b'/').skip(1).peekable();
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        match seg {
            b"." | b".." => {
                if seg == b".." {
                    out.pop();
                }
                // A trailing dot segment leaves the path ending in '/'.
                if last {
                    out.push(b"");
                }
            }
            b"" if merge_first && !last => {}
            _ => out.push(seg),
        }
    }
    let mut canon: Vec<u8> = Vec::with_capacity(decoded.len());
    for (n, seg) in out.iter().enumerate() {
        let trailing = n + 1 == out.len();
        if !seg.is_empty() || trailing {
            canon.push(b'/');
            canon.extend_from_slice(seg);
        }
    }
    if canon.is_empty() {
        canon.push(b'/');
    }
    canon
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn paths_taken_as_canonical_are_what_the_passes_give() {
        // Every path of up to 7 of these bytes after the leading '/'.
        let alphabet: &[&[u8]] = &[b"/", b"a", b".", b"%2F", b"%41", b"\\", "\u{e9}".as_bytes()];
        let mut paths: Vec<Vec<u8>> = vec![b"/".to_vec()];
        let mut fast = 0;
        for _ in 0..7 {
            let mut next = Vec::new();
            for p in &paths {
                for a in alphabet {
                    let mut q = p.clone();
                    q.extend_from_slice(a);
                    next.push(q);
                }
            }
            for p in &next {
                if is_canonical(p) {
                    fast += 1;
                    let text = std::str::from_utf8(p).unwrap();
                    for e in [EscapedSlashes::Reject, EscapedSlashes::Decode] {
                        assert_eq!(canonical_by_passes(p, e).as_deref(), Ok(text), "{text}");
                    }
                }
            }
            paths = next;
        }
        assert!(fast > 100, "{fast}");
        assert!(is_canonical(b"/") && is_canonical(b"/mcp/") && !is_canonical(b"/mcp//x"));
    }

    fn canon(p: &str) -> Result<String, PathError> {
        canonical_path(p, EscapedSlashes::Reject)
    }

    #[test]
    fn known_bypasses_collapse_to_the_named_path() {
        for p in [
            "/mcp/admin",
            "/mcp/./admin",
            "/mcp/x/../admin",
            "/mcp//admin",
            "/mcp/%61dmin",
            "/mcp/%2e/admin",
            "/mcp/%2E%2e/mcp/admin",
            "//mcp///admin",
            "/mcp\\admin",
            "/mcp/admin?x=/../y",
            "/mcp/admin#frag",
            "/x/../../mcp/admin",
        ] {
            assert_eq!(canon(p).as_deref(), Ok("/mcp/admin"), "{p}");
        }
    }

    #[test]
    fn trailing_slashes_and_dot_segments_at_the_end() {
        assert_eq!(canon("/mcp/").unwrap(), "/mcp/");
        assert_eq!(canon("/mcp//").unwrap(), "/mcp/");
        assert_eq!(canon("/mcp/.").unwrap(), "/mcp/");
        assert_eq!(canon("/mcp/admin/..").unwrap(), "/mcp/");
        assert_eq!(canon("/..").unwrap(), "/");
        assert_eq!(canon("/").unwrap(), "/");
        assert_eq!(canon("/.../x").unwrap(), "/.../x");
        assert_eq!(canon("/a/.b/c.").unwrap(), "/a/.b/c.");
    }

    #[test]
    fn other_escapes_stay_encoded_in_upper_case() {
        assert_eq!(canon("/a%20b/%3a%7e").unwrap(), "/a%20b/%3A~");
        assert_eq!(canon("/%25/%252F").unwrap(), "/%25/%252F");
        assert_eq!(canon("/caf%C3%A9/é").unwrap(), "/caf%C3%A9/é");
    }

    #[test]
    fn refusals() {
        for (p, e) in [
            ("", PathError::NotAbsolute),
            ("*", PathError::NotAbsolute),
            ("mcp/admin", PathError::NotAbsolute),
            ("?/mcp", PathError::NotAbsolute),
            ("/mcp/admin%2ftools", PathError::EscapedSlash),
            ("/mcp/admin%2Ftools", PathError::EscapedSlash),
            ("/mcp%5cadmin", PathError::EscapedSlash),
            ("/mcp%5Cadmin", PathError::EscapedSlash),
            ("/mcp%00", PathError::Nul),
            ("/mcp\0", PathError::Nul),
            ("/mcp\n", PathError::Control),
            ("/mcp\x7f", PathError::Control),
            ("/mcp%", PathError::BadEscape),
            ("/mcp%2", PathError::BadEscape),
            ("/mcp%zz", PathError::BadEscape),
            ("/mcp%%41", PathError::BadEscape),
        ] {
            assert_eq!(canon(p), Err(e), "{p:?}");
        }
        // `..` after `//`: `/a/b` by RFC 3986 order, `/b` when slashes are merged first.
        for p in ["/a//../b", "/mcp//x/../../admin", "/mcp/tools//../admin"] {
            assert_eq!(canon(p), Err(PathError::Ambiguous), "{p:?}");
        }
        // Where both orders agree, repeated slashes are just merged.
        assert_eq!(canon("/a//b/../c").unwrap(), "/a/c");
        assert_eq!(canon("/a/../b//c").unwrap(), "/b/c");
        // Only the path is looked at.
        assert_eq!(canon("/mcp?a=%2F&b=%zz").unwrap(), "/mcp");
    }

    #[test]
    fn decode_mode_turns_escaped_slashes_into_slashes() {
        let d = |p| canonical_path(p, EscapedSlashes::Decode);
        assert_eq!(d("/mcp/admin%2ftools").unwrap(), "/mcp/admin/tools");
        assert_eq!(d("/mcp%5Cadmin").unwrap(), "/mcp/admin");
        assert_eq!(d("/x%2F..%2Fmcp%2fadmin").unwrap(), "/mcp/admin");
        assert_eq!(d("/mcp%00"), Err(PathError::Nul));
    }

    /// A straightforward reference: decode into a list of "characters" (a decoded byte, or an
    /// escape kept as text), split on '/', apply the RFC 3986 §5.2.4 algorithm literally on
    /// the string form, then drop empty segments.
    fn reference(raw: &str, escaped: EscapedSlashes) -> Result<String, PathError> {
        let path = raw.split(['?', '#']).next().unwrap_or("");
        if !path.starts_with('/') {
            return Err(PathError::NotAbsolute);
        }
        let bytes = path.as_bytes();
        let mut s = String::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'%' {
                let hexs =
                    std::str::from_utf8(bytes.get(i + 1..i + 3).ok_or(PathError::BadEscape)?)
                        .map_err(|_| PathError::BadEscape)?;
                if !hexs.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(PathError::BadEscape);
                }
                let v = u8::from_str_radix(hexs, 16).unwrap();
                let c = char::from(v);
                if v == 0 {
                    return Err(PathError::Nul);
                } else if c == '/' || c == '\\' {
                    if escaped == EscapedSlashes::Reject {
                        return Err(PathError::EscapedSlash);
                    }
                    s.push('/');
                } else if c.is_ascii_alphanumeric() || "-._~".contains(c) {
                    s.push(c);
                } else {
                    s.push_str(&format!("%{v:02X}"));
                }
                i += 3;
                continue;
            }
            if b == 0 {
                return Err(PathError::Nul);
            }
            if b < 0x20 || b == 0x7f {
                return Err(PathError::Control);
            }
            // Copy one whole UTF-8 character.
            let ch = path[i..].chars().next().unwrap();
            s.push(if ch == '\\' { '/' } else { ch });
            i += ch.len_utf8();
        }
        let merge = |mut p: String| {
            while p.contains("//") {
                p = p.replace("//", "/");
            }
            if p.is_empty() {
                p.push('/');
            }
            p
        };
        // RFC 3986 order (dot segments, then slashes); a merge-first reading that differs
        // makes the path ambiguous.
        let canon = merge(remove_dot_segments(s.clone()));
        if s.contains("//") && merge(remove_dot_segments(merge(s))) != canon {
            return Err(PathError::Ambiguous);
        }
        Ok(canon)
    }

    /// RFC 3986 §5.2.4, step by step on strings.
    fn remove_dot_segments(mut input: String) -> String {
        let mut output = String::new();
        while !input.is_empty() {
            if let Some(rest) = input.strip_prefix("../") {
                input = rest.to_string();
            } else if let Some(rest) = input.strip_prefix("./") {
                input = rest.to_string();
            } else if input.starts_with("/./") {
                input = input[2..].to_string();
            } else if input == "/." {
                input = "/".to_string();
            } else if input.starts_with("/../") || input == "/.." {
                input = if input == "/.." {
                    "/".to_string()
                } else {
                    input[3..].to_string()
                };
                match output.rfind('/') {
                    Some(k) => output.truncate(k),
                    None => output.clear(),
                }
            } else if input == "." || input == ".." {
                input.clear();
            } else {
                let start = usize::from(input.starts_with('/'));
                let k = input[start..].find('/').map_or(input.len(), |k| k + start);
                output.push_str(&input[..k]);
                input = input[k..].to_string();
            }
        }
        output
    }

    /// Deterministic xorshift, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    #[test]
    fn agrees_with_the_reference_and_is_idempotent_on_generated_paths() {
        let atoms = [
            "/", "/", "/", ".", "..", "a", "mcp", "admin", "%2e", "%2E", "%2f", "%2F", "%5c",
            "%5C", "\\", "%61", "%7E", "%7e", "%20", "%3a", "%25", "%00", "%", "%g1", "%4", "?",
            "#", "é", "~", "-", "_", "\t", "%41%42", "//", "/./", "/../",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut ok = 0;
        for n in 0..60_000 {
            let len = 1 + (rng.next() % 9) as usize;
            let mut p = String::new();
            if n % 13 != 0 {
                p.push('/');
            }
            for _ in 0..len {
                p.push_str(rng.pick(&atoms));
            }
            for mode in [EscapedSlashes::Reject, EscapedSlashes::Decode] {
                let ours = canonical_path(&p, mode);
                assert_eq!(ours, reference(&p, mode), "{p:?} {mode:?}");
                if let Ok(c) = &ours {
                    ok += 1;
                    assert_eq!(canonical_path(c, mode).as_ref(), Ok(c), "idempotent: {p:?}");
                    assert!(c.starts_with('/') && !c.contains("//"), "{c:?}");
                    assert!(
                        !c.split('/').any(|s| s == "." || s == ".."),
                        "dot segment left in {c:?}"
                    );
                }
            }
        }
        assert!(ok > 20_000, "too few accepted paths: {ok}");
    }
}
