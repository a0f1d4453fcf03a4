//! OAuth discovery and identity headers through the binary: `envoy` serves the metadata from
//! the listener, lets it through `jwt_authn` and gives `jwt_authn`'s 401s the challenge;
//! `manifests` renders Envoy Gateway's route to it, and refuses identity headers where the
//! headers cannot be held.

use std::path::{Path, PathBuf};

use crate::common::{run, s, text, DIGEST, IMAGE};
use serde_json::{json, Value};

const PROVIDER: &str = "idp=issuer=https://auth.example.com,jwks=/etc/jwks.json";

const SETTINGS: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: settings}
spec:
  protectedResources:
  - targetRef: {namespace: mcp, name: gw, sectionName: http}
    resource: https://mcp.example.com/mcp
    authorizationServers: [https://auth.example.com/tenant%201]
    scopesSupported: [mcp]
"#;

const IDENTITY: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: who, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  identityHeaders:
  - {name: x-caller-spiffe, from: SPIFFE}
  - {name: x-caller-team, from: JWTClaim, claim: team}
"#;

fn case(name: &str, files: &[(&str, &str)]) -> PathBuf {
    crate::common::case("oauth-identity", name, files)
}

/// `envoy -f DIR ARGS`: the configuration, or the failure's standard error.
fn envoy(dir: &Path, args: &[&str]) -> Result<Value, String> {
    let mut all = vec![
        "envoy",
        "-f",
        s(dir),
        "--wasm-path",
        "/f.wasm",
        "--files-where-envoy-runs",
        "-o",
        "json",
    ];
    all.extend_from_slice(args);
    let out = run(&all);
    if out.status.code() != Some(0) {
        return Err(text(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// The connection manager of the listener on `port`.
fn hcm(cfg: &Value, port: u64) -> &Value {
    let l = cfg["static_resources"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["address"]["socket_address"]["port_value"] == port)
        .unwrap();
    &l["filter_chains"][0]["filters"][0]["typed_config"]
}

#[test]
fn envoy_serves_the_metadata_first_on_its_listener_only() {
    let d = case("envoy", &[("settings.yaml", SETTINGS)]);
    let cfg = envoy(&d, &[]).unwrap();
    let routes = hcm(&cfg, 8080)["route_config"]["virtual_hosts"][0]["routes"]
        .as_array()
        .unwrap();
    let paths: Vec<&Value> = routes.iter().take(2).map(|r| &r["match"]["path"]).collect();
    assert_eq!(
        paths,
        [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource"
        ]
    );
    let doc: Value = serde_json::from_str(
        routes[0]["direct_response"]["body"]["inline_string"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        doc,
        json!({"resource": "https://mcp.example.com/mcp",
               "authorization_servers": ["https://auth.example.com/tenant%201"],
               "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"]})
    );
    assert_eq!(routes[0]["direct_response"]["status"], 200);
    let headers = &routes[0]["response_headers_to_add"];
    assert_eq!(
        headers[0]["header"],
        json!({"key": "content-type", "value": "application/json"})
    );
    assert_eq!(headers[1]["header"]["key"], "access-control-allow-origin");
    // The user's route comes after; the other listener serves no metadata.
    assert!(routes[2].get("route").is_some(), "{}", routes[2]);
    let other = &hcm(&cfg, 8443)["route_config"]["virtual_hosts"][0]["routes"];
    assert!(other
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r.get("direct_response").is_none()));
    // The bundle has the metadata on that listener.
    let wasm = hcm(&cfg, 8080)["http_filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "envoy.filters.http.wasm")
        .unwrap();
    let bundle: Value = serde_json::from_str(
        wasm["typed_config"]["config"]["configuration"]["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        bundle["gateways"][0]["listeners"][0]["protectedResource"]["resource"],
        "https://mcp.example.com/mcp"
    );
    // No token verification here: no jwt_authn, no local replies.
    assert!(hcm(&cfg, 8080).get("local_reply_config").is_none());
}

#[test]
fn jwt_authn_verifies_nothing_on_the_metadata_and_its_401s_carry_the_challenge() {
    let d = case("jwt", &[("settings.yaml", SETTINGS)]);
    for required in [false, true] {
        let mut args = vec!["--jwt-provider", PROVIDER];
        if required {
            args.extend(["--jwt-required", "gw/http"]);
        }
        let cfg = envoy(&d, &args).unwrap();
        let h = hcm(&cfg, 8080);
        let jwt = &h["http_filters"][0];
        assert_eq!(jwt["name"], "envoy.filters.http.jwt_authn");
        let rules = &jwt["typed_config"]["rules"];
        assert_eq!(
            rules[0],
            json!({"match": {"path": "/.well-known/oauth-protected-resource/mcp"}})
        );
        assert_eq!(
            rules[1],
            json!({"match": {"path": "/.well-known/oauth-protected-resource"}})
        );
        assert!(rules[2]["requires"].is_object());
        let mappers = &h["local_reply_config"]["mappers"];
        let challenge =
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\"";
        assert_eq!(
            mappers[0]["headers_to_add"][0]["header"]["value"],
            challenge
        );
        assert_eq!(
            mappers[1]["headers_to_add"][0]["header"]["value"],
            format!("{challenge}, error=\"invalid_token\"")
        );
        let expr = &mappers[0]["filter"]["extension_filter"]["typed_config"]["expression"];
        assert!(expr
            .as_str()
            .unwrap()
            .contains("jwt_authn_access_denied{Jwt_is_missing}"));
        // The other listener's jwt_authn verifies everywhere, and has no local replies.
        let other = hcm(&cfg, 8443);
        assert_eq!(
            other["http_filters"][0]["typed_config"]["rules"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(other.get("local_reply_config").is_none());
    }
}

#[test]
fn listeners_sharing_a_connection_manager_need_one_resource() {
    let gateway = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: a, protocol: HTTP, port: 9000, hostname: a.example.com}
  - {name: b, protocol: HTTP, port: 9000, hostname: b.example.com}
"#;
    let settings = r#"apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: settings}
spec:
  protectedResources:
  - targetRef: {namespace: mcp, name: shared, sectionName: a}
    resource: https://a.example.com/mcp
    authorizationServers: [https://auth.example.com]
  - targetRef: {namespace: mcp, name: shared, sectionName: b}
    resource: https://b.example.com/mcp
    authorizationServers: [https://auth.example.com]
"#;
    let d = case(
        "shared",
        &[("gw.yaml", gateway), ("settings.yaml", settings)],
    );
    // Each virtual host serves its own listener's metadata.
    let cfg = envoy(&d, &[]).unwrap();
    let vhosts = hcm(&cfg, 9000)["route_config"]["virtual_hosts"]
        .as_array()
        .unwrap()
        .clone();
    for (host, resource) in [
        ("a.example.com", "https://a.example.com/mcp"),
        ("b.example.com", "https://b.example.com/mcp"),
    ] {
        let v = vhosts.iter().find(|v| v["domains"][0] == host).unwrap();
        let body = v["routes"][0]["direct_response"]["body"]["inline_string"]
            .as_str()
            .unwrap();
        assert!(body.contains(resource), "{host}: {body}");
    }
    // One jwt_authn for both: its 401s cannot name two resources.
    let err = envoy(&d, &["--jwt-provider", PROVIDER]).unwrap_err();
    assert!(
        err.contains("share one connection manager but name different protected resources"),
        "{err}"
    );
}

fn manifests(dir: &Path, platform: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "manifests",
        "-f",
        s(dir),
        "--platform",
        platform,
        "--image",
        IMAGE,
        "--digest",
        DIGEST,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn envoy_gateway_gets_a_direct_response_route_for_the_metadata() {
    let d = case("eg", &[("settings.yaml", SETTINGS)]);
    let out = manifests(&d, "envoy-gateway", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("note: OAuth protected resource metadata"));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let filter = items
        .iter()
        .find(|o| o["kind"] == "HTTPRouteFilter")
        .unwrap();
    assert_eq!(filter["metadata"]["name"], "mcp-access-oauth-gw-http");
    let dr = &filter["spec"]["directResponse"];
    assert_eq!(
        (dr["statusCode"].as_u64(), dr["contentType"].as_str()),
        (Some(200), Some("application/json"))
    );
    // The body is an Envoy format string: a `%` is written `%%`.
    let inline = dr["body"]["inline"].as_str().unwrap();
    assert!(inline.contains("tenant%%201"), "{inline}");
    let doc: Value = serde_json::from_str(&inline.replace("%%", "%")).unwrap();
    assert_eq!(doc["resource"], "https://mcp.example.com/mcp");
    let route = items.iter().find(|o| o["kind"] == "HTTPRoute").unwrap();
    assert_eq!(route["metadata"]["namespace"], "mcp");
    assert_eq!(
        route["spec"]["parentRefs"][0],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "sectionName": "http"})
    );
    let rule = &route["spec"]["rules"][0];
    assert_eq!(
        rule["matches"][0]["path"],
        json!({"type": "Exact", "value": "/.well-known/oauth-protected-resource/mcp"})
    );
    assert_eq!(
        rule["filters"][0]["extensionRef"]["name"],
        "mcp-access-oauth-gw-http"
    );
    // Istio: not served by the objects; said on standard error and in the YAML.
    let out = manifests(&d, "istio", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(
        "warning: OAuth: serve the protected resource metadata of listener mcp/gw/http yourself"
    ));
    assert!(text(&out.stdout).contains(
        "# OAuth: serve the protected resource metadata of listener mcp/gw/http yourself"
    ));
}

#[test]
fn identity_headers_reach_the_bundle_and_need_held_headers() {
    let d = case("identity", &[("who.yaml", IDENTITY)]);
    let out = run(&["compile", "-f", s(&d), "-o", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        b["backends"][0]["identityHeaders"],
        json!([{"name": "x-caller-spiffe", "from": "SPIFFE"},
               {"name": "x-caller-team", "from": "JWTClaim", "claim": "team"}])
    );
    // A WasmPlugin cannot hold headers: refused, nothing written.
    let out = manifests(&d, "istio", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("identityHeaders need the filter to hold request headers"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    // The EnvoyFilter rendering holds them; so does Envoy Gateway's.
    for (platform, extra) in [
        ("istio", &["--istio-hold-headers"][..]),
        ("envoy-gateway", &[][..]),
    ] {
        let out = manifests(&d, platform, extra);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{platform}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).contains("x-caller-team"), "{platform}");
    }
}

fn explained(
    b: &Value,
    spec: mcp_access_cli::explain::RequestSpec,
) -> mcp_access_cli::explain::Explanation {
    let bundle = mcp_access_bundle::parse_bundle(b.to_string().as_bytes())
        .unwrap()
        .into_inner();
    mcp_access_cli::explain::explain(&bundle, None, &spec).unwrap()
}

#[test]
fn explain_shows_the_challenge_and_the_identity_headers() {
    let b = json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443, "protectedResource": {
            "resource": "https://mcp.example.com/mcp", "authorizationServers": ["https://auth.example.com"]}}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"],
                      "identityHeaders": [{"name": "x-caller-spiffe", "from": "SPIFFE"}]}],
        "policies": [{"name": "alpha", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
                      "rules": [{"name": "alpha", "source": {"type": "SPIFFE", "spiffe": "spiffe://example.org/a"}}]}],
    });
    let spec =
        |spiffe: Option<&str>, headers: &[(&str, &str)]| mcp_access_cli::explain::RequestSpec {
            backend: Some("tools".into()),
            spiffe: spiffe.map(str::to_string),
            mcp_method: Some("tools/call".into()),
            param: Some("echo".into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
    let e = explained(&b, spec(Some("spiffe://example.org/a"), &[]));
    assert_eq!(e.decision.as_str(), "allow");
    let set: Vec<(&str, &str)> = e
        .add_headers
        .iter()
        .flatten()
        .map(|h| (h.name.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(set, [("x-caller-spiffe", "spiffe://example.org/a")]);
    // No credential: the 401 with its challenge; a token of any kind: the usual 403.
    let e = explained(&b, spec(None, &[]));
    let r = e.response.unwrap();
    assert_eq!(r.status, 401);
    assert!(r.headers.iter().any(|h| h.name == "www-authenticate"
        && h.value == "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""));
    let e = explained(&b, spec(None, &[("authorization", "Bearer x")]));
    assert_eq!(e.response.unwrap().status, 403);
}

#[test]
fn explain_shows_the_insufficient_scope_challenge_and_why() {
    let b = json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org",
                     "jwt": {"providers": [{"issuer": "https://auth.example.com", "metadataKey": "idp"}]}},
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "policies": [{"name": "readers", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
                      "rules": [{"name": "read", "source": {"type": "JWT", "jwt": {
                          "issuer": "https://auth.example.com",
                          "claims": [{"name": "scope", "values": ["tools:read"]}]}}},
                                {"name": "write", "source": {"type": "JWT", "jwt": {
                          "issuer": "https://auth.example.com",
                          "claims": [{"name": "scope", "values": ["tools:write"]}]}},
                                 "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["delete"]}]}}}]}],
    });
    let spec = |scope: &str| mcp_access_cli::explain::RequestSpec {
        backend: Some("tools".into()),
        mcp_method: Some("tools/call".into()),
        param: Some("echo".into()),
        jwt_claims: Some(json!({"iss": "https://auth.example.com", "sub": "u1", "scope": scope})),
        ..Default::default()
    };
    let e = explained(&b, spec("tools:list"));
    let r = e.response.unwrap();
    assert_eq!(r.status, 403);
    assert!(
        r.headers.iter().any(|h| h.name == "www-authenticate"
            && h.value == "Bearer error=\"insufficient_scope\", scope=\"tools:read\""),
        "{:?}",
        r.headers
    );
    let why: Vec<String> = e.trace.iter().map(|t| t.event.to_string()).collect();
    let why: Vec<&str> = why.iter().map(String::as_str).collect();
    assert!(
        why.contains(&"not admitted: token scope does not match"),
        "{why:?}"
    );
    // A rule that refuses the request itself is not about scopes.
    assert!(
        why.contains(&"not admitted: param does not match"),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|w| w.starts_with("would admit with scope \"tools:read\"")),
        "{why:?}"
    );
    // The scope among others: allowed.
    let e = explained(&b, spec("tools:list tools:read"));
    assert_eq!(e.decision.as_str(), "allow");
}
