//! The request flow driven natively, as the host drives it, for the tools that run it without
//! a host (`explain`, the benchmarks, the fuzz targets, the tests).

use super::{Dispatched, Next, RequestFlow};
use crate::policy::{AuthzCall, Engine};
use crate::request::Headers;

/// An authorizer's answer, as the host would receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP answer: its status (None: none came: timeout, reset), headers and body.
    Http {
        status: Option<u16>,
        headers: Headers,
        body: Vec<u8>,
    },
    /// A gRPC answer: its status (None: none came) and the CheckResponse.
    Grpc {
        status: Option<u32>,
        message: Vec<u8>,
    },
    /// The host could not dispatch the call.
    NotDispatched,
}

impl Reply {
    /// An HTTP answer with this status and nothing else.
    pub fn status(status: u16) -> Reply {
        Reply::Http {
            status: Some(status),
            headers: Headers::new(),
            body: Vec::new(),
        }
    }
}

/// Drives `flow` from `next`, what its last event returned, until it allows or answers:
/// each callout is answered at once by `answer`, and the answers arrive in dispatch order.
/// Returns the final [`Next::Allow`] or [`Next::Respond`] ([`Next::Hold`] only if the flow
/// stalls, which it must not); [`RequestFlow::outcome`] then says how the request ended.
pub fn drive(
    flow: &mut RequestFlow,
    engine: &Engine,
    mut next: Next,
    mut answer: impl FnMut(&AuthzCall) -> Reply,
) -> Next {
    let mut token = 0u32;
    loop {
        let Next::Dispatch(calls) = next else {
            return next;
        };
        let mut replies = Vec::with_capacity(calls.len());
        let results = calls.iter().map(|c| {
            let result = match answer(&c.call) {
                Reply::NotDispatched => Err("not dispatched".to_string()),
                reply => {
                    token += 1;
                    replies.push((token, reply));
                    Ok(token)
                }
            };
            Dispatched {
                slot: c.call.slot,
                token: result,
                at_ns: 0,
            }
        });
        next = flow.dispatched(engine, results).next;
        for (token, reply) in replies {
            let progress = match reply {
                Reply::Http {
                    status,
                    headers,
                    body,
                } => flow.on_callout_response(engine, token, status, &headers, read(&body), 0),
                Reply::Grpc { status, message } => {
                    flow.on_grpc_response(engine, token, status, message.len(), read(&message), 0)
                }
                Reply::NotDispatched => continue,
            };
            if !progress.next.is_hold() {
                next = progress.next;
            }
        }
    }
}

/// A host's read of a buffer holding `bytes`: at most the given count.
fn read(bytes: &[u8]) -> impl FnOnce(usize) -> Option<Vec<u8>> + '_ {
    move |n| Some(bytes.get(..n.min(bytes.len())).unwrap_or_default().to_vec())
}
