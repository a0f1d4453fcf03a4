//! `mcp::parse_message` against serde_json, with the engine's one oracle
//! (`mcp_access_engine::serde_oracle`, whose module doc lists where the reader is stricter by
//! design): both must agree on whether a body is JSON, and on everything the filter extracts
//! or the error code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::mcp::ParseLimits;
use mcp_access_engine::serde_oracle::check;

fuzz_target!(|body: &[u8]| {
    // The filter's default depth, and a small one so that the limit itself is exercised.
    for max_depth in [64, 3] {
        check(body, &ParseLimits { max_depth });
    }
});
