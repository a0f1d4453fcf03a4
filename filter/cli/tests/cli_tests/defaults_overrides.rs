//! Defaults and overrides (docs/semantics.md, "Defaults and overrides"), from manifests to
//! the filter's engine: seed 003's examples A1, B1, B2, C1, D1, D2, E1-E3, F1, F2 and seed
//! 002's Gateway defaults vs overrides, in MCP terms. Each checks the effective policy
//! (decisions through `explain`, bundle origins) and the status.

use crate::common::{enforced, gateway, load, read, route, status, stream, to_xbackend, xbackend};
use mcp_access_cli::explain::{explain, RequestSpec};
use mcp_access_k8s::{compile, reason, Compiled, Options};
use serde_json::Value;

/// Gateway `gw` (listeners `main` :8080 and `alt` :8081) in namespace mcp; route `/tools`
/// to XBackend `tools` on both listeners, route `/other` to XBackend `other` on `main`.
fn infra() -> String {
    stream(&[
        gateway("mcp", "gw", &[("main", 8080), ("alt", 8081)]),
        route(
            "mcp",
            "tools",
            "name: gw",
            &to_xbackend(Some("/tools"), "tools"),
        ),
        route(
            "mcp",
            "other",
            "name: gw, sectionName: main",
            &to_xbackend(Some("/other"), "other"),
        ),
        xbackend("mcp", "tools", "tools", 8000, Some("/mcp")),
        xbackend("mcp", "other", "other", 8000, Some("/mcp")),
    ])
}

/// An Allow rule admitting `tools/call` of `tools` (and the base protocol).
fn rule(name: &str, tools: &[&str]) -> String {
    format!(
        "  - name: {name}\n    authorization:\n      type: Inline\n      mcp:\n        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS\n        methods: [{{name: tools/call, params: [{}]}}]\n",
        tools.join(", ")
    )
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// A Gateway AccessPolicy with a `block` (defaults / overrides) of Allow `rules`.
fn gateway_block(name: &str, created: &str, block: &str, strategy: &str, rules: &str) -> String {
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '{created}'}}\nspec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n  {block}:\n    strategy: {strategy}\n    action: Allow\n    rules:\n{}",
        indent(rules)
    )
}

/// A Backend-level AccessPolicy on XBackend `backend` with Allow `rules` (and `extra` spec).
fn backend_policy(name: &str, backend: &str, rules: &str, extra: &str) -> String {
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '2026-01-02T00:00:00Z'}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: {backend}}}]\n  action: Allow\n{extra}  rules:\n{rules}"
    )
}

/// [`gateway_block`] `gw-<block>`, created at [`GW_TIME`].
fn gw_block(block: &str, strategy: &str, rules: &str) -> String {
    gateway_block(&format!("gw-{block}"), GW_TIME, block, strategy, rules)
}

/// Rules `a` and `b`, each admitting its tool.
fn ab() -> String {
    rule("a", &["a"]) + &rule("b", &["b"])
}

/// Policy `app` on XBackend `tools`: rule `c` admitting tool `c`.
fn app_c() -> String {
    backend_policy("app", "tools", &rule("c", &["c"]), "")
}

