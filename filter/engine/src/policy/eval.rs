//! Per-request evaluation (docs/semantics.md §3): for the Gateway level, then the Backend level:
//! ExternalAuth, then Deny, then Allow. Authorizer calls are returned to the caller as a
//! [`Step::Call`]; their outcomes are fed back with [`super::Evaluation::complete`].

use std::fmt;

use mcp_access_bundle::{FailureMode, Level, UnknownBackend};

use super::{CelCx, Engine, LevelIndex, PolicyId, RuleRef, View};
use crate::request::{Request, Target};

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No Gateway listener in the bundle matches the destination port / host.
    UnknownListener,
    /// Envoy routed to no backend the bundle knows.
    UnknownBackend,
    /// An authorizer said no.
    ExternalAuthDenied,
    /// An authorizer failed (unreachable, timeout, 5xx) and its failure mode is Deny.
    AuthorizerFailed,
    /// A Deny policy matched.
    DenyPolicy,
    /// Allow policies exist at the level and none admits the request.
    NotAllowed,
    /// A call of a tool the backend's ToolPin does not name (with `unpinned: Deny`).
    ToolNotPinned,
    /// A call of a tool whose listed definition differs from its pin.
    ToolDrifted,
}

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 8] = [
        Reason::UnknownListener,
        Reason::UnknownBackend,
        Reason::ExternalAuthDenied,
        Reason::AuthorizerFailed,
        Reason::DenyPolicy,
        Reason::NotAllowed,
        Reason::ToolNotPinned,
        Reason::ToolDrifted,
    ];

    /// Stable snake_case name, used in stats and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::UnknownListener => "unknown_listener",
            Reason::UnknownBackend => "unknown_backend",
            Reason::ExternalAuthDenied => "external_auth_denied",
            Reason::AuthorizerFailed => "authorizer_error",
            Reason::DenyPolicy => "deny_policy",
            Reason::NotAllowed => "not_allowed",
            Reason::ToolNotPinned => "tool_not_pinned",
            Reason::ToolDrifted => "tool_drifted",
        }
    }
}

/// How an allowing authorizer edits one upstream request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp {
    /// Replace every value (add if absent): HTTP authorizers' headers, gRPC `append: false`.
    Set,
    /// Add one more value: gRPC `append: true` / `APPEND_IF_EXISTS_OR_ADD`.
    Append,
    /// Add only if absent: gRPC `ADD_IF_ABSENT`.
    AddIfAbsent,
    /// Replace only if present: gRPC `OVERWRITE_IF_EXISTS`.
    OverwriteIfExists,
    /// Remove the header: gRPC `headers_to_remove`.
    Remove,
}

/// One upstream header edit, applied in order (authorizers in seniority order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderEdit {
    pub op: HeaderOp,
    pub name: String,
    pub value: String,
}

impl HeaderEdit {
    /// A [`HeaderOp::Set`] edit.
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> Self {
        HeaderEdit {
            op: HeaderOp::Set,
            name: name.into(),
            value: value.into(),
        }
    }
}

/// An authorizer's answer, or the failure to get one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzOutcome {
    /// Allowed; these edits apply to the upstream request.
    Allow { headers: Vec<HeaderEdit> },
    /// Denied: relay this response to the client.
    Deny {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// No usable answer.
    Error { detail: String },
}

/// An authorizer call the evaluation asks for: the ExternalAuth policy at a level, and its
/// authorizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthzCall {
    /// Pass back to [`super::Evaluation::complete`].
    pub slot: usize,
    /// Index into [`Engine::policies`].
    pub policy: PolicyId,
    /// Index into the engine's authorizers ([`AuthzCall::authorizer`]).
    pub authorizer: usize,
    pub level: Level,
}

impl AuthzCall {
    /// `namespace/name` of the policy.
    pub fn policy_id<'e>(&self, engine: &'e Engine) -> &'e str {
        engine
            .policies
            .get(self.policy)
            .map_or("", |p| p.id.as_str())
    }

    /// The authorizer called.
    pub fn authorizer<'e>(&self, engine: &'e Engine) -> Option<&'e mcp_access_bundle::Authorizer> {
        engine.authorizers.get(self.authorizer)
    }
}

