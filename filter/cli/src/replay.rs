//! `mcp-access replay`: recorded decisions decided again under candidate policies
//! (docs/semantics.md §3.9). Reads the filter's decision records — decision log lines
//! (`mcp-access decision {...}` in Envoy's log) or access-log entries whose `filter_state` is
//! the decision — runs each recorded request through `explain` with the candidate bundle, and
//! reports the decisions that flip: who loses or gains which call.

use std::collections::BTreeMap;

use mcp_access_bundle::{mcp_methods, Bundle};
use mcp_access_k8s::Topology;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::explain::{Assumption, At, Explainer, RequestSpec, Verdict};
pub use mcp_access_engine::flow::records::{records, Unreadable, LOG_PREFIX};

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// Decision records read.
    pub records: usize,
    /// Of those, decided again.
    pub replayed: usize,
    /// Records that carry no request to decide again (refused before any policy, or from a
    /// filter that does not record requests), and why, with their counts.
    pub skipped: BTreeMap<String, usize>,
    /// Requests the candidate cannot decide (e.g. their listener is gone), with the error.
    pub errors: Vec<String>,
    /// The decisions that flip, grouped.
    pub flips: Vec<Flip>,
    /// Lines that look like records but cannot be read (`file:line: why`; the others were
    /// replayed).
    pub unreadable: Vec<String>,
}

/// Which way a decision flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Allowed, now denied.
    Loses,
    /// Denied, now allowed.
    Gains,
}

/// Identical requests whose decision flips.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flip {
    /// `loses` (allowed, now denied) or `gains` (denied, now allowed).
    pub change: Change,
    pub caller: String,
    pub listener: String,
    pub backend: Option<String>,
    /// `tools/call echo`, `tools/list`, `GET /mcp`.
    pub call: String,
    /// How many recorded requests.
    pub count: usize,
    /// The recorded decision and the candidate's: `allow (policy, rule)` or `deny at LEVEL (reason): policy, rule`.
    pub was: String,
    pub now: String,
}

/// Decides each record again under `bundle` (and the routes of `topo`); `assume` answers
/// authorizers (a record an authorizer denied keeps that denial: its policy answers as it did).
pub fn replay(
    bundle: &Bundle,
    topo: Option<&Topology>,
    records: &[Value],
    assume: &BTreeMap<String, Assumption>,
) -> Replay {
    let mut out = Replay {
        records: records.len(),
        ..Replay::default()
    };
    let mut flips: Vec<Flip> = Vec::new();
    // One engine for every record (a bundle that does not compile: each record's error).
    let explainer = Explainer::new(bundle, topo);
    for r in records {
        let spec = match spec_of(r, assume) {
            Ok(s) => s,
            Err(why) => {
                *out.skipped.entry(why).or_default() += 1;
                continue;
            }
        };
        let e = match explainer
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|x| x.explain(&spec))
        {
            Ok(e) => e,
            Err(err) => {
                out.errors.push(format!("{}: {err}", describe(r)));
                continue;
            }
        };
        out.replayed += 1;
        let was_allowed = r.get("decision").and_then(Value::as_str) == Some("allow");
        if was_allowed == (e.decision == Verdict::Allow) {
            continue;
        }
        let flip = Flip {
            change: if was_allowed {
                Change::Loses
            } else {
                Change::Gains
            },
            caller: caller_of(r),
            listener: text(r, "listener").unwrap_or_default(),
            backend: text(r, "backend"),
            call: call_of(r),
            count: 1,
            was: recorded(r),
            now: match e.decision {
                Verdict::Allow => format!("allow (policy {}, rule {})", s(&e.policy), s(&e.rule)),
                Verdict::Deny => format!(
                    "deny at {} ({}): policy {}, rule {}",
                    e.level.unwrap_or(At(None)),
                    e.reason,
                    s(&e.policy),
                    s(&e.rule)
                ),
            },
        };
        match flips.iter_mut().find(|f| {
            Flip {
                count: f.count,
                ..flip.clone()
            } == **f
        }) {
            Some(f) => f.count += 1,
            None => flips.push(flip),
        }
    }
    out.flips = flips;
    out
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("-")
}

fn text(r: &Value, key: &str) -> Option<String> {
    r.get(key).and_then(Value::as_str).map(str::to_string)
}

fn caller_of(r: &Value) -> String {
    text(r, "caller").unwrap_or_else(|| "an anonymous caller".into())
}

fn call_of(r: &Value) -> String {
    let req = r.get("request");
    match (text(r, "method"), text(r, "name")) {
        (Some(m), Some(n)) => format!("{m} {n}"),
        (Some(m), None) => m,
        _ => format!(
            "{} {}",
            req.and_then(|q| q.get("method"))
                .and_then(Value::as_str)
                .unwrap_or("?"),
            req.and_then(|q| q.get("path"))
                .and_then(Value::as_str)
                .unwrap_or("?")
        ),
    }
}

fn recorded(r: &Value) -> String {
    let get = |k: &str| text(r, k).unwrap_or_else(|| "-".into());
    if r.get("decision").and_then(Value::as_str) == Some("allow") {
        format!("allow (policy {}, rule {})", get("policy"), get("rule"))
    } else {
        format!(
            "deny at {} ({}): policy {}, rule {}",
            get("level"),
            get("reason"),
            get("policy"),
            get("rule")
        )
    }
}

