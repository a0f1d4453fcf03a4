//! Decision records read back (docs/semantics.md §3.9), by structure: what `mcp-access
//! replay` reads of Envoy's logs. Records are untrusted input: a value inside one can never
//! hide, split or forge one. The writer is [`super::Outcome::to_json`] behind [`LOG_PREFIX`].

use serde_json::Value;

/// The prefix of the filter's decision log line (its JSON object follows, to the end of the line).
pub const LOG_PREFIX: &str = "mcp-access decision ";

/// A line of a log that looks like a decision record but cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// `file:line` (`-` for standard input).
    pub at: String,
    pub why: String,
}

/// The decision records of one log, read by structure (records are untrusted input: a value
/// inside one, such as a tool name holding the prefix, can never hide, split or forge one):
/// - a line that is one JSON object is an access-log entry: its `filter_state` (the decision,
///   as a JSON string or object), or the decision itself when it has `decision`;
/// - any other line holding [`LOG_PREFIX`] is a decision log line: the first occurrence is the
///   filter's (the log's own prefix, timestamp and logger, comes before it, and the record's
///   values are JSON-escaped after it), and the rest of the line must be exactly one JSON object.
///
/// Lines are split on LF (a CR before it dropped); a line that is not UTF-8, or whose record
/// does not parse, is returned as [`Unreadable`] with its number, and the others are still read.
pub fn records(log: &[u8], name: &str) -> (Vec<Value>, Vec<Unreadable>) {
    let (mut out, mut bad) = (Vec::new(), Vec::new());
    for (i, raw) in log.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let at = || format!("{name}:{}", i + 1);
        let Ok(line) = std::str::from_utf8(raw) else {
            let looks = contains(raw, LOG_PREFIX.as_bytes()) || contains(raw, b"filter_state");
            if looks {
                let why = "not UTF-8".to_string();
                bad.push(Unreadable { at: at(), why });
            }
            continue;
        };
        match record_of(line.trim()) {
            Ok(Some(v)) => out.push(v),
            Ok(None) => {}
            Err(why) => bad.push(Unreadable { at: at(), why }),
        }
    }
    (out, bad)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The record of one line: None when the line holds none.
fn record_of(line: &str) -> Result<Option<Value>, String> {
    if line.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            return match v.get("filter_state") {
                // An access-log entry of a request the filter did not decide.
                Some(Value::String(s)) if s.is_empty() || s == "-" => Ok(None),
                Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                    .map(Some)
                    .map_err(|e| format!("its filter_state is not a decision record: {e}")),
                Some(Value::Object(_)) => Ok(v.get("filter_state").cloned()),
                Some(_) => Ok(None),
                None if v.get("decision").is_some() => Ok(Some(v)),
                // Envoy's own log in JSON: the message is a string member.
                None => match v.as_object().and_then(|o| {
                    o.values()
                        .filter_map(Value::as_str)
                        .find(|s| s.contains(LOG_PREFIX))
                }) {
                    Some(message) => log_line(message),
                    None => Ok(None),
                },
            };
        }
    }
    log_line(line)
}

/// The record of a decision log line: after the first [`LOG_PREFIX`], exactly one JSON object.
fn log_line(line: &str) -> Result<Option<Value>, String> {
    let Some(at) = line.find(LOG_PREFIX) else {
        return Ok(None);
    };
    let json = line.get(at + LOG_PREFIX.len()..).unwrap_or_default();
    match serde_json::from_str::<Value>(json.trim_end()) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err("the decision record is not a JSON object".into()),
        Err(e) => Err(format!("the decision record does not parse: {e}")),
    }
}
