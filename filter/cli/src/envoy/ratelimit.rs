//! The RateLimitService `Global` rate limits ask (`mcp-access envoy --rate-limit-service
//! HOST:PORT`): its cluster (HTTP/2, gRPC) and the bundle's `rateLimitService`.

use mcp_access_bundle::RateLimitService;
use serde_json::Value;

use super::clusters::{cluster, http2_only};
use crate::error::CliError;

/// The RateLimitService's cluster.
pub const CLUSTER: &str = "mcp_access_ratelimit";

/// Where the RateLimitService listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitAddress {
    pub host: String,
    pub port: u16,
}

impl RateLimitAddress {
    /// Parses `HOST:PORT` (`[::1]:8081` for IPv6).
    pub fn parse(s: &str) -> Result<RateLimitAddress, CliError> {
        let (host, port) = super::clusters::host_port(s)
            .ok_or_else(|| format!("--rate-limit-service {s}: expected HOST:PORT"))?;
        Ok(RateLimitAddress { host, port })
    }

    /// The bundle's `rateLimitService` for it: its cluster ([`CLUSTER`]), the descriptors'
    /// `domain`, the answer's timeout.
    pub fn service(&self, domain: &str, timeout_ms: u32) -> RateLimitService {
        RateLimitService {
            cluster: CLUSTER.to_string(),
            timeout_ms,
            domain: domain.to_string(),
        }
    }

    /// Its cluster (HTTP/2: gRPC).
    pub fn cluster(&self) -> Value {
        let mut c = cluster(CLUSTER, &self.host, self.port, None, "");
        http2_only(&mut c);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_address_and_renders_an_http2_cluster() {
        let a = RateLimitAddress::parse("[::1]:8081").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a.host.as_str(), a.port), ("::1", 8081));
        for bad in ["x", ":8081", "x:0", "x:y"] {
            assert!(RateLimitAddress::parse(bad).is_err(), "{bad}");
        }
        let c = a.cluster();
        assert_eq!(c["name"], CLUSTER);
        assert!(c["typed_extension_protocol_options"].is_object());
    }
}
