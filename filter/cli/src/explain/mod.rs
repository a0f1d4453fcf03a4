//! `explain`: one request run through the filter's own request flow ([`RequestFlow`]):
//! transport checks, JSON-RPC parsing, header/body agreement, policy evaluation with
//! authorizer callouts answered from `--assume`, and the response the client gets.

mod assume;
mod decision;
mod dry_run;
mod flow;
mod limits;
mod request;
mod route;
mod text;

use std::collections::BTreeMap;
use std::rc::Rc;

use mcp_access_bundle::Bundle;
use mcp_access_engine::answer::{LocalResponse, Why};
use mcp_access_engine::flow::{selected_limits, RequestFlow};
use mcp_access_engine::policy::{Engine, HeaderEdit, Reason, TraceEvent};
use mcp_access_engine::request::McpOp;
use mcp_access_k8s::Topology;
use serde::Serialize;

pub use decision::{At, Cause, Verdict};
pub use dry_run::DryRunView;
use flow::Ran;
pub use limits::{LimitAssumption, LimitView};
use request::Prepared;
use route::{RouterAnswer, Routing};

use crate::error::CliError;
pub use text::to_text;

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
pub fn parse_assumption(s: &str) -> Result<Assumption, CliError> {
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
                    CliError::invalid(format!("`{s}`: a denial status is 300-499 (the filter takes 2xx as allow, others as an error)"))
                }),
            None => Err(format!("`{s}`: expected allow, deny[:STATUS] or error").into()),
        },
    }
}

/// An `--assume` value: an authorizer's answer, or what a rate limit's bucket holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assumed {
    Authorizer(Assumption),
    Limit(LimitAssumption),
}

/// Parses an `--assume` value: `over`/`under` (a rate limit, keyed `namespace/policy/limit`),
/// else an authorizer's answer ([`parse_assumption`]).
pub fn parse_assumed(s: &str) -> Result<Assumed, CliError> {
    match LimitAssumption::parse(s) {
        Some(l) => Ok(Assumed::Limit(l)),
        None => parse_assumption(s).map(Assumed::Authorizer).map_err(|e| {
            CliError::invalid(format!(
                "{} (or over, under for a rate limit NAMESPACE/POLICY/LIMIT)",
                e.message
            ))
        }),
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
    /// `params.arguments` of the request built from `mcp_method` (a JSON object).
    pub arguments: Option<serde_json::Value>,
    /// The request body, sent as it is (else built from `mcp_method` and `param`).
    pub body: Option<String>,
    /// Authorizer outcomes by policy (`ns/name` or `name`), authorizer name, or `*`.
    pub assume: BTreeMap<String, Assumption>,
    /// What the buckets of rate limits (`namespace/policy/limit`) hold (default: room).
    pub limits: BTreeMap<String, LimitAssumption>,
    /// The caller's verified JWT claims (a JSON object with `iss`, `sub`, ...), as if Envoy's
    /// `jwt_authn` had verified that token.
    pub jwt_claims: Option<serde_json::Value>,
    /// The MCP revision the client speaks (a decision record's `revision`): its
    /// `MCP-Protocol-Version`, and from 2026-07-28 on the `Mcp-Method` and `Mcp-Name` headers
    /// it requires, are sent unless given.
    pub revision: Option<String>,
    /// When the request arrived (a decision record's `time`: nanoseconds since the Unix
    /// epoch), else now: what CEL's `request.time` reads.
    pub time: Option<i64>,
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
    /// What `--assume` keys naming policies that were not accepted, or limits that do not
    /// charge the request, amount to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<String>,
    pub calls: Vec<CallView>,
    /// The rate limits the request is charged once the policies allow it, with their keys.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitView>,
    pub trace: Vec<TraceView>,
    /// Each CEL condition evaluated: its result or error, and the variables it read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cel: Vec<CelView>,
    /// `allow`: the request goes upstream; `deny`: the client gets [`Explanation::response`].
    pub decision: Verdict,
    /// Who answered.
    pub stage: Stage,
    /// Deny only: `gateway`, `backend` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<At>,
    /// `allowed`, the filter's denial or rejection reason, or `no_route` / `route_redirect` /
    /// `route_error` when Envoy answers after the filter let the request on.
    pub reason: Cause,
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
    /// A tool call to an XBackend with a ToolPin: what the pin says of the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
    /// Where dry-run policies concern the request: the decision with them enforced
    /// (docs/semantics.md §3.8), never enforced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunView>,
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
    /// A dry-run policy's authorizer: its answer is recorded, never applied.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The policy's cache of its authorizer's answers, as declared (docs/semantics.md §3.10);
    /// `explain` always calls (it keeps no answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<mcp_access_bundle::AuthzCache>,
}

/// One line of the filter's decision trace: as JSON, `level`, `step`, `policy`, `rule` and
/// `outcome` (the event's text).
#[derive(Debug, Clone)]
pub struct TraceView {
    pub level: &'static str,
    /// The policy as the user wrote it.
    pub(crate) policy: Option<String>,
    pub rule: Option<String>,
    pub event: TraceEvent,
}

impl Serialize for TraceView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("TraceView", 5)?;
        st.serialize_field("level", self.level)?;
        st.serialize_field("step", self.event.step())?;
        st.serialize_field("policy", &self.policy)?;
        st.serialize_field("rule", &self.rule)?;
        st.serialize_field("outcome", &self.event.to_string())?;
        st.end()
    }
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

