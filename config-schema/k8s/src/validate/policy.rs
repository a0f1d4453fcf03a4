//! Policies: `XAccessPolicy` v1alpha0 and v1alpha1, and the project's `AccessPolicy` with its
//! `when`, blocks, JWT sources and ExternalAuth.

use super::{
    ref_fields, required_list, service_port, value_match, GROUP_FIELD, HTTP_METHODS, KIND_FIELD,
    NAMESPACE_FIELD, NAME_FIELD, SECTION_FIELD,
};
use crate::check::{self, Checker, DNS_SUBDOMAIN};
use crate::types::*;
use mcp_access_bundle::names::{HOSTNAME_PATTERN, SPIFFE_ID_PATTERN};
use mcp_access_bundle::{mcp_methods, ClaimMatch};

pub(super) fn target_refs(refs: &Option<Vec<TargetRef>>, v0: bool, c: &mut Checker) {
    let at = "spec.targetRefs";
    let refs = required_list(at, refs, (1, 10), c);
    for (i, r) in refs.iter().enumerate() {
        let fields = [
            (&GROUP_FIELD, &r.group, true),
            (&KIND_FIELD, &r.kind, true),
            (&NAME_FIELD, &r.name, true),
            (&SECTION_FIELD, &r.section_name, false),
        ];
        ref_fields(&format!("{at}[{i}]"), &fields, c);
    }
    if v0 {
        let ok = refs.iter().all(|x| {
            let (g, k) = (opt(&x.group), opt(&x.kind));
            ((g == crate::types::AGENTIC_GROUP || g == crate::types::PROTOTYPE_GROUP)
                && k == "XBackend")
                || (g == crate::types::GATEWAY_GROUP && k == "Gateway")
        });
        c.rule(
            at,
            ok,
            "array",
            "TargetRef must have group agentic.networking.x-k8s.io and kind XBackend, or group gateway.networking.k8s.io and kind Gateway",
        );
    }
    let first = refs.first().map(|r| opt(&r.kind));
    c.rule(
        at,
        refs.iter().all(|r| Some(opt(&r.kind)) == first),
        "array",
        "All targetRefs must have the same Kind",
    );
}

fn rule_name(at: &str, name: &Option<String>, c: &mut Checker) {
    if c.required(&format!("{at}.name"), name) {
        c.string(&format!("{at}.name"), opt(name), 1, 63, Some(DNS_SUBDOMAIN));
    }
}

fn unique_rule_names<'a>(
    at: &str,
    names: impl Iterator<Item = &'a Option<String>>,
    c: &mut Checker,
) {
    let names: Vec<&str> = names.map(opt).collect();
    let unique = names
        .iter()
        .all(|n| names.iter().filter(|m| *m == n).count() == 1);
    c.rule(at, unique, "array", "AccessRule names must be unique");
}

/// Which kind a policy spec belongs to: the upstream `XAccessPolicy`, or the project's
/// `AccessPolicy` (the same spec plus `action: Deny`, JWT sources and `when`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyKind {
    Upstream,
    Project,
}

/// Limits of the project's own fields (the generated CRD says the same).
pub(crate) const MAX_WHEN: usize = 8;
pub(crate) const MAX_PREDICATE_BYTES: usize = 4096;
pub(crate) const MAX_CLAIMS: usize = 16;
pub(crate) const MAX_CLAIM_VALUES: usize = 16;

/// A field that only the project's `AccessPolicy` has, set in an `XAccessPolicy`: its CRD
/// does not declare it, so the API server refuses it.
fn project_only(at: &str, field: &str, kind: PolicyKind, c: &mut Checker) -> bool {
    if kind == PolicyKind::Upstream {
        c.err(
            format!("{at}.{field}"),
            format!("unknown field \"{field}\": only an AccessPolicy (group mcp-access.io) has it"),
        );
        return false;
    }
    true
}

/// A `when` list (`AccessPolicy` only).
fn when(at: &str, w: &Option<Vec<WhenCondition>>, kind: PolicyKind, c: &mut Checker) {
    let Some(list) = w else { return };
    if !project_only(at, "when", kind, c) {
        return;
    }
    let at = format!("{at}.when");
    c.max_items(&at, list.len(), MAX_WHEN);
    for (i, x) in list.iter().enumerate() {
        let pat = format!("{at}[{i}].predicate");
        if c.required(&pat, &x.predicate) {
            c.len_between(&pat, opt(&x.predicate), 1, MAX_PREDICATE_BYTES);
        }
    }
}

