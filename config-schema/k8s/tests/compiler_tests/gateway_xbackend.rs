//! Gateway API's XBackend (`gateway.networking.x-k8s.io/v1alpha1`, v1.6): validated as its
//! vendored CRD says, compiled into the same bundle backend as kube-agentic-networking's
//! XBackend, and taken wherever an XBackend is referred to.

use mcp_access_k8s::{compile, reason, BackendTlsModel, Compiled, Manifests, Options};
use serde_json::Value;

use crate::common::{backend, gateway, load, policy, status};

const CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crds/upstream/gateway-api/gateway.networking.x-k8s.io_xbackends.yaml"
);

/// A Gateway API XBackend `name` in mcp with `spec` (a flow mapping's entries).
fn gxb(name: &str, spec: &str) -> String {
    format!("apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\nmetadata: {{name: {name}, namespace: mcp}}\nspec: {{{spec}}}\n")
}

const TOOLS: &str =
    "type: ExternalHostname, externalHostname: {hostname: tools.example.com}, port: {port: 443}";

/// A Gateway and a route to XBackend `name` of `group`, with `port` on the backendRef if given.
fn infra(group: &str, name: &str, port: Option<u16>) -> String {
    let port = port.map(|p| format!(", port: {p}")).unwrap_or_default();
    format!(
        "{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: mcp}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - backendRefs: [{{group: {group}, kind: XBackend, name: {name}{port}}}]\n",
        gateway("mcp", "gw", &[("http", 8080)])
    )
}

fn allow_policy(group: &str, name: &str) -> String {
    format!("apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\nmetadata: {{name: p, namespace: mcp}}\nspec:\n  targetRefs: [{{group: {group}, kind: XBackend, name: {name}}}]\n  action: Allow\n  rules:\n  - name: echo\n    authorization:\n      type: Inline\n      mcp:\n        methods: [{{name: tools/call, params: [echo]}}]\n")
}

const GX: &str = "gateway.networking.x-k8s.io";
const AG: &str = "agentic.networking.x-k8s.io";

