//! What the API server checks, per kind: the CRDs' types, enums, patterns, list limits and
//! `x-kubernetes-validations` rules (with their messages). The project's own rules (e.g. no
//! ExternalAuth rule beside other rules) are the compiler's: such a policy exists in the
//! cluster, so it is reported not accepted and enforced fail-closed (docs/semantics.md §1.3).

mod backend;
mod gateway;
mod grants;
mod pins;
mod policy;
mod ratelimit;
mod route;
mod settings;

pub(crate) use backend::{gateway_xbackend, xbackend};
pub(crate) use gateway::gateway;
pub(crate) use grants::reference_grant;
pub(crate) use pins::tool_pin;
pub(crate) use policy::{access_policy, identity_header, policy_v0, policy_v1};
pub(crate) use ratelimit::rate_limit_policy;
pub(crate) use route::http_route;
pub(crate) use settings::{filter_settings, protected_resource};

use crate::check::{Checker, DNS_LABEL, DNS_SUBDOMAIN, GROUP, KIND};
use crate::types::*;
use mcp_access_bundle::http::HEADER_NAME_PATTERN;

const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

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
            header.then_some(HEADER_NAME_PATTERN),
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
