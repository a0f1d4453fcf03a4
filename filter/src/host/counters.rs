//! Local rate limits' buckets in Envoy's shared data (docs/semantics.md §8): every worker of
//! this Envoy (every VM of the plugin's `vm_id`) charges the same buckets. The slots and their
//! records are the engine's ([`mcp_access_engine::ratelimit::store`]); this is their storage
//! with compare-and-swap, and the host's clock.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::policy::{Engine, EngineError};
use mcp_access_engine::ratelimit::store::{self, CounterStore, StoreError};

use super::abi;

/// Whether a failure of Envoy's shared data has been logged (once per VM).
static FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

/// The Local limiter's store in Envoy's shared data.
pub(super) struct SharedCounters;

impl SharedCounters {
    /// A configuration's engine once the store its Local limits count in is prepared
    /// ([`store::prepare`]; first done by the configuration's canary on Envoy's main thread);
    /// why the configuration is refused, else.
    pub(super) fn prepared_for(
        &self,
        engine: Result<Engine, EngineError>,
    ) -> Result<Engine, String> {
        let engine = engine.map_err(|e| e.to_string())?;
        if !engine.rate_limits.has_local() {
            return Ok(engine);
        }
        let started = abi::now_ns();
        match store::prepare(self) {
            Ok(0) => {}
            Ok(created) => {
                let micros = abi::now_ns().saturating_sub(started) / 1_000;
                abi::log(
                    LogLevel::Info,
                    &format!(
                        "mcp-access: rate limit store: {created} slots created in {}.{:03} ms",
                        micros / 1_000,
                        micros % 1_000
                    ),
                );
            }
            Err(e) => {
                return Err(format!(
                    "rate limit store not prepared ({e:?}): Envoy's shared data failed"
                ))
            }
        }
        Ok(engine)
    }
}

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
