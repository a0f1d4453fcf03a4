//! The policy compiler: cross-namespace references, seniority, limits, conflicts, sections,
//! unsupported features, and the mapping of both API versions.

use mcp_access_bundle::{Action, BaseProtocol, Level, MatchType, Policy};
use mcp_access_k8s::{compile, reason, Compiled, Manifests, ObjectStatus, Options, RouteAction};

use crate::common::{backend, gateway, load, route, status, stream, to_xbackend, xbackend};

fn base() -> String {
    stream(&[
        gateway("mcp", "gw", &[("public", 8080), ("internal", 9090)]),
        xbackend("tools", "tools-server", None),
        route(
            "mcp",
            "tools",
            "name: gw, sectionName: public",
            &to_xbackend(None, "tools"),
        ),
    ])
}

fn manifests(extra: &str) -> Manifests {
    let m = load(&base(), extra);
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    m
}

fn build(extra: &str, o: &Options) -> Compiled {
    let c = compile(&manifests(extra), o);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

fn run(extra: &str) -> Compiled {
    build(extra, &Options::default())
}

fn bundle_policy<'a>(c: &'a Compiled, name: &str) -> Option<&'a Policy> {
    c.bundle.policies.iter().find(|p| p.name == name)
}

fn problems(yaml: &str) -> Vec<String> {
    let mut m = Manifests::default();
    m.add_text("bad.yaml", yaml, "default");
    m.problems().iter().map(ToString::to_string).collect()
}

// ---------------------------------------------------------------------------------------
// ReferenceGrant (seed 004)

fn ext_auth_policy(authz_ns: &str) -> String {
    format!(
        r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: check, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {{name: opa, namespace: {authz_ns}, port: 9000}}
    http: {{path: /authz}}
"#
    )
}

fn grant(in_ns: &str, from_kind: &str, from_ns: &str, to_kind: &str) -> String {
    format!(
        r#"---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: allow, namespace: {in_ns}}}
spec:
  from: [{{group: agentic.networking.x-k8s.io, kind: {from_kind}, namespace: {from_ns}}}]
  to: [{{group: "", kind: {to_kind}}}]
"#
    )
}

#[test]
fn reference_grant_that_fits_permits_the_cross_namespace_authorizer() {
    let c = run(&(ext_auth_policy("authz") + &grant("authz", "XAccessPolicy", "mcp", "Service")));
    let st = status(&c, "check");
    assert_eq!(st.conditions[0].reason, reason::ACCEPTED, "{st:#?}");
    let p = bundle_policy(&c, "check").unwrap();
    assert_eq!(p.action, Action::ExternalAuth);
    let a = &c.bundle.authorizers[0];
    assert_eq!(Some(&a.name), p.external_auth.as_ref());
    assert_eq!(a.cluster, "authz/authz/opa:9000");
    assert_eq!(a.path_prefix, "/authz");
    assert_eq!(c.topology.authorizers[0].namespace, "authz");
}

#[test]
fn reference_grant_of_the_wrong_kind_wrong_namespace_or_removed_does_not() {
    let cases = [
        (
            "wrong to-kind",
            grant("authz", "XAccessPolicy", "mcp", "ConfigMap"),
        ),
        (
            "wrong from-kind",
            grant("authz", "HTTPRoute", "mcp", "Service"),
        ),
        (
            "wrong from-namespace",
            grant("authz", "XAccessPolicy", "other", "Service"),
        ),
        (
            "grant in the wrong namespace",
            grant("mcp", "XAccessPolicy", "mcp", "Service"),
        ),
        ("removed", String::new()),
    ];
    for (what, g) in cases {
        let c = run(&(ext_auth_policy("authz") + &g));
        let st = status(&c, "check");
        assert_eq!(
            st.conditions[0].reason,
            reason::REF_NOT_PERMITTED,
            "{what}: {st:#?}"
        );
        assert!(
            st.conditions[0].message.contains("ReferenceGrant"),
            "{what}"
        );
        // Fail closed: the requests the authorizer would judge are denied.
        assert!(bundle_policy(&c, "check").is_none(), "{what}");
        let standin = bundle_policy(&c, "check.not-accepted").unwrap();
        assert_eq!(standin.action, Action::Deny, "{what}");
        assert!(c.bundle.authorizers.is_empty(), "{what}");
    }
    // Same namespace needs no grant.
    let c = run(&ext_auth_policy("mcp"));
    assert_eq!(status(&c, "check").conditions[0].reason, reason::ACCEPTED);
}

