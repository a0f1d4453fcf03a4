//! OAuth 2.0 Protected Resource Metadata (RFC 9728) of a listener: what MCP clients discover
//! the authorization server from (docs/semantics.md §5.6). One definition of the metadata
//! document, of where it is served and of the `WWW-Authenticate` challenge that points to it;
//! bundle validation, the filter and the Envoy renderings use these functions.

use fluent_uri::component::Host;
use fluent_uri::Uri;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Where the metadata of a resource is served, before the resource's path (RFC 9728 §3.1).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The protected resource metadata of a listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProtectedResource {
    /// The MCP server's canonical URI as clients see it (RFC 8707 resource indicator): an
    /// `https` URL (`http` only on a loopback host) without query or fragment, in normal form.
    pub resource: String,
    /// Issuer identifiers of the authorization servers that issue tokens for it (at least
    /// one): `https` URLs (`http` only on a loopback host) without query or fragment.
    pub authorization_servers: Vec<String>,
    /// Scopes clients may request (RFC 6749 scope tokens).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// A human-readable name of the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// A page with documentation for developers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_documentation: Option<String>,
}

impl ProtectedResource {
    /// The metadata document (RFC 9728 §2). Tokens are accepted only in the `Authorization`
    /// header, as the MCP authorization specification requires.
    pub fn document(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if let Some(obj) = doc.as_object_mut() {
            if !self.scopes_supported.is_empty() {
                obj.insert("scopes_supported".into(), json!(self.scopes_supported));
            }
            if let Some(n) = &self.resource_name {
                obj.insert("resource_name".into(), json!(n));
            }
            if let Some(d) = &self.resource_documentation {
                obj.insert("resource_documentation".into(), json!(d));
            }
        }
        doc
    }

    /// The URL of the metadata (RFC 9728 §3.1): [`WELL_KNOWN`] inserted between the
    /// resource's authority and its path.
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.resource);
        format!("{origin}{}", well_known_path(path))
    }

    /// The paths the metadata is served at: the path-suffixed form of
    /// [`ProtectedResource::metadata_url`], and [`WELL_KNOWN`] itself (where clients look
    /// when they have no URL), each once.
    pub fn metadata_paths(&self) -> Vec<String> {
        let (_, path) = split_origin(&self.resource);
        let mut paths = vec![well_known_path(path)];
        if !paths.iter().any(|p| p == WELL_KNOWN) {
            paths.push(WELL_KNOWN.to_string());
        }
        paths
    }

    /// The `WWW-Authenticate` value of a 401 to a caller who presented no credential
    /// (RFC 9728 §5.1). Validation keeps `"` and `\` out of the URL.
    pub fn challenge(&self) -> String {
        format!("Bearer resource_metadata=\"{}\"", self.metadata_url())
    }
}

/// `scheme://authority` and the rest of a resource URI (its path).
fn split_origin(resource: &str) -> (&str, &str) {
    let after_scheme = resource.find("://").map_or(0, |i| i + 3);
    let rest = resource.get(after_scheme..).unwrap_or_default();
    let at = after_scheme + rest.find('/').unwrap_or(rest.len());
    (
        resource.get(..at).unwrap_or(resource),
        resource.get(at..).unwrap_or_default(),
    )
}

/// [`WELL_KNOWN`] followed by a resource's path (none for `/`).
fn well_known_path(path: &str) -> String {
    if path.is_empty() || path == "/" {
        WELL_KNOWN.to_string()
    } else {
        format!("{WELL_KNOWN}{path}")
    }
}

