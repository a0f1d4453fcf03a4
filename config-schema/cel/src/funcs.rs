//! The built-in functions and methods (`size`, the string methods, conversions, time),
//! by family.

use std::sync::Arc;

use crate::eval::Eval;
use crate::plan::Func;
use crate::time::{format_time, parse_duration, parse_time, time_part};
use crate::value::{list_items, Str, Value};
use crate::{fail, overflow, Attributes, EvalError};

impl<'a, A: Attributes + ?Sized> Eval<'a, A> {
    /// `f` on its target and arguments (at most four, checked at load).
    pub(crate) fn call(
        &mut self,
        f: Func,
        args: [Option<Value<'a>>; 4],
    ) -> Result<Value<'a>, EvalError> {
        let [a, b, c, d] = args;
        let text_len = |v: &Option<Value<'_>>| match v {
            Some(Value::Str(s)) => s.as_str().len(),
            _ => 0,
        };
        self.tick((text_len(&a) + text_len(&b)) / 64)?;
        Ok(match f {
            Func::Size => size(&a)?,
            Func::StartsWith => Value::Bool(text(&a)?.as_str().starts_with(text(&b)?.as_str())),
            Func::EndsWith => Value::Bool(text(&a)?.as_str().ends_with(text(&b)?.as_str())),
            Func::Contains => Value::Bool(text(&a)?.as_str().contains(text(&b)?.as_str())),
            Func::LowerAscii => Value::string(text(&a)?.as_str().to_ascii_lowercase()),
            Func::UpperAscii => Value::string(text(&a)?.as_str().to_ascii_uppercase()),
            Func::Trim => Value::string(text(&a)?.as_str().trim().to_string()),
            Func::Replace => self.replace(&a, &b, &c, d)?,
            Func::Split => self.split(&a, &b, c)?,
            Func::Substring => substring(&a, &b, c)?,
            Func::IndexOf | Func::LastIndexOf => self.index_of(f, &a, &b, c)?,
            Func::CharAt => char_at(&a, &b)?,
            Func::Join => self.join(&a, b)?,
            Func::ToInt => to_int(a)?,
            Func::ToUint => to_uint(a)?,
            Func::ToDouble => to_double(a)?,
            Func::ToString => to_string(a)?,
            Func::ToBool => to_bool(a)?,
            Func::Timestamp => timestamp(a)?,
            Func::Duration => duration(a)?,
            Func::TimePart(part) => match a {
                Some(Value::Time(t)) => Value::Int(time_part(t, part)),
                Some(v) => return fail(format!("expected timestamp, got {}", v.type_name())),
                None => return fail("missing argument"),
            },
        })
    }

    /// `x.replace(from, to[, n])`.
    fn replace(
        &mut self,
        a: &Option<Value<'a>>,
        b: &Option<Value<'a>>,
        c: &Option<Value<'a>>,
        d: Option<Value<'a>>,
    ) -> Result<Value<'a>, EvalError> {
        let (x, from, to) = (text(a)?, text(b)?, text(c)?);
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
        Ok(Value::string(x.replacen(from, to, count)))
    }

    /// `x.split(sep[, limit])`.
    fn split(
        &mut self,
        a: &Option<Value<'a>>,
        b: &Option<Value<'a>>,
        c: Option<Value<'a>>,
    ) -> Result<Value<'a>, EvalError> {
        let (x, sep) = (text(a)?, text(b)?);
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
        Ok(Value::List(Arc::new(
            parts
                .into_iter()
                .map(|p| Value::string(p.to_string()))
                .collect(),
        )))
    }

    /// `x.indexOf(s[, from])`, `x.lastIndexOf(s[, from])`.
    fn index_of(
        &mut self,
        f: Func,
        a: &Option<Value<'a>>,
        b: &Option<Value<'a>>,
        c: Option<Value<'a>>,
    ) -> Result<Value<'a>, EvalError> {
        let (x, needle) = (text(a)?, text(b)?);
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
        Ok(Value::Int(
            found.and_then(|i| i64::try_from(i).ok()).unwrap_or(-1),
        ))
    }

    /// `list.join([sep])`.
    fn join(
        &mut self,
        a: &Option<Value<'a>>,
        b: Option<Value<'a>>,
    ) -> Result<Value<'a>, EvalError> {
        let items = match a {
            Some(v) => list_items(v)?,
            None => return fail("missing argument"),
        };
        let sep = match b {
            None => String::new(),
            some => text(&some)?.as_str().to_string(),
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
        Ok(Value::string(out))
    }
}

/// A string argument.
fn text<'a>(v: &Option<Value<'a>>) -> Result<Str<'a>, EvalError> {
    match v {
        Some(Value::Str(s)) => Ok(s.clone()),
        Some(v) => fail(format!("expected string, got {}", v.type_name())),
        None => fail("missing argument"),
    }
}

