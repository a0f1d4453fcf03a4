//! gRPC authorizers: Envoy's ext_authz protocol (`envoy.service.auth.v3.Authorization/Check`).
//! [`build`] makes the CheckRequest Envoy's own ext_authz filter would send for the request,
//! plus the MCP attributes in `context_extensions`; [`interpret`] reads the CheckResponse as
//! Envoy does. The messages are [`crate::pb`]'s.

use std::collections::BTreeMap;

use mcp_access_bundle::authz_cache::PARTIAL_BODY_HEADER as PARTIAL_BODY;
use mcp_access_bundle::mcp_methods::{self, Category};
use mcp_access_bundle::Authorizer;

use crate::callout::{CalloutAttributes, CalloutRequest, ERROR_BODY_PEEK};
use crate::pb;
use crate::policy::{AuthzOutcome, HeaderEdit, HeaderOp};
use crate::request::{Headers, McpOp, Request};

/// gRPC service and method of the callout.
pub const SERVICE: &str = "envoy.service.auth.v3.Authorization";
pub const METHOD: &str = "Check";

/// Bytes of a CheckResponse read beyond the denial body cap (headers, metadata, framing).
pub(crate) const RESPONSE_SLACK: usize = 64 * 1024;

/// Context extension keys the filter sets (documented in docs/semantics.md).
pub(crate) const EXT_METHOD: &str = "mcp_method";
pub(crate) const EXT_TOOL: &str = "mcp_tool";
pub(crate) const EXT_PROMPT: &str = "mcp_prompt";
pub(crate) const EXT_RESOURCE_URI: &str = "mcp_resource_uri";
pub(crate) const EXT_POLICY: &str = "mcp_access_policy";
pub(crate) const EXT_LEVEL: &str = "mcp_access_level";

/// The JSON-RPC id's field in the MCP metadata (different on every request: never in a cache
/// key).
pub(crate) const MCP_ID_FIELD: &str = "id";

/// Metadata namespaces of the MCP attributes in `metadata_context`: Envoy's MCP filter's
/// (what its ext_authz forwards with `metadata_context_namespaces`), and `mcp_proxy`, the name
/// KAN's reference implementation and its conformance authorizers use.
pub(crate) const MCP_METADATA_NAMESPACES: [&str; 2] = ["envoy.filters.http.mcp", "mcp_proxy"];

fn value(kind: pb::Kind) -> pb::Value {
    pb::Value { kind: Some(kind) }
}

/// The MCP attributes as Envoy's MCP filter states them in its dynamic metadata: `jsonrpc`,
/// `method`, `id`, `params.name` / `params.uri`, `is_mcp_request`, `status`. None for a
/// request that is not a JSON-RPC call (GET, DELETE, a response).
fn mcp_metadata(req: &Request, id: Option<&str>) -> Option<pb::Metadata> {
    let McpOp::Call { method, param } = &req.mcp else {
        return None;
    };
    let mut fields = BTreeMap::new();
    fields.insert("jsonrpc".into(), value(pb::Kind::Str("2.0".into())));
    fields.insert("method".into(), value(pb::Kind::Str(method.to_string())));
    fields.insert("is_mcp_request".into(), value(pb::Kind::Bool(true)));
    fields.insert("status".into(), value(pb::Kind::Str("mcp_ok".into())));
    // from_slice, as the bundle is read: serde_json's parser is compiled once per input type,
    // and a `from_str` here added 6 KB to the `.wasm`.
    let id = id.and_then(
        |raw| match serde_json::from_slice::<serde_json::Value>(raw.as_bytes()) {
            Ok(serde_json::Value::Number(n)) => n.as_f64().map(pb::Kind::Number),
            Ok(serde_json::Value::String(s)) => Some(pb::Kind::Str(s)),
            _ => None,
        },
    );
    if let Some(id) = id {
        fields.insert(MCP_ID_FIELD.into(), value(id));
    }
    let key = method.param().map(mcp_methods::Param::key);
    if let (Some(k), Some(p)) = (key, param) {
        let mut params = BTreeMap::new();
        params.insert(k.to_string(), value(pb::Kind::Str(p.clone())));
        fields.insert(
            "params".into(),
            value(pb::Kind::Struct(pb::Struct { fields: params })),
        );
    }
    let attrs = pb::Struct { fields };
    Some(pb::Metadata {
        filter_metadata: MCP_METADATA_NAMESPACES
            .iter()
            .map(|n| (n.to_string(), attrs.clone()))
            .collect(),
    })
}

fn address(a: Option<&String>) -> Option<pb::Address> {
    let a = a?;
    let (host, port) = a.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(pb::Address {
        socket_address: Some(pb::SocketAddress {
            address: host.to_string(),
            port_value: port.parse().ok()?,
        }),
    })
}

