//! Decision records read back (docs/semantics.md §3.9), by structure: what `mcp-access
//! replay` reads of Envoy's logs. Records are untrusted input: a value inside one can never
//! hide, split or forge one. The writer is [`super::Outcome::to_json`] behind [`LOG_PREFIX`].

use serde_json::Value;

/// The prefix of the filter's decision log line (its JSON object follows, to the end of the line).
pub const LOG_PREFIX: &str = "mcp-access decision ";

/// A line of a log that looks like a decision record but cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// `file:line` (`-` for standard input).
    pub at: String,
    pub why: String,
}

/// The decision records of one log, read by structure (records are untrusted input: a value
/// inside one, such as a tool name holding the prefix, can never hide, split or forge one):
/// - a line that is one JSON object is an access-log entry: its `filter_state` (the decision,
///   as a JSON string or object), or the decision itself when it has `decision`;
/// - any other line holding [`LOG_PREFIX`] is a decision log line: the first occurrence is the
///   filter's (the log's own prefix, timestamp and logger, comes before it, and the record's
///   values are JSON-escaped after it), and the rest of the line must be exactly one JSON object.
///
/// Lines are split on LF (a CR before it dropped); a line that is not UTF-8, or whose record
/// does not parse, is returned as [`Unreadable`] with its number, and the others are still read.
pub fn records(log: &[u8], name: &str) -> (Vec<Value>, Vec<Unreadable>) {
    let (written, mut bad) = written(log, name);
    let mut out = Vec::with_capacity(written.len());
    for w in written {
        match serde_json::from_str::<Value>(&w.text) {
            Ok(v) => out.push(v),
            Err(e) => bad.push(Unreadable {
                at: w.at,
                why: format!("the decision record does not parse: {e}"),
            }),
        }
    }
    (out, bad)
}

/// A decision record as the log holds it: where (`file:line`) and its JSON text, exactly as
/// written (what a receipt's digest is taken of: crate::receipts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub at: String,
    pub text: String,
}

/// The decision records of one log as [`records`] finds them, each as its text.
pub fn written(log: &[u8], name: &str) -> (Vec<Written>, Vec<Unreadable>) {
    let (mut out, mut bad) = (Vec::new(), Vec::new());
    for (i, raw) in log.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let at = || format!("{name}:{}", i + 1);
        let Ok(line) = std::str::from_utf8(raw) else {
            let looks = contains(raw, LOG_PREFIX.as_bytes()) || contains(raw, b"filter_state");
            if looks {
                let why = "not UTF-8".to_string();
                bad.push(Unreadable { at: at(), why });
            }
            continue;
        };
        match record_of(line.trim()) {
            Ok(Some(text)) => out.push(Written { at: at(), text }),
            Ok(None) => {}
            Err(why) => bad.push(Unreadable { at: at(), why }),
        }
    }
    (out, bad)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The record of one line, as text: None when the line holds none.
fn record_of(line: &str) -> Result<Option<String>, String> {
    if line.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            return match v.get("filter_state") {
                // An access-log entry of a request the filter did not decide.
                Some(Value::String(s)) if s.is_empty() || s == "-" => Ok(None),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(_)) => Ok(Some(s.clone())),
                    Ok(_) => Err("its filter_state is not a decision record: not an object".into()),
                    Err(e) => Err(format!("its filter_state is not a decision record: {e}")),
                },
                Some(o @ Value::Object(_)) => Ok(Some(o.to_string())),
                Some(_) => Ok(None),
                None if v.get("decision").is_some() => Ok(Some(line.to_string())),
                // Envoy's own log in JSON: the message is a string member.
                None => match v.as_object().and_then(|o| {
                    o.values()
                        .filter_map(Value::as_str)
                        .find(|s| s.contains(LOG_PREFIX))
                }) {
                    Some(message) => log_line(message),
                    None => Ok(None),
                },
            };
        }
    }
    log_line(line)
}

