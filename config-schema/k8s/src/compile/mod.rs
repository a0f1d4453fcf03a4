//! From validated manifests to a bundle, a status report and a topology: references are
//! resolved (cross-namespace ones through ReferenceGrants), policies ranked by seniority and
//! limited per target, and every field either mapped or reported.
//!
//! One module per kind of object compiled: [`backends`] (XBackends), [`gateways`] (listeners,
//! TLS), [`routes`] (HTTPRoute rules, matches, filters, attachment), [`policies`]
//! (XAccessPolicies of both versions and AccessPolicies, targets, limits, stand-ins, authorizers) with
//! [`rules`] (their access rules), and [`grants`] (ReferenceGrants).

mod backends;
mod dry_run;
mod effective;
mod gateways;
mod grants;
mod identity;
mod pins;
mod policies;
mod ratelimits;
mod route_targets;
mod routes;
mod rules;
mod settings;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use crate::load::{Item, Manifests};
use crate::model::*;
use crate::refs::{NsName, ObjectName, Target};
use crate::types::{opt, AGENTIC_GROUP, PROTOTYPE_GROUP};
use mcp_access_bundle::{self as bundle, Bundle};

use policies::authorizers::authorizer_models;
pub use routes::precedence;

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
    /// SPIFFE trust domain of ServiceAccount sources (None: a `FilterSettings` object's, else
    /// the default).
    pub trust_domain: Option<String>,
    /// Accepted policies per target object (0: no limit).
    pub max_policies_per_target: usize,
    /// Accepted ExternalAuth policies per target object (0: no limit).
    pub max_external_auth_per_target: usize,
    /// Envoy port overrides: `ns/gateway/listener`, `gateway/listener` or `listener` -> port.
    pub listen: BTreeMap<String, u16>,
    /// Added to every Gateway listener port without an override.
    pub port_offset: i32,
    /// Timeout of authorizer callouts whose policy sets none (None: a `FilterSettings`
    /// object's, else 1000).
    pub authz_timeout_ms: Option<u32>,
    /// Drop policies that are not accepted (as a controller would) instead of enforcing
    /// them fail-closed.
    pub skip_rejected: bool,
    /// None: a `FilterSettings` object's, else `Deny`.
    pub unknown_backend: Option<bundle::UnknownBackend>,
    /// Only Gateways of these classes (empty: all).
    pub gateway_classes: Vec<String>,
    /// Certificate Secrets that can be used (`name` or `namespace/name`); None: do not check.
    pub tls_secrets: Option<Vec<String>>,
    /// Client CA references that can be used (`name` or `namespace/name`, `""` for a default
    /// CA); None: do not check.
    pub client_cas: Option<Vec<String>>,
    /// The `jwt_authn` providers whose verified claims JWT sources read.
    pub jwt_providers: Vec<bundle::JwtProvider>,
    /// Also build [`Compiled::effective`] (`mcp-access effective`).
    pub effective_view: bool,
    /// The RateLimitService `Global` RateLimitPolicies ask (None: such a policy is not
    /// accepted).
    pub rate_limit_service: Option<bundle::RateLimitService>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            trust_domain: None,
            max_policies_per_target: 5,
            max_external_auth_per_target: 0,
            listen: BTreeMap::new(),
            port_offset: 0,
            authz_timeout_ms: None,
            skip_rejected: false,
            unknown_backend: None,
            gateway_classes: Vec::new(),
            tls_secrets: None,
            client_cas: None,
            jwt_providers: Vec::new(),
            effective_view: false,
            rate_limit_service: None,
        }
    }
}

/// The result of compiling.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub bundle: Bundle,
    pub report: Report,
    pub topology: Topology,
    /// Per (Gateway listener, XBackend) the policies a request meets (with
    /// [`Options::effective_view`]).
    pub effective: Vec<EffectivePolicy>,
}

/// Whether two API groups name the same kind family (the prototype group is the older name).
pub(crate) fn agentic_group(g: &str) -> bool {
    g == AGENTIC_GROUP || g == PROTOTYPE_GROUP
}

fn same_group(a: &str, b: &str) -> bool {
    a == b || (agentic_group(a) && agentic_group(b)) || (is_core(a) && is_core(b))
}

fn is_core(g: &str) -> bool {
    g.is_empty() || g == "core"
}

/// `; did you mean `x`? (valid: a, b)` for a name outside a closed set.
pub(crate) fn did_you_mean(word: &str, valid: &[&str]) -> String {
    if valid.is_empty() {
        return String::new();
    }
    let best = valid
        .iter()
        .map(|v| (strsim::jaro_winkler(word, v), *v))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let list = valid.join(", ");
    match best {
        Some((_, v)) => format!("; did you mean `{v}`? (valid: {list})"),
        None => format!(" (valid: {list})"),
    }
}

