//! CEL conditions (`when`, `authorization.cel`, and a policy's compile-time `condition`):
//! parsed with the `cel` crate's Pratt parser, then compiled here into a plan (names resolved,
//! regexes compiled, types checked where they are known) that [`Program::eval`] runs with a
//! step budget. The variables, types and error rules are in docs/semantics.md, "CEL".
//!
//! The pipeline: the text is bounded ([`scan`]), parsed by `cel`, bounded again as a tree and
//! compiled into a [`Program`] ([`compile`], [`plan`]). An evaluation ([`eval`], built-in
//! functions in [`funcs`], values in [`value`], time in [`time`]) reads the attributes it needs
//! through [`Attributes`], which its caller implements: the engine for a request, and
//! [`SelfCondition`] for a policy's `self`.

mod attrs;
mod compile;
mod counter;
mod eval;
mod funcs;
mod headers;
mod limits;
mod plan;
mod scan;
mod text;
mod time;
mod value;

use std::fmt;

pub use attrs::{service_account, shown, variable_names, Attr, Attributes};
pub use counter::Counter;
pub use headers::{Headers, Iter as HeaderIter};
pub use limits::{CelLimits, CEL_LIMIT_MAX};
pub use plan::Program;
pub use text::a_or_an;
pub use value::{Str, Value};

/// An expression that cannot be used, with where in its text the problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl CelError {
    fn at(src: &str, offset: usize, message: String) -> CelError {
        let before = src.get(..offset).unwrap_or(src);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        CelError {
            line,
            column,
            message,
        }
    }

    /// An error about identifier `word` (located by its first occurrence).
    fn about(src: &str, word: &str, message: String) -> CelError {
        CelError::at(src, scan::find_ident(src, word).unwrap_or(0), message)
    }
}

impl fmt::Display for CelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CEL line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for CelError {}

/// Parses and checks `expression` exactly as the engine does when it loads a bundle.
pub fn check(expression: &str, limits: &CelLimits) -> Result<(), CelError> {
    Program::compile(expression, limits).map(|_| ())
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

fn overflow() -> EvalError {
    EvalError {
        message: "integer overflow".into(),
        budget: false,
    }
}

/// A compile-time condition: `self` is its only variable (a defaults/overrides `condition`,
/// which the policy compiler evaluates against lower policies' specs; docs/semantics.md,
/// "Defaults and overrides").
#[derive(Debug)]
pub struct SelfCondition(Program);

impl SelfCondition {
    /// Parses and checks `condition` (no request attribute may be read).
    pub fn compile(condition: &str, limits: &CelLimits) -> Result<SelfCondition, CelError> {
        Program::compile_for(condition, limits, true).map(SelfCondition)
    }

    /// Evaluates it with `self` bound to `value`: a boolean, or why there is none (an error
    /// or a result that is not boolean).
    pub fn eval(&self, value: &serde_json::Value) -> Result<bool, EvalError> {
        self.0.eval(&SelfValue(value))
    }
}

/// `self` of a [`SelfCondition`]: its only attribute.
struct SelfValue<'a>(&'a serde_json::Value);

impl Attributes for SelfValue<'_> {
    fn attr(&self, a: Attr) -> Option<Value<'_>> {
        (a == Attr::SelfValue).then_some(Value::Json(self.0))
    }
}

#[cfg(test)]
mod tests;
