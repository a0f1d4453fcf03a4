//! The policy compiler: Kubernetes manifests (Gateway, HTTPRoute, XBackend, XAccessPolicy,
//! the project's AccessPolicy, FilterSettings and ToolPin, ReferenceGrant) to a policy bundle, a status report and the topology an Envoy
//! configuration is rendered from.
//!
//! [`Manifests::load_paths`] reads and validates (rejecting what the API server would),
//! [`compile()`] resolves references and maps every field.

mod check;
mod compile;
mod crd;
mod load;
mod model;
mod refs;
mod route_match;
mod status;
mod types;
mod validate;

pub use compile::{compile, precedence, reason, Compiled, Options};
pub use crd::{
    crd, crd_yaml, filter_settings_crd, filter_settings_crd_yaml, rate_limit_policy_crd,
    rate_limit_policy_crd_yaml, tool_pin_crd, tool_pin_crd_yaml,
};
pub use load::{Item, Manifests, PinView, ToolPinView};
pub use model::*;
pub use refs::{NsName, ObjectName, Target};
pub use route_match::RouteProbe;
pub use status::{status_objects, CONTROLLER_NAME};
pub use types::{RateLimitPolicySpec, ToolPinSpec};
