//! Evaluation of a compiled [`Program`]: dynamic values, a step budget, and errors as values
//! (CEL's `&&` / `||` absorb an error when the other side decides).

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use mcp_access_bundle::mcp_methods::{self, Param};

use super::{Attr, BinOp, Comp, Func, Node, Program, StrOp, TimePart};
use crate::request::{McpOp, Request};

/// Largest string or list an evaluation may build.
const MAX_BUILT: usize = 1 << 20;

/// What an expression is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub req: &'a Request,
    /// The canonical host (`request.hostname`).
    pub host: &'a str,
    /// `namespace/name` of the backend Envoy routed the request to (`request.backend`).
    pub backend: Option<&'a str>,
    /// The bundle's trust domain (`source.service_account` needs it to match, when set).
    pub trust_domain: Option<&'a str>,
    /// `self` of a compile-time condition ([`super::SelfCondition`]); None for requests.
    pub this: Option<&'a serde_json::Value>,
}

/// Why an evaluation has no boolean result (it counts against the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    pub message: String,
    /// The step budget ran out.
    pub budget: bool,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn fail<T>(message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError {
        message: message.into(),
        budget: false,
    })
}

/// A string: borrowed from the request or shared.
#[derive(Debug, Clone)]
pub(crate) enum Str<'a> {
    Borrowed(&'a str),
    Shared(Arc<str>),
}

impl Str<'_> {
    fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Shared(s) => s,
        }
    }
}

/// A value.
#[derive(Debug, Clone)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Str<'a>),
    Bytes(Arc<[u8]>),
    List(Arc<Vec<Value<'a>>>),
    Map(Arc<Vec<(Value<'a>, Value<'a>)>>),
    /// JSON from the request (MCP params, JWT claims), converted as it is read.
    Json(&'a serde_json::Value),
    /// Request headers, names lowercase (a repeated header cannot be read).
    Headers(&'a [(String, String)]),
    /// Nanoseconds since the Unix epoch.
    Time(i64),
    /// Nanoseconds.
    Duration(i64),
}

impl<'a> Value<'a> {
    fn s(s: String) -> Value<'a> {
        Value::Str(Str::Shared(Arc::from(s)))
    }

    fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) | Value::Headers(_) => "map",
            Value::Json(j) => match j {
                serde_json::Value::Array(_) => "list",
                serde_json::Value::Object(_) => "map",
                _ => "json",
            },
            Value::Time(_) => "timestamp",
            Value::Duration(_) => "duration",
        }
    }

    /// JSON scalars become plain values; arrays and objects stay JSON.
    fn norm(self) -> Value<'a> {
        match self {
            Value::Json(j) => json_scalar(j).unwrap_or(Value::Json(j)),
            v => v,
        }
    }
}

fn json_scalar(j: &serde_json::Value) -> Option<Value<'_>> {
    Some(match j {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::Uint(u),
            _ => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(Str::Borrowed(s)),
        _ => return None,
    })
}

/// A value for display (explain): CEL-like text.
pub(crate) fn show(v: &Value<'_>) -> String {
    let mut out = String::new();
    show_into(v, &mut out, 0);
    out
}

fn show_into(v: &Value<'_>, out: &mut String, depth: usize) {
    use std::fmt::Write;
    if depth > 8 || out.len() > 4096 {
        out.push('…');
        return;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Uint(u) => {
            let _ = write!(out, "{u}u");
        }
        Value::Double(d) => {
            let _ = write!(out, "{d:?}");
        }
        Value::Str(s) => {
            let _ = write!(out, "{:?}", s.as_str());
        }
        Value::Bytes(b) => {
            let _ = write!(out, "b{:?}", String::from_utf8_lossy(b));
        }
        Value::List(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                show_into(x, out, depth + 1);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, x)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                show_into(k, out, depth + 1);
                out.push_str(": ");
                show_into(x, out, depth + 1);
            }
            out.push('}');
        }
        Value::Json(j) => {
            let _ = write!(out, "{j}");
        }
        Value::Headers(h) => {
            out.push('{');
            for (i, (k, x)) in h.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{k:?}: {x:?}");
            }
            out.push('}');
        }
        Value::Time(t) => {
            let _ = write!(out, "timestamp({:?})", format_time(*t));
        }
        Value::Duration(d) => {
            let _ = write!(out, "duration(\"{}s\")", *d as f64 / 1e9);
        }
    }
}

/// One evaluation; program literals and request attributes are both borrowed for `'a`.
struct Eval<'a> {
    input: Input<'a>,
    locals: Vec<Value<'a>>,
    steps: u32,
}

#[inline]
pub(super) fn run<'a>(p: &'a Program, input: &Input<'a>) -> Result<bool, EvalError> {
    let mut e = Eval {
        input: *input,
        locals: if p.locals == 0 {
            Vec::new()
        } else {
            vec![Value::Null; p.locals]
        },
        steps: p.max_steps,
    };
    match e.bool_of(&p.root) {
        Err(err) if err.message.starts_with("expected bool, got ") => fail(format!(
            "the condition is {}, not a boolean",
            err.message.trim_start_matches("expected bool, got ")
        )),
        other => other,
    }
}

