//! The authorizer cache key is what the authorizer is sent (docs/semantics.md §3.10): every
//! input a CheckRequest or an HTTP callout carries changes it; only the fields that differ on
//! every request (time, request id, the client's port, the JSON-RPC id) and the headers the
//! policy declares irrelevant do not. And a new configuration never reuses an old one's answers.

use std::rc::Rc;

use crate::authz_cache::FakeAnswers;
use crate::common::*;
use mcp_access_engine::authz_cache::{generation, GENERATION_WINDOW_NS};
use mcp_access_engine::flow::{drive, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::pb;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::{Caller, JwtPrincipal, Peers};
use prost::Message;
use serde_json::{json, Value};

const ISSUER: &str = "https://idp.example";

fn engine_with(protocol: &str, authorizer: Value) -> Engine {
    let mut b = bundle(vec![ext("ext", "Gateway", "gw", "a", 0)], &["a"]);
    b["identity"]["jwt"] = json!({"providers": [{"issuer": ISSUER, "metadataKey": "idp"}]});
    let a = b["authorizers"][0].as_object_mut().unwrap();
    a.insert("protocol".into(), protocol.into());
    a.extend(authorizer.as_object().unwrap().clone());
    engine(&b)
}

/// A gRPC authorizer sent x-tenant, the body and the peer certificate; answers cached by
/// x-tenant, with the token ignored and two claims standing in for it.
fn grpc_engine(forward_body: u32) -> Engine {
    engine_with(
        "GRPC",
        json!({"allowedHeaders": ["x-tenant", "x-request-id", "authorization"],
               "forwardBodyMaxBytes": forward_body, "includePeerCertificate": true,
               "cache": {"ttlMs": 30_000, "keyHeaders": ["x-tenant"],
                         "ignoredHeaders": ["x-request-id", "authorization"],
                         "keyClaims": ["groups", "org"]}}),
    )
}

fn http_engine() -> Engine {
    engine_with(
        "HTTP",
        json!({"allowedHeaders": ["x-tenant"],
               "cache": {"ttlMs": 30_000, "keyHeaders": ["x-tenant"],
                         "ignoredHeaders": ["authorization"], "keyClaims": ["groups", "org"]}}),
    )
}

/// Everything a request brings that an authorizer may be sent.
#[derive(Clone)]
struct Req {
    headers: Vec<(String, String)>,
    path: String,
    spiffe: Option<String>,
    claims: Option<Value>,
    peers: Peers,
    id: u32,
    tool: String,
    arguments: Value,
}

fn base() -> Req {
    Req {
        headers: vec![
            ("x-tenant".into(), "t1".into()),
            ("x-request-id".into(), "r-1".into()),
            ("authorization".into(), "Bearer token-1".into()),
        ],
        path: "/mcp".into(),
        spiffe: None,
        claims: Some(json!({"iss": ISSUER, "sub": "u1", "groups": ["a"], "org": {"t": 1}})),
        peers: Peers {
            source_address: Some("10.0.0.1:40000".into()),
            source_principal: Some("dns-a.example".into()),
            source_certificate: Some("-----BEGIN%20CERTIFICATE-----A".into()),
            destination_address: Some("10.0.0.2:8443".into()),
            destination_principal: Some("gw.example".into()),
            time_ns: Some(1_767_225_600_000_000_000),
            protocol: Some("HTTP/2".into()),
            scheme: Some("https".into()),
        },
        id: 1,
        tool: "echo".into(),
        arguments: json!({}),
    }
}

fn principal(e: &Engine, claims: &Value) -> JwtPrincipal {
    e.jwt_principal(claims).unwrap()
}

/// Sends `r` through a flow with `store`: whether its authorizer was called.
fn called(e: &Engine, grpc: bool, store: &Rc<FakeAnswers>, r: &Req) -> bool {
    let mut headers: Vec<(String, String)> = [
        (":method", "POST"),
        (":authority", "gw.example.org"),
        ("content-type", "application/json"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    headers.push((":path".into(), r.path.clone()));
    headers.extend(r.headers.iter().cloned());
    let input = HeadersInput {
        headers: headers.into(),
        port: 8443,
        route_name: Some("tools-route".into()),
        caller: Caller {
            credential: true,
            spiffe: r.spiffe.clone(),
            jwts: r.claims.iter().map(|c| principal(e, c)).collect(),
        },
        peers: Some(r.peers.clone()),
        ..HeadersInput::default()
    };
    let body = json!({"jsonrpc": "2.0", "id": r.id, "method": "tools/call",
                      "params": {"name": r.tool, "arguments": r.arguments}})
    .to_string();
    let mut flow = RequestFlow::new().with_answer_store(store.clone());
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let next = flow
        .on_body(e, body.len(), true, |_| Some(body.clone().into_bytes()))
        .next;
    let ok = pb::CheckResponse {
        status: Some(pb::RpcStatus {
            code: 0,
            message: String::new(),
        }),
        ..Default::default()
    };
    let mut calls = 0;
    let end = drive(&mut flow, e, next, |_| {
        calls += 1;
        if grpc {
            Reply::Grpc {
                status: Some(0),
                message: ok.encode_to_vec(),
            }
        } else {
            Reply::Http {
                status: Some(200),
                headers: Default::default(),
                body: vec![],
            }
        }
    });
    assert!(matches!(end, Next::Allow { .. }), "{end:?}");
    calls == 1
}

/// Each change of `r` made by `variants` reaches the authorizer (a miss after `base` was
/// answered); each of `volatile` is answered from the cache.
fn check(e: &Engine, grpc: bool, variants: Vec<(&str, Req)>, volatile: Vec<(&str, Req)>) {
    for (what, r) in variants {
        let store = Rc::new(FakeAnswers::default());
        assert!(called(e, grpc, &store, &base()));
        assert!(
            !called(e, grpc, &store, &base()),
            "{what}: the same request is a hit"
        );
        assert!(
            called(e, grpc, &store, &r),
            "{what}: another input must not share the answer"
        );
    }
    for (what, r) in volatile {
        let store = Rc::new(FakeAnswers::default());
        assert!(called(e, grpc, &store, &base()));
        assert!(
            !called(e, grpc, &store, &r),
            "{what}: differs on every request, not in the key"
        );
    }
}

fn with(f: impl FnOnce(&mut Req)) -> Req {
    let mut r = base();
    f(&mut r);
    r
}

fn set_header(r: &mut Req, name: &str, value: &str) {
    for (n, v) in &mut r.headers {
        if n == name {
            *v = value.into();
        }
    }
}

fn claims_with(claim: &str, value: Value) -> Req {
    with(|r| r.claims.as_mut().unwrap()[claim] = value)
}

#[test]
fn every_input_of_a_check_request_changes_the_key() {
    let e = grpc_engine(4096);
    let variants = vec![
        // Certificates with no single URI SAN have no SPIFFE ID; the authorizer still tells
        // them apart by the principal Envoy names and the certificate it is sent.
        (
            "principal (DNS SAN)",
            with(|r| r.peers.source_principal = Some("dns-b.example".into())),
        ),
        ("no principal", with(|r| r.peers.source_principal = None)),
        (
            "certificate",
            with(|r| r.peers.source_certificate = Some("-----BEGIN%20CERTIFICATE-----B".into())),
        ),
        (
            "destination principal",
            with(|r| r.peers.destination_principal = Some("gw2".into())),
        ),
        (
            "destination address",
            with(|r| r.peers.destination_address = Some("10.0.0.3:8443".into())),
        ),
        (
            "protocol",
            with(|r| r.peers.protocol = Some("HTTP/1.1".into())),
        ),
        ("scheme", with(|r| r.peers.scheme = Some("http".into()))),
        ("keyed header", with(|r| set_header(r, "x-tenant", "t2"))),
        ("path", with(|r| r.path = "/mcp/other".into())),
        ("tool (context extensions)", with(|r| r.tool = "add".into())),
        ("arguments (body)", with(|r| r.arguments = json!({"x": 1}))),
        ("JSON-RPC id (in the body sent)", with(|r| r.id = 2)),
        ("subject", claims_with("sub", json!("u2"))),
        ("list claim", claims_with("groups", json!(["a", "b"]))),
        ("list of objects", claims_with("groups", json!([{"x": 1}]))),
        ("object claim", claims_with("org", json!({"t": 2}))),
        (
            "nested object",
            claims_with("org", json!({"t": {"u": [1, {"v": null}]}})),
        ),
        ("number claim", claims_with("org", json!(1))),
        (
            "claim absent",
            with(|r| {
                r.claims
                    .as_mut()
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .remove("org");
            }),
        ),
        ("no JWT", with(|r| r.claims = None)),
    ];
    let volatile = vec![
        (
            "time",
            with(|r| r.peers.time_ns = Some(1_767_225_601_000_000_000)),
        ),
        (
            "client port",
            with(|r| r.peers.source_address = Some("10.0.0.1:40001".into())),
        ),
        (
            "ignored request id",
            with(|r| set_header(r, "x-request-id", "r-2")),
        ),
        (
            "ignored token",
            with(|r| set_header(r, "authorization", "Bearer token-2")),
        ),
        // A claim the cache does not key on: the token is ignored, the answer does not
        // depend on it.
        ("unkeyed claim", claims_with("exp", json!(99))),
        // The CheckRequest names the caller by Envoy's principal (here a DNS SAN), which
        // this SPIFFE ID (from elsewhere) leaves as it is.
        (
            "SPIFFE ID not sent",
            with(|r| r.spiffe = Some(ALPHA.into())),
        ),
    ];
    check(&e, true, variants, volatile);
}

#[test]
fn the_json_rpc_id_is_no_key_when_the_body_is_not_sent() {
    let volatile = vec![("JSON-RPC id (metadata)", with(|r| r.id = 2))];
    let variants = vec![("tool", with(|r| r.tool = "add".into()))];
    check(&grpc_engine(0), true, variants, volatile);
}

#[test]
fn every_input_of_an_http_callout_changes_the_key() {
    let e = http_engine();
    let variants = vec![
        ("SPIFFE ID", with(|r| r.spiffe = Some(ALPHA.into()))),
        ("keyed header", with(|r| set_header(r, "x-tenant", "t2"))),
        ("path", with(|r| r.path = "/mcp/other".into())),
        ("tool", with(|r| r.tool = "add".into())),
        ("subject", claims_with("sub", json!("u2"))),
        ("object claim", claims_with("org", json!({"t": 2}))),
        ("list of objects", claims_with("groups", json!([{"x": 1}]))),
        ("no JWT", with(|r| r.claims = None)),
    ];
    // The HTTP authorizer is sent no certificate: two callers without a SPIFFE ID whose
    // certificates differ send it the same request, and share its answer.
    let volatile = vec![
        ("JSON-RPC id (body not sent)", with(|r| r.id = 2)),
        (
            "ignored token",
            with(|r| set_header(r, "authorization", "Bearer token-2")),
        ),
        (
            "certificate not sent",
            with(|r| r.peers.source_principal = Some("dns-b".into())),
        ),
    ];
    check(&e, false, variants, volatile);
}

#[test]
fn a_cache_may_not_ignore_what_the_filter_sends() {
    for name in [
        ":path",
        "x-mcp-tool",
        "x-mcp-source-spiffe",
        "content-length",
        "host",
    ] {
        let mut b = bundle(vec![ext("ext", "Gateway", "gw", "a", 0)], &["a"]);
        b["authorizers"][0]["cache"] =
            json!({"ttlMs": 1000, "ignoredHeaders": ["authorization", name]});
        let err = Engine::from_json(b.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cache.ignoredHeaders") && err.contains("always in the key"),
            "{name}: {err}"
        );
    }
}

#[test]
fn each_configuration_has_its_own_generation_and_its_workers_share_it() {
    let (s1, s2) = ([1u8; 32], [2u8; 32]);
    let t0 = 1_767_225_600_000_000_000u64;
    // The first worker of S1 starts a generation and writes its record.
    let (g1, record) = generation(None, &s1, t0);
    let record = record.unwrap();
    // Another worker of the same configuration, configured a moment later, joins it.
    let (g1b, write) = generation(Some(&record), &s1, t0 + 1_000_000);
    assert_eq!((g1b, write), (g1, None));
    // S2 replaces it...
    let (g2, record2) = generation(Some(&record), &s2, t0 + 2_000_000);
    assert_ne!(g2, g1);
    // ...and S1 published again, however soon, starts a new generation: no answer kept
    // under the first S1 comes back.
    let (g3, write) = generation(Some(&record2.unwrap()), &s1, t0 + 3_000_000);
    assert!(write.is_some());
    assert_ne!(g3, g1);
    // The same bundle configured again after the window is a new configuration too.
    let (g4, write) = generation(Some(&record), &s1, t0 + GENERATION_WINDOW_NS);
    assert!(write.is_some());
    assert_ne!(g4, g1);
    // A record that does not read is no generation to join.
    assert!(generation(Some(b"short"), &s1, t0).1.is_some());
}