fn build(docs: &[String]) -> Compiled {
    let m = load(&infra(), docs);
    let c = compile(&m, &Options::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    let json = serde_json::to_vec(&c.bundle).unwrap();
    mcp_access_engine::policy::Engine::from_json(&json).unwrap();
    c
}

/// The decision for a call of `tool` to `/tools` (or `/other`) on listener `listener`.
fn call(c: &Compiled, listener: &str, path: &str, tool: &str) -> Value {
    let spec = RequestSpec {
        gateway: Some("mcp/gw".into()),
        listener: Some(listener.into()),
        host: Some("gw.example".into()),
        path: Some(path.into()),
        service_account: Some("mcp/agent".into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        headers: vec![("mcp-protocol-version".into(), "2025-11-25".into())],
        ..RequestSpec::default()
    };
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap()
}

/// Tools of `candidates` admitted on `main` for `/tools`.
fn admitted(c: &Compiled, candidates: &[&str]) -> Vec<String> {
    admitted_on(c, "main", "/tools", candidates)
}

fn admitted_on(c: &Compiled, listener: &str, path: &str, candidates: &[&str]) -> Vec<String> {
    candidates
        .iter()
        .filter(|t| call(c, listener, path, t)["decision"] == "allow")
        .map(|t| t.to_string())
        .collect()
}

const ALL: &[&str] = &["a", "b", "c", "d", "x"];
const GW_TIME: &str = "2026-01-01T00:00:00Z";

#[test]
fn a1_atomic_defaults_are_replaced_by_a_backend_policy() {
    let c = build(&[gw_block("defaults", "atomic", &ab()), app_c()]);
    assert_eq!(admitted(&c, ALL), ["c"]);
    // `other` has no policy of its own: the defaults apply there.
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["a", "b"]);
    let v = call(&c, "main", "/other", "a");
    // One name per user-written policy: the Gateway policy the defaults came from.
    assert_eq!(v["policy"], "mcp/gw-defaults", "{v:#}");
    assert_eq!(
        v["origin"],
        "defaults (atomic) of AccessPolicy mcp/gw-defaults"
    );
    assert_eq!(enforced(&c, "gw-defaults").0, "Enforced");
    assert_eq!(enforced(&c, "app").0, "Enforced");
}

#[test]
fn a1_defaults_everywhere_replaced_are_overridden() {
    let c = build(&[
        gw_block("defaults", "atomic", &rule("a", &["a"])),
        app_c(),
        backend_policy("app2", "other", &rule("d", &["d"]), ""),
    ]);
    assert_eq!(admitted(&c, ALL), ["c"]);
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["d"]);
    let (r, m) = enforced(&c, "gw-defaults");
    assert_eq!(r, "Overridden", "{m}");
    assert!(
        !status(&c, "gw-defaults").conditions[0]
            .enforced
            .as_ref()
            .unwrap()
            .status
    );
}

