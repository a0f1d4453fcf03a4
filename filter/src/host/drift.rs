//! Drift from pinned tools (docs/semantics.md §5.5): its records in Envoy's shared data, and
//! the stats and log lines of what listings showed.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::pins::{Observed, PinEvent};
use mcp_access_engine::ports::DriftStore;
use mcp_access_engine::stats::Counter;

use super::{abi, Stream};

/// Whether a failure of Envoy's shared data has been logged (once per VM).
static SHARED_DATA_FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

/// Shared data key prefix of the drift records: `mcp_access.drift/<backend ns/name>/<tool>`.
const DRIFT_KEY: &str = "mcp_access.drift/";

/// Drift from pinned tools, in Envoy's shared data: every worker of this Envoy (every VM of
/// the plugin's `vm_id`) reads and writes the same records, so drift one worker's listing
/// shows refuses the tool's calls on all of them. A record holds what the listing showed
/// ([`Observed::encode`]); an empty value is no record.
pub(super) struct SharedDrift;

impl SharedDrift {
    fn key(backend: &str, tool: &str) -> String {
        format!("{DRIFT_KEY}{backend}/{tool}")
    }

    fn failed(what: &str, status: u32) {
        if !SHARED_DATA_FAILURE_LOGGED.swap(true, Ordering::Relaxed) {
            abi::log(
                LogLevel::Error,
                &format!("mcp-access: Envoy's shared data failed ({what}, status {status}): pinned tools are refused until it works"),
            );
        }
    }
}

impl DriftStore for SharedDrift {
    fn drifted(&self, backend: &str, tool: &str) -> Option<Observed> {
        match abi::shared_data(&Self::key(backend, tool)) {
            Ok(Some((value, _))) => Observed::decode(&value),
            Ok(None) => None,
            // A record that cannot be read refuses the tool (fail closed).
            Err(status) => {
                Self::failed("read", status);
                Some(Observed::Unreadable)
            }
        }
    }

    fn record(&self, backend: &str, tool: &str, seen: Option<Observed>) -> bool {
        let key = Self::key(backend, tool);
        let want = seen.map(Observed::encode).unwrap_or_default();
        // Compare and swap: a write that raced another worker's is retried on what it wrote.
        for _ in 0..8 {
            let (current, cas) = match abi::shared_data(&key) {
                Ok(Some((value, cas))) => (value, cas),
                Ok(None) => (Vec::new(), 0),
                Err(status) => {
                    Self::failed("read", status);
                    return false;
                }
            };
            if current == want {
                return false;
            }
            match abi::set_shared_data(&key, &want, cas) {
                Ok(()) => return true,
                Err(abi::CAS_MISMATCH) => continue,
                Err(status) => {
                    Self::failed("write", status);
                    return false;
                }
            }
        }
        false
    }
}

impl Stream {
    /// Stats and log lines of what listings showed of pinned tools.
    pub(super) fn report_pins(&self, events: Vec<PinEvent>) {
        for e in events {
            match e {
                PinEvent::Drifted {
                    backend,
                    tool,
                    pinned,
                    listed,
                    new,
                } => {
                    self.stats.inc(Counter::PinDrift);
                    let level = if new { LogLevel::Warn } else { LogLevel::Debug };
                    if abi::log_enabled(level) {
                        abi::log(
                            level,
                            &format!(
                                "mcp-access: pinned tool drifted: backend {backend} tool {tool:?} pinned {pinned} listed {}; left out of listings and its calls denied until a listing matches the pin",
                                listed.to_text()
                            ),
                        );
                    }
                }
                PinEvent::Cleared { backend, tool } => abi::log(
                    LogLevel::Info,
                    &format!("mcp-access: pinned tool matches its pin again: backend {backend} tool {tool:?}"),
                ),
            }
        }
    }
}
