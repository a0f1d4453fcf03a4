//! Who is calling: SPIFFE IDs from the peer certificate or a trusted header, and verified JWT
//! claims as Envoy's `jwt_authn` filter left them in metadata.

use mcp_access_bundle::names::is_spiffe_id;
use mcp_access_bundle::{IdentitySettings, JwtProvider, SpiffeSource, TrustedHeaderFormat};

use crate::facts::{Fact, HostFacts};
use crate::pb::{self, Kind};
use crate::request::{Caller, ClaimValue, Headers, JwtPrincipal};

/// What the bundle reads of a verified JWT besides `iss` and `sub`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Wanted<'a> {
    /// Claims rules match, by their (possibly dotted) names.
    pub(crate) claims: &'a [String],
    /// Claims identity headers carry.
    pub(crate) texts: &'a [String],
    /// Claims authorizer caches key on, read as JSON whatever their shape.
    pub(crate) keyed: &'a [String],
    /// The whole payload (CEL's `jwt.claims`).
    pub(crate) payload: bool,
}

/// Who is calling, from the sources `id` trusts. `headers`: the request headers, names
/// lowercase. The SPIFFE ID comes from the one source configured: the trusted header (several
/// copies of it: ambiguous, no identity) or the peer certificate, whose URI SANs are counted
/// and checked against Envoy's first URI SAN. JWT principals (with what `wanted` names) come
/// from metadata, read only when providers are configured. `credential` is left false: see
/// [`other_credential`]. `tls` false: the listener has no TLS, so no peer certificate is read.
pub(crate) fn caller(
    id: &IdentitySettings,
    wanted: Wanted<'_>,
    headers: &Headers,
    facts: &dyn HostFacts,
    tls: bool,
) -> Caller {
    let spiffe = match (id.spiffe.source, &id.spiffe.header) {
        (SpiffeSource::TrustedHeader, Some(h)) => {
            let name = h.name.to_ascii_lowercase();
            let mut values = headers.iter().filter(|(n, _)| *n == name);
            match (values.next(), values.next()) {
                (Some((_, v)), None) => spiffe_from_header(v, h.format),
                _ => None,
            }
        }
        // Not a valid bundle: no source to trust.
        (SpiffeSource::TrustedHeader, None) => None,
        (SpiffeSource::PeerCertificate, _) if !tls => None,
        (SpiffeSource::PeerCertificate, _) => facts
            .read(Fact::PeerUriSan)
            .and_then(|san| spiffe_from_peer(&san, facts.read(Fact::PeerCertificate).as_deref())),
    };
    let jwts = if id.jwt.providers.is_empty() {
        Vec::new()
    } else {
        facts
            .read(Fact::Metadata)
            .map(|md| jwt_principals(&md, &id.jwt.providers, wanted))
            .unwrap_or_default()
    };
    Caller {
        spiffe,
        jwts,
        credential: false,
    }
}

/// Whether the request carries a credential that [`caller`] did not turn into an identity
/// (docs/semantics.md §5.6): an `Authorization` header (any scheme), the trusted identity
/// header, or a client certificate (`connection.mtls`; when Envoy does not say, one is
/// assumed, so the caller is not taken for anonymous; none on a listener without TLS).
pub(crate) fn other_credential(
    id: &IdentitySettings,
    headers: &Headers,
    facts: &dyn HostFacts,
    tls: bool,
) -> bool {
    let trusted = id
        .spiffe
        .header
        .as_ref()
        .map(|h| h.name.to_ascii_lowercase());
    headers
        .iter()
        .any(|(n, _)| n == "authorization" || Some(n) == trusted.as_deref())
        || (tls
            && facts
                .read(Fact::Mtls)
                .is_none_or(|b| b.iter().any(|x| *x != 0)))
}

