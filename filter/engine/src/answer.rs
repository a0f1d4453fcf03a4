//! What the client gets when a request is not let through (docs/semantics.md §5).

use std::borrow::Cow;
use std::fmt;

use mcp_access_bundle::mcp_methods::headers::McpHeader;
use mcp_access_bundle::mcp_methods::Revision;
use mcp_access_bundle::{DenyResponse, Level};
use serde_json::{json, Value};

use crate::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::mcp::ParseError;
use crate::policy::{Challenge, Denial, Reason};

/// A response the filter sends itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a request is refused before any policy looks at it (docs/semantics.md §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The path has no canonical form (the text says why).
    InvalidPath(String),
    /// A `Content-Encoding` other than `identity`.
    UnsupportedEncoding,
    /// A POST declaring a media type other than `application/json`.
    UnsupportedMediaType,
    /// A POST without a body.
    EmptyBody,
    /// A body (declared or received) over `limits.maxBodyBytes`.
    BodyTooLarge,
    /// A `Content-Length` that is not a number.
    InvalidContentLength,
    /// The body is not one acceptable JSON-RPC message.
    Message(ParseError),
    /// The MCP headers disagree with the body, are repeated, or are missing (SEP-2243).
    HeaderMismatch(HeaderProblem),
    /// The request names a protocol revision the filter does not accept (docs/semantics.md
    /// §4.4): the version it names.
    UnsupportedRevision(String),
    /// The method is one the request's revision does not have: (method, revision).
    MethodNotInRevision(String, &'static str),
    /// An HTTP GET stream or a session DELETE under a revision without them: (HTTP method,
    /// revision).
    HttpMethodNotInRevision(String, &'static str),
    /// The host could not set the caller's identity headers on an allowed request, or remove
    /// a client's copy from its trailers (docs/semantics.md §5.7): the upstream would read
    /// what the client sent.
    IdentityHeadersFailed,
}

/// What is wrong with the MCP headers of a request (SEP-2243).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// An MCP header came as a trailer: it was not compared with the body.
    Trailer,
    /// Given more than once.
    Repeated(McpHeader),
    /// Required by the request's revision and absent.
    Missing(McpHeader),
    /// Disagrees with the body (the protocol version: with `params._meta`'s).
    Mismatch(McpHeader),
    /// `Mcp-Name` holds a malformed Base64 sentinel.
    BadBase64,
}

impl fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderProblem::Trailer => f.write_str("an MCP header was sent as a trailer"),
            HeaderProblem::Repeated(h) => {
                write!(f, "{} header appears more than once", h.spelled())
            }
            HeaderProblem::Missing(h) => write!(f, "{} header is required", h.spelled()),
            HeaderProblem::Mismatch(McpHeader::ProtocolVersion) => {
                f.write_str("MCP-Protocol-Version header does not match params._meta")
            }
            HeaderProblem::Mismatch(h) => {
                write!(f, "{} header does not match the request body", h.spelled())
            }
            HeaderProblem::BadBase64 => {
                f.write_str("Mcp-Name header holds a malformed Base64 value")
            }
        }
    }
}

/// The reason a rejection is counted and logged under (in counter order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray)]
pub enum RejectionKind {
    InvalidPath,
    UnsupportedEncoding,
    InvalidJson,
    UnsupportedMediaType,
    InvalidContentLength,
    BodyTooLarge,
    InvalidRequest,
    InvalidParams,
    HeaderMismatch,
    UnsupportedRevision,
    MethodNotInRevision,
    IdentityHeadersFailed,
}

impl RejectionKind {
    /// Stable snake_case name, used in stats and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectionKind::InvalidPath => "invalid_path",
            RejectionKind::UnsupportedEncoding => "unsupported_encoding",
            RejectionKind::InvalidJson => "invalid_json",
            RejectionKind::UnsupportedMediaType => "unsupported_media_type",
            RejectionKind::InvalidContentLength => "invalid_content_length",
            RejectionKind::BodyTooLarge => "body_too_large",
            RejectionKind::InvalidRequest => "invalid_request",
            RejectionKind::InvalidParams => "invalid_params",
            RejectionKind::HeaderMismatch => "header_mismatch",
            RejectionKind::UnsupportedRevision => "unsupported_revision",
            RejectionKind::MethodNotInRevision => "method_not_in_revision",
            RejectionKind::IdentityHeadersFailed => "identity_headers_failed",
        }
    }
}

/// Why a request ended as it did: allowed, denied by policy (or an authorizer), or rejected
/// before any policy looked at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Allowed,
    Denied(Reason),
    Rejected(RejectionKind),
}

