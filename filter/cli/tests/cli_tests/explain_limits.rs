//! `explain` shows the rate limits a request is charged and their keys, from the filter's own
//! selection and buckets; `--assume ns/policy/limit=over` shows the refusal the filter sends;
//! a limit name that does not exist is an error naming those that do; `mcp-access test` cases
//! state a refusal the same way.

use mcp_access_bundle::Bundle;
use mcp_access_cli::explain::{
    explain, parse_assumed, to_text, Assumed, Explainer, LimitAssumption, RequestSpec, Verdict,
};
use mcp_access_engine::receipts::hex;
use serde_json::{json, Value};

use crate::common::{case, run, s, text};

const ALPHA: &str = "spiffe://example.org/ns/agents/sa/alpha";
/// 2026-12-04 16:00:30 UTC, in nanoseconds.
const TIME: i64 = 1_796_400_030_000_000_000;

/// Alpha may call echo and list tools; two limits: per caller (5 a minute, 50 an hour) and
/// per JWT subject (3 an hour).
fn bundle() -> Bundle {
    let limit = |name: &str, counters: Value, rates: Value| {
        json!({"namespace": "default", "policy": "quotas", "name": name, "level": "Backend",
               "targets": [{"name": "tools"}], "rates": rates, "counters": counters, "when": []})
    };
    let b = json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "policies": [{"name": "alpha", "level": "Backend", "targets": [{"name": "tools"}],
            "action": "Allow", "rules": [{"name": "echo", "source": {"type": "SPIFFE", "spiffe": ALPHA},
            "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]},
                                                  {"name": "tools/list"}]}}}]}],
        "rateLimits": [
            limit("per-caller", json!(["source.principal"]),
                  json!([{"limit": 5, "windowSeconds": 60}, {"limit": 50, "windowSeconds": 3600}])),
            limit("per-subject", json!(["jwt.claims.sub"]), json!([{"limit": 3, "windowSeconds": 3600}])),
        ],
    });
    mcp_access_bundle::parse_bundle(b.to_string().as_bytes())
        .unwrap()
        .into_inner()
}