/// The record of a decision log line: after the first [`LOG_PREFIX`], exactly one JSON object.
fn log_line(line: &str) -> Result<Option<String>, String> {
    let Some(at) = line.find(LOG_PREFIX) else {
        return Ok(None);
    };
    let json = line
        .get(at + LOG_PREFIX.len()..)
        .unwrap_or_default()
        .trim_end();
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(_)) => Ok(Some(json.to_string())),
        Ok(_) => Err("the decision record is not a JSON object".into()),
        Err(e) => Err(format!("the decision record does not parse: {e}")),
    }
}

#[cfg(any(test, feature = "records"))]
pub use typed::{
    DecisionRecord, DryRunAuthorizer, DryRunRecordJson, LimitsJson, OmittedJson, RequestRecord,
    Verdict,
};

/// The decision record as a type: what [`super::Outcome::to_json`] writes (tests hold the
/// writer to it byte for byte) and what `mcp-access replay` reads. Feature `records` (the
/// filter writes by hand and needs none of this).
#[cfg(any(test, feature = "records"))]
mod typed {
    use std::collections::BTreeMap;
    use std::str::FromStr;

    use mcp_access_bundle::Level;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::{Map, Value};

    use crate::answer::Why;

    /// One decision record (the filter state `mcp_access.decision`, and the decision log
    /// line after [`super::LOG_PREFIX`]). Keys in this order; absent values are `null`, but
    /// `authz_cached` and `identity_headers_omitted` are left out when empty. Every field
    /// is optional on reading (a record of an older filter lacks some).
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DecisionRecord {
        /// The authorizers whose answers came from their policy's cache.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub authz_cached: Vec<String>,
        /// `namespace/name` of the backend Envoy routed to.
        pub backend: Option<String>,
        /// The SPIFFE ID, else `jwt:<iss>#<sub>` of the verified JWT.
        pub caller: Option<String>,
        /// CEL conditions that erred.
        pub cel_errors: u32,
        /// The record's chain: one per VM and plugin configuration (left out without receipts).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub chain: Option<String>,
        /// `allow` or `deny` (a record without one reads as `deny`).
        pub decision: Verdict,
        /// What dry-run policies decided, where one concerns the request.
        pub dry_run: Option<DryRunRecordJson>,
        /// Identity headers an allowed request went without, and why.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub identity_headers_omitted: Vec<OmittedJson>,
        /// `<iss>#<sub>` of the first verified JWT (`<iss>` without a `sub`).
        pub jwt: Option<String>,
        /// The level that denied (`gateway`, `backend`; `none`: before or outside them).
        #[serde(with = "level_or_none")]
        pub level: Option<Level>,
        /// The rate limits an allowed request was charged, and the one that refused it
        /// (absent: no limit selected it).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub limits: Option<LimitsJson>,
        /// `namespace/gateway/listener` the request arrived on.
        pub listener: Option<String>,
        /// The MCP method.
        pub method: Option<String>,
        /// The tool, prompt or resource it names.
        pub name: Option<String>,
        /// Where the deciding policy's rules came from (a defaults/overrides block).
        pub origin: Option<String>,
        /// `namespace/name` of the deciding policy (the one the user wrote).
        pub policy: Option<String>,
        /// `sha256:<hex>` of the chain's record before it (the configuration's for `seq` 1).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub prev: Option<String>,
        /// Why it ended so (`allowed`, `deny_policy`, `invalid_json`, ...).
        #[serde(with = "why")]
        pub reason: Option<Why>,
        /// The request's canonical attributes, once policies decided it (`null` before: a
        /// request refused before any policy; absent: a filter that does not record them).
        #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
        pub request: Option<Option<RequestRecord>>,
        /// The deciding rule.
        pub rule: Option<String>,
        /// Its place in the chain: 1, 2, 3 …
        #[serde(skip_serializing_if = "Option::is_none")]
        pub seq: Option<u64>,
        /// The HTTP status of a denial.
        pub status: Option<u16>,
    }

