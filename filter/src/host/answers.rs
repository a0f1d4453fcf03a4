//! Authorizer answers kept in Envoy's shared data (docs/semantics.md §3.10): every worker of
//! this Envoy (every VM of the plugin's `vm_id`) reuses the same answers. The slots and
//! records are the engine's ([`mcp_access_engine::authz_cache`]); this is only their storage
//! and the host's clock.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::authz_cache;
use mcp_access_engine::ports::AnswerStore;

use super::abi;

/// Whether a failure of Envoy's shared data has been logged (once per VM).
static FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

/// The answer store in Envoy's shared data.
pub(super) struct SharedAnswers;

fn failed(what: &str, status: u32) {
    if !FAILURE_LOGGED.swap(true, Ordering::Relaxed) {
        abi::log(
            LogLevel::Warn,
            &format!("mcp-access: Envoy's shared data failed ({what}, status {status}): authorizer answers are not reused"),
        );
    }
}

impl AnswerStore for SharedAnswers {
    fn now_ns(&self) -> u64 {
        abi::now_ns()
    }

    fn get(&self, slot: &str) -> Option<Vec<u8>> {
        match abi::shared_data(slot) {
            Ok(found) => found.map(|(value, _)| value),
            // A slot that cannot be read is a miss: the authorizer is asked.
            Err(status) => {
                failed("read", status);
                None
            }
        }
    }

    fn set(&self, slot: &str, record: &[u8]) {
        // Unconditional (cas 0): the last answer written to a slot wins; a record names its
        // key, so a reader never takes another key's answer.
        if let Err(status) = abi::set_shared_data(slot, record, 0) {
            failed("write", status);
        }
    }
}

/// The generation of this worker's configuration of a bundle of digest `bundle`
/// ([`authz_cache::generation`]): the one the other workers of the same configuration
/// started, shared through Envoy's shared data; a new one for a new configuration. Shared data
/// that fails gives this worker a generation of its own (answers are then not shared with the
/// other workers, never reused across configurations).
pub(super) fn generation(bundle: &[u8; 32]) -> [u8; 32] {
    let now = abi::now_ns();
    // A write reads back; one that loses a race reads again (a few times at most).
    for _ in 0..4 {
        let found = match abi::shared_data(authz_cache::GENERATION_KEY) {
            Ok(found) => found,
            Err(status) => {
                failed("read", status);
                break;
            }
        };
        let (record, cas) = found.map_or((None, 0), |(v, cas)| (Some(v), cas));
        let (generation, write) = authz_cache::generation(record.as_deref(), bundle, now);
        let Some(write) = write else {
            return generation;
        };
        match abi::set_shared_data(authz_cache::GENERATION_KEY, &write, cas) {
            // Read back: a worker that wrote at the same time may have come last.
            Ok(()) | Err(abi::CAS_MISMATCH) => continue,
            Err(status) => {
                failed("write", status);
                break;
            }
        }
    }
    authz_cache::generation(None, bundle, now).0
}
