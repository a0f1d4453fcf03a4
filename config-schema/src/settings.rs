//! The bundle's filter-wide settings: the denial response, limits, listings, how the filter
//! reads what Envoy tells it, and what its decision records carry.

use serde::{Deserialize, Serialize};

use mcp_access_cel::CelLimits;

/// Response for requests the filter denies itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DenyResponse {
    /// HTTP status of a policy denial: a 4xx or 5xx, or 200 for clients that take every
    /// non-2xx answer for a transport failure.
    #[serde(default = "default_deny_status")]
    pub http_status: u16,
    /// JSON-RPC error code of a denial (default -32010, a code no MCP SDK uses itself).
    #[serde(default = "default_deny_code")]
    pub json_rpc_code: i32,
    /// JSON-RPC error message of a policy denial.
    #[serde(default = "default_deny_message")]
    pub message: String,
    /// Put level, policy, rule and reason in `error.data`, and an authorizer's status and
    /// (capped) body.
    #[serde(default)]
    pub expose_details: bool,
}

impl Default for DenyResponse {
    fn default() -> Self {
        DenyResponse {
            http_status: default_deny_status(),
            json_rpc_code: default_deny_code(),
            message: default_deny_message(),
            expose_details: false,
        }
    }
}

/// Request limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Largest request body buffered; larger is answered 413.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: u32,
    /// Deepest JSON nesting accepted.
    #[serde(default = "default_max_depth")]
    pub max_json_depth: u32,
    /// Bounds on CEL expressions (`when`, `authorization.cel`).
    #[serde(default)]
    pub cel: CelLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_max_body(),
            max_json_depth: default_max_depth(),
            cel: CelLimits::default(),
        }
    }
}

/// Per-caller filtering of `tools/list`, `prompts/list`, `resources/list` and
/// `resources/templates/list` responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Listings {
    /// Keep only the items the caller could use (default true); false passes listings as
    /// the server sent them.
    #[serde(default = "default_true")]
    pub filter: bool,
    /// Largest response the filter reads whole (a listing's JSON body, the JSON answer to a
    /// call in a session, or one SSE event of any stream the filter reads); a larger one is
    /// replaced by a JSON-RPC error, never passed unfiltered.
    #[serde(default = "default_max_listing")]
    pub max_bytes: u32,
}

impl Default for Listings {
    fn default() -> Self {
        Listings {
            filter: true,
            max_bytes: default_max_listing(),
        }
    }
}

/// Integration with the hosting Envoy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EnvoySettings {
    /// Hold request headers until the decision (needs `allow_on_headers_stop_iteration: true`
    /// on the Wasm filter). When false, headers reach the upstream before the body is decided;
    /// a denial then resets that stream, and authorizer headers cannot be added.
    #[serde(default = "default_true")]
    pub hold_headers: bool,
    /// Requests Envoy routes to no known backend: `Deny` (default) or `GatewayOnly` (only
    /// Gateway-level policies apply).
    #[serde(default)]
    pub unknown_backend: UnknownBackend,
    /// A request path holding an encoded `/` or `\` (`%2F`, `%5C`): `Reject` it with 400
    /// (default) or `Decode` it to `/` before rules match. The generated Envoy configurations
    /// set `path_with_escaped_slashes_action` to match (`REJECT_REQUEST` or
    /// `UNESCAPE_AND_FORWARD`).
    #[serde(default)]
    pub escaped_slashes: EscapedSlashes,
    /// Request headers some route matches on (names, lowercase). Envoy matches the route again
    /// after a Wasm filter edits request headers, so the filter edits none of these: an
    /// authorizer's answer that would set or remove one is refused, identity headers may not
    /// be named so, and `Accept-Encoding` is not asked for identity. `mcp-access compile`
    /// fills it from the HTTPRoutes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub route_match_headers: Vec<String>,
    /// The one Envoy listener this copy of the bundle is attached to, written by `mcp-access
    /// envoy` into each filter chain's copy: the filter then neither asks Envoy for the port
    /// of each request nor, on a listener without TLS, for a peer certificate. Absent (a copy
    /// shared by listeners of different ports: ECDS, Envoy Gateway, Istio): both are read per
    /// request. A wrong value misjudges requests, as a wrong Envoy configuration would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<ServedListener>,
}

/// The Envoy listener a copy of the bundle serves ([`EnvoySettings::listener`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServedListener {
    /// The port its requests arrive on: a port of `gateways[].listeners[]`.
    pub port: u16,
    /// Whether Envoy terminates TLS on it (false: no request has a peer certificate).
    pub tls: bool,
}

