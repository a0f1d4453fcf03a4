//! `Global` limits (docs/semantics.md §8.6): the RateLimitService call Envoy's own ratelimit
//! filter makes (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), one
//! descriptor per limit charged, and what its answer means. The messages are declared for
//! `prost` by hand with the field numbers of `envoy/service/ratelimit/v3/rls.proto` and
//! `envoy/extensions/common/ratelimit/v3/ratelimit.proto` (only the fields sent or read).

use mcp_access_bundle::{Rate, RateLimitService};

use super::{Limit, Selected};

/// The gRPC method called.
pub const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Descriptor entry keys: the policy (`namespace/policy`), the limit (`namespace/policy/limit`),
/// the bucket (hex SHA-256 of the limit's definition and counter values, as Local buckets are
/// keyed: what a limiter counts by), and each counter's value (`mcp_access.counter.<i>`,
/// absent for the "unidentified" bucket).
pub const ENTRY_POLICY: &str = "mcp_access.policy";
pub const ENTRY_LIMIT: &str = "mcp_access.limit";
pub const ENTRY_KEY: &str = "mcp_access.key";
pub const ENTRY_COUNTER: &str = "mcp_access.counter";

/// Bytes of an answer read: a RateLimitResponse with one status per descriptor is far
/// smaller; a longer one is malformed.
pub const READ_LIMIT: usize = 64 * 1024;

/// The messages, declared for prost.
pub mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitRequest {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(message, repeated, tag = "2")]
        pub descriptors: Vec<RateLimitDescriptor>,
        #[prost(uint32, tag = "3")]
        pub hits_addend: u32,
    }

    /// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitDescriptor {
        #[prost(message, repeated, tag = "1")]
        pub entries: Vec<Entry>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Entry {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `Code`: UNKNOWN 0, OK 1, OVER_LIMIT 2.
    pub const OK: i32 = 1;
    pub const OVER_LIMIT: i32 = 2;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitResponse {
        #[prost(int32, tag = "1")]
        pub overall_code: i32,
        #[prost(message, repeated, tag = "2")]
        pub statuses: Vec<DescriptorStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DescriptorStatus {
        #[prost(int32, tag = "1")]
        pub code: i32,
        #[prost(message, optional, tag = "2")]
        pub current_limit: Option<RateLimit>,
        #[prost(uint32, tag = "3")]
        pub limit_remaining: u32,
        #[prost(message, optional, tag = "4")]
        pub duration_until_reset: Option<Duration>,
    }

    /// `RateLimitResponse.RateLimit`; `unit`: SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5,
    /// YEAR 6, WEEK 7.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimit {
        #[prost(uint32, tag = "1")]
        pub requests_per_unit: u32,
        #[prost(int32, tag = "2")]
        pub unit: i32,
        #[prost(string, tag = "3")]
        pub name: String,
    }

    /// `google.protobuf.Duration`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Duration {
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
}

/// The descriptor of one charged limit: its entries name the policy, the limit, the bucket
/// ([`Limit::bucket`], the Local key) and the counter values.
pub fn descriptor(limit: &Limit, selected: &Selected) -> pb::RateLimitDescriptor {
    let entry = |key: String, value: String| pb::Entry { key, value };
    let policy = limit
        .id
        .rsplit_once('/')
        .map_or(limit.id.as_str(), |(p, _)| p);
    let counters = selected.values.as_ref().map_or(0, Vec::len);
    let mut entries = Vec::with_capacity(3 + counters);
    entries.extend([
        entry(ENTRY_POLICY.into(), policy.to_string()),
        entry(ENTRY_LIMIT.into(), limit.id.clone()),
        entry(ENTRY_KEY.into(), crate::receipts::hex(&selected.key)),
    ]);
    for (i, v) in selected.values.iter().flatten().enumerate() {
        entries.push(entry(format!("{ENTRY_COUNTER}.{i}"), v.clone()));
    }
    pb::RateLimitDescriptor { entries }
}

/// The ShouldRateLimit request charging `charged` (limit, bucket) one request each, in the
/// domain of `service`.
pub fn request<'l>(
    service: &RateLimitService,
    charged: impl IntoIterator<Item = (&'l Limit, &'l Selected)>,
) -> pb::RateLimitRequest {
    pb::RateLimitRequest {
        domain: service.domain.clone(),
        descriptors: charged.into_iter().map(|(l, s)| descriptor(l, s)).collect(),
        hits_addend: 1,
    }
}

/// What the limiter said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every descriptor has room (and was charged).
    Ok,
    /// Descriptor `index` is over its limit (nothing is to be charged): seconds until it
    /// resets, when the limiter said, and its limit as `(requests_per_unit, unit seconds)`.
    Over {
        index: usize,
        reset: Option<u64>,
        limit: Option<(u64, u32)>,
    },
    /// No usable answer (the failure mode applies): why, for the record and the log.
    Failed(String),
}

