//! Strict parsing, field paths in errors, semantic validation, and the checked-in schema.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::type_complexity
)]

use mcp_access_bundle::{parse_bundle, Action, Level, API_VERSION};

fn minimal() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": API_VERSION,
        "identity": {
            "trustDomain": "example.org",
            "jwt": {"providers": [{"issuer": "https://issuer.test", "metadataKey": "jwt"}]}
        },
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "authorizers": [{"name": "opa", "cluster": "authz"}],
        "policies": [
            {"name": "p1", "level": "Gateway", "targets": [{"name": "gw"}], "action": "Allow",
             "rules": [{"name": "r1",
                        "source": {"type": "ServiceAccount", "serviceAccount": {"name": "alpha"}},
                        "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]}]}}}]},
            {"name": "p2", "level": "Backend", "targets": [{"name": "tools"}], "action": "ExternalAuth",
             "externalAuth": "opa"}
        ]
    })
}

fn err_at(v: serde_json::Value) -> (String, String) {
    let e = parse_bundle(v.to_string().as_bytes()).expect_err("must be rejected");
    (e.path, e.message)
}

#[test]
fn minimal_bundle_parses_with_defaults() {
    let b = parse_bundle(minimal().to_string().as_bytes()).unwrap();
    assert_eq!(b.policies[0].level, Level::Gateway);
    assert_eq!(b.policies[1].action, Action::ExternalAuth);
    assert_eq!(b.limits.max_body_bytes, 1024 * 1024);
    assert_eq!(b.deny_response.http_status, 403);
    assert_eq!(b.deny_response.json_rpc_code, -32010);
    assert!(b.listings.filter);
    assert_eq!(b.listings.max_bytes, 4 * 1024 * 1024);
    assert_eq!(b.authorizers[0].timeout_ms, 200);
    assert_eq!(b.authorizers[0].max_response_body_bytes, 8192);
    assert!(b.envoy.hold_headers);
    assert_eq!(b.gateways[0].namespace, "default");
}

#[test]
fn a_denial_may_answer_200() {
    let mut v = minimal();
    v["denyResponse"] = serde_json::json!({"httpStatus": 200});
    let b = parse_bundle(v.to_string().as_bytes()).unwrap();
    assert_eq!(b.deny_response.http_status, 200);
}

#[test]
fn unknown_field_is_rejected_with_its_path() {
    let mut v = minimal();
    v["policies"][0]["rules"][0]["source"]["spife"] = "x".into();
    let (path, msg) = err_at(v);
    assert_eq!(path, "policies[0].rules[0].source.spife");
    assert!(msg.contains("unknown field `spife`"), "{msg}");
}

#[test]
fn wrong_type_is_rejected_with_its_path() {
    let mut v = minimal();
    v["gateways"][0]["listeners"][0]["port"] = "8443".into();
    let (path, msg) = err_at(v);
    assert_eq!(path, "gateways[0].listeners[0].port");
    assert!(msg.contains("invalid type"), "{msg}");
}

#[test]
fn wrong_api_version() {
    let mut v = minimal();
    v["apiVersion"] = "v0".into();
    assert_eq!(err_at(v).0, "apiVersion");
}

#[test]
fn trailing_garbage_is_rejected() {
    let text = format!("{} x", minimal());
    assert!(parse_bundle(text.as_bytes()).is_err());
}

