//! Where limits come from: Limitador's limits file, and the `limit` override a descriptor may carry.

use std::path::Path;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use limitador::limit::{Expression, Limit};

/// The keys of one entry in Limitador's limits file (its `Limit`'s serde fields).
const LIMIT_KEYS: [&str; 7] = [
    "id",
    "namespace",
    "max_value",
    "seconds",
    "name",
    "conditions",
    "variables",
];

/// Reads a limits file in Limitador's own format (a YAML list of `namespace`, `max_value`,
/// `seconds`, `name`, `conditions`, `variables`; conditions and variables are CEL, parsed by
/// limitador). A key Limitador does not know, a missing `max_value` or `seconds`, or a zero
/// window is refused naming the entry.
pub fn load(path: &Path) -> Result<Vec<Limit>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse(text: &str) -> Result<Vec<Limit>, String> {
    let entries: Vec<serde_norway::Mapping> =
        serde_norway::from_str(text).map_err(|e| format!("not a YAML list of limits: {e}"))?;
    let mut limits = Vec::with_capacity(entries.len());
    for (index, entry) in entries.into_iter().enumerate() {
        for key in entry.keys() {
            let key = key.as_str().unwrap_or_default();
            if !LIMIT_KEYS.contains(&key) {
                return Err(format!(
                    "limit {index}: unknown key {key:?} (known: {})",
                    LIMIT_KEYS.join(", ")
                ));
            }
        }
        for required in ["namespace", "max_value", "seconds"] {
            if !entry.contains_key(required) {
                return Err(format!("limit {index}: `{required}` is missing"));
            }
        }
        let limit: Limit = serde_norway::from_value(serde_norway::Value::Mapping(entry))
            .map_err(|e| format!("limit {index}: {e}"))?;
        if limit.seconds() == 0 {
            return Err(format!("limit {index}: `seconds` must be at least 1"));
        }
        limits.push(limit);
    }
    Ok(limits)
}

/// The limit a descriptor's `limit` override stands for (Envoy's RateLimitOverride, as
/// envoyproxy/ratelimit reads it): `requests_per_unit` per one `unit`, counted per value of each
/// of the descriptor's entry keys. Keys are CEL map keys here, so only `[A-Za-z0-9_.:-]` is taken.
pub fn from_override(
    domain: &str,
    keys: &[&str],
    limit: &RateLimitOverride,
) -> Result<Limit, String> {
    let seconds = match RateLimitUnit::try_from(limit.unit) {
        Ok(RateLimitUnit::Second) => 1,
        Ok(RateLimitUnit::Minute) => 60,
        Ok(RateLimitUnit::Hour) => 3_600,
        Ok(RateLimitUnit::Day) => 86_400,
        _ => {
            return Err(format!(
                "limit override: unit {} is not one of SECOND, MINUTE, HOUR, DAY",
                limit.unit
            ))
        }
    };
    let mut variables = Vec::with_capacity(keys.len());
    for key in keys {
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
        {
            return Err(format!(
                "limit override: entry key {key:?} is not made of [A-Za-z0-9_.:-]"
            ));
        }
        let expression = Expression::parse(format!("descriptors[0]['{key}']"))
            .map_err(|e| format!("limit override: entry key {key:?}: {e:?}"))?;
        variables.push(expression);
    }
    Ok(Limit::new(
        domain,
        u64::from(limit.requests_per_unit),
        seconds,
        [],
        variables,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_limitadors_format() {
        let limits = parse(
            "- namespace: mcp\n  max_value: 5\n  seconds: 60\n  name: a\n  conditions: [\"descriptors[0].l == 'x'\"]\n  variables: [\"descriptors[0].c\"]\n",
        )
        .unwrap_or_default();
        assert_eq!(limits.len(), 1);
        assert_eq!(
            limits
                .first()
                .map(|l| (l.max_value(), l.seconds(), l.name())),
            Some((5, 60, Some("a")))
        );
    }

    #[test]
    fn refuses_what_limitador_would_silently_default() {
        let typo = parse("- namespace: mcp\n  max_vaule: 5\n  seconds: 60\n").unwrap_err();
        assert!(typo.contains("unknown key \"max_vaule\""), "{typo}");
        let missing = parse("- namespace: mcp\n  seconds: 60\n").unwrap_err();
        assert!(missing.contains("`max_value` is missing"), "{missing}");
        let zero = parse(
            "- namespace: mcp\n  max_value: 1\n  seconds: 0\n  conditions: []\n  variables: []\n",
        )
        .unwrap_err();
        assert!(zero.contains("seconds"), "{zero}");
        let cel = parse("- namespace: mcp\n  max_value: 1\n  seconds: 1\n  variables: []\n  conditions: [\"descriptors[0].l ==\"]\n").unwrap_err();
        assert!(
            cel.starts_with("limit 0:") && !cel.contains("missing"),
            "{cel}"
        );
        let without = parse("- namespace: mcp\n  max_value: 1\n  seconds: 1\n").unwrap_err();
        assert!(without.contains("missing field `conditions`"), "{without}");
    }

    #[test]
    fn override_keys_cannot_inject_cel() {
        let over = RateLimitOverride {
            requests_per_unit: 3,
            unit: RateLimitUnit::Minute as i32,
        };
        let limit =
            from_override("d", &["generic_key", "user.id"], &over).map_err(|e| e.to_string());
        assert_eq!(limit.map(|l| (l.max_value(), l.seconds())), Ok((3, 60)));
        assert!(from_override("d", &["a'] || true || ['"], &over).is_err());
        let month = RateLimitOverride {
            requests_per_unit: 3,
            unit: RateLimitUnit::Month as i32,
        };
        assert!(from_override("d", &["k"], &month).is_err());
    }
}
