//! Dry-run policies (docs/semantics.md §3.8) from manifests: `mode: DryRun` on an
//! AccessPolicy, the annotation on an XAccessPolicy, their status, and the defining property
//! through `explain`: the decision enforced is the one of the manifests without the dry-run
//! objects, the dry-run decision the one with them enforced — defaults and overrides included.

use mcp_access_bundle::PolicyMode;
use mcp_access_cli::explain::{explain, RequestSpec};
use mcp_access_k8s::{compile, Compiled, Options};
use serde_json::Value;

use crate::common::{case, gateway, load, route, run, s, stream, text, to_xbackend, xbackend};

/// Gateway `gw` (listener `main` :8080) in namespace mcp; `/tools` to XBackend `tools`,
/// `/other` to XBackend `other`.
fn infra() -> String {
    let rules = to_xbackend(Some("/tools"), "tools") + &to_xbackend(Some("/other"), "other");
    stream(&[
        gateway("mcp", "gw", &[("main", 8080)]),
        route("mcp", "tools", "name: gw", &rules),
        xbackend("mcp", "tools", "tools", 8000, Some("/mcp")),
        xbackend("mcp", "other", "other", 8000, Some("/mcp")),
    ])
}

/// An Allow rule admitting `tools/call` of `tools` and the base protocol.
fn rule(name: &str, tools: &[&str]) -> String {
    format!(
        "  - name: {name}\n    authorization:\n      type: Inline\n      mcp:\n        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS\n        methods: [{{name: tools/call, params: [{}]}}]\n",
        tools.join(", ")
    )
}

/// A Deny rule matching `tools/call` of `tools`.
fn deny_rule(name: &str, tools: &[&str]) -> String {
    format!(
        "  - name: {name}\n    authorization:\n      type: Inline\n      mcp:\n        methods: [{{name: tools/call, params: [{}]}}]\n",
        tools.join(", ")
    )
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// How a document of a scenario is compiled: as written, without its dry-run mark (enforced),
/// or left out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum As {
    Written,
    Enforced,
    Removed,
}

/// A document; `dry`: a dry-run object, `MODE` in its text standing for its `mode: DryRun`
/// line (an AccessPolicy) or `ANNOTATION` for its annotation (either kind).
struct Doc {
    text: String,
    dry: bool,
}

impl Doc {
    fn render(&self, as_: As) -> Option<String> {
        let (mode, annotation) = match (self.dry, as_) {
            (false, _) | (true, As::Enforced) => ("", ""),
            (true, As::Written) => (
                "  mode: DryRun\n",
                ", annotations: {mcp-access.io/dry-run: \"true\"}",
            ),
            (true, As::Removed) => return None,
        };
        Some(
            self.text
                .replace("MODE\n", mode)
                .replace("ANNOTATION", annotation),
        )
    }
}

/// A Gateway AccessPolicy with a `block` of `action` rules.
fn gateway_block(
    name: &str,
    block: &str,
    strategy: &str,
    action: &str,
    rules: &str,
    dry: bool,
) -> Doc {
    Doc {
        text: format!(
            "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '2026-01-01T00:00:00Z'}}\nspec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\nMODE\n  {block}:\n    strategy: {strategy}\n    action: {action}\n    rules:\n{}",
            indent(rules)
        ),
        dry,
    }
}

/// An AccessPolicy of `action` with `rules` on `kind` `target` (`unset` and the like in
/// `extra`).
fn policy(
    name: &str,
    kind: &str,
    target: &str,
    action: &str,
    rules: &str,
    extra: &str,
    dry: bool,
) -> Doc {
    let group = if kind == "Gateway" {
        "gateway.networking.k8s.io"
    } else {
        "agentic.networking.x-k8s.io"
    };
    Doc {
        text: format!(
            "apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '2026-01-02T00:00:00Z'}}\nspec:\n  targetRefs: [{{group: {group}, kind: {kind}, name: {target}}}]\nMODE\n  action: {action}\n{extra}  rules:\n{rules}"
        ),
        dry,
    }
}

