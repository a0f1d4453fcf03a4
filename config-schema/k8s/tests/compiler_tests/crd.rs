//! The AccessPolicy CRD: the committed file is what the Rust types generate, and it is a
//! structural schema Kubernetes accepts.

use serde_json::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/");

#[test]
fn crd_files_are_current() {
    for (file, fresh) in [
        (
            "mcp-access.io_accesspolicies.yaml",
            mcp_access_k8s::crd_yaml(),
        ),
        (
            "mcp-access.io_filtersettings.yaml",
            mcp_access_k8s::filter_settings_crd_yaml(),
        ),
        (
            "mcp-access.io_toolpins.yaml",
            mcp_access_k8s::tool_pin_crd_yaml(),
        ),
        (
            "mcp-access.io_ratelimitpolicies.yaml",
            mcp_access_k8s::rate_limit_policy_crd_yaml(),
        ),
    ] {
        let path = format!("{DIR}{file}");
        if std::env::var_os("UPDATE_CRD").is_some() {
            std::fs::write(&path, &fresh).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == fresh,
            "config-schema/crds/{file} is stale: run `UPDATE_CRD=1 cargo test -p mcp-access-k8s --test crd`"
        );
    }
}

#[test]
fn filter_settings_crd_is_structural_and_cluster_scoped() {
    let crd = mcp_access_k8s::filter_settings_crd();
    assert_eq!(crd["metadata"]["name"], "filtersettings.mcp-access.io");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    let v = &crd["spec"]["versions"][0];
    let root = &v["schema"]["openAPIV3Schema"];
    assert_structural(root, "openAPIV3Schema");
    let spec = &root["properties"]["spec"]["properties"];
    let deny = &spec["denyResponse"]["properties"];
    for field in ["httpStatus", "jsonRpcCode", "message", "exposeDetails"] {
        assert!(deny.get(field).is_some(), "denyResponse.{field}");
    }
    assert!(spec["limits"]["properties"]["cel"]["properties"]
        .get("maxSteps")
        .is_some());
    assert!(spec["listings"]["properties"].get("maxBytes").is_some());
    assert_eq!(
        spec["identity"]["properties"]["spiffe"]["properties"]["source"]["enum"],
        serde_json::json!(["PeerCertificate", "TrustedHeader"])
    );
    assert!(spec["externalAuth"]["properties"]["timeout"]["pattern"].is_string());
    assert_eq!(
        spec["envoy"]["properties"]["unknownBackend"]["enum"],
        serde_json::json!(["Deny", "GatewayOnly"])
    );
    assert!(v.get("subresources").is_none());
}

