//! Where Local buckets live: the host's shared data (every worker of this Envoy), as 25,000
//! slots of at most 4 buckets each (100,000 buckets; a full slot evicts a bucket whose windows
//! have ended, else its least recently charged one, and says so). A charge reads a slot and
//! writes it back only if no other worker wrote it since (compare-and-swap), retried a few
//! times; a request's charges are made one limit after another and undone if a later one
//! does not fit, so a refused request consumes nothing.
//!
//! Envoy's shared data (proxy-wasm-cpp-host's `SharedData::set`) checks the CAS token only of
//! a key that exists: a write to a missing key always succeeds, so two workers creating one
//! slot at once could each write their own first count. Every slot is therefore created, empty,
//! by [`prepare`] when the configuration is loaded (first on Envoy's main thread, by the
//! configuration's canary VM, before any worker runs it), and a charge never creates one: it
//! only updates a slot that exists, under its token.

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
/// Shared data key whose value, the slot count, says every slot exists.
pub const READY_KEY: &str = "mcp_access.ratelimit/ready";
/// The host's status of a key that has no value (proxy-wasm `NotFound`).
const NOT_FOUND: u32 = 1;

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
    /// The value of `slot` and its compare-and-swap token (never 0; None: never written).
    fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError>;
    /// Writes `value` to `slot` if its token is still `cas` (0: unconditionally). As in
    /// Envoy, a slot that does not exist is written whatever `cas` is.
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

/// The slot number of bucket `key`: its first 4 bytes, little-endian, modulo [`SLOTS`].
pub fn slot_number(key: &[u8; 32]) -> u32 {
    u32::from_le_bytes([key[0], key[1], key[2], key[3]]) % SLOTS
}

/// The slot of bucket `key`.
pub fn slot_of(key: &[u8; 32]) -> String {
    format!("{SLOT_PREFIX}{}", slot_number(key))
}

/// Creates every slot the store lacks (empty; a slot that exists is left as it is), then
/// marks the store ready ([`READY_KEY`]); a store marked ready is not read again. The slots
/// created.
pub fn prepare(store: &dyn CounterStore) -> Result<u32, StoreError> {
    let ready = SLOTS.to_string();
    if store
        .get(READY_KEY)?
        .is_some_and(|(v, _)| v == ready.as_bytes())
    {
        return Ok(0);
    }
    let mut created = 0;
    for n in 0..SLOTS {
        let slot = format!("{SLOT_PREFIX}{n}");
        if store.get(&slot)?.is_none() {
            store.set(&slot, &[], 0)?;
            created += 1;
        }
    }
    store.set(READY_KEY, ready.as_bytes(), 0)?;
    Ok(created)
}

