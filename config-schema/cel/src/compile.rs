//! From text to [`Program`]: bounds checked on the text ([`crate::scan`]) and on the parsed
//! tree, names resolved, types checked where known, regexes compiled.

use std::sync::Arc;

use cel::common::ast::{
    operators as op, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr, SelectExpr,
};

use crate::attrs::{Attr, ATTRS};
use crate::plan::{str_test, BinOp, Comp, Func, Node, Program, StrOp, FUNCS};
use crate::value::{Str, Ty, Value};
use crate::{scan, CelError, CelLimits};

/// Longest compiled regular expression (regex-lite's size limit), in bytes.
const REGEX_SIZE_LIMIT: usize = 64 * 1024;

impl Program {
    /// Bounds, parses, and compiles `src`.
    pub fn compile(src: &str, limits: &CelLimits) -> Result<Program, CelError> {
        Program::compile_for(src, limits, false)
    }

    /// `over_self`: the only variable is `self` (no request attribute).
    pub(crate) fn compile_for(
        src: &str,
        limits: &CelLimits,
        over_self: bool,
    ) -> Result<Program, CelError> {
        Program::compile_typed(src, limits, over_self, |ty| {
            (!matches!(ty, Ty::Bool | Ty::Dyn)).then(|| {
                format!(
                    "a condition must be boolean, this expression is {}",
                    ty.name()
                )
            })
        })
    }

    /// Compiles `src`; `wrong(ty)` says why an expression of static type `ty` is refused.
    pub(crate) fn compile_typed(
        src: &str,
        limits: &CelLimits,
        over_self: bool,
        wrong: impl FnOnce(Ty) -> Option<String>,
    ) -> Result<Program, CelError> {
        scan::precheck(src, limits)?;
        let depth = u16::try_from(limits.max_depth.saturating_add(8)).unwrap_or(u16::MAX);
        let ast = cel::parser::PrattParser::new()
            .max_recursion_depth(depth)
            .error_reporting_limit(1)
            .parse(src)
            .map_err(|e| match e.errors.first() {
                Some(first) => CelError {
                    line: usize::try_from(first.pos.0).unwrap_or(1).max(1),
                    column: usize::try_from(first.pos.1).unwrap_or(0) + 1,
                    message: first.msg.clone(),
                },
                None => CelError::at(src, 0, "syntax error".into()),
            })?;
        let bounded = tree_bounds(src, &ast, limits);
        let mut c = Compiler {
            src,
            scopes: Vec::new(),
            locals: 0,
            reads: Vec::new(),
            over_self,
        };
        let compiled = bounded.and_then(|()| c.node(&ast));
        dismantle(ast);
        let (root, ty) = compiled?;
        if let Some(why) = wrong(ty) {
            return Err(CelError::at(src, 0, why));
        }
        // Sorted and deduplicated by insertion (a handful per expression): no sort's code.
        let mut reads = Vec::with_capacity(c.reads.len());
        for r in c.reads {
            if let Err(at) = reads.binary_search(&r) {
                reads.insert(at, r);
            }
        }
        Ok(Program {
            source: src.to_string(),
            root,
            locals: c.locals,
            reads,
            max_steps: limits.max_steps,
        })
    }
}

/// Depth and node count of the parsed tree, walked iteratively before anything recursive
/// touches it.
fn tree_bounds(src: &str, ast: &IdedExpr, limits: &CelLimits) -> Result<(), CelError> {
    let max_depth = usize::try_from(limits.max_depth).unwrap_or(usize::MAX);
    let max_nodes = usize::try_from(limits.max_nodes).unwrap_or(usize::MAX);
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(ast, 1)];
    let mut nodes = 0usize;
    while let Some((e, d)) = stack.pop() {
        nodes += 1;
        if d > max_depth {
            return Err(CelError::at(
                src,
                0,
                format!("nested deeper than limits.cel.maxDepth ({max_depth})"),
            ));
        }
        if nodes > max_nodes {
            return Err(CelError::at(
                src,
                0,
                format!("more nodes than limits.cel.maxNodes ({max_nodes}), macros expanded"),
            ));
        }
        match &e.expr {
            Expr::Call(c) => {
                stack.extend(c.target.iter().map(|t| (&**t, d + 1)));
                stack.extend(c.args.iter().map(|a| (a, d + 1)));
            }
            Expr::Comprehension(c) => {
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    stack.push((x, d + 1));
                }
            }
            Expr::List(l) => stack.extend(l.elements.iter().map(|a| (a, d + 1))),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                        stack.push((&me.key, d + 1));
                        stack.push((&me.value, d + 1));
                    }
                }
            }
            Expr::Select(s) => stack.push((&s.operand, d + 1)),
            Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    Ok(())
}

