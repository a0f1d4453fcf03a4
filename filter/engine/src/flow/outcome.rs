//! How a request ended ([`Outcome`]), and its JSON: the decision log line and filter state.

use mcp_access_bundle::Level;

use crate::answer::Why;
use crate::canonical_json::serde_text_is_canonical;
use crate::jsonw::{push_int, push_opt_str, push_str};
use crate::policy::{DryRunNamed, DryRunRecord, Engine, Named, Omitted, RuleRef};
use crate::receipts::{Link, Unsealed};

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
    /// The deciding policy and rule: shown as `policy`, `rule` and `origin` (where the
    /// compiler derived the policy's rules from a defaults/overrides block, e.g.
    /// `overrides (merge) of AccessPolicy ns/name`) by [`Engine::named`].
    pub by: Option<RuleRef>,
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
    /// Whether an authorizer call failed (no usable answer), whatever its failure mode made
    /// of it: the check itself failed (`event.outcome: failure`).
    pub authorizer_failed: bool,
    /// The request's canonical attributes as JSON (flow/record.rs), once policies decided it.
    pub request: Option<super::record::RecordedRequest>,
    /// The authorizers whose answers came from their policy's cache (docs/semantics.md §3.10).
    pub authz_cached: Vec<String>,
    /// The identity headers of the backend an allowed request went without, and why
    /// (docs/semantics.md §5.7).
    pub identity_omitted: Vec<Omitted>,
    /// The rate limits charged, and the one that refused (docs/semantics.md §8).
    pub limits: crate::ratelimit::LimitsRecord,
}

/// The filter-state keys of [`Outcome::trace_tags`] (each readable as
/// `%FILTER_STATE(wasm.<key>:PLAIN)%`, e.g. in a tracing `custom_tags` `value`).
pub const TRACE_TAG_KEYS: [&str; 4] = [
    "mcp_access.security_rule.ruleset.name",
    "mcp_access.security_rule.name",
    "mcp_access.event.action",
    "mcp_access.event.outcome",
];

impl Outcome {
    /// The decision in the terms of kube-agentic-networking's tracing conventions (its
    /// proposal 0033): `security_rule.ruleset.name` (the deciding policy, `namespace/name`),
    /// `security_rule.name` (its rule; `default-deny` where a level's Allow policies admit
    /// nothing, `default-allow` where no Allow policy decides, the authorizer's policy name
    /// for its answer, the check's reason for a request refused before any policy),
    /// `event.action` (`allow` or `deny`) and `event.outcome` (`success`, or `failure` when an
    /// authorizer gave no usable answer, whatever its failure mode made of it). Values in
    /// the order of [`TRACE_TAG_KEYS`].
    pub fn trace_tags(&self, engine: &Engine) -> [String; 4] {
        use crate::policy::Reason;
        let named = engine.named(self.by);
        let rule = match (named.rule, self.reason) {
            (Some(r), _) => r.to_string(),
            (None, Why::Denied(Reason::NotAllowed)) => "default-deny".into(),
            (None, Why::Allowed) => "default-allow".into(),
            (None, Why::Denied(Reason::ExternalAuthDenied | Reason::AuthorizerFailed)) => named
                .policy
                .and_then(|p| p.rsplit('/').next())
                .unwrap_or("external-auth")
                .to_string(),
            (None, why) => why.as_str().to_string(),
        };
        [
            named.policy.unwrap_or_default().to_string(),
            rule,
            if self.allowed { "allow" } else { "deny" }.into(),
            if self.authorizer_failed {
                "failure"
            } else {
                "success"
            }
            .into(),
        ]
    }

    /// One JSON object: the filter-state value and the decision log line.
    pub fn to_json(&self, engine: &Engine) -> String {
        self.write_json(
            engine.named(self.by),
            self.dry_run_named(engine).as_ref(),
            None,
        )
        .text
    }

    /// [`Outcome::to_json`] with the record's place in its chain (`chain`, `prev`, `seq`:
    /// crate::receipts), and whether it is canonical JSON as written.
    pub fn to_json_linked(&self, engine: &Engine, link: Link<'_>) -> Unsealed {
        let dry = self.dry_run_named(engine);
        self.write_json(engine.named(self.by), dry.as_ref(), Some(link))
    }

