//! A cache of an authorizer's answers (docs/semantics.md §3.10): what the bundle declares and
//! the rules that keep a cached answer from standing in for one the authorizer might not give.

use serde::{Deserialize, Serialize};

use crate::bundle::{Authorizer, AuthorizerProtocol};
use crate::http::is_header_name;

/// Longest time an answer is reused: one hour.
pub const MAX_CACHE_TTL_MS: u32 = 3_600_000;
/// Most slots a cache has.
pub const MAX_CACHE_ENTRIES: u32 = 65_536;
/// Slots when `maxEntries` is not given.
pub const DEFAULT_CACHE_ENTRIES: u32 = 1024;
/// Most headers or claims a key names.
pub const MAX_CACHE_KEY_ITEMS: usize = 32;

/// Reuse of an authorizer's answers, shared by the Envoy's workers. The key always holds the
/// bundle's digest, the policy and level, the listener and backend, the caller (SPIFFE ID,
/// verified JWTs' `iss` and `sub`, or none), the HTTP method, canonical host and path, the
/// MCP method and its tool/prompt name or resource URI, and, for an authorizer sent the body,
/// the body's SHA-256; `keyHeaders` and `keyClaims` add to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthzCache {
    /// How long an answer is reused, in milliseconds (1 to 3600000).
    pub ttl_ms: u32,
    /// Slots of the cache (1 to 65536, default 1024): an answer goes to the slot of its key's
    /// hash and replaces what was there.
    #[serde(default = "default_entries")]
    pub max_entries: u32,
    /// Reuse denials too (default: only OK answers). Errors and timeouts are never reused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub denials: bool,
    /// Request headers (lowercase) whose values join the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_headers: Vec<String>,
    /// Verified JWT claims (a dotted name addresses a nested claim) whose values join the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_claims: Vec<String>,
    /// Headers the authorizer is sent that its answers do not depend on (lowercase). Every
    /// header it is sent must be here or in `keyHeaders`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_headers: Vec<String>,
}

fn default_entries() -> u32 {
    DEFAULT_CACHE_ENTRIES
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What an authorizer is sent of the request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SentHeaders {
    /// Every header (a gRPC authorizer with no `allowedHeaders`).
    All,
    /// These (lowercase).
    Named(Vec<String>),
}

/// The request headers `a` is sent: an HTTP authorizer `authorization` and its
/// `allowedHeaders`; a gRPC one its `allowedHeaders`, or all of them when none are named.
/// (Host, method, path and the body's length are always in the key.)
pub fn sent_headers(a: &Authorizer) -> SentHeaders {
    let mut names: Vec<String> = a
        .allowed_headers
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    match a.protocol {
        AuthorizerProtocol::Grpc if names.is_empty() => return SentHeaders::All,
        AuthorizerProtocol::Grpc => {}
        AuthorizerProtocol::Http => names.push("authorization".to_string()),
    }
    names.retain(|n| !matches!(n.as_str(), "host" | ":authority" | ":path" | ":method"));
    names.sort();
    names.dedup();
    SentHeaders::Named(names)
}

/// The headers `a` is sent that `cache` neither keys on nor declares irrelevant (a cache with
/// any is refused: its answers could be reused for a request the authorizer would judge
/// differently). `None`: every header is sent, so no key can cover them.
pub fn uncovered_headers(a: &Authorizer, cache: &AuthzCache) -> Option<Vec<String>> {
    let SentHeaders::Named(sent) = sent_headers(a) else {
        return None;
    };
    let covered = |n: &String| {
        cache
            .key_headers
            .iter()
            .chain(&cache.ignored_headers)
            .any(|k| k.eq_ignore_ascii_case(n))
    };
    Some(sent.into_iter().filter(|n| !covered(n)).collect())
}

/// The first problem of `a`'s cache: the field (below `cache`) and what is wrong.
pub fn problem(a: &Authorizer, cache: &AuthzCache) -> Option<(String, String)> {
    if !(1..=MAX_CACHE_TTL_MS).contains(&cache.ttl_ms) {
        return Some(("ttlMs".into(), "must be between 1 and 3600000 (1h)".into()));
    }
    if !(1..=MAX_CACHE_ENTRIES).contains(&cache.max_entries) {
        return Some(("maxEntries".into(), "must be between 1 and 65536".into()));
    }
    for (field, list) in [
        ("keyHeaders", &cache.key_headers),
        ("ignoredHeaders", &cache.ignored_headers),
        ("keyClaims", &cache.key_claims),
    ] {
        if list.len() > MAX_CACHE_KEY_ITEMS {
            return Some((field.into(), format!("at most {MAX_CACHE_KEY_ITEMS} items")));
        }
        for (i, item) in list.iter().enumerate() {
            let ok = if field == "keyClaims" {
                !item.is_empty() && item.len() <= 256 && !item.split('.').any(str::is_empty)
            } else {
                is_header_name(item) && !item.bytes().any(|b| b.is_ascii_uppercase())
            };
            if !ok {
                let what = if field == "keyClaims" {
                    "must be a claim name (dotted for a nested claim), at most 256 bytes"
                } else {
                    "must be a lowercase HTTP header name"
                };
                return Some((format!("{field}[{i}]"), what.into()));
            }
        }
    }
    match uncovered_headers(a, cache) {
        None => Some((
            "keyHeaders".into(),
            "the GRPC authorizer is sent every request header (allowedHeaders is empty): name the headers it reads in allowedHeaders to cache its answers".into(),
        )),
        Some(left) if !left.is_empty() => Some((
            "keyHeaders".into(),
            format!(
                "the authorizer is sent {} but the key does not hold it: add it to keyHeaders, or to ignoredHeaders if answers do not depend on it",
                left.join(", ")
            ),
        )),
        Some(_) => None,
    }
}
