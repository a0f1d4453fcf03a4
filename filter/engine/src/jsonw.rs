//! JSON text written without a serializer, for what the filter writes on every request (the
//! decision's JSON, JSON-RPC errors): string literals escaped as serde_json escapes them, and
//! integers.

/// A JSON string literal, escaped as serde_json escapes: `"`, `\\` and control characters.
pub(crate) fn push_str(out: &mut String, s: &str) {
    // Most values need no escaping: one pass to check, one copy.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(s.get(start..i).unwrap_or_default());
        if esc.is_empty() {
            out.push_str(&format!("\\u{b:04x}"));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// [`push_str`], or `null`.
pub(crate) fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// An integer in decimal, without a temporary string.
pub(crate) fn push_int(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    let mut n = n.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    for &d in digits.get(at..).unwrap_or_default() {
        out.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_decimal() {
        for n in [
            0,
            7,
            10,
            403,
            65_535,
            1_000_000_000,
            -1,
            -32_700,
            i64::MAX,
            i64::MIN,
        ] {
            let mut out = String::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in [
            "",
            "plain",
            "q\"b\\",
            "\u{1}\n\u{e9}\t\u{8}\u{c}\u{1f}\u{7f}\r",
            "</script>\u{2028}",
        ] {
            let mut out = String::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::Value::from(s).to_string());
        }
    }
}
