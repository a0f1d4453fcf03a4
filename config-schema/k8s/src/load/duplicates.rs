//! Duplicate keys in one mapping, which serde_json keeps silently (the last wins) and
//! serde_norway names without a place: found in the text, with lines and columns.

use std::collections::HashMap;

/// Where `key` is named twice in one mapping of YAML `text`: a flow mapping (`{a: 1, a: 2}`,
/// with columns), else a block mapping.
pub(super) fn duplicate_in_yaml(text: &str, key: &str) -> Option<String> {
    let mut offset = 0;
    for l in text.split_inclusive('\n') {
        // A flow collection where a value starts: after indentation, `- ` and `key: `.
        let flow = l.find(['{', '[']).filter(|&i| {
            l.get(..i)
                .is_some_and(|before| !before.contains(['"', '\'', '#', '{', '[']))
        });
        if let Some(d) = flow.and_then(|i| flow_duplicate(text, offset + i, false)) {
            if d.key == key {
                return Some(d.at());
            }
        }
        offset += l.len();
    }
    duplicate_lines(text, key).map(|(a, b)| format!("the key is on lines {a} and {b}"))
}

/// A key named twice in one flow mapping.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FlowDuplicate {
    pub(super) key: String,
    /// (line, column), 1-based, of the first and the second.
    first: (usize, usize),
    second: (usize, usize),
    /// Which top-level value (JSON document) it is in, from 0.
    pub(super) value: usize,
}

impl FlowDuplicate {
    pub(super) fn at(&self) -> String {
        let ((l1, c1), (l2, c2)) = (self.first, self.second);
        if l1 == l2 {
            format!("the key is on line {l1}, columns {c1} and {c2}")
        } else {
            format!("the key is on lines {l1} and {l2}, columns {c1} and {c2}")
        }
    }
}

/// One open flow collection: a mapping (its keys, whether a key comes next, the key read
/// before its `:`) or a sequence.
enum Frame {
    Map {
        keys: HashMap<String, (usize, usize)>,
        expect_key: bool,
        pending: Option<(String, (usize, usize))>,
    },
    Seq,
}

