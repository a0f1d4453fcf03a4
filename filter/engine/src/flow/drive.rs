//! The request flow driven natively, as the host drives it, for the tools that run it without
//! a host (`explain`, the benchmarks, the fuzz targets, the tests).

use super::{CalloutAnswer, Dispatched, Next, RequestFlow};
use crate::callout::{CalloutRequest, DispatchError};
use crate::pb;
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
    /// A gRPC answer: its status (None: none came) and the CheckResponse, as a gRPC server
    /// sends it ([`Reply::wire`]).
    Grpc {
        status: Option<u32>,
        message: Vec<u8>,
    },
    /// An answer as it comes over HTTP/2, trailers included (any gRPC answer, well formed or
    /// not).
    Raw {
        status: Option<u16>,
        headers: Headers,
        body: Vec<u8>,
        trailers: Headers,
    },
    /// The host could not dispatch the call.
    NotDispatched,
}

impl Reply {
    /// An authorizer's plain verdict in its protocol: `status` 2xx allows, another status
    /// denies with it, None is no answer. A gRPC authorizer answers OK, or PERMISSION_DENIED
    /// with a denied response of that status.
    pub fn verdict(status: Option<u16>, grpc: bool) -> Reply {
        match (status, grpc) {
            (status, false) => Reply::Http {
                status,
                headers: Headers::new(),
                body: Vec::new(),
            },
            (None, true) => Reply::Grpc {
                status: None,
                message: Vec::new(),
            },
            (Some(s), true) => {
                let allowed = (200..300).contains(&s);
                let response = pb::CheckResponse {
                    status: Some(pb::RpcStatus {
                        code: if allowed { 0 } else { 7 },
                        message: String::new(),
                    }),
                    denied_response: (!allowed).then(|| pb::DeniedHttpResponse {
                        status: Some(pb::HttpStatus { code: i32::from(s) }),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                Reply::Grpc {
                    status: Some(0),
                    message: prost::Message::encode_to_vec(&response),
                }
            }
        }
    }

    /// The answer as it comes over HTTP/2: a gRPC answer as a server sends it (OK: the
    /// message behind its prefix, then `grpc-status: 0` in the trailers; an error: headers
    /// only, with `grpc-status` and `grpc-message`).
    pub fn wire(self) -> Option<(Option<u16>, Headers, Vec<u8>, Headers)> {
        match self {
            Reply::Http {
                status,
                headers,
                body,
            } => Some((status, headers, body, Headers::new())),
            Reply::Grpc { status: None, .. } => {
                Some((None, Headers::new(), vec![], Headers::new()))
            }
            Reply::Grpc {
                status: Some(0),
                message,
            } => {
                let body = crate::pb::frame(&message);
                let headers = Headers::from(vec![("content-type", "application/grpc")]);
                let trailers = Headers::from(vec![("grpc-status", "0")]);
                Some((Some(200), headers, body, trailers))
            }
            Reply::Grpc {
                status: Some(code),
                message,
            } => {
                let code = code.to_string();
                let text = String::from_utf8_lossy(&message).into_owned();
                let headers = Headers::from(vec![
                    ("content-type", "application/grpc"),
                    ("grpc-status", code.as_str()),
                    ("grpc-message", text.as_str()),
                ]);
                Some((Some(200), headers, Vec::new(), Headers::new()))
            }
            Reply::Raw {
                status,
                headers,
                body,
                trailers,
            } => Some((status, headers, body, trailers)),
            Reply::NotDispatched => None,
        }
    }

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
/// each callout is answered at once by `answer`, and the answers arrive in dispatch order; a
/// RateLimitService call is not dispatched (the limits' failure mode decides: see
/// [`drive_with_limiter`]). Returns the final [`Next::Allow`] or [`Next::Respond`]
/// ([`Next::Hold`] only if the flow stalls, which it must not); [`RequestFlow::outcome`] then
/// says how the request ended.
pub fn drive(
    flow: &mut RequestFlow,
    engine: &Engine,
    next: Next,
    answer: impl FnMut(&AuthzCall) -> Reply,
) -> Next {
    drive_with_limiter(flow, engine, next, answer, |_| Reply::NotDispatched)
}

/// [`drive`], with `limiter` answering the RateLimitService call (given the call made).
pub fn drive_with_limiter(
    flow: &mut RequestFlow,
    engine: &Engine,
    mut next: Next,
    mut answer: impl FnMut(&AuthzCall) -> Reply,
    mut limiter: impl FnMut(&CalloutRequest) -> Reply,
) -> Next {
    let mut token = 0u32;
    loop {
        let calls = match next {
            Next::Dispatch(calls) => calls,
            Next::CallLimiter(call) => {
                token += 1;
                let reply = limiter(&call);
                let dispatched = match reply {
                    Reply::NotDispatched => Err(DispatchError::Other("not dispatched".into())),
                    _ => Ok(token),
                };
                next = flow.limiter_dispatched(engine, dispatched, 0).next;
                next = deliver(flow, engine, token, reply).unwrap_or(next);
                continue;
            }
            other => return other,
        };
        let mut replies = Vec::with_capacity(calls.len());
        let results = calls.iter().map(|c| {
            let result = match answer(&c.call) {
                Reply::NotDispatched => Err(DispatchError::Other("not dispatched".into())),
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
            next = deliver(flow, engine, token, reply).unwrap_or(next);
        }
    }
}

/// Hands `reply` to the flow as the answer to callout `token`: what the flow does next,
/// unless it holds.
fn deliver(flow: &mut RequestFlow, engine: &Engine, token: u32, reply: Reply) -> Option<Next> {
    let (status, headers, body, trailers) = reply.wire()?;
    let answer = CalloutAnswer {
        status,
        headers: &headers,
        trailers: || trailers,
        read: read(&body),
    };
    let progress = flow.on_callout_response(engine, token, answer, 0);
    (!progress.next.is_hold()).then_some(progress.next)
}

/// A host's read of a buffer holding `bytes`: at most the given count.
fn read(bytes: &[u8]) -> impl FnOnce(usize) -> Option<Vec<u8>> + '_ {
    move |n| Some(bytes.get(..n.min(bytes.len())).unwrap_or_default().to_vec())
}
