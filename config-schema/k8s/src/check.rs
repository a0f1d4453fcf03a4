//! CRD-style field checks with API-server-style messages (`spec.x: Required value`,
//! `Unsupported value: "y": supported values: ...`, the CRDs' own CEL rule messages).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// Field path such as `spec.rules[0].authorization.type`.
    pub(crate) field: String,
    /// API-server-style message.
    pub(crate) message: String,
}

pub(crate) const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub(crate) const GROUP: &str =
    r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub(crate) const KIND: &str = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$";
pub(crate) const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
pub(crate) const HTTP_PATH: &str = r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$";
pub(crate) const PROTOCOL: &str = r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$";
pub(crate) const DURATION: &str = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$";

thread_local! {
    static PATTERNS: RefCell<HashMap<&'static str, Option<regex_lite::Regex>>> =
        RefCell::new(HashMap::new());
}

/// Whether `s` matches one of the patterns above (compiled once per thread).
pub(crate) fn matches(pattern: &'static str, s: &str) -> bool {
    PATTERNS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let re = cache
            .entry(pattern)
            .or_insert_with(|| regex_lite::Regex::new(pattern).ok());
        re.as_ref().is_some_and(|r| r.is_match(s))
    })
}

/// Collects the problems of one object.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    pub(crate) errors: Vec<FieldError>,
}

fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

impl Checker {
    pub(crate) fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// `field: Required value` when `v` is None; returns whether it is present.
    pub(crate) fn required<T>(&mut self, field: &str, v: &Option<T>) -> bool {
        if v.is_none() {
            self.err(field, "Required value");
        }
        v.is_some()
    }

    /// A CEL rule of the CRD (`x-kubernetes-validations`), reported with its message.
    pub(crate) fn rule(&mut self, field: &str, ok: bool, what: &str, message: &str) {
        if !ok {
            self.err(field, format!("Invalid value: \"{what}\": {message}"));
        }
    }

    /// The CRD's pair of rules for a discriminated member: `member` is set exactly when
    /// `discriminator` (whose value is `actual`) is `value`.
    pub(crate) fn union_member(
        &mut self,
        field: &str,
        (discriminator, actual): (&str, &str),
        value: &str,
        (member, present): (&str, bool),
    ) {
        let msg = format!("{member} must be specified when {discriminator} is set to '{value}'");
        self.rule(field, actual != value || present, "object", &msg);
        let msg = format!("{discriminator} must be '{value}' when {member} is set");
        self.rule(field, !present || actual == value, "object", &msg);
    }

