//! Tests of `mcp.rs` (kept beside it, out of the module's own file).

use super::*;
use crate::test_util::{in_string, with_arg, Rng};

fn parse(body: &[u8]) -> Result<McpMessage, ParseFailure> {
    parse_message(body, &ParseLimits::default())
}

fn ok(body: &str) -> McpMessage {
    match parse(body.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("expected OK for {body:?}, got {e:?}"),
    }
}

fn rejected(body: &[u8]) -> ParseFailure {
    match parse(body) {
        Ok(m) => panic!(
            "expected an error for {:?}, got {m:?}",
            String::from_utf8_lossy(body)
        ),
        Err(e) => e,
    }
}

fn code(body: &[u8]) -> i32 {
    rejected(body).0.code()
}

use crate::serde_oracle::{INVALID_PARAMS, INVALID_REQUEST, PARSE};

// ----- message shapes -----

#[test]
fn tools_call_request() {
    let m = ok(
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
    );
    assert_eq!(
        m,
        McpMessage {
            kind: MessageKind::Request,
            method: Some("tools/call".into()),
            id: Some("7".into()),
            name: Some("echo".into()),
            uri: None,
            protocol_version: None,
            init_version: None,
            subscriptions: Vec::new(),
            completion_ref: None,
            params: Some(55..96),
            arguments: Some(82..95),
        }
    );
}