impl Why {
    /// Every reason a request is denied or rejected for, in counter order.
    pub const DENIALS: [Why; DENIAL_COUNT] = denials();

    /// Stable snake_case name, used in stats and logs (`allowed` for an allowed request).
    pub const fn as_str(self) -> &'static str {
        match self {
            Why::Allowed => "allowed",
            Why::Denied(r) => r.as_str(),
            Why::Rejected(k) => k.as_str(),
        }
    }

    /// Position in [`Why::DENIALS`]; None for [`Why::Allowed`].
    pub const fn denial_index(self) -> Option<usize> {
        match self {
            Why::Allowed => None,
            Why::Denied(r) => Some(r as usize),
            Why::Rejected(k) => Some(Reason::ALL.len() + k as usize),
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Rejection {
    /// The HTTP status.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Rejection::UnsupportedEncoding | Rejection::UnsupportedMediaType => 415,
            Rejection::BodyTooLarge => 413,
            Rejection::MethodNotInRevision(..) => 404,
            Rejection::HttpMethodNotInRevision(..) => 405,
            Rejection::IdentityHeadersFailed => 500,
            _ => 400,
        }
    }

    /// The JSON-RPC error code.
    pub(crate) fn code(&self) -> i32 {
        match self {
            Rejection::EmptyBody => PARSE_ERROR,
            Rejection::Message(e) => e.code(),
            Rejection::HeaderMismatch(_) => HEADER_MISMATCH,
            Rejection::UnsupportedRevision(_) => UNSUPPORTED_PROTOCOL_VERSION,
            Rejection::MethodNotInRevision(..) | Rejection::HttpMethodNotInRevision(..) => {
                METHOD_NOT_FOUND
            }
            Rejection::IdentityHeadersFailed => jsonrpc::INTERNAL_ERROR,
            _ => INVALID_REQUEST,
        }
    }

    /// The reason it is counted and logged under.
    pub(crate) fn reason(&self) -> RejectionKind {
        match self {
            Rejection::InvalidPath(_) => RejectionKind::InvalidPath,
            Rejection::UnsupportedEncoding => RejectionKind::UnsupportedEncoding,
            Rejection::UnsupportedMediaType => RejectionKind::UnsupportedMediaType,
            Rejection::EmptyBody | Rejection::Message(ParseError::Parse(_)) => {
                RejectionKind::InvalidJson
            }
            Rejection::BodyTooLarge => RejectionKind::BodyTooLarge,
            Rejection::InvalidContentLength => RejectionKind::InvalidContentLength,
            Rejection::Message(ParseError::InvalidRequest(_)) => RejectionKind::InvalidRequest,
            Rejection::Message(ParseError::InvalidParams(_)) => RejectionKind::InvalidParams,
            Rejection::HeaderMismatch(_) => RejectionKind::HeaderMismatch,
            Rejection::UnsupportedRevision(_) => RejectionKind::UnsupportedRevision,
            Rejection::MethodNotInRevision(..) | Rejection::HttpMethodNotInRevision(..) => {
                RejectionKind::MethodNotInRevision
            }
            Rejection::IdentityHeadersFailed => RejectionKind::IdentityHeadersFailed,
        }
    }

    /// The JSON-RPC error message the client reads.
    pub(crate) fn message(&self) -> Cow<'static, str> {
        match self {
            Rejection::InvalidPath(why) => Cow::Owned(why.clone()),
            Rejection::UnsupportedEncoding => "Content-Encoding is not supported".into(),
            Rejection::UnsupportedMediaType => "Content-Type must be application/json".into(),
            Rejection::EmptyBody => "Parse error: empty body".into(),
            Rejection::BodyTooLarge => "Request body exceeds the configured limit".into(),
            Rejection::InvalidContentLength => "Content-Length is not a number".into(),
            Rejection::Message(e) => Cow::Owned(e.to_string()),
            Rejection::HeaderMismatch(problem) => Cow::Owned(problem.to_string()),
            Rejection::UnsupportedRevision(_) => "Unsupported protocol version".into(),
            Rejection::MethodNotInRevision(method, revision) => Cow::Owned(format!(
                "Method not found: {method} is not part of MCP {revision}"
            )),
            Rejection::HttpMethodNotInRevision(method, revision) => Cow::Owned(format!(
                "HTTP {method} is not part of MCP {revision}: every request is a POST"
            )),
            Rejection::IdentityHeadersFailed => {
                "The caller's identity could not be passed to the server".into()
            }
        }
    }

    /// `error.data`: the supported revisions and the one asked for (the shape of MCP's
    /// `UnsupportedProtocolVersionError`).
    fn data(&self) -> Option<Value> {
        match self {
            Rejection::UnsupportedRevision(requested) => Some(json!({
                "supported": Revision::ALL.map(Revision::as_str),
                "requested": requested,
            })),
            _ => None,
        }
    }
}