/// What is wrong with a protected resource: (field relative to it, message), in field order.
/// `listener_host`: the listener's `hostname` (the resource's host must match it).
pub fn problems(p: &ProtectedResource, listener_host: Option<&str>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match check_url(&p.resource, Url::Resource) {
        Err(e) => out.push(("resource".into(), e)),
        Ok(host) => {
            if let Some(pattern) = listener_host {
                let host = crate::gateway_api::canonical_host(&host);
                if !crate::gateway_api::host_matches(&pattern.to_ascii_lowercase(), &host) {
                    out.push((
                        "resource".into(),
                        format!("its host {host} is not one the listener serves (hostname {pattern}): clients would fetch the metadata elsewhere"),
                    ));
                }
            }
        }
    }
    if p.authorization_servers.is_empty() {
        out.push((
            "authorizationServers".into(),
            "must name at least one authorization server (the MCP authorization specification requires one)".into(),
        ));
    }
    for (i, s) in p.authorization_servers.iter().enumerate() {
        let field = format!("authorizationServers[{i}]");
        if let Err(e) = check_url(s, Url::Issuer) {
            out.push((field, e));
        } else if p
            .authorization_servers
            .get(..i)
            .is_some_and(|a| a.contains(s))
        {
            out.push((field, "duplicate authorization server".into()));
        }
    }
    for (i, s) in p.scopes_supported.iter().enumerate() {
        let field = format!("scopesSupported[{i}]");
        if !is_scope_token(s) {
            out.push((field, "must be a scope token: one or more of the characters ! # to [ and ] to ~ (no space, quote or backslash)".into()));
        } else if p.scopes_supported.get(..i).is_some_and(|a| a.contains(s)) {
            out.push((field, "duplicate scope".into()));
        }
    }
    if let Some(n) = &p.resource_name {
        let ok = (1..=256).contains(&n.len()) && !n.chars().any(char::is_control);
        if !ok {
            out.push((
                "resourceName".into(),
                "must be 1 to 256 bytes without control characters".into(),
            ));
        }
    }
    if let Some(d) = &p.resource_documentation {
        if let Err(e) = check_url(d, Url::Page) {
            out.push(("resourceDocumentation".into(), e));
        }
    }
    out
}

/// What a URL of the metadata names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Url {
    /// The protected resource: also in normal form, with a path Envoy matches as written.
    Resource,
    /// An authorization server's issuer identifier (RFC 8414 §2).
    Issuer,
    /// A web page.
    Page,
}

/// Checks a URL of the metadata; returns its host.
fn check_url(s: &str, what: Url) -> Result<String, String> {
    let uri = Uri::parse(s).map_err(|e| format!("\"{s}\" is not a URL: {e}"))?;
    let scheme = uri.scheme().as_str();
    let auth = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| format!("\"{s}\" has no host"))?;
    let host = auth.host();
    let loopback = match auth.host_parsed() {
        Host::RegName(n) => n.as_str().eq_ignore_ascii_case("localhost"),
        Host::Ipv4 { .. } => host.starts_with("127."),
        Host::Ipv6 { .. } => host == "[::1]",
        _ => false,
    };
    match scheme {
        "https" => {}
        "http" if loopback => {}
        "http" => {
            return Err(format!(
                "\"{s}\" must use https (http only on a loopback host, for development)"
            ))
        }
        _ => return Err(format!("\"{s}\" must be an https URL")),
    }
    if auth.has_userinfo() {
        return Err(format!("\"{s}\" must not hold user information"));
    }
    if auth.port_to_u16().is_err() {
        return Err(format!(
            "\"{s}\" has a port that is not a number up to 65535"
        ));
    }
    if uri.fragment().is_some() {
        return Err(format!("\"{s}\" must not have a fragment"));
    }
    if what != Url::Page && uri.query().is_some() {
        return Err(format!("\"{s}\" must not have a query"));
    }
    if what == Url::Resource {
        let path = uri.path().as_str();
        if uri.normalize().as_str() != s {
            return Err(format!(
                "\"{s}\" is not in normal form (RFC 3986 §6.2.2): write it as \"{}\"",
                uri.normalize().as_str()
            ));
        }
        if path.contains('%') || path.contains("//") {
            return Err(format!(
                "\"{s}\": the path must hold no percent-encoding and no empty segment (Envoy serves the metadata at it, as written)"
            ));
        }
    }
    Ok(host.to_string())
}