#[test]
fn gep_709_reference_policy_spelling_is_honoured() {
    let rp = r#"---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: ReferencePolicy
metadata: {name: allow, namespace: authz}
spec:
  from: [{group: agentic.networking.x-k8s.io, kind: XAccessPolicy, namespace: mcp}]
  to: [{group: core, kind: Service}]
"#;
    let c = run(&(ext_auth_policy("authz") + rp));
    assert_eq!(status(&c, "check").conditions[0].reason, reason::ACCEPTED);
}

#[test]
fn httproute_backend_ref_across_namespaces_needs_a_grant() {
    let route = |grant: &str| {
        format!(
            r#"
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: remote, namespace: team}}
spec:
  mcp: {{serviceName: remote, port: 8000}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: remote, namespace: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /remote}}}}]
    backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: remote, namespace: team}}]
{grant}"#
        )
    };
    let fits = r#"---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes, namespace: team}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: mcp}]
  to: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: remote}]
"#;
    let c = run(&route(fits));
    let st = c.report.routes.iter().find(|r| r.name == "remote").unwrap();
    assert!(st.accepted(), "{st:#?}");
    let b = backend(&c, "remote");
    assert_eq!(b.route_names, ["mcp/remote/rule-0/match-0"]);
    // No sectionName: behind both listeners.
    assert!(c.topology.gateways[0]
        .listeners
        .iter()
        .all(|l| l.routes.iter().any(|e| e.route == "mcp/remote")));

    for (what, g) in [
        (
            "wrong kind",
            fits.replace("kind: XBackend", "kind: Service"),
        ),
        ("wrong name", fits.replace("name: remote}", "name: other}")),
        (
            "wrong namespace",
            fits.replace("namespace: mcp}", "namespace: elsewhere}"),
        ),
        ("removed", String::new()),
    ] {
        let c = run(&route(&g));
        let st = c.report.routes.iter().find(|r| r.name == "remote").unwrap();
        assert_eq!(
            st.conditions[0].reason,
            reason::REF_NOT_PERMITTED,
            "{what}: {st:#?}"
        );
        // The rule answers 500 instead of forwarding.
        let entry = c.topology.gateways[0].listeners[0]
            .routes
            .iter()
            .find(|e| e.route == "mcp/remote")
            .unwrap();
        assert!(matches!(entry.action, RouteAction::Fail { .. }), "{what}");
        let b = backend(&c, "remote");
        assert!(b.route_names.is_empty(), "{what}");
    }
}

// ---------------------------------------------------------------------------------------
// Seniority, limits, conflicts

fn allow_policy(name: &str, created: Option<&str>, target: &str) -> String {
    let ts = created
        .map(|t| format!(", creationTimestamp: \"{t}\""))
        .unwrap_or_default();
    let (group, kind) = if target == "gw" {
        ("gateway.networking.k8s.io", "Gateway")
    } else {
        ("agentic.networking.x-k8s.io", "XBackend")
    };
    format!(
        r#"---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: {name}, namespace: mcp{ts}}}
spec:
  targetRefs: [{{group: {group}, kind: {kind}, name: {target}}}]
  action: Allow
  rules:
  - name: r
    source: {{type: SPIFFE, spiffe: "spiffe://example.org/{name}"}}
"#
    )
}

#[test]
fn seniority_is_creation_time_then_namespace_and_name() {
    let yaml = [
        allow_policy("zeta", Some("2024-01-01T00:00:00Z"), "tools"),
        allow_policy("alpha", Some("2024-06-01T00:00:00Z"), "tools"),
        allow_policy("beta", None, "tools"),
        allow_policy("aardvark", None, "tools"),
    ]
    .concat();
    let c = run(&yaml);
    let order: Vec<(&str, Option<u64>)> = c
        .report
        .policies
        .iter()
        .map(|p| (p.name.as_str(), p.seniority))
        .collect();
    assert_eq!(
        order,
        [
            ("zeta", Some(1)),
            ("alpha", Some(2)),
            ("aardvark", Some(3)),
            ("beta", Some(4))
        ]
    );
    assert_eq!(bundle_policy(&c, "zeta").unwrap().seniority, 1);
    assert_eq!(bundle_policy(&c, "beta").unwrap().seniority, 4);
}

