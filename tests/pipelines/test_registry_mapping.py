"""The type mapping of registry loads, field by field (pipelines.type_mapping through the
decoders of pipelines.schema_decoding), and the evolution rule (pipelines.schema_evolution).
Pure: no Spark, no registry (the decoders take a writer schema)."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json

import pyarrow as pa
import pytest

from pipelines.decoding.registry_client import Reference, WriterSchema
from pipelines.decoding.schema_decoding import (AvroGroupDecoder, JsonGroupDecoder, ProtobufGroupDecoder,
                                       read_varint, split_frame)
from pipelines.decoding.schema_evolution import IncompatibleChange, merge_types
from pipelines.decoding.type_mapping import UnmappableSchema

UTC = dt.timezone.utc


def _types(decoder) -> dict:
    return {f.name: f.type for f in decoder.arrow}


def _decode(decoder, bodies: list[bytes]):
    arr, errors = decoder.decode_many(bodies, [0] * len(bodies))
    return arr.to_pylist(), errors


# ---------------------------------------------------------------------------
# Avro

AVRO = {"type": "record", "name": "R", "namespace": "t", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"},
    {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
    {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "a", "type": {"type": "array", "items": "long"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "opt", "type": ["null", "string"]},
    {"name": "u", "type": ["null", "string", "long"]},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "nothing", "type": "null"},
    {"name": "rec", "type": {"type": "record", "name": "In", "fields": [
        {"name": "x", "type": "int"}, {"name": "again", "type": ["null", "Color"]}]}},
]}


def _avro_body(schema, rec) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), rec)
    return buf.getvalue()


def test_avro_types_field_by_field():
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(AVRO)))
    t = _types(dec)
    assert t == {
        "b": pa.bool_(), "i": pa.int32(), "l": pa.int64(), "f": pa.float32(), "d": pa.float64(),
        "by": pa.binary(), "s": pa.string(), "fx": pa.binary(), "e": pa.string(),
        "a": pa.list_(pa.field("element", pa.int64())),
        "m": pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string())),
        "opt": pa.string(), "u": pa.struct([("string", pa.string()), ("long", pa.int64())]),
        "dec": pa.decimal128(9, 2), "day": pa.date32(), "tm": pa.time64("us"),
        "ts": pa.timestamp("us", tz="UTC"), "tsu": pa.timestamp("us", tz="UTC"),
        "lts": pa.timestamp("us"), "id": pa.string(),
        "rec": pa.struct([("x", pa.int32()), ("again", pa.string())])}
    assert "nothing" not in t   # a field that can only be null has no column
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    rec = {"b": True, "i": 1, "l": 2, "f": 1.5, "d": 2.5, "by": b"\x01", "s": "s", "fx": b"abcd",
           "e": "GREEN", "a": [1, 2], "m": {"k": "v"}, "opt": None, "u": 7,
           "dec": decimal.Decimal("12.34"), "day": dt.date(2024, 5, 6), "tm": dt.time(1, 2, 3),
           "ts": when, "tsu": when, "lts": dt.datetime(2024, 5, 6), "nothing": None,
           "id": "8a9c5e57-2c2d-4e3b-9a6c-8f7f0b0f6a1e", "rec": {"x": 3, "again": "RED"}}
    (got,), errors = _decode(dec, [_avro_body(AVRO, rec)])
    assert errors == [None]
    assert got["u"] == {"string": None, "long": 7}
    assert got["m"] == [("k", "v")] and got["a"] == [1, 2] and got["e"] == "GREEN"
    assert got["dec"] == decimal.Decimal("12.34") and got["tm"] == dt.time(1, 2, 3)
    assert got["ts"] == when and got["lts"] == dt.datetime(2024, 5, 6)
    assert got["id"] == "8a9c5e57-2c2d-4e3b-9a6c-8f7f0b0f6a1e"
    assert got["rec"] == {"x": 3, "again": "RED"} and got["opt"] is None


def test_avro_union_of_records_and_scalar_top_level():
    union = {"type": "record", "name": "W", "fields": [{"name": "p", "type": [
        "null", {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]},
        {"type": "record", "name": "B", "fields": [{"name": "x", "type": "int"}]}]}]}
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(union)))
    got, _ = _decode(dec, [_avro_body(union, {"p": ("B", {"x": 1})}),
                           _avro_body(union, {"p": None})])
    assert got == [{"p": {"A": None, "B": {"x": 1}}}, {"p": None}]
    scalar = AvroGroupDecoder(WriterSchema(2, "AVRO", '"long"'))
    assert _decode(scalar, [_avro_body("long", 5)])[0] == [{"value": 5}]


def test_avro_references_recursion_and_bad_bodies():
    ref = {"type": "record", "name": "Addr", "namespace": "t", "fields": [
        {"name": "city", "type": "string"}]}
    main = {"type": "record", "name": "P", "namespace": "t", "fields": [
        {"name": "home", "type": "t.Addr"}]}
    ws = WriterSchema(3, "AVRO", json.dumps(main), (
        Reference("t.Addr", "addr", 1, WriterSchema(None, "AVRO", json.dumps(ref))),))
    dec = AvroGroupDecoder(ws)
    good = _avro_body({**main, "fields": [{"name": "home", "type": ref}]}, {"home": {"city": "X"}})
    got, errors = _decode(dec, [good, good + b"\x00", good[:-1]])
    assert got[0] == {"home": {"city": "X"}} and got[1] is None and got[2] is None
    assert "left after the Avro datum" in errors[1] and errors[2].startswith("Avro decode failed")
    rec = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(UnmappableSchema, match="recursive"):
        AvroGroupDecoder(WriterSchema(4, "AVRO", json.dumps(rec)))


# ---------------------------------------------------------------------------
# Protobuf


def _proto_file():
    from google.protobuf import descriptor_pb2 as d

    f = d.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3")
    f.dependency.extend(["google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
                         "google/protobuf/wrappers.proto", "google/protobuf/struct.proto",
                         "google/protobuf/empty.proto"])
    T, L = d.FieldDescriptorProto, d.FieldDescriptorProto
    en = f.enum_type.add(name="Kind")
    en.value.add(name="KIND_UNSET", number=0)
    en.value.add(name="BIG", number=1)
    m = f.message_type.add(name="Order")
    inner = m.nested_type.add(name="Line")
    inner.field.add(name="sku", number=1, type=T.TYPE_STRING, label=L.LABEL_OPTIONAL)
    entry = m.nested_type.add(name="TagsEntry", options=d.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=L.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=T.TYPE_INT32, label=L.LABEL_OPTIONAL)
    m.oneof_decl.add(name="pay")

    def add(name, num, typ, label=L.LABEL_OPTIONAL, type_name=None, oneof=None):
        fd = m.field.add(name=name, number=num, type=typ, label=label)
        if type_name:
            fd.type_name = type_name
        if oneof is not None:
            fd.oneof_index = oneof

    add("d", 1, T.TYPE_DOUBLE)
    add("f", 2, T.TYPE_FLOAT)
    add("i32", 3, T.TYPE_INT32)
    add("s32", 4, T.TYPE_SINT32)
    add("i64", 5, T.TYPE_INT64)
    add("u32", 6, T.TYPE_UINT32)
    add("u64", 7, T.TYPE_UINT64)
    add("ok", 8, T.TYPE_BOOL)
    add("s", 9, T.TYPE_STRING)
    add("by", 10, T.TYPE_BYTES)
    add("kind", 11, T.TYPE_ENUM, type_name=".shop.Kind")
    add("line", 12, T.TYPE_MESSAGE, type_name=".shop.Order.Line")
    add("lines", 13, T.TYPE_MESSAGE, L.LABEL_REPEATED, ".shop.Order.Line")
    add("nums", 14, T.TYPE_INT64, L.LABEL_REPEATED)
    add("tags", 15, T.TYPE_MESSAGE, L.LABEL_REPEATED, ".shop.Order.TagsEntry")
    add("card", 16, T.TYPE_STRING, oneof=0)
    add("cash", 17, T.TYPE_INT64, oneof=0)
    add("at", 18, T.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    add("took", 19, T.TYPE_MESSAGE, type_name=".google.protobuf.Duration")
    add("maybe", 20, T.TYPE_MESSAGE, type_name=".google.protobuf.Int32Value")
    add("extra", 21, T.TYPE_MESSAGE, type_name=".google.protobuf.Struct")
    add("nothing", 22, T.TYPE_MESSAGE, type_name=".google.protobuf.Empty")
    return f


def _proto_class(fdp, name="shop.Order"):
    from google.protobuf import descriptor_pool, message_factory
    from google.protobuf import duration_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    for mod in (timestamp_pb2, duration_pb2, wrappers_pb2, struct_pb2, empty_pb2):
        pool.AddSerializedFile(mod.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_protobuf_types_field_by_field():
    fdp = _proto_file()
    ws = WriterSchema(5, "PROTOBUF", base64.b64encode(fdp.SerializeToString()).decode())
    dec = ProtobufGroupDecoder(ws, (0,))
    line = pa.struct([("sku", pa.string())])
    assert _types(dec) == {
        "d": pa.float64(), "f": pa.float32(), "i32": pa.int32(), "s32": pa.int32(),
        "i64": pa.int64(), "u32": pa.int64(), "u64": pa.int64(), "ok": pa.bool_(),
        "s": pa.string(), "by": pa.binary(), "kind": pa.string(), "line": line,
        "lines": pa.list_(pa.field("element", line)),
        "nums": pa.list_(pa.field("element", pa.int64())),
        "tags": pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int32())),
        "card": pa.string(), "cash": pa.int64(), "at": pa.timestamp("us", tz="UTC"),
        "took": pa.int64(), "maybe": pa.int32(), "extra": pa.string()}
    Order = _proto_class(fdp)
    msg = Order(d=1.5, i32=-3, s32=-4, i64=5, u32=6, u64=7, ok=True, s="x", by=b"\x00",
                kind=1, nums=[1, 2], cash=100)
    msg.line.sku = "a"
    msg.lines.add(sku="b")
    msg.tags["t"] = 9
    msg.at.FromDatetime(dt.datetime(2024, 1, 2, 3, 4, 5, 6000))
    msg.took.FromMicroseconds(1_500_000)
    msg.maybe.value = 0
    msg.extra.update({"k": 1})
    empty = Order()
    (got, blank), errors = _decode(dec, [msg.SerializeToString(), empty.SerializeToString()])
    assert errors == [None, None]
    assert got["kind"] == "BIG" and got["line"] == {"sku": "a"} and got["lines"] == [{"sku": "b"}]
    assert got["tags"] == [("t", 9)] and got["nums"] == [1, 2]
    assert (got["card"], got["cash"]) == (None, 100)        # the oneof member set, the other null
    assert got["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    assert got["took"] == 1_500_000 and got["maybe"] == 0 and json.loads(got["extra"]) == {"k": 1}
    # proto3 scalars without presence read as their default; messages and wrappers as null
    assert (blank["i32"], blank["s"], blank["kind"]) == (0, "", "KIND_UNSET")
    assert (blank["line"], blank["at"], blank["maybe"]) == (None, None, None)


def test_protobuf_message_indexes_and_bad_bodies():
    assert split_frame(b"\x00\x00\x00\x00\x07\x00rest", "protobuf") == (7, (0,), 6)
    assert split_frame(b"\x00\x00\x00\x00\x07\x04\x02\x00rest", "protobuf") == (7, (1, 0), 8)
    assert read_varint(b"\x03", 0) == (-2, 1)
    with pytest.raises(ValueError, match="header"):
        split_frame(b"\x01abcde", "avro")
    fdp = _proto_file()
    ws = WriterSchema(5, "PROTOBUF", base64.b64encode(fdp.SerializeToString()).decode())
    nested = ProtobufGroupDecoder(ws, (0, 0))       # Order.Line
    assert _types(nested) == {"sku": pa.string()}
    got, errors = _decode(ProtobufGroupDecoder(ws, (0,)), [b"\xff\xff\xff"])
    assert got == [None] and errors[0].startswith("Protobuf decode failed")
    with pytest.raises(UnmappableSchema):
        ProtobufGroupDecoder(ws, (3,))


# ---------------------------------------------------------------------------
# JSON Schema

JSON_SCHEMA = {
    "type": "object", "$defs": {"Addr": {"type": "object", "properties": {
        "city": {"type": "string"}}}},
    "properties": {
        "s": {"type": "string"}, "n": {"type": ["integer", "null"]}, "x": {"type": "number"},
        "ok": {"type": "boolean"}, "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "addr": {"$ref": "#/$defs/Addr"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {"type": "object"}, "any": {},
        "either": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "mixed": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "shape": {"oneOf": [
            {"type": "object", "properties": {"r": {"type": "number"}}},
            {"type": "object", "properties": {"w": {"type": "integer"}, "r": {"type": "integer"}}}]},
        "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                           {"type": "object", "properties": {"b": {"type": "integer"}}}]},
    }}


def test_json_schema_types_field_by_field():
    dec = JsonGroupDecoder(WriterSchema(6, "JSON", json.dumps(JSON_SCHEMA)))
    assert _types(dec) == {
        "s": pa.string(), "n": pa.int64(), "x": pa.float64(), "ok": pa.bool_(),
        "at": pa.timestamp("us", tz="UTC"), "day": pa.date32(),
        "tags": pa.list_(pa.field("element", pa.string())),
        "addr": pa.struct([("city", pa.string())]),
        "counts": pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int64())),
        "free": pa.string(), "any": pa.string(), "either": pa.int64(), "mixed": pa.string(),
        "shape": pa.struct([("r", pa.float64()), ("w", pa.int64())]),
        "both": pa.struct([("a", pa.string()), ("b", pa.int64())])}
    doc = {"s": "a", "n": None, "x": 2, "ok": False, "at": "2024-01-02T03:04:05Z",
           "day": "2024-01-02", "tags": ["t"], "addr": {"city": "Oslo", "zip": "x"},
           "counts": {"a": 1}, "free": {"k": [1]}, "any": 3, "either": 4, "mixed": 5,
           "shape": {"r": 1}, "both": {"a": "q", "b": 2}, "unknown": 1}
    bad = dict(doc, n="seven")
    (got, none), errors = _decode(dec, [json.dumps(doc).encode(), json.dumps(bad).encode()])
    assert errors[0] is None and none is None and "expected an integer" in errors[1]
    assert got["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert got["day"] == dt.date(2024, 1, 2) and got["addr"] == {"city": "Oslo"}
    assert got["counts"] == [("a", 1)] and json.loads(got["free"]) == {"k": [1]}
    assert got["mixed"] == "5" and got["shape"] == {"r": 1.0, "w": None}
    assert got["x"] == 2.0 and got["both"] == {"a": "q", "b": 2}
    _, errs = _decode(dec, [b"[1, 2]", b"{not json"])
    assert "expected a JSON object" in errs[0] and errs[1].startswith("JSON decode failed")


def test_json_schema_references_and_recursion():
    ref = {"type": "object", "properties": {"city": {"type": "string"}}}
    main = {"type": "object", "properties": {"home": {"$ref": "addr.json"}}}
    ws = WriterSchema(7, "JSON", json.dumps(main), (
        Reference("addr.json", "addr", 1, WriterSchema(None, "JSON", json.dumps(ref))),))
    assert _types(JsonGroupDecoder(ws)) == {"home": pa.struct([("city", pa.string())])}
    rec = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    with pytest.raises(UnmappableSchema, match="recursive"):
        JsonGroupDecoder(WriterSchema(8, "JSON", json.dumps(rec)))


# ---------------------------------------------------------------------------
# evolution


def test_merge_types_evolution_rules():
    s = lambda *f: pa.struct(list(f))  # noqa: E731
    table = s(("id", pa.int32()), ("n", pa.struct([("a", pa.float32())])),
              ("d", pa.decimal128(9, 2)), ("l", pa.list_(pa.field("element", pa.int32()))))
    writer = s(("id", pa.int64()), ("n", pa.struct([("a", pa.float64()), ("b", pa.string())])),
               ("d", pa.decimal128(12, 2)), ("l", pa.list_(pa.field("element", pa.int64()))),
               ("new", pa.string()))
    assert merge_types(table, writer, "") == s(
        ("id", pa.int64()), ("n", pa.struct([("a", pa.float64()), ("b", pa.string())])),
        ("d", pa.decimal128(12, 2)), ("l", pa.list_(pa.field("element", pa.int64()))),
        ("new", pa.string()))
    # a field the writer lacks stays (never dropped)
    assert merge_types(table, s(("id", pa.int32())), "") == table
    with pytest.raises(IncompatibleChange, match="n.a"):
        merge_types(table, s(("n", pa.struct([("a", pa.string())]))), "")
    with pytest.raises(IncompatibleChange, match="scale"):
        merge_types(table, s(("d", pa.decimal128(9, 3))), "")
    # a zoned timestamp cannot go into a column without a zone; a local timestamp fits a
    # zoned column an older version made for it (its wall clock stored as UTC)
    with pytest.raises(IncompatibleChange):
        merge_types(s(("t", pa.timestamp("us"))), s(("t", pa.timestamp("us", tz="UTC"))), "")
    zoned = s(("t", pa.timestamp("us", tz="UTC")))
    assert merge_types(zoned, s(("t", pa.timestamp("us"))), "") == zoned


def test_protobuf_schema_as_proto_text():
    text = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  map<string, int32> tags = 2;
  google.protobuf.Timestamp at = 3;
  message Line { string sku = 1; }
  repeated Line lines = 4;
}
"""
    dec = ProtobufGroupDecoder(WriterSchema(9, "PROTOBUF", text), (0,))
    line = pa.struct([("sku", pa.string())])
    assert _types(dec) == {
        "id": pa.int64(),
        "tags": pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int32())),
        "at": pa.timestamp("us", tz="UTC"), "lines": pa.list_(pa.field("element", line))}