#[test]
fn tool_pin_crd_is_structural_and_namespaced() {
    let crd = mcp_access_k8s::tool_pin_crd();
    assert_eq!(crd["metadata"]["name"], "toolpins.mcp-access.io");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let v = &crd["spec"]["versions"][0];
    let root = &v["schema"]["openAPIV3Schema"];
    assert_structural(root, "openAPIV3Schema");
    let spec = &root["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["targetRef"]));
    assert_eq!(
        spec["properties"]["unpinned"]["enum"],
        serde_json::json!(["Deny", "Allow"])
    );
    let tools = &spec["properties"]["tools"];
    assert_eq!(tools["x-kubernetes-list-type"], "map");
    assert_eq!(
        tools["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    let tool = &tools["items"];
    assert_eq!(tool["required"], serde_json::json!(["name", "digest"]));
    assert_eq!(
        tool["properties"]["digest"]["pattern"],
        "^sha256:[0-9a-f]{64}$"
    );
    assert_eq!(
        tool["properties"]["definition"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let annotations = &tool["properties"]["annotations"]["properties"];
    for hint in [
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ] {
        assert_eq!(annotations[hint]["type"], "boolean", "{hint}");
    }
    assert!(v.get("subresources").is_some());
}

/// Every node of a structural schema has a single `type`; no `$ref`, no `anyOf` with types,
/// no `additionalProperties: false`, no `null`.
fn assert_structural(v: &Value, at: &str) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{at}: not an object"));
    let t = o.get("type").and_then(Value::as_str);
    assert!(t.is_some(), "{at}: no single type: {v}");
    for bad in ["$ref", "$defs", "anyOf", "oneOf", "nullable", "title"] {
        assert!(!o.contains_key(bad), "{at}: has {bad}");
    }
    assert_ne!(
        o.get("additionalProperties"),
        Some(&Value::Bool(false)),
        "{at}"
    );
    if let Some(Value::Object(props)) = o.get("properties") {
        assert_eq!(t, Some("object"), "{at}");
        for (k, p) in props {
            assert_structural(p, &format!("{at}.{k}"));
        }
    }
    if let Some(items) = o.get("items") {
        assert_eq!(t, Some("array"), "{at}");
        assert_structural(items, &format!("{at}[]"));
    }
}

#[test]
fn crd_is_structural_and_installable() {
    let crd = mcp_access_k8s::crd();
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "accesspolicies.mcp-access.io");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["subresources"]["status"], serde_json::json!({}));
    let root = &v["schema"]["openAPIV3Schema"];
    assert_structural(root, "openAPIV3Schema");
    let spec = &root["properties"]["spec"];
    // The project's additions, and the upstream rules kept.
    assert_eq!(
        spec["properties"]["action"]["enum"],
        serde_json::json!(["Allow", "Deny", "ExternalAuth"])
    );
    let source = &spec["properties"]["rules"]["items"]["properties"]["source"];
    assert_eq!(
        source["properties"]["type"]["enum"],
        serde_json::json!(["ServiceAccount", "SPIFFE", "JWT"])
    );
    assert_eq!(
        source["properties"]["jwt"]["required"],
        serde_json::json!(["issuer"])
    );
    let when = &spec["properties"]["when"];
    assert_eq!(when["items"]["required"], serde_json::json!(["predicate"]));
    let rules: Vec<&str> = spec["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"externalAuth must be specified when action is set to 'ExternalAuth'"));
    assert_eq!(
        spec["properties"]["targetRefs"]["x-kubernetes-validations"][0]["message"],
        "All targetRefs must have the same Kind"
    );
    // `action` moves into a defaults/overrides block when there is one.
    assert_eq!(spec["required"], serde_json::json!(["targetRefs"]));
    for rule in [
        "only one of defaults and overrides may be set",
        "defaults and overrides may only be set on a policy that targets Gateways",
        "unset may only be set on a policy that targets XBackends",
    ] {
        assert!(rules.contains(&rule), "{rule}");
    }
    for block in ["defaults", "overrides"] {
        let b = &spec["properties"][block];
        assert_eq!(b["required"], serde_json::json!(["action"]));
        assert_eq!(
            b["properties"]["strategy"]["enum"],
            serde_json::json!(["atomic", "merge"])
        );
        assert_eq!(b["properties"]["condition"]["type"], "string");
    }
    assert_eq!(spec["properties"]["unset"]["items"]["type"], "string");
}

/// The schemas of objects with a `name` enum and `params`: the MCP methods of a rule.
fn method_schemas<'a>(v: &'a Value, found: &mut Vec<&'a Value>) {
    match v {
        Value::Object(map) => {
            let props = &v["properties"];
            if props["name"]["enum"].is_array() && props.get("params").is_some() {
                found.push(v);
            }
            map.values().for_each(|x| method_schemas(x, found));
        }
        Value::Array(items) => items.iter().for_each(|x| method_schemas(x, found)),
        _ => {}
    }
}

#[test]
fn crd_method_names_are_the_bundles() {
    use mcp_access_bundle::mcp_methods::{rule_names, takes_params};
    let crd = mcp_access_k8s::crd();
    let mut found = Vec::new();
    method_schemas(&crd, &mut found);
    assert!(!found.is_empty());
    let mut names: Vec<&str> = rule_names().collect();
    names.sort_unstable();
    for schema in found {
        let mut listed: Vec<&str> = schema["properties"]["name"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        listed.sort_unstable();
        assert_eq!(listed, names);
        let rule = schema["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap();
        for name in &names {
            let quoted = format!("'{name}'");
            assert_eq!(
                rule.contains(&quoted),
                takes_params(name),
                "{name} in {rule}"
            );
        }
    }
}

#[test]
fn rate_limit_policy_crd_is_structural_and_namespaced() {
    let crd = mcp_access_k8s::rate_limit_policy_crd();
    assert_eq!(crd["metadata"]["name"], "ratelimitpolicies.mcp-access.io");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let v = &crd["spec"]["versions"][0];
    let root = &v["schema"]["openAPIV3Schema"];
    assert_structural(root, "openAPIV3Schema");
    let spec = &root["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["targetRefs"]));
    let limit = &spec["properties"]["limits"]["additionalProperties"];
    assert_structural(limit, "limits.*");
    let rate = &limit["properties"]["rates"]["items"]["properties"];
    assert_eq!(rate["limit"]["maximum"], serde_json::json!(2147483648i64));
    assert!(rate["window"]["pattern"].is_string());
    assert_eq!(
        spec["properties"]["mode"]["enum"],
        serde_json::json!(["Local", "Global"])
    );
    assert!(spec["x-kubernetes-validations"].as_array().unwrap().len() >= 3);
}