fn call(tool: &str, limits: &[(&str, LimitAssumption)]) -> RequestSpec {
    RequestSpec {
        backend: Some("tools".into()),
        spiffe: Some(ALPHA.into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        limits: limits.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        time: Some(TIME),
        ..RequestSpec::default()
    }
}

#[test]
fn an_allowed_call_shows_each_limit_charged_with_its_key_and_bucket() {
    let b = bundle();
    let x = Explainer::new(&b, None).unwrap();
    let e = x.explain(&call("echo", &[])).unwrap();
    assert_eq!(e.decision, Verdict::Allow, "{}", to_text(&e));
    let j = serde_json::to_value(&e).unwrap();
    let limits = j["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2, "{j:#}");
    assert_eq!(limits[0]["limit"], "default/quotas/per-caller");
    assert_eq!(limits[0]["mode"], "Local");
    assert_eq!(limits[0]["counters"], json!(["source.principal"]));
    assert_eq!(limits[0]["key"], json!([ALPHA]));
    assert_eq!(
        limits[0]["rates"][1],
        json!({"limit": 50, "windowSeconds": 3600})
    );
    assert_eq!(
        (&limits[0]["assumed"], &limits[0]["given"]),
        (&json!("under"), &json!(false))
    );
    // No JWT: the limit's one unidentified bucket, never none.
    assert_eq!(limits[1]["key"], "unidentified");
    // The buckets are the engine's own.
    let engine = &x.engine().rate_limits.0;
    let caller = engine[0].bucket(Some(&[ALPHA.to_string()]));
    assert_eq!(limits[0]["bucket"], hex(&caller));
    assert_eq!(limits[1]["bucket"], hex(&engine[1].bucket(None)));
    assert_eq!(limits[0]["digest"], hex(&engine[0].digest));
    let slot = u32::from_le_bytes(caller[..4].try_into().unwrap()) % 25_000;
    assert_eq!(limits[0]["slot"], slot);
    let t = to_text(&e);
    assert!(
        t.contains("limit     default/quotas/per-caller (Local; 5 per 60 s, 50 per 3600 s): assumed under (room) (no --assume given)\n"),
        "{t}"
    );
    assert!(
        t.contains(&format!("key source.principal = \"{ALPHA}\"")),
        "{t}"
    );
    assert!(
        t.contains("key unidentified: a counter (jwt.claims.sub) errs or has no value"),
        "{t}"
    );
    // The record names both limits charged.
    assert_eq!(
        e.reason.to_string(),
        "allowed",
        "{}",
        serde_json::to_string(&j).unwrap()
    );
}

#[test]
fn assume_over_shows_the_refusal_the_client_gets() {
    let b = bundle();
    let over = [("default/quotas/per-caller", LimitAssumption::Over)];
    let e = explain(&b, None, &call("echo", &over)).unwrap();
    assert_eq!(e.decision, Verdict::Deny);
    assert_eq!(e.reason.to_string(), "rate_limited");
    assert_eq!(e.status, Some(429));
    let r = e.response.as_ref().unwrap();
    let header = |n: &str| {
        r.headers
            .iter()
            .find(|h| h.name == n)
            .map(|h| h.value.as_str())
    };
    // 16:00:30: the minute ends in 30 s.
    assert_eq!(header("retry-after"), Some("30"));
    assert_eq!(
        header("ratelimit-policy"),
        Some("\"default/quotas/per-caller\";q=5;w=60")
    );
    assert_eq!(
        header("ratelimit"),
        Some("\"default/quotas/per-caller\";r=0;t=30")
    );
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["error"]["code"], 429);
    assert_eq!(
        body["error"]["data"],
        json!({"reason": "rate_limited", "limit": "default/quotas/per-caller", "retryAfter": 30})
    );
    let t = to_text(&e);
    assert!(t.contains("assumed over (no room)\n"), "{t}");
    assert!(t.contains("DENY 429 at backend (rate_limited)"), "{t}");
    assert!(t.contains("refused by a rate limit"), "{t}");
    // The second limit full instead: the hour ends in 3570 s.
    let e = explain(
        &b,
        None,
        &call(
            "echo",
            &[("default/quotas/per-subject", LimitAssumption::Over)],
        ),
    )
    .unwrap();
    let r = e.response.unwrap();
    assert!(r.body.contains("\"retryAfter\":3570"), "{}", r.body);
    // `under` is the default, said explicitly.
    let e = explain(
        &b,
        None,
        &call(
            "echo",
            &[("default/quotas/per-subject", LimitAssumption::Under)],
        ),
    )
    .unwrap();
    assert_eq!(e.decision, Verdict::Allow);
    assert!(e.limits[1].given);
}

#[test]
fn requests_not_charged_show_no_limits_and_say_an_assumption_changes_nothing() {
    let b = bundle();
    let over = [("default/quotas/per-caller", LimitAssumption::Over)];
    // Denied by policy: nothing is charged.
    let e = explain(&b, None, &call("rm", &over)).unwrap();
    assert_eq!((e.decision, e.status), (Verdict::Deny, Some(403)));
    assert!(e.limits.is_empty());
    assert_eq!(
        e.assumptions,
        ["--assume default/quotas/per-caller: this request is not charged that limit: the assumption changes nothing"]
    );
    // A tools/list: limits without predicates count tool calls only.
    let mut list = call("echo", &over);
    list.mcp_method = Some("tools/list".into());
    list.param = None;
    let e = explain(&b, None, &list).unwrap();
    assert_eq!(e.decision, Verdict::Allow, "{}", to_text(&e));
    assert!(e.limits.is_empty());
}

#[test]
fn a_limit_that_does_not_exist_is_an_error_naming_those_that_do() {
    let b = bundle();
    let err = explain(
        &b,
        None,
        &call(
            "echo",
            &[("default/quotas/per-callr", LimitAssumption::Over)],
        ),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--assume default/quotas/per-callr: no rate limit of that name (NAMESPACE/POLICY/LIMIT); its limits: default/quotas/per-caller, default/quotas/per-subject"
    );
    assert_eq!(
        parse_assumed("over").unwrap(),
        Assumed::Limit(LimitAssumption::Over)
    );
    assert!(parse_assumed("overr")
        .unwrap_err()
        .to_string()
        .contains("(or over, under for a rate limit NAMESPACE/POLICY/LIMIT)"));
}

const QUOTAS: &str = r#"apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: anyone-echo, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: echo
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [echo]}]}}
---
apiVersion: mcp-access.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: quotas, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  limits:
    echoes:
      rates: [{limit: 5, window: 1m}]
      counters: [{expression: source.principal}]
"#;