/// Drops a parsed tree without recursion: the tree's own drop recurses once per level, and a
/// long operator chain (`1+1+...`, thousands deep) would overflow a wasm stack.
fn dismantle(root: IdedExpr) {
    use cel::common::ast::EntryExpr;
    let mut stack = vec![root];
    while let Some(mut e) = stack.pop() {
        match &mut e.expr {
            Expr::Call(c) => {
                if let Some(t) = c.target.take() {
                    stack.push(*t);
                }
                stack.append(&mut c.args);
            }
            Expr::Select(s) => stack.push(std::mem::take(&mut *s.operand)),
            Expr::List(l) => stack.append(&mut l.elements),
            Expr::Map(cel::common::ast::MapExpr { entries })
            | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
                for entry in entries.drain(..) {
                    match entry.expr {
                        EntryExpr::MapEntry(me) => {
                            stack.push(me.key);
                            stack.push(me.value);
                        }
                        EntryExpr::StructField(f) => stack.push(f.value),
                    }
                }
            }
            Expr::Comprehension(c) => {
                for x in [
                    &mut c.iter_range,
                    &mut c.accu_init,
                    &mut c.loop_cond,
                    &mut c.loop_step,
                    &mut c.result,
                ] {
                    stack.push(std::mem::take(x));
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

struct Compiler<'s> {
    src: &'s str,
    /// Comprehension variables in scope: (name, slot, is accumulator).
    scopes: Vec<(String, usize, bool)>,
    locals: usize,
    reads: Vec<Attr>,
    /// A compile-time condition: `self` is the only variable.
    over_self: bool,
}

type Compiled = (Node, Ty);

impl Compiler<'_> {
    fn err(&self, word: &str, message: String) -> CelError {
        CelError::about(self.src, word, message)
    }

    fn local(&self, name: &str) -> Option<(usize, bool)> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _, _)| n == name)
            .map(|(_, s, a)| (*s, *a))
    }

    /// A `request.x.y` chain naming an attribute (for `has(request.x.y)` too).
    fn attr_of(&self, e: &IdedExpr) -> Option<Attr> {
        let mut parts = match &e.expr {
            Expr::Select(sel) if sel.test => {
                let mut p = segments(&sel.operand.expr)?;
                p.push(sel.field.as_str());
                p
            }
            other => segments(other)?,
        };
        if self.local(parts.first()?).is_some() {
            return None;
        }
        let name = std::mem::take(&mut parts).join(".");
        if self.over_self {
            return (name == "self").then_some(Attr::SelfValue);
        }
        ATTRS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a)
    }

    /// An unknown name rooted at a variable: the error naming it.
    fn unknown(&self, e: &IdedExpr) -> CelError {
        let parts = segments(&e.expr).unwrap_or_default();
        let name = parts.join(".");
        let last = parts.last().copied().unwrap_or("");
        let known: Vec<&str> = ATTRS
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| n.starts_with(&format!("{name}.")))
            .collect();
        if known.is_empty() {
            self.err(
                last,
                format!(
                    "unknown variable `{name}`{} (variables: docs/semantics.md, \"CEL\")",
                    suggestion(&parts)
                ),
            )
        } else {
            self.err(
                last,
                format!("`{name}` is not a value; use one of {}", known.join(", ")),
            )
        }
    }

    fn node(&mut self, e: &IdedExpr) -> Result<Compiled, CelError> {
        match &e.expr {
            Expr::Literal(l) => Ok(literal(l)),
            Expr::Ident(name) => {
                if let Some((slot, accu)) = self.local(name) {
                    return Ok((
                        if accu {
                            Node::TakeLocal(slot)
                        } else {
                            Node::Local(slot)
                        },
                        Ty::Dyn,
                    ));
                }
                match self.attr_of(e) {
                    Some(a) => Ok(self.attr(a)),
                    None => Err(self.unknown(e)),
                }
            }
            Expr::Select(s) => self.select(e, s),
            Expr::Call(c) => self.call(&c.func_name, c.target.as_deref(), &c.args),
            Expr::List(l) => self.list(l),
            Expr::Map(m) => self.map(m),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Struct(s) => Err(self.err(
                s.type_name.rsplit('.').next().unwrap_or(""),
                format!("message construction ({}) is not supported", s.type_name),
            )),
            Expr::Unspecified => Err(CelError::at(self.src, 0, "empty expression".into())),
        }
    }

    /// `a.b`, `has(a.b)`: an attribute, or a field of a map.
    fn select(&mut self, e: &IdedExpr, s: &SelectExpr) -> Result<Compiled, CelError> {
        if let Some(a) = self.attr_of(e) {
            return Ok(if s.test {
                self.reads.push(a);
                (Node::HasAttr(a), Ty::Bool)
            } else {
                self.attr(a)
            });
        }
        if s.test {
            if let Some(a) = self.attr_of(&s.operand) {
                let (n, ty) = self.attr(a);
                self.want(&s.field, ty, &[Ty::Map], "has()")?;
                return Ok((
                    Node::HasField(Box::new(n), s.field.as_str().into()),
                    Ty::Bool,
                ));
            }
        }
        // A name rooted at a variable that is not one of ours.
        if let Some(root) = segments(&e.expr).and_then(|s| s.first().copied()) {
            if self.local(root).is_none() && self.attr_prefix(&e.expr).is_none() {
                return Err(self.unknown(e));
            }
        }
        let (operand, ty) = self.node(&s.operand)?;
        self.want(&s.field, ty, &[Ty::Map], "field selection")?;
        let field: Arc<str> = s.field.as_str().into();
        Ok(if s.test {
            (Node::HasField(Box::new(operand), field), Ty::Bool)
        } else {
            (Node::Field(Box::new(operand), field), Ty::Dyn)
        })
    }

    fn list(&mut self, l: &ListExpr) -> Result<Compiled, CelError> {
        if !l.optional_indices.is_empty() {
            return Err(CelError::at(
                self.src,
                0,
                "optional list elements are not supported".into(),
            ));
        }
        let items = l
            .elements
            .iter()
            .map(|x| self.node(x).map(|(n, _)| n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Node::List(items), Ty::List))
    }

    fn map(&mut self, m: &MapExpr) -> Result<Compiled, CelError> {
        let mut entries = Vec::with_capacity(m.entries.len());
        for entry in &m.entries {
            match &entry.expr {
                cel::common::ast::EntryExpr::MapEntry(me) if !me.optional => {
                    let (k, kt) = self.node(&me.key)?;
                    if !matches!(kt, Ty::Str | Ty::Int | Ty::Uint | Ty::Bool | Ty::Dyn) {
                        return Err(CelError::at(
                            self.src,
                            0,
                            format!("a map key cannot be {}", crate::a_or_an(kt.name())),
                        ));
                    }
                    let (v, _) = self.node(&me.value)?;
                    entries.push((k, v));
                }
                _ => {
                    return Err(CelError::at(
                        self.src,
                        0,
                        "optional map entries are not supported".into(),
                    ))
                }
            }
        }
        Ok((Node::Map(entries), Ty::Map))
    }

    /// A macro (`all`, `exists`, `map`, ...) as the parser expands it.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Compiled, CelError> {
        let (range, rt) = self.node(&c.iter_range)?;
        self.want(&c.iter_var, rt, &[Ty::List, Ty::Map], "a macro")?;
        if c.iter_var2.is_some() {
            return Err(self.err(
                &c.iter_var,
                "two-variable comprehensions are not supported".into(),
            ));
        }
        let (init, _) = self.node(&c.accu_init)?;
        // The accumulator is moved out where the macro reads it once per iteration
        // (step, result) and copied where it is only looked at (condition).
        let accu = self.new_local();
        self.scopes.push((c.accu_var.clone(), accu, false));
        let iter = self.new_local();
        self.scopes.push((c.iter_var.clone(), iter, false));
        let cond = self.node(&c.loop_cond)?.0;
        self.set_take(accu, true);
        let step = self.node(&c.loop_step)?.0;
        self.scopes.pop();
        let (result, ty) = self.node(&c.result)?;
        self.scopes.pop();
        Ok((
            Node::Comp(Box::new(Comp {
                range,
                iter,
                accu,
                init,
                cond,
                step,
                result,
            })),
            ty,
        ))
    }

    /// Whether a select chain starts with a known attribute (`jwt.claims.groups`).
    fn attr_prefix(&self, e: &Expr) -> Option<Attr> {
        let mut cur = e;
        loop {
            match cur {
                Expr::Select(s) => {
                    if let Some(a) = self.attr_of(&s.operand) {
                        return Some(a);
                    }
                    cur = &s.operand.expr;
                }
                _ => return None,
            }
        }
    }

    fn set_take(&mut self, slot: usize, take: bool) {
        if let Some(entry) = self.scopes.iter_mut().rev().find(|(_, s, _)| *s == slot) {
            entry.2 = take;
        }
    }

    fn new_local(&mut self) -> usize {
        self.locals += 1;
        self.locals - 1
    }

    fn attr(&mut self, a: Attr) -> Compiled {
        self.reads.push(a);
        (Node::Attr(a), a.ty())
    }

    /// A type error when `ty` is known and not one of `want`.
    fn want(&self, word: &str, ty: Ty, want: &[Ty], what: &str) -> Result<(), CelError> {
        if ty == Ty::Dyn || want.contains(&ty) {
            return Ok(());
        }
        let names: Vec<&str> = want.iter().map(|t| t.name()).collect();
        Err(self.err(
            word,
            format!(
                "type error: {what} needs {}, not {}",
                names.join(" or "),
                ty.name()
            ),
        ))
    }

    fn boxed(&mut self, e: &IdedExpr) -> Result<(Box<Node>, Ty), CelError> {
        self.node(e).map(|(n, t)| (Box::new(n), t))
    }

    /// A call: an operator, `matches`, or a function or method of [`FUNCS`].
    fn call(
        &mut self,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Result<Compiled, CelError> {
        if let Some(b) = bin_op(name) {
            return self.binary(name, b, args);
        }
        match name {
            op::LOGICAL_AND | op::LOGICAL_OR => self.logical(name, args),
            op::LOGICAL_NOT | op::NEGATE | op::NOT_STRICTLY_FALSE => self.unary(name, args),
            op::CONDITIONAL => self.conditional(name, args),
            op::INDEX => self.index(name, args),
            "matches" => self.matches(target, args),
            _ => self.function(name, target, args),
        }
    }

    /// The two operands of a binary operator.
    fn two(
        &mut self,
        name: &str,
        args: &[IdedExpr],
    ) -> Result<(Box<Node>, Ty, Box<Node>, Ty), CelError> {
        match args {
            [a, b] => {
                let (x, xt) = self.boxed(a)?;
                let (y, yt) = self.boxed(b)?;
                Ok((x, xt, y, yt))
            }
            _ => Err(self.err(name, format!("`{name}` takes two operands"))),
        }
    }

    /// Arithmetic, comparison and `in`; a string attribute compared with literals becomes a
    /// [`Node::StrTest`] or [`Node::StrIn`].
    fn binary(&mut self, name: &str, b: BinOp, args: &[IdedExpr]) -> Result<Compiled, CelError> {
        let (x, xt, y, yt) = self.two(name, args)?;
        let ty = self.bin_type(b, xt, yt)?;
        let op = match b {
            BinOp::Eq => Some(StrOp::Eq),
            BinOp::Ne => Some(StrOp::Ne),
            _ => None,
        };
        if let (Some(op), Some((attr, lit))) = (op, str_test(&x, &y)) {
            return Ok((Node::StrTest { attr, op, lit }, Ty::Bool));
        }
        if let (BinOp::In, Node::Attr(a), Node::List(items)) = (b, &*x, &*y) {
            let lits: Option<Vec<Arc<str>>> = items
                .iter()
                .map(|i| match i {
                    Node::Lit(Value::Str(Str::Shared(l))) => Some(l.clone()),
                    _ => None,
                })
                .collect();
            if let (Some(set), Ty::Str) = (lits, a.ty()) {
                return Ok((Node::StrIn(*a, set), Ty::Bool));
            }
        }
        Ok((Node::Bin(b, x, y), ty))
    }

    /// `&&`, `||`.
    fn logical(&mut self, name: &str, args: &[IdedExpr]) -> Result<Compiled, CelError> {
        let (x, xt, y, yt) = self.two(name, args)?;
        let word = if name == op::LOGICAL_AND { "&&" } else { "||" };
        for t in [xt, yt] {
            self.want_op(word, t, Ty::Bool)?;
        }
        Ok((
            if name == op::LOGICAL_AND {
                Node::And(x, y)
            } else {
                Node::Or(x, y)
            },
            Ty::Bool,
        ))
    }

    /// `!`, unary `-`, and the macros' `@not_strictly_false`.
    fn unary(&mut self, name: &str, args: &[IdedExpr]) -> Result<Compiled, CelError> {
        let [a] = args else {
            return Err(self.err(name, format!("`{name}` takes one operand")));
        };
        let (x, t) = self.boxed(a)?;
        Ok(match name {
            op::LOGICAL_NOT => {
                self.want_op("!", t, Ty::Bool)?;
                (Node::Not(x), Ty::Bool)
            }
            op::NEGATE => {
                if !matches!(t, Ty::Int | Ty::Double | Ty::Dyn) {
                    return Err(CelError::at(
                        self.src,
                        0,
                        format!("type error: cannot negate {}", t.name()),
                    ));
                }
                (Node::Neg(x), t)
            }
            _ => (Node::NotStrictlyFalse(x), Ty::Bool),
        })
    }

    /// `c ? a : b`.
    fn conditional(&mut self, name: &str, args: &[IdedExpr]) -> Result<Compiled, CelError> {
        let [c, a, b] = args else {
            return Err(self.err(name, "`?:` takes three operands".into()));
        };
        let (c, ct) = self.boxed(c)?;
        self.want_op("?", ct, Ty::Bool)?;
        let (a, at) = self.boxed(a)?;
        let (b, bt) = self.boxed(b)?;
        let ty = if at == bt { at } else { Ty::Dyn };
        Ok((Node::Cond(c, a, b), ty))
    }

    /// `x[i]`, `m[k]`.
    fn index(&mut self, name: &str, args: &[IdedExpr]) -> Result<Compiled, CelError> {
        let (x, xt, y, yt) = self.two(name, args)?;
        let ty = match xt {
            Ty::List => {
                self.want_op("[", yt, Ty::Int)?;
                Ty::Dyn
            }
            Ty::Map | Ty::Dyn => Ty::Dyn,
            other => {
                return Err(CelError::at(
                    self.src,
                    scan::find_ident(self.src, "[").unwrap_or(0),
                    format!("type error: cannot index {}", crate::a_or_an(other.name())),
                ))
            }
        };
        let ty = if xt == Ty::Map && matches!(&*x, Node::Attr(Attr::Headers)) {
            Ty::Str
        } else {
            ty
        };
        Ok((Node::Index(x, y), ty))
    }

    /// A function or method of [`FUNCS`]; `startsWith`, `endsWith` and `contains` of a string
    /// attribute and a literal become a [`Node::StrTest`].
    fn function(
        &mut self,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Result<Compiled, CelError> {
        let method = target.is_some();
        let candidates: Vec<_> = FUNCS
            .iter()
            .filter(|(n, m, ..)| *n == name && *m == method)
            .collect();
        let Some((_, _, f, _, recv)) = candidates
            .iter()
            .find(|(.., counts, _)| counts.contains(&args.len()))
            .copied()
        else {
            return Err(if candidates.is_empty() {
                let how = if method { "method" } else { "function" };
                self.err(name, format!("unsupported {how} `{name}`"))
            } else {
                self.err(
                    name,
                    format!("`{name}` does not take {} arguments", args.len()),
                )
            });
        };
        let mut nodes = Vec::with_capacity(args.len() + 1);
        if let Some(t) = target {
            let (n, ty) = self.node(t)?;
            self.want(name, ty, &[*recv], &format!("`{name}`"))?;
            nodes.push(n);
        }
        for a in args {
            let (n, ty) = self.node(a)?;
            let ok = match f {
                Func::StartsWith | Func::EndsWith | Func::Contains => {
                    matches!(ty, Ty::Str | Ty::Dyn)
                }
                Func::CharAt => matches!(ty, Ty::Int | Ty::Dyn),
                Func::Size => matches!(ty, Ty::Str | Ty::Bytes | Ty::List | Ty::Map | Ty::Dyn),
                _ => true,
            };
            if !ok {
                return Err(self.err(
                    name,
                    format!(
                        "type error: `{name}` cannot take {}",
                        crate::a_or_an(ty.name())
                    ),
                ));
            }
            nodes.push(n);
        }
        let op = match f {
            Func::StartsWith => Some(StrOp::StartsWith),
            Func::EndsWith => Some(StrOp::EndsWith),
            Func::Contains => Some(StrOp::Contains),
            _ => None,
        };
        if let (Some(op), Some(true), [x, y]) = (op, target.map(|_| true), nodes.as_slice()) {
            if let (Node::Attr(_), Some((attr, lit))) = (x, str_test(x, y)) {
                return Ok((Node::StrTest { attr, op, lit }, Ty::Bool));
            }
        }
        Ok((Node::Call(*f, nodes), f.result()))
    }

    fn matches(
        &mut self,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Result<Compiled, CelError> {
        let (subject, pattern) = match (target, args) {
            (Some(t), [p]) => (t, p),
            (None, [t, p]) => (t, p),
            _ => return Err(self.err("matches", "`matches` takes a string and a pattern".into())),
        };
        let (s, ty) = self.boxed(subject)?;
        self.want("matches", ty, &[Ty::Str], "`matches`")?;
        let Expr::Literal(LiteralValue::String(p)) = &pattern.expr else {
            return Err(self.err(
                "matches",
                "`matches` needs a string literal pattern (compiled when the bundle is loaded)"
                    .into(),
            ));
        };
        let p: &str = p.inner();
        // The smallest size class the compiled pattern fits in is its weight: matching costs
        // about text length x compiled size, and is charged as such in steps.
        let mut last = None;
        for (limit, weight) in [(1024, 4), (4096, 16), (16384, 64), (REGEX_SIZE_LIMIT, 256)] {
            match regex_lite::RegexBuilder::new(p).size_limit(limit).build() {
                Ok(re) => {
                    return Ok((
                        Node::Matches {
                            subject: s,
                            re: Arc::new(re),
                            weight,
                        },
                        Ty::Bool,
                    ))
                }
                Err(e) => last = Some(e),
            }
        }
        let why = last.map_or_else(String::new, |e| e.to_string());
        Err(self.err("matches", format!("invalid regular expression: {why}")))
    }

    fn want_op(&self, word: &str, ty: Ty, want: Ty) -> Result<(), CelError> {
        if ty == Ty::Dyn || ty == want {
            return Ok(());
        }
        Err(CelError::at(
            self.src,
            self.src.find(word).unwrap_or(0),
            format!(
                "type error: `{word}` needs {}, not {}",
                want.name(),
                ty.name()
            ),
        ))
    }

    fn bin_type(&self, b: BinOp, x: Ty, y: Ty) -> Result<Ty, CelError> {
        let numeric = |t: Ty| matches!(t, Ty::Int | Ty::Uint | Ty::Double);
        let known = x != Ty::Dyn && y != Ty::Dyn;
        let bad = |what: &str| {
            Err(CelError::at(
                self.src,
                0,
                format!("type error: {what} {} and {}", x.name(), y.name()),
            ))
        };
        match b {
            BinOp::Eq | BinOp::Ne => {
                if known && x != y && !(numeric(x) && numeric(y)) && x != Ty::Null && y != Ty::Null
                {
                    return bad("cannot compare");
                }
                Ok(Ty::Bool)
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                if known && x != y && !(numeric(x) && numeric(y)) {
                    return bad("cannot order");
                }
                Ok(Ty::Bool)
            }
            BinOp::In => {
                if !matches!(y, Ty::List | Ty::Map | Ty::Dyn) {
                    return bad("`in` needs a list or map on the right, got");
                }
                Ok(Ty::Bool)
            }
            BinOp::Add => {
                if !known {
                    return Ok(Ty::Dyn);
                }
                match (x, y) {
                    (Ty::Time, Ty::Duration) | (Ty::Duration, Ty::Time) => Ok(Ty::Time),
                    _ if x == y
                        && matches!(
                            x,
                            Ty::Int
                                | Ty::Uint
                                | Ty::Double
                                | Ty::Str
                                | Ty::Bytes
                                | Ty::List
                                | Ty::Duration
                        ) =>
                    {
                        Ok(x)
                    }
                    _ => bad("cannot add"),
                }
            }
            BinOp::Sub => {
                if !known {
                    return Ok(Ty::Dyn);
                }
                match (x, y) {
                    (Ty::Time, Ty::Duration) => Ok(Ty::Time),
                    (Ty::Time, Ty::Time) => Ok(Ty::Duration),
                    _ if x == y && matches!(x, Ty::Int | Ty::Uint | Ty::Double | Ty::Duration) => {
                        Ok(x)
                    }
                    _ => bad("cannot subtract"),
                }
            }
            BinOp::Mul | BinOp::Div | BinOp::Rem => {
                if !known {
                    return Ok(Ty::Dyn);
                }
                if x == y
                    && (matches!(x, Ty::Int | Ty::Uint) || (x == Ty::Double && b != BinOp::Rem))
                {
                    Ok(x)
                } else {
                    bad("arithmetic on")
                }
            }
        }
    }
}

/// The [`BinOp`] an operator function names, if it is one.
fn bin_op(name: &str) -> Option<BinOp> {
    Some(match name {
        op::ADD => BinOp::Add,
        op::SUBSTRACT => BinOp::Sub,
        op::MULTIPLY => BinOp::Mul,
        op::DIVIDE => BinOp::Div,
        op::MODULO => BinOp::Rem,
        op::EQUALS => BinOp::Eq,
        op::NOT_EQUALS => BinOp::Ne,
        op::LESS => BinOp::Lt,
        op::LESS_EQUALS => BinOp::Le,
        op::GREATER => BinOp::Gt,
        op::GREATER_EQUALS => BinOp::Ge,
        op::IN => BinOp::In,
        _ => return None,
    })
}

/// The segments of a dotted name (`a.b.c`), root first; None for anything else.
fn segments(e: &Expr) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            Expr::Ident(name) => {
                out.push(name.as_str());
                out.reverse();
                return Some(out);
            }
            Expr::Select(s) if !s.test => {
                out.push(s.field.as_str());
                cur = &s.operand.expr;
            }
            _ => return None,
        }
    }
}

