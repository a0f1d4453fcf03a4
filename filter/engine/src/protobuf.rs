//! Just enough protobuf to read a `google.protobuf.Struct` (how Envoy hands over filter
//! metadata such as verified JWT payloads). Malformed input yields None, never a panic.

/// A `google.protobuf.Value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PValue {
    Null,
    Number(f64),
    Str(String),
    Bool(bool),
    Struct(Vec<(String, PValue)>),
    List(Vec<PValue>),
}

const MAX_DEPTH: usize = 32;

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    fn done(&self) -> bool {
        self.at >= self.buf.len()
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.at)?;
            self.at += 1;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    /// (field number, wire type)
    fn key(&mut self) -> Option<(u64, u8)> {
        let k = self.varint()?;
        Some((k >> 3, (k & 7) as u8))
    }

    fn len_delimited(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.bytes(n)
    }

    fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.bytes(8).map(|_| ()),
            2 => self.len_delimited().map(|_| ()),
            5 => self.bytes(4).map(|_| ()),
            _ => None,
        }
    }
}

/// The `filter_metadata[filter]` Struct of a serialized `envoy.config.core.v3.Metadata` (what
/// Envoy returns for the `metadata` property).
pub(crate) fn filter_metadata(buf: &[u8], filter: &str) -> Option<Vec<(String, PValue)>> {
    let mut r = Reader::new(buf);
    while !r.done() {
        let (field, wire) = r.key()?;
        if field != 1 || wire != 2 {
            r.skip(wire)?;
            continue;
        }
        let mut entry = Reader::new(r.len_delimited()?);
        let (mut key, mut value) = (None, None);
        while !entry.done() {
            match entry.key()? {
                (1, 2) => key = Some(entry.len_delimited()?),
                (2, 2) => value = Some(entry.len_delimited()?),
                (_, w) => entry.skip(w)?,
            }
        }
        if key == Some(filter.as_bytes()) {
            return struct_at(value.unwrap_or_default(), 0);
        }
    }
    None
}

/// Decodes a serialized `google.protobuf.Struct`.
pub(crate) fn decode_struct(buf: &[u8]) -> Option<Vec<(String, PValue)>> {
    struct_at(buf, 0)
}

fn struct_at(buf: &[u8], depth: usize) -> Option<Vec<(String, PValue)>> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut r = Reader::new(buf);
    let mut fields = Vec::new();
    while !r.done() {
        let (field, wire) = r.key()?;
        if field != 1 || wire != 2 {
            r.skip(wire)?;
            continue;
        }
        let mut entry = Reader::new(r.len_delimited()?);
        let (mut key, mut value) = (String::new(), PValue::Null);
        while !entry.done() {
            match entry.key()? {
                (1, 2) => key = String::from_utf8(entry.len_delimited()?.to_vec()).ok()?,
                (2, 2) => value = value_at(entry.len_delimited()?, depth + 1)?,
                (_, w) => entry.skip(w)?,
            }
        }
        fields.push((key, value));
    }
    Some(fields)
}

fn value_at(buf: &[u8], depth: usize) -> Option<PValue> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut r = Reader::new(buf);
    let mut v = PValue::Null;
    while !r.done() {
        v = match r.key()? {
            (1, 0) => r.varint().map(|_| PValue::Null)?,
            (2, 1) => {
                let b: [u8; 8] = r.bytes(8)?.try_into().ok()?;
                PValue::Number(f64::from_le_bytes(b))
            }
            (3, 2) => PValue::Str(String::from_utf8(r.len_delimited()?.to_vec()).ok()?),
            (4, 0) => PValue::Bool(r.varint()? != 0),
            (5, 2) => PValue::Struct(struct_at(r.len_delimited()?, depth + 1)?),
            (6, 2) => PValue::List(list_at(r.len_delimited()?, depth + 1)?),
            (_, w) => {
                r.skip(w)?;
                continue;
            }
        };
    }
    Some(v)
}

fn list_at(buf: &[u8], depth: usize) -> Option<Vec<PValue>> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut r = Reader::new(buf);
    let mut items = Vec::new();
    while !r.done() {
        match r.key()? {
            (1, 2) => items.push(value_at(r.len_delimited()?, depth + 1)?),
            (_, w) => r.skip(w)?,
        }
    }
    Some(items)
}

