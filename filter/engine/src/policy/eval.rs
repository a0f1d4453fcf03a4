//! Per-request evaluation (docs/semantics.md §3): for the Gateway level, then the Backend level:
//! ExternalAuth, then Deny, then Allow. Authorizer calls are returned to the caller as a
//! [`Step::Call`]; their outcomes are fed back with [`super::Evaluation::complete`]. The
//! predicates a rule, a policy and a level are judged by live here too, and the judging of
//! listed items ([`Engine::item_denial`]).

use mcp_access_bundle::{FailureMode, Level, UnknownBackend};

use super::compiled::{self, Action, Through};
use super::decision::{AuthzCall, AuthzOutcome, Decision, Denial, HeaderEdit, Reason, Relay, Step};
use super::index::View;
use super::trace::{RouteUse, TraceEntry, TraceEvent};
use super::{Applies, CelCx, Engine, LevelIndex, Mode, PolicyId, RuleRef, RuleSet};
use crate::request::{Request, Target};

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
    admitted: Option<RuleRef>,
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
        } else if backend.is_none() && engine.settings.unknown_backend == UnknownBackend::Deny {
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
            ev.note(None, None, None, || TraceEvent::Unresolved {
                detail: detail.clone(),
            });
            ev.done = Some(Decision::Deny(Denial {
                detail: Some(detail),
                ..Denial::of(None, reason)
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
                self.done = Some(Decision::Allow {
                    add_headers: std::mem::take(&mut self.add_headers),
                    by: self.admitted.take(),
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
            let applies = match b.through(*pid, self.target.route) {
                Through::Yes => RouteUse::Applies,
                Through::No => RouteUse::OtherRoute,
                Through::Unsure if p.action == Action::Allow => RouteUse::AdmitsNothing,
                Through::Unsure => RouteUse::OtherCluster,
            };
            let name = name.to_string();
            self.note(Some(Level::Backend), Some(&p.id), None, || {
                TraceEvent::Route { name, applies }
            });
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
                self.note(Some(self.level), Some(&p.id), None, || {
                    TraceEvent::AuthorizerNotSelected
                });
                continue;
            }
            let Action::ExternalAuth { authorizer } = p.action else {
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
            let policy = engine.policies.get(call.policy).map(|p| p.id.as_str());
            let by = Some(RuleRef {
                policy: call.policy,
                rule: None,
            });
            let authorizer = engine.authorizers.get(call.authorizer);
            match outcome {
                Some(AuthzOutcome::Allow { headers }) => {
                    self.note(level, policy, None, || TraceEvent::AuthorizerAllowed);
                    self.add_headers.extend(headers);
                }
                Some(AuthzOutcome::Deny {
                    status,
                    headers,
                    body,
                }) => {
                    self.note(level, policy, None, || TraceEvent::AuthorizerDenied {
                        status,
                    });
                    self.deny(Denial {
                        level,
                        reason: Reason::ExternalAuthDenied,
                        by,
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
                        self.note(level, policy, None, || TraceEvent::AuthorizerFailedOpen {
                            detail: detail.clone(),
                        });
                        continue;
                    }
                    self.note(level, policy, None, || TraceEvent::AuthorizerFailed {
                        detail: detail.clone(),
                    });
                    self.deny(Denial {
                        level,
                        reason: Reason::AuthorizerFailed,
                        by,
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
                self.note_rule(engine, level, r, || TraceEvent::DenyMatched);
                self.deny(Denial {
                    by: Some(r),
                    ..Denial::of(level, Reason::DenyPolicy)
                });
            }
            RulesVerdict::Admitted(None) => {
                let when = index.has_allow;
                self.note(level, None, None, || TraceEvent::NoAllowPolicy { when });
            }
            RulesVerdict::Admitted(Some(r)) => {
                self.note_rule(engine, level, r, || TraceEvent::Admitted);
                if let Some(slot) = self.admitted_at.get_mut(level_slot(self.level)) {
                    *slot = Some(r);
                }
                self.admitted = Some(r);
            }
            RulesVerdict::NotAdmitted => {
                self.note(level, None, None, || TraceEvent::NotAdmitted);
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
        self.note_rule(engine, Some(self.level), r, || TraceEvent::ShortOfScope {
            scopes: scopes.clone(),
        });
        Some(scopes)
    }

    fn deny(&mut self, d: Denial) {
        self.done = Some(Decision::Deny(d));
    }

    /// Records a trace line naming rule `r`; without a trace nothing is copied or made.
    fn note_rule(
        &mut self,
        engine: &Engine,
        level: Option<Level>,
        r: RuleRef,
        event: impl FnOnce() -> TraceEvent,
    ) {
        let (policy, rule) = (engine.policy_id(r), engine.rule_name(r));
        self.note(level, policy, rule, event);
    }

    /// Records a trace line; without a trace nothing is copied or made.
    fn note(
        &mut self,
        level: Option<Level>,
        policy: Option<&str>,
        rule: Option<&str>,
        event: impl FnOnce() -> TraceEvent,
    ) {
        if let Some(t) = &mut self.trace {
            t.push(TraceEntry {
                level,
                policy: policy.map(str::to_string),
                rule: rule.map(str::to_string),
                event: event(),
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

impl RuleSet {
    /// The most senior rule that admits `req`.
    pub(crate) fn first_admitting(
        &self,
        engine: &Engine,
        req: &Request,
        cx: &mut CelCx,
    ) -> Option<RuleRef> {
        self.first_where(req, |r| engine.rule_admits(r, req, self.mode, cx))
    }

    /// The most senior rule that would admit `req` if the caller's token held more scopes
    /// ([`compiled::Rule::short_of_scope`]).
    pub(crate) fn first_short_of_scope(
        &self,
        engine: &Engine,
        req: &Request,
        cx: &mut CelCx,
    ) -> Option<RuleRef> {
        self.first_where(req, |r| {
            r.rule.is_some()
                && engine.rule_meets(r, req, self.mode, cx, compiled::Rule::short_of_scope)
        })
    }
}

impl Engine {
    /// Whether rule `r` admits (Allow) or selects (Deny) `req`, its policy's `when` included:
    /// a policy `when` that errs makes an Allow policy admit nothing and a Deny policy apply.
    fn rule_admits(&self, r: RuleRef, req: &Request, mode: Mode, cx: &mut CelCx) -> bool {
        self.rule_meets(r, req, mode, cx, compiled::Rule::admits)
    }

    /// Whether `r`'s policy applies and `r` meets `test` (a policy without rules meets
    /// anything).
    fn rule_meets(
        &self,
        r: RuleRef,
        req: &Request,
        mode: Mode,
        cx: &mut CelCx,
        test: fn(&compiled::Rule, &Request, Mode, &mut CelCx, &str) -> bool,
    ) -> bool {
        let Some(p) = self.policies.get(r.policy) else {
            return false;
        };
        match (cx.applies(r.policy, &p.id, &p.when, req), mode) {
            (Applies::No, _) | (Applies::Errored, Mode::Admit) => return false,
            _ => {}
        }
        match r.rule {
            None => true,
            Some(_) => self
                .rule(r)
                .is_some_and(|rule| test(rule, req, mode, cx, &p.id)),
        }
    }

    /// Whether an ExternalAuth policy applies and selects the request (no rules: every
    /// request).
    pub(crate) fn selects(&self, pid: PolicyId, req: &Request, cx: &mut CelCx) -> bool {
        let Some(p) = self.policies.get(pid) else {
            return false;
        };
        if cx.applies(pid, &p.id, &p.when, req) == Applies::No {
            return false;
        }
        match &p.rules {
            None => true,
            Some(rules) => rules.iter().any(|r| r.admits(req, Mode::Select, cx, &p.id)),
        }
    }

    /// Whether an Allow policy applies at `index` for `req` (the level is then default-deny).
    pub(crate) fn allow_applies(&self, index: &LevelIndex, req: &Request, cx: &mut CelCx) -> bool {
        index.has_allow
            && (index.allow_always
                || index.allow_when.iter().any(|pid| {
                    self.policies
                        .get(*pid)
                        .is_some_and(|p| cx.applies(*pid, &p.id, &p.when, req) != Applies::No)
                }))
    }

    /// Judges `probe` (a request whose MCP operation was replaced by one item it names or
    /// lists) by the Deny and Allow steps of both levels, exactly as a request is judged,
    /// without ExternalAuth: docs/semantics.md §4.3 (`subscriptions/listen`) and §5.4
    /// (listings). None: the item passes; else why it would be denied. Rules read the item
    /// from `probe.mcp` (so would a CEL rule's `request.mcp.*`).
    pub fn item_denial(&self, probe: &Request) -> Option<Denial> {
        self.item_denial_in(View::Enforced, probe)
    }

    /// [`Engine::item_denial`] in the decision of `view`.
    pub fn item_denial_in(&self, view: View, probe: &Request) -> Option<Denial> {
        let (level, rule) = self.item_refusal_in(view, probe)?;
        Some(match rule {
            Some(r) => Denial {
                by: Some(r),
                ..Denial::of(Some(level), Reason::DenyPolicy)
            },
            None => Denial {
                scope: self
                    .level_index(view, level, probe.target)
                    .and_then(|index| self.short_of_scope(index, probe))
                    .map(|(_, scopes)| scopes),
                ..Denial::of(Some(level), Reason::NotAllowed)
            },
        })
    }

    /// The most senior Allow rule of `index` that would admit `req` if the caller's verified
    /// token held more scopes, with the scope values it names (docs/semantics.md §5.6). Judged
    /// apart: its CEL conditions count in no decision's errors.
    pub(crate) fn short_of_scope(
        &self,
        index: &LevelIndex,
        req: &Request,
    ) -> Option<(RuleRef, Vec<String>)> {
        if req.caller.jwts.is_empty() {
            return None;
        }
        let mut cx = self.cel_cx(req.target.backend, false);
        let r = index.allow.first_short_of_scope(self, req, &mut cx)?;
        let scopes = self
            .rule(r)?
            .source
            .scopes()
            .into_iter()
            .map(str::to_string)
            .collect();
        Some((r, scopes))
    }

    /// [`Engine::item_denial`], in the probe's [`Target`](crate::request::Target): None when
    /// the item passes, else the level that refuses it and the Deny rule that matched it
    /// (None: no Allow rule admitted it).
    pub(crate) fn item_refusal(&self, probe: &Request) -> Option<(Level, Option<RuleRef>)> {
        self.item_refusal_in(View::Enforced, probe)
    }

    fn item_refusal_in(&self, view: View, probe: &Request) -> Option<(Level, Option<RuleRef>)> {
        let scope = probe.target;
        for level in [Level::Gateway, Level::Backend] {
            let index = self.level_index(view, level, scope);
            let Some(index) = index else {
                if level == Level::Gateway || self.settings.unknown_backend == UnknownBackend::Deny
                {
                    return Some((level, None));
                }
                continue;
            };
            let mut cx = self.cel_cx(scope.backend, false);
            match rules_verdict(self, index, probe, &mut cx) {
                RulesVerdict::Denied(r) => return Some((level, Some(r))),
                RulesVerdict::NotAdmitted => return Some((level, None)),
                RulesVerdict::Admitted(_) => {}
            }
        }
        None
    }
}
