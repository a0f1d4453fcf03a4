//! Local rate limits' buckets in Envoy's shared data (docs/semantics.md §8): every worker of
//! this Envoy (every VM of the plugin's `vm_id`) charges the same buckets. The slots and their
//! records are the engine's ([`mcp_access_engine::ratelimit::store`]); this is their storage
//! with compare-and-swap, and the host's clock.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::ratelimit::store::{CounterStore, StoreError};

use super::abi;

/// Whether a failure of Envoy's shared data has been logged (once per VM).
static FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

/// The Local limiter's store in Envoy's shared data.
pub(super) struct SharedCounters;

fn failed(what: &str, status: u32) -> StoreError {
    if !FAILURE_LOGGED.swap(true, Ordering::Relaxed) {
        abi::log(
            LogLevel::Error,
            &format!("mcp-access: Envoy's shared data failed ({what}, status {status}): requests a rate limit selects are refused until it works"),
        );
    }
    StoreError::Failed(status)
}

impl CounterStore for SharedCounters {
    fn now_ns(&self) -> u64 {
        abi::now_ns()
    }

    fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        abi::shared_data(slot).map_err(|status| failed("read", status))
    }

    fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        match abi::set_shared_data(slot, value, cas) {
            Ok(()) => Ok(()),
            Err(abi::CAS_MISMATCH) => Err(StoreError::Conflict),
            Err(status) => Err(failed("write", status)),
        }
    }
}
