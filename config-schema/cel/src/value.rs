//! Values: what attributes have and expressions compute, compared, ordered, looked up and
//! shown.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::time::format_time;
use crate::{fail, EvalError};

/// The type of a value, as far as the compiler knows it (`Dyn`: not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    Str,
    Bytes,
    List,
    Map,
    Time,
    Duration,
    Null,
    Dyn,
}

impl Ty {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Uint => "uint",
            Ty::Double => "double",
            Ty::Str => "string",
            Ty::Bytes => "bytes",
            Ty::List => "list",
            Ty::Map => "map",
            Ty::Time => "timestamp",
            Ty::Duration => "duration",
            Ty::Null => "null",
            Ty::Dyn => "dyn",
        }
    }
}

/// A string: borrowed (from the attributes or the program) or shared.
#[derive(Debug, Clone)]
pub enum Str<'a> {
    Borrowed(&'a str),
    Shared(Arc<str>),
}

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Shared(s) => s,
        }
    }
}

/// A value: what an attribute has, and what an expression computes.
#[derive(Debug, Clone)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Str<'a>),
    Bytes(Arc<[u8]>),
    List(Arc<Vec<Value<'a>>>),
    Map(Arc<Vec<(Value<'a>, Value<'a>)>>),
    /// JSON from the attributes (MCP params, JWT claims, `self`), converted as it is read.
    Json(&'a serde_json::Value),
    /// Request headers, names lowercase (a repeated header cannot be read).
    Headers(&'a crate::Headers),
    /// Nanoseconds since the Unix epoch.
    Time(i64),
    /// Nanoseconds.
    Duration(i64),
}

impl<'a> Value<'a> {
    /// A string built for this value.
    pub fn string(s: String) -> Value<'a> {
        Value::Str(Str::Shared(Arc::from(s)))
    }

    /// `{}`.
    pub fn empty_map() -> Value<'a> {
        Value::Map(Arc::new(Vec::new()))
    }

    pub(crate) fn type_name(&self) -> &'static str {
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
    pub(crate) fn norm(self) -> Value<'a> {
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

/// A literal of the program, borrowed (strings are not copied).
pub(crate) fn lit<'a>(v: &'a Value<'static>) -> Value<'a> {
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

pub(crate) fn no_op<T>(op: &str, a: &Value<'_>, b: &Value<'_>) -> Result<T, EvalError> {
    fail(format!(
        "no operator {op} for {} and {}",
        a.type_name(),
        b.type_name()
    ))
}

pub(crate) fn list_items<'a>(v: &Value<'a>) -> Result<Vec<Value<'a>>, EvalError> {
    match v {
        Value::List(l) => Ok(l.iter().cloned().collect()),
        Value::Json(serde_json::Value::Array(a)) => Ok(a.iter().map(Value::Json).collect()),
        v => fail(format!("expected list, got {}", v.type_name())),
    }
}

/// `m[k]` / `m.k`: Ok(None) when the key is absent.
pub(crate) fn lookup<'a>(m: &Value<'a>, k: &Value<'_>) -> Result<Option<Value<'a>>, EvalError> {
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
                let mut copies = h.iter().filter(|(n, _)| *n == name);
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

pub(crate) fn has_key(m: &Value<'_>, f: &str) -> Result<bool, EvalError> {
    match m {
        Value::Headers(h) => Ok(h.iter().any(|(n, _)| n == f)),
        _ => lookup(m, &Value::Str(Str::Borrowed(f))).map(|v| v.is_some()),
    }
}

pub(crate) fn index<'a>(v: &Value<'a>, k: &Value<'_>) -> Result<Value<'a>, EvalError> {
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

/// CEL equality; numbers compare across int, uint and double.
pub(crate) fn equal(a: &Value<'_>, b: &Value<'_>) -> Result<bool, EvalError> {
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

pub(crate) fn order(a: &Value<'_>, b: &Value<'_>) -> Result<Ordering, EvalError> {
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
