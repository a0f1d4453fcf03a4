//! `mcp-access who-can`: for an XBackend and a tool (prompt, resource URI), which callers may
//! call it, on which listeners, under which policies and rules.
//!
//! The callers that can be told apart are the sources the policies name: each SPIFFE ID
//! (ServiceAccounts through the trust domain), each class of verified token (which of the
//! named JWT sources it matches: a witness token per class, issuer by issuer) and every other
//! caller (no named source matches it: as an anonymous caller). Each is run through `explain`
//! (the filter's own request flow), authorizers assumed to allow, so the answer is the
//! engine's. What a canonical request cannot settle is said plainly: an authorizer that is
//! called, a CEL condition or `when` that is evaluated, and rules with HTTP conditions
//! (headers, paths, hosts, ports, methods) that concern the call. A SPIFFE caller on a
//! plain-HTTP listener, where no client certificate arrives, is marked as one that cannot.

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_bundle::gateway_api::{service_account_spiffe, DEFAULT_TRUST_DOMAIN};
use mcp_access_bundle::SpiffeSource;
use mcp_access_bundle::{Action, Bundle, JwtSource, Level, Policy, SourceType};
use mcp_access_engine::policy::{Engine, Mode, Policy as CompiledPolicy, TraceEvent, View};
use mcp_access_engine::request::Target;
use mcp_access_k8s::{Protocol, RouteAction, Topology};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::CliError;
use crate::explain::{self, Assumption, At, Explainer, RequestSpec, Verdict};

/// At most this many witness tokens per issuer (beyond: the answer says it is not exhaustive).
const MAX_TOKENS: usize = 256;

/// What is asked: a backend and an MCP call.
#[derive(Debug, Clone)]
pub struct Question {
    /// `namespace/name` or `name` of the XBackend.
    pub backend: String,
    pub method: String,
    pub param: Option<String>,
}

/// The answer, per listener that routes to the backend.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub backend: String,
    pub method: String,
    pub param: Option<String>,
    pub listeners: Vec<ListenerAnswer>,
    /// Where the answer is not exhaustive, why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerAnswer {
    /// `namespace/gateway/listener`.
    pub listener: String,
    /// Where policies on HTTPRoutes make routes to the backend differ: the routes (HTTPRoute
    /// rules) this answer is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
    pub callers: Vec<CallerAnswer>,
    /// Rules with conditions on the request that a caller alone does not settle.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallerAnswer {
    /// `spiffe:<ID>`, `jwt:<claims>` or `any other caller`.
    pub caller: String,
    /// The ServiceAccount of a SPIFFE ID, or the JWT sources a token class matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `allow` or `deny`.
    pub decision: Verdict,
    /// Deny: the level and reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
    /// The policy and rule that admitted it at each level, or that denied it.
    pub by: Vec<String>,
    /// What decides at run time: authorizers called, CEL conditions evaluated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_time: Vec<String>,
    /// Why no request of this caller can arrive on the listener (a SPIFFE ID where no client
    /// certificate can): `decision` is what the policies would say, were it to arrive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot_arrive: Option<String>,
}

/// Why a SPIFFE caller cannot arrive on a plain-HTTP listener.
const NO_CLIENT_CERTIFICATE: &str = "a plain-HTTP listener receives no client certificate, so no request on it carries a SPIFFE ID (identity.spiffe.source: PeerCertificate)";

