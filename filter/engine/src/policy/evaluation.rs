//! One request's evaluation ([`Evaluation`]): the enforced decision and, where a dry-run
//! policy (docs/semantics.md §3.8) is attached, the decision with every dry-run policy
//! enforced beside it, and where the two differ. Both decisions run over one set of
//! authorizer calls: a policy both consult is called once; a dry-run policy's authorizer is
//! called for the dry-run decision only, and its answers are recorded, never applied.

use mcp_access_bundle::{Level, PolicyMode};

use super::eval::Run;
use super::index::View;
use super::{
    AuthzCall, AuthzOutcome, CelRecord, Decision, Engine, LevelIndex, PolicyId, Reason, RuleRef,
    Step, TraceEntry,
};
use crate::request::Request;

/// What a dry-run policy changed about one request: the dry-run decision where it differs
/// from the one enforced, and the answers of authorizers called for it alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunRecord {
    /// Whether the dry-run decision differs from the enforced one.
    pub changed: bool,
    /// The dry-run decision.
    pub allowed: bool,
    /// The level the dry-run decision denies at, or (allowed) the one where it admits
    /// what the enforced decision denied.
    pub level: Option<Level>,
    /// Why the dry-run decision denies (None: it allows).
    pub reason: Option<Reason>,
    /// The policy that makes the difference, and its rule (names: [`DryRunRecord::named`]).
    pub policy: Option<PolicyId>,
    pub rule: Option<RuleRef>,
    /// Dry-run authorizer calls: the policy and its answer.
    pub authorizers: Vec<(PolicyId, CallAnswer)>,
    /// The policies of Backend-level authorizers the dry-run decision would call, not
    /// called because the enforced decision denied at the Gateway level (their answers
    /// taken as allow).
    pub not_called: Vec<PolicyId>,
    /// For the per-policy counters: the position of the policy in
    /// [`Engine::dry_run_policies`] when it is a dry-run policy and the decision changed.
    pub counter: Option<usize>,
}

impl DryRunRecord {
    /// The record with its policies and rule named as records show them (each policy as
    /// the user wrote it).
    pub fn named<'a>(&'a self, engine: &'a Engine) -> DryRunNamed<'a> {
        let name = |p: &PolicyId| engine.policy_name(*p);
        DryRunNamed {
            record: self,
            policy: self.policy.as_ref().and_then(name),
            rule: self.rule.and_then(|r| engine.rule_name(r)),
            authorizers: (self.authorizers.iter())
                .filter_map(|(p, answer)| Some((name(p)?, answer)))
                .collect(),
            not_called: self.not_called.iter().filter_map(name).collect(),
        }
    }
}

/// A [`DryRunRecord`] with its names, as records and `explain` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunNamed<'a> {
    pub record: &'a DryRunRecord,
    pub policy: Option<&'a str>,
    pub rule: Option<&'a str>,
    pub authorizers: Vec<(&'a str, &'a CallAnswer)>,
    pub not_called: Vec<&'a str>,
}

/// An authorizer's answer as a dry-run record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallAnswer {
    Allow,
    Deny {
        status: u16,
    },
    Error {
        detail: String,
    },
    /// None came (the decision did not wait for it).
    None,
}

impl CallAnswer {
    fn of(outcome: Option<&AuthzOutcome>) -> CallAnswer {
        match outcome {
            Some(AuthzOutcome::Allow { .. }) => CallAnswer::Allow,
            Some(AuthzOutcome::Deny { status, .. }) => CallAnswer::Deny { status: *status },
            Some(AuthzOutcome::Error { detail }) => CallAnswer::Error {
                detail: detail.clone(),
            },
            None => CallAnswer::None,
        }
    }
}

/// `allow`, `deny <status>`, `error: <detail>` or `no answer`.
impl std::fmt::Display for CallAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallAnswer::Allow => f.write_str("allow"),
            CallAnswer::Deny { status } => write!(f, "deny {status}"),
            CallAnswer::Error { detail } => write!(f, "error: {detail}"),
            CallAnswer::None => f.write_str("no answer"),
        }
    }
}

/// One request's evaluation: the enforced decision and, where a dry-run policy is attached
/// at the request's listener or backend, the dry-run decision beside it.
#[derive(Debug)]
pub struct Evaluation {
    main: Run,
    dry: Option<Box<Shadow>>,
    /// Whether an authorizer call of the enforced decision got no usable answer.
    failed: bool,
}

/// The dry-run decision being made, and the calls both decisions share.
#[derive(Debug)]
struct Shadow {
    run: Run,
    /// Every authorizer call either decision asked for; a call's slot is its position.
    calls: Vec<Shared>,
    not_called: Vec<PolicyId>,
    /// The enforced decision, once made, until it is handed out.
    main_done: Option<Decision>,
    /// The dry-run decision, once made.
    dry_done: Option<Decision>,
}

/// One authorizer call, and the slot each decision knows it by.
#[derive(Debug)]
struct Shared {
    call: AuthzCall,
    main: Option<usize>,
    dry: Option<usize>,
    outcome: Option<AuthzOutcome>,
}

