//! The project's `AccessPolicy` kind (group `mcp-access.io`): its examples, the fields it adds
//! to the XAccessPolicy v1alpha1 spec (Deny, JWT sources, `when`) and CEL rules of both kinds,
//! from manifests to the bundle; upstream XAccessPolicies refuse the additions.

use std::path::PathBuf;

use mcp_access_bundle::{Action, JwtProvider, Level, SourceType};
use mcp_access_k8s::{compile, reason, Compiled, Manifests, Options};

use crate::common::{self, policy, status};

const IDP: &str = "https://idp.example.com";

/// The Gateway, route and XBackend the examples target (`examples/targets.yaml`).
const INFRA: &str = include_str!("../../../crds/examples/targets.yaml");

fn options() -> Options {
    Options {
        jwt_providers: vec![JwtProvider {
            issuer: IDP.into(),
            metadata_key: "idp".into(),
        }],
        ..Options::default()
    }
}

fn load(extra: &str) -> Manifests {
    common::load(INFRA, extra)
}

fn build_with(extra: &str, o: &Options) -> Compiled {
    let m = load(extra);
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    let c = compile(&m, o);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

fn build(extra: &str) -> Compiled {
    build_with(extra, &options())
}

fn problems(extra: &str) -> Vec<String> {
    load(extra)
        .problems()
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect()
}

fn examples(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crds/examples")
        .join(kind)
}

fn files(dir: &PathBuf) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn every_valid_example_is_accepted_and_compiles() {
    let dir = examples("valid");
    let names: Vec<String> = files(&dir)
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "cel.yaml",
            "defaults.yaml",
            "deny.yaml",
            "identity-headers.yaml",
            "jwt.yaml",
            "overrides.yaml",
            "route.yaml",
            "unset.yaml",
            "when.yaml"
        ]
    );
    for f in files(&dir) {
        let c = build(&std::fs::read_to_string(&f).unwrap());
        assert!(!c.report.policies.is_empty(), "{}", f.display());
        for p in &c.report.policies {
            assert_eq!(p.kind, "AccessPolicy");
            assert_eq!(p.api_version, "mcp-access.io/v1alpha1");
            assert!(p.accepted(), "{}: {p:#?}", f.display());
        }
    }
}

/// (file, field, message) of each invalid example: what the CRD (and the loader) refuse.
const INVALID: &[(&str, &str, &str)] = &[
    (
        "block-beside-rules.yaml",
        "spec.action",
        "Forbidden: with a defaults or overrides block, it belongs in the block",
    ),
    (
        "block-on-backend.yaml",
        "spec.targetRefs",
        "defaults and overrides may only be set on a policy that targets Gateways",
    ),
    (
        "block-without-action.yaml",
        "spec.defaults.action",
        "Required value",
    ),
    (
        "defaults-and-overrides.yaml",
        "spec",
        "only one of defaults and overrides may be set",
    ),
    (
        "deny-with-external-auth.yaml",
        "spec",
        "externalAuth may only be specified when action is set to 'ExternalAuth'",
    ),
    (
        "identity-header-authorization.yaml",
        "spec.identityHeaders[0].name",
        "\"authorization\" names a header with another meaning",
    ),
    (
        "identity-headers-on-gateway.yaml",
        "spec.targetRefs",
        "identityHeaders may only be set on a policy that targets XBackends",
    ),
    (
        "jwt-claim-without-values.yaml",
        "spec.rules[0].source.jwt.claims[0].values",
        "should have at least 1 items",
    ),
    (
        "jwt-without-jwt.yaml",
        "spec.rules[0].source",
        "jwt must be specified when type is set to 'JWT'",
    ),
    (
        "jwt-without-type.yaml",
        "spec.rules[0].source",
        "type must be 'JWT' when jwt is set",
    ),
    (
        "mixed-targets.yaml",
        "spec.targetRefs",
        "All targetRefs must have the same Kind",
    ),
    (
        "scope-value-with-space.yaml",
        "spec.rules[0].source.jwt.claims[0]",
        "a scope claim (scope, scp) is matched per scope",
    ),
    (
        "scope-value-with-whitespace.yaml",
        "spec.rules[0].source.jwt.claims[0]",
        "a scope claim (scope, scp) is matched per scope",
    ),
    (
        "unknown-action.yaml",
        "spec.action",
        "Unsupported value: \"Audit\": supported values: \"Allow\", \"Deny\", \"ExternalAuth\"",
    ),
    (
        "unknown-field.yaml",
        "spec.priority",
        "unknown field `priority`",
    ),
    (
        "unset-on-gateway.yaml",
        "spec.targetRefs",
        "unset may only be set on a policy that targets XBackends",
    ),
    (
        "when-without-predicate.yaml",
        "spec.when[0].predicate",
        "Required value",
    ),
];