/// A Struct's fields as a JSON object (a non-finite number becomes null).
pub(crate) fn struct_json(fields: &[(String, PValue)]) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect(),
    )
}

impl PValue {
    fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            PValue::Null => Value::Null,
            PValue::Number(n) => {
                serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
            }
            PValue::Str(s) => Value::String(s.clone()),
            PValue::Bool(b) => Value::Bool(*b),
            PValue::Struct(f) => struct_json(f),
            PValue::List(items) => Value::Array(items.iter().map(PValue::to_json).collect()),
        }
    }

    /// Scalar as text: strings as-is, numbers as JSON numbers, booleans as true/false.
    pub(crate) fn scalar_text(&self) -> Option<String> {
        match self {
            PValue::Str(s) => Some(s.clone()),
            PValue::Bool(b) => Some(b.to_string()),
            PValue::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                Some(format!("{}", *n as i64))
            }
            PValue::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn ld(field: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    pub(crate) fn enc_value(v: &PValue) -> Vec<u8> {
        let mut out = Vec::new();
        match v {
            PValue::Null => {
                varint(1 << 3, &mut out);
                varint(0, &mut out);
            }
            PValue::Number(n) => {
                varint(2 << 3 | 1, &mut out);
                out.extend_from_slice(&n.to_le_bytes());
            }
            PValue::Str(s) => ld(3, s.as_bytes(), &mut out),
            PValue::Bool(b) => {
                varint(4 << 3, &mut out);
                varint(u64::from(*b), &mut out);
            }
            PValue::Struct(f) => ld(5, &enc_struct(f), &mut out),
            PValue::List(items) => {
                let mut l = Vec::new();
                for i in items {
                    ld(1, &enc_value(i), &mut l);
                }
                ld(6, &l, &mut out);
            }
        }
        out
    }

    pub(crate) fn enc_struct(fields: &[(String, PValue)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in fields {
            let mut e = Vec::new();
            ld(1, k.as_bytes(), &mut e);
            ld(2, &enc_value(v), &mut e);
            ld(1, &e, &mut out);
        }
        out
    }

    #[test]
    fn struct_round_trip() {
        let s = vec![
            ("iss".to_string(), PValue::Str("https://issuer".into())),
            ("n".to_string(), PValue::Number(42.0)),
            ("ok".to_string(), PValue::Bool(true)),
            (
                "groups".to_string(),
                PValue::List(vec![PValue::Str("a".into()), PValue::Str("b".into())]),
            ),
            (
                "nested".to_string(),
                PValue::Struct(vec![("x".to_string(), PValue::Null)]),
            ),
        ];
        assert_eq!(decode_struct(&enc_struct(&s)).unwrap(), s);
        assert_eq!(PValue::Number(42.0).scalar_text().unwrap(), "42");
    }

    /// Serialized `envoy.config.core.v3.Metadata` with one filter entry.
    pub(crate) fn enc_metadata(filter: &str, fields: &[(String, PValue)]) -> Vec<u8> {
        let mut e = Vec::new();
        ld(1, filter.as_bytes(), &mut e);
        ld(2, &enc_struct(fields), &mut e);
        let mut out = Vec::new();
        ld(1, &e, &mut out);
        out
    }

    #[test]
    fn metadata_lookup() {
        let f = vec![("k".to_string(), PValue::Str("v".into()))];
        let md = enc_metadata("envoy.filters.http.jwt_authn", &f);
        assert_eq!(
            filter_metadata(&md, "envoy.filters.http.jwt_authn"),
            Some(f)
        );
        assert_eq!(filter_metadata(&md, "other"), None);
    }

    #[test]
    fn garbage_never_panics() {
        let good = enc_struct(&[("k".to_string(), PValue::Str("v".into()))]);
        for cut in 0..good.len() {
            let _ = decode_struct(&good[..cut]);
        }
        let mut x: u32 = 7;
        for _ in 0..2000 {
            let buf: Vec<u8> = (0..32)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = decode_struct(&buf);
        }
        // Deep nesting is refused, not recursed into without bound.
        let mut v = PValue::Null;
        for _ in 0..100 {
            v = PValue::List(vec![v]);
        }
        assert!(decode_struct(&enc_struct(&[("d".to_string(), v)])).is_none());
    }
}
