//! The protobuf messages the filter reads or writes, declared for `prost` by hand (no protoc,
//! no vendored .proto tree) with the field numbers of `envoy/service/auth/v3/*.proto`,
//! `envoy/config/core/v3/{address,base}.proto`, `google/rpc/status.proto` and
//! `google/protobuf/{timestamp,struct,wrappers}.proto`. Only the fields the filter sends or
//! reads are declared (prost skips the others when decoding);
//! `integration/tests/test_grpc_messages.py` checks every field's name, number and type
//! against the official descriptors (PyPI `xds-protos`).
//!
//! Decoding is prost's: malformed bytes are an error, never a panic, and nesting is bounded
//! by prost's recursion limit (`RECURSION_LIMIT`, 100 nested messages, each map entry
//! counting: a Struct in filter metadata holds Structs 32 deep), so a hostile message cannot
//! exhaust the stack. A map (Struct fields, filter metadata) keeps the last entry of a
//! repeated key, as protobuf's own parsers do.
//!
//! [`frame`] and [`messages`] are gRPC's length-prefixed framing of these messages, shared by
//! the authorizers' and the RateLimitService's calls.

use std::collections::BTreeMap;

use prost::Message as _;

#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckRequest {
    #[prost(message, optional, tag = "1")]
    pub attributes: Option<AttributeContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeContext {
    #[prost(message, optional, tag = "1")]
    pub source: Option<Peer>,
    #[prost(message, optional, tag = "2")]
    pub destination: Option<Peer>,
    #[prost(message, optional, tag = "4")]
    pub request: Option<AttrRequest>,
    #[prost(btree_map = "string, string", tag = "10")]
    pub context_extensions: BTreeMap<String, String>,
    #[prost(message, optional, tag = "11")]
    pub metadata_context: Option<Metadata>,
    #[prost(message, optional, tag = "13")]
    pub route_metadata_context: Option<Metadata>,
}

/// `envoy.config.core.v3.Metadata` (untyped filter metadata only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metadata {
    #[prost(btree_map = "string, message", tag = "1")]
    pub filter_metadata: BTreeMap<String, Struct>,
}

/// `google.protobuf.Struct`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Struct {
    #[prost(btree_map = "string, message", tag = "1")]
    pub fields: BTreeMap<String, Value>,
}

/// `google.protobuf.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(oneof = "Kind", tags = "1, 2, 3, 4, 5, 6")]
    pub kind: Option<Kind>,
}

/// The `kind` oneof of `google.protobuf.Value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    /// `null_value` (the enum `NullValue`, whose only value is 0).
    #[prost(int32, tag = "1")]
    Null(i32),
    #[prost(double, tag = "2")]
    Number(f64),
    #[prost(string, tag = "3")]
    Str(String),
    #[prost(bool, tag = "4")]
    Bool(bool),
    #[prost(message, tag = "5")]
    Struct(Struct),
    #[prost(message, tag = "6")]
    List(ListValue),
}

