//! A small MCP client on the Rust SDK (rmcp), for integration/tests/test_clients.py: it connects
//! to a Streamable HTTP endpoint, runs the operations given on the command line and prints, one
//! JSON object per line, what the SDK reported for each (its result, or its error as the SDK
//! shows it to a program: the Display text, and the JSON-RPC code / WWW-Authenticate challenge
//! when the SDK exposes them). An operation without an answer in 10 s is reported as the SDK's
//! timeout error (the SDK itself would wait for ever).
//!
//! Usage: mcp-access-rmcp-client URL [--token TOKEN] [--protocol 2025-11-25|2026-07-28] OP...
//! where OP is `list` (tools/list) or `call:NAME:JSON-ARGUMENTS` (tools/call).

use std::process::ExitCode;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{json, Value};

struct Args {
    url: String,
    token: Option<String>,
    protocol: String,
    ops: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut url = None;
    let (mut token, mut protocol, mut ops) = (None, "2025-11-25".to_string(), Vec::new());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--token" => token = Some(it.next().ok_or("--token needs a value")?),
            "--protocol" => protocol = it.next().ok_or("--protocol needs a value")?,
            _ if url.is_none() => url = Some(a),
            _ => ops.push(a),
        }
    }
    let url = url.ok_or("usage: mcp-access-rmcp-client URL [--token T] [--protocol V] OP...")?;
    Ok(Args {
        url,
        token,
        protocol,
        ops,
    })
}

/// How long an operation may wait for its answer (the SDK itself waits without limit).
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// `fut`, or a `ServiceError::Timeout` after [`OP_TIMEOUT`].
async fn within<T>(
    fut: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, ServiceError> {
    tokio::time::timeout(OP_TIMEOUT, fut)
        .await
        .unwrap_or(Err(ServiceError::Timeout {
            timeout: OP_TIMEOUT,
        }))
}

fn error_report(e: &ServiceError) -> Value {
    let mut out = json!({"display": e.to_string()});
    if let ServiceError::McpError(data) = e {
        out["code"] = json!(data.code.0);
        out["message"] = json!(data.message);
        out["data"] = data.data.clone().unwrap_or(Value::Null);
    }
    if let Some(challenge) = e.auth_challenge() {
        out["www_authenticate"] = json!(challenge);
    }
    out
}

async fn run(a: Args) -> Result<(), String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(a.url.as_str());
    if let Some(t) = &a.token {
        config = config.auth_header(t.clone());
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let lifecycle = match a.protocol.as_str() {
        "2025-11-25" => ClientLifecycleMode::Initialize,
        "2026-07-28" => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        other => return Err(format!("--protocol {other}: 2025-11-25 or 2026-07-28")),
    };
    let client = match ClientConfig::default()
        .serve_with_lifecycle(transport, lifecycle)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            let mut report =
                json!({"op": "connect", "ok": false, "error": {"display": e.to_string()}});
            if let Some(challenge) = e.auth_challenge() {
                report["error"]["www_authenticate"] = json!(challenge);
            }
            println!("{report}");
            return Ok(());
        }
    };
    let info = client.peer_info();
    println!(
        "{}",
        json!({
            "op": "connect", "ok": true,
            "protocol": info.as_ref().map(|i| i.protocol_version.to_string()),
            "server": info.as_ref().and_then(|i| i.server_info.as_ref()).map(|s| s.name.clone()),
        })
    );
    for op in &a.ops {
        let report = if op == "list" {
            match within(client.list_tools(None)).await {
                Ok(r) => {
                    let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_ref()).collect();
                    json!({"op": op, "ok": true, "tools": names})
                }
                Err(e) => json!({"op": op, "ok": false, "error": error_report(&e)}),
            }
        } else if let Some(rest) = op.strip_prefix("call:") {
            let (name, args) = rest.split_once(':').unwrap_or((rest, "{}"));
            let args: serde_json::Map<String, Value> =
                serde_json::from_str(args).map_err(|e| format!("{op}: arguments: {e}"))?;
            let params = CallToolRequestParams::new(name.to_string()).with_arguments(args);
            match within(client.call_tool(params)).await {
                Ok(r) => {
                    let text: String = r
                        .content
                        .iter()
                        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                        .collect();
                    json!({"op": op, "ok": true, "text": text, "is_error": r.is_error})
                }
                Err(e) => json!({"op": op, "ok": false, "error": error_report(&e)}),
            }
        } else {
            return Err(format!("unknown operation {op}: list or call:NAME:JSON"));
        };
        println!("{report}");
    }
    let _ = client.cancel().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse_args() {
        Ok(a) => run(a).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-access-rmcp-client: {e}");
            ExitCode::from(2)
        }
    }
}
