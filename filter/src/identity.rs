//! Who is calling: SPIFFE IDs from the peer certificate or a trusted header, and verified JWT
//! claims as Envoy's `jwt_authn` filter left them in metadata.

use mcp_access_bundle::validate::is_spiffe_id;
use mcp_access_bundle::{JwtProvider, TrustedHeaderFormat};

use crate::protobuf::{filter_metadata, PValue};
use crate::request::{ClaimValue, JwtPrincipal};

/// The URI SAN Envoy reports for the peer certificate, if it is a SPIFFE ID.
pub fn spiffe_from_san(san: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(san).ok()?;
    is_spiffe_id(s).then(|| s.to_string())
}

/// The SPIFFE ID carried by a trusted header.
pub fn spiffe_from_header(value: &str, format: TrustedHeaderFormat) -> Option<String> {
    let id = match format {
        TrustedHeaderFormat::Plain => value.trim().to_string(),
        TrustedHeaderFormat::Xfcc => xfcc_uri(value)?,
    };
    is_spiffe_id(&id).then_some(id)
}

/// `URI=` of the last element of an `x-forwarded-client-cert` value (the closest client).
fn xfcc_uri(value: &str) -> Option<String> {
    let elements = split_unquoted(value, ',');
    let last = elements.last()?;
    split_unquoted(last, ';').into_iter().find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("uri") {
            return None;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .unwrap_or(v);
        Some(v.replace("\\\"", "\""))
    })
}

/// Splits on `sep` outside double quotes (a backslash escapes the next character).
fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut quoted, mut escaped, mut start) = (false, false, 0);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(s.get(start..i).unwrap_or_default());
            start = i + c.len_utf8();
        }
    }
    parts.push(s.get(start..).unwrap_or_default());
    parts
}

/// Filter metadata key of Envoy's JWT filter.
pub const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";

/// Verified JWT principals from the request's dynamic metadata (the serialized
/// `envoy.config.core.v3.Metadata` of the `metadata` property): the `jwt_authn` entry holds one
/// payload per provider, under the provider's `payload_in_metadata` key.
pub fn jwt_principals(
    metadata: &[u8],
    providers: &[JwtProvider],
    wanted: &[String],
) -> Vec<JwtPrincipal> {
    let Some(fields) = filter_metadata(metadata, JWT_FILTER) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in providers {
        let Some(PValue::Struct(payload)) = fields
            .iter()
            .find(|(k, _)| k == &p.metadata_key)
            .map(|(_, v)| v)
        else {
            continue;
        };
        let text = |name: &str| {
            payload
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.scalar_text())
        };
        // The payload must be the one this provider verifies.
        if text("iss").as_deref() != Some(p.issuer.as_str()) {
            continue;
        }
        let claims = wanted
            .iter()
            .filter_map(|name| {
                let (_, v) = payload.iter().find(|(k, _)| k == name)?;
                let value = match v {
                    PValue::Str(s) => ClaimValue::Str(s.clone()),
                    PValue::List(items) => {
                        ClaimValue::List(items.iter().filter_map(PValue::scalar_text).collect())
                    }
                    other => ClaimValue::Other(other.scalar_text()?),
                };
                Some((name.clone(), value))
            })
            .collect();
        out.push(JwtPrincipal {
            issuer: p.issuer.clone(),
            subject: text("sub"),
            claims,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn san() {
        assert_eq!(
            spiffe_from_san(b"spiffe://example.org/ns/a/sa/b").as_deref(),
            Some("spiffe://example.org/ns/a/sa/b")
        );
        assert_eq!(spiffe_from_san(b"https://example.org"), None);
        assert_eq!(spiffe_from_san(b"\xff"), None);
    }

    #[test]
    fn xfcc() {
        let v = r#"By=spiffe://gw;Hash=abc;URI=spiffe://example.org/ns/x/sa/old,By=spiffe://gw;Hash=def;Subject="CN=a,O=b";URI=spiffe://example.org/ns/x/sa/new"#;
        assert_eq!(
            spiffe_from_header(v, TrustedHeaderFormat::Xfcc).as_deref(),
            Some("spiffe://example.org/ns/x/sa/new")
        );
        assert_eq!(
            spiffe_from_header("Hash=abc", TrustedHeaderFormat::Xfcc),
            None
        );
        assert_eq!(
            spiffe_from_header(" spiffe://a/b ", TrustedHeaderFormat::Plain).as_deref(),
            Some("spiffe://a/b")
        );
        assert_eq!(
            spiffe_from_header("alice", TrustedHeaderFormat::Plain),
            None
        );
    }

    #[test]
    fn jwt_from_metadata() {
        use crate::protobuf::tests::enc_metadata;
        let payload = PValue::Struct(vec![
            ("iss".into(), PValue::Str("https://idp".into())),
            ("sub".into(), PValue::Str("agent-7".into())),
            (
                "groups".into(),
                PValue::List(vec![PValue::Str("ops".into())]),
            ),
            ("level".into(), PValue::Number(3.0)),
        ]);
        let forged = PValue::Struct(vec![("iss".into(), PValue::Str("https://other".into()))]);
        let md = enc_metadata(
            JWT_FILTER,
            &[("jwt".into(), payload), ("other".into(), forged)],
        );
        let providers = vec![
            JwtProvider {
                issuer: "https://idp".into(),
                metadata_key: "jwt".into(),
            },
            JwtProvider {
                issuer: "https://idp2".into(),
                metadata_key: "other".into(),
            },
        ];
        let wanted = vec![
            "groups".to_string(),
            "level".to_string(),
            "absent".to_string(),
        ];
        let p = jwt_principals(&md, &providers, &wanted);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].subject.as_deref(), Some("agent-7"));
        assert_eq!(
            p[0].claims,
            vec![
                ("groups".to_string(), ClaimValue::List(vec!["ops".into()])),
                ("level".to_string(), ClaimValue::Other("3".into())),
            ]
        );
        assert!(jwt_principals(b"\xff\xff", &providers, &wanted).is_empty());
    }
}