    /// The record's `limits` object (docs/semantics.md §8).
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct LimitsJson {
        /// `namespace/policy/limit` of each limit charged.
        pub charged: Vec<String>,
        /// The limit without room, if one refused.
        pub refused: Option<String>,
        /// Why the RateLimitService gave no usable answer, if it did not.
        #[serde(rename = "limiterFailed", skip_serializing_if = "Option::is_none")]
        pub limiter_failed: Option<String>,
    }

    /// A record's `decision`.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Verdict {
        Allow,
        #[default]
        Deny,
    }

    impl Verdict {
        pub fn of(allowed: bool) -> Self {
            if allowed {
                Verdict::Allow
            } else {
                Verdict::Deny
            }
        }

        /// `allow` or `deny`.
        pub fn as_str(self) -> &'static str {
            match self {
                Verdict::Allow => "allow",
                Verdict::Deny => "deny",
            }
        }
    }

    /// The record's `dry_run` object (docs/semantics.md §3.8).
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DryRunRecordJson {
        /// Dry-run authorizer calls and their answers.
        pub authorizers: Vec<DryRunAuthorizer>,
        /// The dry-run decision.
        pub decision: Verdict,
        /// The level it denies at, or where it admits what the enforced decision denied.
        #[serde(with = "level_or_null")]
        pub level: Option<Level>,
        /// Backend-level authorizers it would call, not called (the Gateway level denied).
        pub not_called: Vec<String>,
        pub policy: Option<String>,
        #[serde(with = "why")]
        pub reason: Option<Why>,
        pub rule: Option<String>,
    }

    /// A dry-run authorizer call: its policy, and its answer (`allow`, `deny 403`, `error: ...`).
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DryRunAuthorizer {
        pub answer: String,
        pub policy: String,
    }

    /// An identity header left out, and why.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct OmittedJson {
        pub name: String,
        pub reason: String,
    }

    /// The record's `request` object (flow/record.rs writes it; docs/semantics.md §3.9).
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct RequestRecord {
        /// `params.arguments`, only with `decisionRecords.arguments`.
        pub arguments: Option<Value>,
        /// Credential headers a rule reads: name → keyed digests of the copies.
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        pub credential_headers: BTreeMap<String, Vec<String>>,
        /// The other headers the rules' header conditions read: name → copies.
        pub headers: BTreeMap<String, Vec<String>>,
        /// Canonical host.
        pub host: String,
        /// `iss`, `sub` and the claims JWT sources read (by dotted name).
        pub jwt: Option<Map<String, Value>>,
        /// HTTP method.
        pub method: String,
        /// Canonical path.
        pub path: String,
        pub port: u16,
        /// The MCP revision the request was judged under (always written; absent from
        /// records of filters that predate it).
        pub revision: Option<String>,
        /// Envoy's route name.
        pub route: Option<String>,
        /// Nanoseconds since the Unix epoch, where a CEL condition reads `request.time`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub time: Option<i64>,
        /// What the decision read that the record does not hold (CEL attribute names, `jwts`).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub unrecorded: Vec<String>,
    }

    impl FromStr for Why {
        type Err = String;

        /// The reason of this name ([`Why::as_str`]).
        fn from_str(s: &str) -> Result<Why, String> {
            std::iter::once(Why::Allowed)
                .chain(Why::DENIALS)
                .find(|w| w.as_str() == s)
                .ok_or_else(|| format!("no reason is named {s:?}"))
        }
    }

    /// A member that is present (even `null`) reads as `Some`.
    fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }

    /// A reason by its name.
    mod why {
        use super::*;

        pub fn serialize<S: Serializer>(w: &Option<Why>, s: S) -> Result<S::Ok, S::Error> {
            w.map(Why::as_str).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Why>, D::Error> {
            let name = Option::<String>::deserialize(d)?;
            name.map(|n| n.parse().map_err(serde::de::Error::custom))
                .transpose()
        }
    }

    /// A level by its name, `none` for none ([`Level::name`]).
    mod level_or_none {
        use super::*;

        pub fn serialize<S: Serializer>(l: &Option<Level>, s: S) -> Result<S::Ok, S::Error> {
            Level::name(*l).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Level>, D::Error> {
            match Option::<String>::deserialize(d)?.as_deref() {
                None | Some("none") => Ok(None),
                Some(n) => level(n).map(Some).map_err(serde::de::Error::custom),
            }
        }
    }

    /// A level by its name, or `null`.
    mod level_or_null {
        use super::*;

        pub fn serialize<S: Serializer>(l: &Option<Level>, s: S) -> Result<S::Ok, S::Error> {
            l.map(Level::as_str).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Level>, D::Error> {
            let name = Option::<String>::deserialize(d)?;
            name.map(|n| level(&n).map_err(serde::de::Error::custom))
                .transpose()
        }
    }

    fn level(name: &str) -> Result<Level, String> {
        [Level::Gateway, Level::Backend]
            .into_iter()
            .find(|l| l.as_str() == name)
            .ok_or_else(|| format!("no level is named {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every key of `v` and of the objects inside it (arrays' items included), with its
    /// path (`request.headers` is not walked: its keys are header names).
    fn keys(v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m)
                if at != "request.headers"
                    && at != "request.credential_headers"
                    && at != "request.jwt" =>
            {
                for (k, v) in m {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    out.push(path.clone());
                    keys(v, &path, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| keys(i, at, out)),
            _ => {}
        }
    }

    #[test]
    fn the_readme_names_every_key_of_the_record() {
        let full: DecisionRecord = serde_json::from_value(json!({
            "authz_cached": ["a"], "backend": "ns/b", "caller": "spiffe://x", "cel_errors": 1,
            "decision": "deny", "identity_headers_omitted": [{"name": "x-user", "reason": "r"}],
            "dry_run": {"authorizers": [{"answer": "allow", "policy": "ns/p"}], "decision": "allow",
                        "level": "gateway", "not_called": ["ns/q"], "policy": "ns/p",
                        "reason": "allowed", "rule": "r"},
            "jwt": "i#s", "level": "backend", "limits": {"charged": ["ns/q/l"], "refused": "ns/q/l", "limiterFailed": "x"},
            "listener": "ns/gw/l", "method": "tools/call",
            "name": "echo", "origin": "o", "policy": "ns/p", "reason": "deny_policy",
            "request": {"arguments": {}, "credential_headers": {"authorization": ["d"]},
                        "headers": {"x": ["1"]}, "host": "h", "jwt": {"iss": "i"},
                        "method": "POST", "path": "/mcp", "port": 1, "revision": "r",
                        "route": "rt", "time": 1, "unrecorded": ["jwts"]},
            "rule": "r", "status": 403, "chain": "c", "seq": 1, "prev": "sha256:00"
        }))
        .unwrap();
        let mut all = Vec::new();
        keys(&serde_json::to_value(&full).unwrap(), "", &mut all);
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        let start = readme
            .find("The decision is one JSON object with the keys")
            .unwrap();
        let end = start + readme[start..].find("Field by field").unwrap();
        let section = &readme[start..end];
        for path in &all {
            let key = path.rsplit('.').next().unwrap();
            assert!(
                section.contains(&format!("`{key}`")),
                "README's decision keys lack `{key}` ({path})"
            );
        }
        // Each nested object's keys are listed beside it.
        for (object, key) in all.iter().filter_map(|p| p.rsplit_once('.')) {
            let at = section
                .find(&format!("`{}`", object.rsplit('.').next().unwrap()))
                .unwrap();
            assert!(
                section[at..].contains(&format!("`{key}`")),
                "`{key}` of `{object}`"
            );
        }
    }

    #[test]
    fn reasons_read_back_by_name() {
        use crate::answer::Why;
        for w in std::iter::once(Why::Allowed).chain(Why::DENIALS) {
            assert_eq!(w.as_str().parse::<Why>(), Ok(w));
        }
        assert!("nope".parse::<Why>().is_err());
    }
}
