//! How a request ended ([`Outcome`]), and its JSON: the decision log line and filter state.

use mcp_access_bundle::Level;

use crate::answer::Why;
use crate::jsonw::{push_int, push_opt_str, push_str};

/// How the request ended, for stats, logs and filter state.
///
/// Its JSON ([`Outcome::to_json`]) has the keys `backend`, `caller`, `decision` (`allow` or
/// `deny`), `jwt`, `level`, `listener`, `method`, `name`, `origin`, `policy`, `reason`, `rule`,
/// `status`;
/// absent values are `null`. `caller` is the SPIFFE ID when the certificate (or trusted header)
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
        push_int(&mut out, i64::from(self.cel_errors.0));
        out.push_str(",\"decision\":");
        push_str(&mut out, if self.allowed { "allow" } else { "deny" });
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
            Some(s) => push_int(&mut out, i64::from(s)),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
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
        };
        for o in [full, empty] {
            assert_eq!(o.to_json(), as_value_map(&o));
        }
    }
}
