//! What the API server checks, per kind: the CRDs' types, enums, patterns, list limits and
//! `x-kubernetes-validations` rules (with their messages). The project's own rules (e.g. no
//! ExternalAuth rule beside other rules) are the compiler's: such a policy exists in the
//! cluster, so it is reported not accepted and enforced fail-closed (docs/semantics.md §1.3).

use crate::check::{self, Checker, DNS_LABEL, DNS_SUBDOMAIN, GROUP, HEADER_NAME, KIND};
use crate::types::*;
use mcp_access_bundle::mcp_methods;

const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

/// A field of an object reference, with the limits the Gateway API CRDs give it.
struct RefField {
    name: &'static str,
    min: usize,
    max: usize,
    pattern: Option<&'static str>,
}

const GROUP_FIELD: RefField = RefField::new("group", 0, 253, Some(GROUP));
const KIND_FIELD: RefField = RefField::new("kind", 1, 63, Some(KIND));
const NAME_FIELD: RefField = RefField::new("name", 1, 253, None);
const NAMESPACE_FIELD: RefField = RefField::new("namespace", 1, 63, Some(DNS_LABEL));
const SECTION_FIELD: RefField = RefField::new("sectionName", 1, 253, Some(DNS_SUBDOMAIN));

impl RefField {
    const fn new(
        name: &'static str,
        min: usize,
        max: usize,
        pattern: Option<&'static str>,
    ) -> Self {
        RefField {
            name,
            min,
            max,
            pattern,
        }
    }
}

/// The fields of the object reference at `at`, in the order given: each `(field, value,
/// required)` must be set when required and, when set, within the field's limits.
fn ref_fields(at: &str, fields: &[(&RefField, &Option<String>, bool)], c: &mut Checker) {
    for (f, v, required) in fields {
        let path = format!("{at}.{}", f.name);
        if *required && !c.required(&path, v) {
            continue;
        }
        if let Some(v) = v {
            c.string(&path, v, f.min, f.max, f.pattern);
        }
    }
}

/// A required list and its limits on the number of items; its items (none when missing).
fn required_list<'a, T>(
    at: &str,
    list: &'a Option<Vec<T>>,
    (min, max): (usize, usize),
    c: &mut Checker,
) -> &'a [T] {
    let Some(list) = list else {
        c.err(at, "Required value");
        return &[];
    };
    c.min_items(at, list.len(), min);
    c.max_items(at, list.len(), max);
    list
}

/// The CRDs' rule that a reference to a Service (the default kind) has a port.
fn service_port(
    at: &str,
    group: &Option<String>,
    kind: &Option<String>,
    port: Option<i64>,
    c: &mut Checker,
) {
    let is_service = opt(group).is_empty() && kind.as_deref().unwrap_or("Service") == "Service";
    c.rule(
        at,
        !is_service || port.is_some(),
        "object",
        "Must have port for Service reference",
    );
}

// ---------------------------------------------------------------------------------------
// XBackend

pub(crate) fn xbackend(s: &XBackendSpec, c: &mut Checker) {
    let Some(mcp) = &s.mcp else {
        c.err("spec.mcp", "Required value");
        return;
    };
    if c.required("spec.mcp.port", &mcp.port) {
        c.range("spec.mcp.port", mcp.port.unwrap_or_default(), 1, 65535);
    }
    c.rule(
        "spec.mcp",
        mcp.service_name.is_some() != mcp.hostname.is_some(),
        "object",
        "exactly one of the fields in [serviceName hostname] must be set",
    );
}

// ---------------------------------------------------------------------------------------
// XAccessPolicy