fn json_response(status: u16, body: Vec<u8>) -> LocalResponse {
    LocalResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
    }
}

/// The answer to a rejected request (`id`: the request's, when known).
pub(crate) fn rejection(r: &Rejection, id: Option<&str>) -> LocalResponse {
    let body = jsonrpc::error(id, r.code(), &r.message(), r.data());
    json_response(r.status(), body)
}

/// Headers that describe a body: those of an authorizer's denial are not relayed to the
/// client (the JSON-RPC error replaces the body), nor kept with a denial body over its cap.
/// `name` is lowercase.
pub(crate) fn describes_body(name: &str) -> bool {
    matches!(
        name,
        "content-type"
            | "content-length"
            | "content-encoding"
            | "content-language"
            | "content-range"
            | "transfer-encoding"
            | "etag"
    )
}

/// A denial (docs/semantics.md §5.1, §5.2): always a JSON-RPC error echoing `id`, with the
/// bundle's code and message. A policy's denial has the bundle's HTTP status, or `challenge`'s
/// status and `WWW-Authenticate` when there is one (a caller without a credential on a
/// listener with OAuth discovery, a token short of a scope, §5.6); an authorizer's keeps the authorizer's status and the
/// headers it may set. With `exposeDetails`, `error.data` names level, reason, policy and rule,
/// and for an authorizer its status and body (already capped at its `maxResponseBodyBytes`):
/// as JSON when it is JSON, else as text. `by`: the deciding policy's id and rule's name.
pub(crate) fn denial(
    settings: &DenyResponse,
    d: &Denial,
    by: (Option<&str>, Option<&str>),
    id: Option<&str>,
    challenge: Option<&Challenge>,
) -> LocalResponse {
    let data = settings.expose_details.then(|| {
        let mut data = json!({
            "level": Level::name(d.level),
            "reason": d.reason.as_str(),
            "policy": by.0,
            "rule": by.1,
        });
        if let (Some(r), Some(obj)) = (&d.relay, data.as_object_mut()) {
            obj.insert("authorizerStatus".into(), r.status.into());
            if !r.body.is_empty() {
                let body = serde_json::from_slice::<Value>(&r.body).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&r.body).into_owned())
                });
                obj.insert("authorizerBody".into(), body);
            }
        }
        data
    });
    let data = data.or_else(|| unrouted(d));
    let body = jsonrpc::error(id, settings.json_rpc_code, &settings.message, data);
    match (&d.relay, challenge) {
        (None, None) => json_response(settings.http_status, body),
        (None, Some(c)) => {
            let mut response = json_response(c.status, body);
            response
                .headers
                .push(("www-authenticate".into(), c.value.clone()));
            response
        }
        (Some(r), _) => {
            let mut response = json_response(r.status, body);
            response.headers.extend(
                r.headers
                    .iter()
                    .filter(|(n, _)| !describes_body(n))
                    .cloned(),
            );
            response
        }
    }
}

/// `error.data` of a request denied before any policy was looked at, because the bundle knows
/// no listener on its port or no backend behind its route and cluster: which ones, and where
/// to look. Configuration names only, never policy content, so it is sent without
/// `exposeDetails` too.
fn unrouted(d: &Denial) -> Option<Value> {
    let fix = match d.reason {
        Reason::UnknownBackend => "no XBackend is behind this route and cluster: the HTTPRoute's backendRef must name an XBackend, or the Service and port an XBackend describes (mcp-access validate names the route)",
        Reason::UnknownListener => "no Gateway listener of the policy bundle has this port (mcp-access validate lists the listeners)",
        _ => return None,
    };
    Some(json!({
        "reason": d.reason.as_str(),
        "detail": d.detail,
        "fix": fix,
    }))
}

/// How many ways a request can end other than allowed.
const DENIAL_COUNT: usize = Reason::ALL.len() + REJECTIONS.len();

const REJECTIONS: &[RejectionKind] = <RejectionKind as strum::VariantArray>::VARIANTS;

