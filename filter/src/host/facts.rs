//! The request's facts from Envoy: its attributes, and its clock.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_wasm::types::LogLevel;

use mcp_access_engine::ports::{Fact, HostFacts};

use super::abi;

/// Whether the missing `connection.peer_certificate` property has been logged (once per VM).
static NO_PEER_CERTIFICATE_LOGGED: AtomicBool = AtomicBool::new(false);

/// The request's facts, read from Envoy's attributes when the engine asks.
pub(super) struct Envoy;

impl HostFacts for Envoy {
    fn read(&self, fact: Fact) -> Option<Vec<u8>> {
        let value = abi::property(fact.path());
        if fact == Fact::PeerCertificate
            && value.is_none()
            && !NO_PEER_CERTIFICATE_LOGGED.swap(true, Ordering::Relaxed)
        {
            abi::log(
                LogLevel::Warn,
                "mcp-access: Envoy gives no connection.peer_certificate: certificates cannot identify callers",
            );
        }
        value
    }

    /// `proxy_get_current_time_nanoseconds`: a number, no bytes returned (no call back into
    /// the module to allocate them, as `request.time` has).
    fn clock_ns(&self) -> Option<i64> {
        i64::try_from(abi::now_ns()).ok()
    }
}
