//! Decision records to an OpenTelemetry collector (`mcp-access envoy --otlp HOST:PORT`):
//! Envoy's own OTLP access logger (`envoy.access_loggers.open_telemetry`, gRPC) on every
//! listener. Each log record's body is the decision record exactly as the filter wrote it (the
//! bytes its receipt digest is taken of: docs/audit.md); its attributes are the request's
//! listener, method, path, status and the record again as `mcp_access.decision`.

use serde_json::{json, Value};

use super::clusters::{cluster, http2_only};
use super::T;
use crate::error::CliError;

/// The collector's cluster.
pub(super) const CLUSTER: &str = "mcp_access_otlp";

/// Where records go: an OTLP/gRPC collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    pub host: String,
    pub port: u16,
}

impl Otlp {
    /// Parses `HOST:PORT`.
    pub fn parse(s: &str) -> Result<Otlp, CliError> {
        let (host, port) = super::clusters::host_port(s)
            .ok_or_else(|| format!("--otlp {s}: expected HOST:PORT (an OTLP/gRPC collector)"))?;
        Ok(Otlp { host, port })
    }
}

const RECORD: &str = "%FILTER_STATE(wasm.mcp_access.decision:PLAIN)%";

/// The access logger of listener `listener`.
pub(super) fn access_logger(listener: &str) -> Value {
    let attr = |key: &str, value: &str| json!({"key": key, "value": {"string_value": value}});
    json!({
        "name": "envoy.access_loggers.open_telemetry",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig"),
            "common_config": {
                "log_name": "mcp_access",
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": CLUSTER}}
            },
            "body": {"string_value": RECORD},
            "attributes": {"values": [
                attr("mcp_access.listener", listener),
                attr("http.request.method", "%REQ(:METHOD)%"),
                attr("url.path", "%REQ(:PATH)%"),
                attr("http.response.status_code", "%RESPONSE_CODE%"),
                attr("mcp_access.decision", RECORD),
            ]}
        }
    })
}

/// The collector's cluster (HTTP/2, for gRPC).
pub(super) fn collector_cluster(o: &Otlp) -> Value {
    let mut c = cluster(CLUSTER, &o.host, o.port, None, "");
    http2_only(&mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_collector_and_logs_the_record_as_the_body() {
        assert_eq!(
            Otlp::parse("[::1]:4317"),
            Ok(Otlp {
                host: "::1".into(),
                port: 4317
            })
        );
        for bad in ["x", ":4317", "x:0", "x:y"] {
            assert!(Otlp::parse(bad).is_err(), "{bad}");
        }
        let l = access_logger("ns/gw/l");
        assert_eq!(l["typed_config"]["body"]["string_value"], RECORD);
        let c = collector_cluster(&Otlp::parse("127.0.0.1:4317").unwrap());
        assert_eq!(c["name"], CLUSTER);
    }
}
