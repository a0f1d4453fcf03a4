//! Decision records to an OpenTelemetry collector (`mcp-access envoy --otlp HOST:PORT`):
//! Envoy's own OTLP access logger (`envoy.access_loggers.open_telemetry`, gRPC) on every
//! listener. Each log record's body is the decision record exactly as the filter wrote it (the
//! bytes its receipt digest is taken of: docs/audit.md); its attributes are the request's
//! Envoy listener, method, path and status, and each field of the record as `mcp_access.<field>`
//! (`mcp_access.<object>.<field>` inside `request`, `limits`, `dry_run`), read by Envoy's CEL
//! formatter from the record as a Struct (bundle `decisionRecords.structured`, which `--otlp`
//! turns on).

use serde_json::{json, Value};

use mcp_access_engine::flow::records::{
    DecisionRecord, DryRunRecordJson, LimitsJson, OmittedJson, RequestRecord, Verdict,
};

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

/// The record as a Struct, in CEL (filter state `mcp_access.record`: filter/src/host/receipts.rs).
const RECORD_STRUCT: &str = "filter_state['wasm.mcp_access.record']";

/// The access logger of listener `listener`.
pub(super) fn access_logger(listener: &str) -> Value {
    let attr = |key: &str, value: &str| json!({"key": key, "value": {"string_value": value}});
    let mut attributes = vec![
        // The Envoy listener (the record's `listener` is the Gateway's).
        attr("mcp_access.envoy_listener", listener),
        attr("http.request.method", "%REQ(:METHOD)%"),
        attr("url.path", "%REQ(:PATH)%"),
        attr("http.response.status_code", "%RESPONSE_CODE%"),
    ];
    for field in record_fields() {
        let cel = format!("%CEL({RECORD_STRUCT}.{field})%");
        attributes.push(attr(&format!("mcp_access.{field}"), &cel));
    }
    json!({
        "name": "envoy.access_loggers.open_telemetry",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig"),
            "log_name": "mcp_access",
            "grpc_service": {"envoy_grpc": {"cluster_name": CLUSTER}},
            "body": {"string_value": RECORD},
            "attributes": {"values": attributes}
        }
    })
}

/// Every field of a decision record and of the objects in it (`request.host`): the keys of a
/// record holding every field ([`DecisionRecord`], which the filter's writer is held to byte
/// for byte), as the record's Struct holds them (receipts/structured.rs: the members of those
/// objects are its leaves).
fn record_fields() -> Vec<String> {
    let some = || Some(String::new());
    let record = DecisionRecord {
        authz_cached: vec![String::new()],
        backend: some(),
        caller: some(),
        cel_errors: 0,
        chain: some(),
        decision: Verdict::Allow,
        dry_run: Some(DryRunRecordJson::default()),
        identity_headers_omitted: vec![OmittedJson::default()],
        jwt: some(),
        level: None,
        limits: Some(LimitsJson::default()),
        listener: some(),
        method: some(),
        name: some(),
        origin: some(),
        policy: some(),
        prev: some(),
        reason: None,
        request: Some(Some(RequestRecord {
            arguments: None,
            credential_headers: [(String::new(), vec![])].into(),
            headers: Default::default(),
            host: String::new(),
            jwt: None,
            method: String::new(),
            path: String::new(),
            port: 0,
            revision: some(),
            route: some(),
            time: Some(0),
            unrecorded: vec![String::new()],
        })),
        rule: some(),
        seq: Some(0),
        status: None,
    };
    let mut fields = Vec::new();
    if let Ok(Value::Object(top)) = serde_json::to_value(&record) {
        for (key, value) in top {
            match value {
                Value::Object(inner) => {
                    fields.extend(inner.keys().map(|k| format!("{key}.{k}")));
                }
                _ => fields.push(key),
            }
        }
    }
    fields
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
    fn logs_the_record_as_the_body_and_each_field_as_an_attribute() {
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
        let attrs: Vec<(String, String)> = l["typed_config"]["attributes"]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let text = |v: &Value| v.as_str().unwrap().to_string();
                (text(&a["key"]), text(&a["value"]["string_value"]))
            })
            .collect();
        for f in [
            "decision",
            "policy",
            "seq",
            "prev",
            "chain",
            "authz_cached",
            "request.host",
            "request.time",
            "request.headers",
            "limits.charged",
            "dry_run.decision",
        ] {
            let want = (
                format!("mcp_access.{f}"),
                format!("%CEL(filter_state['wasm.mcp_access.record'].{f})%"),
            );
            assert!(attrs.contains(&want), "{f}: {attrs:?}");
        }
        // The record's objects are split, never an attribute of their own; no key repeats.
        assert!(
            attrs.iter().all(|(k, _)| k != "mcp_access.request"),
            "{attrs:?}"
        );
        let keys: std::collections::BTreeSet<_> = attrs.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), attrs.len(), "{attrs:?}");
        let c = collector_cluster(&Otlp::parse("127.0.0.1:4317").unwrap());
        assert_eq!(c["name"], CLUSTER);
    }
}
