//! Bounds checked on the expression text before `cel`'s parser sees it: the parser (and the
//! drop of the tree it builds) recurse, and a stack overflow cannot be caught in wasm.

use crate::{CelError, CelLimits};

/// What the scan found outside string literals and comments.
struct Scan {
    /// Operator and punctuation tokens (each may become a node).
    operators: usize,
    /// Deepest `(`, `[`, `{` nesting.
    depth: usize,
}

/// Refuses an expression whose size, bracket nesting or operator count exceeds `limits`.
pub(super) fn precheck(src: &str, limits: &CelLimits) -> Result<(), CelError> {
    let max_bytes = usize::try_from(limits.max_expression_bytes).unwrap_or(usize::MAX);
    if src.len() > max_bytes {
        return Err(CelError::at(
            src,
            0,
            format!(
                "expression is {} bytes, more than limits.cel.maxExpressionBytes ({max_bytes})",
                src.len()
            ),
        ));
    }
    let max_depth = usize::try_from(limits.max_depth).unwrap_or(usize::MAX);
    let max_nodes = usize::try_from(limits.max_nodes).unwrap_or(usize::MAX);
    let s = scan(src, |at, scan: &Scan| {
        if scan.depth > max_depth {
            Some(CelError::at(
                src,
                at,
                format!("nested deeper than limits.cel.maxDepth ({max_depth})"),
            ))
        } else if scan.operators > max_nodes {
            Some(CelError::at(
                src,
                at,
                format!("more operators than limits.cel.maxNodes ({max_nodes})"),
            ))
        } else {
            None
        }
    });
    s.map(|_| ())
}

/// Byte offset of the first occurrence of identifier `word` outside literals (for positions
/// of errors found after parsing).
pub(super) fn find_ident(src: &str, word: &str) -> Option<usize> {
    let bytes = src.as_bytes();
    let mut found = None;
    let _ = scan(src, |at, _| {
        if found.is_none() && at < bytes.len() && src.get(at..)?.starts_with(word) {
            let before = at
                .checked_sub(1)
                .and_then(|i| bytes.get(i))
                .is_some_and(|c| is_ident(*c));
            let after = bytes.get(at + word.len()).is_some_and(|c| is_ident(*c));
            if !before && !after {
                found = Some(at);
            }
        }
        None
    });
    found
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Walks the text once, iteratively, calling `visit` at every byte outside literals and
/// comments; `visit` may stop the walk with an error.
fn scan(
    src: &str,
    mut visit: impl FnMut(usize, &Scan) -> Option<CelError>,
) -> Result<Scan, CelError> {
    let b = src.as_bytes();
    let mut st = Scan {
        operators: 0,
        depth: 0,
    };
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if let Some(e) = visit(i, &st) {
            return Err(e);
        }
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while b.get(i).is_some_and(|c| *c != b'\n') {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' => {
                let raw = i
                    .checked_sub(1)
                    .and_then(|p| b.get(p))
                    .is_some_and(|p| matches!(p, b'r' | b'R'))
                    && !i
                        .checked_sub(2)
                        .and_then(|p| b.get(p))
                        .is_some_and(|p| is_ident(*p) && !matches!(p, b'b' | b'B'));
                i = skip_string(b, i, raw);
                continue;
            }
            b'(' | b'[' | b'{' => {
                st.depth += 1;
                st.operators += 1;
            }
            b')' | b']' | b'}' => {
                st.depth = st.depth.saturating_sub(1);
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'<' | b'>' | b'=' | b'&' | b'|' | b'?'
            | b':' | b'.' | b',' => st.operators += 1,
            // `in` counts as an operator too.
            b'i' if b.get(i + 1) == Some(&b'n')
                && !i
                    .checked_sub(1)
                    .and_then(|p| b.get(p))
                    .is_some_and(|p| is_ident(*p))
                && !b.get(i + 2).is_some_and(|p| is_ident(*p)) =>
            {
                st.operators += 1
            }
            _ => {}
        }
        i += 1;
    }
    if let Some(e) = visit(b.len(), &st) {
        return Err(e);
    }
    Ok(st)
}

/// The offset after the string literal starting with the quote at `i`.
fn skip_string(b: &[u8], i: usize, raw: bool) -> usize {
    let Some(&q) = b.get(i) else { return i + 1 };
    let triple = b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q);
    let mut j = if triple { i + 3 } else { i + 1 };
    while let Some(&c) = b.get(j) {
        if c == b'\\' && !raw {
            j += 2;
            continue;
        }
        if c == q && (!triple || (b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q))) {
            return j + if triple { 3 } else { 1 };
        }
        if c == b'\n' && !triple {
            return j;
        }
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_inside_strings_do_not_count() {
        let limits = CelLimits {
            max_nodes: 3,
            ..CelLimits::default()
        };
        assert!(precheck("'+++++++' == \"-----\"", &limits).is_ok());
        assert!(precheck("1+1+1+1+1", &limits).is_err());
        assert_eq!(find_ident("'foo' + foo", "foo"), Some(8));
        assert_eq!(find_ident("foox + foo", "foo"), Some(7));
        assert_eq!(find_ident("r'\\' + foo", "foo"), Some(7));
    }
}
