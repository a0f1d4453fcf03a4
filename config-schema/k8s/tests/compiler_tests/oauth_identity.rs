//! OAuth protected resource metadata from `FilterSettings` (per Gateway listener) and identity
//! headers from `AccessPolicy` (per XBackend): validated, resolved, compiled into the bundle,
//! mistakes refused with their field.

use mcp_access_bundle::{IdentityField, IdentityHeader};
use mcp_access_k8s::{compile, reason, Compiled, Manifests, Options};

use crate::common::{backend, gateway, load, route, stream, to_xbackend, xbackend};

fn base() -> String {
    let rules = to_xbackend(Some("/mcp"), "tools") + &to_xbackend(Some("/other"), "other");
    stream(&[
        gateway("mcp", "gw", &[("public", 8080), ("internal", 9090)])
            .replace("port: 8080}", "port: 8080, hostname: mcp.example.com}"),
        xbackend("tools", "tools-server", None),
        xbackend("other", "other-server", None),
        route("mcp", "tools", "name: gw", &rules),
    ])
}

fn settings(entries: &str) -> String {
    format!(
        "apiVersion: mcp-access.io/v1alpha1\nkind: FilterSettings\nmetadata: {{name: settings}}\nspec:\n  protectedResources:\n{entries}"
    )
}

fn read(extra: &str) -> Manifests {
    load(&base(), extra)
}

fn run(extra: &str) -> Compiled {
    let m = read(extra);
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    compile(&m, &Options::default())
}

/// The problems loading finds (the object as an API server would refuse it).
fn refused(extra: &str) -> Vec<String> {
    read(extra)
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The problems the compiler finds (`field: message`).
fn invalid(extra: &str) -> Vec<String> {
    run(extra)
        .report
        .invalid
        .iter()
        .map(ToString::to_string)
        .collect()
}

const PUBLIC: &str = r#"  - targetRef: {namespace: mcp, name: gw, sectionName: public}
    resource: https://mcp.example.com/mcp
    authorizationServers: [https://auth.example.com]
    scopesSupported: [mcp]
    resourceName: Tools
"#;

#[test]
fn protected_resources_land_on_the_listeners_they_name() {
    let c = run(&settings(PUBLIC));
    assert!(c.report.invalid.is_empty(), "{:#?}", c.report.invalid);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    let listeners = &c.bundle.gateways[0].listeners;
    let p = listeners[0].protected_resource.as_ref().unwrap();
    assert_eq!(p.resource, "https://mcp.example.com/mcp");
    assert_eq!(p.authorization_servers, ["https://auth.example.com"]);
    assert_eq!(p.scopes_supported, ["mcp"]);
    assert_eq!(p.resource_name.as_deref(), Some("Tools"));
    assert!(listeners[1].protected_resource.is_none());
    // Without sectionName: every listener of the Gateway (whose hostname allows it).
    let all = run(&settings(
        "  - targetRef: {namespace: mcp, name: gw}\n    resource: https://mcp.example.com/mcp\n    authorizationServers: [https://auth.example.com]\n",
    ));
    assert!(all.report.invalid.is_empty(), "{:#?}", all.report.invalid);
    let listeners = &all.bundle.gateways[0].listeners;
    assert!(listeners.iter().all(|l| l.protected_resource.is_some()));
}

#[test]
fn protected_resource_mistakes_are_refused_with_their_field() {
    let entry = |target: &str, resource: &str| {
        settings(&format!(
            "  - targetRef: {target}\n    resource: {resource}\n    authorizationServers: [https://auth.example.com]\n"
        ))
    };
    let has = |problems: &[String], want: &str| problems.iter().any(|p| p.contains(want));
    // What an API server would refuse.
    for (yaml, want) in [
        (entry("{namespace: mcp, name: gw}", "http://mcp.example.com/mcp"), "spec.protectedResources[0].resource: Invalid value: \"http://mcp.example.com/mcp\" must use https"),
        (entry("{namespace: mcp, name: gw}", "https://mcp.example.com/mcp#x"), "must not have a fragment"),
        (entry("{name: gw}", "https://mcp.example.com/mcp"), "spec.protectedResources[0].targetRef.namespace: Required value"),
        (entry("{namespace: mcp, name: gw, kind: Service}", "https://mcp.example.com/mcp"), "spec.protectedResources[0].targetRef.kind: Unsupported value"),
        (settings("  - targetRef: {namespace: mcp, name: gw}\n    resource: https://mcp.example.com/mcp\n"), "spec.protectedResources[0].authorizationServers: Required value"),
        (settings("  - targetRef: {namespace: mcp, name: gw}\n    resource: https://mcp.example.com/mcp\n    authorizationServers: [http://auth.example.com]\n"), "authorizationServers[0]: Invalid value: \"http://auth.example.com\" must use https"),
        (settings("  - targetRef: {namespace: mcp, name: gw}\n    resource: https://mcp.example.com/mcp\n    authorizationServers: [https://a.example.com]\n    scopesSupported: [\"a b\"]\n"), "scopesSupported[0]: Invalid value: must be a scope token"),
        (settings("  - targetRef: {namespace: mcp, name: gw}\n    resource: https://mcp.example.com/mcp\n    authorizationServers: [https://a.example.com]\n    colour: red\n"), "spec.protectedResources[0].colour: unknown field `colour`"),
    ] {
        let got = refused(&yaml);
        assert!(has(&got, want), "{want}: {got:#?}");
    }
    // What the compiler refuses: no such Gateway or listener, a listener given two
    // resources, a resource the listener's hostname does not serve.
    for (yaml, want) in [
        (entry("{namespace: mcp, name: nope}", "https://mcp.example.com/mcp"), "spec.protectedResources[0].targetRef.name: Gateway mcp/nope is not in the manifests"),
        (entry("{namespace: mcp, name: gw, sectionName: publik}", "https://mcp.example.com/mcp"), "spec.protectedResources[0].targetRef.sectionName: Gateway mcp/gw has no usable listener \"publik\"; did you mean `public`?"),
        (entry("{namespace: mcp, name: gw, sectionName: public}", "https://other.example.com/mcp"), "spec.protectedResources[0].resource: listener mcp/gw/public: its host other.example.com is not one the listener serves"),
        (settings(&format!("{PUBLIC}{PUBLIC}")), "spec.protectedResources[1].targetRef: listener mcp/gw/public already has protected resource metadata from spec.protectedResources[0]"),
    ] {
        let got = invalid(&yaml);
        assert!(has(&got, want), "{want}: {got:#?}");
    }
}

fn policy(name: &str, created: &str, target: &str, headers: &str) -> String {
    format!(
        r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: {name}, namespace: mcp, creationTimestamp: "{created}"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: {target}}}]
  action: Allow
  identityHeaders:
{headers}
"#
    )
}

