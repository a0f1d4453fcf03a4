//! OAuth discovery (docs/semantics.md §5.6): a denial of a caller without a credential on a
//! listener with protected resource metadata is a 401 with a challenge naming the metadata;
//! every other denial is as before; a fetch of the metadata Envoy answers itself passes.

use crate::common::*;
use mcp_access_engine::facts::{Fact, HostFacts};
use mcp_access_engine::flow::{drive, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Caller;
use mcp_access_engine::request::Headers;
use serde_json::{json, Value};

const CHALLENGE: &str =
    "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\"";

/// `gw/https` (8443) with protected resource metadata; `gw/internal` (9443) without. Only
/// `echo` may be called at the backend.
fn oauth_bundle() -> Value {
    let mut b = bundle(
        vec![inline_tools("only-echo", "Backend", "tools", &["echo"])],
        &[],
    );
    b["gateways"][0]["listeners"][0]["protectedResource"] = json!({
        "resource": "https://mcp.example.com/mcp",
        "authorizationServers": ["https://auth.example.com"],
    });
    b
}

/// Facts as Envoy gives them (only the ones listed; no SPIFFE ID).
struct Facts(Vec<(Fact, Vec<u8>)>);

impl HostFacts for Facts {
    fn read(&self, fact: Fact) -> Option<Vec<u8>> {
        self.0
            .iter()
            .find(|(f, _)| *f == fact)
            .map(|(_, v)| v.clone())
    }
}

fn plaintext() -> Facts {
    Facts(vec![
        (Fact::DestinationPort, 8443i64.to_le_bytes().to_vec()),
        (Fact::RouteName, b"tools-route".to_vec()),
        (Fact::Mtls, vec![0]),
    ])
}

/// `method path` on listener `port`, with `extra` headers, gathered from `facts`.
fn input(
    e: &Engine,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    facts: &Facts,
) -> HeadersInput {
    let mut h: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        (":authority".into(), "mcp.example.com".into()),
    ];
    if method == "POST" {
        h.push(("content-type".into(), "application/json".into()));
    }
    h.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    HeadersInput::gather(e, Headers::from(h), method != "POST", facts)
}

/// A tools/call of `tool` (id 9) through the flow, from what `input` gathered.
fn call_tool(e: &Engine, input: HeadersInput, tool: &str) -> (RequestFlow, Next) {
    let mut flow = RequestFlow::new();
    assert_eq!(flow.on_headers(e, input).next, Next::Hold);
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"{tool}"}}}}"#);
    let a = flow
        .on_body(e, body.len(), true, move |_| Some(body.into_bytes()))
        .next;
    let a = drive(&mut flow, e, a, |_| Reply::status(403));
    (flow, a)
}

fn answer(next: &Next) -> (u16, Option<&str>, Value) {
    let Next::Respond(r) = next else {
        panic!("expected an answer, got {next:?}")
    };
    let challenge = r
        .headers
        .iter()
        .find(|(n, _)| n == "www-authenticate")
        .map(|(_, v)| v.as_str());
    (
        r.status,
        challenge,
        serde_json::from_slice(&r.body).unwrap(),
    )
}

#[test]
fn a_caller_without_a_credential_is_challenged() {
    let e = engine(&oauth_bundle());
    let (flow, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &plaintext()), "delete");
    let (status, challenge, body) = answer(&next);
    assert_eq!((status, challenge), (401, Some(CHALLENGE)));
    // The usual JSON-RPC error, echoing the id.
    assert_eq!(body["id"], 9);
    assert_eq!(body["error"]["code"], -32010);
    let o = flow.outcome().unwrap();
    assert_eq!(
        (o.allowed, o.status, o.reason.as_str()),
        (false, Some(401), "not_allowed")
    );
    // What the policies allow is allowed, credential or not.
    let (_, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &plaintext()), "echo");
    assert!(matches!(next, Next::Allow { .. }), "{next:?}");
}

#[test]
fn a_denial_on_a_listener_with_oauth_discovery_challenges_even_where_denials_answer_200() {
    let mut b = oauth_bundle();
    b["denyResponse"] = json!({"httpStatus": 200, "exposeDetails": true});
    let e = engine(&b);
    let (_, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &plaintext()), "x");
    let (status, challenge, body) = answer(&next);
    assert_eq!((status, challenge), (401, Some(CHALLENGE)));
    assert_eq!(body["error"]["data"]["reason"], "not_allowed");
}