/// The attributes as a gRPC authorizer is told them: `context_extensions` (no SPIFFE ID: the
/// source peer's principal holds it).
fn context_extensions_of(attrs: &CalloutAttributes<'_>) -> BTreeMap<String, String> {
    let mut ext = BTreeMap::new();
    if let Some(method) = attrs.method {
        ext.insert(EXT_METHOD.to_string(), method.to_string());
    }
    if let Some((category, value)) = attrs.item {
        let key = match category {
            Category::Tools => EXT_TOOL,
            Category::Prompts => EXT_PROMPT,
            Category::Resources => EXT_RESOURCE_URI,
        };
        ext.insert(key.to_string(), value.to_string());
    }
    ext.insert(EXT_LEVEL.to_string(), attrs.level.as_str().to_string());
    ext.insert(EXT_POLICY.to_string(), attrs.policy.to_string());
    ext
}

/// The CheckRequest for `authorizer` about `req` (`body`: the buffered client body, `id`: the
/// JSON-RPC id as raw JSON text), telling it `attrs`.
pub(crate) fn check_request(
    authorizer: &Authorizer,
    req: &Request,
    body: &[u8],
    id: Option<&str>,
    attrs: &CalloutAttributes<'_>,
) -> pb::CheckRequest {
    let peers = &req.peers;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let pseudo = [
        (":authority", Some(&req.authority)),
        (":path", Some(&req.path)),
        (":method", Some(&req.method)),
        (":scheme", peers.scheme.as_ref()),
    ];
    let pseudo = pseudo
        .into_iter()
        .filter_map(|(n, v)| Some((n, v?.as_str())));
    for (name, value) in pseudo.chain(req.headers.iter()) {
        let allowed = authorizer.allowed_headers.is_empty()
            || authorizer
                .allowed_headers
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name));
        if name == PARTIAL_BODY || !allowed {
            continue;
        }
        headers
            .entry(name.to_owned())
            .and_modify(|v| {
                v.push(',');
                v.push_str(value);
            })
            .or_insert_with(|| value.to_owned());
    }
    let max = usize::try_from(authorizer.forward_body_max_bytes).unwrap_or(usize::MAX);
    let mut raw_body = Vec::new();
    if max > 0 && !body.is_empty() {
        raw_body = body.get(..max.min(body.len())).unwrap_or_default().to_vec();
        let partial = if raw_body.len() < body.len() {
            "true"
        } else {
            "false"
        };
        headers.insert(PARTIAL_BODY.into(), partial.into());
    }
    let ext = context_extensions_of(attrs);
    let header = |n: &str| req.header(n).unwrap_or_default().to_string();
    let time = peers.time_ns.map(|ns| pb::Timestamp {
        seconds: ns.div_euclid(1_000_000_000),
        nanos: i32::try_from(ns.rem_euclid(1_000_000_000)).unwrap_or(0),
    });
    let certificate = if authorizer.include_peer_certificate {
        peers.source_certificate.clone().unwrap_or_default()
    } else {
        String::new()
    };
    pb::CheckRequest {
        attributes: Some(pb::AttributeContext {
            source: Some(pb::Peer {
                address: address(peers.source_address.as_ref()),
                service: header("x-envoy-downstream-service-cluster"),
                principal: peers.source_principal.clone().unwrap_or_default(),
                certificate,
            }),
            destination: Some(pb::Peer {
                address: address(peers.destination_address.as_ref()),
                principal: peers.destination_principal.clone().unwrap_or_default(),
                ..Default::default()
            }),
            request: Some(pb::AttrRequest {
                time,
                http: Some(pb::HttpRequest {
                    id: header("x-request-id"),
                    method: req.method.clone(),
                    headers,
                    path: req.path.clone(),
                    host: req.authority.clone(),
                    scheme: peers.scheme.clone().unwrap_or_default(),
                    size: i64::try_from(body.len()).unwrap_or(i64::MAX),
                    protocol: peers.protocol.clone().unwrap_or_default(),
                    raw_body,
                }),
            }),
            context_extensions: ext,
            metadata_context: Some(mcp_metadata(req, id).unwrap_or_default()),
            route_metadata_context: Some(pb::Metadata::default()),
        }),
    }
}

/// The callout carrying `check` to `authorizer`: a gRPC unary call as HTTP/2 frames it (POST
/// to `/envoy.service.auth.v3.Authorization/Check`, `application/grpc`, the message behind its
/// 5-byte prefix), made as an HTTP callout so that the answer's body comes whole, every
/// length-prefixed message of it (Envoy's unary gRPC client keeps only the last message a
/// server sends: a denial then an OK would read as the OK) — see [`interpret_http`].
pub(crate) fn callout(authorizer: &Authorizer, check: &pb::CheckRequest) -> CalloutRequest {
    let authority = authorizer
        .authority
        .clone()
        .unwrap_or_else(|| authorizer.cluster.clone());
    let path = concat!("/", "envoy.service.auth.v3.Authorization", "/Check");
    grpc_callout(
        &authorizer.cluster,
        authority,
        path,
        authorizer.timeout_ms,
        check,
    )
}