fn source(at: &str, s: &RuleSource, type_required: bool, kind: PolicyKind, c: &mut Checker) {
    let types: &[&str] = match kind {
        PolicyKind::Upstream => &["ServiceAccount", "SPIFFE"],
        PolicyKind::Project => &["ServiceAccount", "SPIFFE", "JWT"],
    };
    match &s.kind {
        Some(k) => {
            c.one_of(&format!("{at}.type"), k, types);
        }
        None if type_required => c.err(format!("{at}.type"), "Required value"),
        None => {}
    }
    if let Some(id) = &s.spiffe {
        c.pattern(&format!("{at}.spiffe"), id, SPIFFE_ID_PATTERN);
    }
    if let Some(sa) = &s.service_account {
        c.required(&format!("{at}.serviceAccount.name"), &sa.name);
    }
    if kind == PolicyKind::Project {
        let is_jwt = s.kind.as_deref() == Some("JWT");
        c.rule(
            at,
            !is_jwt || s.jwt.is_some(),
            "object",
            "jwt must be specified when type is set to 'JWT'",
        );
        c.rule(
            at,
            s.jwt.is_none() || is_jwt,
            "object",
            "type must be 'JWT' when jwt is set",
        );
    }
    if let Some(j) = &s.jwt {
        if project_only(at, "jwt", kind, c) {
            jwt_source(&format!("{at}.jwt"), j, c);
        }
    }
}

fn jwt_source(at: &str, j: &JwtSourceSpec, c: &mut Checker) {
    if c.required(&format!("{at}.issuer"), &j.issuer) {
        c.len_between(&format!("{at}.issuer"), opt(&j.issuer), 1, 1024);
    }
    if let Some(sub) = &j.subject {
        c.len_between(&format!("{at}.subject"), sub, 1, 1024);
    }
    let Some(claims) = &j.claims else { return };
    c.max_items(&format!("{at}.claims"), claims.len(), MAX_CLAIMS);
    for (i, cl) in claims.iter().enumerate() {
        let cat = format!("{at}.claims[{i}]");
        if c.required(&format!("{cat}.name"), &cl.name) {
            c.len_between(&format!("{cat}.name"), opt(&cl.name), 1, 256);
        }
        let values = required_list(
            &format!("{cat}.values"),
            &cl.values,
            (1, MAX_CLAIM_VALUES),
            c,
        );
        for (k, v) in values.iter().enumerate() {
            c.len_between(&format!("{cat}.values[{k}]"), v, 0, 1024);
        }
        if let Some(name) = &cl.name {
            c.rule(
                &cat,
                values.iter().all(|v| ClaimMatch::value_fits(name, v)),
                "object",
                ClaimMatch::SCOPE_VALUE_PROBLEM,
            );
        }
    }
}

/// Longest authorizer timeout (the bundle's bound).
const MAX_AUTHZ_TIMEOUT_MS: u64 = 60_000;

/// An authorizer timeout: a Gateway API duration between 1ms and 60s.
pub(crate) fn authz_timeout(at: &str, t: &str, c: &mut Checker) {
    match check::parse_duration_ms(t) {
        Some(ms) if (1..=MAX_AUTHZ_TIMEOUT_MS).contains(&ms) => {}
        Some(_) => c.err(
            at,
            format!("Invalid value: \"{t}\": must be between 1ms and 60s"),
        ),
        None => c.err(
            at,
            format!(
                "Invalid value: \"{t}\": must be a Gateway API duration such as 500ms, 2s or 1m"
            ),
        ),
    }
}

