//! Checks of compiled manifests that the API server would not make: references that lead
//! nowhere, Gateway Allow policies no agent could connect through, and listener ports that
//! browsers and Node refuse to connect to.

use std::collections::BTreeSet;

use mcp_access_bundle::{Action, BaseProtocol, Bundle, Level, Policy, Rule};
use mcp_access_k8s::{Compiled, RouteAction, Topology};

/// Route reasons that name a reference leading nowhere.
const ROUTE_REF_REASONS: [&str; 4] = [
    "BackendNotFound",
    "InvalidKind",
    "RefNotPermitted",
    "NoMatchingParent",
];

/// References that lead nowhere: a route backendRef or parentRef that resolves to nothing (an
/// unknown group or kind, a misspelled name, a missing ReferenceGrant), a policy whose target
/// does not exist, and an accepted XBackend that no route reaches.
pub fn dangling(c: &Compiled) -> Vec<String> {
    let mut out = Vec::new();
    for r in &c.report.routes {
        for cnd in &r.conditions {
            if ROUTE_REF_REASONS.contains(&cnd.reason.as_str()) {
                out.push(format!(
                    "HTTPRoute {}/{} -> {}: {} {}",
                    r.namespace, r.name, cnd.target, cnd.reason, cnd.message
                ));
            }
        }
    }
    for p in &c.report.policies {
        for cnd in &p.conditions {
            if cnd.reason == mcp_access_k8s::reason::TARGET_NOT_FOUND {
                out.push(format!(
                    "{} {}/{} -> {}: {} {}",
                    p.kind, p.namespace, p.name, cnd.target, cnd.reason, cnd.message
                ));
            }
        }
    }
    let reached: BTreeSet<&mcp_access_k8s::NsName> = c
        .topology
        .gateways
        .iter()
        .flat_map(|g| &g.listeners)
        .flat_map(|l| &l.routes)
        .filter_map(|e| match &e.action {
            RouteAction::Forward { clusters, .. } => Some(clusters),
            _ => None,
        })
        .flatten()
        .filter_map(|w| w.backend.as_ref())
        .collect();
    for b in &c.topology.backends {
        if !reached.contains(&b.id) {
            let near = c.topology.near_misses(b);
            let why = if near.is_empty() {
                String::new()
            } else {
                format!(": {}", near.join("; "))
            };
            out.push(format!(
                "XBackend {}: no HTTPRoute attached to a Gateway forwards to it{why}",
                b.id
            ));
        }
    }
    out
}

/// Whether a rule can admit base protocol traffic (`initialize` first of all) from someone.
fn admits_base_protocol(r: &Rule) -> bool {
    match r.authorization.as_ref().and_then(|a| a.mcp.as_ref()) {
        None => true,
        Some(m) => m.base_protocol == BaseProtocol::Match,
    }
}

fn policy_admits_base_protocol(p: &Policy) -> bool {
    p.not_accepted.is_none()
        && p.rules
            .as_ref()
            .is_none_or(|rules| rules.iter().any(admits_base_protocol))
}

/// Gateway listeners whose Gateway-level Allow policies admit no base protocol traffic: no
/// agent can `initialize` a session through them.
pub fn closed_listeners(b: &Bundle) -> Vec<String> {
    let mut out = Vec::new();
    for g in &b.gateways {
        for l in &g.listeners {
            let allows: Vec<&Policy> = b
                .policies
                .iter()
                .filter(|p| p.level == Level::Gateway && p.action == Action::Allow)
                .filter(|p| {
                    p.targets.iter().any(|t| {
                        t.name == g.name
                            && t.namespace.as_deref().unwrap_or(&p.namespace) == g.namespace
                            && t.section_name.as_deref().is_none_or(|s| s == l.name)
                    })
                })
                .collect();
            if !allows.is_empty() && !allows.iter().any(|p| policy_admits_base_protocol(p)) {
                let names: Vec<String> = allows
                    .iter()
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect();
                out.push(format!(
                    "Gateway {}/{} listener {}: its Allow policies ({}) admit no base protocol traffic (initialize, tools/list, ...), so no agent can connect; give a rule mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS",
                    g.namespace,
                    g.name,
                    l.name,
                    names.join(", ")
                ));
            }
        }
    }
    out
}

