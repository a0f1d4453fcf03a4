//! docs/semantics.md §3–§4 and the seeds' test vectors (see its Sources), row by row.
#![allow(clippy::type_complexity)]

use crate::common;

use std::collections::HashMap;

use common::*;
use mcp_access_bundle::Level;
use mcp_access_engine::policy::HeaderEdit;
use mcp_access_engine::policy::{AuthzOutcome, Decision, Engine, Reason, Step};
use mcp_access_engine::request::McpOp;
use serde_json::json;

/// One row of seed 000's tables. `None` = the step is not reached ("-").
struct Row {
    gw_ext: Option<bool>,
    gw_deny: Option<bool>,
    gw_inline: Option<bool>,
    be_ext: Option<bool>,
    be_deny: Option<bool>,
    be_inline: Option<bool>,
    allowed: bool,
}

/// Builds the policies so that each step gives the row's answer for a call of tool `t`, runs the
/// evaluation, and checks the result and that unreached steps were not consulted.
fn check_row(i: usize, row: &Row, with_deny: bool) {
    let mut policies = vec![
        ext("gw-ext", "Gateway", "gw", "gw-authz", 1),
        ext("be-ext", "Backend", "tools", "be-authz", 2),
        // "Allow" admits t; "Deny (none allows)" admits only u.
        inline_tools(
            "gw-inline",
            "Gateway",
            "gw",
            if row.gw_inline.unwrap_or(true) {
                &["t", "u"]
            } else {
                &["u"]
            },
        ),
        inline_tools(
            "be-inline",
            "Backend",
            "tools",
            if row.be_inline.unwrap_or(true) {
                &["t"]
            } else {
                &["u"]
            },
        ),
    ];
    if with_deny {
        // "Deny (any matches)" matches t; "Allow (no matches)" matches only v.
        let gw: &[&str] = if row.gw_deny == Some(true) {
            &["t"]
        } else {
            &["v"]
        };
        let be: &[&str] = if row.be_deny == Some(true) {
            &["t"]
        } else {
            &["v"]
        };
        policies.push(deny_tools("gw-deny", "Gateway", "gw", gw));
        policies.push(deny_tools("be-deny", "Backend", "tools", be));
    }
    let engine = engine(&bundle(policies, &["gw-authz", "be-authz"]));
    let outcome = |v: Option<bool>| {
        if v.unwrap_or(true) {
            allow()
        } else {
            deny(403)
        }
    };
    let outcomes = HashMap::from([
        ("gw-ext", outcome(row.gw_ext)),
        ("be-ext", outcome(row.be_ext)),
    ]);
    let (decision, batches) = run(&engine, &call("t"), &outcomes);
    assert_eq!(is_allow(&decision), row.allowed, "row {i}: {decision:?}");

    // The backend authorizer is consulted only if the whole gateway level allowed.
    let gateway_passed =
        row.gw_ext == Some(true) && row.gw_deny != Some(true) && row.gw_inline == Some(true);
    let expected: Vec<Vec<String>> = if gateway_passed {
        vec![vec!["gw-ext".into()], vec!["be-ext".into()]]
    } else {
        vec![vec!["gw-ext".into()]]
    };
    assert_eq!(batches, expected, "row {i}: authorizer calls");

    if let Decision::Deny(d) = &decision {
        let level = if gateway_passed {
            Level::Backend
        } else {
            Level::Gateway
        };
        assert_eq!(d.level, Some(level), "row {i}: level");
        let first_no = [
            (row.gw_ext, Reason::ExternalAuthDenied),
            (row.gw_deny.map(|x| !x), Reason::DenyPolicy),
            (row.gw_inline, Reason::NotAllowed),
            (row.be_ext, Reason::ExternalAuthDenied),
            (row.be_deny.map(|x| !x), Reason::DenyPolicy),
            (row.be_inline, Reason::NotAllowed),
        ]
        .into_iter()
        .find(|(v, _)| *v == Some(false))
        .map(|(_, r)| r);
        assert_eq!(Some(d.reason), first_no, "row {i}: reason");
    }
}

const Y: Option<bool> = Some(true);
const N: Option<bool> = Some(false);
const X: Option<bool> = None;

/// Columns as in seed 000: gateway ExternalAuth, DENY, InlineTools; backend ExternalAuth, DENY,
/// InlineTools. Y = allow / no match, N = deny / match, X = not reached ("-").
fn row(c: [Option<bool>; 6], allowed: bool) -> Row {
    let [gw_ext, gw_deny, gw_inline, be_ext, be_deny, be_inline] = c;
    // In the DENY columns the table's "Deny (any matches)" is our `Some(true)` match.
    let flip = |v: Option<bool>| v.map(|x| !x);
    Row {
        gw_ext,
        gw_deny: flip(gw_deny),
        gw_inline,
        be_ext,
        be_deny: flip(be_deny),
        be_inline,
        allowed,
    }
}

