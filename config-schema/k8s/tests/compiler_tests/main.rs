//! The crate's integration tests, one binary (a binary per file linked the crate 5 times).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

mod access_policy;
mod compile;
mod crd;
mod examples;
mod gateway_xbackend;
mod oauth_identity;
mod pins;
mod ratelimit;
mod route_targets;
