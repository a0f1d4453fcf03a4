//! What the decision looks at: one request, as the host adapter collected it, with its
//! listener and backend resolved once ([`Target`]).

use mcp_access_bundle::mcp_methods::{self, Method, MethodSpec};
use mcp_access_bundle::ClaimMatch;
pub use mcp_access_cel::Headers;

/// A caller as identified by Envoy: mTLS SPIFFE ID and verified JWT claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// SPIFFE ID from the peer certificate (or the trusted header the bundle names).
    pub spiffe: Option<String>,
    /// Verified JWTs, one per `jwt_authn` provider that accepted a token.
    pub jwts: Vec<JwtPrincipal>,
    /// A credential besides what `spiffe` and `jwts` show: an `Authorization` header, a
    /// client certificate, the trusted identity header (docs/semantics.md §5.6). Read only
    /// where a listener answers callers without one with a challenge.
    pub credential: bool,
}

impl Caller {
    /// Whether the caller presented no credential at all (docs/semantics.md §5.6).
    pub fn anonymous(&self) -> bool {
        !self.credential && self.spiffe.is_none() && self.jwts.is_empty()
    }

    /// How decision records and `explain` name the caller: the SPIFFE ID, else `jwt:` and
    /// the first verified JWT's [`JwtPrincipal::label`]; None without either.
    pub fn label(&self) -> Option<String> {
        self.spiffe
            .clone()
            .or_else(|| self.jwts.first().map(|j| format!("jwt:{}", j.label())))
    }
}

impl JwtPrincipal {
    /// `iss#sub`, or `iss` of a token without a subject.
    pub fn label(&self) -> String {
        match &self.subject {
            Some(sub) => format!("{}#{sub}", self.issuer),
            None => self.issuer.clone(),
        }
    }
}

/// The claims of one verified JWT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JwtPrincipal {
    /// `iss`.
    pub issuer: String,
    /// `sub`.
    pub subject: Option<String>,
    /// Claims the bundle's rules look at (by their possibly dotted names).
    pub claims: Vec<(String, ClaimValue)>,
    /// The claims authorizer caches key on (`keyClaims`), as JSON text of whatever shape;
    /// a missing claim is left out.
    pub keyed: Vec<(String, String)>,
    /// The whole payload, kept only when a CEL expression reads `jwt.claims`.
    pub payload: Option<serde_json::Value>,
    /// The claims identity headers carry, as text: a string as it is, any other value as
    /// JSON (whether it can be sent is judged where it is sent).
    pub texts: Vec<(String, String)>,
}

/// A claim value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimValue {
    /// A string claim.
    Str(String),
    /// A list claim (its scalar elements as text).
    List(Vec<String>),
    /// A number or boolean, as JSON text.
    Other(String),
}

impl ClaimValue {
    /// Whether claim `name` is, or (for a list) contains, `v`; a string scope claim
    /// ([`ClaimMatch::is_scope`]) contains its space-separated elements. `select` (a Deny
    /// rule, an ExternalAuth selection): any whitespace separates too, as servers that split
    /// on whitespace read the claim (a difference resolved against the caller).
    pub(crate) fn matches(&self, name: &str, v: &str, select: bool) -> bool {
        match self {
            ClaimValue::Str(s) if ClaimMatch::is_scope(name) => {
                ClaimMatch::scope_elements(s, select).any(|e| e == v)
            }
            ClaimValue::Str(s) | ClaimValue::Other(s) => s == v,
            ClaimValue::List(items) => items.iter().any(|i| i == v),
        }
    }
}

/// The MCP meaning of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum McpOp {
    /// HTTP GET (the SSE stream) or DELETE carrying `Mcp-Session-Id`: base protocol.
    Transport,
    /// A JSON-RPC request or notification.
    Call {
        /// `method`, resolved against the method table once, when the body is parsed.
        method: Method,
        /// The [`mcp_methods::Param`] the method carries: `params.name` (tools/call,
        /// prompts/get) or `params.uri` (resources/read, subscribe, unsubscribe).
        param: Option<String>,
    },
    /// A JSON-RPC response sent by the client (to a server request): base protocol.
    Reply,
    /// No MCP meaning (e.g. PUT, or DELETE without a session).
    #[default]
    NotMcp,
}

impl McpOp {
    /// The operation of a request without a body: GET opens the SSE stream, DELETE with
    /// `Mcp-Session-Id` ends a session; anything else has no MCP meaning.
    pub(crate) fn without_body(http_method: &str, has_session_id: bool) -> McpOp {
        match http_method {
            "GET" => McpOp::Transport,
            "DELETE" if has_session_id => McpOp::Transport,
            _ => McpOp::NotMcp,
        }
    }

    /// Whether this is MCP base protocol traffic (transport, lifecycle, listing tools, ...):
    /// it carries no access to a tool, prompt or resource ([`Method::is_base`]).
    pub(crate) fn is_base(&self) -> bool {
        match self {
            McpOp::Transport | McpOp::Reply => true,
            McpOp::Call { method, .. } => method.is_base(),
            McpOp::NotMcp => false,
        }
    }

