//! Authorizer cache keys (docs/semantics.md §3.10): two requests an authorizer is sent never
//! share a key unless they differ only in what the key leaves out (the headers the cache
//! ignores; for gRPC the request's time and id, the client's address and the JSON-RPC id).
//!
//! Input: byte 0 chooses gRPC (bit 0) or HTTP; the rest is split at its first U+001D into two
//! requests. gRPC: each part is decoded as a CheckRequest (parts that do not decode are
//! skipped). HTTP: each part is UTF-8 (lossy) header records separated by U+001E, name and
//! value by U+001F, then U+001C and the body. The oracle compares the two requests with what
//! the key leaves out cleared, independently of the engine's own canonical form.
#![no_main]

use std::borrow::Cow;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_bundle::Level;
use mcp_access_engine::authz_cache::{key_of, Sent};
use mcp_access_engine::callout::CalloutRequest;
use mcp_access_engine::pb;
use mcp_access_engine::policy::{AuthzCall, Engine};
use mcp_access_engine::request::Caller;
use prost::Message;

const IGNORED: [&str; 2] = ["authorization", "x-request-id"];

/// An HTTP (index 0) and a gRPC (1) authorizer whose answers are cached.
fn engines() -> &'static [Engine] {
    static ENGINES: OnceLock<Vec<Engine>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        ["HTTP", "GRPC"]
            .iter()
            .map(|protocol| {
                let a = serde_json::json!({
                    "name": "a", "cluster": "c", "timeoutMs": 100, "protocol": protocol,
                    "allowedHeaders": ["x-tenant", "x-request-id"],
                    "cache": {"ttlMs": 1000, "keyHeaders": ["x-tenant"], "ignoredHeaders": IGNORED},
                });
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

const CALL: AuthzCall = AuthzCall {
    slot: 0,
    policy: 0,
    authorizer: 0,
    level: Level::Gateway,
};

/// The whole key a hit compares (its slot is chosen from it).
fn key(e: &Engine, sent: Sent<'_>) -> Vec<u8> {
    match key_of(e, &CALL, sent, &Caller::default()) {
        Some(k) => k.key,
        None => panic!("a cached authorizer's call has a key"),
    }
}

/// `m` with what the key leaves out cleared (the oracle's own reading of §3.10).
fn kept(m: &pb::CheckRequest) -> Vec<u8> {
    let mut m = m.clone();
    if let Some(a) = &mut m.attributes {
        if let Some(s) = &mut a.source {
            s.address = None;
        }
        if let Some(r) = &mut a.request {
            r.time = None;
            if let Some(h) = &mut r.http {
                h.id.clear();
                h.headers
                    .retain(|n, _| !IGNORED.iter().any(|i| i.eq_ignore_ascii_case(n)));
            }
        }
        if let Some(md) = &mut a.metadata_context {
            for s in md.filter_metadata.values_mut() {
                s.fields.remove("id");
            }
        }
    }
    m.encode_to_vec()
}

fn http_request(part: &[u8]) -> CalloutRequest {
    let text = String::from_utf8_lossy(part);
    let (head, body) = text.split_once('\u{1c}').unwrap_or((&text, ""));
    let headers = head
        .split('\u{1e}')
        .filter(|r| !r.is_empty())
        .map(|r| {
            let (n, v) = r.split_once('\u{1f}').unwrap_or((r, ""));
            (Cow::Owned(n.to_string()), Cow::Owned(v.to_string()))
        })
        .collect();
    CalloutRequest {
        cluster: "c".into(),
        headers,
        body: body.as_bytes().to_vec(),
        timeout_ms: 100,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&bits, rest)) = data.split_first() else {
        return;
    };
    let at = rest.iter().position(|b| *b == 0x1d).unwrap_or(rest.len());
    let (a, b) = rest.split_at(at);
    let b = b.get(1..).unwrap_or_default();
    if bits & 1 == 1 {
        let e = &engines()[1];
        let (Ok(m1), Ok(m2)) = (pb::CheckRequest::decode(a), pb::CheckRequest::decode(b)) else {
            return;
        };
        let same = key(e, Sent::Grpc(&m1)) == key(e, Sent::Grpc(&m2));
        assert_eq!(same, kept(&m1) == kept(&m2), "{m1:?} / {m2:?}");
    } else {
        let e = &engines()[0];
        let (r1, r2) = (http_request(a), http_request(b));
        let strip = |r: &CalloutRequest| {
            let headers: Vec<_> = r
                .headers
                .iter()
                .filter(|(n, _)| !IGNORED.iter().any(|i| i.eq_ignore_ascii_case(n)))
                .cloned()
                .collect();
            (headers, r.body.clone())
        };
        let same = key(e, Sent::Http(&r1)) == key(e, Sent::Http(&r2));
        assert_eq!(same, strip(&r1) == strip(&r2), "{r1:?} / {r2:?}");
    }
});
