//! The gates a request passes after the policies allowed it, in either decision
//! ([`RequestFlow::gates`]): the items it names (docs/semantics.md §4), then its backend's
//! pins (§5, "Pinned tools"): a tool the ToolPin does not name (with `unpinned: Deny`) or whose
//! listed definition drifted from its pin is denied.

use std::cell::OnceCell;

use mcp_access_bundle::{mcp_methods, Level};

use super::RequestFlow;
use crate::pins::{call_refusal, CallRefusal, DriftPort};
use crate::policy::{Decision, Denial, Engine, Reason, View};
use crate::request::{McpOp, Request};

/// The denial of `req` (allowed by the policies) by its backend's pins, if any.
fn pin_denial(engine: &Engine, req: &Request, drift: Option<&DriftPort>) -> Option<Denial> {
    let McpOp::Call {
        method,
        param: Some(tool),
    } = &req.mcp
    else {
        return None;
    };
    if method != mcp_methods::TOOLS_CALL {
        return None;
    }
    let backend = engine.backends.get(req.target.backend?)?;
    let pins = backend.pins.as_deref()?;
    let store = drift.map(|d| &*d.0);
    let (reason, detail) = match call_refusal(pins, &backend.id, tool, store)? {
        CallRefusal::NotPinned => (
            Reason::ToolNotPinned,
            format!("ToolPin {} does not pin tool {tool:?}", pins.source),
        ),
        CallRefusal::Drifted { pinned, listed } => (
            Reason::ToolDrifted,
            format!(
                "tool {tool:?} drifted from ToolPin {}: pinned {pinned}, listed {}",
                pins.source,
                listed.to_text()
            ),
        ),
    };
    let mut d = Denial::of(Some(Level::Backend), reason);
    d.detail = Some(detail);
    Some(d)
}

/// The pins' answer for one request, read once: the same in both decisions (pins are not
/// policies, dry-run or not), and the drift store (shared data) read once per request.
#[derive(Default)]
pub(super) struct PinGate(OnceCell<Option<Denial>>);

impl RequestFlow {
    /// The gates after the policies allowed the request in `view`'s decision: each item it
    /// names, judged in that decision, then its backend's pins. None: it passes.
    pub(super) fn gates(&self, engine: &Engine, view: View, pins: &PinGate) -> Option<Decision> {
        if let Some(d) = self.judge_named_items(engine, view) {
            return Some(d);
        }
        let denial = pins.0.get_or_init(|| {
            let req = self.req.as_ref()?;
            pin_denial(engine, req, self.drift.as_ref())
        });
        denial.clone().map(Decision::Deny)
    }
}
