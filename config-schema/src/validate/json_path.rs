//! The JSON path of the value a deserialization error stopped at, such as
//! `policies[0].rules[0].source.spife`, found by scanning the document up to the error's
//! position. Only a failed parse pays for it.
//!
//! Why not `serde_path_to_error`, which tracks the path while deserializing: its wrapper is
//! monomorphized for every bundle type and made the filter's module 47,820 bytes larger
//! (1,016,994 with it, 969,174 with this scan, after wasm-opt, on 9e1ce27), and ran on every
//! configuration load, to name a field only when loading fails. A test holds this scan to
//! it (its dev-dependency) over every kind of mistake in a bundle, compact and pretty.

/// One open container on the way to the error.
enum Frame {
    /// An object and the key of the member being read (None before the first key).
    Object(Option<String>),
    /// An array and the index of the element being read.
    Array(usize),
}

/// The path of the value an error stopped at in `json`: keys joined by `.`, indexes in `[]`;
/// empty for the document itself. `offset` is where serde_json stood ([`offset_of`]): after
/// the value it refused, or before the byte it could not take. When that value is a
/// container it just closed (a missing field, a map where a string belongs), the path is
/// the container's. When it stopped on a key, the key is part of the path (an unknown
/// field) unless `tag` (an unknown variant: the key names an enum's variant, not a field).
pub(super) fn path_at(json: &[u8], offset: usize, tag: bool) -> String {
    let offset = offset.min(json.len());
    let closed = offset
        .checked_sub(1)
        .filter(|at| matches!(json.get(*at), Some(b'}' | b']')));
    let end = closed.unwrap_or(offset);
    let mut stack: Vec<Frame> = Vec::new();
    // Whether the last thing read is a key (its `:` not yet).
    let mut on_key = false;
    let mut i = 0;
    while i < end {
        let Some(&b) = json.get(i) else { break };
        if !b.is_ascii_whitespace() {
            on_key = false;
        }
        match b {
            b'{' => stack.push(Frame::Object(None)),
            b'[' => stack.push(Frame::Array(0)),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array(n)) => *n += 1,
                Some(Frame::Object(key)) => *key = None,
                None => {}
            },
            b'"' => {
                let end = string_end(json, i);
                let is_key = matches!(stack.last(), Some(Frame::Object(None)));
                if is_key {
                    let raw = json.get(i..end).unwrap_or_default();
                    let key = serde_json::from_slice::<String>(raw)
                        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned());
                    if let Some(Frame::Object(k)) = stack.last_mut() {
                        *k = Some(key);
                    }
                    on_key = true;
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // The container just closed is the value refused, not its last member; so is an enum
    // whose variant is the key just read.
    if closed.is_some() || (on_key && tag) {
        match stack.last_mut() {
            Some(Frame::Object(key)) => *key = None,
            Some(Frame::Array(_)) => {
                stack.pop();
                stack.push(Frame::Object(None));
            }
            None => {}
        }
    }
    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object(Some(key)) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Frame::Object(None) => {}
            Frame::Array(n) => path.push_str(&format!("[{n}]")),
        }
    }
    path
}

/// The byte after the string starting at `start` (its opening quote), or the end of `json`.
fn string_end(json: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while let Some(&b) = json.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    json.len()
}

/// Where serde_json stood at an error of `line` and `column` in `json`: the byte after the
/// last it read. A syntax error's position is one byte further (the byte it peeked at):
/// `syntax` steps back over it.
pub(super) fn offset_of(json: &[u8], line: usize, column: usize, syntax: bool) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match json
            .get(start..)
            .and_then(|rest| rest.iter().position(|b| *b == b'\n'))
        {
            Some(nl) => start += nl + 1,
            None => return json.len(),
        }
    }
    let column = if syntax {
        column.saturating_sub(1)
    } else {
        column
    };
    (start + column).min(json.len())
}
