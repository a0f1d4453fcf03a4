//! The bundle's policies compiled for per-request use (plain names: `compiled::Policy` is a
//! bundle policy compiled), and how one rule matches a request.

use std::fmt;

use mcp_access_bundle::gateway_api::{
    full_regex, path_prefix_matches, service_account_spiffe, HostPattern,
};
use mcp_access_bundle::mcp_methods::{self, Category};
use mcp_access_bundle::{
    self as bundle, Authorization, BaseProtocol, ClaimMatch, JwtSource, MatchType, McpMatch,
    SourceType,
};

use super::{Cel, CelCx, FastMap, FastSet, LevelIndex, Mode, PolicyId};
use crate::request::{Caller, McpOp, Request};
use mcp_access_bundle::RuleConditions;
use mcp_access_cel::Program;

/// A policy, compiled.
#[derive(Debug)]
pub struct Policy {
    /// `namespace/name`.
    pub id: String,
    pub(crate) action: Action,
    /// None: applies to all traffic. `Some(empty)` only for the stand-in of an Allow policy
    /// that was not accepted: it admits nothing.
    pub(crate) rules: Option<Vec<Rule>>,
    /// `when`: the policy applies only where all hold.
    pub(crate) when: Vec<Cel>,
    /// The bundle's `origin`, shown: where its rules came from (defaults/overrides).
    pub origin: Option<String>,
    /// `namespace/name` of the policy the user wrote, for a policy the compiler derived from
    /// one ([`Policy::name`]).
    pub(crate) written: Option<String>,
    /// Which decisions it takes part in (dry-run policies: only the dry-run one).
    pub mode: bundle::PolicyMode,
}

impl Policy {
    /// The name the policy goes by in records, counters and explanations: the `namespace/name`
    /// of the policy the user wrote, for a policy the compiler derived from one (one name per
    /// user-written policy everywhere); else its own.
    pub fn name(&self) -> &str {
        self.written.as_deref().unwrap_or(&self.id)
    }
}

/// The CEL conditions of the fields at `at` (`when[0]`, `authorization.cel`), as validation
/// compiled them, in order; a field without one (a bundle that was not validated) is an
/// error naming it.
pub(crate) fn compile_cels(
    at: &str,
    fields: impl Iterator<Item = String>,
    programs: impl IntoIterator<Item = Program>,
) -> Result<Vec<Cel>, String> {
    let mut programs = programs.into_iter();
    fields
        .map(|field| match programs.next() {
            Some(program) => Ok(Cel { field, program }),
            None => Err(format!("{at}.{field}: no compiled CEL condition")),
        })
        .collect()
}

/// What a compiled policy does; an ExternalAuth policy always has its authorizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Call this authorizer (index into [`Engine::authorizers`](super::Engine::authorizers)).
    ExternalAuth {
        authorizer: usize,
    },
    Allow,
    Deny,
}

/// A Gateway listener with what is attached to it.
#[derive(Debug)]
pub struct Listener {
    /// `namespace/gateway/listener`.
    pub id: String,
    pub port: u16,
    pub(crate) host: Option<HostPattern>,
    pub index: LevelIndex,
    /// OAuth discovery (protected resource metadata), if configured.
    pub discovery: Option<super::Discovery>,
}

/// Where a Backend-level index applies: (a listener some policy is narrowed to, a route slot
/// some policy is scoped to); None: any other.
pub type ScopeKey = (Option<usize>, Option<usize>);

