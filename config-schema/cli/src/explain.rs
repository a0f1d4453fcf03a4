//! `explain`: one request decided by the filter's own engine, with its trace.

use std::collections::BTreeMap;

use mcp_access_bundle::gateway_api::{
    full_regex, path_prefix_matches, service_account_spiffe, HostPattern, DEFAULT_TRUST_DOMAIN,
};
use mcp_access_bundle::Bundle;
use mcp_access_engine::mcp::{self, ParseLimits};
use mcp_access_engine::policy::{level_str, AuthzOutcome, Decision, Engine, Step};
use mcp_access_engine::request::{Caller, McpOp, Request};
use mcp_access_k8s::{PathMatchKind, RouteAction, RouteEntry, Topology};
use serde_json::{json, Value};

/// An assumed authorizer outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assumption {
    Allow,
    Deny(u16),
    Error,
}

/// Parses `allow`, `deny`, `deny:401`, `error`.
pub fn parse_assumption(s: &str) -> Result<Assumption, String> {
    match s {
        "allow" => Ok(Assumption::Allow),
        "deny" => Ok(Assumption::Deny(403)),
        "error" => Ok(Assumption::Error),
        _ => match s.strip_prefix("deny:") {
            Some(code) => code
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .map(Assumption::Deny)
                .ok_or_else(|| format!("`{s}`: bad status")),
            None => Err(format!("`{s}`: expected allow, deny[:STATUS] or error")),
        },
    }
}

/// The request to explain, as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct RequestSpec {
    /// `namespace/name` or `name` of the Gateway.
    pub gateway: Option<String>,
    pub listener: Option<String>,
    pub port: Option<u16>,
    pub host: Option<String>,
    pub path: Option<String>,
    pub method: Option<String>,
    pub headers: Vec<(String, String)>,
    /// `namespace/name` or `name` of the XBackend.
    pub backend: Option<String>,
    /// An Envoy route name, as an alternative to matching path and headers.
    pub route: Option<String>,
    pub spiffe: Option<String>,
    /// `namespace/name` of a ServiceAccount.
    pub service_account: Option<String>,
    pub mcp_method: Option<String>,
    /// Tool / prompt name or resource URI.
    pub param: Option<String>,
    /// A JSON-RPC body, parsed as the filter does.
    pub body: Option<String>,
    /// Authorizer outcomes by policy (`ns/name` or `name`), authorizer name, or `*`.
    pub assume: BTreeMap<String, Assumption>,
}

/// The result, ready to print.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub json: Value,
}

fn pick_listener(
    b: &Bundle,
    spec: &RequestSpec,
) -> Result<(String, String, u16, Option<String>), String> {
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
            ))
        }
    }
}

fn path_matches(e: &RouteEntry, path: &str) -> bool {
    let p = path.split(['?', '#']).next().unwrap_or(path);
    match e.path_kind {
        PathMatchKind::Exact => p == e.path,
        PathMatchKind::Prefix => path_prefix_matches(&e.path, p),
        PathMatchKind::Regex => full_regex(&e.path).is_ok_and(|r| r.is_match(p)),
    }
}

fn value_ok(regex: bool, pattern: &str, v: &str) -> bool {
    if regex {
        full_regex(pattern).is_ok_and(|r| r.is_match(v))
    } else {
        pattern == v
    }
}

fn host_ok(patterns: &[String], host: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| HostPattern::new(p).matches(host))
}

