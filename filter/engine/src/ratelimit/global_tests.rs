use mcp_access_bundle::{FailureMode, RateLimitMode};
use prost::Message as _;

use super::*;
use crate::receipts::hex;

fn limit(id: &str, rates: Vec<Rate>) -> Limit {
    Limit {
        id: id.to_string(),
        digest: [7; 32],
        mode: RateLimitMode::Global,
        failure_mode: FailureMode::Deny,
        rates,
        listeners: Vec::new(),
        gateway_level: true,
        backends: Vec::new(),
        counters: Vec::new(),
        when: Vec::new(),
    }
}

fn rate(limit: u64, window_seconds: u32) -> Rate {
    Rate {
        limit,
        window_seconds,
    }
}

fn service() -> RateLimitService {
    RateLimitService {
        cluster: "rls".into(),
        timeout_ms: 250,
        domain: "dom".into(),
    }
}

fn pairs(d: &pb::RateLimitDescriptor) -> Vec<(&str, &str)> {
    d.entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect()
}

#[test]
fn the_request_names_domain_policy_limit_bucket_and_counter_values() {
    let a = limit("ns/quotas/writes", vec![rate(5, 60)]);
    let b = limit("ns/quotas/reads", vec![rate(50, 3600)]);
    let values = vec!["spiffe://td/alpha".to_string(), "x\"y\u{e9}".to_string()];
    let sa = Selected {
        limit: 0,
        key: a.bucket(Some(&values)),
        values: Some(values.clone()),
    };
    let sb = Selected {
        limit: 1,
        key: b.bucket(None),
        values: None,
    };
    let m = request(&service(), [(&a, &sa), (&b, &sb)]);
    // Decoded back: every field.
    let m = pb::RateLimitRequest::decode(m.encode_to_vec().as_slice()).unwrap();
    assert_eq!(m.domain, "dom");
    assert_eq!(m.hits_addend, 1);
    assert_eq!(m.descriptors.len(), 2);
    let key_a = hex(&sa.key);
    assert_eq!(key_a.len(), 64);
    assert_eq!(
        pairs(&m.descriptors[0]),
        [
            (ENTRY_POLICY, "ns/quotas"),
            (ENTRY_LIMIT, "ns/quotas/writes"),
            (ENTRY_KEY, key_a.as_str()),
            ("mcp_access.counter.0", "spiffe://td/alpha"),
            ("mcp_access.counter.1", "x\"y\u{e9}"),
        ]
    );
    // The unidentified bucket: its own key, no counter entries.
    let key_b = hex(&b.bucket(None));
    assert_eq!(
        pairs(&m.descriptors[1]),
        [
            (ENTRY_POLICY, "ns/quotas"),
            (ENTRY_LIMIT, "ns/quotas/reads"),
            (ENTRY_KEY, key_b.as_str()),
        ]
    );
    assert_ne!(key_b, hex(&b.bucket(Some(&[]))));
}

fn answer(resp: &pb::RateLimitResponse, descriptors: usize) -> Verdict {
    verdict(&resp.encode_to_vec(), descriptors)
}

fn status(code: i32, reset: Option<(i64, i32)>, limit: Option<(u32, i32)>) -> pb::DescriptorStatus {
    pb::DescriptorStatus {
        code,
        current_limit: limit.map(|(requests_per_unit, unit)| pb::RateLimit {
            requests_per_unit,
            unit,
            name: "n".into(),
        }),
        limit_remaining: 0,
        duration_until_reset: reset.map(|(seconds, nanos)| pb::Duration { seconds, nanos }),
    }
}

fn failed(v: Verdict) -> String {
    v.failure()
}