fn compiled(m: &Manifests) -> Compiled {
    assert!(m.problems().is_empty(), "{:?}", m.problems());
    let c = compile(m, &Options::default());
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

/// The problems (field, message) of one object.
fn problems(doc: &str) -> Vec<(String, String)> {
    let mut m = Manifests::default();
    m.add_text("x.yaml", doc, "default");
    m.problems()
        .into_iter()
        .map(|p| (p.field, p.message))
        .collect()
}

#[test]
fn an_external_hostname_xbackend_compiles_like_the_agentic_kind() {
    let m = load(
        &infra(GX, "tools", None),
        &format!("{}---\n{}", gxb("tools", TOOLS), allow_policy(GX, "tools")),
    );
    let c = compiled(&m);
    assert!(c.report.backends[0].accepted(), "{:#?}", c.report.backends);
    let b = &c.topology.backends[0];
    assert_eq!(b.hostname.as_deref(), Some("tools.example.com"));
    assert_eq!(
        (b.port, b.tls.clone(), b.service_name.as_deref()),
        (443, Some(None), None)
    );
    assert_eq!(b.group(), GX);
    assert_eq!(backend(&c, "tools").namespace, "mcp");
    assert!(status(&c, "p").accepted(), "{:#?}", status(&c, "p"));
    let targets = &policy(&c, "p").targets;
    assert_eq!(serde_json::to_value(targets).unwrap()[0]["name"], "tools");
    // The route reaches it; no warning about its MCP path (the default, /mcp, under `/`).
    assert!(c.report.routes[0].accepted(), "{:#?}", c.report.routes);

    // The same topology with the agentic kind: the same bundle but for nothing.
    let agentic = load(
        &infra(AG, "tools", None),
        &format!(
            "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {{name: tools, namespace: mcp}}\nspec:\n  mcp: {{hostname: tools.example.com, port: 443}}\n---\n{}",
            allow_policy(AG, "tools")
        ),
    );
    let a = compiled(&agentic);
    assert_eq!(
        serde_json::to_value(&a.bundle).unwrap(),
        serde_json::to_value(&c.bundle).unwrap()
    );
}

#[test]
fn tls_mode_decides_tls_and_validation_what_is_checked() {
    let server_only = BackendTlsModel {
        sni: "tools.example.com".into(),
        ca_refs: vec![],
        sans: vec![],
        client_certificate: None,
    };
    let mutual = BackendTlsModel {
        sni: "mcp.internal".into(),
        ca_refs: vec!["mcp/ca".into()],
        sans: vec![
            ("DNS".into(), "tools.example.com".into()),
            ("URI".into(), "spiffe://example.org/tools".into()),
        ],
        client_certificate: Some("mcp/client".into()),
    };
    for (tls, want) in [
        ("", None),
        (", tls: {mode: None}", None),
        (
            ", tls: {mode: ServerOnly, validation: {hostname: tools.example.com, wellKnownCACertificates: System}}",
            Some(server_only),
        ),
        (
            ", tls: {mode: ClientAndServer, clientCertificateRef: {name: client}, validation: {hostname: mcp.internal, caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], subjectAltNames: [{type: Hostname, hostname: tools.example.com}, {type: URI, uri: 'spiffe://example.org/tools'}]}}",
            Some(mutual),
        ),
    ] {
        let m = load(&infra(GX, "tools", None), &gxb("tools", &format!("{TOOLS}{tls}")));
        let c = compiled(&m);
        assert!(c.report.backends[0].accepted(), "{tls}: {:#?}", c.report.backends);
        assert_eq!(c.topology.backends[0].tls, Some(want), "{tls}");
    }
}

#[test]
fn every_rule_of_the_vendored_crd_is_enforced() {
    // (spec, field, message)
    let cases: &[(&str, &str, &str)] = &[
        ("port: {port: 443}", "spec.type", "Required value"),
        ("type: EndpointSelector, port: {port: 443}", "spec.type", "Unsupported value: \"EndpointSelector\": supported values: \"ExternalHostname\""),
        ("type: ExternalHostname, port: {port: 443}", "spec", "Invalid value: \"object\": externalHostname must be set when type is ExternalHostname and must be unset otherwise"),
        ("type: ExternalHostname, externalHostname: {hostname: tools.mcp.svc.cluster.local}, port: {port: 443}", "spec.externalHostname.hostname", "Invalid value: \"string\": hostname must not be an IP address or end with .cluster.local"),
        ("type: ExternalHostname, externalHostname: {hostname: Tools.example}, port: {port: 443}", "spec.externalHostname.hostname", "Invalid value: \"Tools.example\": spec.externalHostname.hostname in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}", "spec.port", "Required value"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {name: https}", "spec.port.port", "Required value"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 0}", "spec.port.port", "Invalid value: 0: spec.port.port in body should be greater than or equal to 1"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443, name: Https}", "spec.port.name", "Invalid value: \"string\": Name must be a valid DNS label"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, protocol: GRPC", "spec.protocol", "Unsupported value: \"GRPC\": supported values: \"TCP\", \"HTTP\", \"HTTP2\", \"HTTP11\", \"H2C\", \"MCP\""),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {}", "spec.tls.mode", "Required value"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: Mutual}", "spec.tls.mode", "Unsupported value: \"Mutual\": supported values: \"None\", \"ServerOnly\", \"ClientAndServer\""),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ClientAndServer}", "spec.tls", "Invalid value: \"object\": clientCertificateRef must be set if and only if mode is ClientAndServer"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, clientCertificateRef: {name: c}}", "spec.tls", "Invalid value: \"object\": clientCertificateRef must be set if and only if mode is ClientAndServer"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {wellKnownCACertificates: System}}", "spec.tls.validation.hostname", "Required value"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example}}", "spec.tls.validation", "Invalid value: \"object\": must specify either CACertificateRefs or WellKnownCACertificates"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}]}}", "spec.tls.validation", "Invalid value: \"object\": must not contain both CACertificateRefs and WellKnownCACertificates"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, subjectAltNames: [{type: Hostname}]}}", "spec.tls.validation.subjectAltNames[0]", "Invalid value: \"object\": SubjectAltName element must contain Hostname, if Type is set to Hostname"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, subjectAltNames: [{type: URI, uri: 'spiffe://a/b', hostname: t.example}]}}", "spec.tls.validation.subjectAltNames[0]", "Invalid value: \"object\": SubjectAltName element must not contain Hostname, if Type is not set to Hostname"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, subjectAltNames: [{type: URI}]}}", "spec.tls.validation.subjectAltNames[0]", "Invalid value: \"object\": SubjectAltName element must contain URI, if Type is set to URI"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, subjectAltNames: [{type: Hostname, hostname: t.example, uri: 'spiffe://a/b'}]}}", "spec.tls.validation.subjectAltNames[0]", "Invalid value: \"object\": SubjectAltName element must not contain URI, if Type is not set to URI"),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, tls: {mode: ServerOnly, validation: {hostname: t.example, wellKnownCACertificates: System, subjectAltNames: [{type: DNS, hostname: t.example}]}}", "spec.tls.validation.subjectAltNames[0].type", "Unsupported value: \"DNS\": supported values: \"Hostname\", \"URI\""),
        ("type: ExternalHostname, externalHostname: {hostname: t.example}, port: {port: 443}, path: /mcp", "spec.path", "unknown field `path`"),
    ];
    for (spec, field, message) in cases {
        let got = problems(&gxb("b", spec));
        assert!(
            got.iter().any(|(f, m)| f == field && m == message),
            "{spec}: want {field}: {message}, got {got:?}"
        );
    }
    // Every CEL message and every enum of the vendored CRD is among the cases.
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(CRD).unwrap_or_else(|e| {
        panic!("the vendored Gateway API XBackend CRD is missing at {CRD}: {e}")
    }))
    .unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let (mut rules, mut enums) = (Vec::new(), Vec::new());
    walk(spec, &mut rules, &mut enums);
    assert!(rules.len() >= 9 && enums.len() >= 4, "{rules:?} {enums:?}");
    for r in &rules {
        assert!(
            cases.iter().any(|(_, _, m)| m.ends_with(r.as_str())),
            "CRD rule not enforced by a case: {r}"
        );
    }
    for values in &enums {
        let list: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
        let list = list.join(", ");
        assert!(
            cases
                .iter()
                .any(|(_, _, m)| m.ends_with(&format!("supported values: {list}"))),
            "CRD enum not enforced by a case: {list}"
        );
    }
}