#[test]
fn the_binary_explains_limits_and_test_cases_state_a_refusal() {
    let tests = r#"apiVersion: test.mcp-access.io/v1alpha1
kind: PolicyTest
metadata: {name: quotas}
spec:
  defaults: {gateway: gw, listener: http, caller: {spiffe: "spiffe://example.org/ns/agents/sa/alpha"}}
  cases:
  - name: echo has room
    request: {mcp: {tool: echo}}
    expect: {decision: allow}
  - name: echo over its quota
    request: {mcp: {tool: echo}, assume: {mcp/quotas/echoes: over}}
    expect: {decision: deny, level: backend, reason: rate_limited, status: 429}
  - name: a limit that does not exist
    request: {mcp: {tool: echo}, assume: {mcp/quotas/echo: over}}
    expect: {decision: deny}
"#;
    let dir = case(
        "explain-limits",
        "quotas",
        &[("q.yaml", QUOTAS), ("q.test", tests)],
    );
    let explain = |more: &[&str]| {
        let mut args = vec![
            "explain",
            "-f",
            s(&dir),
            "--gateway",
            "gw",
            "--listener",
            "http",
        ];
        args.extend(["--tool", "echo"]);
        args.extend(more);
        run(&args)
    };
    let over = [
        "--spiffe",
        ALPHA,
        "--assume",
        "mcp/quotas/echoes=over",
        "-o",
        "json",
    ];
    let out = explain(&over);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&j["reason"], &j["status"]),
        (&json!("rate_limited"), &json!(429))
    );
    assert_eq!(j["limits"][0]["key"], json!([ALPHA]));
    assert_eq!(j["limits"][0]["assumed"], "over");
    let out = explain(&["--assume", "mcp/quotas/nope=under"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("its limits: mcp/quotas/echoes"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["test", s(&dir.join("q.test")), "-f", s(&dir)]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{report}{}", text(&out.stderr));
    assert!(report.contains("  ok    echo has room\n"), "{report}");
    assert!(report.contains("  ok    echo over its quota\n"), "{report}");
    assert!(
        report.contains("  FAIL  a limit that does not exist\n          error: --assume mcp/quotas/echo: no rate limit of that name"),
        "{report}"
    );
}

#[test]
fn replay_keeps_a_rate_limit_refusal_while_the_limit_exists() {
    use crate::common::{load, BASE};
    use mcp_access_cli::replay::replay;
    let compiled = |docs: &str| {
        let c = mcp_access_k8s::compile(&load(BASE, &[docs.to_string()]), &Default::default());
        mcp_access_bundle::validate(&c.bundle).unwrap();
        c
    };
    let refused = json!({"decision": "deny", "listener": "mcp/gw/http", "backend": "mcp/tools",
        "method": "tools/call", "name": "echo", "policy": null, "rule": null, "caller": ALPHA,
        "reason": "rate_limited", "level": "backend", "status": 429,
        "limits": {"charged": ["mcp/quotas/echoes"], "refused": "mcp/quotas/echoes"},
        "request": {"arguments": null, "headers": {}, "host": "localhost:8080", "jwt": null,
                    "method": "POST", "path": "/mcp", "port": 8080, "revision": "2025-11-25",
                    "route": null, "time": TIME}});
    // The same manifests: refused again, nothing flips.
    let c = compiled(QUOTAS);
    let out = replay(
        &c.bundle,
        Some(&c.topology),
        std::slice::from_ref(&refused),
        &Default::default(),
    );
    assert_eq!((out.replayed, out.flips.len()), (1, 0), "{out:?}");
    // The limit gone: the call is allowed now.
    let access = QUOTAS.split("---").next().unwrap();
    let c = compiled(access);
    let out = replay(
        &c.bundle,
        Some(&c.topology),
        &[refused],
        &Default::default(),
    );
    assert_eq!((out.replayed, out.flips.len()), (1, 1), "{out:?}");
}

#[test]
fn a_global_limit_is_answered_as_assumed() {
    let mut v = serde_json::to_value(bundle()).unwrap();
    v["rateLimits"][0]["mode"] = "Global".into();
    v["rateLimitService"] = json!({"cluster": "ratelimit", "timeoutMs": 100});
    let b: Bundle = mcp_access_bundle::parse_bundle(v.to_string().as_bytes())
        .unwrap()
        .into_inner();
    let global = "default/quotas/per-caller";
    // The limiter is assumed to have room: allowed, nothing failed.
    let e = explain(&b, None, &call("echo", &[])).unwrap();
    assert_eq!(e.decision, Verdict::Allow, "{}", to_text(&e));
    // Assumed over: the limiter's OVER_LIMIT, the 429 naming the Global limit.
    let e = explain(&b, None, &call("echo", &[(global, LimitAssumption::Over)])).unwrap();
    assert_eq!(e.decision, Verdict::Deny, "{}", to_text(&e));
    assert_eq!(e.reason.to_string(), "rate_limited");
    assert_eq!(e.status, Some(429));
    let body: Value = serde_json::from_str(&e.response.unwrap().body).unwrap();
    assert_eq!(body["error"]["data"]["limit"], global);
    // The Local limit assumed over instead: refused before the limiter is asked.
    let local = "default/quotas/per-subject";
    let e = explain(&b, None, &call("echo", &[(local, LimitAssumption::Over)])).unwrap();
    let body: Value = serde_json::from_str(&e.response.unwrap().body).unwrap();
    assert_eq!(body["error"]["data"]["limit"], local);
}
