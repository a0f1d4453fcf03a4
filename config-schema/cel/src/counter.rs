//! Counter expressions of rate limits: a CEL expression over the request whose value (a
//! string, number or boolean) names the bucket a request is counted in (docs/semantics.md,
//! "Rate limits").

use crate::eval::Eval;
use crate::value::{Ty, Value};
use crate::{CelError, CelLimits, EvalError, Program};

/// A compiled counter expression.
#[derive(Debug)]
pub struct Counter(Program);

impl Counter {
    /// Bounds, parses and compiles `src`; an expression known to be a list, map, bytes,
    /// timestamp or duration is refused (a counter is a scalar).
    pub fn compile(src: &str, limits: &CelLimits) -> Result<Counter, CelError> {
        Program::compile_typed(src, limits, false, |ty| match ty {
            Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Str | Ty::Dyn => None,
            other => Some(format!(
                "a counter must be a string, number or bool, this expression is {}",
                other.name()
            )),
        })
        .map(Counter)
    }

    /// The expression text.
    pub fn source(&self) -> &str {
        self.0.source()
    }

    /// The program (the attributes it reads).
    pub fn program(&self) -> &Program {
        &self.0
    }

    /// The counter's value over `input` as text (`Ok(None)`: null or absent, which the
    /// caller counts under its "unidentified" key, as it does an error).
    pub fn eval<A: crate::Attributes + ?Sized>(
        &self,
        input: &A,
    ) -> Result<Option<String>, EvalError> {
        let p = &self.0;
        let mut e = Eval::new(input, p);
        let v = e.value(&p.root)?.norm();
        Ok(Some(match v {
            Value::Null => return Ok(None),
            Value::Str(s) => s.as_str().to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Uint(u) => u.to_string(),
            Value::Double(d) if d.is_finite() => d.to_string(),
            other => {
                return Err(EvalError {
                    message: format!(
                        "a counter must be a string, number or bool, this value is {}",
                        other.type_name()
                    ),
                    budget: false,
                })
            }
        }))
    }
}
