//! Authorizer answers (docs/semantics.md §3.5): a tools/call whose one Gateway authorizer
//! answers with arbitrary bytes, through `RequestFlow` as the host adapter drives it. Besides
//! never panicking, it checks:
//! - the answer decides: one Allow or Respond, one callout report;
//! - every header the filter applies upstream or sends to the client is a token name that is
//!   never a pseudo-header, `host`, a framing, hop-by-hop or `proxy-*` header, with a value
//!   without a control character but HTAB (`mcp_access_bundle::http`);
//! - an HTTP answer's applied headers are its own, name lowercased, value as sent;
//! - a failed answer (malformed, an error) is never half-applied: under failureMode Allow
//!   nothing is added upstream, under Deny the client gets the filter's own 403 and nothing of
//!   the answer.
//!
//! Input: byte 0 chooses the authorizer (bit 0: gRPC, else HTTP; bit 1: failureMode Allow;
//! bit 2: HTTP with `allowedResponseHeaders`). gRPC: byte 1 is the gRPC status (0 unless its
//! high bit is set), the rest the CheckResponse (bit 6 of byte 1: the rest is the whole
//! HTTP/2 body, framed or not, with `grpc-status: 0`). HTTP: bytes 1-2 the status (big-endian, mod
//! 600), the rest UTF-8 (lossy) header records separated by U+001E, name and value by U+001F.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_bundle::http;
use mcp_access_engine::flow::{CalloutAnswer, Dispatched, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::{Caller, Headers};

const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;

/// Listed in `allowedResponseHeaders` (bit 2): framing among them, never applied anyway.
const LISTED: &[&str] = &[
    "x-user",
    "x-role",
    "content-length",
    "transfer-encoding",
    "host",
];

/// Engines indexed by the low three bits of byte 0.
fn engines() -> &'static [Engine] {
    static ENGINES: OnceLock<Vec<Engine>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        (0u8..8)
            .map(|bits| {
                let mut a = serde_json::json!({
                    "name": "a", "cluster": "c", "timeoutMs": 100,
                    "protocol": if bits & 1 == 1 { "GRPC" } else { "HTTP" },
                    "failureMode": if bits & 2 == 2 { "Allow" } else { "Deny" },
                });
                if bits & 5 == 4 {
                    a["allowedResponseHeaders"] = serde_json::json!(LISTED);
                }
                let bundle = serde_json::json!({
                    "apiVersion": "mcp-access.io/v1",
                    "identity": {"trustDomain": "example.org"},
                    "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
                    "backends": [{"name": "tools", "routeNames": ["r"]}],
                    "authorizers": [a],
                    "policies": [{"name": "p", "level": "Gateway", "targets": [{"name": "gw"}],
                                  "action": "ExternalAuth", "externalAuth": "a", "seniority": 0}],
                });
                match Engine::from_json(bundle.to_string().as_bytes()) {
                    Ok(e) => e,
                    Err(e) => panic!("the fixed bundle does not load: {e}"),
                }
            })
            .collect()
    })
}

fn input() -> HeadersInput {
    let headers = [
        (":method", "POST"),
        (":path", "/mcp"),
        (":authority", "gw.example.org"),
        ("content-type", "application/json"),
    ];
    HeadersInput {
        peers: None,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        end_of_stream: false,
        time: None,
        port: 8443,
        route_name: Some("r".into()),
        cluster_name: None,
        caller: Caller::default(),
    }
}

fn applicable(name: &str, value: &str) -> bool {
    http::is_header_name(name) && !http::is_never_applied(name) && http::is_header_value(value)
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let bits = choice & 7;
    let (grpc, fail_open) = (bits & 1 == 1, bits & 2 == 2);
    let e = &engines()[usize::from(bits)];
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, input()).next, Next::Hold);
    let Next::Dispatch(calls) = flow.on_body(e, BODY.len(), true, |_| Some(BODY.to_vec())).next else {
        panic!("no callout")
    };
    assert_eq!(calls.len(), 1);
    let dispatched = Dispatched {
        slot: calls[0].call.slot,
        token: Ok(1),
        at_ns: 0,
    };
    assert_eq!(flow.dispatched(e, [dispatched]).next, Next::Hold);

    let mut sent: Vec<(String, String)> = Vec::new();
    let progress = if grpc {
        let Some((&s, message)) = rest.split_first() else {
            return;
        };
        let status = if s & 0x80 == 0 { 0 } else { u32::from(s % 17) };
        // Bit 6: the rest is the whole HTTP/2 body (any framing), with grpc-status 0.
        let reply = if s & 0x40 == 0 {
            Reply::Grpc {
                status: Some(status),
                message: message.to_vec(),
            }
        } else {
            Reply::Raw {
                status: Some(200),
                headers: Headers::new(),
                body: message.to_vec(),
                trailers: Headers::from(vec![("grpc-status", "0")]),
            }
        };
        let Some((status, headers, body, trailers)) = reply.wire() else {
            return;
        };
        let answer = CalloutAnswer {
            status,
            headers: &headers,
            trailers: || trailers,
            read: |n: usize| Some(body[..n.min(body.len())].to_vec()),
        };
        flow.on_callout_response(e, 1, answer, 0)
    } else {
        let [a, b, text @ ..] = rest else {
            return;
        };
        let status = u16::from_be_bytes([*a, *b]) % 600;
        let text = String::from_utf8_lossy(text);
        sent = text
            .split('\u{1e}')
            .filter(|r| !r.is_empty())
            .map(|r| match r.split_once('\u{1f}') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => (r.to_string(), String::new()),
            })
            .collect();
        let answer = CalloutAnswer {
            status: Some(status),
            headers: &Headers::from(&sent),
            trailers: Headers::new,
            read: |_| Some(Vec::new()),
        };
        flow.on_callout_response(e, 1, answer, 0)
    };
    let (next, reports) = (progress.next, progress.reports);
    assert_eq!(reports.len(), 1, "{reports:?}");
    let failed = reports[0].failed;
    match next {
        Next::Allow { add_headers, .. } => {
            for h in &add_headers {
                assert!(applicable(&h.name, &h.value), "applied upstream: {h:?}");
                if !grpc {
                    assert!(
                        sent.iter()
                            .any(|(n, v)| n.to_ascii_lowercase() == h.name && *v == h.value),
                        "not the answer's: {h:?}"
                    );
                }
            }
            if failed {
                assert!(fail_open, "a failure allowed under Deny");
                assert!(add_headers.is_empty(), "half-applied: {add_headers:?}");
            }
        }
        Next::Respond(r) => {
            for (n, v) in &r.headers {
                assert!(applicable(n, v), "sent to the client: {n:?}: {v:?}");
            }
            if failed {
                assert!(!fail_open, "a failure denied under Allow");
                assert_eq!(r.status, 403);
                assert!(
                    r.headers.iter().all(|(n, _)| n == "content-type"),
                    "half-applied: {:?}",
                    r.headers
                );
            }
        }
        other => panic!("the answer did not decide: {other:?}"),
    }
});