#[test]
fn per_target_limit_rejects_the_junior_and_names_the_seniors() {
    let yaml = [
        allow_policy("p1", Some("2024-01-01T00:00:00Z"), "tools"),
        allow_policy("p2", Some("2024-01-02T00:00:00Z"), "tools"),
        allow_policy("p3", Some("2024-01-03T00:00:00Z"), "tools"),
        allow_policy("g1", Some("2024-01-04T00:00:00Z"), "gw"),
    ]
    .concat();
    let o = Options {
        max_policies_per_target: 2,
        ..Options::default()
    };
    let c = build(&yaml, &o);
    assert!(status(&c, "p1").accepted());
    assert!(status(&c, "p2").accepted());
    let loser = &status(&c, "p3").conditions[0];
    assert_eq!(loser.reason, reason::LIMIT);
    assert!(
        loser.message.contains("mcp/p1") && loser.message.contains("mcp/p2"),
        "{}",
        loser.message
    );
    // Another target has its own count.
    assert!(status(&c, "g1").accepted());
    // The junior is enforced fail-closed: an Allow that admits nothing.
    let standin = bundle_policy(&c, "p3.not-accepted").unwrap();
    assert_eq!(
        (standin.action, standin.rules.as_deref()),
        (Action::Allow, None)
    );
    assert!(standin
        .not_accepted
        .as_deref()
        .is_some_and(|w| w.contains(reason::LIMIT)));

    // The default limit (5) accepts all three; 0 means no limit.
    assert!(run(&yaml)
        .report
        .policies
        .iter()
        .all(ObjectStatus::accepted));
    let unlimited = Options {
        max_policies_per_target: 0,
        ..Options::default()
    };
    assert!(build(&yaml, &unlimited)
        .report
        .policies
        .iter()
        .all(ObjectStatus::accepted));
}

#[test]
fn external_auth_limit_per_target_is_separate() {
    let ext = |name: &str, ts: &str| {
        format!(
            r#"---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: {name}, namespace: mcp, creationTimestamp: "{ts}"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  action: ExternalAuth
  externalAuth: {{protocol: HTTP, backendRef: {{name: opa, port: 9000}}, http: {{}}}}
"#
        )
    };
    let yaml = ext("older", "2024-01-01T00:00:00Z") + &ext("newer", "2024-02-01T00:00:00Z");
    let c = build(
        &yaml,
        &Options {
            max_external_auth_per_target: 1,
            ..Options::default()
        },
    );
    assert!(status(&c, "older").accepted());
    assert_eq!(status(&c, "newer").conditions[0].reason, reason::LIMIT);
    // By default several ExternalAuth policies per target are fine (seed 000).
    assert!(run(&yaml)
        .report
        .policies
        .iter()
        .all(ObjectStatus::accepted));
}

#[test]
fn the_same_object_twice_is_a_conflict_and_the_senior_wins() {
    let older = allow_policy("dup", Some("2024-01-01T00:00:00Z"), "tools");
    let newer = allow_policy("dup", Some("2024-03-01T00:00:00Z"), "gw");
    let c = run(&(newer + &older));
    let statuses: Vec<&ObjectStatus> = c
        .report
        .policies
        .iter()
        .filter(|p| p.name == "dup")
        .collect();
    assert_eq!(statuses.len(), 2);
    assert!(statuses[0].accepted());
    assert_eq!(statuses[1].conditions[0].reason, reason::CONFLICTED);
    let p = bundle_policy(&c, "dup").unwrap();
    assert_eq!(p.level, Level::Backend, "the older definition is used");
    assert!(bundle_policy(&c, "dup.not-accepted").is_none());
}

// ---------------------------------------------------------------------------------------
// sectionName

#[test]
fn section_name_limits_policies_and_routes_to_one_listener() {
    let p = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: internal-only, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: internal}]
  action: Allow
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: no-such-listener, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: nope}]
  action: Allow
"#;
    let c = run(p);
    let target = &bundle_policy(&c, "internal-only").unwrap().targets[0];
    assert_eq!(target.section_name.as_deref(), Some("internal"));
    let missing = &status(&c, "no-such-listener").conditions[0];
    assert_eq!(missing.reason, reason::TARGET_NOT_FOUND);
    assert!(bundle_policy(&c, "no-such-listener").is_none());
    // Which listener was meant is unknown: the stand-in (admits nothing) covers the Gateway.
    let standin = bundle_policy(&c, "no-such-listener.not-accepted").unwrap();
    assert_eq!(standin.targets[0].section_name, None);
    assert_eq!(standin.action, Action::Allow);
    assert!(standin.rules.is_none() && standin.not_accepted.is_some());
    // The route's parentRef names the public listener: the backend sits behind it only.
    let gw = &c.topology.gateways[0];
    let public = gw.listeners.iter().find(|l| l.name == "public").unwrap();
    let internal = gw.listeners.iter().find(|l| l.name == "internal").unwrap();
    assert_eq!(public.routes.len(), 1);
    assert!(internal.routes.is_empty());
    assert_eq!(c.bundle.gateways[0].listeners.len(), 2);
    let gw = &c.report.gateways[0].conditions;
    assert!(
        gw[0].message.ends_with("backends behind it: mcp/tools"),
        "{gw:?}"
    );
    assert!(
        gw[1].message.ends_with("backends behind it: none"),
        "{gw:?}"
    );
}

