//! Compiled rules and how one rule matches a request.

use std::collections::HashSet;

use mcp_access_bundle::{
    Authorization, BaseProtocol, JwtSource, MatchType, McpMatch, Rule, Source, SourceType,
};

use crate::request::{Caller, McpOp, Request};

/// A compiled rule.
#[derive(Debug)]
pub struct CRule {
    pub name: String,
    pub source: CSource,
    pub authz: Option<CAuthz>,
}

/// A compiled source condition.
#[derive(Debug)]
pub enum CSource {
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
pub struct CAuthz {
    pub mcp: Option<CMcp>,
    pub methods: Vec<String>,
    pub paths: Vec<CPath>,
    pub headers: Vec<CHeader>,
    pub hosts: Vec<HostPattern>,
    pub ports: Vec<u16>,
}

/// Compiled MCP condition.
#[derive(Debug)]
pub struct CMcp {
    pub methods: Vec<CMethod>,
    pub base: bool,
}

/// One MCP method (or category) with its optional allow-list of names / URIs.
#[derive(Debug)]
pub struct CMethod {
    pub name: String,
    pub params: Option<HashSet<String>>,
}

/// Compiled path match.
#[derive(Debug)]
pub enum CPath {
    Exact(String),
    Prefix(String),
    Regex(regex_lite::Regex),
}

/// Compiled header match.
#[derive(Debug)]
pub struct CHeader {
    pub name: String,
    pub value: CValue,
}

/// Compiled value match.
#[derive(Debug)]
pub enum CValue {
    Exact(String),
    Regex(regex_lite::Regex),
}

/// A hostname, possibly `*.suffix`, in canonical form (see [`mcp_access_bundle::host`]).
#[derive(Debug, Clone)]
pub struct HostPattern(String);

impl HostPattern {
    pub fn new(pattern: &str) -> Self {
        HostPattern(mcp_access_bundle::host::canonical_pattern(pattern))
    }

    /// `host` must already be canonical ([`Request::host`]).
    pub fn matches(&self, host: &str) -> bool {
        mcp_access_bundle::host::host_matches(&self.0, host)
    }

    /// Exact hostnames rank above wildcards, wildcards above none.
    pub fn specificity(&self) -> usize {
        match self.0.strip_prefix('*') {
            Some(suffix) => 2 * suffix.len(),
            None => 2 * self.0.len() + 1,
        }
    }
}

/// Which way a difference between the copies of a repeated header is resolved: always
/// against the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An Allow rule: a header condition holds only when every copy matches.
    Admit,
    /// A Deny rule or an ExternalAuth selection: a header condition holds when any copy matches.
    Select,
}

