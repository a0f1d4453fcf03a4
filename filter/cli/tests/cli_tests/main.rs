//! The crate's integration tests, one binary (a binary per file linked the crate 11 times).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

mod authz_cache;
mod behaviour;
mod cli;
mod defaults_overrides;
mod dry_run;
mod explain;
mod explain_cel;
mod explain_flow;
mod explain_limits;
mod fail_closed;
mod gateway_xbackend;
mod mistakes;
mod oauth_identity;
mod pin;
mod policy_language;
mod policy_test;
mod ratelimit_global;
mod replay;
mod routes;
mod settings;
mod who_can;
