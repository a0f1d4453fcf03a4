//! The filter's request flow, driven as the host adapter drives it, with authorizer callouts
//! answered from `--assume`.

use std::rc::Rc;

use mcp_access_bundle::{AuthorizerProtocol, Bundle, Level, SpiffeSource};
use mcp_access_engine::answer::LocalResponse;
use mcp_access_engine::callout::CalloutRequest;
use mcp_access_engine::facts::{Fact, HostFacts};
use mcp_access_engine::flow::{
    drive_with_limiter, HeadersInput, Next, Outcome, Reply, RequestFlow,
};
use mcp_access_engine::policy::{Engine, HeaderEdit, HeaderOp, Mode, TraceEvent};
use mcp_access_engine::ratelimit::global;
use mcp_access_engine::ratelimit::store::CounterStore;

use super::assume::assumption;
use super::request::Prepared;
use super::{Assumption, CallView, RequestSpec, TraceView};
use crate::error::CliError;

/// The host facts of the request: what Envoy would report for it.
struct SpecFacts {
    port: u16,
    route: Option<String>,
    cluster: Option<String>,
    /// The request's arrival (a record's), else now.
    time: Option<i64>,
}

impl HostFacts for SpecFacts {
    fn read(&self, fact: Fact) -> Option<Vec<u8>> {
        let text = |s: &Option<String>| s.clone().map(String::into_bytes);
        match fact {
            Fact::RouteName => text(&self.route),
            Fact::ClusterName => text(&self.cluster),
            Fact::DestinationPort => Some(i64::from(self.port).to_le_bytes().to_vec()),
            // The time given, else now, as Envoy would report the request's arrival.
            Fact::RequestTime => self
                .time
                .or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .and_then(|d| i64::try_from(d.as_nanos()).ok())
                })
                .map(|n| n.to_le_bytes().to_vec()),
            // The caller is set from --spiffe / --service-account: it stands for a peer
            // certificate with exactly that one URI SAN. Without, no certificate: a caller
            // without identity or Authorization header is one without a credential.
            Fact::Mtls => Some(vec![0]),
            // The connection facts gRPC authorizers are told have no `explain` flag.
            _ => None,
        }
    }
}

/// The flow after the request: where it ended, and the callouts it made.
pub(super) struct Ran {
    pub(super) flow: RequestFlow,
    /// The headers set on the upstream request when the filter lets it on, else the
    /// response the client gets.
    pub(super) last: Result<Vec<HeaderEdit>, LocalResponse>,
    pub(super) calls: Vec<CallView>,
    /// The route and cluster the filter read from the host.
    pub(super) route: Option<String>,
    pub(super) cluster: Option<String>,
}

