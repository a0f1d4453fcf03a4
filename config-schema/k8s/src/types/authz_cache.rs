//! `AccessPolicy` only: `externalAuth.cache`, reuse of the authorizer's answers
//! (docs/semantics.md §3.9).

use schemars::JsonSchema;
use serde::Deserialize;

/// Reuse of the authorizer's answers, shared by the Envoy's workers: an answer is reused for a
/// request with the same key until its `ttl` passes or Envoy is configured anew. The key is
/// what the authorizer is sent, less `key.ignoredHeaders`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalAuthCache {
    /// How long an answer is reused: a Gateway API duration such as `30s` or `5m`, at most `1h`.
    #[schemars(required, pattern(crate::check::DURATION))]
    pub(crate) ttl: Option<String>,
    /// What the key, which is what the authorizer is sent, leaves out or reads of the token.
    pub(crate) key: Option<CacheKey>,
    /// Reuse denials too (default `false`: only OK answers). Errors are never reused.
    pub(crate) denials: Option<bool>,
    /// Slots of the cache (default 1024): an answer goes to the slot of its key's hash,
    /// replacing the one there.
    #[schemars(range(min = 1, max = 65536), extend("format" = "int32"))]
    pub(crate) max_entries: Option<i64>,
}

/// What a cache key leaves out of what the authorizer is sent, and reads of verified tokens.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CacheKey {
    /// Headers the authorizer is sent whose values its answers depend on (they are in the key).
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) headers: Option<Vec<String>>,
    /// Verified JWT claims whose values join the key with `iss` and `sub`, whatever their
    /// shape (`a.b` names a nested claim): they stand in for an ignored token.
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) claims: Option<Vec<String>>,
    /// Headers the authorizer is sent that its answers do not depend on. Every header it is
    /// sent (an HTTP authorizer: `authorization` and `http.allowedHeaders`; a gRPC one:
    /// `grpc.allowedHeaders`) must be in `headers` or here; a header the filter sets itself
    /// (`x-mcp-*`, the request line) cannot be.
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) ignored_headers: Option<Vec<String>>,
}