/// `google.protobuf.ListValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Peer {
    #[prost(message, optional, tag = "1")]
    pub address: Option<Address>,
    #[prost(string, tag = "2")]
    pub service: String,
    #[prost(string, tag = "4")]
    pub principal: String,
    #[prost(string, tag = "5")]
    pub certificate: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Address {
    #[prost(message, optional, tag = "1")]
    pub socket_address: Option<SocketAddress>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SocketAddress {
    #[prost(string, tag = "2")]
    pub address: String,
    #[prost(uint32, tag = "3")]
    pub port_value: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrRequest {
    #[prost(message, optional, tag = "1")]
    pub time: Option<Timestamp>,
    #[prost(message, optional, tag = "2")]
    pub http: Option<HttpRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(btree_map = "string, string", tag = "3")]
    pub headers: BTreeMap<String, String>,
    #[prost(string, tag = "4")]
    pub path: String,
    #[prost(string, tag = "5")]
    pub host: String,
    #[prost(string, tag = "6")]
    pub scheme: String,
    #[prost(int64, tag = "9")]
    pub size: i64,
    #[prost(string, tag = "10")]
    pub protocol: String,
    #[prost(bytes = "vec", tag = "12")]
    pub raw_body: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(message, optional, tag = "2")]
    pub denied_response: Option<DeniedHttpResponse>,
    #[prost(message, optional, tag = "3")]
    pub ok_response: Option<OkHttpResponse>,
    #[prost(message, optional, tag = "4")]
    pub dynamic_metadata: Option<Struct>,
    /// Only its presence matters (an error, not a denial); kept serialized.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub error_response: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeniedHttpResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, tag = "3")]
    pub body: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OkHttpResponse {
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    /// Deprecated; overrides `CheckResponse.dynamic_metadata` when set.
    #[prost(message, optional, tag = "3")]
    pub dynamic_metadata: Option<Struct>,
    #[prost(string, repeated, tag = "5")]
    pub headers_to_remove: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
    /// `google.protobuf.BoolValue` (deprecated `append`).
    #[prost(message, optional, tag = "2")]
    pub append: Option<BoolValue>,
    #[prost(int32, tag = "3")]
    pub append_action: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BoolValue {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
    #[prost(bytes = "vec", tag = "3")]
    pub raw_value: Vec<u8>,
}

/// The `filter_metadata[filter]` Struct of a serialized `envoy.config.core.v3.Metadata` (what
/// Envoy returns for the `metadata` property). None: not a Metadata, or no such entry.
pub(crate) fn filter_metadata(metadata: &[u8], filter: &str) -> Option<Struct> {
    Metadata::decode(metadata)
        .ok()?
        .filter_metadata
        .remove(filter)
}

impl Value {
    /// A scalar as text: strings as they are, numbers as JSON numbers (integral ones as
    /// integers), booleans as true/false. None: null, a Struct, a list or no kind.
    pub(crate) fn scalar_text(&self) -> Option<String> {
        match &self.kind {
            Some(Kind::Str(s)) => Some(s.clone()),
            Some(Kind::Bool(b)) => Some(b.to_string()),
            Some(Kind::Number(n)) => Some(match integral(*n) {
                Some(i) => i.to_string(),
                None => n.to_string(),
            }),
            _ => None,
        }
    }

    /// See [`Struct::from_json`].
    fn from_json(v: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        let kind = match v {
            J::Null => Kind::Null(0),
            J::Bool(b) => Kind::Bool(*b),
            J::Number(n) => Kind::Number(n.as_f64().unwrap_or(f64::NAN)),
            J::String(s) => Kind::Str(s.clone()),
            J::Array(items) => Kind::List(ListValue {
                values: items.iter().map(Value::from_json).collect(),
            }),
            J::Object(o) => Kind::Struct(Struct::from_json(o)),
        };
        Value { kind: Some(kind) }
    }

    /// As JSON: integral numbers as integers, a non-finite number (which JSON cannot hold) and
    /// a Value of no kind as null. Recursion is bounded by the decoder's limit.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.kind {
            None | Some(Kind::Null(_)) => J::Null,
            Some(Kind::Bool(b)) => J::Bool(*b),
            Some(Kind::Number(n)) => match integral(*n) {
                Some(i) => J::from(i),
                None => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
            },
            Some(Kind::Str(s)) => J::String(s.clone()),
            Some(Kind::List(l)) => J::Array(l.values.iter().map(Value::to_json).collect()),
            Some(Kind::Struct(s)) => s.to_json(),
        }
    }
}

impl Struct {
    /// The Struct protobuf's JSON mapping makes of a JSON object (numbers become doubles), as
    /// Envoy's `jwt_authn` does with a payload.
    /// Both maps are built by inserting, not collected: `collect` into a map sorts first,
    /// and each sort brings its own copy of the sort code into the `.wasm` (src/order.rs).
    pub(crate) fn from_json(obj: &serde_json::Map<String, serde_json::Value>) -> Struct {
        let mut fields = BTreeMap::new();
        for (k, v) in obj {
            fields.insert(k.clone(), Value::from_json(v));
        }
        Struct { fields }
    }

    /// As a JSON object (see [`Value::to_json`]).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (k, v) in &self.fields {
            map.insert(k.clone(), v.to_json());
        }
        serde_json::Value::Object(map)
    }
}

/// `n` as an integer when it is one that an f64 holds exactly (JSON `3`, not `3.5`).
fn integral(n: f64) -> Option<i64> {
    (n.fract() == 0.0 && n.abs() < 9.0e15).then_some(n as i64)
}

/// `message` as a gRPC body carries it: uncompressed, behind its big-endian u32 length.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut body = prefixed(message.len());
    body.extend_from_slice(message);
    body
}

/// `message` encoded as a gRPC body carries it ([`frame`]), straight into one buffer.
pub fn framed(message: &impl prost::Message) -> Vec<u8> {
    let mut body = prefixed(message.encoded_len());
    // A Vec grows as needed: encoding into one cannot run out of room.
    message.encode(&mut body).map(|()| body).unwrap_or_default()
}

/// A buffer holding the prefix of a `len`-byte gRPC message (no compression), room for the rest.
fn prefixed(len: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(5 + len);
    body.push(0);
    body.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    body
}

/// The length-prefixed messages of a gRPC body (each: a compression flag byte, a big-endian
/// u32 length, the message).
pub fn messages(mut body: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Some((&flag, rest)) = body.split_first() else {
            break;
        };
        let Some((len, rest)) = rest.split_at_checked(4) else {
            return Err("a gRPC message prefix cut short");
        };
        let len = u32::from_be_bytes(
            len.try_into()
                .map_err(|_| "a gRPC message prefix cut short")?,
        );
        if flag != 0 {
            return Err("a compressed gRPC message (none was asked for)");
        }
        let len = usize::try_from(len).map_err(|_| "a gRPC message too long")?;
        let Some((message, rest)) = rest.split_at_checked(len) else {
            return Err("a gRPC message cut short");
        };
        out.push(message);
        body = rest;
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::unreachable)]
mod tests {
    use super::*;

