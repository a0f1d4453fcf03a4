//! A request as CEL reads it: [`mcp_access_cel::Attributes`] for [`Request`] (docs/semantics.md,
//! "CEL").

use mcp_access_bundle::mcp_methods::{Method, Param};
use mcp_access_cel::{service_account, Attr, Attributes, Str, Value};

use crate::pins::ToolPins;
use crate::request::{McpOp, Request};

/// What a request's CEL conditions are evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct CelInput<'a> {
    pub req: &'a Request,
    /// The canonical host (`request.hostname`).
    pub host: &'a str,
    /// `namespace/name` of the backend Envoy routed the request to (`request.backend`).
    pub backend: Option<&'a str>,
    /// The bundle's trust domain (`source.service_account` needs it to match, when set).
    pub trust_domain: Option<&'a str>,
    /// The backend's pinned tools: `request.mcp.tool.annotations` of a tool call is the pin's
    /// (absent when the backend has no ToolPin).
    pub pins: Option<&'a ToolPins>,
}

impl Attributes for CelInput<'_> {
    #[inline]
    fn text(&self, a: Attr) -> Option<&str> {
        let req = self.req;
        match a {
            Attr::UrlPath => Some(&req.canonical_path),
            Attr::Path if !req.path.contains('?') => Some(&req.canonical_path),
            Attr::Method => Some(&req.method),
            Attr::Host => Some(&req.authority),
            Attr::Hostname => Some(self.host),
            Attr::Route => req.route_name.as_deref(),
            Attr::Backend => self.backend,
            Attr::ToolName => req.mcp.tool_called(),
            Attr::McpMethod => call(req).map(|(m, _)| m.as_str()),
            Attr::Principal => req.caller.spiffe.as_deref(),
            _ => None,
        }
    }

    fn attr(&self, a: Attr) -> Option<Value<'_>> {
        if let Some(s) = self.text(a) {
            return Some(Value::Str(Str::Borrowed(s)));
        }
        let req = self.req;
        let text = |s| Some(Value::Str(Str::Borrowed(s)));
        let param = |want: Param| match call(req)? {
            (m, Some(p)) if m.param() == Some(want) => text(p),
            _ => None,
        };
        match a {
            Attr::Path => {
                let (_, q) = req.path.split_once('?')?;
                Some(Value::string(format!("{}?{q}", req.canonical_path)))
            }
            Attr::Port => Some(Value::Int(i64::from(req.port))),
            Attr::Headers => Some(Value::Headers(&req.headers)),
            Attr::Time => Some(Value::Time(req.time?)),
            Attr::McpName => param(Param::Name),
            Attr::McpUri => param(Param::Uri),
            Attr::McpParams => {
                call(req)?;
                Some(
                    req.params
                        .as_ref()
                        .map_or_else(Value::empty_map, Value::Json),
                )
            }
            Attr::ToolAnnotations => {
                let tool = req.mcp.tool_called()?;
                Some(Value::Json(self.pins?.annotations(tool)))
            }
            Attr::SaNamespace | Attr::SaName => {
                let spiffe = req.caller.spiffe.as_deref()?;
                let (ns, name) = service_account(spiffe, self.trust_domain)?;
                text(if a == Attr::SaNamespace { ns } else { name })
            }
            Attr::JwtClaims => Some(
                req.caller
                    .jwts
                    .iter()
                    .find_map(|j| j.payload.as_ref())
                    .map_or_else(Value::empty_map, Value::Json),
            ),
            // Strings [`Attributes::text`] gave (or found absent); `self` is not a request's.
            _ => None,
        }
    }
}

/// The method and the param (tool name, prompt name, resource URI) of an MCP request.
fn call(req: &Request) -> Option<(&Method, Option<&str>)> {
    match &req.mcp {
        McpOp::Call { method, param } => Some((method, param.as_deref())),
        _ => None,
    }
}