/// An authorizer's denial, relayed to the client as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    pub status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// A denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub level: Option<Level>,
    pub reason: Reason,
    /// `namespace/name` of the deciding policy.
    pub policy: Option<String>,
    pub(crate) rule: Option<String>,
    /// The authorizer response to relay (ExternalAuthDenied).
    pub relay: Option<Relay>,
    /// Extra detail for logs (never sent unless the operator exposes details).
    pub(crate) detail: Option<String>,
    /// For [`Reason::NotAllowed`]: the scope values of the most senior Allow rule of the
    /// level that the caller's verified JWT would meet with more scopes (the answer is then an
    /// `insufficient_scope` challenge, docs/semantics.md §5.6).
    pub scope: Option<Vec<String>>,
}

impl Denial {
    /// The deciding rule's name.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// A denial for `reason` at `level`, naming no policy.
    pub(crate) fn of(level: Option<Level>, reason: Reason) -> Denial {
        Denial {
            level,
            reason,
            policy: None,
            rule: None,
            relay: None,
            detail: None,
            scope: None,
        }
    }
}

/// What the Deny and Allow steps of one level say about a request.
pub(crate) enum RulesVerdict {
    /// A Deny rule matched.
    Denied(RuleRef),
    /// Allow policies exist and none admits.
    NotAdmitted,
    /// Passed: the admitting Allow rule, None when no Allow policy applies at the level.
    Admitted(Option<RuleRef>),
}

/// The Deny step, then the Allow step, of one level (docs/semantics.md §3.1 steps 2 and 3):
/// the one implementation requests and listed items are judged by.
pub(crate) fn rules_verdict(
    engine: &Engine,
    index: &LevelIndex,
    req: &Request,
    cx: &mut CelCx,
) -> RulesVerdict {
    if let Some(r) = index.deny.first_admitting(engine, req, cx) {
        return RulesVerdict::Denied(r);
    }
    if !engine.allow_applies(index, req, cx) {
        return RulesVerdict::Admitted(None);
    }
    match index.allow.first_admitting(engine, req, cx) {
        Some(r) => RulesVerdict::Admitted(Some(r)),
        None => RulesVerdict::NotAdmitted,
    }
}

/// The final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let the request through, adding these headers (in order; later replaces earlier).
    /// `policy`/`rule`: the last Allow rule that admitted it (Backend level over Gateway).
    Allow {
        add_headers: Vec<HeaderEdit>,
        policy: Option<String>,
        rule: Option<String>,
    },
    Deny(Denial),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make these calls (in parallel), then [`super::Evaluation::complete`] each and advance again.
    Call(Vec<AuthzCall>),
    /// Calls are still outstanding.
    Waiting,
    Done(Decision),
}

/// One line of the decision trace (for `explain` and debug logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    pub level: Option<Level>,
    pub step: &'static str,
    pub policy: Option<String>,
    pub rule: Option<String>,
    pub outcome: String,
}

/// Where the evaluation of one level stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LevelPart {
    ExternalAuth,
    Awaiting,
    Rules,
    /// The decision was handed out ([`Step::Done`]): nothing more happens.
    Over,
}

/// The state of one request's evaluation in one decision ([`View`]): the enforced one, or
/// the dry-run one beside it ([`super::Evaluation`]).
#[derive(Debug)]
pub(crate) struct Run {
    view: View,
    target: Target,
    level: Level,
    phase: LevelPart,
    done: Option<Decision>,
    calls: Vec<(AuthzCall, Option<AuthzOutcome>)>,
    add_headers: Vec<HeaderEdit>,
    admitted: Option<(Option<String>, Option<String>)>,
    /// The Allow rule that admitted the request at the Gateway and at the Backend level.
    admitted_at: [Option<RuleRef>; 2],
    trace: Option<Vec<TraceEntry>>,
    /// CEL conditions evaluated so far.
    cel: CelCx,
}

