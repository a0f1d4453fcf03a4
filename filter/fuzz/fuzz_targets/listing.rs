//! The listing filter (docs/semantics.md §5.4) on arbitrary upstream answers, driven like the
//! host adapter. The first input byte picks the answer's media type (bits 0-1: JSON, SSE,
//! HTML, compressed SSE), its status (bit 2: 200 or 500), the request it answers (bits 3-4:
//! `tools/list`, `tools/call` of `echo`, a GET stream, a GET resuming one with
//! `Last-Event-ID`) and whether the backend has a ToolPin (bit 5: `echo` pinned as
//! `{"name":"echo"}`, so every tool is digested as it is read) and whether reuse is checked
//! (bit 6: the answer filtered afresh, then twice with reuse, the second reusing what the first
//! kept: all three the same bytes and pin events; then the same request under other ids, the
//! answer's `"id":1` texts replaced by each: with reuse as afresh); the second the chunk size;
//! the rest is the body.
//!
//! Besides never panicking, it checks what the client reads, read the standard's way (SSE
//! lines ending with CRLF, LF or CR, a leading byte order mark dropped; JSON as serde_json
//! reads it, the last of duplicate keys): every `tools` array of a result lists only what
//! the caller may call (`echo`) and every `prompts`, `resources` or `resourceTemplates`
//! array is empty (the caller may use none), except in the `tools/call`'s own answer; the
//! answer to `tools/list` (a JSON body, or a response with its id) is a filtered listing or
//! an `input_required` result. An SSE stream read event by event loses no event a client
//! would have dispatched (each becomes itself, filtered, or an error event).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::flow::{HeadersInput, Next, RequestFlow};
use mcp_access_engine::listing::{BodyAction, HeadersAction, ListingFilter};
use mcp_access_engine::policy::Engine;
use mcp_access_engine::request::{Caller, Headers};
use serde_json::{json, Value};

const BUNDLE: &str = r#"{"apiVersion": "mcp-access.io/v1",
  "gateways": [{"name": "gw", "listeners": [{"name": "l", "port": 8443}]}],
  "backends": [{"name": "tools", "routeNames": ["tools"]}],
  "policies": [{"name": "p", "level": "Backend", "targets": [{"name": "tools"}], "action": "Allow",
    "rules": [{"name": "r", "authorization": {"mcp": {"baseProtocol": "Match",
      "methods": [{"name": "tools/call", "params": ["echo"]}]}}}]}],
  "listings": {"maxBytes": 4096}}"#;

/// The requests an answer may answer, in the order of input bits 3-4.
const LIST: usize = 0;
const CALL: usize = 1;

/// The backend's ToolPin in the pinned variant: `echo` as `{"name":"echo"}`.
const PINS: &str = r#""pins": {"source": "ns/tools", "tools": [{"name": "echo",
  "digest": "sha256:f7817751a90d6baf078dd0e2d98b278faa025d83ccee00eb9b60100ad65bdcb9"}]},
  "routeNames""#;

fn engine(pinned: bool) -> &'static Engine {
    static ENGINES: OnceLock<[Engine; 2]> = OnceLock::new();
    let [plain, with_pins] = ENGINES.get_or_init(|| {
        let load = |text: &str| match Engine::from_json(text.as_bytes()) {
            Ok(e) => e,
            Err(e) => panic!("the bundle does not load: {e}"),
        };
        [
            load(BUNDLE),
            load(&BUNDLE.replacen("\"routeNames\"", PINS, 1)),
        ]
    });
    if pinned {
        with_pins
    } else {
        plain
    }
}

/// The response filters the flow hands over when it allows each request, with the flow that
/// keeps the request (made per input).
fn filters(engine: &Engine) -> Vec<(ListingFilter, RequestFlow)> {
    filters_with_id(engine, "1")
}

/// [`filters`] of requests whose JSON-RPC id is `id` (raw JSON).
fn filters_with_id(engine: &Engine, id: &str) -> Vec<(ListingFilter, RequestFlow)> {
    let list = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo"}}}}"#
    );
    let requests: [(&str, &[(&str, &str)], &[u8]); 4] = [
        ("POST", &[], list.as_bytes()),
        ("POST", &[], call.as_bytes()),
        ("GET", &[], b""),
        ("GET", &[("last-event-id", "7")], b""),
    ];
    requests
        .iter()
        .map(|(method, extra, body)| {
            let mut headers = vec![(":method", *method), (":path", "/mcp")];
            if !body.is_empty() {
                headers.push(("content-type", "application/json"));
            }
            headers.extend_from_slice(extra);
            let mut flow = RequestFlow::new();
            let input = HeadersInput {
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                end_of_stream: body.is_empty(),
                time: None,
                peers: None,
                port: 8443,
                route_name: Some("tools".into()),
                cluster_name: None,
                caller: Caller::default(),
            };
            let mut a = flow.on_headers(engine, input).next;
            if !body.is_empty() {
                let owned = body.to_vec();
                a = flow.on_body(engine, owned.len(), true, move |_| Some(owned)).next;
            }
            match a {
                Next::Allow { .. } => match flow.response_filter() {
                    Some(f) => (f.clone(), flow),
                    None => panic!("{method}: no listing filter"),
                },
                a => panic!("{method}: {a:?}"),
            }
        })
        .collect()
}

/// The events an SSE client dispatches from `stream` (the standard's reading): type and data.
fn sse_client(stream: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(stream);
    let mut rest = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut out = Vec::new();
    let (mut event, mut data, mut has_data) = (String::new(), String::new(), false);
    // A line the stream ends in the middle of is never dispatched.
    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if has_data {
                data.pop();
                let kind = if event.is_empty() { "message" } else { &event };
                out.push((kind.to_string(), std::mem::take(&mut data)));
            }
            (event, data, has_data) = (String::new(), String::new(), false);
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => event = value.to_string(),
            "data" => {
                data.push_str(value);
                data.push('\n');
                has_data = true;
            }
            _ => {}
        }
    }
    out
}