fn edit_views(h: &[HeaderEdit]) -> Vec<HeaderView> {
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

/// The filter's engine compiled once for a bundle (and the routes of its manifests): each
/// request explained runs through it.
pub struct Explainer<'a> {
    bundle: &'a Bundle,
    topo: Option<&'a Topology>,
    engine: Engine,
}

impl<'a> Explainer<'a> {
    /// Compiles the bundle as the filter does.
    pub fn new(bundle: &'a Bundle, topo: Option<&'a Topology>) -> Result<Self, CliError> {
        let valid =
            mcp_access_bundle::ValidBundle::new(bundle.clone()).map_err(|e| e.to_string())?;
        let engine =
            Engine::compile(valid).map_err(|e| format!("the bundle does not compile: {e}"))?;
        Ok(Explainer {
            bundle,
            topo,
            engine,
        })
    }

    /// The compiled engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs the request through the filter's request flow.
    pub fn explain(&self, spec: &RequestSpec) -> Result<Explanation, CliError> {
        let (bundle, engine) = (self.bundle, &self.engine);
        let mut assumptions = assume::check_assumptions(bundle, self.topo, &spec.assume)?;
        limits::check(engine, &spec.limits)?;
        // One arrival time for every run: CEL's `request.time`, the rate limits' windows.
        let mut spec = spec.clone();
        let time = *spec.time.get_or_insert_with(now_ns);
        let spec = &spec;
        let req = request::prepare(bundle, spec)?;
        let Routing {
            route,
            cluster,
            note,
            router,
        } = route::resolve_routing(bundle, self.topo, spec, &req)?;
        let at = (route, cluster);
        let mut ran = flow::run_flow(engine, bundle, spec, &req, at.clone(), None)?;
        // Charged limits (refused without a store): run again with their buckets as assumed.
        let charged = ran
            .flow
            .outcome()
            .is_some_and(|o| !o.limits.charged.is_empty());
        let selected = match ran.flow.request() {
            Some(r) if charged => selected_limits(engine, r),
            _ => Vec::new(),
        };
        let (limit_views, notes) = limits::views(engine, bundle, &selected, &spec.limits);
        assumptions.extend(notes);
        if !selected.is_empty() {
            let now = u64::try_from(time).unwrap_or(0);
            let store = limits::assumed_store(engine, &selected, &spec.limits, now);
            ran = flow::run_flow(engine, bundle, spec, &req, at, Some(Rc::new(store)))?;
        }
        let mut out = explanation(engine, req, &ran, note, assumptions)?;
        out.limits = limit_views;
        apply_router(&mut out, ran.last, router);
        Ok(out)
    }
}

/// Now, in nanoseconds since the Unix epoch.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

/// Runs one request through the filter's request flow (the bundle compiled for it alone).
pub fn explain(
    bundle: &Bundle,
    topo: Option<&Topology>,
    spec: &RequestSpec,
) -> Result<Explanation, CliError> {
    Explainer::new(bundle, topo)?.explain(spec)
}

