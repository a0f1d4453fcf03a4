//! The human-readable form of an [`Explanation`], one function per section.

use mcp_access_engine::answer::Why;
use mcp_access_engine::policy::Reason;

use super::limits::KeyView;
use super::{At, Cause, Explanation, McpView, Stage, Verdict};

/// The rate limits charged: each one's rates, key, bucket, and what it is assumed to hold.
fn limits(out: &mut String, e: &Explanation) {
    for l in &e.limits {
        let rates: Vec<String> = l
            .rates
            .iter()
            .map(|r| format!("{} per {} s", r.limit, r.window_seconds))
            .collect();
        out.push_str(&format!(
            "limit     {} ({:?}; {}): assumed {}{}\n",
            l.limit,
            l.mode,
            rates.join(", "),
            if l.assumed == "over" {
                "over (no room)"
            } else {
                "under (room)"
            },
            if l.given { "" } else { " (no --assume given)" }
        ));
        match &l.key {
            KeyView::Values(v) => {
                for (c, v) in l.counters.iter().zip(v) {
                    out.push_str(&format!("          key {c} = {v:?}\n"));
                }
                if l.counters.is_empty() {
                    out.push_str("          key (no counters: one bucket for every request)\n");
                }
            }
            KeyView::Unidentified(_) => out.push_str(&format!(
                "          key unidentified: a counter ({}) errs or has no value; the limit's one shared bucket\n",
                l.counters.join(", ")
            )),
        }
        out.push_str(&format!(
            "          bucket {} (slot {}), definition {}\n",
            l.bucket, l.slot, l.digest
        ));
    }
}

/// A value, or `-` for none.
fn s(v: Option<&str>) -> String {
    v.unwrap_or("-").to_string()
}

/// Human-readable text.
pub fn to_text(e: &Explanation) -> String {
    let mut out = String::new();
    request(&mut out, e);
    resolved(&mut out, e);
    if let Some(p) = &e.pin {
        out.push_str(&format!("pins      {p}\n"));
    }
    notes(&mut out, e);
    limits(&mut out, e);
    match e.decision {
        Verdict::Allow => allow(&mut out, e),
        Verdict::Deny => deny(&mut out, e),
    }
    if let Some(d) = &e.dry_run {
        super::dry_run::to_text(&mut out, d);
    }
    cel(&mut out, e);
    trace(&mut out, "trace", &e.trace);
    if let Some(d) = e.dry_run.as_ref().filter(|d| !d.trace.is_empty()) {
        trace(&mut out, "dry-run trace", &d.trace);
    }
    out
}

/// The request line and its MCP meaning.
fn request(out: &mut String, e: &Explanation) {
    let r = &e.request;
    out.push_str(&format!(
        "request   {} {} (authority {}) from {}\n",
        r.method,
        r.path,
        r.authority,
        r.caller.as_deref().unwrap_or("an anonymous caller")
    ));
    match &r.mcp {
        Some(McpView::Call { method, param }) => {
            out.push_str(&format!("mcp       {method} {}\n", s(param.as_deref())))
        }
        Some(McpView::Other(what)) => out.push_str(&format!("mcp       {what}\n")),
        None => out.push_str("mcp       (not an MCP message)\n"),
    }
}

/// The listener and backend the filter resolved, with the route and cluster.
fn resolved(out: &mut String, e: &Explanation) {
    let r = &e.request;
    out.push_str(&format!("listener  {}\n", s(e.listener.as_deref())));
    out.push_str(&format!(
        "backend   {} (route {}, cluster {})\n",
        s(e.backend.as_deref()),
        s(r.route.as_deref()),
        s(r.cluster.as_deref())
    ));
}

/// The notes on `--assume` and routing, then the authorizer callouts.
fn notes(out: &mut String, e: &Explanation) {
    for n in &e.assumptions {
        out.push_str(&format!("note      {n}\n"));
    }
    if let Some(n) = &e.note {
        out.push_str(&format!("note      {n}\n"));
    }
    for c in &e.calls {
        out.push_str(&format!(
            "authorizer {} for {} ({}): assumed {}{}{}\n",
            c.authorizer,
            c.policy,
            c.level,
            c.assumed,
            if c.given { "" } else { " (no --assume given)" },
            if c.dry_run { " [dry run]" } else { "" }
        ));
        if let Some(k) = &c.cache {
            out.push_str(&format!("note      {}\n", cache_text(k)));
        }
    }
}

