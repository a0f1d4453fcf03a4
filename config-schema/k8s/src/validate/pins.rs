//! `ToolPin`: what its CRD checks, and that each recorded definition is the tool it pins.

use crate::check::Checker;
use crate::types::*;

use super::{ref_fields, GROUP_FIELD, KIND_FIELD, NAME_FIELD};

pub(crate) fn tool_pin(s: &ToolPinSpec, c: &mut Checker) {
    match &s.target_ref {
        None => c.err("spec.targetRef", "Required value"),
        Some(t) => {
            ref_fields(
                "spec.targetRef",
                &[
                    (&GROUP_FIELD, &t.group, true),
                    (&KIND_FIELD, &t.kind, true),
                    (&NAME_FIELD, &t.name, true),
                ],
                c,
            );
            if let Some(g) = &t.group {
                c.one_of(
                    "spec.targetRef.group",
                    g,
                    &[GATEWAY_X_GROUP, AGENTIC_GROUP, PROTOTYPE_GROUP],
                );
            }
            if let Some(k) = &t.kind {
                c.one_of("spec.targetRef.kind", k, &["XBackend"]);
            }
        }
    }
    let tools = s.tools.as_deref().unwrap_or_default();
    c.max_items("spec.tools", tools.len(), 1024);
    c.map_keys("spec.tools", tools.iter().map(|t| t.name.as_deref()));
    for (i, t) in tools.iter().enumerate() {
        let at = format!("spec.tools[{i}]");
        if c.required(&format!("{at}.name"), &t.name) {
            c.len_between(&format!("{at}.name"), opt(&t.name), 1, 512);
        }
        if c.required(&format!("{at}.digest"), &t.digest) {
            c.pattern(
                &format!("{at}.digest"),
                opt(&t.digest),
                mcp_access_bundle::PIN_DIGEST_PATTERN,
            );
        }
        if let (Some(d), Some(name)) = (&t.definition, &t.name) {
            let named = d.get("name").and_then(|n| n.as_str());
            c.rule(
                &format!("{at}.definition"),
                named == Some(name.as_str()),
                "object",
                "definition.name must be the pinned tool's name",
            );
        }
    }
}
