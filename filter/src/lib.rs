//! mcp-access as a Proxy-Wasm filter: [`host`] reads what Envoy knows about a request, hands it
//! to the decision engine (`mcp-access-engine`) and carries out what it decides.

mod host;
