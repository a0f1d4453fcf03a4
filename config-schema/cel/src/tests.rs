use super::*;

#[test]
fn check_names_position_and_problem() {
    let l = CelLimits::default();
    let e = check("request.path == 'a' &&\n  request.nope == 1", &l).unwrap_err();
    assert_eq!((e.line, e.column), (2, 11), "{e}");
    assert!(e.message.contains("unknown variable `request.nope`"), "{e}");
    let e = check("request.path.frobnicate()", &l).unwrap_err();
    assert!(e.message.contains("unsupported method `frobnicate`"), "{e}");
    assert_eq!(e.column, 14, "{e}");
    let e = check("request.path ==", &l).unwrap_err();
    assert_eq!(e.line, 1, "{e}");
    let e = check("request.port + 'a' == 1", &l).unwrap_err();
    assert!(e.message.contains("type error"), "{e}");
    let e = check("request.port[0] == 1", &l).unwrap_err();
    assert!(e.message.contains("cannot index an int"), "{e}");
    let e = check("request.path", &l).unwrap_err();
    assert!(e.message.contains("must be boolean"), "{e}");
    let e = check("request.path.matches('(')", &l).unwrap_err();
    assert!(e.message.contains("invalid regular expression"), "{e}");
    let e = check("request.path.matches(request.method)", &l).unwrap_err();
    assert!(e.message.contains("literal"), "{e}");
    let e = check("request.mcp == 1", &l).unwrap_err();
    assert!(e.message.contains("request.mcp.tool_name"), "{e}");
    let e = check("foo.bar == 1", &l).unwrap_err();
    assert!(e.message.contains("unknown variable `foo.bar`"), "{e}");
    assert!(e.to_string().starts_with("CEL line 1, column 5: "), "{e}");
}

#[test]
fn conditions_over_self() {
    let spec = serde_json::json!({"action": "Allow", "rules": [{"name": "a"}, {"name": "b"}, {"name": "c"}]});
    let lim = CelLimits::default();
    let run = |src: &str| SelfCondition::compile(src, &lim).map(|c| c.eval(&spec));
    assert_eq!(run("size(self.rules) > 2"), Ok(Ok(true)));
    assert_eq!(run("self.action == 'Deny'"), Ok(Ok(false)));
    assert_eq!(run("self.rules.exists(r, r.name == 'b')"), Ok(Ok(true)));
    // A missing field errs at evaluation; a request attribute is not a variable here.
    assert!(matches!(run("self.when.size() > 0"), Ok(Err(_))));
    assert!(run("request.path == '/'").is_err());
    assert!(run("size(self.rules").is_err());
    // ... and `self` is not a request attribute.
    assert!(Program::compile("self.x == 1", &lim).is_err());
}

#[test]
fn tool_name_literals_are_found_anywhere() {
    let lim = CelLimits::default();
    let names = |src: &str| -> Vec<String> {
        let p = Program::compile(src, &lim).unwrap_or_else(|e| panic!("{src}: {e}"));
        let mut v: Vec<String> = p
            .tool_name_literals()
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("request.mcp.tool_name == 'a'"), ["a"]);
    assert_eq!(names("'a' != request.mcp.tool_name"), ["a"]);
    assert_eq!(
        names("request.path == '/x' || !(request.mcp.tool_name in ['b', 'c'])"),
        ["b", "c"]
    );
    assert_eq!(
        names("[1].exists(i, request.mcp.tool_name == 'd') ? true : request.mcp.tool_name == 'e'"),
        ["d", "e"]
    );
    // A prefix test names no tool; other attributes' literals are not tool names.
    assert!(names("request.mcp.tool_name.startsWith('del') && request.path == '/a'").is_empty());
}

#[test]
fn counters_are_scalars_and_null_is_no_value() {
    use crate::Counter;
    let limits = CelLimits::default();
    assert!(Counter::compile("[1]", &limits)
        .unwrap_err()
        .message
        .contains("string, number or bool"));
    let e = Counter::compile("jwt.claim.sub", &limits).unwrap_err();
    assert!(e.message.contains("did you mean `jwt.claims.sub`?"), "{e}");
    let e = check("request.mcp.tool_nam == 'x'", &limits).unwrap_err();
    assert!(
        e.message.contains("did you mean `request.mcp.tool_name`?"),
        "{e}"
    );
    let c = Counter::compile("'a' + 'b'", &limits).unwrap();
    assert_eq!(c.source(), "'a' + 'b'");
    struct Claims(serde_json::Value);
    impl Attributes for Claims {
        fn attr(&self, a: Attr) -> Option<Value<'_>> {
            (a == Attr::JwtClaims).then_some(Value::Json(&self.0))
        }
    }
    let none = Claims(serde_json::json!({"sub": null, "n": 7, "l": [1]}));
    assert_eq!(c.eval(&none).unwrap().as_deref(), Some("ab"));
    let sub = Counter::compile("jwt.claims.sub", &limits).unwrap();
    assert_eq!(sub.eval(&none).unwrap(), None);
    let n = Counter::compile("jwt.claims.n", &limits).unwrap();
    assert_eq!(n.eval(&none).unwrap().as_deref(), Some("7"));
    assert!(Counter::compile("{'a': 1}", &limits).is_err());
    let l = Counter::compile("jwt.claims.l", &limits).unwrap();
    assert!(l.eval(&none).is_err(), "a list is no counter value");
    assert!(Counter::compile("jwt.claims.gone", &limits)
        .unwrap()
        .eval(&none)
        .is_err());
}
