//! A decision record as a `google.protobuf.Struct`, for access loggers to read field by field
//! (bundle `decisionRecords.structured`; docs/audit.md): Envoy's CEL formatter reads
//! `%CEL(filter_state['wasm.mcp_access.record'].policy)%` from it, which a JSON string
//! cannot give. What Envoy prints of each value decides its encoding:
//! - the record's members and the members of its objects (`request`, `limits`, `dry_run`)
//!   are the Struct's fields and a nested Struct's;
//! - strings stay strings, `true`/`false` booleans;
//! - numbers are strings holding their JSON text (CEL prints a double with six significant
//!   digits: `request.time` would print as `1.73333e+18`);
//! - arrays, and objects inside those objects, are strings holding their JSON text (CEL
//!   prints them as `CelList value`, `CelMap value`);
//! - `null` members are left out (Envoy then writes `-`, its mark for no value).
//!
//! The record string stays the record (its bytes are what receipts digest); this is a copy.

use std::collections::BTreeMap;

use prost::Message as _;

use super::RECORD_DEPTH;
use crate::json::{self, SyntaxError, Val, Visitor};
use crate::pb::{Kind, Struct, Value};

/// `record` (a JSON object) as a `google.protobuf.Struct`'s bytes; an error when it is not
/// a JSON object or repeats a key.
pub fn record_struct(record: &str) -> Result<Vec<u8>, String> {
    let mut b = Builder {
        bytes: record.as_bytes(),
        fields: BTreeMap::new(),
        nested: None,
        top_key: String::new(),
        inner_key: String::new(),
        raw: false,
        duplicate: None,
    };
    json::read(record.as_bytes(), RECORD_DEPTH, &mut b).map_err(|e| e.0)?;
    if let Some(at) = b.duplicate {
        return Err(format!("a key repeats at offset {at}"));
    }
    Ok(Struct { fields: b.fields }.encode_to_vec())
}

/// Envoy's `declare_property` arguments (its
/// `source/extensions/common/wasm/ext/declare_property.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct DeclarePropertyArguments {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(bool, tag = "2")]
    readonly: bool,
    /// `WasmType`: 3 is `Protobuf`, whose schema is the message's type URL.
    #[prost(int32, tag = "3")]
    kind: i32,
    #[prost(bytes = "vec", tag = "4")]
    schema: Vec<u8>,
    /// `LifeSpan`: 0 is `FilterChain`, as for undeclared properties.
    #[prost(int32, tag = "5")]
    span: i32,
}

/// The arguments of Envoy's foreign function `declare_property` declaring filter state
/// `name` (under `wasm.`) a mutable `google.protobuf.Struct` living as long as the filter chain.
pub fn declare_property(name: &str) -> Vec<u8> {
    DeclarePropertyArguments {
        name: name.into(),
        readonly: false,
        kind: 3,
        schema: b"type.googleapis.com/google.protobuf.Struct".to_vec(),
        span: 0,
    }
    .encode_to_vec()
}

/// Where a value sits: the record, one of its members, a member of one of its objects.
#[derive(Clone, Copy, PartialEq)]
enum Slot {
    Record,
    Top,
    Inner,
    Ignore,
}

struct Builder<'a> {
    bytes: &'a [u8],
    fields: BTreeMap<String, Value>,
    /// The fields of the record's object member being read.
    nested: Option<BTreeMap<String, Value>>,
    top_key: String,
    inner_key: String,
    /// An array or object is being read whose text becomes a string.
    raw: bool,
    duplicate: Option<usize>,
}

impl Builder<'_> {
    fn put(&mut self, slot: Slot, kind: Kind) {
        let value = Value { kind: Some(kind) };
        match (slot, &mut self.nested) {
            (Slot::Top, _) => {
                self.fields.insert(self.top_key.clone(), value);
            }
            (Slot::Inner, Some(n)) => {
                n.insert(self.inner_key.clone(), value);
            }
            _ => {}
        }
    }
}