#[test]
fn listener_ports_follow_overrides() {
    let mut o = Options {
        port_offset: 10000,
        ..Options::default()
    };
    o.listen.insert("gw/internal".into(), 19999);
    let c = build("", &o);
    let ports: Vec<(String, u16)> = c.bundle.gateways[0]
        .listeners
        .iter()
        .map(|l| (l.name.clone(), l.port))
        .collect();
    assert_eq!(
        ports,
        [("public".into(), 18080), ("internal".into(), 19999)]
    );
    assert_eq!(c.topology.gateways[0].listeners[0].port, 18080);
}

// ---------------------------------------------------------------------------------------
// Unsupported features are reported, never dropped

#[test]
fn cel_rules_compile_and_invalid_ones_are_enforced_fail_closed() {
    let p = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: cel, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: verify-tools
    authorization:
      type: CEL
      cel: {expression: "request.mcp.tool_name.startsWith('verify_')"}
"#;
    let c = run(p);
    assert!(status(&c, "cel").accepted());
    let rule = &bundle_policy(&c, "cel").unwrap().rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.authorization.as_ref().unwrap().cel.as_deref(),
        Some("request.mcp.tool_name.startsWith('verify_')")
    );
    // An expression the CEL checker refuses: Invalid, with the field, and a stand-in.
    let bad = p.replace("startsWith('verify_')", "startsWith('verify_'");
    let c = run(&bad);
    let st = &status(&c, "cel").conditions[0];
    assert!(!st.accepted);
    assert_eq!(st.reason, reason::INVALID);
    assert!(
        st.message
            .contains("spec.rules[0].authorization.cel.expression: invalid CEL expression"),
        "{}",
        st.message
    );
    assert!(st.message.contains("fail-closed"), "{}", st.message);
    let standin = bundle_policy(&c, "cel.not-accepted").unwrap();
    assert_eq!(standin.action, Action::Allow);
    assert_eq!(
        standin.rules.as_deref(),
        None,
        "an Allow stand-in has no rules"
    );
    assert!(standin
        .not_accepted
        .as_deref()
        .is_some_and(|w| w.contains("CEL")));
    // As a controller would: left out entirely.
    let c = build(
        &bad,
        &Options {
            skip_rejected: true,
            ..Options::default()
        },
    );
    assert!(c.bundle.policies.is_empty());
    assert!(status(&c, "cel").conditions[0]
        .message
        .contains("not enforced"));
}

#[test]
fn grpc_authorizers_map_to_grpc_bundle_authorizers() {
    let p = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: grpc, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: ExternalAuth
  externalAuth:
    protocol: GRPC
    backendRef: {name: authorino, port: 50051}
    grpc: {allowedHeaders: [authorization, x-team]}
    forwardBody: {maxSize: 512}
  rules:
  - name: sa
    source: {type: ServiceAccount, serviceAccount: {name: agent}}
"#;
    let c = run(p);
    let st = &status(&c, "grpc").conditions[0];
    assert_eq!(st.reason, reason::ACCEPTED, "{}", st.message);
    let a = &c.bundle.authorizers[0];
    assert_eq!(a.protocol, mcp_access_bundle::AuthorizerProtocol::Grpc);
    assert_eq!(a.cluster, "authz-grpc/mcp/authorino:50051");
    assert_eq!(a.allowed_headers, ["authorization", "x-team"]);
    assert_eq!(a.forward_body_max_bytes, 512);
    let m = &c.topology.authorizers[0];
    assert!(m.grpc && m.name == "authorino" && m.port == 50051, "{m:?}");
}