#[test]
fn every_invalid_example_is_rejected_with_the_crd_reason() {
    let dir = examples("invalid");
    let names: Vec<String> = files(&dir)
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let expected: Vec<&str> = INVALID.iter().map(|x| x.0).collect();
    assert_eq!(names, expected, "an example without an expectation");
    for (file, field, message) in INVALID {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let got = problems(&text);
        assert!(
            got.iter()
                .any(|p| p.starts_with(&format!("{field}: ")) && p.contains(message)),
            "{file}: {got:#?}"
        );
        // Rejected objects are reported, never dropped.
        let c = compile(&load(&text), &options());
        let st = status(&c, &file.replace(".yaml", ""));
        assert_eq!(st.conditions[0].reason, reason::INVALID, "{file}");
    }
}

#[test]
fn the_upstream_kind_refuses_the_project_fields() {
    let upstream = |spec: &str| {
        format!(
            "apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {{name: p, namespace: mcp}}\nspec:\n  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]\n{spec}"
        )
    };
    let cases = [
        (
            "  action: Deny\n",
            "spec.action: Unsupported value: \"Deny\": supported values: \"Allow\", \"ExternalAuth\"",
        ),
        (
            "  action: Allow\n  when: [{predicate: 'true'}]\n",
            "spec.when: unknown field \"when\": only an AccessPolicy (group mcp-access.io) has it",
        ),
        (
            "  action: Allow\n  rules:\n  - name: r\n    when: [{predicate: 'true'}]\n",
            "spec.rules[0].when: unknown field \"when\"",
        ),
        (
            "  action: Allow\n  rules:\n  - name: r\n    source: {type: JWT, jwt: {issuer: x}}\n",
            "spec.rules[0].source.type: Unsupported value: \"JWT\": supported values: \"ServiceAccount\", \"SPIFFE\"",
        ),
        (
            "  action: Allow\n  rules:\n  - name: r\n    source: {jwt: {issuer: x}}\n",
            "spec.rules[0].source.jwt: unknown field \"jwt\"",
        ),
    ];
    for (spec, want) in cases {
        let got = problems(&upstream(spec));
        assert!(got.iter().any(|p| p.starts_with(want)), "{spec}: {got:#?}");
    }
    // v0alpha0 has no JWT sources either.
    let v0 = "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XAccessPolicy\nmetadata: {name: p, namespace: mcp}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n  rules:\n  - name: r\n    source: {type: ServiceAccount, serviceAccount: {name: a}, jwt: {issuer: x}}\n";
    assert!(problems(v0)
        .iter()
        .any(|p| p.starts_with("spec.rules[0].source.jwt: unknown field")));
    // Another kind of the project's group does not exist.
    let other =
        "apiVersion: mcp-access.io/v1alpha1\nkind: AccessRule\nmetadata: {name: p}\nspec: {}\n";
    assert!(problems(other)
        .iter()
        .any(|p| p.contains("no matches for kind \"AccessRule\"")));
    let old = "apiVersion: mcp-access.io/v1\nkind: AccessPolicy\nmetadata: {name: p}\nspec: {}\n";
    assert!(problems(old)
        .iter()
        .any(|p| p.contains("no matches for kind \"AccessPolicy\" in version")));
}

#[test]
fn deny_jwt_and_when_reach_the_bundle() {
    let c = build(&format!(
        "{}\n---\n{}",
        std::fs::read_to_string(examples("valid").join("deny.yaml")).unwrap(),
        std::fs::read_to_string(examples("valid").join("jwt.yaml")).unwrap()
    ));
    let deny = policy(&c, "no-repo-deletion");
    assert_eq!((deny.action, deny.level), (Action::Deny, Level::Gateway));
    assert_eq!(deny.rules.as_ref().unwrap()[0].name, "delete-repo");
    let jwt = policy(&c, "staff-tools");
    let rules = jwt.rules.as_ref().unwrap();
    let src = rules[0].source.as_ref().unwrap();
    assert_eq!(src.kind, SourceType::Jwt);
    let j = src.jwt.as_ref().unwrap();
    assert_eq!((j.issuer.as_str(), j.subject.as_deref()), (IDP, None));
    assert_eq!(j.claims[1].name, "org.region");
    assert_eq!(j.claims[1].values, ["eu", "us"]);
    let on_call = rules[1].source.as_ref().unwrap().jwt.as_ref().unwrap();
    assert_eq!(on_call.subject.as_deref(), Some("oncall@example.com"));
    assert_eq!(c.bundle.identity.jwt.providers, options().jwt_providers);

    let c = build(&std::fs::read_to_string(examples("valid").join("when.yaml")).unwrap());
    let p = policy(&c, "change-window");
    assert_eq!(p.when, ["request.hostname.endsWith('.eu.example.com')"]);
    let rules = p.rules.as_ref().unwrap();
    assert!(rules[0].when.is_empty());
    assert_eq!(rules[1].when.len(), 2);
    assert_eq!(
        p.targets[0].section_name.as_deref(),
        Some("mcp-https"),
        "sectionName kept"
    );
}

