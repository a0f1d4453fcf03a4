//! External authorizer callouts with Envoy ext_authz HTTP-service semantics: what is sent,
//! and what the answer means.

use std::borrow::Cow;

use mcp_access_bundle::mcp_methods::headers::McpHeader;
use mcp_access_bundle::mcp_methods::{Category, Method};
use mcp_access_bundle::{http, Authorizer, Level};

use crate::policy::{AuthzOutcome, HeaderEdit};
use crate::request::{Headers, McpOp, Request};

use mcp_access_bundle::authz_cache::{is_filter_set, PARTIAL_BODY_HEADER};

/// A request to an authorizer, for `dispatch_http_call`: an HTTP authorizer's, or a gRPC
/// authorizer's Check call as HTTP/2 carries it ([`crate::ext_authz::callout`]). Header names
/// and values the filter writes itself are not allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalloutRequest {
    pub cluster: String,
    pub headers: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    pub body: Vec<u8>,
    pub timeout_ms: u32,
}

/// Why the host could not dispatch a callout: the proxy-wasm status it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchError {
    /// `BadArgument`: Envoy has no such cluster.
    NoCluster,
    /// `InternalFailure`: Envoy failed the call at once (the cluster has no endpoint).
    NoEndpoint,
    /// Another status, by its name.
    Other(String),
}

impl DispatchError {
    /// The error of a proxy-wasm status, by its name.
    pub fn from_status(name: &str) -> DispatchError {
        match name {
            "BadArgument" => DispatchError::NoCluster,
            "InternalFailure" => DispatchError::NoEndpoint,
            other => DispatchError::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for DispatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DispatchError::NoCluster => "BadArgument",
            DispatchError::NoEndpoint => "InternalFailure",
            DispatchError::Other(name) => name,
        })
    }
}

/// Why an authorizer's header cannot be applied to the upstream request or the client's
/// response (docs/semantics.md §3.5): a header that is never applied, a name that is not a
/// token, a value holding CR, LF, NUL or another control but HTAB. None: it can. `name` is
/// lowercase.
pub(crate) fn header_problem(name: &str, value: &str) -> Option<String> {
    if http::is_never_applied(name) {
        Some(format!("header {name:?} is never applied"))
    } else if !http::is_header_name(name) {
        Some(format!("{name:?} is not a header name"))
    } else if !http::is_header_value(value) {
        Some(format!(
            "the value of header {name} holds CR, LF, NUL or another control"
        ))
    } else {
        None
    }
}

/// Why an OK answer cannot edit header `name` of the upstream request: [`header_problem`], or
/// an MCP header the filter has compared with the body (`Mcp-Method`, `Mcp-Name`,
/// `MCP-Protocol-Version`): changed after the check, the server would read another request
/// than the one decided. `name` is lowercase.
pub(crate) fn upstream_edit_problem(name: &str, value: &str) -> Option<String> {
    if McpHeader::ALL.iter().any(|h| h.name() == name) {
        return Some(format!(
            "header {name} was checked against the body and is never changed"
        ));
    }
    header_problem(name, value)
}

/// An OK answer that edits a request header some route matches on (`route_headers`, from
/// `envoy.routeMatchHeaders`) cannot be applied: Envoy would match the route again and could
/// send the request through a route no policy judged. It becomes an error (the failure mode
/// applies).
pub(crate) fn refuse_route_matched(outcome: &mut AuthzOutcome, route_headers: &[String]) {
    let AuthzOutcome::Allow { headers } = &*outcome else {
        return;
    };
    if let Some(e) = headers.iter().find(|e| route_headers.contains(&e.name)) {
        let problem = format!(
            "header {} is one a route matches on (envoy.routeMatchHeaders): the request would be routed again",
            e.name
        );
        *outcome = malformed(&problem);
    }
}

/// The outcome of an answer that cannot be applied: an error (the failure mode applies).
pub(crate) fn malformed(problem: &str) -> AuthzOutcome {
    AuthzOutcome::Error {
        detail: format!("malformed answer: {problem}"),
    }
}

