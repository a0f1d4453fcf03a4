//! JWT providers declared on the command line (`--jwt-provider`): the bundle's
//! `identity.jwt.providers` and Envoy's `jwt_authn` filter, which verifies tokens and leaves
//! their payloads in metadata for the filter.

use mcp_access_bundle as bundle;
use serde_json::{json, Value};

use crate::error::CliError;

const T: &str = "type.googleapis.com/";

/// Where a provider's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jwks {
    /// A local JWKS file (`local_jwks.filename`).
    File(String),
    /// An `https://` URI fetched by Envoy (`remote_jwks`).
    Remote {
        uri: String,
        host: String,
        port: u16,
    },
}

/// One `--jwt-provider NAME=issuer=...,jwks=...[,audience=...][,forward=true]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtProviderSpec {
    /// Provider name in `jwt_authn`, and the metadata key its payload is left under.
    pub name: String,
    pub issuer: String,
    pub jwks: Jwks,
    /// Accepted `aud` values (empty: any).
    pub audiences: Vec<String>,
    /// Keep the token in the request sent upstream (default: removed).
    pub forward: bool,
}

impl JwtProviderSpec {
    /// What the bundle needs to know of it: the issuer and the metadata key.
    pub fn bundle_provider(&self) -> bundle::JwtProvider {
        bundle::JwtProvider {
            issuer: self.issuer.clone(),
            metadata_key: self.name.clone(),
        }
    }

    /// The Envoy cluster that fetches a remote JWKS.
    pub fn jwks_cluster(&self) -> Option<String> {
        match &self.jwks {
            Jwks::Remote { .. } => Some(format!("jwks/{}", self.name)),
            Jwks::File(_) => None,
        }
    }
}

/// Parses the value of one `--jwt-provider`.
pub fn parse_provider(s: &str) -> Result<JwtProviderSpec, CliError> {
    let err = |m: String| format!("--jwt-provider `{s}`: {m}");
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| err("expected NAME=issuer=ISSUER,jwks=FILE|https://URI".into()))?;
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !name_ok {
        return Err(err(format!(
            "provider name `{name}`: use letters, digits, '-', '_' or '.'"
        ))
        .into());
    }
    let (mut issuer, mut jwks, mut audiences, mut forward) = (None, None, Vec::new(), None);
    for part in rest.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| err(format!("`{part}`: expected KEY=VALUE")))?;
        if v.is_empty() {
            return Err(err(format!("{k}: empty value")).into());
        }
        let dup = match k {
            "issuer" => issuer.replace(v.to_string()).is_some(),
            "jwks" => jwks.replace(v.to_string()).is_some(),
            "audience" | "audiences" => {
                audiences.push(v.to_string());
                false
            }
            "forward" => {
                let b = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(err(format!("forward={v}: expected true or false")).into()),
                };
                forward.replace(b).is_some()
            }
            other => {
                return Err(err(format!(
                    "unknown key `{other}` (issuer, jwks, audience, forward)"
                ))
                .into())
            }
        };
        if dup {
            return Err(err(format!("{k} given twice")).into());
        }
    }
    let issuer = issuer.ok_or_else(|| err("issuer=ISSUER is required".into()))?;
    let jwks = jwks.ok_or_else(|| err("jwks=FILE|https://URI is required".into()))?;
    let jwks = if let Some(rest) = jwks.strip_prefix("https://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| err(format!("jwks {jwks}: bad port")))?,
            ),
            None => (authority, 443),
        };
        if host.is_empty() {
            return Err(err(format!("jwks {jwks}: no host")).into());
        }
        Jwks::Remote {
            uri: jwks.clone(),
            host: host.to_string(),
            port,
        }
    } else if jwks.contains("://") {
        return Err(err(format!("jwks {jwks}: give a local file or an https:// URI")).into());
    } else {
        Jwks::File(jwks)
    };
    Ok(JwtProviderSpec {
        name: name.to_string(),
        issuer,
        jwks,
        audiences,
        forward: forward.unwrap_or(false),
    })
}

