//! What the decision looks at: one request, as the host adapter collected it.

use mcp_access_bundle::mcp_methods;

/// A caller as identified by Envoy: mTLS SPIFFE ID and verified JWT claims.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Caller {
    /// SPIFFE ID from the peer certificate (or the trusted header the bundle names).
    pub spiffe: Option<String>,
    /// Verified JWTs, one per `jwt_authn` provider that accepted a token.
    pub jwts: Vec<JwtPrincipal>,
}

/// The claims of one verified JWT.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JwtPrincipal {
    /// `iss`.
    pub issuer: String,
    /// `sub`.
    pub subject: Option<String>,
    /// Claims the bundle's rules look at (by their possibly dotted names).
    pub claims: Vec<(String, ClaimValue)>,
    /// The whole payload, kept only when a CEL expression reads `jwt.claims`.
    pub payload: Option<serde_json::Value>,
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
    /// Whether the claim is, or (for a list) contains, `v`.
    pub(crate) fn matches(&self, v: &str) -> bool {
        match self {
            ClaimValue::Str(s) | ClaimValue::Other(s) => s == v,
            ClaimValue::List(items) => items.iter().any(|i| i == v),
        }
    }
}

/// The MCP meaning of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpOp {
    /// HTTP GET (the SSE stream) or DELETE carrying `Mcp-Session-Id`: base protocol.
    Transport,
    /// A JSON-RPC request or notification.
    Call {
        /// `method`.
        method: String,
        /// The [`mcp_methods::Param`] the method carries: `params.name` (tools/call,
        /// prompts/get) or `params.uri` (resources/read, subscribe, unsubscribe).
        param: Option<String>,
    },
    /// A JSON-RPC response sent by the client (to a server request): base protocol.
    Reply,
    /// No MCP meaning (e.g. PUT, or DELETE without a session).
    NotMcp,
}

impl McpOp {
    /// The operation a parsed JSON-RPC message performs.
    pub(crate) fn from_message(msg: crate::mcp::McpMessage) -> McpOp {
        match msg.kind {
            crate::mcp::MessageKind::Response => McpOp::Reply,
            _ => McpOp::Call {
                method: msg.method.unwrap_or_default(),
                param: msg.name.or(msg.uri),
            },
        }
    }

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
    /// it carries no access to a tool, prompt or resource ([`mcp_methods::is_base`]).
    pub(crate) fn is_base(&self) -> bool {
        match self {
            McpOp::Transport | McpOp::Reply => true,
            McpOp::Call { method, .. } => mcp_methods::is_base(method),
            McpOp::NotMcp => false,
        }
    }

    /// The JSON-RPC method, if any.
    pub(crate) fn method(&self) -> Option<&str> {
        match self {
            McpOp::Call { method, .. } => Some(method),
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
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// HTTP method.
    pub method: String,
    /// `:path` as received (query included).
    pub path: String,
    /// The path rules match on: [`crate::canon::canonical_path`] of `path`.
    pub canonical_path: String,
    /// `:authority` as received (port included, if any).
    pub authority: String,
    /// Destination (listener) port.
    pub port: u16,
    /// Request headers, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
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
    /// The JSON-RPC `params` (arguments included); kept only when a CEL expression reads
    /// `request.mcp.params`.
    pub params: Option<serde_json::Value>,
}

impl Request {
    /// The first value of a header (name given in lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every copy of a header (name given in lowercase), in arrival order; a line holding
    /// commas is one copy.
    pub(crate) fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// This request made a call of one item alone (docs/semantics.md §4, §5): `method`
    /// naming `value` (a listed item's or a subscribed resource's name or URI, None for a
    /// resource template), with `params` holding only that member under `key` — never the
    /// original request's params. `params` is kept only when `with_params` (a CEL condition
    /// reads it).
    pub(crate) fn as_item_call(
        &mut self,
        method: &str,
        key: Option<mcp_methods::Param>,
        value: Option<&str>,
        with_params: bool,
    ) {
        self.mcp = McpOp::Call {
            method: method.to_string(),
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

    /// Host in canonical form: lowercase, no port, no trailing dot.
    pub fn host(&self) -> String {
        mcp_access_bundle::gateway_api::canonical_host(&self.authority)
    }
}