/// A v0alpha0 XAccessPolicy `ext` on Gateway gw sending ServiceAccount agent's calls to
/// authorizer `opa` (`protocol`, `port`) with `settings`, bodies up to `max_body` bytes.
fn v0alpha0_ext(protocol: &str, port: u16, settings: &str, max_body: u32) -> String {
    format!(
        r#"
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {{name: ext, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  rules:
  - name: agent-calls
    source: {{type: ServiceAccount, serviceAccount: {{name: agent}}}}
    authorization:
      type: ExternalAuth
      externalAuth:
        protocol: {protocol}
        backendRef: {{name: opa, port: {port}}}
        {settings}
        forwardBody: {{maxSize: {max_body}}}
"#
    )
}

#[test]
fn v0alpha0_grpc_external_auth_maps_to_a_grpc_authorizer() {
    let c = run(&v0alpha0_ext(
        "GRPC",
        9191,
        "grpc: {allowedHeaders: [x-a]}",
        64,
    ));
    assert_eq!(status(&c, "ext").conditions[0].reason, reason::ACCEPTED);
    let a = &c.bundle.authorizers[0];
    assert_eq!(
        (a.protocol, a.cluster.as_str(), a.forward_body_max_bytes),
        (
            mcp_access_bundle::AuthorizerProtocol::Grpc,
            "authz-grpc/mcp/opa:9191",
            64
        )
    );
    assert_eq!(a.allowed_headers, ["x-a"]);
}

#[test]
fn unsupported_route_filters_reject_the_route() {
    let r = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: shadow, port: 80}}
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
"#;
    let c = run(r);
    let st = c.report.routes.iter().find(|r| r.name == "mirror").unwrap();
    assert_eq!(st.conditions[0].reason, reason::UNSUPPORTED);
    assert!(st.conditions[0].message.contains("RequestMirror"));
}

// ---------------------------------------------------------------------------------------
// Mapping

#[test]
fn v0alpha0_inline_tools_and_external_auth_map_as_documented() {
    let p = r#"
apiVersion: agentic.prototype.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {name: tools-list, namespace: mcp}
spec:
  targetRefs: [{group: agentic.prototype.x-k8s.io, kind: XBackend, name: tools}]
  rules:
  - name: some
    source: {type: ServiceAccount, serviceAccount: {name: agent, namespace: agents}}
    authorization: {type: InlineTools, tools: [a, b]}
  - name: none
    source: {type: SPIFFE, spiffe: "spiffe://example.org/x"}
    authorization: {type: InlineTools, tools: []}
---
"#;
    let c = run(&format!(
        "{p}{}",
        v0alpha0_ext(
            "HTTP",
            9000,
            "http: {allowedHeaders: [x-a], allowedResponseHeaders: [x-b]}",
            4096
        )
    ));
    let t = bundle_policy(&c, "tools-list").unwrap();
    assert_eq!((t.action, t.level), (Action::Allow, Level::Backend));
    let rules = t.rules.as_ref().unwrap();
    let mcp = rules[0]
        .authorization
        .as_ref()
        .unwrap()
        .mcp
        .as_ref()
        .unwrap();
    assert_eq!(mcp.methods[0].name, "tools/call");
    assert_eq!(
        mcp.methods[0].params.as_deref(),
        Some(&["a".to_string(), "b".to_string()][..])
    );
    assert_eq!(mcp.base_protocol, BaseProtocol::Match);
    let sa = rules[0]
        .source
        .as_ref()
        .unwrap()
        .service_account
        .as_ref()
        .unwrap();
    assert_eq!(
        (sa.namespace.as_deref(), sa.name.as_str()),
        (Some("agents"), "agent")
    );
    let empty = rules[1]
        .authorization
        .as_ref()
        .unwrap()
        .mcp
        .as_ref()
        .unwrap();
    assert!(
        empty.methods.is_empty() && empty.base_protocol == BaseProtocol::Match,
        "an empty list admits no tool call, only the base protocol"
    );

    let e = bundle_policy(&c, "ext").unwrap();
    assert_eq!((e.action, e.level), (Action::ExternalAuth, Level::Gateway));
    let rule = &e.rules.as_ref().unwrap()[0];
    assert_eq!(rule.name, "agent-calls");
    assert!(
        rule.source.is_some() && rule.authorization.is_none(),
        "selects by source"
    );
    let a = c
        .bundle
        .authorizers
        .iter()
        .find(|a| Some(&a.name) == e.external_auth.as_ref())
        .unwrap();
    assert_eq!(a.allowed_headers, ["x-a"]);
    assert_eq!(a.allowed_response_headers, ["x-b"]);
    assert_eq!(a.forward_body_max_bytes, 4096);
    assert_eq!(
        c.bundle.identity.trust_domain.as_deref(),
        Some("cluster.local")
    );
}