/// Where a `kind` named `name` the policy's namespace lacks may be meant: the same name in
/// other namespaces (targetRefs stay in the policy's own), else a near name in its own.
pub(crate) fn elsewhere<'m>(
    kind: &str,
    metas: impl Iterator<Item = &'m crate::load::Meta> + Clone,
    policy_ns: &str,
    name: &str,
) -> String {
    let mut other: Vec<&str> = metas
        .clone()
        .filter(|m| m.name == name && m.namespace != policy_ns)
        .map(|m| m.namespace.as_str())
        .collect();
    other.sort_unstable();
    other.dedup();
    if !other.is_empty() {
        return format!(
            " in namespace {policy_ns}; {kind} {name} is in namespace {}: a targetRef names an object of the policy's own namespace, so put the policy there",
            other.join(", ")
        );
    }
    let here: Vec<&str> = metas
        .filter(|m| m.namespace == policy_ns)
        .map(|m| m.name.as_str())
        .collect();
    did_you_mean(name, &here)
}

fn cond(
    target: impl Into<Target>,
    section: Option<String>,
    reason: &str,
    message: impl Into<String>,
) -> TargetStatus {
    TargetStatus {
        target: target.into(),
        section_name: section,
        accepted: reason == reason::ACCEPTED,
        reason: reason.to_string(),
        message: message.into(),
        enforced: None,
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
        generation: it.meta.generation,
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

struct Ctx<'a> {
    m: &'a Manifests,
    o: &'a Options,
    report: Report,
    topo: Topology,
    /// XBackend -> index into topo.backends
    backend_index: HashMap<NsName, usize>,
    /// What defaults/overrides blocks did, per (backend, listener, route class).
    effects: Vec<effective::EffectRecord>,
    /// The filter's settings (a `FilterSettings` object and the flags).
    settings: settings::Settings,
    /// XBackend -> its pinned tools.
    pins: HashMap<NsName, bundle::ToolPins>,
    /// The identity headers of the XBackends (from AccessPolicies).
    identity_headers: identity::IdentityHeaders,
    /// The Service behind each authorizer cluster built (`authorizer` takes `&self`).
    authorizer_services: RefCell<BTreeMap<String, AuthorizerModel>>,
}

/// Compiles validated manifests.
pub fn compile(m: &Manifests, o: &Options) -> Compiled {
    let (settings, settings_problems, settings_warnings) = settings::resolve(m, o);
    let mut cx = Ctx {
        m,
        o,
        report: Report::default(),
        topo: Topology::default(),
        backend_index: HashMap::new(),
        effects: Vec::new(),
        settings,
        pins: HashMap::new(),
        identity_headers: identity::IdentityHeaders::default(),
        authorizer_services: RefCell::default(),
    };
    cx.report_inputs();
    cx.report.invalid.extend(settings_problems);
    cx.report.warnings.extend(settings_warnings);
    cx.backends();
    cx.tool_pins();
    cx.gateways();
    cx.routes();
    cx.note_backends_behind_listeners();
    // Known once the routes are: identity headers may not be among them.
    let route_headers = route_match_headers(&cx.topo);
    let (mut policies, authorizers) = cx.policies(&route_headers);
    let (rate_limits, standins) = cx.rate_limits();
    policies.extend(standins);
    cx.topo.authorizers = authorizer_models(&authorizers, &cx.authorizer_services.borrow());
    cx.report_rejected();
    let mut bundle = Bundle {
        api_version: bundle::API_VERSION.to_string(),
        identity: Default::default(),
        gateways: cx.bundle_gateways(),
        backends: cx.bundle_backends(),
        authorizers,
        policies,
        deny_response: Default::default(),
        listings: Default::default(),
        limits: Default::default(),
        envoy: Default::default(),
        rate_limit_service: o.rate_limit_service.clone().filter(|_| {
            rate_limits
                .iter()
                .any(|l| l.mode == bundle::RateLimitMode::Global)
        }),
        rate_limits,
        decision_records: Default::default(),
    };
    cx.settings.apply(&mut bundle);
    bundle.envoy.route_match_headers = route_headers;
    cx.identity_headers.apply(&mut bundle.backends);
    let problems = settings::protected_resources(m, &mut bundle.gateways);
    cx.report.invalid.extend(problems);
    let effective = if o.effective_view {
        let mut views = cx.effective_view(&bundle);
        cx.spell_rules_as_written(&mut views);
        views
    } else {
        Vec::new()
    };
    Compiled {
        bundle,
        report: cx.report,
        topology: cx.topo,
        effective,
    }
}

impl Ctx<'_> {
    /// The inputs' validation problems and the objects of kinds not compiled.
    fn report_inputs(&mut self) {
        for p in self.m.problems() {
            self.report.invalid.push(InvalidObject {
                source: p.origin.to_string(),
                kind: p.kind.clone(),
                object: p.object.clone(),
                field: p.field.clone(),
                message: p.message.clone(),
            });
        }
        for s in &self.m.skipped {
            self.report.skipped.push(SkippedObject {
                source: s.origin.to_string(),
                api_version: s.api_version.clone(),
                kind: s.kind.clone(),
                object: s.object.clone(),
            });
        }
    }

    /// Which backends sit behind which listener (the HTTPRoutes' parentRefs decide).
    fn note_backends_behind_listeners(&mut self) {
        for g in &self.topo.gateways {
            for l in &g.listeners {
                let mut behind: Vec<String> = Vec::new();
                for e in &l.routes {
                    if let RouteAction::Forward { clusters, .. } = &e.action {
                        for c in clusters {
                            let name = match &c.backend {
                                Some(b) => b.to_string(),
                                None => c.cluster.clone(),
                            };
                            if !behind.contains(&name) {
                                behind.push(name);
                            }
                        }
                    }
                }
                let st = self
                    .report
                    .gateways
                    .iter_mut()
                    .filter(|s| s.namespace == g.namespace && s.name == g.name)
                    .flat_map(|s| s.conditions.iter_mut())
                    .find(|c| c.accepted && c.target.listener() == Some(l.name.as_str()));
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
    }

    /// Objects the API server would reject have a status too: not accepted, Invalid.
    fn report_rejected(&mut self) {
        for r in &self.m.rejected {
            let list = match r.kind.as_str() {
                "XAccessPolicy" | "AccessPolicy" => &mut self.report.policies,
                "Gateway" => &mut self.report.gateways,
                "HTTPRoute" => &mut self.report.routes,
                "XBackend" => &mut self.report.backends,
                "ToolPin" => &mut self.report.pins,
                "RateLimitPolicy" => &mut self.report.rate_limit_policies,
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
                generation: None,
                conditions: vec![cond(
                    ObjectName::new(&r.kind, NsName::new(&r.namespace, &r.name)),
                    None,
                    reason::INVALID,
                    format!("rejected as the API server would: {}", message.join("; ")),
                )],
            });
        }
    }

    /// The bundle's gateways: the accepted ones with their usable listeners.
    fn bundle_gateways(&self) -> Vec<bundle::Gateway> {
        let mut gateways = Vec::new();
        for g in &self.topo.gateways {
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
                        protected_resource: None,
                    })
                    .collect(),
            });
        }
        gateways
    }

    /// The bundle's backends, each recognised by the routes that forward only to it.
    fn bundle_backends(&self) -> Vec<bundle::Backend> {
        let mut backends = Vec::new();
        for b in &self.topo.backends {
            let mut route_names: Vec<String> = Vec::new();
            for g in &self.topo.gateways {
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
            backends.push(bundle::Backend {
                name: b.id.name.clone(),
                namespace: b.id.namespace.clone(),
                route_names,
                cluster_names: vec![b.cluster.clone()],
                pins: self.pins.get(&b.id).cloned(),
                identity_headers: Vec::new(),
            });
        }
        backends
    }
}