    pub(crate) fn one_of(&mut self, field: &str, value: &str, allowed: &[&str]) -> bool {
        let ok = allowed.contains(&value);
        if !ok {
            let list: Vec<String> = allowed.iter().map(|a| quote(a)).collect();
            self.err(
                field,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    quote(value),
                    list.join(", ")
                ),
            );
        }
        ok
    }

    pub(crate) fn pattern(&mut self, field: &str, value: &str, pattern: &'static str) -> bool {
        let ok = matches(pattern, value);
        if !ok {
            self.err(
                field,
                format!(
                    "Invalid value: {}: {field} in body should match '{pattern}'",
                    quote(value)
                ),
            );
        }
        ok
    }

    pub(crate) fn len_between(&mut self, field: &str, value: &str, min: usize, max: usize) -> bool {
        let n = value.len();
        if n < min {
            self.err(
                field,
                format!(
                    "Invalid value: {}: {field} in body should be at least {min} chars long",
                    quote(value)
                ),
            );
            return false;
        }
        if n > max {
            self.err(field, format!("Too long: may not be more than {max} bytes"));
            return false;
        }
        true
    }

    /// A string field: length limits and, if given, a pattern.
    pub(crate) fn string(
        &mut self,
        field: &str,
        value: &str,
        min: usize,
        max: usize,
        pattern: Option<&'static str>,
    ) -> bool {
        self.len_between(field, value, min, max)
            && pattern.is_none_or(|p| self.pattern(field, value, p))
    }

    pub(crate) fn max_items(&mut self, field: &str, len: usize, max: usize) -> bool {
        if len > max {
            self.err(
                field,
                format!("Too many: {len}: must have at most {max} items"),
            );
        }
        len <= max
    }

    pub(crate) fn min_items(&mut self, field: &str, len: usize, min: usize) -> bool {
        if len < min {
            self.err(
                field,
                format!("Invalid value: {len}: {field} in body should have at least {min} items"),
            );
        }
        len >= min
    }

    pub(crate) fn range(&mut self, field: &str, v: i64, min: i64, max: i64) -> bool {
        if v < min {
            self.err(
                field,
                format!(
                    "Invalid value: {v}: {field} in body should be greater than or equal to {min}"
                ),
            );
            return false;
        }
        if v > max {
            self.err(
                field,
                format!(
                    "Invalid value: {v}: {field} in body should be less than or equal to {max}"
                ),
            );
            return false;
        }
        true
    }

    /// `x-kubernetes-list-type: set`: no duplicates.
    pub(crate) fn set<T: std::hash::Hash + Eq + std::fmt::Display>(
        &mut self,
        field: &str,
        items: &[T],
    ) {
        let mut seen = HashSet::new();
        for (i, it) in items.iter().enumerate() {
            if !seen.insert(it) {
                self.err(
                    format!("{field}[{i}]"),
                    format!("Duplicate value: {}", quote(&it.to_string())),
                );
            }
        }
    }

    /// `x-kubernetes-list-type: map` keyed by `key`: no two items with the same key.
    pub(crate) fn map_keys<'a>(
        &mut self,
        field: &str,
        keys: impl Iterator<Item = Option<&'a str>>,
    ) {
        let mut seen = HashSet::new();
        for (i, k) in keys.enumerate() {
            if let Some(k) = k {
                if !seen.insert(k) {
                    self.err(
                        format!("{field}[{i}]"),
                        format!(
                            "Duplicate value: map[string]interface {{}}{{\"name\":{}}}",
                            quote(k)
                        ),
                    );
                }
            }
        }
    }
}

/// An authorizer timeout (`externalAuth.timeout`, validated to 1ms..60s) in milliseconds.
pub(crate) fn authz_timeout_ms(s: &str) -> Option<u32> {
    parse_duration_ms(s).and_then(|ms| u32::try_from(ms).ok())
}

/// Parses a Gateway API duration (`1h30m`, `500ms`) into milliseconds.
pub(crate) fn parse_duration_ms(s: &str) -> Option<u64> {
    if !matches(DURATION, s) {
        return None;
    }
    let mut total: u64 = 0;
    let mut num: u64 = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        if c.is_ascii_digit() {
            num = num.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            i += 1;
            continue;
        }
        let (unit, len) = match (c, bytes.get(i + 1)) {
            (b'm', Some(b's')) => (1, 2),
            (b'h', _) => (3_600_000, 1),
            (b'm', _) => (60_000, 1),
            (b's', _) => (1_000, 1),
            _ => return None,
        };
        total = total.checked_add(num.checked_mul(unit)?)?;
        num = 0;
        i += len;
    }
    Some(total)
}

/// An RFC 3339 timestamp as (seconds since the epoch, nanoseconds).
pub(crate) fn parse_timestamp(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let year = digits(0, 4)?;
    let month = digits(5, 2)?;
    let day = digits(8, 2)?;
    let hour = digits(11, 2)?;
    let min = digits(14, 2)?;
    let sec = digits(17, 2)?;
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || min > 59
        || sec > 60
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = s.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        let padded: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = padded.parse().ok()?;
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(c @ (b'+' | b'-')) if i + 6 == b.len() && b.get(i + 3) == Some(&b':') => {
            let h = digits(i + 1, 2)?;
            let m = digits(i + 4, 2)?;
            let o = h * 3600 + m * 60;
            if *c == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hour * 3600 + min * 60 + sec - offset, nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timestamps_order() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(
            parse_timestamp("2024-03-01T10:00:00.5+01:00"),
            Some((1_709_283_600, 500_000_000))
        );
        assert!(parse_timestamp("2024-13-01T00:00:00Z").is_none());
        assert!(parse_timestamp("yesterday").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("0s"), Some(0));
        assert_eq!(parse_duration_ms("1d"), None);
    }

    #[test]
    fn patterns() {
        assert!(matches(HTTP_PATH, "/mcp"));
        assert!(matches(GROUP, ""));
    }
}
