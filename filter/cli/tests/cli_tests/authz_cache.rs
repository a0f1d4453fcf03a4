//! `externalAuth.cache` (docs/semantics.md §3.10) through the binary: compiled into the bundle,
//! refused loudly (file, field, fix) when it could reuse an answer for a request the authorizer
//! would judge differently, only on an `AccessPolicy`, and shown by `explain`.

use crate::common;

use std::path::{Path, PathBuf};

use common::{run, s, text, DIGEST, IMAGE};
use serde_json::{json, Value};

fn policy(kind: &str, protocol: &str, settings: &str, cache: &str) -> String {
    common::external_auth(
        kind,
        protocol,
        &format!("    {settings}\n    cache:\n{cache}"),
    )
}

fn case(name: &str, p: &str) -> PathBuf {
    common::case("authz-cache", name, &[("p.yaml", p)])
}

/// `validate -o text`: exit 1 and stderr.
fn refused(d: &Path) -> String {
    let out = run(&["validate", "-f", s(d), "-o", "text"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stderr) + &text(&out.stdout)
}

#[test]
fn a_cache_reaches_the_bundle() {
    let p = policy(
        "AccessPolicy",
        "HTTP",
        "http: {allowedHeaders: [X-Tenant, x-trace]}",
        "      ttl: 1m30s\n      denials: true\n      maxEntries: 64\n      key: {headers: [x-tenant], claims: [groups], ignoredHeaders: [authorization, X-Trace]}\n",
    );
    let d = case("ok", &p);
    let out = run(&["compile", "-f", s(&d)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        b["authorizers"][0]["cache"],
        json!({"ttlMs": 90000, "maxEntries": 64, "denials": true, "keyHeaders": ["x-tenant"],
               "keyClaims": ["groups"], "ignoredHeaders": ["authorization", "x-trace"]})
    );
    // The defaults: OK answers only, 1024 slots.
    let p = policy(
        "AccessPolicy",
        "GRPC",
        "grpc: {allowedHeaders: [x-tenant]}",
        "      ttl: 5s\n      key: {headers: [x-tenant]}\n",
    );
    let out = run(&["compile", "-f", s(&case("defaults", &p))]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        b["authorizers"][0]["cache"],
        json!({"ttlMs": 5000, "maxEntries": 1024, "keyHeaders": ["x-tenant"]})
    );
    // `envoy` and `manifests` (Envoy Gateway, Istio) carry the same bundle (JSON text inside
    // Envoy's JSON, compared without the escapes; YAML in the manifests).
    let want = r#""cache":{"ttlMs":90000,"maxEntries":64,"denials":true"#;
    let carried = |out: &std::process::Output, what: &str| {
        assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
        let t = text(&out.stdout).replace('\\', "");
        let yaml = ["ttlMs: 90000", "maxEntries: 64", "denials: true"];
        assert!(
            t.contains(want) || yaml.iter().all(|y| t.contains(y)),
            "{what}: {t}"
        );
    };
    carried(
        &run(&[
            "envoy",
            "-f",
            s(&d),
            "--listen",
            "http=8080",
            "--wasm-path",
            "/filter.wasm",
        ]),
        "envoy",
    );
    for platform in ["envoy-gateway", "istio"] {
        let out = run(&[
            "manifests",
            "-f",
            s(&d),
            "--platform",
            platform,
            "--image",
            IMAGE,
            "--digest",
            DIGEST,
        ]);
        carried(&out, platform);
    }
    // explain shows the declaration (and always calls: it keeps no answers).
    let out = run(&[
        "explain",
        "-f",
        s(&d),
        "--port",
        "8080",
        "--path",
        "/mcp",
        "--service-account",
        "agents/alpha",
        "--tool",
        "echo",
        "--backend",
        "mcp/tools",
    ]);
    let t = text(&out.stdout);
    assert!(
        t.contains("its answers are cached: OK answers and denials for 90000 ms in 64 slots; key: what the authorizer is sent less authorization, x-trace, verified JWTs by iss, sub and claims groups"),
        "{t}{}",
        text(&out.stderr)
    );
}

#[test]
fn a_cache_that_could_reuse_a_wrong_answer_is_refused_with_the_fix() {
    let cases = [
        (
            "http-authorization",
            policy("AccessPolicy", "HTTP", "http: {}", "      ttl: 30s\n"),
            "spec.externalAuth.cache.key: the authorizer is sent authorization (always authorization, and http.allowedHeaders) but the key does not hold it: add it to spec.externalAuth.cache.key.headers, or to spec.externalAuth.cache.key.ignoredHeaders if its answers do not depend on it",
        ),
        (
            "http-allowed",
            policy(
                "AccessPolicy",
                "HTTP",
                "http: {allowedHeaders: [x-tenant]}",
                "      ttl: 30s\n      key: {ignoredHeaders: [authorization]}\n",
            ),
            "the authorizer is sent x-tenant",
        ),
        (
            "grpc-all",
            policy("AccessPolicy", "GRPC", "grpc: {}", "      ttl: 30s\n"),
            "spec.externalAuth.cache: the GRPC authorizer is sent every request header (spec.externalAuth.grpc.allowedHeaders is empty), so no key can hold what its answers depend on: name the headers it reads in spec.externalAuth.grpc.allowedHeaders",
        ),
        (
            "ttl-long",
            policy("AccessPolicy", "HTTP", "http: {}", "      ttl: 2h\n      key: {ignoredHeaders: [authorization]}\n"),
            "spec.externalAuth.cache.ttl: Invalid value: \"2h\": must be a Gateway API duration between 1ms and 1h",
        ),
        (
            "ttl-missing",
            policy("AccessPolicy", "HTTP", "http: {}", "      denials: true\n"),
            "spec.externalAuth.cache.ttl: Required value",
        ),
        (
            "entries",
            policy("AccessPolicy", "HTTP", "http: {}", "      ttl: 1s\n      maxEntries: 0\n      key: {ignoredHeaders: [authorization]}\n"),
            "spec.externalAuth.cache.maxEntries: Invalid value: 0",
        ),
        (
            "bad-header",
            policy("AccessPolicy", "HTTP", "http: {}", "      ttl: 1s\n      key: {headers: [\"a b\"], ignoredHeaders: [authorization]}\n"),
            "spec.externalAuth.cache.key.headers[0]: Invalid value: \"a b\": must be an HTTP header name",
        ),
        (
            "ignored-filter-set",
            policy("AccessPolicy", "HTTP", "http: {}", "      ttl: 1s\n      key: {ignoredHeaders: [authorization, x-mcp-tool]}\n"),
            "spec.externalAuth.cache.key.ignoredHeaders[1]: Invalid value: \"x-mcp-tool\": the filter sets this header of the callout itself",
        ),
        (
            "upstream",
            policy("XAccessPolicy", "HTTP", "http: {}", "      ttl: 1s\n"),
            "spec.externalAuth.cache: unknown field \"cache\": only an AccessPolicy (group mcp-access.io) has it",
        ),
    ];
    for (name, p, says) in cases {
        let d = case(name, &p);
        let err = refused(&d);
        assert!(
            err.contains("p.yaml") && err.contains(says),
            "{name}: {err}"
        );
        // compile refuses to write anything.
        let out = run(&["compile", "-f", s(&d)]);
        assert_ne!(out.status.code(), Some(0), "{name}");
        assert!(out.stdout.is_empty(), "{name}");
    }
}
