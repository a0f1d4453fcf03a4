//! Receipts: decision records made tamper-evident (docs/audit.md). Each record carries its
//! `chain` (one per VM and plugin configuration), its `seq` in it (1, 2, 3 …) and `prev`, the
//! digest of the record before it (the first names the configuration's digest); a record's
//! digest is SHA-256 of its RFC 8785 canonical bytes ([`digest`]), so it covers every field.
//! Signed checkpoints ([`checkpoint`]) vouch for a chain's head: with the public key, a
//! verifier knows which records nobody forged.

pub mod chain;
pub mod checkpoint;
pub mod structured;

use crate::canonical_json::{canonicalize, Digest};

pub use chain::{Chain, ChainStore, Link};
pub use checkpoint::{key_id, Checkpoint, KeyError, Signer, Verifier, CHECKPOINT_PREFIX, KEY_ENV};

/// How deep a record's canonical bytes are read: deeper than any record the filter writes
/// (the request's arguments are limited by the bundle's body depth, far below this).
pub const RECORD_DEPTH: usize = 256;

/// A record's digest: SHA-256 of its RFC 8785 canonical bytes. Text that has none (not JSON,
/// or a number out of a double's range: never a record the filter wrote) is digested as it is,
/// by the writer and the verifier alike.
pub fn digest(text: &[u8]) -> Digest {
    match canonicalize(text, RECORD_DEPTH) {
        Ok(canonical) => Digest::of(&canonical),
        Err(_) => Digest::of(text),
    }
}

/// A record as its writer wrote it, before the chain seals it: the text, and whether the writer knows the text to be
/// its RFC 8785 canonical form already (then the digest is taken of the text as it is: the
/// digest [`digest`] gives, without canonicalizing it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsealed {
    pub text: String,
    pub canonical: bool,
}

impl Unsealed {
    /// The record's digest ([`digest`]).
    pub fn digest(&self) -> Digest {
        if self.canonical {
            Digest::of(self.text.as_bytes())
        } else {
            digest(self.text.as_bytes())
        }
    }
}

/// 32 bytes in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        for n in [b >> 4, b & 15] {
            out.push(char::from(
                DIGITS.get(usize::from(n)).copied().unwrap_or(b'0'),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_of_the_canonical_bytes() {
        // Whitespace, member order and number spelling do not change it (RFC 8785).
        let a = digest(br#"{"b":1e2,"a":"\u00e9"}"#);
        let b = digest("{ \"a\": \"é\", \"b\": 100 }".as_bytes());
        assert_eq!(a, b);
        assert_eq!(a, Digest::of("{\"a\":\"é\",\"b\":100}".as_bytes()));
        assert_ne!(a, digest(r#"{"a":"é","b":101}"#.as_bytes()));
        // Not JSON: the text itself.
        assert_eq!(digest(b"{"), Digest::of(b"{"));
    }

    #[test]
    fn a_canonical_record_is_digested_as_written() {
        let w = |text: &str, canonical| Unsealed {
            text: text.into(),
            canonical,
        };
        let a = w(r#"{"a":[1,"\u001f"],"b":null}"#, true);
        assert_eq!(a.digest(), digest(a.text.as_bytes()));
        assert_eq!(a.digest(), w(&a.text, false).digest());
        let spaced = w(r#"{"b":null, "a":[1,"\u001f"]}"#, false);
        assert_eq!(spaced.digest(), a.digest());
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0, 0xab, 0x1f]), "00ab1f");
    }
}
