//! Authorizer answers reused (docs/semantics.md §3.10): the key of a call, the records kept in
//! the host's store, and the port the host implements (Envoy's shared data, so that every
//! worker reuses the same answers).
//!
//! The store holds `maxEntries` slots per policy, `<policy>/<n>`: an answer goes to slot
//! `hash(key) % maxEntries` (foldhash seeded with the engine's generation, which callers cannot
//! know) and replaces whatever was there (a colliding key, an expired or an older bundle's
//! record). A slot's record holds its whole key (the engine's generation included), when it was
//! written and when it expires, and the answer (at most [`MAX_RECORD_BYTES`] in all; a larger
//! record is not kept); a read that finds another key (compared byte for byte, so a hash
//! collision is a miss), an expired record (or one written after the clock's now: the clock went
//! back) or one it cannot decode is a miss. So the store never holds more than `maxEntries`
//! records per policy (per policy name: Envoy's shared data cannot delete keys), and a new
//! bundle never reads an old one's answers.

use std::hash::{BuildHasher as _, Hasher as _};
use std::rc::Rc;

use mcp_access_bundle::{Authorizer, AuthzCache};
use sha2::{Digest as _, Sha256};

use crate::callout::CalloutRequest;
use crate::keyhash::{field, opt_field};
use crate::pb;
use crate::policy::{AuthzCall, AuthzOutcome, Engine, HeaderEdit, HeaderOp};
use crate::request::Caller;

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

/// One call's place in the cache: its slot and its whole key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub slot: String,
    pub key: Vec<u8>,
}

