//! How a request ended ([`Outcome`]), and its JSON: the decision log line and filter state.

use mcp_access_bundle::Level;

use crate::answer::Why;
use crate::policy::DryRunRecord;

/// How the request ended, for stats, logs and filter state.
///
/// Its JSON ([`Outcome::to_json`]) has the keys `backend`, `caller`, `cel_errors`, `decision`
/// (`allow` or `deny`), `dry_run`, `jwt`, `level`, `listener`, `method`, `name`, `origin`,
/// `policy`, `reason`, `rule`, `status`; absent values are `null`. `dry_run` (docs/semantics.md
/// §3.8) is an object with `decision`, `level`, `reason`, `policy`, `rule` of the dry-run
/// decision, `authorizers` (dry-run authorizer calls: `{policy, answer}`) and `not_called`. `caller` is the SPIFFE ID when the certificate (or trusted header)
/// identifies the caller, else `jwt:<iss>#<sub>` of its verified JWT, else `null`; `jwt` is
/// `<iss>#<sub>` of the verified JWT (with or without a SPIFFE ID), `<iss>` without a `sub`;
/// `cel_errors` is the number of CEL conditions that erred (0 without CEL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    pub level: Option<Level>,
    /// Why it ended so: its name is the log's `reason` (`allowed`, `not_allowed`,
    /// `invalid_json`, ...).
    pub reason: Why,
    pub policy: Option<String>,
    /// Where the deciding policy's rules came from, when the compiler derived them from a
    /// defaults/overrides block (e.g. `overrides (merge) of AccessPolicy ns/name`).
    pub origin: Option<String>,
    pub rule: Option<String>,
    pub status: Option<u16>,
    pub listener: Option<String>,
    pub backend: Option<String>,
    pub(crate) mcp_method: Option<String>,
    pub mcp_param: Option<String>,
    /// The SPIFFE ID, else `jwt:` and [`Outcome::jwt`].
    pub caller: Option<String>,
    /// `<iss>#<sub>` of the first verified JWT (in the bundle's provider order).
    pub jwt: Option<String>,
    /// CEL evaluations that erred (errors count against the caller), and of those the ones
    /// stopped by the step limit.
    pub cel_errors: (u32, u32),
    /// What dry-run policies would have changed, if anything.
    pub dry_run: Option<DryRunRecord>,
}

