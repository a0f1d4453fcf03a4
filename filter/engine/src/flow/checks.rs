//! The checks of a request's headers before policies judge it: the transport checks
//! (docs/semantics.md §5.1), the MCP headers against the body (SEP-2243), and the revision
//! the request is judged under (§4.4).

use mcp_access_bundle::mcp_methods::headers::McpHeader;
use mcp_access_bundle::mcp_methods::{self, Method, Revision};

use super::Started;
use crate::answer::{HeaderProblem, Rejection};
use crate::policy::Engine;
use crate::request::{McpOp, Request};

impl Started {
    /// SEP-2243: `Mcp-Method`, `Mcp-Name` (Base64 sentinel decoded) and
    /// `MCP-Protocol-Version` each appear at most once and agree with the body (the last with
    /// `params._meta`'s protocol version); a request of the header revision (2026-07-28 on)
    /// must carry the headers that revision requires.
    pub(super) fn header_mismatch(
        &self,
        op: &McpOp,
        body_version: Option<&str>,
    ) -> Option<HeaderProblem> {
        let req = &self.req;
        let found = self.mcp_headers;
        if let Some(h) = MCP_HEADERS.into_iter().find(|h| found.repeated(*h)) {
            return Some(HeaderProblem::Repeated(h));
        }
        let method = found.first(req, McpHeader::Method);
        let name = found.first(req, McpHeader::Name);
        let version = found.first(req, McpHeader::ProtocolVersion);
        if let (Some(h), Some(b)) = (version, body_version) {
            if h != b {
                return Some(HeaderProblem::Mismatch(McpHeader::ProtocolVersion));
            }
        }
        if let Some(m) = method {
            if op.method() != Some(m) {
                return Some(HeaderProblem::Mismatch(McpHeader::Method));
            }
        }
        if let Some(n) = name {
            let Some(n) = crate::base64::from_sentinel(n) else {
                return Some(HeaderProblem::BadBase64);
            };
            if op.param() != Some(n.as_ref()) {
                return Some(HeaderProblem::Mismatch(McpHeader::Name));
            }
        }
        let header_revision =
            body_version.is_some() || version.is_some_and(mcp_methods::is_header_revision);
        if header_revision {
            if version.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::ProtocolVersion));
            }
            if method.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::Method));
            }
            let named = op.called().is_some_and(Method::requires_name_header);
            if named && name.is_none() {
                return Some(HeaderProblem::Missing(McpHeader::Name));
            }
        }
        None
    }

    /// The revision the request is judged under (docs/semantics.md §4.4): the one its
    /// `MCP-Protocol-Version` header or `params._meta` names (first the header), else
    /// 2025-03-26. Every version the request names, the one `initialize` asks for included,
    /// must be a revision the filter accepts. Checked before the headers are compared with
    /// the body, so a client of an unknown revision learns which ones are supported.
    pub(super) fn judge_versions(
        &self,
        body_version: Option<&str>,
        init_version: Option<&str>,
    ) -> Result<Revision, Rejection> {
        let parse =
            |v: &str| Revision::parse(v).ok_or_else(|| Rejection::UnsupportedRevision(v.into()));
        let version = McpHeader::ProtocolVersion;
        let req = &self.req;
        if self.mcp_headers.repeated(version) {
            // Every copy must be a revision the filter accepts (the first names it).
            for v in mcp_header_values(req, version) {
                parse(v)?;
            }
        }
        let header = self.mcp_headers.first(req, version);
        let mut named = None;
        for v in header.into_iter().chain(body_version) {
            named = named.or(Some(parse(v)?));
        }
        if let Some(v) = init_version {
            parse(v)?;
        }
        Ok(named.unwrap_or(Revision::UNNAMED))
    }
}

/// Refuses a method the table knows but `revision`, the request's, does not have (methods
/// the table does not know are left to the policies).
pub(super) fn judge_method(op: &McpOp, revision: Revision) -> Result<(), Rejection> {
    match op.called() {
        Some(m) if m.missing_in(revision) => Err(Rejection::MethodNotInRevision(
            m.to_string(),
            revision.as_str(),
        )),
        _ => Ok(()),
    }
}