/// Answers `q` for the compiled manifests.
pub fn who_can(b: &Bundle, topo: &Topology, q: &Question) -> Result<Answer, CliError> {
    let backend = b
        .backends
        .iter()
        .find(|x| q.backend == x.name || q.backend == format!("{}/{}", x.namespace, x.name))
        .ok_or_else(|| format!("no XBackend {} in the manifests", q.backend))?;
    let backend_id = format!("{}/{}", backend.namespace, backend.name);
    let explainer = Explainer::new(b, Some(topo))?;
    let mut answer = Answer {
        backend: backend_id.clone(),
        method: q.method.clone(),
        param: q.param.clone(),
        listeners: Vec::new(),
        notes: Vec::new(),
    };
    for (gw_ns, gw, listener) in listeners_to(topo, &backend_id) {
        let at = (gw_ns.as_str(), gw.as_str(), listener.as_str());
        for (route, through) in route_groups((b, explainer.engine()), topo, at, &backend_id) {
            let at = (gw_ns.as_str(), gw.as_str(), listener.as_str());
            let out = answer_at(
                &explainer,
                (b, topo),
                q,
                at,
                (&backend_id, route, through),
                &mut answer.notes,
            )?;
            answer.listeners.push(out);
        }
    }
    if answer.listeners.is_empty() {
        answer.notes.push(format!(
            "no listener routes to XBackend {backend_id}: no caller reaches it"
        ));
    }
    if let (Some(pins), "tools/call", Some(tool)) =
        (&backend.pins, q.method.as_str(), q.param.as_deref())
    {
        if pins.tools.iter().any(|t| t.name == tool) {
            answer.notes.push(format!(
                "ToolPin {} pins tool {tool:?}: those allowed may call it while the server lists it as pinned; a running filter refuses it once a listing shows it drifted",
                pins.source
            ));
        }
    }
    Ok(answer)
}

/// The answer on one listener, through the Envoy route `route` where routes differ.
fn answer_at(
    explainer: &Explainer,
    (b, topo): (&Bundle, &Topology),
    q: &Question,
    (gw_ns, gw, listener): (&str, &str, &str),
    (backend_id, route, through): (&str, Option<String>, Option<String>),
    notes: &mut Vec<String>,
) -> Result<ListenerAnswer, CliError> {
    let engine = explainer.engine();
    let target = engine.target_at(
        &format!("{gw_ns}/{gw}/{listener}"),
        backend_id,
        route.as_deref(),
    );
    let on_path = path_policies(b, engine, target);
    let (callers, complete) = candidates(b, engine, &on_path);
    if !complete {
        notes.push(format!(
            "{gw_ns}/{gw}/{listener}: more than {MAX_TOKENS} classes of tokens for one issuer: those listed are not all"
        ));
    }
    let mut out = ListenerAnswer {
        listener: format!("{gw_ns}/{gw}/{listener}"),
        through,
        callers: Vec::new(),
        conditions: conditions(&on_path, &q.method, q.param.as_deref()),
    };
    // The SPIFFE ID comes from the client certificate, which a plain-HTTP listener never gets.
    let plain_http = topo
        .gateways
        .iter()
        .filter(|g| g.namespace == gw_ns && g.name == gw)
        .flat_map(|g| g.listeners.iter())
        .any(|l| l.name == listener && l.protocol == Protocol::Http);
    let no_spiffe = plain_http && b.identity.spiffe.source == SpiffeSource::PeerCertificate;
    for c in callers {
        let spec = RequestSpec {
            gateway: Some(format!("{gw_ns}/{gw}")),
            listener: Some(listener.to_string()),
            backend: Some(backend_id.to_string()),
            route: route.clone(),
            mcp_method: Some(q.method.clone()),
            param: q.param.clone(),
            spiffe: c.spiffe.clone(),
            jwt_claims: c.jwt.clone(),
            assume: BTreeMap::from([("*".to_string(), Assumption::Allow)]),
            ..RequestSpec::default()
        };
        let e = explainer.explain(&spec)?;
        let mut answer = answer_of(&c, &e);
        if no_spiffe && c.spiffe.is_some() {
            answer.cannot_arrive = Some(NO_CLIENT_CERTIFICATE.into());
        }
        out.callers.push(answer);
    }
    Ok(out)
}

