//! The CEL language over a request: `mcp-access-cel`'s evaluator reading the engine's
//! [`CelInput`] (every variable, absent attributes, operators, limits, hostile expressions).

use mcp_access_cel::{check, variable_names, Attributes, CelLimits, Program, Value, CEL_LIMIT_MAX};
use mcp_access_engine::cel_input::CelInput;
use mcp_access_engine::request::Headers;
use mcp_access_engine::request::{Caller, JwtPrincipal, McpOp, Request};

fn req() -> Request {
    Request {
        method: "POST".into(),
        path: "/mcp/./x/../?a=1".into(),
        canonical_path: "/mcp/".into(),
        authority: "A.Example:8443".into(),
        port: 8443,
        headers: Headers::from(vec![
            ("mcp-protocol-version", "2025-06-18"),
            ("x-team", "blue"),
            ("x-dup", "1"),
            ("x-dup", "2"),
        ]),
        caller: Caller {
            credential: false,
            spiffe: Some("spiffe://example.org/ns/agents/sa/bot".into()),
            jwts: vec![JwtPrincipal {
                texts: Vec::new(),
                keyed: Vec::new(),
                issuer: "https://idp".into(),
                subject: Some("u1".into()),
                claims: Vec::new(),
                payload: Some(serde_json::json!({
                    "iss": "https://idp", "sub": "u1", "groups": ["staff", "ops"],
                    "org": {"team": "blue"}, "level": 3})),
            }],
        },
        mcp: McpOp::Call {
            method: "tools/call".into(),
            param: Some("get-weather".into()),
        },
        route_name: None,
        cluster_name: None,
        time: Some(1_767_323_045_000_000_000), // 2026-01-02T03:04:05Z
        params: Some(serde_json::json!({"name": "get-weather",
            "arguments": {"city": "Paris", "days": 3, "tags": ["a", "b"]}})),
        host: "a.example".into(),
        ..Request::default()
    }
}

fn eval_on(src: &str, r: &Request) -> Result<bool, String> {
    let p = Program::compile(src, &CelLimits::default()).map_err(|e| format!("compile: {e}"))?;
    p.eval(&CelInput {
        req: r,
        host: "a.example",
        backend: Some("ns/weather"),
        trust_domain: Some("example.org"),
        pins: None,
    })
    .map_err(|e| e.message)
}

fn eval(src: &str) -> Result<bool, String> {
    eval_on(src, &req())
}

#[test]
fn kan_expressions_work_unchanged() {
    for src in [
        "request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && request.mcp.tool_name.matches('^get-[a-z]+$')",
        "request.mcp.tool_name == 'get-weather'",
        "request.mcp.tool_name.startsWith('get-')",
        "request.path.startsWith('/mc') &&\n request.headers['mcp-protocol-version'].contains('2025') &&\n request.mcp.tool_name.matches('^get-[a-z]+$')",
    ] {
        assert_eq!(eval(src), Ok(true), "{src}");
    }
    assert_eq!(eval("request.mcp.tool_name == 'non-existent'"), Ok(false));
    // KAN's CRD example.
    assert_eq!(
        eval("request.mcp.tool_name.startsWith('verify_')"),
        Ok(false)
    );
}

#[test]
fn every_variable_reads_the_canonical_attribute() {
    let t = |src: &str| assert_eq!(eval(src), Ok(true), "{src}");
    t("request.path == '/mcp/?a=1'");
    t("request.url_path == '/mcp/'");
    t("request.method == 'POST'");
    // request.host is the :authority as received (Envoy's attribute); hostname is canonical.
    t("request.host == 'A.Example:8443' && request.host.endsWith(':8443')");
    t("request.hostname == 'a.example'");
    t("request.port == 8443");
    t("request.backend == 'ns/weather'");
    // Without a route (or a known backend) they are absent: an error, against the caller.
    assert!(eval("request.route == 'r'").is_err());
    let mut routed = req();
    routed.route_name = Some("weather-route".into());
    assert_eq!(
        eval_on("request.route == 'weather-route'", &routed),
        Ok(true)
    );
    t("request.headers['x-team'] == 'blue' && 'x-team' in request.headers");
    t("request.time == timestamp('2026-01-02T03:04:05Z')");
    t("request.time.getHours() == 3 && request.time.getFullYear() == 2026");
    t("request.time > timestamp('2026-01-01T00:00:00Z') + duration('24h')");
    t("request.mcp.method == 'tools/call' && request.mcp.name == 'get-weather'");
    t("request.mcp.params.arguments.city == 'Paris' && request.mcp.params.arguments.days > 2");
    t("'b' in request.mcp.params.arguments.tags");
    t("source.principal == 'spiffe://example.org/ns/agents/sa/bot'");
    t("source.service_account.namespace == 'agents' && source.service_account.name == 'bot'");
    t("'staff' in jwt.claims.groups && jwt.claims.org.team == 'blue' && jwt.claims.level == 3");
    t("has(jwt.claims.org) && !has(jwt.claims.missing)");
    t("has(request.mcp.tool_name)");
    t("size(request.headers) == 3");
}

