//! Standard Base64 (RFC 4648 §4), strictly: padded to whole quads, padding only at the end,
//! the bits the padding leaves over zero. Used for the `Mcp-Name` Base64 sentinel and for the
//! body of a PEM certificate (whose line breaks the caller removes first).

fn sextet(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    }))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `input` in padded Base64 (what [`decode`] reads back).
pub(crate) fn encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let [a, b, c] = [0, 1, 2].map(|i| chunk.get(i).copied().unwrap_or(0));
        let n = (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c);
        for k in 0..4 {
            let c = if k <= chunk.len() {
                let i = usize::try_from((n >> (18 - 6 * k)) & 63).unwrap_or(0);
                ALPHABET.get(i).map_or('=', |&b| char::from(b))
            } else {
                '='
            };
            out.push(c);
        }
    }
    out
}

/// The SEP-2243 sentinel carrying `value` in a header (`=?base64?...?=`): any text, as it is.
pub fn sentinel(value: &str) -> String {
    format!("{SENTINEL_START}{}{SENTINEL_END}", encode(value.as_bytes()))
}

/// The text a [`sentinel`] carries; `value` itself when it is no sentinel; None when the
/// sentinel holds anything but canonical, padded Base64 of UTF-8 text.
pub(crate) fn from_sentinel(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(payload) = value
        .strip_prefix(SENTINEL_START)
        .and_then(|rest| rest.strip_suffix(SENTINEL_END))
    else {
        return Some(std::borrow::Cow::Borrowed(value));
    };
    String::from_utf8(decode(payload.as_bytes())?)
        .ok()
        .map(std::borrow::Cow::Owned)
}

const SENTINEL_START: &str = "=?base64?";
const SENTINEL_END: &str = "?=";

/// The bytes `input` encodes, or None if it is not canonical padded Base64.
pub(crate) fn decode(input: &[u8]) -> Option<Vec<u8>> {
    if !input.len().is_multiple_of(4) {
        return None;
    }
    let quads = input.len() / 4;
    let mut out = Vec::with_capacity(quads * 3);
    for (q, chunk) in input.chunks_exact(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return None;
        }
        let mut n: u32 = 0;
        for &c in chunk.get(..4 - pad)? {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * pad;
        let [_, a, b, c] = n.to_be_bytes();
        let keep = 3 - pad;
        let all = [a, b, c];
        if all.get(keep..)?.iter().any(|&x| x != 0) {
            return None;
        }
        out.extend_from_slice(all.get(..keep)?);
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::decode;

    #[test]
    fn canonical_padded_base64_only() {
        assert_eq!(decode(b"aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode(b"aGVsbG8h").as_deref(), Some(&b"hello!"[..]));
        assert_eq!(decode(b"").as_deref(), Some(&b""[..]));
        for bad in [
            &b"aGVsbG8=x"[..],
            b"aGVs*G8=",
            b"aGVsbG8",
            b"aGVsbG9=",
            b"aG==bG8=",
            b"a===",
        ] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
