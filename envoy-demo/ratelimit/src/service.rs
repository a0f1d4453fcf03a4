//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` on limitador's counters.
//!
//! Each descriptor is matched on its own, bound as `descriptors[0]` (so a Limitador limits file
//! written for one-descriptor requests applies unchanged): a descriptor with a `limit` override is
//! counted by that override alone, any other by every limit of the file in the request's domain
//! whose conditions hold (a domain without limits in the file is refused). All counters of the
//! request are then checked and charged in one limitador call, so a request refused by one
//! counter charges none.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use limitador::counter::Counter;
use limitador::limit::{Context, Limit, Namespace};
use limitador::storage::{AsyncCounterStorage, Authorization};
use tonic::{Request, Response, Status};

use crate::limits;

pub struct Limiter {
    /// The limits file's limits by namespace (the request's `domain`).
    limits: HashMap<Namespace, Vec<Arc<Limit>>>,
    storage: Box<dyn AsyncCounterStorage>,
}

impl Limiter {
    pub fn new(limits: Vec<Limit>, storage: Box<dyn AsyncCounterStorage>) -> Self {
        let mut by_namespace: HashMap<Namespace, Vec<Arc<Limit>>> = HashMap::new();
        for limit in limits {
            by_namespace
                .entry(limit.namespace().clone())
                .or_default()
                .push(Arc::new(limit));
        }
        Self {
            limits: by_namespace,
            storage,
        }
    }

    fn domains(&self) -> String {
        let mut names: Vec<&str> = self.limits.keys().map(AsRef::as_ref).collect();
        names.sort_unstable();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }

    /// The counters one descriptor charges.
    fn counters(
        &self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Vec<Counter>, Status> {
        let entries: HashMap<String, String> = descriptor
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_string(), vec![entries]);
        let overridden;
        let candidates: &[Arc<Limit>] = match &descriptor.limit {
            Some(limit) => {
                let keys: Vec<&str> = descriptor.entries.iter().map(|e| e.key.as_str()).collect();
                overridden = [Arc::new(
                    limits::from_override(domain, &keys, limit)
                        .map_err(Status::invalid_argument)?,
                )];
                &overridden
            }
            // A domain the file does not name is refused, not answered OK: a misspelt domain
            // would otherwise count nothing.
            None => self
                .limits
                .get(&Namespace::from(domain))
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "domain {domain:?} has no limits (the limits file names {})",
                        self.domains()
                    ))
                })?,
        };
        let mut counters = Vec::new();
        for limit in candidates {
            let name = limit.name().unwrap_or("");
            // limitador's `applies` panics when a condition errs (a value CEL cannot convert, a
            // result that is not a bool): that refuses the call instead of taking the process down.
            let applies = std::panic::catch_unwind(AssertUnwindSafe(|| limit.applies(&ctx)))
                .map_err(|_| {
                    Status::invalid_argument(format!(
                        "limit {name:?}: a condition failed on this descriptor"
                    ))
                })?;
            if !applies {
                continue;
            }
            // A variable that does not resolve (its entry is absent) makes no counter, as in Limitador.
            if let Some(counter) = Counter::new(Arc::clone(limit), &ctx)
                .map_err(|e| Status::invalid_argument(format!("limit {name:?}: {e}")))?
            {
                counters.push(counter);
            }
        }
        Ok(counters)
    }

    pub async fn should_rate_limit(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("domain is empty"));
        }
        let delta = hits(&request)?;
        let mut counters = Vec::new();
        let mut owners = Vec::new(); // which descriptor each counter belongs to
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let found = self.counters(&request.domain, descriptor)?;
            owners.extend(std::iter::repeat_n(index, found.len()));
            counters.extend(found);
        }
        let limited = if counters.is_empty() {
            false
        } else {
            let answer = self
                .storage
                .check_and_update(&mut counters, delta)
                .await
                .map_err(|e| {
                    tracing::error!("counter storage: {e}");
                    Status::unavailable(format!("counter storage: {e}"))
                })?;
            matches!(answer, Authorization::Limited(_))
        };
        let statuses = (0..request.descriptors.len())
            .map(|index| {
                let mine = counters
                    .iter()
                    .zip(&owners)
                    .filter(|(_, owner)| **owner == index)
                    .map(|(c, _)| c);
                status(mine, delta, limited)
            })
            .collect();
        let code = if limited { Code::OverLimit } else { Code::Ok };
        Ok(RateLimitResponse {
            overall_code: code as i32,
            statuses,
            ..Default::default()
        })
    }
}

