//! Policy evaluation: the bundle compiled once into lookup structures ([`Engine`]), and the
//! per-request evaluation of docs/semantics.md §3–§4 ([`Evaluation`]).

mod attached;
mod compile;
mod compiled;
mod cx;
mod decision;
mod eval;
mod evaluation;
mod identity_headers;
mod index;
mod oauth;
mod trace;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use mcp_access_bundle::{
    self as bundle, Authorizer, DenyResponse, EscapedSlashes, IdentitySettings, Level, Limits,
    Listings, UnknownBackend,
};

pub use compiled::Policy;
pub(crate) use cx::{Applies, CelCx};
pub use cx::{Cel, CelRecord, Mode};
pub use decision::{
    AuthzCall, AuthzOutcome, Decision, Denial, HeaderEdit, HeaderOp, Named, Reason, Step,
};
pub use evaluation::{CallAnswer, DryRunNamed, DryRunRecord, Evaluation};
pub use identity_headers::{IdentityEdits, Omitted};
pub use index::View;
pub use oauth::{Challenge, Discovery};
pub use trace::{RouteUse, TraceEntry, TraceEvent};

use crate::request::{Request, Target};

/// Index of a policy in [`Engine::policies`] (seniority order).
pub(crate) type PolicyId = usize;

/// A rule of a policy; `rule: None` stands for a policy without rules (matches everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRef {
    pub policy: PolicyId,
    /// Position in the policy's rules.
    pub rule: Option<usize>,
}

/// A hash map with a fast, unkeyed hash (FxHash's multiply-rotate over 8-byte words). Only for
/// tables whose keys come from the bundle: a request can look keys up but never insert, so
/// it cannot make collisions. Against foldhash 0.2's `FixedState` (callgrind, benches/decide.rs,
/// 2026-12-04): 28,567 vs 28,811 instructions per s2 request, 28,917 vs 29,037 per s5 one, but
/// 161.1M vs 78.6M per s5 bundle load.
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A hash set with the same hash, for sets of names from the bundle.
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(
                <[u8; 8]>::try_from(c).unwrap_or_default(),
            ));
        }
        // The last 0-7 bytes, little-endian, as the full words are.
        let tail = chunks
            .remainder()
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        self.add(tail ^ ((bytes.len() as u64) << 56));
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Rules of one action at one attachment point, indexed so that a tools/call looks at the
/// rules naming that tool plus the rules that name no tool at all.
#[derive(Debug)]
pub struct RuleSet {
    /// Allow rules admit, Deny rules select.
    mode: Mode,
    /// method -> name/URI -> rules that admit exactly that.
    keyed: FastMap<String, FastMap<String, Vec<RuleRef>>>,
    /// Rules that could admit a request naming no particular param.
    general: Vec<RuleRef>,
    /// Keyed rules that also admit base-protocol traffic.
    base: Vec<RuleRef>,
}

impl RuleSet {
    fn new(mode: Mode) -> Self {
        RuleSet {
            mode,
            keyed: FastMap::default(),
            general: Vec::new(),
            base: Vec::new(),
        }
    }

    fn add(&mut self, r: RuleRef, rule: Option<&compiled::Rule>) {
        let Some(rule) = rule else {
            self.general.push(r);
            return;
        };
        // An Allow rule whose CEL condition names its tools admits nothing else (an error
        // does not admit), so it is indexed under them and never as base protocol.
        let cel_keyed = match (rule.keyed_calls(), self.mode) {
            (None, Mode::Admit) => rule.cel_keyed_calls(),
            _ => None,
        };
        let by_cel = cel_keyed.is_some();
        match rule.keyed_calls().or(cel_keyed) {
            Some(calls) => {
                for (method, params) in calls {
                    let by_param = self.keyed.entry(method.to_string()).or_default();
                    by_param.reserve(params.len());
                    for p in params {
                        let list = by_param.entry(p.clone()).or_default();
                        if list.last() != Some(&r) {
                            list.push(r);
                        }
                    }
                }
                if !by_cel && rule.may_admit_base() {
                    self.base.push(r);
                }
            }
            None => self.general.push(r),
        }
    }