/// The `x-kubernetes-validations` messages and `enum`s under `v`, outside `status`.
fn walk(v: &Value, rules: &mut Vec<String>, enums: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(o) => {
            for r in o
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                rules.push(r["message"].as_str().unwrap().to_string());
            }
            if let Some(Value::Array(e)) = o.get("enum") {
                enums.push(e.iter().map(|x| x.as_str().unwrap().to_string()).collect());
            }
            o.values().for_each(|x| walk(x, rules, enums));
        }
        Value::Array(a) => a.iter().for_each(|x| walk(x, rules, enums)),
        _ => {}
    }
}

#[test]
fn an_ip_address_is_not_an_external_hostname() {
    let m = load(
        &infra(GX, "tools", None),
        &gxb(
            "tools",
            "type: ExternalHostname, externalHostname: {hostname: 10.0.0.1}, port: {port: 443}",
        ),
    );
    let c = compiled(&m);
    let st = &c.report.backends[0].conditions[0];
    assert_eq!(st.reason, reason::INVALID);
    assert!(st.message.contains("is an IP address"), "{}", st.message);
    assert!(c.topology.backends.is_empty());
}

#[test]
fn a_route_port_other_than_the_xbackends_is_refused_as_for_the_agentic_kind() {
    let m = load(&infra(GX, "tools", Some(443)), &gxb("tools", TOOLS));
    assert!(compiled(&m).report.routes[0].accepted());
    let m = load(&infra(GX, "tools", Some(8443)), &gxb("tools", TOOLS));
    let c = compiled(&m);
    let st = &c.report.routes[0].conditions[0];
    assert_eq!(st.reason, reason::UNSUPPORTED);
    assert!(
        st.message
            .contains("port 8443 differs from XBackend mcp/tools's port 443"),
        "{}",
        st.message
    );
}

#[test]
fn a_reference_with_the_other_group_names_the_group_to_write() {
    let m = load(
        &infra(AG, "tools", None),
        &format!("{}---\n{}", gxb("tools", TOOLS), allow_policy(AG, "tools")),
    );
    let c = compiled(&m);
    let route = &c.report.routes[0].conditions[0];
    assert!(!route.accepted);
    assert!(
        route.message.contains("the XBackend with this name is of group gateway.networking.x-k8s.io, not agentic.networking.x-k8s.io; set group: gateway.networking.x-k8s.io"),
        "{}",
        route.message
    );
    let p = &status(&c, "p").conditions[0];
    assert_eq!(p.reason, reason::TARGET_NOT_FOUND);
    assert!(
        p.message.contains("set group: gateway.networking.x-k8s.io"),
        "{}",
        p.message
    );
}