/// The routes on a listener to `backend`, grouped by the route-scoped policies the engine
/// attaches through them (docs/semantics.md §1.6): (an Envoy route of the group, its
/// HTTPRoute rules). One group of no route when no policy of the backend is route-scoped.
fn route_groups(
    (b, engine): (&Bundle, &Engine),
    topo: &Topology,
    (gns, g, l): (&str, &str, &str),
    backend: &str,
) -> Vec<(Option<String>, Option<String>)> {
    let scoped: Vec<&str> = engine
        .backends
        .iter()
        .filter(|x| x.id == backend)
        .flat_map(|x| &x.route_scoped)
        .filter_map(|(pid, _)| engine.policies.get(*pid))
        .map(|p| p.id.as_str())
        .collect();
    if scoped.is_empty() {
        return vec![(None, None)];
    }
    // Groups are keyed by the bundle's order of its Backend-level policies.
    let level: Vec<String> = b
        .policies
        .iter()
        .filter(|p| p.level == Level::Backend)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    let listener = format!("{gns}/{g}/{l}");
    let entries = topo
        .gateways
        .iter()
        .filter(|x| x.namespace == gns && x.name == g)
        .flat_map(|x| x.listeners.iter().filter(|x| x.name == l))
        .flat_map(|x| x.routes.iter())
        .filter(|r| match &r.action {
            RouteAction::Forward { clusters, .. } => clusters
                .iter()
                .any(|c| c.backend.as_ref().is_some_and(|b| b.is(backend))),
            _ => false,
        });
    let mut groups: BTreeMap<Vec<usize>, (String, BTreeSet<String>)> = BTreeMap::new();
    for r in entries {
        let target = engine.target_at(&listener, backend, Some(&r.name));
        let through: Vec<&str> = engine
            .attached(View::Enforced, target)
            .into_iter()
            .map(|(_, p)| p.id.as_str())
            .filter(|id| scoped.contains(id))
            .collect();
        let key: Vec<usize> = (0..level.len())
            .filter(|i| {
                level
                    .get(*i)
                    .is_some_and(|id| through.contains(&id.as_str()))
            })
            .collect();
        let rule = match &r.rule_name {
            Some(n) => format!("HTTPRoute {} rule {} ({n})", r.route, r.rule),
            None => format!("HTTPRoute {} rule {}", r.route, r.rule),
        };
        groups
            .entry(key)
            .or_insert_with(|| (r.name.clone(), BTreeSet::new()))
            .1
            .insert(rule);
    }
    groups
        .into_values()
        .map(|(name, rules)| {
            let rules: Vec<String> = rules.into_iter().collect();
            (Some(name), Some(rules.join(", ")))
        })
        .collect()
}

