//! Per-request state of CEL conditions: policy `when` results (each policy's evaluated once),
//! error counts for stats, and, when traced, every evaluation with what it read.

use super::PolicyId;
use crate::cel_input::CelInput;
use crate::request::Request;
use mcp_access_cel::{EvalError, Program};

/// A compiled CEL condition with the bundle field it came from (`when[1]`,
/// `authorization.cel`), for traces.
#[derive(Debug)]
pub struct Cel {
    pub field: String,
    pub program: Program,
}

/// Which way a doubt is resolved: always against the caller. For a CEL condition that errs
/// (or is not boolean), and for the copies of a repeated header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An Allow rule: a condition that errs does not hold; a header condition holds only when
    /// every copy matches.
    Admit,
    /// A Deny rule or an ExternalAuth selection: a condition that errs holds; a header
    /// condition holds when any copy matches.
    Select,
}

/// Whether a policy applies, per its `when` conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applies {
    Yes,
    No,
    /// A condition erred or was not boolean: an Allow policy applies and admits nothing; a
    /// Deny or ExternalAuth policy applies.
    Errored,
}

/// One evaluated CEL condition (for `explain` and decision traces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelRecord {
    /// `namespace/name` of the policy.
    pub policy: String,
    /// The rule, None for a policy `when`.
    pub rule: Option<String>,
    /// `when[0]`, `authorization.cel`.
    pub field: String,
    pub expression: String,
    /// The result, or the error.
    pub result: Result<bool, String>,
    /// Each variable read and its value (or why it has none).
    pub reads: Vec<(String, String)>,
}

/// CEL state of one request's evaluation.
#[derive(Debug, Default)]
pub struct CelCx {
    trust_domain: Option<String>,
    /// `namespace/name` of the request's backend (`request.backend`).
    backend: Option<String>,
    /// The backend's pinned tools, when a condition reads their annotations.
    pins: Option<std::sync::Arc<crate::pins::ToolPins>>,
    /// Per policy: None until its `when` was evaluated.
    when: Vec<Option<Applies>>,
    /// Evaluations that erred (budget exhaustion included).
    pub errors: u32,
    /// Evaluations stopped by `limits.cel.maxSteps`.
    pub budget_exceeded: u32,
    /// Traced evaluations.
    pub records: Option<Vec<CelRecord>>,
}

impl CelCx {
    pub(crate) fn new(
        trust_domain: Option<&str>,
        backend: Option<&str>,
        pins: Option<std::sync::Arc<crate::pins::ToolPins>>,
        trace: bool,
    ) -> CelCx {
        CelCx {
            trust_domain: trust_domain.map(str::to_string),
            backend: backend.map(str::to_string),
            pins,
            when: Vec::new(),
            errors: 0,
            budget_exceeded: 0,
            records: trace.then(Vec::new),
        }
    }

    /// Whether condition `c` holds: an error or a non-boolean result counts against the
    /// caller (an Allow rule does not admit; a Deny / ExternalAuth condition holds).
    pub(crate) fn holds(
        &mut self,
        c: &Cel,
        mode: Mode,
        req: &Request,
        policy: &str,
        rule: Option<&str>,
    ) -> bool {
        match self.eval(c, req, policy, rule) {
            Ok(b) => b,
            Err(()) => mode == Mode::Select,
        }
    }

    fn eval(
        &mut self,
        c: &Cel,
        req: &Request,
        policy: &str,
        rule: Option<&str>,
    ) -> Result<bool, ()> {
        let input = CelInput {
            req,
            host: &req.host,
            backend: self.backend.as_deref(),
            trust_domain: self.trust_domain.as_deref(),
            pins: self.pins.as_deref(),
        };
        let result = c.program.eval(&input);
        if let Err(e) = &result {
            self.errors = self.errors.saturating_add(1);
            if e.budget {
                self.budget_exceeded = self.budget_exceeded.saturating_add(1);
            }
        }
        if let Some(records) = &mut self.records {
            records.push(record(c, &input, &result, policy, rule));
        }
        result.map_err(|_| ())
    }

    /// Whether policy `pid` (`namespace/name` `id`) applies, evaluating its `when` once per
    /// request.
    pub(crate) fn applies(
        &mut self,
        pid: PolicyId,
        id: &str,
        when: &[Cel],
        req: &Request,
    ) -> Applies {
        if when.is_empty() {
            return Applies::Yes;
        }
        if let Some(Some(a)) = self.when.get(pid) {
            return *a;
        }
        if self.when.len() <= pid {
            self.when.resize(pid + 1, None);
        }
        let mut out = Applies::Yes;
        for c in when {
            match self.eval(c, req, id, None) {
                Ok(true) => {}
                Ok(false) => {
                    out = Applies::No;
                    break;
                }
                Err(()) => {
                    out = Applies::Errored;
                    break;
                }
            }
        }
        if let Some(slot) = self.when.get_mut(pid) {
            *slot = Some(out);
        }
        out
    }
}

/// What `explain` shows of one evaluation (traced requests only).
#[cold]
fn record(
    c: &Cel,
    input: &CelInput<'_>,
    result: &Result<bool, EvalError>,
    policy: &str,
    rule: Option<&str>,
) -> CelRecord {
    CelRecord {
        policy: policy.to_string(),
        rule: rule.map(str::to_string),
        field: c.field.clone(),
        expression: c.program.source().to_string(),
        result: result.clone().map_err(|e| e.message),
        reads: c
            .program
            .reads()
            .iter()
            .map(|a| (a.name().to_string(), mcp_access_cel::shown(*a, input)))
            .collect(),
    }
}
