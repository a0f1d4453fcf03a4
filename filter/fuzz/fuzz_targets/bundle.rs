//! The bundle loader never panics, whatever the bytes; and an engine it accepts can decide
//! requests (a few fixed ones, through the whole flow) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::{drive, HeadersInput, Next, Reply, RequestFlow};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::Caller;

const BODIES: &[&[u8]] = &[
    br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    br#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}"#,
    br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
];

fuzz_target!(|data: &[u8]| {
    let Ok(engine) = Engine::from_json(data) else {
        return;
    };
    // Every listener port and backend route the bundle names, plus none.
    let mut ports: Vec<u16> = engine.listeners.iter().map(|l| l.port).take(4).collect();
    ports.push(8443);
    for port in ports {
        for body in BODIES {
            decide(&engine, port, "POST", body);
        }
        decide(&engine, port, "GET", b"");
    }
});

fn decide(engine: &Engine, port: u16, method: &str, body: &[u8]) {
    let headers = vec![
        (":method".to_string(), method.to_string()),
        (":path".to_string(), "/mcp/x?q=1".to_string()),
        (":authority".to_string(), "api.example.org:8443".to_string()),
        ("content-type".to_string(), "application/json".to_string()),
        ("x-tenant".to_string(), "t-1".to_string()),
    ];
    let mut flow = RequestFlow::new();
    let mut action = flow.on_headers(
        engine,
        HeadersInput {
            peers: None,
            headers: headers.into(),
            end_of_stream: body.is_empty(),
            time: None,
            port,
            route_name: Some("tools-route".into()),
            cluster_name: Some("tools-cluster".into()),
            caller: Caller {
                credential: false,
                spiffe: Some("spiffe://example.org/ns/agents/sa/alpha".into()),
                jwts: vec![],
            },
        },
    ).next;
    if !body.is_empty() {
        let owned = body.to_vec();
        action = flow.on_body(engine, body.len(), true, move |_| Some(owned)).next;
    }
    // Every authorizer allows, with one header.
    let action = drive(&mut flow, engine, action, |_| Reply::Http {
        status: Some(200),
        headers: [("x-user", "u")].into(),
        body: Vec::new(),
    });
    assert!(
        !matches!(action, Next::Hold | Next::Dispatch(_)),
        "the request was never decided: {action:?}"
    );
}
