//! What an expression reads: the [`Attr`]ibutes, by their CEL names, and the [`Attributes`]
//! port through which an evaluation reads them.

use crate::value::{show, Ty, Value};
use crate::{fail, EvalError};

/// The attributes of what an expression is evaluated against, read as the expression needs
/// them. The engine implements it for a request, [`crate::SelfCondition`] for a policy's
/// `self`.
///
/// Each value borrows from `self` (no copy of a string, header list or JSON document): a
/// string attribute is a [`Value::Str`], `request.port` an [`Value::Int`], `request.headers`
/// [`Value::Headers`], `request.time` [`Value::Time`], `request.mcp.params`, `jwt.claims` and
/// `self` a [`Value::Json`] (or [`Value::empty_map`]). The meaning of each attribute is in
/// docs/semantics.md, "CEL"; [`service_account`] is the rule for `source.service_account`.
pub trait Attributes {
    /// The value of `a`; None when it is absent (the evaluation errs, saying why).
    fn attr(&self, a: Attr) -> Option<Value<'_>>;

    /// `a` if it is a string that can be borrowed as is: the fast path of string tests
    /// (`request.mcp.tool_name == 'x'`), which then build no [`Value`]. None sends the
    /// evaluator to [`Attributes::attr`] (always, by default).
    #[inline]
    fn text(&self, a: Attr) -> Option<&str> {
        let _ = a;
        None
    }
}

/// A request attribute an expression can read (docs/semantics.md, "CEL").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attr {
    Path,
    UrlPath,
    Method,
    Host,
    Hostname,
    Port,
    Route,
    Backend,
    Headers,
    Time,
    ToolName,
    McpMethod,
    McpName,
    McpUri,
    McpParams,
    /// `request.mcp.tool.annotations`: the called tool's annotations as its ToolPin states
    /// them (never the server's).
    ToolAnnotations,
    Principal,
    SaNamespace,
    SaName,
    JwtClaims,
    /// `self`: the value a compile-time condition is evaluated against ([`SelfCondition`]);
    /// never a request attribute.
    SelfValue,
}

/// Every variable, by its CEL name.
pub(crate) const ATTRS: &[(&str, Attr)] = &[
    ("request.path", Attr::Path),
    ("request.url_path", Attr::UrlPath),
    ("request.method", Attr::Method),
    ("request.host", Attr::Host),
    ("request.hostname", Attr::Hostname),
    ("request.port", Attr::Port),
    ("request.route", Attr::Route),
    ("request.backend", Attr::Backend),
    ("request.headers", Attr::Headers),
    ("request.time", Attr::Time),
    ("request.mcp.tool_name", Attr::ToolName),
    ("request.mcp.method", Attr::McpMethod),
    ("request.mcp.name", Attr::McpName),
    ("request.mcp.uri", Attr::McpUri),
    ("request.mcp.params", Attr::McpParams),
    ("request.mcp.tool.annotations", Attr::ToolAnnotations),
    ("source.principal", Attr::Principal),
    ("source.service_account.namespace", Attr::SaNamespace),
    ("source.service_account.name", Attr::SaName),
    ("jwt.claims", Attr::JwtClaims),
];

/// The names of the variables an expression may read (for suggestions in messages).
pub fn variable_names() -> Vec<&'static str> {
    ATTRS.iter().map(|(n, _)| *n).collect()
}

impl Attr {
    /// The CEL name.
    pub fn name(self) -> &'static str {
        if self == Attr::SelfValue {
            return "self";
        }
        ATTRS
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("?", |(n, _)| n)
    }

    pub(crate) fn ty(self) -> Ty {
        match self {
            Attr::Port => Ty::Int,
            Attr::Headers | Attr::McpParams | Attr::ToolAnnotations | Attr::JwtClaims => Ty::Map,
            Attr::SelfValue => Ty::Dyn,
            Attr::Time => Ty::Time,
            _ => Ty::Str,
        }
    }
}

/// The namespace and name of the ServiceAccount a SPIFFE ID names
/// (`spiffe://<trust domain>/ns/<namespace>/sa/<name>`): `source.service_account.namespace`
/// and `.name`. None when the ID has another form, or when `trust_domain` is set and differs.
pub fn service_account<'a>(
    spiffe: &'a str,
    trust_domain: Option<&str>,
) -> Option<(&'a str, &'a str)> {
    let rest = spiffe.strip_prefix("spiffe://")?;
    let (td, path) = rest.split_once('/')?;
    let (ns, name) = path.strip_prefix("ns/")?.split_once("/sa/")?;
    let td_ok = trust_domain.is_none_or(|t| t == td);
    (td_ok && !ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
}

/// The value of `a`, or the error an expression reading it meets.
#[inline]
pub(crate) fn read<'a, A: Attributes + ?Sized>(
    a: Attr,
    input: &'a A,
) -> Result<Value<'a>, EvalError> {
    match input.attr(a) {
        Some(v) => Ok(v),
        None => fail(absent(a, input)),
    }
}

/// Why `a` has no value.
#[cold]
fn absent<A: Attributes + ?Sized>(a: Attr, input: &A) -> String {
    let text = |a: Attr| match input.attr(a) {
        Some(Value::Str(s)) => Some(s.as_str().to_string()),
        _ => None,
    };
    let method = text(Attr::McpMethod);
    match a {
        Attr::Route => "request.route is absent: Envoy selected no route".into(),
        Attr::Backend => "request.backend is absent: the route leads to no known backend".into(),
        Attr::Time => "request.time is not available".into(),
        Attr::ToolName => match method {
            Some(m) => format!("request.mcp.tool_name is absent: the request is {m}"),
            None => "request.mcp.tool_name is absent: not an MCP request".into(),
        },
        Attr::McpMethod => "request.mcp.method is absent: not an MCP request".into(),
        Attr::McpName | Attr::McpUri => match method {
            Some(m) => format!("{} is absent: the request is {m}", a.name()),
            None => "the request is not an MCP request or notification".into(),
        },
        Attr::McpParams => "request.mcp.params is absent: not an MCP request".into(),
        Attr::ToolAnnotations => match method {
            Some(m) if m == "tools/call" => {
                "request.mcp.tool.annotations is absent: the backend has no ToolPin".into()
            }
            Some(m) => format!("request.mcp.tool.annotations is absent: the request is {m}"),
            None => "request.mcp.tool.annotations is absent: not an MCP request".into(),
        },
        Attr::SelfValue => "self is not bound".into(),
        Attr::Principal => "source.principal is absent: the caller has no SPIFFE identity".into(),
        Attr::SaNamespace | Attr::SaName => match text(Attr::Principal) {
            Some(id) => format!("the caller {id} is not a ServiceAccount of the trust domain"),
            None => "the caller has no SPIFFE identity".into(),
        },
        _ => format!("{} is absent", a.name()),
    }
}

/// What `input` has for `a`, as `explain` shows it: CEL-like text, or `<why it is absent>`.
pub fn shown<A: Attributes + ?Sized>(a: Attr, input: &A) -> String {
    match read(a, input) {
        Ok(v) => show(&v),
        Err(e) => format!("<{e}>"),
    }
}
