//! Length-prefixed fields fed to a key (the authorizer cache's full key, listing reuse's
//! SHA-256): fields cannot run into each other, and an absent value differs from an empty one.

use sha2::Sha256;

use crate::request::ClaimValue;

/// What the fields are fed to: a digest, or the key's bytes themselves.
pub(crate) trait Sink {
    fn update(&mut self, bytes: &[u8]);
}

impl Sink for Sha256 {
    fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

impl Sink for Vec<u8> {
    fn update(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Feeds one length-prefixed field.
pub(crate) fn field(h: &mut impl Sink, bytes: &[u8]) {
    h.update(&u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
    h.update(bytes);
}

/// Feeds an optional field (absent: one zero byte).
pub(crate) fn opt_field(h: &mut impl Sink, v: Option<&str>) {
    match v {
        Some(s) => {
            h.update(&[1]);
            field(h, s.as_bytes());
        }
        None => h.update(&[0]),
    }
}

/// Feeds an optional claim value, tagged by its kind.
pub(crate) fn claim_field(h: &mut impl Sink, v: Option<&ClaimValue>) {
    match v {
        None => h.update(&[0]),
        Some(ClaimValue::Str(s)) => {
            h.update(&[1]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::Other(s)) => {
            h.update(&[2]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::List(items)) => {
            h.update(&[3]);
            h.update(&u64::try_from(items.len()).unwrap_or(u64::MAX).to_le_bytes());
            for i in items {
                field(h, i.as_bytes());
            }
        }
    }
}