/// The answer a RateLimitService would give to the framed request `call_body` if the limits
/// `over` says are over had no room and the others had: OVER_LIMIT for those descriptors (by
/// their `mcp_access.limit` entry), OK for the rest (the message, unframed). None: not a
/// request of this filter's (not one gRPC message of a RateLimitRequest). What `explain
/// --assume` answers the call with.
pub fn assumed_answer(call_body: &[u8], over: impl Fn(&str) -> bool) -> Option<Vec<u8>> {
    let [message] = crate::pb::messages(call_body).ok()?[..] else {
        return None;
    };
    let req = <pb::RateLimitRequest as prost::Message>::decode(message).ok()?;
    let statuses: Vec<pb::DescriptorStatus> = req
        .descriptors
        .iter()
        .map(|d| {
            let limit = d.entries.iter().find(|e| e.key == ENTRY_LIMIT);
            let is_over = limit.is_some_and(|e| over(&e.value));
            pb::DescriptorStatus {
                code: if is_over { pb::OVER_LIMIT } else { pb::OK },
                ..pb::DescriptorStatus::default()
            }
        })
        .collect();
    let overall_code = if statuses.iter().any(|s| s.code == pb::OVER_LIMIT) {
        pb::OVER_LIMIT
    } else {
        pb::OK
    };
    let resp = pb::RateLimitResponse {
        overall_code,
        statuses,
    };
    Some(prost::Message::encode_to_vec(&resp))
}

/// What a RateLimitResponse (`bytes`) to a request of `descriptors` descriptors says:
/// `OVER_LIMIT`, overall or on any descriptor, refuses; OK needs one OK status per
/// descriptor; anything else, or bytes that do not decode, is a failure.
pub fn verdict(bytes: &[u8], descriptors: usize) -> Verdict {
    let failed = |s: String| Verdict::Failed(s);
    let resp = match <pb::RateLimitResponse as prost::Message>::decode(bytes) {
        Ok(r) => r,
        Err(e) => return failed(format!("malformed RateLimitResponse: {e}")),
    };
    let over = resp.statuses.iter().position(|s| s.code == pb::OVER_LIMIT);
    if over.is_some() || resp.overall_code == pb::OVER_LIMIT {
        let index = over.unwrap_or(0);
        let status = over.and_then(|i| resp.statuses.get(i));
        return Verdict::Over {
            index: index.min(descriptors.saturating_sub(1)),
            reset: status.and_then(|s| s.duration_until_reset.as_ref().and_then(seconds)),
            limit: status.and_then(|s| s.current_limit.as_ref().and_then(limit_of)),
        };
    }
    if resp.overall_code != pb::OK {
        return failed(format!(
            "overall_code {} (neither OK nor OVER_LIMIT)",
            resp.overall_code
        ));
    }
    if resp.statuses.len() != descriptors {
        return failed(format!(
            "{} statuses for {descriptors} descriptors",
            resp.statuses.len()
        ));
    }
    if let Some((i, s)) = resp
        .statuses
        .iter()
        .enumerate()
        .find(|(_, s)| s.code != pb::OK)
    {
        return failed(format!("descriptor {i} has code {}", s.code));
    }
    Verdict::Ok
}

/// Whole seconds of a duration, rounded up, at least 1 (None: negative or out of range).
fn seconds(d: &pb::Duration) -> Option<u64> {
    let s = u64::try_from(d.seconds).ok()?;
    let up = u64::from(d.nanos > 0);
    (d.nanos >= 0).then(|| s.saturating_add(up).max(1))
}

/// A status's limit as (requests, window seconds), for units of a fixed length.
fn limit_of(l: &pb::RateLimit) -> Option<(u64, u32)> {
    let window = match l.unit {
        1 => 1,
        2 => 60,
        3 => 3_600,
        4 => 86_400,
        7 => 7 * 86_400,
        _ => return None,
    };
    Some((u64::from(l.requests_per_unit), window))
}

/// The rate of `rates` a refusal names: the limiter's limit when one of them is it, the only
/// rate when there is one.
pub fn refusing_rate(rates: &[Rate], limit: Option<(u64, u32)>) -> Option<Rate> {
    match rates {
        [only] => Some(*only),
        _ => {
            let (q, w) = limit?;
            rates
                .iter()
                .find(|r| r.limit == q && r.window_seconds == w)
                .copied()
        }
    }
}

/// Seconds a client should wait after a refusal: the limiter's reset, else the longest
/// window of the limit's rates.
pub fn retry_after(rates: &[Rate], reset: Option<u64>) -> u64 {
    reset.unwrap_or_else(|| {
        rates
            .iter()
            .map(|r| u64::from(r.window_seconds))
            .max()
            .unwrap_or(1)
    })
}

#[cfg(test)]
impl Verdict {
    /// Why it failed (a test's expectation: panics on another verdict).
    pub(crate) fn failure(self) -> String {
        match self {
            Verdict::Failed(why) => why,
            other => panic!("not a failure: {other:?}"),
        }
    }
}

#[cfg(test)]
#[path = "global_tests.rs"]
mod tests;
