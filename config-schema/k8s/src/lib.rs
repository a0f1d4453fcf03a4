//! The policy compiler: Kubernetes manifests (Gateway, HTTPRoute, XBackend, XAccessPolicy,
//! ReferenceGrant) to a policy bundle, a status report and the topology an Envoy
//! configuration is rendered from.
//!
//! [`Manifests::load_paths`] reads and validates (rejecting what the API server would),
//! [`compile()`] resolves references and maps every field.

pub mod check;
pub mod compile;
pub mod load;
pub mod model;
pub mod types;
pub mod validate;

pub use compile::{compile, precedence, reason, Compiled, Options};
pub use load::{Item, Manifests, Origin, PolicySpec, Problem};
pub use model::*;