/// A string attribute that needs no allocation, without building a value; None for the
/// others and for an absent attribute ([`attr_value`] then says why).
fn attr_str<'a>(a: Attr, input: &Input<'a>) -> Option<&'a str> {
    let req = input.req;
    let call = || match &req.mcp {
        McpOp::Call { method, param } => Some((method.as_str(), param.as_deref())),
        _ => None,
    };
    match a {
        Attr::UrlPath => Some(&req.canonical_path),
        Attr::Path if !req.path.contains('?') => Some(&req.canonical_path),
        Attr::Method => Some(&req.method),
        Attr::Host => Some(&req.authority),
        Attr::Hostname => Some(input.host),
        Attr::Route => req.route_name.as_deref(),
        Attr::Backend => input.backend,
        Attr::ToolName => match call()? {
            ("tools/call", p) => p,
            _ => None,
        },
        Attr::McpMethod => call().map(|(m, _)| m),
        Attr::Principal => req.caller.spiffe.as_deref(),
        _ => None,
    }
}

/// The value of an attribute for `input` (explain shows what an expression read).
pub(crate) fn attr_value<'a>(a: Attr, input: &Input<'a>) -> Result<Value<'a>, EvalError> {
    let req = input.req;
    let call = || match &req.mcp {
        McpOp::Call { method, param } => Some((method.as_str(), param.as_deref())),
        _ => None,
    };
    let param_of = |want: Param| -> Result<Value<'a>, EvalError> {
        match call() {
            Some((m, Some(p))) if mcp_methods::param_of(m) == Some(want) => {
                Ok(Value::Str(Str::Borrowed(p)))
            }
            Some((m, _)) => fail(format!(
                "{} is absent: the request is {m}",
                if want == Param::Name {
                    "request.mcp.name"
                } else {
                    "request.mcp.uri"
                }
            )),
            None => fail("the request is not an MCP request or notification"),
        }
    };
    Ok(match a {
        Attr::UrlPath => Value::Str(Str::Borrowed(&req.canonical_path)),
        Attr::Path => match req.path.split_once('?') {
            Some((_, q)) => Value::s(format!("{}?{q}", req.canonical_path)),
            None => Value::Str(Str::Borrowed(&req.canonical_path)),
        },
        Attr::Method => Value::Str(Str::Borrowed(&req.method)),
        Attr::Host => Value::Str(Str::Borrowed(&req.authority)),
        Attr::Hostname => Value::Str(Str::Borrowed(input.host)),
        Attr::Port => Value::Int(i64::from(req.port)),
        Attr::Route => match &req.route_name {
            Some(r) => Value::Str(Str::Borrowed(r)),
            None => return fail("request.route is absent: Envoy selected no route"),
        },
        Attr::Backend => match input.backend {
            Some(b) => Value::Str(Str::Borrowed(b)),
            None => return fail("request.backend is absent: the route leads to no known backend"),
        },
        Attr::Headers => Value::Headers(&req.headers),
        Attr::Time => match req.time {
            Some(t) => Value::Time(t),
            None => return fail("request.time is not available"),
        },
        Attr::ToolName => match call() {
            Some(("tools/call", Some(p))) => Value::Str(Str::Borrowed(p)),
            Some((m, _)) => {
                return fail(format!(
                    "request.mcp.tool_name is absent: the request is {m}"
                ))
            }
            None => return fail("request.mcp.tool_name is absent: not an MCP request"),
        },
        Attr::McpMethod => match call() {
            Some((m, _)) => Value::Str(Str::Borrowed(m)),
            None => return fail("request.mcp.method is absent: not an MCP request"),
        },
        Attr::McpName => param_of(Param::Name)?,
        Attr::McpUri => param_of(Param::Uri)?,
        Attr::McpParams => match (call(), &req.params) {
            (None, _) => return fail("request.mcp.params is absent: not an MCP request"),
            (Some(_), Some(p)) => Value::Json(p),
            (Some(_), None) => Value::Map(Arc::new(Vec::new())),
        },
        Attr::SelfValue => match input.this {
            Some(v) => Value::Json(v),
            None => return fail("self is not bound"),
        },
        Attr::Principal => match &req.caller.spiffe {
            Some(s) => Value::Str(Str::Borrowed(s)),
            None => return fail("source.principal is absent: the caller has no SPIFFE identity"),
        },
        Attr::SaNamespace | Attr::SaName => {
            let Some(id) = req.caller.spiffe.as_deref() else {
                return fail("the caller has no SPIFFE identity");
            };
            let sa = id.strip_prefix("spiffe://").and_then(|rest| {
                let (td, path) = rest.split_once('/')?;
                let (ns, name) = path.strip_prefix("ns/")?.split_once("/sa/")?;
                let td_ok = input.trust_domain.is_none_or(|t| t == td);
                (td_ok && !ns.is_empty() && !name.is_empty() && !name.contains('/'))
                    .then_some((ns, name))
            });
            match sa {
                Some((ns, name)) => Value::Str(Str::Borrowed(if a == Attr::SaNamespace {
                    ns
                } else {
                    name
                })),
                None => {
                    return fail(format!(
                        "the caller {id} is not a ServiceAccount of the trust domain"
                    ))
                }
            }
        }
        Attr::JwtClaims => match req.caller.jwts.iter().find_map(|j| j.payload.as_ref()) {
            Some(p) => Value::Json(p),
            None => Value::Map(Arc::new(Vec::new())),
        },
    })
}

