//! `Gateway`: addresses, TLS, listeners and the CRD's rules across listeners.

use super::{ref_fields, required_list, GROUP_FIELD, KIND_FIELD, NAMESPACE_FIELD, NAME_FIELD};
use crate::check::{self, Checker, DNS_SUBDOMAIN};
use crate::types::*;
use mcp_access_bundle::names::HOSTNAME_PATTERN;

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
                c.rule(&at, check::matches(HOSTNAME_PATTERN, value), "object", &format!("Hostname value must be empty or contain only valid characters (matching {HOSTNAME_PATTERN})"));
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
        c.string(&format!("{at}.hostname"), h, 1, 253, Some(HOSTNAME_PATTERN));
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