/// A unary gRPC call of `path` carrying `message` to `cluster`, as HTTP/2 frames it (made as
/// an HTTP callout, read back by [`unary`]).
pub(crate) fn grpc_callout(
    cluster: &str,
    authority: String,
    path: &'static str,
    timeout_ms: u32,
    message: &impl prost::Message,
) -> CalloutRequest {
    CalloutRequest {
        cluster: cluster.to_string(),
        headers: vec![
            (":method".into(), "POST".into()),
            (":path".into(), path.into()),
            (":authority".into(), authority.into()),
            ("content-type".into(), "application/grpc".into()),
            ("te".into(), "trailers".into()),
            ("grpc-timeout".into(), format!("{timeout_ms}m").into()),
        ],
        body: pb::framed(message),
        timeout_ms,
    }
}

/// How many bytes of a gRPC answer's body the flow reads: one CheckResponse of at most the
/// denial body cap plus [`RESPONSE_SLACK`], its prefix, and one byte more (to see a longer one).
pub(crate) fn body_read_limit(authorizer: &Authorizer) -> usize {
    usize::try_from(authorizer.max_response_body_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(RESPONSE_SLACK)
        .saturating_add(6)
}

/// A unary gRPC answer as HTTP/2 carried it, read (any gRPC callout: authorizers, the
/// RateLimitService).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unary<'b> {
    /// No response came (timeout, reset, unreachable).
    NoAnswer,
    /// An HTTP status other than 200, with the first bytes of its body.
    Http(u16, &'b [u8]),
    /// A gRPC status other than OK, with its `grpc-message`.
    Status(u32, String),
    /// OK with a body of at least the read limit: the message was not read.
    TooLong,
    /// OK with exactly one uncompressed message.
    Message(&'b [u8]),
    /// Anything else (the problem, for the log).
    Malformed(String),
}

/// Reads a unary gRPC answer: the HTTP `status` (None: none came), the response headers and
/// trailers, and `body` (read up to `read_limit`). The gRPC status is the trailers'
/// `grpc-status` (or the headers', for a trailers-only answer); an OK answer must hold exactly
/// one uncompressed message. Anything else is malformed: another content type than
/// `application/grpc`, no status, a status that is not a number, no message, more than one, a
/// compressed one, bytes left over (docs/semantics.md §3.5).
pub(crate) fn unary<'b>(
    status: Option<u16>,
    headers: &Headers,
    trailers: &Headers,
    body: &'b [u8],
    read_limit: usize,
) -> Unary<'b> {
    let Some(status) = status else {
        return Unary::NoAnswer;
    };
    if status != 200 {
        let peek = body
            .get(..ERROR_BODY_PEEK.min(body.len()))
            .unwrap_or_default();
        return Unary::Http(status, peek);
    }
    let content_type = headers.get("content-type").unwrap_or_default();
    if !content_type.starts_with("application/grpc") {
        return Unary::Malformed(format!("a gRPC answer of content-type {content_type:?}"));
    }
    let grpc_status = trailers
        .get("grpc-status")
        .or_else(|| headers.get("grpc-status"));
    let Some(code) = grpc_status else {
        return Unary::Malformed("a gRPC answer without grpc-status".into());
    };
    let Ok(code) = code.trim().parse::<u32>() else {
        return Unary::Malformed(format!("grpc-status {code:?} is not a number"));
    };
    if code != 0 {
        let message = trailers
            .get("grpc-message")
            .or_else(|| headers.get("grpc-message"))
            .unwrap_or_default();
        return Unary::Status(code, message.to_string());
    }
    if body.len() >= read_limit {
        return Unary::TooLong;
    }
    match pb::messages(body).as_deref() {
        Ok([one]) => Unary::Message(one),
        Ok(all) => Unary::Malformed(format!(
            "a gRPC answer of {} messages (a unary answer has one)",
            all.len()
        )),
        Err(problem) => Unary::Malformed((*problem).to_string()),
    }
}

