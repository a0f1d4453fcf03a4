//! The crate's integration tests, one binary (a binary per file linked the crate 4 times).

mod access_policy;
mod compile;
mod crd;
mod examples;
mod pins;