#[test]
fn semantic_errors_name_the_field() {
    let cases: Vec<(fn(&mut serde_json::Value), &str)> = vec![
        (
            |v| {
                v["authorizers"][0]["protocol"] = "GRPC".into();
                v["authorizers"][0]["pathPrefix"] = "/x".into();
            },
            "authorizers[0].pathPrefix",
        ),
        (
            |v| {
                v["authorizers"][0]["protocol"] = "GRPC".into();
                v["authorizers"][0]["allowedResponseHeaders"] = serde_json::json!(["x-a"]);
            },
            "authorizers[0].allowedResponseHeaders",
        ),
        (
            |v| {
                v["authorizers"][0]["protocol"] = "GRPC".into();
                v["authorizers"][0]["cluster"] = "c".repeat(126).into();
            },
            "authorizers[0].cluster",
        ),
        (
            |v| v["authorizers"][0]["includePeerCertificate"] = true.into(),
            "authorizers[0].includePeerCertificate",
        ),
        (
            |v| v["policies"][1]["externalAuth"] = "nope".into(),
            "policies[1].externalAuth",
        ),
        (
            |v| v["policies"][0]["externalAuth"] = "opa".into(),
            "policies[0].externalAuth",
        ),
        (
            |v| {
                v["policies"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("externalAuth");
            },
            "policies[1].externalAuth",
        ),
        (
            |v| v["policies"][0]["targets"][0]["name"] = "other".into(),
            "policies[0].targets[0].name",
        ),
        (
            |v| v["policies"][0]["targets"][0]["sectionName"] = "nope".into(),
            "policies[0].targets[0].sectionName",
        ),
        (
            |v| v["policies"][1]["targets"][0]["sectionName"] = "https".into(),
            "policies[1].targets[0].sectionName",
        ),
        (
            |v| v["policies"][0]["targets"] = serde_json::json!([]),
            "policies[0].targets",
        ),
        (
            |v| v["authorizers"][0]["maxResponseBodyBytes"] = (1024 * 1024 + 1).into(),
            "authorizers[0].maxResponseBodyBytes",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["authorization"]["mcp"]["methods"][0]["name"] =
                    "tools/delete".into()
            },
            "policies[0].rules[0].authorization.mcp.methods[0].name",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["authorization"]["mcp"]["methods"][0]["name"] =
                    "tools/list".into()
            },
            "policies[0].rules[0].authorization.mcp.methods[0].params",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["source"] =
                    serde_json::json!({"type": "SPIFFE", "spiffe": "http://x"})
            },
            "policies[0].rules[0].source.spiffe",
        ),
        (
            |v| v["policies"][0]["rules"][0]["source"] = serde_json::json!({"type": "SPIFFE"}),
            "policies[0].rules[0].source.spiffe",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["source"] =
                    serde_json::json!({"type": "Any", "spiffe": "spiffe://a/b"})
            },
            "policies[0].rules[0].source.spiffe",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["source"] =
                    serde_json::json!({"type": "JWT", "jwt": {"issuer": "other"}})
            },
            "policies[0].rules[0].source.jwt.issuer",
        ),
        (
            |v| {
                v["identity"].as_object_mut().unwrap().remove("trustDomain");
            },
            "policies[0].rules[0].source.serviceAccount",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["authorization"]["paths"] =
                    serde_json::json!([{"type": "RegularExpression", "value": "("}])
            },
            "policies[0].rules[0].authorization.paths[0].value",
        ),
        (
            |v| {
                v["policies"][0]["rules"][0]["authorization"]["methods"] =
                    serde_json::json!(["FETCH"])
            },
            "policies[0].rules[0].authorization.methods[0]",
        ),
        (
            |v| v["policies"][0]["rules"][0]["name"] = "Bad_Name".into(),
            "policies[0].rules[0].name",
        ),
        (
            |v| {
                let r = v["policies"][0]["rules"][0].clone();
                v["policies"][0]["rules"].as_array_mut().unwrap().push(r);
            },
            "policies[0].rules[1].name",
        ),
        (
            |v| v["backends"][0]["routeNames"] = serde_json::json!([]),
            "backends[0].routeNames",
        ),
        (
            |v| v["authorizers"][0]["pathPrefix"] = "no-slash".into(),
            "authorizers[0].pathPrefix",
        ),
        (
            |v| v["denyResponse"] = serde_json::json!({"httpStatus": 302}),
            "denyResponse.httpStatus",
        ),
        (
            |v| v["limits"] = serde_json::json!({"maxBodyBytes": 0}),
            "limits.maxBodyBytes",
        ),
        (
            |v| v["listings"] = serde_json::json!({"maxBytes": 0}),
            "listings.maxBytes",
        ),
        (
            |v| v["identity"]["spiffe"] = serde_json::json!({"source": "TrustedHeader"}),
            "identity.spiffe.header",
        ),
        (
            |v| v["gateways"][0]["listeners"][0]["hostname"] = "Bad..host".into(),
            "gateways[0].listeners[0].hostname",
        ),
    ];
    for (i, (mutate, want)) in cases.into_iter().enumerate() {
        let mut v = minimal();
        mutate(&mut v);
        let (path, msg) = err_at(v);
        assert_eq!(path, want, "case {i}: {msg}");
    }
}

