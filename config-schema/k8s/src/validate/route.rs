//! `HTTPRoute`: parent references, matches, filters, backend references and timeouts.

use super::{
    ref_fields, service_port, value_match, GROUP_FIELD, HTTP_METHODS, KIND_FIELD, NAMESPACE_FIELD,
    NAME_FIELD, SECTION_FIELD,
};
use crate::check::{self, Checker, DNS_SUBDOMAIN};
use crate::types::*;
use mcp_access_bundle::http::HEADER_NAME_PATTERN;
use mcp_access_bundle::names::HOSTNAME_PATTERN;

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
                    Some(HEADER_NAME_PATTERN),
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
                Some(HOSTNAME_PATTERN),
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
            a.group.as_deref().unwrap_or(crate::types::GATEWAY_GROUP)
                == b.group.as_deref().unwrap_or(crate::types::GATEWAY_GROUP)
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