/// [`Why::DENIALS`], from the two enums' own lists: every reason, then every rejection.
#[allow(clippy::indexing_slicing)] // evaluated by the compiler: an index out of range fails the build
const fn denials() -> [Why; DENIAL_COUNT] {
    let mut out = [Why::Allowed; DENIAL_COUNT];
    let mut i = 0;
    while i < Reason::ALL.len() {
        out[i] = Why::Denied(Reason::ALL[i]);
        i += 1;
    }
    let mut k = 0;
    while k < REJECTIONS.len() {
        out[i + k] = Why::Rejected(REJECTIONS[k]);
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rejection_has_its_status_code_and_reason() {
        let cases = [
            (
                Rejection::InvalidPath("bad".into()),
                400,
                -32600,
                "invalid_path",
                "bad",
            ),
            (
                Rejection::UnsupportedEncoding,
                415,
                -32600,
                "unsupported_encoding",
                "Content-Encoding is not supported",
            ),
            (
                Rejection::UnsupportedMediaType,
                415,
                -32600,
                "unsupported_media_type",
                "Content-Type must be application/json",
            ),
            (
                Rejection::EmptyBody,
                400,
                -32700,
                "invalid_json",
                "Parse error: empty body",
            ),
            (
                Rejection::BodyTooLarge,
                413,
                -32600,
                "body_too_large",
                "Request body exceeds the configured limit",
            ),
            (
                Rejection::InvalidContentLength,
                400,
                -32600,
                "invalid_content_length",
                "Content-Length is not a number",
            ),
            (
                Rejection::Message(ParseError::Parse("x".into())),
                400,
                -32700,
                "invalid_json",
                "Parse error: x",
            ),
            (
                Rejection::Message(ParseError::InvalidRequest("y".into())),
                400,
                -32600,
                "invalid_request",
                "Invalid Request: y",
            ),
            (
                Rejection::Message(ParseError::InvalidParams("z".into())),
                400,
                -32602,
                "invalid_params",
                "Invalid params: z",
            ),
            (
                Rejection::HeaderMismatch(HeaderProblem::Missing(McpHeader::Method)),
                400,
                -32020,
                "header_mismatch",
                "Mcp-Method header is required",
            ),
            (
                Rejection::UnsupportedRevision("2024-11-05".into()),
                400,
                -32022,
                "unsupported_revision",
                "Unsupported protocol version",
            ),
            (
                Rejection::MethodNotInRevision("initialize".into(), "2026-07-28"),
                404,
                -32601,
                "method_not_in_revision",
                "Method not found: initialize is not part of MCP 2026-07-28",
            ),
            (
                Rejection::HttpMethodNotInRevision("GET".into(), "2026-07-28"),
                405,
                -32601,
                "method_not_in_revision",
                "HTTP GET is not part of MCP 2026-07-28: every request is a POST",
            ),
        ];
        for (r, status, code, reason, message) in cases {
            assert_eq!(
                (r.status(), r.code(), r.reason().as_str()),
                (status, code, reason)
            );
            // Every rejection has its denial counter.
            assert!(Why::DENIALS.contains(&Why::Rejected(r.reason())), "{r:?}");
            assert_eq!(r.message(), message, "{r:?}");
            if let Rejection::Message(e) = &r {
                assert_eq!(e.code(), code, "{r:?}");
            }
            let response = rejection(&r, Some("7"));
            assert_eq!(response.status, status);
            let body: Value = serde_json::from_slice(&response.body).unwrap();
            assert_eq!(body["id"], 7);
            assert_eq!(body["error"]["code"], code);
            assert_eq!(body["error"]["message"], message);
        }
    }

    #[test]
    fn an_unrouted_request_is_told_which_route_and_cluster_without_policy_content() {
        let mut d = Denial::of(None, Reason::UnknownBackend);
        d.detail = Some("route \"mcp/r/rule-0/match-0\", cluster \"service/mcp/s:8001\"".into());
        let body = |d: &Denial, by, expose: bool| {
            let settings = DenyResponse {
                expose_details: expose,
                ..Default::default()
            };
            let r = denial(&settings, d, by, Some("1"), None);
            serde_json::from_slice::<Value>(&r.body).unwrap()
        };
        let data = &body(&d, (None, None), false)["error"]["data"];
        assert_eq!(data["reason"], "unknown_backend");
        assert_eq!(data["detail"], d.detail.clone().unwrap());
        assert!(data["fix"].as_str().unwrap().contains("XBackend"), "{data}");
        // A policy's denial says nothing unless the operator exposes details.
        let policy = Denial::of(Some(Level::Backend), Reason::DenyPolicy);
        let by = (Some("mcp/secret"), None);
        assert!(body(&policy, by, false)["error"].get("data").is_none());
        assert_eq!(
            body(&policy, by, true)["error"]["data"]["policy"],
            "mcp/secret"
        );
    }
}
