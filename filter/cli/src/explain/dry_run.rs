//! The dry-run decision beside the enforced one (docs/semantics.md §3.8): what the request
//! would get with every dry-run policy enforced.

use mcp_access_bundle::Level;
use mcp_access_engine::answer::Why;
use mcp_access_engine::flow::{Outcome, RequestFlow};
use mcp_access_engine::policy::{Decision, Engine};
use serde::Serialize;

use super::{At, Cause, TraceView, Verdict};

/// The dry-run decision of a request that dry-run policies concern.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunView {
    /// `allow` or `deny`: the decision with the dry-run policies enforced (never enforced).
    pub decision: Verdict,
    /// Whether it differs from the decision enforced.
    pub changed: bool,
    /// Deny: the level; allow (changed): the level where it admits what was denied.
    pub level: Option<At>,
    pub reason: Cause,
    /// The policy and rule that make the difference.
    pub policy: Option<String>,
    pub rule: Option<String>,
    /// Dry-run authorizer calls: the policy and its answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub authorizers: Vec<AuthorizerAnswer>,
    /// Authorizers the dry run would call that were not (no Backend-level authorizer is
    /// called after a Gateway-level denial); taken as allowing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_called: Vec<String>,
    pub trace: Vec<TraceView>,
}

/// One dry-run authorizer's answer.
#[derive(Debug, Clone, Serialize)]
pub struct AuthorizerAnswer {
    pub policy: String,
    pub answer: String,
}

/// The dry-run decision of `flow`, None when no dry-run policy concerns the request.
pub(super) fn dry_run_view(
    engine: &Engine,
    flow: &RequestFlow,
    outcome: &Outcome,
) -> Option<DryRunView> {
    if !flow.dry_run_evaluated() {
        return None;
    }
    let trace = flow
        .dry_run_trace()
        .iter()
        .map(|t| TraceView {
            level: Level::name(t.level),
            policy: t.policy.clone(),
            rule: t.rule.clone(),
            event: t.event.clone(),
        })
        .collect();
    let Some(d) = &outcome.dry_run else {
        // The same decision as the one enforced, with its own level, reason, policy and
        // rule (a dry-run policy may deny what an enforced one denies too).
        let (allowed, level, reason, by) = match flow.dry_run_decision(engine)? {
            Decision::Allow { by, .. } => (true, None, Why::Allowed, by),
            Decision::Deny(d) => (false, Some(At(d.level)), Why::Denied(d.reason), d.by),
        };
        let (policy, rule) = match by {
            Some(r) => (engine.policy_id(r), engine.rule_name(r)),
            None => (None, None),
        };
        let (policy, rule) = (policy.map(str::to_string), rule.map(str::to_string));
        return Some(DryRunView {
            decision: Verdict::of(allowed),
            changed: false,
            level,
            reason: Cause::Filter(reason),
            policy,
            rule,
            authorizers: Vec::new(),
            not_called: Vec::new(),
            trace,
        });
    };
    let n = d.named(engine);
    Some(DryRunView {
        decision: Verdict::of(d.allowed),
        changed: d.changed,
        level: d.level.map(|l| At(Some(l))),
        reason: Cause::Filter(d.reason.map_or(Why::Allowed, Why::Denied)),
        policy: n.policy.map(str::to_string),
        rule: n.rule.map(str::to_string),
        authorizers: n
            .authorizers
            .iter()
            .map(|(policy, answer)| AuthorizerAnswer {
                policy: policy.to_string(),
                answer: answer.to_string(),
            })
            .collect(),
        not_called: n.not_called.iter().map(|p| p.to_string()).collect(),
        trace,
    })
}

/// The dry-run section of the text output.
pub(super) fn to_text(out: &mut String, d: &DryRunView) {
    let s = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let what = if d.changed {
        "differs from the decision enforced"
    } else {
        "the same as the decision enforced"
    };
    out.push_str(&format!(
        "dry run   {} at {} ({}): policy {}, rule {}; {what} (dry-run policies are never enforced)\n",
        d.decision.as_str().to_uppercase(),
        d.level.map_or("-", At::as_str),
        d.reason,
        s(&d.policy),
        s(&d.rule),
    ));
    for a in &d.authorizers {
        out.push_str(&format!(
            "dry run   authorizer for {} answered {} (recorded, not applied)\n",
            a.policy, a.answer
        ));
    }
    for p in &d.not_called {
        out.push_str(&format!(
            "dry run   authorizer for {p} not called (the Gateway level denied); taken as allowing\n"
        ));
    }
}