#[test]
fn both_kinds_with_one_name_conflict() {
    let agentic = "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {name: tools, namespace: mcp, creationTimestamp: '2025-01-01T00:00:00Z'}\nspec:\n  mcp: {hostname: tools.example.com, port: 443}\n";
    let m = load(
        &infra(GX, "tools", None),
        &format!("{}---\n{agentic}", gxb("tools", TOOLS)),
    );
    let c = compiled(&m);
    // The older one (the agentic one: the other has no creationTimestamp) is used.
    let conflicted: Vec<_> = c.report.backends.iter().filter(|b| !b.accepted()).collect();
    assert_eq!(conflicted.len(), 1, "{:#?}", c.report.backends);
    assert_eq!(
        conflicted[0].api_version,
        "gateway.networking.x-k8s.io/v1alpha1"
    );
    assert_eq!(conflicted[0].conditions[0].reason, reason::CONFLICTED);
    assert!(conflicted[0].conditions[0].message.contains(
        "another XBackend (of group agentic.networking.x-k8s.io) with this namespace/name"
    ));
    // The route names the Gateway API one, which is not used: it is refused, never rerouted.
    assert!(!c.report.routes[0].accepted());
}

#[test]
fn a_policy_on_an_xbackend_of_another_protocol_is_unsupported_and_fails_closed() {
    for (protocol, ok) in [
        ("MCP", true),
        ("HTTP", false),
        ("H2C", false),
        ("TCP", false),
    ] {
        let m = load(
            &infra(GX, "tools", None),
            &format!(
                "{}---\n{}",
                gxb("tools", &format!("{TOOLS}, protocol: {protocol}")),
                allow_policy(GX, "tools")
            ),
        );
        let c = compiled(&m);
        let st = &status(&c, "p").conditions[0];
        assert_eq!(st.accepted, ok, "{protocol}: {st:#?}");
        if !ok {
            assert_eq!(st.reason, reason::UNSUPPORTED);
            assert!(
                st.message.contains(&format!("has protocol {protocol}")),
                "{}",
                st.message
            );
            // Fail closed: a stand-in denies every request to it.
            assert!(
                st.message.ends_with(
                    "enforced fail-closed: this XBackend admits nothing through this policy"
                ),
                "{}",
                st.message
            );
            let [standin] = c.bundle.policies.as_slice() else {
                panic!("{:#?}", c.bundle.policies)
            };
            let json = serde_json::to_value(standin).unwrap();
            assert_eq!(json["name"], "p.not-accepted");
            assert_eq!(
                json["targets"],
                serde_json::json!([{"name": "tools", "namespace": "mcp"}])
            );
            assert_eq!(
                json["rules"],
                Value::Null,
                "an Allow stand-in admits nothing"
            );
            let why = json["notAccepted"].as_str().unwrap();
            assert!(
                why.starts_with("Unsupported: XBackend mcp/tools has protocol"),
                "{why}"
            );
        }
    }
}

#[test]
fn a_toolpin_and_a_reference_grant_take_the_gateway_api_kind() {
    let pin = "apiVersion: mcp-access.io/v1alpha1\nkind: ToolPin\nmetadata: {name: pins, namespace: mcp}\nspec:\n  targetRef: {group: gateway.networking.x-k8s.io, kind: XBackend, name: tools}\n  tools: []\n";
    let m = load(
        &infra(GX, "tools", None),
        &format!("{}---\n{pin}", gxb("tools", TOOLS)),
    );
    let c = compiled(&m);
    assert!(c.report.pins[0].accepted(), "{:#?}", c.report.pins);
    assert!(backend(&c, "tools").pins.is_some());

    // A route in another namespace needs a grant naming this group.
    let route = |ns: &str| {
        format!("{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: {ns}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - backendRefs: [{{group: {GX}, kind: XBackend, name: tools, namespace: mcp}}]\n", gateway(ns, "gw", &[("http", 8080)]))
    };
    let grant = |group: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: mcp}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}}]\n  to: [{{group: {group}, kind: XBackend}}]\n")
    };
    for (group, ok) in [(GX, true), (AG, false)] {
        let m = load(
            &route("apps"),
            &format!("{}---\n{}", gxb("tools", TOOLS), grant(group)),
        );
        let c = compiled(&m);
        let st = &c.report.routes[0].conditions[0];
        assert_eq!(st.accepted, ok, "{group}: {st:#?}");
        if !ok {
            assert_eq!(st.reason, reason::REF_NOT_PERMITTED);
        }
    }
}