#[test]
fn schema_file_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bundle.schema.json");
    let fresh = mcp_access_bundle::json_schema_text();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(path, &fresh).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == fresh,
        "config-schema/bundle.schema.json is stale: run `UPDATE_SCHEMA=1 cargo test -p mcp-access-bundle --test bundle`"
    );
}

#[test]
fn a_valid_bundle_is_made_only_by_validating() {
    let mut b = parse_bundle(minimal().to_string().as_bytes())
        .unwrap()
        .into_inner();
    assert_eq!(
        mcp_access_bundle::ValidBundle::new(b.clone())
            .unwrap()
            .into_inner(),
        b
    );
    // A change that breaks a semantic check: ValidBundle::new refuses it, as parse_bundle does.
    b.identity.trust_domain = Some("Not A Domain".into());
    let e = mcp_access_bundle::ValidBundle::new(b).unwrap_err();
    let mut v = minimal();
    v["identity"]["trustDomain"] = "Not A Domain".into();
    assert_eq!(e, parse_bundle(v.to_string().as_bytes()).unwrap_err());
    assert_eq!(e.path, "identity.trustDomain");
}

#[test]
fn listeners_and_origin_are_checked() {
    // A Backend-level policy narrowed to a listener, with where its rules came from.
    let mut v = minimal();
    v["policies"][1]["listeners"] = serde_json::json!([{"name": "gw", "sectionName": "https"}]);
    v["policies"][1]["origin"] = serde_json::json!(
        {"policy": "AccessPolicy default/risk", "block": "overrides", "strategy": "atomic"});
    let b = parse_bundle(v.to_string().as_bytes()).unwrap();
    assert_eq!(
        b.policies[1].listeners[0].section_name.as_deref(),
        Some("https")
    );
    assert_eq!(
        b.policies[1].origin.as_ref().unwrap().block,
        Some(mcp_access_bundle::BlockKind::Overrides)
    );
    // An unknown listener, a Gateway-level policy with listeners, a block without strategy.
    let mut v = minimal();
    v["policies"][1]["listeners"] = serde_json::json!([{"name": "gw", "sectionName": "nope"}]);
    assert_eq!(
        err_at(v),
        (
            "policies[1].listeners[0].sectionName".into(),
            "no listener \"nope\" of gateway default/gw in the bundle".into()
        )
    );
    let mut v = minimal();
    v["policies"][0]["listeners"] = serde_json::json!([{"name": "gw", "sectionName": "https"}]);
    assert_eq!(err_at(v).0, "policies[0].listeners[0]");
    let mut v = minimal();
    v["policies"][1]["origin"] =
        serde_json::json!({"policy": "AccessPolicy default/risk", "block": "defaults"});
    assert_eq!(err_at(v).0, "policies[1].origin.strategy");
    let mut v = minimal();
    v["policies"][1]["origin"] =
        serde_json::json!({"policy": "x", "block": "sideways", "strategy": "merge"});
    assert!(err_at(v).0.starts_with("policies[1].origin"));
}

const DIGEST: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn pinned() -> serde_json::Value {
    let mut v = minimal();
    v["backends"][0]["pins"] = serde_json::json!({
        "source": "default/tools-pins",
        "tools": [
            {"name": "echo", "digest": DIGEST, "annotations": {"readOnlyHint": true}},
            {"name": "rm", "digest": DIGEST}
        ]
    });
    v
}

