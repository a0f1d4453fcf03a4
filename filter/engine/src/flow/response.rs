//! The response side of the stream: an allowed request's answer, read through the listing
//! filter the flow made when it allowed (docs/semantics.md §5.4); and the one event after a
//! decision that changes it, an edit of the request the host could not make.

use super::{Deciding, Done, Message, Next, Progress, RequestFlow, Stage};
use crate::answer::{self, Rejection};
use crate::listing::{BodyAction, HeadersAction, ListingFilter};
use crate::pins::PinEvent;
use crate::policy::Engine;
use crate::request::Headers;

/// What the host does with the response headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// Leave them; the response is not read.
    Keep,
    /// Remove `Content-Length` (the body will change size); with `media_type`, also remove
    /// `Content-Encoding` and set `Content-Type` to it (the body is replaced by an error).
    Rewrite { media_type: Option<&'static str> },
}

/// What a response body event did: what the host does with the body, and what the listings
/// read said, for its stats and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyProgress {
    pub action: BodyAction,
    /// Drift of pinned tools (and its end), each given once.
    pub pin_events: Vec<PinEvent>,
    /// Answers written from kept ones (`mcp_access.listings.reused`).
    pub reused: u32,
}

impl BodyProgress {
    const PASS: BodyProgress = BodyProgress {
        action: BodyAction::Pass,
        pin_events: Vec::new(),
        reused: 0,
    };
}

impl RequestFlow {
    /// The response's filter and the request it answers, while it reads the response.
    fn reading(&mut self) -> Option<&mut Done> {
        match &mut self.stage {
            Stage::Done(d) if d.response.is_some() => Some(d),
            _ => None,
        }
    }

    /// The filter of the response, for tests and benches that drive a copy of it alone.
    pub fn response_filter(&self) -> Option<&ListingFilter> {
        match &self.stage {
            Stage::Done(d) => d.response.as_ref(),
            _ => None,
        }
    }

    /// Whether the response is read at all (an allowed request whose response may carry a
    /// listing): otherwise every response event passes it as it is.
    pub fn reads_response(&self) -> bool {
        self.response_filter().is_some()
    }

    /// The response headers arrived: `content_type` reads the `Content-Type` (Envoy holds it
    /// once), `content_encoding` the first `Content-Encoding`, `all` every header; each is
    /// read only when needed ([`ListingFilter::on_response_headers`]).
    pub fn on_response_headers(
        &mut self,
        content_type: impl FnOnce() -> Option<String>,
        content_encoding: impl FnOnce() -> Option<String>,
        all: impl FnOnce() -> Headers,
    ) -> ResponseHeaders {
        let Some(done) = self.reading() else {
            return ResponseHeaders::Keep;
        };
        let Some(filter) = done.response.as_mut() else {
            return ResponseHeaders::Keep;
        };
        let content_type = content_type();
        match filter.on_response_headers(content_type.as_deref(), content_encoding, all) {
            HeadersAction::Keep => {
                done.response = None;
                ResponseHeaders::Keep
            }
            HeadersAction::Rewrite => ResponseHeaders::Rewrite {
                media_type: filter.content_type(),
            },
        }
    }

    /// A response body chunk arrived ([`ListingFilter::on_body`]: `buffered` bytes held,
    /// `read` fetches them).
    pub fn on_response_body(
        &mut self,
        engine: &Engine,
        buffered: usize,
        end_of_stream: bool,
        read: impl FnOnce(usize) -> Option<Vec<u8>>,
    ) -> BodyProgress {
        let Some(Done {
            req,
            response: Some(filter),
            ..
        }) = self.reading()
        else {
            return BodyProgress::PASS;
        };
        let action = filter.on_body(engine, Some(req), buffered, end_of_stream, read);
        Self::body_progress(filter, action)
    }

    /// Response trailers arrived: the body ended ([`ListingFilter::on_trailers`]: `read`
    /// fetches everything buffered).
    pub fn on_response_trailers(
        &mut self,
        engine: &Engine,
        read: impl FnOnce() -> Option<Vec<u8>>,
    ) -> BodyProgress {
        let Some(Done {
            req,
            response: Some(filter),
            ..
        }) = self.reading()
        else {
            return BodyProgress::PASS;
        };
        let action = filter.on_trailers(engine, Some(req), read);
        Self::body_progress(filter, action)
    }

    fn body_progress(filter: &mut ListingFilter, action: BodyAction) -> BodyProgress {
        BodyProgress {
            action,
            pin_events: filter.take_pin_events(),
            reused: filter.take_reused(),
        }
    }

    /// The host could not make an edit the request needs: set an identity header on the
    /// allowed request, or remove a client's copy of one from its trailers
    /// (docs/semantics.md §5.7). The request is refused with the request's id, and its
    /// outcome says so, whatever was decided before; an authorizer's answer still to come
    /// finds no request waiting for it.
    pub fn edit_failed(&mut self) -> Progress {
        let r = Rejection::IdentityHeadersFailed;
        let next = match std::mem::take(&mut self.stage) {
            Stage::Done(d) => {
                let Done { req, msg, eval, .. } = *d;
                self.reject(req, msg, eval, r)
            }
            Stage::Deciding(d) => {
                let Deciding { req, msg, eval, .. } = *d;
                self.reject(req, msg, Some(eval), r)
            }
            Stage::Limiting(l) => {
                let a = l.into_allowed();
                self.reject(a.req, a.msg, Some(a.eval), r)
            }
            Stage::Body(s) => self.reject(s.req, Message::default(), None, r),
            // No request to refuse: nothing was let through.
            Stage::Start => Next::Respond(answer::rejection(&r, None)),
        };
        self.progress(next)
    }
}
