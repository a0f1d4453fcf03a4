//! CEL conditions never panic or overflow the stack, whatever the expression and request:
//! `check` and `Program::compile` agree, and a compiled program evaluates (to a boolean or an
//! error) within its step budget. Runs on a 1 MiB stack, the wasm32 default.
//!
//! Input: the expression, then optionally `\0` and a JSON object standing for the request
//! (`path`, `tool`, `headers` [[name, value]...], `params`, `claims`, `spiffe`, `time`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_cel::{check, CelLimits, Program, CEL_LIMIT_MAX};
use mcp_access_engine::cel_input::CelInput;
use mcp_access_engine::request::{Caller, JwtPrincipal, McpOp, Request};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let data = data.to_vec();
    let worker = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || run(&data));
    if let Ok(w) = worker {
        if w.join().is_err() {
            panic!("the CEL worker panicked");
        }
    }
});

fn run(data: &[u8]) {
    let (expr, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(src) = std::str::from_utf8(expr) else {
        return;
    };
    let attrs: Value = serde_json::from_slice(rest).unwrap_or(Value::Null);
    // The largest limits a bundle may set (fewer steps, to keep executions fast).
    let limits = CelLimits {
        max_steps: 20_000,
        ..CEL_LIMIT_MAX
    };
    let checked = check(src, &limits);
    let program = Program::compile(src, &limits);
    assert_eq!(
        checked.is_ok(),
        program.is_ok(),
        "check and compile disagree on {src:?}"
    );
    let Ok(program) = program else { return };
    let req = request(&attrs);
    for (trust_domain, backend) in [(None, None), (Some("example.org"), Some("mcp/tools"))] {
        let input = CelInput {
            req: &req,
            host: "a.example",
            backend,
            trust_domain,
            pins: None,
        };
        let _ = program.eval(&input);
    }
}

fn text(v: &Value, key: &str, default: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_string()
}

fn request(v: &Value) -> Request {
    let headers = v
        .get("headers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|h| {
                    let pair = h.as_array()?;
                    Some((
                        pair.first()?.as_str()?.to_ascii_lowercase(),
                        pair.get(1)?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_else(|| vec![("mcp-protocol-version".into(), "2025-06-18".into())]);
    let path = text(v, "path", "/mcp?x=1");
    Request {
        method: text(v, "method", "POST"),
        canonical_path: path.split('?').next().unwrap_or("/").to_string(),
        path,
        authority: "a.example:8443".into(),
        port: 8443,
        headers: headers.into(),
        caller: Caller {
            credential: false,
            spiffe: v.get("spiffe").and_then(Value::as_str).map(str::to_string),
            jwts: v
                .get("claims")
                .map(|c| {
                    vec![JwtPrincipal {
                        texts: Vec::new(),
                        keyed: Vec::new(),
                        issuer: "https://idp".into(),
                        subject: None,
                        claims: Vec::new(),
                        payload: Some(c.clone()),
                    }]
                })
                .unwrap_or_default(),
        },
        mcp: match v.get("tool").and_then(Value::as_str) {
            Some(t) => McpOp::Call {
                method: "tools/call".into(),
                param: Some(t.to_string()),
            },
            None => McpOp::Call {
                method: text(v, "mcpMethod", "initialize").into(),
                param: None,
            },
        },
        route_name: None,
        cluster_name: None,
        time: v.get("time").and_then(Value::as_i64),
        params: v.get("params").cloned(),
        host: "a.example".into(),
        ..Request::default()
    }
}
