//! Dry-run policies (docs/semantics.md §3.8): the decision a request gets is the one it gets
//! without them; the dry-run decision is the one it gets with them enforced; authorizers both
//! consult are called once; a dry-run authorizer's answer is never applied.

use std::collections::HashMap;

use crate::common;

use common::*;
use mcp_access_engine::flow::{drive, Next, Outcome, Reply, RequestFlow};
use mcp_access_engine::policy::{DryRunRecord, Engine, Reason, View};
use mcp_access_engine::request::Headers;
use mcp_access_engine::stats::{self, Counter};
use serde_json::{json, Value};

/// A policy of mode `mode`.
fn with_mode(mut p: Value, mode: &str) -> Value {
    p["mode"] = json!(mode);
    p
}

fn call_body(tool: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#)
}

/// An outcome with what its engine names it by: the deciding policy and rule, its dry run
/// named, and its JSON.
#[derive(Debug)]
struct Decided {
    outcome: Outcome,
    policy: Option<String>,
    rule: Option<String>,
    dry_run: Option<DryRunShown>,
    json: String,
}

/// A dry-run record with its names, as the decision record shows them.
#[derive(Debug, Clone)]
struct DryRunShown {
    record: DryRunRecord,
    policy: Option<String>,
    rule: Option<String>,
    authorizers: Vec<(String, String)>,
    not_called: Vec<String>,
}

impl std::ops::Deref for DryRunShown {
    type Target = DryRunRecord;
    fn deref(&self) -> &DryRunRecord {
        &self.record
    }
}

impl std::ops::Deref for Decided {
    type Target = Outcome;
    fn deref(&self) -> &Outcome {
        &self.outcome
    }
}

impl Decided {
    fn of(e: &Engine, outcome: Outcome) -> Decided {
        let named = e.named(outcome.by);
        let dry_run = outcome.dry_run.as_ref().map(|d| {
            let n = d.named(e);
            DryRunShown {
                record: d.clone(),
                policy: n.policy.map(str::to_string),
                rule: n.rule.map(str::to_string),
                authorizers: (n.authorizers.iter())
                    .map(|(p, a)| (p.to_string(), a.to_string()))
                    .collect(),
                not_called: n.not_called.iter().map(|p| p.to_string()).collect(),
            }
        });
        Decided {
            policy: named.policy.map(str::to_string),
            rule: named.rule.map(str::to_string),
            dry_run,
            json: outcome.to_json(e),
            outcome,
        }
    }

    fn to_json(&self) -> String {
        self.json.clone()
    }
}

/// One POST from ALPHA through the flow, each authorizer answering as `answers` says (by
/// authorizer name; 200 when unnamed): the outcome, what the flow did, and the authorizers
/// called in order.
fn through(e: &Engine, body: &str, answers: &HashMap<&str, Reply>) -> (Decided, Next, Vec<String>) {
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, post_input(ALPHA, &[])).next, Next::Hold);
    let owned = body.as_bytes().to_vec();
    let a = flow
        .on_body(e, owned.len(), true, move |_| Some(owned))
        .next;
    let mut called = Vec::new();
    let next = drive(&mut flow, e, a, |c| {
        let name = c.authorizer(e).unwrap().name.clone();
        called.push(name.clone());
        answers
            .get(name.as_str())
            .cloned()
            .unwrap_or(Reply::status(200))
    });
    (
        Decided::of(e, flow.outcome().cloned().unwrap()),
        next,
        called,
    )
}

/// The bundle with each dry-run policy left out (`Enforced`) or enforced (`DryRun`).
fn as_view(b: &Value, view: View) -> Value {
    let mut b = b.clone();
    let policies: Vec<Value> = b["policies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let mode = p["mode"].as_str().unwrap_or("Enforce");
            let keep = match view {
                View::Enforced => mode != "DryRun",
                View::DryRun => mode != "EnforceOnly",
            };
            let mut p = p.clone();
            p.as_object_mut().unwrap().remove("mode");
            keep.then_some(p)
        })
        .collect();
    b["policies"] = json!(policies);
    b
}

/// (allowed, level, reason, policy, rule) of an outcome.
fn summary(o: &Decided) -> (bool, Option<&'static str>, &'static str, Option<String>) {
    (
        o.allowed,
        o.level.map(|l| l.as_str()),
        o.reason.as_str(),
        o.policy.clone(),
    )
}