#[test]
fn an_identity_header_a_route_matches_on_is_refused() {
    let route = route(
        "mcp",
        "by-version",
        "name: gw",
        "  - matches: [{headers: [{name: X-Caller-Sub, value: admin}]}]\n    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n",
    );
    let a = policy(
        "a",
        "2026-01-01T00:00:00Z",
        "tools",
        "  - {name: x-caller-sub, from: JWTSubject}",
    );
    let c = run(&format!("{route}---\n{a}"));
    // The bundle names the header, the filter never edits it, and the policy is not accepted.
    assert!(c
        .bundle
        .envoy
        .route_match_headers
        .contains(&"x-caller-sub".to_string()));
    mcp_access_bundle::validate(&c.bundle).unwrap();
    assert!(backend(&c, "tools").identity_headers.is_empty());
    let st = c.report.policies.iter().find(|p| p.name == "a").unwrap();
    assert!(
        st.conditions.iter().any(|x| !x.accepted
            && x.message
                .contains("an HTTPRoute matches on header x-caller-sub")),
        "{st:#?}"
    );
}

fn header(name: &str, from: IdentityField, claim: Option<&str>) -> IdentityHeader {
    IdentityHeader {
        name: name.into(),
        from,
        claim: claim.map(str::to_string),
    }
}

#[test]
fn identity_headers_are_gathered_per_xbackend() {
    let a = policy(
        "a",
        "2026-01-01T00:00:00Z",
        "tools",
        "  - {name: x-caller-spiffe, from: SPIFFE}\n  - {name: x-caller-team, from: JWTClaim, claim: org.team}",
    );
    let b = policy(
        "b",
        "2026-01-02T00:00:00Z",
        "tools",
        "  - {name: x-caller-sub, from: JWTSubject}\n  - {name: x-caller-spiffe, from: SPIFFE}",
    );
    let c = run(&format!("{a}---\n{b}"));
    assert!(c.report.invalid.is_empty(), "{:#?}", c.report.invalid);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    let tools = backend(&c, "tools");
    assert_eq!(
        tools.identity_headers,
        [
            header("x-caller-spiffe", IdentityField::Spiffe, None),
            header("x-caller-team", IdentityField::JwtClaim, Some("org.team")),
            header("x-caller-sub", IdentityField::JwtSubject, None),
        ]
    );
    let other = backend(&c, "other");
    assert!(other.identity_headers.is_empty());
    for p in &c.report.policies {
        assert!(p.conditions.iter().all(|x| x.accepted), "{p:#?}");
    }
}

