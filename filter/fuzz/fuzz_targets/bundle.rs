//! The bundle loader never panics, whatever the bytes; and an engine it accepts can decide
//! requests (a few fixed ones, through the whole flow) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
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
            headers,
            end_of_stream: body.is_empty(),
            time: None,
            port,
            route_name: Some("tools-route".into()),
            cluster_name: Some("tools-cluster".into()),
            caller: Caller {
                spiffe: Some("spiffe://example.org/ns/agents/sa/alpha".into()),
                jwts: vec![],
            },
        },
    );
    if !body.is_empty() {
        let owned = body.to_vec();
        action = flow.on_body(engine, body.len(), true, move |_| Some(owned));
    }
    // Every authorizer allows, with one header.
    let mut token = 0;
    for _ in 0..4 {
        let Next::Dispatch(calls) = action else {
            break;
        };
        let mut tokens = Vec::new();
        for (slot, _) in calls {
            token += 1;
            flow.dispatched(engine, slot, Ok(token), 0);
            tokens.push(token);
        }
        action = flow.resume(engine);
        for t in tokens {
            let headers = vec![("x-user".to_string(), "u".to_string())];
            action = flow.on_callout_response(engine, t, Some(200), headers, Vec::new(), 1_000_000);
        }
    }
    assert!(
        !matches!(action, Next::Hold | Next::Dispatch(_)),
        "the request was never decided: {action:?}"
    );
}
