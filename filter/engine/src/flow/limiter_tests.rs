//! The RateLimitService call as HTTP/2 carries it, and its answers as they arrive.

use mcp_access_bundle::RateLimitService;
use prost::Message as _;

use super::*;
use crate::ratelimit::global::pb;

fn service() -> RateLimitService {
    RateLimitService {
        cluster: "rls".into(),
        timeout_ms: 250,
        domain: "dom".into(),
    }
}

#[test]
fn the_call_is_a_unary_grpc_post_with_the_service_timeout() {
    let call = call(&service(), []);
    let header = |n: &str| {
        call.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.to_string())
    };
    assert_eq!(call.cluster, "rls");
    assert_eq!(call.timeout_ms, 250);
    assert_eq!(header(":path").as_deref(), Some(global::PATH));
    assert_eq!(header(":method").as_deref(), Some("POST"));
    assert_eq!(header(":authority").as_deref(), Some("rls"));
    assert_eq!(header("content-type").as_deref(), Some("application/grpc"));
    assert_eq!(header("te").as_deref(), Some("trailers"));
    assert_eq!(header("grpc-timeout").as_deref(), Some("250m"));
    let (prefix, message) = call.body.split_at(5);
    assert_eq!(prefix, [0, 0, 0, 0, u8::try_from(message.len()).unwrap()]);
    let m = pb::RateLimitRequest::decode(message).unwrap();
    assert_eq!((m.domain.as_str(), m.hits_addend), ("dom", 1));
}

fn grpc(body: &[u8], grpc_status: &str, descriptors: usize) -> Verdict {
    let headers = Headers::from(vec![("content-type", "application/grpc")]);
    let trailers = Headers::from(vec![("grpc-status", grpc_status)]);
    interpret(Some(200), &headers, &trailers, body, descriptors)
}

fn failed(v: Verdict) -> String {
    v.failure()
}

#[test]
fn answers_as_they_arrive() {
    let ok = pb::RateLimitResponse {
        overall_code: pb::OK,
        statuses: vec![pb::DescriptorStatus {
            code: pb::OK,
            ..Default::default()
        }],
    };
    let framed = crate::pb::frame(&ok.encode_to_vec());
    assert_eq!(grpc(&framed, "0", 1), Verdict::Ok);
    // The same message twice, garbage without a frame, an empty body.
    let twice = [framed.clone(), framed.clone()].concat();
    assert!(failed(grpc(&twice, "0", 1)).contains("2 messages"));
    assert!(failed(grpc(b"garbage!", "0", 1)).starts_with("malformed answer"));
    assert!(failed(grpc(b"", "0", 1)).contains("0 messages"));
    // Garbage inside a frame.
    let garbage = crate::pb::frame(&[0xff; 4]);
    assert!(failed(grpc(&garbage, "0", 1)).starts_with("malformed RateLimitResponse"));
    // A gRPC error (trailers-only or in the trailers), no status at all.
    assert_eq!(failed(grpc(b"", "14", 1)), "gRPC status 14 (UNAVAILABLE): ");
    let h = Headers::new();
    let typed = Headers::from(vec![("content-type", "application/grpc")]);
    assert!(failed(interpret(Some(200), &typed, &h, &framed, 1)).contains("without grpc-status"));
    // No answer, an HTTP error, another content type, an answer over the read limit.
    assert!(failed(interpret(None, &h, &h, b"", 1)).starts_with("no answer"));
    assert_eq!(
        failed(interpret(Some(503), &h, &h, b"no healthy upstream", 1)),
        "HTTP status 503 to a gRPC call (no healthy upstream)"
    );
    let json = Headers::from(vec![("content-type", "application/json")]);
    assert!(failed(interpret(Some(200), &json, &h, b"{}", 1)).contains("content-type"));
    assert!(failed(grpc(&vec![0; READ_LIMIT], "0", 1)).contains("or more"));
}
