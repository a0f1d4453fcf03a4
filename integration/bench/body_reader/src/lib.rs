//! The floor of the benchmark's P5 (integration/bench): a Proxy-Wasm filter that does what any
//! filter judging a request body must do and nothing else — hold the request until its body is complete,
//! then copy it into the VM's memory in one piece (as mcp-access does) and let the request go.
//! Envoy with this filter, minus bare Envoy, is the cost of the ABI's copy of the body.

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

proxy_wasm::main! {{
    proxy_wasm::set_http_context(|_, _| -> Box<dyn HttpContext> { Box::new(BodyReader) });
}}

struct BodyReader;

impl Context for BodyReader {}

impl HttpContext for BodyReader {
    // As mcp-access: nothing goes upstream before the body has been judged.
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if end_of_stream {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        // The body's bytes, copied by the host into memory the module allocated; a body that
        // did not arrive whole (None, or short) is refused, so the copy cannot be skipped unseen.
        let read = self
            .get_http_request_body(0, body_size)
            .map_or(0, |b| b.len());
        if read != body_size {
            self.send_http_response(500, vec![], Some(b"body not read whole"));
            return Action::Pause;
        }
        Action::Continue
    }
}
