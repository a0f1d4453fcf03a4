//! Gateway API matching, defined once for the filter, the compiler and the CLI: hostnames and
//! hostname patterns, path prefixes, regular expressions, ServiceAccount SPIFFE IDs.
//!
//! A host is compared lower-cased, without its port and without one trailing dot
//! (`API.Example.com.:443` is `api.example.com`). A pattern is a hostname or `*.suffix`; the
//! wildcard stands for one or more non-empty labels, so `*.a.com` matches `x.a.com` and
//! `x.y.a.com` but neither `a.com` nor `.a.com`.

/// The SPIFFE trust domain assumed when none is configured.
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

/// The host part of an `:authority` (`[v6]:port` handled), in canonical form.
pub fn canonical_host(authority: &str) -> String {
    let mut host = without_port(authority).to_ascii_lowercase();
    if host.ends_with('.') {
        host.pop();
    }
    host
}

/// Strips a `:port` suffix, handling `[v6]:port`.
pub(crate) fn without_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(i) => authority.get(..=i).unwrap_or(authority),
            None => authority,
        };
    }
    match authority.rfind(':') {
        Some(i) => authority.get(..i).unwrap_or(authority),
        None => authority,
    }
}

/// A hostname pattern in canonical form: lower-cased, one trailing dot removed.
pub(crate) fn canonical_pattern(pattern: &str) -> String {
    let mut p = pattern.to_ascii_lowercase();
    if p.ends_with('.') {
        p.pop();
    }
    p
}

/// Whether canonical `host` matches canonical `pattern` (see the module docs).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|labels| !labels.is_empty() && !labels.split('.').any(str::is_empty)),
        None => pattern == host,
    }
}

/// A hostname pattern (a hostname or `*.suffix`), kept in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern(String);

impl HostPattern {
    pub fn new(pattern: &str) -> Self {
        HostPattern(canonical_pattern(pattern))
    }

    /// `host` must already be canonical ([`canonical_host`]).
    pub fn matches(&self, host: &str) -> bool {
        host_matches(&self.0, host)
    }

    /// Exact hostnames rank above wildcards, longer wildcards above shorter ones.
    pub fn specificity(&self) -> usize {
        match self.0.strip_prefix('*') {
            Some(suffix) => 2 * suffix.len(),
            None => 2 * self.0.len() + 1,
        }
    }
}

/// Gateway API `PathPrefix`: whether `prefix` matches `path` by whole segments (`/a` matches
/// `/a` and `/a/b`, not `/ab`; a trailing `/` of the prefix is ignored; `/` matches all).
pub fn path_prefix_matches(prefix: &str, path: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Gateway API `RegularExpression`: the pattern must match the whole value.
pub fn full_regex(pattern: &str) -> Result<regex_lite::Regex, String> {
    regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

/// The SPIFFE ID of a Kubernetes ServiceAccount: `spiffe://<td>/ns/<namespace>/sa/<name>`.
pub fn service_account_spiffe(trust_domain: &str, namespace: &str, name: &str) -> String {
    format!("spiffe://{trust_domain}/ns/{namespace}/sa/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_hosts() {
        assert_eq!(canonical_host("Blocked.Example."), "blocked.example");
        assert_eq!(canonical_host("blocked.example.:8443"), "blocked.example");
        assert_eq!(canonical_host("blocked.example:8443"), "blocked.example");
        assert_eq!(canonical_host("blocked.example.."), "blocked.example.");
        assert_eq!(canonical_host("[::1]:443"), "[::1]");
        assert_eq!(canonical_host(""), "");
    }

    #[test]
    fn wildcards_need_a_label() {
        assert!(host_matches("*.a.com", "x.a.com"));
        assert!(host_matches("*.a.com", "x.y.a.com"));
        assert!(!host_matches("*.a.com", "a.com"));
        assert!(!host_matches("*.a.com", ".a.com"));
        assert!(!host_matches("*.a.com", "x..a.com"));
        assert!(!host_matches("*.a.com", "xa.com"));
        assert!(host_matches("a.com", "a.com"));
        assert!(!host_matches("a.com", "x.a.com"));
        assert!(host_matches(
            &canonical_pattern("*.A.com."),
            &canonical_host("X.a.COM.")
        ));
    }

    #[test]
    fn host_pattern_specificity() {
        let exact = HostPattern::new("A.b.com.");
        let long = HostPattern::new("*.b.com");
        let short = HostPattern::new("*.com");
        assert!(exact.matches("a.b.com") && long.matches("a.b.com") && short.matches("a.b.com"));
        assert!(exact.specificity() > long.specificity());
        assert!(long.specificity() > short.specificity());
    }

    #[test]
    fn path_prefix_is_by_segment() {
        for (prefix, path) in [
            ("/", "/anything"),
            ("/mcp", "/mcp"),
            ("/mcp", "/mcp/"),
            ("/mcp", "/mcp/x"),
            ("/mcp/", "/mcp"),
            ("/mcp/", "/mcp/x"),
            ("", "/x"),
        ] {
            assert!(path_prefix_matches(prefix, path), "{prefix} {path}");
        }
        for (prefix, path) in [
            ("/mcp", "/mcpx"),
            ("/mcp", "/"),
            ("/a/b", "/a"),
            ("/mcp", ""),
        ] {
            assert!(!path_prefix_matches(prefix, path), "{prefix} {path}");
        }
    }

    #[test]
    fn regex_matches_the_whole_value() {
        let r = full_regex("a|b").unwrap();
        assert!(r.is_match("a") && r.is_match("b"));
        assert!(!r.is_match("ab") && !r.is_match("xa"));
        assert!(full_regex("(").is_err());
    }

    #[test]
    fn service_account_ids() {
        assert_eq!(
            service_account_spiffe(DEFAULT_TRUST_DOMAIN, "ns1", "agent"),
            "spiffe://cluster.local/ns/ns1/sa/agent"
        );
    }
}
