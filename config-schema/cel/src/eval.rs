//! Evaluation of a compiled [`Program`]: a step budget, attributes read through
//! [`Attributes`], and errors as values (CEL's `&&` / `||` absorb an error when the other side
//! decides).

use std::cmp::Ordering;
use std::sync::Arc;

use crate::attrs::{read, Attr};
use crate::plan::{BinOp, Comp, Node, Program, StrOp};
use crate::value::{equal, has_key, index, list_items, lit, lookup, no_op, order, Str, Value};
use crate::{fail, overflow, Attributes, EvalError};

/// Largest string or list an evaluation may build.
const MAX_BUILT: usize = 1 << 20;

/// One evaluation; program literals and attributes are both borrowed for `'a`.
pub(crate) struct Eval<'a, A: ?Sized> {
    input: &'a A,
    locals: Vec<Value<'a>>,
    steps: u32,
}

impl Program {
    /// Evaluates the condition over `input`: a boolean, or an error (which counts against the
    /// caller).
    #[inline]
    pub fn eval<A: Attributes + ?Sized>(&self, input: &A) -> Result<bool, EvalError> {
        let mut e = Eval::new(input, self);
        match e.bool_of(&self.root) {
            Err(err) if err.message.starts_with("expected bool, got ") => fail(format!(
                "the condition is {}, not a boolean",
                err.message.trim_start_matches("expected bool, got ")
            )),
            other => other,
        }
    }
}

impl<'a, A: Attributes + ?Sized> Eval<'a, A> {
    /// An evaluation of `p` over `input`, with `p`'s step budget.
    pub(crate) fn new(input: &'a A, p: &Program) -> Eval<'a, A> {
        Eval {
            input,
            locals: if p.locals == 0 {
                Vec::new()
            } else {
                vec![Value::Null; p.locals]
            },
            steps: p.max_steps,
        }
    }

    /// The value of `n`.
    pub(crate) fn value(&mut self, n: &'a Node) -> Result<Value<'a>, EvalError> {
        self.eval(n)
    }

    pub(crate) fn tick(&mut self, n: usize) -> Result<(), EvalError> {
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

    /// A string attribute that [`Attributes::text`] does not borrow (or that is absent: the
    /// error).
    #[cold]
    fn attr_text(&self, a: Attr) -> Result<Str<'a>, EvalError> {
        match read(a, self.input)? {
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
                let s = match self.input.text(*attr) {
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
                let s = match self.input.text(*attr) {
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
            Node::Attr(a) => read(*a, self.input),
            Node::HasAttr(a) => Ok(Value::Bool(self.input.attr(*a).is_some())),
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
                    Value::string(s)
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
    pub(crate) fn built(&mut self, len: usize) -> Result<(), EvalError> {
        if len > MAX_BUILT {
            return fail("a string or list built by the expression would be larger than 1 MiB");
        }
        self.tick(len / 64)
    }
}

fn contains<'a, A: Attributes + ?Sized>(
    coll: &Value<'a>,
    x: &Value<'_>,
    e: &mut Eval<'a, A>,
) -> Result<bool, EvalError> {
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