impl Run {
    pub(super) fn new(engine: &Engine, req: &Request, trace: bool, view: View) -> Run {
        let Target {
            listener, backend, ..
        } = req.target;
        let mut ev = Run {
            view,
            target: req.target,
            level: Level::Gateway,
            phase: LevelPart::ExternalAuth,
            done: None,
            calls: Vec::new(),
            add_headers: Vec::new(),
            admitted: None,
            admitted_at: [None; 2],
            trace: trace.then(Vec::new),
            cel: engine.cel_cx(backend, trace),
        };
        let unknown = if listener.is_none() {
            Some((Reason::UnknownListener, format!("port {}", req.port)))
        } else if backend.is_none() && engine.unknown_backend == UnknownBackend::Deny {
            Some((
                Reason::UnknownBackend,
                format!(
                    "route {:?}, cluster {:?}",
                    req.route_name.as_deref().unwrap_or(""),
                    req.cluster_name.as_deref().unwrap_or("")
                ),
            ))
        } else {
            None
        };
        if let Some((reason, detail)) = unknown {
            ev.note(None, "resolve", None, None, format_args!("deny: {detail}"));
            ev.done = Some(Decision::Deny(Denial {
                level: None,
                reason,
                policy: None,
                rule: None,
                relay: None,
                detail: Some(detail),
                scope: None,
            }));
        }
        ev
    }

    /// `namespace/name/listener` the request arrived on.
    pub(crate) fn listener_name(&self, engine: &Engine) -> Option<String> {
        engine
            .listeners
            .get(self.target.listener?)
            .map(|l| l.id.clone())
    }