#[test]
fn absent_attributes_are_errors() {
    let mut r = req();
    r.mcp = McpOp::Call {
        method: "initialize".into(),
        param: None,
    };
    r.caller = Caller::default();
    r.time = None;
    for src in [
        "request.mcp.tool_name == 'x'",
        "request.mcp.name == 'x'",
        "source.principal == 'x'",
        "request.time.getHours() == 1",
        "request.headers['x-dup'] == '1'",
        "request.headers['absent'] == '1'",
    ] {
        assert!(eval_on(src, &r).is_err(), "{src}");
    }
    assert_eq!(eval_on("!has(request.mcp.tool_name)", &r), Ok(true));
    assert_eq!(eval_on("jwt.claims == {}", &r), Ok(true));
    assert_eq!(eval_on("'x-dup' in request.headers", &r), Ok(true));
}

#[test]
fn the_string_fast_path_agrees_with_the_values() {
    // `text` (string tests) and `attr` (everything else) must read the same request.
    let mut plain = req();
    plain.path = "/mcp".into();
    plain.canonical_path = "/mcp".into();
    plain.route_name = Some("r".into());
    plain.mcp = McpOp::Call {
        method: "resources/read".into(),
        param: Some("file:///a".into()),
    };
    let mut bare = req();
    bare.mcp = McpOp::Transport;
    bare.caller = Caller::default();
    for r in [req(), plain, bare] {
        let input = CelInput {
            req: &r,
            host: "a.example",
            backend: None,
            trust_domain: Some("example.org"),
            pins: None,
        };
        for name in variable_names() {
            let p = Program::compile(&format!("has({name})"), &CelLimits::default()).unwrap();
            let a = p.reads()[0];
            if let Some(s) = input.text(a) {
                match input.attr(a) {
                    Some(Value::Str(v)) => assert_eq!(v.as_str(), s, "{name}"),
                    other => panic!("{name}: text {s:?}, value {other:?}"),
                }
            }
        }
    }
}

#[test]
fn macros_and_operators() {
    let t = |src: &str| assert_eq!(eval(src), Ok(true), "{src}");
    t("[1, 2, 3].all(x, x > 0)");
    t("[1, 2, 3].exists(x, x == 2)");
    t("[1, 2, 3].exists_one(x, x > 2)");
    t("[1, 2, 3].map(x, x * 2) == [2, 4, 6]");
    t("[1, 2, 3].filter(x, x % 2 == 1) == [1, 3]");
    t("jwt.claims.groups.exists(g, g.startsWith('st'))");
    t("request.mcp.params.arguments.tags.all(t, size(t) == 1)");
    t("request.headers.exists(h, h == 'x-team')");
    t("{'a': 1}.a == 1 && 'a' in {'a': 1}");
    t("'Hello'.lowerAscii() == 'hello' && 'a,b'.split(',') == ['a', 'b']");
    t("'abc'.substring(1) == 'bc' && 'abc'.indexOf('c') == 2 && 'abc'.charAt(0) == 'a'");
    t("['a', 'b'].join('-') == 'a-b' && ' x '.trim() == 'x' && 'aXa'.replace('a', 'b') == 'bXb'");
    t("1 == 1.0 && 1u < 2 && int('42') == 42 && string(7) == '7'");
    t("true ? true : false");
    // An error on one side of && / || is absorbed when the other side decides.
    t("false && (1 / 0 == 1) || true");
    t("(1 / 0 == 1) || true");
    assert!(eval("(1 / 0 == 1) && true").is_err());
    assert!(eval("9223372036854775807 + 1 == 0").is_err());
    assert!(eval("-9223372036854775807 - 2 == 0").is_err());
    assert!(eval("1 % 0 == 0").is_err());
    assert!(eval("[1][3] == 1").is_err());
}

#[test]
fn non_boolean_results_are_errors() {
    assert!(eval("request.mcp.params.arguments.city").is_err());
    assert!(eval("jwt.claims.level").is_err());
}