/// Gateway API XBackends (type ExternalHostname) that Envoy reaches without TLS (no
/// `spec.tls`, or mode None): MCP traffic, credentials included, to a host outside the
/// cluster in plaintext. A warning; `--strict` refuses it.
pub fn plaintext_backends(topo: &Topology) -> Vec<String> {
    topo.backends
        .iter()
        .filter(|b| b.tls == Some(None))
        .map(|b| {
            format!(
                "XBackend {}: ExternalHostname {}:{} is reached without TLS (spec.tls is absent or mode None), so requests and their credentials cross the network in plaintext; set spec.tls.mode: ServerOnly with a validation",
                b.id,
                b.hostname.as_deref().unwrap_or_default(),
                b.port
            )
        })
        .collect()
}

/// The ports browsers and Node's `fetch` (the MCP Inspector, the TypeScript SDK) refuse to
/// connect to over HTTP(S), before connecting: the "bad ports" of the Fetch standard's port
/// blocking, <https://fetch.spec.whatwg.org/#port-blocking> (it lists 0 as well).
pub const FETCH_BLOCKED_PORTS: &[u16] = &[
    0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101,
    102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427,
    465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990,
    993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667,
    6668, 6669, 6679, 6697, 10080,
];

/// Where the ports of a command's listeners come from, which says how to change one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSource {
    /// `mcp-access envoy`: Envoy listens on the port (the Gateway's, `--listen`, `--port-offset`).
    Envoy,
    /// `mcp-access manifests`: clients connect to the Gateway's port (its Service).
    Gateway,
}

