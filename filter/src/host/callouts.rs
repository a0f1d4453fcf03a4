//! The stats and log lines of the authorizer callouts that ended.

use proxy_wasm::types::LogLevel;

use mcp_access_engine::callout::CacheUse;
use mcp_access_engine::flow::Reports;
use mcp_access_engine::stats::Counter;

use super::{abi, Stream, AUTHZ_METADATA_KEY};

impl Stream {
    /// Stats and log lines of the callouts that ended, as the flow judged them.
    pub(super) fn report_callouts(&mut self, reports: Reports) {
        for r in reports {
            match r.cache {
                Some(CacheUse::Hit) => self.stats.inc(Counter::AuthzCacheHits),
                Some(CacheUse::Miss) => self.stats.inc(Counter::AuthzCacheMisses),
                None => {}
            }
            match (r.latency_ms, self.stats.latency) {
                // An answer from the cache: no call was made.
                _ if r.cache == Some(CacheUse::Hit) => {}
                (Some(ms), Some(id)) => abi::record_metric(id, ms),
                (Some(_), None) => {}
                (None, _) => self.stats.inc(Counter::CalloutDispatchErrors),
            }
            if r.failed {
                self.stats.inc(Counter::CalloutErrors);
            }
            if let Some(json) = &r.metadata {
                let key = format!("{AUTHZ_METADATA_KEY}.{}", r.authorizer);
                abi::set_property(&[&key], json.as_bytes());
            }
            if let Some(detail) = &r.detail {
                abi::log(
                    LogLevel::Warn,
                    &format!("mcp-access: authorizer {}: {detail}", r.authorizer),
                );
            }
        }
    }
}
