//! Names with one definition each: DNS names, hostnames and SPIFFE IDs. Bundle validation and
//! the filter call the functions; the Kubernetes CRDs carry the `*_PATTERN` regexes beside them
//! (a test keeps each pair in agreement).

/// The Gateway API's `Hostname` pattern. [`is_hostname`] also limits a label to 63 bytes and
/// the name to 253, which the CRD states as `maxLength` (or not at all, for labels).
pub const HOSTNAME_PATTERN: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// The pattern of [`is_spiffe_id`].
pub const SPIFFE_ID_PATTERN: &str = r"^spiffe://[a-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$";

/// A DNS label (RFC 1123): 1-63 of `[a-z0-9-]`, not starting or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

/// A DNS subdomain (RFC 1123): dot-separated labels, at most 253 bytes.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A Gateway API hostname: a DNS subdomain, optionally prefixed by `*.`.
pub fn is_hostname(s: &str) -> bool {
    let rest = s.strip_prefix("*.").unwrap_or(s);
    is_dns_subdomain(rest)
}

/// A SPIFFE trust domain: `[a-z0-9._-]+`.
pub fn is_trust_domain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'_')
        })
}

/// [`SPIFFE_ID_PATTERN`]: `spiffe://`, a trust domain, then non-empty path segments.
pub fn is_spiffe_id(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("spiffe://") else {
        return false;
    };
    let mut parts = rest.split('/');
    let domain_ok = parts.next().is_some_and(is_trust_domain);
    domain_ok
        && parts.all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agree(pattern: &str, rule: fn(&str) -> bool, cases: &[&str]) {
        let re = regex_lite::Regex::new(pattern).unwrap();
        for case in cases {
            assert_eq!(re.is_match(case), rule(case), "{case:?}");
        }
    }

    #[test]
    fn the_hostname_pattern_is_the_rule() {
        let cases = [
            "a",
            "example.com",
            "*.example.com",
            "a-b.c0",
            "0.0",
            "",
            "*",
            "*.",
            "*.*.a",
            "a.*.b",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            "A.com",
            "a_b",
            "é.com",
            "a b",
            "a*",
            "*a.com",
        ];
        agree(HOSTNAME_PATTERN, is_hostname, &cases);
        assert!(is_hostname("*.example.com") && is_hostname("a-b.c0"));
        // The lengths the pattern leaves to `maxLength`: the rule checks them itself.
        let label = "a".repeat(64);
        assert!(!is_hostname(&label) && is_hostname(&label[1..]));
        let long = vec!["a".repeat(63); 4].join(".");
        assert!(!is_hostname(&long) && is_hostname(&long[2..]));
    }

    #[test]
    fn the_spiffe_pattern_is_the_rule() {
        let cases = [
            "spiffe://example.org",
            "spiffe://example.org/ns/a/sa/b",
            "spiffe://a_b.-c/X.y_z-9",
            "spiffe://",
            "spiffe:///a",
            "spiffe://a/",
            "spiffe://a//b",
            "spiffe://A.org/x",
            "spiffe://a/b c",
            "spiffe://a/é",
            "spiffe://a:8080/x",
            "SPIFFE://a/b",
            "https://a/b",
            "",
        ];
        agree(SPIFFE_ID_PATTERN, is_spiffe_id, &cases);
        assert!(is_spiffe_id("spiffe://example.org/ns/a/sa/b"));
    }
}
