//! TEMPORARY (not committed): native timings and hostile inputs for the `cel` crate.
//! cargo run --release -p mcp-access-engine --features cel-pratt --example cel_measure -- <mode>
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use cel::parser::{Expression, Parser, PrattParser};
use cel::{Context, Value};

const KAN: &str = "request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && request.mcp.tool_name.matches('^get-[a-z]+$')";

fn s(v: &str) -> Value {
    Value::String(Arc::new(v.to_string()))
}

fn request_value() -> Value {
    let mut headers: HashMap<String, Value> = HashMap::new();
    for (k, v) in [("mcp-protocol-version", "2025-06-18"), ("host", "gw.example"), ("content-type", "application/json"),
                   ("accept", "application/json, text/event-stream"), ("mcp-session-id", "abc123"), ("user-agent", "agent/1")] {
        headers.insert(k.into(), s(v));
    }
    let mut mcp: HashMap<String, Value> = HashMap::new();
    mcp.insert("tool_name".into(), s("get-weather"));
    mcp.insert("method".into(), s("tools/call"));
    let mut req: HashMap<String, Value> = HashMap::new();
    req.insert("path".into(), s("/mcp"));
    req.insert("method".into(), s("POST"));
    req.insert("host".into(), s("gw.example"));
    req.insert("headers".into(), Value::from(headers));
    req.insert("mcp".into(), Value::from(mcp));
    Value::from(req)
}

fn context() -> Context<'static, 'static> {
    let mut ctx = root();
    add_vars(&mut ctx);
    ctx
}

fn add_vars(ctx: &mut Context<'_, '_>) {
    ctx.add_variable_from_value("request", request_value());
    let mut src: HashMap<String, Value> = HashMap::new();
    src.insert("principal".into(), s("spiffe://cluster.local/ns/agents/sa/a1"));
    src.insert("namespace".into(), s("agents"));
    ctx.add_variable_from_value("source", Value::from(src));
}

thread_local! {
    static RE: std::cell::RefCell<HashMap<String, regex_lite::Regex>> = std::cell::RefCell::new(HashMap::new());
}

/// `string.matches(pattern)` with regex-lite and a compiled-pattern cache (cel built without `regex`).
fn lite_matches(cel::extractors::This(this): cel::extractors::This<Arc<String>>, pat: Arc<String>) -> bool {
    RE.with(|c| {
        let mut c = c.borrow_mut();
        if !c.contains_key(pat.as_str()) {
            match regex_lite::Regex::new(&pat) { Ok(r) => { c.insert(pat.to_string(), r); } Err(_) => return false }
        }
        c.get(pat.as_str()).is_some_and(|r| r.is_match(&this))
    })
}

fn root() -> Context<'static, 'static> {
    let mut c = Context::default();
    c.add_function("matches", lite_matches).unwrap();
    c
}

fn time<R>(label: &str, n: u32, mut f: impl FnMut() -> R) -> f64 {
    for _ in 0..(n / 10).max(1) { black_box(f()); }
    let t = Instant::now();
    for _ in 0..n { black_box(f()); }
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    println!("{label}: {per:.0} ns/op (n={n})");
    per
}

fn antlr(src: &str) -> Result<Expression, String> { Parser::default().parse(src).map_err(|e| e.to_string()) }
fn pratt(src: &str) -> Result<Expression, String> { PrattParser::default().parse(src).map_err(|e| e.to_string()) }

fn rule(i: usize) -> String {
    format!("request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && request.mcp.tool_name == 'tool-{i:04}' && source.namespace in ['agents', 'ns-{i}']")
}

fn speed() {
    time("parse KAN antlr", 2000, || antlr(KAN).unwrap());
    time("parse KAN pratt", 2000, || pratt(KAN).unwrap());
    let e = pratt(KAN).unwrap();
    let ctx = context();
    assert_eq!(Value::resolve(&e, &ctx).unwrap(), Value::Bool(true));
    time("eval KAN (context prebuilt)", 20000, || Value::resolve(&e, &ctx).unwrap());
    time("build context (~12 values)", 20000, context);
    time("build context + eval KAN", 20000, || { let c = context(); Value::resolve(&e, &c).unwrap() });
    time("Context::default() (Env::stdlib)", 20000, Context::default);
    let root = root();
    time("per-request vars on shared root (~12 values)", 20000, || { let mut c = root.new_inner_scope(); add_vars(&mut c); black_box(&c); });
    time("per-request vars + eval KAN", 20000, || { let mut c = root.new_inner_scope(); add_vars(&mut c); Value::resolve(&e, &c).unwrap() });
    let nore = pratt("request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && request.mcp.tool_name.startsWith('get-')").unwrap();
    time("eval KAN without regex (vars prebuilt)", 20000, || Value::resolve(&nore, &ctx).unwrap());
    let rules: Vec<Expression> = (0..10).map(|i| pratt(&rule(i)).unwrap()).collect();
    time("eval 10 rules (vars prebuilt; no match, all evaluated)", 20000, || {
        rules.iter().filter(|r| Value::resolve(r, &ctx).unwrap() == Value::Bool(true)).count()
    });
    time("per-request vars + eval 10 rules (no match, all evaluated)", 20000, || {
        let mut c = root.new_inner_scope(); add_vars(&mut c);
        rules.iter().filter(|r| Value::resolve(r, &c).unwrap() == Value::Bool(true)).count()
    });
    let srcs: Vec<String> = (0..1000).map(rule).collect();
    time("parse 1000 rules antlr (one load)", 5, || srcs.iter().map(|x| antlr(x).unwrap()).count());
    time("parse 1000 rules pratt (one load)", 5, || srcs.iter().map(|x| pratt(x).unwrap()).count());
}

