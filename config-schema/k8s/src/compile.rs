//! From validated manifests to a bundle, a status report and a topology: references are
//! resolved (cross-namespace ones through ReferenceGrants), policies ranked by seniority and
//! limited per target, and every field either mapped or reported.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::check;
use crate::load::{Item, Manifests, PolicySpec, AGENTIC_GROUP, GATEWAY_GROUP, PROTOTYPE_GROUP};
use crate::model::*;
use crate::types::*;
use mcp_access_bundle::gateway_api::{host_matches, path_prefix_matches, DEFAULT_TRUST_DOMAIN};
use mcp_access_bundle::{self as bundle, Action, Bundle, Level};

/// Status reasons of policies.
pub mod reason {
    pub const ACCEPTED: &str = "Accepted";
    pub const INVALID: &str = "Invalid";
    pub const UNSUPPORTED: &str = "Unsupported";
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    pub const LIMIT: &str = "LimitPerTargetExceeded";
    pub const REF_NOT_PERMITTED: &str = "RefNotPermitted";
    pub const CONFLICTED: &str = "Conflicted";
}

/// Compiler settings (the CLI's flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// SPIFFE trust domain of ServiceAccount sources.
    pub trust_domain: String,
    /// Accepted policies per target object (0: no limit).
    pub max_policies_per_target: usize,
    /// Accepted ExternalAuth policies per target object (0: no limit).
    pub max_external_auth_per_target: usize,
    /// Envoy port overrides: `ns/gateway/listener`, `gateway/listener` or `listener` -> port.
    pub listen: BTreeMap<String, u16>,
    /// Added to every Gateway listener port without an override.
    pub port_offset: i32,
    /// Timeout of authorizer callouts.
    pub authz_timeout_ms: u32,
    /// Drop policies that are not accepted (as a controller would) instead of enforcing
    /// them fail-closed.
    pub skip_rejected: bool,
    pub unknown_backend: bundle::UnknownBackend,
    /// Only Gateways of these classes (empty: all).
    pub gateway_classes: Vec<String>,
    /// Certificate Secrets that can be used (`name` or `namespace/name`); None: do not check.
    pub tls_secrets: Option<Vec<String>>,
    /// Client CA references that can be used (`name` or `namespace/name`, `""` for a default
    /// CA); None: do not check.
    pub client_cas: Option<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            trust_domain: DEFAULT_TRUST_DOMAIN.into(),
            max_policies_per_target: 5,
            max_external_auth_per_target: 0,
            listen: BTreeMap::new(),
            port_offset: 0,
            authz_timeout_ms: 1000,
            skip_rejected: false,
            unknown_backend: bundle::UnknownBackend::Deny,
            gateway_classes: Vec::new(),
            tls_secrets: None,
            client_cas: None,
        }
    }
}

/// The result of compiling.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub bundle: Bundle,
    pub report: Report,
    pub topology: Topology,
}

/// Whether two API groups name the same kind family (the prototype group is the older name).
pub fn agentic_group(g: &str) -> bool {
    g == AGENTIC_GROUP || g == PROTOTYPE_GROUP
}

fn same_group(a: &str, b: &str) -> bool {
    a == b || (agentic_group(a) && agentic_group(b)) || (is_core(a) && is_core(b))
}

fn is_core(g: &str) -> bool {
    g.is_empty() || g == "core"
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

fn cond(
    target: String,
    section: Option<String>,
    reason: &str,
    message: impl Into<String>,
) -> TargetStatus {
    TargetStatus {
        target,
        section_name: section,
        accepted: reason == reason::ACCEPTED,
        reason: reason.to_string(),
        message: message.into(),
    }
}

fn status<S>(it: &Item<S>, seniority: Option<u64>, conditions: Vec<TargetStatus>) -> ObjectStatus {
    ObjectStatus {
        kind: it.kind.clone(),
        api_version: format!("{}/{}", it.group, it.version),
        namespace: it.meta.namespace.clone(),
        name: it.meta.name.clone(),
        source: it.origin.to_string(),
        seniority,
        conditions,
    }
}

/// Oldest first, then namespace/name; objects without a creationTimestamp are the newest.
fn seniority_order<S>(items: &[Item<S>]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    idx.sort_by(|&a, &b| {
        let key = |i: usize| {
            items.get(i).map(|it| {
                (
                    it.meta.created.is_none(),
                    it.meta.created.unwrap_or((0, 0)),
                    it.meta.namespace.clone(),
                    it.meta.name.clone(),
                    it.origin.clone(),
                )
            })
        };
        key(a).cmp(&key(b))
    });
    idx
}

/// ReferenceGrant check: may an object of `from_group/from_kind` in `from_ns` refer to
/// `to_group/to_kind` `to_name` in `to_ns`?
fn permitted(m: &Manifests, from: (&str, &str, &str), to: (&str, &str, &str, &str)) -> bool {
    let (fg, fk, fns) = from;
    let (tg, tk, tns, tname) = to;
    if fns == tns {
        return true;
    }
    m.grants.iter().any(|g| {
        g.meta.namespace == tns
            && g.spec.from.iter().flatten().any(|f| {
                same_group(opt(&f.group), fg) && opt(&f.kind) == fk && opt(&f.namespace) == fns
            })
            && g.spec.to.iter().flatten().any(|t| {
                same_group(opt(&t.group), tg)
                    && opt(&t.kind) == tk
                    && t.name.as_deref().is_none_or(|n| n == tname)
            })
    })
}

struct Ctx<'a> {
    m: &'a Manifests,
    o: &'a Options,
    report: Report,
    topo: Topology,
    /// ns/name -> index into topo.backends
    backend_index: HashMap<String, usize>,
}

/// Compiles validated manifests.
pub fn compile(m: &Manifests, o: &Options) -> Compiled {
    let mut cx = Ctx {
        m,
        o,
        report: Report::default(),
        topo: Topology::default(),
        backend_index: HashMap::new(),
    };
    for p in m.problems() {
        cx.report.invalid.push(InvalidObject {
            source: p.origin.to_string(),
            kind: p.kind.clone(),
            object: p.object.clone(),
            field: p.field.clone(),
            message: p.message.clone(),
        });
    }
    for s in &m.skipped {
        cx.report.skipped.push(SkippedObject {
            source: s.origin.to_string(),
            api_version: s.api_version.clone(),
            kind: s.kind.clone(),
            object: s.object.clone(),
        });
    }
    cx.backends();
    cx.gateways();
    cx.routes();
    // Which backends sit behind which listener (the HTTPRoutes' parentRefs decide).
    for g in &cx.topo.gateways {
        for l in &g.listeners {
            let mut behind: Vec<String> = Vec::new();
            for e in &l.routes {
                if let RouteAction::Forward { clusters, .. } = &e.action {
                    for c in clusters {
                        let name = c.backend.clone().unwrap_or_else(|| c.cluster.clone());
                        if !behind.contains(&name) {
                            behind.push(name);
                        }
                    }
                }
            }
            let st = cx
                .report
                .gateways
                .iter_mut()
                .filter(|s| s.namespace == g.namespace && s.name == g.name)
                .flat_map(|s| s.conditions.iter_mut())
                .find(|c| c.accepted && c.target == format!("listener {}", l.name));
            if let Some(c) = st {
                let list = if behind.is_empty() {
                    "none".to_string()
                } else {
                    behind.join(", ")
                };
                c.message = format!("{}; backends behind it: {list}", c.message);
            }
        }
    }
    let (policies, authorizers) = cx.policies();
    cx.topo.authorizers = authorizer_models(&authorizers);
    // Objects the API server would reject have a status too: not accepted, Invalid.
    for r in &m.rejected {
        let list = match r.kind.as_str() {
            "XAccessPolicy" => &mut cx.report.policies,
            "Gateway" => &mut cx.report.gateways,
            "HTTPRoute" => &mut cx.report.routes,
            "XBackend" => &mut cx.report.backends,
            _ => continue,
        };
        let message: Vec<String> = r
            .errors
            .iter()
            .map(|e| {
                if e.field.is_empty() {
                    e.message.clone()
                } else {
                    format!("{}: {}", e.field, e.message)
                }
            })
            .collect();
        list.push(ObjectStatus {
            kind: r.kind.clone(),
            api_version: format!("{}/{}", r.group, r.version),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            source: r.origin.to_string(),
            seniority: None,
            conditions: vec![cond(
                format!("{} {}/{}", r.kind, r.namespace, r.name),
                None,
                reason::INVALID,
                format!("rejected as the API server would: {}", message.join("; ")),
            )],
        });
    }

    let mut gateways = Vec::new();
    for g in &cx.topo.gateways {
        gateways.push(bundle::Gateway {
            name: g.name.clone(),
            namespace: g.namespace.clone(),
            listeners: g
                .listeners
                .iter()
                .map(|l| bundle::Listener {
                    name: l.name.clone(),
                    port: l.port,
                    hostname: l.hostname.clone(),
                })
                .collect(),
        });
    }
    let mut backends = Vec::new();
    for b in &cx.topo.backends {
        let mut route_names: Vec<String> = Vec::new();
        for g in &cx.topo.gateways {
            for l in &g.listeners {
                for e in &l.routes {
                    if let RouteAction::Forward { clusters, .. } = &e.action {
                        let only = clusters.len() == 1
                            && clusters.first().is_some_and(|c| c.cluster == b.cluster);
                        if only && !route_names.contains(&e.name) {
                            route_names.push(e.name.clone());
                        }
                    }
                }
            }
        }
        let (ns, name) = b.id.split_once('/').unwrap_or(("", &b.id));
        backends.push(bundle::Backend {
            name: name.to_string(),
            namespace: ns.to_string(),
            route_names,
            cluster_names: vec![b.cluster.clone()],
        });
    }
    let bundle = Bundle {
        api_version: bundle::API_VERSION.to_string(),
        identity: bundle::IdentitySettings {
            trust_domain: Some(o.trust_domain.clone()),
            ..Default::default()
        },
        gateways,
        backends,
        authorizers,
        policies,
        deny_response: Default::default(),
        limits: Default::default(),
        envoy: bundle::EnvoySettings {
            hold_headers: true,
            unknown_backend: o.unknown_backend,
            ..Default::default()
        },
    };
    Compiled {
        bundle,
        report: cx.report,
        topology: cx.topo,
    }
}

