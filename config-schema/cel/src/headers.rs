//! Request headers held as one buffer with spans: what CEL's `request.headers` and the
//! engine read. A request's headers arrive as one block of bytes; keeping them in it (names
//! and values borrowed from one `String`) costs two allocations per request where a list of
//! owned pairs costs two per header.

use std::fmt;

/// Header names (lowercase) and values in arrival order, borrowed from one buffer.
#[derive(Clone, Default)]
pub struct Headers {
    buf: String,
    /// Per header: name start, name end, value start, value end (byte offsets in `buf`,
    /// each at a character boundary).
    spans: Vec<[usize; 4]>,
}

impl Headers {
    /// No headers.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// Headers over `buf`: each span is `[name start, name end, value start, value end]`.
    /// Names are lowercased (ASCII) in place. None if a span is out of range, reversed or
    /// splits a character.
    pub fn from_spans(mut buf: String, spans: Vec<[usize; 4]>) -> Option<Headers> {
        for &[ns, ne, vs, ve] in &spans {
            buf.get(vs..ve)?;
            buf.get_mut(ns..ne)?.make_ascii_lowercase();
        }
        Some(Headers { buf, spans })
    }

    /// Adds a header at the end (its name lowercased).
    pub fn push(&mut self, name: &str, value: &str) {
        let ns = self.buf.len();
        self.buf.push_str(name);
        let ne = self.buf.len();
        if let Some(n) = self.buf.get_mut(ns..ne) {
            n.make_ascii_lowercase();
        }
        self.buf.push_str(value);
        self.spans.push([ns, ne, ne, self.buf.len()]);
    }

    /// Gives the first copy of `name` (lowercase) this value, or adds the header.
    pub fn set(&mut self, name: &str, value: &str) {
        let at = self.iter().position(|(n, _)| n == name);
        match at.and_then(|i| self.spans.get_mut(i)) {
            Some(span) => {
                let vs = self.buf.len();
                self.buf.push_str(value);
                span[2] = vs;
                span[3] = self.buf.len();
            }
            None => self.push(name, value),
        }
    }

    /// How many headers (each copy of a repeated one counts).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn pair(&self, s: &[usize; 4]) -> (&str, &str) {
        pair(&self.buf, s)
    }

    /// The `i`-th header.
    pub fn get_index(&self, i: usize) -> Option<(&str, &str)> {
        self.spans.get(i).map(|s| self.pair(s))
    }

    /// Each header as (name, value), in arrival order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            headers: self,
            spans: self.spans.iter(),
        }
    }

    /// The first value of `name` (given in lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Keeps the headers `keep` accepts (the buffer is not shrunk).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        let Headers { buf, spans } = self;
        spans.retain(|s| {
            let (n, v) = pair(buf, s);
            keep(n, v)
        });
    }
}

/// The name and value `s` spans in `buf`.
fn pair<'b>(buf: &'b str, s: &[usize; 4]) -> (&'b str, &'b str) {
    let [ns, ne, vs, ve] = *s;
    (
        buf.get(ns..ne).unwrap_or_default(),
        buf.get(vs..ve).unwrap_or_default(),
    )
}

/// The headers as (name, value) pairs: [`Headers::iter`].
#[derive(Clone)]
pub struct Iter<'a> {
    headers: &'a Headers,
    spans: std::slice::Iter<'a, [usize; 4]>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.spans.next().map(|s| self.headers.pair(s))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.spans.next_back().map(|s| self.headers.pair(s))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Headers {
        let mut h = Headers::new();
        for (n, v) in pairs {
            h.push(n.as_ref(), v.as_ref());
        }
        h
    }
}

impl<N: AsRef<str>, V: AsRef<str>> From<Vec<(N, V)>> for Headers {
    fn from(pairs: Vec<(N, V)>) -> Headers {
        pairs.into_iter().collect()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> From<&[(N, V)]> for Headers {
    fn from(pairs: &[(N, V)]) -> Headers {
        pairs.iter().map(|(n, v)| (n, v)).collect()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> From<&Vec<(N, V)>> for Headers {
    fn from(pairs: &Vec<(N, V)>) -> Headers {
        Headers::from(pairs.as_slice())
    }
}

impl<N: AsRef<str>, V: AsRef<str>, const K: usize> From<[(N, V); K]> for Headers {
    fn from(pairs: [(N, V); K]) -> Headers {
        pairs.into_iter().collect()
    }
}

/// Equal when the same headers are in the same order (whatever else the buffers hold).
impl PartialEq for Headers {
    fn eq(&self, other: &Headers) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Headers {}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_checked_and_names_lowercased() {
        let h = Headers::from_spans(
            "Host\0a.b\0X-A\0\0".into(),
            vec![[0, 4, 5, 8], [9, 12, 13, 13]],
        )
        .unwrap_or_default();
        assert_eq!(h.iter().collect::<Vec<_>>(), [("host", "a.b"), ("x-a", "")]);
        assert_eq!(h.get("x-a"), Some(""));
        assert!(Headers::from_spans("ab".into(), vec![[0, 3, 0, 0]]).is_none());
        assert!(Headers::from_spans("ab".into(), vec![[1, 0, 0, 0]]).is_none());
        assert!(Headers::from_spans("\u{e9}".into(), vec![[0, 1, 0, 0]]).is_none());
    }

    #[test]
    fn push_retain_and_index() {
        let mut h: Headers = [("A", "1"), ("b", "2"), ("a", "3")].into_iter().collect();
        assert_eq!(h.get("a"), Some("1"));
        assert_eq!(h.get_index(2), Some(("a", "3")));
        h.retain(|n, _| n != "b");
        h.set("a", "4");
        h.set("c", "5");
        assert_eq!(format!("{h:?}"), r#"[("a", "4"), ("a", "3"), ("c", "5")]"#);
        assert_eq!(h.len(), 3);
        assert_eq!(h, Headers::from([("a", "4"), ("a", "3"), ("c", "5")]));
        assert_ne!(h, Headers::from([("a", "4"), ("c", "5"), ("a", "3")]));
        assert_eq!((&h).into_iter().count(), 3);
    }
}