/// An RFC 6749 §3.3 scope token: `1*( %x21 / %x23-5B / %x5D-7E )`.
fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(r: &str) -> ProtectedResource {
        ProtectedResource {
            resource: r.into(),
            authorization_servers: vec!["https://auth.example.com".into()],
            scopes_supported: vec![],
            resource_name: None,
            resource_documentation: None,
        }
    }

    #[test]
    fn metadata_url_inserts_the_well_known_path() {
        let cases = [
            (
                "https://mcp.example.com/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
            ),
            (
                "https://mcp.example.com/a/mcp/",
                "https://mcp.example.com/.well-known/oauth-protected-resource/a/mcp/",
            ),
            (
                "https://mcp.example.com",
                "https://mcp.example.com/.well-known/oauth-protected-resource",
            ),
            (
                "https://mcp.example.com/",
                "https://mcp.example.com/.well-known/oauth-protected-resource",
            ),
            (
                "http://127.0.0.1:8080/mcp",
                "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp",
            ),
        ];
        for (r, url) in cases {
            assert_eq!(resource(r).metadata_url(), url, "{r}");
        }
        assert_eq!(
            resource("https://h/mcp").metadata_paths(),
            ["/.well-known/oauth-protected-resource/mcp", WELL_KNOWN]
        );
        assert_eq!(resource("https://h/").metadata_paths(), [WELL_KNOWN]);
        assert_eq!(
            resource("https://h/mcp").challenge(),
            "Bearer resource_metadata=\"https://h/.well-known/oauth-protected-resource/mcp\""
        );
    }

    #[test]
    fn the_document_is_rfc_9728() {
        let mut p = resource("https://mcp.example.com/mcp");
        assert_eq!(
            p.document(),
            json!({"resource": "https://mcp.example.com/mcp",
                   "authorization_servers": ["https://auth.example.com"],
                   "bearer_methods_supported": ["header"]})
        );
        p.scopes_supported = vec!["mcp:tools".into()];
        p.resource_name = Some("Tools".into());
        p.resource_documentation = Some("https://docs.example.com/tools".into());
        let doc = p.document();
        assert_eq!(doc["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(doc["resource_name"], "Tools");
        assert_eq!(
            doc["resource_documentation"],
            "https://docs.example.com/tools"
        );
    }

    #[test]
    fn urls_are_checked_strictly() {
        let ok = [
            "https://mcp.example.com/mcp",
            "https://mcp.example.com",
            "https://mcp.example.com:8443/a/b/",
            "http://localhost:8080/mcp",
            "http://127.0.0.1:1/mcp",
            "http://[::1]:9/mcp",
        ];
        for r in ok {
            assert_eq!(problems(&resource(r), None), [], "{r}");
        }
        let bad = [
            ("http://mcp.example.com/mcp", "must use https"),
            ("ftp://mcp.example.com/mcp", "must be an https URL"),
            ("https://mcp.example.com/mcp#x", "fragment"),
            ("https://mcp.example.com/mcp?a=b", "query"),
            ("https://user@mcp.example.com/mcp", "user information"),
            ("https://MCP.example.com/mcp", "normal form"),
            ("https://mcp.example.com/a/../mcp", "normal form"),
            ("https://mcp.example.com:443/mcp", "normal form"),
            ("https://mcp.example.com/m%2Fcp", "percent-encoding"),
            ("https://mcp.example.com//mcp", "empty segment"),
            ("https://mcp.example.com/m\"cp", "not a URL"),
            ("https://mcp.example.com/m cp", "not a URL"),
            ("https:///mcp", "no host"),
            ("mcp", "not a URL"),
            ("https://mcp.example.com:99999/mcp", "port"),
            ("http://128.0.0.1/mcp", "must use https"),
            ("http://localhost.example.com/mcp", "must use https"),
        ];
        for (r, want) in bad {
            let got = problems(&resource(r), None);
            assert!(
                matches!(got.as_slice(), [(f, m)] if f == "resource" && m.contains(want)),
                "{r}: {got:?}"
            );
        }
    }

    #[test]
    fn the_other_fields_are_checked() {
        let mut p = resource("https://mcp.example.com/mcp");
        p.authorization_servers = vec![];
        p.scopes_supported = vec!["a b".into(), "ok".into(), "ok".into(), "q\"".into()];
        p.resource_name = Some("a\nb".into());
        p.resource_documentation = Some("http://docs.example.com".into());
        let fields: Vec<String> = problems(&p, None).into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            [
                "authorizationServers",
                "scopesSupported[0]",
                "scopesSupported[2]",
                "scopesSupported[3]",
                "resourceName",
                "resourceDocumentation"
            ]
        );
        p = resource("https://mcp.example.com/mcp");
        p.authorization_servers = vec![
            "https://a.example.com/tenant".into(),
            "https://a.example.com/tenant".into(),
            "https://b.example.com?x=1".into(),
        ];
        let got = problems(&p, None);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].1.contains("duplicate") && got[1].1.contains("query"));
        // Docs may have a query.
        p = resource("https://mcp.example.com/mcp");
        p.resource_documentation = Some("https://docs.example.com/?page=mcp".into());
        assert_eq!(problems(&p, None), []);
    }

    #[test]
    fn the_resource_host_is_one_the_listener_serves() {
        let p = resource("https://mcp.example.com/mcp");
        assert_eq!(problems(&p, Some("mcp.example.com")), []);
        assert_eq!(problems(&p, Some("*.example.com")), []);
        let got = problems(&p, Some("other.example.com"));
        assert!(
            matches!(got.as_slice(), [(f, m)] if f == "resource" && m.contains("hostname other.example.com")),
            "{got:?}"
        );
    }
}