/// A backend with what is attached to it.
#[derive(Debug)]
pub struct Backend {
    pub id: String,
    /// Policies that apply on every listener and through every route.
    pub index: LevelIndex,
    /// The index for requests that arrived on a listener some policy is narrowed to (bundle
    /// `listeners`) and/or came through a route slot some policy is scoped to (target
    /// `routes`): ((listener, slot), index), every combination but (None, None).
    pub scoped: Vec<(ScopeKey, LevelIndex)>,
    /// Listeners some policy is narrowed to.
    pub(crate) narrowed: Vec<usize>,
    /// Route and cluster names some policy is scoped to -> their slot.
    pub(crate) route_slots: FastMap<String, usize>,
    /// Per slot, the route-scoped policies that apply through it.
    pub(crate) slots: Vec<Vec<PolicyId>>,
    /// The slots of a request recognised by a name no policy is scoped to: by a route name
    /// the backend lists (surely another route), or by a cluster name (another route unless
    /// a policy is scoped by route names, which the cluster may carry too). None without
    /// route-scoped policies.
    pub(crate) other_slots: Option<OtherSlots>,
    /// The route-scoped policies attached, most senior first, each with the listeners it is
    /// narrowed to (None: every listener).
    pub route_scoped: Vec<(PolicyId, Option<Vec<usize>>)>,
    /// Headers it receives with the caller's identity.
    pub identity_headers: Vec<mcp_access_bundle::IdentityHeader>,
    /// Its pinned tools (a ToolPin), shared with the listing filters and CEL states.
    pub pins: Option<std::sync::Arc<crate::pins::ToolPins>>,
}

impl Backend {
    /// What applies to a request that arrived on `listener` through route slot `route`.
    pub fn index_for(&self, listener: Option<usize>, route: Option<usize>) -> &LevelIndex {
        let key = (listener.filter(|l| self.narrowed.contains(l)), route);
        if key == (None, None) {
            return &self.index;
        }
        self.scoped
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&self.index, |(_, i)| i)
    }

    /// The slot of the name a request to this backend was recognised by (`by_route`: a route
    /// name the backend lists, else a cluster name). None: no policy is scoped to any route.
    pub fn route_slot(&self, name: &str, by_route: bool) -> Option<usize> {
        let other = self.other_slots.as_ref()?;
        Some(match self.route_slots.get(name) {
            Some(slot) => *slot,
            None if by_route => other.route,
            None => other.cluster,
        })
    }

    /// Whether route-scoped policy `pid` applies through `slot`: yes, no, or perhaps (the
    /// request came by a cluster name and `pid` is scoped by route names that may use it).
    pub fn through(&self, pid: PolicyId, slot: Option<usize>) -> Through {
        through(&self.slots, self.other_slots.as_ref(), pid, slot)
    }
}

/// [`Backend::through`], also used while the backend's indexes are built.
pub(crate) fn through(
    slots: &[Vec<PolicyId>],
    other: Option<&OtherSlots>,
    pid: PolicyId,
    slot: Option<usize>,
) -> Through {
    match (slot, other) {
        (Some(s), Some(o)) if s == o.cluster => match o.by_route_names.contains(&pid) {
            true => Through::Unsure,
            false => Through::No,
        },
        (Some(s), _) if slots.get(s).is_some_and(|p| p.contains(&pid)) => Through::Yes,
        (Some(_), _) => Through::No,
        (None, _) => Through::Unsure,
    }
}

/// The pseudo-slots of names no policy is scoped to (see [`Backend::other_slots`]).
#[derive(Debug)]
pub(crate) struct OtherSlots {
    pub(crate) route: usize,
    pub(crate) cluster: usize,
    /// Route-scoped policies scoped by some route name (not only cluster names).
    pub(crate) by_route_names: Vec<PolicyId>,
}

/// Whether a route-scoped policy applies to a request (docs/semantics.md §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// The request came through one of its routes.
    Yes,
    /// It came through another route: the policy does not apply.
    No,
    /// The filter cannot tell: an Allow policy keeps the level default-deny, admitting
    /// nothing; other actions do not apply.
    Unsure,
}

/// A compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub(crate) source: Source,
    pub(crate) authz: Option<Authz>,
    /// `authorization.cel` and `when`: all must hold.
    pub cels: Vec<Cel>,
    /// The tools a CEL condition requires (`request.mcp.tool_name == 'x'` at its top level):
    /// as an Allow rule (where an error does not admit) it admits only `tools/call` of these.
    pub(crate) cel_tools: Option<FastSet<String>>,
}

