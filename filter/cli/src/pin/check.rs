//! `mcp-access pin --check`: the tools a server lists against a ToolPin. Every difference is
//! drift: a pinned tool whose definition changed (its description as a text diff, the rest of
//! its definition as a diff of its JSON), a tool that is not pinned, a pinned tool no longer
//! listed. A listing read through the gateway is filtered (tools the caller may not list,
//! drifted tools): when pinned tools are missing, the report says to check without it.

use std::fmt::Write as _;

use mcp_access_bundle::Unpinned;
use mcp_access_engine::canonical_json::digest_of;
use mcp_access_k8s::{PinView, ToolPinView};
use serde_json::{Map, Value};
use similar::TextDiff;

use super::{Listing, MAX_DEPTH};

/// The comparison: the text to print, and whether anything drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub text: String,
    pub drifted: usize,
}

/// Compares `listing` with `pin`.
pub fn check(listing: &Listing, pin: &ToolPinView) -> CheckReport {
    let mut text = String::new();
    let mut drifted = 0;
    let mut matched = 0;
    let _ = writeln!(
        text,
        "ToolPin {} (XBackend {}) against {}",
        pin.id, pin.backend, listing.source
    );
    for p in &pin.tools {
        if let Some(d) = &p.definition {
            let recorded = digest_of(Value::Object(d.clone()).to_string().as_bytes(), MAX_DEPTH);
            if recorded.map(|d| d.to_text()).as_deref() != Ok(p.digest.as_str()) {
                let _ = writeln!(
                    text,
                    "! {}: the recorded definition does not have the pinned digest (edited by hand?): the digest is what the filter enforces",
                    p.name
                );
            }
        }
    }
    for t in &listing.tools {
        match pin.tools.iter().find(|p| p.name == t.name) {
            Some(p) if p.digest == t.digest.to_text() => matched += 1,
            Some(p) => {
                drifted += 1;
                let _ = writeln!(
                    text,
                    "~ {}: its definition changed (pinned {}, listed {}); the filter leaves it out of listings and denies its calls",
                    t.name,
                    p.digest,
                    t.digest.to_text()
                );
                text.push_str(&definition_diff(p, &t.value));
            }
            None => {
                drifted += 1;
                let effect = match pin.unpinned {
                    Unpinned::Deny => "the filter leaves it out of listings and denies its calls",
                    Unpinned::Allow => "listed and called as policies allow (unpinned: Allow)",
                };
                let _ = writeln!(
                    text,
                    "+ {}: not pinned ({effect}); listed {}",
                    t.name,
                    t.digest.to_text()
                );
                if !t.description().is_empty() {
                    text.push_str(&indent(t.description(), "    | "));
                }
            }
        }
    }
    let mut missing = 0;
    for p in &pin.tools {
        if !listing.tools.iter().any(|t| t.name == p.name) {
            drifted += 1;
            missing += 1;
            let _ = writeln!(
                text,
                "- {}: pinned but not listed (gone from the server, or left out of this listing)",
                p.name
            );
        }
    }
    let _ = writeln!(
        text,
        "{matched} tool(s) match their pins, {drifted} difference(s)"
    );
    if missing > 0 {
        let _ = writeln!(
            text,
            "hint: {missing} pinned tool(s) are not in this listing. A listing read through the mcp-access gateway is filtered: it leaves out the tools this credential may not list, and every tool whose definition drifted (a changed tool then shows as missing, not as changed). Check against the server directly (its own URL) or with a credential that may list every tool."
        );
    }
    CheckReport { text, drifted }
}

fn indent(s: &str, prefix: &str) -> String {
    s.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// The diff of a pinned tool's recorded definition and the listed one: the description as
/// text, the other members as pretty JSON (members sorted).
fn definition_diff(p: &PinView, listed: &Map<String, Value>) -> String {
    let Some(pinned) = &p.definition else {
        return "    (the ToolPin records no definition: only the digests can be compared)\n"
            .into();
    };
    let mut out = String::new();
    let text = |m: &Map<String, Value>| {
        m.get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (old, new) = (text(pinned), text(listed));
    if old != new {
        out.push_str("    description:\n");
        out.push_str(&unified(&with_newline(&old), &with_newline(&new)));
    }
    let rest = |m: &Map<String, Value>| {
        let mut m = m.clone();
        m.remove("description");
        serde_json::to_string_pretty(&Value::Object(m)).unwrap_or_default() + "\n"
    };
    let (old, new) = (rest(pinned), rest(listed));
    if old != new {
        out.push_str("    definition (without the description):\n");
        out.push_str(&unified(&old, &new));
    }
    if out.is_empty() {
        // Same value, other digest: spelled so that JSON readers differ (e.g. a member named
        // twice, or a number beyond a double's precision).
        out.push_str("    (the same JSON value spelled differently)\n");
    }
    out
}

fn with_newline(s: &str) -> String {
    if s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}

/// A unified line diff, indented.
fn unified(old: &str, new: &str) -> String {
    let diff = TextDiff::from_lines(old, new);
    let body = diff
        .unified_diff()
        .context_radius(3)
        .header("pinned", "listed")
        .to_string();
    indent(&body, "    ")
}
