//! Who is calling: SPIFFE IDs from the peer certificate or a trusted header, and verified JWT
//! claims as Envoy's `jwt_authn` filter left them in metadata.

use mcp_access_bundle::names::is_spiffe_id;
use mcp_access_bundle::{IdentitySettings, JwtProvider, SpiffeSource, TrustedHeaderFormat};

use crate::facts::{Fact, HostFacts};
use crate::protobuf::{filter_metadata, PValue};
use crate::request::{Caller, ClaimValue, JwtPrincipal};

/// What the bundle reads of a verified JWT besides `iss` and `sub`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Wanted<'a> {
    /// Claims rules match, by their (possibly dotted) names.
    pub(crate) claims: &'a [String],
    /// Claims identity headers carry.
    pub(crate) texts: &'a [String],
    /// The whole payload (CEL's `jwt.claims`).
    pub(crate) payload: bool,
}

/// Who is calling, from the sources `id` trusts. `headers`: the request headers, names
/// lowercase. The SPIFFE ID comes from the one source configured: the trusted header (several
/// copies of it: ambiguous, no identity) or the peer certificate, whose URI SANs are counted
/// and checked against Envoy's first URI SAN. JWT principals (with what `wanted` names) come
/// from metadata, read only when providers are configured. `credential` is left false: see
/// [`other_credential`].
pub(crate) fn caller(
    id: &IdentitySettings,
    wanted: Wanted<'_>,
    headers: &[(String, String)],
    facts: &dyn HostFacts,
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
/// assumed, so the caller is not taken for anonymous).
pub(crate) fn other_credential(
    id: &IdentitySettings,
    headers: &[(String, String)],
    facts: &dyn HostFacts,
) -> bool {
    let trusted = id
        .spiffe
        .header
        .as_ref()
        .map(|h| h.name.to_ascii_lowercase());
    headers
        .iter()
        .any(|(n, _)| n == "authorization" || Some(n) == trusted.as_ref())
        || facts
            .read(Fact::Mtls)
            .is_none_or(|b| b.iter().any(|x| *x != 0))
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
/// names (a dotted name addresses a nested claim).
pub(crate) fn jwt_principals(
    metadata: &[u8],
    providers: &[JwtProvider],
    wanted: Wanted<'_>,
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
            .claims
            .iter()
            .filter_map(|name| {
                let v = claim_at(payload, name)?;
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
        let texts = wanted
            .texts
            .iter()
            .filter_map(|name| {
                let text = match claim_at(payload, name)? {
                    PValue::Str(s) => s.clone(),
                    other => to_json(other, 0).to_string(),
                };
                header_text(name, text)
            })
            .collect();
        out.push(JwtPrincipal {
            issuer: p.issuer.clone(),
            subject: text("sub"),
            claims,
            payload: wanted.payload.then(|| fields_json(payload, 0)),
            texts,
        });
    }
    out
}

/// A verified JWT given as its claims (JSON object with `iss`, `sub`, ...), as `jwt_authn`
/// would have left it for a provider of `providers` (`explain --jwt-claims`).
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
    if !providers.iter().any(|p| p.issuer == issuer) {
        return Err(format!(
            "`iss` {issuer:?} is not an issuer in identity.jwt.providers: the filter would not see this token"
        ));
    }
    let subject = match obj.get("sub") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`sub` must be a string".into()),
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(_) | serde_json::Value::Bool(_) => Some(v.to_string()),
        _ => None,
    };
    let at = |name: &str| {
        let mut v = json;
        for part in name.split('.') {
            v = v.as_object()?.get(part)?;
        }
        Some(v)
    };
    let claims = wanted
        .claims
        .iter()
        .filter_map(|name| {
            let v = at(name)?;
            let value = match v {
                serde_json::Value::String(s) => ClaimValue::Str(s.clone()),
                serde_json::Value::Array(items) => {
                    ClaimValue::List(items.iter().filter_map(text).collect())
                }
                other => ClaimValue::Other(text(other)?),
            };
            Some((name.clone(), value))
        })
        .collect();
    let texts = wanted
        .texts
        .iter()
        .filter_map(|name| {
            let text = match at(name)? {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            header_text(name, text)
        })
        .collect();
    Ok(JwtPrincipal {
        issuer,
        subject,
        claims,
        payload: wanted.payload.then(|| json.clone()),
        texts,
    })
}

/// `(name, text)` when `text` can be a header value: no control character but HTAB, at most
/// [`MAX_VALUE_BYTES`](mcp_access_bundle::identity_headers::MAX_VALUE_BYTES) bytes.
fn header_text(name: &str, text: String) -> Option<(String, String)> {
    let fits = text.len() <= mcp_access_bundle::identity_headers::MAX_VALUE_BYTES
        && mcp_access_bundle::http::is_header_value(&text);
    fits.then(|| (name.to_string(), text))
}

/// The claim a possibly dotted name (`a.b`) addresses: `b` inside the object claim `a`.
fn claim_at<'p>(payload: &'p [(String, PValue)], name: &str) -> Option<&'p PValue> {
    let mut fields = payload;
    let mut parts = name.split('.').peekable();
    while let Some(part) = parts.next() {
        let (_, v) = fields.iter().find(|(k, _)| k == part)?;
        if parts.peek().is_none() {
            return Some(v);
        }
        let PValue::Struct(inner) = v else {
            return None;
        };
        fields = inner;
    }
    None
}