/// The route Envoy would pick for the request on a listener (Gateway API precedence).
pub fn match_route<'a>(
    topo: &'a Topology,
    gateway: &str,
    listener: &str,
    req: &Request,
) -> Option<&'a RouteEntry> {
    let g = topo
        .gateways
        .iter()
        .find(|g| format!("{}/{}", g.namespace, g.name) == gateway)?;
    let l = g.listeners.iter().find(|l| l.name == listener)?;
    let host = req.host();
    let query: Vec<(String, String)> = req
        .path
        .split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let candidates = l.routes.iter().filter(|e| host_ok(&e.hostnames, &host));
    // Routes for this exact host first, as Envoy's virtual host choice does.
    let mut specific: Vec<&RouteEntry> = candidates
        .clone()
        .filter(|e| e.hostnames.iter().any(|h| h == &host))
        .collect();
    let rest: Vec<&RouteEntry> = candidates
        .filter(|e| !e.hostnames.iter().any(|h| h == &host))
        .collect();
    specific.extend(rest);
    let mut ordered = specific;
    ordered.sort_by(|a, b| {
        let ka = !a.hostnames.iter().any(|h| h == &host);
        let kb = !b.hostnames.iter().any(|h| h == &host);
        ka.cmp(&kb).then_with(|| mcp_access_k8s::precedence(a, b))
    });
    ordered.into_iter().find(|e| {
        path_matches(e, &req.canonical_path)
            && e.method.as_ref().is_none_or(|m| m == &req.method)
            && e.headers.iter().all(|h| {
                req.header(&h.name.to_ascii_lowercase())
                    .is_some_and(|v| value_ok(h.regex, &h.value, v))
            })
            && e.query.iter().all(|q| {
                query
                    .iter()
                    .any(|(k, v)| k == &q.name && value_ok(q.regex, &q.value, v))
            })
    })
}