/// Parses every `--jwt-provider`; names and issuers must be unique.
pub fn parse_providers(list: &[String]) -> Result<Vec<JwtProviderSpec>, CliError> {
    let mut out: Vec<JwtProviderSpec> = Vec::new();
    for s in list {
        let p = parse_provider(s)?;
        if out.iter().any(|o| o.name == p.name) {
            return Err(format!("--jwt-provider: provider `{}` given twice", p.name).into());
        }
        if out.iter().any(|o| o.issuer == p.issuer) {
            return Err(format!(
                "--jwt-provider: issuer `{}` given by two providers",
                p.issuer
            )
            .into());
        }
        out.push(p);
    }
    Ok(out)
}

/// Envoy's `jwt_authn` filter for these providers (None without providers). A valid token
/// of any provider passes and its payload is left in metadata under the provider's name; a
/// token that no provider verifies is answered 401 by `jwt_authn`. A request without a token
/// passes on to the policies (a JWT source then does not match), unless `required`: then
/// `jwt_authn` answers it 401 with a `WWW-Authenticate: Bearer` challenge, as the MCP
/// authorization spec asks, and lets only CORS preflights (which carry no token) through.
/// `open_paths`: paths no token is verified on (where Envoy serves OAuth protected resource
/// metadata, which a client fetches before it has one).
pub fn envoy_filter(
    providers: &[JwtProviderSpec],
    required: bool,
    open_paths: &[String],
) -> Option<Value> {
    if providers.is_empty() {
        return None;
    }
    let mut provs = serde_json::Map::new();
    let mut alternatives = Vec::new();
    for p in providers {
        let mut cfg = json!({
            "issuer": p.issuer,
            "forward": p.forward,
            "payload_in_metadata": p.name,
        });
        if let Some(obj) = cfg.as_object_mut() {
            match &p.jwks {
                Jwks::File(f) => {
                    obj.insert("local_jwks".into(), json!({"filename": f}));
                }
                Jwks::Remote { uri, .. } => {
                    obj.insert(
                        "remote_jwks".into(),
                        json!({
                            "http_uri": {"uri": uri, "cluster": p.jwks_cluster(), "timeout": "5s"},
                            "cache_duration": "300s",
                            // Fetched when Envoy starts (and refreshed), not on the first request.
                            "async_fetch": {},
                        }),
                    );
                }
            }
            if !p.audiences.is_empty() {
                obj.insert("audiences".into(), json!(p.audiences));
            }
        }
        provs.insert(p.name.clone(), cfg);
        alternatives.push(json!({"provider_name": p.name}));
    }
    if !required {
        alternatives.push(json!({"allow_missing": {}}));
    }
    let requires = match alternatives.as_slice() {
        [one] => one.clone(),
        _ => json!({"requires_any": {"requirements": alternatives}}),
    };
    // The first rule that matches decides; one without `requires` verifies nothing.
    let mut rules: Vec<Value> = open_paths
        .iter()
        .map(|p| json!({"match": {"path": p}}))
        .collect();
    rules.push(json!({"match": {"prefix": "/"}, "requires": requires}));
    let mut cfg = json!({
        "@type": format!("{T}envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"),
        "providers": provs,
        "rules": rules,
    });
    if let (true, Some(obj)) = (required, cfg.as_object_mut()) {
        obj.insert("bypass_cors_preflight".into(), json!(true));
    }
    Some(json!({"name": "envoy.filters.http.jwt_authn", "typed_config": cfg}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_files_uris_audiences() {
        let p = parse_provider("idp=issuer=https://idp.example,jwks=/etc/jwks.json,audience=mcp,audience=b,forward=true").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name, "idp");
        assert_eq!(p.issuer, "https://idp.example");
        assert_eq!(p.jwks, Jwks::File("/etc/jwks.json".into()));
        assert_eq!(p.audiences, ["mcp", "b"]);
        assert!(p.forward);
        assert_eq!(p.bundle_provider().metadata_key, "idp");
        let r = parse_provider("r=issuer=i,jwks=https://keys.example:8443/jwks")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.jwks,
            Jwks::Remote {
                uri: "https://keys.example:8443/jwks".into(),
                host: "keys.example".into(),
                port: 8443
            }
        );
        assert!(!r.forward);
        assert_eq!(r.jwks_cluster().as_deref(), Some("jwks/r"));
    }

    #[test]
    fn refuses_bad_values() {
        for (s, want) in [
            ("idp", "expected NAME=issuer"),
            ("=issuer=i,jwks=f", "provider name"),
            ("idp=jwks=f", "issuer=ISSUER is required"),
            ("idp=issuer=i", "jwks=FILE"),
            ("idp=issuer=i,jwks=http://x/j", "local file or an https://"),
            ("idp=issuer=i,jwks=f,forward=yes", "expected true or false"),
            ("idp=issuer=i,jwks=f,colour=red", "unknown key `colour`"),
            ("idp=issuer=i,issuer=j,jwks=f", "issuer given twice"),
            ("idp=issuer=,jwks=f", "issuer: empty value"),
        ] {
            let e = parse_provider(s)
                .err()
                .map(|e| e.message)
                .unwrap_or_default();
            assert!(e.contains(want), "{s}: {e}");
        }
        let two = |a: &str, b: &str| parse_providers(&[a.into(), b.into()]).err();
        assert!(two("a=issuer=i,jwks=f", "a=issuer=j,jwks=f").is_some());
        assert!(two("a=issuer=i,jwks=f", "b=issuer=i,jwks=f").is_some());
    }

    #[test]
    fn envoy_filter_lets_missing_tokens_through_to_the_policies() {
        assert!(envoy_filter(&[], false, &[]).is_none());
        let p = parse_provider("idp=issuer=i,jwks=/k.json").unwrap_or_else(|e| panic!("{e}"));
        let f = envoy_filter(&[p], false, &[]).unwrap_or_default();
        let cfg = &f["typed_config"];
        assert_eq!(cfg["providers"]["idp"]["local_jwks"]["filename"], "/k.json");
        assert_eq!(cfg["providers"]["idp"]["payload_in_metadata"], "idp");
        assert_eq!(cfg["providers"]["idp"]["forward"], false);
        let req = &cfg["rules"][0]["requires"]["requires_any"]["requirements"];
        assert_eq!(req[0]["provider_name"], "idp");
        assert!(req[1]["allow_missing"].is_object());
        assert!(cfg.get("bypass_cors_preflight").is_none());
    }

    #[test]
    fn envoy_filter_can_require_a_token() {
        let a = parse_provider("a=issuer=i,jwks=/a.json").unwrap_or_else(|e| panic!("{e}"));
        let b = parse_provider("b=issuer=j,jwks=/b.json").unwrap_or_else(|e| panic!("{e}"));
        let one = envoy_filter(std::slice::from_ref(&a), true, &[]).unwrap_or_default();
        let cfg = &one["typed_config"];
        assert_eq!(cfg["rules"][0]["requires"], json!({"provider_name": "a"}));
        assert_eq!(cfg["bypass_cors_preflight"], true);
        let two = envoy_filter(&[a, b], true, &["/.well-known/x".into()]).unwrap_or_default();
        // An open path is matched first, and verifies nothing.
        assert_eq!(
            two["typed_config"]["rules"][0],
            json!({"match": {"path": "/.well-known/x"}})
        );
        assert_eq!(
            two["typed_config"]["rules"][1]["requires"],
            json!({"requires_any": {"requirements": [{"provider_name": "a"}, {"provider_name": "b"}]}})
        );
    }
}
