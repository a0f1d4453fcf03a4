//! Identity headers (docs/semantics.md §5.7): what an allowed request carries to its backend
//! about the caller, after every copy the client sent is removed.

use mcp_access_bundle::identity_headers::MAX_VALUE_BYTES;
use mcp_access_bundle::{IdentityField, IdentityHeader, ValidBundle};

use super::{Engine, HeaderEdit, HeaderOp};
use crate::request::{Caller, Request};

/// The names of every identity header of the bundle, sorted, and the claims they carry.
pub(crate) fn names_and_claims(b: &ValidBundle) -> (Vec<String>, Vec<String>) {
    let all = b.backends.iter().flat_map(|be| be.identity_headers.iter());
    let mut names: Vec<String> = all.clone().map(|h| h.name.clone()).collect();
    names.sort();
    names.dedup();
    let mut claims: Vec<String> = Vec::new();
    for c in all.filter_map(|h| h.claim.as_ref()) {
        if !claims.contains(c) {
            claims.push(c.clone());
        }
    }
    (names, claims)
}

impl Engine {
    /// The upstream header edits of an allowed request, in order: every identity header of
    /// the bundle removed (and each request header that reads as one when `_` is read as
    /// `-`), then the identity headers of the request's backend set from the caller. Empty
    /// when the bundle has none.
    pub fn identity_edits(&self, req: &Request) -> Vec<HeaderEdit> {
        let names = &self.identity_header_names;
        if names.is_empty() {
            return Vec::new();
        }
        let remove = |name: &str| HeaderEdit {
            op: HeaderOp::Remove,
            name: name.to_string(),
            value: String::new(),
        };
        let mut out: Vec<HeaderEdit> = names.iter().map(|n| remove(n)).collect();
        for (h, _) in &req.headers {
            let spelled_otherwise = names.iter().any(|n| n != h && same_when_folded(h, n));
            if spelled_otherwise && !out.iter().any(|e| e.name == *h) {
                out.push(remove(h));
            }
        }
        let backend = req.target.backend.and_then(|b| self.backends.get(b));
        for h in backend.map_or(&[][..], |b| b.identity_headers.as_slice()) {
            if let Some(v) = value_of(h, &req.caller) {
                out.push(HeaderEdit::set(h.name.clone(), v));
            }
        }
        out
    }
}

/// Whether two header names (lowercase) are the same when `_` is read as `-`.
fn same_when_folded(a: &str, b: &str) -> bool {
    let fold = |c: u8| if c == b'_' { b'-' } else { c };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// The value `h` carries for `caller`; None when the caller has no such identity (a JWT
/// field needs exactly one verified JWT) or it cannot be a header value.
fn value_of(h: &IdentityHeader, caller: &Caller) -> Option<String> {
    let jwt = match caller.jwts.as_slice() {
        [one] => Some(one),
        _ => None,
    };
    let v = match h.from {
        IdentityField::Spiffe => caller.spiffe.clone(),
        IdentityField::JwtSubject => jwt?.subject.clone(),
        IdentityField::JwtIssuer => jwt.map(|j| j.issuer.clone()),
        IdentityField::JwtClaim => jwt?
            .texts
            .iter()
            .find(|(n, _)| Some(n) == h.claim.as_ref())
            .map(|(_, v)| v.clone()),
    }?;
    (v.len() <= MAX_VALUE_BYTES && mcp_access_bundle::http::is_header_value(&v)).then_some(v)
}