/// Decides the request with the filter's engine.
pub fn explain(
    bundle: &Bundle,
    topo: Option<&Topology>,
    spec: &RequestSpec,
) -> Result<Explanation, String> {
    let engine = Engine::compile(
        &mcp_access_bundle::ValidBundle::new(bundle.clone()).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("the bundle does not compile: {e}"))?;
    let (gateway, listener, port, listener_host) = pick_listener(bundle, spec)?;
    let host = spec
        .host
        .clone()
        // A wildcard listener: some host under it.
        .or(listener_host.map(|h| h.replacen('*', "host", 1)))
        .unwrap_or_else(|| "localhost".into());
    let mut headers: Vec<(String, String)> = spec
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    let (mcp_op, mut method) = mcp_op(spec, &headers)?;
    if let Some(m) = &spec.method {
        method = m.clone();
    }
    if (spec.body.is_some() || matches!(mcp_op, McpOp::Call { .. } | McpOp::Reply))
        && !headers.iter().any(|(k, _)| k == "content-type")
    {
        headers.push(("content-type".into(), "application/json".into()));
    }
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
    let path = spec.path.clone().unwrap_or_else(|| "/mcp".into());
    let canonical_path =
        mcp_access_engine::canon::canonical_path(&path, bundle.envoy.escaped_slashes)
            .map_err(|e| format!("--path {path:?}: the filter answers 400: {e}"))?;
    let mut req = Request {
        method,
        path,
        canonical_path,
        authority: format!("{host}:{port}"),
        port,
        headers,
        caller: Caller {
            spiffe: spiffe.clone(),
            jwts: Vec::new(),
        },
        mcp: mcp_op,
        route_name: None,
        cluster_name: None,
    };
    // Which backend Envoy routes to.
    let mut route_note = None;
    if let Some(r) = &spec.route {
        req.route_name = Some(r.clone());
    } else if let Some(b) = &spec.backend {
        let be = bundle
            .backends
            .iter()
            .find(|x| &format!("{}/{}", x.namespace, x.name) == b || &x.name == b)
            .ok_or_else(|| format!("no backend {b} in the bundle"))?;
        req.route_name = be.route_names.first().cloned();
        req.cluster_name = be.cluster_names.first().cloned();
    } else if let Some(t) = topo {
        match match_route(t, &gateway, &listener, &req) {
            Some(e) => {
                req.route_name = Some(e.name.clone());
                if let RouteAction::Forward { clusters, .. } = &e.action {
                    req.cluster_name = clusters.first().map(|c| c.cluster.clone());
                    if let RouteAction::Forward {
                        path_rewrite: Some(_),
                        ..
                    } = &e.action
                    {
                        route_note =
                            Some("the path is rewritten before it reaches the backend".to_string());
                    }
                } else {
                    route_note = Some("this route does not forward (redirect or 500), the filter still decides first".into());
                }
            }
            None => {
                route_note = Some(
                    "no HTTPRoute matches: Envoy answers 404 (the filter sees no route)".into(),
                )
            }
        }
    }

    let mut ev = engine.begin(&req, true);
    let mut calls_out = Vec::new();
    let decision = loop {
        match ev.advance(&engine, &req) {
            Step::Done(d) => break d,
            Step::Waiting => {
                return Err("internal: evaluation waits for an answer that was given".into())
            }
            Step::Call(calls) => {
                for c in calls {
                    let policy = engine
                        .policies
                        .get(c.policy)
                        .map(|p| p.id.clone())
                        .unwrap_or_default();
                    let authz = engine
                        .authorizers
                        .get(c.authorizer)
                        .map(|a| a.name.clone())
                        .unwrap_or_default();
                    let short = policy
                        .split_once('/')
                        .map(|x| x.1.to_string())
                        .unwrap_or_default();
                    let found = [policy.as_str(), short.as_str(), authz.as_str(), "*"]
                        .iter()
                        .find_map(|k| spec.assume.get(*k).map(|a| (k.to_string(), a.clone())));
                    let (assumed, given) = match found {
                        Some((_, a)) => (a, true),
                        None => (Assumption::Allow, false),
                    };
                    let outcome = match &assumed {
                        Assumption::Allow => AuthzOutcome::Allow {
                            headers: Vec::new(),
                        },
                        Assumption::Deny(s) => AuthzOutcome::Deny {
                            status: *s,
                            headers: Vec::new(),
                            body: Vec::new(),
                        },
                        Assumption::Error => AuthzOutcome::Error {
                            detail: "assumed error".into(),
                        },
                    };
                    calls_out.push(json!({
                        "level": level_str(Some(c.level)),
                        "policy": policy,
                        "authorizer": authz,
                        "assumed": match &assumed { Assumption::Allow => "allow".to_string(), Assumption::Deny(s) => format!("deny:{s}"), Assumption::Error => "error".into() },
                        "given": given,
                    }));
                    ev.complete(c.slot, outcome);
                }
            }
        }
    };
    let trace: Vec<Value> = ev
        .trace()
        .iter()
        .map(|t| json!({"level": level_str(t.level), "step": t.step, "policy": t.policy, "rule": t.rule, "outcome": t.outcome}))
        .collect();
    let mut out = json!({
        "request": {
            "listener": if gateway.is_empty() { Value::Null } else { json!(format!("{gateway}/{listener}")) },
            "port": port,
            "method": req.method,
            "authority": req.authority,
            "path": req.path,
            "caller": spiffe,
            "mcp": match &req.mcp {
                McpOp::Call { method, param } => json!({"method": method, "param": param}),
                McpOp::Transport => json!("transport (SSE stream or session end)"),
                McpOp::Reply => json!("reply"),
                McpOp::NotMcp => Value::Null,
            },
            "route": req.route_name,
            "cluster": req.cluster_name,
        },
        "listener": ev.listener_name(&engine),
        "backend": ev.backend_name(&engine),
        "calls": calls_out,
        "trace": trace,
    });
    let obj = out.as_object_mut().ok_or("internal")?;
    if let Some(n) = route_note {
        obj.insert("note".into(), json!(n));
    }
    match decision {
        Decision::Allow {
            add_headers,
            policy,
            rule,
        } => {
            obj.insert("decision".into(), json!("allow"));
            obj.insert("policy".into(), json!(policy));
            obj.insert("rule".into(), json!(rule));
            if !add_headers.is_empty() {
                obj.insert("addHeaders".into(), json!(add_headers));
            }
        }
        Decision::Deny(d) => {
            obj.insert("decision".into(), json!("deny"));
            obj.insert("level".into(), json!(level_str(d.level)));
            obj.insert("reason".into(), json!(d.reason.as_str()));
            obj.insert("policy".into(), json!(d.policy));
            obj.insert("rule".into(), json!(d.rule));
            let status = d
                .relay
                .as_ref()
                .map_or(bundle.deny_response.http_status, |r| r.status);
            obj.insert("status".into(), json!(status));
            if let Some(x) = d.detail {
                obj.insert("detail".into(), json!(x));
            }
        }
    }
    Ok(Explanation { json: out })
}

