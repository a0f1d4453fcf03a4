//! AccessPolicies that target HTTPRoutes, or one rule of a route by `sectionName`
//! (docs/semantics.md §1.6): accepted as Backend-level policies narrowed to the route's names;
//! every mistake refused with its reason, fail-closed stand-ins where the target resolves.

use crate::common::{self, backend, gateway, policy, status, stream, to_xbackend, xbackend};
use mcp_access_bundle::{Action, Level, Policy};
use mcp_access_k8s::{compile, reason, Compiled, Manifests, Options};

/// Gateway `gw` (listeners `main` :8080, `alt` :8081) in namespace mcp. HTTPRoute `admin`
/// (rules `admin` and `ops`) and `public` (one unnamed rule) lead to XBackend `tools`;
/// `split` has a rule `w` forwarding to `tools` and `other`; `web` forwards to a Service.
fn infra() -> String {
    let named = |name: &str, paths: &str, backends: &str| {
        format!("  - name: {name}\n    matches: [{paths}]\n    backendRefs:{backends}\n")
    };
    let tools = " [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]";
    let prefix = |p: &str| format!("{{path: {{type: PathPrefix, value: {p}}}}}");
    let admin = named("admin", &prefix("/admin"), tools)
        + &named(
            "ops",
            &format!("{}, {}", prefix("/ops"), prefix("/ops2")),
            tools,
        );
    let split = named(
        "w",
        &prefix("/split"),
        "\n    - {group: agentic.networking.x-k8s.io, kind: XBackend, name: tools, weight: 50}\n    - {group: agentic.networking.x-k8s.io, kind: XBackend, name: other, weight: 50}",
    );
    let site = named("site", &prefix("/site"), " [{name: website, port: 80}]");
    stream(&[
        gateway("mcp", "gw", &[("main", 8080), ("alt", 8081)]),
        common::route("mcp", "admin", "name: gw, sectionName: main", &admin),
        common::route(
            "mcp",
            "public",
            "name: gw",
            &to_xbackend(Some("/mcp"), "tools"),
        ),
        common::route("mcp", "split", "name: gw", &split),
        common::route("mcp", "web", "name: gw", &site),
        common::route("mcp", "orphan", "name: nogw", &to_xbackend(None, "tools")),
        xbackend("tools", "tools", Some("/mcp")),
        xbackend("other", "other", Some("/mcp")),
    ])
}

const ADMIN: [&str; 1] = ["mcp/admin/rule-0/match-0"];
const OPS: [&str; 2] = ["mcp/admin/rule-1/match-0", "mcp/admin/rule-1/match-1"];

fn load(extra: &str) -> Manifests {
    common::load(&infra(), extra)
}

fn build(extra: &str) -> Compiled {
    let m = load(extra);
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    let c = compile(&m, &Options::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

/// An AccessPolicy `name` in namespace `ns` with `target` (a flow mapping) and Deny `add`.
fn deny_on(name: &str, ns: &str, target: &str) -> String {
    format!(
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{target}]
  action: Deny
  rules:
  - name: no-add
    authorization:
      type: Inline
      mcp: {{methods: [{{name: tools/call, params: [add]}}]}}
"#
    )
}

fn route(name: &str, section: Option<&str>) -> String {
    match section {
        Some(s) => format!(
            "{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}, sectionName: {s}}}"
        ),
        None => format!("{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}"),
    }
}

/// (backend, routes) of each target of a bundle policy.
fn targets(p: &Policy) -> Vec<(String, Option<Vec<String>>)> {
    p.targets
        .iter()
        .map(|t| (t.name.clone(), t.routes.clone()))
        .collect()
}

fn names(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| s.to_string()).collect())
}

