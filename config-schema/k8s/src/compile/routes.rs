//! HTTPRoutes: their rules (matches, filters, backendRefs, timeouts) as Envoy route entries,
//! attached to the listeners of their parent Gateways (namespaces allowed, hostnames
//! intersected) in Gateway API precedence.

use std::collections::{BTreeMap, HashSet};

use super::grants::permitted;
use super::{cond, is_core, opt, reason, seniority_order, status, Ctx};
use crate::check;
use crate::load::{Item, Manifests};
use crate::model::*;
use crate::refs::{NsName, ObjectName};
use crate::types::*;
use mcp_access_bundle::gateway_api::{host_matches, path_prefix_matches};

/// Why something is not accepted: a status reason and a message.
type Problem = (&'static str, String);

/// What a rule's filters do.
#[derive(Default)]
struct RuleFilters {
    req_h: HeaderOps,
    resp_h: HeaderOps,
    host_rewrite: Option<String>,
    /// (type, replaceFullPath, replacePrefixMatch)
    rewrite: Option<(String, Option<String>, Option<String>)>,
    redirect: Option<RequestRedirect>,
}

/// What a rule forwards to: the clusters with a weight above 0 and the first backendRef
/// problem.
struct RuleBackends {
    clusters: Vec<WeightedCluster>,
    problem: Option<Problem>,
}

impl Ctx<'_> {
    pub(super) fn routes(&mut self) {
        let order = seniority_order(&self.m.routes);
        let mut seen: HashSet<String> = HashSet::new();
        for (rank, i) in order.into_iter().enumerate() {
            let Some(r) = self.m.routes.get(i) else {
                continue;
            };
            let conds = if seen.insert(r.id()) {
                self.route(r, rank)
            } else {
                vec![cond(
                    ObjectName::new("HTTPRoute", r.ns_name()),
                    None,
                    reason::CONFLICTED,
                    "another HTTPRoute with this namespace/name is defined earlier or is older",
                )]
            };
            self.report.routes.push(status(r, None, conds));
        }
        for g in &mut self.topo.gateways {
            for l in &mut g.listeners {
                l.routes.sort_by(precedence);
            }
        }
    }

    /// One route: its rules built and attached to each parent; the status per parent.
    fn route(&mut self, r: &Item<HttpRouteSpec>, rank: usize) -> Vec<TargetStatus> {
        let mut conds = Vec::new();
        // The rules, independent of the parent.
        let (entries, rule_problem) = match self.route_rules(r, rank) {
            Ok(x) => x,
            Err((reason, msg)) => {
                for p in r.spec.parent_refs.iter().flatten() {
                    conds.push(cond(
                        parent_name(r, p),
                        p.section_name.clone(),
                        reason,
                        msg.clone(),
                    ));
                }
                if conds.is_empty() {
                    conds.push(cond(
                        ObjectName::new("HTTPRoute", r.ns_name()),
                        None,
                        reason,
                        msg,
                    ));
                }
                return conds;
            }
        };
        let parents = r.spec.parent_refs.clone().unwrap_or_default();
        if parents.is_empty() {
            conds.push(cond(
                ObjectName::new("HTTPRoute", r.ns_name()),
                None,
                "NoMatchingParent",
                "no parentRefs: the route attaches to nothing",
            ));
        }
        for p in &parents {
            let section = p.section_name.clone();
            let (why, msg) = match self.attach(r, p, &entries) {
                None => continue,
                Some(Err(e)) => e,
                Some(Ok(attached)) => match &rule_problem {
                    Some((reason, msg)) => (*reason, msg.clone()),
                    None => (
                        reason::ACCEPTED,
                        format!("attached to {attached} listener(s)"),
                    ),
                },
            };
            conds.push(cond(parent_name(r, p), section, why, msg));
        }
        conds
    }

    /// Attaches a route's entries to the listeners of one parent that admit it; the number
    /// of listeners (None: the Gateway is gone from the manifests, no status).
    fn attach(
        &mut self,
        r: &Item<HttpRouteSpec>,
        p: &ParentRef,
        entries: &[RouteEntry],
    ) -> Option<Result<usize, Problem>> {
        let gns = p
            .namespace
            .clone()
            .unwrap_or_else(|| r.meta.namespace.clone());
        let gname = opt(&p.name).to_string();
        if p.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
            || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
        {
            return Some(Err((
                reason::UNSUPPORTED,
                format!(
                    "parentRef kind {} is not supported (only Gateway)",
                    p.kind.as_deref().unwrap_or("Gateway")
                ),
            )));
        }
        let Some(gi) = self
            .topo
            .gateways
            .iter()
            .position(|g| g.namespace == gns && g.name == gname)
        else {
            return Some(Err((
                "NoMatchingParent",
                "no accepted Gateway with this name".into(),
            )));
        };
        let m = self.m;
        let gw_item = m
            .gateways
            .iter()
            .find(|g| g.meta.namespace == gns && g.meta.name == gname)?;
        let gw_listeners = gw_item.spec.listeners.as_deref().unwrap_or_default();
        let gm = self.topo.gateways.get_mut(gi)?;
        let mut attached = 0;
        let mut why: Problem = (
            "NoMatchingParent",
            "no listener matches sectionName/port".into(),
        );
        for lm in gm.listeners.iter_mut() {
            match on_listener(m, r, p, &gns, gw_listeners, lm) {
                None => {}
                Some(Err(e)) => why = e,
                Some(Ok(hosts)) => {
                    for e in entries {
                        let mut e = e.clone();
                        e.hostnames = hosts.clone();
                        lm.routes.push(e);
                    }
                    attached += 1;
                }
            }
        }
        if attached == 0 {
            return Some(Err(why));
        }
        Some(Ok(attached))
    }

    /// The Envoy route entries of a route's rules (before attachment); a partial problem
    /// (some backendRef not resolved) is returned beside them.
    #[allow(clippy::type_complexity)]
    fn route_rules(
        &mut self,
        r: &Item<HttpRouteSpec>,
        rank: usize,
    ) -> Result<(Vec<RouteEntry>, Option<Problem>), Problem> {
        let default_rules = vec![RouteRule::default()];
        let rules = r.spec.rules.as_ref().unwrap_or(&default_rules);
        let mut entries = Vec::new();
        let mut problem: Option<Problem> = None;
        for (ri, rule) in rules.iter().enumerate() {
            let at = format!("spec.rules[{ri}]");
            let filters = rule_filters(&at, rule)?;
            let backends = self.rule_backends(r, &at, rule, problem.take())?;
            self.rule_entries(r, rank, ri, rule, &filters, &backends, &mut entries)?;
            problem = backends.problem;
        }
        Ok((entries, problem))
    }

    /// The clusters of a rule's backendRefs; `problem` is the route's first problem so far.
    fn rule_backends(
        &mut self,
        r: &Item<HttpRouteSpec>,
        at: &str,
        rule: &RouteRule,
        mut problem: Option<Problem>,
    ) -> Result<RuleBackends, Problem> {
        let mut clusters = Vec::new();
        for (bi, b) in rule.backend_refs.iter().flatten().enumerate() {
            let bat = format!("{at}.backendRefs[{bi}]");
            if b.filters.as_ref().is_some_and(|f| !f.is_empty()) {
                return Err((
                    reason::UNSUPPORTED,
                    format!("{bat}.filters: per-backend filters are not supported"),
                ));
            }
            match self.backend_ref(r, &bat, b) {
                Ok(c) => {
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
        Ok(RuleBackends { clusters, problem })
    }

    /// One backendRef (an XBackend or a Service) as a weighted cluster.
    fn backend_ref(
        &mut self,
        r: &Item<HttpRouteSpec>,
        bat: &str,
        b: &HttpBackendRef,
    ) -> Result<WeightedCluster, Problem> {
        let group = opt(&b.group);
        let kind = b.kind.as_deref().unwrap_or("Service");
        let ns = b
            .namespace
            .clone()
            .unwrap_or_else(|| r.meta.namespace.clone());
        let name = opt(&b.name).to_string();
        let weight = u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
        let xbackend = BackendKind::of(group, kind);
        let to_kind = if xbackend.is_some() {
            "XBackend"
        } else if is_core(group) && kind == "Service" {
            "Service"
        } else {
            return Err((
                "InvalidKind",
                format!(
                    "{bat}: backend kind {group}/{kind} is not supported (XBackend of group {GATEWAY_X_GROUP} or {AGENTIC_GROUP}, or Service)"
                ),
            ));
        };
        let to_group = if to_kind == "XBackend" { group } else { "" };
        if !permitted(
            self.m,
            (GATEWAY_GROUP, "HTTPRoute", &r.meta.namespace),
            (to_group, to_kind, &ns, &name),
        ) {
            return Err((reason::REF_NOT_PERMITTED, format!("{bat}: no ReferenceGrant in namespace {ns} allows HTTPRoutes from {} to refer to {to_kind} {name}", r.meta.namespace)));
        }
        let Some(xbackend) = xbackend else {
            // A Service.
            let port = u16::try_from(b.port.unwrap_or_default()).unwrap_or_default();
            // The Service an XBackend describes (`spec.mcp.serviceName` and `port`) is that
            // XBackend: platforms that route only to Services (Envoy Gateway) still reach it.
            let described: Vec<&BackendModel> = self
                .topo
                .backends
                .iter()
                .filter(|m| {
                    m.namespace == ns
                        && m.service_name.as_deref() == Some(name.as_str())
                        && m.port == port
                })
                .collect();
            match described.as_slice() {
                [bm] => {
                    return Ok(WeightedCluster {
                        cluster: bm.cluster.clone(),
                        weight,
                        backend: Some(bm.id.clone()),
                    })
                }
                [] => {}
                many => {
                    let ids: Vec<String> = many.iter().map(|m| m.id.to_string()).collect();
                    return Err((
                        "BackendNotFound",
                        format!(
                            "{bat}: Service {ns}/{name} port {port} is described by more than one XBackend ({}): which policies apply is ambiguous; keep one, or refer to the XBackend itself",
                            ids.join(", ")
                        ),
                    ));
                }
            }
            let cluster = format!("service/{ns}/{name}:{port}");
            if !self.topo.services.iter().any(|s| s.cluster == cluster) {
                self.topo.services.push(ServiceModel {
                    cluster: cluster.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    port,
                });
            }
            return Ok(WeightedCluster {
                cluster,
                weight,
                backend: None,
            });
        };
        let bm = match self.resolve_backend(xbackend, &ns, &name) {
            Ok(bm) => bm,
            Err(miss) => {
                return Err((
                    "BackendNotFound",
                    format!(
                        "{bat}: XBackend {ns}/{name} not found{}",
                        miss.explain(xbackend)
                    ),
                ))
            }
        };
        if let Some(p) = b.port.filter(|p| i64::from(bm.port) != *p) {
            return Err((
                reason::UNSUPPORTED,
                format!(
                    "{bat}.port {p} differs from XBackend {ns}/{name}'s port {}",
                    bm.port
                ),
            ));
        }
        let to = WeightedCluster {
            cluster: bm.cluster.clone(),
            weight,
            backend: Some(bm.id.clone()),
        };
        let id = r.id();
        if !self.topo.xbackend_refs.contains(&id) {
            self.topo.xbackend_refs.push(id);
        }
        Ok(to)
    }

    /// The entries of one rule, one per match.
    #[allow(clippy::too_many_arguments)]
    fn rule_entries(
        &mut self,
        r: &Item<HttpRouteSpec>,
        rank: usize,
        ri: usize,
        rule: &RouteRule,
        f: &RuleFilters,
        backends: &RuleBackends,
        entries: &mut Vec<RouteEntry>,
    ) -> Result<(), Problem> {
        let id = r.id();
        let at = format!("spec.rules[{ri}]");
        let timeout_ms = rule_timeout_ms(rule);
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
            let action = route_action(f, backends, &path, timeout_ms);
            if let RouteAction::Forward {
                clusters,
                path_rewrite,
                ..
            } = &action
            {
                self.check_mcp_path(&id, ri, &path_kind, &path, path_rewrite.as_ref(), clusters);
            }
            entries.push(RouteEntry {
                name: format!("{id}/rule-{ri}/match-{mi}"),
                route: id.clone(),
                rule: ri,
                rule_name: rule.name.clone(),
                hostnames: Vec::new(),
                path_kind,
                path,
                headers: value_matches(&m.headers),
                query: value_matches(&m.query_params),
                method: m.method.clone(),
                action,
                route_rank: rank,
                match_index: mi,
            });
        }
        Ok(())
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
}

/// Whether listener `lm` (of a Gateway in `gns`, specified in `spec`) takes route `r`
/// through parentRef `p`: the route's hostnames there, or why not; None when the parentRef
/// does not name the listener (sectionName, port).
fn on_listener(
    m: &Manifests,
    r: &Item<HttpRouteSpec>,
    p: &ParentRef,
    gns: &str,
    spec: &[GatewayListener],
    lm: &ListenerModel,
) -> Option<Result<Vec<String>, Problem>> {
    if p.section_name.as_ref().is_some_and(|s| s != &lm.name) {
        return None;
    }
    let spec_l = spec.iter().find(|l| opt(&l.name) == lm.name)?;
    if p.port.is_some() && p.port != spec_l.port {
        return None;
    }
    if !namespace_allowed(m, spec_l, gns, &r.meta.namespace) {
        return Some(Err((
            "NotAllowedByListeners",
            format!(
                "listener {} does not allow routes from namespace {}",
                lm.name, r.meta.namespace
            ),
        )));
    }
    let Some(hosts) = intersect_hostnames(
        lm.hostname.as_deref(),
        r.spec.hostnames.as_deref().unwrap_or_default(),
    ) else {
        return Some(Err((
            "NoMatchingListenerHostname",
            format!("no route hostname matches listener {}'s hostname", lm.name),
        )));
    };
    Some(Ok(hosts))
}

/// What a rule's filters do; an unsupported filter type fails the route.
fn rule_filters(at: &str, rule: &RouteRule) -> Result<RuleFilters, Problem> {
    let mut out = RuleFilters::default();
    for (fi, f) in rule.filters.iter().flatten().enumerate() {
        match opt(&f.kind) {
            "RequestHeaderModifier" => out.req_h = header_ops(f.request_header_modifier.as_ref()),
            "ResponseHeaderModifier" => {
                out.resp_h = header_ops(f.response_header_modifier.as_ref())
            }
            "URLRewrite" => {
                if let Some(u) = &f.url_rewrite {
                    out.host_rewrite = u.hostname.clone();
                    out.rewrite = u.path.as_ref().map(|p| {
                        (
                            opt(&p.kind).to_string(),
                            p.replace_full_path.clone(),
                            p.replace_prefix_match.clone(),
                        )
                    });
                }
            }
            "RequestRedirect" => out.redirect = f.request_redirect.clone(),
            other => {
                return Err((
                    reason::UNSUPPORTED,
                    format!("{at}.filters[{fi}]: filter type {other} is not supported"),
                ))
            }
        }
    }
    Ok(out)
}

/// A rule's timeout: the shorter of `request` and `backendRequest` (0: none).
fn rule_timeout_ms(rule: &RouteRule) -> Option<u64> {
    rule.timeouts.as_ref().and_then(|t| {
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
    })
}

/// What a match of a rule does: redirect, fail (no backend) or forward.
fn route_action(
    f: &RuleFilters,
    backends: &RuleBackends,
    path: &str,
    timeout_ms: Option<u64>,
) -> RouteAction {
    let path_rw =
        |full: &Option<String>, prefix: &Option<String>, kind: &str| -> Option<PathRewrite> {
            match kind {
                "ReplaceFullPath" => full.clone().map(PathRewrite::Full),
                _ => prefix.clone().map(|rep| PathRewrite::Prefix {
                    prefix: path.to_string(),
                    replacement: rep,
                }),
            }
        };
    if let Some(rd) = &f.redirect {
        RouteAction::Redirect {
            scheme: rd.scheme.clone(),
            hostname: rd.hostname.clone(),
            path: rd
                .path
                .as_ref()
                .and_then(|p| path_rw(&p.replace_full_path, &p.replace_prefix_match, opt(&p.kind))),
            port: rd.port.and_then(|p| u16::try_from(p).ok()),
            status: rd
                .status_code
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(302),
            response_headers: f.resp_h.clone(),
        }
    } else if backends.clusters.is_empty() {
        RouteAction::Fail {
            message: backends
                .problem
                .as_ref()
                .map(|p| p.1.clone())
                .unwrap_or_else(|| "no backend with a weight above 0".into()),
        }
    } else {
        let path_rewrite = f
            .rewrite
            .as_ref()
            .and_then(|(k, full, prefix)| path_rw(full, prefix, k));
        RouteAction::Forward {
            clusters: backends.clusters.clone(),
            host_rewrite: f.host_rewrite.clone(),
            path_rewrite,
            request_headers: f.req_h.clone(),
            response_headers: f.resp_h.clone(),
            timeout_ms,
        }
    }
}

fn value_matches(l: &Option<Vec<ValueMatch>>) -> Vec<ValueMatchModel> {
    l.iter()
        .flatten()
        .map(|h| ValueMatchModel {
            name: opt(&h.name).to_string(),
            regex: h.kind.as_deref() == Some("RegularExpression"),
            value: opt(&h.value).to_string(),
        })
        .collect()
}

/// `Gateway namespace/name` of a route's parentRef.
fn parent_name(r: &Item<HttpRouteSpec>, p: &ParentRef) -> ObjectName {
    let ns = p.namespace.as_ref().unwrap_or(&r.meta.namespace);
    ObjectName::new("Gateway", NsName::new(ns, opt(&p.name)))
}

/// Whether listener `l` of a Gateway in `gateway_ns` admits routes from `route_ns`
/// (`allowedRoutes.namespaces`).
fn namespace_allowed(m: &Manifests, l: &GatewayListener, gateway_ns: &str, route_ns: &str) -> bool {
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "All" => true,
        "Selector" => {
            let mut labels = m
                .namespaces
                .iter()
                .find(|n| n.meta.name == route_ns)
                .map(|n| n.meta.labels.clone())
                .unwrap_or_default();
            labels.insert("kubernetes.io/metadata.name".into(), route_ns.to_string());
            ns.and_then(|n| n.selector.as_ref())
                .is_some_and(|s| selector_matches(s, &labels))
        }
        _ => gateway_ns == route_ns,
    }
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
pub(crate) fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
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