/// An int argument.
fn int(v: &Option<Value<'_>>) -> Result<i64, EvalError> {
    match v {
        Some(Value::Int(i)) => Ok(*i),
        Some(v) => fail(format!("expected int, got {}", v.type_name())),
        None => fail("missing argument"),
    }
}

/// `size(x)`, `x.size()`: characters of a string, bytes, elements, keys (distinct header names).
fn size(a: &Option<Value<'_>>) -> Result<Value<'static>, EvalError> {
    let n = match a {
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
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// `x.substring(start[, end])`, in characters.
fn substring<'a>(
    a: &Option<Value<'a>>,
    b: &Option<Value<'a>>,
    c: Option<Value<'a>>,
) -> Result<Value<'a>, EvalError> {
    let x = text(a)?;
    let chars: Vec<char> = x.as_str().chars().collect();
    let start = usize::try_from(int(b)?).ok();
    let end = match c {
        None => Some(chars.len()),
        some => usize::try_from(int(&some)?).ok(),
    };
    Ok(match (start, end) {
        (Some(st), Some(en)) if st <= en && en <= chars.len() => {
            Value::string(chars.get(st..en).unwrap_or_default().iter().collect())
        }
        _ => return fail("substring index out of range"),
    })
}

/// `x.charAt(i)`: the character at `i`, or `""` at the end.
fn char_at<'a>(a: &Option<Value<'a>>, b: &Option<Value<'a>>) -> Result<Value<'a>, EvalError> {
    let x = text(a)?;
    let i = usize::try_from(int(b)?).ok();
    let n = x.as_str().chars().count();
    Ok(match i {
        Some(i) if i < n => Value::string(
            x.as_str()
                .chars()
                .nth(i)
                .map(String::from)
                .unwrap_or_default(),
        ),
        Some(i) if i == n => Value::string(String::new()),
        _ => return fail("charAt index out of range"),
    })
}

/// `int(x)`.
fn to_int(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
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
    })
}

/// `uint(x)`.
fn to_uint(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Uint(u)) => Value::Uint(u),
        Some(Value::Int(i)) => Value::Uint(u64::try_from(i).map_err(|_| overflow())?),
        Some(Value::Double(d)) if (0.0..1.8e19).contains(&d) => Value::Uint(d as u64),
        Some(Value::Str(x)) => Value::Uint(x.as_str().parse().map_err(|_| EvalError {
            message: format!("uint(): {:?} is not an unsigned integer", x.as_str()),
            budget: false,
        })?),
        Some(v) => return fail(format!("uint() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}

/// `double(x)`.
fn to_double(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Double(d)) => Value::Double(d),
        Some(Value::Int(i)) => Value::Double(i as f64),
        Some(Value::Uint(u)) => Value::Double(u as f64),
        Some(Value::Str(x)) => Value::Double(x.as_str().parse().map_err(|_| EvalError {
            message: format!("double(): {:?} is not a number", x.as_str()),
            budget: false,
        })?),
        Some(v) => return fail(format!("double() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}

/// `string(x)`.
fn to_string(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Str(x)) => Value::Str(x),
        Some(Value::Int(i)) => Value::string(i.to_string()),
        Some(Value::Uint(u)) => Value::string(u.to_string()),
        Some(Value::Double(d)) => Value::string(d.to_string()),
        Some(Value::Bool(b)) => Value::string(b.to_string()),
        Some(Value::Bytes(b)) => match std::str::from_utf8(&b) {
            Ok(x) => Value::string(x.to_string()),
            Err(_) => return fail("string(): bytes are not UTF-8"),
        },
        Some(Value::Time(t)) => Value::string(format_time(t)),
        Some(v) => return fail(format!("string() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}

/// `bool(x)`.
fn to_bool(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Bool(b)) => Value::Bool(b),
        Some(Value::Str(x)) => match x.as_str() {
            "true" | "True" | "TRUE" | "t" | "1" => Value::Bool(true),
            "false" | "False" | "FALSE" | "f" | "0" => Value::Bool(false),
            other => return fail(format!("bool(): {other:?} is not a boolean")),
        },
        Some(v) => return fail(format!("bool() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}

/// `timestamp(x)`.
fn timestamp(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Str(x)) => match parse_time(x.as_str()) {
            Some(t) => Value::Time(t),
            None => return fail(format!("timestamp(): {:?} is not RFC 3339", x.as_str())),
        },
        Some(Value::Time(t)) => Value::Time(t),
        Some(v) => return fail(format!("timestamp() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}

/// `duration(x)`.
fn duration(a: Option<Value<'_>>) -> Result<Value<'_>, EvalError> {
    Ok(match a {
        Some(Value::Str(x)) => match parse_duration(x.as_str()) {
            Some(d) => Value::Duration(d),
            None => return fail(format!("duration(): {:?} is not a duration", x.as_str())),
        },
        Some(Value::Duration(d)) => Value::Duration(d),
        Some(v) => return fail(format!("duration() of {}", v.type_name())),
        None => return fail("missing argument"),
    })
}