/// `externalAuth.cache`: a TTL of at most an hour, bounded slots and keys.
fn authz_cache(at: &str, cache: &ExternalAuthCache, c: &mut Checker) {
    if c.required(&format!("{at}.ttl"), &cache.ttl) {
        let t = opt(&cache.ttl);
        let max = u64::from(mcp_access_bundle::authz_cache::MAX_CACHE_TTL_MS);
        match check::parse_duration_ms(t) {
            Some(ms) if (1..=max).contains(&ms) => {}
            _ => c.err(
                format!("{at}.ttl"),
                format!("Invalid value: \"{t}\": must be a Gateway API duration between 1ms and 1h, such as 30s or 5m"),
            ),
        }
    }
    if let Some(n) = cache.max_entries {
        let max = i64::from(mcp_access_bundle::authz_cache::MAX_CACHE_ENTRIES);
        c.range(&format!("{at}.maxEntries"), n, 1, max);
    }
    let Some(key) = &cache.key else { return };
    let max = mcp_access_bundle::authz_cache::MAX_CACHE_KEY_ITEMS;
    for (field, list) in [
        ("headers", &key.headers),
        ("claims", &key.claims),
        ("ignoredHeaders", &key.ignored_headers),
    ] {
        let Some(list) = list else { continue };
        let fat = format!("{at}.key.{field}");
        c.max_items(&fat, list.len(), max);
        c.set(&fat, list);
        for (i, item) in list.iter().enumerate() {
            let iat = format!("{fat}[{i}]");
            if field == "claims" {
                c.len_between(&iat, item, 1, 256);
            } else if !mcp_access_bundle::http::is_header_name(item) {
                c.err(
                    iat,
                    format!("Invalid value: \"{item}\": must be an HTTP header name"),
                );
            } else if field == "ignoredHeaders"
                && mcp_access_bundle::authz_cache::is_filter_set(item)
            {
                c.err(
                    iat,
                    format!("Invalid value: \"{item}\": the filter sets this header of the callout itself (request line, body length, x-mcp-* attributes), so it is always in the key: remove it from ignoredHeaders"),
                );
            }
        }
    }
}

/// Every header the authorizer is sent is in the cache's key or declared irrelevant
/// (docs/semantics.md §3.10): an HTTP authorizer is sent `authorization` and
/// `http.allowedHeaders`, a gRPC one `grpc.allowedHeaders` (all headers when empty).
fn cache_covers(at: &str, e: &ExternalAuth, cache: &ExternalAuthCache, c: &mut Checker) {
    let grpc = opt(&e.protocol) == "GRPC";
    let (field, mut sent) = if grpc {
        let h = e.grpc.as_ref().and_then(|g| g.allowed_headers.clone());
        ("grpc.allowedHeaders", h.unwrap_or_default())
    } else {
        let h = e.http.as_ref().and_then(|g| g.allowed_headers.clone());
        ("http.allowedHeaders", h.unwrap_or_default())
    };
    if grpc && sent.is_empty() {
        c.err(
            format!("{at}.cache"),
            format!("the GRPC authorizer is sent every request header ({at}.{field} is empty), so no key can hold what its answers depend on: name the headers it reads in {at}.{field}"),
        );
        return;
    }
    if !grpc {
        sent.push("authorization".into());
    }
    let key = cache.key.clone().unwrap_or_default();
    let named = key.headers.iter().chain(&key.ignored_headers).flatten();
    let named: Vec<&String> = named.collect();
    let mut left: Vec<String> = sent
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .filter(|h| !matches!(h.as_str(), "host" | ":authority" | ":path" | ":method"))
        .filter(|h| !named.iter().any(|n| n.eq_ignore_ascii_case(h)))
        .collect();
    left.sort();
    left.dedup();
    if !left.is_empty() {
        let why = if grpc {
            field
        } else {
            "always authorization, and http.allowedHeaders"
        };
        c.err(
            format!("{at}.cache.key"),
            format!("the authorizer is sent {} ({why}) but the key does not hold it: add it to {at}.cache.key.headers, or to {at}.cache.key.ignoredHeaders if its answers do not depend on it", left.join(", ")),
        );
    }
}