/// The request headers the HTTPRoutes attached to accepted listeners match on (names,
/// lowercase, sorted): the bundle's `envoy.routeMatchHeaders`, which the filter never edits.
fn route_match_headers(topo: &Topology) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = topo
        .gateways
        .iter()
        .flat_map(|g| &g.listeners)
        .flat_map(|l| &l.routes)
        .flat_map(|r| &r.headers)
        .map(|h| h.name.to_ascii_lowercase())
        .collect();
    names.into_iter().collect()
}

/// `namespace/name` (as written) of the accepted ExternalAuth policies among `policies` (the
/// bundle policies before any block applies) and `blocks`.
fn external_auth_names(
    policies: &[bundle::Policy],
    blocks: &[effective::BlockPolicy],
) -> Vec<String> {
    let written = policies
        .iter()
        .filter(|p| p.action == bundle::Action::ExternalAuth && p.not_accepted.is_none())
        .map(|p| {
            let name = p.name.strip_suffix(".accesspolicy").unwrap_or(&p.name);
            format!("{}/{name}", p.namespace)
        });
    let blocks = blocks
        .iter()
        .filter(|b| b.action == bundle::Action::ExternalAuth)
        .map(|b| b.object.id.to_string());
    let mut out: Vec<String> = written.chain(blocks).collect();
    out.sort();
    out.dedup();
    out
}