#[test]
fn seed_000_summary_table_without_deny() {
    #[rustfmt::skip]
    let rows = [
        row([N, X, X, X, X, X], false),
        row([Y, X, N, X, X, X], false),
        row([Y, X, Y, N, X, X], false),
        row([Y, X, Y, Y, X, N], false),
        row([Y, X, Y, Y, X, Y], true),
    ];
    for (i, r) in rows.iter().enumerate() {
        check_row(i + 1, r, false);
    }
}

#[test]
fn seed_000_summary_table_with_deny() {
    #[rustfmt::skip]
    let rows = [
        row([N, X, X, X, X, X], false),
        row([Y, N, X, X, X, X], false),
        row([Y, Y, N, X, X, X], false),
        row([Y, Y, Y, N, X, X], false),
        row([Y, Y, Y, Y, N, X], false),
        row([Y, Y, Y, Y, Y, N], false),
        row([Y, Y, Y, Y, Y, Y], true),
    ];
    for (i, r) in rows.iter().enumerate() {
        check_row(i + 1, r, true);
    }
}

/// Seed 000's example: two ExternalAuth and two InlineTools policies at each level.
fn eight_policies(order_reversed: bool) -> serde_json::Value {
    let mut p = vec![
        ext("gateway-policy-external-auth-1", "Gateway", "gw", "a1", 10),
        ext("gateway-policy-external-auth-2", "Gateway", "gw", "a2", 20),
        inline_tools(
            "gateway-policy-inline-tools-1",
            "Gateway",
            "gw",
            &["pay", "refund"],
        ),
        inline_tools(
            "gateway-policy-inline-tools-2",
            "Gateway",
            "gw",
            &["balance"],
        ),
        ext(
            "backend-policy-external-auth-1",
            "Backend",
            "tools",
            "b1",
            30,
        ),
        ext(
            "backend-policy-external-auth-2",
            "Backend",
            "tools",
            "b2",
            40,
        ),
        inline_tools(
            "backend-policy-inline-tools-1",
            "Backend",
            "tools",
            &["pay"],
        ),
        inline_tools(
            "backend-policy-inline-tools-2",
            "Backend",
            "tools",
            &["balance"],
        ),
    ];
    if order_reversed {
        p.reverse();
    }
    bundle(p, &["a1", "a2", "b1", "b2"])
}

