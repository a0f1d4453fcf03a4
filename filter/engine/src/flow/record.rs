//! What a decision record keeps of the request (docs/semantics.md §3.9): its canonical
//! attributes, enough for `mcp-access replay` to decide it again under other policies, and
//! never a credential.

use super::RequestFlow;
use crate::policy::Engine;
use crate::request::{ClaimValue, Request};

/// A verified token as a record carries it: `iss`, `sub`, the claims JWT sources read.
pub type RecordedJwt = (String, Option<String>, Vec<(String, ClaimValue)>);

/// The request as a decision record carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedRequest {
    pub http_method: String,
    /// The canonical path (docs/semantics.md §2.4).
    pub path: String,
    /// The canonical host.
    pub host: String,
    pub port: u16,
    /// The Envoy route that selected it.
    pub route: Option<String>,
    /// The headers the rules' header conditions read (never `Authorization`, `Cookie`,
    /// `Proxy-Authorization`), each with its copies.
    pub headers: Vec<(String, Vec<String>)>,
    /// The caller's verified token: `iss`, `sub` and the claims JWT sources read.
    pub jwt: Option<RecordedJwt>,
    /// `params.arguments` (JSON), only with `decisionRecords.arguments`.
    pub arguments: Option<String>,
}

impl RequestFlow {
    /// The record of the request being decided.
    pub(super) fn recorded(&self, engine: &Engine) -> Option<RecordedRequest> {
        let req: &Request = self.req.as_ref()?;
        let headers = engine
            .recorded_headers
            .iter()
            .filter_map(|name| {
                let copies: Vec<String> = req.header_values(name).map(str::to_string).collect();
                (!copies.is_empty()).then(|| (name.clone(), copies))
            })
            .collect();
        let arguments = if engine.decision_records.arguments {
            req.params
                .as_ref()
                .and_then(|p| p.get("arguments"))
                .map(ToString::to_string)
        } else {
            None
        };
        Some(RecordedRequest {
            http_method: req.method.clone(),
            path: req.canonical_path.clone(),
            host: req.host.clone(),
            port: req.port,
            route: req.route_name.clone(),
            headers,
            jwt: req
                .caller
                .jwts
                .first()
                .map(|j| (j.issuer.clone(), j.subject.clone(), j.claims.clone())),
            arguments,
        })
    }
}
