//! Rate limits (docs/semantics.md §8), pure: which limits a request is charged, the bucket
//! each is counted in ([`bucket`] holds a bucket's arithmetic, [`store`] the Local buckets in
//! the host's shared data).
//!
//! A bucket is keyed by the SHA-256 of its limit's definition digest (of the bundle entry, so
//! an unchanged limit keeps its counts across configuration reloads and a changed one starts
//! afresh) and its counter values; a counter that errs or has no value puts the request in the
//! limit's one "unidentified" bucket, never in none.

pub mod bucket;
pub mod global;
pub mod store;

use mcp_access_bundle::{self as bundle, FailureMode, LimitConditions, Rate, RateLimitMode};
use mcp_access_cel::{Counter, Program};
use sha2::{Digest as _, Sha256};

use crate::cel_input::CelInput;
use crate::jsonw::push_str;
use crate::keyhash;

/// What charging an allowed request's limits did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LimitsRecord {
    /// `namespace/policy/limit` of each limit charged (of those that would have been, when
    /// one refused).
    pub charged: Vec<String>,
    /// The limit that refused the request, if one did.
    pub refused: Option<String>,
    /// Buckets evicted to make room (the Local store's bound).
    pub evicted: u32,
    /// Why the RateLimitService gave no usable answer, when it did not (its limits' failure
    /// mode decided).
    pub limiter_failed: Option<String>,
}

/// One limit, compiled.
#[derive(Debug)]
pub struct Limit {
    /// `namespace/policy/limit`.
    pub id: String,
    /// SHA-256 of its bundle definition.
    pub digest: [u8; 32],
    pub mode: RateLimitMode,
    pub failure_mode: FailureMode,
    pub rates: Vec<Rate>,
    /// Gateway level: the listeners it is charged on. Backend level: the listeners it is
    /// narrowed to (empty: every listener).
    listeners: Vec<usize>,
    gateway_level: bool,
    /// Backend level: (backend, the route or cluster names it is charged through; None: all).
    backends: Vec<(usize, Option<Vec<String>>)>,
    counters: Vec<Counter>,
    when: Vec<Program>,
}

/// The bundle's rate limits, compiled.
#[derive(Debug, Default)]
pub struct RateLimits(pub Vec<Limit>);

/// Where a request is judged: its listener, backend, and the name the backend was
/// recognised by.
#[derive(Debug, Clone, Copy)]
pub struct Where<'a> {
    pub listener: Option<usize>,
    pub backend: Option<usize>,
    pub recognised: Option<&'a str>,
}

/// A limit a request is charged, and its bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// Index in [`RateLimits`].
    pub limit: usize,
    pub key: [u8; 32],
    /// The counter values (None: the "unidentified" bucket).
    pub values: Option<Vec<String>>,
}