fn target_refs(refs: &Option<Vec<TargetRef>>, v0: bool, c: &mut Checker) {
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
            ((g == crate::load::AGENTIC_GROUP || g == crate::load::PROTOTYPE_GROUP)
                && k == "XBackend")
                || (g == crate::load::GATEWAY_GROUP && k == "Gateway")
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
        c.pattern(&format!("{at}.spiffe"), id, check::SPIFFE);
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
                Some(check::HOSTNAME),
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

fn value_match(
    at: &str,
    m: &ValueMatch,
    name_max: usize,
    value_max: usize,
    header: bool,
    c: &mut Checker,
) {
    if c.required(&format!("{at}.name"), &m.name) {
        c.string(
            &format!("{at}.name"),
            opt(&m.name),
            1,
            name_max,
            header.then_some(HEADER_NAME),
        );
    }
    if let Some(k) = &m.kind {
        c.one_of(&format!("{at}.type"), k, &["Exact", "RegularExpression"]);
    }
    if c.required(&format!("{at}.value"), &m.value) {
        c.len_between(&format!("{at}.value"), opt(&m.value), 1, value_max);
    }
}

// ---------------------------------------------------------------------------------------
// ReferenceGrant / ReferencePolicy

pub(crate) fn reference_grant(s: &ReferenceGrantSpec, c: &mut Checker) {
    for (i, f) in required_list("spec.from", &s.from, (1, 16), c)
        .iter()
        .enumerate()
    {
        let fields = [
            (&GROUP_FIELD, &f.group, true),
            (&KIND_FIELD, &f.kind, true),
            (&NAMESPACE_FIELD, &f.namespace, true),
        ];
        ref_fields(&format!("spec.from[{i}]"), &fields, c);
    }
    for (i, t) in required_list("spec.to", &s.to, (1, 16), c)
        .iter()
        .enumerate()
    {
        let fields = [
            (&GROUP_FIELD, &t.group, true),
            (&KIND_FIELD, &t.kind, true),
            (&NAME_FIELD, &t.name, false),
        ];
        ref_fields(&format!("spec.to[{i}]"), &fields, c);
    }
}

// ---------------------------------------------------------------------------------------
// Gateway

fn object_ref(at: &str, r: &ObjectRef, group_kind_required: bool, c: &mut Checker) {
    if group_kind_required {
        c.required(&format!("{at}.group"), &r.group);
        c.required(&format!("{at}.kind"), &r.kind);
    }
    let fields = [
        (&GROUP_FIELD, &r.group, false),
        (&KIND_FIELD, &r.kind, false),
        (&NAME_FIELD, &r.name, true),
        (&NAMESPACE_FIELD, &r.namespace, false),
    ];
    ref_fields(at, &fields, c);
}

fn selector(at: &str, s: &LabelSelector, c: &mut Checker) {
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let eat = format!("{at}.matchExpressions[{i}]");
        c.required(&format!("{eat}.key"), &e.key);
        if c.required(&format!("{eat}.operator"), &e.operator) {
            let op = opt(&e.operator);
            if c.one_of(
                &format!("{eat}.operator"),
                op,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            ) {
                let n = e.values.as_ref().map_or(0, Vec::len);
                let want_values = matches!(op, "In" | "NotIn");
                if want_values && n == 0 {
                    c.err(
                        format!("{eat}.values"),
                        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    );
                }
                if !want_values && n > 0 {
                    c.err(format!("{eat}.values"), "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
                }
            }
        }
    }
}

fn validation(at: &str, v: &FrontendValidation, c: &mut Checker) {
    let refs_at = format!("{at}.caCertificateRefs");
    for (i, r) in required_list(&refs_at, &v.ca_certificate_refs, (1, 16), c)
        .iter()
        .enumerate()
    {
        object_ref(&format!("{refs_at}[{i}]"), r, true, c);
    }
    if let Some(m) = &v.mode {
        c.one_of(
            &format!("{at}.mode"),
            m,
            &["AllowValidOnly", "AllowInsecureFallback"],
        );
    }
}

pub(crate) fn gateway(s: &GatewaySpec, c: &mut Checker) {
    if c.required("spec.gatewayClassName", &s.gateway_class_name) {
        c.len_between("spec.gatewayClassName", opt(&s.gateway_class_name), 1, 253);
    }
    addresses(s, c);
    if let Some(al) = &s.allowed_listeners {
        if let Some(ns) = &al.namespaces {
            if let Some(f) = &ns.from {
                c.one_of(
                    "spec.allowedListeners.namespaces.from",
                    f,
                    &["All", "Selector", "Same", "None"],
                );
            }
            if let Some(sel) = &ns.selector {
                selector("spec.allowedListeners.namespaces.selector", sel, c);
            }
        }
    }
    gateway_tls(s, c);
    let ls = required_list("spec.listeners", &s.listeners, (1, 64), c);
    for (i, l) in ls.iter().enumerate() {
        listener(&format!("spec.listeners[{i}]"), l, c);
    }
    listener_rules(ls, c);
}

/// `spec.addresses`.
fn addresses(s: &GatewaySpec, c: &mut Checker) {
    if let Some(addrs) = &s.addresses {
        c.max_items("spec.addresses", addrs.len(), 16);
        for (i, a) in addrs.iter().enumerate() {
            let at = format!("spec.addresses[{i}]");
            let kind = a.kind.as_deref().unwrap_or("IPAddress");
            let value = opt(&a.value);
            if kind == "IPAddress" && value.parse::<std::net::IpAddr>().is_err() {
                c.err(
                    format!("{at}.value"),
                    format!("Invalid value: \"{value}\": must be an IPv4 or IPv6 address"),
                );
            }
            if kind == "Hostname" && !value.is_empty() {
                c.rule(&at, check::matches(check::HOSTNAME, value), "object", "Hostname value must be empty or contain only valid characters (matching ^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$)");
            }
        }
    }
}

/// `spec.tls`: the client certificate towards backends, the frontend validation.
fn gateway_tls(s: &GatewaySpec, c: &mut Checker) {
    if let Some(tls) = &s.tls {
        if let Some(b) = &tls.backend {
            if let Some(r) = &b.client_certificate_ref {
                object_ref("spec.tls.backend.clientCertificateRef", r, false, c);
            }
        }
        if let Some(f) = &tls.frontend {
            match &f.default {
                None => c.err("spec.tls.frontend.default", "Required value"),
                Some(d) => {
                    if let Some(v) = &d.validation {
                        validation("spec.tls.frontend.default.validation", v, c);
                    }
                }
            }
            if let Some(pp) = &f.per_port {
                c.max_items("spec.tls.frontend.perPort", pp.len(), 64);
                let ports: Vec<i64> = pp.iter().filter_map(|p| p.port).collect();
                c.rule(
                    "spec.tls.frontend.perPort",
                    ports
                        .iter()
                        .all(|p| ports.iter().filter(|q| *q == p).count() == 1),
                    "array",
                    "Port for TLS configuration must be unique within the Gateway",
                );
                for (i, p) in pp.iter().enumerate() {
                    let at = format!("spec.tls.frontend.perPort[{i}]");
                    if c.required(&format!("{at}.port"), &p.port) {
                        c.range(&format!("{at}.port"), p.port.unwrap_or_default(), 1, 65535);
                    }
                    if c.required(&format!("{at}.tls"), &p.tls) {
                        if let Some(v) = p.tls.as_ref().and_then(|t| t.validation.as_ref()) {
                            validation(&format!("{at}.tls.validation"), v, c);
                        }
                    }
                }
            }
        }
    }
}

/// One of `spec.listeners`.
fn listener(at: &str, l: &GatewayListener, c: &mut Checker) {
    if c.required(&format!("{at}.name"), &l.name) {
        c.string(
            &format!("{at}.name"),
            opt(&l.name),
            1,
            253,
            Some(DNS_SUBDOMAIN),
        );
    }
    if let Some(h) = &l.hostname {
        c.string(&format!("{at}.hostname"), h, 1, 253, Some(check::HOSTNAME));
    }
    if c.required(&format!("{at}.port"), &l.port) {
        c.range(&format!("{at}.port"), l.port.unwrap_or_default(), 1, 65535);
    }
    if c.required(&format!("{at}.protocol"), &l.protocol) {
        c.string(
            &format!("{at}.protocol"),
            opt(&l.protocol),
            1,
            255,
            Some(check::PROTOCOL),
        );
    }
    if let Some(t) = &l.tls {
        let tat = format!("{at}.tls");
        if let Some(m) = &t.mode {
            c.one_of(&format!("{tat}.mode"), m, &["Terminate", "Passthrough"]);
        }
        let refs = t.certificate_refs.as_deref().unwrap_or_default();
        c.max_items(&format!("{tat}.certificateRefs"), refs.len(), 64);
        for (j, r) in refs.iter().enumerate() {
            object_ref(&format!("{tat}.certificateRefs[{j}]"), r, false, c);
        }
        let opts = t.options.as_ref().map_or(0, |o| o.len());
        if opts > 16 {
            c.err(
                format!("{tat}.options"),
                format!("Too many: {opts}: must have at most 16 items"),
            );
        }
        c.rule(
            &tat,
            t.mode.as_deref().unwrap_or("Terminate") != "Terminate" || !refs.is_empty() || opts > 0,
            "object",
            "certificateRefs or options must be specified when mode is Terminate",
        );
    }
    if let Some(ar) = &l.allowed_routes {
        if let Some(ns) = &ar.namespaces {
            if let Some(f) = &ns.from {
                c.one_of(
                    &format!("{at}.allowedRoutes.namespaces.from"),
                    f,
                    &["All", "Selector", "Same"],
                );
            }
            if let Some(sel) = &ns.selector {
                selector(&format!("{at}.allowedRoutes.namespaces.selector"), sel, c);
            }
        }
        if let Some(kinds) = &ar.kinds {
            c.max_items(&format!("{at}.allowedRoutes.kinds"), kinds.len(), 8);
            for (j, k) in kinds.iter().enumerate() {
                let kat = format!("{at}.allowedRoutes.kinds[{j}]");
                let fields = [
                    (&GROUP_FIELD, &k.group, false),
                    (&KIND_FIELD, &k.kind, true),
                ];
                ref_fields(&kat, &fields, c);
            }
        }
    }
}

/// The CRD's rules across `spec.listeners`.
fn listener_rules(ls: &[GatewayListener], c: &mut Checker) {
    let proto = |l: &GatewayListener| opt(&l.protocol).to_string();
    c.rule(
        "spec.listeners",
        ls.iter()
            .all(|l| !matches!(proto(l).as_str(), "HTTP" | "TCP" | "UDP") || l.tls.is_none()),
        "array",
        "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']",
    );
    c.rule(
        "spec.listeners",
        ls.iter().all(|l| {
            !(proto(l) == "HTTPS"
                && l.tls.as_ref().is_some_and(|t| {
                    !matches!(t.mode.as_deref(), None | Some("") | Some("Terminate"))
                }))
        }),
        "array",
        "tls mode must be Terminate for protocol HTTPS",
    );
    c.rule(
        "spec.listeners",
        ls.iter().all(|l| {
            proto(l) != "TLS"
                || l.tls
                    .as_ref()
                    .is_some_and(|t| t.mode.as_deref().is_some_and(|m| !m.is_empty()))
        }),
        "array",
        "tls mode must be set for protocol TLS",
    );
    c.rule(
        "spec.listeners",
        ls.iter().all(|l| {
            !matches!(proto(l).as_str(), "TCP" | "UDP")
                || l.hostname.as_deref().unwrap_or("").is_empty()
        }),
        "array",
        "hostname must not be specified for protocols ['TCP', 'UDP']",
    );
    c.rule(
        "spec.listeners",
        ls.iter()
            .all(|a| ls.iter().filter(|b| a.name == b.name).count() == 1),
        "array",
        "Listener name must be unique within the Gateway",
    );
    c.rule(
        "spec.listeners",
        ls.iter().all(|a| {
            ls.iter()
                .filter(|b| {
                    a.port == b.port && a.protocol == b.protocol && a.hostname == b.hostname
                })
                .count()
                == 1
        }),
        "array",
        "Combination of port, protocol and hostname must be unique for each listener",
    );
}

// ---------------------------------------------------------------------------------------
// HTTPRoute

fn path_value_rules(at: &str, kind: &str, value: &str, c: &mut Checker) {
    if !matches!(kind, "Exact" | "PathPrefix") {
        return;
    }
    let checks: [(bool, &str); 10] = [
        (value.starts_with('/'), "value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains("//"), "must not contain '//' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains("/./"), "must not contain '/./' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains("/../"), "must not contain '/../' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains("%2f"), "must not contain '%2f' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains("%2F"), "must not contain '%2F' when type one of ['Exact', 'PathPrefix']"),
        (!value.contains('#'), "must not contain '#' when type one of ['Exact', 'PathPrefix']"),
        (!value.ends_with("/.."), "must not end with '/..' when type one of ['Exact', 'PathPrefix']"),
        (!value.ends_with("/."), "must not end with '/.' when type one of ['Exact', 'PathPrefix']"),
        (check::matches(check::HTTP_PATH, value), "must only contain valid characters (matching ^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$) for types ['Exact', 'PathPrefix']"),
    ];
    for (ok, msg) in checks {
        c.rule(at, ok, "object", msg);
    }
}

fn header_modifier(at: &str, m: &HeaderModifier, c: &mut Checker) {
    for (field, list) in [("set", &m.set), ("add", &m.add)] {
        let Some(list) = list else { continue };
        c.max_items(&format!("{at}.{field}"), list.len(), 16);
        c.map_keys(
            &format!("{at}.{field}"),
            list.iter().map(|h| h.name.as_deref()),
        );
        for (i, h) in list.iter().enumerate() {
            let hat = format!("{at}.{field}[{i}]");
            if c.required(&format!("{hat}.name"), &h.name) {
                c.string(
                    &format!("{hat}.name"),
                    opt(&h.name),
                    1,
                    256,
                    Some(HEADER_NAME),
                );
            }
            if c.required(&format!("{hat}.value"), &h.value) {
                c.len_between(&format!("{hat}.value"), opt(&h.value), 1, 4096);
            }
        }
    }
    if let Some(r) = &m.remove {
        c.max_items(&format!("{at}.remove"), r.len(), 16);
        c.set(&format!("{at}.remove"), r);
    }
}

fn path_modifier(at: &str, p: &PathModifier, c: &mut Checker) {
    if c.required(&format!("{at}.type"), &p.kind) {
        c.one_of(
            &format!("{at}.type"),
            opt(&p.kind),
            &["ReplaceFullPath", "ReplacePrefixMatch"],
        );
    }
    let k = opt(&p.kind);
    let full = p.replace_full_path.is_some();
    c.union_member(
        at,
        ("type", k),
        "ReplaceFullPath",
        ("replaceFullPath", full),
    );
    let prefix = p.replace_prefix_match.is_some();
    c.union_member(
        at,
        ("type", k),
        "ReplacePrefixMatch",
        ("replacePrefixMatch", prefix),
    );
    for v in [&p.replace_full_path, &p.replace_prefix_match]
        .into_iter()
        .flatten()
    {
        c.len_between(at, v, 0, 1024);
    }
}

const FILTER_TYPES: &[&str] = &[
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestMirror",
    "RequestRedirect",
    "URLRewrite",
    "ExtensionRef",
    "CORS",
];

fn filters(at: &str, fs: &[RouteFilter], c: &mut Checker) {
    c.max_items(at, fs.len(), 16);
    for (i, f) in fs.iter().enumerate() {
        let fat = format!("{at}[{i}]");
        if c.required(&format!("{fat}.type"), &f.kind) {
            c.one_of(&format!("{fat}.type"), opt(&f.kind), FILTER_TYPES);
        }
        let k = opt(&f.kind);
        let fields: [(&str, &str, bool); 7] = [
            ("CORS", "cors", f.cors.is_some()),
            (
                "RequestHeaderModifier",
                "requestHeaderModifier",
                f.request_header_modifier.is_some(),
            ),
            (
                "ResponseHeaderModifier",
                "responseHeaderModifier",
                f.response_header_modifier.is_some(),
            ),
            ("RequestMirror", "requestMirror", f.request_mirror.is_some()),
            (
                "RequestRedirect",
                "requestRedirect",
                f.request_redirect.is_some(),
            ),
            ("URLRewrite", "urlRewrite", f.url_rewrite.is_some()),
            ("ExtensionRef", "extensionRef", f.extension_ref.is_some()),
        ];
        for (ty, field, has) in fields {
            c.rule(
                &fat,
                !(has && k != ty),
                "object",
                &format!("filter.{field} must be nil if the filter.type is not {ty}"),
            );
            c.rule(
                &fat,
                has || k != ty,
                "object",
                &format!("filter.{field} must be specified for {ty} filter.type"),
            );
        }
        if let Some(m) = &f.request_header_modifier {
            header_modifier(&format!("{fat}.requestHeaderModifier"), m, c);
        }
        if let Some(m) = &f.response_header_modifier {
            header_modifier(&format!("{fat}.responseHeaderModifier"), m, c);
        }
        if let Some(r) = &f.request_redirect {
            let rat = format!("{fat}.requestRedirect");
            if let Some(s) = &r.scheme {
                c.one_of(&format!("{rat}.scheme"), s, &["http", "https"]);
            }
            if let Some(h) = &r.hostname {
                c.string(&format!("{rat}.hostname"), h, 1, 253, Some(DNS_SUBDOMAIN));
            }
            if let Some(p) = &r.path {
                path_modifier(&format!("{rat}.path"), p, c);
            }
            if let Some(p) = r.port {
                c.range(&format!("{rat}.port"), p, 1, 65535);
            }
            if let Some(s) = r.status_code {
                if ![301, 302, 303, 307, 308].contains(&s) {
                    c.err(format!("{rat}.statusCode"), format!("Unsupported value: {s}: supported values: \"301\", \"302\", \"303\", \"307\", \"308\""));
                }
            }
        }
        if let Some(u) = &f.url_rewrite {
            let uat = format!("{fat}.urlRewrite");
            if let Some(h) = &u.hostname {
                c.string(&format!("{uat}.hostname"), h, 1, 253, Some(DNS_SUBDOMAIN));
            }
            if let Some(p) = &u.path {
                path_modifier(&format!("{uat}.path"), p, c);
            }
        }
    }
    let count = |t: &str| fs.iter().filter(|f| opt(&f.kind) == t).count();
    c.rule(at, !(count("RequestRedirect") > 0 && count("URLRewrite") > 0), "array", "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both");
    for t in [
        "CORS",
        "RequestHeaderModifier",
        "ResponseHeaderModifier",
        "RequestRedirect",
        "URLRewrite",
    ] {
        c.rule(
            at,
            count(t) <= 1,
            "array",
            &format!("{t} filter cannot be repeated"),
        );
    }
}

fn uses_prefix_replace(fs: &[RouteFilter], redirect: bool) -> bool {
    fs.iter().any(|f| {
        let p = if redirect {
            f.request_redirect.as_ref().and_then(|r| r.path.as_ref())
        } else {
            f.url_rewrite.as_ref().and_then(|r| r.path.as_ref())
        };
        p.is_some_and(|p| opt(&p.kind) == "ReplacePrefixMatch" && p.replace_prefix_match.is_some())
    })
}

pub(crate) fn http_route(s: &HttpRouteSpec, c: &mut Checker) {
    parent_refs(s, c);
    if let Some(hs) = &s.hostnames {
        c.max_items("spec.hostnames", hs.len(), 16);
        for (i, h) in hs.iter().enumerate() {
            c.string(
                &format!("spec.hostnames[{i}]"),
                h,
                1,
                253,
                Some(check::HOSTNAME),
            );
        }
    }
    let Some(rules) = &s.rules else { return };
    c.min_items("spec.rules", rules.len(), 1);
    c.max_items("spec.rules", rules.len(), 16);
    let total: usize = rules
        .iter()
        .map(|r| r.matches.as_ref().map_or(1, Vec::len))
        .sum();
    c.rule("spec.rules", total <= 128, "array", "While 16 rules and 64 matches per rule are allowed, the total number of matches across all rules in a route must be less than 128");
    for (i, r) in rules.iter().enumerate() {
        route_rule(&format!("spec.rules[{i}]"), r, c);
    }
}

/// `spec.parentRefs`.
fn parent_refs(s: &HttpRouteSpec, c: &mut Checker) {
    if let Some(prs) = &s.parent_refs {
        c.max_items("spec.parentRefs", prs.len(), 32);
        for (i, p) in prs.iter().enumerate() {
            let at = format!("spec.parentRefs[{i}]");
            let fields = [
                (&GROUP_FIELD, &p.group, false),
                (&KIND_FIELD, &p.kind, false),
                (&NAMESPACE_FIELD, &p.namespace, false),
                (&NAME_FIELD, &p.name, true),
                (&SECTION_FIELD, &p.section_name, false),
            ];
            ref_fields(&at, &fields, c);
            if let Some(port) = p.port {
                c.range(&format!("{at}.port"), port, 1, 65535);
            }
        }
        let same = |a: &ParentRef, b: &ParentRef| {
            a.group.as_deref().unwrap_or(crate::load::GATEWAY_GROUP)
                == b.group.as_deref().unwrap_or(crate::load::GATEWAY_GROUP)
                && a.kind.as_deref().unwrap_or("Gateway") == b.kind.as_deref().unwrap_or("Gateway")
                && a.name == b.name
                && a.namespace.as_deref().unwrap_or("") == b.namespace.as_deref().unwrap_or("")
        };
        let sect = |p: &ParentRef| p.section_name.as_deref().unwrap_or("").to_string();
        c.rule(
            "spec.parentRefs",
            prs.iter().all(|a| prs.iter().all(|b| !same(a, b) || sect(a).is_empty() == sect(b).is_empty())),
            "array",
            "sectionName must be specified when parentRefs includes 2 or more references to the same parent",
        );
        c.rule(
            "spec.parentRefs",
            prs.iter().all(|a| prs.iter().filter(|b| same(a, b) && sect(a) == sect(b)).count() == 1),
            "array",
            "sectionName must be unique when parentRefs includes 2 or more references to the same parent",
        );
    }
}

/// One of `spec.rules`.
fn route_rule(at: &str, r: &RouteRule, c: &mut Checker) {
    if let Some(n) = &r.name {
        c.string(&format!("{at}.name"), n, 1, 253, Some(DNS_SUBDOMAIN));
    }
    let ms = r.matches.as_deref().unwrap_or_default();
    c.max_items(&format!("{at}.matches"), ms.len(), 64);
    for (j, m) in ms.iter().enumerate() {
        route_match(&format!("{at}.matches[{j}]"), m, c);
    }
    let fs = r.filters.as_deref().unwrap_or_default();
    filters(&format!("{at}.filters"), fs, c);
    let brs = r.backend_refs.as_deref().unwrap_or_default();
    c.max_items(&format!("{at}.backendRefs"), brs.len(), 16);
    for (j, b) in brs.iter().enumerate() {
        route_backend_ref(&format!("{at}.backendRefs[{j}]"), b, c);
    }
    let one_prefix = ms.len() == 1
        && ms
            .first()
            .and_then(|m| m.path.as_ref())
            .is_some_and(|p| p.kind.as_deref().unwrap_or("PathPrefix") == "PathPrefix");
    let redirect = fs.iter().any(|f| f.request_redirect.is_some());
    c.rule(
        at,
        brs.is_empty() || !redirect,
        "object",
        "RequestRedirect filter must not be used together with backendRefs",
    );
    c.rule(at, !uses_prefix_replace(fs, true) || one_prefix, "object", "When using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified");
    c.rule(at, !uses_prefix_replace(fs, false) || one_prefix, "object", "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified");
    let in_backends = |redirect: bool| {
        brs.iter()
            .any(|b| uses_prefix_replace(b.filters.as_deref().unwrap_or_default(), redirect))
    };
    c.rule(at, !in_backends(true) || one_prefix, "object", "Within backendRefs, when using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified");
    c.rule(at, !in_backends(false) || one_prefix, "object", "Within backendRefs, When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified");
    if let Some(t) = &r.timeouts {
        timeouts(&format!("{at}.timeouts"), t, c);
    }
}

/// One of a rule's `matches`.
fn route_match(mat: &str, m: &RouteMatch, c: &mut Checker) {
    if let Some(p) = &m.path {
        let kind = p.kind.as_deref().unwrap_or("PathPrefix");
        c.one_of(
            &format!("{mat}.path.type"),
            kind,
            &["Exact", "PathPrefix", "RegularExpression"],
        );
        let value = p.value.as_deref().unwrap_or("/");
        c.len_between(&format!("{mat}.path.value"), value, 0, 1024);
        path_value_rules(&format!("{mat}.path"), kind, value, c);
    }
    for (field, list, max) in [
        ("headers", &m.headers, 4096),
        ("queryParams", &m.query_params, 1024),
    ] {
        let Some(list) = list else { continue };
        c.max_items(&format!("{mat}.{field}"), list.len(), 16);
        c.map_keys(
            &format!("{mat}.{field}"),
            list.iter().map(|h| h.name.as_deref()),
        );
        for (k, h) in list.iter().enumerate() {
            value_match(
                &format!("{mat}.{field}[{k}]"),
                h,
                256,
                max,
                field == "headers",
                c,
            );
        }
    }
    if let Some(meth) = &m.method {
        c.one_of(&format!("{mat}.method"), meth, HTTP_METHODS);
    }
}

/// One of a rule's `backendRefs`.
fn route_backend_ref(bat: &str, b: &HttpBackendRef, c: &mut Checker) {
    let fields = [
        (&GROUP_FIELD, &b.group, false),
        (&KIND_FIELD, &b.kind, false),
        (&NAME_FIELD, &b.name, true),
        (&NAMESPACE_FIELD, &b.namespace, false),
    ];
    ref_fields(bat, &fields, c);
    if let Some(p) = b.port {
        c.range(&format!("{bat}.port"), p, 1, 65535);
    }
    if let Some(w) = b.weight {
        c.range(&format!("{bat}.weight"), w, 0, 1_000_000);
    }
    service_port(bat, &b.group, &b.kind, b.port, c);
    if let Some(bf) = &b.filters {
        filters(&format!("{bat}.filters"), bf, c);
    }
}

/// A rule's `timeouts`.
fn timeouts(tat: &str, t: &RouteTimeouts, c: &mut Checker) {
    let req = t
        .request
        .as_deref()
        .map(|v| (v, check::parse_duration_ms(v)));
    let be = t
        .backend_request
        .as_deref()
        .map(|v| (v, check::parse_duration_ms(v)));
    for (field, d) in [("request", req), ("backendRequest", be)] {
        if let Some((v, None)) = d {
            c.pattern(&format!("{tat}.{field}"), v, check::DURATION);
        }
    }
    if let (Some((_, Some(r))), Some((_, Some(b)))) = (req, be) {
        c.rule(
            tat,
            r == 0 || b <= r,
            "object",
            "backendRequest timeout cannot be longer than request timeout",
        );
    }
}

/// A `FilterSettings` spec: its fields are the bundle's own settings, so the bundle's rules
/// (one home: `mcp_access_bundle::validate`) check them, at the same paths under `spec`.
pub(crate) fn filter_settings(s: &FilterSettingsSpec, c: &mut Checker) {
    if let Some(t) = s.external_auth.as_ref().and_then(|e| e.timeout.as_ref()) {
        authz_timeout("spec.externalAuth.timeout", t, c);
    }
    let mut b = mcp_access_bundle::Bundle {
        api_version: mcp_access_bundle::API_VERSION.into(),
        identity: Default::default(),
        gateways: Vec::new(),
        backends: Vec::new(),
        authorizers: Vec::new(),
        policies: Vec::new(),
        deny_response: s.deny_response.clone().unwrap_or_default(),
        limits: s.limits.clone().unwrap_or_default(),
        listings: s.listings.clone().unwrap_or_default(),
        envoy: Default::default(),
    };
    if let Some(id) = &s.identity {
        b.identity.trust_domain = id.trust_domain.clone();
        b.identity.spiffe = id.spiffe.clone().unwrap_or_default();
    }
    if let Err(e) = mcp_access_bundle::validate(&b) {
        c.err(
            format!("spec.{}", e.path),
            format!("Invalid value: {}", e.message),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(f: impl FnOnce(&mut Checker)) -> Vec<String> {
        let mut c = Checker::default();
        f(&mut c);
        c.errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn reference_fields_in_the_order_given() {
        let s = |v: &str| Some(v.to_string());
        let (group, kind, name, ns) = (s("Bad_Group"), s("9kind"), None, s("Not_A_Label"));
        let fields = [
            (&GROUP_FIELD, &group, false),
            (&KIND_FIELD, &kind, true),
            (&NAMESPACE_FIELD, &ns, false),
            (&NAME_FIELD, &name, true),
            (&SECTION_FIELD, &None, false),
        ];
        let got = errors(|c| ref_fields("spec.parentRefs[0]", &fields, c));
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got[0].starts_with("spec.parentRefs[0].group: Invalid value: \"Bad_Group\""));
        assert!(got[1].starts_with("spec.parentRefs[0].kind: Invalid value: \"9kind\""));
        assert!(got[2].starts_with("spec.parentRefs[0].namespace: Invalid value"));
        assert_eq!(got[3], "spec.parentRefs[0].name: Required value");
        let long = s(&"a".repeat(254));
        let got = errors(|c| ref_fields("x", &[(&NAME_FIELD, &long, true)], c));
        assert_eq!(got, ["x.name: Too long: may not be more than 253 bytes"]);
        let empty = s("");
        assert!(errors(|c| ref_fields("x", &[(&GROUP_FIELD, &empty, true)], c)).is_empty());
    }

    #[test]
    fn service_references_need_a_port() {
        let s = |v: &str| Some(v.to_string());
        let msg = "b: Invalid value: \"object\": Must have port for Service reference";
        assert_eq!(errors(|c| service_port("b", &None, &None, None, c)), [msg]);
        assert_eq!(
            errors(|c| service_port("b", &s(""), &s("Service"), None, c)),
            [msg]
        );
        assert!(errors(|c| service_port("b", &None, &None, Some(80), c)).is_empty());
        let group = s("agentic.networking.x-k8s.io");
        assert!(errors(|c| service_port("b", &group, &s("XBackend"), None, c)).is_empty());
    }

    #[test]
    fn required_lists() {
        let none: Option<Vec<u8>> = None;
        assert_eq!(
            errors(|c| assert!(required_list("l", &none, (1, 2), c).is_empty())),
            ["l: Required value"]
        );
        let three = Some(vec![1u8, 2, 3]);
        let got = errors(|c| assert_eq!(required_list("l", &three, (1, 2), c).len(), 3));
        assert_eq!(got, ["l: Too many: 3: must have at most 2 items"]);
        let empty = Some(Vec::<u8>::new());
        let got = errors(|c| assert!(required_list("l", &empty, (1, 2), c).is_empty()));
        assert_eq!(
            got,
            ["l: Invalid value: 0: l in body should have at least 1 items"]
        );
    }
}