fn literal(l: &LiteralValue) -> Compiled {
    match l {
        LiteralValue::Boolean(b) => (Node::Lit(Value::Bool(*b.inner())), Ty::Bool),
        LiteralValue::Int(i) => (Node::Lit(Value::Int(*i.inner())), Ty::Int),
        LiteralValue::UInt(u) => (Node::Lit(Value::Uint(*u.inner())), Ty::Uint),
        LiteralValue::Double(d) => (Node::Lit(Value::Double(*d.inner())), Ty::Double),
        LiteralValue::String(s) => (
            Node::Lit(Value::Str(Str::Shared(Arc::from(s.inner())))),
            Ty::Str,
        ),
        LiteralValue::Bytes(b) => (Node::Lit(Value::Bytes(Arc::from(b.inner()))), Ty::Bytes),
        LiteralValue::Null => (Node::Lit(Value::Null), Ty::Null),
    }
}

/// `; did you mean `x`?` for a variable name `parts` that is close to a known one (its
/// leading segments compared with each variable's), else nothing.
fn suggestion(parts: &[&str]) -> String {
    let best = ATTRS
        .iter()
        .filter_map(|(known, _)| {
            let n = known.split('.').count();
            let head = parts.get(..n)?.join(".");
            let rest = parts.get(n..).unwrap_or_default();
            Some((strsim::jaro_winkler(&head, known), known, rest))
        })
        .filter(|(score, _, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, known, [])) => format!("; did you mean `{known}`?"),
        Some((_, known, rest)) => format!("; did you mean `{known}.{}`?", rest.join(".")),
        None => String::new(),
    }
}