#[test]
fn any_credential_keeps_the_usual_denial() {
    let e = engine(&oauth_bundle());
    let denied = |input: HeadersInput| {
        let (_, next) = call_tool(&e, input, "delete");
        let (status, challenge, _) = answer(&next);
        (status, challenge.map(str::to_string))
    };
    // A token jwt_authn left in place (another scheme, or one it does not verify).
    let with_token = input(
        &e,
        "POST",
        "/mcp",
        &[("authorization", "Bearer x")],
        &plaintext(),
    );
    assert_eq!(denied(with_token), (403, None));
    let basic = input(
        &e,
        "POST",
        "/mcp",
        &[("authorization", "Basic eDp5")],
        &plaintext(),
    );
    assert_eq!(denied(basic), (403, None));
    // A client certificate without a SPIFFE ID.
    let mut cert = plaintext();
    cert.0.retain(|(f, _)| *f != Fact::Mtls);
    cert.0.push((Fact::Mtls, vec![1]));
    assert_eq!(denied(input(&e, "POST", "/mcp", &[], &cert)), (403, None));
    // Envoy does not say whether there was one: assumed there was.
    let mut unknown = plaintext();
    unknown.0.retain(|(f, _)| *f != Fact::Mtls);
    assert_eq!(
        denied(input(&e, "POST", "/mcp", &[], &unknown)),
        (403, None)
    );
    // An identity (SPIFFE ID, verified JWT).
    let mut spiffe = input(&e, "POST", "/mcp", &[], &plaintext());
    spiffe.caller.spiffe = Some(ALPHA.into());
    assert_eq!(denied(spiffe), (403, None));
    let mut jwt = input(&e, "POST", "/mcp", &[], &plaintext());
    jwt.caller.jwts = vec![e.jwt_principal(&json!({"iss": "x"})).unwrap_or_default()];
    assert_eq!(denied(jwt), (403, None));
}

#[test]
fn the_trusted_identity_header_is_a_credential() {
    let mut b = oauth_bundle();
    b["identity"]["spiffe"] = json!({"source": "TrustedHeader", "header": {"name": "X-Client-Id"}});
    let e = engine(&b);
    // A value that is no SPIFFE ID gives no identity, but the caller presented something.
    let sent = input(
        &e,
        "POST",
        "/mcp",
        &[("x-client-id", "not-an-id")],
        &plaintext(),
    );
    assert_eq!(sent.caller.spiffe, None);
    let (_, next) = call_tool(&e, sent, "delete");
    assert_eq!(answer(&next).0, 403);
    let (_, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &plaintext()), "delete");
    assert_eq!(answer(&next).0, 401);
}

#[test]
fn only_listeners_with_metadata_challenge_and_authorizers_keep_their_answer() {
    let mut b = oauth_bundle();
    b["policies"]
        .as_array_mut()
        .unwrap()
        .push(ext("check", "Gateway", "gw", "authz", 0));
    b["authorizers"] = json!([{"name": "authz", "cluster": "authz-cluster"}]);
    let e = engine(&b);
    // The authorizer's 403 (and its headers) is relayed as it is.
    let (_, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &plaintext()), "echo");
    let (status, challenge, _) = answer(&next);
    assert_eq!((status, challenge), (403, None));

    let e = engine(&oauth_bundle());
    let mut internal = plaintext();
    internal.0[0] = (Fact::DestinationPort, 9443i64.to_le_bytes().to_vec());
    let (_, next) = call_tool(&e, input(&e, "POST", "/mcp", &[], &internal), "delete");
    assert_eq!(answer(&next).1, None);
    assert_eq!(answer(&next).0, 403);
    // Rejected before any policy: the transport answer, no challenge.
    let mut flow = RequestFlow::new();
    let gz = input(
        &e,
        "POST",
        "/mcp",
        &[("content-encoding", "gzip")],
        &plaintext(),
    );
    let rejected = flow.on_headers(&e, gz).next;
    let (status, challenge, _) = answer(&rejected);
    assert_eq!((status, challenge), (415, None));
}

