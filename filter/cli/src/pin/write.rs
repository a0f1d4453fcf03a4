//! The ToolPin YAML `mcp-access pin` writes: every tool with its digest, the annotations the
//! server claims (for the reviewer to keep only what they verified), and its definition as
//! listed, each tool introduced by a comment with its name and description.

use mcp_access_bundle::{ToolAnnotations, Unpinned};
use serde::Serialize;
use serde_json::Value;

use super::{ListedTool, Listing};
use crate::error::CliError;

/// The ToolPin object's name and target.
#[derive(Debug, Clone)]
pub struct PinTarget {
    pub name: String,
    pub namespace: String,
    /// The XBackend's name.
    pub backend: String,
    /// The XBackend's API group.
    pub group: String,
    pub unpinned: Unpinned,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolOut<'a> {
    name: &'a str,
    digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<ToolAnnotations>,
    definition: &'a serde_json::Map<String, Value>,
}

/// The annotations a tool claims, as far as the ToolPin kind has them; and the claims it
/// cannot hold (other members, values of another type).
fn claimed(t: &ListedTool) -> (Option<ToolAnnotations>, Vec<String>) {
    let Some(Value::Object(a)) = t.value.get("annotations") else {
        return (None, Vec::new());
    };
    let mut out = ToolAnnotations::default();
    let mut other = Vec::new();
    for (k, v) in a {
        let hint = v.as_bool();
        match (k.as_str(), v) {
            ("title", Value::String(s)) => out.title = Some(s.clone()),
            ("readOnlyHint", _) if hint.is_some() => out.read_only_hint = hint,
            ("destructiveHint", _) if hint.is_some() => out.destructive_hint = hint,
            ("idempotentHint", _) if hint.is_some() => out.idempotent_hint = hint,
            ("openWorldHint", _) if hint.is_some() => out.open_world_hint = hint,
            _ => other.push(format!("{k}: {v}")),
        }
    }
    (
        Some(out).filter(|a| *a != ToolAnnotations::default()),
        other,
    )
}

/// `text` as YAML comment lines (each prefixed with `indent# `).
fn comment(out: &mut String, indent: &str, text: &str) {
    for line in text.lines() {
        out.push_str(indent);
        out.push_str("# ");
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The ToolPin pinning every tool of `listing`.
pub fn toolpin_yaml(listing: &Listing, target: &PinTarget) -> Result<String, CliError> {
    let mut out = String::new();
    comment(
        &mut out,
        "",
        &format!(
            "Tools listed by {}, pinned by mcp-access pin.\n\
             Review each tool's definition (its description and schemas) before applying: the\n\
             digest pins exactly that definition, and the filter lists and lets callers use only\n\
             tools whose definition still matches. `annotations` are what the server claims:\n\
             keep only what you verified; policies read these (request.mcp.tool.annotations),\n\
             never the server's own.",
            listing.source
        ),
    );
    let head = serde_json::json!({
        "apiVersion": "mcp-access.io/v1alpha1",
        "kind": "ToolPin",
        "metadata": {"name": target.name, "namespace": target.namespace},
    });
    out.push_str(&yaml(&head)?);
    out.push_str("spec:\n");
    let spec = serde_json::json!({
        "targetRef": {"group": target.group, "kind": "XBackend", "name": target.backend},
        "unpinned": target.unpinned,
    });
    for line in yaml(&spec)?.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if listing.tools.is_empty() {
        out.push_str("  tools: []\n");
        return Ok(out);
    }
    out.push_str("  tools:\n");
    for t in &listing.tools {
        let (annotations, other) = claimed(t);
        let first = t.description().lines().next().unwrap_or_default();
        comment(&mut out, "  ", &format!("{}: {first}", t.name));
        if !other.is_empty() {
            comment(
                &mut out,
                "  ",
                &format!(
                    "claims annotations the ToolPin does not hold: {}",
                    other.join(", ")
                ),
            );
        }
        let item = ToolOut {
            name: &t.name,
            digest: t.digest.to_text(),
            annotations,
            definition: &t.value,
        };
        for (i, line) in yaml(&item)?.lines().enumerate() {
            out.push_str(if i == 0 { "  - " } else { "    " });
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// A value as YAML.
fn yaml<T: Serialize>(v: &T) -> Result<String, CliError> {
    serde_norway::to_string(v).map_err(|e| CliError::invalid(e.to_string()))
}