/// The flow text being scanned: chars from a start, with the 1-based line and column of `i`.
struct Cursor {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Cursor {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    /// Consumes chars[i], keeping line and column.
    fn step(&mut self) {
        if self.peek() == Some('\n') {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        self.i += 1;
    }

    /// A quoted scalar opened by `q` (at `i`), decoded.
    fn quoted(&mut self, q: char) -> String {
        let mut raw = String::from(q);
        self.step();
        while let Some(d) = self.peek() {
            raw.push(d);
            self.step();
            if d == '\\' && q == '"' {
                if let Some(e) = self.peek() {
                    raw.push(e);
                    self.step();
                }
            } else if d == q {
                if q == '\'' && self.peek() == Some('\'') {
                    self.step(); // '' is one quote
                } else {
                    break;
                }
            }
        }
        match q {
            '"' => serde_json::from_str::<String>(&raw).unwrap_or(raw),
            _ => raw.trim_matches('\'').to_string(),
        }
    }

    /// A plain scalar: to a flow indicator, `: `, ` #` or the end of the line.
    fn plain(&mut self) -> String {
        let mut plain = String::new();
        while let Some(d) = self.peek() {
            let next = self.chars.get(self.i + 1).copied().unwrap_or(' ');
            let ends = matches!(d, ',' | '[' | ']' | '{' | '}' | '\n')
                || (d == ':' && (next.is_whitespace() || matches!(next, ',' | ']' | '}')))
                || (d == '#' && plain.ends_with(char::is_whitespace));
            if ends {
                break;
            }
            plain.push(d);
            self.step();
        }
        plain.trim_end().to_string()
    }
}

/// The first key named twice in one mapping of the flow collection (JSON, or YAML `{...}` /
/// `[...]`) that begins at byte `start` of `text`; with `stream`, of every top-level JSON value
/// from there. Quoted keys are compared decoded; a plain YAML key ends at `: `, `,` or a bracket.
pub(super) fn flow_duplicate(text: &str, start: usize, stream: bool) -> Option<FlowDuplicate> {
    let before = text.get(..start)?;
    let mut cur = Cursor {
        chars: text.get(start..)?.chars().collect(),
        i: 0,
        line: before.matches('\n').count() + 1,
        col: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut value = 0;
    while let Some(c) = cur.peek() {
        let at = (cur.line, cur.col);
        let mut scalar = None;
        match c {
            '{' | '[' => {
                if let Some(Frame::Map { expect_key, .. }) = stack.last_mut() {
                    *expect_key = false; // a complex key, or a value
                }
                stack.push(if c == '{' {
                    Frame::Map {
                        keys: HashMap::new(),
                        expect_key: true,
                        pending: None,
                    }
                } else {
                    Frame::Seq
                });
            }
            '}' | ']' => {
                stack.pop();
                if stack.is_empty() {
                    if !stream {
                        return None;
                    }
                    value += 1;
                }
            }
            ',' => {
                if let Some(Frame::Map {
                    expect_key,
                    pending,
                    ..
                }) = stack.last_mut()
                {
                    *expect_key = true;
                    *pending = None;
                }
            }
            ':' => {
                if let Some(Frame::Map {
                    keys,
                    expect_key,
                    pending,
                }) = stack.last_mut()
                {
                    if let Some((key, p)) = pending.take() {
                        if let Some(&first) = keys.get(&key) {
                            return Some(FlowDuplicate {
                                key,
                                first,
                                second: p,
                                value,
                            });
                        }
                        keys.insert(key, p);
                    }
                    *expect_key = false;
                }
            }
            '#' if !stream => {
                while cur.peek().is_some_and(|c| c != '\n') {
                    cur.step();
                }
                continue;
            }
            '"' | '\'' => scalar = Some(cur.quoted(c)),
            c if c.is_whitespace() || stack.is_empty() => {}
            _ => scalar = Some(cur.plain()),
        }
        match scalar {
            Some(s) => {
                if let Some(Frame::Map {
                    expect_key: true,
                    pending,
                    ..
                }) = stack.last_mut()
                {
                    *pending = Some((s, at));
                }
            }
            None => cur.step(),
        }
    }
    None
}

/// The 1-based lines of the first two occurrences of `key` in one block mapping: the same
/// indentation, with no document separator or less indented line between them.
fn duplicate_lines(text: &str, key: &str) -> Option<(usize, usize)> {
    // (indentation, line) of each occurrence still open.
    let mut open: Vec<(usize, usize)> = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let mut t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if l.starts_with("---") || l.starts_with("...") {
            open.clear();
            continue;
        }
        let mut indent = l.len() - t.len();
        open.retain(|(i, _)| *i <= indent);
        while let Some(rest) = t.strip_prefix("- ") {
            // A sequence item starts a new mapping, deeper than the dash.
            open.retain(|(i, _)| *i <= indent);
            let r = rest.trim_start();
            indent += t.len() - r.len();
            t = r;
            open.retain(|(i, _)| *i < indent);
        }
        let k = t
            .split_once(':')
            .map(|(k, _)| k.trim_end().trim_matches(['"', '\'']));
        if k == Some(key) {
            if let Some((_, first)) = open.iter().find(|(i, _)| *i == indent) {
                return Some((*first, n + 1));
            }
            open.push((indent, n + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(text: &str, stream: bool) -> Option<FlowDuplicate> {
        flow_duplicate(text, 0, stream)
    }

    #[test]
    fn flow_duplicates_are_found_where_they_are_and_nowhere_else() {
        let some = |key: &str, first, second, value| {
            Some(FlowDuplicate {
                key: key.into(),
                first,
                second,
                value,
            })
        };
        // Quoted keys are compared decoded ("\u0061" is "a"); '' is one quote.
        assert_eq!(
            dup(r#"{"a": 1, "\u0061": 2}"#, true),
            some("a", (1, 2), (1, 10), 0)
        );
        assert_eq!(
            dup("{'it''s': 1, \"it's\": 2}", false),
            some("it's", (1, 2), (1, 14), 0)
        );
        // Values, sequences, nested mappings and URLs are not keys of the outer mapping.
        assert_eq!(
            dup("{a: a, b: [a, {a: 1}], c: {a: 2}, u: http://a:1}", false),
            None
        );
        assert_eq!(dup("[{a: 1}, {a: 2}]", false), None);
        // A key in a nested mapping; a comment is skipped; the stream counts values.
        assert_eq!(
            dup("{x: {k: 1, # k: 0\n k: 2}}", false),
            some("k", (1, 6), (2, 2), 0)
        );
        assert_eq!(
            dup("{}\n{\"k\": 1, \"k\": 2}", true),
            some("k", (2, 2), (2, 10), 1)
        );
        // Not a flow collection from there, or cut short: nothing.
        assert_eq!(dup("{a: 1", false), None);
        assert_eq!(flow_duplicate("{a: 1}", 99, false), None);
    }
}