#[test]
fn a_metadata_fetch_that_envoy_answers_passes_without_policy() {
    // The Gateway admits nothing at all: only the exemption lets the fetch through.
    let mut b = oauth_bundle();
    b["policies"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "nothing", "level": "Gateway", "targets": [{"name": "gw"}],
                     "action": "Allow", "rules": [{"name": "none", "authorization": {"ports": [1]}}]}));
    let e = engine(&b);
    // Envoy's direct response: a route that names no backend and no cluster.
    let direct = || {
        let mut f = plaintext();
        f.0.retain(|(fact, _)| *fact != Fact::RouteName);
        f.0.push((Fact::RouteName, b"oauth-metadata".to_vec()));
        f
    };
    for (method, path) in [
        ("GET", "/.well-known/oauth-protected-resource/mcp"),
        ("GET", "/.well-known/oauth-protected-resource"),
        ("GET", "/.well-known/oauth-protected-resource/mcp?x=1"),
        ("GET", "/.well-known/./oauth-protected-resource/mcp"),
        ("HEAD", "/.well-known/oauth-protected-resource/mcp"),
        ("OPTIONS", "/.well-known/oauth-protected-resource/mcp"),
    ] {
        let mut flow = RequestFlow::new();
        let next = flow
            .on_headers(&e, input(&e, method, path, &[], &direct()))
            .next;
        assert!(
            matches!(&next, Next::Allow { add_headers, identity_headers }
                     if add_headers.is_empty() && identity_headers.is_empty())
                && !flow.reads_response(),
            "{method} {path}: {next:?}"
        );
        let o = flow.outcome().unwrap();
        assert!(o.allowed && o.by.is_none(), "{o:?}");
        assert_eq!(o.listener.as_deref(), Some("default/gw/https"));
    }
    let judged = |method: &str, path: &str, facts: Facts, end: bool| {
        let mut flow = RequestFlow::new();
        let mut i = input(&e, method, path, &[], &facts);
        i.end_of_stream = end;
        let next = flow.on_headers(&e, i).next;
        !matches!(next, Next::Allow { .. })
    };
    // Another path, another method, a body, a route to the backend, a route with a cluster,
    // another listener: the policies judge it.
    assert!(judged(
        "GET",
        "/.well-known/oauth-protected-resource/other",
        direct(),
        true
    ));
    assert!(judged(
        "GET",
        "/.well-known/oauth-authorization-server",
        direct(),
        true
    ));
    assert!(judged(
        "DELETE",
        "/.well-known/oauth-protected-resource/mcp",
        direct(),
        true
    ));
    assert!(judged(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        direct(),
        false
    ));
    assert!(judged(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        plaintext(),
        true
    ));
    let mut clustered = direct();
    clustered
        .0
        .push((Fact::ClusterName, b"some-cluster".to_vec()));
    assert!(judged(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        clustered,
        true
    ));
    let mut internal = direct();
    internal.0[0] = (Fact::DestinationPort, 9443i64.to_le_bytes().to_vec());
    assert!(judged(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        internal,
        true
    ));
}

#[test]
fn callers_are_only_examined_where_a_listener_challenges() {
    // Without protected resource metadata, connection.mtls is never read.
    struct Counting(std::cell::Cell<bool>);
    impl HostFacts for Counting {
        fn read(&self, fact: Fact) -> Option<Vec<u8>> {
            if fact == Fact::Mtls {
                self.0.set(true);
            }
            (fact == Fact::DestinationPort).then(|| 8443i64.to_le_bytes().to_vec())
        }
    }
    let plain = engine(&bundle(vec![], &[]));
    let facts = Counting(std::cell::Cell::new(false));
    let i = HeadersInput::gather(&plain, Headers::new(), true, &facts);
    assert!(!facts.0.get() && !i.caller.credential);
    let e = engine(&oauth_bundle());
    let i = HeadersInput::gather(&e, Headers::new(), true, &facts);
    assert!(
        facts.0.get() && i.caller.credential,
        "no answer: one is assumed"
    );
    assert!(Caller::default().anonymous());
}
