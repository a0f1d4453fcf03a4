//! Canonical host names and hostname patterns, shared by the filter, the compiler and the CLI.
//!
//! A host is compared lower-cased, without its port and without one trailing dot
//! (`API.Example.com.:443` is `api.example.com`). A pattern is a hostname or `*.suffix`; the
//! wildcard stands for one or more non-empty labels, so `*.a.com` matches `x.a.com` and
//! `x.y.a.com` but neither `a.com` nor `.a.com`.

/// The host part of an `:authority` (`[v6]:port` handled), in canonical form.
pub fn canonical_host(authority: &str) -> String {
    let mut host = without_port(authority).to_ascii_lowercase();
    if host.ends_with('.') {
        host.pop();
    }
    host
}

/// Strips a `:port` suffix, handling `[v6]:port`.
pub fn without_port(authority: &str) -> &str {
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
pub fn canonical_pattern(pattern: &str) -> String {
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
}
