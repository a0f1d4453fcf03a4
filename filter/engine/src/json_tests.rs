//! Tests of `json.rs` (kept beside it, out of the module's own file).

use super::*;
use crate::test_util::{in_string, with_arg, Rng};

/// Hands over every object member and top-level value (strings decoded) and records
/// what it gets; array elements are read but not handed over.
#[derive(Default)]
struct Record {
    strings: Vec<String>,
    numbers: Vec<String>,
    duplicates: Vec<usize>,
}

impl<'a> Visitor<'a> for Record {
    type Slot = bool;
    type Error = SyntaxError;
    const ROOT: bool = true;
    const IGNORE: bool = false;

    fn member(&mut self, _object: bool, _key: &[u8]) -> bool {
        true
    }

    fn duplicate_key(&mut self, _slot: bool, at: usize) {
        self.duplicates.push(at);
    }

    fn wants_text(&self, _slot: bool) -> bool {
        true
    }

    fn value(&mut self, _slot: bool, val: Val<'a>) -> Result<(), SyntaxError> {
        match val {
            Val::Str {
                decoded: Some(s), ..
            } => self.strings.push(into_string(s)?),
            Val::Number(n) => self.numbers.push(String::from_utf8_lossy(n).into_owned()),
            _ => {}
        }
        Ok(())
    }
}

fn read_with(body: &[u8], max_depth: usize) -> Result<Record, SyntaxError> {
    let mut r = Record::default();
    read(body, max_depth, &mut r).map(|()| r)
}

fn read_all(body: &[u8]) -> Result<Record, SyntaxError> {
    read_with(body, 64)
}

fn ok(body: &str) -> Record {
    match read_all(body.as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("expected JSON: {body:?}, got {e:?}"),
    }
}

fn rejected(body: &[u8]) -> SyntaxError {
    match read_all(body) {
        Ok(_) => panic!(
            "expected a syntax error: {:?}",
            String::from_utf8_lossy(body)
        ),
        Err(e) => e,
    }
}

fn is_syntax_error(body: &[u8]) -> bool {
    read_all(body).is_err()
}

fn has_duplicate(body: &[u8]) -> bool {
    read_all(body).is_ok_and(|r| !r.duplicates.is_empty())
}

