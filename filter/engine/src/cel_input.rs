//! A request as CEL reads it: [`mcp_access_cel::Attributes`] for [`Request`] (docs/semantics.md,
//! "CEL").

use mcp_access_bundle::mcp_methods::{self, Param};
use mcp_access_cel::{service_account, Attr, Attributes, Str, Value};

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
}

/// A borrowed string value.
fn text(s: &str) -> Option<Value<'_>> {
    Some(Value::Str(Str::Borrowed(s)))
}

impl Attributes for CelInput<'_> {
    #[inline]
    fn attr(&self, a: Attr) -> Option<Value<'_>> {
        let req = self.req;
        let call = || match &req.mcp {
            McpOp::Call { method, param } => Some((method.as_str(), param.as_deref())),
            _ => None,
        };
        let param = |want: Param| match call()? {
            (m, Some(p)) if mcp_methods::param_of(m) == Some(want) => text(p),
            _ => None,
        };
        match a {
            Attr::UrlPath => text(&req.canonical_path),
            Attr::Path => match req.path.split_once('?') {
                Some((_, q)) => Some(Value::string(format!("{}?{q}", req.canonical_path))),
                None => text(&req.canonical_path),
            },
            Attr::Method => text(&req.method),
            Attr::Host => text(&req.authority),
            Attr::Hostname => text(self.host),
            Attr::Port => Some(Value::Int(i64::from(req.port))),
            Attr::Route => text(req.route_name.as_deref()?),
            Attr::Backend => text(self.backend?),
            Attr::Headers => Some(Value::Headers(&req.headers)),
            Attr::Time => Some(Value::Time(req.time?)),
            Attr::ToolName => match call()? {
                ("tools/call", Some(p)) => text(p),
                _ => None,
            },
            Attr::McpMethod => text(call()?.0),
            Attr::McpName => param(Param::Name),
            Attr::McpUri => param(Param::Uri),
            Attr::McpParams => {
                call()?;
                Some(
                    req.params
                        .as_ref()
                        .map_or_else(Value::empty_map, Value::Json),
                )
            }
            Attr::Principal => text(req.caller.spiffe.as_deref()?),
            Attr::SaNamespace | Attr::SaName => {
                let (ns, name) = service_account(req.caller.spiffe.as_deref()?, self.trust_domain)?;
                text(if a == Attr::SaNamespace { ns } else { name })
            }
            Attr::JwtClaims => Some(
                req.caller
                    .jwts
                    .iter()
                    .find_map(|j| j.payload.as_ref())
                    .map_or_else(Value::empty_map, Value::Json),
            ),
            Attr::SelfValue => None,
        }
    }
}
