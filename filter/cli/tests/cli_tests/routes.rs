//! AccessPolicies on HTTPRoutes (docs/semantics.md §1.6, §7) from manifests to the filter's
//! engine: decisions per route through `explain`, defaults/overrides per route, the
//! effective view per route, and each platform's rendering (Envoy Gateway's per-rule
//! clusters; Istio refuses).

use crate::common::{self, enforced, run, s, text};
use mcp_access_cli::explain::{explain, to_text, RequestSpec};
use mcp_access_k8s::{compile, Compiled, EffectivePolicy, Options};
use serde_json::Value;

/// Gateway `gw` (listener `main` :8080) in namespace mcp; HTTPRoute `admin` (rules `admin`
/// at /admin and `ops` at /ops) and `public` (/mcp) to XBackend `tools`.
fn infra() -> String {
    let to_tools = "    backendRefs: [{name: tools, port: 8000}]\n";
    let admin = format!(
        "  - name: admin\n    matches: [{{path: {{type: PathPrefix, value: /admin}}}}]\n{to_tools}  - name: ops\n    matches: [{{path: {{type: PathPrefix, value: /ops}}}}]\n{to_tools}"
    );
    let public = format!("  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]\n{to_tools}");
    common::stream(&[
        common::gateway("mcp", "gw", &[("main", 8080)]),
        common::route("mcp", "admin", "name: gw", &admin),
        common::route("mcp", "public", "name: gw", &public),
        common::xbackend("mcp", "tools", "tools", 8000, Some("/mcp")),
    ])
}

/// An AccessPolicy `name` on `target` (a flow mapping) with `action` and `rules` lines.
fn policy(name: &str, target: &str, action: &str, rules: &str) -> String {
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '2026-01-02T00:00:00Z'}}\nspec:\n  targetRefs: [{target}]\n  action: {action}\n{rules}"
    )
}

fn on_route(name: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!("{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}{section}}}")
}

const GATEWAY: &str = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}";

/// A rule `name` admitting (or matching) `tools/call` of `tools`, and the base protocol.
fn rule(name: &str, tools: &[&str]) -> String {
    format!(
        "  - name: {name}\n    authorization:\n      type: Inline\n      mcp:\n        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS\n        methods: [{{name: tools/call, params: [{}]}}]\n",
        tools.join(", ")
    )
}

fn rules(list: &[String]) -> String {
    format!("  rules:\n{}", list.concat())
}

/// A Gateway AccessPolicy with a `block` (`defaults`/`overrides`, `strategy`) of Allow rules.
fn gateway_block(block: &str, strategy: &str, rules: &[String]) -> String {
    let rules: String = rules.concat().lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: gw-{block}, namespace: mcp, creationTimestamp: '2026-01-01T00:00:00Z'}}\nspec:\n  targetRefs: [{GATEWAY}]\n  {block}:\n    strategy: {strategy}\n    action: Allow\n    rules:\n{rules}"
    )
}

fn build(docs: &[String]) -> Compiled {
    let m = common::load(&infra(), docs);
    let c = compile(
        &m,
        &Options {
            effective_view: true,
            ..Options::default()
        },
    );
    mcp_access_bundle::validate(&c.bundle).unwrap();
    let json = serde_json::to_vec(&c.bundle).unwrap();
    mcp_access_engine::policy::Engine::from_json(&json).unwrap();
    c
}

fn spec(path: &str, tool: &str) -> RequestSpec {
    RequestSpec {
        gateway: Some("mcp/gw".into()),
        listener: Some("main".into()),
        host: Some("gw.example".into()),
        path: Some(path.into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        headers: vec![("mcp-protocol-version".into(), "2025-11-25".into())],
        ..RequestSpec::default()
    }
}

/// The explanation of a call of `tool` at `path` (Envoy routes it by the path).
fn call(c: &Compiled, path: &str, tool: &str) -> Value {
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec(path, tool)).unwrap()).unwrap()
}

/// The tools of `candidates` admitted at `path`.
fn admitted(c: &Compiled, path: &str, candidates: &[&str]) -> Vec<String> {
    candidates
        .iter()
        .filter(|t| call(c, path, t)["decision"] == "allow")
        .map(|t| t.to_string())
        .collect()
}

const ALL: &[&str] = &["a", "b", "echo", "x"];

