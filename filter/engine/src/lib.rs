//! mcp-access's decision engine: everything the filter decides, with no proxy-wasm in sight.
//!
//! The modules form layers; each uses only modules of its own layer or below
//! (`scripts/engine-layers` prints the exact floors and checks that no module reaches one that
//! reaches it back):
//!
//! 0. **Codecs**: bytes in, values out, nothing of the project: `json` (the strict JSON
//!    reader), `jsonw` (JSON written by hand), `jsonrpc` (error codes and the error object),
//!    [`wire`], [`canon`], [`canonical_json`] (RFC 8785 and the digests ToolPins pin),
//!    [`x509`], `base64`, [`pb`] (the protobuf messages, for prost), `bytes` (byte searches),
//!    `order` (one sort for load-time lists).
//! 1. **The request model, the host-fact port and pins**: [`request`] is what a decision
//!    reads about one request (its caller, MCP operation, and the listener and backend it is
//!    judged at, resolved once); [`facts`] names what the host knows beyond the headers;
//!    `keyhash` feeds its values to the digests that key the caches; [`pins`] holds a
//!    backend's ToolPins compiled for lookups, the port to the drift store the host shares,
//!    and the judgement of a listed or called tool against them.
//! 2. **Readers**: [`mcp`] turns a body into a message and its [`request::McpOp`] (held to
//!    serde_json by `serde_oracle`, compiled for tests and the fuzz target only: feature
//!    `serde-oracle`); [`cel_input`] lets the `mcp-access-cel` crate read a request's
//!    attributes; `identity` finds the caller in the facts.
//! 3. **Policy**: [`policy`] compiles a bundle into an [`policy::Engine`] and evaluates a
//!    request into a [`policy::Decision`], asking for authorizer calls on the way.
//! 4. **Edges**: what crosses the wire: [`answer`] (the client's JSON-RPC errors),
//!    [`callout`] and [`ext_authz`] (HTTP and gRPC authorizers), `outgoing` (a call in its
//!    authorizer's protocol), [`authz_cache`] (their answers reused), [`listing`] (filtering
//!    listing responses), [`stats`] (the metrics).
//! 5. **Flow**: [`flow`] strings these together per request, from the headers to the answer;
//!    the `mcp-access-filter` crate is the thin proxy-wasm host around it, and [`ports`] lists
//!    what that host provides.

pub mod answer;
pub mod authz_cache;
pub mod base64;
mod bytes;
pub mod callout;
pub mod canon;
pub mod canonical_json;
pub mod cel_input;
pub mod ext_authz;
pub mod facts;
pub mod flow;
mod identity;
mod json;
mod jsonrpc;
mod jsonw;
mod keyhash;
pub mod listing;
pub mod mcp;
mod order;
mod outgoing;
pub mod pb;
pub mod pins;
pub mod policy;
pub mod ports;
pub mod ratelimit;
pub mod receipts;
pub mod request;
#[cfg(any(test, feature = "serde-oracle"))]
pub mod serde_oracle;
pub mod stats;
#[cfg(test)]
pub(crate) mod test_util;
pub mod wire;
pub mod x509;
