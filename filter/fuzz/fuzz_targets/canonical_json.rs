//! RFC 8785 canonical JSON, which ToolPin digests are taken of (on bytes an upstream sends),
//! against serde_json's value written recursively (`serde_oracle::canonical`): whatever the
//! canonicalizer accepts, serde_json reads too and both give the same bytes; the output is
//! its own canonical form. A value `serde_text_is_canonical` vouches for is written by serde_json
//! as its canonical bytes (receipts take such a record's digest without canonicalizing it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::canonical_json::{canonicalize, serde_text_is_canonical};
use mcp_access_engine::serde_oracle;

fuzz_target!(|data: &[u8]| {
    let Ok(out) = canonicalize(data, 64) else {
        return;
    };
    let text = String::from_utf8_lossy(data);
    let value: serde_json::Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => panic!("canonicalized what serde_json refuses ({e}): {text:?}"),
    };
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&serde_oracle::canonical(&value)),
        "{text:?}"
    );
    assert_eq!(
        canonicalize(&out, 64).ok().as_deref(),
        Some(&out[..]),
        "{text:?}"
    );
    if serde_text_is_canonical(&value) {
        assert_eq!(value.to_string().as_bytes(), &out[..], "{text:?}");
    }
});