/// The answer to a [`callout`], read by [`unary`] up to [`body_read_limit`]; the CheckResponse
/// is read as Envoy does ([`interpret`]).
pub(crate) fn interpret_http(
    authorizer: &Authorizer,
    status: Option<u16>,
    headers: &Headers,
    trailers: &Headers,
    body: &[u8],
) -> (AuthzOutcome, Option<String>, Option<String>) {
    let limit = body_read_limit(authorizer);
    match unary(status, headers, trailers, body, limit) {
        Unary::NoAnswer => interpret(authorizer, None, None),
        Unary::Http(status, peek) => {
            let what = format!("HTTP status {status} to a gRPC call");
            let detail = crate::callout::error_detail(authorizer, &what, peek);
            (AuthzOutcome::Error { detail }, None, None)
        }
        Unary::Status(code, message) => interpret(authorizer, Some(code), Some(message.as_bytes())),
        // Unread, it could be a denial: [`interpret`] denies it.
        Unary::TooLong => interpret(authorizer, Some(0), None),
        Unary::Message(one) => interpret(authorizer, Some(0), Some(one)),
        Unary::Malformed(problem) => (crate::callout::malformed(&problem), None, None),
    }
}

/// The `context_extensions` of a serialized CheckRequest (empty if it does not decode).
pub fn context_extensions(check_request: &[u8]) -> BTreeMap<String, String> {
    <pb::CheckRequest as prost::Message>::decode(check_request)
        .ok()
        .and_then(|m| m.attributes)
        .map(|a| a.context_extensions)
        .unwrap_or_default()
}

/// gRPC status names, for logs.
pub(crate) fn grpc_status_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("?")
}

/// A HeaderValueOption's header, name lowercase, checked by [`crate::callout::header_problem`].
fn header_pair(o: &pb::HeaderValueOption) -> Result<(String, String), String> {
    let h = o
        .header
        .as_ref()
        .ok_or("a HeaderValueOption without a header")?;
    let value = if h.value.is_empty() && !h.raw_value.is_empty() {
        String::from_utf8(h.raw_value.clone())
            .map_err(|_| format!("header {:?}: raw_value is not UTF-8", h.key))?
    } else {
        h.value.clone()
    };
    let name = h.key.to_ascii_lowercase();
    match crate::callout::header_problem(&name, &value) {
        Some(problem) => Err(problem),
        None => Ok((name, value)),
    }
}

/// The upstream edit a HeaderValueOption asks for; None: an append action Envoy does not know.
fn op_of(o: &pb::HeaderValueOption) -> Option<HeaderOp> {
    if let Some(append) = &o.append {
        return Some(if append.value {
            HeaderOp::Append
        } else {
            HeaderOp::Set
        });
    }
    match o.append_action {
        0 => Some(HeaderOp::Append),
        1 => Some(HeaderOp::AddIfAbsent),
        2 => Some(HeaderOp::Set),
        3 => Some(HeaderOp::OverwriteIfExists),
        _ => None,
    }
}

/// What an OK CheckResponse asks: upstream header edits, or why it cannot be applied.
fn ok_edits(ok: &pb::OkHttpResponse) -> Result<Vec<HeaderEdit>, String> {
    let mut edits = Vec::with_capacity(ok.headers.len() + ok.headers_to_remove.len());
    for o in &ok.headers {
        let (name, value) = header_pair(o)?;
        if let Some(problem) = crate::callout::upstream_edit_problem(&name, &value) {
            return Err(problem);
        }
        let op = op_of(o)
            .ok_or_else(|| format!("header {name}: unknown append_action {}", o.append_action))?;
        edits.push(HeaderEdit { op, name, value });
    }
    for name in &ok.headers_to_remove {
        let name = name.to_ascii_lowercase();
        if let Some(problem) = crate::callout::upstream_edit_problem(&name, "") {
            return Err(format!("headers_to_remove: {problem}"));
        }
        edits.push(HeaderEdit {
            op: HeaderOp::Remove,
            name,
            value: String::new(),
        });
    }
    Ok(edits)
}

/// Dynamic metadata of a CheckResponse as a JSON object (Envoy: the OK response's
/// deprecated field overrides the outer one). None: none sent, or an empty Struct.
fn metadata_json(resp: &pb::CheckResponse) -> Option<String> {
    let s = resp
        .ok_response
        .as_ref()
        .and_then(|o| o.dynamic_metadata.as_ref())
        .or(resp.dynamic_metadata.as_ref())?;
    (!s.fields.is_empty()).then(|| s.to_json().to_string())
}