#[test]
fn ok_needs_one_ok_status_per_descriptor() {
    let ok = pb::RateLimitResponse {
        overall_code: pb::OK,
        statuses: vec![status(pb::OK, None, None), status(pb::OK, None, None)],
    };
    assert_eq!(answer(&ok, 2), Verdict::Ok);
    // Missing statuses, or one too many.
    let why = failed(answer(&ok, 3));
    assert_eq!(why, "2 statuses for 3 descriptors");
    let none = pb::RateLimitResponse {
        overall_code: pb::OK,
        statuses: vec![],
    };
    assert_eq!(failed(answer(&none, 1)), "0 statuses for 1 descriptors");
    // A status neither OK nor OVER_LIMIT.
    let odd = pb::RateLimitResponse {
        overall_code: pb::OK,
        statuses: vec![status(pb::OK, None, None), status(0, None, None)],
    };
    assert_eq!(failed(answer(&odd, 2)), "descriptor 1 has code 0");
}

#[test]
fn over_limit_on_any_descriptor_refuses_with_its_reset_and_limit() {
    let resp = pb::RateLimitResponse {
        overall_code: pb::OVER_LIMIT,
        statuses: vec![
            status(pb::OK, Some((30, 0)), Some((9, 2))),
            status(pb::OVER_LIMIT, Some((41, 5)), Some((5, 2))),
        ],
    };
    assert_eq!(
        answer(&resp, 2),
        Verdict::Over {
            index: 1,
            reset: Some(42),
            limit: Some((5, 60)),
        }
    );
    // OVER_LIMIT on a descriptor refuses even when the overall code says OK.
    let mixed = pb::RateLimitResponse {
        overall_code: pb::OK,
        statuses: vec![
            status(pb::OVER_LIMIT, None, Some((5, 5))),
            status(pb::OK, None, None),
        ],
    };
    assert_eq!(
        answer(&mixed, 2),
        Verdict::Over {
            index: 0,
            reset: None,
            limit: None,
        }
    );
    // Overall OVER_LIMIT without statuses still refuses (the first limit named).
    let bare = pb::RateLimitResponse {
        overall_code: pb::OVER_LIMIT,
        statuses: vec![],
    };
    let over = Verdict::Over {
        index: 0,
        reset: None,
        limit: None,
    };
    assert_eq!(answer(&bare, 2), over);
    // A negative duration is no reset.
    let negative = pb::RateLimitResponse {
        overall_code: pb::OVER_LIMIT,
        statuses: vec![status(pb::OVER_LIMIT, Some((-1, 0)), None)],
    };
    assert_eq!(answer(&negative, 1), over);
}

#[test]
fn unknown_codes_garbage_empty_bodies_and_errors_are_failures() {
    let unknown = pb::RateLimitResponse {
        overall_code: 0,
        statuses: vec![status(pb::OK, None, None)],
    };
    assert!(failed(answer(&unknown, 1)).contains("overall_code 0"));
    let seven = pb::RateLimitResponse {
        overall_code: 7,
        statuses: vec![],
    };
    assert!(failed(answer(&seven, 1)).contains("overall_code 7"));
    // Garbage: not a RateLimitResponse.
    let why = failed(verdict(&[0xff, 0xff, 0xff, 0xff], 1));
    assert!(why.starts_with("malformed RateLimitResponse"), "{why}");
    // An empty message decodes as overall_code UNKNOWN.
    assert!(failed(verdict(&[], 1)).contains("overall_code 0"));
}

#[test]
fn retry_after_and_the_rate_named() {
    let rates = [rate(5, 60), rate(50, 3600)];
    assert_eq!(retry_after(&rates, Some(7)), 7);
    assert_eq!(retry_after(&rates, None), 3600);
    assert_eq!(
        refusing_rate(&rates, Some((50, 3600))),
        Some(rate(50, 3600))
    );
    assert_eq!(refusing_rate(&rates, Some((51, 3600))), None);
    assert_eq!(refusing_rate(&rates, None), None);
    assert_eq!(refusing_rate(&rates[..1], None), Some(rate(5, 60)));
    assert_eq!(
        seconds(&pb::Duration {
            seconds: 0,
            nanos: 0
        }),
        Some(1)
    );
    assert_eq!(
        seconds(&pb::Duration {
            seconds: i64::MAX,
            nanos: 1
        }),
        Some(u64::try_from(i64::MAX).unwrap() + 1)
    );
    assert_eq!(
        seconds(&pb::Duration {
            seconds: 3,
            nanos: -1
        }),
        None
    );
}
