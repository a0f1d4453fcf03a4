//! Authorizer answers reused (docs/semantics.md §3.10): the key of a call, the records kept in
//! the host's store, and the port the host implements (Envoy's shared data, so that every
//! worker reuses the same answers).
//!
//! The store holds `maxEntries` slots per policy, `<policy>/<n>`: an answer goes to slot
//! `hash(key) % maxEntries` and replaces whatever was there (a colliding key, an expired or
//! an older bundle's record). A slot's record names the SHA-256 of its whole key (the bundle's
//! digest included), when it was written and when it expires, and the answer (at most
//! [`MAX_RECORD_BYTES`]; a larger answer is not kept); a read that finds another key, an expired
//! record (or one written after the clock's now: the clock went back) or one it cannot decode is
//! a miss. So the store never holds more than `maxEntries`
//! records per policy (per policy name: Envoy's shared data cannot delete keys), and a new
//! bundle never reads an old one's answers.

use std::rc::Rc;

use mcp_access_bundle::{Authorizer, AuthzCache};
use sha2::{Digest as _, Sha256};

use crate::policy::{AuthzCall, AuthzOutcome, Engine, HeaderEdit, HeaderOp};
use crate::request::{ClaimValue, McpOp, Request};

/// Where answers are kept, and the clock they expire by: the host's.
pub trait AnswerStore {
    /// The host's clock, in nanoseconds since the Unix epoch.
    fn now_ns(&self) -> u64;
    /// The record in `slot`, if any.
    fn get(&self, slot: &str) -> Option<Vec<u8>>;
    /// Writes `record` to `slot` (a failure is a cache that does not remember).
    fn set(&self, slot: &str, record: &[u8]);
}

/// The host's answer store as the flow holds it.
#[derive(Clone)]
pub struct AnswerPort(pub Rc<dyn AnswerStore>);

impl std::fmt::Debug for AnswerPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnswerPort")
    }
}

/// Shared data key prefix of the slots: `mcp_access.authz_cache/<policy>/<n>`.
pub const SLOT_PREFIX: &str = "mcp_access.authz_cache/";

/// One call's place in the cache: its slot and its key's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub slot: String,
    pub digest: [u8; 32],
}

/// Feeds one length-prefixed field (fields cannot run into each other).
pub(crate) fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
    h.update(bytes);
}

pub(crate) fn opt_field(h: &mut Sha256, v: Option<&str>) {
    match v {
        Some(s) => {
            h.update([1]);
            field(h, s.as_bytes());
        }
        None => h.update([0]),
    }
}

pub(crate) fn claim_field(h: &mut Sha256, v: Option<&ClaimValue>) {
    match v {
        None => h.update([0]),
        Some(ClaimValue::Str(s)) => {
            h.update([1]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::Other(s)) => {
            h.update([2]);
            field(h, s.as_bytes());
        }
        Some(ClaimValue::List(items)) => {
            h.update([3]);
            h.update(u64::try_from(items.len()).unwrap_or(u64::MAX).to_le_bytes());
            for i in items {
                field(h, i.as_bytes());
            }
        }
    }
}

/// The key of `call` for `req` (whose body is `body`), when its authorizer's answers are
/// cached: everything the key always holds, the chosen headers and claims, and the body the
/// authorizer is sent.
pub fn key_of(engine: &Engine, call: &AuthzCall, req: &Request, body: &[u8]) -> Option<CacheKey> {
    let a = call.authorizer(engine)?;
    let cache = a.cache.as_ref()?;
    let policy = call.policy_id(engine);
    let mut h = Sha256::new();
    h.update(engine.generation);
    field(&mut h, policy.as_bytes());
    field(&mut h, call.level.as_str().as_bytes());
    field(&mut h, a.name.as_bytes());
    let listener = req
        .target
        .listener
        .and_then(|l| engine.listeners.get(l))
        .map(|l| l.id.as_str());
    let backend = req
        .target
        .backend
        .and_then(|b| engine.backends.get(b))
        .map(|b| b.id.as_str());
    opt_field(&mut h, listener);
    opt_field(&mut h, backend);
    opt_field(&mut h, req.route_name.as_deref());
    opt_field(&mut h, req.caller.spiffe.as_deref());
    h.update(
        u64::try_from(req.caller.jwts.len())
            .unwrap_or(u64::MAX)
            .to_le_bytes(),
    );
    for j in &req.caller.jwts {
        field(&mut h, j.issuer.as_bytes());
        opt_field(&mut h, j.subject.as_deref());
        for c in &cache.key_claims {
            let v = j.claims.iter().find(|(n, _)| n == c).map(|(_, v)| v);
            claim_field(&mut h, v);
        }
    }
    // What the authorizer is sent of the request line.
    field(&mut h, req.method.as_bytes());
    field(&mut h, req.authority.as_bytes());
    field(&mut h, req.path.as_bytes());
    match &req.mcp {
        McpOp::Call { method, param } => {
            h.update([1]);
            field(&mut h, method.as_bytes());
            opt_field(&mut h, param.as_deref());
        }
        McpOp::Transport => h.update([2]),
        McpOp::Reply => h.update([3]),
        McpOp::NotMcp => h.update([4]),
    }
    for name in &cache.key_headers {
        field(&mut h, name.as_bytes());
        for v in req.header_values(name) {
            h.update([1]);
            field(&mut h, v.as_bytes());
        }
        h.update([0]);
    }
    let max = usize::try_from(a.forward_body_max_bytes).unwrap_or(usize::MAX);
    if max > 0 {
        field(&mut h, body.get(..max.min(body.len())).unwrap_or_default());
        h.update(u64::try_from(body.len()).unwrap_or(u64::MAX).to_le_bytes());
    }
    let digest: [u8; 32] = h.finalize().into();
    let mut n = [0u8; 8];
    n.copy_from_slice(digest.get(..8)?);
    let slot = u64::from_le_bytes(n) % u64::from(cache.max_entries.max(1));
    Some(CacheKey {
        slot: format!("{SLOT_PREFIX}{policy}/{slot}"),
        digest,
    })
}

/// Whether `outcome` may be kept: an OK answer, or a denial when the cache keeps denials.
/// An error (unreachable, timeout, malformed answer) never is.
pub fn keeps(cache: &AuthzCache, outcome: &AuthzOutcome) -> bool {
    match outcome {
        AuthzOutcome::Allow { .. } => true,
        AuthzOutcome::Deny { .. } => cache.denials,
        AuthzOutcome::Error { .. } => false,
    }
}

/// A kept answer: the outcome and a gRPC authorizer's dynamic metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub outcome: AuthzOutcome,
    pub metadata: Option<String>,
}