/// What a gRPC authorizer's answer means: `grpc_status` of the call (0: OK; None: no answer:
/// timeout, reset or unreachable), `message` the CheckResponse bytes the host read (None: more
/// than the filter reads), or for another status its message (Envoy's reason when it could not
/// reach the authorizer). The third value is the dynamic metadata to export (JSON object).
pub(crate) fn interpret(
    authorizer: &Authorizer,
    grpc_status: Option<u32>,
    message: Option<&[u8]>,
) -> (AuthzOutcome, Option<String>, Option<String>) {
    let error = |detail: String| (AuthzOutcome::Error { detail }, None, None);
    let code = match grpc_status {
        None => return error("no response (timeout, reset or unreachable)".into()),
        Some(c) => c,
    };
    if code != 0 {
        let what = format!("gRPC status {code} ({})", grpc_status_name(code));
        let text = message.unwrap_or_default();
        return error(crate::callout::error_detail(authorizer, &what, text));
    }
    let Some(bytes) = message else {
        // Unread, it could be a denial: deny (without its status, headers or body) whatever
        // the failure mode.
        let cap = usize::try_from(authorizer.max_response_body_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(RESPONSE_SLACK);
        let note = format!("CheckResponse over {cap} bytes, not read: denied");
        let deny = AuthzOutcome::Deny {
            status: 403,
            headers: Vec::new(),
            body: Vec::new(),
        };
        return (deny, Some(note), None);
    };
    let resp = match <pb::CheckResponse as prost::Message>::decode(bytes) {
        Ok(r) => r,
        Err(e) => return error(format!("malformed CheckResponse: {e}")),
    };
    let status = resp.status.as_ref().map_or(0, |s| s.code);
    if status == 0 {
        // An answer whose status and response disagree is malformed: never applied.
        let disagrees = [
            ("denied_response", resp.denied_response.is_some()),
            ("error_response", resp.error_response.is_some()),
        ];
        if let Some((field, _)) = disagrees.iter().find(|(_, set)| *set) {
            let problem = format!("status OK with {}", mcp_access_cel::a_or_an(field));
            return (crate::callout::malformed(&problem), None, None);
        }
        let edits = match resp.ok_response.as_ref().map(ok_edits).transpose() {
            Ok(e) => e.unwrap_or_default(),
            Err(problem) => return (crate::callout::malformed(&problem), None, None),
        };
        let metadata = metadata_json(&resp);
        return (AuthzOutcome::Allow { headers: edits }, None, metadata);
    }
    if resp.error_response.is_some() {
        return error(format!(
            "authorizer answered an error_response (status {status})"
        ));
    }
    let metadata = metadata_json(&resp);
    let denied = resp.denied_response.unwrap_or_default();
    let http = denied.status.map_or(0, |s| s.code);
    let http = u16::try_from(http)
        .ok()
        .filter(|s| (300..600).contains(s))
        .unwrap_or(403);
    let headers = match denied.headers.iter().map(header_pair).collect() {
        Ok(h) => h,
        Err(problem) => return (crate::callout::malformed(&problem), None, None),
    };
    let (outcome, note) =
        crate::callout::denial(authorizer, http, headers, denied.body.into_bytes());
    let metadata = match outcome {
        AuthzOutcome::Error { .. } => None,
        _ => metadata,
    };
    (outcome, note, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Peers;
    use mcp_access_bundle::Level;
    use prost::Message;

    fn authorizer(json: serde_json::Value) -> Authorizer {
        let mut base = serde_json::json!({"name": "a", "cluster": "c", "protocol": "GRPC"});
        if let (Some(b), Some(extra)) = (base.as_object_mut(), json.as_object()) {
            b.extend(extra.clone());
        }
        serde_json::from_value(base).unwrap()
    }

    fn request() -> Request {
        let headers: Vec<(String, String)> = [
            ("x-request-id", "rid-1"),
            ("accept", "a"),
            ("accept", "b"),
            ("x-envoy-auth-partial-body", "forged"),
            ("authorization", "Bearer t"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        Request {
            method: "POST".into(),
            path: "/mcp?x=1".into(),
            canonical_path: "/mcp".into(),
            authority: "gw.example:8080".into(),
            port: 8080,
            headers: headers.into(),
            caller: Default::default(),
            mcp: McpOp::Call {
                method: "tools/call".into(),
                param: Some("add".into()),
            },
            route_name: None,
            cluster_name: None,
            params: None,
            time: None,
            peers: peers(),
            ..Request::default()
        }
    }

    fn peers() -> Peers {
        Peers {
            source_address: Some("10.0.0.1:5555".into()),
            source_principal: Some("spiffe://td/ns/a/sa/b".into()),
            source_certificate: Some("-----BEGIN%20CERT".into()),
            destination_address: Some("[::1]:8080".into()),
            destination_principal: None,
            time_ns: Some(1_700_000_000_123_456_789),
            protocol: Some("HTTP/1.1".into()),
            scheme: Some("http".into()),
        }
    }

    #[test]
    fn check_request_carries_what_envoy_sends_and_the_mcp_attributes() {
        let a = authorizer(serde_json::json!({"forwardBodyMaxBytes": 4}));
        let bytes = prost::Message::encode_to_vec(&check_request(
            &a,
            &request(),
            b"123456",
            Some("7"),
            &CalloutAttributes::of(&request(), Level::Backend, "ns/p"),
        ));
        let m = pb::CheckRequest::decode(bytes.as_slice()).unwrap();
        let attrs = m.attributes.unwrap();
        let src = attrs.source.unwrap();
        let sa = src.address.unwrap().socket_address.unwrap();
        assert_eq!((sa.address.as_str(), sa.port_value), ("10.0.0.1", 5555));
        assert_eq!(src.principal, "spiffe://td/ns/a/sa/b");
        assert_eq!(src.certificate, "", "only with includePeerCertificate");
        let dst = attrs.destination.unwrap().address.unwrap().socket_address;
        assert_eq!(dst.unwrap().address, "::1");
        let r = attrs.request.unwrap();
        let t = r.time.unwrap();
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 123_456_789));
        let http = r.http.unwrap();
        assert_eq!(http.id, "rid-1");
        assert_eq!(http.method, "POST");
        assert_eq!(http.path, "/mcp?x=1");
        assert_eq!(http.host, "gw.example:8080");
        assert_eq!(http.scheme, "http");
        assert_eq!(http.protocol, "HTTP/1.1");
        assert_eq!(http.size, 6);
        assert_eq!(http.raw_body, b"1234");
        assert_eq!(http.headers.get("accept").unwrap(), "a,b");
        assert_eq!(http.headers.get(":path").unwrap(), "/mcp?x=1");
        assert_eq!(http.headers.get(PARTIAL_BODY).unwrap(), "true");
        let ext = attrs.context_extensions;
        assert_eq!(ext.get(EXT_METHOD).unwrap(), "tools/call");
        assert_eq!(ext.get(EXT_TOOL).unwrap(), "add");
        assert_eq!(ext.get(EXT_LEVEL).unwrap(), "backend");
        assert_eq!(ext.get(EXT_POLICY).unwrap(), "ns/p");
        let meta = attrs.metadata_context.unwrap().filter_metadata;
        assert_eq!(meta.len(), 2);
        let mcp = &meta.get("envoy.filters.http.mcp").unwrap().fields;
        assert_eq!(mcp.get("id").unwrap().kind, Some(pb::Kind::Number(7.0)));
        assert_eq!(
            mcp.get("method").unwrap().kind,
            Some(pb::Kind::Str("tools/call".into()))
        );
        let Some(pb::Kind::Struct(params)) = &mcp.get("params").unwrap().kind else {
            panic!("params")
        };
        assert_eq!(
            params.fields.get("name").unwrap().kind,
            Some(pb::Kind::Str("add".into()))
        );
        assert_eq!(meta.get("mcp_proxy"), meta.get("envoy.filters.http.mcp"));
    }

    #[test]
    fn allowed_headers_select_and_no_body_means_no_partial_header() {
        let a = authorizer(
            serde_json::json!({"allowedHeaders": ["Authorization"], "includePeerCertificate": true}),
        );
        let bytes = prost::Message::encode_to_vec(&check_request(
            &a,
            &request(),
            b"",
            None,
            &CalloutAttributes::of(&request(), Level::Gateway, "p"),
        ));
        let m = pb::CheckRequest::decode(bytes.as_slice()).unwrap();
        let attrs = m.attributes.unwrap();
        assert_eq!(attrs.source.unwrap().certificate, "-----BEGIN%20CERT");
        let http = attrs.request.unwrap().http.unwrap();
        assert_eq!(http.headers.len(), 1, "{:?}", http.headers);
        assert_eq!(http.headers.get("authorization").unwrap(), "Bearer t");
        assert!(http.raw_body.is_empty());
    }

    fn hvo(key: &str, value: &str, append: Option<bool>, action: i32) -> pb::HeaderValueOption {
        pb::HeaderValueOption {
            header: Some(pb::HeaderValue {
                key: key.into(),
                value: value.into(),
                raw_value: Vec::new(),
            }),
            append: append.map(|value| pb::BoolValue { value }),
            append_action: action,
        }
    }

    fn status(code: i32) -> Option<pb::RpcStatus> {
        Some(pb::RpcStatus {
            code,
            message: String::new(),
        })
    }

    #[test]
    fn ok_maps_header_options_like_envoy() {
        let resp = pb::CheckResponse {
            status: status(0),
            ok_response: Some(pb::OkHttpResponse {
                headers: vec![
                    hvo("X-Set", "1", Some(false), 0),
                    hvo("x-app", "2", Some(true), 2),
                    hvo("x-default", "3", None, 0),
                    hvo("x-absent", "4", None, 1),
                    hvo("x-over", "5", None, 3),
                ],
                headers_to_remove: vec!["Authorization".into()],
                dynamic_metadata: None,
            }),
            ..Default::default()
        };
        let (outcome, note, meta) = interpret(
            &authorizer(serde_json::json!({})),
            Some(0),
            Some(&resp.encode_to_vec()),
        );
        let edit = |op, n: &str, v: &str| HeaderEdit {
            op,
            name: n.into(),
            value: v.into(),
        };
        assert_eq!(
            outcome,
            AuthzOutcome::Allow {
                headers: vec![
                    edit(HeaderOp::Set, "x-set", "1"),
                    edit(HeaderOp::Append, "x-app", "2"),
                    edit(HeaderOp::Append, "x-default", "3"),
                    edit(HeaderOp::AddIfAbsent, "x-absent", "4"),
                    edit(HeaderOp::OverwriteIfExists, "x-over", "5"),
                    edit(HeaderOp::Remove, "authorization", ""),
                ]
            }
        );
        assert_eq!((note, meta), (None, None));
    }

    #[test]
    fn denial_relays_status_headers_and_capped_body() {
        let deny = |code: i32, body: &str| pb::CheckResponse {
            status: status(7),
            denied_response: Some(pb::DeniedHttpResponse {
                status: Some(pb::HttpStatus { code }),
                headers: vec![hvo("WWW-Authenticate", "Bearer", None, 0)],
                body: body.into(),
            }),
            ..Default::default()
        };
        let a = authorizer(serde_json::json!({"maxResponseBodyBytes": 4}));
        let (o, _, _) = interpret(&a, Some(0), Some(&deny(401, "nope").encode_to_vec()));
        assert_eq!(
            o,
            AuthzOutcome::Deny {
                status: 401,
                headers: vec![("www-authenticate".into(), "Bearer".into())],
                body: b"nope".to_vec()
            }
        );
        let (o, note, _) = interpret(&a, Some(0), Some(&deny(0, "too long").encode_to_vec()));
        assert!(matches!(o, AuthzOutcome::Deny { status: 403, ref body, .. } if body.is_empty()));
        assert!(note.is_some());
        let (o, _, _) = interpret(&a, Some(0), Some(&deny(200, "").encode_to_vec()));
        assert!(matches!(o, AuthzOutcome::Deny { status: 403, .. }), "{o:?}");
        // No denied_response at all: 403.
        let bare = pb::CheckResponse {
            status: status(16),
            ..Default::default()
        };
        let (o, _, _) = interpret(&a, Some(0), Some(&bare.encode_to_vec()));
        assert!(matches!(o, AuthzOutcome::Deny { status: 403, .. }), "{o:?}");
    }

    #[test]
    fn failures_are_errors_and_garbage_never_panics() {
        let a = authorizer(serde_json::json!({}));
        for (status, msg) in [
            (None, Some(&b""[..])),
            (Some(14), Some(&b""[..])),
            (Some(7), Some(&b""[..])),
            (Some(0), Some(&b"\xff\xff\xff"[..])),
            (Some(0), Some(&b"\x0a\x05\x08"[..])),
        ] {
            let (o, _, _) = interpret(&a, status, msg);
            assert!(
                matches!(o, AuthzOutcome::Error { .. }),
                "{status:?} {msg:?}: {o:?}"
            );
        }
        // Envoy's UNAVAILABLE for an authorizer it could not reach (Envoy 1.40's message)
        // says so; the authorizer's own UNAVAILABLE is its answer.
        let envoys = b"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure{upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}}";
        for (msg, want) in [
            (&envoys[..], "not reached: Envoy could not reach cluster c and answered gRPC status 14 (UNAVAILABLE) itself (upstream connect error"),
            (b"draining", "authorizer answered gRPC status 14 (UNAVAILABLE)"),
        ] {
            let (o, _, _) = interpret(&a, Some(14), Some(msg));
            let AuthzOutcome::Error { detail } = o else {
                panic!("{o:?}")
            };
            assert!(detail.starts_with(want), "{detail}");
        }
        // Too large to read: denied whatever the failure mode (it could be a denial).
        let open = authorizer(serde_json::json!({"failureMode": "Allow"}));
        let (o, note, _) = interpret(&open, Some(0), None);
        assert!(matches!(o, AuthzOutcome::Deny { status: 403, .. }), "{o:?}");
        assert!(note.unwrap().contains("not read"));
        let err = pb::CheckResponse {
            status: status(13),
            error_response: Some(Vec::new()),
            ..Default::default()
        };
        let (o, _, _) = interpret(&a, Some(0), Some(&err.encode_to_vec()));
        assert!(matches!(o, AuthzOutcome::Error { .. }), "{o:?}");
        let bad_action = pb::CheckResponse {
            status: status(0),
            ok_response: Some(pb::OkHttpResponse {
                headers: vec![hvo("x", "1", None, 9)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let (o, _, _) = interpret(&a, Some(0), Some(&bad_action.encode_to_vec()));
        assert!(matches!(o, AuthzOutcome::Error { .. }), "{o:?}");
        // An empty message is an OK CheckResponse with status unset: allow, nothing to edit.
        let (o, _, _) = interpret(&a, Some(0), Some(b""));
        assert_eq!(o, AuthzOutcome::Allow { headers: vec![] });
        let mut seed = 0x1234_5678u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (seed >> 16) as u8
                })
                .collect();
            let _ = interpret(&a, Some(0), Some(&bytes));
        }
    }

    #[test]
    fn dynamic_metadata_is_exported_as_json() {
        let fields = [
            ("user", pb::Kind::Str("u1".into())),
            ("n", pb::Kind::Number(3.0)),
            ("f", pb::Kind::Number(0.5)),
        ];
        let s = pb::Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), value(v)))
                .collect(),
        };
        let a = authorizer(serde_json::json!({}));
        let resp = pb::CheckResponse {
            status: status(0),
            dynamic_metadata: Some(s.clone()),
            ..Default::default()
        };
        let (_, _, meta) = interpret(&a, Some(0), Some(&resp.encode_to_vec()));
        assert_eq!(meta.as_deref(), Some(r#"{"f":0.5,"n":3,"user":"u1"}"#));
        // Metadata that is not a Struct makes the CheckResponse malformed (as in Envoy, which
        // parses the whole message): a failure, not an allow without the metadata.
        let mut bytes = resp.encode_to_vec();
        let truncated = pb::Struct {
            fields: [("k".to_string(), value(pb::Kind::Str("v".into())))].into(),
        }
        .encode_to_vec();
        let at = bytes.len();
        bytes.extend_from_slice(&[0x22, truncated.len() as u8]);
        bytes.extend_from_slice(&truncated[..truncated.len() - 1]);
        assert_eq!(pb::CheckResponse::decode(&bytes[..at]).ok(), Some(resp));
        let (o, _, meta) = interpret(&a, Some(0), Some(&bytes));
        assert!(matches!(o, AuthzOutcome::Error { .. }), "{o:?}");
        assert_eq!(meta, None);
    }

    #[test]
    fn a_grpc_answer_over_http2_must_hold_exactly_one_message() {
        let a = authorizer(serde_json::json!({}));
        let ok = pb::CheckResponse::default().encode_to_vec();
        let frame = |flag: u8, m: &[u8]| {
            let mut f = vec![flag];
            f.extend_from_slice(&(m.len() as u32).to_be_bytes());
            f.extend_from_slice(m);
            f
        };
        let grpc = Headers::from(vec![("content-type", "application/grpc")]);
        let status = |code: &str| Headers::from(vec![("grpc-status", code)]);
        let run = |headers: &Headers, trailers: &Headers, body: &[u8]| {
            interpret_http(&a, Some(200), headers, trailers, body).0
        };
        assert_eq!(
            run(&grpc, &status("0"), &frame(0, &ok)),
            AuthzOutcome::Allow { headers: vec![] }
        );
        let error = |o: AuthzOutcome, what: &str| match o {
            AuthzOutcome::Error { detail } => assert!(detail.contains(what), "{detail}"),
            other => panic!("{what}: {other:?}"),
        };
        let two = [frame(0, &ok), frame(0, &ok)].concat();
        error(run(&grpc, &status("0"), &two), "of 2 messages");
        error(run(&grpc, &status("0"), &[]), "of 0 messages");
        error(run(&grpc, &status("0"), &frame(1, &ok)), "compressed");
        let cut = frame(0, &ok);
        error(run(&grpc, &status("0"), &cut[..cut.len() - 1]), "cut short");
        error(run(&grpc, &status("0"), &[0, 0, 0]), "prefix cut short");
        error(
            run(&grpc, &Headers::new(), &frame(0, &ok)),
            "without grpc-status",
        );
        error(run(&grpc, &status("zero"), &frame(0, &ok)), "not a number");
        let html = Headers::from(vec![("content-type", "text/html")]);
        error(run(&html, &status("0"), &frame(0, &ok)), "content-type");
        // A trailers-only answer: the status in the headers.
        let only = Headers::from(vec![
            ("content-type", "application/grpc"),
            ("grpc-status", "7"),
        ]);
        error(run(&only, &Headers::new(), &[]), "gRPC status 7");
        // No answer, or Envoy's own 503.
        let none = interpret_http(&a, None, &grpc, &Headers::new(), &[]).0;
        error(none, "no response");
        error(
            interpret_http(&a, Some(503), &grpc, &Headers::new(), b"x").0,
            "HTTP status 503",
        );
    }
}
