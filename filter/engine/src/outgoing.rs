//! One authorizer call as it leaves the filter: what the authorizer is sent, in its protocol
//! (HTTP, [`crate::callout`]; gRPC, [`crate::ext_authz`]), what the answer cache keys on, and
//! the callout the host dispatches.

use mcp_access_bundle::{Authorizer, AuthorizerProtocol, Level};

use crate::authz_cache::Sent;
use crate::callout::{self, CalloutAttributes, CalloutRequest};
use crate::ext_authz;
use crate::pb;
use crate::request::Request;

/// What an authorizer is sent, in its protocol: an HTTP request, or a gRPC CheckRequest
/// (carried as an HTTP/2 callout, [`Outgoing::into_request`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outgoing {
    Http(CalloutRequest),
    Grpc(Box<pb::CheckRequest>),
}

impl Outgoing {
    /// What `authorizer` is sent about `req` (`body`: the buffered client body, `id`: the
    /// JSON-RPC id as raw JSON text) for `policy` at `level`.
    pub(crate) fn build(
        authorizer: &Authorizer,
        req: &Request,
        body: &[u8],
        id: Option<&str>,
        level: Level,
        policy: &str,
    ) -> Outgoing {
        let attrs = CalloutAttributes::of(req, level, policy);
        match authorizer.protocol {
            AuthorizerProtocol::Http => {
                Outgoing::Http(callout::build(authorizer, req, body, &attrs))
            }
            AuthorizerProtocol::Grpc => Outgoing::Grpc(Box::new(ext_authz::check_request(
                authorizer, req, body, id, &attrs,
            ))),
        }
    }

    /// What the answer cache keys on ([`crate::authz_cache::key_of`]).
    pub(crate) fn sent(&self) -> Sent<'_> {
        match self {
            Outgoing::Http(r) => Sent::Http(r),
            Outgoing::Grpc(check) => Sent::Grpc(check),
        }
    }

    /// The callout the host dispatches.
    pub(crate) fn into_request(self, authorizer: &Authorizer) -> CalloutRequest {
        match self {
            Outgoing::Http(r) => r,
            Outgoing::Grpc(check) => ext_authz::callout(authorizer, &check),
        }
    }
}
