//! The mcp-access policy bundle: types, strict parsing with field paths, semantic validation,
//! and the JSON Schema generated from the types.

pub mod authz_cache;
mod bundle;
pub mod gateway_api;
pub mod http;
pub mod identity_headers;
pub mod mcp_methods;
pub mod names;
pub mod oauth;
mod pins;
mod ratelimit;
mod settings;
pub mod validate;

pub use authz_cache::AuthzCache;
pub use bundle::*;
pub use identity_headers::{IdentityField, IdentityHeader};
pub use oauth::ProtectedResource;
pub use pins::*;
pub use ratelimit::*;
pub use settings::*;
pub use validate::{
    parse_bundle, validate, BundleError, Conditions, LimitConditions, PolicyConditions,
    RuleConditions, ValidBundle,
};

/// The bundle's JSON Schema, generated from the Rust types.
#[cfg(feature = "schema")]
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Bundle);
    serde_json::to_value(&schema).unwrap_or(serde_json::Value::Null)
}

/// Pretty JSON text of [`json_schema`], as checked into `bundle.schema.json`.
#[cfg(feature = "schema")]
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).unwrap_or_default();
    text.push('\n');
    text
}