impl Ctx<'_> {
    // -----------------------------------------------------------------------------------
    // XBackends

    fn backends(&mut self) {
        let order = seniority_order(&self.m.backends);
        let mut seen: HashSet<String> = HashSet::new();
        for i in order {
            let Some(b) = self.m.backends.get(i) else {
                continue;
            };
            let id = b.id();
            let mcp = b.spec.mcp.clone().unwrap_or_default();
            let target = format!("XBackend {id}");
            let c = if !seen.insert(id.clone()) {
                cond(target, None, reason::CONFLICTED, "another XBackend with this namespace/name is defined earlier or is older; it is used instead")
            } else if let Some(bad) = mcp
                .service_name
                .as_ref()
                .filter(|s| !check::matches(check::DNS_LABEL, s))
            {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    format!("spec.mcp.serviceName \"{bad}\" is not a Service name (a DNS label)"),
                )
            } else if let Some(bad) = mcp
                .hostname
                .as_ref()
                .filter(|h| !check::matches(check::DNS_SUBDOMAIN, h))
            {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    format!("spec.mcp.hostname \"{bad}\" is not a DNS name"),
                )
            } else if !mcp.path.as_deref().unwrap_or("/mcp").starts_with('/') {
                cond(
                    target,
                    None,
                    reason::INVALID,
                    "spec.mcp.path must start with '/'",
                )
            } else {
                let port = u16::try_from(mcp.port.unwrap_or_default()).unwrap_or_default();
                self.backend_index
                    .insert(id.clone(), self.topo.backends.len());
                self.topo.backends.push(BackendModel {
                    id: id.clone(),
                    cluster: format!("xbackend/{id}"),
                    service_name: mcp.service_name.clone(),
                    hostname: mcp.hostname.clone(),
                    namespace: b.meta.namespace.clone(),
                    port,
                    path: mcp.path.clone().unwrap_or_else(|| "/mcp".into()),
                });
                cond(target, None, reason::ACCEPTED, "")
            };
            let st = status(b, None, vec![c]);
            self.report.backends.push(st);
        }
    }

    // -----------------------------------------------------------------------------------
    // Gateways

    fn envoy_port(&self, ns: &str, gw: &str, listener: &str, port: i64) -> Option<u16> {
        for key in [
            format!("{ns}/{gw}/{listener}"),
            format!("{gw}/{listener}"),
            listener.to_string(),
        ] {
            if let Some(p) = self.o.listen.get(&key) {
                return Some(*p);
            }
        }
        u16::try_from(port + i64::from(self.o.port_offset))
            .ok()
            .filter(|p| *p != 0)
    }

    fn secret_known(&self, ns: &str, name: &str, list: &Option<Vec<String>>) -> bool {
        match list {
            None => true,
            Some(l) => l.iter().any(|k| k == name || *k == format!("{ns}/{name}")),
        }
    }

    fn gateways(&mut self) {
        let order = seniority_order(&self.m.gateways);
        let mut seen: HashSet<String> = HashSet::new();
        // (port, hostname) -> owner; port -> protocol
        let mut bound: HashMap<(u16, Option<String>), String> = HashMap::new();
        let mut port_proto: HashMap<u16, Protocol> = HashMap::new();
        for i in order {
            let Some(g) = self.m.gateways.get(i) else {
                continue;
            };
            let id = g.id();
            let s = &g.spec;
            let mut conds = Vec::new();
            let gw_target = format!("Gateway {id}");
            let class = opt(&s.gateway_class_name);
            let mut gateway_problem: Option<(&str, String)> = None;
            if !seen.insert(id.clone()) {
                gateway_problem = Some((
                    reason::CONFLICTED,
                    "another Gateway with this namespace/name is defined earlier or is older"
                        .into(),
                ));
            } else if !self.o.gateway_classes.is_empty()
                && !self.o.gateway_classes.iter().any(|c| c == class)
            {
                gateway_problem = Some((
                    "NotReconciled",
                    format!("gatewayClassName \"{class}\" is not one of --gateway-class"),
                ));
            } else if s
                .infrastructure
                .as_ref()
                .is_some_and(|x| x.parameters_ref.is_some())
            {
                gateway_problem = Some((
                    "InvalidParameters",
                    "spec.infrastructure.parametersRef is not supported".into(),
                ));
            } else if s
                .tls
                .as_ref()
                .and_then(|t| t.backend.as_ref())
                .is_some_and(|b| b.client_certificate_ref.is_some())
            {
                gateway_problem = Some((reason::UNSUPPORTED, "spec.tls.backend.clientCertificateRef (client certificates towards backends) is not supported".into()));
            }
            let mut addresses = Vec::new();
            for a in s.addresses.iter().flatten() {
                let kind = a.kind.as_deref().unwrap_or("IPAddress");
                if kind == "IPAddress" {
                    addresses.push(opt(&a.value).to_string());
                } else if gateway_problem.is_none() {
                    gateway_problem = Some((
                        "UnsupportedAddress",
                        format!("address type {kind} is not supported (only IPAddress)"),
                    ));
                }
            }
            if let Some(inf) = &s.infrastructure {
                if inf.labels.is_some() || inf.annotations.is_some() {
                    self.report.warnings.push(format!("Gateway {id}: spec.infrastructure labels and annotations have no effect outside a cluster"));
                }
            }
            if let Some((r, msg)) = gateway_problem {
                conds.push(cond(gw_target, None, r, msg));
                self.report.gateways.push(status(g, None, conds));
                continue;
            }
            let mut listeners = Vec::new();
            for l in s.listeners.iter().flatten() {
                let lname = opt(&l.name).to_string();
                let target = format!("listener {lname}");
                let proto = match opt(&l.protocol) {
                    "HTTP" => Protocol::Http,
                    "HTTPS" => Protocol::Https,
                    other => {
                        conds.push(cond(
                            target,
                            None,
                            "UnsupportedProtocol",
                            format!("protocol {other} is not supported (HTTP and HTTPS are)"),
                        ));
                        continue;
                    }
                };
                let Some(port) = self.envoy_port(
                    &g.meta.namespace,
                    &g.meta.name,
                    &lname,
                    l.port.unwrap_or_default(),
                ) else {
                    conds.push(cond(
                        target,
                        None,
                        reason::INVALID,
                        "port plus --port-offset is not a TCP port",
                    ));
                    continue;
                };
                // Routes: kinds.
                if let Some(kinds) = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
                    let http = kinds.iter().any(|k| {
                        k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                            && opt(&k.kind) == "HTTPRoute"
                    });
                    if !http {
                        conds.push(cond(target, None, "InvalidRouteKinds", "allowedRoutes.kinds does not include HTTPRoute, the only route kind supported"));
                        continue;
                    }
                    if let Some(k) = kinds.iter().find(|k| opt(&k.kind) != "HTTPRoute") {
                        self.report.warnings.push(format!("Gateway {id} listener {lname}: route kind {} is not supported; only HTTPRoutes attach", opt(&k.kind)));
                    }
                }
                let mut tls_model = None;
                if proto == Protocol::Https {
                    let tls = l.tls.clone().unwrap_or_default();
                    if tls.options.as_ref().is_some_and(|o| !o.is_empty()) {
                        conds.push(cond(
                            target,
                            None,
                            reason::UNSUPPORTED,
                            "tls.options are not supported",
                        ));
                        continue;
                    }
                    let mut certs = Vec::new();
                    let mut bad = None;
                    for r in tls.certificate_refs.iter().flatten() {
                        let ns = r
                            .namespace
                            .clone()
                            .unwrap_or_else(|| g.meta.namespace.clone());
                        let name = opt(&r.name);
                        if !is_core(opt(&r.group))
                            || r.kind.as_deref().unwrap_or("Secret") != "Secret"
                        {
                            bad = Some((
                                "InvalidCertificateRef",
                                format!(
                                    "certificateRef {}/{name} must be a core Secret",
                                    opt(&r.kind)
                                ),
                            ));
                        } else if !permitted(
                            self.m,
                            (GATEWAY_GROUP, "Gateway", &g.meta.namespace),
                            ("", "Secret", &ns, name),
                        ) {
                            bad = Some((reason::REF_NOT_PERMITTED, format!("no ReferenceGrant in namespace {ns} allows Gateways from {} to refer to Secret {name}", g.meta.namespace)));
                        } else if !self.secret_known(&ns, name, &self.o.tls_secrets) {
                            bad = Some(("InvalidCertificateRef", format!("Secret {ns}/{name} is not available here: pass --tls-cert {name}=<cert.pem>,<key.pem>")));
                        }
                        certs.push(format!("{ns}/{name}"));
                    }
                    if let Some((r, msg)) = bad {
                        conds.push(cond(target, None, r, msg));
                        continue;
                    }
                    let frontend = s.tls.as_ref().and_then(|t| t.frontend.as_ref());
                    let per_port = frontend.and_then(|f| {
                        f.per_port
                            .iter()
                            .flatten()
                            .find(|p| p.port == l.port)
                            .and_then(|p| p.tls.clone())
                    });
                    let validation = per_port
                        .or_else(|| frontend.and_then(|f| f.default.clone()))
                        .and_then(|t| t.validation);
                    let client_validation = match validation {
                        Some(v) => {
                            let mut refs = Vec::new();
                            for r in v.ca_certificate_refs.iter().flatten() {
                                let ns = r
                                    .namespace
                                    .clone()
                                    .unwrap_or_else(|| g.meta.namespace.clone());
                                let name = opt(&r.name);
                                let kind = opt(&r.kind);
                                if !is_core(opt(&r.group))
                                    || !matches!(kind, "ConfigMap" | "Secret")
                                {
                                    bad = Some(("InvalidCACertificateRef", format!("caCertificateRef {kind} {name} must be a core ConfigMap or Secret")));
                                } else if !permitted(
                                    self.m,
                                    (GATEWAY_GROUP, "Gateway", &g.meta.namespace),
                                    ("", kind, &ns, name),
                                ) {
                                    bad = Some((reason::REF_NOT_PERMITTED, format!("no ReferenceGrant in namespace {ns} allows Gateways from {} to refer to {kind} {name}", g.meta.namespace)));
                                } else if !self.secret_known(&ns, name, &self.o.client_cas) {
                                    bad = Some(("InvalidCACertificateRef", format!("{kind} {ns}/{name} is not available here: pass --client-ca {name}=<ca.pem>")));
                                }
                                refs.push(format!("{ns}/{name}"));
                            }
                            Some(ClientValidation {
                                ca_refs: refs,
                                optional: v.mode.as_deref() == Some("AllowInsecureFallback"),
                            })
                        }
                        None => match &self.o.client_cas {
                            Some(l) if l.iter().any(String::is_empty) => Some(ClientValidation {
                                ca_refs: vec![String::new()],
                                optional: false,
                            }),
                            _ => None,
                        },
                    };
                    if let Some((r, msg)) = bad {
                        conds.push(cond(target, None, r, msg));
                        continue;
                    }
                    if client_validation.is_none() {
                        self.report.warnings.push(format!("Gateway {id} listener {lname}: no client certificate validation (spec.tls.frontend or --client-ca), so callers have no SPIFFE identity"));
                    }
                    tls_model = Some(TlsModel {
                        certificates: certs,
                        client_validation,
                    });
                }
                let hostname = l.hostname.clone();
                match port_proto.get(&port) {
                    Some(p) if *p != proto => {
                        conds.push(cond(
                            target,
                            None,
                            reason::CONFLICTED,
                            format!(
                                "port {port} is already used by a listener of the other protocol"
                            ),
                        ));
                        continue;
                    }
                    _ => {}
                }
                if let Some(owner) = bound.get(&(port, hostname.clone())) {
                    conds.push(cond(
                        target,
                        None,
                        reason::CONFLICTED,
                        format!(
                            "port {port} and hostname {} are already used by {owner}",
                            hostname.as_deref().unwrap_or("(any)")
                        ),
                    ));
                    continue;
                }
                bound.insert(
                    (port, hostname.clone()),
                    format!("Gateway {id} listener {lname}"),
                );
                port_proto.insert(port, proto);
                conds.push(cond(
                    target,
                    None,
                    reason::ACCEPTED,
                    format!("Envoy listens on port {port}"),
                ));
                listeners.push(ListenerModel {
                    name: lname,
                    port,
                    protocol: proto,
                    hostname,
                    tls: tls_model,
                    routes: Vec::new(),
                });
            }
            if !listeners.is_empty() {
                self.topo.gateways.push(GatewayModel {
                    namespace: g.meta.namespace.clone(),
                    name: g.meta.name.clone(),
                    addresses,
                    listeners,
                });
            }
            self.report.gateways.push(status(g, None, conds));
        }
    }

    // -----------------------------------------------------------------------------------
    // HTTPRoutes

    fn routes(&mut self) {
        let order = seniority_order(&self.m.routes);
        let mut seen: HashSet<String> = HashSet::new();
        for (rank, i) in order.into_iter().enumerate() {
            let Some(r) = self.m.routes.get(i) else {
                continue;
            };
            let id = r.id();
            let mut conds = Vec::new();
            if !seen.insert(id.clone()) {
                conds.push(cond(
                    format!("HTTPRoute {id}"),
                    None,
                    reason::CONFLICTED,
                    "another HTTPRoute with this namespace/name is defined earlier or is older",
                ));
                self.report.routes.push(status(r, None, conds));
                continue;
            }
            // The rules, independent of the parent.
            let built = self.route_rules(r, rank);
            let (entries, rule_problem) = match built {
                Ok(x) => x,
                Err((reason, msg)) => {
                    for p in r.spec.parent_refs.iter().flatten() {
                        conds.push(cond(
                            format!(
                                "Gateway {}/{}",
                                p.namespace
                                    .clone()
                                    .unwrap_or_else(|| r.meta.namespace.clone()),
                                opt(&p.name)
                            ),
                            p.section_name.clone(),
                            reason,
                            msg.clone(),
                        ));
                    }
                    if conds.is_empty() {
                        conds.push(cond(format!("HTTPRoute {id}"), None, reason, msg));
                    }
                    self.report.routes.push(status(r, None, conds));
                    continue;
                }
            };
            let parents = r.spec.parent_refs.clone().unwrap_or_default();
            if parents.is_empty() {
                conds.push(cond(
                    format!("HTTPRoute {id}"),
                    None,
                    "NoMatchingParent",
                    "no parentRefs: the route attaches to nothing",
                ));
            }
            for p in &parents {
                let gns = p
                    .namespace
                    .clone()
                    .unwrap_or_else(|| r.meta.namespace.clone());
                let gname = opt(&p.name).to_string();
                let target = format!("Gateway {gns}/{gname}");
                let section = p.section_name.clone();
                if p.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
                    || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
                {
                    conds.push(cond(
                        target,
                        section,
                        reason::UNSUPPORTED,
                        format!(
                            "parentRef kind {} is not supported (only Gateway)",
                            p.kind.as_deref().unwrap_or("Gateway")
                        ),
                    ));
                    continue;
                }
                let Some(gi) = self
                    .topo
                    .gateways
                    .iter()
                    .position(|g| g.namespace == gns && g.name == gname)
                else {
                    conds.push(cond(
                        target,
                        section,
                        "NoMatchingParent",
                        "no accepted Gateway with this name",
                    ));
                    continue;
                };
                let Some(gw_item) = self
                    .m
                    .gateways
                    .iter()
                    .find(|g| g.meta.namespace == gns && g.meta.name == gname)
                else {
                    continue;
                };
                let mut attached = 0;
                let mut why = "NoMatchingParent";
                let mut why_msg = String::from("no listener matches sectionName/port");
                let gw_listeners = gw_item.spec.listeners.clone().unwrap_or_default();
                let Some(gm) = self.topo.gateways.get_mut(gi) else {
                    continue;
                };
                for lm in gm.listeners.iter_mut() {
                    if section.as_ref().is_some_and(|s| s != &lm.name) {
                        continue;
                    }
                    let Some(spec_l) = gw_listeners.iter().find(|l| opt(&l.name) == lm.name) else {
                        continue;
                    };
                    if p.port.is_some() && p.port != spec_l.port {
                        continue;
                    }
                    let allowed = {
                        let ns = spec_l
                            .allowed_routes
                            .as_ref()
                            .and_then(|a| a.namespaces.as_ref());
                        match ns.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
                            "All" => true,
                            "Selector" => {
                                let mut labels = self
                                    .m
                                    .namespaces
                                    .iter()
                                    .find(|n| n.meta.name == r.meta.namespace)
                                    .map(|n| n.meta.labels.clone())
                                    .unwrap_or_default();
                                labels.insert(
                                    "kubernetes.io/metadata.name".into(),
                                    r.meta.namespace.clone(),
                                );
                                ns.and_then(|n| n.selector.as_ref())
                                    .is_some_and(|s| selector_matches(s, &labels))
                            }
                            _ => gns == r.meta.namespace,
                        }
                    };
                    if !allowed {
                        why = "NotAllowedByListeners";
                        why_msg = format!(
                            "listener {} does not allow routes from namespace {}",
                            lm.name, r.meta.namespace
                        );
                        continue;
                    }
                    let Some(hosts) = intersect_hostnames(
                        lm.hostname.as_deref(),
                        r.spec.hostnames.as_deref().unwrap_or_default(),
                    ) else {
                        why = "NoMatchingListenerHostname";
                        why_msg =
                            format!("no route hostname matches listener {}'s hostname", lm.name);
                        continue;
                    };
                    for e in &entries {
                        let mut e = e.clone();
                        e.hostnames = hosts.clone();
                        lm.routes.push(e);
                    }
                    attached += 1;
                }
                if attached == 0 {
                    conds.push(cond(target, section, why, why_msg));
                } else {
                    match &rule_problem {
                        Some((reason, msg)) => {
                            conds.push(cond(target, section, reason, msg.clone()))
                        }
                        None => conds.push(cond(
                            target,
                            section,
                            reason::ACCEPTED,
                            format!("attached to {attached} listener(s)"),
                        )),
                    }
                }
            }
            self.report.routes.push(status(r, None, conds));
        }
        for g in &mut self.topo.gateways {
            for l in &mut g.listeners {
                l.routes.sort_by(precedence);
            }
        }
    }

    /// The Envoy route entries of a route's rules (before attachment); a partial problem
    /// (some backendRef not resolved) is returned beside them.
    #[allow(clippy::type_complexity)]
    fn route_rules(
        &mut self,
        r: &Item<HttpRouteSpec>,
        rank: usize,
    ) -> Result<(Vec<RouteEntry>, Option<(&'static str, String)>), (&'static str, String)> {
        let id = r.id();
        let default_rules = vec![RouteRule::default()];
        let rules = r.spec.rules.as_ref().unwrap_or(&default_rules);
        let mut entries = Vec::new();
        let mut problem: Option<(&'static str, String)> = None;
        for (ri, rule) in rules.iter().enumerate() {
            let at = format!("spec.rules[{ri}]");
            let mut req_h = HeaderOps::default();
            let mut resp_h = HeaderOps::default();
            let mut host_rewrite = None;
            let mut rewrite: Option<(String, Option<String>, Option<String>)> = None; // (type, full, prefix)
            let mut redirect = None;
            for (fi, f) in rule.filters.iter().flatten().enumerate() {
                match opt(&f.kind) {
                    "RequestHeaderModifier" => {
                        req_h = header_ops(f.request_header_modifier.as_ref())
                    }
                    "ResponseHeaderModifier" => {
                        resp_h = header_ops(f.response_header_modifier.as_ref())
                    }
                    "URLRewrite" => {
                        if let Some(u) = &f.url_rewrite {
                            host_rewrite = u.hostname.clone();
                            rewrite = u.path.as_ref().map(|p| {
                                (
                                    opt(&p.kind).to_string(),
                                    p.replace_full_path.clone(),
                                    p.replace_prefix_match.clone(),
                                )
                            });
                        }
                    }
                    "RequestRedirect" => redirect = f.request_redirect.clone(),
                    other => {
                        return Err((
                            reason::UNSUPPORTED,
                            format!("{at}.filters[{fi}]: filter type {other} is not supported"),
                        ))
                    }
                }
            }
            let mut clusters = Vec::new();
            let mut total_weight: u64 = 0;
            for (bi, b) in rule.backend_refs.iter().flatten().enumerate() {
                let bat = format!("{at}.backendRefs[{bi}]");
                if b.filters.as_ref().is_some_and(|f| !f.is_empty()) {
                    return Err((
                        reason::UNSUPPORTED,
                        format!("{bat}.filters: per-backend filters are not supported"),
                    ));
                }
                let group = opt(&b.group);
                let kind = b.kind.as_deref().unwrap_or("Service");
                let ns = b
                    .namespace
                    .clone()
                    .unwrap_or_else(|| r.meta.namespace.clone());
                let name = opt(&b.name).to_string();
                let weight = u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
                let resolved = if agentic_group(group) && kind == "XBackend" {
                    if !permitted(
                        self.m,
                        (GATEWAY_GROUP, "HTTPRoute", &r.meta.namespace),
                        (group, "XBackend", &ns, &name),
                    ) {
                        Err((reason::REF_NOT_PERMITTED, format!("{bat}: no ReferenceGrant in namespace {ns} allows HTTPRoutes from {} to refer to XBackend {name}", r.meta.namespace)))
                    } else {
                        match self
                            .backend_index
                            .get(&format!("{ns}/{name}"))
                            .and_then(|i| self.topo.backends.get(*i))
                        {
                            None => Err((
                                "BackendNotFound",
                                format!("{bat}: XBackend {ns}/{name} not found"),
                            )),
                            Some(bm) => {
                                if let Some(p) = b.port.filter(|p| i64::from(bm.port) != *p) {
                                    Err((reason::UNSUPPORTED, format!("{bat}.port {p} differs from XBackend {ns}/{name}'s port {}", bm.port)))
                                } else {
                                    Ok(WeightedCluster {
                                        cluster: bm.cluster.clone(),
                                        weight,
                                        backend: Some(bm.id.clone()),
                                    })
                                }
                            }
                        }
                    }
                } else if is_core(group) && kind == "Service" {
                    if !permitted(
                        self.m,
                        (GATEWAY_GROUP, "HTTPRoute", &r.meta.namespace),
                        ("", "Service", &ns, &name),
                    ) {
                        Err((reason::REF_NOT_PERMITTED, format!("{bat}: no ReferenceGrant in namespace {ns} allows HTTPRoutes from {} to refer to Service {name}", r.meta.namespace)))
                    } else {
                        let port = u16::try_from(b.port.unwrap_or_default()).unwrap_or_default();
                        let cluster = format!("service/{ns}/{name}:{port}");
                        if !self.topo.services.iter().any(|s| s.cluster == cluster) {
                            self.topo.services.push(ServiceModel {
                                cluster: cluster.clone(),
                                namespace: ns.clone(),
                                name: name.clone(),
                                port,
                            });
                        }
                        Ok(WeightedCluster {
                            cluster,
                            weight,
                            backend: None,
                        })
                    }
                } else {
                    Err(("InvalidKind", format!("{bat}: backend kind {group}/{kind} is not supported (XBackend or Service)")))
                };
                match resolved {
                    Ok(c) => {
                        total_weight += u64::from(c.weight);
                        if c.weight > 0 {
                            clusters.push(c);
                        }
                    }
                    Err(p) => {
                        if problem.is_none() {
                            problem = Some(p);
                        }
                    }
                }
            }
            let _ = total_weight;
            let timeout_ms = rule.timeouts.as_ref().and_then(|t| {
                let a = t.request.as_deref().and_then(check::parse_duration_ms);
                let b = t
                    .backend_request
                    .as_deref()
                    .and_then(check::parse_duration_ms);
                match (a, b) {
                    (Some(0), Some(b)) => Some(b),
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            });
            let default_matches = vec![RouteMatch::default()];
            let ms = rule
                .matches
                .as_ref()
                .filter(|m| !m.is_empty())
                .unwrap_or(&default_matches);
            for (mi, m) in ms.iter().enumerate() {
                let (path_kind, path) = match &m.path {
                    None => (PathMatchKind::Prefix, "/".to_string()),
                    Some(p) => (
                        match p.kind.as_deref().unwrap_or("PathPrefix") {
                            "Exact" => PathMatchKind::Exact,
                            "RegularExpression" => PathMatchKind::Regex,
                            _ => PathMatchKind::Prefix,
                        },
                        p.value.clone().unwrap_or_else(|| "/".into()),
                    ),
                };
                if path_kind == PathMatchKind::Regex && regex_lite::Regex::new(&path).is_err() {
                    return Err((
                        reason::INVALID,
                        format!("{at}.matches[{mi}].path.value: invalid regular expression"),
                    ));
                }
                let vm = |l: &Option<Vec<ValueMatch>>| -> Vec<ValueMatchModel> {
                    l.iter()
                        .flatten()
                        .map(|h| ValueMatchModel {
                            name: opt(&h.name).to_string(),
                            regex: h.kind.as_deref() == Some("RegularExpression"),
                            value: opt(&h.value).to_string(),
                        })
                        .collect()
                };
                let path_rw = |full: &Option<String>,
                               prefix: &Option<String>,
                               kind: &str|
                 -> Option<PathRewrite> {
                    match kind {
                        "ReplaceFullPath" => full.clone().map(PathRewrite::Full),
                        _ => prefix.clone().map(|rep| PathRewrite::Prefix {
                            prefix: path.clone(),
                            replacement: rep,
                        }),
                    }
                };
                let action = if let Some(rd) = &redirect {
                    RouteAction::Redirect {
                        scheme: rd.scheme.clone(),
                        hostname: rd.hostname.clone(),
                        path: rd.path.as_ref().and_then(|p| {
                            path_rw(&p.replace_full_path, &p.replace_prefix_match, opt(&p.kind))
                        }),
                        port: rd.port.and_then(|p| u16::try_from(p).ok()),
                        status: rd
                            .status_code
                            .and_then(|s| u16::try_from(s).ok())
                            .unwrap_or(302),
                        response_headers: resp_h.clone(),
                    }
                } else if clusters.is_empty() {
                    RouteAction::Fail {
                        message: problem
                            .as_ref()
                            .map(|p| p.1.clone())
                            .unwrap_or_else(|| "no backend with a weight above 0".into()),
                    }
                } else {
                    let path_rewrite = rewrite
                        .as_ref()
                        .and_then(|(k, full, prefix)| path_rw(full, prefix, k));
                    RouteAction::Forward {
                        clusters: clusters.clone(),
                        host_rewrite: host_rewrite.clone(),
                        path_rewrite,
                        request_headers: req_h.clone(),
                        response_headers: resp_h.clone(),
                        timeout_ms,
                    }
                };
                if let RouteAction::Forward {
                    clusters,
                    path_rewrite,
                    ..
                } = &action
                {
                    self.check_mcp_path(
                        &id,
                        ri,
                        &path_kind,
                        &path,
                        path_rewrite.as_ref(),
                        clusters,
                    );
                }
                entries.push(RouteEntry {
                    name: format!("{id}/rule-{ri}/match-{mi}"),
                    route: id.clone(),
                    rule: ri,
                    hostnames: Vec::new(),
                    path_kind,
                    path,
                    headers: vm(&m.headers),
                    query: vm(&m.query_params),
                    method: m.method.clone(),
                    action,
                    route_rank: rank,
                    match_index: mi,
                });
            }
        }
        Ok((entries, problem))
    }

    /// XBackend `path`: warn when a rule can never deliver requests at the MCP path.
    fn check_mcp_path(
        &mut self,
        route: &str,
        rule: usize,
        kind: &PathMatchKind,
        path: &str,
        rw: Option<&PathRewrite>,
        clusters: &[WeightedCluster],
    ) {
        let forwarded = match (kind, rw) {
            (PathMatchKind::Regex, None | Some(PathRewrite::Prefix { .. })) => return,
            (_, Some(PathRewrite::Full(f))) => (true, f.clone()),
            (PathMatchKind::Exact, Some(PathRewrite::Prefix { replacement, .. })) => {
                (true, replacement.clone())
            }
            (PathMatchKind::Exact, None) => (true, path.to_string()),
            (PathMatchKind::Prefix, Some(PathRewrite::Prefix { replacement, .. })) => {
                (false, replacement.clone())
            }
            (PathMatchKind::Prefix, None) => (false, path.to_string()),
        };
        for c in clusters {
            let Some(b) = c
                .backend
                .as_ref()
                .and_then(|id| self.backend_index.get(id))
                .and_then(|i| self.topo.backends.get(*i))
            else {
                continue;
            };
            let ok = match &forwarded {
                (true, exact) => exact == &b.path,
                (false, prefix) => path_prefix_matches(prefix, &b.path),
            };
            if !ok {
                self.report.warnings.push(format!(
                    "HTTPRoute {route} rule {rule} forwards to XBackend {} at {} {}, never at its MCP path {}; add a URLRewrite",
                    b.id,
                    if forwarded.0 { "path" } else { "paths under" },
                    forwarded.1,
                    b.path
                ));
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Policies

    fn policies(&mut self) -> (Vec<bundle::Policy>, Vec<bundle::Authorizer>) {
        let order = seniority_order(&self.m.policies);
        let mut out = Vec::new();
        let mut authorizers: Vec<bundle::Authorizer> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        // target key -> accepted policy ids
        let mut per_target: HashMap<String, Vec<String>> = HashMap::new();
        let mut ext_per_target: HashMap<String, Vec<String>> = HashMap::new();
        for (rank, i) in order.into_iter().enumerate() {
            let Some(p) = self.m.policies.get(i) else {
                continue;
            };
            let seniority = rank as u64 + 1;
            let id = p.id();
            let refs = p.spec.target_refs().to_vec();
            let level = match refs.first().map(|r| opt(&r.kind)) {
                Some("Gateway") => Level::Gateway,
                _ => Level::Backend,
            };
            let mut conds = Vec::new();
            if !seen.insert(id.clone()) {
                for r in &refs {
                    conds.push(cond(target_name(r, &p.meta.namespace), r.section_name.clone(), reason::CONFLICTED, "another XAccessPolicy with this namespace/name is defined earlier or is older; it is used instead"));
                }
                self.report.policies.push(status(p, Some(seniority), conds));
                continue;
            }
            let content = self.policy_content(p);
            // Targets.
            let mut accepted_targets = Vec::new();
            let mut standin_targets = Vec::new();
            let mut counted = HashSet::new();
            for r in &refs {
                let tname = target_name(r, &p.meta.namespace);
                let section = r.section_name.clone();
                let found = self.find_target(r, &p.meta.namespace);
                let target = match found {
                    Err((reason, msg)) => {
                        conds.push(cond(tname, section, reason, msg));
                        continue;
                    }
                    Ok(t) => t,
                };
                if let Err((reason, msg)) = &content.problem {
                    conds.push(cond(
                        tname,
                        section,
                        reason,
                        format!("{msg}{}", self.standin_note(&content)),
                    ));
                    standin_targets.push(target);
                    continue;
                }
                let key = format!("{}|{}", opt(&r.kind), tname);
                let limit = self.o.max_policies_per_target;
                let list = per_target.entry(key.clone()).or_default();
                if limit > 0 && list.len() >= limit && !counted.contains(&key) {
                    let msg = format!("{tname} already has {limit} more senior accepted policies ({}); raise --max-policies-per-target", list.join(", "));
                    conds.push(cond(
                        tname,
                        section,
                        reason::LIMIT,
                        format!("{msg}{}", self.standin_note(&content)),
                    ));
                    standin_targets.push(target);
                    continue;
                }
                if content.action == Action::ExternalAuth {
                    let elimit = self.o.max_external_auth_per_target;
                    let elist = ext_per_target.entry(key.clone()).or_default();
                    if elimit > 0 && elist.len() >= elimit && !counted.contains(&key) {
                        let msg = format!("{tname} already has {elimit} more senior ExternalAuth policies ({}); raise --max-external-auth-per-target", elist.join(", "));
                        conds.push(cond(
                            tname,
                            section,
                            reason::LIMIT,
                            format!("{msg}{}", self.standin_note(&content)),
                        ));
                        standin_targets.push(target);
                        continue;
                    }
                    if counted.insert(key.clone()) {
                        elist.push(id.clone());
                        list.push(id.clone());
                    }
                } else if counted.insert(key.clone()) {
                    list.push(id.clone());
                }
                conds.push(cond(tname, section, reason::ACCEPTED, ""));
                accepted_targets.push(target);
            }
            if !accepted_targets.is_empty() {
                let mut external_auth = None;
                if let Some(a) = &content.authorizer {
                    let mut a = a.clone();
                    a.name = format!("{}.{}", p.meta.namespace, p.meta.name);
                    external_auth = Some(a.name.clone());
                    authorizers.push(a);
                }
                out.push(bundle::Policy {
                    name: p.meta.name.clone(),
                    namespace: p.meta.namespace.clone(),
                    level,
                    targets: accepted_targets,
                    action: content.action,
                    external_auth,
                    seniority,
                    rules: content.rules.clone().ok().flatten(),
                    not_accepted: None,
                });
            }
            if !standin_targets.is_empty() && !self.o.skip_rejected {
                // Fail closed: an Allow policy admits nothing; anything else denies what it
                // would have selected (everything, when its rules cannot be trusted).
                let (action, rules) = match (content.action, content.deny_all) {
                    (Action::Allow, false) => (Action::Allow, None),
                    (_, true) => (Action::Deny, None),
                    _ => (Action::Deny, content.rules.clone().ok().flatten()),
                };
                let why = match &content.problem {
                    Err((reason, msg)) => format!("{reason}: {msg}"),
                    Ok(()) => format!(
                        "{}: more senior policies fill a target's limit",
                        reason::LIMIT
                    ),
                };
                out.push(bundle::Policy {
                    name: format!("{}.not-accepted", p.meta.name),
                    namespace: p.meta.namespace.clone(),
                    level,
                    targets: standin_targets,
                    action,
                    external_auth: None,
                    seniority,
                    rules,
                    not_accepted: Some(why),
                });
            }
            self.report.policies.push(status(p, Some(seniority), conds));
        }
        (out, authorizers)
    }

    fn standin_note(&self, c: &PolicyContent) -> String {
        if self.o.skip_rejected {
            return "; the policy is not enforced (--skip-rejected)".into();
        }
        match (c.action, c.deny_all) {
            (_, true) => "; enforced fail-closed: every request to this target is denied".into(),
            (Action::Allow, false) => {
                "; enforced fail-closed: this target admits nothing through this policy".into()
            }
            _ => "; enforced fail-closed: requests it selects are denied".into(),
        }
    }

    fn find_target(
        &self,
        r: &TargetRef,
        policy_ns: &str,
    ) -> Result<bundle::PolicyTarget, (&'static str, String)> {
        let group = opt(&r.group);
        let kind = opt(&r.kind);
        let name = opt(&r.name);
        if group == GATEWAY_GROUP && kind == "Gateway" {
            let Some(g) = self
                .topo
                .gateways
                .iter()
                .find(|g| g.namespace == policy_ns && g.name == name)
            else {
                let why = if self
                    .m
                    .gateways
                    .iter()
                    .any(|g| g.meta.namespace == policy_ns && g.meta.name == name)
                {
                    "the Gateway is not accepted or has no usable listener (see gateways)"
                } else {
                    "no such Gateway in the manifests"
                };
                return Err((reason::TARGET_NOT_FOUND, why.into()));
            };
            if let Some(s) = &r.section_name {
                if !g.listeners.iter().any(|l| &l.name == s) {
                    return Err((
                        reason::TARGET_NOT_FOUND,
                        format!("Gateway {policy_ns}/{name} has no usable listener \"{s}\""),
                    ));
                }
            }
            return Ok(bundle::PolicyTarget {
                name: name.to_string(),
                namespace: Some(policy_ns.to_string()),
                section_name: r.section_name.clone(),
            });
        }
        if agentic_group(group) && kind == "XBackend" {
            if !self
                .backend_index
                .contains_key(&format!("{policy_ns}/{name}"))
            {
                return Err((
                    reason::TARGET_NOT_FOUND,
                    "no accepted XBackend with this name".into(),
                ));
            }
            if r.section_name.is_some() {
                return Err((
                    reason::TARGET_NOT_FOUND,
                    "an XBackend has no sections; remove sectionName".into(),
                ));
            }
            return Ok(bundle::PolicyTarget {
                name: name.to_string(),
                namespace: Some(policy_ns.to_string()),
                section_name: None,
            });
        }
        Err((reason::INVALID, format!("target {group}/{kind} is not supported: targets are Gateways (gateway.networking.k8s.io) or XBackends (agentic.networking.x-k8s.io)")))
    }

    fn policy_content(&self, p: &Item<PolicySpec>) -> PolicyContent {
        let ns = &p.meta.namespace;
        match &p.spec {
            PolicySpec::V1(s) => {
                let action = if opt(&s.action) == "ExternalAuth" {
                    Action::ExternalAuth
                } else {
                    Action::Allow
                };
                // `rules: []` is indistinguishable from omitted in Kubernetes: all traffic.
                let rules = s.rules.as_ref().filter(|rs| !rs.is_empty()).map(|rs| {
                    rs.iter()
                        .enumerate()
                        .map(|(i, r)| rule_v1(&format!("spec.rules[{i}]"), r))
                        .collect::<Result<Vec<_>, _>>()
                });
                let rules = match rules {
                    None => Ok(None),
                    Some(Ok(v)) => Ok(Some(v)),
                    Some(Err(e)) => Err(e),
                };
                let authorizer = match (&action, &s.external_auth) {
                    (Action::ExternalAuth, Some(e)) => {
                        Some(self.authorizer(p, "spec.externalAuth", e))
                    }
                    (_, Some(_)) => Some(Err((
                        reason::INVALID,
                        format!(
                            "spec.externalAuth is only used with action ExternalAuth, not {}: remove it or set action: ExternalAuth",
                            opt(&s.action)
                        ),
                    ))),
                    _ => None,
                };
                self.finish_content(p, action, rules, authorizer, ns)
            }
            PolicySpec::V0(s) => {
                let rs = s.rules.clone().unwrap_or_default();
                let kind = |r: &RuleV0| r.authorization.as_ref().map(|a| opt(&a.kind).to_string());
                let ext = rs
                    .iter()
                    .enumerate()
                    .find(|(_, r)| kind(r).as_deref() == Some("ExternalAuth"));
                if let (Some((i, _)), true) = (ext, rs.len() > 1) {
                    // The authorizer would judge some callers while the other rules admit
                    // others: not one policy's meaning. Rejected, and every request denied.
                    let others: Vec<String> = rs
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(j, r)| {
                            let what = kind(r).unwrap_or_else(|| "no authorization".into());
                            format!("spec.rules[{j}] ({what})")
                        })
                        .collect();
                    let mut c = self.finish_content(
                        p,
                        Action::ExternalAuth,
                        Err((
                            reason::INVALID,
                            format!(
                                "spec.rules[{i}] is an ExternalAuth rule and a policy with one may have no other rules; move {} to a policy of its own",
                                others.join(", ")
                            ),
                        )),
                        None,
                        ns,
                    );
                    c.deny_all = true;
                    return c;
                }
                match ext {
                    Some((i, r)) => {
                        let rule = source_v(&format!("spec.rules[{i}]"), r.source.as_ref()).map(
                            |source| {
                                Some(vec![bundle::Rule {
                                    name: opt(&r.name).to_string(),
                                    source,
                                    authorization: None,
                                }])
                            },
                        );
                        let e = r
                            .authorization
                            .as_ref()
                            .and_then(|a| a.external_auth.clone())
                            .unwrap_or_default();
                        let authorizer = Some(self.authorizer(
                            p,
                            &format!("spec.rules[{i}].authorization.externalAuth"),
                            &e,
                        ));
                        self.finish_content(p, Action::ExternalAuth, rule, authorizer, ns)
                    }
                    None => {
                        let rules = rs
                            .iter()
                            .enumerate()
                            .map(|(i, r)| rule_v0(&format!("spec.rules[{i}]"), r))
                            .collect::<Result<Vec<_>, _>>()
                            .map(Some);
                        self.finish_content(p, Action::Allow, rules, None, ns)
                    }
                }
            }
        }
    }

    fn finish_content(
        &self,
        p: &Item<PolicySpec>,
        action: Action,
        rules: Result<Option<Vec<bundle::Rule>>, (&'static str, String)>,
        authorizer: Option<Result<bundle::Authorizer, (&'static str, String)>>,
        ns: &str,
    ) -> PolicyContent {
        let mut problem = None;
        if let Err(e) = &rules {
            problem = Some(e.clone());
        }
        let authorizer = match authorizer {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                if problem.is_none() {
                    problem = Some(e);
                }
                None
            }
        };
        // The bundle's own checks (names, identities, regular expressions...) on this policy.
        if problem.is_none() {
            if let Ok(r) = &rules {
                let b = Bundle {
                    api_version: bundle::API_VERSION.into(),
                    identity: bundle::IdentitySettings {
                        trust_domain: Some(self.o.trust_domain.clone()),
                        ..Default::default()
                    },
                    gateways: vec![bundle::Gateway {
                        name: "g".into(),
                        namespace: ns.into(),
                        listeners: vec![bundle::Listener {
                            name: "l".into(),
                            port: 1,
                            hostname: None,
                        }],
                    }],
                    backends: vec![],
                    authorizers: authorizer
                        .iter()
                        .cloned()
                        .map(|mut a| {
                            a.name = "a".into();
                            a
                        })
                        .collect(),
                    policies: vec![bundle::Policy {
                        name: p.meta.name.clone(),
                        namespace: ns.into(),
                        level: Level::Gateway,
                        targets: vec![bundle::PolicyTarget {
                            name: "g".into(),
                            namespace: None,
                            section_name: None,
                        }],
                        action,
                        external_auth: authorizer.as_ref().map(|_| "a".to_string()),
                        seniority: 0,
                        rules: r.clone(),
                        not_accepted: None,
                    }],
                    deny_response: Default::default(),
                    limits: Default::default(),
                    envoy: Default::default(),
                };
                if let Err(e) = mcp_access_bundle::validate(&b) {
                    let field = e.path.replacen("policies[0].", "", 1).replacen(
                        "authorizers[0].",
                        "externalAuth: ",
                        1,
                    );
                    problem = Some((reason::INVALID, format!("{field}: {}", e.message)));
                }
            }
        }
        PolicyContent {
            action,
            rules,
            authorizer,
            deny_all: false,
            problem: match problem {
                Some(p) => Err(p),
                None => Ok(()),
            },
        }
    }

    fn authorizer(
        &self,
        p: &Item<PolicySpec>,
        at: &str,
        e: &ExternalAuth,
    ) -> Result<bundle::Authorizer, (&'static str, String)> {
        let Some(b) = &e.backend_ref else {
            return Err((reason::INVALID, format!("{at}.backendRef is required")));
        };
        let group = opt(&b.group);
        let kind = b.kind.as_deref().unwrap_or("Service");
        if !is_core(group) || kind != "Service" {
            return Err((
                reason::INVALID,
                format!("{at}.backendRef must be a core Service, not {group}/{kind}"),
            ));
        }
        let ns = b
            .namespace
            .clone()
            .unwrap_or_else(|| p.meta.namespace.clone());
        let name = opt(&b.name).to_string();
        if !check::matches(check::DNS_LABEL, &name) {
            return Err((
                reason::INVALID,
                format!("{at}.backendRef.name \"{name}\" is not a Service name"),
            ));
        }
        if !permitted(
            self.m,
            (&p.group, "XAccessPolicy", &p.meta.namespace),
            ("", "Service", &ns, &name),
        ) {
            return Err((reason::REF_NOT_PERMITTED, format!("{at}.backendRef: no ReferenceGrant in namespace {ns} allows XAccessPolicies from {} to refer to Service {name}", p.meta.namespace)));
        }
        if opt(&e.protocol) == "GRPC" {
            return Err((reason::UNSUPPORTED, format!("{at}.protocol GRPC is not supported yet: mcp-access calls HTTP authorizers only")));
        }
        let http = e.http.clone().unwrap_or_default();
        let path_prefix = http.path.clone().unwrap_or_default();
        if !path_prefix.is_empty() && !path_prefix.starts_with('/') {
            return Err((
                reason::INVALID,
                format!("{at}.http.path must start with '/'"),
            ));
        }
        let max = e
            .forward_body
            .as_ref()
            .and_then(|f| f.max_size)
            .unwrap_or(0);
        let Ok(forward_body_max_bytes) = u32::try_from(max) else {
            return Err((
                reason::INVALID,
                format!(
                    "{at}.forwardBody.maxSize must be between 0 and {}",
                    u32::MAX
                ),
            ));
        };
        let port = u16::try_from(b.port.unwrap_or_default()).unwrap_or_default();
        let cluster = format!("authz/{ns}/{name}:{port}");
        Ok(bundle::Authorizer {
            name: String::new(),
            cluster,
            authority: None,
            path_prefix,
            timeout_ms: self.o.authz_timeout_ms,
            allowed_headers: http.allowed_headers.clone().unwrap_or_default(),
            allowed_response_headers: http.allowed_response_headers.clone().unwrap_or_default(),
            forward_body_max_bytes,
            max_response_body_bytes: bundle::DEFAULT_MAX_RESPONSE_BODY_BYTES,
            failure_mode: bundle::FailureMode::Deny,
        })
    }
}

/// The Services behind the authorizers' clusters (`authz/<namespace>/<name>:<port>`).
pub fn authorizer_models(authorizers: &[bundle::Authorizer]) -> Vec<AuthorizerModel> {
    let mut out: Vec<AuthorizerModel> = Vec::new();
    for a in authorizers {
        if out.iter().any(|x| x.cluster == a.cluster) {
            continue;
        }
        let rest = a.cluster.strip_prefix("authz/").unwrap_or(&a.cluster);
        let (ns, svc) = rest.split_once('/').unwrap_or(("", rest));
        let (name, port) = svc.rsplit_once(':').unwrap_or((svc, "0"));
        out.push(AuthorizerModel {
            cluster: a.cluster.clone(),
            namespace: ns.to_string(),
            name: name.to_string(),
            port: port.parse().unwrap_or(0),
        });
    }
    out
}

struct PolicyContent {
    action: Action,
    rules: Result<Option<Vec<bundle::Rule>>, (&'static str, String)>,
    authorizer: Option<bundle::Authorizer>,
    /// Not accepted in a way that leaves no trustworthy selection: the stand-in denies all.
    deny_all: bool,
    problem: Result<(), (&'static str, String)>,
}

fn target_name(r: &TargetRef, ns: &str) -> String {
    format!("{} {ns}/{}", opt(&r.kind), opt(&r.name))
}

fn source_v(
    at: &str,
    s: Option<&RuleSource>,
) -> Result<Option<bundle::Source>, (&'static str, String)> {
    let Some(s) = s else { return Ok(None) };
    let kind = match (s.kind.as_deref(), &s.spiffe, &s.service_account) {
        (Some("SPIFFE"), _, _) => bundle::SourceType::Spiffe,
        (Some(_), _, _) => bundle::SourceType::ServiceAccount,
        (None, Some(_), None) => bundle::SourceType::Spiffe,
        (None, None, Some(_)) => bundle::SourceType::ServiceAccount,
        (None, None, None) => return Ok(None),
        (None, Some(_), Some(_)) => {
            return Err((
                reason::INVALID,
                format!("{at}.source sets both spiffe and serviceAccount; set type to say which"),
            ));
        }
    };
    match kind {
        bundle::SourceType::Spiffe if s.service_account.is_some() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.serviceAccount is not allowed with type SPIFFE"),
            ));
        }
        bundle::SourceType::Spiffe if s.spiffe.is_none() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.spiffe is required with type SPIFFE"),
            ));
        }
        bundle::SourceType::ServiceAccount if s.spiffe.is_some() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.spiffe is not allowed with type ServiceAccount"),
            ));
        }
        bundle::SourceType::ServiceAccount if s.service_account.is_none() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.serviceAccount is required with type ServiceAccount"),
            ));
        }
        _ => {}
    }
    Ok(Some(bundle::Source {
        kind,
        spiffe: s.spiffe.clone(),
        service_account: s.service_account.as_ref().map(|sa| bundle::ServiceAccount {
            namespace: sa.namespace.clone(),
            name: opt(&sa.name).to_string(),
        }),
        jwt: None,
    }))
}