/// Checks one JSON-RPC message (or each of a batch) the client reads.
fn check(v: &Value, request: usize, whole_body: bool, text: &str) {
    if let Value::Array(batch) = v {
        return batch.iter().for_each(|m| check(m, request, false, text));
    }
    let Some(result) = v.get("result") else {
        return;
    };
    let own = whole_body || v.get("id") == Some(&json!(1));
    if own && request == CALL {
        return;
    }
    if own && request == LIST && result.is_object() {
        let interim = result.get("resultType").and_then(Value::as_str) == Some("input_required");
        assert!(
            interim || result.get("tools").is_some_and(Value::is_array),
            "the listing's answer is no filtered listing: {text}"
        );
    }
    for key in ["tools", "prompts", "resources", "resourceTemplates"] {
        for item in result
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = item.get("name").and_then(Value::as_str);
            assert!(
                key == "tools" && name == Some("echo"),
                "{key} lists {item}: {text}"
            );
        }
    }
}

/// `bytes` with every `from` replaced by `to`.
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        if let Some(tail) = rest.strip_prefix(from) {
            out.extend_from_slice(to);
            rest = tail;
        } else if let Some((b, tail)) = rest.split_first() {
            out.push(*b);
            rest = tail;
        }
    }
    out
}

/// What the client receives of `body` sent in chunks of `chunk` bytes, as the host adapter
/// drives the filter, and the pin events the filter gave.
fn feed(
    engine: &Engine,
    f: &mut ListingFilter,
    flow: &RequestFlow,
    body: &[u8],
    chunk: usize,
) -> (Vec<u8>, Vec<String>) {
    let mut out = Vec::new();
    let mut events = Vec::new();
    let mut buffered = Vec::new();
    let chunks: Vec<&[u8]> = body.chunks(chunk).collect();
    let last = chunks.len().saturating_sub(1);
    for (i, c) in chunks.iter().enumerate() {
        buffered.extend_from_slice(c);
        let held = buffered.clone();
        match f.on_body(engine, flow.request(), held.len(), i == last, move |_| {
            Some(held)
        }) {
            BodyAction::Pass => out.append(&mut buffered),
            BodyAction::Buffer => {}
            BodyAction::Replace(b) => {
                out.extend(b);
                buffered.clear();
            }
        }
        events.extend(f.take_pin_events().iter().map(|e| format!("{e:?}")));
    }
    (out, events)
}

fuzz_target!(|data: &[u8]| {
    let [flags, chunk, body @ ..] = data else {
        return;
    };
    let engine = engine(flags & 0x20 != 0);
    let request = usize::from(flags >> 3 & 3);
    let Some((mut f, flow)) = filters(engine).into_iter().nth(request) else {
        return;
    };
    let (media, encoded) = match flags & 3 {
        0 => ("application/json", false),
        1 => ("text/event-stream", false),
        2 => ("text/html", false),
        _ => ("text/event-stream", true),
    };
    let status = if flags & 4 == 0 { "200" } else { "500" };
    let mut headers = vec![
        (":status".to_string(), status.to_string()),
        ("content-type".to_string(), media.to_string()),
    ];
    if encoded {
        headers.push(("content-encoding".into(), "gzip".into()));
    }
    let sse = media == "text/event-stream";
    if f.on_headers(&Headers::from(&headers)) == HeadersAction::Keep {
        // Only the answer to another request than a listing, not an SSE stream, is not read.
        assert!(request != LIST && !sse, "{request} {media} not read");
        return;
    }
    let read_as_sse = sse && f.content_type().is_none();
    let chunk = usize::from(*chunk).max(1);
    if flags & 0x40 != 0 {
        let fresh = feed(engine, &mut f.clone().without_reuse(), &flow, body, chunk);
        for round in ["kept", "reused"] {
            let reused = feed(engine, &mut f.clone(), &flow, body, chunk);
            assert!(reused == fresh, "{round}: {reused:?} != {fresh:?}");
        }
        // The same request under other ids, the answer's `"id":1` texts now that id: what
        // the first kept is reused with the id replaced, as a fresh filtering writes it.
        for other in ["10", r#""a\"b""#, "1"] {
            let Some((mut g, flow)) = filters_with_id(engine, other).into_iter().nth(request)
            else {
                continue;
            };
            g.on_headers(&Headers::from(&headers));
            let body = replaced(body, br#""id":1"#, format!(r#""id":{other}"#).as_bytes());
            let fresh = feed(engine, &mut g.clone().without_reuse(), &flow, &body, chunk);
            let reused = feed(engine, &mut g.clone(), &flow, &body, chunk);
            assert!(reused == fresh, "id {other}: {reused:?} != {fresh:?}");
        }
    }
    let (out, _) = feed(engine, &mut f, &flow, body, chunk);
    let text = String::from_utf8_lossy(&out);
    let out_sse = f.content_type().map_or(sse, |t| t == "text/event-stream");
    if out_sse {
        let events = sse_client(&out);
        for (kind, data) in &events {
            if let (true, Ok(v)) = (kind == "message", serde_json::from_str::<Value>(data)) {
                check(&v, request, false, &text);
            }
        }
        if read_as_sse {
            let sent = sse_client(body).len();
            assert!(
                events.len() >= sent,
                "{sent} events sent, {} received: {text}",
                events.len()
            );
        }
    } else if let Ok(v) = serde_json::from_slice::<Value>(&out) {
        check(&v, request, true, &text);
    }
});
