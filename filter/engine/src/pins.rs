//! Pinned tools (docs/pins.md, docs/semantics.md §5): a backend's reviewed tool definitions
//! compiled for lookups ([`ToolPins`]), the port to the store of drift that the host shares
//! between its workers ([`DriftStore`]), and the judgement of a listed tool ([`PinCheck`])
//! and of a tool call ([`call_refusal`]) against them.
//!
//! A listed tool whose digest differs from its pin is drift: it is left out of the listing,
//! and the store records what was listed, so that a call of it is refused on every worker
//! until a listing shows the pinned definition again (which clears the record). The store
//! holds what a listing showed, not a verdict: a record is judged against the pin in force,
//! so re-pinning the listed definition lets the tool through at once.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use mcp_access_bundle::{self as bundle, Unpinned};

use crate::canonical_json::Digest;

/// One backend's pins, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPins {
    /// `namespace/name` of the ToolPin.
    pub source: String,
    pub unpinned: Unpinned,
    /// Sorted by name (looked up by binary search: names come from listings).
    tools: Vec<(String, Pin)>,
}

/// One pinned tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    pub digest: Digest,
    /// The reviewed annotations (a JSON object; empty when the reviewer stated none).
    pub annotations: serde_json::Value,
}

impl ToolPins {
    /// Compiles a bundle's pins (validated: digests are well formed, names unique).
    pub fn compile(p: &bundle::ToolPins) -> Result<ToolPins, String> {
        let mut tools: Vec<(String, Pin)> = Vec::with_capacity(p.tools.len());
        for t in &p.tools {
            let digest = Digest::parse(&t.digest)
                .ok_or_else(|| format!("tool {:?}: {:?} is not a digest", t.name, t.digest))?;
            let annotations = annotations_value(t.annotations.as_ref());
            tools.push((
                t.name.clone(),
                Pin {
                    digest,
                    annotations,
                },
            ));
        }
        crate::order::sort_by(&mut tools, |a, b| a.0.cmp(&b.0));
        if let Some([a, _]) = tools.windows(2).find(|w| matches!(w, [a, b] if a.0 == b.0)) {
            return Err(format!("tool {:?} is pinned twice", a.0));
        }
        Ok(ToolPins {
            source: p.source.clone(),
            unpinned: p.unpinned,
            tools,
        })
    }

    /// The pin of tool `name`.
    pub fn get(&self, name: &str) -> Option<&Pin> {
        let at = self
            .tools
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        self.tools.get(at).map(|(_, p)| p)
    }

    /// The reviewed annotations of tool `name` as CEL reads them: the pin's, and none (an
    /// empty map) for a tool that is not pinned.
    pub fn annotations(&self, name: &str) -> &serde_json::Value {
        static NONE: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        match self.get(name) {
            Some(p) => &p.annotations,
            None => NONE.get_or_init(|| serde_json::Value::Object(serde_json::Map::new())),
        }
    }

    /// The pinned tools, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = (&str, &Pin)> {
        self.tools.iter().map(|(n, p)| (n.as_str(), p))
    }
}

/// Reviewed annotations as the JSON object CEL reads (named as MCP names them).
fn annotations_value(a: Option<&bundle::ToolAnnotations>) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    if let Some(a) = a {
        if let Some(t) = &a.title {
            map.insert("title".into(), t.clone().into());
        }
        for (name, hint) in [
            ("readOnlyHint", a.read_only_hint),
            ("destructiveHint", a.destructive_hint),
            ("idempotentHint", a.idempotent_hint),
            ("openWorldHint", a.open_world_hint),
        ] {
            if let Some(h) = hint {
                map.insert(name.into(), h.into());
            }
        }
    }
    serde_json::Value::Object(map)
}

/// What a listing showed of a tool whose definition differs from its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The digest of its definition.
    Digest(Digest),
    /// A definition with no canonical form (a member named twice): it matches no pin.
    Unreadable,
}

impl Observed {
    /// How the host stores it: the 32 digest bytes, or `unreadable`.
    pub fn encode(self) -> Vec<u8> {
        match self {
            Observed::Digest(d) => d.0.to_vec(),
            Observed::Unreadable => b"unreadable".to_vec(),
        }
    }

    /// Reads what [`Observed::encode`] wrote; None for nothing stored (an empty value).
    /// Bytes of any other form are read as [`Observed::Unreadable`]: a record that cannot be
    /// read still refuses the tool.
    pub fn decode(bytes: &[u8]) -> Option<Observed> {
        if bytes.is_empty() {
            return None;
        }
        Some(match <[u8; 32]>::try_from(bytes) {
            Ok(d) => Observed::Digest(Digest(d)),
            Err(_) => Observed::Unreadable,
        })
    }