fn external_auth(at: &str, e: &ExternalAuth, kind: PolicyKind, c: &mut Checker) {
    if let Some(f) = &e.failure_mode {
        if project_only(at, "failureMode", kind, c) {
            c.one_of(&format!("{at}.failureMode"), f, &["Deny", "Allow"]);
        }
    }
    if let Some(t) = &e.timeout {
        if project_only(at, "timeout", kind, c) {
            authz_timeout(&format!("{at}.timeout"), t, c);
        }
    }
    if let Some(cache) = &e.cache {
        if project_only(at, "cache", kind, c) {
            authz_cache(&format!("{at}.cache"), cache, c);
            cache_covers(at, e, cache, c);
        }
    }
    if c.required(&format!("{at}.protocol"), &e.protocol) {
        c.one_of(
            &format!("{at}.protocol"),
            opt(&e.protocol),
            &["HTTP", "GRPC"],
        );
    }
    if c.required(&format!("{at}.backendRef"), &e.backend_ref) {
        if let Some(b) = &e.backend_ref {
            let bat = format!("{at}.backendRef");
            let fields = [
                (&GROUP_FIELD, &b.group, false),
                (&KIND_FIELD, &b.kind, false),
                (&NAME_FIELD, &b.name, true),
                (&NAMESPACE_FIELD, &b.namespace, false),
            ];
            ref_fields(&bat, &fields, c);
            if let Some(p) = b.port {
                c.range(&format!("{bat}.port"), p, 1, 65535);
            }
            service_port(&bat, &b.group, &b.kind, b.port, c);
        }
    }
    let proto = opt(&e.protocol);
    c.union_member(at, ("protocol", proto), "GRPC", ("grpc", e.grpc.is_some()));
    c.union_member(at, ("protocol", proto), "HTTP", ("http", e.http.is_some()));
    if let Some(g) = &e.grpc {
        if let Some(h) = &g.allowed_headers {
            c.max_items(&format!("{at}.grpc.allowedHeaders"), h.len(), 64);
            c.set(&format!("{at}.grpc.allowedHeaders"), h);
        }
    }
    if let Some(h) = &e.http {
        if let Some(p) = &h.path {
            c.string(
                &format!("{at}.http.path"),
                p,
                0,
                1024,
                Some(check::HTTP_PATH),
            );
        }
        for (field, list) in [
            ("allowedHeaders", &h.allowed_headers),
            ("allowedResponseHeaders", &h.allowed_response_headers),
        ] {
            if let Some(l) = list {
                c.max_items(&format!("{at}.http.{field}"), l.len(), 64);
                c.set(&format!("{at}.http.{field}"), l);
            }
        }
    }
}

pub(crate) fn policy_v0(s: &PolicySpecV0, c: &mut Checker) {
    target_refs(&s.target_refs, true, c);
    let Some(rules) = &s.rules else {
        c.err("spec.rules", "Required value");
        return;
    };
    c.min_items("spec.rules", rules.len(), 1);
    c.max_items("spec.rules", rules.len(), 10);
    unique_rule_names("spec.rules", rules.iter().map(|r| &r.name), c);
    let kind_of = |r: &RuleV0| r.authorization.as_ref().and_then(|a| a.kind.clone());
    let ext = rules
        .iter()
        .filter(|r| kind_of(r).as_deref() == Some("ExternalAuth"))
        .count();
    c.rule(
        "spec.rules",
        ext <= 1,
        "array",
        "a maximum of one rule per policy can specify 'ExternalAuth' authorization type",
    );
    for (i, r) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        rule_name(&at, &r.name, c);
        match &r.source {
            Some(src) => source(&format!("{at}.source"), src, true, PolicyKind::Upstream, c),
            None => c.err(format!("{at}.source"), "Required value"),
        }
        let Some(a) = &r.authorization else { continue };
        let aat = format!("{at}.authorization");
        if c.required(&format!("{aat}.type"), &a.kind) {
            c.one_of(
                &format!("{aat}.type"),
                opt(&a.kind),
                &["InlineTools", "ExternalAuth", "CEL"],
            );
        }
        let k = opt(&a.kind);
        c.rule(
            &aat,
            k != "InlineTools" || a.tools.is_some(),
            "object",
            "tools must be specified when type is set to 'InlineTools'",
        );
        c.rule(
            &aat,
            k != "ExternalAuth" || a.external_auth.is_some(),
            "object",
            "externalAuth must be specified when type is set to 'ExternalAuth'",
        );
        c.rule(
            &aat,
            k != "CEL" || a.cel.is_some(),
            "object",
            "cel must be specified when type is set to 'CEL'",
        );
        let set = [
            a.tools.is_some(),
            a.external_auth.is_some(),
            a.cel.is_some(),
        ];
        c.rule(
            &aat,
            set.iter().filter(|x| **x).count() <= 1,
            "object",
            "only one of tools, externalAuth or cel can be specified",
        );
        if let Some(t) = &a.tools {
            c.set(&format!("{aat}.tools"), t);
        }
        if let Some(e) = &a.external_auth {
            external_auth(&format!("{aat}.externalAuth"), e, PolicyKind::Upstream, c);
        }
        if let Some(cel) = &a.cel {
            c.required(&format!("{aat}.cel.expression"), &cel.expression);
        }
    }
}