#[test]
fn a_deny_policy_on_one_rule_denies_through_that_rule_only() {
    let c = build(&[policy(
        "no-a",
        &on_route("admin", Some("admin")),
        "Deny",
        &rules(&[rule("a", &["a"])]),
    )]);
    let v = call(&c, "/admin", "a");
    assert_eq!(v["decision"], "deny", "{v:#}");
    assert_eq!(v["policy"], "mcp/no-a");
    assert_eq!(v["reason"], "deny_policy");
    for path in ["/ops", "/mcp"] {
        assert_eq!(call(&c, path, "a")["decision"], "allow", "{path}");
    }
    // explain says why the policy applied, or not, for the request's route.
    let e = explain(&c.bundle, Some(&c.topology), &spec("/ops", "a")).unwrap();
    let t = to_text(&e);
    assert!(
        t.contains("route  mcp/no-a")
            && t.contains("does not apply: mcp/admin/rule-1/match-0 is another route"),
        "{t}"
    );
    let e = explain(&c.bundle, Some(&c.topology), &spec("/admin", "a")).unwrap();
    assert!(
        to_text(&e).contains("applies: mcp/admin/rule-0/match-0 is one of its routes"),
        "{}",
        to_text(&e)
    );
    // Given the XBackend instead of a path, explain says the route matters and which it took.
    let by_backend = RequestSpec {
        backend: Some("tools".into()),
        ..spec("/admin", "a")
    };
    let e = explain(&c.bundle, Some(&c.topology), &by_backend).unwrap();
    assert_eq!(
        e.note.as_deref(),
        Some("XBackend mcp/tools has policies on HTTPRoutes, so the decision depends on the route: --backend takes route mcp/admin/rule-0/match-0; give --route (or --path, with manifests) for another")
    );
}

#[test]
fn an_allow_policy_on_a_route_admits_there_and_does_not_apply_through_other_routes() {
    let only_echo = policy(
        "echo-only",
        &on_route("admin", None),
        "Allow",
        &rules(&[rule("echo", &["echo"])]),
    );
    let c = build(std::slice::from_ref(&only_echo));
    assert_eq!(admitted(&c, "/admin", ALL), ["echo"]);
    assert_eq!(admitted(&c, "/ops", ALL), ["echo"]);
    // Through another route the policy does not apply (the XBackend has no other Allow
    // policy, so everything is admitted there), and no warning is needed.
    assert_eq!(admitted(&c, "/mcp", ALL), ALL);
    let v = call(&c, "/mcp", "x");
    assert!(
        v["trace"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["step"] == "route"
                && t["outcome"].as_str().unwrap().contains("is another route")),
        "{v:#}"
    );
    assert!(
        !c.report
            .warnings
            .iter()
            .any(|w| w.contains("meet no Allow policy")),
        "{:#?}",
        c.report.warnings
    );
    // An Allow policy on the other route applies there.
    let public = policy("public-all", &on_route("public", None), "Allow", "");
    let c = build(&[only_echo, public]);
    assert_eq!(admitted(&c, "/mcp", ALL), ALL);
    let v = call(&c, "/mcp", "x");
    assert_eq!(v["policy"], "mcp/public-all", "{v:#}");
    assert_eq!(admitted(&c, "/admin", ALL), ["echo"]);
    assert!(
        !c.report
            .warnings
            .iter()
            .any(|w| w.contains("meet no Allow policy")),
        "{:#?}",
        c.report.warnings
    );
}

#[test]
fn atomic_defaults_apply_through_the_routes_whose_lower_set_is_empty() {
    let c = build(&[
        gateway_block("defaults", "atomic", &[rule("x", &["x"])]),
        policy(
            "echo-only",
            &on_route("admin", None),
            "Allow",
            &rules(&[rule("echo", &["echo"])]),
        ),
    ]);
    assert_eq!(admitted(&c, "/admin", ALL), ["echo"]);
    assert_eq!(admitted(&c, "/mcp", ALL), ["x"]);
    let v = call(&c, "/mcp", "x");
    assert_eq!(
        v["origin"], "defaults (atomic) of AccessPolicy mcp/gw-defaults",
        "{v:#}"
    );
    assert_eq!(enforced(&c, "echo-only").0, "Enforced");
    assert_eq!(enforced(&c, "gw-defaults").0, "Enforced");
    // The block is narrowed to the other routes of the backend (and its cluster).
    let d = c
        .bundle
        .policies
        .iter()
        .find(|p| p.origin.is_some())
        .unwrap();
    let routes = d.targets[0].routes.clone().unwrap();
    assert_eq!(routes, ["mcp/public/rule-0/match-0", "xbackend/mcp/tools"]);
}