/// The transport checks the headers decide (docs/semantics.md §5.1), in order: encoding, a POST
/// without a body, media type, Content-Length (`limit`: `limits.maxBodyBytes`). Every copy of a
/// repeated header is checked: any one may be what the upstream reads.
pub(super) fn header_rejection(
    req: &Request,
    end_of_stream: bool,
    limit: usize,
) -> Option<Rejection> {
    let post = req.method == "POST";
    // One pass over the headers: every copy of each is looked at.
    let (mut encoded, mut typed, mut not_json) = (false, false, false);
    let mut length: Result<u64, ()> = Ok(0);
    for (name, value) in &req.headers {
        match name {
            "content-encoding" => encoded |= !value.trim().eq_ignore_ascii_case("identity"),
            "content-type" => {
                typed = true;
                not_json |= post && !is_json_utf8(value);
            }
            "content-length" => {
                length = match (length, value.trim().parse::<u64>()) {
                    (Ok(max), Ok(l)) => Ok(max.max(l)),
                    _ => Err(()),
                }
            }
            _ => {}
        }
    }
    if encoded {
        return Some(Rejection::UnsupportedEncoding);
    }
    if end_of_stream {
        return post.then_some(Rejection::EmptyBody);
    }
    // A POST carries JSON-RPC: `application/json`, in UTF-8 if a charset is named. A missing
    // type or another charset would let a server read other text than the filter did.
    if post && (!typed || not_json) {
        return Some(Rejection::UnsupportedMediaType);
    }
    match length {
        Err(()) => Some(Rejection::InvalidContentLength),
        Ok(l) if l > limit as u64 => Some(Rejection::BodyTooLarge),
        Ok(_) => None,
    }
}

/// The MCP headers, in the order [`RequestFlow::header_mismatch`] reads them.
const MCP_HEADERS: [McpHeader; 3] = McpHeader::ALL;

/// Where the MCP headers are among a request's headers, found in one pass when the headers
/// arrive: for each (in [`MCP_HEADERS`] order) its first copy's index plus one (0: none),
/// and a bit per header that has more than one copy.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct McpHeaders {
    first: [u32; 3],
    repeated: u8,
}

impl McpHeaders {
    pub(super) fn scan(req: &Request) -> McpHeaders {
        let mut found = McpHeaders::default();
        for (i, (n, _)) in req.headers.iter().enumerate() {
            // The names' lengths tell them apart.
            let (slot, h) = match n.len() {
                10 => (0, McpHeader::Method),
                8 => (1, McpHeader::Name),
                20 => (2, McpHeader::ProtocolVersion),
                _ => continue,
            };
            let Some(first) = found.first.get_mut(slot) else {
                continue;
            };
            if !is_mcp_header(n, h) {
                continue;
            }
            if *first != 0 {
                found.repeated |= 1 << slot;
            } else {
                // A request with 2^32 headers is refused (as if repeated) rather than misread.
                match u32::try_from(i + 1) {
                    Ok(at) => *first = at,
                    Err(_) => found.repeated |= 1 << slot,
                }
            }
        }
        found
    }

    fn slot(h: McpHeader) -> usize {
        match h {
            McpHeader::Method => 0,
            McpHeader::Name => 1,
            McpHeader::ProtocolVersion => 2,
        }
    }

    /// The first copy of `h` in `req` (the request scanned).
    fn first(self, req: &Request, h: McpHeader) -> Option<&str> {
        let at = *self.first.get(Self::slot(h))?;
        let i = usize::try_from(at.checked_sub(1)?).ok()?;
        req.headers.get_index(i).map(|(_, v)| v)
    }

    fn repeated(self, h: McpHeader) -> bool {
        self.repeated & (1 << Self::slot(h)) != 0
    }
}

/// Whether header `name` (lowercase) is a copy of MCP header `h`, a spelling with `_` for
/// `-` included: some servers fold `_` into `-` and would read `mcp_name` as `Mcp-Name`, so
/// it counts as a copy (which must agree with the body and appear once).
fn is_mcp_header(name: &str, h: McpHeader) -> bool {
    let want = h.name();
    name.len() == want.len()
        && name
            .bytes()
            .zip(want.bytes())
            .all(|(a, b)| a == b || (a == b'_' && b == b'-'))
}

/// Every copy of MCP header `h` ([`is_mcp_header`]).
fn mcp_header_values(req: &Request, h: McpHeader) -> impl Iterator<Item = &str> {
    req.headers
        .iter()
        .filter(move |(n, _)| is_mcp_header(n, h))
        .map(|(_, v)| v)
}

