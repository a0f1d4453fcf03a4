//! OAuth challenges (docs/semantics.md §5.6): the 401 a listener's denials of callers without
//! a credential carry, the 403 `insufficient_scope` of a token short of a scope, and the
//! metadata fetches Envoy answers itself.

use mcp_access_bundle::ProtectedResource;

use super::{Denial, Engine};
use crate::request::Request;

/// A listener's protected resource metadata, as the filter uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The `WWW-Authenticate` value of a 401 to a caller without a credential.
    pub challenge: String,
    /// The metadata's URL (`resource_metadata` of a challenge).
    pub url: String,
    /// The paths Envoy serves the metadata at.
    pub paths: Vec<String>,
}

impl Discovery {
    pub(crate) fn of(p: &ProtectedResource) -> Discovery {
        Discovery {
            challenge: p.challenge(),
            url: p.metadata_url(),
            paths: p.metadata_paths(),
        }
    }
}

/// The status and `WWW-Authenticate` value a denial answers with instead of its usual status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub status: u16,
    pub value: String,
}

/// Longest `scope` parameter a challenge carries; a longer one is left out.
const MAX_SCOPE_BYTES: usize = 2048;

impl Engine {
    /// The challenge of the filter's own denial `d` of `req` (none for an authorizer's): a 401
    /// naming the listener's protected resource metadata when the listener has some and the
    /// caller presented no credential; a 403 `insufficient_scope` when an Allow rule would
    /// have admitted the caller's verified JWT with more scopes ([`Denial::scope`]).
    pub fn challenge(&self, req: &Request, d: &Denial) -> Option<Challenge> {
        if d.relay.is_some() {
            return None;
        }
        let discovery = req
            .target
            .listener
            .and_then(|l| self.listeners.get(l))
            .and_then(|l| l.discovery.as_ref());
        if req.caller.anonymous() {
            return discovery.map(|d| Challenge {
                status: 401,
                value: d.challenge.clone(),
            });
        }
        let scopes = d.scope.as_ref()?;
        Some(Challenge {
            status: 403,
            value: insufficient_scope(scopes, discovery.map(|d| d.url.as_str())),
        })
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

/// `Bearer error="insufficient_scope"` with `scope` (RFC 6750 §3) when every value is an
/// RFC 6749 §3.3 scope-token and they fit [`MAX_SCOPE_BYTES`] (otherwise left out: nothing a
/// policy names becomes header syntax), and `resource_metadata` (RFC 9728 §5.1) when the
/// listener has one.
fn insufficient_scope(scopes: &[String], metadata: Option<&str>) -> String {
    let mut v = String::from("Bearer error=\"insufficient_scope\"");
    let joined = scopes.join(" ");
    let tokens = !scopes.is_empty()
        && scopes.iter().all(|s| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| matches!(b, 0x21 | 0x23..=0x5b | 0x5d..=0x7e))
        });
    if tokens && joined.len() <= MAX_SCOPE_BYTES {
        v.push_str(", scope=\"");
        v.push_str(&joined);
        v.push('"');
    }
    if let Some(url) = metadata {
        v.push_str(", resource_metadata=\"");
        v.push_str(url);
        v.push('"');
    }
    v
}