    fn dry_run_named<'a>(&'a self, engine: &'a Engine) -> Option<DryRunNamed<'a>> {
        self.dry_run.as_ref().map(|d| d.named(engine))
    }

    /// [`Outcome::to_json`], with the deciding policy and rule named, the dry run's, and the
    /// record's link; whether it is canonical JSON as written: its own keys are in order and
    /// its values strings or small integers, so it is unless `request` or `dry_run` hold what
    /// JCS writes otherwise.
    fn write_json(
        &self,
        named: Named<'_>,
        dry: Option<&DryRunNamed<'_>>,
        link: Option<Link<'_>>,
    ) -> Unsealed {
        // Unsealed by hand: this runs for every request. Keys in alphabetical order and
        // serde_json's escaping, so the bytes are those of the `serde_json::Value` map the
        // document was first built as (a test compares the two).
        let request = self.request.as_ref();
        let mut canonical = request.is_none_or(|r| r.canonical);
        let mut out = String::with_capacity(320 + request.map_or(0, |r| r.json.len()));
        out.push('{');
        if !self.authz_cached.is_empty() {
            // Only when some answer was reused (most decisions have none).
            push_cached(&mut out, &self.authz_cached);
        }
        out.push_str("\"backend\":");
        push_opt_str(&mut out, self.backend.as_deref());
        out.push_str(",\"caller\":");
        push_opt_str(&mut out, self.caller.as_deref());
        out.push_str(",\"cel_errors\":");
        push_int(&mut out, i64::from(self.cel_errors.0));
        if let Some(l) = link {
            out.push_str(",\"chain\":");
            push_str(&mut out, l.chain);
        }
        out.push_str(",\"decision\":");
        push_str(&mut out, if self.allowed { "allow" } else { "deny" });
        out.push_str(",\"dry_run\":");
        match dry {
            // Rare: written with serde_json (its keys in the same order).
            Some(d) => {
                let v = dry_run_json(d);
                canonical &= serde_text_is_canonical(&v);
                out.push_str(&v.to_string());
            }
            None => out.push_str("null"),
        }
        if !self.identity_omitted.is_empty() {
            push_omitted(&mut out, &self.identity_omitted);
        }
        out.push_str(",\"jwt\":");
        push_opt_str(&mut out, self.jwt.as_deref());
        out.push_str(",\"level\":");
        push_str(&mut out, Level::name(self.level));
        if !self.limits.charged.is_empty() {
            crate::ratelimit::push_limits(&mut out, &self.limits);
        }
        out.push_str(",\"listener\":");
        push_opt_str(&mut out, self.listener.as_deref());
        out.push_str(",\"method\":");
        push_opt_str(&mut out, self.mcp_method.as_deref());
        out.push_str(",\"name\":");
        push_opt_str(&mut out, self.mcp_param.as_deref());
        out.push_str(",\"origin\":");
        push_opt_str(&mut out, named.origin);
        out.push_str(",\"policy\":");
        push_opt_str(&mut out, named.policy);
        if let Some(l) = link {
            out.push_str(",\"prev\":");
            push_str(&mut out, l.prev);
        }
        out.push_str(",\"reason\":");
        push_str(&mut out, self.reason.as_str());
        out.push_str(",\"request\":");
        // Already JSON.
        out.push_str(request.map_or("null", |r| &r.json));
        out.push_str(",\"rule\":");
        push_opt_str(&mut out, named.rule);
        if let Some(l) = link {
            out.push_str(",\"seq\":");
            push_int(&mut out, i64::try_from(l.seq).unwrap_or(i64::MAX));
            canonical &= l.seq <= 1 << 53;
        }
        out.push_str(",\"status\":");
        match self.status {
            Some(s) => push_int(&mut out, i64::from(s)),
            None => out.push_str("null"),
        }
        out.push('}');
        Unsealed {
            text: out,
            canonical,
        }
    }
}