#[test]
fn v1alpha1_inline_maps_every_field() {
    let p = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: inline, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: Allow
  rules:
  - name: everything
    source: {type: SPIFFE, spiffe: "spiffe://example.org/agent"}
    authorization:
      type: Inline
      methods: [POST, GET]
      paths: [{type: Exact, value: /mcp}, {value: /tools}, {type: RegularExpression, value: "/v[0-9]+/mcp"}]
      headers: [{name: x-team, value: blue}, {name: x-env, type: RegularExpression, value: "prod|staging"}]
      hosts: ["*.example.org"]
      ports: [8080]
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods:
        - {name: tools/call, params: [echo]}
        - {name: tools/list, params: []}
        - {name: resources}
  - name: no-authorization
"#;
    let c = run(p);
    let rules = bundle_policy(&c, "inline").unwrap().rules.clone().unwrap();
    let a = rules[0].authorization.as_ref().unwrap();
    assert_eq!(a.methods, ["POST", "GET"]);
    assert_eq!(
        a.paths
            .iter()
            .map(|p| (p.kind, p.value.as_str()))
            .collect::<Vec<_>>(),
        [
            (MatchType::Exact, "/mcp"),
            (MatchType::PathPrefix, "/tools"),
            (MatchType::RegularExpression, "/v[0-9]+/mcp")
        ]
    );
    assert_eq!(a.headers[1].kind, MatchType::RegularExpression);
    assert_eq!(a.hosts, ["*.example.org"]);
    assert_eq!(a.ports, [8080]);
    let mcp = a.mcp.as_ref().unwrap();
    assert_eq!(mcp.base_protocol, BaseProtocol::Match);
    assert_eq!(
        mcp.methods[0].params.as_deref(),
        Some(&["echo".to_string()][..])
    );
    assert_eq!(mcp.methods[1].params, None, "empty params: any");
    assert_eq!(mcp.methods[2].params, None);
    assert!(rules[1].source.is_none() && rules[1].authorization.is_none());
    // Without the option, base protocol methods are skipped.
    let skip = run(&p.replace(
        "mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS",
        "mcpBaseProtocolMethodsOption: SKIP_BASE_PROTOCOL_METHODS",
    ));
    let r = bundle_policy(&skip, "inline")
        .unwrap()
        .rules
        .clone()
        .unwrap();
    assert_eq!(
        r[0].authorization
            .as_ref()
            .unwrap()
            .mcp
            .as_ref()
            .unwrap()
            .base_protocol,
        BaseProtocol::Skip
    );
}

#[test]
fn routes_map_matches_rewrites_and_route_names() {
    let r = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rich, namespace: mcp}
spec:
  parentRefs: [{name: gw, sectionName: internal}]
  hostnames: [mcp.example.org]
  rules:
  - matches:
    - path: {type: Exact, value: /a/mcp}
      method: POST
      headers: [{name: x-team, value: blue}]
      queryParams: [{name: v, value: "2"}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: tools.internal, path: {type: ReplaceFullPath, replaceFullPath: /mcp}}
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-a, value: "1"}], remove: [x-b]}
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
    timeouts: {request: 30s}
"#;
    let c = run(r);
    let l = c.topology.gateways[0]
        .listeners
        .iter()
        .find(|l| l.name == "internal")
        .unwrap();
    let e = &l.routes[0];
    assert_eq!(e.name, "mcp/rich/rule-0/match-0");
    assert_eq!(e.hostnames, ["mcp.example.org"]);
    assert_eq!(e.method.as_deref(), Some("POST"));
    match &e.action {
        RouteAction::Forward {
            host_rewrite,
            timeout_ms,
            request_headers,
            ..
        } => {
            assert_eq!(host_rewrite.as_deref(), Some("tools.internal"));
            assert_eq!(*timeout_ms, Some(30_000));
            assert_eq!(request_headers.remove, ["x-b"]);
        }
        other => panic!("{other:?}"),
    }
    let b = &c.bundle.backends[0];
    assert!(b
        .route_names
        .contains(&"mcp/rich/rule-0/match-0".to_string()));
    assert_eq!(b.cluster_names, ["xbackend/mcp/tools"]);
}

#[test]
fn a_route_that_never_reaches_the_mcp_path_is_warned_about() {
    let r = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: no-rewrite, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /local/mcp}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
"#;
    let c = run(r);
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.contains("never at its MCP path /mcp")),
        "{:#?}",
        c.report.warnings
    );
}

// ---------------------------------------------------------------------------------------
// Validation beyond the CRD examples