/// Checks the defining property on `body`: the enforced decision is the one of the bundle
/// without its dry-run policies; the dry-run decision is the one with them enforced. Returns
/// the outcome.
fn check(b: &Value, body: &str, answers: &HashMap<&str, Reply>) -> Decided {
    let (got, _, _) = through(&engine(b), body, answers);
    let (without, _, _) = through(&engine(&as_view(b, View::Enforced)), body, answers);
    let (with, _, _) = through(&engine(&as_view(b, View::DryRun)), body, answers);
    assert_eq!(
        summary(&got),
        summary(&without),
        "{body}: enforced decision"
    );
    assert_eq!(got.rule, without.rule, "{body}");
    let dry = got.dry_run.clone();
    let (allowed, level, reason) = match &dry {
        Some(d) => (d.allowed, if d.allowed { None } else { d.level }, d.reason),
        None => (got.allowed, got.level, got.reason_denied()),
    };
    assert_eq!(allowed, with.allowed, "{body}: dry-run decision {dry:?}");
    if !allowed {
        assert_eq!(level, with.level, "{body}: {dry:?}");
        assert_eq!(reason, with.reason_denied(), "{body}: {dry:?}");
    }
    assert_eq!(
        dry.as_ref().is_some_and(|d| d.changed),
        got.allowed != with.allowed,
        "{body}: {dry:?}"
    );
    got
}

trait Denied {
    fn reason_denied(&self) -> Option<Reason>;
}

impl Denied for Outcome {
    fn reason_denied(&self) -> Option<Reason> {
        match self.reason {
            mcp_access_engine::answer::Why::Denied(r) => Some(r),
            _ => None,
        }
    }
}

#[test]
fn a_dry_run_deny_reports_what_it_would_deny_and_denies_nothing() {
    let b = bundle(
        vec![
            inline_tools("tools-allow", "Backend", "tools", &["echo", "rm"]),
            with_mode(deny_tools("no-rm", "Backend", "tools", &["rm"]), "DryRun"),
        ],
        &[],
    );
    let none = HashMap::new();
    let rm = check(&b, &call_body("rm"), &none);
    assert!(rm.allowed);
    let d = rm.dry_run.clone().unwrap();
    assert!(d.changed && !d.allowed);
    assert_eq!(d.reason, Some(Reason::DenyPolicy));
    assert_eq!(d.policy.as_deref(), Some("default/no-rm"));
    assert_eq!(d.rule.as_deref(), Some("tools"));
    assert_eq!(d.counter, Some(0));
    // What it does not match is not reported.
    let echo = check(&b, &call_body("echo"), &none);
    assert!(echo.allowed && echo.dry_run.is_none());
    // Both sides denied (the enforced Allow admits no `cat`): nothing changes.
    let cat = check(&b, &call_body("cat"), &none);
    assert!(!cat.allowed && cat.dry_run.is_none());
    // In the decision's JSON.
    let json: Value = serde_json::from_str(&rm.to_json()).unwrap();
    assert_eq!(json["decision"], "allow");
    assert_eq!(
        json["dry_run"],
        json!({"decision": "deny", "level": "backend", "reason": "deny_policy",
               "policy": "default/no-rm", "rule": "tools", "authorizers": [], "not_called": []})
    );
    let plain: Value = serde_json::from_str(&echo.to_json()).unwrap();
    assert_eq!(plain["dry_run"], Value::Null);
}

#[test]
fn a_dry_run_allow_policy_makes_its_level_default_deny_in_the_dry_run_only() {
    let b = bundle(
        vec![with_mode(
            inline_tools("gw-only-echo", "Gateway", "gw", &["echo"]),
            "DryRun",
        )],
        &[],
    );
    let none = HashMap::new();
    let rm = check(&b, &call_body("rm"), &none);
    assert!(rm.allowed);
    let d = rm.dry_run.clone().unwrap();
    assert_eq!(
        (d.allowed, d.level.map(|l| l.as_str())),
        (false, Some("gateway"))
    );
    assert_eq!(d.reason, Some(Reason::NotAllowed));
    // No rule denied: the dry-run Allow policy that made the level default-deny is named.
    assert_eq!(d.policy.as_deref(), Some("default/gw-only-echo"));
    assert_eq!(d.rule, None);
    assert!(check(&b, &call_body("echo"), &none).dry_run.is_none());
}

