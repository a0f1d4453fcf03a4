//! A loaded `ToolPin` as `mcp-access pin --check` reads it.

use serde_json::{Map, Value};

use super::Item;
use crate::types::ToolPinSpec;

/// A ToolPin as `mcp-access pin --check` reads it (its object validated first).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPinView {
    /// `namespace/name` of the ToolPin.
    pub id: String,
    /// `namespace/name` of its XBackend.
    pub backend: String,
    pub unpinned: mcp_access_bundle::Unpinned,
    pub tools: Vec<PinView>,
}

/// One pinned tool, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PinView {
    pub name: String,
    pub digest: String,
    pub annotations: Option<mcp_access_bundle::ToolAnnotations>,
    /// The tool object recorded when it was reviewed, if any.
    pub definition: Option<Map<String, Value>>,
}

impl Item<ToolPinSpec> {
    /// The ToolPin as `mcp-access pin --check` reads it.
    pub fn view(&self) -> ToolPinView {
        let name = self.spec.target_ref.as_ref().and_then(|t| t.name.clone());
        ToolPinView {
            id: self.id(),
            backend: format!("{}/{}", self.meta.namespace, name.unwrap_or_default()),
            unpinned: self.spec.unpinned.unwrap_or_default(),
            tools: self
                .spec
                .tools
                .iter()
                .flatten()
                .map(|t| PinView {
                    name: t.name.clone().unwrap_or_default(),
                    digest: t.digest.clone().unwrap_or_default(),
                    annotations: t.annotations.clone(),
                    definition: t.definition.clone(),
                })
                .collect(),
        }
    }
}
