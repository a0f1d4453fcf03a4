//! `explain`: one request run through the filter's own request flow ([`RequestFlow`]):
//! transport checks, JSON-RPC parsing, header/body agreement, policy evaluation with
//! authorizer callouts answered from `--assume`, and the response the client gets.

use std::collections::BTreeMap;

use mcp_access_bundle::gateway_api::{
    canonical_host, full_regex, path_prefix_matches, service_account_spiffe, HostPattern,
    DEFAULT_TRUST_DOMAIN,
};
use mcp_access_bundle::{mcp_methods, Action, Bundle, Level, SpiffeSource, UnknownBackend};
use mcp_access_engine::answer::{LocalResponse, Why};
use mcp_access_engine::facts::{Fact, HostFacts};
use mcp_access_engine::flow::{drive, HeadersInput, Next, Outcome, Reply, RequestFlow};
use mcp_access_engine::policy::{Engine, Mode, Reason};
use mcp_access_engine::request::{McpOp, Request};
use mcp_access_k8s::{PathMatchKind, RouteAction, RouteEntry, Topology};
use serde::Serialize;

/// An assumed authorizer outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assumption {
    Allow,
    Deny(u16),
    Error,
}

impl Assumption {
    fn as_text(&self) -> String {
        match self {
            Assumption::Allow => "allow".into(),
            Assumption::Deny(s) => format!("deny:{s}"),
            Assumption::Error => "error".into(),
        }
    }

    /// The authorizer's answer: 200, the denial status, or no response at all.
    fn status(&self) -> Option<u16> {
        match self {
            Assumption::Allow => Some(200),
            Assumption::Deny(s) => Some(*s),
            Assumption::Error => None,
        }
    }
}

/// Parses `allow`, `deny`, `deny:401`, `error`. A denial status is 300-499: the filter takes
/// any other status as an allow (2xx) or an error.
pub fn parse_assumption(s: &str) -> Result<Assumption, String> {
    match s {
        "allow" => Ok(Assumption::Allow),
        "deny" => Ok(Assumption::Deny(403)),
        "error" => Ok(Assumption::Error),
        _ => match s.strip_prefix("deny:") {
            Some(code) => code
                .parse::<u16>()
                .ok()
                .filter(|c| (300..=499).contains(c))
                .map(Assumption::Deny)
                .ok_or_else(|| {
                    format!("`{s}`: a denial status is 300-499 (the filter takes 2xx as allow, others as an error)")
                }),
            None => Err(format!("`{s}`: expected allow, deny[:STATUS] or error")),
        },
    }
}

/// The request to explain, as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct RequestSpec {
    /// `namespace/name` or `name` of the Gateway.
    pub gateway: Option<String>,
    pub listener: Option<String>,
    pub port: Option<u16>,
    pub host: Option<String>,
    pub path: Option<String>,
    pub method: Option<String>,
    pub headers: Vec<(String, String)>,
    /// `namespace/name` or `name` of the XBackend.
    pub backend: Option<String>,
    /// An Envoy route name, as an alternative to matching path and headers.
    pub route: Option<String>,
    pub spiffe: Option<String>,
    /// `namespace/name` of a ServiceAccount.
    pub service_account: Option<String>,
    pub mcp_method: Option<String>,
    /// Tool / prompt name or resource URI.
    pub param: Option<String>,
    /// The request body, sent as it is (else built from `mcp_method` and `param`).
    pub body: Option<String>,
    /// Authorizer outcomes by policy (`ns/name` or `name`), authorizer name, or `*`.
    pub assume: BTreeMap<String, Assumption>,
    /// The caller's verified JWT claims (a JSON object with `iss`, `sub`, ...), as if Envoy's
    /// `jwt_authn` had verified that token.
    pub jwt_claims: Option<serde_json::Value>,
}

