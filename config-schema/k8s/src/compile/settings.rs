//! The filter's settings, resolved once: a `FilterSettings` object (at most one) and the
//! CLI's flags. A setting given both ways with different values is an error, never a silent
//! choice of one of them.

use mcp_access_bundle::gateway_api::DEFAULT_TRUST_DOMAIN;
use mcp_access_bundle::{self as bundle, Bundle};

use super::Options;
use crate::check;
use crate::load::{Item, Manifests};
use crate::model::InvalidObject;
use crate::types::{opt, FilterSettingsSpec};

/// Default authorizer timeout when neither a flag nor the object sets one.
const DEFAULT_AUTHZ_TIMEOUT_MS: u32 = 1000;

/// What the bundle gets from the settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) identity: bundle::IdentitySettings,
    pub(crate) deny_response: bundle::DenyResponse,
    pub(crate) limits: bundle::Limits,
    pub(crate) listings: bundle::Listings,
    pub(crate) envoy: bundle::EnvoySettings,
    pub(crate) decision_records: bundle::DecisionRecords,
    /// Timeout of an authorizer whose policy sets none.
    pub(crate) authz_timeout_ms: u32,
}

impl Settings {
    /// Copies the settings into a bundle (its identity keeps the bundle's JWT providers).
    pub(crate) fn apply(&self, b: &mut Bundle) {
        b.identity = self.identity.clone();
        b.deny_response = self.deny_response.clone();
        b.limits = self.limits.clone();
        b.listings = self.listings.clone();
        b.envoy = self.envoy.clone();
        b.decision_records = self.decision_records;
    }
}

/// Resolves the settings; a second object and a flag that disagrees with the object are
/// invalid input. Also returns the warnings the settings call for.
pub(super) fn resolve(m: &Manifests, o: &Options) -> (Settings, Vec<InvalidObject>, Vec<String>) {
    let mut r = Resolver::default();
    let settings = r.settings(m, o);
    let mut warnings = Vec::new();
    if let (Some(h), Some(it)) = (&settings.identity.spiffe.header, m.settings.first()) {
        warnings.push(format!(
            "{}: FilterSettings {}: spec.identity.spiffe takes the caller's SPIFFE ID from request header {} ({:?}): anyone who reaches Envoy directly can send it; run the filter only behind a proxy that sets this header and removes any copy a client sent (the Envoy configurations mcp-access renders set x-forwarded-client-cert themselves, from their own TLS peer)",
            it.origin, it.meta.name, h.name, h.format
        ));
    }
    (settings, r.invalid, warnings)
}

#[derive(Default)]
struct Resolver {
    invalid: Vec<InvalidObject>,
}

impl Resolver {
    fn settings(&mut self, m: &Manifests, o: &Options) -> Settings {
        let mut objects = m.settings.iter();
        let first = objects.next();
        for extra in objects {
            let first_at = first.map(|f| f.origin.to_string()).unwrap_or_default();
            self.invalid_settings(
                extra,
                "metadata.name",
                format!("a second FilterSettings (the first is {first_at}): one bundle has one set of settings; merge them into one object"),
            );
        }
        let spec = first.map(|f| f.spec.clone()).unwrap_or_default();
        let id = spec.identity.clone().unwrap_or_default();
        let trust_domain = self.one_of_two(
            first,
            "spec.identity.trustDomain",
            id.trust_domain.clone(),
            "--trust-domain",
            o.trust_domain.clone(),
            DEFAULT_TRUST_DOMAIN.to_string(),
        );
        let timeout = spec
            .external_auth
            .as_ref()
            .and_then(|e| e.timeout.as_deref())
            .and_then(check::authz_timeout_ms);
        let authz_timeout_ms = self.one_of_two(
            first,
            "spec.externalAuth.timeout",
            timeout,
            "--authz-timeout-ms",
            o.authz_timeout_ms,
            DEFAULT_AUTHZ_TIMEOUT_MS,
        );
        let env = spec.envoy.clone().unwrap_or_default();
        let unknown_backend = self.one_of_two(
            first,
            "spec.envoy.unknownBackend",
            env.unknown_backend,
            "--unknown-backend",
            o.unknown_backend,
            bundle::UnknownBackend::Deny,
        );
        Settings {
            identity: bundle::IdentitySettings {
                trust_domain: Some(trust_domain),
                spiffe: id.spiffe.unwrap_or_default(),
                jwt: bundle::JwtSettings {
                    providers: o.jwt_providers.clone(),
                },
            },
            deny_response: spec.deny_response.unwrap_or_default(),
            limits: spec.limits.unwrap_or_default(),
            listings: spec.listings.unwrap_or_default(),
            envoy: bundle::EnvoySettings {
                hold_headers: true,
                unknown_backend,
                escaped_slashes: env.escaped_slashes.unwrap_or_default(),
                // From the HTTPRoutes, once the topology is known (compile).
                route_match_headers: Vec::new(),
                // Per filter chain, by the renderer that knows the chain (`mcp-access envoy`).
                listener: None,
            },
            decision_records: spec.decision_records.unwrap_or_default(),
            authz_timeout_ms,
        }
    }