/// A `google.protobuf.Value` as JSON (integral numbers as integers). `depth`: the decoder
/// already bounds nesting; this only guards against a deeper value built elsewhere.
fn to_json(v: &PValue, depth: usize) -> serde_json::Value {
    use serde_json::Value as J;
    if depth > 64 {
        return J::Null;
    }
    match v {
        PValue::Null => J::Null,
        PValue::Bool(b) => J::Bool(*b),
        PValue::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => J::from(*n as i64),
        PValue::Number(n) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        PValue::Str(s) => J::String(s.clone()),
        PValue::List(items) => J::Array(items.iter().map(|x| to_json(x, depth + 1)).collect()),
        PValue::Struct(fields) => fields_json(fields, depth + 1),
    }
}

fn fields_json(fields: &[(String, PValue)], depth: usize) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .iter()
            .map(|(k, x)| (k.clone(), to_json(x, depth + 1)))
            .collect(),
    )
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
            &h(&[("x-spiffe", "spiffe://x/y")]),
            &facts,
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
            assert_eq!(caller(&id, Wanted::default(), &[], &facts).spiffe, None);
        }
        // No URI SAN: the certificate is not read at all.
        let none = FakeFacts::default().with(Fact::PeerCertificate, ONE_URI);
        assert_eq!(caller(&id, Wanted::default(), &[], &none).spiffe, None);
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
            caller(&id, Wanted::default(), &one, &facts)
                .spiffe
                .as_deref(),
            Some(ALPHA)
        );
        assert!(facts.reads().is_empty());
        let two = h(&[("x-client-spiffe", ALPHA), ("x-client-spiffe", ALPHA)]);
        assert_eq!(caller(&id, Wanted::default(), &two, &facts).spiffe, None);
        assert_eq!(caller(&id, Wanted::default(), &[], &facts).spiffe, None);
        assert!(facts.reads().is_empty());
        // TrustedHeader without a header (a bundle validation refuses): no identity.
        let bare = settings(serde_json::json!({"spiffe": {"source": "TrustedHeader"}}));
        assert_eq!(caller(&bare, Wanted::default(), &one, &facts).spiffe, None);
    }

    #[test]
    fn caller_jwts_come_from_metadata_when_providers_are_configured() {
        use crate::protobuf::tests::enc_metadata;
        let id = settings(serde_json::json!({"jwt": {"providers": [
            {"issuer": "https://idp", "metadataKey": "jwt"}]}}));
        let payload = PValue::Struct(vec![
            ("iss".into(), PValue::Str("https://idp".into())),
            ("sub".into(), PValue::Str("agent-7".into())),
            ("team".into(), PValue::Str("ops".into())),
        ]);
        let md = enc_metadata(JWT_FILTER, &[("jwt".into(), payload)]);
        let facts = FakeFacts::default().with(Fact::Metadata, md);
        let team = ["team".to_string()];
        let wanted = Wanted {
            claims: &team,
            ..Wanted::default()
        };
        let c = caller(&id, wanted, &[], &facts);
        assert_eq!(c.spiffe, None);
        assert_eq!(c.jwts.len(), 1);
        assert_eq!(c.jwts[0].subject.as_deref(), Some("agent-7"));
        assert_eq!(
            c.jwts[0].claims,
            vec![("team".to_string(), ClaimValue::Str("ops".into()))]
        );
        assert_eq!(facts.reads(), [Fact::PeerUriSan, Fact::Metadata]);
        let empty = FakeFacts::default();
        assert!(caller(&id, Wanted::default(), &[], &empty).jwts.is_empty());
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
            (
                "org".into(),
                PValue::Struct(vec![
                    ("team".into(), PValue::Str("blue".into())),
                    ("admin".into(), PValue::Bool(true)),
                ]),
            ),
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
            "org.team".to_string(),
            "org.admin".to_string(),
            "org.absent".to_string(),
            "level.x".to_string(),
        ];
        let texts = vec![
            "groups".to_string(),
            "org.team".to_string(),
            "level".to_string(),
            "absent".to_string(),
        ];
        let p = jwt_principals(
            &md,
            &providers,
            Wanted {
                claims: &wanted,
                texts: &texts,
                payload: false,
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
        assert_eq!(
            p[0].texts,
            vec![
                ("groups".to_string(), "[\"ops\"]".to_string()),
                ("org.team".to_string(), "blue".to_string()),
                ("level".to_string(), "3".to_string()),
            ]
        );
        let kept = jwt_principals(
            &md,
            &providers,
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
        let only_claims = Wanted {
            claims: &wanted,
            ..Wanted::default()
        };
        assert!(jwt_principals(b"\xff\xff", &providers, only_claims).is_empty());
    }
}
