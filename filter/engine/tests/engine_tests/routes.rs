//! Route-scoped Backend-level policies (docs/semantics.md §1.6): a policy whose backend
//! target lists routes applies only to requests the backend was recognised through one of
//! them; where the filter cannot tell (a cluster name its routes may share), a route-scoped
//! Allow policy keeps the level default-deny.

use std::collections::HashMap;

use crate::common::*;
use mcp_access_engine::policy::{Decision, Engine, Reason};
use mcp_access_engine::request::{McpOp, Request};
use serde_json::{json, Value};

/// Gateway `gw` (listeners `https` :8443, `internal` :9443); backend `tools` reached through
/// routes `admin` and `public` (and its cluster `tools-cluster`, for route names the bundle
/// does not list), backend `eg` recognised by the per-rule clusters `rule-0` and `rule-1`.
fn routed(policies: Vec<Value>) -> Engine {
    engine(&json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "listeners": [
            {"name": "https", "port": 8443}, {"name": "internal", "port": 9443}]}],
        "backends": [
            {"name": "tools", "routeNames": ["admin", "public"], "clusterNames": ["tools-cluster"]},
            {"name": "eg", "clusterNames": ["rule-0", "rule-1"]}
        ],
        "authorizers": [{"name": "risk", "cluster": "risk-cluster"}],
        "policies": policies,
    }))
}

/// `policy` with its target narrowed to `routes`.
fn scoped(mut policy: Value, routes: &[&str]) -> Value {
    policy["targets"][0]["routes"] = json!(routes);
    policy
}

/// A call of `tool` on port `port` that Envoy routed by `route` to `cluster`.
fn via(tool: &str, route: Option<&str>, cluster: Option<&str>, port: u16) -> Request {
    let mut r = call(tool);
    r.route_name = route.map(str::to_string);
    r.cluster_name = cluster.map(str::to_string);
    r.port = port;
    r
}

fn decide(e: &Engine, req: &Request) -> Decision {
    run(e, req, &HashMap::from([("risk-check", deny(403))])).0
}

fn denied_by(e: &Engine, d: &Decision) -> Option<(Reason, Option<String>)> {
    match d {
        Decision::Deny(d) => Some((
            d.reason,
            d.by.and_then(|r| e.policy_id(r)).map(str::to_string),
        )),
        Decision::Allow { .. } => None,
    }
}

#[test]
fn a_route_scoped_deny_policy_applies_only_through_its_routes() {
    let e = routed(vec![scoped(
        deny_tools("no-add", "Backend", "tools", &["add"]),
        &["admin"],
    )]);
    let denied = Some((Reason::DenyPolicy, Some("default/no-add".to_string())));
    assert_eq!(
        denied_by(&e, &decide(&e, &via("add", Some("admin"), None, 8443))),
        denied
    );
    for (route, cluster) in [
        (Some("public"), None),
        // A route name the bundle does not list: recognised by the cluster, which is not
        // one of the policy's routes.
        (Some("unlisted"), Some("tools-cluster")),
        (None, Some("tools-cluster")),
    ] {
        let d = decide(&e, &via("add", route, cluster, 8443));
        assert!(is_allow(&d), "{route:?} {cluster:?}: {d:?}");
    }
}

#[test]
fn a_route_scoped_allow_policy_admits_only_through_its_routes_and_keeps_the_level_default_deny() {
    let only_echo = scoped(
        inline_tools("echo-only", "Backend", "tools", &["echo"]),
        &["admin"],
    );
    let e = routed(vec![only_echo.clone()]);
    assert!(is_allow(&decide(
        &e,
        &via("echo", Some("admin"), None, 8443)
    )));
    let not_allowed = Some((Reason::NotAllowed, None));
    assert_eq!(
        denied_by(&e, &decide(&e, &via("add", Some("admin"), None, 8443))),
        not_allowed
    );
    // Through another route the policy does not apply: with no other Allow policy there,
    // the level admits everything.
    assert!(is_allow(&decide(
        &e,
        &via("add", Some("public"), None, 8443)
    )));
    // A request the filter cannot place (recognised by the backend's cluster, which the
    // policy's routes may use too): nothing admits it, and the scoped Allow policy keeps the
    // level default-deny.
    for route in [None, Some("unlisted")] {
        assert_eq!(
            denied_by(
                &e,
                &decide(&e, &via("echo", route, Some("tools-cluster"), 8443))
            ),
            not_allowed,
            "{route:?}"
        );
    }
    // Scoped by per-rule cluster names (Envoy Gateway): another rule's cluster is surely
    // another route.
    let eg = routed(vec![scoped(
        inline_tools("eg-echo", "Backend", "eg", &["echo"]),
        &["rule-0"],
    )]);
    assert_eq!(
        denied_by(&eg, &decide(&eg, &via("add", None, Some("rule-0"), 8443))),
        not_allowed
    );
    assert!(is_allow(&decide(
        &eg,
        &via("add", None, Some("rule-1"), 8443)
    )));
    // An Allow policy of the other route opens it, and only it.
    let mut all = json!({"name": "public-all", "level": "Backend", "action": "Allow",
        "targets": [{"name": "tools"}]});
    all = scoped(all, &["public"]);
    let e = routed(vec![only_echo.clone(), all]);
    assert!(is_allow(&decide(
        &e,
        &via("add", Some("public"), None, 8443)
    )));
    assert_eq!(
        denied_by(&e, &decide(&e, &via("add", Some("admin"), None, 8443))),
        not_allowed
    );
    assert_eq!(
        denied_by(
            &e,
            &decide(&e, &via("add", None, Some("tools-cluster"), 8443))
        ),
        not_allowed
    );
    // A `when` that does not hold: the policy does not apply, nor keep the level closed.
    let mut quiet = only_echo;
    quiet["when"] = json!(["false"]);
    let e = routed(vec![quiet]);
    assert!(is_allow(&decide(
        &e,
        &via("add", Some("public"), None, 8443)
    )));
}