/// The Gateway listeners whose routes lead to `backend`.
fn listeners_to(topo: &Topology, backend: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for g in &topo.gateways {
        for l in &g.listeners {
            let reaches = l.routes.iter().any(|r| match &r.action {
                RouteAction::Forward { clusters, .. } => clusters
                    .iter()
                    .any(|c| c.backend.as_ref().is_some_and(|b| b.is(backend))),
                _ => false,
            });
            let key = (g.namespace.clone(), g.name.clone(), l.name.clone());
            if reaches && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// A policy on the path: as the bundle has it, and as the engine compiled it.
type OnPath<'a> = (&'a Policy, &'a CompiledPolicy);

/// The enforced policies a request to `target` meets, both levels, in the bundle's order:
/// those the engine attaches there.
fn path_policies<'a>(b: &'a Bundle, engine: &'a Engine, target: Target) -> Vec<OnPath<'a>> {
    let attached = engine.attached(View::Enforced, target);
    b.policies
        .iter()
        .filter_map(|p| {
            let id = format!("{}/{}", p.namespace, p.name);
            let (_, c) = attached.iter().find(|(_, c)| c.id == id)?;
            Some((p, *c))
        })
        .collect()
}

/// One caller to ask about.
struct Candidate {
    spiffe: Option<String>,
    jwt: Option<Value>,
    detail: Option<String>,
}

/// The callers the policies tell apart (see the module); false when a token enumeration was
/// cut short.
fn candidates(b: &Bundle, engine: &Engine, on_path: &[OnPath]) -> (Vec<Candidate>, bool) {
    let td = b
        .identity
        .trust_domain
        .clone()
        .unwrap_or_else(|| DEFAULT_TRUST_DOMAIN.into());
    let mut spiffe: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut jwts: BTreeMap<String, Vec<JwtSource>> = BTreeMap::new();
    for (p, _) in on_path {
        for r in p.rules.iter().flatten() {
            let Some(s) = &r.source else { continue };
            match s.kind {
                SourceType::Spiffe => {
                    if let Some(id) = &s.spiffe {
                        spiffe.entry(id.clone()).or_default();
                    }
                }
                SourceType::ServiceAccount => {
                    if let Some(sa) = &s.service_account {
                        let ns = sa.namespace.as_deref().unwrap_or(&p.namespace);
                        spiffe.insert(
                            service_account_spiffe(&td, ns, &sa.name),
                            Some(format!("ServiceAccount {ns}/{}", sa.name)),
                        );
                    }
                }
                SourceType::Jwt => {
                    if let Some(j) = &s.jwt {
                        let list = jwts.entry(j.issuer.clone()).or_default();
                        if !list.contains(j) {
                            list.push(j.clone());
                        }
                    }
                }
                SourceType::Any => {}
            }
        }
    }
    let mut out: Vec<Candidate> = spiffe
        .into_iter()
        .map(|(id, detail)| Candidate {
            spiffe: Some(id),
            jwt: None,
            detail,
        })
        .collect();
    let mut complete = true;
    for (issuer, sources) in jwts {
        let (tokens, all) = token_classes(engine, &issuer, &sources);
        complete &= all;
        out.extend(tokens);
    }
    out.push(Candidate {
        spiffe: None,
        jwt: None,
        detail: Some("no named source matches it (or no identity at all)".into()),
    });
    (out, complete)
}

/// A witness token for each class of tokens of `issuer` (which of `sources` it matches):
/// every subject named or none, and for each claim every combination of the values the
/// sources accept (and a value none of them names).
fn token_classes(engine: &Engine, issuer: &str, sources: &[JwtSource]) -> (Vec<Candidate>, bool) {
    let mut subjects: Vec<Option<String>> = vec![None];
    let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        if let Some(sub) = &s.subject {
            if !subjects.contains(&Some(sub.clone())) {
                subjects.push(Some(sub.clone()));
            }
        }
        for c in &s.claims {
            values
                .entry(c.name.clone())
                .or_default()
                .extend(c.values.iter().cloned());
        }
    }
    // Per claim: its possible values as a token carries them (absent, or a list of some of the
    // named values); a list with several is needed where sources ask for different ones.
    let per_claim: Vec<(String, Vec<Option<Vec<String>>>)> = values
        .into_iter()
        .map(|(name, vals)| {
            let vals: Vec<String> = vals.into_iter().collect();
            let mut options = vec![None];
            for mask in 1u32..(1u32 << vals.len().min(8)) {
                let picked = vals
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, v)| v.clone())
                    .collect();
                options.push(Some(picked));
            }
            (name, options)
        })
        .collect();
    let mut seen: BTreeSet<Vec<usize>> = BTreeSet::new();
    let mut out = Vec::new();
    let mut complete = true;
    let mut claims_at = vec![0usize; per_claim.len()];
    'all: for sub in &subjects {
        loop {
            let mut token = Map::new();
            token.insert("iss".into(), json!(issuer));
            if let Some(s) = sub {
                token.insert("sub".into(), json!(s));
            }
            for ((name, options), at) in per_claim.iter().zip(&claims_at) {
                if let Some(Some(v)) = options.get(*at) {
                    insert_claim(&mut token, name, json!(v));
                }
            }
            let token = Value::Object(token);
            let matched: Vec<usize> = sources
                .iter()
                .enumerate()
                .filter(|(_, s)| matches(engine, &token, s))
                .map(|(i, _)| i)
                .collect();
            if !matched.is_empty() && seen.insert(matched.clone()) {
                if out.len() >= MAX_TOKENS {
                    complete = false;
                    break 'all;
                }
                let names: Vec<String> = matched
                    .iter()
                    .filter_map(|i| sources.get(*i))
                    .map(describe_source)
                    .collect();
                out.push(Candidate {
                    spiffe: None,
                    jwt: Some(token),
                    detail: Some(format!("a token matching {}", names.join(" and "))),
                });
            }
            // The next combination of claim values.
            let mut i = 0;
            while let Some((at, (_, options))) = claims_at.iter_mut().zip(&per_claim).nth(i) {
                *at += 1;
                if *at < options.len() {
                    break;
                }
                *at = 0;
                i += 1;
            }
            if i >= per_claim.len() {
                break;
            }
        }
    }
    (out, complete)
}