/// Anchors a pattern so that it must match the whole value.
pub fn full_regex(pattern: &str) -> Result<regex_lite::Regex, String> {
    regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

pub fn compile_rule(
    rule: &Rule,
    policy_ns: &str,
    trust_domain: Option<&str>,
) -> Result<CRule, String> {
    Ok(CRule {
        name: rule.name.clone(),
        source: match &rule.source {
            None => CSource::Any,
            Some(s) => compile_source(s, policy_ns, trust_domain)?,
        },
        authz: rule.authorization.as_ref().map(compile_authz).transpose()?,
    })
}

fn compile_source(s: &Source, policy_ns: &str, td: Option<&str>) -> Result<CSource, String> {
    Ok(match s.kind {
        SourceType::Any => CSource::Any,
        SourceType::Spiffe => CSource::Spiffe(s.spiffe.clone().ok_or("spiffe is required")?),
        SourceType::ServiceAccount => {
            let sa = s
                .service_account
                .as_ref()
                .ok_or("serviceAccount is required")?;
            let td = td.ok_or("identity.trustDomain is required for ServiceAccount sources")?;
            let ns = sa.namespace.as_deref().unwrap_or(policy_ns);
            CSource::Spiffe(format!("spiffe://{td}/ns/{ns}/sa/{}", sa.name))
        }
        SourceType::Jwt => {
            let JwtSource {
                issuer,
                subject,
                claims,
            } = s.jwt.clone().ok_or("jwt is required")?;
            CSource::Jwt {
                issuer,
                subject,
                claims: claims.into_iter().map(|c| (c.name, c.values)).collect(),
            }
        }
    })
}

fn compile_authz(a: &Authorization) -> Result<CAuthz, String> {
    let paths = a
        .paths
        .iter()
        .map(|p| {
            Ok(match p.kind {
                MatchType::Exact => CPath::Exact(p.value.clone()),
                MatchType::PathPrefix => CPath::Prefix(p.value.clone()),
                MatchType::RegularExpression => CPath::Regex(full_regex(&p.value)?),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let headers = a
        .headers
        .iter()
        .map(|h| {
            Ok(CHeader {
                name: h.name.to_ascii_lowercase(),
                value: match h.kind {
                    MatchType::RegularExpression => CValue::Regex(full_regex(&h.value)?),
                    _ => CValue::Exact(h.value.clone()),
                },
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(CAuthz {
        mcp: a.mcp.as_ref().map(compile_mcp),
        methods: a.methods.clone(),
        paths,
        headers,
        hosts: a.hosts.iter().map(|h| HostPattern::new(h)).collect(),
        ports: a.ports.clone(),
    })
}

fn compile_mcp(m: &McpMatch) -> CMcp {
    CMcp {
        methods: m
            .methods
            .iter()
            .map(|x| CMethod {
                name: x.name.clone(),
                params: x.params.as_ref().map(|p| p.iter().cloned().collect()),
            })
            .collect(),
        base: m.base_protocol == BaseProtocol::Match,
    }
}

impl CRule {
    /// Source AND authorization, repeated headers resolved per `mode`.
    pub fn admits(&self, req: &Request, host: &str, mode: Mode) -> bool {
        self.source.matches(&req.caller)
            && self
                .authz
                .as_ref()
                .is_none_or(|a| a.matches(req, host, mode))
    }

    /// For indexing: `(method, params)` pairs when every MCP method of this rule names params.
    pub fn keyed_calls(&self) -> Option<Vec<(&str, &HashSet<String>)>> {
        let mcp = self.authz.as_ref()?.mcp.as_ref()?;
        if mcp.methods.is_empty() {
            return None;
        }
        mcp.methods
            .iter()
            .map(|m| m.params.as_ref().map(|p| (m.name.as_str(), p)))
            .collect()
    }

    /// Whether this rule can admit base-protocol traffic.
    pub fn may_admit_base(&self) -> bool {
        self.authz
            .as_ref()
            .and_then(|a| a.mcp.as_ref())
            .is_none_or(|m| m.base)
    }
}

impl CSource {
    pub fn matches(&self, caller: &Caller) -> bool {
        match self {
            CSource::Any => true,
            CSource::Spiffe(id) => caller.spiffe.as_deref() == Some(id.as_str()),
            CSource::Jwt {
                issuer,
                subject,
                claims,
            } => caller.jwts.iter().any(|j| {
                &j.issuer == issuer
                    && subject
                        .as_ref()
                        .is_none_or(|s| j.subject.as_deref() == Some(s.as_str()))
                    && claims.iter().all(|(name, values)| {
                        j.claims
                            .iter()
                            .find(|(n, _)| n == name)
                            .is_some_and(|(_, v)| values.iter().any(|x| v.matches(x)))
                    })
            }),
        }
    }
}

impl CAuthz {
    fn matches(&self, req: &Request, host: &str, mode: Mode) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m == &req.method))
            && (self.ports.is_empty() || self.ports.contains(&req.port))
            && (self.hosts.is_empty() || self.hosts.iter().any(|h| h.matches(host)))
            && (self.paths.is_empty() || self.paths.iter().any(|p| p.matches(&req.canonical_path)))
            && self.headers.iter().all(|h| h.matches(req, mode))
            && self.mcp.as_ref().is_none_or(|m| m.matches(&req.mcp))
    }
}

impl CHeader {
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

impl CPath {
    fn matches(&self, path: &str) -> bool {
        match self {
            CPath::Exact(p) => p == path,
            CPath::Prefix(p) => path_prefix_matches(p, path),
            CPath::Regex(r) => r.is_match(path),
        }
    }
}

/// Gateway API PathPrefix: matches whole path segments.
pub fn path_prefix_matches(prefix: &str, path: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

impl CValue {
    fn matches(&self, v: &str) -> bool {
        match self {
            CValue::Exact(x) => x == v,
            CValue::Regex(r) => r.is_match(v),
        }
    }
}

impl CMcp {
    fn matches(&self, op: &McpOp) -> bool {
        if self.base && op.is_base() {
            return true;
        }
        // An mcp block admits only what it lists (none: only the base protocol, with Match).
        let McpOp::Call { method, param } = op else {
            return false;
        };
        self.methods
            .iter()
            .any(|m| m.matches(method, param.as_deref()))
    }
}

impl CMethod {
    fn matches(&self, method: &str, param: Option<&str>) -> bool {
        let name_ok = match self.name.as_str() {
            cat @ ("tools" | "prompts" | "resources") => method
                .strip_prefix(cat)
                .is_some_and(|rest| rest.starts_with('/')),
            exact => exact == method,
        };
        name_ok
            && match &self.params {
                None => true,
                Some(allowed) => param.is_some_and(|p| allowed.contains(p)),
            }
    }
}
