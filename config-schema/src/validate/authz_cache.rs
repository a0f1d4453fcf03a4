//! An authorizer's cache (docs/semantics.md §3.10): the rules that keep a cached answer from
//! standing in for one the authorizer might not give.

use crate::authz_cache::{
    is_filter_set, AuthzCache, MAX_CACHE_ENTRIES, MAX_CACHE_KEY_ITEMS, MAX_CACHE_TTL_MS,
};
use crate::bundle::{Authorizer, AuthorizerProtocol};
use crate::http::is_header_name;

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
