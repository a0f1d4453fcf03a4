//! The bundle compiled into an [`Engine`]: its policies (with their CEL conditions), then the
//! listener and backend indexes of both decisions.

use std::collections::HashMap;

use mcp_access_bundle::{self as bundle, Conditions, PolicyConditions, ValidBundle};

use super::compiled::{self, compile_cels, compile_rule};
use super::index::{self, DryRunView, View};
use super::{
    identity_headers, CelNeeds, CompileError, CompileProblem, Engine, EngineError, Settings,
};

impl Engine {
    /// Compiles a validated bundle: its policies (with the CEL conditions validation
    /// compiled), then the listener and backend indexes. What validation checked is not
    /// checked again; what the engine could not build from a bundle that skipped it is an
    /// error, never a panic.
    pub fn compile(mut b: ValidBundle) -> Result<Engine, CompileError> {
        let mut conditions = b.take_conditions();
        let limit_conditions = b.take_limit_conditions();
        let b = &b;
        // (position in the bundle, policy), most senior first.
        let mut numbered: Vec<(usize, &bundle::Policy)> = b.policies.iter().enumerate().collect();
        crate::order::sort_by(&mut numbered, |(_, x), (_, y)| {
            (x.seniority, &x.namespace, &x.name).cmp(&(y.seniority, &y.namespace, &y.name))
        });
        let order: Vec<&bundle::Policy> = numbered.iter().map(|(_, p)| *p).collect();
        let compiled = compile_policies(b, &numbered, &mut conditions)?;
        let policies = compiled.policies;
        let listeners = index::index_listeners(b, &order, &policies, View::Enforced);
        let backends = index::index_backends(b, &order, &policies, &listeners, View::Enforced)?;
        let dry = DryRunView::build(b, &order, &policies, (&listeners, &backends.backends))?;
        let (identity_header_names, identity_claims) = identity_headers::names_and_claims(b);
        let challenges = listeners.iter().any(|l| l.discovery.is_some());
        // Policies the compiler derived (defaults/overrides, rules replaced) answer to the
        // name of the policy the user wrote.
        let written: HashMap<String, String> = b
            .policies
            .iter()
            .filter_map(|p| {
                let (_, user) = p.origin.as_ref()?.policy.split_once(' ')?;
                Some((format!("{}/{}", p.namespace, p.name), user.to_string()))
            })
            .collect();
        let mut cache_claims: Vec<String> = Vec::new();
        let caches = b.authorizers.iter().filter_map(|a| a.cache.as_ref());
        for c in caches.flat_map(|c| &c.key_claims) {
            if !cache_claims.contains(c) {
                cache_claims.push(c.clone());
            }
        }
        let rate_limits = {
            let ls: Vec<&str> = listeners.iter().map(|l| l.id.as_str()).collect();
            let bs: Vec<&str> = backends.backends.iter().map(|x| x.id.as_str()).collect();
            crate::ratelimit::RateLimits::compile(b, limit_conditions, &ls, &bs).map_err(
                |(policy, e)| CompileError {
                    policy,
                    problem: CompileProblem::RateLimit(e),
                },
            )?
        };
        let mut cel_needs = compiled.cel_needs;
        rate_limits.programs().for_each(|p| cel_needs.read_by(p));
        Ok(Engine {
            rate_limits,
            dry,
            written,
            policies,
            authorizers: b.authorizers.clone(),
            listeners,
            backends: backends.backends,
            by_route: backends.by_route,
            by_cluster: backends.by_cluster,
            settings: Settings {
                identity: b.identity.clone(),
                deny_response: b.deny_response.clone(),
                limits: b.limits.clone(),
                listings: b.listings.clone(),
                hold_headers: b.envoy.hold_headers,
                route_match_headers: b.envoy.route_match_headers.clone(),
                unknown_backend: b.envoy.unknown_backend,
                escaped_slashes: b.envoy.escaped_slashes,
                served_listener: b.envoy.listener,
                decision_records: b.decision_records,
                rate_limit_service: b.rate_limit_service.clone(),
            },
            jwt_claims: compiled.jwt_claims,
            cache_claims,
            cel_needs,
            recorded_headers: {
                let mut h = compiled.headers;
                crate::order::sort(&mut h);
                h
            },
            unrecorded: compiled::unrecorded(&compiled.cel_reads, b.decision_records.arguments),
            record_key: random_key(),
            identity_header_names,
            identity_claims,
            challenges,
            generation: [0; 32],
        })
    }

    /// Parses, validates and compiles bundle JSON.
    pub fn from_json(json: &[u8]) -> Result<Engine, EngineError> {
        use sha2::Digest as _;
        let bundle = mcp_access_bundle::parse_bundle(json).map_err(EngineError::Bundle)?;
        let mut engine = Engine::compile(bundle).map_err(EngineError::Compile)?;
        if engine.caches_answers() {
            // What every worker of the Envoy was given: the same bytes, the same digest.
            engine.generation = sha2::Sha256::digest(json).into();
        }
        Ok(engine)
    }
}