#[test]
fn seed_000_eight_policy_example() {
    let all_allow: HashMap<&str, AuthzOutcome> = [
        "gateway-policy-external-auth-1",
        "gateway-policy-external-auth-2",
        "backend-policy-external-auth-1",
        "backend-policy-external-auth-2",
    ]
    .into_iter()
    .map(|n| (n, allow()))
    .collect();
    for reversed in [false, true] {
        let e = engine(&eight_policies(reversed));
        // pay: inline-1 at both levels admits; balance: inline-2 at both levels.
        for tool in ["pay", "balance"] {
            let (d, batches) = run(&e, &call(tool), &all_allow);
            assert!(is_allow(&d), "{tool}: {d:?}");
            // Both gateway authorizers in one batch (parallel), then both backend ones.
            assert_eq!(batches.len(), 2);
            assert_eq!(batches[0].len(), 2);
            assert!(batches[1].iter().all(|n| n.starts_with("backend")));
        }
        // refund: a gateway inline policy admits it, no backend inline policy does.
        let (d, _) = run(&e, &call("refund"), &all_allow);
        match d {
            Decision::Deny(d) => {
                assert_eq!(
                    (d.level, d.reason),
                    (Some(Level::Backend), Reason::NotAllowed)
                )
            }
            other => panic!("refund: {other:?}"),
        }
        // transfer: no gateway inline policy admits it -> denied at the gateway.
        let (d, batches) = run(&e, &call("transfer"), &all_allow);
        match d {
            Decision::Deny(d) => {
                assert_eq!(
                    (d.level, d.reason),
                    (Some(Level::Gateway), Reason::NotAllowed)
                )
            }
            other => panic!("transfer: {other:?}"),
        }
        assert_eq!(batches.len(), 1, "backend authorizers never called");
        // One gateway authorizer denies: denied, whatever the order, backend not called.
        let mut one_denies = all_allow.clone();
        one_denies.insert("gateway-policy-external-auth-2", deny(401));
        let (d, batches) = run(&e, &call("pay"), &one_denies);
        match d {
            Decision::Deny(d) => {
                assert_eq!(d.reason, Reason::ExternalAuthDenied);
                assert_eq!(
                    d.by.and_then(|r| e.policy_id(r)),
                    Some("default/gateway-policy-external-auth-2")
                );
                assert_eq!(d.relay.as_ref().map(|r| r.status), Some(401));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(batches.len(), 1);
        // Both deny: the most senior denial is relayed.
        let mut both = one_denies.clone();
        both.insert("gateway-policy-external-auth-1", deny(403));
        let (d, _) = run(&e, &call("pay"), &both);
        match d {
            Decision::Deny(d) => {
                assert_eq!(
                    d.by.and_then(|r| e.policy_id(r)),
                    Some("default/gateway-policy-external-auth-1")
                )
            }
            other => panic!("{other:?}"),
        }
        // A backend authorizer denies.
        let mut be = all_allow.clone();
        be.insert("backend-policy-external-auth-1", deny(403));
        let (d, _) = run(&e, &call("pay"), &be);
        assert!(matches!(d, Decision::Deny(ref x) if x.level == Some(Level::Backend)));
    }
}

#[test]
fn seed_001_x_y_example_is_denied_at_the_gateway() {
    let e = engine(&bundle(
        vec![
            inline_tools("gw-x", "Gateway", "gw", &["x"]),
            inline_tools("be-y", "Backend", "tools", &["y"]),
        ],
        &[],
    ));
    let (d, _) = run(&e, &call("y"), &HashMap::new());
    match d {
        Decision::Deny(d) => {
            assert_eq!(
                (d.level, d.reason),
                (Some(Level::Gateway), Reason::NotAllowed)
            )
        }
        other => panic!("{other:?}"),
    }
    // x passes the gateway but the backend admits only y.
    let (d, _) = run(&e, &call("x"), &HashMap::new());
    assert!(matches!(d, Decision::Deny(ref x) if x.level == Some(Level::Backend)));
}

#[test]
fn no_policies_allow_everything_and_empty_tools_admit_no_call() {
    let e = engine(&bundle(vec![], &[]));
    assert!(is_allow(&run(&e, &call("anything"), &HashMap::new()).0));
    let e = engine(&bundle(
        vec![inline_tools("none", "Backend", "tools", &[])],
        &[],
    ));
    assert!(!is_allow(&run(&e, &call("anything"), &HashMap::new()).0));
    // ... but the base protocol still passes.
    let init = request(
        McpOp::Call {
            method: "initialize".into(),
            param: None,
        },
        Some(ALPHA),
    );
    assert!(is_allow(&run(&e, &init, &HashMap::new()).0));
}

#[test]
fn empty_rule_lists_are_rejected_and_omitted_rules_mean_all_traffic() {
    for action in ["Allow", "Deny", "ExternalAuth"] {
        let mut p = json!({"name": "p", "level": "Gateway", "targets": [{"name": "gw"}],
                           "action": action, "rules": []});
        if action == "ExternalAuth" {
            p["externalAuth"] = "a".into();
        }
        let err = Engine::from_json(bundle(vec![p], &["a"]).to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("policies[0].rules") && err.contains("omit `rules`"),
            "{action}: {err}"
        );
    }
    let init = request(
        McpOp::Call {
            method: "initialize".into(),
            param: None,
        },
        Some(ALPHA),
    );
    let all = |action: &str| {
        let mut p = json!({"name": "p", "level": "Gateway", "targets": [{"name": "gw"}],
                           "action": action});
        if action == "ExternalAuth" {
            p["externalAuth"] = "a".into();
        }
        engine(&bundle(vec![p], &["a"]))
    };
    assert!(is_allow(&run(&all("Allow"), &init, &HashMap::new()).0));
    assert!(!is_allow(&run(&all("Deny"), &init, &HashMap::new()).0));
    let no = HashMap::from([(
        "p",
        AuthzOutcome::Deny {
            status: 401,
            headers: vec![],
            body: vec![],
        },
    )]);
    let (d, calls) = run(&all("ExternalAuth"), &init, &no);
    assert_eq!(calls, [["p"]], "every request goes to the authorizer");
    assert!(!is_allow(&d));
}

#[test]
fn an_allow_stand_in_admits_nothing_but_other_allow_policies_still_admit() {
    let standin = json!({"name": "x.not-accepted", "level": "Gateway", "targets": [{"name": "gw"}],
                         "action": "Allow", "notAccepted": "Unsupported: CEL"});
    let init = request(
        McpOp::Call {
            method: "initialize".into(),
            param: None,
        },
        Some(ALPHA),
    );
    let e = engine(&bundle(vec![standin.clone()], &[]));
    assert!(!is_allow(&run(&e, &init, &HashMap::new()).0));
    let e = engine(&bundle(
        vec![standin.clone(), inline_tools("ok", "Gateway", "gw", &["t"])],
        &[],
    ));
    assert!(is_allow(&run(&e, &init, &HashMap::new()).0));
    assert!(!is_allow(&run(&e, &call("u"), &HashMap::new()).0));
    // A stand-in with rules, or one calling an authorizer, is not a bundle.
    let mut with_rules = standin.clone();
    with_rules["rules"] = json!([{"name": "r"}]);
    let mut ext = standin;
    ext["action"] = "ExternalAuth".into();
    ext["externalAuth"] = "a".into();
    for (p, field) in [(with_rules, "rules"), (ext, "notAccepted")] {
        let err = Engine::from_json(bundle(vec![p], &["a"]).to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("policies[0].{field}")), "{err}");
    }
}

#[test]
fn an_mcp_block_without_methods_admits_only_the_base_protocol() {
    let p = json!({"name": "base", "level": "Backend", "targets": [{"name": "tools"}],
                   "action": "Allow", "rules": [{"name": "base",
                       "authorization": {"mcp": {"baseProtocol": "Match"}}}]});
    let e = engine(&bundle(vec![p], &[]));
    assert!(!is_allow(&run(&e, &call("anything"), &HashMap::new()).0));
    for method in ["initialize", "tools/list", "prompts/list", "resources/list"] {
        let r = request(
            McpOp::Call {
                method: method.into(),
                param: None,
            },
            Some(ALPHA),
        );
        assert!(is_allow(&run(&e, &r, &HashMap::new()).0), "{method}");
    }
    for method in ["prompts/get", "resources/read", "resources/subscribe"] {
        let r = request(
            McpOp::Call {
                method: method.into(),
                param: Some("x".into()),
            },
            Some(ALPHA),
        );
        assert!(!is_allow(&run(&e, &r, &HashMap::new()).0), "{method}");
    }
    // With nothing listed and the base protocol skipped, it matches nothing: a Deny rule of
    // it denies nothing, an Allow rule of it admits nothing.
    for (action, allowed) in [("Deny", true), ("Allow", false)] {
        let inert = json!({"name": "inert", "level": "Backend", "targets": [{"name": "tools"}],
                           "action": action, "rules": [{"name": "r", "authorization": {"mcp": {}}}]});
        let e = engine(&bundle(vec![inert], &[]));
        for op in [
            McpOp::Call {
                method: "tools/call".into(),
                param: Some("x".into()),
            },
            McpOp::Call {
                method: "initialize".into(),
                param: None,
            },
        ] {
            let r = request(op, Some(ALPHA));
            assert_eq!(
                is_allow(&run(&e, &r, &HashMap::new()).0),
                allowed,
                "{action}"
            );
        }
    }
}

#[test]
fn section_name_limits_a_gateway_policy_to_one_listener() {
    let p = json!({"name": "internal-only", "level": "Gateway",
                   "targets": [{"name": "gw", "sectionName": "internal"}],
                   "action": "Deny"});
    let e = engine(&bundle(vec![p], &[]));
    let mut req = call("t");
    assert!(is_allow(&run(&e, &req, &HashMap::new()).0));
    req.port = 9443;
    assert!(!is_allow(&run(&e, &req, &HashMap::new()).0));
}

#[test]
fn unknown_listener_and_backend_fail_closed() {
    let e = engine(&bundle(vec![], &[]));
    let mut req = call("t");
    req.port = 1;
    match run(&e, &req, &HashMap::new()).0 {
        Decision::Deny(d) => assert_eq!(d.reason, Reason::UnknownListener),
        d => panic!("{d:?}"),
    }
    let mut req = call("t");
    req.route_name = Some("nope".into());
    req.cluster_name = Some("nope".into());
    match run(&e, &req, &HashMap::new()).0 {
        Decision::Deny(d) => assert_eq!(d.reason, Reason::UnknownBackend),
        d => panic!("{d:?}"),
    }
    // Recognised by cluster when the route is unknown.
    req.cluster_name = Some("other-cluster".into());
    assert!(is_allow(&run(&e, &req, &HashMap::new()).0));
}

#[test]
fn sources_spiffe_service_account_and_any() {
    let p = json!({"name": "who", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
    "rules": [
        {"name": "alpha-by-sa", "source": {"type": "ServiceAccount",
            "serviceAccount": {"namespace": "agents", "name": "alpha"}},
         "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]}]}}},
        {"name": "beta-by-id", "source": {"type": "SPIFFE", "spiffe": BETA},
         "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}
    ]});
    let e = engine(&bundle(vec![p], &[]));
    let mut req = call("echo");
    assert!(is_allow(&run(&e, &req, &HashMap::new()).0));
    req.caller.spiffe = Some(BETA.into());
    assert!(is_allow(&run(&e, &req, &HashMap::new()).0));
    req.caller.spiffe = None;
    assert!(!is_allow(&run(&e, &req, &HashMap::new()).0));
    // beta may call any tool but alpha only echo.
    let mut other = call("delete_repo");
    assert!(!is_allow(&run(&e, &other, &HashMap::new()).0));
    other.caller.spiffe = Some(BETA.into());
    assert!(is_allow(&run(&e, &other, &HashMap::new()).0));
}

#[test]
fn authorizer_failure_follows_failure_mode() {
    let mut b = bundle(vec![ext("gw-ext", "Gateway", "gw", "a", 0)], &["a"]);
    let err = AuthzOutcome::Error {
        detail: "timeout".into(),
    };
    let e = engine(&b);
    match run(&e, &call("t"), &HashMap::from([("gw-ext", err.clone())])).0 {
        Decision::Deny(d) => assert_eq!(d.reason, Reason::AuthorizerFailed),
        d => panic!("{d:?}"),
    }
    b["authorizers"][0]["failureMode"] = "Allow".into();
    let e = engine(&b);
    assert!(is_allow(
        &run(&e, &call("t"), &HashMap::from([("gw-ext", err)])).0
    ));
}

#[test]
fn external_auth_rules_select_which_requests_are_sent() {
    let mut p = ext("only-delete", "Gateway", "gw", "a", 0);
    p["rules"] = json!([{"name": "deletes", "authorization": {"mcp": {
        "methods": [{"name": "tools/call", "params": ["delete_repo"]}]}}}]);
    let e = engine(&bundle(vec![p], &["a"]));
    let outcomes = HashMap::from([("only-delete", deny(403))]);
    let (d, batches) = run(&e, &call("echo"), &outcomes);
    assert!(is_allow(&d));
    assert!(batches.is_empty());
    let (d, batches) = run(&e, &call("delete_repo"), &outcomes);
    assert!(!is_allow(&d));
    assert_eq!(batches.len(), 1);
}

#[test]
fn authorizer_headers_are_collected_in_evaluation_order() {
    let e = engine(&bundle(
        vec![
            ext("g", "Gateway", "gw", "a", 0),
            ext("b", "Backend", "tools", "b", 0),
        ],
        &["a", "b"],
    ));
    let outcomes = HashMap::from([
        (
            "g",
            AuthzOutcome::Allow {
                headers: vec![HeaderEdit::set("x-user", "g")],
            },
        ),
        (
            "b",
            AuthzOutcome::Allow {
                headers: vec![HeaderEdit::set("x-user", "b")],
            },
        ),
    ]);
    match run(&e, &call("t"), &outcomes).0 {
        Decision::Allow { add_headers, .. } => assert_eq!(
            add_headers,
            vec![
                HeaderEdit::set("x-user", "g"),
                HeaderEdit::set("x-user", "b")
            ]
        ),
        d => panic!("{d:?}"),
    }
}

#[test]
fn large_bundle_decides_by_lookup() {
    // 1,000 Allow policies with 10 tools each on one backend: 10,000 tools.
    let policies: Vec<_> = (0..1000)
        .map(|p| {
            let tools: Vec<String> = (0..10).map(|t| format!("tool-{p}-{t}")).collect();
            let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            inline_tools(&format!("p{p}"), "Backend", "tools", &tools)
        })
        .collect();
    let e = engine(&bundle(policies, &[]));
    let (d, _) = run(&e, &call("tool-999-9"), &HashMap::new());
    assert!(is_allow(&d));
    let (d, _) = run(&e, &call("tool-1000-0"), &HashMap::new());
    assert!(!is_allow(&d));
    // The admitting rule is reported: the one policy that names the tool.
    let req = resolved(&e, &call("tool-500-3"));
    let mut ev = e.begin(&req, true);
    let Step::Done(_) = ev.advance(&e, &req) else {
        panic!()
    };
    let admitted = ev
        .trace()
        .iter()
        .find(|t| t.event.to_string() == "admitted")
        .unwrap();
    assert_eq!(admitted.policy.as_deref(), Some("default/p500"));
}
