//! `--rate-limit-service` on every command that compiles manifests: a Global RateLimitPolicy is
//! accepted with it and not without (naming the flag); the bundle carries the service's
//! cluster, domain and timeout; `envoy` and `manifests` render the limiter's cluster.

use crate::common::{case, manifests_of, run, s, text};

const GLOBAL: &str = "apiVersion: mcp-access.io/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: g, namespace: mcp}\nspec:\n  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]\n  mode: Global\n  limits:\n    calls:\n      rates: [{limit: 5, window: 1m}]\n      counters: [{expression: source.principal}]\n";

const RLS: [&str; 6] = [
    "--rate-limit-service",
    "ratelimit.mcp.svc.cluster.local:8081",
    "--rate-limit-domain",
    "tools",
    "--rate-limit-timeout-ms",
    "250",
];

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

#[test]
fn every_compiling_command_takes_the_service_and_without_it_a_global_policy_is_invalid() {
    let d = case("rlg", "flags", &[("rl.yaml", GLOBAL)]);
    let out = run(&["compile", "-f", s(&d)]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("--rate-limit-service HOST:PORT"),
        "{}",
        text(&out.stderr)
    );
    let mut args = vec!["compile", "-f", s(&d)];
    args.extend(RLS);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bundle = json(&out);
    assert_eq!(
        bundle["rateLimitService"],
        serde_json::json!({"cluster": "mcp_access_ratelimit", "timeoutMs": 250, "domain": "tools"})
    );
    assert_eq!(bundle["rateLimits"][0]["mode"], "Global");
    for cmd in ["status", "validate"] {
        let mut args = vec![cmd, "-f", s(&d)];
        args.extend(RLS);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("Accepted"), "{cmd}");
    }
    // The domain and timeout mean nothing without a service.
    let out = run(&["compile", "-f", s(&d), "--rate-limit-domain", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn manifests_render_the_limiters_cluster_for_envoy_gateway_and_istio() {
    let d = case("rlg", "manifests", &[("rl.yaml", GLOBAL)]);
    let render = |platform: &str| {
        let extra: Vec<&str> = ["-o", "json"].into_iter().chain(RLS).collect();
        let out = manifests_of(s(&d), platform, &extra);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let eg = render("envoy-gateway");
    assert!(
        eg.contains("\"name\":\"mcp_access_ratelimit\"")
            || eg.contains("\"name\": \"mcp_access_ratelimit\""),
        "{eg}"
    );
    assert!(eg.contains("ratelimit.mcp.svc.cluster.local"), "{eg}");
    assert!(eg.contains("http2_protocol_options"), "{eg}");
    let istio = render("istio");
    assert!(
        istio.contains("outbound|8081||ratelimit.mcp.svc.cluster.local"),
        "{istio}"
    );
}
