//! `AccessPolicy` only: `externalAuth.cache`, reuse of the authorizer's answers
//! (docs/semantics.md §3.9).

use schemars::JsonSchema;
use serde::Deserialize;

/// Reuse of the authorizer's answers, shared by the Envoy's workers: an answer is reused for a
/// request with the same key until its `ttl` passes or the policy bundle changes.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalAuthCache {
    /// How long an answer is reused: a Gateway API duration such as `30s` or `5m`, at most `1h`.
    #[schemars(required, pattern(crate::check::DURATION))]
    pub(crate) ttl: Option<String>,
    /// What the key holds beyond what it always holds (the caller, the MCP method and name,
    /// the listener, the backend, the policy).
    pub(crate) key: Option<CacheKey>,
    /// Reuse denials too (default `false`: only OK answers). Errors are never reused.
    pub(crate) denials: Option<bool>,
    /// Slots of the cache (default 1024): an answer goes to the slot of its key's hash,
    /// replacing the one there.
    #[schemars(range(min = 1, max = 65536), extend("format" = "int32"))]
    pub(crate) max_entries: Option<i64>,
}

/// The chosen attributes of a cache key.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CacheKey {
    /// Request headers whose values join the key.
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) headers: Option<Vec<String>>,
    /// Verified JWT claims whose values join the key (`a.b` names a nested claim).
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) claims: Option<Vec<String>>,
    /// Headers the authorizer is sent that its answers do not depend on. Every header it is
    /// sent (an HTTP authorizer: `authorization` and `http.allowedHeaders`; a gRPC one:
    /// `grpc.allowedHeaders`) must be in `headers` or here.
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub(crate) ignored_headers: Option<Vec<String>>,
}