impl Evaluation {
    pub(super) fn new(engine: &Engine, req: &Request, trace: bool) -> Evaluation {
        let dry = engine
            .dry
            .as_ref()
            .filter(|d| d.differs(req.target))
            .map(|_| {
                Box::new(Shadow {
                    run: Run::new(engine, req, trace, View::DryRun),
                    calls: Vec::new(),
                    not_called: Vec::new(),
                    main_done: None,
                    dry_done: None,
                })
            });
        Evaluation {
            main: Run::new(engine, req, trace, View::Enforced),
            dry,
            failed: false,
        }
    }

    /// Runs until both decisions are made or authorizer outcomes are needed.
    pub fn advance(&mut self, engine: &Engine, req: &Request) -> Step {
        let Some(sh) = self.dry.as_deref_mut() else {
            return self.main.advance(engine, req);
        };
        loop {
            let mut out = Vec::new();
            let mut settled = false;
            // Each run hands out its decision once: both are kept here until both are made.
            if sh.main_done.is_none() {
                match self.main.advance(engine, req) {
                    Step::Call(calls) => {
                        for c in calls {
                            settled |= route(&mut self.main, sh, c, View::Enforced, &mut out);
                        }
                    }
                    Step::Done(d) => sh.main_done = Some(d),
                    Step::Waiting => {}
                }
            }
            if sh.dry_done.is_none() {
                match sh.run.advance(engine, req) {
                    Step::Call(calls) => {
                        for c in calls {
                            settled |= route(&mut self.main, sh, c, View::DryRun, &mut out);
                        }
                    }
                    Step::Done(d) => sh.dry_done = Some(d),
                    Step::Waiting => {}
                }
            }
            if !out.is_empty() {
                return Step::Call(out);
            }
            if settled {
                continue;
            }
            if sh.dry_done.is_some() {
                if let Some(d) = sh.main_done.take() {
                    return Step::Done(d);
                }
            }
            return Step::Waiting;
        }
    }

    /// Records an authorizer outcome for the call of `slot`.
    pub fn complete(&mut self, slot: usize, outcome: AuthzOutcome) {
        let error = matches!(outcome, AuthzOutcome::Error { .. });
        let Some(sh) = self.dry.as_deref_mut() else {
            self.failed |= error;
            return self.main.complete(slot, outcome);
        };
        let Some(s) = sh.calls.get_mut(slot).filter(|s| s.outcome.is_none()) else {
            return;
        };
        if let Some(m) = s.main {
            self.failed |= error;
            self.main.complete(m, outcome.clone());
        }
        if let Some(d) = s.dry {
            sh.run.complete(d, outcome.clone());
        }
        s.outcome = Some(outcome);
    }

    /// Whether an authorizer call of the enforced decision got no usable answer (whatever
    /// its failure mode made of it).
    pub fn authorizer_failed(&self) -> bool {
        self.failed
    }

    /// The authorizer of an outstanding call.
    pub(crate) fn call_authorizer(&self, slot: usize) -> Option<usize> {
        match &self.dry {
            None => self.main.call_authorizer(slot),
            Some(sh) => sh.calls.get(slot).map(|s| s.call.authorizer),
        }
    }

    /// Whether the call of `slot` is made for the dry-run decision alone (its answer is
    /// never applied: no header, no metadata).
    pub fn dry_run_only(&self, slot: usize) -> bool {
        self.dry
            .as_ref()
            .and_then(|sh| sh.calls.get(slot))
            .is_some_and(|s| s.main.is_none())
    }

    /// The enforced decision's trace, if it was asked for.
    pub fn trace(&self) -> &[TraceEntry] {
        self.main.trace()
    }

    /// The dry-run decision's trace (empty without one, or untraced).
    pub fn dry_run_trace(&self) -> &[TraceEntry] {
        self.dry.as_ref().map_or(&[], |sh| sh.run.trace())
    }

    /// The CEL conditions the enforced decision evaluated (only when traced).
    pub fn cel_records(&self) -> &[CelRecord] {
        self.main.cel_records()
    }

    /// CEL evaluations of the enforced decision that erred, and of those the ones stopped
    /// by the step limit.
    pub fn cel_errors(&self) -> (u32, u32) {
        self.main.cel_errors()
    }

    /// `namespace/name/listener` the request arrived on.
    pub(crate) fn listener_name(&self, engine: &Engine) -> Option<String> {
        self.main.listener_name(engine)
    }