    /// The value the object or the flag gives (they must agree), else the default.
    fn one_of_two<T: PartialEq + std::fmt::Debug>(
        &mut self,
        object: Option<&Item<FilterSettingsSpec>>,
        field: &str,
        from_object: Option<T>,
        flag: &str,
        from_flag: Option<T>,
        default: T,
    ) -> T {
        match (from_object, from_flag) {
            (Some(a), Some(b)) if a != b => {
                if let Some(it) = object {
                    self.invalid_settings(
                        it,
                        field,
                        format!("{a:?} here, but {flag} gives {b:?}: set it in one place"),
                    );
                }
                a
            }
            (Some(a), _) => a,
            (None, Some(b)) => b,
            (None, None) => default,
        }
    }

    fn invalid_settings(&mut self, it: &Item<FilterSettingsSpec>, field: &str, message: String) {
        self.invalid.push(InvalidObject {
            source: it.origin.to_string(),
            kind: it.kind.clone(),
            object: it.meta.name.clone(),
            field: field.to_string(),
            message,
        });
    }
}

/// Puts each `spec.protectedResources` entry of the `FilterSettings` object on the bundle
/// listeners it names (a Gateway's, or one of them by `sectionName`). An entry that names
/// no compiled listener, a listener another entry already gave metadata, or a resource whose
/// host the listener does not serve is invalid: the problems, by field.
pub(super) fn protected_resources(
    m: &Manifests,
    gateways: &mut [bundle::Gateway],
) -> Vec<InvalidObject> {
    let Some(it) = m.settings.first() else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    let mut fail = |field: String, message: String| {
        problems.push(InvalidObject {
            source: it.origin.to_string(),
            kind: it.kind.clone(),
            object: it.meta.name.clone(),
            field,
            message,
        })
    };
    // Which entry gave each listener its metadata.
    let mut given: Vec<(String, usize)> = Vec::new();
    for (i, p) in it.spec.protected_resources.iter().flatten().enumerate() {
        let at = format!("spec.protectedResources[{i}]");
        let (Some(r), Some(pr)) = (&p.target_ref, crate::validate::protected_resource(p)) else {
            continue;
        };
        let (ns, name) = (opt(&r.namespace), opt(&r.name));
        let Some(g) = gateways
            .iter_mut()
            .find(|g| g.namespace == ns && g.name == name)
        else {
            let why = if m
                .gateways
                .iter()
                .any(|g| g.meta.namespace == ns && g.meta.name == name)
            {
                "is not accepted or has no usable listener (see gateways)"
            } else {
                "is not in the manifests"
            };
            fail(
                format!("{at}.targetRef.name"),
                format!("Gateway {ns}/{name} {why}"),
            );
            continue;
        };
        let names: Vec<String> = g.listeners.iter().map(|l| l.name.clone()).collect();
        let section = r.section_name.as_deref();
        if let Some(s) = section.filter(|s| !names.iter().any(|n| n == s)) {
            let valid: Vec<&str> = names.iter().map(String::as_str).collect();
            fail(
                format!("{at}.targetRef.sectionName"),
                format!(
                    "Gateway {ns}/{name} has no usable listener \"{s}\"{}",
                    super::did_you_mean(s, &valid)
                ),
            );
            continue;
        }
        for l in &mut g.listeners {
            if section.is_some_and(|s| s != l.name) {
                continue;
            }
            let id = format!("{ns}/{name}/{}", l.name);
            if let Some((_, j)) = given.iter().find(|(x, _)| *x == id) {
                fail(
                    format!("{at}.targetRef"),
                    format!("listener {id} already has protected resource metadata from spec.protectedResources[{j}]: one listener, one resource"),
                );
                continue;
            }
            let wrong = mcp_access_bundle::oauth::problems(&pr, l.hostname.as_deref());
            given.push((id.clone(), i));
            if wrong.is_empty() {
                l.protected_resource = Some(pr.clone());
            }
            for (field, message) in wrong {
                fail(format!("{at}.{field}"), format!("listener {id}: {message}"));
            }
        }
    }
    problems
}