    /// The JSON-RPC method's name, if any.
    pub(crate) fn method(&self) -> Option<&str> {
        self.called().map(Method::as_str)
    }

    /// The JSON-RPC method, if any.
    pub(crate) fn called(&self) -> Option<&Method> {
        match self {
            McpOp::Call { method, .. } => Some(method),
            _ => None,
        }
    }

    /// The tool a `tools/call` names (None for any other request).
    pub fn tool_called(&self) -> Option<&str> {
        match self {
            McpOp::Call { method, param }
                if method == mcp_access_bundle::mcp_methods::TOOLS_CALL =>
            {
                param.as_deref()
            }
            _ => None,
        }
    }

    /// The tool / prompt name or resource URI, if any.
    pub(crate) fn param(&self) -> Option<&str> {
        match self {
            McpOp::Call { param, .. } => param.as_deref(),
            _ => None,
        }
    }
}

/// Everything the decision engine reads about a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// HTTP method.
    pub method: String,
    /// `:path` as received (query included).
    pub path: String,
    /// The path rules match on: [`crate::canon::canonical_path`] of `path`.
    pub canonical_path: String,
    /// `:authority` as received (port included, if any).
    pub authority: String,
    /// The host in canonical form ([`canonical_host`](mcp_access_bundle::gateway_api::canonical_host) of `authority`: lowercase, no port, no
    /// trailing dot).
    pub host: String,
    /// Destination (listener) port.
    pub port: u16,
    /// Request headers, names lowercase, in arrival order (pseudo-headers are not kept).
    pub headers: Headers,
    /// Who is calling.
    pub caller: Caller,
    /// What MCP operation it is.
    pub mcp: McpOp,
    /// Envoy's route name (`xds.route_name`).
    pub route_name: Option<String>,
    /// Envoy's upstream cluster (`xds.cluster_name`).
    pub cluster_name: Option<String>,
    /// When the request arrived (`request.time`), nanoseconds since the Unix epoch; read only
    /// when a CEL expression needs it.
    pub time: Option<i64>,
    /// The JSON-RPC `params` (arguments included), kept when a CEL expression reads
    /// `request.mcp.params`; else, when decision records keep arguments, only `arguments`
    /// (`mcp::params_value`).
    pub params: Option<serde_json::Value>,
    /// The listener and backend whose policies judge the request.
    pub target: Target,
    /// What gRPC authorizers are told about the connection (empty without one).
    pub peers: Peers,
}

/// Where a request is judged: indexes into the engine's listeners and backends, resolved once
/// when the headers arrive (None: the bundle knows none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Target {
    /// The Gateway listener: same port, most specific matching hostname.
    pub listener: Option<usize>,
    /// The Backend Envoy routed to: by route name first, then by upstream cluster.
    pub backend: Option<usize>,
    /// The backend's route slot of the name it was recognised by (None: no policy is scoped
    /// to that route).
    pub route: Option<usize>,
}

/// The connection as Envoy's ext_authz describes it to gRPC authorizers (each None when the
/// host has no value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    /// `source.address` (`ip:port`).
    pub source_address: Option<String>,
    /// The caller's certificate's first URI SAN, else first DNS SAN, else subject.
    pub source_principal: Option<String>,
    /// `connection.peer_certificate`, URL-encoded PEM (only with `includePeerCertificate`).
    pub source_certificate: Option<String>,
    /// `destination.address` (`ip:port`).
    pub destination_address: Option<String>,
    /// The listener certificate's first URI SAN, else first DNS SAN, else subject.
    pub destination_principal: Option<String>,
    /// `request.time`, ns since the epoch.
    pub time_ns: Option<i64>,
    /// `request.protocol` (`HTTP/1.1`, `HTTP/2`, ...).
    pub protocol: Option<String>,
    /// `:scheme`.
    pub scheme: Option<String>,
}

impl Request {
    /// The first value of a header (name given in lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Every copy of a header (name given in lowercase), in arrival order; a line holding
    /// commas is one copy.
    pub(crate) fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// This request made a call of one item alone (docs/semantics.md §4, §5): `method`
    /// naming `value` (a listed item's or a subscribed resource's name or URI, None for a
    /// resource template), with `params` holding only that member under `key` — never the
    /// original request's params. `params` is kept only when `with_params` (a CEL condition
    /// reads it).
    pub(crate) fn as_item_call(
        &mut self,
        method: &'static MethodSpec,
        key: Option<mcp_methods::Param>,
        value: Option<&str>,
        with_params: bool,
    ) {
        self.mcp = McpOp::Call {
            method: Method::Known(method),
            param: value.map(str::to_string),
        };
        self.set_item_params(key, value, with_params);
    }

    /// `params` for a call of one item alone (see [`Request::as_item_call`]).
    pub(crate) fn set_item_params(
        &mut self,
        key: Option<mcp_methods::Param>,
        value: Option<&str>,
        with_params: bool,
    ) {
        self.params = with_params.then(|| {
            let mut members = serde_json::Map::new();
            if let (Some(k), Some(v)) = (key, value) {
                members.insert(k.key().to_string(), serde_json::Value::from(v));
            }
            serde_json::Value::Object(members)
        });
    }
}