fn cel_unsupported(at: &str) -> (&'static str, String) {
    (
        reason::UNSUPPORTED,
        format!("{at}.authorization: type CEL is not supported yet"),
    )
}

fn unknown_match(at: &str, kind: &str) -> (&'static str, String) {
    (
        reason::INVALID,
        format!("{at}.type \"{kind}\" is not supported"),
    )
}

fn rule_v0(at: &str, r: &RuleV0) -> Result<bundle::Rule, (&'static str, String)> {
    let source = source_v(at, r.source.as_ref())?;
    let authorization = match &r.authorization {
        None => None,
        Some(a) => match opt(&a.kind) {
            "CEL" => return Err(cel_unsupported(at)),
            // InlineTools: these tools plus the base protocol; no tools: the base protocol.
            "InlineTools" => {
                let tools = a.tools.clone().unwrap_or_default();
                Some(bundle::Authorization {
                    mcp: Some(bundle::McpMatch {
                        methods: if tools.is_empty() {
                            Vec::new()
                        } else {
                            vec![bundle::McpMethod {
                                name: "tools/call".into(),
                                params: Some(tools),
                            }]
                        },
                        base_protocol: bundle::BaseProtocol::Match,
                    }),
                    ..Default::default()
                })
            }
            other => {
                return Err((
                    reason::INVALID,
                    format!(
                    "{at}.authorization.type \"{other}\" is not InlineTools, ExternalAuth or CEL"
                ),
                ))
            }
        },
    };
    Ok(bundle::Rule {
        name: opt(&r.name).to_string(),
        source,
        authorization,
    })
}

