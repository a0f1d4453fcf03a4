//! A cache of an authorizer's answers (docs/semantics.md §3.10): what the bundle declares and
//! the headers the filter sets itself. The rules that keep a cached answer from standing in for
//! one the authorizer might not give are in [`crate::validate::authz_cache`].

use serde::{Deserialize, Serialize};

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