    /// `sha256:...`, or `unreadable`.
    pub fn to_text(self) -> String {
        match self {
            Observed::Digest(d) => d.to_text(),
            Observed::Unreadable => "unreadable (a member named twice)".into(),
        }
    }
}

/// Where drift is recorded, keyed by backend (`namespace/name`) and tool: the host's
/// storage shared by its workers (proxy-wasm shared data in the filter), a map in tests.
pub trait DriftStore {
    /// What a listing last showed of `tool` of `backend` when that differed from its pin;
    /// None when no drift is recorded.
    fn drifted(&self, backend: &str, tool: &str) -> Option<Observed>;
    /// Records what a listing showed: `Some` when the tool drifted, `None` when it matched
    /// its pin (the record is cleared). True when this changed what was recorded.
    fn record(&self, backend: &str, tool: &str, seen: Option<Observed>) -> bool;
}

/// A [`DriftStore`] in memory, for one process's tests and tools.
#[derive(Debug, Default)]
pub struct MemoryDriftStore {
    records: std::cell::RefCell<HashMap<(String, String), Observed>>,
}

impl DriftStore for MemoryDriftStore {
    fn drifted(&self, backend: &str, tool: &str) -> Option<Observed> {
        self.records
            .borrow()
            .get(&(backend.to_string(), tool.to_string()))
            .copied()
    }

    fn record(&self, backend: &str, tool: &str, seen: Option<Observed>) -> bool {
        let key = (backend.to_string(), tool.to_string());
        let mut records = self.records.borrow_mut();
        match seen {
            Some(o) => records.insert(key, o) != Some(o),
            None => records.remove(&key).is_some(),
        }
    }
}

/// The host's drift store as the flow holds it (compared by identity).
#[derive(Clone)]
pub struct DriftPort(pub Rc<dyn DriftStore>);

impl std::fmt::Debug for DriftPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DriftPort")
    }
}

impl PartialEq for DriftPort {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Rc::as_ptr(&self.0), Rc::as_ptr(&other.0))
    }
}

impl Eq for DriftPort {}

/// What a listing said about a pinned tool, for the host's stats and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinEvent {
    /// The tool's definition differs from its pin: it was left out, and calls are refused.
    /// `new`: the store did not hold this yet (logged as a warning; else at debug level).
    Drifted {
        backend: String,
        tool: String,
        pinned: Digest,
        listed: Observed,
        new: bool,
    },
    /// The tool matches its pin again: the record of its drift was cleared.
    Cleared { backend: String, tool: String },
}

/// Judges the tools of listings from one pinned backend, one by one.
#[derive(Debug, Clone, PartialEq)]
pub struct PinCheck {
    /// `namespace/name` of the backend.
    backend: String,
    pins: Arc<ToolPins>,
    store: Option<DriftPort>,
    /// What the listings read so far said, not yet taken by the host.
    events: Vec<PinEvent>,
    /// The pinned tools the listing being read showed drifted: a matching copy of the same
    /// tool later in it never clears that.
    drifted_here: Vec<String>,
}

impl Eq for PinCheck {}

impl PinCheck {
    pub(crate) fn new(backend: &str, pins: Arc<ToolPins>, store: Option<DriftPort>) -> PinCheck {
        PinCheck {
            backend: backend.to_string(),
            pins,
            store,
            events: Vec::new(),
            drifted_here: Vec::new(),
        }
    }

    /// A new listing is read: what the last one showed drifted no longer holds back a match.
    pub(crate) fn begin_listing(&mut self) {
        self.drifted_here.clear();
    }

    /// Whether the listing being read showed tool `name` drifted.
    pub(crate) fn drifted_here(&self, name: Option<&[u8]>) -> bool {
        let name = name.and_then(|n| std::str::from_utf8(n).ok());
        name.is_some_and(|n| self.drifted_here.iter().any(|d| d == n))
    }

    /// A listing that cannot be read (`text`, as the server sent it): each pinned tool it
    /// names (its name as a JSON string anywhere in it, escapes decoded) drifted, as its
    /// definition could not be read (fail closed: calls are refused until a readable listing
    /// shows it as pinned). A string that cannot be decoded may hold any name: then every
    /// pinned tool drifted.
    pub(crate) fn unreadable(&mut self, text: &[u8]) {
        let named: Vec<String> = match json_strings(text) {
            Some(strings) => strings
                .into_iter()
                .filter(|s| self.pins.get(s).is_some())
                .collect(),
            None => self.pins.tools().map(|(n, _)| n.to_string()).collect(),
        };
        self.begin_listing();
        for n in named {
            self.listed(Some(n.as_bytes()), Some(Observed::Unreadable));
        }
    }