#[test]
fn pins_parse_with_unpinned_deny_by_default() {
    let b = parse_bundle(pinned().to_string().as_bytes()).unwrap();
    let pins = b.backends[0].pins.as_ref().unwrap();
    assert_eq!(pins.unpinned, mcp_access_bundle::Unpinned::Deny);
    assert_eq!(
        pins.tools[0].annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    assert_eq!(pins.tools[1].annotations, None);
}

#[test]
fn pin_mistakes_are_refused_with_their_paths() {
    let cases: Vec<(fn(&mut serde_json::Value), &str, &str)> = vec![
        (
            |v| v["backends"][0]["pins"]["tools"][1]["name"] = "echo".into(),
            "backends[0].pins.tools[1].name",
            "pinned twice",
        ),
        (
            |v| v["backends"][0]["pins"]["tools"][0]["digest"] = DIGEST.to_uppercase().into(),
            "backends[0].pins.tools[0].digest",
            "not a digest",
        ),
        (
            |v| v["backends"][0]["pins"]["tools"][0]["digest"] = "sha256:abc".into(),
            "backends[0].pins.tools[0].digest",
            "not a digest",
        ),
        (
            |v| v["backends"][0]["pins"]["tools"][0]["name"] = "".into(),
            "backends[0].pins.tools[0].name",
            "must not be empty",
        ),
        (
            |v| v["backends"][0]["pins"]["source"] = "".into(),
            "backends[0].pins.source",
            "ToolPin",
        ),
        (
            |v| v["backends"][0]["pins"]["unpinned"] = "allow".into(),
            "backends[0].pins.unpinned",
            "unknown variant",
        ),
        (
            |v| v["backends"][0]["pins"]["tools"][0]["annotations"]["readOnly"] = true.into(),
            "backends[0].pins.tools[0].annotations.readOnly",
            "unknown field",
        ),
        (
            |v| v["listings"] = serde_json::json!({"filter": false}),
            "backends[0].pins",
            "listings.filter",
        ),
    ];
    for (edit, path, message) in cases {
        let mut v = pinned();
        edit(&mut v);
        let (p, m) = err_at(v);
        assert_eq!(p, path, "{m}");
        assert!(m.contains(message), "{path}: {m}");
    }
}

#[test]
fn protected_resources_and_identity_headers_are_checked_where_they_are() {
    let pr = |resource: &str| serde_json::json!({"resource": resource, "authorizationServers": ["https://auth.example.com"]});
    let mut v = minimal();
    v["gateways"][0]["listeners"][0]["protectedResource"] = pr("https://mcp.example.com/mcp");
    v["backends"][0]["identityHeaders"] = serde_json::json!([
        {"name": "x-caller-spiffe", "from": "SPIFFE"},
        {"name": "x-caller-team", "from": "JWTClaim", "claim": "team"}
    ]);
    let b = parse_bundle(v.to_string().as_bytes()).unwrap();
    let p = b.gateways[0].listeners[0]
        .protected_resource
        .as_ref()
        .unwrap();
    assert_eq!(p.authorization_servers, ["https://auth.example.com"]);
    assert_eq!(b.backends[0].identity_headers.len(), 2);

    let cases: Vec<(fn(&mut serde_json::Value), &str)> = vec![
        (
            |v| v["gateways"][0]["listeners"][0]["protectedResource"] = serde_json::json!({"resource": "http://mcp.example.com/mcp", "authorizationServers": ["https://a.example.com"]}),
            "gateways[0].listeners[0].protectedResource.resource",
        ),
        (
            |v| v["gateways"][0]["listeners"][0]["protectedResource"] = serde_json::json!({"resource": "https://mcp.example.com/mcp", "authorizationServers": []}),
            "gateways[0].listeners[0].protectedResource.authorizationServers",
        ),
        (
            |v| {
                v["gateways"][0]["listeners"][0]["hostname"] = "other.example.com".into();
                v["gateways"][0]["listeners"][0]["protectedResource"] = serde_json::json!({"resource": "https://mcp.example.com/mcp", "authorizationServers": ["https://a.example.com"]});
            },
            "gateways[0].listeners[0].protectedResource.resource",
        ),
        (
            |v| {
                v["backends"][0]["identityHeaders"] =
                    serde_json::json!([{"name": "authorization", "from": "SPIFFE"}])
            },
            "backends[0].identityHeaders[0].name",
        ),
        (
            |v| {
                v["backends"][0]["identityHeaders"] =
                    serde_json::json!([{"name": "x-a", "from": "JWTClaim"}])
            },
            "backends[0].identityHeaders[0].claim",
        ),
        (
            |v| {
                v["envoy"] = serde_json::json!({"routeMatchHeaders": ["x-route"]});
                v["backends"][0]["identityHeaders"] =
                    serde_json::json!([{"name": "x-route", "from": "SPIFFE"}]);
            },
            "backends[0].identityHeaders[0].name",
        ),
        (
            |v| v["envoy"] = serde_json::json!({"routeMatchHeaders": ["X-Route"]}),
            "envoy.routeMatchHeaders[0]",
        ),
        (
            |v| v["backends"][0]["identityHeaders"] = serde_json::json!([{"name": "x-a", "from": "SPIFFE"}, {"name": "x-a", "from": "JWTSubject"}]),
            "backends[0].identityHeaders[1].name",
        ),
        (
            |v| {
                v["identity"]["spiffe"] =
                    serde_json::json!({"source": "TrustedHeader", "header": {"name": "X-Spiffe"}});
                v["backends"][0]["identityHeaders"] =
                    serde_json::json!([{"name": "x-spiffe", "from": "SPIFFE"}]);
            },
            "backends[0].identityHeaders[0].name",
        ),
        (
            |v| {
                v["envoy"] = serde_json::json!({"holdHeaders": false});
                v["backends"][0]["identityHeaders"] =
                    serde_json::json!([{"name": "x-a", "from": "SPIFFE"}]);
            },
            "backends[0].identityHeaders[0].name",
        ),
    ];
    for (i, (mutate, want)) in cases.into_iter().enumerate() {
        let mut v = minimal();
        mutate(&mut v);
        let (path, msg) = err_at(v);
        assert_eq!(path, want, "case {i}: {msg}");
    }
    let mut v = minimal();
    v["backends"][0]["identityHeaders"] = serde_json::json!([{"name": "x-a", "from": "Cookie"}]);
    assert_eq!(err_at(v).0, "backends[0].identityHeaders[0].from");
}

#[test]
fn routes_narrow_backend_targets_to_names_of_the_backend() {
    // Route and cluster names of the backend are both routes a policy can be scoped to.
    let mut v = minimal();
    v["backends"][0]["clusterNames"] = serde_json::json!(["httproute/ns/r/rule/0"]);
    v["policies"][1]["targets"][0]["routes"] =
        serde_json::json!(["tools-route", "httproute/ns/r/rule/0"]);
    let b = parse_bundle(v.to_string().as_bytes()).unwrap();
    assert_eq!(b.policies[1].targets[0].routes.as_ref().unwrap().len(), 2);
    let cases: Vec<(serde_json::Value, &str, &str)> = vec![
        // An empty list is never "every route".
        (
            serde_json::json!([]),
            "policies[1].targets[0].routes",
            "an empty list would apply the policy to no request: omit routes to apply it through every route",
        ),
        (
            serde_json::json!(["other-route"]),
            "policies[1].targets[0].routes[0]",
            "backend default/tools has no route or cluster named \"other-route\" (routes are its routeNames or clusterNames)",
        ),
        (
            serde_json::json!(["tools-route", "tools-route"]),
            "policies[1].targets[0].routes[1]",
            "duplicate route",
        ),
    ];
    for (routes, path, message) in cases {
        let mut v = minimal();
        v["policies"][1]["targets"][0]["routes"] = routes;
        assert_eq!(err_at(v), (path.to_string(), message.to_string()));
    }
    // Only Backend targets have routes; a listener has none.
    let mut v = minimal();
    v["policies"][0]["targets"][0]["routes"] = serde_json::json!(["tools-route"]);
    assert_eq!(
        err_at(v),
        (
            "policies[0].targets[0].routes".into(),
            "only Backend targets are narrowed to routes".into()
        )
    );
    let mut v = minimal();
    v["policies"][1]["listeners"] =
        serde_json::json!([{"name": "gw", "sectionName": "https", "routes": ["tools-route"]}]);
    assert_eq!(err_at(v).0, "policies[1].listeners[0].routes");
}

#[test]
fn cel_conditions_are_compiled_by_validation_and_handed_over() {
    let mut v = minimal();
    v["policies"][0]["rules"][0]["when"] = serde_json::json!(["request.port == 8443"]);
    v["policies"][0]["rules"][0]["authorization"]["cel"] = "request.path != ''".into();
    v["policies"][1]["when"] = serde_json::json!(["true", "request.nope"]);
    let (path, message) = err_at(v.clone());
    assert_eq!(path, "policies[1].when[1]");
    assert!(message.contains("unknown variable"), "{message}");
    // Limits that are themselves wrong are the problem, not the conditions.
    let mut limited = v.clone();
    limited["limits"] = serde_json::json!({"cel": {"maxNodes": 0}});
    assert_eq!(err_at(limited).0, "limits.cel.maxNodes");
    v["policies"][1]["when"] = serde_json::json!(["true"]);
    let mut valid = parse_bundle(v.to_string().as_bytes()).unwrap();
    let mut conditions = valid.take_conditions();
    let p0 = conditions.take(0);
    assert!(p0.when.is_empty());
    assert_eq!(p0.rules.len(), 1);
    assert!(p0.rules[0].cel.is_some());
    assert_eq!(p0.rules[0].when.len(), 1);
    let p1 = conditions.take(1);
    assert_eq!((p1.when.len(), p1.rules.len()), (1, 0));
    // Handed over once.
    assert!(conditions.take(1).when.is_empty());
    assert!(valid.take_conditions().take(1).when.is_empty());
}

/// Every node of `v` by its path (as serde_path_to_error writes paths), the document's own
/// first.
fn nodes(v: &serde_json::Value, path: String, out: &mut Vec<(String, serde_json::Value)>) {
    out.push((path.clone(), v.clone()));
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| nodes(x, join(k), out)),
        serde_json::Value::Array(a) => {
            (a.iter().enumerate()).for_each(|(i, x)| nodes(x, format!("{path}[{i}]"), out))
        }
        _ => {}
    }
}

