//! The access rules of XAccessPolicies (both API versions) and AccessPolicies: sources,
//! authorizations and `when` conditions as bundle rules.

use super::{opt, reason};
use crate::types::*;
use mcp_access_bundle as bundle;

/// Why a rule cannot be compiled: a status reason and a message naming the field.
pub(super) type Problem = (&'static str, String);

/// What compiling a rule reads besides the rule: the JWT providers its sources may name and
/// the CEL limits the bundle will carry.
pub(super) struct RuleCx<'a> {
    pub(super) providers: &'a [bundle::JwtProvider],
    pub(super) cel_limits: &'a bundle::CelLimits,
}

/// A CEL expression at field path `at`, checked by the filter's own checker (mcp-access-cel) under the limits
/// the filter will load it with.
pub(super) fn cel(
    at: &str,
    expression: &str,
    limits: &bundle::CelLimits,
) -> Result<String, Problem> {
    mcp_access_cel::check(expression, limits)
        .map(|()| expression.to_string())
        .map_err(|e| {
            let e = e.to_string();
            let hint = e
                .split_once("unknown variable `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(name, _)| super::did_you_mean(name, &mcp_access_cel::variable_names()))
                .unwrap_or_default();
            (
                reason::INVALID,
                format!("{at}: invalid CEL expression: {e}{hint}"),
            )
        })
}

/// The predicates of a `when` list at `at` (`spec` or `spec.rules[i]`), each checked.
pub(super) fn when(
    at: &str,
    w: Option<&Vec<WhenCondition>>,
    limits: &bundle::CelLimits,
) -> Result<Vec<String>, Problem> {
    w.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| {
            cel(
                &format!("{at}.when[{i}].predicate"),
                opt(&c.predicate),
                limits,
            )
        })
        .collect()
}

/// A rule's source; a JWT source's issuer must be one of `providers`.
pub(super) fn source_v(
    at: &str,
    s: Option<&RuleSource>,
    providers: &[bundle::JwtProvider],
) -> Result<Option<bundle::Source>, Problem> {
    let Some(s) = s else { return Ok(None) };
    if s.kind.as_deref() == Some("JWT") {
        return jwt_source(at, s, providers).map(Some);
    }
    let kind = match (s.kind.as_deref(), &s.spiffe, &s.service_account) {
        (Some("SPIFFE"), _, _) => bundle::SourceType::Spiffe,
        (Some(_), _, _) => bundle::SourceType::ServiceAccount,
        (None, Some(_), None) => bundle::SourceType::Spiffe,
        (None, None, Some(_)) => bundle::SourceType::ServiceAccount,
        (None, None, None) => return Ok(None),
        (None, Some(_), Some(_)) => {
            return Err((
                reason::INVALID,
                format!("{at}.source sets both spiffe and serviceAccount; set type to say which"),
            ));
        }
    };
    match kind {
        bundle::SourceType::Spiffe if s.service_account.is_some() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.serviceAccount is not allowed with type SPIFFE"),
            ));
        }
        bundle::SourceType::Spiffe if s.spiffe.is_none() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.spiffe is required with type SPIFFE"),
            ));
        }
        bundle::SourceType::ServiceAccount if s.spiffe.is_some() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.spiffe is not allowed with type ServiceAccount"),
            ));
        }
        bundle::SourceType::ServiceAccount if s.service_account.is_none() => {
            return Err((
                reason::INVALID,
                format!("{at}.source.serviceAccount is required with type ServiceAccount"),
            ));
        }
        _ => {}
    }
    Ok(Some(bundle::Source {
        kind,
        spiffe: s.spiffe.clone(),
        service_account: s.service_account.as_ref().map(|sa| bundle::ServiceAccount {
            namespace: sa.namespace.clone(),
            name: opt(&sa.name).to_string(),
        }),
        jwt: None,
    }))
}

/// A JWT source: the verified token's issuer, subject and claims.
fn jwt_source(
    at: &str,
    s: &RuleSource,
    providers: &[bundle::JwtProvider],
) -> Result<bundle::Source, Problem> {
    if s.spiffe.is_some() || s.service_account.is_some() {
        return Err((
            reason::INVALID,
            format!("{at}.source: spiffe and serviceAccount are not allowed with type JWT"),
        ));
    }
    let j = s.jwt.clone().unwrap_or_default();
    let issuer = opt(&j.issuer).to_string();
    if !providers.iter().any(|p| p.issuer == issuer) {
        let known: Vec<&str> = providers.iter().map(|p| p.issuer.as_str()).collect();
        let known = if known.is_empty() {
            "none is declared".to_string()
        } else {
            format!("declared: {}", known.join(", "))
        };
        return Err((
            reason::INVALID,
            format!("{at}.source.jwt.issuer \"{issuer}\": no JWT provider verifies this issuer ({known}); declare it with --jwt-provider NAME=issuer={issuer},jwks=..."),
        ));
    }
    Ok(bundle::Source {
        kind: bundle::SourceType::Jwt,
        spiffe: None,
        service_account: None,
        jwt: Some(bundle::JwtSource {
            issuer,
            subject: j.subject.clone(),
            claims: j
                .claims
                .iter()
                .flatten()
                .map(|c| bundle::ClaimMatch {
                    name: opt(&c.name).to_string(),
                    values: c.values.clone().unwrap_or_default(),
                })
                .collect(),
        }),
    })
}