    fn v(kind: Kind) -> Value {
        Value { kind: Some(kind) }
    }

    fn obj(fields: Vec<(&str, Kind)>) -> Struct {
        Struct {
            fields: fields
                .into_iter()
                .map(|(k, x)| (k.to_string(), v(x)))
                .collect(),
        }
    }

    fn sample() -> Struct {
        obj(vec![
            ("iss", Kind::Str("https://issuer".into())),
            ("n", Kind::Number(42.0)),
            ("half", Kind::Number(0.5)),
            ("ok", Kind::Bool(true)),
            ("none", Kind::Null(0)),
            (
                "groups",
                Kind::List(ListValue {
                    values: vec![v(Kind::Str("a".into())), v(Kind::Str("b".into()))],
                }),
            ),
            ("nested", Kind::Struct(obj(vec![("x", Kind::Null(0))]))),
        ])
    }

    #[test]
    fn framing_round_trips() {
        let m = CheckRequest::default();
        let ext = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let m2 = CheckRequest {
            attributes: Some(AttributeContext {
                context_extensions: ext,
                ..AttributeContext::default()
            }),
        };
        for msg in [m, m2] {
            let bytes = msg.encode_to_vec();
            assert_eq!(framed(&msg), frame(&bytes));
            assert_eq!(messages(&frame(&bytes)).unwrap(), vec![&bytes[..]]);
        }
        assert!(messages(&[1, 0, 0, 0, 0]).is_err(), "compressed");
        assert!(messages(&[0, 0, 0, 0, 2, 7]).is_err(), "cut short");
        assert!(messages(&[0, 0, 0]).is_err(), "prefix cut short");
    }

    #[test]
    fn struct_round_trip_and_json() {
        let s = sample();
        assert_eq!(Struct::decode(s.encode_to_vec().as_slice()).unwrap(), s);
        let json = serde_json::json!({"iss": "https://issuer", "n": 42, "half": 0.5, "ok": true,
            "none": null, "groups": ["a", "b"], "nested": {"x": null}});
        assert_eq!(s.to_json(), json);
        let serde_json::Value::Object(o) = &json else {
            unreachable!()
        };
        assert_eq!(Struct::from_json(o).to_json(), json);
        let text = |k: Kind| v(k).scalar_text();
        assert_eq!(text(Kind::Number(42.0)).as_deref(), Some("42"));
        assert_eq!(text(Kind::Number(-0.25)).as_deref(), Some("-0.25"));
        assert_eq!(text(Kind::Bool(false)).as_deref(), Some("false"));
        assert_eq!(text(Kind::Null(0)), None);
        assert_eq!(Value::default().scalar_text(), None);
        assert_eq!(v(Kind::Number(f64::NAN)).to_json(), serde_json::Value::Null);
    }

    #[test]
    fn metadata_lookup() {
        let md = Metadata {
            filter_metadata: [("envoy.filters.http.jwt_authn".to_string(), sample())].into(),
        }
        .encode_to_vec();
        assert_eq!(
            filter_metadata(&md, "envoy.filters.http.jwt_authn"),
            Some(sample())
        );
        assert_eq!(filter_metadata(&md, "other"), None);
        assert_eq!(filter_metadata(b"\xff", "other"), None);
    }

    #[test]
    fn garbage_never_panics_and_deep_nesting_is_refused() {
        let good = sample().encode_to_vec();
        for cut in 0..good.len() {
            let _ = Struct::decode(&good[..cut]);
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
            let _ = Struct::decode(buf.as_slice());
            let _ = filter_metadata(&buf, "a");
        }
        // Lists in lists: refused past prost's recursion limit, not recursed into unbounded.
        let nested = |depth: usize| {
            let mut value = v(Kind::Null(0));
            for _ in 0..depth {
                value = v(Kind::List(ListValue {
                    values: vec![value],
                }));
            }
            Struct {
                fields: [("d".to_string(), value)].into(),
            }
            .encode_to_vec()
        };
        assert!(Struct::decode(nested(30).as_slice()).is_ok());
        assert!(Struct::decode(nested(100).as_slice()).is_err());
        // Structs in Structs (each level: map entry, Value, Struct): a filter's Struct in
        // Metadata holds 32 levels, not 33.
        let in_metadata = |depth: usize| {
            let mut s = obj(vec![]);
            for _ in 0..depth {
                s = obj(vec![("k", Kind::Struct(s))]);
            }
            let md = Metadata {
                filter_metadata: [("f".to_string(), s)].into(),
            };
            filter_metadata(&md.encode_to_vec(), "f")
        };
        assert!(in_metadata(32).is_some());
        assert!(in_metadata(33).is_none());
    }

    #[test]
    fn a_repeated_map_key_keeps_the_last_entry() {
        let one = |x: &str| obj(vec![("k", Kind::Str(x.into()))]).encode_to_vec();
        let both = [one("first"), one("last")].concat();
        let s = Struct::decode(both.as_slice()).unwrap();
        assert_eq!(s.to_json(), serde_json::json!({"k": "last"}));
    }
}