impl Default for EnvoySettings {
    fn default() -> Self {
        EnvoySettings {
            hold_headers: true,
            unknown_backend: UnknownBackend::default(),
            escaped_slashes: EscapedSlashes::default(),
            route_match_headers: Vec::new(),
            listener: None,
        }
    }
}

/// Treatment of `%2F` / `%5C` in a request path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum EscapedSlashes {
    /// Answer 400 (Envoy: `REJECT_REQUEST`).
    #[default]
    Reject,
    /// Read them as `/` (Envoy: `UNESCAPE_AND_FORWARD`; the upstream then sees `/`).
    Decode,
}

/// Treatment of requests routed to no known backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum UnknownBackend {
    /// Deny them.
    #[default]
    Deny,
    /// Decide them on Gateway-level policies alone.
    GatewayOnly,
}

pub(crate) fn default_deny_status() -> u16 {
    403
}
/// No MCP SDK uses it for its own errors (`-32001` is the SDKs' request timeout, `-32000`
/// connection closed, `-32002` a retired resource-not-found code; docs/semantics.md §5.1).
pub const DEFAULT_DENY_CODE: i32 = -32010;

pub(crate) fn default_deny_code() -> i32 {
    DEFAULT_DENY_CODE
}
pub(crate) fn default_deny_message() -> String {
    "Access denied".to_string()
}
pub(crate) fn default_max_body() -> u32 {
    1024 * 1024
}
pub(crate) fn default_max_listing() -> u32 {
    4 * 1024 * 1024
}
pub(crate) fn default_max_depth() -> u32 {
    64
}
pub(crate) fn default_true() -> bool {
    true
}

/// What each decision record carries besides the decision: the request's canonical
/// attributes, so that `mcp-access replay` can decide it again (docs/semantics.md §3.9).
/// Never credentials: no `Authorization`, `Cookie` or `Proxy-Authorization` header, no token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DecisionRecords {
    /// Also record a tool call's `params.arguments` (default false: arguments may hold
    /// anything the agent sends).
    #[serde(default)]
    pub arguments: bool,
    /// Also set the decision's trace tags (filter state `mcp_access.security_rule.ruleset.name`,
    /// `.security_rule.name`, `.event.action`, `.event.outcome`) for Envoy's tracer to read
    /// (default false: four more filter-state objects per request, ~21,000 instructions in
    /// Envoy; `mcp-access envoy --tracing` turns it on).
    #[serde(default)]
    pub trace_tags: bool,
    /// Also set each record as a `google.protobuf.Struct` (filter state `mcp_access.record`)
    /// for access loggers to read field by field, e.g.
    /// `%CEL(filter_state['wasm.mcp_access.record'].policy)%` (default false: one more
    /// filter-state object per request; `mcp-access envoy --otlp` turns it on; docs/audit.md).
    #[serde(default)]
    pub structured: bool,
    /// Receipts: each record chained to the one before, the chain checkpointed (docs/audit.md).
    #[serde(default)]
    pub receipts: Receipts,
}

/// Receipts (docs/audit.md): every record carries `chain`, `seq` and `prev`; every
/// `checkpointRecords` records and `checkpointSeconds` seconds (and when the configuration
/// changes or the VM stops) the filter logs a checkpoint, signed when the VM has a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Receipts {
    /// Chain the records (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A checkpoint after this many records (default 1000).
    #[serde(default = "default_checkpoint_records")]
    pub checkpoint_records: u32,
    /// A checkpoint this many seconds after the last, when records came since (default 10;
    /// 0: none by time).
    #[serde(default = "default_checkpoint_seconds")]
    pub checkpoint_seconds: u32,
    /// A VM without a signing key refuses the configuration (default false: its checkpoints
    /// go unsigned, its log and its `mcp_access.receipts.signed` gauge say so).
    #[serde(default)]
    pub require_key: bool,
}

impl Default for Receipts {
    fn default() -> Receipts {
        Receipts {
            enabled: true,
            checkpoint_records: default_checkpoint_records(),
            checkpoint_seconds: default_checkpoint_seconds(),
            require_key: false,
        }
    }
}

fn default_checkpoint_records() -> u32 {
    1000
}

fn default_checkpoint_seconds() -> u32 {
    10
}

impl DecisionRecords {
    pub(crate) fn is_default(&self) -> bool {
        *self == DecisionRecords::default()
    }
}
