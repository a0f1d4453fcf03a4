//! Policy evaluation: the bundle compiled once into lookup structures ([`Engine`]), and the
//! per-request evaluation of docs/semantics.md §3–§4 ([`Evaluation`]).

mod compiled;
mod cx;
mod dry_run;
mod eval;
mod identity_headers;
mod index;
mod oauth;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use mcp_access_bundle::{
    self as bundle, Authorizer, Conditions, DenyResponse, EscapedSlashes, IdentitySettings, Level,
    Limits, Listings, PolicyConditions, UnknownBackend, ValidBundle,
};

use compiled::{compile_cels, compile_rule};
pub use compiled::{Cel, Mode};
pub use cx::CelRecord;
pub(crate) use cx::{Applies, CelCx};
pub use dry_run::{DryRunRecord, Evaluation, View};
pub(crate) use eval::TraceEntry;
pub use eval::{AuthzCall, AuthzOutcome, Decision, Denial, HeaderEdit, HeaderOp, Reason, Step};
pub use identity_headers::{IdentityEdits, Omitted};
pub use oauth::{Challenge, Discovery};

use crate::request::{Request, Target};

/// Index of a policy in [`Engine::policies`] (seniority order).
pub(crate) type PolicyId = usize;

/// A rule of a policy; `rule: None` stands for a policy without rules (matches everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRef {
    pub policy: PolicyId,
    pub(crate) rule: Option<usize>,
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
                    if !self.keyed.contains_key(method) {
                        self.keyed.insert(method.to_string(), FastMap::default());
                    }
                    let Some(by_param) = self.keyed.get_mut(method) else {
                        continue;
                    };
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

    /// The most senior rule that admits `req`.
    pub(crate) fn first_admitting(
        &self,
        engine: &Engine,
        req: &Request,
        cx: &mut CelCx,
    ) -> Option<RuleRef> {
        self.first_where(req, |r| engine.rule_admits(r, req, self.mode, cx))
    }

    /// The most senior rule that would admit `req` if the caller's token held more scopes
    /// ([`compiled::Rule::short_of_scope`]).
    pub(crate) fn first_short_of_scope(
        &self,
        engine: &Engine,
        req: &Request,
        cx: &mut CelCx,
    ) -> Option<RuleRef> {
        self.first_where(req, |r| {
            r.rule.is_some()
                && engine.rule_meets(r, req, self.mode, cx, compiled::Rule::short_of_scope)
        })
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
        all.sort();
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

/// The bundle compiled for per-request use.
#[derive(Debug)]
pub struct Engine {
    pub policies: Vec<compiled::Policy>,
    /// The indexes of the dry-run decision, where some policy takes part in one decision only.
    pub(crate) dry: Option<dry_run::DryRunView>,
    pub(crate) authorizers: Vec<Authorizer>,
    pub listeners: Vec<compiled::Listener>,
    pub backends: Vec<compiled::Backend>,
    by_route: HashMap<String, usize>,
    by_cluster: HashMap<String, usize>,
    /// `namespace/name` → origin, for the policies that have one (looked up per decision).
    origins: HashMap<String, String>,
    /// `namespace/name` of the policy a user wrote, by the id of each policy the compiler
    /// derived from it ([`Engine::written_name`]).
    written: HashMap<String, String>,
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
    /// Claim names any JWT rule reads.
    pub(crate) jwt_claims: Vec<String>,
    /// Claim names authorizer caches key on.
    pub(crate) cache_claims: Vec<String>,
    /// What the CEL conditions read beyond the usual request attributes.
    pub(crate) cel_needs: CelNeeds,
    /// What decision records carry.
    pub decision_records: bundle::DecisionRecords,
    /// Headers the rules' header conditions read (lowercase): what a decision record keeps of
    /// the request's headers (a credential's as a keyed digest, [`Engine::record_key`]).
    pub recorded_headers: Vec<String>,
    /// The CEL attributes the conditions read that a decision record does not hold (by CEL
    /// name): a replay cannot decide such a record again without guessing.
    pub(crate) unrecorded: Vec<&'static str>,
    /// The key of the digests decision records hold of credentials (random, never written
    /// anywhere: a record proves which value a rule read without revealing it).
    pub(crate) record_key: [u8; 32],
    /// This engine, told apart from every other built in the process (reused listings).
    pub(crate) instance: Instance,
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

/// 32 random bytes (the OS's, through std's hasher seeds: `random_get` on WASI).
fn random_key() -> [u8; 32] {
    use std::hash::BuildHasher as _;
    let mut key = [0u8; 32];
    for (i, chunk) in key.chunks_mut(8).enumerate() {
        let word = std::hash::RandomState::new().hash_one(i);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    key
}

/// One engine among those the process built: a number never given twice.
#[derive(Debug)]
pub(crate) struct Instance {
    pub(crate) serial: u64,
}

impl Instance {
    fn new() -> Instance {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Instance {
            serial: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
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

impl Engine {
    /// Compiles a validated bundle: its policies (with the CEL conditions validation
    /// compiled), then the listener and backend indexes. What validation checked is not
    /// checked again; what the engine could not build from a bundle that skipped it is an
    /// error, never a panic.
    pub fn compile(mut b: ValidBundle) -> Result<Engine, CompileError> {
        let mut conditions = b.take_conditions();
        let b = &b;
        // (position in the bundle, policy), most senior first.
        let mut numbered: Vec<(usize, &bundle::Policy)> = b.policies.iter().enumerate().collect();
        numbered.sort_by(|(_, x), (_, y)| {
            (x.seniority, &x.namespace, &x.name).cmp(&(y.seniority, &y.namespace, &y.name))
        });
        let order: Vec<&bundle::Policy> = numbered.iter().map(|(_, p)| *p).collect();
        let compiled = compile_policies(b, &numbered, &mut conditions)?;
        let policies = compiled.policies;
        let listeners = index::index_listeners(b, &order, &policies, View::Enforced);
        let backends = index::index_backends(b, &order, &policies, &listeners, View::Enforced)?;
        let dry =
            dry_run::DryRunView::build(b, &order, &policies, (&listeners, &backends.backends))?;
        let (identity_header_names, identity_claims) = identity_headers::names_and_claims(b);
        let challenges = listeners.iter().any(|l| l.discovery.is_some());
        let mut origins = HashMap::new();
        for p in &policies {
            if let Some(o) = &p.origin {
                origins.entry(p.id.clone()).or_insert_with(|| o.clone());
            }
        }
        // Policies the compiler derived (defaults/overrides, rules replaced) answer to the
        // name of the policy the user wrote.
        let written: HashMap<String, String> = b
            .policies
            .iter()
            .filter_map(|p| {
                let (_, user) = p.origin.as_ref()?.policy.split_once(' ')?;
                Some((format!("{}/{}", p.namespace, p.name), user.to_string()))
            })
            .collect();
        let mut cache_claims: Vec<String> = Vec::new();
        let caches = b.authorizers.iter().filter_map(|a| a.cache.as_ref());
        for c in caches.flat_map(|c| &c.key_claims) {
            if !cache_claims.contains(c) {
                cache_claims.push(c.clone());
            }
        }
        Ok(Engine {
            dry,
            origins,
            written,
            policies,
            authorizers: b.authorizers.clone(),
            listeners,
            backends: backends.backends,
            by_route: backends.by_route,
            by_cluster: backends.by_cluster,
            identity: b.identity.clone(),
            deny_response: b.deny_response.clone(),
            limits: b.limits.clone(),
            listings: b.listings.clone(),
            hold_headers: b.envoy.hold_headers,
            route_match_headers: b.envoy.route_match_headers.clone(),
            unknown_backend: b.envoy.unknown_backend,
            escaped_slashes: b.envoy.escaped_slashes,
            jwt_claims: compiled.jwt_claims,
            cache_claims,
            cel_needs: compiled.cel_needs,
            decision_records: b.decision_records,
            recorded_headers: {
                let mut h = compiled.headers;
                h.sort_unstable();
                h
            },
            unrecorded: compiled::unrecorded(&compiled.cel_reads, b.decision_records.arguments),
            instance: Instance::new(),
            record_key: random_key(),
            identity_header_names,
            identity_claims,
            challenges,
            generation: [0; 32],
        })
    }

    /// Whether some authorizer's answers are cached.
    pub fn caches_answers(&self) -> bool {
        self.authorizers.iter().any(|a| a.cache.is_some())
    }

    /// Parses, validates and compiles bundle JSON.
    pub fn from_json(json: &[u8]) -> Result<Engine, EngineError> {
        use sha2::Digest as _;
        let bundle = mcp_access_bundle::parse_bundle(json).map_err(EngineError::Bundle)?;
        let mut engine = Engine::compile(bundle).map_err(EngineError::Compile)?;
        if engine.caches_answers() {
            // What every worker of the Envoy was given: the same bytes, the same digest.
            engine.generation = sha2::Sha256::digest(json).into();
        }
        Ok(engine)
    }

    /// The name policy `id` goes by in records, counters and explanations: the `namespace/name`
    /// of the policy the user wrote, for a policy the compiler derived from one (one name per
    /// user-written policy everywhere); else `id` itself.
    pub fn written_name<'a>(&'a self, id: &'a str) -> &'a str {
        self.written.get(id).map_or(id, String::as_str)
    }

    /// The origin of policy `id` (`namespace/name`), if the compiler derived it.
    pub fn origin_of(&self, id: Option<&str>) -> Option<String> {
        self.origins.get(id?).cloned()
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

    /// Whether rule `r` admits (Allow) or selects (Deny) `req`, its policy's `when` included:
    /// a policy `when` that errs makes an Allow policy admit nothing and a Deny policy apply.
    fn rule_admits(&self, r: RuleRef, req: &Request, mode: Mode, cx: &mut CelCx) -> bool {
        self.rule_meets(r, req, mode, cx, compiled::Rule::admits)
    }

    /// Whether `r`'s policy applies and `r` meets `test` (a policy without rules meets
    /// anything).
    fn rule_meets(
        &self,
        r: RuleRef,
        req: &Request,
        mode: Mode,
        cx: &mut CelCx,
        test: fn(&compiled::Rule, &Request, Mode, &mut CelCx, &str) -> bool,
    ) -> bool {
        let Some(p) = self.policies.get(r.policy) else {
            return false;
        };
        match (cx.applies(r.policy, p, req), mode) {
            (Applies::No, _) | (Applies::Errored, Mode::Admit) => return false,
            _ => {}
        }
        match r.rule {
            None => true,
            Some(_) => self
                .rule(r)
                .is_some_and(|rule| test(rule, req, mode, cx, &p.id)),
        }
    }

    /// Whether an ExternalAuth policy applies and selects the request (no rules: every
    /// request).
    pub(crate) fn selects(&self, pid: PolicyId, req: &Request, cx: &mut CelCx) -> bool {
        let Some(p) = self.policies.get(pid) else {
            return false;
        };
        if cx.applies(pid, p, req) == Applies::No {
            return false;
        }
        match &p.rules {
            None => true,
            Some(rules) => rules.iter().any(|r| r.admits(req, Mode::Select, cx, &p.id)),
        }
    }

    /// Whether an Allow policy applies at `index` for `req` (the level is then default-deny).
    pub(crate) fn allow_applies(&self, index: &LevelIndex, req: &Request, cx: &mut CelCx) -> bool {
        index.has_allow
            && (index.allow_always
                || index.allow_when.iter().any(|pid| {
                    self.policies
                        .get(*pid)
                        .is_some_and(|p| cx.applies(*pid, p, req) != Applies::No)
                }))
    }

    /// The verified JWT a caller would have with these claims (a JSON object with `iss`,
    /// `sub` and any other claims), as if `jwt_authn` had verified it (`explain`).
    pub fn jwt_principal(
        &self,
        claims: &serde_json::Value,
    ) -> Result<crate::request::JwtPrincipal, String> {
        crate::identity::principal_from_json(claims, &self.identity.jwt.providers, self.wanted())
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
            CelCx::new(self.identity.trust_domain.as_deref(), id, pins, trace)
        } else {
            CelCx::default()
        }
    }

    /// Request attributes the CEL conditions need gathered.
    pub fn cel_needs(&self) -> CelNeeds {
        self.cel_needs
    }

    /// Judges `probe` (a request whose MCP operation was replaced by one item it names or
    /// lists) by the Deny and Allow steps of both levels, exactly as a request is judged,
    /// without ExternalAuth: docs/semantics.md §4.3 (`subscriptions/listen`) and §5.4
    /// (listings). None: the item passes; else why it would be denied. Rules read the item
    /// from `probe.mcp` (so would a CEL rule's `request.mcp.*`).
    pub fn item_denial(&self, probe: &Request) -> Option<Denial> {
        self.item_denial_in(View::Enforced, probe)
    }

    /// [`Engine::item_denial`] in the decision of `view`.
    pub fn item_denial_in(&self, view: View, probe: &Request) -> Option<Denial> {
        let (level, rule) = self.item_refusal_in(view, probe)?;
        Some(match rule {
            Some(r) => {
                let mut d = Denial::of(Some(level), Reason::DenyPolicy);
                (d.policy, d.rule) = eval::names(self, r);
                d
            }
            None => Denial {
                scope: self
                    .level_index(view, level, probe.target)
                    .and_then(|index| self.short_of_scope(index, probe))
                    .map(|(_, scopes)| scopes),
                ..Denial::of(Some(level), Reason::NotAllowed)
            },
        })
    }

    /// The most senior Allow rule of `index` that would admit `req` if the caller's verified
    /// token held more scopes, with the scope values it names (docs/semantics.md §5.6). Judged
    /// apart: its CEL conditions count in no decision's errors.
    pub(crate) fn short_of_scope(
        &self,
        index: &LevelIndex,
        req: &Request,
    ) -> Option<(RuleRef, Vec<String>)> {
        if req.caller.jwts.is_empty() {
            return None;
        }
        let mut cx = self.cel_cx(req.target.backend, false);
        let r = index.allow.first_short_of_scope(self, req, &mut cx)?;
        let scopes = self
            .rule(r)?
            .source
            .scopes()
            .into_iter()
            .map(str::to_string)
            .collect();
        Some((r, scopes))
    }

    /// [`Engine::item_denial`], in the probe's [`Target`](crate::request::Target): None when
    /// the item passes, else the level that refuses it and the Deny rule that matched it
    /// (None: no Allow rule admitted it).
    pub(crate) fn item_refusal(&self, probe: &Request) -> Option<(Level, Option<RuleRef>)> {
        self.item_refusal_in(View::Enforced, probe)
    }

    fn item_refusal_in(&self, view: View, probe: &Request) -> Option<(Level, Option<RuleRef>)> {
        let scope = probe.target;
        for level in [Level::Gateway, Level::Backend] {
            let index = self.level_index(view, level, scope);
            let Some(index) = index else {
                if level == Level::Gateway || self.unknown_backend == UnknownBackend::Deny {
                    return Some((level, None));
                }
                continue;
            };
            let mut cx = self.cel_cx(scope.backend, false);
            match eval::rules_verdict(self, index, probe, &mut cx) {
                eval::RulesVerdict::Denied(r) => return Some((level, Some(r))),
                eval::RulesVerdict::NotAdmitted => return Some((level, None)),
                eval::RulesVerdict::Admitted(_) => {}
            }
        }
        None
    }

    /// Starts evaluating a request.
    pub fn begin(&self, req: &Request, trace: bool) -> Evaluation {
        Evaluation::new(self, req, trace)
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
/// [`ValidBundle`] has none; the engine refuses rather than guess.
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
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy {}: ", self.policy)?;
        match &self.problem {
            CompileProblem::Condition(e) => f.write_str(e),
            CompileProblem::NoSuchAuthorizer(name) => write!(f, "no authorizer named {name}"),
            CompileProblem::NoAuthorizer => f.write_str("ExternalAuth needs an authorizer"),
            CompileProblem::Pins(e) => write!(f, "pins: {e}"),
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

/// The policies compiled, most senior first, and what their conditions read.
struct CompiledPolicies {
    policies: Vec<compiled::Policy>,
    /// Claim names any JWT rule reads.
    jwt_claims: Vec<String>,
    cel_needs: CelNeeds,
    /// Header names the rules' header conditions read, credentials left out.
    headers: Vec<String>,
    /// The attributes the CEL conditions read that a record does not hold in full
    /// ([`compiled::NOT_RECORDED`]).
    cel_reads: Vec<mcp_access_cel::Attr>,
}

/// Compiles each policy of `numbered` ((position in the bundle, policy), most senior first).
fn compile_policies(
    b: &ValidBundle,
    numbered: &[(usize, &bundle::Policy)],
    conditions: &mut Conditions,
) -> Result<CompiledPolicies, CompileError> {
    let td = b.identity.trust_domain.as_deref();
    let mut out = CompiledPolicies {
        policies: Vec::with_capacity(numbered.len()),
        jwt_claims: Vec::new(),
        cel_needs: CelNeeds::default(),
        headers: Vec::new(),
        cel_reads: Vec::new(),
    };
    for (position, p) in numbered {
        let id = format!("{}/{}", p.namespace, p.name);
        let fail = |problem| CompileError {
            policy: id.clone(),
            problem,
        };
        // The bundle path of the policy, for errors.
        let at = format!("policies[{position}]");
        let PolicyConditions {
            when: when_programs,
            rules: rule_programs,
        } = conditions.take(*position);
        let mut rule_programs = rule_programs.into_iter();
        let rules = match &p.rules {
            None => None,
            Some(rs) => Some(
                rs.iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let at = format!("{at}.rules[{i}]");
                        let programs = rule_programs.next().unwrap_or_default();
                        compile_rule(r, &p.namespace, td, &at, programs)
                            .map_err(|e| fail(CompileProblem::Condition(e)))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let fields = (0..p.when.len()).map(|i| format!("when[{i}]"));
        let when = compile_cels(&at, fields, when_programs)
            .map_err(|e| fail(CompileProblem::Condition(e)))?;
        let cels = when
            .iter()
            .chain(rules.iter().flatten().flat_map(|r| r.cels.iter()));
        for c in cels {
            use mcp_access_cel::Attr;
            let needs = &mut out.cel_needs;
            needs.any = true;
            needs.time |= c.program.reads_attr(Attr::Time);
            needs.params |= c.program.reads_attr(Attr::McpParams);
            needs.jwt_payload |= c.program.reads_attr(Attr::JwtClaims);
            needs.annotations |= c.program.reads_attr(Attr::ToolAnnotations);
            for a in compiled::NOT_RECORDED {
                if c.program.reads_attr(a) && !out.cel_reads.contains(&a) {
                    out.cel_reads.push(a);
                }
            }
        }
        for r in rules.iter().flatten() {
            let read = r
                .authz
                .iter()
                .flat_map(|a| a.headers.iter().map(|h| &h.name));
            for h in read {
                if !out.headers.contains(h) {
                    out.headers.push(h.clone());
                }
            }
            if let compiled::Source::Jwt { claims, .. } = &r.source {
                for (c, _) in claims {
                    if !out.jwt_claims.contains(c) {
                        out.jwt_claims.push(c.clone());
                    }
                }
            }
        }
        let action = match (p.action, &p.external_auth) {
            (bundle::Action::ExternalAuth, Some(name)) => compiled::Action::ExternalAuth {
                authorizer: b
                    .authorizers
                    .iter()
                    .position(|a| &a.name == name)
                    .ok_or_else(|| fail(CompileProblem::NoSuchAuthorizer(name.clone())))?,
            },
            (bundle::Action::ExternalAuth, None) => return Err(fail(CompileProblem::NoAuthorizer)),
            (bundle::Action::Allow, _) => compiled::Action::Allow,
            (bundle::Action::Deny, _) => compiled::Action::Deny,
        };
        // The stand-in of an Allow policy that was not accepted admits nothing.
        let rules = match (&p.not_accepted, action) {
            (Some(_), compiled::Action::Allow) => Some(Vec::new()),
            _ => rules,
        };
        out.policies.push(compiled::Policy {
            id,
            action,
            rules,
            when,
            origin: p.origin.as_ref().map(ToString::to_string),
            mode: p.mode,
        });
    }
    Ok(out)
}