/// Sets claim `name` (dotted: nested) of a token.
fn insert_claim(token: &mut Map<String, Value>, name: &str, v: Value) {
    match name.split_once('.') {
        None => {
            token.insert(name.into(), v);
        }
        Some((head, rest)) => {
            let inner = token
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = inner {
                insert_claim(m, rest, v);
            }
        }
    }
}

/// Whether a token matches a JWT source as an Allow rule reads it: the engine's reading.
fn matches(engine: &Engine, token: &Value, s: &JwtSource) -> bool {
    engine.token_matches(token, s, Mode::Admit)
}

fn describe_source(s: &JwtSource) -> String {
    let mut parts = vec![format!("iss {}", s.issuer)];
    if let Some(sub) = &s.subject {
        parts.push(format!("sub {sub}"));
    }
    for c in &s.claims {
        parts.push(format!("{} in [{}]", c.name, c.values.join(", ")));
    }
    format!("{{{}}}", parts.join(", "))
}

/// The rules on the path that concern the call and have conditions a caller alone does not
/// settle (HTTP attributes, CEL, `when`), and the ExternalAuth policies that may select it.
fn conditions(on_path: &[OnPath], method: &str, param: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for (p, compiled) in on_path {
        let id = p.written_name();
        let level = p.level.as_str();
        if p.action == Action::ExternalAuth {
            out.push(format!(
                "{level} {id}: its authorizer decides at run time (answers here assumed allow)"
            ));
        }
        if !p.when.is_empty() {
            out.push(format!(
                "{level} {id}: applies only when {}",
                p.when.join(" and ")
            ));
        }
        for (i, r) in p.rules.iter().flatten().enumerate() {
            if !compiled.rule_concerns(i, method, param) {
                continue;
            }
            let mut what = Vec::new();
            if let Some(a) = &r.authorization {
                for (name, set) in [
                    ("HTTP methods", !a.methods.is_empty()),
                    ("paths", !a.paths.is_empty()),
                    ("hosts", !a.hosts.is_empty()),
                    ("ports", !a.ports.is_empty()),
                ] {
                    if set {
                        what.push(name.to_string());
                    }
                }
                for h in &a.headers {
                    what.push(format!("header {}", h.name));
                }
                if let Some(c) = &a.cel {
                    what.push(format!("CEL {c}"));
                }
            }
            for w in &r.when {
                what.push(format!("when {w}"));
            }
            if !what.is_empty() {
                out.push(format!(
                    "{level} {} {id} rule {}: decided at run time by {}",
                    action_name(p.action),
                    r.name,
                    what.join(", ")
                ));
            }
        }
    }
    out
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Allow => "Allow",
        Action::Deny => "Deny",
        Action::ExternalAuth => "ExternalAuth",
    }
}

fn answer_of(c: &Candidate, e: &explain::Explanation) -> CallerAnswer {
    let caller = match (&c.spiffe, &c.jwt) {
        (Some(id), _) => format!("spiffe:{id}"),
        (None, Some(t)) => format!("jwt:{t}"),
        _ => "any other caller".into(),
    };
    let mut by: Vec<String> = e
        .trace
        .iter()
        .filter(|t| t.event == TraceEvent::Admitted)
        .map(|t| format!("{} {} rule {}", t.level, s(&t.policy), s(&t.rule)))
        .collect();
    if e.decision == Verdict::Deny && (e.policy.is_some() || e.rule.is_some()) {
        by.push(format!(
            "{} {} rule {}",
            e.level.unwrap_or(At(None)),
            s(&e.policy),
            s(&e.rule)
        ));
    }
    let mut run_time: Vec<String> = e
        .calls
        .iter()
        .map(|c| {
            format!(
                "authorizer of {} ({}) decides (assumed allow here)",
                c.policy, c.level
            )
        })
        .collect();
    for cel in &e.cel {
        let at = match &cel.rule {
            Some(r) => format!("{} rule {r} {}", cel.policy, cel.field),
            None => format!("{} {}", cel.policy, cel.field),
        };
        run_time.push(format!(
            "CEL {at}: {} (here {})",
            cel.expression, cel.result
        ));
    }
    CallerAnswer {
        caller,
        detail: c.detail.clone(),
        decision: e.decision,
        denied: (e.decision == Verdict::Deny)
            .then(|| format!("at {} ({})", e.level.unwrap_or(At(None)), e.reason)),
        by,
        run_time,
        cannot_arrive: None,
    }
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("-")
}