/// What the filter itself tells an authorizer about a request, whatever the authorizer's
/// protocol (docs/semantics.md §3.5): one value, rendered as `x-mcp-*` headers for an HTTP
/// authorizer ([`CalloutAttributes::headers`]) and as `context_extensions` for a gRPC one
/// ([`crate::ext_authz`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CalloutAttributes<'r> {
    /// The JSON-RPC method of a call.
    pub method: Option<&'r Method>,
    /// What the call names, by its category: a tool, a prompt, a resource URI.
    pub item: Option<(Category, &'r str)>,
    /// The caller's SPIFFE ID (told an HTTP authorizer; a gRPC one reads the peer's principal).
    pub spiffe: Option<&'r str>,
    /// The level and the policy that call the authorizer.
    pub level: Level,
    pub policy: &'r str,
}

impl<'r> CalloutAttributes<'r> {
    /// The attributes of `req` for `policy` at `level`.
    pub(crate) fn of(req: &'r Request, level: Level, policy: &'r str) -> Self {
        let (method, item) = match &req.mcp {
            McpOp::Call { method, param } => {
                (Some(method), method.item_category().zip(param.as_deref()))
            }
            _ => (None, None),
        };
        CalloutAttributes {
            method,
            item,
            spiffe: req.caller.spiffe.as_deref(),
            level,
            policy,
        }
    }

    /// As an HTTP authorizer is told them: headers (each a
    /// [`CONTEXT_HEADERS`](mcp_access_bundle::authz_cache::CONTEXT_HEADERS) one), in order.
    fn headers(&self) -> impl Iterator<Item = (&'static str, Cow<'static, str>)> + '_ {
        let method = self.method.map(|m| match m {
            Method::Known(spec) => ("x-mcp-method", Cow::Borrowed(spec.name())),
            Method::Other(name) => ("x-mcp-method", Cow::Owned(name.clone())),
        });
        let item = self.item.map(|(category, value)| {
            let name = match category {
                Category::Tools => "x-mcp-tool",
                Category::Prompts => "x-mcp-prompt",
                Category::Resources => "x-mcp-resource-uri",
            };
            (name, Cow::Owned(value.to_owned()))
        });
        let spiffe = self
            .spiffe
            .map(|id| ("x-mcp-source-spiffe", Cow::Owned(id.to_owned())));
        let policy = Cow::Owned(self.policy.to_owned());
        method.into_iter().chain(item).chain(spiffe).chain([
            ("x-mcp-access-level", Cow::Borrowed(self.level.as_str())),
            ("x-mcp-access-policy", policy),
        ])
    }
}

/// Builds the callout for `authorizer` about `req` (body: the buffered client body), telling
/// it `attrs`.
pub(crate) fn build(
    authorizer: &Authorizer,
    req: &Request,
    body: &[u8],
    attrs: &CalloutAttributes<'_>,
) -> CalloutRequest {
    let max = usize::try_from(authorizer.forward_body_max_bytes).unwrap_or(usize::MAX);
    let forwarded = body.get(..max.min(body.len())).unwrap_or_default();
    let prefix = authorizer.path_prefix.trim_end_matches('/');
    let mut headers: Vec<(Cow<'static, str>, Cow<'static, str>)> =
        Vec::with_capacity(12 + req.headers.len().min(16));
    let authority = authorizer
        .authority
        .clone()
        .unwrap_or_else(|| req.authority.clone());
    headers.extend([
        (":method".into(), req.method.clone().into()),
        (":path".into(), format!("{prefix}{}", req.path).into()),
        (":authority".into(), authority.into()),
        ("content-length".into(), forwarded.len().to_string().into()),
    ]);
    if forwarded.len() < body.len() {
        headers.push((PARTIAL_BODY_HEADER.into(), "true".into()));
    }
    for (name, value) in &req.headers {
        let always = name == "authorization";
        let allowed = always
            || authorizer
                .allowed_headers
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name));
        if allowed && !is_filter_set(name) {
            headers.push((name.to_owned().into(), value.to_owned().into()));
        }
    }
    headers.extend(attrs.headers().map(|(n, v)| (Cow::Borrowed(n), v)));
    CalloutRequest {
        cluster: authorizer.cluster.clone(),
        headers,
        body: forwarded.to_vec(),
        timeout_ms: authorizer.timeout_ms,
    }
}

