//! RateLimitPolicies: compiled into the bundle's rate limits at their targets; a Gateway's
//! defaults and overrides folded onto the XBackends behind it; mistakes refused with their
//! fields and enforced fail-closed.

use mcp_access_bundle::{BlockKind, Level, RateLimitMode, RateLimitService};
use mcp_access_k8s::{compile, reason, Compiled, ObjectStatus, Options};

use crate::common::{gateway, load, route, stream, to_xbackend, xbackend};

/// Gateway `gw` (listeners a, b) routes /t to XBackend tools, /o to XBackend other (listener a).
fn infra() -> String {
    stream(&[
        gateway("mcp", "gw", &[("a", 8080), ("b", 8081)]),
        route(
            "mcp",
            "r",
            "name: gw",
            &format!(
                "{}{}",
                to_xbackend(Some("/t"), "tools"),
                to_xbackend(Some("/o"), "other")
            ),
        ),
        xbackend("tools", "tools-server", None),
        xbackend("other", "other-server", None),
    ])
}

fn rlp(name: &str, target: &str, body: &str) -> String {
    format!("apiVersion: mcp-access.io/v1alpha1\nkind: RateLimitPolicy\nmetadata: {{name: {name}, namespace: mcp, creationTimestamp: \"2024-01-01T00:00:00Z\"}}\nspec:\n  targetRefs: [{target}]\n{body}")
}

const TOOLS: &str = "{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}";
const GW: &str = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}";

const WRITES: &str = "  limits:\n    writes:\n      rates: [{limit: 5, window: 1m}, {limit: 50, window: 1h}]\n      counters: [{expression: source.principal}, {expression: jwt.claims.sub}]\n      when: [{predicate: \"request.mcp.tool_name.startsWith('delete_')\"}]\n";

fn compiled(docs: &[String], o: &Options) -> Compiled {
    let c = compile(&load(&infra(), &stream(docs)), o);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    c
}

fn rl_status<'a>(c: &'a Compiled, name: &str) -> &'a ObjectStatus {
    c.report
        .rate_limit_policies
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", c.report))
}

#[test]
fn limits_on_an_xbackend_compile_with_their_rates_counters_and_predicates() {
    let c = compiled(&[rlp("quotas", TOOLS, WRITES)], &Options::default());
    let [l] = c.bundle.rate_limits.as_slice() else {
        panic!("{:#?}", c.bundle.rate_limits)
    };
    assert_eq!(l.id(), "mcp/quotas/writes");
    assert_eq!((l.level, l.mode), (Level::Backend, RateLimitMode::Local));
    assert_eq!(l.targets[0].name, "tools");
    assert_eq!(
        l.rates
            .iter()
            .map(|r| (r.limit, r.window_seconds))
            .collect::<Vec<_>>(),
        [(5, 60), (50, 3600)]
    );
    assert_eq!(l.counters, ["source.principal", "jwt.claims.sub"]);
    let s = rl_status(&c, "quotas");
    assert!(s.accepted(), "{s:#?}");
    assert_eq!(
        s.conditions[0].enforced.as_ref().unwrap().reason,
        "Enforced"
    );
    assert!(c.bundle.rate_limit_service.is_none());
}

#[test]
fn mistakes_are_not_accepted_name_the_field_and_deny_at_the_target() {
    let cases = [
        ("      rates: [{limit: 5, window: 1m}]\n      counters: [{expression: jwt.claim.sub}]\n", "spec.limits.x.counters[0].expression", "did you mean `jwt.claims.sub`"),
        ("      rates: [{limit: 5, window: 1m}]\n      when: [{predicate: \"request.mcp.tool_nam == 'a'\"}]\n", "spec.limits.x.when[0].predicate", "did you mean `request.mcp.tool_name`"),
        ("      rates: [{limit: 5, window: 400d}]\n", "spec.limits.x.rates[0].window", "longer than 366d"),
        ("      rates: [{limit: 5, window: 1m}, {limit: 6, window: 60s}]\n", "spec.limits.x.rates[1].window", "same window"),
    ];
    for (limit, field, fix) in cases {
        let c = compiled(
            &[rlp("bad", TOOLS, &format!("  limits:\n    x:\n{limit}"))],
            &Options::default(),
        );
        let s = rl_status(&c, "bad");
        assert_eq!(s.conditions[0].reason, reason::INVALID, "{s:#?}");
        assert!(
            s.conditions[0].message.contains(field) && s.conditions[0].message.contains(fix),
            "{s:#?}"
        );
        assert!(c.bundle.rate_limits.is_empty());
        let p = c
            .bundle
            .policies
            .iter()
            .find(|p| p.name == "bad.ratelimitpolicy.not-accepted")
            .unwrap();
        assert_eq!(
            (p.action, p.rules.is_none()),
            (mcp_access_bundle::Action::Deny, true)
        );
        assert!(!c.report.all_accepted());
    }
    // Global without a service: refused, naming the flag.
    let c = compiled(
        &[rlp("g", TOOLS, &format!("  mode: Global\n{WRITES}"))],
        &Options::default(),
    );
    assert!(rl_status(&c, "g").conditions[0]
        .message
        .contains("--rate-limit-service"));
    // --skip-rejected: dropped, nothing stands in.
    let o = Options {
        skip_rejected: true,
        ..Options::default()
    };
    let c = compiled(&[rlp("g", TOOLS, &format!("  mode: Global\n{WRITES}"))], &o);
    assert!(c.bundle.policies.is_empty());
}