/// The decoded value of a string literal with contents `escaped`.
fn decoded(escaped: &str) -> Result<String, SyntaxError> {
    let body = format!(r#"{{"name":"{escaped}"}}"#);
    read_all(body.as_bytes()).map(|r| r.strings.last().cloned().unwrap_or_default())
}

fn big_object(n: usize, extra: &str) -> String {
    let mut s = String::from("{");
    for i in 0..n {
        s.push_str(&format!("\"k{i}\":{i},"));
    }
    s.push_str(extra);
    s.push('}');
    with_arg(&s)
}

#[test]
fn scanning_stops_at_the_first_special_byte_at_every_offset() {
    // Offsets in the first word, in either word of a 16-byte step, and in the tail.
    for len in 0..56usize {
        for at in 0..len {
            for special in [b'"', b'\\', 0x01, 0x1f] {
                let mut text = vec![b'a'; len];
                if let Some(b) = text.get_mut(at) {
                    *b = special;
                }
                assert_eq!(
                    scan_plain(&text, 0),
                    (at, false),
                    "len {len}, {special:#x} at {at}"
                );
            }
            let mut text = vec![b'a'; len + 1];
            text.splice(at..at + 1, "é".bytes());
            assert_eq!(
                scan_plain(&text, 0),
                (text.len(), true),
                "len {len}, é at {at}"
            );
        }
        assert_eq!(scan_plain(&vec![b'a'; len], 0), (len, false));
    }
}

#[test]
fn depth_limit() {
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    assert!(read_with(nested(64).as_bytes(), 64).is_ok());
    let e = read_with(nested(65).as_bytes(), 64)
        .err()
        .unwrap_or(SyntaxError(String::new()));
    assert!(e.0.contains("nesting deeper than 64 levels"), "{e:?}");
    assert!(read_with(br#"{"a":{"b":1}}"#, 2).is_ok());
    assert!(read_with(br#"{"a":{"b":[]}}"#, 2).is_err());
    assert!(read_with(b"{}", 0).is_err());
    assert!(read_with(b"1", 0).is_ok());
}

#[test]
fn duplicates_reported_with_their_offset() {
    let r = ok(r#"{"a":1,"b":{"a":2},"\u0061":3}"#);
    assert_eq!(r.duplicates, [19]);
    assert!(ok(r#"{"a":[{"k":1},{"k":1}]}"#).duplicates.is_empty());
}

#[test]
fn utf8_invalid_sequences() {
    let cases: &[&[u8]] = &[
        b"\xff",
        b"\xfe",
        b"\x80", // lone continuation
        b"\xbf",
        b"\xc3",                     // truncated
        b"\xe2\x82",                 // truncated
        b"\xf0\x9f\x98",             // truncated
        b"\xc3\x28",                 // bad continuation
        b"\xc0\xaf",                 // overlong '/'
        b"\xc1\xbf",                 // overlong
        b"\xe0\x80\xaf",             // overlong
        b"\xe0\x9f\xbf",             // overlong
        b"\xf0\x80\x80\xaf",         // overlong
        b"\xf0\x8f\xbf\xbf",         // overlong
        b"\xed\xa0\x80",             // U+D800 encoded
        b"\xed\xbf\xbf",             // U+DFFF encoded
        b"\xed\xa0\xbd\xed\xb8\x80", // CESU-8 pair
        b"\xf4\x90\x80\x80",         // > U+10FFFF
        b"\xf5\x80\x80\x80",
        b"\xf8\x88\x80\x80\x80",
        b"ab\xe2\x82\xacc\xe2\x82",
    ];
    for raw in cases {
        let e = rejected(&in_string(raw));
        assert!(e.0.contains("UTF-8"), "{raw:x?}: {e:?}");
        // Also as a key and as the method.
        let mut body = b"{\"".to_vec();
        body.extend_from_slice(raw);
        body.extend_from_slice(br#"":1,"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert!(is_syntax_error(&body), "{raw:x?}");
    }
    // Invalid UTF-8 in whitespace / structural position.
    for body in [
        &b"{\"jsonrpc\":\"2.0\",\xff\"id\":1,\"method\":\"ping\"}"[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\xc3\xa9",
        b"\xc2\xa0{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\xe2\x82\xac}",
    ] {
        assert!(is_syntax_error(body), "{body:x?}");
    }
    // Unterminated string ending in the middle of a sequence.
    assert!(is_syntax_error(b"{\"a\":\"\xe2\x82"));
}

#[test]
fn control_characters_in_strings() {
    for c in [0x00u8, 0x01, 0x08, b'\t', b'\n', b'\r', 0x1b, 0x1f] {
        rejected(&in_string(&[b'a', c, b'b']));
        let mut key = b"{\"a".to_vec();
        key.push(c);
        key.extend_from_slice(br#"":1,"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert!(is_syntax_error(&key), "{c:#x}");
    }
    // DEL is not a control character for JSON.
    assert!(read_all(&in_string(b"a\x7fb")).is_ok());
    // Control characters after a long plain run (exercises the 8-byte fast path).
    for len in 0..40 {
        let mut raw = vec![b'x'; len];
        raw.push(0x1f);
        raw.extend_from_slice(b"yyyyyyyyy");
        assert!(is_syntax_error(&in_string(&raw)), "len {len}");
        let mut raw = vec![b'x'; len];
        raw.extend_from_slice(b"\\\"\xc3\xa9yyyyyyyyy");
        assert!(read_all(&in_string(&raw)).is_ok(), "len {len}");
    }
}

#[test]
fn valid_escapes() {
    let cases = [
        (r#"\"\\\/\b\f\n\r\t"#, "\"\\/\u{8}\u{c}\n\r\t"),
        (r"\u0041\u00e9\u20AC\uFFFF", "Aé€\u{ffff}"),
        (r"\ud83d\ude00", "😀"),
        (r"\uD83D\uDE00x", "😀x"),
        (r"\udbff\udfff", "\u{10ffff}"),
        (r"\ud800\udc00", "\u{10000}"),
        (r"a\u0000b", "a\0b"),
        (r"\u005c\u0022", "\\\""),
        (r"plain", "plain"),
        ("", ""),
    ];
    for (escaped, want) in cases {
        assert_eq!(decoded(escaped).unwrap(), want, "{escaped}");
    }
}

#[test]
fn invalid_escapes() {
    for escaped in [
        r"\x41",
        r"\U0041",
        r"\'",
        r"\a",
        r"\0",
        r"\u12",
        r"\u12G4",
        r"\u-123",
        r"\u",
        r"\ud800",
        r"\ud800x",
        r"\ud800\n",
        r"\ud800\u0041",
        r"\ud800\ud800",
        r"\udbff\ue000",
        r"\udc00",
        r"\udfff",
        r"\udc00\ud800",
        r"x\ude00\ud83d",
        r"\ud83d\\ude00",
        "\\\u{e9}",
    ] {
        assert!(decoded(escaped).is_err(), "{escaped}");
        // The same escape anywhere else in the body is also rejected.
        assert!(is_syntax_error(
            with_arg(&format!("\"{escaped}\"")).as_bytes()
        ));
        assert!(is_syntax_error(
            with_arg(&format!("{{\"{escaped}\":1}}")).as_bytes()
        ));
    }
    // Backslash at the very end of the input.
    assert!(is_syntax_error(br#"{"a":"\"#));
    assert!(is_syntax_error(br#"{"a":"\u00"#));
}

#[test]
fn syntax_errors() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping",,"x":1}"#,
        r#"{"jsonrpc":"2.0","id":1 "method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method" "ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1,2}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1,2,]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[,1]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":[1 2]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":'ping'}"#,
        r#"{jsonrpc:"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping" /* c */}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"} // c"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":"unterminated}"#,
        r#"{,}"#,
        r#"{:1}"#,
        r#"{1:1}"#,
        r#"{"#,
        r#"}"#,
        r#"["#,
        r#""#,
        r#"""#,
    ] {
        assert!(is_syntax_error(body.as_bytes()), "{body}");
    }
}

#[test]
fn scan_plain_matches_naive() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let alphabet = [
        b'a', b'Z', b' ', b'~', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xff,
    ];
    for _ in 0..20_000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if rng.chance(80) {
                    b'a' + rng.below(26) as u8
                } else {
                    rng.pick(&alphabet)
                }
            })
            .collect();
        for start in 0..=len {
            let want = bytes[start..]
                .iter()
                .position(|&c| c < 0x20 || c == b'"' || c == b'\\')
                .map_or(len, |p| start + p);
            let (end, non_ascii) = scan_plain(&bytes, start);
            assert_eq!(end, want, "{bytes:x?} from {start}");
            if bytes[start..end].iter().any(|&c| c >= 0x80) {
                assert!(non_ascii, "{bytes:x?} from {start}");
            }
        }
    }
}

#[test]
fn duplicates_equal_after_decoding_in_either_order() {
    for body in [
        r#"{"a":1,"\u0061":2}"#,
        r#"{"\u0061":1,"a":2}"#,
        r#"{"\u0061":1,"\u0061":2}"#,
        r#"{"\u0061":1,"b":0,"a":2}"#,
        r#"{"abcdefghij":1,"abcdefgh\u0069j":2}"#,
        r#"{"\n":1,"\u000a":2}"#,
        r#"{"é":1,"\u00e9":2}"#,
        r#"{"":1,"":2}"#,
    ] {
        assert!(has_duplicate(body.as_bytes()), "{body}");
    }
    for body in [
        r#"{"a":1,"\u0062":2}"#,
        r#"{"\u0061":1,"b":2}"#,
        r#"{"abcdefghij":1,"abcdefghik":2}"#,
        r#"{"abcdefgh":1,"abcdefghi":2}"#,
        r#"{"a":1,"a\u0000":2}"#,
        r#"{"":1,"\u0000":2}"#,
    ] {
        assert!(ok(body).duplicates.is_empty(), "{body}");
    }
    // At the very end of the input (a key shorter than a word with nothing after it).
    assert!(is_syntax_error(br#"{"a":1,"a""#));
}

#[test]
fn duplicate_detection_in_large_objects() {
    // Around the switch from linear scan to hash set.
    for n in [15, 16, 17, 18, 40] {
        ok(&big_object(n, r#""z":0"#));
        for dup in [0, n / 2, n - 1] {
            let body = big_object(n, &format!("\"k{dup}\":0"));
            assert!(has_duplicate(body.as_bytes()), "n={n} dup={dup}");
            let body = big_object(n, &format!("\"\\u006b{dup}\":0"));
            assert!(has_duplicate(body.as_bytes()), "n={n} dup={dup}");
            // Escaped keys in the object before it is hashed, found after.
            let mut s = String::from("{\"\\u006b0x\":1,");
            for i in 0..n {
                s.push_str(&format!("\"k{i}\":{i},"));
            }
            s.push_str("\"k0x\":2}");
            assert!(has_duplicate(s.as_bytes()), "n={n}");
        }
    }
    // Nested object inside a hashed object keeps its own keys.
    let mut s = String::from("{");
    for i in 0..20 {
        let j = (i + 1) % 20;
        s.push_str(&format!("\"k{i}\":{{\"k{i}\":1,\"k{j}\":2}},"));
    }
    s.push_str("\"end\":0}");
    ok(&with_arg(&s));
}

#[test]
fn hundred_thousand_keys_is_not_quadratic() {
    let start = std::time::Instant::now();
    ok(&big_object(100_000, r#""z":0"#));
    let body = big_object(100_000, r#""k99999":0"#);
    assert!(has_duplicate(body.as_bytes()));
    // Quadratic would be ~5e9 comparisons; linear-ish is well under a second even
    // in debug builds.
    assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
}

#[test]
fn number_grammar() {
    for n in [
        "0",
        "-0",
        "1",
        "-1",
        "10",
        "1234567890",
        "0.0",
        "-0.0",
        "0.5",
        "1.25",
        "1e5",
        "1E5",
        "1e+5",
        "1e-5",
        "1E-05",
        "0e0",
        "-0e-0",
        "1.5e10",
        "-1.5E+10",
        "123456789012345678901234567890",
        "1e308",
        "-1.7976931348623157e308",
        "1.7976931348623157e308",
        "1e-400",
        "0e99999",
        "0.000001",
    ] {
        ok(&with_arg(n));
        ok(&with_arg(&format!("[{n}]")));
        let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
        assert_eq!(ok(&body).numbers, [n]);
    }
    for n in [
        "01",
        "-01",
        "00",
        "+1",
        ".5",
        "-.5",
        "1.",
        "-",
        "--1",
        "1.e5",
        "1e",
        "1e+",
        "1E-",
        "1e5.5",
        "0x10",
        "1_000",
        "Infinity",
        "-Infinity",
        "NaN",
        "1.2.3",
        "- 1",
        "1 2",
        "0.-1",
        "1ee5",
        "\u{0660}",
        // Valid grammar, but no finite double: refused (CEL could not read it).
        "1e400",
        "-1e999",
        "1.8e308",
        "1e99999999999999999999",
        "-0.1e311",
        // Rounds to the largest double, but serde_json (which gives CEL its values) says
        // out of range: refused, as CEL could not read it.
        "1.7976931348623158e308",
    ] {
        assert!(is_syntax_error(with_arg(n).as_bytes()), "{n}");
        assert!(
            is_syntax_error(with_arg(&format!("[{n}]")).as_bytes()),
            "{n}"
        );
        let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
        assert!(is_syntax_error(body.as_bytes()), "{n}");
    }
    // A 400-digit integer overflows a double; 300 digits do not.
    assert!(is_syntax_error(with_arg(&"9".repeat(400)).as_bytes()));
    ok(&with_arg(&"9".repeat(300)));
    ok(&with_arg(&format!("{}e-100", "9".repeat(390))));
    // A number at the very end of the input, and a lone top-level number.
    assert!(is_syntax_error(br#"{"a":1"#));
    ok("1");
    assert!(is_syntax_error(b"-"));
    assert!(is_syntax_error(b"01"));
}

#[test]
fn literals() {
    ok(&with_arg("[true,false,null]"));
    for l in [
        "tru",
        "True",
        "TRUE",
        "nul",
        "NULL",
        "fals",
        "truee",
        "nil",
        "undefined",
    ] {
        assert!(is_syntax_error(with_arg(l).as_bytes()), "{l}");
    }
    assert!(is_syntax_error(b"nul"));
    ok("null");
}

#[test]
fn huge_nesting_does_not_overflow() {
    assert!(is_syntax_error(&vec![b'['; 1_000_000]));
    assert!(is_syntax_error(r#"{"a":"#.repeat(1_000_000).as_bytes()));
    let mut balanced = vec![b'['; 500_000];
    balanced.extend(std::iter::repeat_n(b']', 500_000));
    assert!(is_syntax_error(&balanced));
    // Without a depth limit the iterative reader still does not recurse.
    assert!(read_with(&balanced, usize::MAX).is_ok());
}

#[test]
fn empty_body_and_bom() {
    assert!(is_syntax_error(b""));
    assert!(is_syntax_error(b" \n\t\r"));
    let mut body = vec![0xEF, 0xBB, 0xBF];
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    let e = rejected(&body);
    assert!(e.0.contains("byte order mark"));
}