fn describe(r: &Value) -> String {
    format!(
        "{} {} on {}",
        caller_of(r),
        call_of(r),
        text(r, "listener").unwrap_or_default()
    )
}

/// The `explain` request of a record; Err: why it cannot be decided again.
fn spec_of(r: &Value, assume: &BTreeMap<String, Assumption>) -> Result<RequestSpec, String> {
    let Some(req) = r.get("request").filter(|q| q.is_object()) else {
        return Err(match r.get("reason").and_then(Value::as_str) {
            Some(reason) if r.get("request").is_some() => {
                format!("decided before any policy ({reason})")
            }
            _ => "the record carries no request (a filter that does not record requests)".into(),
        });
    };
    // A credential a rule read is kept only as a keyed digest: never guessed at.
    if req
        .get("credential_headers")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
    {
        return Err(
            "a rule read a credential header, which the record holds only as a keyed digest".into(),
        );
    }
    // Drift is what a listing showed the filter, not in the record: not guessed at either.
    if r.get("reason").and_then(Value::as_str) == Some("tool_drifted") {
        return Err(
            "the tool had drifted from its pin (what a listing showed, which the record does not hold)"
                .into(),
        );
    }
    // What the decision read beyond the record (CEL attributes, a second token) is not
    // guessed at either.
    let unrecorded: Vec<&str> = req
        .get("unrecorded")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !unrecorded.is_empty() {
        return Err(format!(
            "the decision read {}, which the record does not hold",
            unrecorded.join(", ")
        ));
    }
    let listener = text(r, "listener").ok_or("the record names no listener")?;
    let (gateway, listener) = listener
        .rsplit_once('/')
        .ok_or("the record's listener is not namespace/gateway/listener")?;
    let field = |k: &str| req.get(k).and_then(Value::as_str).map(str::to_string);
    let mut headers = Vec::new();
    if let Some(Value::Object(h)) = req.get("headers") {
        for (name, copies) in h {
            for c in copies.as_array().into_iter().flatten() {
                if let Some(c) = c.as_str() {
                    headers.push((name.clone(), c.to_string()));
                }
            }
        }
    }
    let caller = text(r, "caller");
    let spiffe = caller.filter(|c| c.starts_with("spiffe://"));
    let jwt_claims = match req.get("jwt") {
        Some(Value::Object(flat)) => Some(nest(flat)),
        _ => None,
    };
    let mut assume = assume.clone();
    // The authorizer that decided a recorded denial answers as it did.
    if let (Some(policy), Some(reason)) = (text(r, "policy"), text(r, "reason")) {
        let status = r.get("status").and_then(Value::as_u64).unwrap_or(403);
        let answer = match reason.as_str() {
            "external_auth_denied" => u16::try_from(status)
                .ok()
                .filter(|s| (300..=499).contains(s))
                .map(Assumption::Deny),
            "authorizer_error" => Some(Assumption::Error),
            _ => None,
        };
        if let Some(a) = answer {
            assume.insert(policy, a);
        }
    }
    let arguments = req.get("arguments").filter(|a| a.is_object()).cloned();
    Ok(RequestSpec {
        gateway: Some(gateway.to_string()),
        listener: Some(listener.to_string()),
        host: field("host"),
        path: field("path"),
        method: field("method"),
        headers,
        backend: text(r, "backend"),
        route: if r.get("backend").is_some_and(Value::is_string) {
            None
        } else {
            field("route")
        },
        spiffe,
        mcp_method: text(r, "method"),
        param: text(r, "name"),
        arguments,
        assume,
        jwt_claims,
        revision: field("revision").filter(|r| r != mcp_methods::Revision::UNNAMED.as_str()),
        time: req.get("time").and_then(Value::as_i64),
        ..RequestSpec::default()
    })
}

/// Claims recorded by their (dotted) names, nested again (`org.team` inside `org`).
fn nest(flat: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (name, v) in flat {
        let mut at = &mut out;
        let mut parts = name.split('.').peekable();
        while let Some(p) = parts.next() {
            if parts.peek().is_none() {
                at.insert(p.to_string(), v.clone());
                break;
            }
            let next = at
                .entry(p.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            let Value::Object(m) = next else { break };
            at = m;
        }
    }
    Value::Object(out)
}

/// The replay as text.
pub fn to_text(r: &Replay) -> String {
    let mut out = format!(
        "{} decision records, {} decided again, {} flip(s)\n",
        r.records,
        r.replayed,
        r.flips.iter().map(|f| f.count).sum::<usize>()
    );
    for f in &r.flips {
        out.push_str(&format!(
            "  {} {}  {}  on {}{}  ({} request{})\n      was {}\n      now {}\n",
            match f.change {
                Change::Loses => "LOSES",
                Change::Gains => "GAINS",
            },
            f.caller,
            f.call,
            f.listener,
            f.backend
                .as_ref()
                .map(|b| format!(" -> {b}"))
                .unwrap_or_default(),
            f.count,
            if f.count == 1 { "" } else { "s" },
            f.was,
            f.now
        ));
    }
    for (why, n) in &r.skipped {
        out.push_str(&format!("  skipped {n}: {why}\n"));
    }
    for e in &r.errors {
        out.push_str(&format!("  cannot decide again: {e}\n"));
    }
    for u in &r.unreadable {
        out.push_str(&format!("  unreadable line {u}\n"));
    }
    out
}
