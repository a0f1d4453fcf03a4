//! CEL conditions in policies (docs/semantics.md, "CEL"): `authorization.cel` and `when` on
//! rules and policies, with every error rule per action, and bundle loading that refuses a
//! bad expression naming its field.

use crate::common;

use std::collections::HashMap;

use common::*;
use mcp_access_engine::policy::{Decision, Reason};
use mcp_access_engine::request::Headers;
use mcp_access_engine::request::McpOp;
use serde_json::{json, Value};

fn allow_cel(name: &str, expr: &str) -> Value {
    json!({"name": name, "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
           "rules": [{"name": "cel", "authorization": {"cel": expr}}]})
}

fn deny_cel(name: &str, expr: &str) -> Value {
    json!({"name": name, "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny",
           "rules": [{"name": "cel", "authorization": {"cel": expr}}]})
}

fn decide(policies: Vec<Value>, req: &mcp_access_engine::request::Request) -> Decision {
    let e = engine(&bundle(policies, &["authz"]));
    let mut outcomes = HashMap::new();
    outcomes.insert("ext", deny(403));
    run(&e, req, &outcomes).0
}

fn reason(d: &Decision) -> Option<Reason> {
    match d {
        Decision::Deny(x) => Some(x.reason),
        Decision::Allow { .. } => None,
    }
}

const ERR: &str = "1 / 0 == 1";
const NONBOOL: &str = "request.mcp.params.name == 'x' ? true : request.method";

#[test]
fn kan_cel_scenarios() {
    let base =
        json!({"name": "allow-base-mcp", "authorization": {"mcp": {"baseProtocol": "Match"}}});
    let policy = |rules: Vec<Value>| {
        let mut all = rules;
        all.push(base.clone());
        json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
               "rules": all})
    };
    let cel = |n: &str, e: &str| json!({"name": n, "authorization": {"cel": e}});
    let macros = "request.path.startsWith('/mc') &&\nrequest.headers['mcp-protocol-version'].contains('2025') &&\nrequest.mcp.tool_name.matches('^get-[a-z]+$')";
    let with_version = |mut r: mcp_access_engine::request::Request| {
        r.headers.push("mcp-protocol-version", "2025-06-18");
        r
    };
    let init = request(
        McpOp::Call {
            method: "initialize".into(),
            param: None,
        },
        Some(ALPHA),
    );
    let scenarios: Vec<(Vec<Value>, &str, bool)> = vec![
        (
            vec![cel("r", "request.mcp.tool_name == 'get-sum'")],
            "get-sum",
            true,
        ),
        (
            vec![cel("r", "request.mcp.tool_name == 'get-sum'")],
            "add",
            false,
        ),
        (
            vec![
                cel("a", "request.mcp.tool_name == 'get-sum'"),
                cel("b", "request.mcp.tool_name == 'non-existent'"),
            ],
            "get-sum",
            true,
        ),
        (
            vec![
                cel("a", "request.mcp.tool_name == 'get-sum'"),
                cel("b", "request.mcp.tool_name == 'non-existent'"),
            ],
            "get-tiny",
            false,
        ),
        (vec![cel("r", macros)], "get-sum", true),
        (vec![cel("r", macros)], "echo", false),
        (
            vec![cel("r", "request.mcp.tool_name == 'non-existent'")],
            "get-sum",
            false,
        ),
    ];
    for (rules, tool, want) in scenarios {
        let p = policy(rules);
        assert_eq!(
            is_allow(&decide(vec![p.clone()], &with_version(call(tool)))),
            want,
            "{tool} {p}"
        );
        // The base protocol is admitted by the other rule: a CEL rule erring on it does not block it.
        assert!(is_allow(&decide(vec![p], &init)));
    }
}

#[test]
fn allow_rule_error_or_non_boolean_does_not_admit() {
    for e in [ERR, NONBOOL] {
        let d = decide(vec![allow_cel("a", e)], &call("x"));
        assert_eq!(reason(&d), Some(Reason::NotAllowed), "{e}");
    }
    assert!(is_allow(&decide(
        vec![allow_cel("a", "request.mcp.tool_name == 'x'")],
        &call("x")
    )));
}

#[test]
fn deny_rule_error_matches() {
    for e in [ERR, NONBOOL] {
        let d = decide(vec![deny_cel("d", e)], &call("x"));
        assert_eq!(reason(&d), Some(Reason::DenyPolicy), "{e}");
    }
    assert!(is_allow(&decide(
        vec![deny_cel("d", "request.mcp.tool_name == 'y'")],
        &call("x")
    )));
}