#[test]
fn b1_merged_defaults_are_added() {
    let c = build(&[gw_block("defaults", "merge", &ab()), app_c()]);
    assert_eq!(admitted(&c, ALL), ["a", "b", "c"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "Enforced");
    assert!(
        m.contains("the following defaults have been added by AccessPolicy mcp/gw-defaults: a, b"),
        "{m}"
    );
    // The added rules say where they came from; alike on both backends, they are one
    // bundle policy with both targets.
    let p = c
        .bundle
        .policies
        .iter()
        .find(|p| p.name == "gw-defaults")
        .unwrap();
    assert_eq!(p.targets.len(), 2);
    let o = p.origin.as_ref().unwrap();
    assert_eq!(o.policy, "AccessPolicy mcp/gw-defaults");
    assert_eq!(o.block, Some(mcp_access_bundle::BlockKind::Defaults));
    assert_eq!(o.strategy, Some(mcp_access_bundle::Strategy::Merge));
}

#[test]
fn b2_a_lower_rule_of_the_same_name_beats_a_merged_default() {
    let c = build(&[
        gw_block("defaults", "merge", &ab()),
        backend_policy(
            "app",
            "tools",
            &(rule("a", &["x"]) + &rule("c", &["c"])),
            "",
        ),
    ]);
    // The lower `a` (tool x) stays; the default `a` (tool a) is not added.
    assert_eq!(admitted(&c, ALL), ["b", "c", "x"]);
    let (_, m) = enforced(&c, "app");
    assert!(m.ends_with(": b"), "{m}");
}

#[test]
fn c1_atomic_overrides_replace_the_backend_policy() {
    let c = build(&[gw_block("overrides", "atomic", &ab()), app_c()]);
    assert_eq!(admitted(&c, ALL), ["a", "b"]);
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["a", "b"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "Overridden", "{m}");
    assert!(m.contains("AccessPolicy mcp/gw-overrides"), "{m}");
    assert_eq!(enforced(&c, "gw-overrides").0, "Enforced");
}

#[test]
fn d1_merged_overrides_are_added_beside_other_rules() {
    let c = build(&[gw_block("overrides", "merge", &ab()), app_c()]);
    assert_eq!(admitted(&c, ALL), ["a", "b", "c"]);
    assert_eq!(enforced(&c, "app").0, "Enforced");
}

#[test]
fn d2_a_merged_override_replaces_the_lower_rule_of_its_name() {
    let c = build(&[
        gw_block("overrides", "merge", &ab()),
        backend_policy(
            "app",
            "tools",
            &(rule("a", &["x"]) + &rule("c", &["c"])),
            "",
        ),
    ]);
    assert_eq!(admitted(&c, ALL), ["a", "b", "c"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "PartiallyEnforced");
    assert!(
        m.contains("The following rules have been overridden by AccessPolicy mcp/gw-overrides: a"),
        "{m}"
    );
}

/// E: an override that applies only where a lower policy breaks a constraint ("a backend's
/// `tools` rule names at most two tools"), checked by the compiler on the lower spec.
fn constraint(lower_tools: &[&str]) -> Compiled {
    constraint_with(&rule("tools", lower_tools))
}

#[test]
fn e1_a_compliant_lower_policy_keeps_its_rule() {
    let c = constraint(&["c", "d"]);
    assert_eq!(admitted(&c, ALL), ["c", "d"]);
    assert_eq!(enforced(&c, "app").0, "Enforced");
    // XBackend `other` has no policy: there the block applies without its condition.
    assert_eq!(enforced(&c, "gw-limit").0, "Enforced");
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["a", "b"]);
}

#[test]
fn e2_a_lower_policy_breaking_the_constraint_is_overridden() {
    let c = constraint(&["c", "d", "x"]);
    assert_eq!(admitted(&c, ALL), ["a", "b"]);
    assert_eq!(enforced(&c, "app").0, "PartiallyEnforced");
    assert_eq!(enforced(&c, "gw-limit").0, "Enforced");
}

#[test]
fn e3_a_merged_override_replaces_the_whole_rule_not_a_field() {
    // The lower `tools` rule is only for ServiceAccount mcp/agent; the override rule of the
    // same name has no source: the whole rule is replaced, so another caller gets in too
    // (the granularity is the rule, seed 003 E3).
    let lower = "  - name: tools\n    source: {type: ServiceAccount, serviceAccount: {name: agent}}\n    authorization:\n      type: Inline\n      mcp: {methods: [{name: tools/call, params: [a, b, c]}]}\n";
    let c = constraint_with(lower);
    let mut spec = RequestSpec {
        gateway: Some("mcp/gw".into()),
        listener: Some("main".into()),
        host: Some("gw.example".into()),
        path: Some("/tools".into()),
        service_account: Some("mcp/someone-else".into()),
        mcp_method: Some("tools/call".into()),
        param: Some("a".into()),
        ..RequestSpec::default()
    };
    let v = serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap();
    assert_eq!(v["decision"], "allow", "{v:#}");
    spec.param = Some("c".into());
    let v = serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap();
    assert_eq!(v["decision"], "deny");
}

fn constraint_with(lower_rules: &str) -> Compiled {
    let block = format!(
        "{}    condition: \"self.rules.exists(r, r.name == 'tools' && size(r.authorization.mcp.methods[0].params) > 2)\"\n",
        gateway_block("gw-limit", GW_TIME, "overrides", "merge", &rule("tools", &["a", "b"]))
    );
    build(&[block, backend_policy("app", "tools", lower_rules, "")])
}

#[test]
fn f1_unset_removes_a_merged_default() {
    let c = build(&[
        gw_block(
            "defaults",
            "merge",
            &(rule("a", &["a"]) + &rule("no-write", &["b"])),
        ),
        backend_policy("app", "tools", &rule("c", &["c"]), "  unset: [no-write]\n"),
    ]);
    assert_eq!(admitted(&c, ALL), ["a", "c"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "Enforced");
    assert!(m.ends_with(": a"), "{m}");
}

#[test]
fn f2_unset_cannot_remove_an_override() {
    let c = build(&[
        gw_block(
            "overrides",
            "merge",
            &(rule("a", &["a"]) + &rule("no-write", &["b"])),
        ),
        backend_policy("app", "tools", &rule("c", &["c"]), "  unset: [no-write]\n"),
    ]);
    assert_eq!(admitted(&c, ALL), ["a", "b", "c"]);
    let (r, m) = enforced(&c, "app");
    assert_eq!(r, "PartiallyEnforced");
    assert!(m.contains("unset of overrides refused: no-write"), "{m}");
}

#[test]
fn seed_002_gateway_defaults_apply_only_where_no_backend_policy_exists() {
    let c = build(&[gw_block("defaults", "atomic", &rule("a", &["a"])), app_c()]);
    assert_eq!(admitted(&c, ALL), ["c"]);
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["a"]);
}

#[test]
fn seed_002_gateway_overrides_apply_to_every_backend() {
    let c = build(&[gw_block("overrides", "atomic", &rule("a", &["a"])), app_c()]);
    assert_eq!(admitted(&c, ALL), ["a"]);
    assert_eq!(admitted_on(&c, "alt", "/tools", ALL), ["a"]);
    assert_eq!(admitted_on(&c, "main", "/other", ALL), ["a"]);
}

#[test]
fn a_block_on_one_listener_changes_only_that_listener() {
    let block = gw_block("overrides", "atomic", &rule("a", &["a"]))
        .replace("name: gw}]", "name: gw, sectionName: alt}]");
    let c = build(&[block, app_c()]);
    assert_eq!(admitted_on(&c, "main", "/tools", ALL), ["c"]);
    assert_eq!(admitted_on(&c, "alt", "/tools", ALL), ["a"]);
    // Narrowed bundle policies, one per listener.
    let narrowed: Vec<(&str, String)> = c
        .bundle
        .policies
        .iter()
        .filter(|p| !p.listeners.is_empty())
        .map(|p| {
            (
                p.name.as_str(),
                p.listeners[0].section_name.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        narrowed,
        [
            ("gw-overrides.mcp.tools", "alt".into()),
            ("app.mcp.tools", "main".into())
        ]
    );
    // Replaced on one listener only: partially enforced.
    assert_eq!(enforced(&c, "app").0, "PartiallyEnforced");
}

#[test]
fn several_blocks_the_senior_override_wins() {
    let c = build(&[
        gateway_block("senior", GW_TIME, "overrides", "merge", &rule("a", &["a"])),
        gateway_block(
            "junior",
            "2026-01-01T01:00:00Z",
            "overrides",
            "merge",
            &(rule("a", &["x"]) + &rule("b", &["b"])),
        ),
    ]);
    assert_eq!(admitted(&c, ALL), ["a", "b"]);
}

#[test]
fn an_external_auth_override_reaches_every_backend() {
    let block = "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: risk, namespace: mcp}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n  overrides:\n    action: ExternalAuth\n    externalAuth: {protocol: HTTP, backendRef: {name: risk, port: 9000}, http: {}}\n".to_string();
    let c = build(&[block, app_c()]);
    for path in ["/tools", "/other"] {
        let v = call(&c, "main", path, "c");
        assert_eq!(v["calls"].as_array().unwrap().len(), 1, "{v:#}");
    }
    assert_eq!(enforced(&c, "risk").0, "Enforced");
    assert_eq!(enforced(&c, "app").0, "Enforced");
}

#[test]
fn a_bad_condition_makes_only_its_policy_invalid() {
    let bad = format!(
        "{}    condition: \"size(self.rules\"\n",
        gateway_block("gw-bad", GW_TIME, "overrides", "merge", &rule("a", &["a"]))
    );
    let c = build(&[bad, app_c()]);
    let st = status(&c, "gw-bad");
    assert_eq!(st.conditions[0].reason, reason::INVALID);
    assert!(
        st.conditions[0]
            .message
            .contains("spec.overrides.condition"),
        "{st:#?}"
    );
    assert!(status(&c, "app").accepted());
}

/// The bundle and the report (without where each object was read) as JSON.
fn outputs(docs: &[String]) -> (String, String) {
    let m = read(&infra(), docs);
    let c = compile(&m, &Options::default());
    let mut report = serde_json::to_value(&c.report).unwrap();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.remove("source");
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut report);
    (
        serde_json::to_string(&c.bundle).unwrap(),
        serde_json::to_string(&report).unwrap(),
    )
}

#[test]
fn merging_does_not_depend_on_the_order_of_the_objects() {
    let docs = vec![
        gateway_block("d-merge", GW_TIME, "defaults", "merge", &ab()),
        gateway_block(
            "o-merge",
            "2026-01-01T00:00:01Z",
            "overrides",
            "merge",
            &rule("b", &["x"]),
        ),
        gateway_block(
            "d-atomic",
            "2026-01-01T00:00:02Z",
            "defaults",
            "atomic",
            &rule("d", &["d"]),
        ),
        gateway_block(
            "o-atomic",
            "2026-01-01T00:00:03Z",
            "overrides",
            "atomic",
            &rule("c", &["c"]),
        )
        .replace("name: gw}]", "name: gw, sectionName: alt}]"),
        backend_policy(
            "app",
            "tools",
            &(rule("a", &["x"]) + &rule("c", &["c"])),
            "  unset: [b]\n",
        ),
        backend_policy("app2", "other", &rule("d", &["d"]), ""),
        // Same creationTimestamp: namespace/name decides seniority.
        gateway_block("same-1", GW_TIME, "overrides", "merge", &rule("e", &["a"])),
        gateway_block("same-2", GW_TIME, "overrides", "merge", &rule("e", &["b"])),
    ];
    let want = outputs(&docs);
    // A small deterministic generator: every rotation and some swaps of the input order.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..40 {
        let mut shuffled = docs.clone();
        for i in (1..shuffled.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let j = (seed % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let got = outputs(&shuffled);
        assert_eq!(got.0, want.0, "bundle differs in round {round}");
        assert_eq!(got.1, want.1, "report differs in round {round}");
    }
}