#[test]
fn an_xaccesspolicy_v0alpha0_refuses_the_gateway_api_kind_as_its_crd_does() {
    let p = "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XAccessPolicy\nmetadata: {name: p, namespace: mcp}\nspec:\n  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: tools}]\n  rules:\n  - name: r\n    source: {type: SPIFFE, spiffe: 'spiffe://example.org/a'}\n";
    let got = problems(p);
    assert!(
        got.iter().any(|(_, m)| m
            .contains("TargetRef must have group agentic.networking.x-k8s.io and kind XBackend")),
        "{got:?}"
    );
}

#[test]
fn status_is_written_in_the_v1_6_shape_with_each_gateway_as_parent() {
    // Two Gateways route to `tools`; `spare` is reached by none; the policy targets `tools`.
    let second = gateway("mcp", "gw2", &[("http", 8081)]);
    let route2 = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r2, namespace: mcp}\nspec:\n  parentRefs: [{name: gw2}]\n  rules:\n  - backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: tools}]\n";
    let spare = gxb(
        "spare",
        "type: ExternalHostname, externalHostname: {hostname: spare.example.com}, port: {port: 443}",
    );
    let m = load(
        &format!("{}---\n{second}---\n{route2}", infra(GX, "tools", None)),
        &format!(
            "{}---\n{spare}---\n{}",
            gxb("tools", TOOLS),
            allow_policy(GX, "tools")
        ),
    );
    let c = compiled(&m);
    let all = mcp_access_k8s::status_objects(&c.report, &c.topology, "2026-01-04T00:00:00Z");
    let of = |kind: &str, name: &str| -> Value {
        all.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let tools = of("XBackend", "tools");
    assert_eq!(tools["apiVersion"], "gateway.networking.x-k8s.io/v1alpha1");
    let status = tools["status"].as_object().unwrap();
    assert_eq!(status.keys().collect::<Vec<_>>(), ["parents"], "{tools:#}");
    let parents = status["parents"].as_array().unwrap();
    let refs: Vec<&Value> = parents.iter().map(|p| &p["parentRef"]).collect();
    assert_eq!(
        refs,
        [
            &serde_json::json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "mcp", "name": "gw"}),
            &serde_json::json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "mcp", "name": "gw2"}),
        ]
    );
    for p in parents {
        assert_eq!(p["controllerName"], mcp_access_k8s::CONTROLLER_NAME);
        let types: Vec<(&str, &str)> = p["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            types,
            [("Accepted", "True"), ("XAccessPolicyAffected", "True")]
        );
    }
    // Reached by no Gateway: one entry naming the XBackend itself, so Accepted is still said.
    let spare = of("XBackend", "spare");
    let (only,) = match spare["status"]["parents"].as_array().unwrap().as_slice() {
        [p] => (p,),
        other => panic!("{other:#?}"),
    };
    assert_eq!(
        only["parentRef"],
        serde_json::json!({"group": GX, "kind": "XBackend", "namespace": "mcp", "name": "spare"})
    );
    assert_eq!(only["conditions"][0]["type"], "Accepted");
    // The policy's ancestorRef names the XBackend with Gateway API's group, not the agentic one.
    let p = of("XAccessPolicy", "p");
    assert_eq!(p["status"]["ancestors"][0]["ancestorRef"]["group"], GX);

    // The agentic kind keeps its shape (conditions) and group.
    let agentic = load(
        &infra(AG, "tools", None),
        &format!(
            "apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata: {{name: tools, namespace: mcp}}\nspec: {{mcp: {{hostname: tools.example.com, port: 443}}}}\n---\n{}",
            allow_policy(AG, "tools")
        ),
    );
    let c = compiled(&agentic);
    let all = mcp_access_k8s::status_objects(&c.report, &c.topology, "2026-01-04T00:00:00Z");
    let b = all.iter().find(|o| o["kind"] == "XBackend").unwrap();
    assert!(b["status"]["conditions"].is_array() && b["status"].get("parents").is_none());
    let p = all.iter().find(|o| o["kind"] == "XAccessPolicy").unwrap();
    assert_eq!(p["status"]["ancestors"][0]["ancestorRef"]["group"], AG);
}
