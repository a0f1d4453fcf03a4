//! The crate's integration tests, one binary (a binary per file linked the crate 5 times).

mod access_policy;
mod compile;
mod crd;
mod examples;
mod oauth_identity;
mod route_targets;