#[test]
fn limits_are_enforced() {
    let small = CelLimits {
        max_expression_bytes: 64,
        max_depth: 8,
        max_nodes: 40,
        max_steps: 50,
    };
    let long = format!("request.path == '{}'", "a".repeat(100));
    assert!(check(&long, &small)
        .unwrap_err()
        .message
        .contains("maxExpressionBytes"));
    let deep = format!("{}true{}", "[".repeat(20), "]".repeat(20));
    assert!(check(&deep, &small)
        .unwrap_err()
        .message
        .contains("maxDepth"));
    let chain = vec!["1"; 30].join("+");
    let e = check(&format!("{chain} == 30"), &small).unwrap_err();
    assert!(e.message.contains("max"), "{e}");
    let p = Program::compile(
        "[1,2,3,4,5,6,7,8,9,10].all(x, [1,2,3,4,5,6,7,8,9,10].all(y, true))",
        &CelLimits {
            max_steps: 50,
            ..CelLimits::default()
        },
    )
    .unwrap();
    let r = req();
    let err = p
        .eval(&CelInput {
            req: &r,
            host: "a.example",
            backend: None,
            trust_domain: None,
            pins: None,
        })
        .unwrap_err();
    assert!(err.budget, "{err}");
}

#[test]
fn hostile_expressions_are_refused_or_bounded() {
    let l = CelLimits::default();
    // A long left-leaning chain: refused before anything recursive sees it.
    for n in [1_000usize, 10_000, 30_000] {
        let src = format!("{} == 1", vec!["1"; n].join("+"));
        assert!(check(
            &src,
            &CelLimits {
                max_expression_bytes: 65536,
                ..l.clone()
            }
        )
        .is_err());
    }
    let nest = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
    assert!(check(
        &format!("{nest} == 1"),
        &CelLimits {
            max_expression_bytes: 65536,
            ..l.clone()
        }
    )
    .is_err());
    assert!(check("'a'.matches('a{1000}{1000}')", &l).is_err());
    assert!(check("99999999999999999999999999999 == 1", &l).is_err());
    // Six nested macros over ten elements: stopped by the step budget.
    let ten = "[0,1,2,3,4,5,6,7,8,9]";
    let src = format!(
        "{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, {ten}.all(e, {ten}.all(f, true))))))"
    );
    assert!(eval(&src).is_err());
}

#[test]
fn regex_matching_is_charged_by_text_length_and_pattern_size() {
    let mut r = req();
    r.params = Some(serde_json::json!({"arguments": {"text": "b".repeat(8192)}}));
    let limits = CelLimits {
        max_steps: 1000,
        ..CelLimits::default()
    };
    let run = |src: &str| {
        Program::compile(src, &limits).unwrap().eval(&CelInput {
            req: &r,
            host: "a.example",
            backend: None,
            trust_domain: None,
            pins: None,
        })
    };
    assert_eq!(
        run("request.mcp.params.arguments.text.matches('^b+$')"),
        Ok(true)
    );
    let big = run("request.mcp.params.arguments.text.matches('^(bbbb|cccc|dddd){40}$')");
    assert!(big.as_ref().is_err_and(|e| e.budget), "{big:?}");
}

#[test]
fn hostile_expressions_at_the_largest_limits_fit_a_wasm_sized_stack() {
    // The largest limits a bundle may set, on a 1 MiB stack (the wasm32 default): every case
    // must end in a result or an error, never a stack overflow (which would abort the test).
    let limits = CEL_LIMIT_MAX;
    let n = 1_990;
    let cases: Vec<String> = vec![
        format!("{} == 1", vec!["1"; n].join("+")),
        format!("{}true", "!".repeat(n)),
        format!("{}1 == 1", "-".repeat(n)),
        format!("jwt.claims{} == 1", ".a".repeat(n / 2)),
        format!("{}1{} == 1", "(".repeat(99), ")".repeat(99)),
        format!("{}1{} == [1]", "[".repeat(99), "]".repeat(99)),
        format!("{}true{}", "[".repeat(60), "]".repeat(60)).replace("[true]", "[true].all(x, x)"),
        format!("{} true", vec!["true &&"; n / 2].join(" ")),
        format!(
            "{}",
            vec!["[1].exists(x, "; 90].join("") + "true" + &")".repeat(90)
        ),
        format!("size({}'a'{})", "string(".repeat(99), ")".repeat(99)) + " == 1",
        format!("'{}' == request.path", "\\\\".repeat(30_000)),
        // A syntax error after a long chain: the parser drops what it built.
        format!("{} +", vec!["1"; n].join("+")),
        format!("{} == )", vec!["1"; n].join("+")),
        format!("[{}", vec!["1+1"; n / 2].join(",")),
    ];
    let worker = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let r = req();
            for src in &cases {
                if let Ok(p) = Program::compile(src, &limits) {
                    let _ = p.eval(&CelInput {
                        req: &r,
                        host: "a.example",
                        backend: None,
                        trust_domain: None,
                        pins: None,
                    });
                }
            }
        })
        .unwrap();
    assert!(worker.join().is_ok());
}