/// A store holding only `buckets`, each empty or (`true`) full in every rate at `now_ns`:
/// the buckets a request would be charged as `explain` assumes them.
pub fn assumed(now_ns: u64, buckets: &[(Charge<'_>, bool)]) -> MemoryCounterStore {
    let store = MemoryCounterStore::default();
    store.now_ns.set(now_ns);
    let now = now_ns / 1_000_000_000;
    let mut slots: std::collections::BTreeMap<String, Vec<Entry>> = Default::default();
    for (c, full) in buckets {
        let entries = slots.entry(slot_of(&c.key)).or_default();
        if *full && !entries.iter().any(|e| e.key == c.key) {
            entries.push(Entry {
                key: c.key,
                touched: now,
                counts: Counts::full(c.rates, now),
            });
        }
    }
    for (slot, entries) in slots {
        // A new key: written whatever the token.
        let _ = store.set(&slot, &encode(&entries), 0);
    }
    store
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
            // Never created here (see the module's note): the store was not prepared.
            None => return Err(Refusal::Store(StoreError::Failed(NOT_FOUND))),
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
                        .min_by_key(|(_, e)| (!e.counts.expired(now), e.touched))
                        .map(|(j, _)| j);
                    if let Some(j) = victim {
                        evicted = u32::from(!entries.get(j).is_some_and(|e| e.counts.expired(now)));
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

/// A slot's bytes: per bucket its key, last charge, window count, then (end, count) per
/// window, little-endian (an empty slot: no bytes).
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

/// An in-memory store with the rules of Envoy's shared data (proxy-wasm-cpp-host's
/// `SharedData`): a missing key reads as none; a write to a missing key always succeeds; a
/// write to an existing one needs its current token unless `cas` is 0; every write takes the
/// next token of one counter, which skips 0. For tests and `explain`.
#[derive(Debug, Default)]
pub struct MemoryCounterStore {
    slots: std::cell::RefCell<std::collections::HashMap<String, (Vec<u8>, u32)>>,
    last_cas: std::cell::Cell<u32>,
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
        let next = self.last_cas.get().wrapping_add(1).max(1);
        match slots.get_mut(slot) {
            Some((_, current)) if cas != 0 && cas != *current => return Err(StoreError::Conflict),
            Some(entry) => *entry = (value.to_vec(), next),
            None => {
                slots.insert(slot.to_string(), (value.to_vec(), next));
            }
        }
        self.last_cas.set(next);
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

    /// A prepared store whose clock reads `s` seconds.
    fn store_at(s: u64) -> MemoryCounterStore {
        let st = MemoryCounterStore::default();
        st.now_ns.set(s * 1_000_000_000);
        assert_eq!(prepare(&st), Ok(SLOTS));
        st
    }

    fn counts(st: &dyn CounterStore, key: [u8; 32]) -> Option<Counts> {
        let (bytes, _) = st.get(&slot_of(&key)).unwrap()?;
        let entries = decode(&bytes)?;
        entries.into_iter().find(|e| e.key == key).map(|e| e.counts)
    }

    #[test]
    fn the_fake_store_has_the_rules_of_envoys_shared_data() {
        let st = MemoryCounterStore::default();
        assert_eq!(st.get("k"), Ok(None));
        // A missing key is written whatever the token.
        st.set("k", b"a", 12345).unwrap();
        let (_, t1) = st.get("k").unwrap().unwrap();
        assert_ne!(t1, 0);
        // An existing key needs its token (or 0).
        assert_eq!(st.set("k", b"b", t1 + 7), Err(StoreError::Conflict));
        st.set("k", b"b", t1).unwrap();
        assert_eq!(st.set("k", b"c", t1), Err(StoreError::Conflict));
        st.set("k", b"c", 0).unwrap();
        let (v, t3) = st.get("k").unwrap().unwrap();
        assert_eq!(v, b"c");
        // One counter for every key: tokens never repeat, and skip 0 when they wrap.
        st.set("other", b"", 0).unwrap();
        assert!(st.get("other").unwrap().unwrap().1 > t3);
        st.last_cas.set(u32::MAX);
        st.set("k", b"d", 0).unwrap();
        assert_eq!(st.get("k").unwrap().unwrap().1, 1);
    }

    /// Worker A's view of one Envoy's shared data: before A's first write, worker B runs.
    struct Interleaved<'a> {
        host: &'a MemoryCounterStore,
        other: std::cell::RefCell<Option<Box<dyn FnOnce() + 'a>>>,
    }

    impl CounterStore for Interleaved<'_> {
        fn now_ns(&self) -> u64 {
            self.host.now_ns()
        }
        fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
            self.host.get(slot)
        }
        fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
            if let Some(b) = self.other.borrow_mut().take() {
                b();
            }
            self.host.set(slot, value, cas)
        }
    }

    #[test]
    fn two_workers_charging_one_new_bucket_at_once_both_count() {
        let host = store_at(60);
        let c = Charge {
            key: key(5, 5),
            rates: &MINUTE,
        };
        // A reads the (empty, created) slot; B charges the same bucket; A's write conflicts
        // on its token and is retried on B's.
        let a = Interleaved {
            host: &host,
            other: std::cell::RefCell::new(Some(Box::new(|| {
                assert!(matches!(charge_all(&host, &[c]), Charged::Allowed { .. }));
            }))),
        };
        assert!(matches!(charge_all(&a, &[c]), Charged::Allowed { .. }));
        assert_eq!(counts(&host, c.key).unwrap().windows, [(120, 2)]);
        assert!(matches!(charge_all(&host, &[c]), Charged::Refused { .. }));
    }

    #[test]
    fn a_store_not_prepared_refuses_and_creates_nothing() {
        let host = MemoryCounterStore::default();
        let c = Charge {
            key: key(5, 5),
            rates: &MINUTE,
        };
        assert_eq!(
            charge_all(&host, &[c]),
            Charged::Failed {
                index: 0,
                error: StoreError::Failed(NOT_FOUND)
            }
        );
        assert_eq!(host.get(&slot_of(&c.key)), Ok(None));
    }

    /// Counts the writes made through it.
    struct Writes<'a>(&'a MemoryCounterStore, std::cell::Cell<u32>);

    impl CounterStore for Writes<'_> {
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
        fn get(&self, slot: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
            self.0.get(slot)
        }
        fn set(&self, slot: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
            self.1.set(self.1.get() + 1);
            self.0.set(slot, value, cas)
        }
    }

    #[test]
    fn preparing_again_keeps_every_count() {
        let host = store_at(60);
        let c = Charge {
            key: key(5, 5),
            rates: &MINUTE,
        };
        assert!(matches!(charge_all(&host, &[c]), Charged::Allowed { .. }));
        // Marked ready: nothing is read or written.
        let w = Writes(&host, Default::default());
        assert_eq!(prepare(&w), Ok(0));
        assert_eq!(w.1.get(), 0);
        // Not marked (a failed earlier start): only the missing slots are created.
        host.slots.borrow_mut().remove(READY_KEY);
        host.slots.borrow_mut().remove(&slot_of(&key(1, 1)));
        assert_eq!(prepare(&w), Ok(1));
        assert_eq!(w.1.get(), 2);
        assert_eq!(counts(&host, c.key).unwrap().windows, [(120, 1)]);
    }

    #[test]
    fn an_ended_bucket_of_another_limit_is_evicted_first_and_not_counted() {
        // The slot holds an hour bucket charged first (still counting) and three minute
        // buckets whose minute has ended: a fifth bucket takes an ended one's place.
        let st = store_at(3600);
        let hour = Charge {
            key: key(0, 7),
            rates: &HOUR,
        };
        assert!(matches!(charge_all(&st, &[hour]), Charged::Allowed { .. }));
        for n in 1..4u8 {
            let c = Charge {
                key: key(n, 7),
                rates: &MINUTE,
            };
            assert!(matches!(charge_all(&st, &[c]), Charged::Allowed { .. }));
        }
        st.now_ns.set(3700 * 1_000_000_000);
        let c = Charge {
            key: key(9, 7),
            rates: &MINUTE,
        };
        assert!(matches!(
            charge_all(&st, &[c]),
            Charged::Allowed { evicted: 0, .. }
        ));
        // The hour bucket (the least recently charged, but counting) is kept.
        assert!(matches!(charge_all(&st, &[hour]), Charged::Refused { .. }));
    }

    #[test]
    fn an_assumed_store_holds_full_and_empty_buckets() {
        let full = Charge {
            key: key(1, 1),
            rates: &HOUR,
        };
        let room = Charge {
            key: key(2, 1),
            rates: &MINUTE,
        };
        let st = assumed(4000 * 1_000_000_000, &[(room, false), (full, true)]);
        assert_eq!(
            charge_all(&st, &[room, full]),
            Charged::Refused {
                index: 1,
                full: Full {
                    rate: 0,
                    retry_after: 7200 - 4000
                }
            }
        );
        assert!(matches!(charge_all(&st, &[room]), Charged::Allowed { .. }));
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
