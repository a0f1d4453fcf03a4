//! The `mcp-access` command line: compile Kubernetes manifests to a policy bundle and an
//! Envoy configuration, and explain decisions with the filter's own engine.

pub mod audit;
pub mod checks;
pub mod envoy;
pub mod error;
pub mod explain;
pub mod jwt;
pub mod manifests;
pub mod pin;
pub mod policy_test;
pub mod replay;
pub mod who_can;
