//! Identity headers: request headers that tell an MCP server who the caller is, set by the
//! filter on allowed requests after it removed every copy the client sent
//! (docs/semantics.md §5.7). One definition of the names they may have.

use serde::{Deserialize, Serialize};

use crate::http::{is_header_name, is_never_applied};

/// One header an upstream receives with the caller's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentityHeader {
    /// Header name, lowercase ([`identity_header_name_problem`]).
    pub name: String,
    /// What it carries.
    pub from: IdentityField,
    /// The claim (`from: JWTClaim`; a dotted name addresses a nested claim): a string as it
    /// is, any other value as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// What an identity header carries. The header is absent when the caller has no such
/// identity (no SPIFFE ID, no single verified JWT, no such claim, or a value that cannot be a
/// header value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum IdentityField {
    /// The caller's SPIFFE ID (docs/semantics.md §2.1).
    #[serde(rename = "SPIFFE")]
    Spiffe,
    /// `sub` of the caller's verified JWT.
    #[serde(rename = "JWTSubject")]
    JwtSubject,
    /// `iss` of the caller's verified JWT.
    #[serde(rename = "JWTIssuer")]
    JwtIssuer,
    /// A claim of the caller's verified JWT (`claim` names it).
    #[serde(rename = "JWTClaim")]
    JwtClaim,
}

/// Longest identity header value set; a longer one is left out.
pub const MAX_VALUE_BYTES: usize = 4096;

/// The syntax of an identity header name: a lowercase HTTP field name without `_` (a server
/// may read `_` as `-`, and the Envoy configurations the project renders refuse client headers
/// holding it). [`identity_header_name_problem`] also refuses [`RESERVED_NAMES`] and
/// [`RESERVED_PREFIXES`].
pub const IDENTITY_HEADER_NAME_PATTERN: &str = r"^[a-z0-9!#$%&'*+.^`|~-]+$";

/// Headers with another meaning to Envoy, the filter or the MCP transport: the host,
/// framing and hop-by-hop headers, credentials, the MCP stream's `last-event-id`, Envoy's
/// request id, the encoding the filter asks listings in.
pub const RESERVED_NAMES: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "authorization",
    "cookie",
    "accept-encoding",
    "last-event-id",
    "x-request-id",
];

/// Prefixes of headers with another meaning: `proxy-*`, the body's `content-*`, the MCP
/// headers, Envoy's own.
pub const RESERVED_PREFIXES: &[&str] = &["proxy-", "content-", "mcp-", "x-envoy-", "x-forwarded-"];

/// The CRD's CEL rule for [`RESERVED_NAMES`] and [`RESERVED_PREFIXES`], over `self.name`.
pub fn reserved_rule() -> String {
    let quoted = |l: &[&str]| {
        l.iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "!(self.name in [{}]) && ![{}].exists(p, self.name.startsWith(p))",
        quoted(RESERVED_NAMES),
        quoted(RESERVED_PREFIXES)
    )
}

/// Why `name` cannot be an identity header (None: it can): it must be an HTTP field name
/// ([`is_header_name`]) of [`IDENTITY_HEADER_NAME_PATTERN`], and neither one of
/// [`RESERVED_NAMES`] nor start with one of [`RESERVED_PREFIXES`] (nor be any header an
/// authorizer may not set, [`is_never_applied`]).
pub fn identity_header_name_problem(name: &str) -> Option<&'static str> {
    if !is_header_name(name) || name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("must be a lowercase HTTP header name");
    }
    if name.contains('_') {
        return Some("must not hold '_' (a server may read it as '-', and Envoy refuses such client headers)");
    }
    let reserved = is_never_applied(name)
        || RESERVED_NAMES.contains(&name)
        || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p));
    reserved.then_some(
        "names a header with another meaning (host, framing, hop-by-hop, proxy-*, authorization, cookie, content-*, accept-encoding, mcp-*, last-event-id, x-envoy-*, x-forwarded-*, x-request-id)",
    )
}

/// What is wrong with one identity header: (field relative to it, message).
pub fn problems(h: &IdentityHeader) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(p) = identity_header_name_problem(&h.name) {
        out.push(("name", format!("\"{}\" {p}", h.name)));
    }
    match (h.from, &h.claim) {
        (IdentityField::JwtClaim, None) => {
            out.push(("claim", "is required with from JWTClaim".into()))
        }
        (IdentityField::JwtClaim, Some(c)) => {
            let ok = !c.is_empty() && c.len() <= 256 && c.split('.').all(|p| !p.is_empty());
            if !ok {
                out.push(("claim", "must be a claim name (dotted for a nested claim), 1 to 256 bytes, no empty part".into()));
            }
        }
        (_, Some(_)) => out.push(("claim", "is only allowed with from JWTClaim".into())),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_another_meaning_are_refused() {
        for ok in [
            "x-caller-spiffe",
            "x-caller-sub",
            "x-team",
            "caller",
            "x-user-id",
        ] {
            assert_eq!(identity_header_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "X-Caller",
            "x_caller",
            "x caller",
            ":path",
            "host",
            "content-length",
            "content-type",
            "transfer-encoding",
            "connection",
            "te",
            "upgrade",
            "proxy-authorization",
            "authorization",
            "cookie",
            "accept-encoding",
            "mcp-session-id",
            "mcp-method",
            "last-event-id",
            "x-envoy-original-path",
            "x-forwarded-client-cert",
            "x-forwarded-for",
            "x-request-id",
        ] {
            assert!(identity_header_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn the_pattern_and_the_lists_are_the_rule() {
        let re = regex_lite::Regex::new(IDENTITY_HEADER_NAME_PATTERN).unwrap();
        for b in 0u8..=255 {
            let s = format!("x{}", char::from(b));
            let syntax_ok = is_header_name(&s)
                && !s.contains('_')
                && !s.bytes().any(|c| c.is_ascii_uppercase());
            assert_eq!(re.is_match(&s), syntax_ok, "{b:#x}");
        }
        // What an authorizer may never set is reserved by the lists too (the CRD's rule).
        for name in [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "upgrade",
            "proxy-authorization",
        ] {
            assert!(is_never_applied(name), "{name}");
            let listed = RESERVED_NAMES.contains(&name)
                || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p));
            assert!(listed, "{name}");
        }
        let rule = reserved_rule();
        assert!(
            rule.starts_with("!(self.name in ['host', 'connection',"),
            "{rule}"
        );
        assert!(
            rule.ends_with("'x-forwarded-'].exists(p, self.name.startsWith(p))"),
            "{rule}"
        );
    }

    #[test]
    fn a_claim_goes_with_jwt_claim_only() {
        let h = |from, claim: Option<&str>| IdentityHeader {
            name: "x-a".into(),
            from,
            claim: claim.map(str::to_string),
        };
        assert_eq!(problems(&h(IdentityField::JwtClaim, Some("team"))), []);
        assert_eq!(problems(&h(IdentityField::JwtClaim, Some("org.team"))), []);
        assert_eq!(problems(&h(IdentityField::Spiffe, None)), []);
        for bad in [
            h(IdentityField::JwtClaim, None),
            h(IdentityField::JwtClaim, Some("a..b")),
            h(IdentityField::JwtClaim, Some("")),
            h(IdentityField::JwtSubject, Some("sub")),
        ] {
            let got = problems(&bad);
            assert!(matches!(got.as_slice(), [("claim", _)]), "{bad:?}: {got:?}");
        }
    }
}