impl<'a> Eval<'a> {
    fn tick(&mut self, n: usize) -> Result<(), EvalError> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        match self.steps.checked_sub(n) {
            Some(left) => {
                self.steps = left;
                Ok(())
            }
            None => {
                self.steps = 0;
                Err(EvalError {
                    message: "evaluation exceeded limits.cel.maxSteps".into(),
                    budget: true,
                })
            }
        }
    }

    /// A string attribute that [`attr_str`] cannot borrow (or that is absent: the error).
    #[cold]
    fn attr_text(&self, a: Attr) -> Result<Str<'a>, EvalError> {
        match attr_value(a, &self.input)? {
            Value::Str(s) => Ok(s),
            other => fail(format!("expected string, got {}", other.type_name())),
        }
    }

    /// A boolean; the logical operators and string tests of attributes without building values.
    fn bool_of(&mut self, n: &'a Node) -> Result<bool, EvalError> {
        match n {
            Node::And(x, y) | Node::Or(x, y) => {
                self.tick(1)?;
                let and = matches!(n, Node::And(..));
                let left = self.bool_of(x);
                if left == Ok(!and) {
                    return Ok(!and);
                }
                if matches!(&left, Err(e) if e.budget) {
                    return left;
                }
                let right = self.bool_of(y);
                match (left, right) {
                    (_, Ok(r)) if r != and => Ok(!and),
                    (Ok(_), Ok(_)) => Ok(and),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            Node::StrTest { attr, op, lit } => {
                self.tick(1)?;
                let owned;
                let s = match attr_str(*attr, &self.input) {
                    Some(s) => s,
                    None => {
                        owned = self.attr_text(*attr)?;
                        owned.as_str()
                    }
                };
                let lit = &**lit;
                self.tick(s.len() / 64)?;
                Ok(match op {
                    StrOp::Eq => s == lit,
                    StrOp::Ne => s != lit,
                    StrOp::StartsWith => s.starts_with(lit),
                    StrOp::EndsWith => s.ends_with(lit),
                    StrOp::Contains => s.contains(lit),
                })
            }
            Node::StrIn(attr, set) => {
                self.tick(1 + set.len())?;
                let owned;
                let s = match attr_str(*attr, &self.input) {
                    Some(s) => s,
                    None => {
                        owned = self.attr_text(*attr)?;
                        owned.as_str()
                    }
                };
                Ok(set.iter().any(|x| **x == *s))
            }
            _ => match self.eval(n)?.norm() {
                Value::Bool(b) => Ok(b),
                v => fail(format!("expected bool, got {}", v.type_name())),
            },
        }
    }

    fn eval(&mut self, n: &'a Node) -> Result<Value<'a>, EvalError> {
        self.tick(1)?;
        match n {
            Node::Lit(v) => Ok(lit(v)),
            Node::Attr(a) => attr_value(*a, &self.input),
            Node::HasAttr(a) => Ok(Value::Bool(attr_value(*a, &self.input).is_ok())),
            Node::Local(i) => self.locals.get(*i).cloned().ok_or_else(|| EvalError {
                message: "internal: unbound variable".into(),
                budget: false,
            }),
            Node::TakeLocal(i) => match self.locals.get_mut(*i) {
                Some(v) => Ok(std::mem::replace(v, Value::Null)),
                None => fail("internal: unbound accumulator"),
            },
            Node::Field(x, f) => {
                let v = self.eval(x)?;
                match lookup(&v, &Value::Str(Str::Borrowed(f)))? {
                    Some(found) => Ok(found),
                    None => fail(format!("no such key: {f}")),
                }
            }
            Node::HasField(x, f) => {
                let v = self.eval(x)?;
                Ok(Value::Bool(has_key(&v, f)?))
            }
            Node::Index(x, k) => {
                let v = self.eval(x)?;
                let k = self.eval(k)?.norm();
                index(&v, &k)
            }
            Node::Not(x) => Ok(Value::Bool(!self.bool_of(x)?)),
            Node::Neg(x) => match self.eval(x)?.norm() {
                Value::Int(i) => i.checked_neg().map(Value::Int).ok_or_else(overflow),
                Value::Double(d) => Ok(Value::Double(-d)),
                v => fail(format!("cannot negate {}", v.type_name())),
            },
            Node::And(..) | Node::Or(..) | Node::StrTest { .. } | Node::StrIn(..) => {
                self.bool_of(n).map(Value::Bool)
            }
            Node::NotStrictlyFalse(x) => match self.bool_of(x) {
                Ok(b) => Ok(Value::Bool(b)),
                Err(e) if e.budget => Err(e),
                Err(_) => Ok(Value::Bool(true)),
            },
            Node::Cond(c, a, b) => {
                if self.bool_of(c)? {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Node::Bin(op, x, y) => {
                let a = self.eval(x)?.norm();
                let b = self.eval(y)?.norm();
                self.binary(*op, a, b)
            }
            Node::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    out.push(self.eval(i)?);
                }
                Ok(Value::List(Arc::new(out)))
            }
            Node::Map(entries) => {
                let mut out: Vec<(Value<'a>, Value<'a>)> = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    let k = self.eval(k)?.norm();
                    if !matches!(
                        k,
                        Value::Str(_) | Value::Int(_) | Value::Uint(_) | Value::Bool(_)
                    ) {
                        return fail(format!("a map key cannot be {}", k.type_name()));
                    }
                    let v = self.eval(v)?;
                    if out.iter().any(|(x, _)| equal(x, &k).unwrap_or(false)) {
                        return fail("duplicate map key");
                    }
                    out.push((k, v));
                }
                Ok(Value::Map(Arc::new(out)))
            }
            Node::Call(f, args) => {
                // At most a target and three arguments (checked at load): no allocation.
                let mut vals: [Option<Value<'a>>; 4] = [None, None, None, None];
                for (slot, a) in vals.iter_mut().zip(args) {
                    *slot = Some(self.eval(a)?.norm());
                }
                self.call(*f, vals)
            }
            Node::Matches {
                subject,
                re,
                weight,
            } => match self.eval(subject)?.norm() {
                Value::Str(s) => {
                    self.tick(s.as_str().len().saturating_mul(*weight) / 256)?;
                    Ok(Value::Bool(re.is_match(s.as_str())))
                }
                v => fail(format!("matches needs a string, got {}", v.type_name())),
            },
            Node::Comp(c) => self.comprehension(c),
        }
    }

    fn comprehension(&mut self, c: &'a Comp) -> Result<Value<'a>, EvalError> {
        let range = self.eval(&c.range)?.norm();
        let items: Vec<Value<'a>> = match &range {
            Value::List(l) => l.iter().cloned().collect(),
            Value::Map(m) => m.iter().map(|(k, _)| k.clone()).collect(),
            Value::Json(serde_json::Value::Array(a)) => a.iter().map(Value::Json).collect(),
            Value::Json(serde_json::Value::Object(o)) => {
                o.keys().map(|k| Value::Str(Str::Borrowed(k))).collect()
            }
            Value::Headers(h) => {
                let mut names: Vec<Value<'a>> = Vec::new();
                for (i, (n, _)) in h.iter().enumerate() {
                    if !h.iter().take(i).any(|(m, _)| m == n) {
                        names.push(Value::Str(Str::Borrowed(n)));
                    }
                }
                names
            }
            v => {
                return fail(format!(
                    "a macro needs a list or map, got {}",
                    v.type_name()
                ))
            }
        };
        let init = self.eval(&c.init)?;
        self.set(c.accu, init)?;
        for item in items {
            self.tick(1)?;
            self.set(c.iter, item)?;
            if !self.bool_of(&c.cond)? {
                break;
            }
            let next = self.eval(&c.step)?;
            self.set(c.accu, next)?;
        }
        self.eval(&c.result)
    }

    fn set(&mut self, slot: usize, v: Value<'a>) -> Result<(), EvalError> {
        match self.locals.get_mut(slot) {
            Some(s) => {
                *s = v;
                Ok(())
            }
            None => fail("internal: no such slot"),
        }
    }

    fn binary(&mut self, op: BinOp, a: Value<'a>, b: Value<'a>) -> Result<Value<'a>, EvalError> {
        use Value::*;
        Ok(match op {
            BinOp::Eq => Bool(equal(&a, &b)?),
            BinOp::Ne => Bool(!equal(&a, &b)?),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let o = order(&a, &b)?;
                Bool(match op {
                    BinOp::Lt => o == Ordering::Less,
                    BinOp::Le => o != Ordering::Greater,
                    BinOp::Gt => o == Ordering::Greater,
                    _ => o != Ordering::Less,
                })
            }
            BinOp::In => Bool(contains(&b, &a, self)?),
            BinOp::Add => match (a, b) {
                (Int(x), Int(y)) => Int(x.checked_add(y).ok_or_else(overflow)?),
                (Uint(x), Uint(y)) => Uint(x.checked_add(y).ok_or_else(overflow)?),
                (Double(x), Double(y)) => Double(x + y),
                (Str(x), Str(y)) => {
                    let len = x.as_str().len() + y.as_str().len();
                    self.built(len)?;
                    let mut s = String::with_capacity(len);
                    s.push_str(x.as_str());
                    s.push_str(y.as_str());
                    Value::s(s)
                }
                (Bytes(x), Bytes(y)) => {
                    self.built(x.len() + y.len())?;
                    Bytes(x.iter().chain(y.iter()).copied().collect())
                }
                (List(mut x), y) => {
                    let extra = list_items(&y)?;
                    self.built(x.len() + extra.len())?;
                    Arc::make_mut(&mut x).extend(extra);
                    List(x)
                }
                (Json(serde_json::Value::Array(x)), y) => {
                    let mut items: Vec<Value<'a>> = x.iter().map(Json).collect();
                    let extra = list_items(&y)?;
                    self.built(items.len() + extra.len())?;
                    items.extend(extra);
                    List(Arc::new(items))
                }
                (Time(t), Duration(d)) | (Duration(d), Time(t)) => {
                    Time(t.checked_add(d).ok_or_else(overflow)?)
                }
                (Duration(x), Duration(y)) => Duration(x.checked_add(y).ok_or_else(overflow)?),
                (x, y) => return no_op("+", &x, &y),
            },
            BinOp::Sub => match (a, b) {
                (Int(x), Int(y)) => Int(x.checked_sub(y).ok_or_else(overflow)?),
                (Uint(x), Uint(y)) => Uint(x.checked_sub(y).ok_or_else(overflow)?),
                (Double(x), Double(y)) => Double(x - y),
                (Time(t), Duration(d)) => Time(t.checked_sub(d).ok_or_else(overflow)?),
                (Time(x), Time(y)) => Duration(x.checked_sub(y).ok_or_else(overflow)?),
                (Duration(x), Duration(y)) => Duration(x.checked_sub(y).ok_or_else(overflow)?),
                (x, y) => return no_op("-", &x, &y),
            },
            BinOp::Mul => match (a, b) {
                (Int(x), Int(y)) => Int(x.checked_mul(y).ok_or_else(overflow)?),
                (Uint(x), Uint(y)) => Uint(x.checked_mul(y).ok_or_else(overflow)?),
                (Double(x), Double(y)) => Double(x * y),
                (x, y) => return no_op("*", &x, &y),
            },
            BinOp::Div => match (a, b) {
                (Int(_), Int(0)) | (Uint(_), Uint(0)) => return fail("division by zero"),
                (Int(x), Int(y)) => Int(x.checked_div(y).ok_or_else(overflow)?),
                (Uint(x), Uint(y)) => Uint(x.checked_div(y).ok_or_else(overflow)?),
                (Double(x), Double(y)) => Double(x / y),
                (x, y) => return no_op("/", &x, &y),
            },
            BinOp::Rem => match (a, b) {
                (Int(_), Int(0)) | (Uint(_), Uint(0)) => return fail("modulus by zero"),
                (Int(x), Int(y)) => Int(x.checked_rem(y).ok_or_else(overflow)?),
                (Uint(x), Uint(y)) => Uint(x.checked_rem(y).ok_or_else(overflow)?),
                (x, y) => return no_op("%", &x, &y),
            },
        })
    }

    /// Charges for building something of `len` bytes or elements; refuses huge results.
    fn built(&mut self, len: usize) -> Result<(), EvalError> {
        if len > MAX_BUILT {
            return fail("a string or list built by the expression would be larger than 1 MiB");
        }
        self.tick(len / 64)
    }

    fn call(&mut self, f: Func, args: [Option<Value<'a>>; 4]) -> Result<Value<'a>, EvalError> {
        let [a, b, c, d] = args;
        let text_len = |v: &Option<Value<'_>>| match v {
            Some(Value::Str(s)) => s.as_str().len(),
            _ => 0,
        };
        self.tick((text_len(&a) + text_len(&b)) / 64)?;
        let s = |v: &Option<Value<'a>>| -> Result<Str<'a>, EvalError> {
            match v {
                Some(Value::Str(s)) => Ok(s.clone()),
                Some(v) => fail(format!("expected string, got {}", v.type_name())),
                None => fail("missing argument"),
            }
        };
        let int = |v: &Option<Value<'a>>| -> Result<i64, EvalError> {
            match v {
                Some(Value::Int(i)) => Ok(*i),
                Some(v) => fail(format!("expected int, got {}", v.type_name())),
                None => fail("missing argument"),
            }
        };
        Ok(match f {
            Func::Size => {
                let n = match &a {
                    Some(Value::Str(x)) => x.as_str().chars().count(),
                    Some(Value::Bytes(x)) => x.len(),
                    Some(Value::List(x)) => x.len(),
                    Some(Value::Map(x)) => x.len(),
                    Some(Value::Json(serde_json::Value::Array(x))) => x.len(),
                    Some(Value::Json(serde_json::Value::Object(x))) => x.len(),
                    Some(Value::Headers(h)) => {
                        let mut n = 0;
                        for (i, (name, _)) in h.iter().enumerate() {
                            if !h.iter().take(i).any(|(m, _)| m == name) {
                                n += 1;
                            }
                        }
                        n
                    }
                    Some(v) => return fail(format!("size() of {}", v.type_name())),
                    None => return fail("missing argument"),
                };
                Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
            }
            Func::StartsWith => Value::Bool(s(&a)?.as_str().starts_with(s(&b)?.as_str())),
            Func::EndsWith => Value::Bool(s(&a)?.as_str().ends_with(s(&b)?.as_str())),
            Func::Contains => Value::Bool(s(&a)?.as_str().contains(s(&b)?.as_str())),
            Func::LowerAscii => Value::s(s(&a)?.as_str().to_ascii_lowercase()),
            Func::UpperAscii => Value::s(s(&a)?.as_str().to_ascii_uppercase()),
            Func::Trim => Value::s(s(&a)?.as_str().trim().to_string()),
            Func::Replace => {
                let (x, from, to) = (s(&a)?, s(&b)?, s(&c)?);
                let n = match d {
                    None => -1,
                    some => int(&some)?,
                };
                let (x, from, to) = (x.as_str(), from.as_str(), to.as_str());
                let count = if from.is_empty() {
                    x.chars().count() + 1
                } else {
                    x.matches(from).count()
                };
                let count = if n < 0 {
                    count
                } else {
                    count.min(usize::try_from(n).unwrap_or(usize::MAX))
                };
                self.built(x.len() + count.saturating_mul(to.len()))?;
                Value::s(x.replacen(from, to, count))
            }
            Func::Split => {
                let (x, sep) = (s(&a)?, s(&b)?);
                let limit = match c {
                    None => -1,
                    some => int(&some)?,
                };
                let parts: Vec<&str> = match usize::try_from(limit) {
                    Ok(0) => Vec::new(),
                    Ok(n) => x.as_str().splitn(n, sep.as_str()).collect(),
                    Err(_) => x.as_str().split(sep.as_str()).collect(),
                };
                self.built(parts.len())?;
                Value::List(Arc::new(
                    parts.into_iter().map(|p| Value::s(p.to_string())).collect(),
                ))
            }
            Func::Substring => {
                let x = s(&a)?;
                let chars: Vec<char> = x.as_str().chars().collect();
                let start = usize::try_from(int(&b)?).ok();
                let end = match c {
                    None => Some(chars.len()),
                    some => usize::try_from(int(&some)?).ok(),
                };
                match (start, end) {
                    (Some(st), Some(en)) if st <= en && en <= chars.len() => {
                        Value::s(chars.get(st..en).unwrap_or_default().iter().collect())
                    }
                    _ => return fail("substring index out of range"),
                }
            }
            Func::IndexOf | Func::LastIndexOf => {
                let (x, needle) = (s(&a)?, s(&b)?);
                let chars: Vec<char> = x.as_str().chars().collect();
                let n: Vec<char> = needle.as_str().chars().collect();
                let from = match c {
                    None => None,
                    some => Some(
                        usize::try_from(int(&some)?)
                            .ok()
                            .filter(|i| *i <= chars.len())
                            .ok_or_else(|| EvalError {
                                message: "index out of range".into(),
                                budget: false,
                            })?,
                    ),
                };
                self.tick(chars.len().saturating_mul(n.len().max(1)) / 64)?;
                let at = |i: usize| chars.get(i..i + n.len()) == Some(n.as_slice());
                let found = if f == Func::IndexOf {
                    (from.unwrap_or(0)..=chars.len()).find(|i| at(*i))
                } else {
                    (0..=from.unwrap_or(chars.len())).rev().find(|i| at(*i))
                };
                Value::Int(found.and_then(|i| i64::try_from(i).ok()).unwrap_or(-1))
            }
            Func::CharAt => {
                let x = s(&a)?;
                let i = usize::try_from(int(&b)?).ok();
                let n = x.as_str().chars().count();
                match i {
                    Some(i) if i < n => Value::s(
                        x.as_str()
                            .chars()
                            .nth(i)
                            .map(String::from)
                            .unwrap_or_default(),
                    ),
                    Some(i) if i == n => Value::s(String::new()),
                    _ => return fail("charAt index out of range"),
                }
            }
            Func::Join => {
                let items = match &a {
                    Some(v) => list_items(v)?,
                    None => return fail("missing argument"),
                };
                let sep = match b {
                    None => String::new(),
                    some => s(&some)?.as_str().to_string(),
                };
                let mut out = String::new();
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(&sep);
                    }
                    match item.norm() {
                        Value::Str(x) => out.push_str(x.as_str()),
                        v => return fail(format!("join needs strings, got {}", v.type_name())),
                    }
                    self.built(out.len())?;
                }
                Value::s(out)
            }
            Func::ToInt => match a {
                Some(Value::Int(i)) => Value::Int(i),
                Some(Value::Uint(u)) => Value::Int(i64::try_from(u).map_err(|_| overflow())?),
                Some(Value::Double(d)) if d > -9.3e18 && d < 9.3e18 => Value::Int(d as i64),
                Some(Value::Str(x)) => Value::Int(x.as_str().parse().map_err(|_| EvalError {
                    message: format!("int(): {:?} is not an integer", x.as_str()),
                    budget: false,
                })?),
                Some(Value::Time(t)) => Value::Int(t.div_euclid(1_000_000_000)),
                Some(v) => return fail(format!("int() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::ToUint => match a {
                Some(Value::Uint(u)) => Value::Uint(u),
                Some(Value::Int(i)) => Value::Uint(u64::try_from(i).map_err(|_| overflow())?),
                Some(Value::Double(d)) if (0.0..1.8e19).contains(&d) => Value::Uint(d as u64),
                Some(Value::Str(x)) => Value::Uint(x.as_str().parse().map_err(|_| EvalError {
                    message: format!("uint(): {:?} is not an unsigned integer", x.as_str()),
                    budget: false,
                })?),
                Some(v) => return fail(format!("uint() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::ToDouble => match a {
                Some(Value::Double(d)) => Value::Double(d),
                Some(Value::Int(i)) => Value::Double(i as f64),
                Some(Value::Uint(u)) => Value::Double(u as f64),
                Some(Value::Str(x)) => {
                    Value::Double(x.as_str().parse().map_err(|_| EvalError {
                        message: format!("double(): {:?} is not a number", x.as_str()),
                        budget: false,
                    })?)
                }
                Some(v) => return fail(format!("double() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::ToString => match a {
                Some(Value::Str(x)) => Value::Str(x),
                Some(Value::Int(i)) => Value::s(i.to_string()),
                Some(Value::Uint(u)) => Value::s(u.to_string()),
                Some(Value::Double(d)) => Value::s(d.to_string()),
                Some(Value::Bool(b)) => Value::s(b.to_string()),
                Some(Value::Bytes(b)) => match std::str::from_utf8(&b) {
                    Ok(x) => Value::s(x.to_string()),
                    Err(_) => return fail("string(): bytes are not UTF-8"),
                },
                Some(Value::Time(t)) => Value::s(format_time(t)),
                Some(v) => return fail(format!("string() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::ToBool => match a {
                Some(Value::Bool(b)) => Value::Bool(b),
                Some(Value::Str(x)) => match x.as_str() {
                    "true" | "True" | "TRUE" | "t" | "1" => Value::Bool(true),
                    "false" | "False" | "FALSE" | "f" | "0" => Value::Bool(false),
                    other => return fail(format!("bool(): {other:?} is not a boolean")),
                },
                Some(v) => return fail(format!("bool() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::Timestamp => match a {
                Some(Value::Str(x)) => match parse_time(x.as_str()) {
                    Some(t) => Value::Time(t),
                    None => return fail(format!("timestamp(): {:?} is not RFC 3339", x.as_str())),
                },
                Some(Value::Time(t)) => Value::Time(t),
                Some(v) => return fail(format!("timestamp() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::Duration => match a {
                Some(Value::Str(x)) => match parse_duration(x.as_str()) {
                    Some(d) => Value::Duration(d),
                    None => return fail(format!("duration(): {:?} is not a duration", x.as_str())),
                },
                Some(Value::Duration(d)) => Value::Duration(d),
                Some(v) => return fail(format!("duration() of {}", v.type_name())),
                None => return fail("missing argument"),
            },
            Func::TimePart(part) => match a {
                Some(Value::Time(t)) => Value::Int(time_part(t, part)),
                Some(v) => return fail(format!("expected timestamp, got {}", v.type_name())),
                None => return fail("missing argument"),
            },
        })
    }
}

/// A literal of the program, borrowed (strings are not copied).
fn lit<'a>(v: &'a Value<'static>) -> Value<'a> {
    match v {
        Value::Null => Value::Null,
        Value::Bool(b) => Value::Bool(*b),
        Value::Int(i) => Value::Int(*i),
        Value::Uint(u) => Value::Uint(*u),
        Value::Double(d) => Value::Double(*d),
        Value::Str(Str::Shared(s)) => Value::Str(Str::Borrowed(s)),
        Value::Str(Str::Borrowed(s)) => Value::Str(Str::Borrowed(s)),
        Value::Bytes(b) => Value::Bytes(b.clone()),
        Value::Time(t) => Value::Time(*t),
        Value::Duration(d) => Value::Duration(*d),
        // Literals are scalars.
        _ => Value::Null,
    }
}

fn overflow() -> EvalError {
    EvalError {
        message: "integer overflow".into(),
        budget: false,
    }
}

fn no_op<T>(op: &str, a: &Value<'_>, b: &Value<'_>) -> Result<T, EvalError> {
    fail(format!(
        "no operator {op} for {} and {}",
        a.type_name(),
        b.type_name()
    ))
}

fn list_items<'a>(v: &Value<'a>) -> Result<Vec<Value<'a>>, EvalError> {
    match v {
        Value::List(l) => Ok(l.iter().cloned().collect()),
        Value::Json(serde_json::Value::Array(a)) => Ok(a.iter().map(Value::Json).collect()),
        v => fail(format!("expected list, got {}", v.type_name())),
    }
}

/// `m[k]` / `m.k`: Ok(None) when the key is absent.
fn lookup<'a>(m: &Value<'a>, k: &Value<'_>) -> Result<Option<Value<'a>>, EvalError> {
    match m {
        Value::Map(entries) => {
            for (x, v) in entries.iter() {
                if equal(x, k)? {
                    return Ok(Some(v.clone()));
                }
            }
            Ok(None)
        }
        Value::Json(serde_json::Value::Object(o)) => match k {
            Value::Str(s) => Ok(o.get(s.as_str()).map(Value::Json)),
            _ => Ok(None),
        },
        Value::Headers(h) => match k {
            Value::Str(s) => {
                let name = s.as_str();
                let mut copies = h.iter().filter(|(n, _)| n == name);
                match (copies.next(), copies.next()) {
                    (Some((_, v)), None) => Ok(Some(Value::Str(Str::Borrowed(v)))),
                    (Some(_), Some(_)) => fail(format!(
                        "header {name} is repeated: its value cannot be read"
                    )),
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        },
        v => fail(format!("cannot select from {}", v.type_name())),
    }
}

fn has_key(m: &Value<'_>, f: &str) -> Result<bool, EvalError> {
    match m {
        Value::Headers(h) => Ok(h.iter().any(|(n, _)| n == f)),
        _ => lookup(m, &Value::Str(Str::Borrowed(f))).map(|v| v.is_some()),
    }
}

fn index<'a>(v: &Value<'a>, k: &Value<'_>) -> Result<Value<'a>, EvalError> {
    let list_at = |len: usize| -> Result<usize, EvalError> {
        let i = match k {
            Value::Int(i) => usize::try_from(*i).ok(),
            Value::Uint(u) => usize::try_from(*u).ok(),
            Value::Double(d) if d.fract() == 0.0 && *d >= 0.0 => Some(*d as usize),
            other => {
                return fail(format!(
                    "a list index must be int, got {}",
                    other.type_name()
                ))
            }
        };
        match i {
            Some(i) if i < len => Ok(i),
            _ => fail("list index out of range"),
        }
    };
    match v {
        Value::List(l) => {
            let i = list_at(l.len())?;
            l.get(i).cloned().ok_or_else(|| EvalError {
                message: "list index out of range".into(),
                budget: false,
            })
        }
        Value::Json(serde_json::Value::Array(a)) => {
            let i = list_at(a.len())?;
            a.get(i).map(Value::Json).ok_or_else(|| EvalError {
                message: "list index out of range".into(),
                budget: false,
            })
        }
        m => match lookup(m, k)? {
            Some(x) => Ok(x),
            None => fail(format!("no such key: {}", show(k))),
        },
    }
}

fn contains<'a>(coll: &Value<'a>, x: &Value<'_>, e: &mut Eval<'a>) -> Result<bool, EvalError> {
    match coll {
        Value::List(l) => {
            e.tick(l.len())?;
            for item in l.iter() {
                if equal(&item.clone().norm(), x)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Value::Json(serde_json::Value::Array(a)) => {
            e.tick(a.len())?;
            for item in a {
                if equal(&Value::Json(item).norm(), x)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Value::Headers(h) => match x {
            Value::Str(s) => Ok(h.iter().any(|(n, _)| n == s.as_str())),
            _ => Ok(false),
        },
        m @ (Value::Map(_) | Value::Json(serde_json::Value::Object(_))) => {
            Ok(lookup(m, x)?.is_some())
        }
        v => fail(format!("`in` needs a list or map, got {}", v.type_name())),
    }
}

/// CEL equality; numbers compare across int, uint and double.
fn equal(a: &Value<'_>, b: &Value<'_>) -> Result<bool, EvalError> {
    use Value::*;
    let a = a.clone().norm();
    let b = b.clone().norm();
    Ok(match (&a, &b) {
        (Null, Null) => true,
        (Bool(x), Bool(y)) => x == y,
        (Str(x), Str(y)) => x.as_str() == y.as_str(),
        (Bytes(x), Bytes(y)) => x == y,
        (Time(x), Time(y)) | (Duration(x), Duration(y)) => x == y,
        (Int(_) | Uint(_) | Double(_), Int(_) | Uint(_) | Double(_)) => {
            num_cmp(&a, &b) == Some(Ordering::Equal)
        }
        (
            List(_) | Json(serde_json::Value::Array(_)),
            List(_) | Json(serde_json::Value::Array(_)),
        ) => {
            let (x, y) = (list_items(&a)?, list_items(&b)?);
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                if !equal(p, q)? {
                    return Ok(false);
                }
            }
            true
        }
        (
            Map(_) | Json(serde_json::Value::Object(_)),
            Map(_) | Json(serde_json::Value::Object(_)),
        ) => {
            let keys = map_keys(&a);
            if keys.len() != map_keys(&b).len() {
                return Ok(false);
            }
            for k in keys {
                match (lookup(&a, &k)?, lookup(&b, &k)?) {
                    (Some(p), Some(q)) if equal(&p, &q)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        _ => false,
    })
}

fn map_keys<'a>(m: &Value<'a>) -> Vec<Value<'a>> {
    match m {
        Value::Map(e) => e.iter().map(|(k, _)| k.clone()).collect(),
        Value::Json(serde_json::Value::Object(o)) => {
            o.keys().map(|k| Value::Str(Str::Borrowed(k))).collect()
        }
        _ => Vec::new(),
    }
}

fn num_cmp(a: &Value<'_>, b: &Value<'_>) -> Option<Ordering> {
    use Value::*;
    match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (Uint(x), Uint(y)) => Some(x.cmp(y)),
        (Int(x), Uint(y)) => Some(if *x < 0 {
            Ordering::Less
        } else {
            (*x as u64).cmp(y)
        }),
        (Uint(_), Int(_)) => num_cmp(b, a).map(Ordering::reverse),
        (Double(x), Double(y)) => x.partial_cmp(y),
        (Double(x), Int(y)) => x.partial_cmp(&(*y as f64)),
        (Double(x), Uint(y)) => x.partial_cmp(&(*y as f64)),
        (Int(_) | Uint(_), Double(_)) => num_cmp(b, a).map(Ordering::reverse),
        _ => None,
    }
}

fn order(a: &Value<'_>, b: &Value<'_>) -> Result<Ordering, EvalError> {
    use Value::*;
    let o = match (a, b) {
        (Str(x), Str(y)) => Some(x.as_str().cmp(y.as_str())),
        (Bool(x), Bool(y)) => Some(x.cmp(y)),
        (Bytes(x), Bytes(y)) => Some(x.cmp(y)),
        (Time(x), Time(y)) | (Duration(x), Duration(y)) => Some(x.cmp(y)),
        _ => num_cmp(a, b),
    };
    o.ok_or_else(|| EvalError {
        message: format!("cannot order {} and {}", a.type_name(), b.type_name()),
        budget: false,
    })
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

const NANOS: i64 = 1_000_000_000;

fn time_part(t: i64, part: TimePart) -> i64 {
    let secs = t.div_euclid(NANOS);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    match part {
        TimePart::FullYear => y,
        TimePart::Month => m - 1,
        TimePart::DayOfMonth => d - 1,
        TimePart::Date => d,
        TimePart::DayOfWeek => (days + 4).rem_euclid(7),
        TimePart::DayOfYear => days - days_from_civil(y, 1, 1),
        TimePart::Hours => sod / 3600,
        TimePart::Minutes => sod % 3600 / 60,
        TimePart::Seconds => sod % 60,
        TimePart::Milliseconds => t.rem_euclid(NANOS) / 1_000_000,
    }
}

fn format_time(t: i64) -> String {
    let secs = t.div_euclid(NANOS);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let nanos = t.rem_euclid(NANOS);
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_string()
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// RFC 3339 (`2026-01-02T03:04:05.678Z`, or with a `+hh:mm` offset).
fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 20 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    if !matches!(b.get(10), Some(b'T' | b't'))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = s.get(start..i)?;
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        nanos = format!("{digits:0<9}").parse().ok()?;
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b.get(i + 3) == Some(&b':') => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    secs.checked_mul(NANOS)?.checked_add(nanos)
}

/// Go-style durations: `1h30m`, `1.5s`, `-250ms`, `0`.
fn parse_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest.get(..num_end)?.parse().ok()?;
        rest = rest.get(num_end..)?;
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match rest.get(..unit_end)? {
            "h" => 3600e9,
            "m" => 60e9,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            _ => return None,
        };
        rest = rest.get(unit_end..)?;
        total += value * scale;
    }
    if !total.is_finite() || total.abs() > 9.2e18 {
        return None;
    }
    let n = total as i64;
    Some(if neg { -n } else { n })
}