/// The request's hits: its `hits_addend` (0 means 1), or the descriptors' own when they all agree.
fn hits(request: &RateLimitRequest) -> Result<u64, Status> {
    let default = u64::from(request.hits_addend.max(1));
    let mut own = request
        .descriptors
        .iter()
        .map(|d| d.hits_addend.map_or(default, |h| h.value));
    let first = own.next().unwrap_or(default);
    if own.any(|h| h != first) {
        return Err(Status::invalid_argument(
            "descriptors with different hits_addend are not supported",
        ));
    }
    if request.descriptors.iter().any(|d| d.is_negative_hits) {
        return Err(Status::invalid_argument(
            "is_negative_hits is not supported",
        ));
    }
    Ok(first)
}

/// One descriptor's status: its counter that refused (when the request was limited), else its
/// counter with the least room; remaining counts after this request's charge.
fn status<'a>(
    counters: impl Iterator<Item = &'a Counter>,
    delta: u64,
    limited: bool,
) -> DescriptorStatus {
    let worst = counters
        .map(|counter| {
            let before = counter.remaining().unwrap_or(counter.max_value());
            let after = if limited {
                before
            } else {
                before.saturating_sub(delta)
            };
            (before < delta, counter, after)
        })
        .min_by_key(|(refused, _, after)| (!refused, *after));
    let Some((over, counter, remaining)) = worst else {
        return DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        };
    };
    let seconds = counter.window().as_secs();
    let unit = match seconds {
        1 => Unit::Second,
        60 => Unit::Minute,
        3_600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        _ => Unit::Unknown,
    };
    let name = counter.limit().name().map_or_else(
        || format!("{}/{seconds}s", counter.max_value()),
        str::to_string,
    );
    let reset = counter.expires_in().unwrap_or(Duration::from_secs(seconds));
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(RateLimit {
            name,
            requests_per_unit: u32::try_from(counter.max_value()).unwrap_or(u32::MAX),
            unit: unit as i32,
        }),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: i64::try_from(reset.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(reset.subsec_nanos()).unwrap_or(0),
        }),
        ..Default::default()
    }
}

pub struct Service(pub Arc<Limiter>);

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let answer = self.0.should_rate_limit(request).await;
        if let Err(status) = &answer {
            tracing::warn!("ShouldRateLimit refused: {status}");
        }
        answer.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    fn counter(max: u64, seconds: u64, remaining: u64, name: &str) -> Counter {
        let mut limit = Limit::new("d", max, seconds, [], []);
        if !name.is_empty() {
            limit.set_name(name.to_string());
        }
        let mut c = Counter::new(limit, &Context::default()).unwrap().unwrap();
        c.set_remaining(remaining);
        c.set_expires_in(Duration::from_millis(1500));
        c
    }

    fn descriptor(hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            hits_addend: hits.map(|value| envoy_types::pb::google::protobuf::UInt64Value { value }),
            ..Default::default()
        }
    }

    #[test]
    fn status_names_the_refusing_counter_else_the_tightest() {
        let (minute, hour) = (counter(5, 60, 4, "m"), counter(50, 3_600, 1, "h"));
        let ok = status([&minute, &hour].into_iter(), 1, false);
        assert_eq!((ok.code, ok.limit_remaining), (Code::Ok as i32, 0));
        let limit = ok.current_limit.unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("h", 50, Unit::Hour as i32)
        );
        assert_eq!(
            ok.duration_until_reset.map(|d| (d.seconds, d.nanos)),
            Some((1, 500_000_000))
        );
        // Limited: the counter without room for 2 hits is named, its remaining not charged.
        let over = status([&minute, &hour].into_iter(), 2, true);
        assert_eq!(
            (over.code, over.limit_remaining),
            (Code::OverLimit as i32, 1)
        );
        let odd = status([&counter(3, 300, 3, "")].into_iter(), 1, false);
        let limit = odd.current_limit.unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.unit),
            ("3/300s", Unit::Unknown as i32)
        );
        let none = status(std::iter::empty(), 1, false);
        assert_eq!((none.code, none.current_limit), (Code::Ok as i32, None));
    }

    #[test]
    fn hits_are_the_requests_or_the_descriptors_when_they_agree() {
        let request = |hits_addend, descriptors| RateLimitRequest {
            domain: "d".into(),
            descriptors,
            hits_addend,
        };
        assert_eq!(hits(&request(0, vec![descriptor(None)])).ok(), Some(1));
        assert_eq!(
            hits(&request(3, vec![descriptor(None), descriptor(Some(3))])).ok(),
            Some(3)
        );
        assert_eq!(hits(&request(0, vec![descriptor(Some(0))])).ok(), Some(0));
        let mixed = hits(&request(1, vec![descriptor(None), descriptor(Some(2))]));
        assert_eq!(
            mixed.map_err(|s| s.code()),
            Err(tonic::Code::InvalidArgument)
        );
        let negative = RateLimitDescriptor {
            is_negative_hits: true,
            ..descriptor(None)
        };
        assert!(hits(&request(1, vec![negative])).is_err());
    }
}