    /// `namespace/name` of the backend Envoy routed to.
    pub(crate) fn backend_name<'e>(&self, engine: &'e Engine) -> Option<&'e str> {
        engine
            .backends
            .get(self.target.backend?)
            .map(|b| b.id.as_str())
    }

    /// The Allow rule that admitted the request at `level`, if one did.
    pub(crate) fn admitted_at(&self, level: Level) -> Option<RuleRef> {
        self.admitted_at.get(level_slot(level)).copied().flatten()
    }

    /// Where the request is judged.
    pub(crate) fn target(&self) -> Target {
        self.target
    }

    /// The trace, if it was asked for.
    pub fn trace(&self) -> &[TraceEntry] {
        self.trace.as_deref().unwrap_or(&[])
    }

    /// The CEL conditions evaluated so far (only when traced).
    pub fn cel_records(&self) -> &[super::CelRecord] {
        self.cel.records.as_deref().unwrap_or(&[])
    }

    /// CEL evaluations that erred, and of those the ones stopped by the step limit.
    pub fn cel_errors(&self) -> (u32, u32) {
        (self.cel.errors, self.cel.budget_exceeded)
    }

    /// The authorizer of an outstanding call.
    pub(crate) fn call_authorizer(&self, slot: usize) -> Option<usize> {
        self.calls.get(slot).map(|(c, _)| c.authorizer)
    }

    /// Records an authorizer outcome.
    pub fn complete(&mut self, slot: usize, outcome: AuthzOutcome) {
        if let Some((_, o)) = self.calls.get_mut(slot) {
            if o.is_none() {
                *o = Some(outcome);
            }
        }
    }

    /// Runs until the decision is made or authorizer outcomes are needed. The decision is
    /// handed out once; later calls return [`Step::Waiting`].
    pub fn advance(&mut self, engine: &Engine, req: &Request) -> Step {
        loop {
            if self.phase == LevelPart::Over {
                return Step::Waiting;
            }
            if let Some(d) = self.done.take() {
                self.phase = LevelPart::Over;
                return Step::Done(d);
            }
            let Some(index) = engine.level_index(self.view, self.level, self.target) else {
                // GatewayOnly with no backend: nothing attached at the Backend level.
                self.finish_level();
                continue;
            };
            match self.phase {
                LevelPart::ExternalAuth => {
                    if self.level == Level::Backend {
                        self.note_routes(engine, req);
                    }
                    let calls = self.select_authorizers(engine, index, req);
                    if calls.is_empty() {
                        self.phase = LevelPart::Rules;
                    } else {
                        self.phase = LevelPart::Awaiting;
                        return Step::Call(calls);
                    }
                }
                LevelPart::Awaiting => {
                    if self.calls.iter().any(|(_, o)| o.is_none()) {
                        return Step::Waiting;
                    }
                    self.collect_outcomes(engine);
                    self.phase = LevelPart::Rules;
                }
                LevelPart::Rules => {
                    self.apply_rules(engine, index, req);
                    if self.done.is_none() {
                        self.finish_level();
                    }
                }
                LevelPart::Over => return Step::Waiting,
            }
        }
    }

    fn finish_level(&mut self) {
        match self.level {
            Level::Gateway => {
                self.level = Level::Backend;
                self.phase = LevelPart::ExternalAuth;
            }
            Level::Backend => {
                let (policy, rule) = self.admitted.take().unwrap_or_default();
                self.done = Some(Decision::Allow {
                    add_headers: std::mem::take(&mut self.add_headers),
                    policy,
                    rule,
                });
            }
        }
    }

    /// For a trace: whether each route-scoped policy of the backend applies through the
    /// route the request came by (docs/semantics.md §1.6).
    fn note_routes(&mut self, engine: &Engine, req: &Request) {
        if self.trace.is_none() {
            return;
        }
        let Some(b) = self.target.backend.and_then(|i| engine.backends.get(i)) else {
            return;
        };
        let name = engine
            .recognise(req.route_name.as_deref(), req.cluster_name.as_deref())
            .map_or("", |(_, n)| n);
        for (pid, listeners) in &b.route_scoped {
            let on_listener = listeners
                .as_ref()
                .is_none_or(|ls| self.target.listener.is_some_and(|l| ls.contains(&l)));
            let Some(p) = engine
                .policies
                .get(*pid)
                .filter(|p| on_listener && self.view.includes(p.mode))
            else {
                continue;
            };
            use super::compiled::{Action, Through};
            let outcome = match b.through(*pid, self.target.route) {
                Through::Yes => format!("applies: {name} is one of its routes"),
                Through::No => format!("does not apply: {name} is another route"),
                Through::Unsure if p.action == Action::Allow => format!("admits nothing: the request came by cluster {name}, which its routes may use too (its presence keeps this level default-deny)"),
                Through::Unsure => format!("does not apply: the request came by cluster {name}, not by one of its routes"),
            };
            self.note(
                Some(Level::Backend),
                "route",
                Some(&p.id),
                None,
                format_args!("{outcome}"),
            );
        }
    }

    fn select_authorizers(
        &mut self,
        engine: &Engine,
        index: &LevelIndex,
        req: &Request,
    ) -> Vec<AuthzCall> {
        self.calls.clear();
        let mut out = Vec::new();
        for &pid in &index.external_auth {
            let Some(p) = engine.policies.get(pid) else {
                continue;
            };
            if !engine.selects(pid, req, &mut self.cel) {
                self.note(
                    Some(self.level),
                    "externalAuth",
                    Some(&p.id),
                    None,
                    format_args!("not selected"),
                );
                continue;
            }
            let super::compiled::Action::ExternalAuth { authorizer } = p.action else {
                continue;
            };
            let call = AuthzCall {
                slot: self.calls.len(),
                policy: pid,
                authorizer,
                level: self.level,
            };
            self.calls.push((call, None));
            out.push(call);
        }
        out
    }

    fn collect_outcomes(&mut self, engine: &Engine) {
        let calls = std::mem::take(&mut self.calls);
        let level = Some(self.level);
        for (call, outcome) in calls {
            let policy = engine.policies.get(call.policy).map(|p| p.id.clone());
            let authorizer = engine.authorizers.get(call.authorizer);
            match outcome {
                Some(AuthzOutcome::Allow { headers }) => {
                    self.note(
                        level,
                        "externalAuth",
                        policy.as_deref(),
                        None,
                        format_args!("allowed"),
                    );
                    self.add_headers.extend(headers);
                }
                Some(AuthzOutcome::Deny {
                    status,
                    headers,
                    body,
                }) => {
                    self.note(
                        level,
                        "externalAuth",
                        policy.as_deref(),
                        None,
                        format_args!("denied with {status}"),
                    );
                    self.deny(Denial {
                        level,
                        reason: Reason::ExternalAuthDenied,
                        policy,
                        rule: None,
                        relay: Some(Relay {
                            status,
                            headers,
                            body,
                        }),
                        detail: None,
                        scope: None,
                    });
                    return;
                }
                other => {
                    let detail = match other {
                        Some(AuthzOutcome::Error { detail }) => detail,
                        _ => "no answer".to_string(),
                    };
                    let mode = authorizer.map_or(FailureMode::Deny, |a| a.failure_mode);
                    if mode == FailureMode::Allow {
                        self.note(
                            level,
                            "externalAuth",
                            policy.as_deref(),
                            None,
                            format_args!("failed open: {detail}"),
                        );
                        continue;
                    }
                    self.note(
                        level,
                        "externalAuth",
                        policy.as_deref(),
                        None,
                        format_args!("failed: {detail}"),
                    );
                    self.deny(Denial {
                        level,
                        reason: Reason::AuthorizerFailed,
                        policy,
                        rule: None,
                        relay: None,
                        detail: Some(detail),
                        scope: None,
                    });
                    return;
                }
            }
        }
    }

    fn apply_rules(&mut self, engine: &Engine, index: &LevelIndex, req: &Request) {
        let level = Some(self.level);
        match rules_verdict(engine, index, req, &mut self.cel) {
            RulesVerdict::Denied(r) => {
                let (policy, rule) = names(engine, r);
                self.note(
                    level,
                    "deny",
                    policy.as_deref(),
                    rule.as_deref(),
                    format_args!("matched"),
                );
                self.deny(Denial {
                    policy,
                    rule,
                    ..Denial::of(level, Reason::DenyPolicy)
                });
            }
            RulesVerdict::Admitted(None) => {
                let why = if index.has_allow {
                    "no Allow policy applies (when)"
                } else {
                    "no Allow policy"
                };
                self.note(level, "allow", None, None, format_args!("{why}"));
            }
            RulesVerdict::Admitted(Some(r)) => {
                let (policy, rule) = names(engine, r);
                self.note(
                    level,
                    "allow",
                    policy.as_deref(),
                    rule.as_deref(),
                    format_args!("admitted"),
                );
                if let Some(slot) = self.admitted_at.get_mut(level_slot(self.level)) {
                    *slot = Some(r);
                }
                self.admitted = Some((policy, rule));
            }
            RulesVerdict::NotAdmitted => {
                self.note(level, "allow", None, None, format_args!("no rule admits"));
                let scope = self.short_of_scope(engine, index, req);
                self.deny(Denial {
                    scope,
                    ..Denial::of(level, Reason::NotAllowed)
                });
            }
        }
    }

    /// The scope values of the most senior Allow rule of this level that would admit `req`
    /// if the caller's token held more scopes. Judged apart: its CEL conditions count
    /// neither in the errors nor in the trace's CEL records.
    fn short_of_scope(
        &mut self,
        engine: &Engine,
        index: &LevelIndex,
        req: &Request,
    ) -> Option<Vec<String>> {
        let (r, scopes) = engine.short_of_scope(index, req)?;
        let (policy, rule) = names(engine, r);
        self.note(
            Some(self.level),
            "allow",
            policy.as_deref(),
            rule.as_deref(),
            format_args!(
                "would admit with scope {:?}: insufficient_scope",
                scopes.join(" ")
            ),
        );
        Some(scopes)
    }

    fn deny(&mut self, d: Denial) {
        self.done = Some(Decision::Deny(d));
    }

    /// Records a trace line; without a trace nothing is copied or formatted.
    fn note(
        &mut self,
        level: Option<Level>,
        step: &'static str,
        policy: Option<&str>,
        rule: Option<&str>,
        outcome: fmt::Arguments<'_>,
    ) {
        if let Some(t) = &mut self.trace {
            t.push(TraceEntry {
                level,
                step,
                policy: policy.map(str::to_string),
                rule: rule.map(str::to_string),
                outcome: outcome.to_string(),
            });
        }
    }
}

/// Position of a level in per-level arrays.
fn level_slot(level: Level) -> usize {
    match level {
        Level::Gateway => 0,
        Level::Backend => 1,
    }
}

pub(crate) fn names(engine: &Engine, r: RuleRef) -> (Option<String>, Option<String>) {
    (
        engine.policies.get(r.policy).map(|p| p.id.clone()),
        engine.rule(r).map(|x| x.name.clone()),
    )
}
