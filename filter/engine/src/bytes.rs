//! Byte searches the readers share (the listing's JSON and SSE readers).

/// The index of the first `a` or `b` in `bytes` at or after `i` (eight bytes at a time).
pub(crate) fn find_either(bytes: &[u8], mut i: usize, a: u8, b: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(i..).and_then(|s| s.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*chunk);
        let (x, y) = (w ^ (ONES * u64::from(a)), w ^ (ONES * u64::from(b)));
        // A zero byte of x or y is a hit; a borrow only marks bytes above a real hit, so
        // the lowest marked byte is exact.
        let hits = (x.wrapping_sub(ONES) & !x | y.wrapping_sub(ONES) & !y) & HIGH;
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    let tail = bytes.get(i..)?;
    tail.iter().position(|&c| c == a || c == b).map(|p| i + p)
}
