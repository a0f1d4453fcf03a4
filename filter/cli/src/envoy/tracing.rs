//! Decisions in traces (`mcp-access envoy --tracing zipkin=HOST:PORT`): Envoy's Zipkin tracer on
//! every listener, and the filter's decision as tags of the request's span, read from the
//! filter state the filter sets (custom tags with a `value`, Envoy 1.37 and later).

use mcp_access_engine::flow::TRACE_TAG_KEYS;
use serde_json::{json, Value};

use super::clusters::cluster;
use super::T;
use crate::error::CliError;

/// The tracing collector's cluster.
pub(super) const CLUSTER: &str = "mcp_access_tracing";

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracing {
    /// The Zipkin collector (its v2 JSON API at `/api/v2/spans`).
    pub host: String,
    pub port: u16,
}

impl Tracing {
    /// Parses `zipkin=HOST:PORT`.
    pub fn parse(s: &str) -> Result<Tracing, CliError> {
        let Some(addr) = s.strip_prefix("zipkin=") else {
            return Err(format!(
                "--tracing {s}: expected zipkin=HOST:PORT (the Zipkin tracer is the one rendered)"
            )
            .into());
        };
        let (host, port) = super::clusters::host_port(addr)
            .ok_or_else(|| format!("--tracing {s}: expected zipkin=HOST:PORT"))?;
        Ok(Tracing { host, port })
    }
}

/// The `tracing` of a connection manager: every request sampled, the decision's tags
/// (`security_rule.ruleset.name`, `security_rule.name`, `event.action`, `event.outcome`,
/// and the whole decision as `mcp_access.decision`).
pub(super) fn hcm_tracing() -> Value {
    let mut tags: Vec<Value> = TRACE_TAG_KEYS
        .iter()
        .map(|key| {
            json!({
                "tag": key.trim_start_matches("mcp_access."),
                "value": format!("%FILTER_STATE(wasm.{key}:PLAIN)%"),
            })
        })
        .collect();
    tags.push(json!({
        "tag": "mcp_access.decision",
        "value": "%FILTER_STATE(wasm.mcp_access.decision:PLAIN)%",
    }));
    json!({
        "random_sampling": {"value": 100},
        "spawn_upstream_span": false,
        "custom_tags": tags,
        "provider": {
            "name": "envoy.tracers.zipkin",
            "typed_config": {
                "@type": format!("{T}envoy.config.trace.v3.ZipkinConfig"),
                "collector_cluster": CLUSTER,
                "collector_endpoint": "/api/v2/spans",
                "collector_endpoint_version": "HTTP_JSON",
                "shared_span_context": false,
            }
        }
    })
}

/// The collector's cluster.
pub(super) fn collector_cluster(t: &Tracing) -> Value {
    cluster(CLUSTER, &t.host, t.port, None, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_collector() {
        assert_eq!(
            Tracing::parse("zipkin=127.0.0.1:9411"),
            Ok(Tracing {
                host: "127.0.0.1".into(),
                port: 9411
            })
        );
        assert_eq!(
            Tracing::parse("zipkin=[::1]:9411").map(|t| t.host),
            Ok("::1".into())
        );
        for bad in [
            "otel=x:1",
            "zipkin=x",
            "zipkin=:9411",
            "zipkin=x:0",
            "zipkin=x:y",
        ] {
            assert!(Tracing::parse(bad).is_err(), "{bad}");
        }
        let tags = hcm_tracing()["custom_tags"].clone();
        assert_eq!(tags[0]["tag"], "security_rule.ruleset.name");
        assert_eq!(
            tags[2]["value"],
            "%FILTER_STATE(wasm.mcp_access.event.action:PLAIN)%"
        );
    }
}