    /// The most senior rule that could concern `req` for which `meets` holds.
    fn first_where(
        &self,
        req: &Request,
        mut meets: impl FnMut(RuleRef) -> bool,
    ) -> Option<RuleRef> {
        // Each list is in seniority order: a rule no more senior than the best found so far
        // is not looked at (its CEL conditions are not evaluated).
        let mut best: Option<RuleRef> = None;
        let mut look = |rules: &[RuleRef], best: &mut Option<RuleRef>| {
            for r in rules {
                if best.is_some_and(|b| *r >= b) {
                    continue;
                }
                if meets(*r) {
                    *best = Some(*r);
                }
            }
        };
        look(&self.general, &mut best);
        if let Some(by_param) = req.mcp.method().and_then(|m| self.keyed.get(m)) {
            match req.mcp.param() {
                Some(p) => look(by_param.get(p).map_or(&[], Vec::as_slice), &mut best),
                // A probe for "some param" (listings, §5.4) looks at every keyed rule of the
                // method.
                None => by_param.values().for_each(|rules| look(rules, &mut best)),
            }
        }
        if !self.base.is_empty() && req.mcp.is_base() {
            look(&self.base, &mut best);
        }
        best
    }

    /// Every rule of the set, most senior first (for traces: not on the request path).
    pub fn rules(&self) -> Vec<RuleRef> {
        let keyed = self.keyed.values().flat_map(|m| m.values().flatten());
        let mut all: Vec<RuleRef> = self
            .general
            .iter()
            .chain(keyed)
            .chain(self.base.iter())
            .copied()
            .collect();
        crate::order::sort(&mut all);
        all.dedup();
        all
    }
}

/// Everything attached at one point (a Gateway listener or a Backend).
#[derive(Debug)]
pub struct LevelIndex {
    /// ExternalAuth policies, most senior first.
    pub(crate) external_auth: Vec<PolicyId>,
    pub(crate) deny: RuleSet,
    pub allow: RuleSet,
    /// Whether any Allow policy is attached (the level is then default-deny).
    pub(crate) has_allow: bool,
    /// Whether an attached Allow policy has no `when` (it always applies).
    pub(crate) allow_always: bool,
    /// Attached Allow policies with `when` conditions.
    pub(crate) allow_when: Vec<PolicyId>,
}

/// The settings of the bundle the engine reads, copied as they are.
#[derive(Debug)]
pub struct Settings {
    pub identity: IdentitySettings,
    pub(crate) deny_response: DenyResponse,
    pub limits: Limits,
    /// Per-caller filtering of listing responses.
    pub(crate) listings: Listings,
    pub hold_headers: bool,
    pub(crate) unknown_backend: UnknownBackend,
    /// How `%2F` / `%5C` in a request path are treated.
    pub(crate) escaped_slashes: EscapedSlashes,
    /// Request headers some route matches on: never edited (`envoy.routeMatchHeaders`).
    pub(crate) route_match_headers: Vec<String>,
    /// The one listener this copy of the bundle serves (`envoy.listener`), if the renderer knew.
    pub(crate) served_listener: Option<bundle::ServedListener>,
    /// What decision records carry.
    pub decision_records: bundle::DecisionRecords,
    /// The RateLimitService `Global` limits ask (validation requires it when one is Global).
    pub rate_limit_service: Option<bundle::RateLimitService>,
}

/// The bundle compiled for per-request use.
#[derive(Debug)]
pub struct Engine {
    pub policies: Vec<compiled::Policy>,
    /// The bundle's rate limits (docs/semantics.md §8).
    pub rate_limits: crate::ratelimit::RateLimits,
    /// The indexes of the dry-run decision, where some policy takes part in one decision only.
    pub(crate) dry: Option<index::DryRunView>,
    pub(crate) authorizers: Vec<Authorizer>,
    pub listeners: Vec<compiled::Listener>,
    pub backends: Vec<compiled::Backend>,
    by_route: HashMap<String, usize>,
    by_cluster: HashMap<String, usize>,
    /// `namespace/name` of the policy a user wrote, by the id of each policy the compiler
    /// derived from it ([`Engine::written_name`]).
    written: HashMap<String, String>,
    /// The bundle's settings, as it gave them.
    pub settings: Settings,
    /// Claim names any JWT rule reads.
    pub(crate) jwt_claims: Vec<String>,
    /// Claim names authorizer caches key on.
    pub(crate) cache_claims: Vec<String>,
    /// What the CEL conditions read beyond the usual request attributes.
    pub(crate) cel_needs: CelNeeds,
    /// Headers the rules' header conditions read (lowercase): what a decision record keeps of
    /// the request's headers (a credential's as a keyed digest, [`Engine::record_key`]).
    pub recorded_headers: Vec<String>,
    /// The CEL attributes the conditions read that a decision record does not hold (by CEL
    /// name): a replay cannot decide such a record again without guessing.
    pub(crate) unrecorded: Vec<&'static str>,
    /// The key of the digests decision records hold of credentials (random, never written
    /// anywhere: a record proves which value a rule read without revealing it).
    pub(crate) record_key: [u8; 32],
    /// Every identity header name of the bundle, sorted (removed from allowed requests).
    pub(crate) identity_header_names: Vec<String>,
    /// Claims identity headers carry.
    pub(crate) identity_claims: Vec<String>,
    /// Whether some listener has OAuth discovery (then callers' credentials are looked at).
    pub(crate) challenges: bool,
    /// What every authorizer cache key holds: the SHA-256 of the bundle's bytes
    /// ([`Engine::from_json`]) when some authorizer's answers are cached (else zeros), which
    /// the host replaces by its configuration's generation
    /// ([`crate::authz_cache::generation`]), so that no configuration reuses another's answers.
    pub generation: [u8; 32],
}