/// A compiled source condition.
#[derive(Debug)]
pub enum Source {
    Any,
    Spiffe(String),
    Jwt {
        issuer: String,
        subject: Option<String>,
        claims: Vec<(String, Vec<String>)>,
    },
}

/// A compiled authorization condition.
#[derive(Debug)]
pub(crate) struct Authz {
    pub(crate) mcp: Option<Mcp>,
    pub(crate) methods: Vec<String>,
    pub(crate) paths: Vec<Path>,
    pub(crate) headers: Vec<Header>,
    pub(crate) hosts: Vec<HostPattern>,
    pub(crate) ports: Vec<u16>,
}

/// Compiled MCP condition.
#[derive(Debug)]
pub(crate) struct Mcp {
    pub(crate) methods: Vec<Method>,
    pub(crate) base: bool,
}

/// One MCP method (or category) with its optional allow-list of names / URIs.
#[derive(Debug)]
pub struct Method {
    pub(crate) name: String,
    pub(crate) params: Option<FastSet<String>>,
}

/// Compiled path match.
#[derive(Debug)]
pub(crate) enum Path {
    Exact(String),
    Prefix(String),
    Regex(regex_lite::Regex),
}

/// Compiled header match.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) name: String,
    pub(crate) value: Value,
}

/// Compiled value match.
#[derive(Debug)]
pub(crate) enum Value {
    Exact(String),
    Regex(regex_lite::Regex),
}

/// `at`: the rule's bundle path (`policies[2].rules[0]`), where its CEL conditions are found.
pub(crate) fn compile_rule(
    rule: &bundle::Rule,
    policy_ns: &str,
    trust_domain: Option<&str>,
    at: &str,
    conditions: RuleConditions,
) -> Result<Rule, String> {
    let cel = rule
        .authorization
        .as_ref()
        .and_then(|a| a.cel.as_ref())
        .map(|_| "authorization.cel".to_string());
    let when = (0..rule.when.len()).map(|i| format!("when[{i}]"));
    let programs = conditions.cel.into_iter().chain(conditions.when);
    let cels = compile_cels(at, cel.into_iter().chain(when), programs)?;
    let cel_tools = cels
        .iter()
        .find_map(|c| c.program.required_tools())
        .map(|tools| tools.into_iter().map(str::to_string).collect());
    Ok(Rule {
        cels,
        cel_tools,
        name: rule.name.clone(),
        source: match &rule.source {
            None => Source::Any,
            Some(s) => compile_source(s, policy_ns, trust_domain)?,
        },
        // An authorization with nothing but `cel` is only its CEL condition (in `cels`).
        authz: rule
            .authorization
            .as_ref()
            .filter(|a| {
                **a != Authorization {
                    cel: a.cel.clone(),
                    ..Authorization::default()
                }
            })
            .map(compile_authz)
            .transpose()?,
    })
}

fn compile_source(s: &bundle::Source, policy_ns: &str, td: Option<&str>) -> Result<Source, String> {
    Ok(match s.kind {
        SourceType::Any => Source::Any,
        SourceType::Spiffe => Source::Spiffe(s.spiffe.clone().ok_or("spiffe is required")?),
        SourceType::ServiceAccount => {
            let sa = s
                .service_account
                .as_ref()
                .ok_or("serviceAccount is required")?;
            let td = td.ok_or("identity.trustDomain is required for ServiceAccount sources")?;
            let ns = sa.namespace.as_deref().unwrap_or(policy_ns);
            Source::Spiffe(service_account_spiffe(td, ns, &sa.name))
        }
        SourceType::Jwt => {
            let JwtSource {
                issuer,
                subject,
                claims,
            } = s.jwt.clone().ok_or("jwt is required")?;
            Source::Jwt {
                issuer,
                subject,
                claims: claims.into_iter().map(|c| (c.name, c.values)).collect(),
            }
        }
    })
}