#[test]
fn a_policy_on_a_route_is_a_backend_policy_narrowed_to_its_route_names() {
    let c = build(&deny_on("p", "mcp", &route("admin", None)));
    let st = status(&c, "p");
    assert!(st.accepted(), "{st:#?}");
    assert_eq!(st.conditions[0].target, "HTTPRoute mcp/admin");
    let p = policy(&c, "p");
    assert_eq!(p.level, Level::Backend);
    assert_eq!(p.action, Action::Deny);
    let mut all = ADMIN.to_vec();
    all.extend(OPS);
    assert_eq!(targets(p), [("tools".to_string(), names(&all))]);
    // The route names are the backend's.
    let tools = backend(&c, "tools");
    assert!(all.iter().all(|n| tools.route_names.iter().any(|r| r == n)));
    assert!(c.report.unenforced.is_empty(), "{:#?}", c.report.unenforced);
}

#[test]
fn a_section_name_narrows_the_policy_to_that_rule() {
    let c = build(&deny_on("p", "mcp", &route("admin", Some("ops"))));
    let st = status(&c, "p");
    assert!(st.accepted(), "{st:#?}");
    assert_eq!(st.conditions[0].section_name.as_deref(), Some("ops"));
    assert_eq!(
        targets(policy(&c, "p")),
        [("tools".to_string(), names(&OPS))]
    );
}

#[test]
fn an_unknown_rule_is_refused_with_did_you_mean_and_stands_in_on_the_whole_route() {
    let c = build(&deny_on("p", "mcp", &route("admin", Some("opz"))));
    let st = status(&c, "p");
    assert!(!st.accepted());
    assert_eq!(st.conditions[0].reason, reason::TARGET_NOT_FOUND);
    assert_eq!(
        st.conditions[0].message,
        "spec.targetRefs[0]: sectionName: HTTPRoute mcp/admin has no rule named \"opz\"; did you mean `ops`? (valid: admin, ops); enforced fail-closed: requests it selects are denied"
    );
    let mut all = ADMIN.to_vec();
    all.extend(OPS);
    let standin = policy(&c, "p.not-accepted");
    assert_eq!(targets(standin), [("tools".to_string(), names(&all))]);
    assert!(standin.not_accepted.is_some());
    // A route without rule names says how to name one.
    let c = build(&deny_on("p", "mcp", &route("public", Some("mcp"))));
    assert!(status(&c, "p").conditions[0]
        .message
        .contains("HTTPRoute mcp/public has no rule named \"mcp\" (its rules have no `name`: name the rule to target it)"));
}

#[test]
fn two_rules_of_one_name_are_refused() {
    let twice = infra().replace("  - name: ops\n", "  - name: admin\n");
    let mut m = Manifests::default();
    m.add_text(
        "test.yaml",
        &format!(
            "{twice}---\n{}",
            deny_on("p", "mcp", &route("admin", Some("admin")))
        ),
        "default",
    );
    let c = compile(&m, &Options::default());
    let cond = &status(&c, "p").conditions[0];
    assert_eq!(cond.reason, reason::INVALID);
    assert!(
        cond.message.contains("HTTPRoute mcp/admin has more than one rule named \"admin\" (rules 0, 1): rule names must be unique within a route"),
        "{}",
        cond.message
    );
    assert!(c.bundle.policies.iter().any(|p| p.name == "p.not-accepted"));
}

#[test]
fn a_target_that_does_not_resolve_is_refused_and_nothing_stands_in() {
    let cases = [
        (route("nope", None), "no such HTTPRoute in the manifests"),
        (
            route("web", None),
            "HTTPRoute mcp/web forwards to no XBackend: no request through it is judged at the Backend level",
        ),
        (
            route("web", Some("site")),
            "HTTPRoute mcp/web rule 0 (site) forwards to no XBackend",
        ),
        (
            route("orphan", None),
            "HTTPRoute mcp/orphan is attached to no accepted Gateway listener (see routes): no request goes through it",
        ),
    ];
    for (target, message) in cases {
        let c = build(&deny_on("p", "mcp", &target));
        let cond = &status(&c, "p").conditions[0];
        assert_eq!(cond.reason, reason::TARGET_NOT_FOUND, "{target}");
        assert!(cond.message.contains(message), "{target}: {}", cond.message);
        assert!(c.bundle.policies.is_empty(), "{target}");
        assert!(
            c.report
                .unenforced
                .iter()
                .any(|u| u.contains("enforced nowhere")),
            "{target}: {:#?}",
            c.report.unenforced
        );
    }
}

