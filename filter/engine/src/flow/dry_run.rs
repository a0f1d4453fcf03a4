//! The flow's side of dry-run policies (docs/semantics.md §3.8): the dry-run decision with
//! the items a request names judged in it too, and what `explain` shows of it.

use super::gates::{Judged, PinGate};
use super::{RequestFlow, Stage};
use crate::policy::{Decision, DryRunRecord, Engine, TraceEntry, View};

impl RequestFlow {
    /// The dry-run decision's trace (traced flows only, where dry-run policies concern the
    /// request).
    pub fn dry_run_trace(&self) -> &[TraceEntry] {
        self.eval().map_or(&[], |ev| ev.dry_run_trace())
    }

    /// Whether a dry-run decision was made beside the enforced one.
    pub fn dry_run_evaluated(&self) -> bool {
        self.eval()
            .is_some_and(|ev| ev.dry_run_decision().is_some())
    }

    /// The dry-run decision, with the items a request names judged in it as well: its own
    /// level, reason, policy and rule, whether or not it differs from the enforced one (None
    /// when no dry-run policy concerns the request).
    pub fn dry_run_decision(&self, engine: &Engine) -> Option<Decision> {
        let judged = match &self.stage {
            Stage::Deciding(d) => Judged {
                req: &d.req,
                named: &d.msg.named,
                eval: &d.eval,
                drift: self.stores.drift.as_ref(),
            },
            Stage::Limiting(l) => {
                let a = l.allowed();
                Judged {
                    req: &a.req,
                    named: &a.msg.named,
                    eval: &a.eval,
                    drift: self.stores.drift.as_ref(),
                }
            }
            Stage::Done(d) => Judged {
                req: &d.req,
                named: &d.msg.named,
                eval: d.eval.as_ref()?,
                drift: self.stores.drift.as_ref(),
            },
            Stage::Start | Stage::Body(_) => return None,
        };
        judged.dry_run_gated(engine, &PinGate::default())
    }
}

impl Judged<'_> {
    /// [`RequestFlow::dry_run_decision`], the pins read through `pins`.
    fn dry_run_gated(&self, engine: &Engine, pins: &PinGate) -> Option<Decision> {
        let dry = self.eval.dry_run_decision()?;
        let judged = match dry {
            Decision::Allow { .. } => self.gates(engine, View::DryRun, pins),
            Decision::Deny(_) => None,
        };
        Some(judged.unwrap_or_else(|| dry.clone()))
    }

    /// What the dry-run decision says beside the enforced `decision` (`pins`: as the enforced
    /// decision's gates read them).
    pub(super) fn dry_run(
        &self,
        engine: &Engine,
        decision: &Decision,
        pins: &PinGate,
    ) -> Option<DryRunRecord> {
        let dry = self.dry_run_gated(engine, pins)?;
        let enforced = match decision {
            Decision::Allow { .. } => (true, None),
            Decision::Deny(d) => (false, d.level),
        };
        self.eval.dry_run_record(engine, &dry, enforced)
    }
}
