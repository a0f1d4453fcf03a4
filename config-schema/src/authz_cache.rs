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

/// Reuse of an authorizer's answers, shared by the Envoy's workers. The key is what the
/// authorizer is sent (every header and body byte, or the whole CheckRequest) less
/// `ignoredHeaders` and the fields that differ on every request, with the configuration's
/// generation, the authorizer and the policy; verified JWTs stand in for their tokens by
/// `iss`, `sub` and `keyClaims`.
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

/// Headers the filter sets on every HTTP callout (the MCP attributes, the caller's SPIFFE ID,
/// the policy and level); the client's own copies are never forwarded.
pub const CONTEXT_HEADERS: &[&str] = &[
    "x-mcp-method",
    "x-mcp-tool",
    "x-mcp-prompt",
    "x-mcp-resource-uri",
    "x-mcp-source-spiffe",
    "x-mcp-access-level",
    "x-mcp-access-policy",
];

/// The header that tells an authorizer its body was cut to `forwardBody.maxSize`.
pub const PARTIAL_BODY_HEADER: &str = "x-envoy-auth-partial-body";

/// Whether the filter itself writes header `name` of a callout (a pseudo-header, `host`, the
/// body's length or partial-body flag, a [`CONTEXT_HEADERS`] one): the client's copies are
/// never forwarded, and it is always in a cache key, never an `ignoredHeaders` entry.
pub fn is_filter_set(name: &str) -> bool {
    let is = |n: &&str| n.eq_ignore_ascii_case(name);
    name.starts_with(':')
        || ["host", "content-length", PARTIAL_BODY_HEADER]
            .iter()
            .any(is)
        || CONTEXT_HEADERS.iter().any(is)
}

/// The headers `a` is sent (an HTTP authorizer: `authorization` and its `allowedHeaders`; a
/// gRPC one: its `allowedHeaders`) that `cache` neither keys on nor declares irrelevant, in the
/// order they are named (a cache with any is refused: its answers could be reused for a request
/// the authorizer would judge differently). `None`: a gRPC authorizer with no
/// `allowedHeaders` is sent every header, so no key can cover them. Host, method, path and the
/// body's length are always in the key.
pub fn uncovered_headers(a: &Authorizer, cache: &AuthzCache) -> Option<Vec<String>> {
    let http = a.protocol == AuthorizerProtocol::Http;
    if !http && a.allowed_headers.is_empty() {
        return None;
    }
    let named = |n: &str, list: &[String]| list.iter().any(|k| k.eq_ignore_ascii_case(n));
    let always = http.then_some("authorization");
    let mut left: Vec<String> = Vec::new();
    for n in always
        .into_iter()
        .chain(a.allowed_headers.iter().map(String::as_str))
    {
        let in_key = named(n, &cache.key_headers) || named(n, &cache.ignored_headers);
        let request_line = [":authority", ":path", ":method", "host"]
            .iter()
            .any(|h| h.eq_ignore_ascii_case(n));
        if !in_key && !request_line && !named(n, &left) {
            left.push(n.to_ascii_lowercase());
        }
    }
    Some(left)
}

/// The first problem of `a`'s cache: the field (below `cache`) and what is wrong. Terse: the
/// compiler's own checks name the manifest's fields and the fix.
pub fn problem(a: &Authorizer, cache: &AuthzCache) -> Option<(&'static str, &'static str)> {
    let headers_ok = |l: &[String]| {
        l.len() <= MAX_CACHE_KEY_ITEMS
            && l.iter()
                .all(|h| is_header_name(h) && !h.bytes().any(|b| b.is_ascii_uppercase()))
    };
    let claims_ok = |l: &[String]| {
        l.len() <= MAX_CACHE_KEY_ITEMS
            && l.iter()
                .all(|c| c.len() <= 256 && !c.split('.').any(str::is_empty))
    };
    let uncovered = uncovered_headers(a, cache);
    let (field, message) = if !(1..=MAX_CACHE_TTL_MS).contains(&cache.ttl_ms) {
        ("ttlMs", "must be between 1 and 3600000 (1h)")
    } else if !(1..=MAX_CACHE_ENTRIES).contains(&cache.max_entries) {
        ("maxEntries", "must be between 1 and 65536")
    } else if cache.ignored_headers.iter().any(|h| is_filter_set(h)) {
        (
            "ignoredHeaders",
            "names a header the filter sets itself (request line, body length, x-mcp-*): it is always in the key",
        )
    } else if !headers_ok(&cache.key_headers) || !headers_ok(&cache.ignored_headers) {
        (
            "keyHeaders",
            "keyHeaders and ignoredHeaders: at most 32 lowercase header names each",
        )
    } else if !claims_ok(&cache.key_claims) {
        (
            "keyClaims",
            "at most 32 claim names (dotted for a nested claim), each at most 256 bytes",
        )
    } else if uncovered.is_none() {
        (
            "keyHeaders",
            "a GRPC authorizer with no allowedHeaders is sent every header: name them",
        )
    } else if uncovered.is_some_and(|l| !l.is_empty()) {
        ("keyHeaders", "every header the authorizer is sent (HTTP: authorization and allowedHeaders; GRPC: allowedHeaders) must be in keyHeaders or ignoredHeaders")
    } else {
        return None;
    };
    Some((field, message))
}