#[test]
fn external_auth_rule_error_selects() {
    let ext = |e: &str| {
        json!({"name": "ext", "level": "Backend", "targets": [{"name": "tools"}],
               "action": "ExternalAuth", "externalAuth": "authz",
               "rules": [{"name": "sel", "authorization": {"cel": e}}]})
    };
    // The authorizer denies whatever it is asked: a selected request is denied.
    assert_eq!(
        reason(&decide(vec![ext(ERR)], &call("x"))),
        Some(Reason::ExternalAuthDenied)
    );
    assert_eq!(
        reason(&decide(
            vec![ext("request.mcp.tool_name == 'x'")],
            &call("x")
        )),
        Some(Reason::ExternalAuthDenied)
    );
    assert!(is_allow(&decide(
        vec![ext("request.mcp.tool_name == 'y'")],
        &call("x")
    )));
}

#[test]
fn rule_when_scopes_a_rule() {
    let p = |w: &str, action: &str| {
        json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": action,
               "rules": [{"name": "r", "when": [w],
                          "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["x"]}]}}}]})
    };
    assert!(is_allow(&decide(
        vec![p("request.method == 'POST'", "Allow")],
        &call("x")
    )));
    assert_eq!(
        reason(&decide(
            vec![p("request.method == 'GET'", "Allow")],
            &call("x")
        )),
        Some(Reason::NotAllowed)
    );
    assert_eq!(
        reason(&decide(vec![p(ERR, "Allow")], &call("x"))),
        Some(Reason::NotAllowed)
    );
    assert_eq!(
        reason(&decide(
            vec![p("request.method == 'POST'", "Deny")],
            &call("x")
        )),
        Some(Reason::DenyPolicy)
    );
    assert!(is_allow(&decide(
        vec![p("request.method == 'GET'", "Deny")],
        &call("x")
    )));
    assert_eq!(
        reason(&decide(vec![p(ERR, "Deny")], &call("x"))),
        Some(Reason::DenyPolicy)
    );
}

#[test]
fn policy_when_decides_applicability() {
    let allow = |w: &str| {
        json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
               "when": [w], "rules": [{"name": "r", "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["x"]}]}}}]})
    };
    // false: the Allow policy does not apply, so the level is not default-deny.
    assert!(is_allow(&decide(
        vec![allow("request.port == 1")],
        &call("other")
    )));
    // true: it applies: only x.
    assert!(is_allow(&decide(
        vec![allow("request.port == 8443")],
        &call("x")
    )));
    assert_eq!(
        reason(&decide(vec![allow("request.port == 8443")], &call("other"))),
        Some(Reason::NotAllowed)
    );
    // error: it applies and admits nothing.
    assert_eq!(
        reason(&decide(vec![allow(ERR)], &call("x"))),
        Some(Reason::NotAllowed)
    );
    let deny = |w: &str| json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny", "when": [w]});
    assert!(is_allow(&decide(
        vec![deny("request.port == 1")],
        &call("x")
    )));
    assert_eq!(
        reason(&decide(vec![deny("request.port == 8443")], &call("x"))),
        Some(Reason::DenyPolicy)
    );
    assert_eq!(
        reason(&decide(vec![deny(ERR)], &call("x"))),
        Some(Reason::DenyPolicy)
    );
    let ext = |w: &str| {
        json!({"name": "ext", "level": "Backend", "targets": [{"name": "tools"}],
               "action": "ExternalAuth", "externalAuth": "authz", "when": [w]})
    };
    assert!(is_allow(&decide(
        vec![ext("request.port == 1")],
        &call("x")
    )));
    assert_eq!(
        reason(&decide(vec![ext(ERR)], &call("x"))),
        Some(Reason::ExternalAuthDenied)
    );
}

#[test]
fn step_budget_exhaustion_counts_against_the_caller() {
    let ten = "[0,1,2,3,4,5,6,7,8,9]";
    let heavy = format!("{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, true))))");
    let d = decide(vec![allow_cel("a", &heavy)], &call("x"));
    assert_eq!(reason(&d), Some(Reason::NotAllowed));
    let d = decide(vec![deny_cel("d", &heavy)], &call("x"));
    assert_eq!(reason(&d), Some(Reason::DenyPolicy));
    let e = engine(&bundle(vec![allow_cel("a", &heavy)], &[]));
    let req = resolved(&e, &call("x"));
    let mut ev = e.begin(&req, true);
    let _ = ev.advance(&e, &req);
    assert_eq!(ev.cel_errors(), (1, 1));
    let rec = &ev.cel_records()[0];
    assert!(
        rec.result.as_ref().unwrap_err().contains("maxSteps"),
        "{rec:?}"
    );
}

#[test]
fn a_bad_expression_refuses_the_bundle_naming_the_field() {
    let cases = [
        (
            allow_cel("a", "request.nope == 1"),
            "policies[0].rules[0].authorization.cel",
            "unknown variable",
        ),
        (
            json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny",
                "when": ["true", "request.path.startsWith("]}),
            "policies[0].when[1]",
            "CEL line 1",
        ),
        (
            json!({"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
                "rules": [{"name": "r", "when": ["request.port == 'a'"]}]}),
            "policies[0].rules[0].when[0]",
            "type error",
        ),
    ];
    for (p, path, what) in cases {
        let err = mcp_access_engine::policy::Engine::from_json(
            bundle(vec![p], &[]).to_string().as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(path) && err.contains(what), "{err}");
    }
    let mut b = bundle(vec![allow_cel("a", "true")], &[]);
    b["limits"] = json!({"cel": {"maxSteps": 0}});
    let err = mcp_access_engine::policy::Engine::from_json(b.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.cel.maxSteps"), "{err}");
}

/// The engine takes the conditions validation compiled; one it is not handed is an error
/// naming it (never a panic, never a condition that holds).
#[test]
fn the_engine_runs_the_conditions_validation_compiled() {
    let b = bundle(vec![allow_cel("a", "request.port == 8443")], &[]);
    let mut valid = mcp_access_bundle::parse_bundle(b.to_string().as_bytes()).unwrap();
    assert!(mcp_access_engine::policy::Engine::compile(
        mcp_access_bundle::parse_bundle(b.to_string().as_bytes()).unwrap()
    )
    .is_ok());
    drop(valid.take_conditions());
    let err = mcp_access_engine::policy::Engine::compile(valid)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("policies[0].rules[0].authorization.cel")
            && err.contains("no compiled CEL condition"),
        "{err}"
    );
}

#[test]
fn tool_arguments_reach_cel_through_the_flow() {
    use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
    use mcp_access_engine::request::Caller;
    let e = engine(&bundle(
        vec![allow_cel(
            "args",
            "request.mcp.tool_name == 'weather' && request.mcp.params.arguments.city in ['Paris', 'Rome'] && request.time.getFullYear() == 2026",
        )],
        &[],
    ));
    assert!(e.cel_needs().params && e.cel_needs().time);
    let run = |city: &str, time: Option<i64>| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"weather","arguments":{{"city":"{city}"}}}}}}"#
        );
        let mut flow = RequestFlow::new();
        let input = HeadersInput {
            headers: Headers::from(vec![
                (":method", "POST"),
                (":path", "/mcp"),
                (":authority", "gw.example.org"),
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ]),
            end_of_stream: false,
            time,
            peers: None,
            port: 8443,
            route_name: Some("tools-route".into()),
            cluster_name: None,
            caller: Caller::default(),
        };
        assert_eq!(flow.on_headers(&e, input).next, Next::Hold);
        let len = body.len();
        let allowed = matches!(
            flow.on_body(&e, len, true, move |_| Some(body.into_bytes()))
                .next,
            Next::Allow { .. }
        );
        let record = flow.outcome().map(|o| o.to_json(&e)).unwrap_or_default();
        let record: serde_json::Value = serde_json::from_str(&record).unwrap();
        (allowed, record)
    };
    let t2026 = Some(1_767_323_045_000_000_000);
    let (allowed, record) = run("Paris", t2026);
    assert!(allowed);
    // The record holds the time CEL read, and says it does not hold the params (arguments
    // are not recorded here): a replay decides at that time, and does not guess the params.
    assert_eq!(
        record["request"]["time"],
        serde_json::json!(t2026),
        "{record}"
    );
    let unrecorded = &record["request"]["unrecorded"];
    assert_eq!(
        unrecorded,
        &serde_json::json!(["request.mcp.params"]),
        "{record}"
    );
    assert!(!run("Oslo", t2026).0);
    // No request.time from the host: an error, which an Allow rule resolves as "no".
    assert!(!run("Paris", None).0);
}

#[test]
fn rules_indexed_by_the_tools_their_cel_requires_decide_as_unindexed_ones() {
    let init = request(
        McpOp::Call {
            method: "initialize".into(),
            param: None,
        },
        Some(ALPHA),
    );
    let allow = allow_cel(
        "a",
        "request.method == 'POST' && request.mcp.tool_name in ['a', 'b']",
    );
    for (req, want) in [
        (call("a"), true),
        (call("b"), true),
        (call("c"), false),
        (init.clone(), false),
    ] {
        assert_eq!(
            is_allow(&decide(vec![allow.clone()], &req)),
            want,
            "{req:?}"
        );
    }
    // A Deny rule is not indexed: for initialize the tool name is absent, an error, so it matches.
    let deny = deny_cel("d", "request.mcp.tool_name == 'a'");
    assert_eq!(
        reason(&decide(vec![deny.clone()], &init)),
        Some(Reason::DenyPolicy)
    );
    assert!(is_allow(&decide(vec![deny], &call("b"))));
}
