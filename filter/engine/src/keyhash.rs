//! Length-prefixed fields fed to a SHA-256 key (the authorizer cache's and listing reuse's):
//! fields cannot run into each other, and an absent value differs from an empty one.

use sha2::{Digest as _, Sha256};

use crate::request::ClaimValue;

/// Feeds one length-prefixed field.
pub(crate) fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
    h.update(bytes);
}

/// Feeds an optional field (absent: one zero byte).
pub(crate) fn opt_field(h: &mut Sha256, v: Option<&str>) {
    match v {
        Some(s) => {
            h.update([1]);
            field(h, s.as_bytes());
        }
        None => h.update([0]),
    }
}

/// Feeds an optional claim value, tagged by its kind.
pub(crate) fn claim_field(h: &mut Sha256, v: Option<&ClaimValue>) {
    match v {
        None => h.update([0]),
        Some(ClaimValue::Str(s)) => {
            h.update([1]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::Other(s)) => {
            h.update([2]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::List(items)) => {
            h.update([3]);
            h.update(u64::try_from(items.len()).unwrap_or(u64::MAX).to_le_bytes());
            for i in items {
                field(h, i.as_bytes());
            }
        }
    }
}
