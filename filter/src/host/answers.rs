//! Authorizer answers kept in Envoy's shared data (docs/semantics.md §3.10): every worker of
//! this Envoy (every VM of the plugin's `vm_id`) reuses the same answers. The slots and
//! records are the engine's ([`mcp_access_engine::authz_cache`]); this is only their storage
//! and the host's clock.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::authz_cache::AnswerStore;

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