/// The result: what the filter (and Envoy) did with the request.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub request: RequestView,
    /// `namespace/gateway/listener` the filter resolved.
    pub(crate) listener: Option<String>,
    /// `namespace/name` of the XBackend the filter resolved.
    pub(crate) backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What `--assume` keys naming policies that were not accepted amount to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<String>,
    pub calls: Vec<CallView>,
    pub trace: Vec<TraceView>,
    /// Each CEL condition evaluated: its result or error, and the variables it read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cel: Vec<CelView>,
    /// `allow`: the request goes upstream; `deny`: the client gets [`Explanation::response`].
    pub decision: &'static str,
    /// Who answered.
    pub stage: Stage,
    /// Deny only: `gateway`, `backend` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<&'static str>,
    /// `allowed`, the filter's denial or rejection reason, or `no_route` / `route_redirect` /
    /// `route_error` when Envoy answers after the filter let the request on.
    pub reason: &'static str,
    pub policy: Option<String>,
    /// Where the deciding policy's rules came from (a defaults/overrides block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Deny: the exact response the client gets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<ResponseView>,
    /// Allow: the headers the filter sets on the upstream request (later replaces earlier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_headers: Option<Vec<HeaderView>>,
}

/// Which part of the path answered the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    /// The filter's transport checks (encoding, media type, size, JSON-RPC, header/body, path).
    Transport,
    /// The filter could not resolve the listener or the backend.
    Resolve,
    /// The filter's policy evaluation.
    Policy,
    /// Envoy's router, after the filter let the request on (no route, redirect, direct 500).
    Router,
}

/// The request as the filter saw it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    /// `namespace/gateway/listener` chosen from the command line (None: by port only).
    pub(crate) listener: Option<String>,
    pub(crate) port: u16,
    pub(crate) method: String,
    pub(crate) authority: String,
    pub(crate) path: String,
    pub(crate) caller: Option<String>,
    /// None: not (or not yet) an MCP message.
    pub mcp: Option<McpView>,
    pub(crate) route: Option<String>,
    pub(crate) cluster: Option<String>,
    /// The request body sent (None: no body).
    pub(crate) body: Option<String>,
}

/// The MCP meaning of the request.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum McpView {
    Call {
        method: String,
        param: Option<String>,
    },
    Other(&'static str),
}

/// One authorizer callout, answered from `--assume`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallView {
    pub(crate) level: String,
    pub(crate) policy: String,
    pub(crate) authorizer: String,
    pub cluster: String,
    pub(crate) assumed: String,
    /// Whether an `--assume` named it (else allow was assumed).
    pub given: bool,
}

/// One line of the filter's decision trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceView {
    pub level: &'static str,
    pub step: &'static str,
    pub(crate) policy: Option<String>,
    pub rule: Option<String>,
    pub outcome: String,
}

/// One evaluated CEL condition.
#[derive(Debug, Clone, Serialize)]
pub struct CelView {
    pub policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `when[0]`, `authorization.cel`.
    pub field: String,
    pub expression: String,
    /// `true`, `false`, or `error: ...` (an error counts against the caller).
    pub result: String,
    /// Variable -> value read (or `<why it has none>`).
    pub reads: BTreeMap<String, String>,
}

/// A response the client gets.
#[derive(Debug, Clone, Serialize)]
pub struct ResponseView {
    pub status: u16,
    pub headers: Vec<HeaderView>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
}

/// A header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeaderView {
    pub name: String,
    pub value: String,
}

fn edit_views(h: &[mcp_access_engine::policy::HeaderEdit]) -> Vec<HeaderView> {
    h.iter()
        .map(|e| HeaderView {
            name: e.name.clone(),
            value: e.value.clone(),
        })
        .collect()
}