/// 32 random bytes (the OS's, through std's hasher seeds: `random_get` on WASI).
fn random_key() -> [u8; 32] {
    use std::hash::BuildHasher as _;
    let mut key = [0u8; 32];
    for (i, chunk) in key.chunks_mut(8).enumerate() {
        let word = std::hash::RandomState::new().hash_one(i);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    key
}

/// The policies compiled, most senior first, and what their conditions read.
struct CompiledPolicies {
    policies: Vec<compiled::Policy>,
    /// Claim names any JWT rule reads.
    jwt_claims: Vec<String>,
    cel_needs: CelNeeds,
    /// Header names the rules' header conditions read, credentials left out.
    headers: Vec<String>,
    /// The attributes the CEL conditions read that a record does not hold in full
    /// ([`compiled::NOT_RECORDED`]).
    cel_reads: Vec<mcp_access_cel::Attr>,
}

/// Compiles each policy of `numbered` ((position in the bundle, policy), most senior first).
fn compile_policies(
    b: &ValidBundle,
    numbered: &[(usize, &bundle::Policy)],
    conditions: &mut Conditions,
) -> Result<CompiledPolicies, CompileError> {
    let td = b.identity.trust_domain.as_deref();
    let mut out = CompiledPolicies {
        policies: Vec::with_capacity(numbered.len()),
        jwt_claims: Vec::new(),
        cel_needs: CelNeeds::default(),
        headers: Vec::new(),
        cel_reads: Vec::new(),
    };
    for (position, p) in numbered {
        let id = format!("{}/{}", p.namespace, p.name);
        let fail = |problem| CompileError {
            policy: id.clone(),
            problem,
        };
        // The bundle path of the policy, for errors.
        let at = format!("policies[{position}]");
        let PolicyConditions {
            when: when_programs,
            rules: rule_programs,
        } = conditions.take(*position);
        let mut rule_programs = rule_programs.into_iter();
        let rules = match &p.rules {
            None => None,
            Some(rs) => Some(
                rs.iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let at = format!("{at}.rules[{i}]");
                        let programs = rule_programs.next().unwrap_or_default();
                        compile_rule(r, &p.namespace, td, &at, programs)
                            .map_err(|e| fail(CompileProblem::Condition(e)))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let fields = (0..p.when.len()).map(|i| format!("when[{i}]"));
        let when = compile_cels(&at, fields, when_programs)
            .map_err(|e| fail(CompileProblem::Condition(e)))?;
        let cels = when
            .iter()
            .chain(rules.iter().flatten().flat_map(|r| r.cels.iter()));
        for c in cels {
            out.cel_needs.read_by(&c.program);
            for a in compiled::NOT_RECORDED {
                if c.program.reads_attr(a) && !out.cel_reads.contains(&a) {
                    out.cel_reads.push(a);
                }
            }
        }
        for r in rules.iter().flatten() {
            let read = r
                .authz
                .iter()
                .flat_map(|a| a.headers.iter().map(|h| &h.name));
            for h in read {
                if !out.headers.contains(h) {
                    out.headers.push(h.clone());
                }
            }
            if let compiled::Source::Jwt { claims, .. } = &r.source {
                for (c, _) in claims {
                    if !out.jwt_claims.contains(c) {
                        out.jwt_claims.push(c.clone());
                    }
                }
            }
        }
        let action = match (p.action, &p.external_auth) {
            (bundle::Action::ExternalAuth, Some(name)) => compiled::Action::ExternalAuth {
                authorizer: b
                    .authorizers
                    .iter()
                    .position(|a| &a.name == name)
                    .ok_or_else(|| fail(CompileProblem::NoSuchAuthorizer(name.clone())))?,
            },
            (bundle::Action::ExternalAuth, None) => return Err(fail(CompileProblem::NoAuthorizer)),
            (bundle::Action::Allow, _) => compiled::Action::Allow,
            (bundle::Action::Deny, _) => compiled::Action::Deny,
        };
        // The stand-in of an Allow policy that was not accepted admits nothing.
        let rules = match (&p.not_accepted, action) {
            (Some(_), compiled::Action::Allow) => Some(Vec::new()),
            _ => rules,
        };
        out.policies.push(compiled::Policy {
            id,
            action,
            rules,
            when,
            origin: p.origin.as_ref().map(ToString::to_string),
            written: p
                .origin
                .as_ref()
                .and_then(|o| Some(o.policy.split_once(' ')?.1.to_string())),
            mode: p.mode,
        });
    }
    Ok(out)
}