#[test]
fn notification_initialized() {
    let m = ok(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert_eq!(m.kind, MessageKind::Notification);
    assert_eq!(
        m.method.as_ref().map(Method::as_str),
        Some("notifications/initialized")
    );
    assert_eq!(m.id, None);
}

#[test]
fn request_without_params() {
    let m = ok(r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#);
    assert_eq!(m.kind, MessageKind::Request);
    assert_eq!(m.id.as_deref(), Some(r#""x""#));
    assert_eq!(m.name, None);
}

#[test]
fn responses() {
    let m = ok(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#);
    assert_eq!(m.kind, MessageKind::Response);
    assert_eq!(m.method, None);
    assert_eq!(m.id.as_deref(), Some("3"));
    let m = ok(r#"{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}"#);
    assert_eq!(m.kind, MessageKind::Response);
    // result may be any JSON value, including null
    assert_eq!(
        ok(r#"{"jsonrpc":"2.0","id":4,"result":null}"#).kind,
        MessageKind::Response
    );
}

#[test]
fn bad_responses() {
    for body in [
        r#"{"jsonrpc":"2.0","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":"boom"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"ping","error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0"}"#,
        r#"{}"#,
    ] {
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
    }
}

#[test]
fn jsonrpc_version() {
    for body in [
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0 ","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":null,"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":["2.0"],"id":1,"method":"ping"}"#,
        r#"{"Jsonrpc":"2.0","id":1,"method":"ping"}"#,
    ] {
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
    }
    // Same string value, written with an escape.
    ok(r#"{"jsonrpc":"2\u002e0","id":1,"method":"ping"}"#);
}

#[test]
fn id_types() {
    for body in [
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
    ] {
        let (e, id) = rejected(body.as_bytes());
        assert_eq!(e.code(), INVALID_REQUEST, "{body}");
        assert_eq!(id, None, "{body}");
    }
}

#[test]
fn id_raw_text_is_preserved() {
    for id in [
        r#""a\"b""#,
        "1e3",
        "-0.5",
        "0",
        r#""""#,
        r#""\u00e9\ud83d\ude00""#,
        "12345678901234567890123456789",
        r#""é""#,
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(ok(&body).id.as_deref(), Some(id), "{body}");
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#);
        assert_eq!(ok(&body).id.as_deref(), Some(id), "{body}");
    }
}

#[test]
fn id_returned_with_errors() {
    // InvalidParams
    let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":"q\"1","method":"tools/call"}"#);
    assert_eq!(e.code(), INVALID_PARAMS);
    assert_eq!(id.as_deref(), Some(r#""q\"1""#));
    // InvalidRequest found before the id
    let (e, id) = rejected(br#"{"method":5,"jsonrpc":"2.0","id":9}"#);
    assert_eq!(e.code(), INVALID_REQUEST);
    assert_eq!(id.as_deref(), Some("9"));
    // InvalidRequest decided at the end
    let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":2.5e1,"method":"ping","result":1}"#);
    assert_eq!(e.code(), INVALID_REQUEST);
    assert_eq!(id.as_deref(), Some("2.5e1"));
    // Parse error after the id
    let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":11,"method":"ping","#);
    assert_eq!(e.code(), PARSE);
    assert_eq!(id.as_deref(), Some("11"));
    // Parse error before the id
    let (e, id) = rejected(br#"{"jsonrpc":"2.0","method":"ping",,"id":11}"#);
    assert_eq!(e.code(), PARSE);
    assert_eq!(id, None);
    // Duplicate id: ambiguous, not echoed
    let (e, id) = rejected(br#"{"jsonrpc":"2.0","id":1,"method":"ping","id":2}"#);
    assert_eq!(e.code(), INVALID_REQUEST);
    assert_eq!(id, None);
    let (_, id) = rejected(br#"{"jsonrpc":"2.0","id":1,"method":"ping","\u0069d":1}"#);
    assert_eq!(id, None);
    // An "id" inside params is not the message id
    let (_, id) = rejected(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"id":4}}"#);
    assert_eq!(id, None);
}

#[test]
fn method_must_be_string() {
    for m in ["1", "null", "{}", "[\"tools/call\"]", "true"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{m}}}"#);
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
    }
}

#[test]
fn params_must_be_object_or_array() {
    for p in ["1", "null", "\"x\"", "true"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{p}}}"#);
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
    }
    ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,2]}"#);
    ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}"#);
}

// ----- params.name / params.uri -----

#[test]
fn tools_call_and_prompts_get_need_name() {
    for method in ["tools/call", "prompts/get"] {
        for params in [
            "",
            r#","params":{}"#,
            r#","params":["echo"]"#,
            r#","params":{"name":1}"#,
            r#","params":{"name":null}"#,
            r#","params":{"name":{"x":"echo"}}"#,
            r#","params":{"Name":"echo"}"#,
            r#","params":{"uri":"echo"}"#,
            r#","params":{"arguments":{"name":"echo"}}"#,
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#);
            assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
        }
        // name at the top level is not params.name
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"name":"echo","method":"{method}"}}"#);
        assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
    }
    let m = ok(
        r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greet","arguments":{"who":"x"}}}"#,
    );
    assert_eq!(m.name.as_deref(), Some("greet"));
    assert_eq!(m.uri, None);
    // Notifications follow the same rule.
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#),
        INVALID_PARAMS
    );
}

#[test]
fn resources_need_uri() {
    for method in [
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"uri":"file:///a%20b"}}}}"#
        );
        let m = ok(&body);
        assert_eq!(m.uri.as_deref(), Some("file:///a%20b"));
        assert_eq!(m.name, None);
        for params in [
            "",
            r#","params":{}"#,
            r#","params":{"name":"x"}"#,
            r#","params":{"uri":5}"#,
            r#","params":["file:///a"]"#,
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#);
            assert_eq!(code(body.as_bytes()), INVALID_PARAMS, "{body}");
        }
    }
    let m =
        ok(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x:\/\/\u00e9"}}"#);
    assert_eq!(m.uri.as_deref(), Some("x://é"));
}

#[test]
fn name_and_uri_only_for_their_methods() {
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"a","uri":"b"}}"#);
    assert_eq!((m.name, m.uri), (None, None));
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","uri":"b"}}"#);
    assert_eq!((m.name.as_deref(), m.uri), (Some("a"), None));
}