COLUMNAR = {"type": "record", "name": "C", "namespace": "t", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"},
    {"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "opt", "type": ["null", "string"]}, {"name": "nothing", "type": "null"},
    {"name": "u", "type": ["null", "long", "string", "E"]},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "in", "type": ["null", {"type": "record", "name": "In", "fields": [
        {"name": "x", "type": ["null", "int"]}, {"name": "e2", "type": "E"}]}]},
]}


def _random_record(rnd):
    def maybe(v):
        return None if rnd.random() < 0.3 else v
    return {
        "b": rnd.random() < 0.5, "i": rnd.randint(-2**31, 2**31 - 1),
        "l": rnd.randint(-2**63, 2**63 - 1), "f": rnd.choice([0.5, -1.25, 3e10]),
        "d": rnd.uniform(-1e300, 1e300), "by": rnd.randbytes(rnd.randint(0, 9)),
        "s": "".join(rnd.choice("aé€😀 ") for _ in range(rnd.randint(0, 6))),
        "fx": rnd.randbytes(2), "e": rnd.choice("ABC"), "opt": maybe("o" * rnd.randint(0, 3)),
        "nothing": None, "u": rnd.choice([None, rnd.randint(-5, 5), "str", "B"]),
        "ts": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=rnd.randint(0, 10**9)),
        "lts": dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**12)),
        "day": dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-1000, 30000)),
        "tm": dt.time(rnd.randint(0, 23), rnd.randint(0, 59), 1, 1000 * rnd.randint(0, 999)),
        "in": maybe({"x": maybe(rnd.randint(-9, 9)), "e2": rnd.choice("ABC")})}


@pytest.mark.parametrize("seed", range(5))
def test_avro_columnar_decoding_equals_value_by_value(seed):
    import random

    rnd = random.Random(seed)
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(COLUMNAR)))
    assert dec.columnar
    bodies = [_avro_body(COLUMNAR, _random_record(rnd)) for _ in range(200)]
    if seed >= 3:   # a bad value: the whole group falls back, the bad one is a dead letter
        bad = rnd.randrange(len(bodies))
        bodies[bad] = bodies[bad][:-1] if seed == 3 else bodies[bad] + b"\x00"
    framed = pa.array([b"\x00\x00\x00\x00\x01" + b for b in bodies], pa.binary())
    columns, col_errors = dec.decode_array(framed, [5] * len(bodies))
    one_by_one, errors = dec.decode_many(framed.to_pylist(), [5] * len(bodies))
    assert columns.type == one_by_one.type == dec.arrow
    assert columns.to_pylist() == one_by_one.to_pylist()
    assert col_errors == errors
    assert (sum(e is not None for e in errors) == 1) == (seed >= 3)
