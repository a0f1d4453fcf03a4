//! Rate limits (docs/semantics.md §8): the ranges, rates, modes and service of what a
//! `RateLimitPolicy` compiles to (the bundle's `RateLimit`).

use serde::{Deserialize, Serialize};

/// Largest `limit` of a rate (2^31).
pub const MAX_RATE_LIMIT: u64 = 1 << 31;
/// Longest window, in seconds (366 days).
pub const MAX_WINDOW_SECONDS: u32 = 366 * 86_400;
/// Most rates per limit.
pub const MAX_RATES: usize = 8;
/// Most counter expressions per limit.
pub const MAX_COUNTERS: usize = 8;

/// At most `limit` requests per `windowSeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rate {
    /// 1..2^31.
    pub limit: u64,
    /// 1..31622400 (366 days).
    pub window_seconds: u32,
}

/// Where a limit's counts live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum RateLimitMode {
    /// This Envoy's shared data, shared by its workers.
    #[default]
    Local,
    /// The RateLimitService (`envoy.service.ratelimit.v3`), shared by every Envoy using it.
    Global,
}

/// The RateLimitService that `Global` limits ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimitService {
    /// Envoy cluster (HTTP/2) of the service.
    pub cluster: String,
    /// How long to wait for its answer, in milliseconds (1..60000; default 100).
    #[serde(default = "default_rls_timeout")]
    pub timeout_ms: u32,
    /// The descriptors' domain (default `mcp-access`).
    #[serde(default = "default_rls_domain")]
    pub domain: String,
}

/// Default [`RateLimitService::timeout_ms`].
pub const DEFAULT_RLS_TIMEOUT_MS: u32 = 100;
/// Default [`RateLimitService::domain`].
pub const DEFAULT_RLS_DOMAIN: &str = "mcp-access";

fn default_rls_timeout() -> u32 {
    DEFAULT_RLS_TIMEOUT_MS
}

fn default_rls_domain() -> String {
    DEFAULT_RLS_DOMAIN.to_string()
}
