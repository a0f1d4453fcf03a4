//! Where Local buckets live: the host's shared data (every worker of this Envoy), as 25,000
//! slots of at most 4 buckets each (100,000 buckets; a full slot evicts a bucket whose windows
//! have ended, else its least recently charged one, and says so). A charge reads a slot and
//! writes it back only if no other worker wrote it since (compare-and-swap), retried a few
//! times; a request's charges are made one limit after another and undone if a later one
//! does not fit, so a refused request consumes nothing.

use mcp_access_bundle::Rate;

use super::bucket::{Counts, Full};

/// Buckets per slot.
pub const WAYS: usize = 4;
/// Slots.
pub const SLOTS: u32 = 25_000;
/// Buckets kept at most (documented bound of the Local limiter's memory).
pub const MAX_BUCKETS: usize = WAYS * SLOTS as usize;
/// Shared data key prefix of the slots: `mcp_access.ratelimit/<n>`.
pub const SLOT_PREFIX: &str = "mcp_access.ratelimit/";
/// Attempts at one slot before the charge is given up (and the request refused).
const ATTEMPTS: usize = 8;

/// Why the store did not do what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// Another write came first (compare-and-swap mismatch): read again.
    Conflict,
    /// The host's shared data failed (its status).
    Failed(u32),
}

/// The host's shared data, as the Local limiter uses it.
pub trait CounterStore {
    /// The host's clock, in nanoseconds since the Unix epoch.
    fn now_ns(&self) -> u64;
    /// The value of `slot` and its compare-and-swap token (None: never written).
    fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError>;
    /// Writes `value` to `slot` if its token is still `cas` (0: unconditionally).
    fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError>;
}

/// One bucket to charge: its key (the limit's definition digest and the counter values,
/// hashed) and the limit's rates.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    pub key: [u8; 32],
    pub rates: &'a [Rate],
}

/// How a request's charges went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charged {
    /// Every bucket had room and was charged; per charge, (left, seconds to reset) of its
    /// tightest rate; buckets evicted to make room.
    Allowed {
        remaining: Vec<(u64, u64)>,
        evicted: u32,
        /// When (s since the epoch): what [`refund_all`] takes back.
        at: u64,
    },
    /// Charge `index` had no room: nothing was charged.
    Refused { index: usize, full: Full },
    /// The store failed or stayed contended: nothing was charged (the request is refused).
    Failed { index: usize, error: StoreError },
}

/// A bucket as a slot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: [u8; 32],
    /// Last charged (s since the epoch): the least recent is evicted first.
    touched: u64,
    counts: Counts,
}

/// The slot of bucket `key`.
pub fn slot_of(key: &[u8; 32]) -> String {
    let n = u32::from_le_bytes([key[0], key[1], key[2], key[3]]) % SLOTS;
    format!("{SLOT_PREFIX}{n}")
}

