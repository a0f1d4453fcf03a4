//! Rate limits in the bundle: parsing, ranges, CEL counters and predicates, the service.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use mcp_access_bundle::{parse_bundle, RateLimitMode, API_VERSION};
use serde_json::{json, Value};

fn with_limit(limit: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "rateLimits": [limit]
    })
}

fn local() -> Value {
    json!({"namespace": "mcp", "policy": "quotas", "name": "writes", "level": "Backend", "mode": "Local",
           "targets": [{"name": "tools", "namespace": "default"}],
           "rates": [{"limit": 5, "windowSeconds": 60}, {"limit": 50, "windowSeconds": 3600}],
           "counters": ["source.principal", "jwt.claims.sub"],
           "when": ["request.mcp.method == 'tools/call'"]})
}

fn err_at(v: Value) -> (String, String) {
    let e = parse_bundle(v.to_string().as_bytes()).expect_err("must be rejected");
    (e.path, e.message)
}

#[test]
fn a_local_limit_parses_and_its_cel_is_handed_over() {
    let mut b = parse_bundle(with_limit(local()).to_string().as_bytes()).unwrap();
    assert_eq!(b.rate_limits[0].mode, RateLimitMode::Local);
    assert_eq!(b.rate_limits[0].id(), "mcp/quotas/writes");
    let c = b.take_limit_conditions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].counters.len(), 2);
    assert_eq!(c[0].when.len(), 1);
    assert!(b.take_limit_conditions().is_empty(), "handed over once");
}

#[test]
fn mistakes_are_refused_with_their_paths() {
    let cases: &[(&str, Value, &str, &str)] = &[
        (
            "/rates/0/limit",
            json!(0),
            "rateLimits[0].rates[0].limit",
            "between 1 and 2147483648",
        ),
        (
            "/rates/0/limit",
            json!(2_147_483_649u64),
            "rateLimits[0].rates[0].limit",
            "between 1",
        ),
        (
            "/rates/1/windowSeconds",
            json!(0),
            "rateLimits[0].rates[1].windowSeconds",
            "between 1",
        ),
        (
            "/rates/1/windowSeconds",
            json!(60),
            "rateLimits[0].rates[1].windowSeconds",
            "this window",
        ),
        ("/rates", json!([]), "rateLimits[0].rates", "1 to 8 rates"),
        (
            "/counters/0",
            json!("jwt.claim.sub"),
            "rateLimits[0].counters[0]",
            "did you mean",
        ),
        (
            "/counters/0",
            json!("[1, 2]"),
            "rateLimits[0].counters[0]",
            "string, number or bool",
        ),
        (
            "/counters/0",
            json!(" "),
            "rateLimits[0].counters[0]",
            "not empty",
        ),
        (
            "/when/0",
            json!("request.mcp.tool_nam == 'x'"),
            "rateLimits[0].when[0]",
            "did you mean",
        ),
        ("/when/0", json!("'x'"), "rateLimits[0].when[0]", "boolean"),
        (
            "/targets/0/name",
            json!("nope"),
            "rateLimits[0].targets[0].name",
            "no backend",
        ),
        (
            "/name",
            json!("Bad_Name"),
            "rateLimits[0].name",
            "DNS subdomain",
        ),
        (
            "/mode",
            json!("Global"),
            "rateLimits[0].mode",
            "--rate-limit-service",
        ),
    ];
    for (pointer, value, path, message) in cases {
        let mut l = local();
        *l.pointer_mut(pointer).unwrap() = value.clone();
        let (p, m) = err_at(with_limit(l));
        assert_eq!(&p, path, "{pointer} = {value}: {m}");
        assert!(m.contains(message), "{pointer} = {value}: {m}");
    }
    let mut v = with_limit(local());
    v["rateLimits"].as_array_mut().unwrap().push(local());
    assert_eq!(err_at(v).0, "rateLimits[1].name");
}

#[test]
fn the_service_is_checked_and_has_defaults() {
    let mut l = local();
    l["mode"] = json!("Global");
    let mut v = with_limit(l);
    v["rateLimitService"] = json!({"cluster": "rls"});
    let b = parse_bundle(v.to_string().as_bytes()).unwrap();
    let s = b.rate_limit_service.as_ref().unwrap();
    assert_eq!((s.timeout_ms, s.domain.as_str()), (100, "mcp-access"));
    v["rateLimitService"] = json!({"cluster": "", "timeoutMs": 5});
    assert_eq!(err_at(v.clone()).0, "rateLimitService.cluster");
    v["rateLimitService"] = json!({"cluster": "rls", "timeoutMs": 0});
    assert_eq!(err_at(v).0, "rateLimitService.timeoutMs");
}