/// Request attributes gathered only because a CEL condition reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CelNeeds {
    /// `request.time`.
    pub time: bool,
    /// `request.mcp.params`.
    pub params: bool,
    /// `jwt.claims`.
    pub jwt_payload: bool,
    /// `request.mcp.tool.annotations`.
    pub annotations: bool,
    /// Any CEL condition at all.
    pub any: bool,
}

impl CelNeeds {
    /// Adds what `p` reads.
    pub(crate) fn read_by(&mut self, p: &mcp_access_cel::Program) {
        use mcp_access_cel::Attr;
        self.any = true;
        self.time |= p.reads_attr(Attr::Time);
        self.params |= p.reads_attr(Attr::McpParams);
        self.jwt_payload |= p.reads_attr(Attr::JwtClaims);
        self.annotations |= p.reads_attr(Attr::ToolAnnotations);
    }
}

impl Engine {
    /// Whether some authorizer's answers are cached.
    pub fn caches_answers(&self) -> bool {
        self.authorizers.iter().any(|a| a.cache.is_some())
    }

    /// The name policy `id` goes by in records, counters and explanations: the `namespace/name`
    /// of the policy the user wrote, for a policy the compiler derived from one (one name per
    /// user-written policy everywhere); else `id` itself.
    pub fn written_name<'a>(&'a self, id: &'a str) -> &'a str {
        self.written.get(id).map_or(id, String::as_str)
    }

    /// Where `req` is judged: the listener of its port and host, the backend of its route
    /// name or upstream cluster. The flow resolves it once, when the headers arrive.
    pub fn target_of(&self, req: &Request) -> Target {
        let found = self.recognise(req.route_name.as_deref(), req.cluster_name.as_deref());
        Target {
            listener: self.listener_for(req.port, &req.host),
            backend: found.map(|(b, _)| b),
            route: found.and_then(|(b, name)| {
                let by_route = req.route_name.as_deref() == Some(name);
                self.backends.get(b)?.route_slot(name, by_route)
            }),
        }
    }