/// Headers of an HTTP answer that belong to the answer itself, not to what it asks: its
/// pseudo-headers, framing and hop-by-hop headers, and Envoy's own.
fn is_answers_own(name: &str) -> bool {
    name.starts_with(':') || name.starts_with("x-envoy-") || http::is_framing(name)
}

/// Whether a status is a denial, whose response (body included) is relayed to the client.
/// Everything else is an allow (2xx) or an error (no status, 1xx, 5xx).
fn is_denial(status: u16) -> bool {
    (300..500).contains(&status)
}

/// How many body bytes of an error answer (1xx, 5xx) the host reads: enough for the reason
/// Envoy gives when it answers in the place of an authorizer it could not reach.
pub const ERROR_BODY_PEEK: usize = 256;

/// How many body bytes of a callout response with `status` the host reads into the VM: for a
/// denial the cap plus one (to tell an over-cap body), for an error [`ERROR_BODY_PEEK`] (for the
/// log), for an allow none.
pub(crate) fn body_read_limit(authorizer: &Authorizer, status: Option<u16>) -> usize {
    match status {
        Some(s) if is_denial(s) => usize::try_from(authorizer.max_response_body_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(1),
        Some(s) if !(200..300).contains(&s) => ERROR_BODY_PEEK,
        _ => 0,
    }
}

/// How Envoy's own answers begin when it could not reach a callout's upstream (Envoy 1.40: an
/// HTTP call gets them as a 503 body, a gRPC call as the UNAVAILABLE status message).
const ENVOY_UNREACHED: &[&str] = &[
    "upstream connect error or disconnect/reset before headers",
    "no healthy upstream",
];

/// Envoy's reason, when `text` (an error answer's body or gRPC status message) is what Envoy
/// answers in the place of an upstream it could not reach.
pub(crate) fn envoy_unreached(text: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(text);
    let text = text.trim();
    ENVOY_UNREACHED
        .iter()
        .any(|p| text.starts_with(p))
        .then(|| text.chars().take(ERROR_BODY_PEEK).collect())
}

/// The log detail of an error answer with status `what` (e.g. "503"): the authorizer's own, or
/// Envoy's, made in the place of an authorizer it could not reach (`text`: body or gRPC message).
pub(crate) fn error_detail(authorizer: &Authorizer, what: &str, text: &[u8]) -> String {
    match envoy_unreached(text) {
        Some(reason) => format!(
            "not reached: Envoy could not reach cluster {} and answered {what} itself ({reason}); check that the authorizer runs and listens on the cluster's address and port",
            authorizer.cluster
        ),
        None if text.trim_ascii() == ENVOY_TIMEOUT.as_bytes() => {
            format!("authorizer answered {what} ({ENVOY_TIMEOUT})")
        }
        None => format!("authorizer answered {what}"),
    }
}

/// Envoy's answer (body or gRPC message) when it ends a call at the timeout.
pub(crate) const ENVOY_TIMEOUT: &str = "upstream request timeout";

/// Whether an error answer that came `latency_ms` after a call of timeout `timeout_ms` is Envoy
/// ending the call, not the callee answering (Envoy 1.40 ends a timed-out HTTP call with its
/// own 504 and a gRPC call with UNAVAILABLE, in [`ENVOY_TIMEOUT`]'s words). Envoy arms its timer
/// from the event loop's cached time, so it can fire before the filter's clock shows the whole
/// timeout, by as long as the loop ran before the call was sent (long on a loaded machine): an
/// answer in Envoy's timeout words counts from three quarters of the timeout, any other error
/// answer only within a few milliseconds of it.
pub(crate) fn ended_at_timeout(timeout_ms: u64, latency_ms: u64, in_envoy_words: bool) -> bool {
    const TIMER_SLACK_MS: u64 = 5;
    latency_ms.saturating_add(TIMER_SLACK_MS) >= timeout_ms
        || (in_envoy_words && latency_ms.saturating_mul(4) >= timeout_ms.saturating_mul(3))
}

/// An authorizer's error answer that [`ended_at_timeout`]: the detail says so, with what Envoy
/// answered.
pub(crate) fn timed_out(authorizer: &Authorizer, latency_ms: u64, outcome: &mut AuthzOutcome) {
    if let AuthzOutcome::Error { detail } = outcome {
        let timeout = u64::from(authorizer.timeout_ms);
        let envoy_words = format!(" ({ENVOY_TIMEOUT})");
        let in_envoy_words = detail.ends_with(&envoy_words);
        if ended_at_timeout(timeout, latency_ms, in_envoy_words) {
            let answered = detail
                .strip_prefix("authorizer answered ")
                .map(|what| what.strip_suffix(&envoy_words).unwrap_or(what))
                .map(|what| format!("Envoy ended the call with {what}"))
                .unwrap_or_else(|| detail.clone());
            *detail = format!(
                "timed out: no answer within the authorizer's timeout of {} ms ({answered})",
                authorizer.timeout_ms
            );
        }
    }
}

/// The log detail of a callout Envoy refused to dispatch. Envoy 1.40 fails a call at once
/// (InternalFailure) when its cluster has no endpoint to send it to, as when a STRICT_DNS
/// cluster's name does not resolve.
pub fn dispatch_failure(authorizer: &Authorizer, error: &DispatchError) -> String {
    let cluster = &authorizer.cluster;
    match error {
        DispatchError::NoEndpoint => format!(
            "not reached: Envoy failed the call at once (InternalFailure): cluster {cluster} has no endpoint to send it to: its DNS name does not resolve (check the authorizer's Service name, namespace and the cluster's address) or none of its endpoints is healthy"
        ),
        DispatchError::NoCluster => format!(
            "not reached: Envoy has no cluster {cluster} (BadArgument): define it in Envoy's configuration"
        ),
        DispatchError::Other(other) => {
            format!("not reached: dispatch to cluster {cluster} failed ({other})")
        }
    }
}

/// What an authorizer's answer means: the one definition of allow, deny and error, that the
/// decision and the host's stats and logs both follow. `status` is None when no response
/// arrived; `body` is what the host read (at most [`body_read_limit`] bytes). A denial body over
/// `maxResponseBodyBytes` is not relayed (the denial stands, with the authorizer's status and
/// headers and an empty body); the second value says so, for the log.
pub(crate) fn interpret(
    authorizer: &Authorizer,
    status: Option<u16>,
    headers: &Headers,
    body: Vec<u8>,
) -> (AuthzOutcome, Option<String>) {
    let Some(status) = status else {
        let detail = "no response (timeout, reset or unreachable)".to_string();
        return (AuthzOutcome::Error { detail }, None);
    };
    // Names are lowercase already.
    let headers = headers.iter().filter(|(n, _)| !is_answers_own(n));
    if (200..300).contains(&status) {
        let listed = &authorizer.allowed_response_headers;
        let mut edits = Vec::new();
        for (n, v) in headers {
            let applied = if listed.is_empty() {
                !matches!(n, "content-type" | "date" | "server")
            } else {
                listed.iter().any(|a| a.eq_ignore_ascii_case(n))
            };
            if !applied {
                continue;
            }
            if let Some(problem) = upstream_edit_problem(n, v) {
                return (malformed(&problem), None);
            }
            edits.push(HeaderEdit::set(n.to_owned(), v.to_owned()));
        }
        return (AuthzOutcome::Allow { headers: edits }, None);
    }
    if !is_denial(status) {
        let detail = error_detail(authorizer, &status.to_string(), &body);
        return (AuthzOutcome::Error { detail }, None);
    }
    let headers = headers.map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
    denial(authorizer, status, headers, body)
}

/// An authorizer's denial (HTTP or gRPC): its headers (Envoy's own left out; any other that
/// cannot be applied makes the answer malformed), its body unless over `maxResponseBodyBytes`
/// (then none, nor the headers describing it; the note says so).
pub(crate) fn denial(
    authorizer: &Authorizer,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> (AuthzOutcome, Option<String>) {
    let cap = usize::try_from(authorizer.max_response_body_bytes).unwrap_or(usize::MAX);
    let over = body.len() > cap;
    let mut relayed = Vec::with_capacity(headers.len());
    for (n, v) in headers {
        let n = n.to_ascii_lowercase();
        if n.starts_with("x-envoy-") {
            continue;
        }
        if let Some(problem) = header_problem(&n, &v) {
            return (malformed(&problem), None);
        }
        if !(over && crate::answer::describes_body(&n)) {
            relayed.push((n, v));
        }
    }
    let (body, note) = if over {
        let note = format!("denial body over maxResponseBodyBytes ({cap}), not relayed");
        (Vec::new(), Some(note))
    } else {
        (body, None)
    };
    (
        AuthzOutcome::Deny {
            status,
            headers: relayed,
            body,
        },
        note,
    )
}

/// What one callout came to, for the host's stats and logs. It follows from [`interpret`]'s
/// outcome (or the failure to dispatch), so stats and decision never disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalloutReport {
    /// The authorizer's name in the bundle.
    pub authorizer: String,
    /// Dispatch to answer, in ms; None when the callout could not be dispatched.
    pub latency_ms: Option<u64>,
    /// No usable answer: the outcome is an error (the policy's failure mode applies).
    pub failed: bool,
    /// For the log: why it failed, or what was not relayed.
    pub detail: Option<String>,
    /// gRPC authorizers: the CheckResponse's dynamic metadata (a JSON object), to export.
    pub metadata: Option<String>,
    /// For a policy that caches answers: whether this one came from the cache.
    pub cache: Option<CacheUse>,
}

/// How an answer of a policy that caches them was had (docs/semantics.md §3.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// From the cache: no call was made.
    Hit,
    /// From the authorizer (the cache did not hold it).
    Miss,
}