/// `v` with the node at `path` replaced by `f`'s answer (None: removed from its object).
fn edited(
    v: &serde_json::Value,
    path: &str,
    at: &str,
    f: &dyn Fn(&serde_json::Value) -> Option<serde_json::Value>,
) -> Option<serde_json::Value> {
    if at == path {
        return f(v);
    }
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    Some(match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.iter()
                .filter_map(|(k, x)| Some((k.clone(), edited(x, path, &join(k), f)?)))
                .collect(),
        ),
        serde_json::Value::Array(a) => serde_json::Value::Array(
            (a.iter().enumerate())
                .filter_map(|(i, x)| edited(x, path, &format!("{at}[{i}]"), f))
                .collect(),
        ),
        other => other.clone(),
    })
}

#[test]
fn error_paths_are_those_serde_path_to_error_finds() {
    let doc = pinned();
    let mut all = Vec::new();
    nodes(&doc, String::new(), &mut all);
    let edits: Vec<(
        &str,
        Box<dyn Fn(&serde_json::Value) -> Option<serde_json::Value>>,
    )> = vec![
        ("string", Box::new(|_| Some("x\"\\\u{e9}".into()))),
        ("number", Box::new(|_| Some(7.into()))),
        ("negative", Box::new(|_| Some((-70000).into()))),
        ("bool", Box::new(|_| Some(true.into()))),
        ("null", Box::new(|_| Some(serde_json::Value::Null))),
        (
            "array",
            Box::new(|_| Some(serde_json::json!([1, {"a": []}]))),
        ),
        (
            "object",
            Box::new(|_| Some(serde_json::json!({"k\"ey": {"x": [1]}}))),
        ),
        ("removed", Box::new(|_| None)),
        (
            "unknown key",
            Box::new(|v| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.insert("zz\\top".into(), serde_json::json!([{"a": 1}]));
                }
                Some(v)
            }),
        ),
    ];
    let mut compared = 0;
    for (path, _) in &all {
        for (what, f) in &edits {
            let Some(v) = edited(&doc, path, "", f.as_ref()) else {
                continue;
            };
            for text in [v.to_string(), serde_json::to_string_pretty(&v).unwrap()] {
                let mut de = serde_json::Deserializer::from_str(&text);
                let Err(oracle) =
                    serde_path_to_error::deserialize::<_, mcp_access_bundle::Bundle>(&mut de)
                else {
                    continue;
                };
                let want = oracle.path().to_string();
                let want = if want == "." { String::new() } else { want };
                let got = parse_bundle(text.as_bytes()).expect_err("the oracle refused it");
                assert_eq!(got.path, want, "{what} at {path}: {}\n{text}", got.message);
                compared += 1;
            }
        }
    }
    assert!(compared > 200, "{compared}");
}