/// An `XAccessPolicy` v1alpha1 spec.
pub(crate) fn policy_v1(s: &PolicySpecV1, c: &mut Checker) {
    spec_v1(s, PolicyKind::Upstream, c);
}

/// An `AccessPolicy` spec (group `mcp-access.io`).
pub(crate) fn access_policy(s: &PolicySpecV1, c: &mut Checker) {
    spec_v1(s, PolicyKind::Project, c);
}

/// The v1alpha1 spec both kinds share, with the project's fields allowed only in its kind.
fn spec_v1(s: &PolicySpecV1, kind: PolicyKind, c: &mut Checker) {
    target_refs(&s.target_refs, false, c);
    let actions: &[&str] = match kind {
        PolicyKind::Upstream => &["Allow", "ExternalAuth"],
        PolicyKind::Project => &["Allow", "Deny", "ExternalAuth"],
    };
    let kinds: Vec<&str> = s
        .target_refs
        .iter()
        .flatten()
        .map(|r| opt(&r.kind))
        .collect();
    if let Some(m) = &s.mode {
        if project_only("spec", "mode", kind, c) {
            c.one_of("spec.mode", m, &["Enforce", "DryRun"]);
        }
    }
    let mut has_block = false;
    for (field, b) in [("defaults", &s.defaults), ("overrides", &s.overrides)] {
        let Some(b) = b else { continue };
        if !project_only("spec", field, kind, c) {
            continue;
        }
        has_block = true;
        block(&format!("spec.{field}"), b, c);
        c.rule(
            "spec.targetRefs",
            kinds.iter().all(|k| *k == "Gateway"),
            "array",
            "defaults and overrides may only be set on a policy that targets Gateways",
        );
    }
    c.rule(
        "spec",
        !(s.defaults.is_some() && s.overrides.is_some()),
        "object",
        "only one of defaults and overrides may be set",
    );
    if has_block {
        for (field, set) in [
            ("action", s.action.is_some()),
            ("externalAuth", s.external_auth.is_some()),
            ("rules", s.rules.is_some()),
            ("when", s.when.is_some()),
        ] {
            if set {
                c.err(
                    format!("spec.{field}"),
                    "Forbidden: with a defaults or overrides block, it belongs in the block",
                );
            }
        }
        return;
    }
    if let Some(headers) = &s.identity_headers {
        if project_only("spec", "identityHeaders", kind, c) {
            identity_headers(headers, c);
            c.rule(
                "spec.targetRefs",
                kinds.iter().all(|k| *k == "XBackend"),
                "array",
                "identityHeaders may only be set on a policy that targets XBackends",
            );
        }
    }
    if let Some(unset) = &s.unset {
        if project_only("spec", "unset", kind, c) {
            c.max_items("spec.unset", unset.len(), 16);
            c.set("spec.unset", unset);
            for (i, u) in unset.iter().enumerate() {
                c.len_between(&format!("spec.unset[{i}]"), u, 1, 253);
            }
            c.rule(
                "spec.targetRefs",
                kinds.iter().all(|k| *k == "XBackend"),
                "array",
                "unset may only be set on a policy that targets XBackends",
            );
        }
    }
    if c.required("spec.action", &s.action) {
        c.one_of("spec.action", opt(&s.action), actions);
    }
    c.rule(
        "spec",
        opt(&s.action) != "ExternalAuth" || s.external_auth.is_some(),
        "object",
        "externalAuth must be specified when action is set to 'ExternalAuth'",
    );
    if kind == PolicyKind::Project {
        c.rule(
            "spec",
            s.external_auth.is_none() || opt(&s.action) == "ExternalAuth",
            "object",
            "externalAuth may only be specified when action is set to 'ExternalAuth'",
        );
    }
    if let Some(e) = &s.external_auth {
        external_auth("spec.externalAuth", e, kind, c);
    }
    when("spec", &s.when, kind, c);
    if let Some(rules) = &s.rules {
        rules_v1("spec.rules", rules, kind, c);
    }
}