#[test]
fn params_before_method() {
    let m = ok(
        r#"{"params":{"arguments":{"name":"no"},"name":"echo"},"id":1,"method":"tools/call","jsonrpc":"2.0"}"#,
    );
    assert_eq!(m.method.as_ref().map(Method::as_str), Some("tools/call"));
    assert_eq!(m.name.as_deref(), Some("echo"));
    let m = ok(r#"{"params":{"uri":"u"},"method":"resources/read","jsonrpc":"2.0","id":"i"}"#);
    assert_eq!(m.uri.as_deref(), Some("u"));
}

#[test]
fn escaped_names_are_decoded() {
    let m =
        ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"ec\u0068o"}}"#);
    assert_eq!(m.name.as_deref(), Some("echo"));
    let m = ok(
        r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools\/call","p\u0061rams":{"name":"a\"b\\c\n\u00e9\ud83d\ude00"}}"#,
    );
    assert_eq!(m.method.as_ref().map(Method::as_str), Some("tools/call"));
    assert_eq!(m.name.as_deref(), Some("a\"b\\c\né😀"));
}

#[test]
fn nul_in_method_is_refused_and_kept_in_names() {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":{"name":"x"}}"#;
    assert_eq!(code(body), INVALID_REQUEST);
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ec\u0000ho"}}"#);
    assert_eq!(m.name.as_deref(), Some("ec\0ho"));
}

// ----- duplicate keys -----

#[test]
fn duplicate_keys() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"a"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"a"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","m\u0065thod":"ping"}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{},"params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1,"\u0078":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","\ud83d\ude00":1,"😀":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","":1,"":2}"#,
    ] {
        let (e, _) = rejected(body.as_bytes());
        assert_eq!(e.code(), INVALID_REQUEST, "{body}");
        assert!(e.detail().contains("duplicate"), "{body}: {e}");
    }
}

#[test]
fn duplicate_key_deep() {
    let body = with_arg(r#"{"b":{"c":{"d":{"e":1,"f":2,"e":3}}}}"#);
    let (e, id) = rejected(body.as_bytes());
    assert_eq!(e.code(), INVALID_REQUEST);
    assert!(e.detail().contains("duplicate"));
    assert_eq!(id.as_deref(), Some("1"));
    // inside arrays too
    let body = with_arg(r#"[[{"k":1}],[{"k":1,"k":2}]]"#);
    assert_eq!(code(body.as_bytes()), INVALID_REQUEST);
}

#[test]
fn same_key_in_different_objects_is_fine() {
    ok(&with_arg(
        r#"{"a":{"a":{"a":1},"b":{"a":2}},"b":[{"a":1},{"a":1}]}"#,
    ));
    ok(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","params":{"name":"y","method":"z"}}}"#,
    );
}

#[test]
fn keys_are_case_sensitive() {
    let m = ok(
        r#"{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"ping","METHOD":"x","params":{"Name":"a","NAME":"b"}}"#,
    );
    assert_eq!(m.method.as_ref().map(Method::as_str), Some("ping"));
    let m =
        ok(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"a","name":"b"}}"#);
    assert_eq!(m.name.as_deref(), Some("b"));
}

// ----- top level -----

#[test]
fn batch_and_non_objects() {
    let (e, id) = rejected(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    assert_eq!(
        e,
        ParseError::InvalidRequest("batch requests are not supported".into())
    );
    assert_eq!(id, None);
    assert_eq!(code(b"[]"), INVALID_REQUEST);
    for body in ["1", "\"x\"", "null", "true", " 0 "] {
        assert_eq!(code(body.as_bytes()), INVALID_REQUEST, "{body}");
    }
    // An invalid batch is a parse error first.
    assert_eq!(code(b"[{]"), PARSE);
}

#[test]
fn whitespace_and_trailing_data() {
    ok(" \t\r\n{\"jsonrpc\":\"2.0\" , \"method\" :\r\n\"ping\",\t\"id\":1 } \n\t\r ");
    let good = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for tail in [
        " {}", "{}", "x", "\0", ",", "]", "}", " 1", "\u{a0}", "\x0c",
    ] {
        let body = format!("{good}{tail}");
        let (e, id) = rejected(body.as_bytes());
        assert_eq!(e.code(), PARSE, "{body:?}");
        assert_eq!(id.as_deref(), Some("1"));
    }
    for head in ["\x0c", "\u{a0}", "\u{feff}", "\x0b", "\0"] {
        let body = format!("{head}{good}");
        assert_eq!(code(body.as_bytes()), PARSE, "{body:?}");
    }
}

// ----- UTF-8 -----

#[test]
fn utf8_valid_sequences() {
    for raw in [
        "é",
        "€",
        "😀",
        "\u{7f}",
        "\u{80}",
        "\u{7ff}",
        "\u{800}",
        "\u{d7ff}",
        "\u{e000}",
        "\u{fffd}",
        "\u{ffff}",
        "\u{10000}",
        "\u{10ffff}",
        "日本語テキスト with ascii between ü and ß",
    ] {
        let body = in_string(raw.as_bytes());
        assert!(parse(&body).is_ok(), "{raw:?}");
        // also as a decoded name
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{raw}"}}}}"#
        );
        assert_eq!(ok(&body).name.as_deref(), Some(raw));
    }
}

// ----- depth -----

fn nested(depth: usize, open: &str, close: &str) -> String {
    // The message object is depth 1; nest `depth - 1` more levels inside it.
    let inner = depth - 1;
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","x":{}1{}}}"#,
        open.repeat(inner),
        close.repeat(inner)
    )
}