#[test]
fn external_auth_is_called_only_through_its_routes() {
    let mut p = ext("risk-check", "Backend", "tools", "risk", 1);
    p = scoped(p, &["admin"]);
    let e = routed(vec![p]);
    let (d, calls) = run(
        &e,
        &via("echo", Some("admin"), None, 8443),
        &HashMap::from([("risk-check", deny(403))]),
    );
    assert_eq!(calls, vec![vec!["risk-check".to_string()]]);
    assert_eq!(
        denied_by(&e, &d),
        Some((
            Reason::ExternalAuthDenied,
            Some("default/risk-check".to_string())
        ))
    );
    let (d, calls) = run(
        &e,
        &via("echo", Some("public"), None, 8443),
        &HashMap::new(),
    );
    assert!(is_allow(&d) && calls.is_empty(), "{d:?} {calls:?}");
}

#[test]
fn cluster_names_scope_where_the_platform_makes_one_cluster_per_route_rule() {
    let e = routed(vec![scoped(
        deny_tools("no-add", "Backend", "eg", &["add"]),
        &["rule-1"],
    )]);
    let d = decide(
        &e,
        &via("add", Some("httproute/x/match/0"), Some("rule-1"), 8443),
    );
    assert_eq!(denied_by(&e, &d).map(|x| x.0), Some(Reason::DenyPolicy));
    let d = decide(
        &e,
        &via("add", Some("httproute/x/match/0"), Some("rule-0"), 8443),
    );
    assert!(is_allow(&d), "{d:?}");
}

#[test]
fn listeners_and_routes_narrow_together() {
    let mut p = scoped(
        deny_tools("no-add", "Backend", "tools", &["add"]),
        &["admin"],
    );
    p["listeners"] = json!([{"name": "gw", "sectionName": "internal"}]);
    let e = routed(vec![p]);
    let d = |route: &str, port| decide(&e, &via("add", Some(route), None, port));
    assert_eq!(
        denied_by(&e, &d("admin", 9443)).map(|x| x.0),
        Some(Reason::DenyPolicy)
    );
    assert!(is_allow(&d("admin", 8443)));
    assert!(is_allow(&d("public", 9443)));
}

#[test]
fn a_policy_targeting_a_backend_twice_applies_through_the_routes_of_both() {
    let mut p = deny_tools("no-add", "Backend", "tools", &["add"]);
    p["targets"] = json!([{"name": "tools", "routes": ["admin"]},
                          {"name": "tools", "routes": ["tools-cluster"]}]);
    let e = routed(vec![p.clone()]);
    let d = |route, cluster| decide(&e, &via("add", route, cluster, 8443));
    assert!(denied_by(&e, &d(Some("admin"), None)).is_some());
    assert!(denied_by(&e, &d(None, Some("tools-cluster"))).is_some());
    assert!(is_allow(&d(Some("public"), None)));
    // One of them unscoped: every route.
    p["targets"][1] = json!({"name": "tools"});
    let e = routed(vec![p]);
    assert!(denied_by(&e, &decide(&e, &via("add", Some("public"), None, 8443))).is_some());
}