#[test]
fn a_dry_run_allow_reports_the_admission_no_enforced_rule_gives() {
    let b = bundle(
        vec![
            inline_tools("gw-echo", "Gateway", "gw", &["echo"]),
            with_mode(inline_tools("gw-add", "Gateway", "gw", &["add"]), "DryRun"),
        ],
        &[],
    );
    let none = HashMap::new();
    let add = check(&b, &call_body("add"), &none);
    assert!(!add.allowed);
    assert_eq!(add.reason_denied(), Some(Reason::NotAllowed));
    let d = add.dry_run.clone().unwrap();
    assert!(d.changed && d.allowed && d.reason.is_none());
    assert_eq!(d.level.map(|l| l.as_str()), Some("gateway"));
    assert_eq!(d.policy.as_deref(), Some("default/gw-add"));
    assert_eq!(d.rule.as_deref(), Some("tools"));
    assert_eq!(stats::dry_run_total(&d), Some(Counter::DryRunWouldAllow));
    let names = stats::dry_run_counter_names(&engine(&b));
    assert_eq!(
        names,
        [
            "mcp_access.dry_run.policy.default/gw-add.would_deny",
            "mcp_access.dry_run.policy.default/gw-add.would_allow"
        ]
    );
    assert_eq!(stats::dry_run_counter(&d), Some(1));
    // Echo passes both ways; the enforced allow names the enforced rule.
    let echo = check(&b, &call_body("echo"), &none);
    assert!(echo.allowed && echo.dry_run.is_none());
    assert_eq!(echo.policy.as_deref(), Some("default/gw-echo"));
}

#[test]
fn a_dry_run_authorizer_is_called_and_never_enforced() {
    let mut b = bundle(
        vec![
            ext("risk", "Gateway", "gw", "risk", 1),
            with_mode(ext("dry-risk", "Backend", "tools", "dry-risk", 2), "DryRun"),
        ],
        &["risk", "dry-risk"],
    );
    b["authorizers"][1]["allowedResponseHeaders"] = json!(["x-dry"]);
    let dry_denies = HashMap::from([("dry-risk", Reply::status(403))]);
    let out = check(&b, &call_body("echo"), &dry_denies);
    assert!(out.allowed);
    let d = out.dry_run.clone().unwrap();
    assert_eq!(d.reason, Some(Reason::ExternalAuthDenied));
    assert_eq!(d.policy.as_deref(), Some("default/dry-risk"));
    assert_eq!(
        d.authorizers,
        [("default/dry-risk".to_string(), "deny 403".to_string())]
    );
    // Each authorizer once, the enforced one first (Gateway, then Backend).
    let (_, next, called) = through(&engine(&b), &call_body("echo"), &dry_denies);
    assert_eq!(called, ["risk", "dry-risk"]);
    assert!(added(&next).is_some_and(|h| h.iter().all(|e| e.name != "x-dry")));
    // An allowing dry-run authorizer's headers are not applied; its answer is recorded.
    let allows = HashMap::from([(
        "dry-risk",
        Reply::Http {
            status: Some(200),
            headers: Headers::from(vec![("x-dry", "1")]),
            body: Vec::new(),
        },
    )]);
    let (out, next, _) = through(&engine(&b), &call_body("echo"), &allows);
    assert_eq!(added(&next), Some(Vec::new()));
    let d = out.dry_run.clone().unwrap();
    assert!(!d.changed && d.allowed && d.counter.is_none());
    assert_eq!(
        d.authorizers,
        [("default/dry-risk".to_string(), "allow".to_string())]
    );
    // Its failure too: recorded, and the dry-run decision follows its failure mode.
    let fails = HashMap::from([("dry-risk", Reply::status(503))]);
    let out = check(&b, &call_body("echo"), &fails);
    assert!(out.allowed);
    let d = out.dry_run.clone().unwrap();
    assert_eq!(d.reason, Some(Reason::AuthorizerFailed));
    assert!(d.authorizers[0].1.starts_with("error"), "{d:?}");
}

#[test]
fn an_authorizer_both_decisions_consult_is_called_once() {
    let b = bundle(
        vec![
            ext("risk", "Gateway", "gw", "risk", 1),
            with_mode(deny_tools("no-rm", "Gateway", "gw", &["rm"]), "DryRun"),
        ],
        &["risk"],
    );
    let denies = HashMap::from([("risk", Reply::status(401))]);
    let (out, _, called) = through(&engine(&b), &call_body("rm"), &denies);
    assert_eq!(called, ["risk"]);
    assert_eq!(out.reason_denied(), Some(Reason::ExternalAuthDenied));
    assert!(out.dry_run.is_none(), "both deny: nothing to report");
    let (out, _, called) = through(&engine(&b), &call_body("rm"), &HashMap::new());
    assert_eq!(called, ["risk"]);
    assert!(out.allowed && out.dry_run.clone().unwrap().changed);
}

