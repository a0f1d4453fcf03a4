//! The filter itself: inline in the listener, or by extension config discovery from a file.

use mcp_access_engine::receipts::KEY_ENV;
use serde_json::{json, Value};

use super::T;
use crate::error::CliError;

pub(super) fn wasm_filter(wasm: &str, bundle_json: &str) -> Value {
    json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.filters.http.wasm.v3.Wasm"),
            "config": {
                "name": "mcp_access",
                "root_id": "mcp_access",
                "vm_config": {
                    "vm_id": "mcp_access",
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": wasm}},
                    // The receipts' signing key, from Envoy's environment only (docs/audit.md).
                    "environment_variables": {"host_env_keys": [KEY_ENV]}
                },
                "configuration": {"@type": format!("{T}google.protobuf.StringValue"), "value": bundle_json},
                "fail_open": false,
                "allow_on_headers_stop_iteration": true
            }
        }
    })
}

/// Name of the filter's extension configuration (the ECDS resource every listener subscribes to).
pub const ECDS_NAME: &str = "mcp_access";
/// The file in the ECDS directory Envoy reads the filter's configuration from.
pub const ECDS_FILE: &str = "mcp_access.ecds.json";

/// The filter as an extension config discovered from `dir`/[`ECDS_FILE`]: Envoy watches the
/// directory and reloads the file when one is moved into it (how `publish` writes it).
pub(super) fn ecds_filter(dir: &str) -> Value {
    let path = std::path::Path::new(dir).join(ECDS_FILE);
    json!({
        "name": ECDS_NAME,
        "config_discovery": {
            "config_source": {
                "path_config_source": {"path": path.to_string_lossy(), "watched_directory": {"path": dir}},
                "resource_api_version": "V3"
            },
            "type_urls": [format!("{T}envoy.extensions.filters.http.wasm.v3.Wasm")]
        }
    })
}

/// The ECDS file: a discovery response with the filter's Wasm configuration (the same as the
/// inline one) as its one resource; `version_info` is a hash of the bundle.
pub fn ecds_document(wasm: &str, bundle_json: &str) -> Value {
    let typed = wasm_filter(wasm, bundle_json)
        .get("typed_config")
        .cloned()
        .unwrap_or(Value::Null);
    // FNV-1a: a short, stable version text for Envoy's stats and logs.
    let hash = bundle_json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    json!({
        "version_info": format!("{hash:016x}"),
        "resources": [{
            "@type": format!("{T}envoy.config.core.v3.TypedExtensionConfig"),
            "name": ECDS_NAME,
            "typed_config": typed
        }]
    })
}

/// Writes `doc` as `dir`/[`ECDS_FILE`] atomically: a temporary file in `dir`, flushed, then
/// renamed over the old one, so Envoy never reads half a file. Returns the version written.
pub fn publish_ecds(dir: &std::path::Path, doc: &Value) -> Result<String, CliError> {
    use std::io::Write;
    let text = serde_json::to_string(doc).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(".{ECDS_FILE}.{}.tmp", std::process::id()));
    let target = dir.join(ECDS_FILE);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", target.display())
    })?;
    Ok(doc
        .get("version_info")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string())
}
