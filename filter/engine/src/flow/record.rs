//! What a decision record keeps of the request (docs/semantics.md §3.9): its canonical
//! attributes, enough for `mcp-access replay` to decide it again under other policies, and
//! never a credential. Written as JSON straight from the request (this runs for every
//! request: nothing is copied first).

use mcp_access_bundle::mcp_methods::Revision;

use crate::canonical_json::{name_sorts_alike, scalar_is_canonical, serde_text_is_canonical};
use crate::jsonw::{push_int, push_opt_str, push_str};
use crate::policy::Engine;
use crate::request::{ClaimValue, Request};

/// The record of `req`, decided under `revision`: the decision's `request` object.
pub(super) fn recorded(engine: &Engine, req: &Request, revision: Revision) -> RecordedRequest {
    let mut out = String::with_capacity(160);
    let what = What {
        headers: &engine.recorded_headers,
        arguments: engine.settings.decision_records.arguments,
        revision: revision.as_str(),
        key: &engine.record_key,
        time: engine.cel_needs().time,
        unrecorded: &engine.unrecorded,
    };
    // Header names are member names too.
    let names = what.headers.iter().all(|h| name_sorts_alike(h));
    let canonical = write_record(&mut out, req, &what) && names;
    RecordedRequest {
        json: out,
        canonical,
    }
}

/// A record's `request` object as JSON, and whether that is its RFC 8785 canonical form
/// (crate::receipts::Unsealed): it is unless it holds a number JCS writes otherwise (a
/// fraction, an integer past 2^53 such as `time`) or a name JCS sorts otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub json: String,
    pub canonical: bool,
}

/// What a record holds beyond the request's canonical attributes.
struct What<'a> {
    /// The headers rules read.
    headers: &'a [String],
    /// Whether it holds the arguments.
    arguments: bool,
    /// The MCP revision the request was judged under.
    revision: &'a str,
    /// The key of credentials' digests.
    key: &'a [u8; 32],
    /// Whether it holds the request time (a CEL condition reads it).
    time: bool,
    /// The CEL attributes read that it does not hold.
    unrecorded: &'a [&'static str],
}

/// The `request` object: `arguments` (JSON, only with `decisionRecords.arguments`),
/// `credential_headers` (only when a rule reads a credential header the request has: name →
/// [keyed digests]), `headers` (the other headers the rules' header conditions read: name →
/// [copies]), `host` (canonical),
/// `jwt` (`iss`, `sub`, the claims JWT sources read), `method`, `path` (canonical), `port`,
/// `revision` (the MCP revision the request was judged under), `route`, `time` (only where a
/// CEL condition reads `request.time`: nanoseconds since the Unix epoch), `unrecorded` (only
/// where the decision read what it does not hold: the CEL names of attributes CEL conditions
/// read, and `jwts` where more than one token was verified); keys in order, as serde_json
/// writes a map. Whether what it wrote is canonical JSON ([`RecordedRequest`]).
fn write_record(out: &mut String, req: &Request, what: &What) -> bool {
    let (headers, arguments, key) = (what.headers, what.arguments, what.key);
    let mut canonical = true;
    out.push_str("{\"arguments\":");
    let recorded = req.params.as_ref().and_then(|p| p.get("arguments"));
    match recorded.filter(|_| arguments) {
        Some(a) => {
            canonical = serde_text_is_canonical(a);
            out.push_str(&a.to_string());
        }
        None => out.push_str("null"),
    }
    let credential = |h: &&String| mcp_access_bundle::http::is_credential(h);
    let present = |h: &&String| req.header_values(h).next().is_some();
    if headers.iter().filter(credential).any(|h| present(&h)) {
        // Rare: only where a rule reads a credential header.
        out.push_str(",\"credential_headers\":");
        let digest = |name: &str, v: &str| keyed_digest(key, name, v);
        write_headers(out, req, headers.iter().filter(credential), digest);
    }
    out.push_str(",\"headers\":");
    let plain = headers.iter().filter(|h| !credential(h));
    write_headers(out, req, plain, |_, v| v.to_string());
    out.push_str(",\"host\":");
    push_str(out, &req.host);
    out.push_str(",\"jwt\":");
    match req.caller.jwts.first() {
        None => out.push_str("null"),
        Some(j) => {
            let mut fields: Vec<(&str, Field)> = vec![("iss", Field::Text(&j.issuer))];
            if let Some(s) = &j.subject {
                fields.push(("sub", Field::Text(s)));
            }
            for (name, v) in &j.claims {
                if name != "iss" && name != "sub" {
                    fields.push((name.as_str(), Field::Claim(v)));
                }
            }
            crate::order::sort_by(&mut fields, |a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, k);
                out.push(':');
                canonical &= name_sorts_alike(k) && v.canonical();
                v.write(out);
            }
            out.push('}');
        }
    }
    out.push_str(",\"method\":");
    push_str(out, &req.method);
    out.push_str(",\"path\":");
    push_str(out, &req.canonical_path);
    out.push_str(",\"port\":");
    push_int(out, i64::from(req.port));
    out.push_str(",\"revision\":");
    push_str(out, what.revision);
    out.push_str(",\"route\":");
    push_opt_str(out, req.route_name.as_deref());
    if let Some(t) = req.time.filter(|_| what.time) {
        out.push_str(",\"time\":");
        push_int(out, t);
        // Nanoseconds since the epoch: past 2^53, which JCS writes as a double.
        canonical &= t.unsigned_abs() <= 1 << 53;
    }
    // Rules match any verified token; `jwt` holds the first only.
    let jwts = (req.caller.jwts.len() > 1).then_some(SECOND_JWT);
    if !what.unrecorded.is_empty() || jwts.is_some() {
        out.push_str(",\"unrecorded\":[");
        for (i, name) in what.unrecorded.iter().chain(&jwts).enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_str(out, name);
        }
        out.push(']');
    }
    out.push('}');
    canonical
}