#[test]
fn an_atomic_override_overrides_the_route_policy_where_it_is_met() {
    let c = build(&[
        gateway_block("overrides", "atomic", &[rule("x", &["x"])]),
        policy(
            "echo-only",
            &on_route("admin", Some("admin")),
            "Allow",
            &rules(&[rule("echo", &["echo"])]),
        ),
    ]);
    for path in ["/admin", "/ops", "/mcp"] {
        assert_eq!(admitted(&c, path, ALL), ["x"], "{path}");
    }
    let (r, m) = enforced(&c, "echo-only");
    assert_eq!(r, "Overridden", "{m}");
}

#[test]
fn a_merged_override_replaces_the_rule_of_its_name_through_the_route_only() {
    let c = build(&[
        gateway_block("overrides", "merge", &[rule("r", &["x"])]),
        policy(
            "app",
            &on_route("admin", None),
            "Allow",
            &rules(&[rule("r", &["echo"]), rule("s", &["a"])]),
        ),
    ]);
    assert_eq!(admitted(&c, "/admin", ALL), ["a", "x"]);
    // Through `public` the override is added to an empty lower set; the route policy of
    // `admin` admits nothing there.
    assert_eq!(admitted(&c, "/mcp", ALL), ["x"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "PartiallyEnforced", "{m}");
    assert!(
        m.contains("The following rules have been overridden by AccessPolicy mcp/gw-overrides: r"),
        "{m}"
    );
}

/// The effective views of (main, tools).
fn views(c: &Compiled) -> Vec<&EffectivePolicy> {
    c.effective
        .iter()
        .filter(|v| v.listener == "main" && v.backend == "mcp/tools")
        .collect()
}

#[test]
fn the_effective_view_is_per_route_where_route_policies_make_routes_differ() {
    // No route policy: one view for every route.
    let c = build(&[]);
    let v = views(&c);
    assert_eq!(v.len(), 1);
    assert!(v[0].routes.is_empty());
    let c = build(&[policy(
        "echo-only",
        &on_route("admin", Some("ops")),
        "Allow",
        &rules(&[rule("echo", &["echo"])]),
    )]);
    let v = views(&c);
    let routes: Vec<Vec<String>> = v.iter().map(|v| v.routes.clone()).collect();
    assert_eq!(
        routes,
        [
            vec![
                "HTTPRoute mcp/admin rule 0 (admin)".to_string(),
                "HTTPRoute mcp/public".to_string(),
            ],
            vec!["HTTPRoute mcp/admin rule 1 (ops)".to_string()],
            vec![
                "other routes to the XBackend (recognised by cluster xbackend/mcp/tools)"
                    .to_string()
            ],
        ]
    );
    let allow = |v: &EffectivePolicy| {
        let backend = v.levels.iter().find(|l| l.level == "Backend").unwrap();
        let step = backend.steps.iter().find(|s| s.step == "Allow");
        step.iter()
            .flat_map(|s| &s.policies)
            .map(|p| (p.from.clone(), p.rules.as_ref().map(Vec::len)))
            .collect::<Vec<_>>()
    };
    // Through other routes the policy does not apply; a request known only by the cluster
    // may have come through `ops`, so there it admits nothing but keeps the level closed.
    assert_eq!(allow(v[0]), []);
    assert_eq!(allow(v[1]), [("its own rules".to_string(), Some(1))]);
    assert_eq!(
        allow(v[2]),
        [(
            "its own rules, through HTTPRoute mcp/admin rule 1 (ops) only: a request known only by the cluster may have come that way, so it admits nothing here but keeps this level default-deny".to_string(),
            Some(0)
        )]
    );
}

/// A case directory holding only `policy.yaml`: the topology and `doc`.
fn route_case(name: &str, doc: &str) -> std::path::PathBuf {
    let d = common::case(
        "routes",
        name,
        &[("policy.yaml", &format!("{}---\n{doc}", infra()))],
    );
    std::fs::remove_file(d.join("base.yaml")).unwrap();
    d
}

#[test]
fn effective_through_the_binary_filters_by_route() {
    let d = route_case(
        "effective",
        &policy(
            "echo-only",
            &on_route("admin", None),
            "Allow",
            &rules(&[rule("echo", &["echo"])]),
        ),
    );
    let out = run(&["effective", "-f", s(&d), "--route", "public"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains("mcp/gw listener main -> XBackend mcp/tools\n  through HTTPRoute mcp/public\n  Gateway level: no policy\n  Backend level: no policy")
            && !t.contains("\n  through HTTPRoute mcp/admin\n"),
        "{t}"
    );
    // By `namespace/name` too; a name no route has selects nothing.
    let out = run(&["effective", "-f", s(&d), "--route", "mcp/admin"]);
    let t = text(&out.stdout);
    assert!(
        t.contains("\n  through HTTPRoute mcp/admin\n") && !t.contains("HTTPRoute mcp/public"),
        "{t}"
    );
    let out = run(&["effective", "-f", s(&d), "--route", "other/admin"]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// `manifests` for `platform` of the route policy `echo-only` (on rule `ops`): its status and
/// stdout, stderr.
fn manifests(platform: &str) -> (Option<i32>, String, String) {
    let d = route_case(
        &format!("manifests-{platform}"),
        &policy(
            "echo-only",
            &on_route("admin", Some("ops")),
            "Allow",
            &rules(&[rule("echo", &["echo"])]),
        ),
    );
    let out = run(&[
        "manifests",
        "-f",
        s(&d),
        "--platform",
        platform,
        "--image",
        "r.example/f:1",
        "--digest",
        "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        "-o",
        "json",
    ]);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn envoy_gateway_scopes_route_policies_by_its_per_rule_clusters() {
    let (code, out, err) = manifests("envoy-gateway");
    assert_eq!(code, Some(0), "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let eep = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "EnvoyExtensionPolicy")
        .unwrap();
    let bundle = &eep["spec"]["wasm"][0]["config"];
    let p = bundle["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "echo-only")
        .unwrap();
    assert_eq!(
        p["targets"][0]["routes"],
        serde_json::json!(["httproute/mcp/admin/rule/1"])
    );
    assert_eq!(
        bundle["backends"][0]["clusterNames"],
        serde_json::json!([
            "httproute/mcp/admin/rule/0",
            "httproute/mcp/admin/rule/1",
            "httproute/mcp/public/rule/0"
        ])
    );
    // The bundle is one the filter takes.
    mcp_access_engine::policy::Engine::from_json(bundle.to_string().as_bytes()).unwrap();
}

#[test]
fn istio_refuses_route_policies() {
    let (code, out, err) = manifests("istio");
    assert_ne!(code, Some(0));
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(
            "--platform istio cannot enforce policies narrowed to HTTPRoutes (mcp/echo-only)"
        ) && err.contains("target the XBackend or the Gateway listener instead"),
        "{err}"
    );
}

#[test]
fn who_can_answers_per_group_of_routes_where_route_policies_make_them_differ() {
    let d = route_case(
        "who-can",
        &policy(
            "no-a",
            &on_route("admin", Some("admin")),
            "Deny",
            &rules(&[rule("a", &["a"])]),
        ),
    );
    let out = run(&[
        "who-can",
        "-f",
        s(&d),
        "--backend",
        "tools",
        "--tool",
        "a",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(String, String)> = a["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["listener"], "mcp/gw/main", "{a:#}");
            let callers = l["callers"].as_array().unwrap();
            assert_eq!(callers.len(), 1, "{a:#}");
            (
                l["through"].as_str().unwrap().to_string(),
                callers[0]["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "HTTPRoute mcp/admin rule 1 (ops), HTTPRoute mcp/public rule 0".to_string(),
                "allow".to_string()
            ),
            (
                "HTTPRoute mcp/admin rule 0 (admin)".to_string(),
                "deny".to_string()
            ),
        ],
        "{a:#}"
    );
    let out = run(&["who-can", "-f", s(&d), "--backend", "tools", "--tool", "a"]);
    let t = text(&out.stdout);
    assert!(
        t.contains("listener mcp/gw/main through HTTPRoute mcp/admin rule 0 (admin)\n  DENY  any other caller"),
        "{t}"
    );
}
