//! OAuth discovery (docs/semantics.md §5.6): the challenge a listener's denials of callers
//! without a credential carry, and the metadata fetches Envoy answers itself.

use mcp_access_bundle::ProtectedResource;

use super::Engine;
use crate::request::Request;

/// A listener's protected resource metadata, as the filter uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The `WWW-Authenticate` value of a 401 to a caller without a credential.
    pub challenge: String,
    /// The paths Envoy serves the metadata at.
    pub paths: Vec<String>,
}

impl Discovery {
    pub(crate) fn of(p: &ProtectedResource) -> Discovery {
        Discovery {
            challenge: p.challenge(),
            paths: p.metadata_paths(),
        }
    }
}

impl Engine {
    /// The `WWW-Authenticate` challenge of a denial of `req`: its listener's, when the listener
    /// has protected resource metadata and the caller presented no credential.
    pub fn challenge(&self, req: &Request) -> Option<&str> {
        let d = self
            .listeners
            .get(req.target.listener?)?
            .discovery
            .as_ref()?;
        req.caller.anonymous().then_some(d.challenge.as_str())
    }

    /// Whether `req` (whose headers ended the stream: it has no body) fetches its listener's
    /// metadata from Envoy itself: a `GET`, `HEAD` or `OPTIONS` of one of the listener's
    /// metadata paths that Envoy routed to no upstream (no backend, no cluster: the route
    /// answers it). Nothing of such a request reaches an upstream, so no policy judges it.
    pub(crate) fn metadata_fetch(&self, req: &Request) -> bool {
        let Some(d) = req
            .target
            .listener
            .and_then(|l| self.listeners.get(l))
            .and_then(|l| l.discovery.as_ref())
        else {
            return false;
        };
        matches!(req.method.as_str(), "GET" | "HEAD" | "OPTIONS")
            && req.target.backend.is_none()
            && req.cluster_name.is_none()
            && d.paths.contains(&req.canonical_path)
    }

    /// Whether some listener answers callers without a credential with a challenge (the flow
    /// then finds out whether the caller presented one).
    pub(crate) fn challenges(&self) -> bool {
        self.challenges
    }
}
