//! mcp-access: the Proxy-Wasm filter and its pure decision logic.
//!
//! A request is parsed in [`mcp`], its caller identified in [`identity`], decided in
//! [`policy`], authorizers are called through [`callout`], and it is answered in [`answer`].
//! [`flow`] strings these together per request; [`host`] is the thin proxy-wasm adapter.

pub mod answer;
pub mod callout;
pub mod canon;
pub mod flow;
#[cfg(target_arch = "wasm32")]
pub mod host;
pub mod identity;
pub mod mcp;
pub mod policy;
pub mod protobuf;
pub mod request;
pub mod wire;
pub mod x509;