impl RateLimits {
    /// Compiles the bundle's limits; `listeners` and `backends` are the engine's ids
    /// (`ns/gateway/listener`, `ns/name`) in its order.
    pub fn compile(
        b: &bundle::Bundle,
        conditions: Vec<LimitConditions>,
        listeners: &[&str],
        backends: &[&str],
    ) -> Result<RateLimits, (String, String)> {
        let mut out = Vec::with_capacity(b.rate_limits.len());
        let mut conditions = conditions.into_iter();
        for l in &b.rate_limits {
            let c = conditions.next().unwrap_or_default();
            if c.counters.len() != l.counters.len() || c.when.len() != l.when.len() {
                return Err((l.id(), "its CEL was not compiled by validation".into()));
            }
            let listener = |t: &bundle::PolicyTarget| -> Vec<usize> {
                let ns = t.namespace.as_deref().unwrap_or(&l.namespace);
                let whole = format!("{ns}/{}/", t.name);
                listeners
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| match &t.section_name {
                        Some(s) => **id == format!("{whole}{s}"),
                        None => id.starts_with(&whole),
                    })
                    .map(|(i, _)| i)
                    .collect()
            };
            let gateway_level = l.level == bundle::Level::Gateway;
            let (on, backends_of) = if gateway_level {
                (l.targets.iter().flat_map(listener).collect(), Vec::new())
            } else {
                let mut bs = Vec::new();
                for t in &l.targets {
                    let id = format!(
                        "{}/{}",
                        t.namespace.as_deref().unwrap_or(&l.namespace),
                        t.name
                    );
                    let Some(i) = backends.iter().position(|b| *b == id) else {
                        return Err((l.id(), format!("no backend {id}")));
                    };
                    bs.push((i, t.routes.clone()));
                }
                (l.listeners.iter().flat_map(listener).collect(), bs)
            };
            let definition = serde_json::to_vec(l).map_err(|e| (l.id(), e.to_string()))?;
            out.push(Limit {
                id: l.id(),
                digest: Sha256::digest(&definition).into(),
                mode: l.mode,
                failure_mode: l.failure_mode,
                rates: l.rates.clone(),
                listeners: on,
                gateway_level,
                backends: backends_of,
                counters: c.counters,
                when: c.when,
            });
        }
        Ok(RateLimits(out))
    }

    /// Every CEL program of the limits (counters and predicates): what they read must be
    /// gathered.
    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        self.0
            .iter()
            .flat_map(|l| l.counters.iter().map(Counter::program).chain(l.when.iter()))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some limit counts in this Envoy (its store must be prepared).
    pub fn has_local(&self) -> bool {
        self.0.iter().any(|l| l.mode == RateLimitMode::Local)
    }

    /// The limits a request at `at` is charged, each with its bucket: those whose targets
    /// it meets and whose `when` predicates all hold; without predicates, on `tools/call`
    /// only. A predicate that errs holds on a `tools/call` (an error never lets a tool call
    /// escape its limit) and not on other requests.
    pub fn select(&self, at: Where<'_>, input: &CelInput<'_>) -> Vec<Selected> {
        let call = input.req.mcp.method() == Some("tools/call");
        let mut out = Vec::new();
        for (i, l) in self.0.iter().enumerate() {
            let selects = if l.when.is_empty() {
                call
            } else {
                l.when.iter().all(|w| w.eval(input).unwrap_or(call))
            };
            if !selects || !l.targets(at) {
                continue;
            }
            let values: Option<Vec<String>> = l
                .counters
                .iter()
                .map(|c| c.eval(input).ok().flatten())
                .collect();
            out.push(Selected {
                limit: i,
                key: l.bucket(values.as_deref()),
                values,
            });
        }
        out
    }
}

impl Limit {
    /// The level it is charged at.
    pub fn level(&self) -> bundle::Level {
        if self.gateway_level {
            bundle::Level::Gateway
        } else {
            bundle::Level::Backend
        }
    }

    /// Whether a request at `at` meets this limit's targets.
    fn targets(&self, at: Where<'_>) -> bool {
        if self.gateway_level {
            return at.listener.is_some_and(|l| self.listeners.contains(&l));
        }
        let on_listener =
            self.listeners.is_empty() || at.listener.is_some_and(|l| self.listeners.contains(&l));
        on_listener
            && self.backends.iter().any(|(b, routes)| {
                Some(*b) == at.backend
                    && routes.as_ref().is_none_or(|r| {
                        at.recognised
                            .is_some_and(|name| r.iter().any(|x| x == name))
                    })
            })
    }

    /// The bucket of counter `values` (None: the "unidentified" one).
    pub fn bucket(&self, values: Option<&[String]>) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.digest);
        match values {
            Some(v) => {
                h.update([1]);
                for x in v {
                    keyhash::field(&mut h, x.as_bytes());
                }
            }
            None => h.update([0]),
        }
        h.finalize().into()
    }
}

/// `,"limits":{"charged":[...],"refused":...}` of a decision record (written only when some
/// limit was charged). Out of line: kept out of the decisions without limits.
#[inline(never)]
pub fn push_limits(out: &mut String, l: &LimitsRecord) {
    out.push_str(",\"limits\":{\"charged\":[");
    for (i, id) in l.charged.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, id);
    }
    out.push_str("],\"refused\":");
    match &l.refused {
        Some(r) => push_str(out, r),
        None => out.push_str("null"),
    }
    if let Some(why) = &l.limiter_failed {
        out.push_str(",\"limiterFailed\":");
        push_str(out, why);
    }
    out.push('}');
}