fn mcp_op(spec: &RequestSpec, headers: &[(String, String)]) -> Result<(McpOp, String), String> {
    if let Some(body) = &spec.body {
        let msg = mcp::parse_message(body.as_bytes(), &ParseLimits::default())
            .map_err(|(e, _)| format!("--body is not an MCP message the filter accepts: {e}"))?;
        return Ok((McpOp::from_message(msg), "POST".into()));
    }
    if let Some(m) = &spec.mcp_method {
        return Ok((
            McpOp::Call {
                method: m.clone(),
                param: spec.param.clone(),
            },
            "POST".into(),
        ));
    }
    let method = spec.method.clone().unwrap_or_else(|| "POST".into());
    let has_session = headers.iter().any(|(k, _)| k == "mcp-session-id");
    Ok((McpOp::without_body(&method, has_session), method))
}

/// Human-readable text.
pub fn to_text(e: &Explanation) -> String {
    let j = &e.json;
    let s = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let r = &j["request"];
    out.push_str(&format!(
        "request   {} {} (authority {}) from {}\n",
        s(&r["method"]),
        s(&r["path"]),
        s(&r["authority"]),
        if r["caller"].is_null() {
            "an anonymous caller".to_string()
        } else {
            s(&r["caller"])
        }
    ));
    match &r["mcp"] {
        Value::Object(m) => out.push_str(&format!(
            "mcp       {} {}\n",
            s(&m["method"]),
            s(&m["param"])
        )),
        Value::Null => out.push_str("mcp       (not an MCP message)\n"),
        other => out.push_str(&format!("mcp       {}\n", s(other))),
    }
    out.push_str(&format!("listener  {}\n", s(&j["listener"])));
    out.push_str(&format!(
        "backend   {} (route {}, cluster {})\n",
        s(&j["backend"]),
        s(&r["route"]),
        s(&r["cluster"])
    ));
    if let Some(n) = j.get("note") {
        out.push_str(&format!("note      {}\n", s(n)));
    }
    for c in j["calls"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "authorizer {} for {} ({}): assumed {}{}\n",
            s(&c["authorizer"]),
            s(&c["policy"]),
            s(&c["level"]),
            s(&c["assumed"]),
            if c["given"] == json!(true) {
                ""
            } else {
                " (no --assume given)"
            }
        ));
    }
    if j["decision"] == json!("allow") {
        out.push_str(&format!(
            "decision  ALLOW (policy {}, rule {})\n",
            s(&j["policy"]),
            s(&j["rule"])
        ));
    } else {
        out.push_str(&format!(
            "decision  DENY {} at {} ({}): policy {}, rule {}\n",
            s(&j["status"]),
            s(&j["level"]),
            s(&j["reason"]),
            s(&j["policy"]),
            s(&j["rule"])
        ));
    }
    out.push_str("trace\n");
    let rows: Vec<[String; 5]> = j["trace"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            [
                s(&t["level"]),
                s(&t["step"]),
                s(&t["policy"]),
                s(&t["rule"]),
                s(&t["outcome"]),
            ]
        })
        .collect();
    let header = ["level", "step", "policy", "rule", "why"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.len());
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hostnames_match_canonical_hosts() {
        let wild = ["*.a.com".to_string()];
        assert!(host_ok(&wild, "x.a.com"));
        assert!(!host_ok(&wild, ".a.com"));
        assert!(!host_ok(&wild, "a.com"));
        assert!(host_ok(&["A.com.".to_string()], "a.com"));
        assert!(host_ok(&[], "anything"));
    }
}