fn header_views(h: &[(String, String)]) -> Vec<HeaderView> {
    h.iter()
        .map(|(name, value)| HeaderView {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

impl From<&LocalResponse> for ResponseView {
    fn from(r: &LocalResponse) -> Self {
        ResponseView {
            status: r.status,
            headers: header_views(&r.headers),
            body: String::from_utf8_lossy(&r.body).into_owned(),
        }
    }
}

/// The `:authority` a client sends: `host` as given when it has a port, else with the
/// listener's port unless that is HTTP's or HTTPS's default (as clients write it). CEL's
/// `request.host` reads it as received (port included); rules and `request.hostname` read
/// the canonical host.
fn client_authority(host: &str, port: u16) -> String {
    let after_v6 = host
        .rfind(']')
        .and_then(|i| host.get(i + 1..))
        .unwrap_or(host);
    let has_port = after_v6
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (has_port, port) {
        (true, _) | (false, 80 | 443) => host.to_string(),
        (false, _) => format!("{host}:{port}"),
    }
}

fn pick_listener(
    b: &Bundle,
    spec: &RequestSpec,
) -> Result<(String, String, u16, Option<String>), String> {
    let mut all = Vec::new();
    for g in &b.gateways {
        for l in &g.listeners {
            all.push((
                format!("{}/{}", g.namespace, g.name),
                g.name.clone(),
                l.name.clone(),
                l.port,
                l.hostname.clone(),
            ));
        }
    }
    let chosen: Vec<_> = all
        .iter()
        .filter(|(id, name, l, port, _)| {
            spec.gateway.as_ref().is_none_or(|g| g == id || g == name)
                && spec.listener.as_ref().is_none_or(|x| x == l)
                && spec.port.is_none_or(|p| p == *port)
        })
        .collect();
    match chosen.as_slice() {
        [(id, _, l, port, host)] => Ok((id.clone(), l.clone(), *port, host.clone())),
        [] if spec.port.is_some() && spec.gateway.is_none() && spec.listener.is_none() => Ok((
            String::new(),
            String::new(),
            spec.port.unwrap_or_default(),
            None,
        )),
        _ => {
            let names: Vec<String> = all
                .iter()
                .map(|(id, _, l, p, _)| format!("{id} listener {l} (port {p})"))
                .collect();
            Err(format!(
                "say which listener the request arrives on (--gateway, --listener or --port); the bundle has: {}",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ))
        }
    }
}

fn path_matches(e: &RouteEntry, path: &str) -> bool {
    let p = path.split(['?', '#']).next().unwrap_or(path);
    match e.path_kind {
        PathMatchKind::Exact => p == e.path,
        PathMatchKind::Prefix => path_prefix_matches(&e.path, p),
        PathMatchKind::Regex => full_regex(&e.path).is_ok_and(|r| r.is_match(p)),
    }
}

fn value_ok(regex: bool, pattern: &str, v: &str) -> bool {
    if regex {
        full_regex(pattern).is_ok_and(|r| r.is_match(v))
    } else {
        pattern == v
    }
}

fn host_ok(patterns: &[String], host: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| HostPattern::new(p).matches(host))
}

/// The route Envoy would pick for the request on a listener (Gateway API precedence).
pub(crate) fn match_route<'a>(
    topo: &'a Topology,
    gateway: &str,
    listener: &str,
    req: &Request,
) -> Option<&'a RouteEntry> {
    let g = topo
        .gateways
        .iter()
        .find(|g| format!("{}/{}", g.namespace, g.name) == gateway)?;
    let l = g.listeners.iter().find(|l| l.name == listener)?;
    let host = req.host.clone();
    let query: Vec<(String, String)> = req
        .path
        .split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let candidates = l.routes.iter().filter(|e| host_ok(&e.hostnames, &host));
    // Routes for this exact host first, as Envoy's virtual host choice does.
    let mut specific: Vec<&RouteEntry> = candidates
        .clone()
        .filter(|e| e.hostnames.iter().any(|h| h == &host))
        .collect();
    let rest: Vec<&RouteEntry> = candidates
        .filter(|e| !e.hostnames.iter().any(|h| h == &host))
        .collect();
    specific.extend(rest);
    let mut ordered = specific;
    ordered.sort_by(|a, b| {
        let ka = !a.hostnames.iter().any(|h| h == &host);
        let kb = !b.hostnames.iter().any(|h| h == &host);
        ka.cmp(&kb).then_with(|| mcp_access_k8s::precedence(a, b))
    });
    ordered.into_iter().find(|e| {
        path_matches(e, &req.canonical_path)
            && e.method.as_ref().is_none_or(|m| m == &req.method)
            && e.headers.iter().all(|h| {
                req.header(&h.name.to_ascii_lowercase())
                    .is_some_and(|v| value_ok(h.regex, &h.value, v))
            })
            && e.query.iter().all(|q| {
                query
                    .iter()
                    .any(|(k, v)| k == &q.name && value_ok(q.regex, &q.value, v))
            })
    })
}

/// The host facts of the request: what Envoy would report for it.
struct SpecFacts {
    port: u16,
    route: Option<String>,
    cluster: Option<String>,
}