#[test]
fn no_backend_authorizer_is_called_after_an_enforced_gateway_denial() {
    let b = bundle(
        vec![
            inline_tools("gw-echo", "Gateway", "gw", &["echo"]),
            with_mode(inline_tools("gw-add", "Gateway", "gw", &["add"]), "DryRun"),
            ext("risk", "Backend", "tools", "risk", 3),
        ],
        &["risk"],
    );
    let (out, _, called) = through(&engine(&b), &call_body("add"), &HashMap::new());
    assert!(called.is_empty(), "{called:?}");
    let d = out.dry_run.clone().unwrap();
    assert!(d.changed && d.allowed);
    assert_eq!(d.not_called, ["default/risk"]);
    // Where the Gateway lets the request on, the Backend authorizer is called once.
    let (_, _, called) = through(&engine(&b), &call_body("echo"), &HashMap::new());
    assert_eq!(called, ["risk"]);
}

#[test]
fn enforce_only_policies_decide_and_are_left_out_of_the_dry_run() {
    let b = bundle(
        vec![
            with_mode(
                inline_tools("lower", "Backend", "tools", &["echo"]),
                "EnforceOnly",
            ),
            with_mode(
                inline_tools("override", "Backend", "tools", &["add"]),
                "DryRun",
            ),
        ],
        &[],
    );
    let none = HashMap::new();
    let echo = check(&b, &call_body("echo"), &none);
    assert!(echo.allowed);
    let d = echo.dry_run.clone().unwrap();
    assert_eq!(d.reason, Some(Reason::NotAllowed));
    assert_eq!(d.policy.as_deref(), Some("default/override"));
    let add = check(&b, &call_body("add"), &none);
    assert!(!add.allowed && add.dry_run.clone().unwrap().allowed);
    // EnforceOnly is for Backend-level policies only.
    let bad = bundle(
        vec![with_mode(
            inline_tools("g", "Gateway", "gw", &["echo"]),
            "EnforceOnly",
        )],
        &[],
    );
    let err = Engine::from_json(bad.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("policies[0].mode"), "{err}");
}

#[test]
fn requests_no_dry_run_policy_concerns_are_decided_once() {
    // The dry-run policy is on backend `other`: a request to `tools` has no dry-run decision.
    let b = bundle(
        vec![with_mode(
            deny_tools("no-rm", "Backend", "other", &["rm"]),
            "DryRun",
        )],
        &[],
    );
    let e = engine(&b);
    let req = resolved(&e, &call("rm"));
    let ev = e.begin(&req, false);
    assert!(ev.dry_run_decision().is_none());
    let (out, _, _) = through(&e, &call_body("rm"), &HashMap::new());
    assert!(out.allowed && out.dry_run.is_none());
}

#[test]
fn listings_are_filtered_by_the_enforced_decision_only() {
    let b = bundle(
        vec![with_mode(
            deny_tools("no-rm", "Backend", "tools", &["rm"]),
            "DryRun",
        )],
        &[],
    );
    let e = engine(&b);
    let probe = resolved(&e, &call("rm"));
    assert!(e.item_denial(&probe).is_none());
    assert!(e.item_denial_in(View::DryRun, &probe).is_some());
}

#[test]
fn items_a_request_names_are_judged_in_the_dry_run_too() {
    let b = bundle(
        vec![with_mode(
            json!({"name": "no-secret-prompt", "level": "Backend", "targets": [{"name": "tools"}],
                   "action": "Deny", "rules": [{"name": "p", "authorization": {"mcp": {
                       "methods": [{"name": "prompts/get", "params": ["secret"]}]}}}]}),
            "DryRun",
        )],
        &[],
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"secret"},"argument":{"name":"a","value":"b"}}}"#;
    let out = check(&b, body, &HashMap::new());
    assert!(out.allowed);
    let d = out.dry_run.clone().unwrap();
    assert!(!d.allowed && d.changed);
    assert_eq!(d.policy.as_deref(), Some("default/no-secret-prompt"));
}