#[test]
fn validation_rejects_what_the_api_server_would() {
    let policy = |spec: &str| {
        format!(
            "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XAccessPolicy\nmetadata: {{name: p, namespace: ns}}\nspec:\n{spec}"
        )
    };
    let target = "  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: b}]\n";
    let sa = "source: {type: ServiceAccount, serviceAccount: {name: a}}";
    let ext = "authorization: {type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: x, port: 1}, http: {}}}";
    let cases: Vec<(String, &str)> = vec![
        (policy(&format!("{target}  rules:\n  - {{name: e1, {sa}, {ext}}}\n  - {{name: e2, {sa}, {ext}}}\n")),
         "a maximum of one rule per policy can specify 'ExternalAuth' authorization type"),
        (policy(&format!("{target}  rules:\n  - {{name: r, {sa}}}\n  - {{name: r, {sa}}}\n")),
         "AccessRule names must be unique"),
        (policy(&format!("{target}  rules:\n  - {{name: Bad_Name, {sa}}}\n")),
         "spec.rules[0].name: Invalid value: \"Bad_Name\""),
        (policy(&format!("{target}  rules:\n{}", (0..11).map(|i| format!("  - {{name: r{i}, {sa}}}\n")).collect::<String>())),
         "spec.rules: Too many: 11: must have at most 10 items"),
        (policy(&format!("{target}  rules:\n  - {{name: r, source: {{type: SPIFFE, spiffe: \"http://nope\"}}}}\n")),
         "spec.rules[0].source.spiffe: Invalid value: \"http://nope\""),
        (policy(&format!("{target}  rules:\n  - {{name: r, {sa}, authorization: {{type: ExternalAuth}}}}\n")),
         "externalAuth must be specified when type is set to 'ExternalAuth'"),
        (policy(&format!("  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}}]\n  rules:\n  - {{name: r, {sa}}}\n")),
         "TargetRef must have group agentic.networking.x-k8s.io and kind XBackend, or group gateway.networking.k8s.io and kind Gateway"),
        (policy(&format!("{target}  rules:\n  - {{name: r, {sa}, sourceSpiffe: x}}\n")),
         "spec.rules[0].sourceSpiffe: unknown field `sourceSpiffe`"),
        ("apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {name: p}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g}]\n  action: Allow\n  rules:\n  - name: r\n    authorization: {type: Inline, cel: {expression: x}}\n".into(),
         "cel must not be specified when type is set to 'Inline'"),
        ("apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {name: p}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g}]\n  action: ExternalAuth\n  externalAuth: {protocol: HTTP, backendRef: {name: svc}}\n".into(),
         "Must have port for Service reference"),
        ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules:\n  - matches: [{path: {type: PathPrefix, value: /a}}, {path: {type: PathPrefix, value: /b}}]\n    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]\n".into(),
         "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"),
        ("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  gatewayClassName: c\n  listeners: [{name: a, protocol: HTTP, port: 80, tls: {certificateRefs: [{name: s}]}}]\n".into(),
         "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"),
        ("apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: g}\nspec:\n  from: [{group: x, kind: Y}]\n  to: [{group: \"\", kind: Service}]\n".into(),
         "spec.from[0].namespace: Required value"),
        ("apiVersion: gateway.networking.k8s.io/v3\nkind: Gateway\nmetadata: {name: g}\nspec: {}\n".into(),
         "no matches for kind \"Gateway\" in version \"gateway.networking.k8s.io/v3\""),
        ("apiVersion: v1\nkind: Namespace\nmetadata: {name: Bad}\n".into(),
         "metadata.name: Invalid value: \"Bad\""),
        ("kind: XBackend\n".into(), "Object 'apiVersion' and 'kind' must be set"),
        ("a: [unclosed\n".into(), "invalid YAML"),
    ];
    for (yaml, expected) in cases {
        let found = problems(&yaml);
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "expected `{expected}` for\n{yaml}\ngot {found:#?}"
        );
        assert!(
            found.iter().all(|p| p.starts_with("bad.yaml: document 1")),
            "{found:?}"
        );
    }
}

#[test]
fn other_kinds_are_listed_not_dropped_and_lists_are_read() {
    let yaml = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: tools-server, namespace: mcp}
  spec: {ports: [{port: 8000}]}
- apiVersion: agentic.networking.x-k8s.io/v0alpha0
  kind: XBackend
  metadata: {name: listed, namespace: mcp}
  spec: {mcp: {hostname: mcp.example.com, port: 443}}
"#;
    let mut m = Manifests::default();
    m.add_text("list.yaml", yaml, "default");
    assert!(m.problems().is_empty());
    assert_eq!(m.backends.len(), 1);
    let c = compile(&m, &Options::default());
    assert_eq!(c.report.skipped.len(), 1);
    assert_eq!(c.report.skipped[0].kind, "Service");
    assert!(c.report.skipped[0].source.contains("items[0]"));
}

