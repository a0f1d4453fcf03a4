//! Regressions of the leaks attack testing found (issue "Close the leaks"), through the flow
//! the host drives: items judged as calls of themselves alone (docs/semantics.md §5),
//! numbers CEL cannot read (§3), malformed method names and categories (§4), and a
//! `completion/complete` judged by what it completes (§4).

use crate::common;

use common::*;
use mcp_access_engine::flow::{Next, RequestFlow};
use mcp_access_engine::listing::{BodyAction, HeadersAction};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Headers;
use serde_json::{json, Value};

fn send(e: &Engine, extra: &[(&str, &str)], body: &str) -> (RequestFlow, Next) {
    post_through(e, ALPHA, extra, body)
}

fn allowed(a: &Next) -> bool {
    matches!(a, Next::Allow { .. })
}

/// The status and JSON-RPC error code of a refusal.
fn refusal(a: Next) -> (u16, i64) {
    match a {
        Next::Respond(r) => {
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            (r.status, v["error"]["code"].as_i64().unwrap())
        }
        other => panic!("expected a response, got {other:?}"),
    }
}

fn backend(action: &str, rules: Value) -> Value {
    json!({"name": format!("p-{}", action.to_lowercase()), "level": "Backend", "targets": [{"name": "tools"}],
           "action": action, "rules": rules})
}

/// A base-protocol rule beside the others, so that listings themselves are admitted.
fn base() -> Value {
    json!({"name": "base", "authorization": {"mcp": {"baseProtocol": "Match"}}})
}

/// The names a tools/list answer keeps for a listing request carrying `params`.
fn listed(e: &Engine, params: &str) -> Vec<String> {
    let body = format!(r#"{{"jsonrpc":"2.0","id":"L","method":"tools/list","params":{params}}}"#);
    let (flow, a) = send(e, &[], &body);
    let mut f = Filter::of(&flow, &a).unwrap_or_else(|| panic!("no listing filter: {a:?}"));
    let headers = vec![
        (":status".to_string(), "200".to_string()),
        ("content-type".to_string(), "application/json".to_string()),
    ];
    assert_eq!(f.on_headers(&headers), HeadersAction::Rewrite);
    let answer = br#"{"jsonrpc":"2.0","id":"L","result":{"tools":[
        {"name":"echo"},{"name":"add"},{"name":"delete_repo"}]}}"#
        .to_vec();
    let out = match f.on_body(e, answer.len(), true, move |_| Some(answer)) {
        BodyAction::Replace(out) => out,
        other => panic!("{other:?}"),
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn listed_tools_are_judged_without_the_listings_own_params() {
    // An Allow rule reading params.name: a name in the tools/list request once made every
    // item pass; the rule must see each item's name alone.
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([base(), {"name": "cel", "authorization": {"cel":
                "request.mcp.method == 'tools/call' && request.mcp.params.name in ['echo', 'add']"}}]),
        )],
        &[],
    ));
    assert_eq!(listed(&e, "{}"), ["echo", "add"]);
    assert_eq!(listed(&e, r#"{"name":"echo"}"#), ["echo", "add"]);
    assert_eq!(
        listed(&e, r#"{"name":"echo","arguments":{"x":1}}"#),
        ["echo", "add"]
    );

    // A Deny rule reading params: the listing's params neither hide nor reveal anything.
    let e = engine(&bundle(
        vec![
            backend(
                "Allow",
                json!([base(), {"name": "all-tools",
                "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}]),
            ),
            backend(
                "Deny",
                json!([{"name": "no-delete", "authorization": {"cel":
                "request.mcp.method == 'tools/call' && request.mcp.params.name.startsWith('delete')"}}]),
            ),
        ],
        &[],
    ));
    assert_eq!(listed(&e, "{}"), ["echo", "add"]);
    assert_eq!(listed(&e, r#"{"name":"echo"}"#), ["echo", "add"]);

    // A rule reading anything but the item's name errs per item: against the caller.
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([base(), {"name": "args", "authorization": {"cel":
                "request.mcp.method == 'tools/call' && request.mcp.params.arguments.ok == true"}}]),
        )],
        &[],
    ));
    assert!(listed(&e, r#"{"arguments":{"ok":true}}"#).is_empty());
}

#[test]
fn subscribed_uris_are_judged_without_the_listens_own_params() {
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([base(), {"name": "public", "authorization": {"cel":
                "request.mcp.method == 'resources/subscribe' && request.mcp.params.uri == 'file:///public'"}}]),
        )],
        &[],
    ));
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    let listen = |extra: &str, uris: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{{{extra}"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"notifications":{{"resourceSubscriptions":[{uris}]}}}}}}"#
        )
    };
    assert!(allowed(
        &send(&e, &headers, &listen("", r#""file:///public""#)).1
    ));
    // A public "uri" beside the subscriptions once let the secret one through.
    let a = send(
        &e,
        &headers,
        &listen(r#""uri":"file:///public","#, r#""file:///secret""#),
    )
    .1;
    assert_eq!(refusal(a), (403, -32010));
    let a = send(
        &e,
        &headers,
        &listen(
            r#""uri":"file:///public","#,
            r#""file:///public","file:///secret""#,
        ),
    )
    .1;
    assert_eq!(refusal(a), (403, -32010));
}

#[test]
fn numbers_no_double_holds_are_malformed_not_absent() {
    // A Deny guarded by `'arguments' in params` once missed a call whose arguments held 1e400:
    // CEL saw params as empty.
    let e = engine(&bundle(
        vec![
            backend(
                "Allow",
                json!([base(), {"name": "tools",
                "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}]),
            ),
            backend(
                "Deny",
                json!([{"name": "no-args", "authorization": {"cel":
                "'arguments' in request.mcp.params"}}]),
            ),
        ],
        &[],
    ));
    let call = |n: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{n}}}}}}}"#
        )
    };
    for n in ["1e400", "-1e999", &"9".repeat(400), "[1,2e308]"] {
        assert_eq!(refusal(send(&e, &[], &call(n)).1), (400, -32700), "{n}");
    }
    // Arguments CEL can read are there: the Deny matches.
    assert_eq!(refusal(send(&e, &[], &call("1e300")).1), (403, -32010));
    let plain = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
    assert!(allowed(&send(&e, &[], plain).1));
}