/// An XAccessPolicy (v1alpha1) Allow on XBackend `target`, marked by the annotation.
fn upstream(name: &str, target: &str, rules: &str, dry: bool) -> Doc {
    Doc {
        text: format!(
            "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: '2026-01-03T00:00:00Z'ANNOTATION}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: {target}}}]\n  action: Allow\n  rules:\n{rules}"
        ),
        dry,
    }
}

fn build(docs: &[Doc], as_: As) -> Compiled {
    let text: Vec<String> = docs.iter().filter_map(|d| d.render(as_)).collect();
    let m = load(&infra(), &text);
    let c = compile(&m, &Options::default());
    assert!(c.report.all_accepted(), "{:#?}", c.report);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

/// `explain` of a call of `tool` to `path`, as JSON.
fn call(c: &Compiled, path: &str, tool: &str) -> Value {
    let spec = RequestSpec {
        gateway: Some("mcp/gw".into()),
        listener: Some("main".into()),
        host: Some("gw.example".into()),
        path: Some(path.into()),
        service_account: Some("mcp/agent".into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        ..RequestSpec::default()
    };
    serde_json::to_value(explain(&c.bundle, Some(&c.topology), &spec).unwrap()).unwrap()
}

/// The defining property for every tool on both backends: returns the decisions as
/// (path, tool, enforced, dry run).
fn check(docs: &[Doc]) -> Vec<(String, String, String, String)> {
    let written = build(docs, As::Written);
    let without = build(docs, As::Removed);
    let enforced = build(docs, As::Enforced);
    let mut out = Vec::new();
    for path in ["/tools", "/other"] {
        for tool in ["a", "b", "c", "x"] {
            let got = call(&written, path, tool);
            let want = call(&without, path, tool);
            assert_eq!(
                (
                    &got["decision"],
                    &got["reason"],
                    &got["policy"],
                    &got["rule"]
                ),
                (
                    &want["decision"],
                    &want["reason"],
                    &want["policy"],
                    &want["rule"]
                ),
                "{path} {tool}: enforced decision\n{got:#}"
            );
            let would = call(&enforced, path, tool);
            let dry = match got.get("dryRun") {
                Some(d) => d["decision"].clone(),
                None => got["decision"].clone(),
            };
            assert_eq!(
                dry, would["decision"],
                "{path} {tool}: dry run\n{got:#}\n{would:#}"
            );
            if let Some(d) = got.get("dryRun") {
                assert_eq!(
                    d["changed"],
                    got["decision"] != would["decision"],
                    "{got:#}"
                );
                if d["decision"] == "deny" {
                    assert_eq!(d["reason"], would["reason"], "{path} {tool}\n{got:#}");
                    assert_eq!(d["level"], would["level"], "{path} {tool}\n{got:#}");
                }
            }
            out.push((
                path.to_string(),
                tool.to_string(),
                got["decision"].as_str().unwrap().to_string(),
                dry.as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// The tools whose (enforced, dry-run) decisions are `want` on `path`.
fn tools_with(
    decisions: &[(String, String, String, String)],
    path: &str,
    want: (&str, &str),
) -> Vec<String> {
    decisions
        .iter()
        .filter(|(p, _, e, d)| p == path && (e.as_str(), d.as_str()) == want)
        .map(|(_, t, _, _)| t.clone())
        .collect()
}

#[test]
fn a_dry_run_deny_and_a_dry_run_upstream_allow() {
    let d = check(&[
        policy(
            "tools-allow",
            "XBackend",
            "tools",
            "Allow",
            &rule("ab", &["a", "b"]),
            "",
            false,
        ),
        policy(
            "no-b",
            "Gateway",
            "gw",
            "Deny",
            &deny_rule("b", &["b"]),
            "",
            true,
        ),
        upstream("other-only-c", "other", &rule("c", &["c"]), true),
    ]);
    assert_eq!(tools_with(&d, "/tools", ("allow", "deny")), ["b"]);
    assert_eq!(tools_with(&d, "/tools", ("allow", "allow")), ["a"]);
    assert_eq!(tools_with(&d, "/other", ("allow", "deny")), ["a", "b", "x"]);
    assert_eq!(tools_with(&d, "/other", ("allow", "allow")), ["c"]);
}

#[test]
fn a_dry_run_override_replaces_lower_rules_in_the_dry_run_only() {
    let docs = [
        gateway_block(
            "gw-override",
            "overrides",
            "atomic",
            "Allow",
            &rule("o", &["a"]),
            true,
        ),
        policy(
            "tools-allow",
            "XBackend",
            "tools",
            "Allow",
            &rule("b", &["b"]),
            "",
            false,
        ),
    ];
    let d = check(&docs);
    assert_eq!(tools_with(&d, "/tools", ("allow", "deny")), ["b"]);
    assert_eq!(tools_with(&d, "/tools", ("deny", "allow")), ["a"]);
    // `other` has no policy: everything is allowed, the override admits only `a` there.
    assert_eq!(tools_with(&d, "/other", ("allow", "deny")), ["b", "c", "x"]);
    let c = build(&docs, As::Written);
    let mode = |name: &str| {
        c.bundle
            .policies
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no {name}: {:#?}", c.bundle.policies))
            .mode
    };
    assert_eq!(mode("tools-allow"), PolicyMode::EnforceOnly);
    assert_eq!(mode("gw-override"), PolicyMode::DryRun);
    let v = call(&c, "/tools", "b");
    assert_eq!(v["dryRun"]["policy"], "mcp/gw-override", "{v:#}");
    assert_eq!(v["dryRun"]["reason"], "not_allowed");
}

#[test]
fn merged_defaults_and_unset_in_both_decisions() {
    // An enforced merged default; a dry-run backend policy that unsets it.
    let d = check(&[
        gateway_block(
            "gw-defaults",
            "defaults",
            "merge",
            "Allow",
            &rule("d", &["a"]),
            false,
        ),
        policy(
            "tools-allow",
            "XBackend",
            "tools",
            "Allow",
            &rule("b", &["b"]),
            "",
            false,
        ),
        policy(
            "tools-unset",
            "XBackend",
            "tools",
            "Allow",
            &rule("c", &["c"]),
            "  unset: [d]\n",
            true,
        ),
    ]);
    assert_eq!(tools_with(&d, "/tools", ("allow", "deny")), ["a"]);
    assert_eq!(tools_with(&d, "/tools", ("deny", "allow")), ["c"]);
    assert_eq!(tools_with(&d, "/tools", ("allow", "allow")), ["b"]);
    // A dry-run atomic default where the lower set is empty.
    let d = check(&[gateway_block(
        "gw-defaults",
        "defaults",
        "atomic",
        "Allow",
        &rule("d", &["a"]),
        true,
    )]);
    assert_eq!(tools_with(&d, "/other", ("allow", "deny")), ["b", "c", "x"]);
}

#[test]
fn status_bundle_and_mistakes() {
    let dir = case(
        "dry-run",
        "status",
        &[(
            "p.yaml",
            r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: watch, namespace: mcp, annotations: {mcp-access.io/dry-run: "true"}}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: r
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [echo]}]}}
"#,
        )],
    );
    let out = run(&["compile", "-f", s(&dir), "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(b["policies"][0]["mode"], "DryRun", "{b:#}");
    let report = text(&out.stderr);
    assert!(report.contains("reason: DryRun"), "{report}");
    // `spec.mode` on the upstream kind: its CRD has no such field.
    std::fs::write(
        dir.join("p.yaml"),
        "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {name: watch, namespace: mcp}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n  action: Allow\n  mode: DryRun\n",
    )
    .unwrap();
    let out = run(&["validate", "-f", s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("spec.mode"),
        "{}",
        text(&out.stdout)
    );
    // An annotation that is neither true nor false, or disagrees with spec.mode: not
    // accepted (which was meant is unknown), and nothing is written.
    for (meta, spec) in [
        ("annotations: {mcp-access.io/dry-run: \"yes\"}", ""),
        (
            "annotations: {mcp-access.io/dry-run: \"false\"}",
            "  mode: DryRun\n",
        ),
    ] {
        std::fs::write(
            dir.join("p.yaml"),
            format!("apiVersion: mcp-access.io/v1alpha1\nkind: AccessPolicy\nmetadata: {{name: watch, namespace: mcp, {meta}}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]\n  action: Allow\n{spec}"),
        )
        .unwrap();
        let out = run(&["compile", "-f", s(&dir), "-o", "json"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty());
        assert!(
            text(&out.stderr).contains("mcp-access.io/dry-run"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn explain_shows_both_decisions() {
    let dir = case(
        "dry-run",
        "explain",
        &[(
            "p.yaml",
            r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-rm, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  mode: DryRun
  action: Deny
  rules:
  - name: rm
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [rm]}]}}
"#,
        )],
    );
    let out = run(&[
        "explain",
        "-f",
        s(&dir),
        "--gateway",
        "mcp/gw",
        "--listener",
        "http",
        "--tool",
        "rm",
    ]);
    let t = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(t.contains("decision  ALLOW"), "{t}");
    assert!(
        t.contains("dry run   DENY at backend (deny_policy): policy mcp/no-rm, rule rm; differs"),
        "{t}"
    );
    assert!(t.contains("dry-run trace"), "{t}");
    let out = run(&[
        "explain",
        "-f",
        s(&dir),
        "--gateway",
        "mcp/gw",
        "--listener",
        "http",
        "--tool",
        "echo",
    ]);
    let t = text(&out.stdout);
    assert!(t.contains("dry run   ALLOW"), "{t}");
    assert!(t.contains("the same as the decision enforced"), "{t}");
}

#[test]
fn effective_marks_dry_run_entries() {
    let dir = case(
        "dry-run",
        "effective",
        &[(
            "p.yaml",
            r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: gw-override, namespace: mcp, creationTimestamp: '2026-01-01T00:00:00Z'}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  mode: DryRun
  overrides:
    action: Allow
    rules:
    - name: o
      authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [a]}]}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: tools-allow, namespace: mcp, creationTimestamp: '2026-01-02T00:00:00Z'}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: b
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [b]}]}}
"#,
        )],
    );
    let out = run(&["effective", "-f", s(&dir), "--listener", "http"]);
    let t = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        t.contains("mcp/gw-override.mcp.tools  from overrides (atomic) of AccessPolicy mcp/gw-override  (dry run: reported, never enforced)"),
        "{t}"
    );
    assert!(
        t.contains("mcp/tools-allow  from its own rules  (enforced; a dry-run block replaces it in the dry run)"),
        "{t}"
    );
}

#[test]
fn a_dry_run_denial_beside_an_enforced_one_names_its_own_policy_and_rule() {
    // Enforced: writers may call a only (no Allow rule admits x). Dry run: x is denied by a
    // rule of its own.
    let docs = [
        policy(
            "writers",
            "XBackend",
            "tools",
            "Allow",
            &rule("some", &["a"]),
            "",
            false,
        ),
        policy(
            "no-delete",
            "XBackend",
            "tools",
            "Deny",
            &deny_rule("no-delete-for-writers", &["x"]),
            "",
            true,
        ),
    ];
    let c = build(&docs, As::Written);
    let e = call(&c, "/tools", "x");
    assert_eq!(
        (&e["decision"], &e["reason"]),
        (&"deny".into(), &"not_allowed".into()),
        "{e}"
    );
    let d = &e["dryRun"];
    assert_eq!(d["changed"], false, "{d}");
    assert_eq!(
        (&d["decision"], &d["reason"], &d["policy"], &d["rule"]),
        (
            &"deny".into(),
            &"deny_policy".into(),
            &"mcp/no-delete".into(),
            &"no-delete-for-writers".into()
        ),
        "{d}"
    );
}