#[test]
fn depth_limit() {
    let limits = ParseLimits::default();
    assert_eq!(limits.max_depth, 64);
    ok(&nested(64, "[", "]"));
    ok(&nested(64, r#"{"a":"#, "}"));
    let (e, id) = rejected(nested(65, "[", "]").as_bytes());
    assert_eq!(e.code(), PARSE);
    assert!(e.detail().contains("nesting"));
    assert_eq!(id.as_deref(), Some("1"));
    assert_eq!(code(nested(65, r#"{"a":"#, "}").as_bytes()), PARSE);
    assert_eq!(code(nested(65, r#"[{"a":"#, "}]").as_bytes()), PARSE);

    let small = ParseLimits { max_depth: 2 };
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1}}"#;
    assert!(parse_message(body, &small).is_ok());
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[]}}"#;
    assert_eq!(parse_message(body, &small).unwrap_err().0.code(), PARSE);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    assert_eq!(
        parse_message(body, &ParseLimits { max_depth: 0 })
            .unwrap_err()
            .0
            .code(),
        PARSE
    );
    assert!(parse_message(body, &ParseLimits { max_depth: 1 }).is_ok());
}

// ----- what the JSON reader finds, as message errors -----

#[test]
fn json_outcomes_in_messages() {
    // Number ids are kept as their raw text.
    for n in [
        "0",
        "-0",
        "1.5e10",
        "-1.5E+10",
        "123456789012345678901234567890",
        "1e-400",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
        assert_eq!(ok(&body).id.as_deref(), Some(n));
    }
    // A number no double holds is refused wherever it is (CEL could not read it).
    for n in ["01", "+1", "1.", "NaN", "1e400", "-1e999"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
        assert_eq!(code(body.as_bytes()), PARSE, "{n}");
    }
    // Valid JSON that is no message object, and invalid JSON.
    assert_eq!(code(b"1"), INVALID_REQUEST);
    assert_eq!(code(b"null"), INVALID_REQUEST);
    assert_eq!(code(b"nul"), PARSE);
    assert_eq!(code(br#"{"a":1"#), PARSE);
    assert_eq!(code(with_arg(r#""\u12""#).as_bytes()), PARSE);
    let (e, _) = rejected(&in_string(b"\xff"));
    assert!(e.detail().contains("UTF-8"), "{e}");
    // Without a depth limit the iterative reader still does not recurse.
    let mut balanced = vec![b'['; 500_000];
    balanced.extend(std::iter::repeat_n(b']', 500_000));
    let unlimited = ParseLimits {
        max_depth: usize::MAX,
    };
    assert_eq!(
        parse_message(&balanced, &unlimited).unwrap_err().0.code(),
        INVALID_REQUEST
    );
}

// ----- errors -----

#[test]
fn error_codes_and_display() {
    let e = ParseError::Parse("empty body".into());
    assert_eq!((e.code(), e.detail()), (-32700, "empty body"));
    assert_eq!(e.to_string(), "Parse error: empty body");
    let e = ParseError::InvalidRequest("x".into());
    assert_eq!((e.code(), e.message()), (-32600, "Invalid Request"));
    let e = ParseError::InvalidParams("y".into());
    assert_eq!(
        (e.code(), e.to_string()),
        (-32602, "Invalid params: y".into())
    );
    // Details never echo input text.
    let (e, _) = rejected(b"{\"<script>\":\"\xff\"}");
    assert!(!e.detail().contains("script"), "{e}");
}

// ----- differential test against serde_json -----

/// Renders a string literal, escaping characters at random.
fn gen_string(rng: &mut Rng, text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let forced = matches!(c, '"' | '\\') || (c as u32) < 0x20;
        if !forced && !rng.chance(15) {
            out.push(c);
            continue;
        }
        match (c, rng.below(3)) {
            ('"', 0) => out.push_str("\\\""),
            ('\\', 0) => out.push_str("\\\\"),
            ('/', 0) => out.push_str("\\/"),
            ('\n', 0) => out.push_str("\\n"),
            ('\t', 0) => out.push_str("\\t"),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if rng.chance(50) {
                        out.push_str(&format!("\\u{u:04x}"));
                    } else {
                        out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            }
        }
    }
    out.push('"');
}

const WORDS: &[&str] = &[
    "",
    "a",
    "name",
    "uri",
    "method",
    "id",
    "jsonrpc",
    "params",
    "result",
    "error",
    "Name",
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/initialized",
    "tools/call\0",
    "é😀\u{ffff}",
    "quote\"back\\slash/",
    "line\nbreak\ttab",
    "file:///tmp/x",
    "2.0",
    "completion/complete",
    "ref/prompt",
    "ref/resource",
    "tools/list ",
    "notifications/../tools/call",
    "tools//call",
];

const NUMBERS: &[&str] = &[
    "1e400",
    "-1e999",
    "0",
    "-0",
    "1",
    "42",
    "-7",
    "3.25",
    "1e3",
    "-2.5E-3",
    "1E+2",
    "100000000000000000000",
];

fn ws(rng: &mut Rng, out: &mut String) {
    if rng.chance(20) {
        out.push_str(rng.pick(&[" ", "\n", "\t", "\r\n", "  "]));
    }
}

fn gen_value(rng: &mut Rng, depth: usize, out: &mut String) {
    let kind = if depth > 6 {
        rng.below(4)
    } else {
        rng.below(7)
    };
    match kind {
        0 => {
            let w = rng.pick(WORDS);
            gen_string(rng, w, out);
        }
        1 => out.push_str(rng.pick(NUMBERS)),
        2 => out.push_str(rng.pick(&["true", "false", "null"])),
        3 => {
            let w = rng.pick(WORDS);
            gen_string(rng, w, out);
        }
        4 | 5 => {
            out.push('{');
            let n = rng.below(4);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                let k = rng.pick(WORDS);
                gen_string(rng, k, out);
                ws(rng, out);
                out.push(':');
                gen_value(rng, depth + 1, out);
            }
            out.push('}');
        }
        _ => {
            out.push('[');
            let n = rng.below(4);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                gen_value(rng, depth + 1, out);
                ws(rng, out);
            }
            out.push(']');
        }
    }
}

/// A message-like object: mostly the right members with plausible values.
fn gen_message(rng: &mut Rng) -> String {
    let mut members: Vec<(&str, String)> = Vec::new();
    let val = |rng: &mut Rng, f: &dyn Fn(&mut Rng, &mut String)| {
        let mut s = String::new();
        f(rng, &mut s);
        s
    };
    if rng.chance(90) {
        let v = if rng.chance(90) {
            val(rng, &|r, o| gen_string(r, "2.0", o))
        } else {
            val(rng, &|r, o| gen_value(r, 1, o))
        };
        members.push(("jsonrpc", v));
    }
    if rng.chance(75) {
        let v = match rng.below(4) {
            0 => rng.pick(NUMBERS).to_string(),
            1 => val(rng, &|r, o| gen_value(r, 1, o)),
            _ => val(rng, &|r, o| {
                let w = r.pick(WORDS);
                gen_string(r, w, o)
            }),
        };
        members.push(("id", v));
    }
    if rng.chance(80) {
        let v = if rng.chance(90) {
            val(rng, &|r, o| {
                let w = r.pick(&WORDS[11..]);
                gen_string(r, w, o)
            })
        } else {
            val(rng, &|r, o| gen_value(r, 1, o))
        };
        members.push(("method", v));
    }
    if rng.chance(70) {
        let v = if rng.chance(80) {
            val(rng, &|r, o| {
                o.push('{');
                let mut first = true;
                for key in ["name", "uri", "arguments", "Name", "name", "n\\u0061me"] {
                    if r.chance(35) {
                        if !first {
                            o.push(',');
                        }
                        first = false;
                        o.push('"');
                        o.push_str(key);
                        o.push_str("\":");
                        if r.chance(70) {
                            let w = r.pick(WORDS);
                            gen_string(r, w, o);
                        } else {
                            gen_value(r, 2, o);
                        }
                    }
                }
                if r.chance(30) {
                    if !first {
                        o.push(',');
                    }
                    first = false;
                    o.push_str("\"ref\":{");
                    let mut inner = true;
                    for key in ["type", "name", "uri"] {
                        if r.chance(70) {
                            if !inner {
                                o.push(',');
                            }
                            inner = false;
                            o.push('"');
                            o.push_str(key);
                            o.push_str("\":");
                            match r.below(4) {
                                0 => gen_value(r, 2, o),
                                1 => gen_string(r, "ref/prompt", o),
                                2 => gen_string(r, "ref/resource", o),
                                _ => {
                                    let w = r.pick(WORDS);
                                    gen_string(r, w, o);
                                }
                            }
                        }
                    }
                    o.push('}');
                }
                if r.chance(30) {
                    if !first {
                        o.push(',');
                    }
                    o.push_str("\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":");
                    if r.chance(70) {
                        gen_string(r, "2026-07-28", o);
                    } else {
                        gen_value(r, 1, o);
                    }
                    o.push('}');
                }
                o.push('}');
            })
        } else {
            val(rng, &|r, o| gen_value(r, 1, o))
        };
        members.push(("params", v));
    }
    for key in ["result", "error"] {
        if rng.chance(12) {
            let v = val(rng, &|r, o| gen_value(r, 1, o));
            members.push((key, v));
        }
    }
    if rng.chance(10) && !members.is_empty() {
        let dup = members[rng.below(members.len())].clone();
        members.push(dup);
    }
    if rng.chance(20) {
        let v = val(rng, &|r, o| gen_value(r, 1, o));
        members.push((rng.pick(&["Method", "extra", "_meta"]), v));
    }
    // Shuffle.
    for i in (1..members.len()).rev() {
        let j = rng.below(i + 1);
        members.swap(i, j);
    }
    let mut out = String::new();
    ws(rng, &mut out);
    out.push('{');
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        ws(rng, &mut out);
        gen_string(rng, k, &mut out);
        ws(rng, &mut out);
        out.push(':');
        ws(rng, &mut out);
        out.push_str(v);
    }
    out.push('}');
    ws(rng, &mut out);
    out
}

const NOISE: &[u8] = b"{}[]\":,\\u0123456789abcdefABCDEF.eE+-tfnrl \t\n\r\x00\x1f\x7f";
const HIGH: &[&[u8]] = &[
    b"\xc3\xa9",
    b"\xff",
    b"\x80",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\xef\xbb\xbf",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
];

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let len = body.len();
        let at = if len == 0 { 0 } else { rng.below(len + 1) };
        match rng.below(6) {
            0 if at < len => body[at] = rng.pick(NOISE),
            1 => body.insert(at.min(len), rng.pick(NOISE)),
            2 if at < len => {
                body.remove(at);
            }
            3 => {
                let seq = rng.pick(HIGH);
                body.splice(at..at, seq.iter().copied());
            }
            4 => body.truncate(at),
            _ if len > 0 => {
                // Duplicate a random slice somewhere.
                let a = rng.below(len);
                let b = (a + rng.below(12)).min(len);
                let piece = body[a..b].to_vec();
                let at = rng.below(len + 1);
                body.splice(at..at, piece);
            }
            _ => {}
        }
    }
}

/// The reader against serde_json ([`crate::serde_oracle`]) on generated messages, mutated
/// and not, and on random values.
#[test]
fn differential_against_serde_json() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let limits = ParseLimits { max_depth: 8 };
    // Outcomes: [ok, parse, invalid request, invalid params].
    let mut counts = [0usize; 4];
    let mut check = |body: &[u8], limits: &ParseLimits| {
        let i = match crate::serde_oracle::check(body, limits) {
            None => 0,
            Some(PARSE) => 1,
            Some(INVALID_REQUEST) => 2,
            Some(_) => 3,
        };
        counts[i] += 1;
    };
    for round in 0..20_000 {
        let mut body = gen_message(&mut rng).into_bytes();
        if round % 3 != 0 {
            mutate(&mut rng, &mut body);
        }
        check(&body, &limits);
        check(&body, &ParseLimits::default());
    }
    // Random values (non-messages) too.
    for _ in 0..5_000 {
        let mut s = String::new();
        gen_value(&mut rng, 0, &mut s);
        let mut body = s.into_bytes();
        if rng.chance(50) {
            mutate(&mut rng, &mut body);
        }
        check(&body, &limits);
    }
    println!("differential outcomes [ok, parse, invalid request, invalid params]: {counts:?}");
    // Every outcome is well represented.
    assert!(counts.iter().all(|&c| c > 500), "{counts:?}");
}

// ----- speed (run with --release --ignored --nocapture) -----

fn time_it(label: &str, body: &[u8], expect_ok: bool) {
    let limits = ParseLimits::default();
    assert_eq!(parse_message(body, &limits).is_ok(), expect_ok, "{label}");
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        std::hint::black_box(parse_message(std::hint::black_box(body), &limits).is_ok());
    }
    let per = start.elapsed() / runs;
    println!("{label}: {} bytes in {per:?}", body.len());
}

#[test]
#[ignore]
fn speed_1mib() {
    const MIB: usize = 1 << 20;
    let big_string = with_arg(&format!("\"{}\"", "lorem ipsum dolor ".repeat(MIB / 18)));
    time_it("1 MiB ASCII string argument", big_string.as_bytes(), true);

    let escaped = with_arg(&format!(
        "\"{}\"",
        "line\\n\\u00e9 \\\"q\\\" ".repeat(MIB / 20)
    ));
    time_it("1 MiB escaped string argument", escaped.as_bytes(), true);

    let unicode = with_arg(&format!("\"{}\"", "日本語テキスト😀é ".repeat(MIB / 30)));
    time_it("1 MiB non-ASCII string argument", unicode.as_bytes(), true);

    let mut numbers = String::from("[");
    let mut i = 0u64;
    while numbers.len() < MIB {
        numbers.push_str(&format!("{},-{}.5e3,", i * 7919 % 100000, i % 977));
        i += 1;
    }
    numbers.push_str("0]");
    time_it(
        "1 MiB array of numbers",
        with_arg(&numbers).as_bytes(),
        true,
    );

    let mut keys = String::from("{");
    let mut k = 0;
    while keys.len() < MIB {
        keys.push_str(&format!("\"key{k}\":{k},"));
        k += 1;
    }
    keys.push_str("\"end\":0}");
    time_it(
        &format!("1 MiB object with {k} keys"),
        with_arg(&keys).as_bytes(),
        true,
    );

    let nested_small = with_arg(&format!(
        "[{}0]",
        r#"{"a":[1,"x",{"b":null,"c":true}],"d":-2.5}, "#.repeat(MIB / 44)
    ));
    time_it(
        "1 MiB of small nested objects",
        nested_small.as_bytes(),
        true,
    );
}

#[test]
fn malformed_method_names_are_invalid_requests() {
    for m in [
        "tools/list ",
        " tools/list",
        "tools/list/",
        "/tools/list",
        "tools//list",
        "notifications/../tools/call",
        "notifications/./initialized",
        "tools/\\u0000list",
        "tools/list\\n",
        "tools/\\u00a0list",
        "tools/\\u2028list",
        "..",
        "",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        let (err, id) = rejected(body.as_bytes());
        assert_eq!(
            err.code(),
            crate::jsonrpc::INVALID_REQUEST,
            "{m:?}: {err:?}"
        );
        assert_eq!(id.as_deref(), Some("1"), "{m:?}");
    }
    for m in [
        "tools/list",
        "notifications/initialized",
        "x",
        "a.b/c..d",
        "é/ü",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        ok(&body);
    }
}

// ----- the spans of params and params.arguments -----

/// The text of `body` at `span`.
fn at(body: &str, span: &Option<std::ops::Range<usize>>) -> Option<String> {
    span.clone().map(|r| body[r].to_string())
}

#[test]
fn params_and_arguments_spans_hold_exactly_their_values() {
    // Escaped strings (a quote, a brace, a unicode escape) and nested objects inside.
    let body = r#"{"jsonrpc":"2.0","id":"a\"}","method":"tools/call","params":{"name":"e\u0063ho","arguments":{"t":"}\"{","n":{"m":[1,{"x":"\\"}]}},"_meta":{}} }"#;
    let m = ok(body);
    assert_eq!(m.name.as_deref(), Some("echo"));
    assert_eq!(
        at(body, &m.params).as_deref(),
        Some(
            r#"{"name":"e\u0063ho","arguments":{"t":"}\"{","n":{"m":[1,{"x":"\\"}]}},"_meta":{}}"#
        )
    );
    assert_eq!(
        at(body, &m.arguments).as_deref(),
        Some(r#"{"t":"}\"{","n":{"m":[1,{"x":"\\"}]}}"#)
    );
    // Only the top-level params and its own arguments count.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{"a":{"arguments":1,"params":2}},"z":{"params":3}}"#;
    let m = ok(body);
    assert_eq!(
        at(body, &m.params).as_deref(),
        Some(r#"{"a":{"arguments":1,"params":2}}"#)
    );
    assert_eq!(m.arguments, None);
    // A scalar argument.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{"arguments":  "s" }}"#;
    assert_eq!(at(body, &ok(body).arguments).as_deref(), Some(r#""s""#));
}

#[test]
fn params_absent_or_an_array_has_no_arguments_span() {
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!((m.params, m.arguments), (None, None));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":[{"arguments":1}]}"#;
    let m = ok(body);
    assert_eq!(at(body, &m.params).as_deref(), Some(r#"[{"arguments":1}]"#));
    assert_eq!(m.arguments, None);
    // A response keeps none.
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"result":{},"params":{"arguments":1}}"#);
    assert_eq!((m.params, m.arguments), (None, None));
    // Params that are not an object or array are refused, as before.
    let e = parse_message(
        br#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":"s"}"#,
        &ParseLimits::default(),
    );
    assert!(
        matches!(e, Err((ParseError::InvalidRequest(_), _))),
        "{e:?}"
    );
}

#[test]
fn a_duplicate_params_or_arguments_key_is_refused() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{},"params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{"arguments":1,"arguments":2}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{"arguments":1,"argu\u006dents":2}}"#,
    ] {
        let e = parse_message(body.as_bytes(), &ParseLimits::default());
        assert!(
            matches!(e, Err((ParseError::InvalidRequest(_), _))),
            "{body}: {e:?}"
        );
    }
}

#[test]
fn params_values_are_read_from_their_span_only() {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":[1,"\u00e9"]}}}"#;
    let m = ok(body);
    let spans = || (m.params.clone(), m.arguments.clone());
    let value = |cel, records| params_value(body.as_bytes(), spans(), cel, records);
    let params: serde_json::Value = serde_json::json!({"name": "a", "arguments": {"k": [1, "é"]}});
    assert_eq!(value(true, false), Ok(Some(params.clone())));
    assert_eq!(value(true, true), Ok(Some(params)));
    // Records alone keep only the arguments.
    assert_eq!(
        value(false, true),
        Ok(Some(serde_json::json!({"arguments": {"k": [1, "é"]}})))
    );
    assert_eq!(value(false, false), Ok(None));
    let m = ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(
        params_value(b"", (m.params, m.arguments), true, true),
        Ok(None)
    );
}
