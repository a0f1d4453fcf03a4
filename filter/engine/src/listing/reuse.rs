//! Reuse of filtered listings (issue 25 P7): a listing rarely changes while callers ask for it
//! again and again. What a filtering wrote is kept in the engine's [`ListingStore`] (one per
//! VM and bundle, held by the host) with the exact bytes it read and everything else it depends on ([`Key`]); the same bytes read again for a caller
//! judged alike get the same answer without being parsed or judged again. Bytes are compared
//! whole (exact equality, no digest); a byte that differs anywhere is a fresh filtering.
//!
//! A response answering the request carries its id, which SDK clients change on every request:
//! where the filtering located the top-level `id` token (equal to the request's), the entry
//! records its spans in the bytes read and written ([`IdAt::Spans`]); new bytes match when
//! they are the kept ones with the new request's id text at that span, and get what was
//! written with that id text at its span. Otherwise the bytes match only whole, for a request
//! of the same id ([`IdAt::Exact`]).
//!
//! Kept only where a filtering has no side effect and its inputs are known: never for a
//! backend with pinned tools (their drift is observed per listing), nor with a bundle that
//! has CEL conditions (one may read any header, the time). Bounded: [`MAX_ENTRIES`] answers and
//! [`MAX_BYTES`] in all (bytes read and written), the oldest dropped first; a bundle loaded
//! comes with a new, empty store.
//!
//! A JSON body is compared whole once read. An SSE event is compared as its bytes arrive: at
//! an event's start, the bytes are held to a kept event's ([`kept_from`]) and not scanned for
//! line ends while they are the same; once all of them are read (the event ends where the kept
//! one did), what was written for them is written. Bytes that differ are read again as any
//! event's.

use std::cell::RefCell;
use std::rc::Rc;

use sha2::{Digest as _, Sha256};

use crate::keyhash::{claim_field, field, opt_field};
use crate::policy::Engine;
use crate::request::{McpOp, Request, Target};

/// At most this many answers are kept per store.
pub const MAX_ENTRIES: usize = 16;
/// At most this many bytes (read and written) are kept per store.
pub const MAX_BYTES: usize = 4 << 20;

/// Everything beside the bytes read that a filtering's answer depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    /// SHA-256 of the request as far as judging an item reads it ([`Key::new`]) and of the
    /// filter's own settings, each field length-prefixed. The engine is the store's: each
    /// engine has its own [`ListingStore`].
    digest: [u8; 32],
}

/// What the bytes were read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A whole body.
    Body,
    /// One SSE event (`first`: the stream's first, which may start with a byte order mark).
    Event { first: bool },
}

/// The settings of the filter a key is made for that the request and the engine do not
/// decide (the listing asked for and the nesting bound they do; the request's id is matched
/// apart, [`IdAt`]).
pub(super) struct Settings {
    pub(super) cache_scope: bool,
}

/// Where the response's id is in kept bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IdAt {
    /// Not located: the bytes match whole, for a request of this id (raw JSON).
    Exact(Option<String>),
    /// The top-level `id` token, the request's id text, at these spans (start, end) of the
    /// bytes read and written: the bytes match with any request's id text there.
    Spans {
        read: (usize, usize),
        written: (usize, usize),
    },
}

impl Key {
    /// The key of a filter with these settings judging items as calls made by `req`; None
    /// when the bundle has CEL conditions (one may read any header, the time: no reuse).
    /// Without them an item's judgement reads the caller, the target (listener, backend,
    /// route), the method, port, host, canonical path and the headers rules name (the MCP
    /// operation is replaced by the item's call, kept all the same): other headers (a request
    /// id) and what only authorizers are told (the connection) are left out.
    pub(super) fn new(engine: &Engine, req: &Request, settings: Settings) -> Option<Key> {
        if engine.cel_needs().any {
            return None;
        }
        let mut h = Sha256::new();
        let Target {
            listener,
            backend,
            route,
        } = req.target;
        let index = |i: Option<usize>| i.map_or(0, |i| i.saturating_add(1));
        for n in [
            usize::from(req.port),
            index(listener),
            index(backend),
            index(route),
            usize::from(req.caller.credential),
            usize::from(settings.cache_scope),
            req.caller.jwts.len(),
        ] {
            field(&mut h, &u64::try_from(n).unwrap_or(u64::MAX).to_le_bytes());
        }
        let (op, param) = match &req.mcp {
            McpOp::Call { method, param } => (Some(method.as_str()), param.as_deref()),
            McpOp::Transport => (None, Some("t")),
            McpOp::Reply => (None, Some("r")),
            McpOp::NotMcp => (None, Some("n")),
        };
        for text in [
            Some(req.method.as_str()),
            Some(&req.canonical_path),
            Some(&req.host),
            op,
            param,
            req.caller.spiffe.as_deref(),
        ] {
            opt_field(&mut h, text);
        }
        for j in &req.caller.jwts {
            opt_field(&mut h, Some(&j.issuer));
            opt_field(&mut h, j.subject.as_deref());
            for (name, value) in &j.claims {
                opt_field(&mut h, Some(name));
                claim_field(&mut h, Some(value));
            }
            opt_field(&mut h, None);
        }
        // The headers rules read, and the caller's credentials (always taken).
        let credentials = ["authorization", "proxy-authorization", "cookie"];
        for name in engine
            .recorded_headers
            .iter()
            .map(String::as_str)
            .chain(credentials)
        {
            opt_field(&mut h, Some(name));
            for v in req.header_values(name) {
                opt_field(&mut h, Some(v));
            }
            opt_field(&mut h, None);
        }
        Some(Key {
            digest: h.finalize().into(),
        })
    }
}

