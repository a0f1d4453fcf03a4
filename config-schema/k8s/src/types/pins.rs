//! `ToolPin` (group `mcp-access.io`): the reviewed definitions of one XBackend's tools
//! (docs/pins.md). Written by `mcp-access pin`, reviewed, applied; the compiler puts its
//! names, digests and annotations in the bundle.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// `ToolPin.spec`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolPinSpec {
    /// The XBackend whose tools are pinned, in the ToolPin's namespace.
    #[schemars(required)]
    pub(crate) target_ref: Option<BackendRef>,
    /// A tool this ToolPin does not name: `Deny` (default) leaves it out of listings and
    /// denies its calls; `Allow` lists it and lets policies decide.
    pub(crate) unpinned: Option<mcp_access_bundle::Unpinned>,
    /// The pinned tools, each name once.
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub(crate) tools: Option<Vec<PinnedToolSpec>>,
}

/// The XBackend a ToolPin is about.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BackendRef {
    /// `gateway.networking.x-k8s.io` (Gateway API's XBackend) or
    /// `agentic.networking.x-k8s.io`.
    #[schemars(required, length(max = 253), pattern(crate::check::GROUP))]
    pub(crate) group: Option<String>,
    /// `XBackend`.
    #[schemars(required, length(min = 1, max = 63), pattern(crate::check::KIND))]
    pub(crate) kind: Option<String>,
    /// The XBackend's name.
    #[schemars(required, length(min = 1, max = 253))]
    pub(crate) name: Option<String>,
}

/// One tool as it was reviewed.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PinnedToolSpec {
    /// The tool's name.
    #[schemars(required, length(min = 1, max = 512))]
    pub(crate) name: Option<String>,
    /// `sha256:` and 64 lowercase hex digits: the SHA-256 of the tool object as the server
    /// lists it, in RFC 8785 canonical JSON. What the filter enforces.
    #[schemars(required, pattern(mcp_access_bundle::PIN_DIGEST_PATTERN))]
    pub(crate) digest: Option<String>,
    /// The annotations as reviewed: what policies read as `request.mcp.tool.annotations`
    /// (never the server's own). Omitted: the tool has none.
    pub(crate) annotations: Option<mcp_access_bundle::ToolAnnotations>,
    /// The tool object as the server listed it when it was reviewed (its description and
    /// schemas): for reviewers and `mcp-access pin --check`'s diffs; the digest is what is
    /// enforced.
    #[serde(default)]
    #[schemars(schema_with = "free_object")]
    pub(crate) definition: Option<Map<String, Value>>,
}

/// Any JSON object (kept as it is by the API server).
fn free_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