/// The explanation of where the flow ended, before Envoy's router has its say.
fn explanation(
    engine: &Engine,
    req: Prepared,
    ran: &Ran,
    note: Option<String>,
    assumptions: Vec<String>,
) -> Result<Explanation, CliError> {
    let flow = &ran.flow;
    let outcome = flow
        .outcome()
        .cloned()
        .ok_or("internal: the request flow ended without an outcome")?;
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
    let dry_run = dry_run::dry_run_view(engine, flow, &outcome);
    let named = engine.named(outcome.by);
    Ok(Explanation {
        request: request_view(req, ran),
        listener: outcome.listener.clone(),
        backend: outcome.backend.clone(),
        note,
        assumptions,
        calls: ran.calls.clone(),
        limits: Vec::new(),
        trace: flow::trace_views(engine, flow, &outcome),
        cel: cel_views(flow),
        decision: Verdict::of(outcome.allowed),
        stage,
        level: (!outcome.allowed).then_some(At(outcome.level)),
        reason: Cause::Filter(outcome.reason),
        policy: named.policy.map(str::to_string),
        origin: named.origin.map(str::to_string),
        rule: named.rule.map(str::to_string),
        status: outcome.status,
        response: None,
        add_headers: None,
        pin: pin_view(engine, flow),
        dry_run,
    })
}

/// What the backend's ToolPin says of the tool a `tools/call` names. Drift is known only to
/// a running Envoy (from the listings it reads): `explain` assumes none was seen.
fn pin_view(engine: &Engine, flow: &RequestFlow) -> Option<String> {
    let req = flow.request()?;
    let tool = req.mcp.tool_called()?;
    let pins = engine.backends.get(req.target.backend?)?.pins.as_deref()?;
    Some(match pins.get(tool) {
        Some(p) => format!(
            "ToolPin {} pins {tool:?} ({}), reviewed annotations {}; a running filter denies it while a listing shows it drifted",
            pins.source, p.digest, p.annotations
        ),
        None => format!(
            "ToolPin {} does not pin {tool:?} (tools not pinned: {:?})",
            pins.source, pins.unpinned
        ),
    })
}

/// The request as the filter saw it: the caller and MCP meaning it parsed.
fn request_view(req: Prepared, ran: &Ran) -> RequestView {
    let parsed = ran.flow.request();
    RequestView {
        listener: (!req.gateway.is_empty()).then(|| format!("{}/{}", req.gateway, req.listener)),
        port: req.port,
        method: req.method,
        authority: req.authority,
        path: req.path,
        caller: parsed.and_then(|r| r.caller.label()),
        mcp: parsed.and_then(|r| match &r.mcp {
            McpOp::Call { method, param } => Some(McpView::Call {
                method: method.to_string(),
                param: param.clone(),
            }),
            McpOp::Transport => Some(McpView::Other("transport (SSE stream or session end)")),
            McpOp::Reply => Some(McpView::Other("reply")),
            McpOp::NotMcp => None,
        }),
        route: ran.route.clone(),
        cluster: ran.cluster.clone(),
        body: req.body,
    }
}

/// Each CEL condition the flow evaluated.
fn cel_views(flow: &RequestFlow) -> Vec<CelView> {
    flow.cel_records()
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
        .collect()
}

/// The filter's answer, or when it let the request on, Envoy router's answer if it does
/// not forward it.
fn apply_router(
    out: &mut Explanation,
    last: Result<Vec<HeaderEdit>, LocalResponse>,
    router: Option<RouterAnswer>,
) {
    match last {
        Err(r) => out.response = Some(ResponseView::from(&r)),
        Ok(add) => match router {
            None => out.add_headers = Some(edit_views(&add)),
            // Envoy's router answers after the filter let the request on.
            Some(answer) => {
                let (status, reason, body) = match answer {
                    RouterAnswer::NoRoute => (404, Cause::NoRoute, String::new()),
                    RouterAnswer::Redirect(s) => (s, Cause::RouteRedirect, String::new()),
                    RouterAnswer::Fail(m) => (500, Cause::RouteError, m),
                };
                out.decision = Verdict::Deny;
                out.stage = Stage::Router;
                out.level = Some(At(None));
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
}