/// A response's reuse of kept answers: the key once made, the kept event an SSE stream is
/// following, and how many answers were written from kept ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReuseState {
    key: KeyState,
    /// Where answers are kept (None: no reuse).
    store: Option<Rc<ListingStore>>,
    /// SSE: the kept event whose bytes the event being read has been so far.
    pub(super) following: Option<Following>,
    /// SSE: bytes that differed from a kept event's are being read again; not followed.
    pub(super) follow_off: bool,
    /// Answers (a JSON body, SSE events) written from kept ones since the count was taken.
    reused: u32,
}

/// Whether answers kept by others are reused.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyState {
    /// Never: pinned tools, CEL conditions, or turned off.
    Off,
    /// The key is not made yet.
    Unset,
    Key(Box<Key>),
}

impl ReuseState {
    /// Answers kept in `store` are reused (their key is made when first needed); None: never.
    pub(super) fn new(store: Option<Rc<ListingStore>>) -> ReuseState {
        ReuseState {
            key: match store {
                Some(_) => KeyState::Unset,
                None => KeyState::Off,
            },
            store,
            following: None,
            follow_off: false,
            reused: 0,
        }
    }

    /// Never reuse, nor keep.
    pub(super) fn turn_off(&mut self) {
        self.key = KeyState::Off;
    }

    /// The key of reused answers for items judged as calls made by `req` (None: judged
    /// without a request), made when first needed, and the store; None: no reuse.
    pub(super) fn key(
        &mut self,
        engine: &Engine,
        req: Option<&Request>,
        settings: Settings,
    ) -> Option<(&Key, &ListingStore)> {
        if matches!(self.key, KeyState::Unset) {
            let key = req.and_then(|req| Key::new(engine, req, settings));
            self.key = key.map_or(KeyState::Off, |k| KeyState::Key(Box::new(k)));
        }
        match (&self.key, &self.store) {
            (KeyState::Key(k), Some(store)) => Some((k, store)),
            _ => None,
        }
    }

    /// One more answer written from a kept one.
    pub(super) fn count(&mut self) {
        self.reused = self.reused.saturating_add(1);
    }

    /// How many answers were written from kept ones since the last call.
    pub(super) fn take_count(&mut self) -> u32 {
        std::mem::take(&mut self.reused)
    }
}

/// Bytes read and what a filtering wrote for them.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Kept {
    key: Key,
    kind: Kind,
    id: IdAt,
    pub(super) read: Vec<u8>,
    pub(super) written: Vec<u8>,
}

/// Bytes being read that are, so far, kept ones ([`kept_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Following {
    pub(super) kept: Rc<Kept>,
    /// How many of its bytes were read.
    pub(super) at: usize,
}

impl Kept {
    fn size(&self) -> usize {
        self.read.len() + self.written.len()
    }