impl CalloutReport {
    /// The report of an outcome, with `note` from [`interpret`].
    pub(crate) fn of(
        authorizer: &str,
        latency_ms: Option<u64>,
        outcome: &AuthzOutcome,
        note: Option<String>,
    ) -> Self {
        let (failed, detail) = match outcome {
            AuthzOutcome::Error { detail } => (true, Some(detail.clone())),
            _ => (false, note),
        };
        CalloutReport {
            authorizer: authorizer.to_string(),
            latency_ms,
            failed,
            detail,
            metadata: None,
            cache: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_access_bundle::authz_cache::CONTEXT_HEADERS;

    #[test]
    fn an_answer_editing_a_header_a_route_matches_on_is_an_error() {
        let routed = ["x-version".to_string()];
        let ok = |names: &[&str]| AuthzOutcome::Allow {
            headers: names.iter().map(|n| HeaderEdit::set(*n, "1")).collect(),
        };
        for names in [&["x-user"][..], &[]] {
            let mut o = ok(names);
            refuse_route_matched(&mut o, &routed);
            assert_eq!(o, ok(names));
        }
        let mut o = ok(&["x-user", "x-version"]);
        refuse_route_matched(&mut o, &routed);
        match o {
            AuthzOutcome::Error { detail } => assert!(detail.contains("x-version"), "{detail}"),
            other => panic!("{other:?}"),
        }
        // A denial or an error stays what it is.
        let mut e = AuthzOutcome::Error { detail: "x".into() };
        refuse_route_matched(&mut e, &routed);
        assert_eq!(e, AuthzOutcome::Error { detail: "x".into() });
    }

    #[test]
    fn attributes_render_as_the_context_headers_in_order() {
        let mut req = Request {
            mcp: McpOp::Call {
                method: "resources/read".into(),
                param: Some("file:///a".into()),
            },
            ..Request::default()
        };
        req.caller.spiffe = Some("spiffe://td/x".into());
        let attrs = CalloutAttributes::of(&req, Level::Backend, "ns/p");
        let headers: Vec<_> = attrs.headers().collect();
        let want = [
            ("x-mcp-method", "resources/read"),
            ("x-mcp-resource-uri", "file:///a"),
            ("x-mcp-source-spiffe", "spiffe://td/x"),
            ("x-mcp-access-level", "backend"),
            ("x-mcp-access-policy", "ns/p"),
        ];
        let got: Vec<_> = headers.iter().map(|(n, v)| (*n, v.as_ref())).collect();
        assert_eq!(got, want);
        // Every name it can write is one the filter sets itself (never the client's copy).
        for category in [Category::Tools, Category::Prompts, Category::Resources] {
            let attrs = CalloutAttributes {
                item: Some((category, "x")),
                ..attrs
            };
            for (name, _) in attrs.headers() {
                assert!(CONTEXT_HEADERS.contains(&name), "{name}");
            }
        }
        // Not a call: only the level and the policy.
        let none = Request::default();
        let plain = CalloutAttributes::of(&none, Level::Gateway, "p");
        let names: Vec<_> = plain.headers().map(|(n, _)| n).collect();
        assert_eq!(names, ["x-mcp-access-level", "x-mcp-access-policy"]);
    }

    fn authorizer(cap: u32) -> Authorizer {
        serde_json::from_value(serde_json::json!({
            "name": "a", "cluster": "c", "maxResponseBodyBytes": cap
        }))
        .unwrap()
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_error_at_the_timeout_is_reported_as_a_timeout_not_as_the_authorizers_answer() {
        let a = authorizer(1024);
        let err = |d: &str| AuthzOutcome::Error { detail: d.into() };
        let mut late = err("authorizer answered gRPC status 14 (UNAVAILABLE)");
        timed_out(&a, u64::from(a.timeout_ms) - 5, &mut late);
        let AuthzOutcome::Error { detail } = &late else {
            panic!("{late:?}")
        };
        assert_eq!(
            detail,
            &format!(
                "timed out: no answer within the authorizer's timeout of {} ms (Envoy ended the call with gRPC status 14 (UNAVAILABLE))",
                a.timeout_ms
            )
        );
        // Before the timeout it is the authorizer's answer; a denial is never rewritten.
        let mut early = err("authorizer answered 504");
        timed_out(&a, u64::from(a.timeout_ms) - 6, &mut early);
        assert_eq!(early, err("authorizer answered 504"));
        let mut deny = AuthzOutcome::Deny {
            status: 403,
            headers: vec![],
            body: vec![],
        };
        timed_out(&a, u64::MAX, &mut deny);
        // Envoy's own timeout words count from three quarters of the timeout: its timer runs
        // from the event loop's cached time, which a loaded machine leaves well behind.
        let words = error_detail(&a, "504", b"upstream request timeout");
        assert_eq!(words, "authorizer answered 504 (upstream request timeout)");
        let mut loaded = err(&words);
        timed_out(&a, u64::from(a.timeout_ms) * 3 / 4, &mut loaded);
        assert_eq!(
            loaded,
            err(&format!(
                "timed out: no answer within the authorizer's timeout of {} ms (Envoy ended the call with 504)",
                a.timeout_ms
            ))
        );
        let mut sooner = err(&words);
        timed_out(&a, u64::from(a.timeout_ms) * 3 / 4 - 1, &mut sooner);
        assert_eq!(sooner, err(&words));
        assert!(matches!(deny, AuthzOutcome::Deny { status: 403, .. }));
    }

    #[test]
    fn a_denial_body_is_read_to_one_byte_past_the_cap_an_error_body_for_the_log_only() {
        let a = authorizer(16);
        assert_eq!(body_read_limit(&a, Some(403)), 17);
        assert_eq!(body_read_limit(&a, Some(302)), 17);
        for status in [None, Some(200), Some(204)] {
            assert_eq!(body_read_limit(&a, status), 0, "{status:?}");
        }
        for status in [Some(101), Some(500), Some(503)] {
            assert_eq!(body_read_limit(&a, status), ERROR_BODY_PEEK, "{status:?}");
        }
        assert_eq!(body_read_limit(&authorizer(0), Some(401)), 1);
    }

    fn detail(outcome: AuthzOutcome) -> String {
        match outcome {
            AuthzOutcome::Error { detail } => detail,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn envoys_own_503_says_the_authorizer_was_not_reached_with_envoys_reason() {
        let a = authorizer(8);
        // What Envoy 1.40 delivers for an http_call to a port nothing listens on.
        let body = b"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure";
        let envoys = h(&[("content-length", "98"), ("content-type", "text/plain")]);
        let (o, _) = interpret(&a, Some(503), &Headers::from(envoys), body.to_vec());
        assert_eq!(
            detail(o),
            "not reached: Envoy could not reach cluster c and answered 503 itself (upstream connect error or disconnect/reset before headers. reset reason: remote connection failure); check that the authorizer runs and listens on the cluster's address and port"
        );
        let (o, _) = interpret(
            &a,
            Some(503),
            &Headers::new(),
            b"no healthy upstream".to_vec(),
        );
        assert!(detail(o).starts_with("not reached: "));
        // The authorizer's own 503 (whatever its body says) is its answer.
        for body in [&b""[..], b"overloaded", b"try upstream connect error later"] {
            let (o, _) = interpret(&a, Some(503), &Headers::new(), body.to_vec());
            assert_eq!(detail(o), "authorizer answered 503", "{body:?}");
        }
    }

    #[test]
    fn a_dispatch_envoy_refuses_names_the_cluster_and_the_likely_cause() {
        let a = authorizer(8);
        let d = dispatch_failure(&a, &DispatchError::from_status("InternalFailure"));
        assert!(
            d.starts_with("not reached: Envoy failed the call at once (InternalFailure): cluster c has no endpoint")
                && d.contains("its DNS name does not resolve"),
            "{d}"
        );
        let failure = |status| dispatch_failure(&a, &DispatchError::from_status(status));
        assert!(failure("BadArgument").contains("Envoy has no cluster c"));
        assert!(failure("Other").contains("cluster c failed (Other)"));
    }

    #[test]
    fn a_denial_body_over_the_cap_is_not_relayed_but_still_denies() {
        let a = authorizer(4);
        let headers = h(&[
            ("WWW-Authenticate", "Bearer"),
            ("content-type", "application/json"),
            ("content-length", "5"),
        ]);
        let (at_cap, note) = interpret(
            &a,
            Some(401),
            &Headers::from(headers.clone()),
            b"1234".to_vec(),
        );
        assert_eq!(note, None);
        assert_eq!(
            at_cap,
            AuthzOutcome::Deny {
                status: 401,
                headers: h(&[
                    ("www-authenticate", "Bearer"),
                    ("content-type", "application/json")
                ]),
                body: b"1234".to_vec(),
            }
        );
        let (over, note) = interpret(&a, Some(401), &Headers::from(headers), b"12345".to_vec());
        assert_eq!(
            over,
            AuthzOutcome::Deny {
                status: 401,
                headers: h(&[("www-authenticate", "Bearer")]),
                body: Vec::new(),
            }
        );
        assert!(note.unwrap().contains("maxResponseBodyBytes (4)"));
    }

    #[test]
    fn reports_follow_the_outcome() {
        let a = authorizer(8);
        let cases = [
            (None, true),
            (Some(100), true),
            (Some(200), false),
            (Some(403), false),
            (Some(499), false),
            (Some(500), true),
            (Some(504), true),
        ];
        for (status, failed) in cases {
            let (outcome, note) = interpret(&a, status, &Headers::new(), Vec::new());
            assert_eq!(
                matches!(outcome, AuthzOutcome::Error { .. }),
                failed,
                "{status:?}"
            );
            let r = CalloutReport::of("a", Some(3), &outcome, note);
            assert_eq!(r.failed, failed, "{status:?}");
            assert_eq!(r.detail.is_some(), failed, "{status:?}");
        }
        let (outcome, note) = interpret(&a, Some(403), &Headers::new(), vec![0; 9]);
        let r = CalloutReport::of("a", Some(3), &outcome, note);
        assert!(!r.failed && r.detail.is_some(), "{r:?}");
    }
}
