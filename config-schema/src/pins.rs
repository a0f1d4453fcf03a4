//! Pinned tools in the bundle: a backend's reviewed tool definitions (a ToolPin object,
//! docs/pins.md) and what the filter does with tools that are not pinned.

use serde::{Deserialize, Serialize};

/// The reviewed definitions of one backend's tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolPins {
    /// `namespace/name` of the ToolPin these come from (logs and `explain` name it).
    pub source: String,
    /// A tool that is not pinned: `Deny` (default) leaves it out of listings and refuses its
    /// calls; `Allow` lists it and lets policies decide its calls.
    #[serde(default)]
    pub unpinned: Unpinned,
    /// The pinned tools, each name once.
    #[serde(default)]
    pub tools: Vec<PinnedTool>,
}

/// What happens to a tool the ToolPin does not name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Unpinned {
    /// Not listed; a call is denied (`tool_not_pinned`).
    #[default]
    Deny,
    /// Listed and called as policies allow (its annotations are none).
    Allow,
}

/// One tool as it was reviewed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PinnedTool {
    /// The tool's `name`.
    pub name: String,
    /// `sha256:` and 64 lowercase hex digits: the SHA-256 of the tool object, as the server
    /// lists it, in RFC 8785 canonical JSON.
    pub digest: String,
    /// The annotations as reviewed: what CEL reads as `request.mcp.tool.annotations` (never
    /// the server's own). None: the tool has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

/// MCP's tool annotations (the `ToolAnnotations` of the MCP schema), as a reviewer states them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// Whether `digest` is written as ToolPins write digests: `sha256:` and 64 lowercase hex
/// digits.
pub fn is_pin_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The pattern of [`is_pin_digest`], for schemas.
pub const PIN_DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";