#[test]
fn malformed_method_names_are_refused_whatever_the_rules() {
    // A rule without `mcp` admits any method; a base-protocol rule admits notifications/*.
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([{"name": "any", "authorization": {"paths": [{"type": "Exact", "value": "/mcp"}]}}]),
        )],
        &[],
    ));
    for m in [
        "notifications/../tools/call",
        "tools/list/",
        "tools/list ",
        "tools//call",
        "tools/./call",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        assert_eq!(refusal(send(&e, &[], &body).1), (400, -32600), "{m}");
    }
}

#[test]
fn categories_admit_the_method_tables_methods_only() {
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([{"name": "tools",
            "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}]),
        )],
        &[],
    ));
    let body = |m: &str| format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
    assert!(allowed(&send(&e, &[], &body("tools/list")).1));
    // Not a tools method, however it starts.
    assert_eq!(
        refusal(send(&e, &[], &body("tools/secret")).1),
        (403, -32010)
    );
    // A Deny naming the category matches under its prefix too: against the caller.
    let e = engine(&bundle(
        vec![
            backend("Allow", json!([{"name": "any", "authorization": {}}])),
            backend(
                "Deny",
                json!([{"name": "no-tools",
                "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}]),
            ),
        ],
        &[],
    ));
    assert_eq!(
        refusal(send(&e, &[], &body("tools/secret")).1),
        (403, -32010)
    );
    assert!(allowed(&send(&e, &[], &body("ping")).1));
}

#[test]
fn completion_is_judged_by_the_prompt_or_resource_it_completes() {
    let e = engine(&bundle(
        vec![backend(
            "Allow",
            json!([{"name": "some", "authorization": {"mcp": {
            "baseProtocol": "Match", "methods": [
                {"name": "prompts/get", "params": ["greet"]},
                {"name": "resources/read", "params": ["file:///public"]}]}}}]),
        )],
        &[],
    ));
    let complete = |r: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{{"ref":{r},"argument":{{"name":"a","value":""}}}}}}"#
        )
    };
    for ok in [
        r#"{"type":"ref/prompt","name":"greet"}"#,
        r#"{"type":"ref/resource","uri":"file:///public"}"#,
    ] {
        assert!(allowed(&send(&e, &[], &complete(ok)).1), "{ok}");
    }
    for denied in [
        r#"{"type":"ref/prompt","name":"secret"}"#,
        r#"{"type":"ref/resource","uri":"file:///secret"}"#,
        // The name a prompt ref does not use does not count.
        r#"{"type":"ref/prompt","name":"secret","uri":"file:///public"}"#,
    ] {
        assert_eq!(
            refusal(send(&e, &[], &complete(denied)).1),
            (403, -32010),
            "{denied}"
        );
    }
    for malformed in [
        r#"{"type":"ref/other","name":"greet"}"#,
        r#"{"type":"ref/prompt"}"#,
        r#"{"type":"ref/resource","name":"greet"}"#,
        r#""greet""#,
    ] {
        assert_eq!(
            refusal(send(&e, &[], &complete(malformed)).1),
            (400, -32602),
            "{malformed}"
        );
    }
    let no_ref = r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{}}"#;
    assert_eq!(refusal(send(&e, &[], no_ref).1), (400, -32602));
}