/// The answer `store` keeps for `key`, unexpired.
pub fn lookup(store: &dyn AnswerStore, key: &CacheKey) -> Option<Kept> {
    let record = store.get(&key.slot)?;
    let (digest, rest) = record.split_at_checked(32)?;
    if digest != key.digest {
        return None;
    }
    let mut r = Reader(rest);
    let (written, expiry) = (r.u64()?, r.u64()?);
    // Envoy's clock is the wall clock: one that went back to before the answer was kept does
    // not stretch its life.
    let now = store.now_ns();
    if now >= expiry || now < written {
        return None;
    }
    decode(&mut r)
}

/// Keeps `kept` for `key` until `ttl_ms` from now.
pub fn store(store: &dyn AnswerStore, a: &Authorizer, key: &CacheKey, kept: &Kept) {
    let Some(cache) = &a.cache else { return };
    let now = store.now_ns();
    let expiry = now.saturating_add(u64::from(cache.ttl_ms).saturating_mul(1_000_000));
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&key.digest);
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&expiry.to_le_bytes());
    encode(&mut out, kept);
    // Bounded: a larger answer (a long denial body, many header edits) is not kept.
    if out.len() <= MAX_RECORD_BYTES {
        store.set(&key.slot, &out);
    }
}

/// The largest record kept: a policy's cache holds at most `maxEntries` × this.
pub const MAX_RECORD_BYTES: usize = 4096;

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn op_code(op: HeaderOp) -> u8 {
    match op {
        HeaderOp::Set => 0,
        HeaderOp::Append => 1,
        HeaderOp::AddIfAbsent => 2,
        HeaderOp::OverwriteIfExists => 3,
        HeaderOp::Remove => 4,
    }
}

fn op_of(code: u8) -> Option<HeaderOp> {
    Some(match code {
        0 => HeaderOp::Set,
        1 => HeaderOp::Append,
        2 => HeaderOp::AddIfAbsent,
        3 => HeaderOp::OverwriteIfExists,
        4 => HeaderOp::Remove,
        _ => return None,
    })
}

fn encode(out: &mut Vec<u8>, kept: &Kept) {
    match &kept.outcome {
        AuthzOutcome::Allow { headers } => {
            out.push(1);
            out.extend_from_slice(&u32::try_from(headers.len()).unwrap_or(0).to_le_bytes());
            for e in headers {
                out.push(op_code(e.op));
                put(out, e.name.as_bytes());
                put(out, e.value.as_bytes());
            }
        }
        AuthzOutcome::Deny {
            status,
            headers,
            body,
        } => {
            out.push(2);
            out.extend_from_slice(&status.to_le_bytes());
            out.extend_from_slice(&u32::try_from(headers.len()).unwrap_or(0).to_le_bytes());
            for (n, v) in headers {
                put(out, n.as_bytes());
                put(out, v.as_bytes());
            }
            put(out, body);
        }
        // Never kept (see [`keeps`]); a record of one would not decode.
        AuthzOutcome::Error { .. } => out.push(0),
    }
    match &kept.metadata {
        Some(m) => {
            out.push(1);
            put(out, m.as_bytes());
        }
        None => out.push(0),
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n)
    }
    fn text(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

fn decode(r: &mut Reader<'_>) -> Option<Kept> {
    let outcome = match r.u8()? {
        1 => {
            let n = r.u32()?;
            let mut headers = Vec::new();
            for _ in 0..n {
                let op = op_of(r.u8()?)?;
                let (name, value) = (r.text()?, r.text()?);
                headers.push(HeaderEdit { op, name, value });
            }
            AuthzOutcome::Allow { headers }
        }
        2 => {
            let status = r.u16()?;
            let n = r.u32()?;
            let mut headers = Vec::new();
            for _ in 0..n {
                headers.push((r.text()?, r.text()?));
            }
            let body = r.bytes()?.to_vec();
            AuthzOutcome::Deny {
                status,
                headers,
                body,
            }
        }
        _ => return None,
    };
    let metadata = match r.u8()? {
        0 => None,
        1 => Some(r.text()?),
        _ => return None,
    };
    r.0.is_empty().then_some(Kept { outcome, metadata })
}