/// `spec.identityHeaders` (`AccessPolicy` only): the CRD's checks, then the bundle's rule
/// for each header (one definition: `mcp_access_bundle::identity_headers`).
fn identity_headers(headers: &[IdentityHeaderSpec], c: &mut Checker) {
    let at = "spec.identityHeaders";
    c.max_items(at, headers.len(), 16);
    c.map_keys(at, headers.iter().map(|h| h.name.as_deref()));
    for (i, h) in headers.iter().enumerate() {
        let hat = format!("{at}[{i}]");
        let name_ok = c.required(&format!("{hat}.name"), &h.name);
        let from_ok = c.required(&format!("{hat}.from"), &h.from)
            && c.one_of(&format!("{hat}.from"), opt(&h.from), IDENTITY_FIELDS);
        if let Some(claim) = &h.claim {
            c.len_between(&format!("{hat}.claim"), claim, 1, 256);
        }
        if let (true, true, Some(bundle)) = (name_ok, from_ok, identity_header(h)) {
            for (field, message) in mcp_access_bundle::identity_headers::problems(&bundle) {
                c.err(
                    format!("{hat}.{field}"),
                    format!("Invalid value: {message}"),
                );
            }
        }
    }
}

/// The values of `identityHeaders[].from`.
pub(crate) const IDENTITY_FIELDS: &[&str] = &["SPIFFE", "JWTSubject", "JWTIssuer", "JWTClaim"];

/// An identity header of a policy as the bundle holds it (None: `from` is no known value).
pub(crate) fn identity_header(h: &IdentityHeaderSpec) -> Option<mcp_access_bundle::IdentityHeader> {
    use mcp_access_bundle::IdentityField as F;
    let from = match opt(&h.from) {
        "SPIFFE" => F::Spiffe,
        "JWTSubject" => F::JwtSubject,
        "JWTIssuer" => F::JwtIssuer,
        "JWTClaim" => F::JwtClaim,
        _ => return None,
    };
    Some(mcp_access_bundle::IdentityHeader {
        name: opt(&h.name).to_string(),
        from,
        claim: h.claim.clone(),
    })
}

/// A defaults or overrides block at `at` (`AccessPolicy` only).
fn block(at: &str, b: &Block, c: &mut Checker) {
    if let Some(st) = &b.strategy {
        c.one_of(&format!("{at}.strategy"), st, &["atomic", "merge"]);
    }
    let action = format!("{at}.action");
    if c.required(&action, &b.action) {
        c.one_of(&action, opt(&b.action), &["Allow", "Deny", "ExternalAuth"]);
    }
    c.rule(
        at,
        opt(&b.action) != "ExternalAuth" || b.external_auth.is_some(),
        "object",
        "externalAuth must be specified when action is set to 'ExternalAuth'",
    );
    c.rule(
        at,
        b.external_auth.is_none() || opt(&b.action) == "ExternalAuth",
        "object",
        "externalAuth may only be specified when action is set to 'ExternalAuth'",
    );
    if let Some(e) = &b.external_auth {
        external_auth(&format!("{at}.externalAuth"), e, PolicyKind::Project, c);
    }
    when(at, &b.when, PolicyKind::Project, c);
    if let Some(rules) = &b.rules {
        rules_v1(&format!("{at}.rules"), rules, PolicyKind::Project, c);
    }
    if let Some(cond) = &b.condition {
        c.len_between(&format!("{at}.condition"), cond, 1, MAX_PREDICATE_BYTES);
    }
}

/// The v1alpha1 `rules` list at `at` (a policy's, and later a defaults/overrides block's).
fn rules_v1(at: &str, rules: &[RuleV1], kind: PolicyKind, c: &mut Checker) {
    c.max_items(at, rules.len(), 10);
    unique_rule_names(at, rules.iter().map(|r| &r.name), c);
    for (i, r) in rules.iter().enumerate() {
        let at = format!("{at}[{i}]");
        rule_name(&at, &r.name, c);
        if let Some(src) = &r.source {
            source(&format!("{at}.source"), src, false, kind, c);
        }
        if let Some(a) = &r.authorization {
            authorization_v1(&format!("{at}.authorization"), a, c);
        }
        when(&at, &r.when, kind, c);
    }
}

