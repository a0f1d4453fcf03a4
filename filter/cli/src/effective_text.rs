//! `mcp-access effective` as text: per (Gateway listener, XBackend) every level and step with
//! its rules spelled as the user wrote them (flow-style YAML), and the backend's pinned tools.

use serde_json::Value;

/// The effective policy view as text.
pub(crate) fn text(views: &[&mcp_access_k8s::EffectivePolicy]) -> String {
    let mut out = String::new();
    for v in views {
        out.push_str(&format!(
            "{} listener {} -> XBackend {}\n",
            v.gateway, v.listener, v.backend
        ));
        if !v.routes.is_empty() {
            out.push_str(&format!("  through {}\n", v.routes.join(", ")));
        }
        for l in &v.levels {
            if l.steps.is_empty() {
                out.push_str(&format!("  {} level: no policy\n", l.level));
                continue;
            }
            out.push_str(&format!("  {} level\n", l.level));
            for s in &l.steps {
                out.push_str(&format!("    {}\n", s.step));
                for p in &s.policies {
                    let mode = match p.mode.as_deref() {
                        Some("DryRun") => "  (dry run: reported, never enforced)",
                        Some(_) => "  (enforced; a dry-run block replaces it in the dry run)",
                        None => "",
                    };
                    out.push_str(&format!("      {}  from {}{mode}\n", p.policy, p.from));
                    for w in &p.when {
                        out.push_str(&format!("        when {w}\n"));
                    }
                    if let Some(a) = &p.authorizer {
                        out.push_str(&format!("        authorizer {a}\n"));
                    }
                    match &p.rules {
                        None => out.push_str("        all traffic\n"),
                        Some(rs) if rs.is_empty() => {
                            out.push_str("        no traffic: admits nothing (fail-closed)\n");
                        }
                        Some(rs) => {
                            for r in rs {
                                out.push_str(&rule_text(r));
                            }
                        }
                    }
                }
            }
        }
        if let Some(p) = &v.pins {
            out.push_str(&pins_text(p));
        }
        for n in &v.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
    }
    out
}

/// A rule of `effective`'s text: its name, then its fields one a line as the policy object
/// spells them (YAML flow style), or as compiled where no object spells it (a stand-in).
fn rule_text(r: &mcp_access_k8s::EffectiveRule) -> String {
    let (rule, how) = match &r.written {
        Some(w) => (w, ""),
        None => (&r.rule, " (as compiled)"),
    };
    let mut out = format!("        rule {}{how}\n", r.name);
    match rule.as_object() {
        Some(fields) if !fields.is_empty() => {
            for (k, v) in ordered(fields) {
                out.push_str(&format!("          {k}: {}\n", flow_yaml(v)));
            }
        }
        _ => out.push_str("          every request\n"),
    }
    out
}

/// A map's members in the order manifests write them: `type`, `name`, `source`,
/// `authorization`, then the rest by name.
fn ordered(m: &serde_json::Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    const FIRST: [&str; 4] = ["type", "name", "source", "authorization"];
    let rank = |k: &str| FIRST.iter().position(|f| *f == k).unwrap_or(FIRST.len());
    let mut members: Vec<(&String, &Value)> = m.iter().collect();
    members.sort_by_key(|(k, _)| rank(k));
    members.into_iter()
}

/// `v` in YAML flow style: `{type: Inline, mcp: {methods: [{name: tools/call}]}}`. A string
/// that would read as something else (a number, a boolean, YAML punctuation) is quoted.
fn flow_yaml(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let members: Vec<String> = ordered(m)
                .map(|(k, v)| format!("{}: {}", flow_string(k), flow_yaml(v)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(flow_yaml).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(s) => flow_string(s),
        other => other.to_string(),
    }
}

fn flow_string(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

/// A backend's pinned tools, as `effective` and `explain` show them.
pub(crate) fn pins_text(p: &mcp_access_bundle::ToolPins) -> String {
    let mut out = format!(
        "  pinned tools (ToolPin {}; tools not pinned: {:?})\n",
        p.source, p.unpinned
    );
    if p.tools.is_empty() {
        out.push_str("    none: no tool is listed or can be called\n");
    }
    for t in &p.tools {
        let annotations = match &t.annotations {
            Some(a) => serde_json::to_string(a).unwrap_or_default(),
            None => "none reviewed".into(),
        };
        out.push_str(&format!(
            "    {} {} annotations {annotations}\n",
            t.name, t.digest
        ));
    }
    out
}