fn key(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

impl<'a> Visitor<'a> for Builder<'a> {
    type Slot = Slot;
    type Error = SyntaxError;
    const ROOT: Slot = Slot::Record;
    const IGNORE: Slot = Slot::Ignore;

    fn member(&mut self, object: Slot, k: &[u8]) -> Slot {
        match object {
            Slot::Record => {
                self.top_key = key(k);
                Slot::Top
            }
            Slot::Top if self.nested.is_some() => {
                self.inner_key = key(k);
                Slot::Inner
            }
            _ => Slot::Ignore,
        }
    }

    fn duplicate_key(&mut self, _slot: Slot, at: usize) {
        self.duplicate.get_or_insert(at);
    }

    fn wants_text(&self, slot: Slot) -> bool {
        matches!(slot, Slot::Top | Slot::Inner)
    }

    fn value(&mut self, slot: Slot, val: Val<'a>) -> Result<(), SyntaxError> {
        let kind = match (slot, val) {
            (Slot::Record, Val::Object) => return Ok(()),
            (Slot::Record, _) => return Err(SyntaxError("not a JSON object".into())),
            (Slot::Top, Val::Object) => {
                self.nested = Some(BTreeMap::new());
                return Ok(());
            }
            (_, Val::Object | Val::Array) => {
                self.raw = true;
                return Ok(());
            }
            (_, Val::Str { decoded, .. }) => Kind::Str(key(decoded.as_deref().unwrap_or_default())),
            (_, Val::Number(text)) => Kind::Str(key(text)),
            (_, Val::Literal(b"true")) => Kind::Bool(true),
            (_, Val::Literal(b"false")) => Kind::Bool(false),
            (_, Val::Literal(_)) => return Ok(()),
        };
        self.put(slot, kind);
        Ok(())
    }

    fn closed(&mut self, slot: Slot, start: usize, end: usize) {
        if self.raw {
            self.raw = false;
            let text = key(self.bytes.get(start..end).unwrap_or_default());
            self.put(slot, Kind::Str(text));
        } else if slot == Slot::Top {
            if let Some(n) = self.nested.take() {
                let s = Struct { fields: n };
                self.put(Slot::Top, Kind::Struct(s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(record: &str) -> Struct {
        Struct::decode(record_struct(record).unwrap().as_slice()).unwrap()
    }

    fn s(v: &str) -> Value {
        Value {
            kind: Some(Kind::Str(v.into())),
        }
    }

    #[test]
    fn members_and_their_objects_are_fields_the_rest_json_text() {
        let record = r#"{"authz_cached":["a/b"],"cel_errors":0,"decision":"deny","dry_run":null,"limits":{"charged":["n/p/l"],"refused":null},"ok":true,"no":false,"request":{"headers":{"x-a":["1"]},"host":"h\"q","port":8080,"time":1733331234567890123},"seq":12345678}"#;
        let got = decode(record);
        let f = &got.fields;
        assert_eq!(f["authz_cached"], s(r#"["a/b"]"#));
        assert_eq!(f["cel_errors"], s("0"));
        assert_eq!(f["decision"], s("deny"));
        assert!(!f.contains_key("dry_run"));
        assert_eq!(f["seq"], s("12345678"));
        assert_eq!(f["ok"].kind, Some(Kind::Bool(true)));
        assert_eq!(f["no"].kind, Some(Kind::Bool(false)));
        let Some(Kind::Struct(limits)) = &f["limits"].kind else {
            panic!("{:?}", f["limits"]);
        };
        assert_eq!(limits.fields["charged"], s(r#"["n/p/l"]"#));
        assert!(!limits.fields.contains_key("refused"));
        let Some(Kind::Struct(req)) = &f["request"].kind else {
            panic!("{:?}", f["request"]);
        };
        assert_eq!(req.fields["headers"], s(r#"{"x-a":["1"]}"#));
        assert_eq!(req.fields["host"], s("h\"q"));
        assert_eq!(req.fields["port"], s("8080"));
        assert_eq!(req.fields["time"], s("1733331234567890123"));
        assert_eq!(f.len(), 8);
    }

    #[test]
    fn declares_a_struct_property() {
        // Protobuf wire bytes: field 1 (name) "r", field 3 (type) 3, field 4 (schema) the
        // Struct's 42-byte type URL; proto3 leaves the zeros (readonly, span) out.
        let mut want = b"\x0a\x01r\x18\x03\x22\x2a".to_vec();
        want.extend_from_slice(b"type.googleapis.com/google.protobuf.Struct");
        assert_eq!(declare_property("r"), want);
    }

    #[test]
    fn refuses_what_is_not_one_object() {
        for bad in [
            "[1]",
            "\"x\"",
            "{\"a\":1,\"a\":2}",
            "{\"r\":{\"a\":1,\"a\":2}}",
            "{",
            "{} x",
        ] {
            assert!(record_struct(bad).is_err(), "{bad}");
        }
        assert_eq!(decode("{}").fields.len(), 0);
    }
}