    /// The pins judged against.
    pub(crate) fn pins(&self) -> &Arc<ToolPins> {
        &self.pins
    }

    /// Whether the listed tool `name` (None: it has no name, or one that is not text) may be
    /// shown: a pinned tool when `observed` is its pin's digest (None: it was not digested,
    /// which matches no pin), another tool when unpinned tools are allowed. Drift, and its
    /// end, are recorded.
    pub(crate) fn listed(&mut self, name: Option<&[u8]>, observed: Option<Observed>) -> bool {
        let Some(name) = name.and_then(|n| std::str::from_utf8(n).ok()) else {
            return false;
        };
        let Some(pin) = self.pins.get(name) else {
            return self.pins.unpinned == Unpinned::Allow;
        };
        let observed = observed.unwrap_or(Observed::Unreadable);
        let already = self.drifted_here.iter().any(|d| d == name);
        let matches = observed == Observed::Digest(pin.digest) && !already;
        if already {
            // A drifted copy came first in this listing: the tool stays drifted, as recorded.
            return false;
        }
        if !matches {
            self.drifted_here.push(name.to_string());
        }
        let seen = (!matches).then_some(observed);
        let changed = self
            .store
            .as_ref()
            .is_some_and(|s| s.0.record(&self.backend, name, seen));
        match seen {
            Some(listed) => self.events.push(PinEvent::Drifted {
                backend: self.backend.clone(),
                tool: name.to_string(),
                pinned: pin.digest,
                listed,
                new: changed || self.store.is_none(),
            }),
            None if changed => self.events.push(PinEvent::Cleared {
                backend: self.backend.clone(),
                tool: name.to_string(),
            }),
            None => {}
        }
        matches
    }

    /// The events since the last call.
    pub(crate) fn take_events(&mut self) -> Vec<PinEvent> {
        std::mem::take(&mut self.events)
    }
}

/// The strings of `text` as a JSON reader finds them (from each `"` outside a string to the
/// next unescaped one), decoded. None when one cannot be decoded (a bad escape, a lone
/// surrogate, a control, bytes that are not UTF-8, no closing quote).
fn json_strings(text: &[u8]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(start) = text.get(i..)?.iter().position(|&b| b == b'"') {
        let start = i + start;
        let mut end = start + 1;
        loop {
            match text.get(end)? {
                b'\\' => end += 2,
                b'"' => break,
                _ => end += 1,
            }
        }
        out.push(serde_json::from_slice::<String>(text.get(start..=end)?).ok()?);
        i = end + 1;
    }
    Some(out)
}

/// Why the pins refuse a call of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallRefusal {
    /// The tool is not pinned and unpinned tools are denied.
    NotPinned,
    /// A listing showed the tool with another definition than its pin's.
    Drifted { pinned: Digest, listed: Observed },
}