#[test]
fn a_jwt_source_needs_a_provider_for_its_issuer() {
    let text = std::fs::read_to_string(examples("valid").join("jwt.yaml")).unwrap();
    let c = build_with(&text, &Options::default());
    let st = &status(&c, "staff-tools").conditions[0];
    assert!(!st.accepted);
    assert_eq!(st.reason, reason::INVALID);
    assert!(
        st.message.contains("spec.rules[0].source.jwt.issuer \"https://idp.example.com\": no JWT provider verifies this issuer (none is declared)")
            && st.message.contains("--jwt-provider"),
        "{}",
        st.message
    );
    // Fail closed: an Allow stand-in that admits nothing.
    let standin = policy(&c, "staff-tools.not-accepted");
    assert_eq!(
        (standin.action, standin.rules.as_ref()),
        (Action::Allow, None)
    );
}

#[test]
fn cel_rules_of_both_kinds_and_versions_compile() {
    let c = build(
        r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: v1-cel, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: getters
    authorization:
      type: CEL
      cel: {expression: "request.mcp.tool_name.startsWith('get')"}
  - name: base
    authorization: {type: Inline, mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}}
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {name: v0-cel, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}]
  rules:
  - name: post-only
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
    authorization:
      type: CEL
      cel: {expression: "request.method == 'POST'"}
"#,
    );
    for name in ["v1-cel", "v0-cel"] {
        assert!(status(&c, name).accepted(), "{:#?}", status(&c, name));
    }
    let r = &policy(&c, "v1-cel").rules.as_ref().unwrap()[0];
    let a = r.authorization.as_ref().unwrap();
    assert_eq!(
        a.cel.as_deref(),
        Some("request.mcp.tool_name.startsWith('get')")
    );
    assert_eq!(a.mcp, None, "a CEL rule implies nothing else");
    let r = &policy(&c, "v0-cel").rules.as_ref().unwrap()[0];
    assert_eq!(
        r.authorization.as_ref().unwrap().cel.as_deref(),
        Some("request.method == 'POST'")
    );
}

#[test]
fn an_invalid_expression_is_not_accepted_with_its_field_and_position() {
    let bad_rule = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: bad-cel, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: base
    authorization: {type: Inline, mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}}
  - name: broken
    authorization:
      type: CEL
      cel: {expression: "request.mcp.tool_name == "}
"#;
    let c = build(bad_rule);
    let st = &status(&c, "bad-cel").conditions[0];
    assert!(!st.accepted);
    assert_eq!(st.reason, reason::INVALID);
    assert!(
        st.message
            .starts_with("spec.rules[1].authorization.cel.expression: invalid CEL expression: "),
        "{}",
        st.message
    );
    assert!(st.message.contains("column"), "{}", st.message);
    assert!(st.message.contains("fail-closed"), "{}", st.message);
    let standin = policy(&c, "bad-cel.not-accepted");
    assert_eq!(
        (standin.action, standin.rules.as_ref()),
        (Action::Allow, None)
    );

    // An unknown variable in a `when`: the Deny policy's stand-in denies everything.
    let bad_when = r#"
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: bad-when, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}]
  action: Deny
  when: [{predicate: "request.path == '/mcp'"}, {predicate: "requestt.path == '/x'"}]
  rules:
  - name: one-tool
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [x]}]}}
"#;
    let c = build(bad_when);
    let st = &status(&c, "bad-when").conditions[0];
    assert!(
        st.message
            .starts_with("spec.when[1].predicate: invalid CEL expression: "),
        "{}",
        st.message
    );
    let standin = policy(&c, "bad-when.not-accepted");
    assert_eq!(standin.action, Action::Deny);
    assert_eq!(standin.rules, None, "its selection cannot be trusted");
    assert!(standin.when.is_empty());

    // A rule's `when` that does not compile: the Deny stand-in denies everything too.
    let c = build(&bad_when.replace(
        "  when: [{predicate: \"request.path == '/mcp'\"}, {predicate: \"requestt.path == '/x'\"}]\n",
        "",
    ).replace(
        "    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [x]}]}}",
        "    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [x]}]}}\n    when: [{predicate: \"1 +\"}]",
    ));
    let st = &status(&c, "bad-when").conditions[0];
    assert!(
        st.message
            .starts_with("spec.rules[0].when[0].predicate: invalid CEL expression: "),
        "{}",
        st.message
    );
    assert_eq!(policy(&c, "bad-when.not-accepted").rules, None);
}

