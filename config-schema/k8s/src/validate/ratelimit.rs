//! `RateLimitPolicy`: what its CRD checks.

use std::collections::BTreeMap;

use crate::check::{Checker, DNS_LABEL};
use crate::types::*;

use super::policy::{target_refs, MAX_PREDICATE_BYTES, MAX_WHEN};

pub(crate) fn rate_limit_policy(s: &RateLimitPolicySpec, c: &mut Checker) {
    target_refs(&s.target_refs, false, c);
    let set = [
        s.limits.is_some(),
        s.defaults.is_some(),
        s.overrides.is_some(),
    ];
    c.rule(
        "spec",
        set.iter().filter(|x| **x).count() == 1,
        "object",
        "exactly one of limits, defaults and overrides must be set",
    );
    let gateways = s
        .target_refs
        .as_deref()
        .unwrap_or_default()
        .iter()
        .all(|r| opt(&r.kind) == "Gateway");
    c.rule(
        "spec",
        gateways || (s.defaults.is_none() && s.overrides.is_none()),
        "object",
        "defaults and overrides may only be set on a policy that targets Gateways",
    );
    if let Some(m) = &s.mode {
        c.one_of("spec.mode", m, &["Local", "Global"]);
    }
    if let Some(f) = &s.failure_mode {
        c.one_of("spec.failureMode", f, &["Deny", "Allow"]);
    }
    c.rule(
        "spec",
        s.failure_mode.is_none() || s.mode.as_deref() == Some("Global"),
        "object",
        "failureMode is only for mode Global",
    );
    if let Some(l) = &s.limits {
        limits("spec.limits", l, 0, c);
    }
    for (field, b) in [
        ("spec.defaults", &s.defaults),
        ("spec.overrides", &s.overrides),
    ] {
        let Some(b) = b else { continue };
        if let Some(st) = &b.strategy {
            c.one_of(&format!("{field}.strategy"), st, &["atomic"]);
        }
        let at = format!("{field}.limits");
        match &b.limits {
            None => c.err(at, "Required value"),
            Some(l) => limits(&at, l, 1, c),
        }
    }
}

fn limits(at: &str, l: &BTreeMap<String, LimitSpec>, min: usize, c: &mut Checker) {
    c.min_items(at, l.len(), min);
    c.max_items(at, l.len(), 16);
    for (name, spec) in l {
        let lat = format!("{at}.{name}");
        c.rule(
            at,
            crate::check::matches(DNS_LABEL, name) && name.len() <= 63,
            "object",
            "limit names must be DNS labels (lowercase letters, digits and '-', at most 63)",
        );
        let rates = super::required_list(&format!("{lat}.rates"), &spec.rates, (1, 8), c);
        for (i, r) in rates.iter().enumerate() {
            let rat = format!("{lat}.rates[{i}]");
            if c.required(&format!("{rat}.limit"), &r.limit) {
                c.range(&format!("{rat}.limit"), r.limit.unwrap_or(0), 1, 1 << 31);
            }
            if c.required(&format!("{rat}.window"), &r.window) {
                c.pattern(&format!("{rat}.window"), opt(&r.window), WINDOW);
            }
        }
        let counters = spec.counters.as_deref().unwrap_or_default();
        c.max_items(&format!("{lat}.counters"), counters.len(), 8);
        for (i, x) in counters.iter().enumerate() {
            let f = format!("{lat}.counters[{i}].expression");
            if c.required(&f, &x.expression) {
                c.len_between(&f, opt(&x.expression), 1, MAX_PREDICATE_BYTES);
            }
        }
        let when = spec.when.as_deref().unwrap_or_default();
        c.max_items(&format!("{lat}.when"), when.len(), MAX_WHEN);
        for (i, x) in when.iter().enumerate() {
            let f = format!("{lat}.when[{i}].predicate");
            if c.required(&f, &x.predicate) {
                c.len_between(&f, opt(&x.predicate), 1, MAX_PREDICATE_BYTES);
            }
        }
    }
}
