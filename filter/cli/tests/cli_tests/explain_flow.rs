//! `explain` runs the filter's request flow: transport checks answer before any policy, the
//! response printed is the one the client gets, Allow rules say why they did not admit,
//! `--assume` keys must name something, and a path no route matches is what Envoy does with it.

use std::collections::BTreeMap;

use mcp_access_bundle::Bundle;
use mcp_access_cli::explain::{
    explain, parse_assumption, to_text, Explanation, HeaderView, McpView, RequestSpec, Stage,
};
use mcp_access_k8s::{compile, Manifests, Options};
use serde_json::{json, Value};

const ALPHA: &str = "spiffe://example.org/ns/agents/sa/alpha";
const BETA: &str = "spiffe://example.org/ns/agents/sa/beta";

fn bundle(policies: Value, extra: Value) -> Bundle {
    let mut b = json!({
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
        "backends": [{"name": "tools", "routeNames": ["tools-route"]}],
        "authorizers": [{"name": "opa", "cluster": "opa-cluster"}],
        "policies": policies,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    mcp_access_bundle::parse_bundle(b.to_string().as_bytes())
        .unwrap()
        .into_inner()
}

/// Alpha may call `echo`; paths under /mcp/admin are denied; `opa` is asked about every call.
fn policies() -> Value {
    json!([
        {"name": "check", "level": "Gateway", "targets": [{"name": "gw"}], "action": "ExternalAuth",
         "externalAuth": "opa", "seniority": 1},
        {"name": "no-admin", "level": "Gateway", "targets": [{"name": "gw"}], "action": "Deny",
         "seniority": 2, "rules": [{"name": "admin", "authorization":
            {"paths": [{"type": "PathPrefix", "value": "/mcp/admin"}]}}]},
        {"name": "alpha", "level": "Gateway", "targets": [{"name": "gw"}], "action": "Allow",
         "seniority": 3, "rules": [{"name": "echo", "source": {"type": "SPIFFE", "spiffe": ALPHA},
            "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]}]}}}]}
    ])
}

fn spec(tool: &str, headers: &[(&str, &str)]) -> RequestSpec {
    RequestSpec {
        backend: Some("tools".into()),
        spiffe: Some(ALPHA.into()),
        mcp_method: Some("tools/call".into()),
        param: Some(tool.into()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..RequestSpec::default()
    }
}

fn run(b: &Bundle, s: &RequestSpec) -> Explanation {
    explain(b, None, s).unwrap()
}

/// Status, reason, stage, and the JSON-RPC error code of the response body.
fn answer(e: &Explanation) -> (Option<u16>, &'static str, Stage, Option<i64>) {
    let code = e
        .response
        .as_ref()
        .and_then(|r| serde_json::from_str::<Value>(&r.body).ok()?["error"]["code"].as_i64());
    (e.status, e.reason.as_str(), e.stage, code)
}

#[test]
fn transport_checks_answer_as_the_filter_does_before_any_policy() {
    let b = bundle(policies(), json!({"limits": {"maxBodyBytes": 200}}));
    // Allowed as it is: the flow reaches the policies.
    let e = run(&b, &spec("echo", &[]));
    assert_eq!((e.decision.as_str(), e.stage), ("allow", Stage::Policy));
    use Stage::Transport;
    /// Headers, then the status, reason and JSON-RPC code they get.
    type Case<'a> = (&'a [(&'a str, &'a str)], (u16, &'a str, i64));
    let cases: &[Case] = &[
        (
            &[("Content-Encoding", "gzip")],
            (415, "unsupported_encoding", -32600),
        ),
        (
            &[("content-type", "text/plain")],
            (415, "unsupported_media_type", -32600),
        ),
        (
            &[("content-length", "5000")],
            (413, "body_too_large", -32600),
        ),
        (
            &[("content-length", "x")],
            (400, "invalid_content_length", -32600),
        ),
        (
            &[("mcp-method", "tools/list")],
            (400, "header_mismatch", -32020),
        ),
        (&[("mcp-name", "add")], (400, "header_mismatch", -32020)),
    ];
    for (headers, (status, reason, code)) in cases {
        let e = run(&b, &spec("echo", headers));
        assert_eq!(
            answer(&e),
            (Some(*status), *reason, Transport, Some(*code)),
            "{headers:?}: {e:#?}"
        );
        assert_eq!(e.decision.as_str(), "deny");
        // No policy was looked at, no authorizer asked.
        assert!(e.calls.is_empty() && e.trace.is_empty(), "{headers:?}");
    }
    // The exact response: JSON-RPC error echoing the id, as JSON.
    let e = run(&b, &spec("echo", &[("mcp-method", "tools/list")]));
    let r = e.response.as_ref().unwrap();
    assert_eq!(
        r.headers,
        [HeaderView {
            name: "content-type".into(),
            value: "application/json".into()
        }]
    );
    assert_eq!(
        r.body,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Mcp-Method header does not match the request body"}}"#
    );
    // The body itself over the limit (the declared length agrees).
    let long = "x".repeat(300);
    let e = run(&b, &spec(&long, &[]));
    assert_eq!(answer(&e).0, Some(413));
    // A body that is no JSON-RPC request, and one without its tool name.
    let mut s = spec("echo", &[]);
    s.body = Some("[1]".into());
    s.mcp_method = None;
    s.param = None;
    let e = run(&b, &s);
    assert_eq!(e.stage, Transport);
    assert_eq!(e.status, Some(400));
    let mut s = spec("echo", &[]);
    s.param = None;
    let e = run(&b, &s);
    assert_eq!(
        answer(&e),
        (Some(400), "invalid_params", Transport, Some(-32602))
    );
    // The header-revision request carrying the right headers goes through.
    let ok = [
        ("mcp-method", "tools/call"),
        ("mcp-name", "=?base64?ZWNobw==?="),
    ];
    assert_eq!(run(&b, &spec("echo", &ok)).decision.as_str(), "allow");
    // A POST without a body.
    let mut s = spec("echo", &[]);
    s.mcp_method = None;
    s.param = None;
    assert_eq!(
        answer(&run(&b, &s)),
        (Some(400), "invalid_json", Transport, Some(-32700))
    );
    // GET (the SSE stream) has no body: base protocol, which alpha's rule does not admit.
    s.method = Some("GET".into());
    let e = run(&b, &s);
    assert!(matches!(e.request.mcp, Some(McpView::Other(_))), "{e:#?}");
    assert_eq!((e.stage, e.reason.as_str()), (Stage::Policy, "not_allowed"));
}

#[test]
fn paths_are_canonical_as_in_the_filter() {
    let b = bundle(policies(), json!({}));
    let at = |path: &str| {
        let mut s = spec("echo", &[]);
        s.path = Some(path.into());
        run(&b, &s)
    };
    for p in ["/mcp/admin", "/mcp/./admin", "/mcp//admin", "/mcp/%61dmin"] {
        let e = at(p);
        assert_eq!(
            (e.reason.as_str(), e.stage),
            ("deny_policy", Stage::Policy),
            "{p}"
        );
        assert_eq!(e.rule.as_deref(), Some("admin"));
    }
    let e = at("/mcp%2Fadmin");
    assert_eq!(
        answer(&e),
        (Some(400), "invalid_path", Stage::Transport, Some(-32600))
    );
    assert_eq!(at("/mcp/administrator").decision.as_str(), "allow");
}

#[test]
fn an_allow_prints_the_upstream_headers_and_a_denial_the_response() {
    let b = bundle(policies(), json!({}));
    let e = run(&b, &spec("echo", &[]));
    assert_eq!(e.add_headers, Some(Vec::new()));
    assert!(e.response.is_none());
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["addHeaders"], json!([]));
    assert_eq!(v["stage"], "policy");
    assert!(v.get("response").is_none() && v.get("status").is_none());
    // The authorizer's denial is relayed as it is: its status, no JSON-RPC body of our own.
    let mut s = spec("echo", &[]);
    s.assume = BTreeMap::from([("check".to_string(), parse_assumption("deny:401").unwrap())]);
    let e = run(&b, &s);
    assert_eq!(answer(&e).0, Some(401));
    assert_eq!(e.response.as_ref().unwrap().status, 401);
    assert_eq!(e.calls.len(), 1);
    assert!(e.calls[0].given);
    assert_eq!(e.calls[0].cluster, "opa-cluster");
    // An error fails closed (the default failure mode); the filter's own 403 answers.
    s.assume = BTreeMap::from([("opa".to_string(), parse_assumption("error").unwrap())]);
    let e = run(&b, &s);
    assert_eq!(
        (e.reason.as_str(), e.status),
        ("authorizer_error", Some(403))
    );
    let text = to_text(&e);
    assert!(text.contains("response  HTTP 403"), "{text}");
    assert!(text.contains(r#""code":-32010"#), "{text}");
    // A denial status outside 300-499 is not a denial to the filter.
    assert!(parse_assumption("deny:503").is_err());
    assert!(parse_assumption("deny:200").is_err());
}

#[test]
fn each_allow_rule_says_why_it_did_not_admit() {
    let rule = |name: &str, authz: Value| json!({"name": name, "authorization": authz});
    let call =
        |tools: &[&str]| json!({"mcp": {"methods": [{"name": "tools/call", "params": tools}]}});
    let mut rules = vec![
        json!({"name": "source", "source": {"type": "SPIFFE", "spiffe": BETA}}),
        rule("http-method", json!({"methods": ["GET"]})),
        rule("port", json!({"ports": [9443]})),
        rule("host", json!({"hosts": ["other.example"]})),
        rule(
            "path",
            json!({"paths": [{"type": "Exact", "value": "/other"}]}),
        ),
        rule(
            "header",
            json!({"headers": [{"name": "X-Team", "value": "blue"}]}),
        ),
        rule(
            "mcp-method",
            json!({"mcp": {"methods": [{"name": "prompts/get"}]}}),
        ),
        rule("param", call(&["add"])),
    ];
    let policy = |rules: &[Value]| {
        json!([{"name": "gate", "level": "Gateway", "targets": [{"name": "gw"}],
                "action": "Allow", "rules": rules}])
    };
    let b = bundle(policy(&rules), json!({}));
    let e = run(&b, &spec("echo", &[("x-team", "red")]));
    assert_eq!((e.reason.as_str(), e.stage), ("not_allowed", Stage::Policy));
    let why: Vec<(&str, String)> = e
        .trace
        .iter()
        .filter(|t| t.event.step() == "allow")
        .map(|t| (t.rule.as_deref().unwrap_or("-"), t.event.to_string()))
        .collect();
    let why: Vec<(&str, &str)> = why.iter().map(|(r, w)| (*r, w.as_str())).collect();
    assert_eq!(
        why,
        [
            ("source", "not admitted: source does not match"),
            ("http-method", "not admitted: HTTP method does not match"),
            ("port", "not admitted: port does not match"),
            ("host", "not admitted: host does not match"),
            ("path", "not admitted: path does not match"),
            ("header", "not admitted: header x-team does not match"),
            ("mcp-method", "not admitted: MCP method does not match"),
            ("param", "not admitted: param does not match"),
            ("-", "no rule admits"),
        ]
    );
    // With a rule that admits, the trace names it and lists no misses.
    rules.push(rule("echo", call(&["echo"])));
    let b = bundle(policy(&rules), json!({}));
    let e = run(&b, &spec("echo", &[]));
    assert_eq!(e.rule.as_deref(), Some("echo"));
    let allow: Vec<String> = e
        .trace
        .iter()
        .filter(|t| t.event.step() == "allow" && t.level == "gateway")
        .map(|t| t.event.to_string())
        .collect();
    assert_eq!(allow, ["admitted"]);
}

#[test]
fn assume_keys_must_name_an_authorizer_or_an_external_auth_policy() {
    let b = bundle(policies(), json!({}));
    let with = |key: &str| {
        let mut s = spec("echo", &[]);
        s.assume = BTreeMap::from([(key.to_string(), parse_assumption("deny").unwrap())]);
        explain(&b, None, &s)
    };
    for ok in ["check", "default/check", "opa", "*"] {
        assert_eq!(
            with(ok).unwrap().reason.as_str(),
            "external_auth_denied",
            "{ok}"
        );
    }
    let err = with("chekc").unwrap_err().message;
    assert!(
        err.contains("--assume chekc: no policy or authorizer"),
        "{err}"
    );
    let err = with("alpha").unwrap_err().message;
    assert!(err.contains("calls no authorizer"), "{err}");
}

fn routed() -> String {
    crate::fail_closed::shop("  - matches: [{path: {type: PathPrefix, value: /old}}]\n    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /mcp}}}]\n")
}

#[test]
fn a_path_no_route_matches_is_what_envoy_does_with_it() {
    let mut m = Manifests::default();
    m.add_text("routed.yaml", &routed(), "default");
    let at = |opts: &Options, path: &str| {
        let c = compile(&m, opts);
        let s = RequestSpec {
            path: Some(path.into()),
            mcp_method: Some("ping".into()),
            ..RequestSpec::default()
        };
        explain(&c.bundle, Some(&c.topology), &s).unwrap()
    };
    // The default (unknownBackend: Deny): the filter answers before Envoy's router could.
    let e = at(&Options::default(), "/elsewhere");
    assert_eq!(
        (e.reason.as_str(), e.stage),
        ("unknown_backend", Stage::Resolve)
    );
    assert_eq!(e.level.map(|l| l.as_str()), Some("none"));
    assert_eq!(e.status, Some(403));
    assert!(e.policy.is_none() && e.rule.is_none());
    assert!(e.note.as_deref().unwrap().contains("no HTTPRoute matches"));
    // unknownBackend: GatewayOnly: the Gateway level lets it on, Envoy answers 404.
    let open = Options {
        unknown_backend: Some(mcp_access_bundle::UnknownBackend::GatewayOnly),
        ..Options::default()
    };
    let e = at(&open, "/elsewhere");
    assert_eq!(
        (e.decision.as_str(), e.reason.as_str(), e.stage, e.status),
        ("deny", "no_route", Stage::Router, Some(404))
    );
    assert_eq!(e.response.as_ref().unwrap().status, 404);
    // A redirecting route: the filter decides first (no backend), then Envoy redirects.
    let e = at(&open, "/old/x");
    assert_eq!((e.reason.as_str(), e.status), ("route_redirect", Some(301)));
    // A routed path goes through.
    assert_eq!(at(&open, "/mcp").decision.as_str(), "allow");
}

#[test]
fn the_command_prints_the_response_and_rejects_unknown_assumptions() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quickstart.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "-f",
            fixture.to_str().unwrap(),
            "--trust-domain",
            "example.org",
            "--path",
            "/tools/mcp",
            "--service-account",
            "agents/alpha",
            "--tool",
            "echo",
        ];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_mcp-access"))
            .args(&args)
            .output()
            .unwrap()
    };
    let out = run(&["-H", "content-encoding:gzip", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], 415);
    assert_eq!(v["stage"], "transport");
    assert_eq!(v["reason"], "unsupported_encoding");
    assert_eq!(v["response"]["status"], 415);
    assert_eq!(
        v["response"]["body"],
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Content-Encoding is not supported"}}"#
    );
    let out = run(&["-H", "content-encoding:gzip"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("decision  DENY 415 at none (unsupported_encoding)"),
        "{text}"
    );
    assert!(text.contains("response  HTTP 415"), "{text}");
    let out = run(&["--assume", "gateway-risk-chek=deny"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--assume gateway-risk-chek"), "{err}");
}

#[test]
fn grpc_authorizers_are_explained_like_http_ones() {
    let b = bundle(
        policies(),
        json!({"authorizers": [{"name": "opa", "cluster": "opa-grpc", "protocol": "GRPC"}]}),
    );
    let e = run(&b, &spec("echo", &[]));
    assert_eq!(e.decision.as_str(), "allow");
    assert_eq!(e.calls.len(), 1);
    // Policy and level come from the CheckRequest's context extensions.
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(
        (&v["calls"][0]["policy"], &v["calls"][0]["level"]),
        (&json!("default/check"), &json!("gateway")),
        "{v}"
    );
    assert_eq!(e.calls[0].cluster, "opa-grpc");
    let mut s = spec("echo", &[]);
    s.assume = BTreeMap::from([("check".to_string(), parse_assumption("deny:401").unwrap())]);
    assert_eq!(run(&b, &s).status, Some(401));
}
