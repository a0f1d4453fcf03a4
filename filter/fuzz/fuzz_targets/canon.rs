//! The path canonicalizer (`canon::canonical_path`) against the definition in
//! docs/semantics.md §2 and a reference written here from RFC 3986 directly:
//! - the query and fragment are cut off; a path not starting with `/` is refused;
//! - a raw or encoded NUL, a raw control character, a bad `%` escape is refused; `%2F` / `%5C`
//!   is refused, or decoded to `/` when the operator chose to decode it;
//! - percent-encoded unreserved characters are decoded, other escapes kept (hex upper-cased);
//!   `\` is `/`;
//! - dot segments are removed (the buffer algorithm of RFC 3986 §5.2.4), then repeated
//!   slashes merged; a path where merging slashes first would give another result is refused.
//!
//! Besides agreeing with the reference, the result is a fixed point (canonicalizing it again
//! changes nothing) and holds no `.` / `..` segment, no `//`, no decodable escape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::canon::{canonical_path, EscapedSlashes};

fuzz_target!(|data: &[u8]| {
    // `:path` reaches the filter as a string.
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    for mode in [EscapedSlashes::Reject, EscapedSlashes::Decode] {
        let decode = mode == EscapedSlashes::Decode;
        let got = canonical_path(raw, mode);
        let want = reference(raw, decode);
        match (&got, &want) {
            (Ok(g), Some(w)) => assert_eq!(g, w, "canonical form differs for {raw:?}"),
            (Err(_), None) => {}
            _ => panic!("{raw:?} ({mode:?}): canon says {got:?}, the reference {want:?}"),
        }
        let Ok(canon) = got else {
            continue;
        };
        check_shape(&canon);
        match canonical_path(&canon, mode) {
            Ok(again) => assert_eq!(again, canon, "not idempotent for {raw:?}"),
            Err(e) => panic!("the canonical form {canon:?} of {raw:?} is refused: {e:?}"),
        }
    }
});

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// What a canonical path looks like.
fn check_shape(canon: &str) {
    assert!(canon.starts_with('/'), "{canon:?} is not absolute");
    assert!(!canon.contains("//"), "{canon:?} holds //");
    assert!(
        !canon.contains(['\\', '?', '#']),
        "{canon:?} holds \\, ? or #"
    );
    assert!(
        !canon.bytes().any(|b| b < 0x20 || b == 0x7f),
        "{canon:?} holds a control character"
    );
    for seg in canon.split('/') {
        assert!(seg != "." && seg != "..", "{canon:?} holds a dot segment");
    }
    let bytes = canon.as_bytes();
    for (i, _) in canon.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let value = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
        let Some(v) = value else {
            panic!("{canon:?} holds a bad escape");
        };
        assert!(
            !is_unreserved(v) && v != 0,
            "{canon:?} keeps a decodable escape"
        );
        assert!(
            hex.is_some_and(|h| h == h.to_ascii_uppercase()),
            "{canon:?}: lower-case hex"
        );
    }
}

/// The canonical path by the definition, or None where it is refused.
fn reference(raw: &str, decode_slashes: bool) -> Option<String> {
    let path = raw.split(['?', '#']).next().unwrap_or_default();
    if !path.starts_with('/') {
        return None;
    }
    let mut decoded = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\0'..='\x1f' | '\x7f' => return None,
            '\\' => decoded.push('/'),
            '%' => {
                let hi = chars.next()?.to_digit(16)?;
                let lo = chars.next()?.to_digit(16)?;
                let v = u8::try_from(hi * 16 + lo).ok()?;
                match v {
                    0 => return None,
                    b'/' | b'\\' if decode_slashes => decoded.push('/'),
                    b'/' | b'\\' => return None,
                    v if is_unreserved(v) => decoded.push(char::from(v)),
                    v => decoded.push_str(&format!("%{v:02X}")),
                }
            }
            c => decoded.push(c),
        }
    }
    let canon = merge_slashes(&remove_dot_segments(&decoded));
    // A path whose meaning depends on the order (slashes merged before or after dot
    // segments) is refused.
    if merge_slashes(&remove_dot_segments(&merge_slashes(&decoded))) != canon {
        return None;
    }
    Some(canon)
}

fn merge_slashes(path: &str) -> String {
    let mut merged = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && merged.ends_with('/')) {
            merged.push(c);
        }
    }
    if merged.is_empty() {
        merged.push('/');
    }
    merged
}

/// RFC 3986 §5.2.4, step by step on an input and an output buffer.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path.to_string();
    let mut output = String::new();
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest.to_string();
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest.to_string();
        } else if input.starts_with("/./") {
            input.replace_range(..3, "/");
        } else if input == "/." {
            input = "/".to_string();
        } else if input.starts_with("/../") || input == "/.." {
            let len = if input == "/.." { 3 } else { 4 };
            input.replace_range(..len, "/");
            let cut = output.rfind('/').unwrap_or(0);
            output.truncate(cut);
        } else if input == "." || input == ".." {
            input.clear();
        } else {
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| i + start);
            output.push_str(&input[..end]);
            input.replace_range(..end, "");
        }
    }
    output
}