impl Outcome {
    /// One JSON object: the filter-state value and the decision log line.
    pub fn to_json(&self) -> String {
        // Written by hand: this runs for every request. Keys in alphabetical order and
        // serde_json's escaping, so the bytes are those of the `serde_json::Value` map the
        // document was first built as (a test compares the two).
        let mut out = String::with_capacity(256);
        out.push_str("{\"backend\":");
        push_opt_str(&mut out, self.backend.as_deref());
        out.push_str(",\"caller\":");
        push_opt_str(&mut out, self.caller.as_deref());
        out.push_str(",\"cel_errors\":");
        push_u32(&mut out, self.cel_errors.0);
        out.push_str(",\"decision\":");
        push_str(&mut out, if self.allowed { "allow" } else { "deny" });
        out.push_str(",\"dry_run\":");
        match &self.dry_run {
            // Rare: written with serde_json (its keys in the same order).
            Some(d) => out.push_str(&dry_run_json(d).to_string()),
            None => out.push_str("null"),
        }
        out.push_str(",\"jwt\":");
        push_opt_str(&mut out, self.jwt.as_deref());
        out.push_str(",\"level\":");
        push_str(&mut out, Level::name(self.level));
        out.push_str(",\"listener\":");
        push_opt_str(&mut out, self.listener.as_deref());
        out.push_str(",\"method\":");
        push_opt_str(&mut out, self.mcp_method.as_deref());
        out.push_str(",\"name\":");
        push_opt_str(&mut out, self.mcp_param.as_deref());
        out.push_str(",\"origin\":");
        push_opt_str(&mut out, self.origin.as_deref());
        out.push_str(",\"policy\":");
        push_opt_str(&mut out, self.policy.as_deref());
        out.push_str(",\"reason\":");
        push_str(&mut out, self.reason.as_str());
        out.push_str(",\"rule\":");
        push_opt_str(&mut out, self.rule.as_deref());
        out.push_str(",\"status\":");
        match self.status {
            Some(s) => push_u32(&mut out, u32::from(s)),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
}

/// The `dry_run` object of a decision.
pub(crate) fn dry_run_json(d: &DryRunRecord) -> serde_json::Value {
    let authorizers: Vec<serde_json::Value> = d
        .authorizers
        .iter()
        .map(|(policy, answer)| serde_json::json!({"policy": policy, "answer": answer}))
        .collect();
    serde_json::json!({
        "decision": if d.allowed { "allow" } else { "deny" },
        "level": d.level.map(|l| l.as_str()),
        "reason": match d.reason {
            Some(r) => Why::Denied(r).as_str(),
            None => Why::Allowed.as_str(),
        },
        "policy": d.policy,
        "rule": d.rule,
        "authorizers": authorizers,
        "not_called": d.not_called,
    })
}

fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// A number in decimal, without a temporary string.
fn push_u32(out: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    for &d in digits.get(at..).unwrap_or_default() {
        out.push(char::from(d));
    }
}

/// A JSON string literal, escaped as serde_json escapes: `"`, `\\` and control characters.
fn push_str(out: &mut String, s: &str) {
    // Most values need no escaping: one pass to check, one copy.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(s.get(start..i).unwrap_or_default());
        if esc.is_empty() {
            out.push_str(&format!("\\u{b:04x}"));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document as it was first defined (a `serde_json::Value` map).
    fn as_value_map(o: &Outcome) -> String {
        serde_json::json!({
            "decision": if o.allowed { "allow" } else { "deny" },
            "level": Level::name(o.level),
            "reason": o.reason.as_str(),
            "origin": o.origin,
            "policy": o.policy,
            "rule": o.rule,
            "status": o.status,
            "listener": o.listener,
            "backend": o.backend,
            "method": o.mcp_method,
            "name": o.mcp_param,
            "caller": o.caller,
            "jwt": o.jwt,
            "cel_errors": o.cel_errors.0,
            "dry_run": o.dry_run.as_ref().map(dry_run_json),
        })
        .to_string()
    }

    #[test]
    fn outcome_json_is_byte_for_byte_the_value_map() {
        let full = Outcome {
            allowed: false,
            level: Some(Level::Backend),
            reason: Why::Denied(crate::policy::Reason::DenyPolicy),
            policy: Some("ns/p\"q".into()),
            origin: Some("overrides (merge) of AccessPolicy ns/g".into()),
            rule: Some("r\u{1}\n\u{e9}\t\u{8}\u{c}\u{1f}\u{7f}\r".into()),
            status: Some(403),
            listener: Some("ns/gw/l".into()),
            backend: Some("ns/b".into()),
            mcp_method: Some("tools/call".into()),
            mcp_param: Some("</script>\\".into()),
            caller: Some("spiffe://example.org/ns/a/sa/b".into()),
            jwt: Some("https://idp.example/\u{2028}#u\"1".into()),
            cel_errors: (3, 1),
            dry_run: Some(DryRunRecord {
                changed: true,
                allowed: false,
                level: Some(Level::Gateway),
                reason: Some(crate::policy::Reason::NotAllowed),
                policy: Some("ns/dry\"run".into()),
                rule: None,
                authorizers: vec![("ns/a".into(), "deny 403".into())],
                not_called: vec!["ns/b".into()],
                counter: Some(0),
            }),
        };
        let empty = Outcome {
            allowed: true,
            level: None,
            reason: Why::Allowed,
            policy: None,
            origin: None,
            rule: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: None,
            mcp_param: None,
            caller: None,
            jwt: None,
            cel_errors: (0, 0),
            dry_run: None,
        };
        for o in [full, empty] {
            assert_eq!(o.to_json(), as_value_map(&o));
        }
    }

    #[test]
    fn numbers_are_written_as_decimal() {
        for n in [0, 7, 10, 403, 65_535, 1_000_000_000, u32::MAX] {
            let mut out = String::new();
            push_u32(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }
}
