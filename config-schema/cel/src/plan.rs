//! The plan an expression compiles to: typed nodes over attributes, built-in functions, and
//! [`Program`] (evaluated by [`crate::eval`]).

use std::sync::Arc;

use crate::attrs::Attr;
use crate::time::TimePart;
use crate::value::{Str, Ty, Value};

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
}

/// Tests of a string attribute against a literal ([`Node::StrTest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrOp {
    Eq,
    Ne,
    StartsWith,
    EndsWith,
    Contains,
}

/// The attribute and literal of `attr <op> 'lit'` (either order), if that is what `x`, `y` are.
pub(crate) fn str_test(x: &Node, y: &Node) -> Option<(Attr, Arc<str>)> {
    match (x, y) {
        (Node::Attr(a), Node::Lit(Value::Str(Str::Shared(l))))
        | (Node::Lit(Value::Str(Str::Shared(l))), Node::Attr(a))
            if a.ty() == Ty::Str =>
        {
            Some((*a, l.clone()))
        }
        _ => None,
    }
}

/// Functions and methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Size,
    StartsWith,
    EndsWith,
    Contains,
    LowerAscii,
    UpperAscii,
    Trim,
    Replace,
    Split,
    Substring,
    IndexOf,
    LastIndexOf,
    CharAt,
    Join,
    ToInt,
    ToUint,
    ToDouble,
    ToString,
    ToBool,
    Timestamp,
    Duration,
    /// getFullYear, getMonth, ... (UTC).
    TimePart(TimePart),
}

/// Function name, whether it is called as a method, the function, argument counts allowed
/// (method target not counted), and the receiver type (Dyn: any).
pub(crate) const FUNCS: &[(&str, bool, Func, &[usize], Ty)] = &[
    ("size", false, Func::Size, &[1], Ty::Dyn),
    ("size", true, Func::Size, &[0], Ty::Dyn),
    ("startsWith", true, Func::StartsWith, &[1], Ty::Str),
    ("endsWith", true, Func::EndsWith, &[1], Ty::Str),
    ("contains", true, Func::Contains, &[1], Ty::Str),
    ("lowerAscii", true, Func::LowerAscii, &[0], Ty::Str),
    ("upperAscii", true, Func::UpperAscii, &[0], Ty::Str),
    ("trim", true, Func::Trim, &[0], Ty::Str),
    ("replace", true, Func::Replace, &[2, 3], Ty::Str),
    ("split", true, Func::Split, &[1, 2], Ty::Str),
    ("substring", true, Func::Substring, &[1, 2], Ty::Str),
    ("indexOf", true, Func::IndexOf, &[1, 2], Ty::Str),
    ("lastIndexOf", true, Func::LastIndexOf, &[1, 2], Ty::Str),
    ("charAt", true, Func::CharAt, &[1], Ty::Str),
    ("join", true, Func::Join, &[0, 1], Ty::List),
    ("int", false, Func::ToInt, &[1], Ty::Dyn),
    ("uint", false, Func::ToUint, &[1], Ty::Dyn),
    ("double", false, Func::ToDouble, &[1], Ty::Dyn),
    ("string", false, Func::ToString, &[1], Ty::Dyn),
    ("bool", false, Func::ToBool, &[1], Ty::Dyn),
    ("timestamp", false, Func::Timestamp, &[1], Ty::Dyn),
    ("duration", false, Func::Duration, &[1], Ty::Dyn),
    (
        "getFullYear",
        true,
        Func::TimePart(TimePart::FullYear),
        &[0],
        Ty::Time,
    ),
    (
        "getMonth",
        true,
        Func::TimePart(TimePart::Month),
        &[0],
        Ty::Time,
    ),
    (
        "getDayOfMonth",
        true,
        Func::TimePart(TimePart::DayOfMonth),
        &[0],
        Ty::Time,
    ),
    (
        "getDate",
        true,
        Func::TimePart(TimePart::Date),
        &[0],
        Ty::Time,
    ),
    (
        "getDayOfWeek",
        true,
        Func::TimePart(TimePart::DayOfWeek),
        &[0],
        Ty::Time,
    ),
    (
        "getDayOfYear",
        true,
        Func::TimePart(TimePart::DayOfYear),
        &[0],
        Ty::Time,
    ),
    (
        "getHours",
        true,
        Func::TimePart(TimePart::Hours),
        &[0],
        Ty::Time,
    ),
    (
        "getMinutes",
        true,
        Func::TimePart(TimePart::Minutes),
        &[0],
        Ty::Time,
    ),
    (
        "getSeconds",
        true,
        Func::TimePart(TimePart::Seconds),
        &[0],
        Ty::Time,
    ),
    (
        "getMilliseconds",
        true,
        Func::TimePart(TimePart::Milliseconds),
        &[0],
        Ty::Time,
    ),
];

impl Func {
    pub(crate) fn result(self) -> Ty {
        match self {
            Func::Size | Func::IndexOf | Func::LastIndexOf | Func::ToInt | Func::TimePart(_) => {
                Ty::Int
            }
            Func::StartsWith | Func::EndsWith | Func::Contains | Func::ToBool => Ty::Bool,
            Func::Split => Ty::List,
            Func::ToUint => Ty::Uint,
            Func::ToDouble => Ty::Double,
            Func::Timestamp => Ty::Time,
            Func::Duration => Ty::Duration,
            _ => Ty::Str,
        }
    }
}