/// What an authorizer is sent, as its cache key reads it: the HTTP request of a callout, or
/// the CheckRequest of a gRPC one (before it is encoded).
#[derive(Debug, Clone, Copy)]
pub enum Sent<'a> {
    Http(&'a CalloutRequest),
    Grpc(&'a pb::CheckRequest),
}

/// Whether the cache may leave header `name` out of the key when `cache` declares it
/// irrelevant: only a header of the client's. The request line, the body's length and what
/// the filter itself tells the authorizer (the MCP attributes, the caller's SPIFFE ID, the
/// policy and level) are always in the key.
fn removable(cache: &AuthzCache, name: &str) -> bool {
    cache
        .ignored_headers
        .iter()
        .any(|i| i.eq_ignore_ascii_case(name))
        && !mcp_access_bundle::authz_cache::is_filter_set(name)
}

/// The key of `call` whose authorizer is sent `sent`, when its answers are cached: a digest of
/// exactly that request (every header and body byte, or the whole CheckRequest) less the
/// headers the cache declares irrelevant and the fields that differ on every request (the
/// request's time and id, the client's address and port, the JSON-RPC id), with the
/// engine's generation, the authorizer and the policy. `caller`'s verified JWTs stand in for
/// the tokens they were read from: their `iss`, `sub` and `keyClaims` (as JSON, whatever their
/// shape) join the key, so that an ignored `authorization` header leaves no caller out.
pub fn key_of(
    engine: &Engine,
    call: &AuthzCall,
    sent: Sent<'_>,
    caller: &Caller,
) -> Option<CacheKey> {
    let a = call.authorizer(engine)?;
    let cache = a.cache.as_ref()?;
    let policy = call.policy_id(engine);
    let mut h: Vec<u8> = Vec::with_capacity(512);
    h.extend_from_slice(&engine.generation);
    field(&mut h, policy.as_bytes());
    field(&mut h, call.level.as_str().as_bytes());
    field(&mut h, a.name.as_bytes());
    field(&mut h, a.cluster.as_bytes());
    match sent {
        Sent::Http(r) => {
            h.extend_from_slice(&[1]);
            for (name, value) in r.headers.iter().filter(|(n, _)| !removable(cache, n)) {
                h.extend_from_slice(&[1]);
                field(&mut h, name.as_bytes());
                field(&mut h, value.as_bytes());
            }
            h.extend_from_slice(&[0]);
            field(&mut h, &r.body);
        }
        Sent::Grpc(m) => {
            h.extend_from_slice(&[2]);
            field(&mut h, &canonical_check_request(m, cache));
        }
    }
    h.extend_from_slice(
        &u64::try_from(caller.jwts.len())
            .unwrap_or(u64::MAX)
            .to_le_bytes(),
    );
    for j in &caller.jwts {
        field(&mut h, j.issuer.as_bytes());
        opt_field(&mut h, j.subject.as_deref());
        for c in &cache.key_claims {
            let json = j
                .keyed
                .iter()
                .find(|(n, _)| n == c)
                .map(|(_, v)| v.as_str());
            opt_field(&mut h, json);
        }
    }
    let slot = slot_hash(&engine.generation, &h) % u64::from(cache.max_entries.max(1));
    Some(CacheKey {
        slot: format!("{SLOT_PREFIX}{policy}/{slot}"),
        key: h,
    })
}

/// The slot hash of `key`: foldhash (a fraction of SHA-256's cost in Wasm) seeded with the
/// generation, so that callers cannot aim keys at one slot. Not trusted for identity: a hit
/// compares the whole key.
fn slot_hash(generation: &[u8; 32], key: &[u8]) -> u64 {
    let seed = u64::from_le_bytes(generation.first_chunk::<8>().copied().unwrap_or_default());
    let mut h = foldhash::quality::FixedState::with_seed(seed).build_hasher();
    h.write(key);
    h.finish()
}

/// `m` as the key reads it, serialized: without the headers `cache` declares irrelevant and
/// the fields that differ on every request (time, request id, the client's address and port,
/// the JSON-RPC id of the MCP metadata).
fn canonical_check_request(m: &pb::CheckRequest, cache: &AuthzCache) -> Vec<u8> {
    let mut m = m.clone();
    if let Some(attrs) = &mut m.attributes {
        if let Some(source) = &mut attrs.source {
            source.address = None;
        }
        if let Some(request) = &mut attrs.request {
            request.time = None;
            if let Some(http) = &mut request.http {
                http.id.clear();
                http.headers.retain(|n, _| !removable(cache, n));
            }
        }
        if let Some(md) = &mut attrs.metadata_context {
            for s in md.filter_metadata.values_mut() {
                s.fields.remove(crate::ext_authz::MCP_ID_FIELD);
            }
        }
    }
    prost::Message::encode_to_vec(&m)
}

/// The generation of an engine made from a bundle of digest `bundle`, configured at `now_ns`
/// (docs/semantics.md §3.10): every new plugin configuration starts a new one, and the workers
/// of one configuration share it through `record`, the host's shared record of the last one
/// (bundle digest and start time). A worker adopts the record's generation when it names the
/// same bundle and was started less than [`GENERATION_WINDOW_NS`] ago (another worker of the
/// same configuration); otherwise it starts a generation and returns the record to write.
pub fn generation(
    record: Option<&[u8]>,
    bundle: &[u8; 32],
    now_ns: u64,
) -> ([u8; 32], Option<Vec<u8>>) {
    let adopted = record.and_then(|r| {
        let (digest, start) = r.split_at_checked(32)?;
        let start = u64::from_le_bytes(start.try_into().ok()?);
        let recent = now_ns.abs_diff(start) < GENERATION_WINDOW_NS;
        (digest == bundle && recent).then_some(start)
    });
    let start = adopted.unwrap_or(now_ns);
    let mut h = Sha256::new();
    field(&mut h, b"mcp-access generation");
    h.update(bundle);
    h.update(start.to_le_bytes());
    let write = adopted.is_none().then(|| {
        let mut r = bundle.to_vec();
        r.extend_from_slice(&start.to_le_bytes());
        r
    });
    (h.finalize().into(), write)
}

/// How long after a configuration started another worker configured with the same bundle
/// joins its generation: Envoy configures its workers together, within milliseconds.
pub const GENERATION_WINDOW_NS: u64 = 5_000_000_000;

/// Shared data key of the last configuration's generation record.
pub const GENERATION_KEY: &str = "mcp_access.authz_cache.generation";

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
    let mut r = Reader(&record);
    if r.bytes()? != key.key.as_slice() {
        return None;
    }
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
    let mut out = Vec::with_capacity(key.key.len() + 64);
    put(&mut out, &key.key);
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&expiry.to_le_bytes());
    encode(&mut out, kept);
    // Bounded: a larger record (a long key or denial body, many header edits) is not kept.
    if out.len() <= MAX_RECORD_BYTES {
        store.set(&key.slot, &out);
    }
}

/// The largest record kept (key and answer): a policy's cache holds at most `maxEntries` × this.
pub const MAX_RECORD_BYTES: usize = 8192;

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
