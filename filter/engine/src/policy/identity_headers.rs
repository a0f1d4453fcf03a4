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
    crate::order::sort(&mut names);
    names.dedup();
    let mut claims: Vec<String> = Vec::new();
    for c in all.filter_map(|h| h.claim.as_ref()) {
        if !claims.contains(c) {
            claims.push(c.clone());
        }
    }
    (names, claims)
}

/// An identity header of the request's backend left out, and why (the decision record's
/// `identity_headers_omitted`; never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Omitted {
    pub name: String,
    pub reason: &'static str,
}

/// The identity header edits of an allowed request: what the upstream gets, and what it does
/// not get and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityEdits {
    pub edits: Vec<HeaderEdit>,
    pub omitted: Vec<Omitted>,
}

impl Engine {
    /// The removals of every identity header of the bundle from a header map (request
    /// headers or trailers) that holds `present`: each name of the bundle's, and each present
    /// name that reads as one when `_` is read as `-`. Empty when the bundle has none.
    pub fn identity_removals<'a>(
        &self,
        present: impl IntoIterator<Item = &'a str>,
    ) -> Vec<HeaderEdit> {
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
        for h in present {
            let spelled_otherwise = names.iter().any(|n| n != h && same_when_folded(h, n));
            if spelled_otherwise && !out.iter().any(|e| e.name == h) {
                out.push(remove(h));
            }
        }
        out
    }

    /// The upstream header edits of an allowed request, in order: every identity header of
    /// the bundle removed ([`Engine::identity_removals`]), then the identity headers of the
    /// request's backend set from the caller; those it cannot carry are left out, with why.
    pub fn identity_edits(&self, req: &Request) -> IdentityEdits {
        let mut edits = self.identity_removals(req.headers.iter().map(|(n, _)| n));
        let mut omitted = Vec::new();
        let backend = req.target.backend.and_then(|b| self.backends.get(b));
        for h in backend.map_or(&[][..], |b| b.identity_headers.as_slice()) {
            match value_of(h, &req.caller) {
                Ok(v) => edits.push(HeaderEdit::set(h.name.clone(), v)),
                Err(reason) => omitted.push(Omitted {
                    name: h.name.clone(),
                    reason,
                }),
            }
        }
        IdentityEdits { edits, omitted }
    }
}

/// Whether two header names (lowercase) are the same when `_` is read as `-`.
fn same_when_folded(a: &str, b: &str) -> bool {
    let fold = |c: u8| if c == b'_' { b'-' } else { c };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// The value `h` carries for `caller`, or why it carries none: the caller has no such
/// identity (a JWT field needs exactly one verified JWT), or its value is no field value that
/// reads as it is (docs/semantics.md §5.7).
fn value_of(h: &IdentityHeader, caller: &Caller) -> Result<String, &'static str> {
    let jwt = match caller.jwts.as_slice() {
        [one] => Ok(one),
        [] => Err("no verified JWT"),
        _ => Err("more than one verified JWT"),
    };
    let v = match h.from {
        IdentityField::Spiffe => caller.spiffe.clone().ok_or("no SPIFFE ID"),
        IdentityField::JwtSubject => jwt?.subject.clone().ok_or("the JWT has no sub"),
        IdentityField::JwtIssuer => jwt.map(|j| j.issuer.clone()),
        IdentityField::JwtClaim => jwt?
            .texts
            .iter()
            .find(|(n, _)| Some(n) == h.claim.as_ref())
            .map(|(_, v)| v.clone())
            .ok_or("the JWT has no such claim"),
    }?;
    if v.len() > MAX_VALUE_BYTES {
        return Err("longer than the largest identity header value");
    }
    match mcp_access_bundle::http::field_value_problem(&v) {
        Some(problem) => Err(problem),
        None => Ok(v),
    }
}