#[test]
fn a_header_with_two_values_conflicts_and_the_senior_policy_stands() {
    let senior = policy(
        "senior",
        "2026-01-01T00:00:00Z",
        "tools",
        "  - {name: x-caller, from: SPIFFE}",
    );
    let junior = policy(
        "junior",
        "2026-01-02T00:00:00Z",
        "tools",
        "  - {name: x-caller, from: JWTSubject}\n  - {name: x-caller-team, from: JWTClaim, claim: team}",
    );
    let c = run(&format!("{junior}---\n{senior}"));
    let status = |n: &str| c.report.policies.iter().find(|p| p.name == n).unwrap();
    assert!(status("senior").conditions.iter().all(|x| x.accepted));
    let cond = &status("junior").conditions[0];
    assert!(!cond.accepted);
    assert_eq!(cond.reason, reason::CONFLICTED);
    assert!(
        cond.message.contains("spec.identityHeaders[0]: XBackend mcp/tools already receives x-caller as SPIFFE from AccessPolicy mcp/senior"),
        "{}",
        cond.message
    );
    // Enforced fail-closed; its header that does not conflict is still removed and set.
    let tools = backend(&c, "tools");
    assert_eq!(
        tools.identity_headers,
        [
            header("x-caller", IdentityField::Spiffe, None),
            header("x-caller-team", IdentityField::JwtClaim, Some("team")),
        ]
    );
    // The same header with the same value is no conflict.
    let twin = policy(
        "twin",
        "2026-01-03T00:00:00Z",
        "tools",
        "  - {name: x-caller, from: SPIFFE}",
    );
    let c = run(&format!("{senior}---\n{twin}"));
    assert!(c
        .report
        .policies
        .iter()
        .all(|p| p.conditions.iter().all(|x| x.accepted)));
}

#[test]
fn a_dry_run_policy_sends_no_identity_header_and_conflicts_with_none() {
    let senior = policy(
        "senior",
        "2026-01-01T00:00:00Z",
        "tools",
        "  - {name: x-caller, from: SPIFFE}",
    );
    let dry = policy(
        "dry",
        "2026-01-02T00:00:00Z",
        "tools",
        "  - {name: x-caller, from: JWTSubject}\n  - {name: x-caller-team, from: JWTClaim, claim: team}",
    )
    .replace("  action: Allow\n", "  action: Allow\n  mode: DryRun\n");
    let c = run(&format!("{senior}---\n{dry}"));
    let tools = backend(&c, "tools");
    assert_eq!(
        tools.identity_headers,
        [header("x-caller", IdentityField::Spiffe, None)]
    );
    let status = c.report.policies.iter().find(|p| p.name == "dry").unwrap();
    let cond = &status.conditions[0];
    assert!(cond.accepted, "{cond:#?}");
    let enforced = cond.enforced.as_ref().unwrap();
    assert_eq!(enforced.reason, "DryRun");
    assert!(
        enforced
            .message
            .ends_with("its identityHeaders are neither sent nor removed until it is enforced"),
        "{}",
        enforced.message
    );
}

#[test]
fn identity_header_mistakes_are_refused_with_their_field() {
    let has = |problems: &[String], want: &str| problems.iter().any(|p| p.contains(want));
    let on_tools = |headers: &str| policy("p", "2026-01-01T00:00:00Z", "tools", headers);
    for (yaml, want) in [
        (on_tools("  - {name: authorization, from: SPIFFE}"), "spec.identityHeaders[0].name: Invalid value: \"authorization\" names a header with another meaning"),
        (on_tools("  - {name: X-Caller, from: SPIFFE}"), "spec.identityHeaders[0].name: Invalid value: \"X-Caller\" must be a lowercase HTTP header name"),
        (on_tools("  - {name: x_caller, from: SPIFFE}"), "must not hold '_'"),
        (on_tools("  - {name: mcp-caller, from: SPIFFE}"), "names a header with another meaning"),
        (on_tools("  - {name: x-a, from: JWTClaim}"), "spec.identityHeaders[0].claim: Invalid value: is required with from JWTClaim"),
        (on_tools("  - {name: x-a, from: SPIFFE, claim: sub}"), "spec.identityHeaders[0].claim: Invalid value: is only allowed with from JWTClaim"),
        (on_tools("  - {name: x-a, from: Cookie}"), "spec.identityHeaders[0].from: Unsupported value: \"Cookie\""),
        (on_tools("  - {name: x-a, from: SPIFFE}\n  - {name: x-a, from: JWTSubject}"), "spec.identityHeaders[1]: Duplicate value"),
        (on_tools("  - {from: SPIFFE}"), "spec.identityHeaders[0].name: Required value"),
        (
            r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: gw-level, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: Allow
  identityHeaders: [{name: x-a, from: SPIFFE}]
"#.to_string(),
            "identityHeaders may only be set on a policy that targets XBackends",
        ),
        (
            r#"apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: upstream, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  identityHeaders: [{name: x-a, from: SPIFFE}]
"#.to_string(),
            "spec.identityHeaders: unknown field \"identityHeaders\": only an AccessPolicy (group mcp-access.io) has it",
        ),
    ] {
        let got = refused(&yaml);
        assert!(has(&got, want), "{want}: {got:#?}");
    }
}
