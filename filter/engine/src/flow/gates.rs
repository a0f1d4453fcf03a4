//! The gates a request passes after the policies allowed it, in either decision
//! ([`Judged::gates`]): the items it names (docs/semantics.md §4), then its backend's
//! pins (§5, "Pinned tools"): a tool the ToolPin does not name (with `unpinned: Deny`) or whose
//! listed definition drifted from its pin is denied.

use std::cell::OnceCell;

use mcp_access_bundle::{mcp_methods, Level};

use super::NamedItems;
use crate::pins::{call_refusal, CallRefusal, DriftPort};
use crate::policy::{Decision, Denial, Engine, Evaluation, Reason, View};
use crate::request::Request;

/// The denial of `req` (allowed by the policies) by its backend's pins, if any.
fn pin_denial(engine: &Engine, req: &Request, drift: Option<&DriftPort>) -> Option<Denial> {
    let tool = req.mcp.tool_called()?;
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

/// A request as the policies judged it, with what the gates after them read.
pub(super) struct Judged<'a> {
    pub req: &'a Request,
    pub named: &'a NamedItems,
    pub eval: &'a Evaluation,
    pub drift: Option<&'a DriftPort>,
}

impl Judged<'_> {
    /// The gates after the policies allowed the request in `view`'s decision: each item it
    /// names, judged in that decision, then its backend's pins. None: it passes.
    pub(super) fn gates(&self, engine: &Engine, view: View, pins: &PinGate) -> Option<Decision> {
        if let Some(d) = self.judge_named_items(engine, view) {
            return Some(d);
        }
        let denial = pins
            .0
            .get_or_init(|| pin_denial(engine, self.req, self.drift));
        denial.clone().map(Decision::Deny)
    }

    /// A request the policies let through that names other items is denied unless each of
    /// them passes as a call of that item alone (docs/semantics.md §4): a
    /// `subscriptions/listen`'s resource URIs as `resources/subscribe`, a
    /// `completion/complete`'s prompt or resource as `prompts/get` / `resources/read`.
    fn judge_named_items(&self, engine: &Engine, view: View) -> Option<Decision> {
        let subscribes_as = self.req.mcp.called()?.subscribes_as();
        let subscriptions =
            self.named.subscriptions.iter().filter_map(|uri| {
                subscribes_as.map(|m| (m, mcp_methods::Param::Uri, uri.as_str()))
            });
        let reference = self
            .named
            .completion_ref
            .as_ref()
            .map(|r| (r.judged_as, r.key, r.value.as_str()));
        let mut items = subscriptions.chain(reference).peekable();
        items.peek()?;
        let mut probe = self.req.clone();
        for (judged_as, key, value) in items {
            // Judged as a call of that item alone: never with the request's own params.
            probe.as_item_call(judged_as, Some(key), Some(value), engine.cel_needs().params);
            if let Some(d) = engine.item_denial_in(view, &probe) {
                return Some(Decision::Deny(d));
            }
        }
        None
    }
}
