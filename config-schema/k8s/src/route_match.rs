//! Which route Envoy picks for a request on a listener: the compiled route entries matched
//! by host, path, method, headers and query parameters, in Gateway API precedence
//! ([`crate::precedence`]).

use mcp_access_bundle::gateway_api::{full_regex, path_prefix_matches, HostPattern};

use crate::{PathMatchKind, RouteEntry, Topology};

/// What route matching reads of a request.
#[derive(Debug, Clone, Copy)]
pub struct RouteProbe<'a> {
    pub method: &'a str,
    /// The path as received: its query string is matched.
    pub path: &'a str,
    /// The path as the filter canonicalizes it: the path match reads it.
    pub canonical_path: &'a str,
    /// The canonical host (no port, lower case).
    pub host: &'a str,
    /// The headers, names in lower case.
    pub headers: &'a [(String, String)],
}

impl RouteProbe<'_> {
    /// The first value of header `name` (lower case).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The query string's `name=value` pairs.
    fn query(&self) -> Vec<(&str, &str)> {
        self.path
            .split_once('?')
            .map(|(_, q)| q.split('&').filter_map(|kv| kv.split_once('=')).collect())
            .unwrap_or_default()
    }
}

impl Topology {
    /// The route Envoy picks for `req` on listener `listener` of Gateway `gateway`
    /// (`namespace/name`): routes for the request's exact host first (as Envoy's virtual host
    /// choice does), then Gateway API precedence.
    pub fn route_for(
        &self,
        gateway: &str,
        listener: &str,
        req: &RouteProbe,
    ) -> Option<&RouteEntry> {
        let g = self
            .gateways
            .iter()
            .find(|g| format!("{}/{}", g.namespace, g.name) == gateway)?;
        let l = g.listeners.iter().find(|l| l.name == listener)?;
        let exact = |e: &RouteEntry| e.hostnames.iter().any(|h| h == req.host);
        let mut ordered: Vec<&RouteEntry> = l
            .routes
            .iter()
            .filter(|e| host_ok(&e.hostnames, req.host))
            .collect();
        ordered.sort_by(|a, b| {
            (!exact(a))
                .cmp(&!exact(b))
                .then_with(|| crate::precedence(a, b))
        });
        let query = req.query();
        ordered.into_iter().find(|e| {
            path_matches(e, req.canonical_path)
                && e.method.as_ref().is_none_or(|m| m == req.method)
                && e.headers.iter().all(|h| {
                    req.header(&h.name.to_ascii_lowercase())
                        .is_some_and(|v| value_ok(h.regex, &h.value, v))
                })
                && e.query.iter().all(|q| {
                    query
                        .iter()
                        .any(|(k, v)| *k == q.name && value_ok(q.regex, &q.value, v))
                })
        })
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