/// A warning per Gateway listener whose port clients connect to is one browsers and Node's
/// `fetch` refuse ([`FETCH_BLOCKED_PORTS`]): MCP clients on them cannot reach it.
pub fn blocked_listener_ports(topo: &Topology, source: PortSource) -> Vec<String> {
    let mut out = Vec::new();
    for g in &topo.gateways {
        for l in &g.listeners {
            if !FETCH_BLOCKED_PORTS.contains(&l.port) {
                continue;
            }
            let fix = match source {
                PortSource::Envoy => format!("--listen {}/{}=PORT", g.name, l.name),
                PortSource::Gateway => {
                    format!(
                        "the port of the listener in Gateway {}/{}",
                        g.namespace, g.name
                    )
                }
            };
            out.push(format!(
                "Gateway {}/{} listener {}: port {} is on the blocked-port list of the Fetch standard (https://fetch.spec.whatwg.org/#port-blocking): browsers and Node (the MCP Inspector, the TypeScript SDK) refuse to connect to it; pick a port not on the list ({fix})",
                g.namespace, g.name, l.name, l.port
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bundle(policies: &str) -> Bundle {
        let text = format!(
            r#"{{"apiVersion": "mcp-access.io/v1",
                "gateways": [{{"name": "gw", "namespace": "ns", "listeners": [
                    {{"name": "a", "port": 1}}, {{"name": "b", "port": 2}}]}}],
                "policies": {policies}}}"#
        );
        mcp_access_bundle::parse_bundle(text.as_bytes())
            .unwrap()
            .into_inner()
    }

    const TOOLS_ONLY: &str =
        r#"{"name": "tools", "authorization": {"mcp": {"methods": [{"name": "tools/call"}]}}}"#;

    fn allow(name: &str, target: &str, rules: Option<&str>) -> String {
        let rules = rules
            .map(|r| format!(r#", "rules": [{r}]"#))
            .unwrap_or_default();
        format!(
            r#"{{"name": "{name}", "namespace": "ns", "level": "Gateway", "action": "Allow", "targets": [{target}]{rules}}}"#
        )
    }

    #[test]
    fn a_listener_is_closed_when_no_gateway_allow_rule_admits_the_base_protocol() {
        let b = bundle(&format!(
            "[{}]",
            allow("p", r#"{"name": "gw"}"#, Some(TOOLS_ONLY))
        ));
        let closed = closed_listeners(&b);
        assert_eq!(closed.len(), 2, "{closed:?}");
        assert!(closed[0].starts_with("Gateway ns/gw listener a: its Allow policies (ns/p)"));
    }

    #[test]
    fn base_protocol_match_no_mcp_block_or_no_rules_open_it() {
        let with_base =
            r#"{"name": "r", "authorization": {"mcp": {"methods": [], "baseProtocol": "Match"}}}"#;
        let no_mcp = r#"{"name": "r", "authorization": {"methods": ["POST"]}}"#;
        for rules in [Some(with_base), Some(no_mcp), None] {
            let b = bundle(&format!(
                "[{}, {}]",
                allow("p", r#"{"name": "gw"}"#, Some(TOOLS_ONLY)),
                allow("q", r#"{"name": "gw"}"#, rules)
            ));
            assert_eq!(closed_listeners(&b), Vec::<String>::new(), "{rules:?}");
        }
    }

    #[test]
    fn section_names_and_levels_are_respected() {
        // An open policy on listener a only: listener b stays closed.
        let b = bundle(&format!(
            "[{}, {}]",
            allow("p", r#"{"name": "gw"}"#, Some(TOOLS_ONLY)),
            allow("q", r#"{"name": "gw", "sectionName": "a"}"#, None)
        ));
        let closed = closed_listeners(&b);
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert!(closed[0].contains("listener b: its Allow policies (ns/p)"));
        // No Gateway-level Allow policy: the level is passed, nothing to warn about.
        assert_eq!(closed_listeners(&bundle("[]")), Vec::<String>::new());
    }

    #[test]
    fn a_not_accepted_stand_in_admits_nothing() {
        let stand_in = r#"{"name": "p.not-accepted", "namespace": "ns", "level": "Gateway", "action": "Allow", "targets": [{"name": "gw"}], "notAccepted": "Unsupported"}"#;
        let b = bundle(&format!("[{stand_in}]"));
        assert_eq!(closed_listeners(&b).len(), 2);
    }

    fn topology(ports: &[(&str, u16)]) -> Topology {
        let listener = |(name, port): &(&str, u16)| mcp_access_k8s::ListenerModel {
            name: name.to_string(),
            port: *port,
            protocol: mcp_access_k8s::Protocol::Http,
            hostname: None,
            tls: None,
            routes: Vec::new(),
        };
        Topology {
            gateways: vec![mcp_access_k8s::GatewayModel {
                namespace: "ns".into(),
                name: "gw".into(),
                addresses: Vec::new(),
                listeners: ports.iter().map(listener).collect(),
            }],
            ..Topology::default()
        }
    }

    #[test]
    fn the_blocked_ports_are_the_fetch_standards_list() {
        assert!(FETCH_BLOCKED_PORTS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(FETCH_BLOCKED_PORTS.len(), 83);
        for p in [0, 22, 6697, 10080] {
            assert!(FETCH_BLOCKED_PORTS.contains(&p), "{p}");
        }
        for p in [80, 443, 8080, 10081, 10443] {
            assert!(!FETCH_BLOCKED_PORTS.contains(&p), "{p}");
        }
    }

    #[test]
    fn one_warning_per_listener_on_a_blocked_port_with_the_fix_of_the_command() {
        let topo = topology(&[("jwt", 10080), ("mtls", 10443), ("ssh", 22)]);
        let envoy = blocked_listener_ports(&topo, PortSource::Envoy);
        assert_eq!(envoy.len(), 2, "{envoy:?}");
        assert!(
            envoy[0].starts_with(
                "Gateway ns/gw listener jwt: port 10080 is on the blocked-port list of the Fetch standard"
            ) && envoy[0].ends_with("pick a port not on the list (--listen gw/jwt=PORT)"),
            "{envoy:?}"
        );
        assert!(
            envoy[1].starts_with("Gateway ns/gw listener ssh: port 22 "),
            "{envoy:?}"
        );
        let gateway = blocked_listener_ports(&topo, PortSource::Gateway);
        assert!(
            gateway[0].ends_with("(the port of the listener in Gateway ns/gw)"),
            "{gateway:?}"
        );
        assert!(
            blocked_listener_ports(&topology(&[("a", 80), ("b", 10443)]), PortSource::Envoy)
                .is_empty()
        );
    }
}
