//! HTTP header rules shared by bundle validation and the filter: the one definition of a valid
//! header name and value, and of the headers an authorizer's answer may never set.

/// The pattern of [`is_header_name`], for the Kubernetes CRDs.
pub const HEADER_NAME_PATTERN: &str = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$";

/// Whether `name` is an HTTP field name: a non-empty token (RFC 9110 §5.1, §5.6.2).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` may be a header value (RFC 9110 §5.5): no control character but HTAB. CR, LF
/// and NUL would split or end a header; Envoy refuses the other controls too (with a 503).
/// Leading or trailing space or tab is allowed here (an authorizer's value is applied as given);
/// a value that must be read exactly as it is is judged by [`field_value_problem`].
pub fn is_header_value(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || !b.is_ascii_control())
}

/// Why `value` cannot be sent as a field value that every reader reads as it is (RFC 9110
/// §5.5): a control character ([`is_header_value`]), or leading or trailing space or tab, which
/// every HTTP parser strips (` admin ` would be read as `admin`). None: it can.
pub fn field_value_problem(value: &str) -> Option<&'static str> {
    if !is_header_value(value) {
        Some("holds a control character (CR, LF, NUL or another)")
    } else if value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']) {
        Some("has leading or trailing whitespace")
    } else {
        None
    }
}

/// Whether header `name` (lowercase) carries a credential: `authorization`,
/// `proxy-authorization`, `cookie`, or a name that says it holds a key, token, secret,
/// password or session (`x-api-key`, `x-auth-token`, `x-session-id`, ...). Such a value is never
/// written to a decision record in clear.
pub fn is_credential(name: &str) -> bool {
    const WORDS: [&str; 8] = [
        "auth", "token", "secret", "passw", "apikey", "api-key", "api_key", "session",
    ];
    matches!(name, "cookie" | "proxy-authorization")
        || WORDS.iter().any(|w| name.contains(w))
        || name.ends_with("-key")
        || name.ends_with("_key")
        || name.ends_with("credential")
        || name.ends_with("credentials")
}

/// Framing and hop-by-hop headers (RFC 9110 §7.6.1, plus `content-length` and `trailer`):
/// they describe one message on one connection. `name` is lowercase.
pub fn is_framing(name: &str) -> bool {
    matches!(
        name,
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// Headers an authorizer's answer never sets on the upstream request or the client's
/// response: pseudo-headers, `host`, framing and hop-by-hop headers, `proxy-*`. `name` is
/// lowercase.
pub fn is_never_applied(name: &str) -> bool {
    name.starts_with(':') || name == "host" || name.starts_with("proxy-") || is_framing(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_tokens() {
        for ok in ["x-a", "X_b", "a.b", "!#$%&'*+-.^_`|~09Az"] {
            assert!(is_header_name(ok), "{ok}");
        }
        for bad in ["", ":path", "a b", "a\r", "a:b", "é", "a\0", "a\"b", "(x)"] {
            assert!(!is_header_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_header_name_pattern_is_the_rule() {
        let re = regex_lite::Regex::new(HEADER_NAME_PATTERN).unwrap();
        for b in 0u8..=255 {
            let s = char::from(b).to_string();
            assert_eq!(re.is_match(&s), is_header_name(&s), "{b:#x}");
        }
        for s in ["", "x-my_header", "bad header", "a:b", "Content-Type"] {
            assert_eq!(re.is_match(s), is_header_name(s), "{s:?}");
        }
    }

    #[test]
    fn values_hold_no_control_but_htab() {
        assert!(is_header_value("a b\t\"c\"é"));
        assert!(is_header_value(""));
        for bad in [
            "a\r\nx-b: c",
            "a\rb",
            "a\nb",
            "a\0b",
            "a\x01",
            "\x1f",
            "a\x7f",
        ] {
            assert!(!is_header_value(bad), "{bad:?}");
        }
    }

    #[test]
    fn never_applied() {
        for name in [
            ":path",
            ":authority",
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "upgrade",
            "proxy-authorization",
            "proxy-connection",
        ] {
            assert!(is_never_applied(name), "{name}");
        }
        for name in [
            "x-user",
            "authorization",
            "content-type",
            "hostname",
            "tee",
            "x-host",
        ] {
            assert!(!is_never_applied(name), "{name}");
        }
    }
}
