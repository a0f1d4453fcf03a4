//! The built module the tests read.
#![allow(clippy::panic)]

use std::path::PathBuf;

/// The module scripts/build writes (or `$MCP_ACCESS_WASM`); None (with a note) when it is missing
/// and neither `CI` nor `MCP_ACCESS_REQUIRE_WASM` requires it.
pub fn built_module() -> Option<(PathBuf, Vec<u8>)> {
    // Relative paths are taken from the workspace root (cargo runs tests in filter/).
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join(
        std::env::var_os("MCP_ACCESS_WASM")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("build/mcp_access_filter.wasm")),
    );
    match std::fs::read(&path) {
        Ok(bytes) => Some((path, bytes)),
        Err(e) => {
            let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
                || std::env::var_os("MCP_ACCESS_REQUIRE_WASM").is_some();
            let msg = format!(
                "the built module is not readable at {} ({e}); run scripts/build or set MCP_ACCESS_WASM",
                path.display()
            );
            if required {
                panic!("{msg}");
            }
            eprintln!("SKIPPED (CI and MCP_ACCESS_REQUIRE_WASM unset): {msg}");
            None
        }
    }
}