/// Runs the request through the flow: headers, then the body, then each callout; Local rate
/// limits charged in `counters` (none: a request a limit selects is refused).
pub(super) fn run_flow(
    engine: &Engine,
    bundle: &Bundle,
    spec: &RequestSpec,
    req: &Prepared,
    (route, cluster): (Option<String>, Option<String>),
    counters: Option<Rc<dyn CounterStore>>,
) -> Result<Ran, CliError> {
    let pseudo = [
        (":method", req.method.as_str()),
        (":path", &req.path),
        (":authority", &req.authority),
        (":scheme", "http"),
    ];
    let all_headers = pseudo
        .into_iter()
        .chain(req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .collect();
    let facts = SpecFacts {
        port: req.port,
        route,
        cluster,
        time: spec.time,
    };
    let mut input = HeadersInput::gather(engine, all_headers, req.body.is_none(), &facts);
    if engine.settings.identity.spiffe.source == SpiffeSource::PeerCertificate {
        input.caller.spiffe = req.spiffe.clone();
    }
    if let Some(claims) = &spec.jwt_claims {
        input.caller.jwts = vec![engine
            .jwt_principal(claims)
            .map_err(|e| format!("--jwt-claims: {e}"))?];
    }
    let (route, cluster) = (input.route_name.clone(), input.cluster_name.clone());
    let mut flow = RequestFlow::traced();
    if let Some(store) = counters {
        flow = flow.with_counter_store(store);
    }
    let mut next = flow.on_headers(engine, input).next;
    if let (Next::Hold, Some(b)) = (&next, &req.body) {
        let bytes = b.as_bytes().to_vec();
        next = flow
            .on_body(engine, bytes.len(), true, |_| Some(bytes))
            .next;
    }
    let mut calls = Vec::new();
    // The RateLimitService answers as `--assume` says: OVER_LIMIT for the limits assumed over.
    let over = |limit: &str| spec.limits.get(limit) == Some(&super::LimitAssumption::Over);
    let limiter = |call: &CalloutRequest| match global::assumed_answer(&call.body, over) {
        Some(message) => Reply::Grpc {
            status: Some(0),
            message,
        },
        None => Reply::NotDispatched,
    };
    let last = drive_with_limiter(
        &mut flow,
        engine,
        next,
        |call| {
            let policy = call.policy_id(engine).to_string();
            let authorizer = call.authorizer(engine);
            let (name, cluster) = authorizer.map_or(("", ""), |a| (&a.name, &a.cluster));
            let found = assumption(bundle, &spec.assume, &policy, name);
            // Shown by the name of the policy the user wrote.
            let policy = engine.written_name(&policy).to_string();
            let assumed = found.cloned().unwrap_or(Assumption::Allow);
            calls.push(CallView {
                level: call.level.as_str().to_string(),
                policy,
                authorizer: name.to_string(),
                cluster: cluster.to_string(),
                assumed: assumed.as_text(),
                given: found.is_some(),
                dry_run: engine
                    .policies
                    .get(call.policy)
                    .is_some_and(|p| p.mode == mcp_access_bundle::PolicyMode::DryRun),
                cache: authorizer.and_then(|a| a.cache.clone()),
            });
            let grpc = authorizer.is_some_and(|a| a.protocol == AuthorizerProtocol::Grpc);
            Reply::verdict(assumed.status(), grpc)
        },
        limiter,
    );
    let last = match last {
        // The identity headers the upstream gets (the removals of the client's copies aside).
        Next::Allow {
            add_headers,
            identity_headers,
            ..
        } => Ok(add_headers
            .into_iter()
            .chain(
                identity_headers
                    .into_iter()
                    .filter(|e| e.op != HeaderOp::Remove),
            )
            .collect()),
        Next::Respond(r) => Err(r),
        Next::Hold | Next::Dispatch(_) | Next::CallLimiter(_) => {
            return Err("internal: the request flow waits for nothing".into())
        }
    };
    Ok(Ran {
        flow,
        last,
        calls,
        route,
        cluster,
    })
}

/// The flow's trace; where a level's Allow rules admit nothing, each rule first, with the first
/// of its conditions the request does not meet (the engine's own `Rule::mismatch`).
pub(super) fn trace_views(
    engine: &Engine,
    flow: &RequestFlow,
    outcome: &Outcome,
) -> Vec<TraceView> {
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
                .zip(flow.request())
                .map(|(b, r)| b.index_for(r.target.listener, r.target.route)),
            None => None,
        };
        if let (Some(index), Some(req), TraceEvent::NotAdmitted) = (index, flow.request(), &t.event)
        {
            for r in index.allow.rules() {
                let Some(rule) = engine.rule(r) else { continue };
                let backend = engine
                    .backends
                    .iter()
                    .find(|b| outcome.backend.as_ref() == Some(&b.id));
                if let Some(why) = rule.mismatch(
                    req,
                    Mode::Admit,
                    engine.settings.identity.trust_domain.as_deref(),
                    backend,
                ) {
                    out.push(TraceView {
                        level,
                        policy: engine
                            .policies
                            .get(r.policy)
                            .map(|p| engine.written_name(&p.id).to_string()),
                        rule: Some(rule.name.clone()),
                        event: TraceEvent::RuleMismatch {
                            what: why.to_string(),
                        },
                    });
                }
            }
        }
        out.push(TraceView {
            level,
            policy: t
                .policy
                .as_deref()
                .map(|p| engine.written_name(p).to_string()),
            rule: t.rule.clone(),
            event: t.event.clone(),
        });
    }
    out
}
