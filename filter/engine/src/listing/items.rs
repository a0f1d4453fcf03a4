//! Judging a listing's items: each as a call of that item made by the request allowed, and
//! listed tools held to their pins (docs/semantics.md §5.4, §5).

use mcp_access_bundle::mcp_methods::Listing;

use super::Judge;
use crate::pins::{PinCheck, PinEvent};
use crate::request::{McpOp, Request};

/// What judges one response's items between its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ItemJudge {
    /// A copy of the request allowed, its MCP operation replaced by a call of each item in
    /// turn (made when the first item is judged).
    probe: Option<Box<Request>>,
    /// The listing whose items the probe is set up to judge (its `LISTINGS` index).
    probe_listing: Option<u8>,
    /// The backend's pinned tools: listed tools are held to them (docs/semantics.md §5).
    pub(super) pins: Option<PinCheck>,
}

impl ItemJudge {
    pub(super) fn new(pins: Option<PinCheck>) -> ItemJudge {
        ItemJudge {
            probe: None,
            probe_listing: None,
            pins,
        }
    }

    /// What the listings read so far said about pinned tools (drift, and its end); each
    /// event is given once.
    pub(super) fn take_pin_events(&mut self) -> Vec<PinEvent> {
        self.pins
            .as_mut()
            .map_or_else(Vec::new, PinCheck::take_events)
    }

    /// Whether the caller could use the item of `listing` (its [`LISTINGS`] index and entry)
    /// named `name` (its name or URI, decoded; None: it has none). Resource templates are
    /// judged as a read of some URI.
    pub(super) fn usable(
        &mut self,
        judge: Judge<'_>,
        listing: (u8, &'static Listing),
        name: Option<&[u8]>,
    ) -> bool {
        let (index, listing) = listing;
        let Some(request) = judge.request else {
            return false;
        };
        let probe = self
            .probe
            .get_or_insert_with(|| Box::new(Request::clone(request)));
        if self.probe_listing != Some(index) {
            // Each item is judged as a call of that item alone: never with the request's params.
            probe.as_item_call(
                listing.judged_as,
                listing.key,
                None,
                judge.engine.cel_needs().params,
            );
            self.probe_listing = Some(index);
        }
        let McpOp::Call { param, .. } = &mut probe.mcp else {
            return false;
        };
        match (listing.key, name.map(std::str::from_utf8)) {
            (Some(key), Some(Ok(n))) => {
                // The probe's string is reused from item to item.
                let p = param.get_or_insert_with(String::new);
                p.clear();
                p.push_str(n);
                if probe.params.is_some() {
                    probe.set_item_params(Some(key), Some(n), true);
                }
            }
            // An item without its name or URI cannot be judged, so it is not listed.
            (Some(_), _) => return false,
            (None, _) => *param = None,
        }
        judge.engine.item_refusal(probe).is_none()
    }
}