/// A Backend allowing every tool call, for the transport checks below.
fn any_tool() -> Engine {
    engine(&bundle(
        vec![backend(
            "Allow",
            json!([base(), {"name": "tools",
            "authorization": {"mcp": {"methods": [{"name": "tools"}]}}}]),
        )],
        &[],
    ))
}

const ECHO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;

#[test]
fn underscore_spellings_of_mcp_headers_are_copies() {
    let e = any_tool();
    assert!(allowed(&send(&e, &[("mcp-name", "echo")], ECHO).1));
    // A server folding `_` into `-` would read these as Mcp-Name.
    for extra in [
        &[("mcp_name", "delete_repo")][..],
        &[("mcp-name", "echo"), ("mcp_name", "echo")],
        &[("mcp_method", "tools/list")],
        &[
            ("mcp_protocol_version", "2025-06-18"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    ] {
        assert_eq!(refusal(send(&e, extra, ECHO).1), (400, -32020), "{extra:?}");
    }
    // Agreeing with the body, it is one copy like any other.
    assert!(allowed(&send(&e, &[("mcp_name", "echo")], ECHO).1));
}

#[test]
fn mcp_headers_sent_as_trailers_are_refused() {
    let e = any_tool();
    let post = |trailers: &[(&str, &str)]| {
        let mut flow = RequestFlow::new();
        assert_eq!(flow.on_headers(&e, post_input(ALPHA, &[])).next, Next::Hold);
        assert_eq!(
            flow.on_body(&e, ECHO.len(), false, |_| None).next,
            Next::Hold
        );
        let trailers: Vec<(String, String)> = trailers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        flow.on_trailers(&e, &Headers::from(&trailers), |_| {
            Some(ECHO.as_bytes().to_vec())
        })
        .next
    };
    assert!(allowed(&post(&[])));
    assert!(allowed(&post(&[("x-checksum", "abc")])));
    for name in ["mcp-name", "mcp-method", "Mcp-Protocol-Version", "mcp_name"] {
        assert_eq!(
            refusal(post(&[(name, "delete_repo")])),
            (400, -32020),
            "{name}"
        );
    }
}

#[test]
fn a_post_must_say_it_is_json_in_utf8() {
    let e = any_tool();
    let with_type = |ct: Option<&str>| {
        let mut i = post_input(ALPHA, &[]);
        i.headers.retain(|n, _| n != "content-type");
        if let Some(ct) = ct {
            i.headers.push("content-type", ct);
        }
        let mut flow = RequestFlow::new();
        match flow.on_headers(&e, i).next {
            Next::Hold => {}
            other => return other,
        }
        let owned = ECHO.as_bytes().to_vec();
        flow.on_body(&e, owned.len(), true, move |_| Some(owned))
            .next
    };
    assert!(allowed(&with_type(Some("application/json"))));
    assert!(allowed(&with_type(Some("application/json; charset=utf-8"))));
    for ct in [
        None,
        Some("text/plain"),
        Some("application/json; charset=iso-8859-1"),
        Some("application/json; charset=utf-16"),
    ] {
        assert_eq!(refusal(with_type(ct)).0, 415, "{ct:?}");
    }
}
