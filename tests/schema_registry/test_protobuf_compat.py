"""Protobuf compatibility rules (after Confluent's ProtobufCompatibilityChecker), one row per
rule: (name, original .proto, updated .proto, the incompatible difference or None)."""
from __future__ import annotations

import base64

import pytest

from kafkastore.errors import SchemaRegistryError
from kafkastore.schema_registry import protobuf_schema as P
from kafkastore.schema_registry.protobuf_compat import incompatibilities

BASE = 'syntax = "proto3"; package shop; message Order { int32 id = 1; string name = 2; }'


def msg(body: str, package: str = "shop", syntax: str = "proto3", name: str = "Order") -> str:
    return f'syntax = "{syntax}"; package {package}; message {name} {{ {body} }}'


CASES = [
    ("field added", BASE, msg("int32 id = 1; string name = 2; double total = 3;"), None),
    ("field removed", BASE, msg("int32 id = 1;"), None),
    ("field renamed", BASE, msg("int32 id = 1; string title = 2;"), None),
    ("int32 to int64 (same wire group)", BASE, msg("int64 id = 1; string name = 2;"), None),
    ("int32 to bool (same wire group)", BASE, msg("bool id = 1; string name = 2;"), None),
    ("string to bytes", BASE, msg("int32 id = 1; bytes name = 2;"), None),
    ("int32 to sint32", BASE, msg("sint32 id = 1; string name = 2;"), "FIELD_SCALAR_KIND_CHANGED"),
    ("int32 to string", BASE, msg("string id = 1; string name = 2;"), "FIELD_SCALAR_KIND_CHANGED"),
    ("fixed32 to sfixed32", msg("fixed32 id = 1;"), msg("sfixed32 id = 1;"), None),
    ("scalar to message", msg("int32 id = 1; message N {}"), msg("N id = 1; message N {}"),
     "FIELD_KIND_CHANGED"),
    ("message type changed", msg("A a = 1; message A {} message B {}"),
     msg("B a = 1; message A {} message B {}"), "FIELD_NAMED_TYPE_CHANGED"),
    ("map value changed", msg("map<string, int32> m = 1;"), msg("map<string, string> m = 1;"),
     "FIELD_KIND_CHANGED"),
    ("message removed", BASE + " message Extra { int32 x = 1; }", BASE, "MESSAGE_REMOVED"),
    ("message renamed", BASE, msg("int32 id = 1; string name = 2;", name="Purchase"), "MESSAGE_REMOVED"),
    ("message added", BASE, BASE + " message Extra { int32 x = 1; }", None),
    ("package changed", BASE, msg("int32 id = 1; string name = 2;", package="store"), None),
    ("required field added", msg("optional int32 id = 1;", syntax="proto2"),
     msg("optional int32 id = 1; required int32 n = 2;", syntax="proto2"), "REQUIRED_FIELD_ADDED"),
    ("required field removed", msg("optional int32 id = 1; required int32 n = 2;", syntax="proto2"),
     msg("optional int32 id = 1;", syntax="proto2"), "REQUIRED_FIELD_REMOVED"),
    ("optional made required", msg("optional int32 n = 2;", syntax="proto2"),
     msg("required int32 n = 2;", syntax="proto2"), "REQUIRED_FIELD_ADDED"),
    ("one field moved into a new oneof", BASE, msg("oneof k { int32 id = 1; } string name = 2;"), None),
    ("two fields moved into a new oneof", BASE, msg("oneof k { int32 id = 1; string name = 2; }"),
     "MULTIPLE_FIELDS_MOVED_TO_ONEOF"),
    ("field moved into an existing oneof", msg("int32 id = 1; oneof k { string name = 2; }"),
     msg("oneof k { string name = 2; int32 id = 1; }"), "FIELD_MOVED_TO_EXISTING_ONEOF"),
    ("oneof field added", msg("oneof k { string name = 2; }"), msg("oneof k { string name = 2; int32 x = 3; }"),
     None),
    ("singular scalar made repeated", BASE, msg("repeated int32 id = 1; string name = 2;"), None),
    ("enum constant added", msg("E e = 1; enum E { A = 0; }"), msg("E e = 1; enum E { A = 0; B = 1; }"), None),
    ("nested message field type changed", msg("Inner i = 1; message Inner { int32 x = 1; }"),
     msg("Inner i = 1; message Inner { string x = 1; }"), "FIELD_SCALAR_KIND_CHANGED"),
]


@pytest.mark.parametrize("name,original,update,difference", CASES, ids=[c[0] for c in CASES])
def test_rule(name, original, update, difference):
    problems = incompatibilities(P.parse(original), P.parse(update))
    if difference is None:
        assert problems == []
    else:
        assert problems and all(p.startswith(difference) for p in problems), problems


def _descriptor_b64(text_like_fields) -> str:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    m = fd.message_type.add(name="Order")
    for name, number, ftype in text_like_fields:
        m.field.add(name=name, number=number, type=ftype, label=1)
    return base64.b64encode(fd.SerializeToString()).decode()


def test_a_serialized_descriptor_reads_as_its_text():
    """confluent-kafka's Python serializer registers a base64 FileDescriptorProto; the rules
    compare it with .proto text of the same file as equal."""
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FDP

    b64 = _descriptor_b64([("id", 1, FDP.TYPE_INT32), ("name", 2, FDP.TYPE_STRING)])
    assert P.parse(b64) == P.parse(BASE)
    changed = _descriptor_b64([("id", 1, FDP.TYPE_STRING), ("name", 2, FDP.TYPE_STRING)])
    assert incompatibilities(P.parse(BASE), P.parse(changed))[0].startswith("FIELD_SCALAR_KIND_CHANGED")


@pytest.mark.parametrize("bad", ["message {", "syntax = \"proto3\"; message M { int32 = 1; }"])
def test_bad_text_is_an_invalid_schema(bad):
    with pytest.raises(SchemaRegistryError) as e:
        P.parse(bad)
    assert e.value.error_code == 42201


RICH = """syntax = "proto3"; package shop; import "google/protobuf/timestamp.proto";
message Order { int64 id = 1; optional string note = 2; repeated Line lines = 3;
  map<string, int32> tags = 4; oneof pay { string card = 5; Cash cash = 6; } Status status = 7;
  google.protobuf.Timestamp at = 8;
  message Line { string sku = 1; int32 qty = 2; } enum Status { NEW = 0; DONE = 1; } }
message Cash { double amount = 1; }"""


def test_text_compiles_to_a_descriptor_protobuf_loads():
    """format=serialized: .proto text compiled to a FileDescriptorProto that protobuf's own
    pool accepts (nested types, maps, oneofs, proto3 optional, an imported well-known type)."""
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(P.to_descriptor(RICH))
    Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    o = Order(id=3, tags={"a": 1}, card="x", status=1)
    o.lines.add(sku="s", qty=2)
    back = Order.FromString(o.SerializeToString())
    assert (back.id, dict(back.tags), back.WhichOneof("pay"), back.lines[0].qty) == (3, {"a": 1}, "card", 2)
    assert not back.HasField("note")      # proto3 optional keeps presence
    assert P.parse(P.to_serialized(RICH)) == P.parse(RICH)


def test_a_descriptor_prints_as_text_that_reads_the_same():
    text = P.to_text(P.to_descriptor(RICH))
    assert "map<string, int32> tags = 4;" in text and "oneof pay {" in text
    assert "optional string note = 2;" in text
    assert P.parse(text) == P.parse(RICH)
