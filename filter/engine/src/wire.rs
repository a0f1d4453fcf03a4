//! Proxy-Wasm ABI encodings, decoded without trusting the host's bytes.

use mcp_access_cel::Headers;

/// Encodes header pairs: `u32 count`, `count × (u32 key_len, u32 value_len)`, then each key and
/// value followed by a NUL byte.
pub fn encode_map<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<u8> {
    let data: usize = pairs
        .iter()
        .map(|(k, v)| k.as_ref().len() + v.as_ref().len() + 2)
        .sum();
    let mut out = Vec::with_capacity(4 + pairs.len() * 8 + data);
    out.extend_from_slice(&len32(pairs.len()).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&len32(k.as_ref().len()).to_le_bytes());
        out.extend_from_slice(&len32(v.as_ref().len()).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_ref());
        out.push(0);
        out.extend_from_slice(v.as_ref());
        out.push(0);
    }
    out
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(b)).ok()
}

/// Decodes header pairs into one buffer with spans (the host's bytes are reused: the size
/// table is cut off the front). Names are lowercased; when some bytes are not UTF-8, every
/// field is copied with them as U+FFFD. None if the encoding is malformed.
pub fn decode_map(mut bytes: Vec<u8>) -> Option<Headers> {
    if bytes.is_empty() {
        return Some(Headers::new());
    }
    let count = read_u32(&bytes, 0)?;
    let table = count.checked_mul(8)?.checked_add(4)?;
    if table > bytes.len() {
        return None;
    }
    let mut spans = Vec::with_capacity(count);
    let mut at = 0usize;
    let data_len = bytes.len() - table;
    for i in 0..count {
        let sizes = 4 + i * 8;
        let klen = read_u32(&bytes, sizes)?;
        let vlen = read_u32(&bytes, sizes.checked_add(4)?)?;
        let key_end = at.checked_add(klen)?;
        let value_at = key_end.checked_add(1)?;
        let value_end = value_at.checked_add(vlen)?;
        if value_end > data_len {
            return None;
        }
        spans.push([at, key_end, value_at, value_end]);
        at = value_end.checked_add(1)?;
    }
    bytes.drain(..table);
    match String::from_utf8(bytes) {
        Ok(buf) => Headers::from_spans(buf, spans),
        Err(e) => {
            let bytes = e.into_bytes();
            let field =
                |a: usize, b: usize| String::from_utf8_lossy(bytes.get(a..b).unwrap_or_default());
            let mut h = Headers::new();
            for [ns, ne, vs, ve] in spans {
                h.push(&field(ns, ne), &field(vs, ve));
            }
            Some(h)
        }
    }
}

/// Encodes a property path: segments joined by NUL.
pub fn encode_path(path: &[&str]) -> Vec<u8> {
    path.join("\0").into_bytes()
}

/// An integer property (`destination.port`): 8 bytes little-endian.
pub(crate) fn decode_i64(bytes: &[u8]) -> Option<i64> {
    let b: [u8; 8] = bytes.try_into().ok()?;
    Some(i64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_round_trip() {
        let pairs = vec![(":status", "200"), ("X-A", ""), ("b", "v\u{e9}")];
        let decoded = decode_map(encode_map(&pairs)).unwrap();
        assert_eq!(
            decoded.iter().collect::<Vec<_>>(),
            [(":status", "200"), ("x-a", ""), ("b", "v\u{e9}")]
        );
        assert!(decode_map(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn malformed_maps_are_none_not_panics() {
        let good = encode_map(&[("a", "b"), ("c", "d")]);
        for cut in 0..good.len() {
            let _ = decode_map(good[..cut].to_vec());
        }
        assert!(decode_map(vec![255, 255, 255, 255]).is_none());
        let mut huge = encode_map(&[("a", "b")]);
        huge[4] = 200;
        assert!(decode_map(huge).is_none());
        // A name's length that splits a character is malformed, not misread.
        let mut split = encode_map(&[("\u{e9}", "b")]);
        split[4] = 1;
        split[8] = 2;
        assert!(decode_map(split).is_none());
    }

    #[test]
    fn invalid_utf8_value_does_not_panic() {
        let map = encode_map(&[(b"x".as_slice(), b"\xff\xfe".as_slice())]);
        let h = decode_map(map).unwrap();
        assert_eq!(h.get("x"), Some("\u{fffd}\u{fffd}"));
    }

    #[test]
    fn integers() {
        assert_eq!(decode_i64(&8443i64.to_le_bytes()), Some(8443));
        assert_eq!(decode_i64(b"short"), None);
    }
}
