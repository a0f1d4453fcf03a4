//! The crate's integration tests, one binary (a binary per file linked the crate 11 times).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

mod authz_answers;
mod authz_cache;
mod authz_cache_key;
mod cel;
mod cel_input;
mod compile_index;
mod dry_run;
mod flow;
mod http_canonical;
mod identity_headers;
mod leaks;
mod listing;
mod oauth;
mod pins;
mod ratelimit;
mod ratelimit_global;
mod routes;
mod scope;
mod semantics;
mod stats;