#[test]
fn targets_are_local_a_route_of_another_namespace_is_not_found() {
    let c = build(&deny_on("p", "agents", &route("admin", None)));
    let cond = &status(&c, "p").conditions[0];
    assert_eq!(cond.target, "HTTPRoute agents/admin");
    assert_eq!(cond.reason, reason::TARGET_NOT_FOUND);
}

#[test]
fn a_rule_that_splits_traffic_is_refused_and_its_backends_stand_in_whole() {
    let c = build(&deny_on("p", "mcp", &route("split", None)));
    let cond = &status(&c, "p").conditions[0];
    assert_eq!(cond.reason, reason::UNSUPPORTED);
    assert!(
        cond.message.contains("rule 0 of HTTPRoute mcp/split forwards to more than one backendRef (XBackends mcp/other, mcp/tools)")
            && cond.message.contains("enforced fail-closed: requests it selects are denied"),
        "{}",
        cond.message
    );
    let standin = policy(&c, "p.not-accepted");
    assert_eq!(
        targets(standin),
        [("other".to_string(), None), ("tools".to_string(), None)]
    );
}

#[test]
fn an_xaccesspolicy_cannot_target_a_route() {
    let c = build(&format!(
        r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: p, namespace: mcp}}
spec:
  targetRefs: [{}]
  action: Allow
"#,
        route("admin", None)
    ));
    let cond = &status(&c, "p").conditions[0];
    assert_eq!(cond.reason, reason::INVALID);
    assert!(
        cond.message.contains("an XAccessPolicy cannot target an HTTPRoute: write the policy as an AccessPolicy (apiVersion mcp-access.io/v1alpha1), whose targetRefs may name HTTPRoutes"),
        "{}",
        cond.message
    );
    assert!(c.bundle.policies.is_empty());
}

#[test]
fn a_route_policy_cannot_carry_blocks_or_unset_nor_mix_kinds() {
    let with = |extra: &str, targets: &str| {
        format!(
            "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: p, namespace: mcp}}\nspec:\n  targetRefs: [{targets}]\n{extra}"
        )
    };
    let r = route("admin", None);
    let cases = [
        (
            with("  defaults:\n    action: Allow\n", &r),
            "spec.targetRefs: defaults and overrides may only be set on a policy that targets Gateways",
        ),
        (
            with("  overrides:\n    action: Deny\n", &r),
            "spec.targetRefs: defaults and overrides may only be set on a policy that targets Gateways",
        ),
        (
            with("  action: Allow\n  unset: [x]\n", &r),
            "spec.targetRefs: unset may only be set on a policy that targets XBackends",
        ),
        (
            with(
                "  action: Allow\n",
                &format!("{r}, {{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}"),
            ),
            "spec.targetRefs: All targetRefs must have the same Kind",
        ),
    ];
    for (doc, want) in cases {
        let got: Vec<String> = load(&doc)
            .problems()
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        assert!(
            got.iter()
                .any(|g| g == &want.replacen(": ", ": Invalid value: \"array\": ", 1)),
            "{want}: {got:#?}"
        );
    }
}

#[test]
fn a_not_accepted_route_policy_stands_in_on_its_route_only() {
    // A CEL condition that does not compile: not accepted, the stand-in denies all (its
    // rules cannot be trusted) through the route only.
    let doc = deny_on("p", "mcp", &route("admin", Some("admin"))).replace(
        "  action: Deny\n",
        "  action: Deny\n  when: [{predicate: 'request.nope('}]\n",
    );
    let c = build(&doc);
    assert_eq!(status(&c, "p").conditions[0].reason, reason::INVALID);
    let standin = policy(&c, "p.not-accepted");
    assert_eq!(targets(standin), [("tools".to_string(), names(&ADMIN))]);
    assert_eq!(standin.action, Action::Deny);
}