#[test]
fn what_the_api_server_rejects_is_invalid() {
    let cases = [
        ("  limits:\n    Bad_Name:\n      rates: [{limit: 1, window: 1m}]\n", "DNS labels"),
        ("  limits:\n    x:\n      rates: [{limit: 0, window: 1m}]\n", "greater than or equal to 1"),
        ("  limits:\n    x:\n      rates: [{limit: 1, window: 1w}]\n", "window"),
        ("  limits:\n    x:\n      rates: []\n", "rates"),
        ("  failureMode: Allow\n  limits:\n    x:\n      rates: [{limit: 1, window: 1m}]\n", "failureMode is only for mode Global"),
        ("  defaults:\n    limits:\n      x:\n        rates: [{limit: 1, window: 1m}]\n", "only be set on a policy that targets Gateways"),
        ("  limits:\n    x:\n      rates: [{limit: 1, window: 1m}]\n  overrides:\n    limits:\n      x:\n        rates: [{limit: 1, window: 1m}]\n", "exactly one of"),
    ];
    for (body, message) in cases {
        let m = load(&infra(), &rlp("bad", TOOLS, body));
        let problems: Vec<String> = m.problems().iter().map(|p| p.to_string()).collect();
        assert!(
            problems.iter().any(|p| p.contains(message)),
            "{body}: {problems:#?}"
        );
    }
}

#[test]
fn a_global_limit_carries_the_service_and_failure_mode() {
    let o = Options {
        rate_limit_service: Some(RateLimitService {
            cluster: "rls".into(),
            timeout_ms: 100,
            domain: "mcp-access".into(),
        }),
        ..Options::default()
    };
    let c = compiled(
        &[rlp(
            "g",
            TOOLS,
            &format!("  mode: Global\n  failureMode: Allow\n{WRITES}"),
        )],
        &o,
    );
    assert_eq!(c.bundle.rate_limits[0].mode, RateLimitMode::Global);
    assert_eq!(
        c.bundle.rate_limits[0].failure_mode,
        mcp_access_bundle::FailureMode::Allow
    );
    assert_eq!(c.bundle.rate_limit_service.as_ref().unwrap().cluster, "rls");
}

#[test]
fn gateway_defaults_reach_the_xbackends_without_limits_of_their_own() {
    let defaults =
        "  defaults:\n    limits:\n      calls:\n        rates: [{limit: 100, window: 1m}]\n";
    let c = compiled(
        &[
            rlp("quotas", TOOLS, WRITES),
            rlp("gw-defaults", GW, defaults),
        ],
        &Options::default(),
    );
    let d = c
        .bundle
        .rate_limits
        .iter()
        .find(|l| l.policy == "gw-defaults")
        .unwrap();
    assert_eq!(d.level, Level::Backend);
    assert_eq!(
        d.targets
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["other"]
    );
    assert_eq!(d.listeners.len(), 2);
    assert_eq!(d.origin.as_ref().unwrap().block, Some(BlockKind::Defaults));
    assert_eq!(
        rl_status(&c, "gw-defaults").conditions[0]
            .enforced
            .as_ref()
            .unwrap()
            .reason,
        "Enforced"
    );
}

#[test]
fn gateway_overrides_replace_lower_limits_on_their_listeners() {
    let on_a = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: a}";
    let overrides =
        "  overrides:\n    limits:\n      calls:\n        rates: [{limit: 10, window: 1m}]\n";
    let c = compiled(
        &[
            rlp("quotas", TOOLS, WRITES),
            rlp("gw-over", on_a, overrides),
        ],
        &Options::default(),
    );
    let o = c
        .bundle
        .rate_limits
        .iter()
        .find(|l| l.policy == "gw-over")
        .unwrap();
    assert_eq!(o.targets.len(), 2, "both XBackends behind listener a");
    let lower = c
        .bundle
        .rate_limits
        .iter()
        .find(|l| l.policy == "quotas")
        .unwrap();
    let on: Vec<&str> = lower
        .listeners
        .iter()
        .filter_map(|l| l.section_name.as_deref())
        .collect();
    assert_eq!(
        on,
        ["b"],
        "the lower limit is charged where no override reaches"
    );
    let e = rl_status(&c, "quotas").conditions[0]
        .enforced
        .clone()
        .unwrap();
    assert_eq!(e.reason, "PartiallyEnforced", "{e:?}");
    // An override on the whole Gateway replaces the lower limit everywhere.
    let c = compiled(
        &[rlp("quotas", TOOLS, WRITES), rlp("gw-over", GW, overrides)],
        &Options::default(),
    );
    assert!(c.bundle.rate_limits.iter().all(|l| l.policy != "quotas"));
    assert_eq!(
        rl_status(&c, "quotas").conditions[0]
            .enforced
            .as_ref()
            .unwrap()
            .reason,
        "Overridden"
    );
}

#[test]
fn a_gateway_limit_is_charged_at_the_gateway_level_and_routes_narrow_backends() {
    let c = compiled(&[rlp("all", GW, WRITES)], &Options::default());
    assert_eq!(c.bundle.rate_limits[0].level, Level::Gateway);
    let r = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}";
    let c = compiled(&[rlp("per-route", r, WRITES)], &Options::default());
    let l = &c.bundle.rate_limits[0];
    assert_eq!(l.level, Level::Backend);
    assert!(l.targets.iter().all(|t| t.routes.is_some()), "{l:#?}");
}
