"""The filter's protobuf messages (`filter/engine/src/pb.rs`: written for prost by hand, only
the fields the filter sends or reads) against the official Envoy API descriptors of PyPI
`xds-protos`: every field has the name, number and kind the API gives it. A field renumbered or
retyped here would otherwise only show up as a wrong CheckRequest, JWT claim or gRPC upstream."""

from __future__ import annotations

import re
from pathlib import Path

from envoy.config.core.v3 import address_pb2, base_pb2
from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import descriptor, struct_pb2, timestamp_pb2, wrappers_pb2
from google.rpc import status_pb2

SOURCE = Path(__file__).resolve().parents[2] / "filter" / "engine" / "src" / "pb.rs"

ctx = attribute_context_pb2.AttributeContext
MESSAGES = {
    "CheckRequest": external_auth_pb2.CheckRequest,
    "AttributeContext": ctx,
    "Metadata": base_pb2.Metadata,
    "Struct": struct_pb2.Struct,
    "Value": struct_pb2.Value,
    "ListValue": struct_pb2.ListValue,
    "Peer": ctx.Peer,
    "Address": address_pb2.Address,
    "SocketAddress": address_pb2.SocketAddress,
    "AttrRequest": ctx.Request,
    "Timestamp": timestamp_pb2.Timestamp,
    "HttpRequest": ctx.HttpRequest,
    "CheckResponse": external_auth_pb2.CheckResponse,
    "RpcStatus": status_pb2.Status,
    "DeniedHttpResponse": external_auth_pb2.DeniedHttpResponse,
    "HttpStatus": http_status_pb2.HttpStatus,
    "OkHttpResponse": external_auth_pb2.OkHttpResponse,
    "HeaderValueOption": base_pb2.HeaderValueOption,
    "BoolValue": wrappers_pb2.BoolValue,
    "HeaderValue": base_pb2.HeaderValue,
}
# The Value oneof's variants, by their proto field names.
KIND = {"Null": "null_value", "Number": "number_value", "Str": "string_value", "Bool": "bool_value",
        "Struct": "struct_value", "List": "list_value"}

F = descriptor.FieldDescriptor
# prost attribute -> the proto types it may stand for (bytes may hold a message kept serialized).
PROST = {
    "message": {F.TYPE_MESSAGE}, "string": {F.TYPE_STRING}, "bool": {F.TYPE_BOOL},
    "int32": {F.TYPE_INT32, F.TYPE_ENUM}, "int64": {F.TYPE_INT64}, "uint32": {F.TYPE_UINT32},
    "double": {F.TYPE_DOUBLE}, "bytes": {F.TYPE_BYTES, F.TYPE_MESSAGE}, "btree_map": {F.TYPE_MESSAGE},
}


def rust_fields() -> dict[str, list[tuple[str, str, int]]]:
    """(field, prost kind, tag) of each message and of the oneof Kind, from the source."""
    src = SOURCE.read_text()
    pb = src[:src.index("#[cfg(test)]")]
    out: dict[str, list[tuple[str, str, int]]] = {}
    for m in re.finditer(r"pub (?:struct|enum) (\w+) \{(.*?)\n\}", pb, re.S):
        fields = re.findall(r'#\[prost\((\w+)[^\]]*?tags? = "(\d+)"\)\]\s*(?:pub )?(\w+)', m[2])
        out[m[1]] = [(name, kind, int(tag)) for kind, tag, name in fields]
    return out


def test_every_field_matches_the_envoy_api() -> None:
    fields = rust_fields()
    assert set(fields) == set(MESSAGES) | {"Kind"}, sorted(fields)
    checked = 0
    for name, message in MESSAGES.items():
        by_name = message.DESCRIPTOR.fields_by_name
        for field, kind, tag in fields[name]:
            assert field in by_name, f"{name}.{field} is not a field of {message.DESCRIPTOR.full_name}"
            d = by_name[field]
            assert d.number == tag, f"{name}.{field}: tag {tag}, the API says {d.number}"
            assert d.type in PROST[kind], f"{name}.{field}: prost {kind}, the API's type is {d.type}"
            checked += 1
    value = struct_pb2.Value.DESCRIPTOR.fields_by_name
    for variant, kind, tag in fields["Kind"]:
        d = value[KIND[variant]]
        assert (d.number, d.type in PROST[kind]) == (tag, True), variant
        checked += 1
    assert checked >= 50, checked


def test_the_check_can_fail() -> None:
    # The comparison sees a wrong number: the parser reads the tags it compares.
    assert ("code", "int32", 1) in rust_fields()["RpcStatus"]
    assert status_pb2.Status.DESCRIPTOR.fields_by_name["code"].number == 1
    assert status_pb2.Status.DESCRIPTOR.fields_by_name["message"].number != 1