impl HostFacts for SpecFacts {
    fn read(&self, fact: Fact) -> Option<Vec<u8>> {
        let text = |s: &Option<String>| s.clone().map(String::into_bytes);
        match fact {
            Fact::RouteName => text(&self.route),
            Fact::ClusterName => text(&self.cluster),
            Fact::DestinationPort => Some(i64::from(self.port).to_le_bytes().to_vec()),
            // Now, as Envoy would report the request's arrival.
            Fact::RequestTime => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| i64::try_from(d.as_nanos()).ok())
                .map(|n| n.to_le_bytes().to_vec()),
            // The caller is set from --spiffe / --service-account: it stands for a peer
            // certificate with exactly that one URI SAN.
            // The connection facts gRPC authorizers are told have no `explain` flag.
            _ => None,
        }
    }
}

/// `namespace/name` of the Gateway policy whose defaults/overrides block a bundle policy was
/// derived from.
fn block_policy(p: &mcp_access_bundle::Policy) -> Option<&str> {
    p.origin
        .as_ref()
        .filter(|o| o.block.is_some())
        .and_then(|o| o.policy.split_once(' '))
        .map(|(_, id)| id)
}

/// Whether `key` (`namespace/name` or `name`) names `id` (`namespace/name`).
fn names(key: &str, id: &str) -> bool {
    key == id || id.split_once('/').is_some_and(|(_, n)| n == key)
}

/// Every `--assume` key must name an ExternalAuth policy (`namespace/name` or `name`; a
/// Gateway policy whose block derived it), an authorizer, or be `*`. A key naming a policy
/// that was not accepted is no error: the note says how it is enforced.
fn check_assumptions(
    bundle: &Bundle,
    assume: &BTreeMap<String, Assumption>,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for key in assume.keys() {
        if key == "*" || bundle.authorizers.iter().any(|a| &a.name == key) {
            continue;
        }
        let named: Vec<_> = bundle
            .policies
            .iter()
            .filter(|p| {
                names(key, &format!("{}/{}", p.namespace, p.name))
                    || block_policy(p).is_some_and(|id| names(key, id))
            })
            .collect();
        let standins: Vec<_> = bundle
            .policies
            .iter()
            .filter(|p| {
                p.not_accepted.is_some()
                    && p.name
                        .strip_suffix(".not-accepted")
                        .is_some_and(|n| names(key, &format!("{}/{n}", p.namespace)))
            })
            .collect();
        if named.is_empty() && !standins.is_empty() {
            for p in standins {
                let does = if p.action == Action::Allow {
                    "admits nothing"
                } else {
                    "denies the requests the policy would have selected"
                };
                notes.push(format!(
                    "--assume {key}: policy {}/{} is not accepted ({}) and is enforced fail-closed: its stand-in {} {does}; no authorizer is called",
                    p.namespace,
                    p.name.trim_end_matches(".not-accepted"),
                    p.not_accepted.as_deref().unwrap_or_default(),
                    p.name
                ));
            }
            continue;
        }
        if named.is_empty() {
            return Err(format!(
                "--assume {key}: no policy or authorizer of that name in the bundle"
            ));
        }
        if !named.iter().any(|p| p.action == Action::ExternalAuth) {
            return Err(format!(
                "--assume {key}: that policy calls no authorizer (only ExternalAuth policies do)"
            ));
        }
    }
    Ok(notes)
}

/// The `--assume` answer for a call of `policy` (`namespace/name`) to `authorizer`: by the
/// policy's name (or that of the Gateway policy whose block derived it), the authorizer's,
/// else `*`; None when none is given (the call is then allowed).
fn assumption<'a>(
    bundle: &Bundle,
    assume: &'a BTreeMap<String, Assumption>,
    policy: &str,
    authorizer: &str,
) -> Option<&'a Assumption> {
    let short = policy.split_once('/').map_or("", |x| x.1);
    // A policy derived from a Gateway policy's block answers to its name too.
    let block = bundle
        .policies
        .iter()
        .find(|p| format!("{}/{}", p.namespace, p.name) == policy)
        .and_then(block_policy)
        .unwrap_or_default();
    let block_short = block.split_once('/').map_or("", |x| x.1);
    [policy, short, block, block_short, authorizer]
        .iter()
        .filter(|k| !k.is_empty())
        .chain(&["*"])
        .find_map(|k| assume.get(*k))
}

