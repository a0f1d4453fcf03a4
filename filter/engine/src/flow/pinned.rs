//! A tool call held to its backend's pins (docs/semantics.md §5, "Pinned tools"): a tool the
//! ToolPin does not name (with `unpinned: Deny`) or whose listed definition drifted from its
//! pin is denied, after the policies allowed the call.

use mcp_access_bundle::{mcp_methods, Level};

use super::RequestFlow;
use crate::pins::{call_refusal, CallRefusal, DriftPort};
use crate::policy::{Decision, Denial, Engine, Reason};
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

impl RequestFlow {
    /// The pins' denial of this request once the policies allowed it (in either decision:
    /// pins are not policies, dry-run or not).
    pub(super) fn pin_refusal(&self, engine: &Engine) -> Option<Decision> {
        let req = self.req.as_ref()?;
        pin_denial(engine, req, self.drift.as_ref()).map(Decision::Deny)
    }
}