fn hostile(which: &str, p: &str) {
    let parse = if p == "antlr" { antlr } else { pratt };
    let src = match which {
        "nest10k" => format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000)),
        "nest90" => format!("{}1{}", "(".repeat(90), ")".repeat(90)),
        "list10k" => format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000)),
        "chain10k" => std::iter::repeat_n("1", 10_000).collect::<Vec<_>>().join(" + "),
        "and10k" => std::iter::repeat_n("true", 10_000).collect::<Vec<_>>().join(" && "),
        "str1m" => format!("'{}'.size() > 0", "a".repeat(1 << 20)),
        "regexbomb" => format!("'{}b'.matches('(a+)+$')", "a".repeat(100_000)),
        "regexhuge" => "'a'.matches('a{1000}{1000}')".to_string(),
        "comprehension" => "[0,1,2,3,4,5,6,7,8,9].map(a, [0,1,2,3,4,5,6,7,8,9].map(b, [0,1,2,3,4,5,6,7,8,9].map(c, [0,1,2,3,4,5,6,7,8,9].map(d, [0,1,2,3,4,5,6,7,8,9].map(e, [0,1,2,3,4,5,6,7,8,9].map(f, a+b+c+d+e+f)))))).size()".to_string(),
        "strgrow" => "['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'].map(x, [x+x+x+x+x+x+x+x+x+x].map(y, [y+y+y+y+y+y+y+y+y+y].map(z, z+z+z+z+z+z+z+z+z+z))).size()".to_string(),
        "badutf" => "'\\xff\\xfe'.size()".to_string(),
        "intoverflow" => "9223372036854775807 + 1".to_string(),
        "divzero" => "1 / 0".to_string(),
        "modmin" => "-9223372036854775808 % -1".to_string(),
        "bigint" => "99999999999999999999999999999".to_string(),
        "garbage" => "request.)(.&&||'".to_string(),
        o if o.starts_with("chain") => std::iter::repeat_n("1", o[5..].parse().unwrap()).collect::<Vec<_>>().join(" + "),
        o if o.starts_with("drop") => {
            let src = std::iter::repeat_n("1", o[4..].parse().unwrap()).collect::<Vec<_>>().join(" + ");
            let r = parse(&src);
            println!("{o}: parsed {}", r.is_ok());
            drop(r);
            println!("{o}: dropped");
            return;
        }
        o if o.starts_with("nodes") => {
            let src = std::iter::repeat_n("1", 10_000).collect::<Vec<_>>().join(" + ");
            let r = PrattParser::default().max_expression_node_count(o[5..].parse().unwrap()).parse(&src);
            println!("{o}: {:?}", r.map(|_| "ok").map_err(|e| e.to_string().chars().take(100).collect::<String>()));
            return;
        }
        o if o.starts_with("depth") => {
            let src = std::iter::repeat_n("1", 10_000).collect::<Vec<_>>().join(" + ");
            let r = PrattParser::default().max_recursion_depth(o[5..].parse().unwrap()).parse(&src);
            println!("{o}: {:?}", r.map(|_| "ok").map_err(|e| e.to_string().chars().take(100).collect::<String>()));
            return;
        }
        other => panic!("unknown {other}"),
    };
    let t = Instant::now();
    let r = parse(&src);
    println!("{which}/{p}: parse {:?} in {:?}", r.as_ref().map(|_| "ok").map_err(|e| e.chars().take(120).collect::<String>()), t.elapsed());
    if let Ok(e) = r {
        let ctx = context();
        let t = Instant::now();
        let v = Value::resolve(&e, &ctx);
        let shown = format!("{v:?}");
        println!("{which}/{p}: eval {} in {:?}", shown.chars().take(120).collect::<String>(), t.elapsed());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("speed") => speed(),
        Some("hostile") => {
            // 1 MiB stack: the wasm32 default (Rust's __stack_pointer region).
            let w = args[2].clone();
            let p = args[3].clone();
            std::thread::Builder::new().stack_size(1 << 20).spawn(move || hostile(&w, &p)).unwrap().join().unwrap();
        }
        _ => eprintln!("usage: speed | hostile <case> <antlr|pratt>"),
    }
}