fn rule_v1(at: &str, r: &RuleV1) -> Result<bundle::Rule, (&'static str, String)> {
    let source = source_v(at, r.source.as_ref())?;
    let authorization = match &r.authorization {
        None => None,
        Some(a) if opt(&a.kind) == "CEL" => return Err(cel_unsupported(at)),
        Some(a) => {
            let mcp = a.mcp.as_ref().map(|m| bundle::McpMatch {
                methods: m
                    .methods
                    .iter()
                    .flatten()
                    .map(|x| bundle::McpMethod {
                        name: opt(&x.name).to_string(),
                        params: x.params.clone().filter(|p| !p.is_empty()),
                    })
                    .collect(),
                base_protocol: if m.mcp_base_protocol_methods_option.as_deref()
                    == Some("MATCH_BASE_PROTOCOL_METHODS")
                {
                    bundle::BaseProtocol::Match
                } else {
                    bundle::BaseProtocol::Skip
                },
            });
            let mut paths = Vec::new();
            for (i, p) in a.paths.iter().flatten().enumerate() {
                let kind = match p.kind.as_deref().unwrap_or("PathPrefix") {
                    "Exact" => bundle::MatchType::Exact,
                    "RegularExpression" => bundle::MatchType::RegularExpression,
                    "PathPrefix" => bundle::MatchType::PathPrefix,
                    other => {
                        return Err(unknown_match(
                            &format!("{at}.authorization.paths[{i}]"),
                            other,
                        ))
                    }
                };
                let mut value = opt(&p.value).to_string();
                if value.is_empty() {
                    if kind != bundle::MatchType::PathPrefix {
                        return Err((
                            reason::INVALID,
                            format!("{at}.authorization.paths[{i}].value must not be empty"),
                        ));
                    }
                    value = "/".into();
                }
                paths.push(bundle::PathMatch { kind, value });
            }
            Some(bundle::Authorization {
                mcp,
                methods: a.methods.clone().unwrap_or_default(),
                paths,
                headers: a
                    .headers
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, h)| {
                        let kind = match h.kind.as_deref().unwrap_or("Exact") {
                            "Exact" => bundle::MatchType::Exact,
                            "RegularExpression" => bundle::MatchType::RegularExpression,
                            other => {
                                return Err(unknown_match(
                                    &format!("{at}.authorization.headers[{i}]"),
                                    other,
                                ))
                            }
                        };
                        Ok(bundle::HeaderMatch {
                            name: opt(&h.name).to_string(),
                            kind,
                            value: opt(&h.value).to_string(),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                hosts: a.hosts.clone().unwrap_or_default(),
                ports: a
                    .ports
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, p)| {
                        u16::try_from(*p).ok().filter(|p| *p != 0).ok_or_else(|| {
                            (
                                reason::INVALID,
                                format!("{at}.authorization.ports[{i}]: {p} is not a port"),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            })
        }
    };
    Ok(bundle::Rule {
        name: opt(&r.name).to_string(),
        source,
        authorization,
    })
}

fn header_ops(m: Option<&HeaderModifier>) -> HeaderOps {
    let Some(m) = m else {
        return HeaderOps::default();
    };
    let pairs = |l: &Option<Vec<HeaderValue>>| {
        l.iter()
            .flatten()
            .map(|h| (opt(&h.name).to_string(), opt(&h.value).to_string()))
            .collect()
    };
    HeaderOps {
        set: pairs(&m.set),
        add: pairs(&m.add),
        remove: m.remove.clone().unwrap_or_default(),
    }
}

/// Label selector semantics.
pub fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = s.match_expressions.iter().flatten().all(|e| {
        let key = opt(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match opt(&e.operator) {
            "In" => labels.get(key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(key),
            "DoesNotExist" => !labels.contains_key(key),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// Effective hostnames of a route on a listener (Gateway API intersection rules).
/// None: no overlap. Some(empty): any host.
fn intersect_hostnames(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    match (listener, route.is_empty()) {
        (None, _) => Some(route.to_vec()),
        (Some(l), true) => Some(vec![l.to_string()]),
        (Some(l), false) => {
            let mut out = Vec::new();
            for h in route {
                if h == l || host_matches(l, h) {
                    out.push(h.clone());
                } else if host_matches(h, l) {
                    out.push(l.to_string());
                } else if let (Some(a), Some(b)) = (h.strip_prefix("*."), l.strip_prefix("*.")) {
                    if a.ends_with(&format!(".{b}")) {
                        out.push(h.clone());
                    } else if b.ends_with(&format!(".{a}")) {
                        out.push(l.to_string());
                    }
                }
            }
            out.dedup();
            (!out.is_empty()).then_some(out)
        }
    }
}

/// Gateway API match precedence: exact path, then regular expression, then longest prefix;
/// then method, most headers, most query parameters; then the older route, rule order and
/// match order.
pub fn precedence(a: &RouteEntry, b: &RouteEntry) -> std::cmp::Ordering {
    let kind_rank = |e: &RouteEntry| match e.path_kind {
        PathMatchKind::Exact => 0,
        PathMatchKind::Regex => 1,
        PathMatchKind::Prefix => 2,
    };
    let key = |e: &RouteEntry| {
        (
            kind_rank(e),
            std::cmp::Reverse(e.path.len()),
            e.method.is_none(),
            std::cmp::Reverse(e.headers.len()),
            std::cmp::Reverse(e.query.len()),
            e.route_rank,
            e.rule,
            e.match_index,
        )
    };
    key(a).cmp(&key(b))
}