/// What `unrecorded` names when more than one JWT was verified (`jwt` holds the first).
const SECOND_JWT: &str = "jwts";

/// `{name: [copies], ...}` of the request's copies of `names` (those it has), each copy as
/// `show` writes it.
fn write_headers<'a>(
    out: &mut String,
    req: &Request,
    names: impl Iterator<Item = &'a String>,
    show: impl Fn(&str, &str) -> String,
) {
    out.push('{');
    let mut first = true;
    // Sorted when the engine is compiled.
    for name in names {
        let mut copies = req.header_values(name).peekable();
        if copies.peek().is_none() {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        push_str(out, name);
        out.push_str(":[");
        for (j, v) in copies.enumerate() {
            if j > 0 {
                out.push(',');
            }
            push_str(out, &show(name, v));
        }
        out.push(']');
    }
    out.push('}');
}

/// A credential as a record holds it: `hmac-sha256:` and 32 hex digits of SHA-256 over the
/// engine's secret key, the header's name and the value (the same value reads the same
/// within one engine; neither the value nor a guess of it can be checked without the key).
fn keyed_digest(key: &[u8; 32], name: &str, value: &str) -> String {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    h.update(key);
    crate::keyhash::field(&mut h, name.as_bytes());
    crate::keyhash::field(&mut h, value.as_bytes());
    let digest: [u8; 32] = h.finalize().into();
    let mut out = String::with_capacity(44);
    out.push_str("hmac-sha256:");
    for b in digest.iter().take(16) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A member of the record's `jwt` object.
enum Field<'a> {
    Text(&'a str),
    Claim(&'a ClaimValue),
}

impl Field<'_> {
    /// Whether [`Field::write`] writes it as JCS does.
    fn canonical(&self) -> bool {
        match self {
            Field::Claim(ClaimValue::Other(json)) => scalar_is_canonical(json),
            _ => true,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Field::Text(s) => push_str(out, s),
            Field::Claim(ClaimValue::Str(s)) => push_str(out, s),
            Field::Claim(ClaimValue::Other(json)) => out.push_str(json),
            Field::Claim(ClaimValue::List(items)) => {
                out.push('[');
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    push_str(out, item);
                }
                out.push(']');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Headers;
    use crate::request::{Caller, JwtPrincipal};
    use serde_json::{json, Map, Value};

    /// The record as a `serde_json::Value` map of the same request.
    fn as_value_map(req: &Request, what: &What) -> String {
        let (headers, arguments, key) = (what.headers, what.arguments, what.key);
        let jwt = req.caller.jwts.first().map(|j| {
            let mut m = Map::new();
            m.insert("iss".into(), j.issuer.clone().into());
            if let Some(s) = &j.subject {
                m.insert("sub".into(), s.clone().into());
            }
            for (k, v) in j.claims.iter().filter(|(k, _)| k != "iss" && k != "sub") {
                let v = match v {
                    ClaimValue::Str(s) => s.clone().into(),
                    ClaimValue::List(l) => json!(l),
                    ClaimValue::Other(j) => serde_json::from_str(j).unwrap_or_default(),
                };
                m.insert(k.clone(), v);
            }
            m
        });
        let credentials: Map<String, Value> = headers
            .iter()
            .filter(|h| mcp_access_bundle::http::is_credential(h))
            .filter_map(|h| {
                let copies: Vec<String> = req
                    .header_values(h)
                    .map(|v| keyed_digest(key, h, v))
                    .collect();
                (!copies.is_empty()).then(|| (h.clone(), json!(copies)))
            })
            .collect();
        let headers: Map<String, Value> = headers
            .iter()
            .filter(|h| !mcp_access_bundle::http::is_credential(h))
            .filter_map(|h| {
                let copies: Vec<&str> = req.header_values(h).collect();
                (!copies.is_empty()).then(|| (h.clone(), json!(copies)))
            })
            .collect();
        let args = req.params.as_ref().and_then(|p| p.get("arguments"));
        let mut v = json!({
            "arguments": args.filter(|_| arguments),
            "headers": headers,
            "host": req.host,
            "jwt": jwt,
            "method": req.method,
            "path": req.canonical_path,
            "port": req.port,
            "revision": "2026-07-28",
            "route": req.route_name,
        });
        if !credentials.is_empty() {
            v["credential_headers"] = Value::Object(credentials);
        }
        if let Some(t) = req.time.filter(|_| what.time) {
            v["time"] = json!(t);
        }
        let mut unrecorded = what.unrecorded.to_vec();
        if req.caller.jwts.len() > 1 {
            unrecorded.push(SECOND_JWT);
        }
        if !unrecorded.is_empty() {
            v["unrecorded"] = json!(unrecorded);
        }
        v.to_string()
    }

    #[test]
    fn a_record_is_byte_for_byte_the_value_map() {
        let full = Request {
            method: "POST".into(),
            canonical_path: "/mcp/\"x".into(),
            host: "gw.example".into(),
            port: 8443,
            route_name: Some("ns/r/rule-0/match-0".into()),
            headers: Headers::from(vec![
                ("x-team", "blue"),
                ("authorization", "Bearer secret"),
                ("a-first", "1"),
                ("x-team", "r\ned"),
                ("x-api-key", "k-secret-1"),
            ]),
            caller: Caller {
                jwts: vec![JwtPrincipal {
                    issuer: "https://idp".into(),
                    subject: Some("u\"1".into()),
                    claims: vec![
                        (
                            "groups".into(),
                            ClaimValue::List(vec!["a".into(), "b\\".into()]),
                        ),
                        ("org.team".into(), ClaimValue::Str("blue".into())),
                        ("level".into(), ClaimValue::Other("3".into())),
                        ("admin".into(), ClaimValue::Other("true".into())),
                        ("sub".into(), ClaimValue::Str("u\"1".into())),
                    ],
                    ..JwtPrincipal::default()
                }],
                ..Caller::default()
            },
            params: Some(json!({"name": "t", "arguments": {"z": "é", "a": [1, {"b": null}]}})),
            time: Some(1_700_000_000_123_456_789),
            ..Request::default()
        };
        let headers = [
            "a-first".to_string(),
            "x-api-key".into(),
            "x-missing".into(),
            "x-team".into(),
        ];
        let key = [7u8; 32];
        let what = |arguments, time, unrecorded| What {
            headers: &headers,
            arguments,
            revision: "2026-07-28",
            key: &key,
            time,
            unrecorded,
        };
        // Two verified tokens: `jwt` holds the first, `unrecorded` says so.
        let mut two = full.clone();
        two.caller.jwts.push(JwtPrincipal {
            issuer: "https://other".into(),
            ..JwtPrincipal::default()
        });
        let cases = [
            (&two, what(false, false, &[])),
            (&two, what(true, true, &["request.time"][..])),
            (
                &full,
                what(true, true, &["request.headers", "jwt.claims"][..]),
            ),
            (&full, what(false, false, &[])),
            (&Request::default(), what(true, true, &[])),
        ];
        for (req, what) in &cases {
            let mut out = String::new();
            let canonical = write_record(&mut out, req, what);
            assert_eq!(out, as_value_map(req, what));
            // Said canonical exactly when it is: here, unless it holds `time` (past 2^53).
            let jcs = crate::canonical_json::canonicalize(out.as_bytes(), 64).unwrap();
            assert_eq!(canonical, jcs == out.as_bytes(), "{out}");
            assert_eq!(canonical, !(what.time && req.time.is_some()), "{out}");
            // The record type reads it whole and writes it back byte for byte.
            let typed: crate::flow::records::RequestRecord = serde_json::from_str(&out).unwrap();
            assert_eq!(serde_json::to_string(&typed).unwrap(), out);
        }
        let mut out = String::new();
        write_record(&mut out, &two, &what(false, false, &[]));
        assert!(out.ends_with(r#","unrecorded":["jwts"]}"#), "{out}");
        let mut out = String::new();
        write_record(&mut out, &full, &what(false, false, &[]));
        assert!(
            !out.contains("secret") && !out.contains("arguments\":{"),
            "{out}"
        );
        // The API key a rule reads is a keyed digest: the same value reads the same, another
        // key gives another digest.
        let v: Value = serde_json::from_str(&out).unwrap();
        let d = &v["credential_headers"]["x-api-key"][0];
        assert_eq!(d, &json!(keyed_digest(&key, "x-api-key", "k-secret-1")));
        assert_ne!(d, &json!(keyed_digest(&[8; 32], "x-api-key", "k-secret-1")));
        assert!(v["headers"].get("x-api-key").is_none());
    }

    #[test]
    fn a_record_is_said_canonical_only_when_it_is() {
        let headers = ["x-team".to_string()];
        let what = What {
            headers: &headers,
            arguments: true,
            revision: "2026-07-28",
            key: &[7; 32],
            time: false,
            unrecorded: &[],
        };
        let claim = |v: &str| Caller {
            jwts: vec![JwtPrincipal {
                issuer: "https://idp".into(),
                claims: vec![("n".into(), ClaimValue::Other(v.into()))],
                ..JwtPrincipal::default()
            }],
            ..Caller::default()
        };
        let cases = [
            (json!({"arguments": {"a": 1}}), Caller::default(), true),
            (json!({"arguments": {"a": 1.0}}), Caller::default(), false),
            (
                json!({"arguments": {"a": 1u64 << 60}}),
                Caller::default(),
                false,
            ),
            (
                json!({"arguments": {"\u{e000}": 1, "\u{1f600}": 2}}),
                Caller::default(),
                false,
            ),
            (
                json!({"arguments": {"é": "\u{1}"}}),
                Caller::default(),
                true,
            ),
            (json!({}), claim("7"), true),
            (json!({}), claim("1.5"), false),
            (json!({}), claim("true"), true),
        ];
        for (params, caller, expected) in cases {
            let req = Request {
                params: Some(params),
                caller,
                headers: Headers::from(vec![("x-team", "blue")]),
                ..Request::default()
            };
            let mut out = String::new();
            let canonical = write_record(&mut out, &req, &what);
            let jcs = crate::canonical_json::canonicalize(out.as_bytes(), 64).unwrap();
            assert_eq!(canonical, expected, "{out}");
            // Never said when it is not (false is safe: a fraction JCS writes alike too).
            assert!(!canonical || jcs == out.as_bytes(), "{out}");
        }
    }
}