/// A compiled expression node.
#[derive(Debug)]
pub(crate) enum Node {
    Lit(Value<'static>),
    Attr(Attr),
    /// Whether an attribute is present (`has(request.mcp.tool_name)`).
    HasAttr(Attr),
    /// A comprehension variable.
    Local(usize),
    /// A comprehension accumulator, moved out when read (macros read it once per step).
    TakeLocal(usize),
    Field(Box<Node>, Arc<str>),
    HasField(Box<Node>, Arc<str>),
    Index(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    /// `@not_strictly_false`: true unless false (errors included).
    NotStrictlyFalse(Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Bin(BinOp, Box<Node>, Box<Node>),
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Call(Func, Vec<Node>),
    /// `s.matches('<literal>')`: the regex compiled at load; matching costs
    /// `text length x weight / 256` steps (weight: 4 to 256 by compiled size).
    Matches {
        subject: Box<Node>,
        re: Arc<regex_lite::Regex>,
        weight: usize,
    },
    /// A string attribute compared with a literal (`request.mcp.tool_name == 'x'`,
    /// `request.path.startsWith('/a')`): evaluated without building values.
    StrTest {
        attr: Attr,
        op: StrOp,
        lit: Arc<str>,
    },
    /// A string attribute `in` a list of string literals.
    StrIn(Attr, Vec<Arc<str>>),
    Comp(Box<Comp>),
}

impl Node {
    /// Pushes the node's operands onto `out`.
    fn children<'a>(&'a self, out: &mut Vec<&'a Node>) {
        match self {
            Node::Lit(_)
            | Node::Attr(_)
            | Node::HasAttr(_)
            | Node::Local(_)
            | Node::TakeLocal(_)
            | Node::StrTest { .. }
            | Node::StrIn(..) => {}
            Node::Field(x, _)
            | Node::HasField(x, _)
            | Node::Not(x)
            | Node::Neg(x)
            | Node::NotStrictlyFalse(x)
            | Node::Matches { subject: x, .. } => out.push(x),
            Node::Index(x, y) | Node::And(x, y) | Node::Or(x, y) | Node::Bin(_, x, y) => {
                out.push(x);
                out.push(y);
            }
            Node::Cond(x, y, z) => out.extend([&**x, &**y, &**z]),
            Node::List(xs) | Node::Call(_, xs) => out.extend(xs),
            Node::Map(kvs) => kvs.iter().for_each(|(k, v)| out.extend([k, v])),
            Node::Comp(c) => out.extend([&c.range, &c.init, &c.cond, &c.step, &c.result]),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Comp {
    pub(crate) range: Node,
    pub(crate) iter: usize,
    pub(crate) accu: usize,
    pub(crate) init: Node,
    pub(crate) cond: Node,
    pub(crate) step: Node,
    pub(crate) result: Node,
}

/// A compiled expression.
#[derive(Debug)]
pub struct Program {
    pub(crate) source: String,
    pub(crate) root: Node,
    /// Comprehension variable slots.
    pub(crate) locals: usize,
    /// Attributes the expression reads, sorted, no duplicates.
    pub(crate) reads: Vec<Attr>,
    pub(crate) max_steps: u32,
}

impl Program {
    /// The expression text.
    #[inline]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The attributes the expression reads.
    #[inline]
    pub fn reads(&self) -> &[Attr] {
        &self.reads
    }

    /// Whether the expression reads `a`.
    #[inline]
    pub fn reads_attr(&self, a: Attr) -> bool {
        self.reads.binary_search(&a).is_ok()
    }

    /// The tool names the condition requires, if one of its top-level `&&` operands is
    /// `request.mcp.tool_name == 'x'` or `request.mcp.tool_name in ['x', ...]`: the condition
    /// can then only be true for a `tools/call` of one of them (for indexing Allow rules).
    pub fn required_tools(&self) -> Option<Vec<&str>> {
        let mut stack = vec![&self.root];
        while let Some(n) = stack.pop() {
            match n {
                Node::And(x, y) => {
                    stack.push(x);
                    stack.push(y);
                }
                Node::StrTest {
                    attr: Attr::ToolName,
                    op: StrOp::Eq,
                    lit,
                } => return Some(vec![&**lit]),
                Node::StrIn(Attr::ToolName, set) => {
                    return Some(set.iter().map(|x| &**x).collect())
                }
                _ => {}
            }
        }
        None
    }

    /// Every literal the expression compares `request.mcp.tool_name` with (`==`, `!=`, `in` a
    /// list of literals), anywhere in it: the names the author meant as tool names.
    pub fn tool_name_literals(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut stack = vec![&self.root];
        while let Some(n) = stack.pop() {
            match n {
                Node::StrTest {
                    attr: Attr::ToolName,
                    op: StrOp::Eq | StrOp::Ne,
                    lit,
                } => out.push(&**lit),
                Node::StrIn(Attr::ToolName, set) => out.extend(set.iter().map(|x| &**x)),
                _ => n.children(&mut stack),
            }
        }
        out
    }
}
