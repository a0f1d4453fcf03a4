//! The request as a client sends it, prepared from the command line: the listener it
//! arrives on, its `:authority`, headers and body.

use mcp_access_bundle::gateway_api::{service_account_spiffe, DEFAULT_TRUST_DOMAIN};
use mcp_access_bundle::{mcp_methods, Bundle, SpiffeSource};

use super::RequestSpec;
use crate::error::CliError;

/// The request: the listener it arrives on and what the client sends.
pub(super) struct Prepared {
    /// `namespace/name` of the Gateway (empty: by port only).
    pub(super) gateway: String,
    pub(super) listener: String,
    pub(super) port: u16,
    pub(super) method: String,
    pub(super) path: String,
    pub(super) authority: String,
    /// Lower-case names, with the content headers a client sends with a body.
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Option<String>,
    /// The caller's SPIFFE ID from `--spiffe` / `--service-account`.
    pub(super) spiffe: Option<String>,
}

/// The request the spec describes, with a client's defaults for what it leaves out.
pub(super) fn prepare(bundle: &Bundle, spec: &RequestSpec) -> Result<Prepared, CliError> {
    let (gateway, listener, port, listener_host) = pick_listener(bundle, spec)?;
    let host = spec
        .host
        .clone()
        // A wildcard listener: some host under it.
        .or(listener_host.map(|h| h.replacen('*', "host", 1)))
        .unwrap_or_else(|| "localhost".into());
    let method = spec.method.clone().unwrap_or_else(|| "POST".into());
    let path = spec.path.clone().unwrap_or_else(|| "/mcp".into());
    let body = match (&spec.body, &spec.mcp_method) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(m)) => Some(body_for(m, spec.param.as_deref(), spec.arguments.as_ref())),
        (None, None) => None,
    };
    let mut headers = client_headers(spec, body.as_deref());
    revision_headers(spec, &mut headers);
    let spiffe = caller_spiffe(bundle, spec)?;
    Ok(Prepared {
        authority: client_authority(&host, port),
        gateway,
        listener,
        port,
        method,
        path,
        headers,
        body,
        spiffe,
    })
}

/// The headers given, with lower-case names, and what an MCP client sends with a body
/// unless given.
fn client_headers(spec: &RequestSpec, body: Option<&str>) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = spec
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    if let Some(b) = body {
        for (name, value) in [
            ("content-type", "application/json".to_string()),
            ("content-length", b.len().to_string()),
        ] {
            if !headers.iter().any(|(k, _)| k == name) {
                headers.push((name.into(), value));
            }
        }
    }
    headers
}

/// The MCP headers a client of `spec.revision` sends (SEP-2243), unless given: the revision,
/// and from 2026-07-28 on the method and, where the method names one, its name (Base64
/// sentinel, which carries any value as it is).
fn revision_headers(spec: &RequestSpec, headers: &mut Vec<(String, String)>) {
    let Some(rev) = spec.revision.as_deref() else {
        return;
    };
    let mut add = |name: &str, value: String| {
        if !headers.iter().any(|(k, _)| k == name) {
            headers.push((name.to_string(), value));
        }
    };
    add("mcp-protocol-version", rev.to_string());
    let stateless = mcp_methods::Revision::parse(rev).is_some_and(|r| r.is_stateless());
    if let (true, Some(m)) = (stateless, spec.mcp_method.as_deref()) {
        add("mcp-method", m.to_string());
        if let (true, Some(p)) = (mcp_methods::requires_name_header(m), spec.param.as_deref()) {
            add("mcp-name", mcp_access_engine::base64::sentinel(p));
        }
    }
}

/// The caller's SPIFFE ID from `--spiffe` or `--service-account`; an error when the bundle
/// takes the caller from a trusted header instead.
fn caller_spiffe(bundle: &Bundle, spec: &RequestSpec) -> Result<Option<String>, CliError> {
    let spiffe = match (&spec.spiffe, &spec.service_account) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(sa)) => {
            let (ns, name) = sa
                .split_once('/')
                .ok_or("--service-account takes NAMESPACE/NAME")?;
            let td = bundle
                .identity
                .trust_domain
                .clone()
                .unwrap_or_else(|| DEFAULT_TRUST_DOMAIN.into());
            Some(service_account_spiffe(&td, ns, name))
        }
        _ => None,
    };
    if let (Some(_), SpiffeSource::TrustedHeader) = (&spiffe, bundle.identity.spiffe.source) {
        let name = bundle
            .identity
            .spiffe
            .header
            .as_ref()
            .map_or("", |h| h.name.as_str());
        return Err(format!(
            "the bundle takes the caller from the trusted header {name}: give it with -H instead of --spiffe / --service-account"
        ).into());
    }
    Ok(spiffe)
}

/// The JSON-RPC body for `--mcp-method` (and its tool, prompt or URI, and arguments), as a
/// client writes it.
fn body_for(method: &str, param: Option<&str>, arguments: Option<&serde_json::Value>) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let id = if method.starts_with("notifications/") {
        ""
    } else {
        "\"id\":1,"
    };
    let mut members = Vec::new();
    if let (Some(p), Some(key)) = (param, mcp_methods::param_of(method)) {
        members.push(format!("{}:{}", text(key.key()), text(p)));
    }
    if let Some(a) = arguments {
        members.push(format!("\"arguments\":{a}"));
    }
    let params = format!("{{{}}}", members.join(","));
    format!(
        "{{\"jsonrpc\":\"2.0\",{id}\"method\":{},\"params\":{params}}}",
        text(method)
    )
}

/// The `:authority` a client sends: `host` as given when it has a port, else with the
/// listener's port unless that is HTTP's or HTTPS's default (as clients write it). CEL's
/// `request.host` reads it as received (port included); rules and `request.hostname` read
/// the canonical host.
fn client_authority(host: &str, port: u16) -> String {
    let after_v6 = host
        .rfind(']')
        .and_then(|i| host.get(i + 1..))
        .unwrap_or(host);
    let has_port = after_v6
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (has_port, port) {
        (true, _) | (false, 80 | 443) => host.to_string(),
        (false, _) => format!("{host}:{port}"),
    }
}

/// The listener the request arrives on: gateway id, listener name, port and hostname; by
/// port alone (no gateway) when no listener has that port.
fn pick_listener(
    b: &Bundle,
    spec: &RequestSpec,
) -> Result<(String, String, u16, Option<String>), CliError> {
    let mut all = Vec::new();
    for g in &b.gateways {
        for l in &g.listeners {
            all.push((
                format!("{}/{}", g.namespace, g.name),
                g.name.clone(),
                l.name.clone(),
                l.port,
                l.hostname.clone(),
            ));
        }
    }
    let chosen: Vec<_> = all
        .iter()
        .filter(|(id, name, l, port, _)| {
            spec.gateway.as_ref().is_none_or(|g| g == id || g == name)
                && spec.listener.as_ref().is_none_or(|x| x == l)
                && spec.port.is_none_or(|p| p == *port)
        })
        .collect();
    match chosen.as_slice() {
        [(id, _, l, port, host)] => Ok((id.clone(), l.clone(), *port, host.clone())),
        [] if spec.port.is_some() && spec.gateway.is_none() && spec.listener.is_none() => Ok((
            String::new(),
            String::new(),
            spec.port.unwrap_or_default(),
            None,
        )),
        _ => {
            let names: Vec<String> = all
                .iter()
                .map(|(id, _, l, p, _)| format!("{id} listener {l} (port {p})"))
                .collect();
            Err(format!(
                "say which listener the request arrives on (--gateway, --listener or --port); the bundle has: {}",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ).into())
        }
    }
}