#[test]
fn both_kinds_target_the_same_objects_and_count_together() {
    let policy_of = |kind: &str, name: &str, created: &str| {
        let api = if kind == "AccessPolicy" {
            "mcp-access.io/v1alpha1"
        } else {
            "agentic.networking.x-k8s.io/v1alpha1"
        };
        format!("apiVersion: {api}\nkind: {kind}\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: \"{created}\"}}\nspec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}}]\n  action: Allow\n")
    };
    // The same namespace/name in both kinds is two objects, not a conflict.
    let both = format!(
        "{}---\n{}---\n{}",
        policy_of("XAccessPolicy", "same", "2026-01-01T00:00:00Z"),
        policy_of("AccessPolicy", "same", "2026-01-02T00:00:00Z"),
        policy_of("AccessPolicy", "third", "2026-01-03T00:00:00Z"),
    );
    let o = Options {
        max_policies_per_target: 2,
        ..options()
    };
    let c = build_with(&both, &o);
    let kinds: Vec<(&str, &str, Option<u64>, bool)> = c
        .report
        .policies
        .iter()
        .map(|p| (p.kind.as_str(), p.name.as_str(), p.seniority, p.accepted()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("XAccessPolicy", "same", Some(1), true),
            ("AccessPolicy", "same", Some(2), true),
            ("AccessPolicy", "third", Some(3), false),
        ]
    );
    let third = &status(&c, "third").conditions[0];
    assert_eq!(third.reason, reason::LIMIT);
    assert!(
        third.message.contains("mcp/same, mcp/same"),
        "{}",
        third.message
    );
    // In the bundle, the AccessPolicy of the shared name is told apart, and says so.
    let names: Vec<&str> = c.bundle.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["same", "same.accesspolicy", "third.not-accepted"]);
    let st = c
        .report
        .policies
        .iter()
        .find(|p| p.kind == "AccessPolicy" && p.name == "same")
        .unwrap();
    assert!(st.conditions[0]
        .message
        .contains("named same.accesspolicy in the bundle"));
    // The Gateway's status names each kind accepted on it, with its article.
    let statuses = mcp_access_k8s::status_objects(&c.report, &c.topology, "2026-01-04T00:00:00Z");
    let gateway = statuses.iter().find(|s| s["kind"] == "Gateway").unwrap();
    let affected: Vec<(&str, &str)> = gateway["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"].as_str().unwrap().ends_with("Affected"))
        .map(|c| (c["type"].as_str().unwrap(), c["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        affected,
        [
            (
                "XAccessPolicyAffected",
                "an XAccessPolicy is accepted on this object"
            ),
            (
                "AccessPolicyAffected",
                "an AccessPolicy is accepted on this object"
            ),
        ],
        "{gateway:#}"
    );
}

/// An ExternalAuth AccessPolicy whose authorizer is a Service in another namespace.
const RISKY: &str = r#"
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: risky, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}]
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {name: risk-check, namespace: authz, port: 9000}
    http: {}
"#;

#[test]
fn an_external_auth_stand_in_keeps_the_when_it_was_selected_by() {
    // No ReferenceGrant for the authorizer in another namespace: not accepted; the stand-in
    // denies what the policy would have sent to its authorizer, where it would have applied.
    let c = build(&format!(
        "{RISKY}  when: [{{predicate: \"request.mcp.method == 'tools/call'\"}}]\n  rules:\n  - name: writes\n    authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [write]}}]}}}}\n"
    ));
    let st = &status(&c, "risky").conditions[0];
    assert_eq!(st.reason, reason::REF_NOT_PERMITTED);
    assert!(
        st.message.contains("AccessPolicy objects from mcp"),
        "{}",
        st.message
    );
    let standin = policy(&c, "risky.not-accepted");
    assert_eq!(standin.action, Action::Deny);
    assert_eq!(standin.when, ["request.mcp.method == 'tools/call'"]);
    assert_eq!(standin.rules.as_ref().unwrap()[0].name, "writes");
    // With a grant naming the AccessPolicy kind, it is accepted.
    let grant = r#"---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: allow-mcp, namespace: authz}
spec:
  from: [{group: mcp-access.io, kind: AccessPolicy, namespace: mcp}]
  to: [{group: "", kind: Service}]
"#;
    let c = build(&format!("{RISKY}{grant}"));
    assert!(status(&c, "risky").accepted(), "{:#?}", status(&c, "risky"));
}