    /// `bytes` in three pieces, with the request's `id` text at the kept id's span (`span`:
    /// of the bytes read or written); None: they cannot be a request of that id's.
    fn pieces<'k>(
        &'k self,
        bytes: &'k [u8],
        id: Option<&'k str>,
        span: fn(&IdAt) -> Option<(usize, usize)>,
    ) -> Option<[&'k [u8]; 3]> {
        match (&self.id, span(&self.id), id) {
            (IdAt::Exact(asked), _, _) => (asked.as_deref() == id).then_some([bytes, &[], &[]]),
            (IdAt::Spans { .. }, Some((s, e)), Some(id)) => {
                Some([bytes.get(..s)?, id.as_bytes(), bytes.get(e..)?])
            }
            _ => None,
        }
    }

    /// The bytes read, as a request of `id` would read them.
    fn read_as<'k>(&'k self, id: Option<&'k str>) -> Option<[&'k [u8]; 3]> {
        self.pieces(&self.read, id, |i| match i {
            IdAt::Spans { read, .. } => Some(*read),
            IdAt::Exact(_) => None,
        })
    }
}

impl Following {
    /// How many bytes of the kept ones (as a request of `id` reads them) are still to read.
    pub(super) fn remaining(&self, id: Option<&str>) -> usize {
        let len = self
            .kept
            .read_as(id)
            .map_or(0, |p| p.iter().map(|p| p.len()).sum());
        len.saturating_sub(self.at)
    }

    /// Whether `bytes` are the next kept ones (as a request of `id` reads them).
    pub(super) fn same_next(&self, id: Option<&str>, bytes: &[u8]) -> bool {
        self.kept
            .read_as(id)
            .is_some_and(|p| same_at(p, self.at, bytes))
    }

    /// The kept bytes read so far (as a request of `id` reads them).
    pub(super) fn read_so_far(&self, id: Option<&str>) -> Vec<u8> {
        let all = self
            .kept
            .read_as(id)
            .map(|p| p.concat())
            .unwrap_or_default();
        all.get(..self.at).map(<[u8]>::to_vec).unwrap_or_default()
    }

    /// What was written, for a request of `id`.
    pub(super) fn written(&self, id: Option<&str>) -> Option<Vec<u8>> {
        let kept = &self.kept;
        let pieces = kept.pieces(&kept.written, id, |i| match i {
            IdAt::Spans { written, .. } => Some(*written),
            IdAt::Exact(_) => None,
        });
        pieces.map(|p| p.concat())
    }
}

/// Whether `bytes` are those of `pieces` (joined) from offset `at`.
fn same_at(pieces: [&[u8]; 3], at: usize, bytes: &[u8]) -> bool {
    let (mut start, mut from) = (0usize, 0usize);
    for p in pieces {
        let end = start + p.len();
        let (lo, hi) = (at.max(start), end.min(at + bytes.len()));
        if lo < hi {
            let (Some(k), Some(b)) = (
                p.get(lo - start..hi - start),
                bytes.get(from..from + hi - lo),
            ) else {
                return false;
            };
            if !same(k, b) {
                return false;
            }
            from += hi - lo;
        }
        start = end;
    }
    from == bytes.len()
}

/// The answers one engine's filterings kept, most recently kept first: the host makes one
/// with each engine it loads (what was kept for another bundle is never reused) and hands it
/// to every stream's flow ([`crate::flow::RequestFlow::with_listing_store`]).
#[derive(Debug, Default)]
pub struct ListingStore {
    kept: RefCell<Vec<Rc<Kept>>>,
}

/// Stores are told apart by identity (filters compare equal only with the same store).
impl PartialEq for ListingStore {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ListingStore {}

impl ListingStore {
    /// What was kept under `key` (read as `kind`) whose bytes, as a request of `id` (raw
    /// JSON) reads them, start with `rest` (as much of it as they have). Bytes that start
    /// with a LF are never followed (an SSE event's do when one ending with a CR came before:
    /// that LF ended its line).
    pub(super) fn kept_from(
        &self,
        key: &Key,
        kind: Kind,
        id: Option<&str>,
        rest: &[u8],
    ) -> Option<Following> {
        let kept = self.kept.try_borrow().ok()?;
        let e = kept.iter().find(|e| {
            let Some(read) = e.read_as(id).filter(|_| e.kind == kind && e.key == *key) else {
                return false;
            };
            let len = read.iter().map(|p| p.len()).sum::<usize>();
            e.read.first() != Some(&b'\n')
                && rest
                    .get(..len.min(rest.len()))
                    .is_some_and(|r| same_at(read, 0, r))
        })?;
        Some(Following {
            kept: Rc::clone(e),
            at: 0,
        })
    }

