//! Routes: one per HTTPRoute match, in virtual hosts per listener hostname.

use std::collections::BTreeMap;

use mcp_access_bundle::ProtectedResource;
use mcp_access_k8s::{
    HeaderOps, ListenerModel, PathMatchKind, PathRewrite, RouteAction, RouteEntry, ValueMatchModel,
};
use serde_json::{json, Value};

use super::clusters::duration_ms;

pub(super) fn string_match(v: &ValueMatchModel) -> Value {
    if v.regex {
        json!({"safe_regex": {"regex": v.value}})
    } else {
        json!({"exact": v.value})
    }
}

pub(super) fn header_ops(ops: &HeaderOps) -> (Vec<Value>, Vec<String>) {
    let mut add = Vec::new();
    for (k, v) in &ops.set {
        add.push(json!({"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}));
    }
    for (k, v) in &ops.add {
        add.push(
            json!({"header": {"key": k, "value": v}, "append_action": "APPEND_IF_EXISTS_OR_ADD"}),
        );
    }
    (add, ops.remove.clone())
}

pub(super) fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) fn rewrite_fields(obj: &mut serde_json::Map<String, Value>, rw: &PathRewrite) {
    match rw {
        PathRewrite::Full(p) => {
            obj.insert(
                "regex_rewrite".into(),
                json!({"pattern": {"regex": "^.*$"}, "substitution": p}),
            );
        }
        PathRewrite::Prefix {
            prefix,
            replacement,
        } => {
            let p = prefix.trim_end_matches('/');
            if replacement == "/" || replacement.is_empty() {
                obj.insert(
                    "regex_rewrite".into(),
                    json!({"pattern": {"regex": format!("^{}/*", regex_escape(p))}, "substitution": "/"}),
                );
            } else {
                obj.insert("prefix_rewrite".into(), json!(replacement));
            }
        }
    }
}

/// One Envoy route. `hostnames`: per cluster, the Host the upstream is sent (an XBackend's
/// `hostname`, or the `HOST:PORT` a `--resolve` maps a Service to: an MCP server listening on
/// loopback checks that Host, as the official SDKs do by default against DNS rebinding).
pub(crate) fn route(e: &RouteEntry, hostnames: &BTreeMap<String, String>) -> Value {
    let mut r = serde_json::Map::new();
    r.insert("name".into(), json!(e.name));
    r.insert("match".into(), route_match(e));
    match &e.action {
        RouteAction::Forward {
            request_headers,
            response_headers,
            ..
        } => {
            r.insert("route".into(), forward(&e.action, hostnames));
            header_edits(&mut r, "request", request_headers);
            header_edits(&mut r, "response", response_headers);
        }
        RouteAction::Redirect {
            response_headers, ..
        } => {
            r.insert("redirect".into(), redirect(&e.action));
            header_edits(&mut r, "response", response_headers);
        }
        RouteAction::Fail { message } => {
            r.insert(
                "direct_response".into(),
                json!({"status": 500, "body": {"inline_string": message}}),
            );
        }
    }
    Value::Object(r)
}

/// The route's `match`: path, headers (and the method), query parameters.
fn route_match(e: &RouteEntry) -> Value {
    let mut m = serde_json::Map::new();
    match e.path_kind {
        PathMatchKind::Exact => {
            m.insert("path".into(), json!(e.path));
        }
        PathMatchKind::Regex => {
            m.insert("safe_regex".into(), json!({"regex": e.path}));
        }
        PathMatchKind::Prefix => {
            let p = e.path.trim_end_matches('/');
            if p.is_empty() {
                m.insert("prefix".into(), json!("/"));
            } else {
                m.insert("path_separated_prefix".into(), json!(p));
            }
        }
    }
    let mut headers: Vec<Value> = e
        .headers
        .iter()
        .map(|h| json!({"name": h.name.to_ascii_lowercase(), "string_match": string_match(h)}))
        .collect();
    if let Some(method) = &e.method {
        headers.push(json!({"name": ":method", "string_match": {"exact": method}}));
    }
    if !headers.is_empty() {
        m.insert("headers".into(), json!(headers));
    }
    if !e.query.is_empty() {
        let q: Vec<Value> = e
            .query
            .iter()
            .map(|h| json!({"name": h.name, "string_match": string_match(h)}))
            .collect();
        m.insert("query_parameters".into(), json!(q));
    }
    Value::Object(m)
}

/// The `route` action of a Forward: clusters (weighted), the Host sent, rewrites, timeout.
fn forward(action: &RouteAction, hostnames: &BTreeMap<String, String>) -> Value {
    let mut a = serde_json::Map::new();
    let RouteAction::Forward {
        clusters,
        host_rewrite,
        path_rewrite,
        timeout_ms,
        ..
    } = action
    else {
        return Value::Object(a);
    };
    let host_of = |c: &str| host_rewrite.clone().or_else(|| hostnames.get(c).cloned());
    let rewritten = clusters.iter().any(|c| host_of(&c.cluster).is_some());
    match clusters.as_slice() {
        [one] => {
            a.insert("cluster".into(), json!(one.cluster));
            if let Some(h) = host_of(&one.cluster) {
                a.insert("host_rewrite_literal".into(), json!(h));
            }
        }
        many => {
            let cs: Vec<Value> = many
                .iter()
                .map(|c| {
                    let mut w = json!({"name": c.cluster, "weight": c.weight});
                    if let (Some(h), Some(o)) = (host_of(&c.cluster), w.as_object_mut()) {
                        o.insert("host_rewrite_literal".into(), json!(h));
                    }
                    w
                })
                .collect();
            a.insert("weighted_clusters".into(), json!({"clusters": cs}));
        }
    }
    if rewritten {
        // The client's Host, where the upstream sees its own authority instead.
        a.insert("append_x_forwarded_host".into(), json!(true));
    }
    if let Some(rw) = path_rewrite {
        rewrite_fields(&mut a, rw);
    }
    // MCP streams (SSE) are long-lived: no route timeout unless the HTTPRoute sets one.
    a.insert(
        "timeout".into(),
        json!(duration_ms(timeout_ms.unwrap_or(0))),
    );
    Value::Object(a)
}

/// The `redirect` action of a RequestRedirect filter.
fn redirect(action: &RouteAction) -> Value {
    let mut a = serde_json::Map::new();
    let RouteAction::Redirect {
        scheme,
        hostname,
        path,
        port,
        status,
        ..
    } = action
    else {
        return Value::Object(a);
    };
    if let Some(s) = scheme {
        a.insert("scheme_redirect".into(), json!(s));
    }
    if let Some(h) = hostname {
        a.insert("host_redirect".into(), json!(h));
    }
    if let Some(p) = port {
        a.insert("port_redirect".into(), json!(p));
    }
    match path {
        Some(PathRewrite::Full(p)) => {
            a.insert("path_redirect".into(), json!(p));
        }
        Some(PathRewrite::Prefix { replacement, .. }) => {
            a.insert("prefix_rewrite".into(), json!(replacement));
        }
        None => {}
    }
    let code = match status {
        301 => "MOVED_PERMANENTLY",
        303 => "SEE_OTHER",
        307 => "TEMPORARY_REDIRECT",
        308 => "PERMANENT_REDIRECT",
        _ => "FOUND",
    };
    a.insert("response_code".into(), json!(code));
    Value::Object(a)
}

/// `{which}_headers_to_add` / `_to_remove` of a route from a header modifier.
fn header_edits(r: &mut serde_json::Map<String, Value>, which: &str, ops: &HeaderOps) {
    let (add, remove) = header_ops(ops);
    if !add.is_empty() {
        r.insert(format!("{which}_headers_to_add"), json!(add));
    }
    if !remove.is_empty() {
        r.insert(format!("{which}_headers_to_remove"), json!(remove));
    }
}

/// Virtual hosts of one or more listeners sharing a route configuration. `metadata`: per
/// listener, its id and protected resource metadata, served first in the virtual hosts that
/// belong to it.
pub(super) fn virtual_hosts(
    listeners: &[&ListenerModel],
    metadata: &[(&str, Option<&ProtectedResource>)],
    prefix: &str,
    hostnames: &BTreeMap<String, String>,
) -> Vec<Value> {
    // domain -> entries
    let mut by_domain: BTreeMap<String, Vec<RouteEntry>> = BTreeMap::new();
    for l in listeners {
        let default_domain = l.hostname.clone().unwrap_or_else(|| "*".into());
        by_domain.entry(default_domain.clone()).or_default();
        for e in &l.routes {
            let domains = if e.hostnames.is_empty() {
                vec![default_domain.clone()]
            } else {
                e.hostnames.clone()
            };
            for d in domains {
                by_domain.entry(d).or_default().push(e.clone());
            }
        }
    }
    // Routes for any host (and for covering wildcards) also serve more specific hosts.
    let domains: Vec<String> = by_domain.keys().cloned().collect();
    let snapshot = by_domain.clone();
    for d in &domains {
        for (other, entries) in &snapshot {
            if other != d
                && (other == "*" || mcp_access_bundle::gateway_api::host_matches(other, d))
            {
                if let Some(list) = by_domain.get_mut(d) {
                    for e in entries {
                        if !list.iter().any(|x| x.name == e.name) {
                            list.push(e.clone());
                        }
                    }
                }
            }
        }
    }
    let listener_hosts: Vec<Option<&str>> =
        listeners.iter().map(|l| l.hostname.as_deref()).collect();
    by_domain
        .into_iter()
        .map(|(domain, mut entries)| {
            entries.sort_by(mcp_access_k8s::precedence);
            let own = super::oauth::owner(&domain, &listener_hosts).and_then(|i| metadata.get(i));
            let mut routes: Vec<Value> = match own {
                Some((id, Some(p))) => super::oauth::metadata_routes(id, p),
                _ => Vec::new(),
            };
            routes.extend(entries.iter().map(|e| route(e, hostnames)));
            json!({"name": format!("{prefix}/{domain}"), "domains": [domain], "routes": routes})
        })
        .collect()
}