fn compile_authz(a: &Authorization) -> Result<Authz, String> {
    let paths = a
        .paths
        .iter()
        .map(|p| {
            Ok(match p.kind {
                MatchType::Exact => Path::Exact(p.value.clone()),
                MatchType::PathPrefix => Path::Prefix(p.value.clone()),
                MatchType::RegularExpression => Path::Regex(full_regex(&p.value)?),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let headers = a
        .headers
        .iter()
        .map(|h| {
            Ok(Header {
                name: h.name.to_ascii_lowercase(),
                value: match h.kind {
                    MatchType::RegularExpression => Value::Regex(full_regex(&h.value)?),
                    _ => Value::Exact(h.value.clone()),
                },
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Authz {
        mcp: a.mcp.as_ref().map(compile_mcp),
        methods: a.methods.clone(),
        paths,
        headers,
        hosts: a.hosts.iter().map(|h| HostPattern::new(h)).collect(),
        ports: a.ports.clone(),
    })
}

fn compile_mcp(m: &McpMatch) -> Mcp {
    Mcp {
        methods: m
            .methods
            .iter()
            .map(|x| Method {
                name: x.name.clone(),
                params: x.params.as_ref().map(|p| p.iter().cloned().collect()),
            })
            .collect(),
        base: m.base_protocol == BaseProtocol::Match,
    }
}

/// The first condition of a rule that a request does not meet (for traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch<'r> {
    Source,
    /// A JWT source whose other conditions hold, but not its scope claims.
    Scope,
    HttpMethod,
    Port,
    Host,
    Path,
    /// The named header is absent or (a copy of it) does not match.
    Header(&'r str),
    /// No listed MCP method is the request's (or it is not an MCP call).
    McpMethod,
    /// A listed MCP method is the request's, but not with its name / URI.
    Param,
    /// A CEL condition (`authorization.cel`, `when[i]`) is false or errs.
    Cel(&'r str),
}

impl fmt::Display for Mismatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Source => f.write_str("source"),
            Mismatch::Scope => f.write_str("token scope"),
            Mismatch::HttpMethod => f.write_str("HTTP method"),
            Mismatch::Port => f.write_str("port"),
            Mismatch::Host => f.write_str("host"),
            Mismatch::Path => f.write_str("path"),
            Mismatch::Header(name) => write!(f, "header {name}"),
            Mismatch::McpMethod => f.write_str("MCP method"),
            Mismatch::Param => f.write_str("param"),
            Mismatch::Cel(field) => write!(f, "CEL {field}"),
        }
    }
}

impl Rule {
    /// Source AND authorization AND CEL conditions (last: the costliest), repeated headers
    /// and CEL errors resolved against the caller per `mode`.
    pub(crate) fn admits(&self, req: &Request, mode: Mode, cx: &mut CelCx, policy: &str) -> bool {
        self.source.matches(&req.caller, mode) && self.admits_but_source(req, mode, cx, policy)
    }

    /// Whether the rule would admit `req` if the caller's token held more scopes: it names a
    /// scope claim, and every other condition holds (docs/semantics.md §5.6).
    pub(crate) fn short_of_scope(
        &self,
        req: &Request,
        mode: Mode,
        cx: &mut CelCx,
        policy: &str,
    ) -> bool {
        self.source.short_of_scope(&req.caller) && self.admits_but_source(req, mode, cx, policy)
    }

    fn admits_but_source(&self, req: &Request, mode: Mode, cx: &mut CelCx, policy: &str) -> bool {
        self.authz.as_ref().is_none_or(|a| a.matches(req, mode))
            && self
                .cels
                .iter()
                .all(|c| cx.holds(c, mode, req, policy, Some(&self.name)))
    }

    /// Why the rule does not admit `req` (the first condition that fails), None if it does;
    /// `backend`: the request's (its pinned tools give `request.mcp.tool.annotations`).
    pub fn mismatch(
        &self,
        req: &Request,
        mode: Mode,
        trust_domain: Option<&str>,
        backend: Option<&Backend>,
    ) -> Option<Mismatch<'_>> {
        if let Some(m) = self.static_mismatch(req, mode) {
            return Some(m);
        }
        let pins = backend.and_then(|b| b.pins.clone());
        let mut cx = CelCx::new(trust_domain, backend.map(|b| b.id.as_str()), pins, false);
        self.cels
            .iter()
            .find(|c| !cx.holds(c, mode, req, "", None))
            .map(|c| Mismatch::Cel(&c.field))
    }

    /// A source that fails only on its scopes is named after the request conditions (a
    /// token with more scopes would not help a request they refuse).
    fn static_mismatch(&self, req: &Request, mode: Mode) -> Option<Mismatch<'_>> {
        if self.source.matches(&req.caller, mode) {
            self.request_mismatch(req, mode)
        } else if self.source.short_of_scope(&req.caller) {
            self.request_mismatch(req, mode).or(Some(Mismatch::Scope))
        } else {
            Some(Mismatch::Source)
        }
    }

    fn request_mismatch(&self, req: &Request, mode: Mode) -> Option<Mismatch<'_>> {
        let a = self.authz.as_ref()?;
        if !(a.methods.is_empty() || a.methods.iter().any(|m| m == &req.method)) {
            return Some(Mismatch::HttpMethod);
        }
        if !(a.ports.is_empty() || a.ports.contains(&req.port)) {
            return Some(Mismatch::Port);
        }
        if !(a.hosts.is_empty() || a.hosts.iter().any(|h| h.matches(&req.host))) {
            return Some(Mismatch::Host);
        }
        if !(a.paths.is_empty() || a.paths.iter().any(|p| p.matches(&req.canonical_path))) {
            return Some(Mismatch::Path);
        }
        if let Some(h) = a.headers.iter().find(|h| !h.matches(req, mode)) {
            return Some(Mismatch::Header(&h.name));
        }
        let m = a.mcp.as_ref()?;
        if m.matches(&req.mcp, mode) {
            return None;
        }
        let named = req
            .mcp
            .called()
            .is_some_and(|method| m.methods.iter().any(|x| x.name_matches(method, mode)));
        Some(if named {
            Mismatch::Param
        } else {
            Mismatch::McpMethod
        })
    }

    /// For indexing: `(method, params)` pairs when every MCP method of this rule names params.
    pub(crate) fn keyed_calls(&self) -> Option<Vec<(&str, &FastSet<String>)>> {
        let mcp = self.authz.as_ref()?.mcp.as_ref()?;
        if mcp.methods.is_empty() {
            return None;
        }
        mcp.methods
            .iter()
            .map(|m| m.params.as_ref().map(|p| (m.name.as_str(), p)))
            .collect()
    }

    /// For indexing an Allow rule without an `mcp` block whose CEL condition requires
    /// particular tools: `tools/call` of those.
    pub(crate) fn cel_keyed_calls(&self) -> Option<Vec<(&str, &FastSet<String>)>> {
        if self.authz.as_ref().is_some_and(|a| a.mcp.is_some()) {
            return None;
        }
        Some(vec![(mcp_methods::TOOLS_CALL, self.cel_tools.as_ref()?)])
    }

    /// Whether this rule can admit base-protocol traffic.
    pub(crate) fn may_admit_base(&self) -> bool {
        self.authz
            .as_ref()
            .and_then(|a| a.mcp.as_ref())
            .is_none_or(|m| m.base)
    }
}

impl Source {
    /// `mode`: a Deny rule or an ExternalAuth selection reads a scope claim broadly
    /// ([`crate::request::ClaimValue::matches`]).
    pub(crate) fn matches(&self, caller: &Caller, mode: Mode) -> bool {
        self.holds(caller, true, mode == Mode::Select)
    }

    /// Whether this is a JWT source naming a scope claim ([`ClaimMatch::is_scope`]) whose
    /// other conditions some verified JWT of the caller meets: a token with more scopes
    /// could match it.
    pub(crate) fn short_of_scope(&self, caller: &Caller) -> bool {
        self.names_scope() && self.holds(caller, false, false)
    }

    /// Whether it is a JWT source with a scope claim condition.
    fn names_scope(&self) -> bool {
        matches!(self, Source::Jwt { claims, .. }
            if claims.iter().any(|(n, _)| ClaimMatch::is_scope(n)))
    }

    /// The values of its scope claim conditions, in order, each once.
    pub(crate) fn scopes(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        if let Source::Jwt { claims, .. } = self {
            for (_, values) in claims.iter().filter(|(n, _)| ClaimMatch::is_scope(n)) {
                for v in values {
                    if !out.contains(&v.as_str()) {
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    /// `scopes`: whether the scope claim conditions are judged (or taken to hold); `select`:
    /// as [`crate::request::ClaimValue::matches`] reads them.
    fn holds(&self, caller: &Caller, scopes: bool, select: bool) -> bool {
        match self {
            Source::Any => true,
            Source::Spiffe(id) => caller.spiffe.as_deref() == Some(id.as_str()),
            Source::Jwt {
                issuer,
                subject,
                claims,
            } => caller.jwts.iter().any(|j| {
                &j.issuer == issuer
                    && subject
                        .as_ref()
                        .is_none_or(|s| j.subject.as_deref() == Some(s.as_str()))
                    && claims
                        .iter()
                        .filter(|(name, _)| scopes || !ClaimMatch::is_scope(name))
                        .all(|(name, values)| {
                            j.claims
                                .iter()
                                .find(|(n, _)| n == name)
                                .is_some_and(|(_, v)| {
                                    values.iter().any(|x| v.matches(name, x, select))
                                })
                        })
            }),
        }
    }
}

impl Authz {
    fn matches(&self, req: &Request, mode: Mode) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m == &req.method))
            && (self.ports.is_empty() || self.ports.contains(&req.port))
            && (self.hosts.is_empty() || self.hosts.iter().any(|h| h.matches(&req.host)))
            && (self.paths.is_empty() || self.paths.iter().any(|p| p.matches(&req.canonical_path)))
            && self.headers.iter().all(|h| h.matches(req, mode))
            && self.mcp.as_ref().is_none_or(|m| m.matches(&req.mcp, mode))
    }
}

impl Header {
    /// A header that is absent never matches; a repeated one per `mode`.
    fn matches(&self, req: &Request, mode: Mode) -> bool {
        let mut copies = req.header_values(&self.name).peekable();
        if copies.peek().is_none() {
            return false;
        }
        match mode {
            Mode::Admit => copies.all(|v| self.value.matches(v)),
            Mode::Select => copies.any(|v| self.value.matches(v)),
        }
    }
}

impl Path {
    fn matches(&self, path: &str) -> bool {
        match self {
            Path::Exact(p) => p == path,
            Path::Prefix(p) => path_prefix_matches(p, path),
            Path::Regex(r) => r.is_match(path),
        }
    }
}

impl Value {
    fn matches(&self, v: &str) -> bool {
        match self {
            Value::Exact(x) => x == v,
            Value::Regex(r) => r.is_match(v),
        }
    }
}

impl Mcp {
    pub(super) fn matches(&self, op: &McpOp, mode: Mode) -> bool {
        // An mcp block admits only what it lists (none: only the base protocol, with Match).
        let listed = match op {
            McpOp::Call { method, param } => self
                .methods
                .iter()
                .any(|m| m.matches(method, param.as_deref(), mode)),
            _ => false,
        };
        listed || self.base && op.is_base()
    }
}

impl Method {
    /// A category admits the table's methods of that category only (`tools/list ` or
    /// `tools/secret` is not a tools method); a Deny rule or an ExternalAuth selection naming
    /// it matches every method under its prefix as well, against the caller.
    fn name_matches(&self, method: &mcp_methods::Method, mode: Mode) -> bool {
        match Category::named(&self.name) {
            Some(category) if mode == Mode::Select => category.prefixes(method.as_str()),
            Some(category) => method.category() == Some(category),
            None => self.name == method.as_str(),
        }
    }

    /// A call without its param (only a listing's probe for "some URI", docs/semantics.md
    /// §5.4: requests of a method with a param always carry it) is admitted by a rule that
    /// lists some params, and is not matched by a Deny rule that lists params.
    fn matches(&self, method: &mcp_methods::Method, param: Option<&str>, mode: Mode) -> bool {
        self.name_matches(method, mode)
            && match (&self.params, param) {
                (None, _) => true,
                (Some(allowed), Some(p)) => allowed.contains(p),
                (Some(allowed), None) => mode == Mode::Admit && !allowed.is_empty(),
            }
    }
}

/// Of the attributes `reads` (of [`NOT_RECORDED`]), those a decision record does not hold (docs/semantics.md
/// §3.9): every header (a record holds those header conditions read), the raw `:authority`
/// and `:path` (it holds their canonical forms), the JWT payload (it holds the claims JWT
/// sources read) and the params beyond the name or URI and, when recorded, the arguments.
pub(super) fn unrecorded(reads: &[mcp_access_cel::Attr], arguments: bool) -> Vec<&'static str> {
    reads
        .iter()
        .filter(|a| **a != mcp_access_cel::Attr::McpParams || !arguments)
        .map(|a| a.name())
        .collect()
}

/// The attributes CEL may read that a record does not hold in full ([`unrecorded`]).
pub(super) const NOT_RECORDED: [mcp_access_cel::Attr; 5] = {
    use mcp_access_cel::Attr;
    [
        Attr::Headers,
        Attr::Host,
        Attr::Path,
        Attr::JwtClaims,
        Attr::McpParams,
    ]
};

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: serde_json::Value) -> Rule {
        let r: bundle::Rule = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        compile_rule(
            &r,
            "ns",
            Some("example.org"),
            "rule",
            RuleConditions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn mismatch_names_the_failing_condition_exactly_when_the_rule_does_not_admit() {
        let req = |tool: &str, team: &[&str]| Request {
            method: "POST".into(),
            path: "/mcp".into(),
            canonical_path: "/mcp".into(),
            authority: "a.example:8443".into(),
            port: 8443,
            headers: team.iter().map(|t| ("x-team", t)).collect(),
            caller: Caller {
                credential: false,
                spiffe: Some("spiffe://example.org/ns/a/sa/b".into()),
                jwts: Vec::new(),
            },
            mcp: McpOp::Call {
                method: "tools/call".into(),
                param: Some(tool.into()),
            },
            host: "a.example".into(),
            ..Request::default()
        };
        let header = rule(serde_json::json!({"name": "h", "authorization": {
            "headers": [{"name": "X-Team", "value": "blue"}],
            "mcp": {"methods": [{"name": "tools", "params": ["echo"]}]}}}));
        let source = rule(
            serde_json::json!({"name": "s", "source": {"type": "SPIFFE", "spiffe": "spiffe://example.org/ns/a/sa/c"}}),
        );
        let cases = [
            (&header, req("echo", &["blue"]), Mode::Admit, None),
            (
                &header,
                req("add", &["blue"]),
                Mode::Admit,
                Some(Mismatch::Param),
            ),
            (
                &header,
                req("echo", &[]),
                Mode::Admit,
                Some(Mismatch::Header("x-team")),
            ),
            // A repeated header: every copy must match to admit, any copy to select.
            (
                &header,
                req("echo", &["blue", "red"]),
                Mode::Admit,
                Some(Mismatch::Header("x-team")),
            ),
            (&header, req("echo", &["blue", "red"]), Mode::Select, None),
            (
                &source,
                req("echo", &[]),
                Mode::Admit,
                Some(Mismatch::Source),
            ),
        ];
        for (r, q, mode, want) in cases {
            assert_eq!(r.mismatch(&q, mode, None, None), want, "{}", r.name);
            assert_eq!(
                r.admits(&q, mode, &mut CelCx::new(None, None, None, false), "p"),
                want.is_none(),
                "{}",
                r.name
            );
        }
        let mut prompt = req("echo", &["blue"]);
        prompt.mcp = McpOp::Call {
            method: "prompts/get".into(),
            param: Some("echo".into()),
        };
        assert_eq!(
            header.mismatch(&prompt, Mode::Admit, None, None),
            Some(Mismatch::McpMethod)
        );
        assert_eq!(Mismatch::Header("x-team").to_string(), "header x-team");
    }
}