/// Whether the pins of `backend` refuse a call of `tool`.
pub fn call_refusal(
    pins: &ToolPins,
    backend: &str,
    tool: &str,
    store: Option<&dyn DriftStore>,
) -> Option<CallRefusal> {
    let Some(pin) = pins.get(tool) else {
        return (pins.unpinned == Unpinned::Deny).then_some(CallRefusal::NotPinned);
    };
    let listed = store?.drifted(backend, tool)?;
    // A record of what the pin now names is no drift (the tool was pinned again).
    (listed != Observed::Digest(pin.digest)).then_some(CallRefusal::Drifted {
        pinned: pin.digest,
        listed,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pins(unpinned: Unpinned) -> Arc<ToolPins> {
        let b: bundle::ToolPins = serde_json::from_value(serde_json::json!({
            "source": "ns/p",
            "unpinned": unpinned,
            "tools": [
                {"name": "echo", "digest": Digest::of(b"echo").to_text(),
                 "annotations": {"readOnlyHint": true}},
                {"name": "rm", "digest": Digest::of(b"rm").to_text()}
            ]
        }))
        .unwrap();
        Arc::new(ToolPins::compile(&b).unwrap())
    }

    #[test]
    fn drift_is_recorded_refuses_calls_and_clears_on_a_match() {
        let store: Rc<dyn DriftStore> = Rc::new(MemoryDriftStore::default());
        let mut check = PinCheck::new("ns/b", pins(Unpinned::Deny), Some(DriftPort(store.clone())));
        let p = pins(Unpinned::Deny);
        let echo = Observed::Digest(Digest::of(b"echo"));
        let other = Observed::Digest(Digest::of(b"echo, but new"));
        assert!(check.listed(Some(b"echo"), Some(echo)));
        assert!(check.take_events().is_empty());
        assert_eq!(call_refusal(&p, "ns/b", "echo", Some(&*store)), None);
        // Drift: hidden, recorded once as new, calls refused with both digests.
        // (Each listing read anew.)
        assert!(!check.listed(Some(b"echo"), Some(other)));
        check.begin_listing();
        assert!(!check.listed(Some(b"echo"), Some(other)));
        let news: Vec<bool> = check
            .take_events()
            .iter()
            .map(|e| matches!(e, PinEvent::Drifted { new: true, .. }))
            .collect();
        assert_eq!(news, [true, false]);
        assert_eq!(
            call_refusal(&p, "ns/b", "echo", Some(&*store)),
            Some(CallRefusal::Drifted {
                pinned: Digest::of(b"echo"),
                listed: other
            })
        );
        // Another backend's tool of that name is not affected.
        assert_eq!(call_refusal(&p, "ns/c", "echo", Some(&*store)), None);
        // The pinned definition again: shown, cleared, calls pass.
        check.begin_listing();
        assert!(check.listed(Some(b"echo"), Some(echo)));
        assert_eq!(
            check.take_events(),
            [PinEvent::Cleared {
                backend: "ns/b".into(),
                tool: "echo".into()
            }]
        );
        assert_eq!(call_refusal(&p, "ns/b", "echo", Some(&*store)), None);
        // A definition with no canonical form drifts too.
        assert!(!check.listed(Some(b"rm"), Some(Observed::Unreadable)));
        assert!(call_refusal(&p, "ns/b", "rm", Some(&*store)).is_some());
    }

    #[test]
    fn unpinned_tools_follow_the_pins_choice() {
        let any = Observed::Digest(Digest::of(b"x"));
        for (unpinned, shown) in [(Unpinned::Deny, false), (Unpinned::Allow, true)] {
            let p = pins(unpinned);
            let mut check = PinCheck::new("ns/b", p.clone(), None);
            assert_eq!(check.listed(Some(b"new_tool"), Some(any)), shown);
            assert_eq!(
                call_refusal(&p, "ns/b", "new_tool", None),
                (!shown).then_some(CallRefusal::NotPinned)
            );
            assert_eq!(p.annotations("new_tool"), &serde_json::json!({}));
        }
        // No name, or a name that is not text: never shown.
        let mut check = PinCheck::new("ns/b", pins(Unpinned::Allow), None);
        assert!(!check.listed(None, Some(any)));
        assert!(!check.listed(Some(b"\xff"), Some(any)));
    }

    #[test]
    fn a_record_of_the_pinned_definition_is_no_drift() {
        let store = MemoryDriftStore::default();
        let p = pins(Unpinned::Deny);
        // A record written under an older pin that named another definition.
        store.record("ns/b", "echo", Some(Observed::Digest(Digest::of(b"echo"))));
        assert_eq!(call_refusal(&p, "ns/b", "echo", Some(&store)), None);
        assert_eq!(
            p.annotations("echo"),
            &serde_json::json!({"readOnlyHint": true})
        );
        assert_eq!(p.annotations("rm"), &serde_json::json!({}));
    }

    #[test]
    fn annotations_read_as_mcp_names_them() {
        let a: bundle::ToolAnnotations = serde_json::from_value(serde_json::json!({
            "title": "T", "readOnlyHint": true, "destructiveHint": false,
            "idempotentHint": true, "openWorldHint": false
        }))
        .unwrap();
        assert_eq!(
            annotations_value(Some(&a)),
            serde_json::to_value(&a).unwrap()
        );
        assert_eq!(annotations_value(None), serde_json::json!({}));
    }

    #[test]
    fn stored_records_read_back_and_unknown_bytes_refuse() {
        let d = Observed::Digest(Digest::of(b"x"));
        assert_eq!(Observed::decode(&d.encode()), Some(d));
        assert_eq!(
            Observed::decode(&Observed::Unreadable.encode()),
            Some(Observed::Unreadable)
        );
        assert_eq!(Observed::decode(b""), None);
        assert_eq!(Observed::decode(b"garbage"), Some(Observed::Unreadable));
    }
}