/// Whether a `Content-Type` value is `application/json` with no charset or UTF-8's.
fn is_json_utf8(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        && parts.all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                value.eq_ignore_ascii_case("utf-8") || value.eq_ignore_ascii_case("utf8")
            }
            _ => true,
        })
}

/// `limits.maxBodyBytes` as a byte count.
pub(super) fn body_limit(engine: &Engine) -> usize {
    usize::try_from(engine.settings.limits.max_body_bytes).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            path: "/mcp".into(),
            canonical_path: "/mcp".into(),
            authority: "a.example".into(),
            port: 80,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Request::default()
        }
    }

    #[test]
    fn header_checks_in_order() {
        use Rejection::*;
        let json = ("content-type", "application/json; charset=utf-8");
        /// HTTP method, headers, end of stream, expected rejection.
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool, Option<Rejection>);
        let cases: &[Case] = &[
            ("POST", &[json, ("content-length", "10")], false, None),
            (
                "POST",
                &[json, ("content-encoding", " Identity ")],
                false,
                None,
            ),
            (
                "POST",
                &[
                    json,
                    ("content-encoding", "identity"),
                    ("content-encoding", "gzip"),
                ],
                false,
                Some(UnsupportedEncoding),
            ),
            // Encoding comes before an empty body, an empty body before the media type.
            (
                "POST",
                &[("content-encoding", "br")],
                true,
                Some(UnsupportedEncoding),
            ),
            (
                "POST",
                &[("content-type", "text/plain")],
                true,
                Some(EmptyBody),
            ),
            ("GET", &[("content-type", "text/plain")], true, None),
            ("GET", &[("content-type", "text/plain")], false, None),
            (
                "POST",
                &[json, ("content-type", "text/plain")],
                false,
                Some(UnsupportedMediaType),
            ),
            // A POST without a type, or naming another charset: 415.
            ("POST", &[], false, Some(UnsupportedMediaType)),
            (
                "POST",
                &[("content-type", "application/json; charset=iso-8859-1")],
                false,
                Some(UnsupportedMediaType),
            ),
            (
                "POST",
                &[("content-type", "application/json;charset=\"UTF-16\"")],
                false,
                Some(UnsupportedMediaType),
            ),
            (
                "POST",
                &[("content-type", "Application/JSON; Charset=\"UTF-8\"; x=y")],
                false,
                None,
            ),
            ("GET", &[], false, None),
            (
                "POST",
                &[json, ("content-length", "1x")],
                false,
                Some(InvalidContentLength),
            ),
            (
                "POST",
                &[json, ("content-length", "5"), ("content-length", "11")],
                false,
                Some(BodyTooLarge),
            ),
            (
                "PUT",
                &[("content-length", "11")],
                false,
                Some(BodyTooLarge),
            ),
        ];
        for (method, headers, end, want) in cases {
            let got = header_rejection(&request(method, headers), *end, 10);
            assert_eq!(&got, want, "{method} {headers:?} {end}");
        }
    }

    #[test]
    fn base64_sentinel_is_decoded_strictly() {
        let d = |v| crate::base64::from_sentinel(v).map(|c| c.into_owned());
        assert_eq!(d("get_weather").as_deref(), Some("get_weather"));
        assert_eq!(d("=?base64?ZWNobw==?=").as_deref(), Some("echo"));
        assert_eq!(
            d("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(d("=?base64?IHBhZGRlZCA=?=").as_deref(), Some(" padded "));
        assert_eq!(d("=?base64??=").as_deref(), Some(""));
        assert_eq!(d("=?base64?ZGVs?=").as_deref(), Some("del"));
        // Not the sentinel: taken as it is.
        assert_eq!(
            d("=?BASE64?ZWNobw==?=").as_deref(),
            Some("=?BASE64?ZWNobw==?=")
        );
        // Malformed: unpadded, bad alphabet, non-zero leftover bits, padding inside, not UTF-8.
        for bad in [
            "=?base64?ZWNobw?=",
            "=?base64?ZWNo*w==?=",
            "=?base64?ZWNobx==?=",
            "=?base64?ZW==bw==?=",
            "=?base64?Z===?=",
            "=?base64?/w==?=",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