    /// `namespace/name` of the backend Envoy routed to.
    pub(crate) fn backend_name<'e>(&self, engine: &'e Engine) -> Option<&'e str> {
        self.main.backend_name(engine)
    }

    /// The dry-run decision, once made (None: no dry-run policy concerns the request).
    pub fn dry_run_decision(&self) -> Option<&Decision> {
        self.dry.as_ref().and_then(|sh| sh.dry_done.as_ref())
    }

    /// What the dry run found, given its final decision `dry` (after the checks that follow
    /// an allow) and the enforced one (`enforced`: allowed, and the level of a denial).
    /// None when nothing is to be reported.
    pub fn dry_run_record(
        &self,
        engine: &Engine,
        dry: &Decision,
        enforced: (bool, Option<Level>),
    ) -> Option<DryRunRecord> {
        let sh = self.dry.as_deref()?;
        let authorizers: Vec<(PolicyId, CallAnswer)> = sh
            .calls
            .iter()
            .filter(|s| s.main.is_none())
            .map(|s| (s.call.policy, CallAnswer::of(s.outcome.as_ref())))
            .collect();
        let not_called = sh.not_called.clone();
        let allowed = matches!(dry, Decision::Allow { .. });
        let changed = allowed != enforced.0;
        if !changed && authorizers.is_empty() && not_called.is_empty() {
            return None;
        }
        let (level, reason, by, pid) = match dry {
            Decision::Deny(d) => {
                // No rule denied: the level admits nothing, or a dry-run Allow policy there
                // made it default-deny.
                let pid =
                    d.by.map(|r| r.policy)
                        .or_else(|| match (d.reason, d.level, changed) {
                            (Reason::NotAllowed, Some(l), true) => {
                                let index = engine.level_index(View::DryRun, l, sh.run.target());
                                index.and_then(|ix| dry_run_allow(engine, ix))
                            }
                            _ => None,
                        });
                (d.level, Some(d.reason), d.by, pid)
            }
            Decision::Allow { by, .. } if !changed => (None, None, *by, by.map(|r| r.policy)),
            Decision::Allow { .. } => {
                // The admission the enforced decision lacked, at the level it denied at.
                let r = enforced.1.and_then(|l| sh.run.admitted_at(l));
                (enforced.1, None, r, r.map(|r| r.policy))
            }
        };
        let counter = pid
            .filter(|_| changed)
            .and_then(|pid| engine.dry.as_ref()?.policies.iter().position(|p| *p == pid));
        Some(DryRunRecord {
            changed,
            allowed,
            level,
            reason,
            policy: pid,
            rule: by,
            authorizers,
            not_called,
            counter,
        })
    }
}

/// The most senior dry-run Allow policy attached at a level.
fn dry_run_allow(engine: &Engine, index: &LevelIndex) -> Option<PolicyId> {
    index
        .allow
        .rules()
        .into_iter()
        .map(|r| r.policy)
        .find(|pid| {
            engine
                .policies
                .get(*pid)
                .is_some_and(|p| p.mode == PolicyMode::DryRun)
        })
}

/// An authorizer's answer as the dry-run record shows it.
/// Hands call `c` of one decision (`view`) to the shared calls: joined to a call of the same
/// policy (answered at once when that one was), or made anew (added to `out`). A Backend-level
/// call of the dry-run decision is not made when the enforced decision denied at the
/// Gateway level (docs/semantics.md §3.1: no Backend-level authorizer is then called); the
/// dry-run decision takes it as allowed. True when a call was answered at once.
fn route(
    main: &mut Run,
    sh: &mut Shadow,
    c: AuthzCall,
    view: View,
    out: &mut Vec<AuthzCall>,
) -> bool {
    fn mine(s: &mut Shared, view: View) -> &mut Option<usize> {
        match view {
            View::Enforced => &mut s.main,
            View::DryRun => &mut s.dry,
        }
    }
    if let Some(s) = sh.calls.iter_mut().find(|s| s.call.policy == c.policy) {
        *mine(s, view) = Some(c.slot);
        let Some(o) = s.outcome.clone() else {
            return false;
        };
        match view {
            View::Enforced => main.complete(c.slot, o),
            View::DryRun => sh.run.complete(c.slot, o),
        }
        return true;
    }
    let gateway_denied = matches!(
        sh.main_done.as_ref(),
        Some(Decision::Deny(d)) if d.level == Some(Level::Gateway)
    );
    if view == View::DryRun && c.level == Level::Backend && gateway_denied {
        sh.not_called.push(c.policy);
        sh.run.complete(
            c.slot,
            AuthzOutcome::Allow {
                headers: Vec::new(),
            },
        );
        return true;
    }
    let call = AuthzCall {
        slot: sh.calls.len(),
        ..c
    };
    let mut s = Shared {
        call,
        main: None,
        dry: None,
        outcome: None,
    };
    *mine(&mut s, view) = Some(c.slot);
    sh.calls.push(s);
    out.push(call);
    false
}

impl Engine {
    /// Starts evaluating a request.
    pub fn begin(&self, req: &Request, trace: bool) -> Evaluation {
        Evaluation::new(self, req, trace)
    }

    /// The policies of mode `DryRun`, most senior first (indexes into
    /// [`Engine::policies`]): [`DryRunRecord::counter`] is a position in this list.
    pub fn dry_run_policies(&self) -> &[PolicyId] {
        self.dry.as_ref().map_or(&[], |d| d.policies.as_slice())
    }
}
