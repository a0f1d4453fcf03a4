//! mcp-access's decision engine: everything the filter decides, with no proxy-wasm in sight.
//!
//! A request is parsed in [`mcp`], its path canonicalized in [`canon`], its caller identified
//! in [`identity`] (certificates read by [`x509`]), decided in [`policy`] (CEL conditions by the
//! `mcp-access-cel` crate, reading the request through [`cel_input`]); authorizers are
//! called through [`callout`] (HTTP) and [`ext_authz`] (gRPC), and it is answered in [`answer`]. [`flow`] strings these
//! together per request; the `mcp-access-filter` crate is the thin proxy-wasm host around it.

pub mod answer;
mod base64;
pub mod callout;
pub mod canon;
pub mod cel_input;
pub mod ext_authz;
pub mod facts;
pub mod flow;
mod identity;
mod json;
pub mod listing;
pub mod mcp;
pub mod policy;
mod protobuf;
pub mod request;
pub mod stats;
pub mod wire;
pub mod x509;
