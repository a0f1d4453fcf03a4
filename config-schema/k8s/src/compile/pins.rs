//! ToolPins: each XBackend's reviewed tools, into its bundle backend's `pins`. One ToolPin
//! per XBackend; a second one, or one the API server would reject, is not accepted, and the
//! XBackend it names then lists and serves no tool (fail closed) unless `--skip-rejected`.

use std::collections::HashMap;

use mcp_access_bundle::{self as bundle, Unpinned};

use super::{cond, reason, seniority_order, status, Ctx};
use crate::load::Item;
use crate::refs::{NsName, ObjectName};
use crate::types::{opt, BackendKind, ToolPinSpec};

impl Ctx<'_> {
    pub(super) fn tool_pins(&mut self) {
        // XBackend -> the ToolPin that pins it (the most senior).
        let mut claimed: HashMap<NsName, String> = HashMap::new();
        for i in seniority_order(&self.m.pins) {
            let Some(p) = self.m.pins.get(i) else {
                continue;
            };
            let id = p.id();
            let t = p.spec.target_ref.clone().unwrap_or_default();
            let name = opt(&t.name);
            // Validation admits only the XBackend kinds.
            let kind = BackendKind::of(opt(&t.group), opt(&t.kind)).unwrap_or(BackendKind::Agentic);
            let backend = NsName::new(&p.meta.namespace, name);
            let target = ObjectName::new("XBackend", backend.clone());
            let c = if let Err(miss) = self.resolve_backend(kind, &p.meta.namespace, name) {
                self.report.unenforced.push(format!(
                    "ToolPin {id}: XBackend {backend} is not an accepted XBackend: its tools are not pinned"
                ));
                cond(
                    target,
                    None,
                    reason::TARGET_NOT_FOUND,
                    format!(
                        "no accepted XBackend {backend} in the ToolPin's namespace{}",
                        miss.explain(kind)
                    ),
                )
            } else if let Some(first) = claimed.get(&backend) {
                let message = format!(
                    "ToolPin {first} pins this XBackend already (one ToolPin per XBackend: merge them){}",
                    self.pin_standin_note()
                );
                self.pin_standin(&backend, &id);
                cond(target, None, reason::CONFLICTED, message)
            } else {
                claimed.insert(backend.clone(), id.clone());
                let pins = bundle_pins(p);
                let message = format!(
                    "{} tools pinned; tools not pinned: {:?}",
                    pins.tools.len(),
                    pins.unpinned
                );
                self.pins.insert(backend, pins);
                cond(target, None, reason::ACCEPTED, message)
            };
            self.report.pins.push(status(p, None, vec![c]));
        }
        // A ToolPin the API server would reject still names the XBackend it was meant for.
        let rejected: Vec<(NsName, String)> = self
            .m
            .rejected
            .iter()
            .filter(|r| r.kind == "ToolPin")
            .filter_map(|r| {
                let name = r.raw_spec.get("targetRef")?.get("name")?.as_str()?;
                let backend = NsName::new(&r.namespace, name);
                self.backend_index
                    .contains_key(&backend)
                    .then(|| (backend, format!("{}/{}", r.namespace, r.name)))
            })
            .collect();
        for (backend, id) in rejected {
            self.pin_standin(&backend, &id);
        }
    }

    /// The stand-in of a ToolPin not accepted: no tool of the XBackend passes.
    fn pin_standin(&mut self, backend: &NsName, id: &str) {
        if self.o.skip_rejected {
            return;
        }
        self.pins.insert(
            backend.clone(),
            bundle::ToolPins {
                source: format!("{id} (not accepted: no tool passes)"),
                unpinned: Unpinned::Deny,
                tools: Vec::new(),
            },
        );
    }

    fn pin_standin_note(&self) -> &'static str {
        if self.o.skip_rejected {
            "; it is not enforced (--skip-rejected)"
        } else {
            "; until then no tool of the XBackend is listed or can be called"
        }
    }
}

/// The bundle's pins of an accepted ToolPin.
fn bundle_pins(p: &Item<ToolPinSpec>) -> bundle::ToolPins {
    bundle::ToolPins {
        source: p.id(),
        unpinned: p.spec.unpinned.unwrap_or_default(),
        tools: p
            .spec
            .tools
            .iter()
            .flatten()
            .map(|t| bundle::PinnedTool {
                name: opt(&t.name).to_string(),
                digest: opt(&t.digest).to_string(),
                annotations: t.annotations.clone(),
            })
            .collect(),
    }
}