/// The SPIFFE ID of the peer certificate: its only URI SAN (an X.509-SVID has exactly one).
/// `first_san` is Envoy's `connection.uri_san_peer_certificate`, which names only the first URI
/// SAN; `cert` is `connection.peer_certificate` (PEM), where the filter counts them. A second URI
/// SAN, an unreadable certificate, or a disagreement with Envoy's first SAN: no identity.
pub(crate) fn spiffe_from_peer(first_san: &[u8], cert: Option<&[u8]>) -> Option<String> {
    let first = std::str::from_utf8(first_san).ok()?;
    let sans = crate::x509::uri_sans(cert?).ok()?;
    match sans.as_slice() {
        [only] if only == first && is_spiffe_id(only) => Some(only.clone()),
        _ => None,
    }
}

/// The SPIFFE ID carried by a trusted header.
pub(crate) fn spiffe_from_header(value: &str, format: TrustedHeaderFormat) -> Option<String> {
    let id = match format {
        TrustedHeaderFormat::Plain => value.trim().to_string(),
        TrustedHeaderFormat::Xfcc => xfcc_uri(value)?,
    };
    is_spiffe_id(&id).then_some(id)
}

/// `URI=` of the last element of an `x-forwarded-client-cert` value (the closest client).
/// Envoy writes one `URI=` per URI SAN: an element with several has no identity.
fn xfcc_uri(value: &str) -> Option<String> {
    let elements = split_unquoted(value, ',');
    let last = elements.last()?;
    let mut uris = split_unquoted(last, ';').into_iter().filter_map(|pair| {
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
    });
    match (uris.next(), uris.next()) {
        (Some(uri), None) => Some(uri),
        _ => None,
    }
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
pub(crate) const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";

/// Verified JWT principals from the request's dynamic metadata (the serialized
/// `envoy.config.core.v3.Metadata` of the `metadata` property): the `jwt_authn` entry holds one
/// payload per provider, under the provider's `payload_in_metadata` key, with what `wanted`
/// names (a dotted name addresses a nested claim). Metadata that does not decode: no principals.
///
/// Only Envoy writes this metadata (a client cannot), from the payload it verified; a Struct
/// holds each key once. Were a key repeated on the wire anyway, the decoder keeps the last
/// entry, and the issuer check, the claims and the payload all read that one entry.
pub(crate) fn jwt_principals(
    metadata: &[u8],
    providers: &[JwtProvider],
    wanted: Wanted<'_>,
) -> Vec<JwtPrincipal> {
    let Some(jwt) = pb::filter_metadata(metadata, JWT_FILTER) else {
        return Vec::new();
    };
    providers
        .iter()
        .filter_map(|p| match jwt.fields.get(&p.metadata_key)?.kind.as_ref()? {
            Kind::Struct(payload) => principal(p, payload, wanted),
            _ => None,
        })
        .collect()
}

/// The principal `payload` makes for provider `p`; None unless its `iss` is the provider's
/// issuer (the payload must be the one this provider verifies).
fn principal(p: &JwtProvider, payload: &pb::Struct, wanted: Wanted<'_>) -> Option<JwtPrincipal> {
    let text = |name: &str| payload.fields.get(name).and_then(pb::Value::scalar_text);
    if text("iss").as_deref() != Some(p.issuer.as_str()) {
        return None;
    }
    let claims = wanted
        .claims
        .iter()
        .filter_map(|name| {
            let v = claim_at(payload, name)?;
            let value = match v.kind.as_ref()? {
                Kind::Str(s) => ClaimValue::Str(s.clone()),
                Kind::List(l) => {
                    ClaimValue::List(l.values.iter().filter_map(pb::Value::scalar_text).collect())
                }
                _ => ClaimValue::Other(v.scalar_text()?),
            };
            Some((name.clone(), value))
        })
        .collect();
    let texts = wanted
        .texts
        .iter()
        .filter_map(|name| {
            let v = claim_at(payload, name)?;
            let text = match v.kind.as_ref()? {
                Kind::Str(s) => s.clone(),
                _ => v.to_json().to_string(),
            };
            Some((name.clone(), text))
        })
        .collect();
    let keyed = wanted
        .keyed
        .iter()
        .filter_map(|name| Some((name.clone(), claim_at(payload, name)?.to_json().to_string())))
        .collect();
    Some(JwtPrincipal {
        issuer: p.issuer.clone(),
        subject: text("sub"),
        claims,
        keyed,
        payload: wanted.payload.then(|| payload.to_json()),
        texts,
    })
}

/// A verified JWT given as its claims (JSON object with `iss`, `sub`, ...), as `jwt_authn`
/// would have left it for a provider of `providers` (`explain --jwt-claims`): the claims go
/// through the filter's own reading of `jwt_authn`'s metadata.
pub(crate) fn principal_from_json(
    json: &serde_json::Value,
    providers: &[JwtProvider],
    wanted: Wanted<'_>,
) -> Result<JwtPrincipal, String> {
    let serde_json::Value::Object(obj) = json else {
        return Err("the JWT claims must be a JSON object".into());
    };
    let issuer = match obj.get("iss") {
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => return Err("the JWT claims need `iss` (a string)".into()),
    };
    let Some(provider) = providers.iter().find(|p| p.issuer == issuer) else {
        return Err(format!(
            "`iss` {issuer:?} is not an issuer in identity.jwt.providers: the filter would not see this token"
        ));
    };
    if obj.get("sub").is_some_and(|s| !s.is_string()) {
        return Err("`sub` must be a string".into());
    }
    let payload = pb::Struct::from_json(obj);
    principal(provider, &payload, wanted)
        .ok_or_else(|| format!("the claims do not make a principal of issuer {issuer:?}"))
}

/// The claim a possibly dotted name (`a.b`) addresses: `b` inside the object claim `a`.
fn claim_at<'p>(payload: &'p pb::Struct, name: &str) -> Option<&'p pb::Value> {
    let mut fields = payload;
    let mut parts = name.split('.').peekable();
    while let Some(part) = parts.next() {
        let v = fields.fields.get(part)?;
        if parts.peek().is_none() {
            return Some(v);
        }
        let Some(Kind::Struct(inner)) = &v.kind else {
            return None;
        };
        fields = inner;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::fake::{headers as h, FakeFacts};

    const ALPHA: &str = "spiffe://example.org/ns/a/sa/alpha";

    /// Self-signed, SAN: URI alpha.
    const ONE_URI: &str = "-----BEGIN CERTIFICATE-----
MIIBRjCB7KADAgECAgEBMAoGCCqGSM49BAMCMAwxCjAIBgNVBAMMAXQwHhcNMjYw
MTAxMDAwMDAwWhcNMzYwMTAxMDAwMDAwWjAMMQowCAYDVQQDDAF0MFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEx2CxG6FVlyPyDey3JGNAZ5gcS4PAdPISGy2VlZh/
t+GhhnkWJYfgL8gUuECpwo2JLGwtGp8+JeAJ7hDFdmpTsaM/MD0wDAYDVR0TAQH/
BAIwADAtBgNVHREEJjAkhiJzcGlmZmU6Ly9leGFtcGxlLm9yZy9ucy9hL3NhL2Fs
cGhhMAoGCCqGSM49BAMCA0kAMEYCIQDm0S5tUYkCGcnubceGamEc3l7C1HyEubH3
EG0BK4l9BQIhAOK4rvPf/16t1jDy2waJjuS45I8o74Ic1IoVfrTF9Tt4
-----END CERTIFICATE-----
";

    /// Self-signed, SAN: DNS a.example, URI alpha, URI beta.
    const TWO_URIS: &str = "-----BEGIN CERTIFICATE-----
MIIBdDCCARqgAwIBAgIBATAKBggqhkjOPQQDAjAMMQowCAYDVQQDDAF0MB4XDTI2
MDEwMTAwMDAwMFoXDTM2MDEwMTAwMDAwMFowDDEKMAgGA1UEAwwBdDBZMBMGByqG
SM49AgEGCCqGSM49AwEHA0IABMdgsRuhVZcj8g3styRjQGeYHEuDwHTyEhstlZWY
f7fhoYZ5FiWH4C/IFLhAqcKNiSxsLRqfPiXgCe4QxXZqU7GjbTBrMAwGA1UdEwEB
/wQCMAAwWwYDVR0RBFQwUoIJYS5leGFtcGxlhiJzcGlmZmU6Ly9leGFtcGxlLm9y
Zy9ucy9hL3NhL2FscGhhhiFzcGlmZmU6Ly9leGFtcGxlLm9yZy9ucy9hL3NhL2Jl
dGEwCgYIKoZIzj0EAwIDSAAwRQIhAKhbl6iWEi50CN0jpQdqWYrCfa51fRmtXCcJ
s1GQxvjJAiAmi19RJPY1ctmFICw41mMJO/MAZgywqv4iSdcHEXUvBQ==
-----END CERTIFICATE-----
";

    #[test]
    fn peer_identity_is_the_only_uri_san() {
        let one = ONE_URI.as_bytes();
        assert_eq!(
            spiffe_from_peer(ALPHA.as_bytes(), Some(one)).as_deref(),
            Some(ALPHA)
        );
        // Percent-encoded PEM (older Envoys) reads the same.
        let encoded = ONE_URI.replace('\n', "%0A").replace('+', "%2B");
        assert_eq!(
            spiffe_from_peer(ALPHA.as_bytes(), Some(encoded.as_bytes())).as_deref(),
            Some(ALPHA)
        );
        // Envoy names the first URI SAN, the certificate has two: no identity.
        assert_eq!(
            crate::x509::uri_sans(TWO_URIS.as_bytes()).map(|v| v.len()),
            Ok(2)
        );
        assert_eq!(
            spiffe_from_peer(ALPHA.as_bytes(), Some(TWO_URIS.as_bytes())),
            None
        );
        // No certificate to count in, a disagreement with Envoy, or garbage: no identity.
        assert_eq!(spiffe_from_peer(ALPHA.as_bytes(), None), None);
        assert_eq!(
            spiffe_from_peer(b"spiffe://example.org/ns/a/sa/beta", Some(one)),
            None
        );
        let damaged = ONE_URI.replace("MIIBRjCB", "MIIBRjCC");
        assert_eq!(
            spiffe_from_peer(ALPHA.as_bytes(), Some(damaged.as_bytes())),
            None
        );
        assert_eq!(spiffe_from_peer(b"\xff", Some(one)), None);
    }

    fn settings(v: serde_json::Value) -> IdentitySettings {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn caller_from_the_peer_certificate_is_cross_checked() {
        let id = settings(serde_json::json!({}));
        let facts = FakeFacts::default()
            .with(Fact::PeerUriSan, ALPHA)
            .with(Fact::PeerCertificate, ONE_URI);
        let c = caller(
            &id,
            Wanted::default(),
            &Headers::from(h(&[("x-spiffe", "spiffe://x/y")])),
            &facts,
            true,
        );
        assert_eq!(c.spiffe.as_deref(), Some(ALPHA));
        assert!(c.jwts.is_empty());
        // No providers: metadata is never read.
        assert_eq!(facts.reads(), [Fact::PeerUriSan, Fact::PeerCertificate]);
        // A second URI SAN, a disagreement with Envoy, no certificate: no identity.
        for facts in [
            FakeFacts::default()
                .with(Fact::PeerUriSan, ALPHA)
                .with(Fact::PeerCertificate, TWO_URIS),
            FakeFacts::default()
                .with(Fact::PeerUriSan, "spiffe://example.org/ns/a/sa/beta")
                .with(Fact::PeerCertificate, ONE_URI),
            FakeFacts::default().with(Fact::PeerUriSan, ALPHA),
        ] {
            assert_eq!(
                caller(&id, Wanted::default(), &Headers::new(), &facts, true).spiffe,
                None
            );
        }
        // No URI SAN: the certificate is not read at all.
        let none = FakeFacts::default().with(Fact::PeerCertificate, ONE_URI);
        assert_eq!(
            caller(&id, Wanted::default(), &Headers::new(), &none, true).spiffe,
            None
        );
        assert_eq!(none.reads(), [Fact::PeerUriSan]);
    }

    #[test]
    fn caller_from_a_trusted_header_needs_exactly_one_copy() {
        let id = settings(serde_json::json!({"spiffe": {"source": "TrustedHeader",
            "header": {"name": "X-Client-Spiffe", "format": "Plain"}}}));
        // The certificate is not a source here, whatever it says.
        let facts = FakeFacts::default()
            .with(Fact::PeerUriSan, "spiffe://example.org/ns/a/sa/beta")
            .with(Fact::PeerCertificate, ONE_URI);
        let one = h(&[("x-client-spiffe", ALPHA), ("other", "x")]);
        assert_eq!(
            caller(&id, Wanted::default(), &Headers::from(&one), &facts, true)
                .spiffe
                .as_deref(),
            Some(ALPHA)
        );
        assert!(facts.reads().is_empty());
        let two = h(&[("x-client-spiffe", ALPHA), ("x-client-spiffe", ALPHA)]);
        assert_eq!(
            caller(&id, Wanted::default(), &Headers::from(&two), &facts, true).spiffe,
            None
        );
        assert_eq!(
            caller(&id, Wanted::default(), &Headers::new(), &facts, true).spiffe,
            None
        );
        assert!(facts.reads().is_empty());
        // TrustedHeader without a header (a bundle validation refuses): no identity.
        let bare = settings(serde_json::json!({"spiffe": {"source": "TrustedHeader"}}));
        assert_eq!(
            caller(&bare, Wanted::default(), &Headers::from(&one), &facts, true).spiffe,
            None
        );
    }

    fn obj(fields: Vec<(&str, Kind)>) -> pb::Struct {
        pb::Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), pb::Value { kind: Some(v) }))
                .collect(),
        }
    }

    fn str(s: &str) -> Kind {
        Kind::Str(s.into())
    }

    /// A serialized Metadata whose `jwt_authn` entry holds `payloads` by metadata key.
    fn jwt_metadata(payloads: Vec<(&str, Kind)>) -> Vec<u8> {
        let md = pb::Metadata {
            filter_metadata: [(JWT_FILTER.to_string(), obj(payloads))].into(),
        };
        prost::Message::encode_to_vec(&md)
    }

    #[test]
    fn caller_jwts_come_from_metadata_when_providers_are_configured() {
        let id = settings(serde_json::json!({"jwt": {"providers": [
            {"issuer": "https://idp", "metadataKey": "jwt"}]}}));
        let payload = obj(vec![
            ("iss", str("https://idp")),
            ("sub", str("agent-7")),
            ("team", str("ops")),
        ]);
        let md = jwt_metadata(vec![("jwt", Kind::Struct(payload))]);
        let facts = FakeFacts::default().with(Fact::Metadata, md);
        let team = ["team".to_string()];
        let wanted = Wanted {
            claims: &team,
            ..Wanted::default()
        };
        let c = caller(&id, wanted, &Headers::new(), &facts, true);
        assert_eq!(c.spiffe, None);
        assert_eq!(c.jwts.len(), 1);
        assert_eq!(c.jwts[0].subject.as_deref(), Some("agent-7"));
        assert_eq!(
            c.jwts[0].claims,
            vec![("team".to_string(), ClaimValue::Str("ops".into()))]
        );
        assert_eq!(facts.reads(), [Fact::PeerUriSan, Fact::Metadata]);
        let empty = FakeFacts::default();
        assert!(
            caller(&id, Wanted::default(), &Headers::new(), &empty, true)
                .jwts
                .is_empty()
        );
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
        // Envoy writes one URI= per URI SAN: two in the closest element is no identity.
        let two = "Hash=abc;URI=spiffe://example.org/ns/x/sa/a;URI=spiffe://example.org/ns/x/sa/b";
        assert_eq!(spiffe_from_header(two, TrustedHeaderFormat::Xfcc), None);
        assert_eq!(
            spiffe_from_header(" spiffe://a/b ", TrustedHeaderFormat::Plain).as_deref(),
            Some("spiffe://a/b")
        );
        assert_eq!(
            spiffe_from_header("alice", TrustedHeaderFormat::Plain),
            None
        );
    }

    fn providers() -> Vec<JwtProvider> {
        vec![
            JwtProvider {
                issuer: "https://idp".into(),
                metadata_key: "jwt".into(),
            },
            JwtProvider {
                issuer: "https://idp2".into(),
                metadata_key: "other".into(),
            },
        ]
    }

    #[test]
    fn jwt_from_metadata() {
        let payload = obj(vec![
            ("iss", str("https://idp")),
            ("sub", str("agent-7")),
            (
                "groups",
                Kind::List(pb::ListValue {
                    values: vec![pb::Value {
                        kind: Some(str("ops")),
                    }],
                }),
            ),
            ("level", Kind::Number(3.0)),
            (
                "org",
                Kind::Struct(obj(vec![
                    ("team", str("blue")),
                    ("admin", Kind::Bool(true)),
                ])),
            ),
        ]);
        let forged = obj(vec![("iss", str("https://other"))]);
        let md = jwt_metadata(vec![
            ("jwt", Kind::Struct(payload)),
            ("other", Kind::Struct(forged)),
        ]);
        let wanted = vec![
            "groups".to_string(),
            "level".to_string(),
            "absent".to_string(),
            "org.team".to_string(),
            "org.admin".to_string(),
            "org.absent".to_string(),
            "level.x".to_string(),
        ];
        let p = jwt_principals(
            &md,
            &providers(),
            Wanted {
                claims: &wanted,
                ..Wanted::default()
            },
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].subject.as_deref(), Some("agent-7"));
        assert_eq!(
            p[0].claims,
            vec![
                ("groups".to_string(), ClaimValue::List(vec!["ops".into()])),
                ("level".to_string(), ClaimValue::Other("3".into())),
                ("org.team".to_string(), ClaimValue::Str("blue".into())),
                ("org.admin".to_string(), ClaimValue::Other("true".into())),
            ]
        );
        assert_eq!(p[0].payload, None);
        // Identity header texts: a string as it is, anything else as JSON.
        let texts = [
            "groups".to_string(),
            "org.team".to_string(),
            "level".to_string(),
            "absent".to_string(),
        ];
        let t = jwt_principals(
            &md,
            &providers(),
            Wanted {
                texts: &texts,
                ..Wanted::default()
            },
        );
        assert_eq!(
            t[0].texts,
            vec![
                ("groups".to_string(), "[\"ops\"]".to_string()),
                ("org.team".to_string(), "blue".to_string()),
                ("level".to_string(), "3".to_string()),
            ]
        );
        let kept = jwt_principals(
            &md,
            &providers(),
            Wanted {
                payload: true,
                ..Wanted::default()
            },
        );
        assert_eq!(
            kept[0].payload,
            Some(
                serde_json::json!({"iss": "https://idp", "sub": "agent-7", "groups": ["ops"],
                "level": 3, "org": {"team": "blue", "admin": true}})
            )
        );
        assert!(jwt_principals(
            b"\xff\xff",
            &providers(),
            Wanted {
                claims: &wanted,
                ..Wanted::default()
            }
        )
        .is_empty());
        // A payload that is not a Struct, or a truncated Metadata: no principal.
        let md = jwt_metadata(vec![("jwt", str("https://idp"))]);
        assert!(jwt_principals(
            &md,
            &providers(),
            Wanted {
                claims: &wanted,
                ..Wanted::default()
            }
        )
        .is_empty());
        let md = jwt_metadata(vec![(
            "jwt",
            Kind::Struct(obj(vec![("iss", str("https://idp"))])),
        )]);
        assert_eq!(
            jwt_principals(&md, &providers(), Wanted::default()).len(),
            1
        );
        for cut in 0..md.len() {
            assert!(jwt_principals(&md[..cut], &providers(), Wanted::default()).is_empty());
        }
    }

    /// A key repeated on the wire (Envoy never writes one): the issuer check, the claims and
    /// the payload all read the last entry, so no claim can come from a payload whose `iss`
    /// was not the one checked.
    #[test]
    fn a_repeated_key_is_read_once_everywhere() {
        // A Struct with the one entry `jwt` -> {iss, team}; two of them concatenated are one
        // Struct with two `jwt` entries.
        let entry = |iss: &str, team: &str| {
            let payload = obj(vec![("iss", str(iss)), ("team", str(team))]);
            prost::Message::encode_to_vec(&obj(vec![("jwt", Kind::Struct(payload))]))
        };
        // The Metadata whose jwt_authn entry is `jwt_struct`, as bytes.
        let metadata = |jwt_struct: Vec<u8>| {
            let (mut md, mut e) = (Vec::new(), Vec::new());
            prost::encoding::string::encode(1, &JWT_FILTER.to_string(), &mut e);
            prost::encoding::bytes::encode(2, &jwt_struct, &mut e);
            prost::encoding::bytes::encode(1, &e, &mut md);
            md
        };
        let team = ["team".to_string()];
        let forged_first =
            metadata([entry("https://evil", "admins"), entry("https://idp", "ops")].concat());
        let p = jwt_principals(
            &forged_first,
            &providers(),
            Wanted {
                claims: &team,
                payload: true,
                ..Wanted::default()
            },
        );
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].claims,
            vec![("team".to_string(), ClaimValue::Str("ops".into()))]
        );
        assert_eq!(
            p[0].payload,
            Some(serde_json::json!({"iss": "https://idp", "team": "ops"}))
        );
        // The other order: the last entry's issuer is not the provider's, so no principal.
        let forged_last =
            metadata([entry("https://idp", "ops"), entry("https://evil", "admins")].concat());
        assert!(jwt_principals(
            &forged_last,
            &providers(),
            Wanted {
                claims: &team,
                payload: true,
                ..Wanted::default()
            }
        )
        .is_empty());
    }

    #[test]
    fn explain_claims_take_the_metadata_path() {
        let claims = serde_json::json!({"iss": "https://idp", "sub": "agent-7", "level": 3,
            "org": {"team": "blue"}, "groups": ["a", 2, true, null]});
        let wanted = [
            "level".to_string(),
            "org.team".to_string(),
            "groups".to_string(),
        ];
        let p = principal_from_json(
            &claims,
            &providers(),
            Wanted {
                claims: &wanted,
                payload: true,
                ..Wanted::default()
            },
        )
        .unwrap();
        assert_eq!(p.subject.as_deref(), Some("agent-7"));
        assert_eq!(
            p.claims,
            vec![
                ("level".to_string(), ClaimValue::Other("3".into())),
                ("org.team".to_string(), ClaimValue::Str("blue".into())),
                (
                    "groups".to_string(),
                    ClaimValue::List(vec!["a".into(), "2".into(), "true".into()])
                ),
            ]
        );
        assert_eq!(p.payload, Some(claims));
        let err = |v: serde_json::Value| principal_from_json(&v, &providers(), Wanted::default());
        assert!(err(serde_json::json!([])).is_err());
        assert!(err(serde_json::json!({"sub": "x"})).is_err());
        assert!(err(serde_json::json!({"iss": "https://nobody"})).is_err());
        assert!(err(serde_json::json!({"iss": "https://idp", "sub": 7})).is_err());
    }
}