/// The answer as text.
pub fn to_text(a: &Answer) -> String {
    let what = match &a.param {
        Some(p) => format!("{} {p}", a.method),
        None => a.method.clone(),
    };
    let mut out = format!("who can {what} on XBackend {}\n", a.backend);
    for l in &a.listeners {
        match &l.through {
            Some(t) => out.push_str(&format!("listener {} through {t}\n", l.listener)),
            None => out.push_str(&format!("listener {}\n", l.listener)),
        }
        for c in &l.callers {
            if let Some(why) = &c.cannot_arrive {
                out.push_str(&format!("  NEVER {}", c.caller));
                if let Some(d) = &c.detail {
                    out.push_str(&format!("  ({d})"));
                }
                out.push_str(&format!("\n        cannot arrive here: {why}\n"));
                continue;
            }
            let decision = match c.decision {
                Verdict::Allow => "ALLOW",
                Verdict::Deny => "DENY ",
            };
            out.push_str(&format!("  {decision} {}", c.caller));
            if let Some(d) = &c.detail {
                out.push_str(&format!("  ({d})"));
            }
            out.push('\n');
            if let Some(d) = &c.denied {
                out.push_str(&format!("        denied {d}\n"));
            }
            for b in &c.by {
                out.push_str(&format!("        by {b}\n"));
            }
            for r in &c.run_time {
                out.push_str(&format!("        run time: {r}\n"));
            }
        }
        for cnd in &l.conditions {
            out.push_str(&format!("  note: {cnd}\n"));
        }
    }
    for n in &a.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDP: &str = "https://idp.example";

    #[test]
    fn a_string_scope_claim_holds_its_elements() {
        let bundle = serde_json::json!({
            "apiVersion": "mcp-access.io/v1",
            "identity": {"jwt": {"providers": [{"issuer": IDP, "metadataKey": "idp"}]}},
            "gateways": [{"name": "gw", "listeners": [{"name": "http", "port": 8080}]}],
            "backends": [{"name": "tools", "routeNames": ["r"]}],
            "policies": [{"name": "p", "level": "Backend", "targets": [{"name": "tools"}],
                "action": "Allow", "seniority": 1, "rules": [{"name": "writers", "source":
                {"type": "JWT", "jwt": {"issuer": IDP, "claims": [{"name": "scope", "values": ["write"]}]}}}]}]
        });
        let b = mcp_access_bundle::parse_bundle(bundle.to_string().as_bytes())
            .map(|b| b.into_inner())
            .unwrap_or_else(|e| panic!("{e}"));
        let explainer = Explainer::new(&b, None).unwrap_or_else(|e| panic!("{e}"));
        let source = JwtSource {
            issuer: IDP.into(),
            subject: None,
            claims: vec![mcp_access_bundle::ClaimMatch {
                name: "scope".into(),
                values: vec!["write".into()],
            }],
        };
        let token = |scope: Value| json!({"iss": IDP, "sub": "u1", "scope": scope});
        let engine = explainer.engine();
        assert!(matches(engine, &token(json!("read write")), &source));
        assert!(matches(engine, &token(json!(["write"])), &source));
        assert!(!matches(engine, &token(json!("read writer")), &source));
        assert!(!matches(
            engine,
            &json!({"iss": "https://other", "scope": "write"}),
            &source
        ));
    }
}