/// A policy's cache as declared: what is reused, how long, and what its key leaves out.
fn cache_text(k: &mcp_access_bundle::AuthzCache) -> String {
    let mut t = format!(
        "its answers are cached: {} for {} ms in {} slots; key: what the authorizer is sent",
        if k.denials {
            "OK answers and denials"
        } else {
            "OK answers"
        },
        k.ttl_ms,
        k.max_entries
    );
    if !k.ignored_headers.is_empty() {
        t.push_str(&format!(" less {}", k.ignored_headers.join(", ")));
    }
    t.push_str(", verified JWTs by iss, sub");
    if !k.key_claims.is_empty() {
        t.push_str(&format!(" and claims {}", k.key_claims.join(", ")));
    }
    t
}

/// An allow: the deciding rule and the headers set upstream.
fn allow(out: &mut String, e: &Explanation) {
    out.push_str(&format!(
        "decision  ALLOW (policy {}, rule {})\n",
        s(e.policy.as_deref()),
        s(e.rule.as_deref())
    ));
    origin(out, e);
    for h in e.add_headers.iter().flatten() {
        out.push_str(&format!("upstream  + {}: {}\n", h.name, h.value));
    }
}

/// A deny: who answered, and the response the client gets.
fn deny(out: &mut String, e: &Explanation) {
    let who = match e.stage {
        Stage::Transport => "rejected by the filter's transport checks",
        Stage::Resolve => "the filter cannot resolve listener or backend",
        Stage::Policy
            if matches!(
                e.reason,
                Cause::Filter(Why::Denied(Reason::ToolNotPinned | Reason::ToolDrifted))
            ) =>
        {
            "denied by the XBackend's ToolPin"
        }
        Stage::Policy if e.reason == Cause::Filter(Why::Denied(Reason::RateLimited)) => {
            "refused by a rate limit (none of the request's limits is charged)"
        }
        Stage::Policy => "denied by policy",
        Stage::Router => "answered by Envoy's router",
    };
    out.push_str(&format!(
        "decision  DENY {} at {} ({}): policy {}, rule {}; {who}\n",
        e.status.map_or("-".to_string(), |x| x.to_string()),
        e.level.unwrap_or(At(None)),
        e.reason,
        s(e.policy.as_deref()),
        s(e.rule.as_deref())
    ));
    origin(out, e);
    if let Some(resp) = &e.response {
        let relayed = if e.reason == Cause::Filter(Why::Denied(Reason::ExternalAuthDenied)) {
            " (with the headers and body the authorizer sends)"
        } else {
            ""
        };
        out.push_str(&format!("response  HTTP {}{relayed}\n", resp.status));
        for h in &resp.headers {
            out.push_str(&format!("          {}: {}\n", h.name, h.value));
        }
        if !resp.body.is_empty() {
            out.push_str(&format!("          {}\n", resp.body));
        }
    }
}

/// Where the deciding policy's rules came from.
fn origin(out: &mut String, e: &Explanation) {
    if let Some(o) = &e.origin {
        out.push_str(&format!("from      {o}\n"));
    }
}

/// Each CEL condition evaluated, with the variables it read.
fn cel(out: &mut String, e: &Explanation) {
    if e.cel.is_empty() {
        return;
    }
    out.push_str("cel\n");
    for c in &e.cel {
        let at = match &c.rule {
            Some(r) => format!("{} rule {r} {}", c.policy, c.field),
            None => format!("{} {}", c.policy, c.field),
        };
        out.push_str(&format!(
            "  {at}: {} -> {}\n",
            c.expression.replace('\n', " "),
            c.result
        ));
        for (name, value) in &c.reads {
            out.push_str(&format!("      {name} = {value}\n"));
        }
    }
}

/// A decision trace as a table, under `title`.
fn trace(out: &mut String, title: &str, entries: &[super::TraceView]) {
    out.push_str(&format!("{title}\n"));
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|t| {
            [
                t.level.to_string(),
                t.event.step().to_string(),
                s(t.policy.as_deref()),
                s(t.rule.as_deref()),
                t.event.to_string(),
            ]
        })
        .collect();
    let header = ["level", "step", "policy", "rule", "why"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.len());
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
}