    /// The listener a request arrived on: same port, most specific matching hostname.
    fn listener_for(&self, port: u16, host: &str) -> Option<usize> {
        self.listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| l.port == port && l.host.as_ref().is_none_or(|h| h.matches(host)))
            .max_by_key(|(i, l)| {
                (
                    l.host.as_ref().map_or(0, |h| h.specificity()),
                    usize::MAX - i,
                )
            })
            .map(|(i, _)| i)
    }

    /// The backend Envoy routed to: by route name first, then by upstream cluster.
    pub(crate) fn backend_for(&self, route: Option<&str>, cluster: Option<&str>) -> Option<usize> {
        self.recognise(route, cluster).map(|(b, _)| b)
    }

    /// The backend Envoy routed to and the name it was recognised by: the route name when
    /// the bundle lists it, else the upstream cluster (the name route-scoped policies are
    /// scoped by).
    pub fn recognise<'n>(
        &self,
        route: Option<&'n str>,
        cluster: Option<&'n str>,
    ) -> Option<(usize, &'n str)> {
        route
            .and_then(|r| self.by_route.get(r).map(|b| (*b, r)))
            .or_else(|| cluster.and_then(|c| self.by_cluster.get(c).map(|b| (*b, c))))
    }

    /// Rule of a policy, or None for "the policy has no rules".
    pub fn rule(&self, r: RuleRef) -> Option<&compiled::Rule> {
        let p = self.policies.get(r.policy)?;
        p.rules.as_ref()?.get(r.rule?)
    }

    /// The verified JWT a caller would have with these claims (a JSON object with `iss`,
    /// `sub` and any other claims), as if `jwt_authn` had verified it (`explain`).
    pub fn jwt_principal(
        &self,
        claims: &serde_json::Value,
    ) -> Result<crate::request::JwtPrincipal, String> {
        crate::identity::principal_from_json(
            claims,
            &self.settings.identity.jwt.providers,
            self.wanted(),
        )
    }

    /// What the bundle reads of a verified JWT.
    pub(crate) fn wanted(&self) -> crate::identity::Wanted<'_> {
        crate::identity::Wanted {
            claims: &self.jwt_claims,
            texts: &self.identity_claims,
            keyed: &self.cache_claims,
            payload: self.cel_needs.jwt_payload,
        }
    }

    /// A fresh CEL state for judging one request (or one listed item) routed to `backend`.
    pub(crate) fn cel_cx(&self, backend: Option<usize>, trace: bool) -> CelCx {
        if self.cel_needs.any {
            let backend = backend.and_then(|b| self.backends.get(b));
            let pins = backend
                .filter(|_| self.cel_needs.annotations)
                .and_then(|b| b.pins.clone());
            let id = backend.map(|b| b.id.as_str());
            CelCx::new(
                self.settings.identity.trust_domain.as_deref(),
                id,
                pins,
                trace,
            )
        } else {
            CelCx::default()
        }
    }

    /// Request attributes the CEL conditions need gathered.
    pub fn cel_needs(&self) -> CelNeeds {
        self.cel_needs
    }

    /// What is attached at `level` for a request judged at `target`, in the decision of
    /// `view`; None: no listener, or no backend.
    pub(crate) fn level_index(
        &self,
        view: View,
        level: Level,
        target: Target,
    ) -> Option<&LevelIndex> {
        let (listeners, backends) = match (view, &self.dry) {
            (View::DryRun, Some(d)) => (&d.listeners, &d.backends),
            _ => (&self.listeners, &self.backends),
        };
        match level {
            Level::Gateway => target
                .listener
                .and_then(|i| listeners.get(i))
                .map(|l| &l.index),
            Level::Backend => target
                .backend
                .and_then(|i| backends.get(i))
                .map(|b| b.index_for(target.listener, target.route)),
        }
    }
}

/// Why a validated bundle does not compile: the policy (`namespace/name`) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    pub policy: String,
    pub problem: CompileProblem,
}

/// What the engine cannot build a policy from. Validation refuses each of these, so a
/// [`ValidBundle`](mcp_access_bundle::ValidBundle) has none; the engine refuses rather than guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileProblem {
    /// A rule or `when` condition cannot be built (the text names it and why).
    Condition(String),
    /// `externalAuth` names no authorizer of the bundle.
    NoSuchAuthorizer(String),
    /// An ExternalAuth policy without `externalAuth`.
    NoAuthorizer,
    /// A ToolPin's pins do not compile.
    Pins(String),
    /// A rate limit this filter cannot count.
    RateLimit(String),
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy {}: ", self.policy)?;
        match &self.problem {
            CompileProblem::Condition(e) => f.write_str(e),
            CompileProblem::NoSuchAuthorizer(name) => write!(f, "no authorizer named {name}"),
            CompileProblem::NoAuthorizer => f.write_str("ExternalAuth needs an authorizer"),
            CompileProblem::Pins(e) => write!(f, "pins: {e}"),
            CompileProblem::RateLimit(e) => write!(f, "rate limit: {e}"),
        }
    }
}

impl std::error::Error for CompileError {}

/// Why bundle JSON gives no engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// It does not parse or validate.
    Bundle(mcp_access_bundle::BundleError),
    /// It validates but does not compile.
    Compile(CompileError),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Bundle(e) => e.fmt(f),
            EngineError::Compile(e) => write!(f, "invalid policy bundle: {e}"),
        }
    }
}

impl std::error::Error for EngineError {}