fn authorization_v1(at: &str, a: &AuthorizationV1, c: &mut Checker) {
    if c.required(&format!("{at}.type"), &a.kind) {
        c.one_of(&format!("{at}.type"), opt(&a.kind), &["Inline", "CEL"]);
    }
    let k = opt(&a.kind);
    c.rule(
        at,
        k != "CEL" || a.cel.is_some(),
        "object",
        "cel must be specified when type is set to 'CEL'",
    );
    c.rule(
        at,
        k != "Inline" || a.cel.is_none(),
        "object",
        "cel must not be specified when type is set to 'Inline'",
    );
    if let Some(cel) = &a.cel {
        c.required(&format!("{at}.cel.expression"), &cel.expression);
    }
    if let Some(hs) = &a.headers {
        c.max_items(&format!("{at}.headers"), hs.len(), 10);
        for (i, h) in hs.iter().enumerate() {
            value_match(&format!("{at}.headers[{i}]"), h, 256, 4096, true, c);
        }
    }
    if let Some(hosts) = &a.hosts {
        c.max_items(&format!("{at}.hosts"), hosts.len(), 10);
        c.set(&format!("{at}.hosts"), hosts);
        for (i, h) in hosts.iter().enumerate() {
            c.string(
                &format!("{at}.hosts[{i}]"),
                h,
                1,
                253,
                Some(HOSTNAME_PATTERN),
            );
        }
    }
    if let Some(m) = &a.mcp {
        let mat = format!("{at}.mcp");
        if let Some(o) = &m.mcp_base_protocol_methods_option {
            c.one_of(
                &format!("{mat}.mcpBaseProtocolMethodsOption"),
                o,
                &["SKIP_BASE_PROTOCOL_METHODS", "MATCH_BASE_PROTOCOL_METHODS"],
            );
        }
        if let Some(methods) = &m.methods {
            c.max_items(&format!("{mat}.methods"), methods.len(), 10);
            c.map_keys(
                &format!("{mat}.methods"),
                methods.iter().map(|x| x.name.as_deref()),
            );
            for (i, method) in methods.iter().enumerate() {
                let at = format!("{mat}.methods[{i}]");
                if c.required(&format!("{at}.name"), &method.name) {
                    c.one_of(
                        &format!("{at}.name"),
                        opt(&method.name),
                        &mcp_methods::rule_names().collect::<Vec<_>>(),
                    );
                }
                if let Some(params) = &method.params {
                    c.max_items(&format!("{at}.params"), params.len(), 10);
                    c.set(&format!("{at}.params"), params);
                    for (j, p) in params.iter().enumerate() {
                        if p.len() > 20 {
                            c.err(
                                format!("{at}.params[{j}]"),
                                "Too long: may not be more than 20 bytes",
                            );
                        }
                    }
                    c.rule(
                        &at,
                        params.is_empty() || mcp_methods::takes_params(opt(&method.name)),
                        "object",
                        "Params can only be specified for get, call, subscribe, unsubscribe, or read methods",
                    );
                }
            }
        }
    }
    if let Some(ms) = &a.methods {
        c.max_items(&format!("{at}.methods"), ms.len(), 9);
        c.set(&format!("{at}.methods"), ms);
        for (i, m) in ms.iter().enumerate() {
            c.one_of(&format!("{at}.methods[{i}]"), m, HTTP_METHODS);
        }
    }
    if let Some(ps) = &a.paths {
        c.max_items(&format!("{at}.paths"), ps.len(), 10);
        for (i, p) in ps.iter().enumerate() {
            let pat = format!("{at}.paths[{i}]");
            if let Some(k) = &p.kind {
                c.one_of(
                    &format!("{pat}.type"),
                    k,
                    &["Exact", "PathPrefix", "RegularExpression"],
                );
            }
            if let Some(v) = &p.value {
                c.len_between(&format!("{pat}.value"), v, 0, 1024);
            }
        }
    }
    if let Some(ports) = &a.ports {
        c.max_items(&format!("{at}.ports"), ports.len(), 10);
        c.set(&format!("{at}.ports"), ports);
        for (i, p) in ports.iter().enumerate() {
            c.range(&format!("{at}.ports[{i}]"), *p, 1, 65535);
        }
    }
}