    /// Keeps what a filtering wrote for `read` read as `kind` under `key`, its id at `id`.
    pub(super) fn keep(&self, key: &Key, kind: Kind, id: IdAt, read: &[u8], written: &[u8]) {
        if read.len() + written.len() > MAX_BYTES {
            return;
        }
        let Ok(mut kept) = self.kept.try_borrow_mut() else {
            return;
        };
        kept.insert(
            0,
            Rc::new(Kept {
                key: key.clone(),
                kind,
                id,
                read: read.to_vec(),
                written: written.to_vec(),
            }),
        );
        while kept.len() > MAX_ENTRIES || kept.iter().map(|e| e.size()).sum::<usize>() > MAX_BYTES {
            kept.pop();
        }
    }

    /// The number of answers and bytes kept.
    pub fn kept(&self) -> (usize, usize) {
        self.kept.try_borrow().map_or((0, 0), |k| {
            (k.len(), k.iter().map(|e| e.size()).sum::<usize>())
        })
    }
}

/// Whether `a` and `b` are the same bytes, compared eight at a time (a byte-wise `memcmp` is
/// what a Wasm module would otherwise get); sixteen at a time with Wasm SIMD.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (aw, at) = a.as_chunks::<8>();
    let (bw, bt) = b.as_chunks::<8>();
    for (x, y) in aw.chunks(32).zip(bw.chunks(32)) {
        let differ = x.iter().zip(y).fold(0u64, |d, (p, q)| {
            d | (u64::from_ne_bytes(*p) ^ u64::from_ne_bytes(*q))
        });
        if differ != 0 {
            return false;
        }
    }
    at == bt
}

/// [`same`] with Wasm SIMD: 16-byte vectors, one branch per 128 bytes.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    use core::arch::wasm32::{u8x16_splat, v128, v128_any_true, v128_load, v128_or, v128_xor};

    /// The 16 bytes as a vector: one `v128.load`.
    #[inline(always)]
    fn load(c: &[u8; 16]) -> v128 {
        // SAFETY: `c` is valid for reading 16 bytes, and `v128_load` has no alignment
        // requirement (it emits a load with alignment 1).
        unsafe { v128_load(c.as_ptr().cast::<v128>()) }
    }

    if a.len() != b.len() {
        return false;
    }
    let (av, at) = a.as_chunks::<16>();
    let (bv, bt) = b.as_chunks::<16>();
    for (x, y) in av.chunks(8).zip(bv.chunks(8)) {
        let differ = x.iter().zip(y).fold(u8x16_splat(0), |d, (p, q)| {
            v128_or(d, v128_xor(load(p), load(q)))
        });
        if v128_any_true(differ) {
            return false;
        }
    }
    at == bt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_stays_within_its_bounds_newest_first() {
        let store = ListingStore::default();
        let key = |n: u8| Key { digest: [n; 32] };
        // Small answers: no more than MAX_ENTRIES, the oldest gone.
        for n in 0..40u8 {
            store.keep(&key(n), Kind::Body, IdAt::Exact(None), &[b'{', n], b"{}");
        }
        assert_eq!(store.kept(), (MAX_ENTRIES, MAX_ENTRIES * 4));
        assert!(store
            .kept_from(&key(39), Kind::Body, None, &[b'{', 39])
            .is_some());
        assert!(store
            .kept_from(&key(0), Kind::Body, None, &[b'{', 0])
            .is_none());
        // Another kind, another key, other bytes: not found.
        assert!(store
            .kept_from(&key(39), Kind::Event { first: true }, None, &[b'{', 39])
            .is_none());
        assert!(store
            .kept_from(&key(38), Kind::Body, None, &[b'{', 39])
            .is_none());
        // Large answers: no more than MAX_BYTES in all; one larger than that is not kept.
        let big = vec![b'x'; MAX_BYTES / 3];
        for n in 0..5u8 {
            store.keep(&key(n), Kind::Body, IdAt::Exact(None), &big, b"{}");
        }
        let (entries, bytes) = store.kept();
        assert!(entries == 2 && bytes <= MAX_BYTES, "{entries} {bytes}");
        store.keep(
            &key(9),
            Kind::Body,
            IdAt::Exact(None),
            &vec![b'x'; MAX_BYTES],
            b"{}",
        );
        assert_eq!(store.kept().0, 2);
    }

    #[test]
    fn bytes_are_the_same_only_when_every_byte_is() {
        let a: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, 7, 8, 9, 255, 256, 257, 1000] {
            let x = &a[..len];
            assert!(same(x, x));
            assert!(!same(x, &a[..len.saturating_sub(1)]) || len == 0);
            for at in 0..len {
                let mut y = x.to_vec();
                y[at] ^= 1 << (at % 8);
                assert!(!same(x, &y), "len {len}, byte {at}");
            }
        }
    }
}