/// The JSON-RPC body for `--mcp-method` (and its tool, prompt or URI), as a client writes it.
fn body_for(method: &str, param: Option<&str>) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let id = if method.starts_with("notifications/") {
        ""
    } else {
        "\"id\":1,"
    };
    let params = match (param, mcp_methods::param_of(method)) {
        (Some(p), Some(key)) => format!("{{{}:{}}}", text(key.key()), text(p)),
        _ => "{}".into(),
    };
    format!(
        "{{\"jsonrpc\":\"2.0\",{id}\"method\":{},\"params\":{params}}}",
        text(method)
    )
}

/// What Envoy's router does with a request the filter let on, when it does not forward it.
enum RouterAnswer {
    NoRoute,
    Redirect(u16),
    Fail(String),
}

/// Runs the request through the filter's request flow.
pub fn explain(
    bundle: &Bundle,
    topo: Option<&Topology>,
    spec: &RequestSpec,
) -> Result<Explanation, String> {
    let engine = Engine::compile(
        &mcp_access_bundle::ValidBundle::new(bundle.clone()).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("the bundle does not compile: {e}"))?;
    let assumptions = check_assumptions(bundle, &spec.assume)?;
    let (gateway, listener, port, listener_host) = pick_listener(bundle, spec)?;
    let host = spec
        .host
        .clone()
        // A wildcard listener: some host under it.
        .or(listener_host.map(|h| h.replacen('*', "host", 1)))
        .unwrap_or_else(|| "localhost".into());
    let method = spec.method.clone().unwrap_or_else(|| "POST".into());
    let path = spec.path.clone().unwrap_or_else(|| "/mcp".into());
    let body = match (&spec.body, &spec.mcp_method) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(m)) => Some(body_for(m, spec.param.as_deref())),
        (None, None) => None,
    };
    let mut headers: Vec<(String, String)> = spec
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    // What an MCP client sends with a body, unless given.
    if let Some(b) = &body {
        for (name, value) in [
            ("content-type", "application/json".to_string()),
            ("content-length", b.len().to_string()),
        ] {
            if !headers.iter().any(|(k, _)| k == name) {
                headers.push((name.into(), value));
            }
        }
    }
    let spiffe = match (&spec.spiffe, &spec.service_account) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(sa)) => {
            let (ns, name) = sa
                .split_once('/')
                .ok_or("--service-account takes NAMESPACE/NAME")?;
            let td = bundle
                .identity
                .trust_domain
                .clone()
                .unwrap_or_else(|| DEFAULT_TRUST_DOMAIN.into());
            Some(service_account_spiffe(&td, ns, name))
        }
        _ => None,
    };
    if let (Some(_), SpiffeSource::TrustedHeader) = (&spiffe, bundle.identity.spiffe.source) {
        let name = bundle
            .identity
            .spiffe
            .header
            .as_ref()
            .map_or("", |h| h.name.as_str());
        return Err(format!(
            "the bundle takes the caller from the trusted header {name}: give it with -H instead of --spiffe / --service-account"
        ));
    }
    let authority = client_authority(&host, port);

    // Which route Envoy picks, and so the backend.
    let mut route_name = None;
    let mut cluster_name = None;
    let mut note = None;
    let mut router = None;
    if let Some(r) = &spec.route {
        route_name = Some(r.clone());
    } else if let Some(b) = &spec.backend {
        let be = bundle
            .backends
            .iter()
            .find(|x| &format!("{}/{}", x.namespace, x.name) == b || &x.name == b)
            .ok_or_else(|| format!("no backend {b} in the bundle"))?;
        route_name = be.route_names.first().cloned();
        cluster_name = be.cluster_names.first().cloned();
    } else if let Some(t) = topo {
        let probe = Request {
            method: method.clone(),
            canonical_path: mcp_access_engine::canon::canonical_path(
                &path,
                bundle.envoy.escaped_slashes,
            )
            .unwrap_or_default(),
            path: path.clone(),
            authority: authority.clone(),
            host: canonical_host(&authority),
            port,
            headers: headers.clone(),
            ..Request::default()
        };
        match match_route(t, &gateway, &listener, &probe) {
            Some(e) => {
                route_name = Some(e.name.clone());
                match &e.action {
                    RouteAction::Forward {
                        clusters,
                        path_rewrite,
                        ..
                    } => {
                        cluster_name = clusters.first().map(|c| c.cluster.clone());
                        if path_rewrite.is_some() {
                            note = Some(
                                "the path is rewritten before it reaches the backend".to_string(),
                            );
                        }
                    }
                    RouteAction::Redirect { status, .. } => {
                        note = Some(format!(
                            "the route redirects ({status}); the filter decides first"
                        ));
                        router = Some(RouterAnswer::Redirect(*status));
                    }
                    RouteAction::Fail { message } => {
                        note = Some("the route has no usable backend (Envoy answers 500); the filter decides first".into());
                        router = Some(RouterAnswer::Fail(message.clone()));
                    }
                }
            }
            None => {
                note = Some(match bundle.envoy.unknown_backend {
                    UnknownBackend::Deny => "no HTTPRoute matches: Envoy has no route, the filter denies it as an unknown backend (envoy.unknownBackend: Deny) before Envoy's router would answer 404".into(),
                    UnknownBackend::GatewayOnly => "no HTTPRoute matches: Envoy has no route, the filter decides on Gateway-level policies alone (envoy.unknownBackend: GatewayOnly) and what it lets on gets Envoy's 404".into(),
                });
                router = Some(RouterAnswer::NoRoute);
            }
        }
    }

    // The flow, driven as the host adapter drives it.
    let mut all_headers = vec![
        (":method".to_string(), method.clone()),
        (":path".to_string(), path.clone()),
        (":authority".to_string(), authority.clone()),
        (":scheme".to_string(), "http".to_string()),
    ];
    all_headers.extend(headers);
    let facts = SpecFacts {
        port,
        route: route_name,
        cluster: cluster_name,
    };
    let mut input = HeadersInput::gather(&engine, all_headers, body.is_none(), &facts);
    if engine.identity.spiffe.source == SpiffeSource::PeerCertificate {
        input.caller.spiffe = spiffe.clone();
    }
    if let Some(claims) = &spec.jwt_claims {
        input.caller.jwts = vec![engine
            .jwt_principal(claims)
            .map_err(|e| format!("--jwt-claims: {e}"))?];
    }
    let (route, cluster) = (input.route_name.clone(), input.cluster_name.clone());
    let mut flow = RequestFlow::traced();
    let mut next = flow.on_headers(&engine, input);
    if let (Next::Hold, Some(b)) = (&next, &body) {
        let bytes = b.as_bytes().to_vec();
        next = flow.on_body(&engine, bytes.len(), true, |_| Some(bytes));
    }
    let mut calls = Vec::new();
    let last = drive(&mut flow, &engine, next, |call| {
        let policy = call.policy_id(&engine).to_string();
        let authorizer = call.authorizer(&engine);
        let (name, cluster) = authorizer.map_or(("", ""), |a| (&a.name, &a.cluster));
        let found = assumption(bundle, &spec.assume, &policy, name);
        let assumed = found.cloned().unwrap_or(Assumption::Allow);
        calls.push(CallView {
            level: call.level.as_str().to_string(),
            policy,
            authorizer: name.to_string(),
            cluster: cluster.to_string(),
            assumed: assumed.as_text(),
            given: found.is_some(),
        });
        // Answered as an HTTP authorizer answers, whatever its protocol.
        Reply::Http {
            status: assumed.status(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    });
    let add_headers = match last {
        Next::Allow { add_headers, .. } => Ok(add_headers),
        Next::Respond(r) => Err(r),
        Next::Hold | Next::Dispatch(_) => {
            return Err("internal: the request flow waits for nothing".into())
        }
    };
    let outcome = flow
        .outcome()
        .cloned()
        .ok_or("internal: the request flow ended without an outcome")?;
    let req = flow.request();
    let stage = if !flow.evaluated() {
        Stage::Transport
    } else if matches!(
        outcome.reason,
        Why::Denied(Reason::UnknownListener | Reason::UnknownBackend)
    ) {
        Stage::Resolve
    } else {
        Stage::Policy
    };
    let mut out = Explanation {
        request: RequestView {
            listener: (!gateway.is_empty()).then(|| format!("{gateway}/{listener}")),
            port,
            method,
            authority,
            path,
            caller: req.and_then(|r| {
                r.caller.spiffe.clone().or_else(|| {
                    r.caller.jwts.first().map(|j| match &j.subject {
                        Some(sub) => format!("jwt:{}#{sub}", j.issuer),
                        None => format!("jwt:{}", j.issuer),
                    })
                })
            }),
            mcp: req.and_then(|r| match &r.mcp {
                McpOp::Call { method, param } => Some(McpView::Call {
                    method: method.clone(),
                    param: param.clone(),
                }),
                McpOp::Transport => Some(McpView::Other("transport (SSE stream or session end)")),
                McpOp::Reply => Some(McpView::Other("reply")),
                McpOp::NotMcp => None,
            }),
            route,
            cluster,
            body,
        },
        listener: outcome.listener.clone(),
        backend: outcome.backend.clone(),
        note,
        assumptions,
        calls,
        trace: trace_views(&engine, &flow, &outcome),
        cel: flow
            .cel_records()
            .iter()
            .map(|c| CelView {
                policy: c.policy.clone(),
                rule: c.rule.clone(),
                field: c.field.clone(),
                expression: c.expression.clone(),
                result: match &c.result {
                    Ok(b) => b.to_string(),
                    Err(e) => format!("error: {e}"),
                },
                reads: c.reads.iter().cloned().collect(),
            })
            .collect(),
        decision: if outcome.allowed { "allow" } else { "deny" },
        stage,
        level: (!outcome.allowed).then(|| Level::name(outcome.level)),
        reason: outcome.reason.as_str(),
        policy: outcome.policy,
        origin: outcome.origin,
        rule: outcome.rule,
        status: outcome.status,
        response: None,
        add_headers: None,
    };
    match add_headers {
        Err(r) => out.response = Some(ResponseView::from(&r)),
        Ok(add) => match router {
            None => out.add_headers = Some(edit_views(&add)),
            // Envoy's router answers after the filter let the request on.
            Some(answer) => {
                let (status, reason, body) = match answer {
                    RouterAnswer::NoRoute => (404, "no_route", String::new()),
                    RouterAnswer::Redirect(s) => (s, "route_redirect", String::new()),
                    RouterAnswer::Fail(m) => (500, "route_error", m),
                };
                out.decision = "deny";
                out.stage = Stage::Router;
                out.level = Some(Level::name(None));
                out.reason = reason;
                out.status = Some(status);
                out.response = Some(ResponseView {
                    status,
                    headers: Vec::new(),
                    body,
                });
            }
        },
    }
    Ok(out)
}

/// The flow's trace; where a level's Allow rules admit nothing, each rule first, with the first
/// of its conditions the request does not meet (the engine's own `Rule::mismatch`).
fn trace_views(engine: &Engine, flow: &RequestFlow, outcome: &Outcome) -> Vec<TraceView> {
    let mut out = Vec::new();
    for t in flow.trace() {
        let level = Level::name(t.level);
        let index = match t.level {
            Some(Level::Gateway) => engine
                .listeners
                .iter()
                .find(|l| outcome.listener.as_ref() == Some(&l.id))
                .map(|l| &l.index),
            Some(Level::Backend) => engine
                .backends
                .iter()
                .find(|b| outcome.backend.as_ref() == Some(&b.id))
                .map(|b| &b.index),
            None => None,
        };
        if let (Some(index), Some(req), ("allow", "no rule admits")) =
            (index, flow.request(), (t.step, t.outcome.as_str()))
        {
            for r in index.allow.rules() {
                let Some(rule) = engine.rule(r) else { continue };
                if let Some(why) = rule.mismatch(
                    req,
                    Mode::Admit,
                    engine.identity.trust_domain.as_deref(),
                    outcome.backend.as_deref(),
                ) {
                    out.push(TraceView {
                        level,
                        step: "allow",
                        policy: engine.policies.get(r.policy).map(|p| p.id.clone()),
                        rule: Some(rule.name.clone()),
                        outcome: format!("not admitted: {why} does not match"),
                    });
                }
            }
        }
        out.push(TraceView {
            level,
            step: t.step,
            policy: t.policy.clone(),
            rule: t.rule.clone(),
            outcome: t.outcome.clone(),
        });
    }
    out
}

/// Human-readable text.
pub fn to_text(e: &Explanation) -> String {
    let s = |v: Option<&str>| v.unwrap_or("-").to_string();
    let mut out = String::new();
    let r = &e.request;
    out.push_str(&format!(
        "request   {} {} (authority {}) from {}\n",
        r.method,
        r.path,
        r.authority,
        r.caller.as_deref().unwrap_or("an anonymous caller")
    ));
    match &r.mcp {
        Some(McpView::Call { method, param }) => {
            out.push_str(&format!("mcp       {method} {}\n", s(param.as_deref())))
        }
        Some(McpView::Other(what)) => out.push_str(&format!("mcp       {what}\n")),
        None => out.push_str("mcp       (not an MCP message)\n"),
    }
    out.push_str(&format!("listener  {}\n", s(e.listener.as_deref())));
    out.push_str(&format!(
        "backend   {} (route {}, cluster {})\n",
        s(e.backend.as_deref()),
        s(r.route.as_deref()),
        s(r.cluster.as_deref())
    ));
    for n in &e.assumptions {
        out.push_str(&format!("note      {n}\n"));
    }
    if let Some(n) = &e.note {
        out.push_str(&format!("note      {n}\n"));
    }
    for c in &e.calls {
        out.push_str(&format!(
            "authorizer {} for {} ({}): assumed {}{}\n",
            c.authorizer,
            c.policy,
            c.level,
            c.assumed,
            if c.given { "" } else { " (no --assume given)" }
        ));
    }
    if e.decision == "allow" {
        out.push_str(&format!(
            "decision  ALLOW (policy {}, rule {})\n",
            s(e.policy.as_deref()),
            s(e.rule.as_deref())
        ));
        if let Some(o) = &e.origin {
            out.push_str(&format!("from      {o}\n"));
        }
        for h in e.add_headers.iter().flatten() {
            out.push_str(&format!("upstream  + {}: {}\n", h.name, h.value));
        }
    } else {
        let who = match e.stage {
            Stage::Transport => "rejected by the filter's transport checks",
            Stage::Resolve => "the filter cannot resolve listener or backend",
            Stage::Policy => "denied by policy",
            Stage::Router => "answered by Envoy's router",
        };
        out.push_str(&format!(
            "decision  DENY {} at {} ({}): policy {}, rule {}; {who}\n",
            e.status.map_or("-".to_string(), |x| x.to_string()),
            e.level.unwrap_or("none"),
            e.reason,
            s(e.policy.as_deref()),
            s(e.rule.as_deref())
        ));
        if let Some(o) = &e.origin {
            out.push_str(&format!("from      {o}\n"));
        }
        if let Some(resp) = &e.response {
            let relayed = if e.reason == "external_auth_denied" {
                " (with the headers and body the authorizer sends)"
            } else {
                ""
            };
            out.push_str(&format!("response  HTTP {}{relayed}\n", resp.status));
            for h in &resp.headers {
                out.push_str(&format!("          {}: {}\n", h.name, h.value));
            }
            if !resp.body.is_empty() {
                out.push_str(&format!("          {}\n", resp.body));
            }
        }
    }
    if !e.cel.is_empty() {
        out.push_str("cel\n");
        for c in &e.cel {
            let at = match &c.rule {
                Some(r) => format!("{} rule {r} {}", c.policy, c.field),
                None => format!("{} {}", c.policy, c.field),
            };
            out.push_str(&format!(
                "  {at}: {} -> {}\n",
                c.expression.replace('\n', " "),
                c.result
            ));
            for (name, value) in &c.reads {
                out.push_str(&format!("      {name} = {value}\n"));
            }
        }
    }
    out.push_str("trace\n");
    let rows: Vec<[String; 5]> = e
        .trace
        .iter()
        .map(|t| {
            [
                t.level.to_string(),
                t.step.to_string(),
                s(t.policy.as_deref()),
                s(t.rule.as_deref()),
                t.outcome.clone(),
            ]
        })
        .collect();
    let header = ["level", "step", "policy", "rule", "why"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.len());
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hostnames_match_canonical_hosts() {
        let wild = ["*.a.com".to_string()];
        assert!(host_ok(&wild, "x.a.com"));
        assert!(!host_ok(&wild, ".a.com"));
        assert!(!host_ok(&wild, "a.com"));
        assert!(host_ok(&["A.com.".to_string()], "a.com"));
        assert!(host_ok(&[], "anything"));
    }
}