/// A CEL authorization: the expression must hold (nothing else is implied: the base
/// protocol is not admitted by it).
fn cel_authorization(
    at: &str,
    expression: Option<&str>,
    limits: &bundle::CelLimits,
) -> Result<bundle::Authorization, Problem> {
    Ok(bundle::Authorization {
        cel: Some(cel(
            &format!("{at}.authorization.cel.expression"),
            expression.unwrap_or_default(),
            limits,
        )?),
        ..Default::default()
    })
}

fn unknown_match(at: &str, kind: &str) -> Problem {
    (
        reason::INVALID,
        format!("{at}.type \"{kind}\" is not supported"),
    )
}

pub(super) fn rule_v0(at: &str, r: &RuleV0, cx: &RuleCx) -> Result<bundle::Rule, Problem> {
    let source = source_v(at, r.source.as_ref(), cx.providers)?;
    let authorization = match &r.authorization {
        None => None,
        Some(a) => match opt(&a.kind) {
            "CEL" => Some(cel_authorization(
                at,
                a.cel.as_ref().and_then(|c| c.expression.as_deref()),
                cx.cel_limits,
            )?),
            // InlineTools: these tools plus the base protocol; no tools: the base protocol.
            "InlineTools" => {
                let tools = a.tools.clone().unwrap_or_default();
                Some(bundle::Authorization {
                    mcp: Some(bundle::McpMatch {
                        methods: if tools.is_empty() {
                            Vec::new()
                        } else {
                            vec![bundle::McpMethod {
                                name: "tools/call".into(),
                                params: Some(tools),
                            }]
                        },
                        base_protocol: bundle::BaseProtocol::Match,
                    }),
                    ..Default::default()
                })
            }
            other => {
                return Err((
                    reason::INVALID,
                    format!(
                    "{at}.authorization.type \"{other}\" is not InlineTools, ExternalAuth or CEL"
                ),
                ))
            }
        },
    };
    Ok(bundle::Rule {
        name: opt(&r.name).to_string(),
        source,
        authorization,
        when: Vec::new(),
    })
}

pub(super) fn rule_v1(at: &str, r: &RuleV1, cx: &RuleCx) -> Result<bundle::Rule, Problem> {
    let source = source_v(at, r.source.as_ref(), cx.providers)?;
    let authorization = match &r.authorization {
        None => None,
        Some(a) if opt(&a.kind) == "CEL" => Some(cel_authorization(
            at,
            a.cel.as_ref().and_then(|c| c.expression.as_deref()),
            cx.cel_limits,
        )?),
        Some(a) => Some(authorization_v1(at, a)?),
    };
    Ok(bundle::Rule {
        name: opt(&r.name).to_string(),
        source,
        authorization,
        when: when(at, r.when.as_ref(), cx.cel_limits)?,
    })
}

/// An Inline authorization of a v1alpha1 rule.
fn authorization_v1(at: &str, a: &AuthorizationV1) -> Result<bundle::Authorization, Problem> {
    let mcp = a.mcp.as_ref().map(|m| bundle::McpMatch {
        methods: m
            .methods
            .iter()
            .flatten()
            .map(|x| bundle::McpMethod {
                name: opt(&x.name).to_string(),
                params: x.params.clone().filter(|p| !p.is_empty()),
            })
            .collect(),
        base_protocol: if m.mcp_base_protocol_methods_option.as_deref()
            == Some("MATCH_BASE_PROTOCOL_METHODS")
        {
            bundle::BaseProtocol::Match
        } else {
            bundle::BaseProtocol::Skip
        },
    });
    Ok(bundle::Authorization {
        mcp,
        methods: a.methods.clone().unwrap_or_default(),
        paths: path_matches(at, a)?,
        headers: header_matches(at, a)?,
        hosts: a.hosts.clone().unwrap_or_default(),
        ports: a
            .ports
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, p)| {
                u16::try_from(*p).ok().filter(|p| *p != 0).ok_or_else(|| {
                    (
                        reason::INVALID,
                        format!("{at}.authorization.ports[{i}]: {p} is not a port"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        cel: None,
    })
}

fn path_matches(at: &str, a: &AuthorizationV1) -> Result<Vec<bundle::PathMatch>, Problem> {
    let mut paths = Vec::new();
    for (i, p) in a.paths.iter().flatten().enumerate() {
        let kind = match p.kind.as_deref().unwrap_or("PathPrefix") {
            "Exact" => bundle::MatchType::Exact,
            "RegularExpression" => bundle::MatchType::RegularExpression,
            "PathPrefix" => bundle::MatchType::PathPrefix,
            other => {
                return Err(unknown_match(
                    &format!("{at}.authorization.paths[{i}]"),
                    other,
                ))
            }
        };
        let mut value = opt(&p.value).to_string();
        if value.is_empty() {
            if kind != bundle::MatchType::PathPrefix {
                return Err((
                    reason::INVALID,
                    format!("{at}.authorization.paths[{i}].value must not be empty"),
                ));
            }
            value = "/".into();
        }
        paths.push(bundle::PathMatch { kind, value });
    }
    Ok(paths)
}

fn header_matches(at: &str, a: &AuthorizationV1) -> Result<Vec<bundle::HeaderMatch>, Problem> {
    a.headers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, h)| {
            let kind = match h.kind.as_deref().unwrap_or("Exact") {
                "Exact" => bundle::MatchType::Exact,
                "RegularExpression" => bundle::MatchType::RegularExpression,
                other => {
                    return Err(unknown_match(
                        &format!("{at}.authorization.headers[{i}]"),
                        other,
                    ))
                }
            };
            Ok(bundle::HeaderMatch {
                name: opt(&h.name).to_string(),
                kind,
                value: opt(&h.value).to_string(),
            })
        })
        .collect()
}