/// `"authz_cached":[...],`. Authorizer names are DNS subdomain names (bundle validation):
/// nothing to escape. Out of line: rare, and kept out of every decision's code.
#[inline(never)]
fn push_cached(out: &mut String, names: &[String]) {
    out.push_str("\"authz_cached\":[");
    for (i, name) in names.iter().enumerate() {
        out.push_str(if i > 0 { ",\"" } else { "\"" });
        out.push_str(name);
        out.push('"');
    }
    out.push_str("],");
}

/// `,"identity_headers_omitted":[{"name":...,"reason":...},...]`. Rare: out of line.
#[inline(never)]
fn push_omitted(out: &mut String, omitted: &[Omitted]) {
    out.push_str(",\"identity_headers_omitted\":[");
    for (i, o) in omitted.iter().enumerate() {
        out.push_str(if i > 0 { ",{\"name\":" } else { "{\"name\":" });
        push_str(out, &o.name);
        out.push_str(",\"reason\":");
        push_str(out, o.reason);
        out.push('}');
    }
    out.push(']');
}

/// The `dry_run` object of a decision.
pub(crate) fn dry_run_json(n: &DryRunNamed<'_>) -> serde_json::Value {
    let d = n.record;
    let authorizers: Vec<serde_json::Value> = n
        .authorizers
        .iter()
        .map(|(policy, answer)| serde_json::json!({"policy": policy, "answer": answer.to_string()}))
        .collect();
    serde_json::json!({
        "decision": if d.allowed { "allow" } else { "deny" },
        "level": d.level.map(|l| l.as_str()),
        "reason": match d.reason {
            Some(r) => Why::Denied(r).as_str(),
            None => Why::Allowed.as_str(),
        },
        "policy": n.policy,
        "rule": n.rule,
        "authorizers": authorizers,
        "not_called": n.not_called,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::records::DecisionRecord;
    use crate::policy::CallAnswer;

    /// The document as it was first defined (a `serde_json::Value` map).
    fn as_value_map(
        o: &Outcome,
        named: Named<'_>,
        dry: Option<&DryRunNamed<'_>>,
        link: Option<Link<'_>>,
    ) -> String {
        let mut v = serde_json::json!({
            "decision": if o.allowed { "allow" } else { "deny" },
            "level": Level::name(o.level),
            "reason": o.reason.as_str(),
            "origin": named.origin,
            "policy": named.policy,
            "rule": named.rule,
            "status": o.status,
            "listener": o.listener,
            "backend": o.backend,
            "method": o.mcp_method,
            "name": o.mcp_param,
            "caller": o.caller,
            "jwt": o.jwt,
            "cel_errors": o.cel_errors.0,
            "dry_run": dry.map(dry_run_json),
            "request": o.request.as_ref().map(|r| {
                serde_json::from_str::<serde_json::Value>(&r.json).unwrap_or_default()
            }),
        });
        if let (Some(l), Some(m)) = (link, v.as_object_mut()) {
            m.insert("chain".into(), serde_json::json!(l.chain));
            m.insert("prev".into(), serde_json::json!(l.prev));
            m.insert("seq".into(), serde_json::json!(l.seq));
        }
        if !o.authz_cached.is_empty() {
            if let Some(m) = v.as_object_mut() {
                m.insert("authz_cached".into(), serde_json::json!(o.authz_cached));
            }
        }
        if !o.limits.charged.is_empty() {
            if let Some(m) = v.as_object_mut() {
                let l = &o.limits;
                m.insert(
                    "limits".into(),
                    serde_json::json!({"charged": l.charged, "refused": l.refused}),
                );
            }
        }
        if !o.identity_omitted.is_empty() {
            let omitted: Vec<_> = o
                .identity_omitted
                .iter()
                .map(|x| serde_json::json!({"name": x.name, "reason": x.reason}))
                .collect();
            if let Some(m) = v.as_object_mut() {
                m.insert(
                    "identity_headers_omitted".into(),
                    serde_json::json!(omitted),
                );
            }
        }
        v.to_string()
    }

    #[test]
    fn outcome_json_is_byte_for_byte_the_value_map() {
        let full = Outcome {
            allowed: false,
            level: Some(Level::Backend),
            reason: Why::Denied(crate::policy::Reason::DenyPolicy),
            by: Some(RuleRef {
                policy: 0,
                rule: Some(0),
            }),
            status: Some(403),
            listener: Some("ns/gw/l".into()),
            backend: Some("ns/b".into()),
            mcp_method: Some("tools/call".into()),
            mcp_param: Some("</script>\\".into()),
            caller: Some("spiffe://example.org/ns/a/sa/b".into()),
            jwt: Some("https://idp.example/\u{2028}#u\"1".into()),
            cel_errors: (3, 1),
            authorizer_failed: false,
            // As the flow writes it (flow/record.rs tests its writing).
            request: Some(super::super::record::RecordedRequest {
                json: r#"{"arguments":{"a":[1,{"b":null}]},"headers":{},"host":"gw.example","jwt":null,"method":"POST","path":"/mcp","port":8443,"revision":"2025-11-25","route":null}"#
                    .into(),
                canonical: true,
            }),
            dry_run: Some(DryRunRecord {
                changed: true,
                allowed: false,
                level: Some(Level::Gateway),
                reason: Some(crate::policy::Reason::NotAllowed),
                policy: Some(0),
                rule: None,
                authorizers: vec![(1, CallAnswer::Deny { status: 403 })],
                not_called: vec![2],
                counter: Some(0),
            }),
            authz_cached: vec!["ns.a".into(), "ns.b".into()],
            identity_omitted: vec![
                Omitted {
                    name: "x-user".into(),
                    reason: "has leading or trailing whitespace",
                },
                Omitted {
                    name: "x-team".into(),
                    reason: "no verified JWT",
                },
            ],
            limits: crate::ratelimit::LimitsRecord {
                charged: vec!["ns/q/a".into(), "ns/q/b\"".into()],
                refused: Some("ns/q/b\"".into()),
                ..Default::default()
            },
        };
        let empty = Outcome {
            allowed: true,
            level: None,
            reason: Why::Allowed,
            by: None,
            status: None,
            listener: None,
            backend: None,
            mcp_method: None,
            mcp_param: None,
            caller: None,
            jwt: None,
            cel_errors: (0, 0),
            dry_run: None,
            authorizer_failed: true,
            request: None,
            authz_cached: Vec::new(),
            identity_omitted: Vec::new(),
            limits: Default::default(),
        };
        let named = Named {
            policy: Some("ns/p\"q"),
            origin: Some("overrides (merge) of AccessPolicy ns/g"),
            rule: Some("r\u{1}\n\u{e9}\t\u{8}\u{c}\u{1f}\u{7f}\r"),
        };
        let answer = CallAnswer::Deny { status: 403 };
        let dry = full.dry_run.as_ref().map(|record| DryRunNamed {
            record,
            policy: Some("ns/dry\"run"),
            rule: None,
            authorizers: vec![("ns/a", &answer)],
            not_called: vec!["ns/b"],
        });
        let link = Link {
            chain: "0f1e",
            seq: 42,
            prev: "sha256:00ff",
        };
        // A request JCS writes otherwise (a fraction): the record is not canonical as written.
        let mut fraction = full.clone();
        fraction.request = Some(super::super::record::RecordedRequest {
            json: r#"{"arguments":{"a":1.0},"headers":{},"host":"gw.example","jwt":null,"method":"POST","path":"/mcp","port":8443,"revision":"2025-11-25","route":null}"#.into(),
            canonical: false,
        });
        for (o, named, dry, link) in [
            (&full, named, dry.as_ref(), Some(link)),
            (&full, named, dry.as_ref(), None),
            (&empty, Named::default(), None, None),
            (&empty, Named::default(), None, Some(link)),
            (&fraction, named, dry.as_ref(), Some(link)),
        ] {
            let written = o.write_json(named, dry, link);
            let json = written.text;
            assert_eq!(json, as_value_map(o, named, dry, link));
            // Canonical as written exactly when the request is (the rest of it always is).
            let canonical = crate::canonical_json::canonicalize(json.as_bytes(), 64).unwrap();
            assert_eq!(written.canonical, canonical == json.as_bytes());
            assert_eq!(written.canonical, !std::ptr::eq(o, &fraction));
            // The record type reads it whole and writes it back byte for byte.
            let record: DecisionRecord = serde_json::from_str(&json).unwrap();
            assert_eq!(serde_json::to_string(&record).unwrap(), json);
        }
    }
}
