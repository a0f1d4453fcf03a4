//! The decision an explanation reports, typed; each value is written as text in one place
//! (`as_str`, which the JSON and text outputs both use).

use mcp_access_bundle::Level;
use mcp_access_engine::answer::Why;
use serde::{Serialize, Serializer};

/// Whether the request goes upstream: the decision record's own type.
pub use mcp_access_engine::flow::records::Verdict;

/// The policy level a decision was taken at, or none (the transport checks, resolution,
/// Envoy's router).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At(pub Option<Level>);

impl At {
    /// `gateway`, `backend` or `none`.
    pub fn as_str(self) -> &'static str {
        Level::name(self.0)
    }
}

/// Why the request got its decision: the filter's reason, or Envoy router's answer when the
/// filter let the request on and the router does not forward it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Filter(Why),
    /// No route matches: Envoy answers 404.
    NoRoute,
    /// The route redirects.
    RouteRedirect,
    /// The route has no usable backend: Envoy answers 500.
    RouteError,
}

impl Cause {
    /// The filter's reason (`allowed`, `not_allowed`, ...), or `no_route`, `route_redirect`,
    /// `route_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Filter(why) => why.as_str(),
            Cause::NoRoute => "no_route",
            Cause::RouteRedirect => "route_redirect",
            Cause::RouteError => "route_error",
        }
    }
}

macro_rules! serialize_as_str {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

serialize_as_str!(At, Cause);
