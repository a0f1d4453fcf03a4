//! Proxy-Wasm ABI encodings, decoded without trusting the host's bytes.

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

/// Decodes header pairs. Names are lowercased; non-UTF-8 bytes become U+FFFD. None if the
/// encoding is malformed.
pub fn decode_map(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let count = read_u32(bytes, 0)?;
    let mut sizes_at = 4usize;
    let mut data_at = count.checked_mul(8)?.checked_add(4)?;
    if data_at > bytes.len() {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let klen = read_u32(bytes, sizes_at)?;
        let vlen = read_u32(bytes, sizes_at.checked_add(4)?)?;
        sizes_at = sizes_at.checked_add(8)?;
        let key = bytes.get(data_at..data_at.checked_add(klen)?)?;
        data_at = data_at.checked_add(klen)?.checked_add(1)?;
        let value = bytes.get(data_at..data_at.checked_add(vlen)?)?;
        data_at = data_at.checked_add(vlen)?.checked_add(1)?;
        out.push((
            String::from_utf8_lossy(key).to_ascii_lowercase(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    Some(out)
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
        let decoded = decode_map(&encode_map(&pairs)).unwrap();
        assert_eq!(
            decoded,
            vec![
                (":status".to_string(), "200".to_string()),
                ("x-a".to_string(), String::new()),
                ("b".to_string(), "v\u{e9}".to_string()),
            ]
        );
    }

    #[test]
    fn malformed_maps_are_none_not_panics() {
        let good = encode_map(&[("a", "b"), ("c", "d")]);
        for cut in 0..good.len() {
            let _ = decode_map(&good[..cut]);
        }
        assert!(decode_map(&[255, 255, 255, 255]).is_none());
        let mut huge = encode_map(&[("a", "b")]);
        huge[4] = 200;
        assert!(decode_map(&huge).is_none());
    }

    #[test]
    fn invalid_utf8_value_does_not_panic() {
        let map = encode_map(&[(b"x".as_slice(), b"\xff\xfe".as_slice())]);
        assert_eq!(decode_map(&map).unwrap()[0].1, "\u{fffd}\u{fffd}");
    }

    #[test]
    fn integers() {
        assert_eq!(decode_i64(&8443i64.to_le_bytes()), Some(8443));
        assert_eq!(decode_i64(b"short"), None);
    }
}