/// Charges every bucket of `charges` one request, or none.
pub fn charge_all(store: &dyn CounterStore, charges: &[Charge<'_>]) -> Charged {
    let now = store.now_ns() / 1_000_000_000;
    let mut remaining = Vec::with_capacity(charges.len());
    let mut evicted = 0u32;
    for (i, c) in charges.iter().enumerate() {
        let done = charges.get(..i).unwrap_or_default();
        match update(store, c, now, |counts| counts.charge(c.rates, now, 1)) {
            Ok((counts, ev)) => {
                evicted = evicted.saturating_add(ev);
                remaining.push(counts.remaining(c.rates, now));
            }
            Err(e) => {
                refund_all(store, done, now);
                return match e {
                    Refusal::Full(full) => Charged::Refused { index: i, full },
                    Refusal::Store(error) => Charged::Failed { index: i, error },
                };
            }
        }
    }
    Charged::Allowed {
        remaining,
        evicted,
        at: now,
    }
}

/// Takes back the request [`charge_all`] charged `charges` at `at` (s). Best effort: a
/// refund that fails leaves a bucket one request fuller; a window that has ended since keeps
/// the count of its successor.
pub fn refund_all(store: &dyn CounterStore, charges: &[Charge<'_>], at: u64) {
    let now = store.now_ns() / 1_000_000_000;
    for c in charges {
        let _ = update(store, c, now.max(at), |counts| {
            Ok(counts.refund(c.rates, at, 1))
        });
    }
}

enum Refusal {
    Full(Full),
    Store(StoreError),
}

/// Reads bucket `c`'s slot, changes its counts with `f`, writes it back if unchanged since;
/// the new counts and the buckets evicted.
fn update(
    store: &dyn CounterStore,
    c: &Charge<'_>,
    now: u64,
    f: impl Fn(&Counts) -> Result<Counts, Full>,
) -> Result<(Counts, u32), Refusal> {
    let slot = slot_of(&c.key);
    let mut last = StoreError::Conflict;
    for _ in 0..ATTEMPTS {
        let (mut entries, cas) = match store.get(&slot).map_err(Refusal::Store)? {
            Some((bytes, cas)) => (
                decode(&bytes).ok_or(Refusal::Store(StoreError::Failed(0)))?,
                cas,
            ),
            None => (Vec::new(), 0),
        };
        let mut evicted = 0;
        let at = match entries.iter().position(|e| e.key == c.key) {
            Some(at) => at,
            None => {
                if entries.len() >= WAYS {
                    // A bucket whose windows ended holds nothing; else the least recent goes.
                    let victim = entries
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, e)| (!e.counts.expired(c.rates, now), e.touched))
                        .map(|(j, _)| j);
                    if let Some(j) = victim {
                        evicted = u32::from(
                            !entries
                                .get(j)
                                .is_some_and(|e| e.counts.expired(c.rates, now)),
                        );
                        entries.remove(j);
                    }
                }
                entries.push(Entry {
                    key: c.key,
                    touched: now,
                    counts: Counts {
                        windows: Vec::new(),
                    },
                });
                entries.len() - 1
            }
        };
        let Some(e) = entries.get_mut(at) else {
            return Err(Refusal::Store(StoreError::Failed(0)));
        };
        let counts = f(&e.counts).map_err(Refusal::Full)?;
        e.counts = counts.clone();
        e.touched = now;
        match store.set(&slot, &encode(&entries), cas) {
            Ok(()) => return Ok((counts, evicted)),
            Err(StoreError::Conflict) => last = StoreError::Conflict,
            Err(other) => return Err(Refusal::Store(other)),
        }
    }
    Err(Refusal::Store(last))
}

/// A slot's bytes: per bucket its key, last charge, window count, then (start, count) per
/// window, little-endian.
fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 64);
    for e in entries {
        out.extend_from_slice(&e.key);
        out.extend_from_slice(&e.touched.to_le_bytes());
        out.push(u8::try_from(e.counts.windows.len()).unwrap_or(u8::MAX));
        for (s, n) in e.counts.windows.iter().take(usize::from(u8::MAX)) {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    out
}

/// A slot read back (None: not a slot this code wrote).
fn decode(mut b: &[u8]) -> Option<Vec<Entry>> {
    fn u64_at(b: &mut &[u8]) -> Option<u64> {
        let (head, rest) = b.split_first_chunk::<8>()?;
        *b = rest;
        Some(u64::from_le_bytes(*head))
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, rest) = b.split_first_chunk::<32>()?;
        b = rest;
        let touched = u64_at(&mut b)?;
        let (n, rest) = b.split_first()?;
        b = rest;
        let mut windows = Vec::with_capacity(usize::from(*n));
        for _ in 0..*n {
            windows.push((u64_at(&mut b)?, u64_at(&mut b)?));
        }
        out.push(Entry {
            key: *key,
            touched,
            counts: Counts { windows },
        });
        if out.len() > WAYS {
            return None;
        }
    }
    Some(out)
}

/// An in-memory store (tests, `explain`): one map, a settable clock.
#[derive(Debug, Default)]
pub struct MemoryCounterStore {
    slots: std::cell::RefCell<std::collections::HashMap<String, (Vec<u8>, u32)>>,
    pub now_ns: std::cell::Cell<u64>,
}

impl CounterStore for MemoryCounterStore {
    fn now_ns(&self) -> u64 {
        self.now_ns.get()
    }

    fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        Ok(self.slots.borrow().get(slot).cloned())
    }

    fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        let mut slots = self.slots.borrow_mut();
        let current = slots.get(slot).map_or(0, |(_, c)| *c);
        if cas != 0 && cas != current {
            return Err(StoreError::Conflict);
        }
        slots.insert(
            slot.to_string(),
            (value.to_vec(), current.wrapping_add(1).max(1)),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: [Rate; 1] = [Rate {
        limit: 2,
        window_seconds: 60,
    }];
    const HOUR: [Rate; 1] = [Rate {
        limit: 1,
        window_seconds: 3600,
    }];

    fn key(n: u8, slot: u8) -> [u8; 32] {
        let mut k = [n; 32];
        k[..4].copy_from_slice(&[slot, 0, 0, 0]);
        k
    }

    fn store_at(s: u64) -> MemoryCounterStore {
        let st = MemoryCounterStore::default();
        st.now_ns.set(s * 1_000_000_000);
        st
    }

    #[test]
    fn a_refused_request_consumes_nothing() {
        let st = store_at(60);
        let a = Charge {
            key: key(1, 1),
            rates: &MINUTE,
        };
        let b = Charge {
            key: key(2, 2),
            rates: &HOUR,
        };
        assert!(matches!(charge_all(&st, &[a, b]), Charged::Allowed { .. }));
        // b is full: a is charged, then refunded.
        assert_eq!(
            charge_all(&st, &[a, b]),
            Charged::Refused {
                index: 1,
                full: Full {
                    rate: 0,
                    retry_after: 3540
                }
            }
        );
        // a still has one left of its two.
        let Charged::Allowed { remaining, .. } = charge_all(&st, &[a]) else {
            panic!()
        };
        assert_eq!(remaining, [(0, 60)]);
    }

    #[test]
    fn a_full_slot_evicts_the_least_recent_bucket_and_counts_it() {
        let st = store_at(60);
        for n in 0..4u8 {
            st.now_ns.set((60 + u64::from(n)) * 1_000_000_000);
            let c = Charge {
                key: key(n, 7),
                rates: &HOUR,
            };
            assert!(matches!(
                charge_all(&st, &[c]),
                Charged::Allowed { evicted: 0, .. }
            ));
        }
        let c = Charge {
            key: key(9, 7),
            rates: &HOUR,
        };
        assert!(matches!(
            charge_all(&st, &[c]),
            Charged::Allowed { evicted: 1, .. }
        ));
        // Bucket 0 (the oldest) was evicted: it starts again; bucket 1 was kept.
        let c0 = Charge {
            key: key(0, 7),
            rates: &HOUR,
        };
        assert!(matches!(charge_all(&st, &[c0]), Charged::Allowed { .. }));
        let c2 = Charge {
            key: key(2, 7),
            rates: &HOUR,
        };
        assert!(matches!(charge_all(&st, &[c2]), Charged::Refused { .. }));
        assert_eq!(slot_of(&key(0, 7)), slot_of(&key(9, 7)));
    }

    /// A store whose writes conflict `n` times first (another worker writing).
    struct Contended(MemoryCounterStore, std::cell::Cell<u32>);

    impl CounterStore for Contended {
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
        fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
            self.0.get(slot)
        }
        fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
            if self.1.get() > 0 {
                self.1.set(self.1.get() - 1);
                return Err(StoreError::Conflict);
            }
            self.0.set(slot, value, cas)
        }
    }

    #[test]
    fn conflicts_are_retried_a_bounded_number_of_times() {
        let c = Charge {
            key: key(1, 1),
            rates: &MINUTE,
        };
        let st = Contended(store_at(0), std::cell::Cell::new(3));
        assert!(matches!(charge_all(&st, &[c]), Charged::Allowed { .. }));
        let st = Contended(store_at(0), std::cell::Cell::new(100));
        assert_eq!(
            charge_all(&st, &[c]),
            Charged::Failed {
                index: 0,
                error: StoreError::Conflict
            }
        );
    }

    #[test]
    fn slots_round_trip_and_garbage_is_refused() {
        let e = vec![Entry {
            key: key(3, 3),
            touched: 9,
            counts: Counts {
                windows: vec![(60, 2), (0, 5)],
            },
        }];
        assert_eq!(decode(&encode(&e)), Some(e));
        assert_eq!(decode(&[1, 2, 3]), None);
        let st = store_at(0);
        let c = Charge {
            key: key(1, 1),
            rates: &MINUTE,
        };
        st.set(&slot_of(&c.key), b"garbage", 0).unwrap();
        assert!(matches!(charge_all(&st, &[c]), Charged::Failed { .. }));
    }
}