#[test]
fn json_manifests_are_read_too() {
    let mut m = Manifests::default();
    m.add_text(
        "b.json",
        r#"{"apiVersion": "agentic.networking.x-k8s.io/v0alpha0", "kind": "XBackend",
            "metadata": {"name": "j"}, "spec": {"mcp": {"serviceName": "s", "port": 80}}}"#,
        "team",
    );
    assert!(m.problems().is_empty(), "{:?}", m.problems());
    assert_eq!(m.backends[0].meta.namespace, "team");
}

#[test]
fn a_target_in_another_namespace_or_misspelled_is_named() {
    let p = r#"
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: other-namespace, namespace: default}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: misspelled, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tool}]
  action: Allow
"#;
    let c = run(p);
    let other = &status(&c, "other-namespace").conditions[0];
    assert_eq!(other.reason, reason::TARGET_NOT_FOUND);
    assert!(
        other
            .message
            .contains("XBackend tools is in namespace mcp: a targetRef names an object of the policy's own namespace"),
        "{}",
        other.message
    );
    let near = &status(&c, "misspelled").conditions[0];
    assert!(
        near.message.contains("did you mean `tools`?"),
        "{}",
        near.message
    );
}

#[test]
fn a_byte_order_mark_at_the_start_of_a_file_is_read_past() {
    let backend = |name: &str| {
        format!("apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {{name: {name}}}\nspec: {{mcp: {{hostname: a.example, port: 443}}}}\n")
    };
    let mut m = Manifests::default();
    m.add_text("bom.yaml", &format!("\u{feff}{}", backend("y")), "default");
    m.add_text(
        "bom.json",
        "\u{feff}{\"apiVersion\": \"agentic.networking.x-k8s.io/v0alpha0\", \"kind\": \"XBackend\", \"metadata\": {\"name\": \"j\"}, \"spec\": {\"mcp\": {\"serviceName\": \"s\", \"port\": 80}}}",
        "default",
    );
    assert!(m.problems().is_empty(), "{:?}", m.problems());
    assert_eq!(m.backends.len(), 2);
    // Only at the start: one inside a document is text, and refused there.
    let mut m = Manifests::default();
    m.add_text(
        "mid.yaml",
        &format!("{}---\n\u{feff}\u{feff}{}", backend("a"), backend("b")),
        "default",
    );
    assert!(!m.problems().is_empty());
}

#[test]
fn a_yaml_flow_mapping_is_not_mistaken_for_json() {
    let mut m = Manifests::default();
    m.add_text(
        "flow.yaml",
        "{apiVersion: agentic.networking.x-k8s.io/v0alpha0, kind: XBackend, metadata: {name: f}, spec: {mcp: {hostname: a.example, port: 443}}}\n",
        "default",
    );
    assert!(m.problems().is_empty(), "{:?}", m.problems());
    assert_eq!(m.backends.len(), 1);
}

// ---------------------------------------------------------------------------------------
// A backendRef to the Service an XBackend describes (how Envoy Gateway routes)

#[test]
fn a_service_backend_ref_is_the_xbackend_that_describes_it() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: by-service, namespace: mcp}
spec:
  parentRefs: [{name: gw, sectionName: internal}]
  rules:
  - backendRefs: [{name: tools-server, port: 8000}]
"#;
    let c = run(route);
    let tools = backend(&c, "tools");
    assert!(
        tools
            .route_names
            .iter()
            .any(|r| r.starts_with("mcp/by-service/")),
        "{:?}",
        tools.route_names
    );
    assert!(c.topology.services.is_empty(), "no plain Service cluster");
    // Another port is another Service port: a plain Service, not the XBackend.
    let other = run(&route.replace("port: 8000", "port: 9000"));
    let tools = backend(&other, "tools");
    assert!(!tools
        .route_names
        .iter()
        .any(|r| r.starts_with("mcp/by-service/")));
    assert_eq!(other.topology.services.len(), 1);
    // Two XBackends describing one Service: ambiguous, the rule forwards nowhere.
    let twin = r#"
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: tools-twin, namespace: mcp}
spec:
  mcp: {serviceName: tools-server, port: 8000}
---"#;
    let c = run(&format!("{twin}{route}"));
    let st = c
        .report
        .routes
        .iter()
        .find(|r| r.name == "by-service")
        .unwrap();
    let msg = &st.conditions[0].message;
    assert!(
        msg.contains("described by more than one XBackend (mcp/tools, mcp/tools-twin)"),
        "{st:#?}"
    );
}