#[test]
fn listed_items_are_judged_through_the_listing_request_s_route() {
    let e = routed(vec![scoped(
        inline_tools("echo-only", "Backend", "tools", &["echo"]),
        &["admin"],
    )]);
    let item = |tool: &str, route: &str| {
        let req = via(tool, Some(route), None, 8443);
        e.item_denial(&resolved(&e, &req)).map(|d| d.reason)
    };
    assert_eq!(item("echo", "admin"), None);
    assert_eq!(item("add", "admin"), Some(Reason::NotAllowed));
    assert_eq!(item("add", "public"), None);
}

#[test]
fn the_trace_says_whether_each_route_scoped_policy_applies() {
    let e = routed(vec![
        scoped(
            deny_tools("no-add", "Backend", "tools", &["add"]),
            &["admin"],
        ),
        scoped(
            inline_tools("echo-only", "Backend", "tools", &["echo"]),
            &["admin"],
        ),
    ]);
    let lines = |route: &str| {
        let req = resolved(&e, &via("echo", Some(route), None, 8443));
        let mut ev = e.begin(&req, true);
        let _ = ev.advance(&e, &req);
        ev.trace()
            .iter()
            .filter(|t| t.step() == "route")
            .map(|t| format!("{} {}", t.policy.clone().unwrap_or_default(), t.event))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        lines("admin"),
        [
            "default/echo-only applies: admin is one of its routes",
            "default/no-add applies: admin is one of its routes"
        ]
    );
    assert_eq!(
        lines("public"),
        [
            "default/echo-only does not apply: public is another route",
            "default/no-add does not apply: public is another route"
        ]
    );
    // By the cluster only: the filter cannot tell the route.
    let req = resolved(&e, &via("echo", None, Some("tools-cluster"), 8443));
    let mut ev = e.begin(&req, true);
    let _ = ev.advance(&e, &req);
    let by_cluster: Vec<String> = ev
        .trace()
        .iter()
        .filter(|t| t.step() == "route")
        .map(|t| t.event.to_string())
        .collect();
    assert_eq!(
        by_cluster,
        [
            "admits nothing: the request came by cluster tools-cluster, which its routes may use too (its presence keeps this level default-deny)",
            "does not apply: the request came by cluster tools-cluster, not by one of its routes"
        ]
    );
    // No trace is kept unless asked for.
    let req = resolved(&e, &via("echo", Some("admin"), None, 8443));
    let mut ev = e.begin(&req, false);
    let _ = ev.advance(&e, &req);
    assert!(ev.trace().is_empty());
    assert_eq!(
        req.mcp,
        McpOp::Call {
            method: "tools/call".into(),
            param: Some("echo".into())
        }
    );
}

/// The enforced and the dry-run decision of `req` (None: no dry-run decision was made).
fn both(e: &Engine, req: &Request) -> (Decision, Option<Decision>) {
    let req = &resolved(e, req);
    let mut ev = e.begin(req, false);
    match ev.advance(e, req) {
        mcp_access_engine::policy::Step::Done(d) => (d, ev.dry_run_decision().cloned()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_route_scoped_dry_run_policy_is_a_dry_run_through_its_routes_only() {
    let mut no_add = scoped(
        deny_tools("no-add", "Backend", "tools", &["add"]),
        &["admin"],
    );
    no_add["mode"] = json!("DryRun");
    let mut only_echo = scoped(
        inline_tools("echo-only", "Backend", "tools", &["echo", "add"]),
        &["public"],
    );
    only_echo["mode"] = json!("DryRun");
    let e = routed(vec![no_add, only_echo]);
    let denied = Some((Reason::DenyPolicy, Some("default/no-add".to_string())));
    // Through admin: enforced allow, the dry run denies by the route's Deny policy.
    let (d, dry) = both(&e, &via("add", Some("admin"), None, 8443));
    assert!(is_allow(&d), "{d:?}");
    assert_eq!(denied_by(&e, dry.as_ref().unwrap()), denied);
    // Through public: the dry-run Allow policy admits add, refuses x (nothing enforced).
    let (d, dry) = both(&e, &via("add", Some("public"), None, 8443));
    assert!(is_allow(&d) && is_allow(dry.as_ref().unwrap()), "{dry:?}");
    let (d, dry) = both(&e, &via("x", Some("public"), None, 8443));
    assert!(is_allow(&d), "{d:?}");
    assert_eq!(
        denied_by(&e, dry.as_ref().unwrap()),
        Some((Reason::NotAllowed, None))
    );
    // By the cluster: the Deny policy does not apply; the Allow one keeps the dry run
    // default-deny.
    let (d, dry) = both(&e, &via("add", None, Some("tools-cluster"), 8443));
    assert!(is_allow(&d), "{d:?}");
    assert_eq!(
        denied_by(&e, dry.as_ref().unwrap()),
        Some((Reason::NotAllowed, None))
    );
}
