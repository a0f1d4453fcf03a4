//! `mcp-access replay`: recorded decisions decided again under candidate policies
//! (docs/semantics.md §3.9). Reads the filter's decision records — decision log lines
//! (`mcp-access decision {...}` in Envoy's log) or access-log entries whose `filter_state` is
//! the decision — runs each recorded request through `explain` with the candidate bundle, and
//! reports the decisions that flip: who loses or gains which call.

use std::collections::BTreeMap;

use mcp_access_bundle::Level;
use mcp_access_bundle::{mcp_methods, Bundle};
use mcp_access_engine::answer::Why;
use mcp_access_engine::flow::records::{DecisionRecord, RequestRecord};
use mcp_access_engine::policy::Reason;
use mcp_access_k8s::Topology;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::explain::{Assumption, At, Explainer, LimitAssumption, RequestSpec, Verdict};
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
        let r = match DecisionRecord::deserialize(r) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("the record does not read as a decision record ({e})");
                *out.skipped.entry(why).or_default() += 1;
                continue;
            }
        };
        let r = &r;
        let spec = match spec_of(r, assume) {
            Ok(mut s) => {
                // A rate limit that refused the request had no room then; the same limit
                // (unchanged or not) is assumed to have none now.
                let refused = r.limits.as_ref().and_then(|l| l.refused.clone());
                if let Some(id) =
                    refused.filter(|id| bundle.rate_limits.iter().any(|l| &l.id() == id))
                {
                    s.limits.insert(id, LimitAssumption::Over);
                }
                s
            }
            Err(why) => {
                *out.skipped.entry(why.to_string()).or_default() += 1;
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
        let was_allowed = r.decision == Verdict::Allow;
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
            listener: r.listener.clone().unwrap_or_default(),
            backend: r.backend.clone(),
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

fn caller_of(r: &DecisionRecord) -> String {
    r.caller
        .clone()
        .unwrap_or_else(|| "an anonymous caller".into())
}

fn call_of(r: &DecisionRecord) -> String {
    let req = r.request.as_ref().and_then(Option::as_ref);
    match (&r.method, &r.name) {
        (Some(m), Some(n)) => format!("{m} {n}"),
        (Some(m), None) => m.clone(),
        _ => format!(
            "{} {}",
            req.map_or("?", |q| q.method.as_str()),
            req.map_or("?", |q| q.path.as_str())
        ),
    }
}

fn recorded(r: &DecisionRecord) -> String {
    let (policy, rule) = (s(&r.policy), s(&r.rule));
    match r.decision {
        Verdict::Allow => format!("allow (policy {policy}, rule {rule})"),
        Verdict::Deny => format!(
            "deny at {} ({}): policy {policy}, rule {rule}",
            Level::name(r.level),
            r.reason.map_or("-", Why::as_str),
        ),
    }
}

fn describe(r: &DecisionRecord) -> String {
    format!(
        "{} {} on {}",
        caller_of(r),
        call_of(r),
        r.listener.as_deref().unwrap_or_default()
    )
}

/// Why a record cannot be decided again (its text is a line of `replay`'s "skipped").
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unreplayable {
    /// Refused before any policy looked at it (a rejection): nothing to decide again.
    BeforePolicy(Why),
    /// The filter that wrote it does not record requests.
    NoRequest,
    /// A rule read a credential header, which the record holds only as a keyed digest.
    CredentialRead,
    /// The tool had drifted from its pin: what a listing showed is not in the record.
    Drifted,
    /// The decision read these, which the record does not hold.
    Unrecorded(Vec<String>),
    NoListener,
    BadListener,
}

impl std::fmt::Display for Unreplayable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreplayable::BeforePolicy(reason) => write!(f, "decided before any policy ({reason})"),
            Unreplayable::NoRequest => f.write_str(
                "the record carries no request (a filter that does not record requests)",
            ),
            Unreplayable::CredentialRead => f.write_str(
                "a rule read a credential header, which the record holds only as a keyed digest",
            ),
            Unreplayable::Drifted => f.write_str(
                "the tool had drifted from its pin (what a listing showed, which the record does not hold)",
            ),
            Unreplayable::Unrecorded(what) => write!(
                f,
                "the decision read {}, which the record does not hold",
                what.join(", ")
            ),
            Unreplayable::NoListener => f.write_str("the record names no listener"),
            Unreplayable::BadListener => {
                f.write_str("the record's listener is not namespace/gateway/listener")
            }
        }
    }
}

/// The `explain` request of a record; Err: why it cannot be decided again.
fn spec_of(
    r: &DecisionRecord,
    assume: &BTreeMap<String, Assumption>,
) -> Result<RequestSpec, Unreplayable> {
    let Some(Some(req)) = &r.request else {
        return Err(match (r.reason, &r.request) {
            (Some(reason), Some(None)) => Unreplayable::BeforePolicy(reason),
            _ => Unreplayable::NoRequest,
        });
    };
    // A credential a rule read is kept only as a keyed digest: never guessed at.
    if !req.credential_headers.is_empty() {
        return Err(Unreplayable::CredentialRead);
    }
    // Drift is what a listing showed the filter, not in the record: not guessed at either.
    if r.reason == Some(Why::Denied(Reason::ToolDrifted)) {
        return Err(Unreplayable::Drifted);
    }
    // What the decision read beyond the record (CEL attributes, a second token) is not
    // guessed at either.
    if !req.unrecorded.is_empty() {
        return Err(Unreplayable::Unrecorded(req.unrecorded.clone()));
    }
    let listener = r.listener.as_deref().ok_or(Unreplayable::NoListener)?;
    let (gateway, listener) = listener.rsplit_once('/').ok_or(Unreplayable::BadListener)?;
    let headers = req
        .headers
        .iter()
        .flat_map(|(name, copies)| copies.iter().map(move |c| (name.clone(), c.clone())))
        .collect();
    let spiffe = r.caller.clone().filter(|c| c.starts_with("spiffe://"));
    let jwt_claims = req.jwt.as_ref().map(nest);
    let mut assume = assume.clone();
    // The authorizer that decided a recorded denial answers as it did.
    if let (Some(policy), Some(Why::Denied(reason))) = (&r.policy, r.reason) {
        let status = r.status.unwrap_or(403);
        let answer = match reason {
            Reason::ExternalAuthDenied => Some(status)
                .filter(|s| (300..=499).contains(s))
                .map(Assumption::Deny),
            Reason::AuthorizerFailed => Some(Assumption::Error),
            _ => None,
        };
        if let Some(a) = answer {
            assume.insert(policy.clone(), a);
        }
    }
    let RequestRecord {
        arguments,
        host,
        path,
        method,
        route,
        revision,
        time,
        ..
    } = req;
    Ok(RequestSpec {
        gateway: Some(gateway.to_string()),
        listener: Some(listener.to_string()),
        host: Some(host.clone()),
        path: Some(path.clone()),
        method: Some(method.clone()),
        headers,
        backend: r.backend.clone(),
        route: if r.backend.is_some() {
            None
        } else {
            route.clone()
        },
        spiffe,
        mcp_method: r.method.clone(),
        param: r.name.clone(),
        arguments: arguments.clone().filter(Value::is_object),
        assume,
        jwt_claims,
        revision: revision
            .clone()
            .filter(|r| r != mcp_methods::Revision::UNNAMED.as_str()),
        time: *time,
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
