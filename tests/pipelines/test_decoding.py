"""Value decoders: raw, JSON (Spark DDL), Avro (inline, file, Confluent header), dead letters."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct

import fastavro
import pyarrow as pa
import pytest

from kafkastore.errors import ConfigError
from pipelines.decoding.values import (AvroDecoder, DecodeOptions, count_dead_letters, decode_value,
                                       json_error_detail, parse_avro_schema)

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
             "timestamp timestamp, timestampType int, "
             "headers array<struct<key:string,value:binary>>")
TS = dt.datetime(2024, 1, 1)

AVRO_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 9, "scale": 2}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "ship", "type": ["null", {"type": "record", "name": "Addr",
                                          "fields": [{"name": "city", "type": "string"}]}]},
        {"name": "bill", "type": ["null", "Addr"]},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
    ],
}
ORDER = {"id": 7, "customer": "ann", "at": dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone.utc),
         "day": dt.date(2024, 3, 1), "amount": decimal.Decimal("12.50"), "status": "PAID",
         "tags": ["a", "b"], "attrs": {"x": 1}, "ship": {"city": "Oslo"}, "bill": None,
         "uid": "0b9f8a2e-2d55-4c59-9d3c-6f4c2d1d2b11", "t": 1000}


def avro_bytes(record, schema=AVRO_SCHEMA, schema_id=None):
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    body = buf.getvalue()
    return body if schema_id is None else b"\x00" + struct.pack(">I", schema_id) + body


def kafka_df(spark, values, partition=0):
    rows = [(b"k%d" % i, v, "orders", partition, i, TS, 0, [("h", b"1")])
            for i, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_DDL)


# ---------------------------------------------------------------------------
# options


def test_options_accept_both_spellings_and_refuse_unknown():
    a = DecodeOptions.parse({"valueFormat": "JSON", "valueSchema": "a int", "keepRawValue": "true"})
    b = DecodeOptions.parse({"value_format": "json", "value_schema": "a int"}, keep_raw_value=True)
    assert a == b and a.value_format == "json" and a.keep_raw_value
    assert DecodeOptions.parse(None).value_format == "raw"
    with pytest.raises(ConfigError, match="unknown decoder option 'valueFromat'"):
        DecodeOptions.parse({"valueFromat": "json"})
    with pytest.raises(ConfigError, match="needs valueSchema"):
        DecodeOptions.parse({"valueFormat": "avro"})
    with pytest.raises(ConfigError, match="confluentWireFormat"):
        DecodeOptions.parse({"valueFormat": "avro", "valueSchema": "{}",
                             "confluentWireFormat": "maybe"})
    with pytest.raises(ConfigError, match="valueFormat must be"):
        DecodeOptions.parse({"valueFormat": "xml"})
    with pytest.raises(ConfigError, match="needs schemaRegistry"):
        DecodeOptions.parse({"valueFormat": "protobuf"})
    with pytest.raises(ConfigError, match="schemaRegistry or valueSchema"):
        DecodeOptions.parse({"valueFormat": "avro", "valueSchema": "{}",
                             "schemaRegistry": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="onIncompatible"):
        DecodeOptions.parse({"valueFormat": "avro", "schemaRegistry": "http://127.0.0.1:1",
                             "onIncompatible": "ignore"})
    reg = DecodeOptions.parse({"valueFormat": "json-schema", "schemaRegistry": "http://h:1"})
    assert (reg.schema_registry, reg.on_incompatible) == ("http://h:1", "dead-letter")
    with pytest.raises(ConfigError, match="not both"):
        DecodeOptions.parse({"valueFormat": "json", "valueSchema": "a int",
                             "valueSchemaFile": "/x"})


# ---------------------------------------------------------------------------
# raw and json


def test_raw_is_a_no_op(spark):
    df = kafka_df(spark, [b"a", None])
    d = decode_value(df)
    assert d.good is df
    assert d.dead_letters.columns[-1] == "error" and d.dead_letters.count() == 0


def test_json_good_rows_and_dead_letters(spark):
    values = [b'{"id": 1, "name": "x", "tags": ["a"]}',     # 0 good
              b'{"id": "one"}',                              # 1 wrong type
              b'not json',                                   # 2 malformed
              None,                                          # 3 tombstone: good, null fields
              b'',                                           # 4 empty
              b'\xff{"id": 1}',                              # 5 not UTF-8
              b'[1, 2]',                                     # 6 not an object
              b'{"id": 2, "extra": true}']                   # 7 good, unknown field ignored
    d = decode_value(kafka_df(spark, values), valueFormat="json",
                     valueSchema="id long, name string, tags array<string>")
    good = {r["offset"]: r for r in d.good.collect()}
    assert sorted(good) == [0, 3, 7]
    assert (good[0]["id"], good[0]["name"], good[0]["tags"]) == (1, "x", ["a"])
    assert (good[3]["id"], good[3]["name"]) == (None, None)
    assert d.good.columns == ["key", "topic", "partition", "offset", "timestamp",
                              "timestampType", "headers", "id", "name", "tags"]
    dead = {r["offset"]: r for r in d.dead_letters.collect()}
    assert sorted(dead) == [1, 2, 4, 5, 6]
    assert dead[1]["error"] == "id: expected long, got str 'one'"
    assert dead[2]["error"].startswith("malformed JSON")
    assert dead[4]["error"] == "empty value: expected a JSON object"
    assert dead[5]["error"].startswith("value is not valid UTF-8")
    assert "expected a JSON object, got list" in dead[6]["error"]
    assert dead[2]["value"] == b"not json" and dead[2]["key"] == b"k2"
    assert dead[2]["topic"] == "orders" and dead[2]["partition"] == 0
    assert count_dead_letters(d.dead_letters) == {("orders", 0): 5}


def test_json_struct_mode_raw_value_and_schema_file(spark, tmp_path):
    schema_file = tmp_path / "schema.ddl"
    schema_file.write_text("offset long, v double")
    df = kafka_df(spark, [b'{"offset": 5, "v": 1.5}'])
    with pytest.raises(ConfigError, match=r"\['offset'\] clash"):
        decode_value(df, valueFormat="json", valueSchemaFile=str(schema_file))
    d = decode_value(df, valueFormat="json", valueSchemaFile=f"file://{schema_file}",
                     flatten="false", keepRawValue=True)
    row = d.good.collect()[0]
    assert row["value"]["offset"] == 5 and row["value"]["v"] == 1.5
    assert row["value_raw"] == b'{"offset": 5, "v": 1.5}' and row["offset"] == 0


def test_json_schema_in_spark_json_form(spark):
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL("a int").json()
    d = decode_value(kafka_df(spark, [b'{"a": 3}']), valueFormat="json", valueSchema=schema)
    assert d.good.collect()[0]["a"] == 3


def test_bad_json_schema_is_a_config_error(spark):
    with pytest.raises(ConfigError, match="bad valueSchema"):
        decode_value(kafka_df(spark, [b"{}"]), valueFormat="json", valueSchema="a int,,")
    with pytest.raises(ConfigError, match="cannot read valueSchemaFile"):
        decode_value(kafka_df(spark, [b"{}"]), valueFormat="json",
                     valueSchemaFile="/no/such/file.ddl")


def test_json_error_detail():
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "a", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "s", "type": {"type": "struct", "fields": [
            {"name": "b", "type": "boolean", "nullable": True, "metadata": {}}]},
         "nullable": True, "metadata": {}},
        {"name": "xs", "type": {"type": "array", "elementType": "double", "containsNull": True},
         "nullable": True, "metadata": {}}]})
    assert json_error_detail(b'{"a": 99999999999}', schema) == "a: 99999999999 out of range for integer"
    assert json_error_detail(b'{"s": {"b": 1}}', schema) == "s.b: expected boolean, got int 1"
    assert json_error_detail(b'{"xs": [1, "x"]}', schema).startswith("xs[1]: expected double")
    assert json_error_detail(b'{"a": true}', schema).startswith("a: expected integer, got bool")
    assert json_error_detail(b'{"a": 1}', schema).startswith("rejected by Spark's JSON parser")
    assert json_error_detail(None, schema) is None


# ---------------------------------------------------------------------------
# avro


def test_avro_schema_maps_to_spark_types():
    _, st = parse_avro_schema(json.dumps(AVRO_SCHEMA))
    assert st.simpleString() == (
        "struct<id:bigint,customer:string,at:timestamp,day:date,amount:decimal(9,2),"
        "status:string,tags:array<string>,attrs:map<string,int>,ship:struct<city:string>,"
        "bill:struct<city:string>,uid:string,t:int>")
    _, st = parse_avro_schema('"string"')
    assert st.simpleString() == "struct<value:string>"
    with pytest.raises(ConfigError, match="union"):
        parse_avro_schema(json.dumps({"type": "record", "name": "R", "fields": [
            {"name": "x", "type": ["int", "string"]}]}))
    with pytest.raises(ConfigError, match="recursive"):
        parse_avro_schema(json.dumps({"type": "record", "name": "Node", "fields": [
            {"name": "next", "type": ["null", "Node"]}]}))
    with pytest.raises(ConfigError, match="not JSON"):
        parse_avro_schema("{nope")
    with pytest.raises(ConfigError, match="bad Avro schema"):
        parse_avro_schema(json.dumps({"type": "record", "name": "R"}))


@pytest.mark.parametrize("wire, expect_ok", [
    ("auto", {"plain", "wire"}),
    ("true", {"wire"}),
    ("false", {"plain"}),
])
def test_avro_decoder_wire_modes(wire, expect_ok):
    dec = AvroDecoder(json.dumps(AVRO_SCHEMA), wire)
    cases = {"plain": avro_bytes(ORDER), "wire": avro_bytes(ORDER, schema_id=42)}
    for name, value in cases.items():
        if name in expect_ok:
            assert dec.decode(value)["id"] == 7
        else:
            with pytest.raises(Exception):
                dec.decode(value)


def test_avro_decoder_schema_id_and_trailing_bytes():
    dec = AvroDecoder(json.dumps(AVRO_SCHEMA), "true", schema_id=42)
    assert dec.decode(avro_bytes(ORDER, schema_id=42))["customer"] == "ann"
    with pytest.raises(ValueError, match="schema id 41, expected 42"):
        dec.decode(avro_bytes(ORDER, schema_id=41))
    with pytest.raises(ValueError, match="1 byte"):
        AvroDecoder(json.dumps(AVRO_SCHEMA), "false").decode(avro_bytes(ORDER) + b"\x00")


def test_avro_decode_batch_keeps_rows_aligned():
    dec = AvroDecoder(json.dumps(AVRO_SCHEMA), "auto")
    _, st = parse_avro_schema(json.dumps(AVRO_SCHEMA))
    from pyspark.sql.pandas.types import to_arrow_type

    values = pa.array([avro_bytes(ORDER), b"\x02", None, avro_bytes(ORDER, schema_id=1)],
                      pa.binary())
    arr, errors = dec.decode_batch(values, to_arrow_type(st, timezone="UTC"))
    assert len(arr) == 4 and arr.null_count == 2
    assert errors.to_pylist()[0] is None and errors.to_pylist()[2] is None
    assert errors.to_pylist()[1].startswith("Avro decode failed: EOFError")
    assert arr.to_pylist()[3]["amount"] == decimal.Decimal("12.50")


def test_avro_end_to_end_with_dead_letters(spark, tmp_path):
    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    values = [avro_bytes(ORDER),                                  # 0 plain
              avro_bytes(dict(ORDER, id=8), schema_id=3),         # 1 Confluent header
              b"\x00\x00\x00\x00\x03garbage",                     # 2 header + junk
              None,                                               # 3 tombstone
              avro_bytes(ORDER) + b"tail"]                        # 4 trailing bytes
    for opts in ({"valueSchema": json.dumps(AVRO_SCHEMA)},
                 {"valueSchemaFile": str(schema_file)}):
        d = decode_value(kafka_df(spark, values, partition=2), valueFormat="avro", **opts)
        good = {r["offset"]: r for r in d.good.collect()}
        assert sorted(good) == [0, 1, 3]
        assert good[0]["id"] == 7 and good[1]["id"] == 8 and good[3]["id"] is None
        g = good[0]
        assert g["at"] == dt.datetime(2024, 3, 1, 12) and g["day"] == dt.date(2024, 3, 1)
        assert g["amount"] == decimal.Decimal("12.50") and g["status"] == "PAID"
        assert g["tags"] == ["a", "b"] and g["attrs"] == {"x": 1}
        assert g["ship"]["city"] == "Oslo" and g["bill"] is None and g["t"] == 1000
        dead = {r["offset"]: r["error"] for r in d.dead_letters.collect()}
        assert sorted(dead) == [2, 4]
        assert "byte(s) left" in dead[4]
        assert count_dead_letters(d.dead_letters) == {("orders", 2): 2}

    # With the header required, the plain value is a dead letter too; no row is lost.
    d = decode_value(kafka_df(spark, values), valueFormat="avro",
                     valueSchema=json.dumps(AVRO_SCHEMA), confluentWireFormat="true")
    d.combined.persist()
    try:
        good = [r["offset"] for r in d.good.collect()]
        dead = {r["offset"]: r["error"] for r in d.dead_letters.collect()}
    finally:
        d.combined.unpersist()
    assert sorted(good + list(dead)) == [0, 1, 2, 3, 4]
    assert "no Confluent wire-format header" in dead[0]


def test_avro_struct_mode(spark):
    d = decode_value(kafka_df(spark, [avro_bytes(ORDER)]), valueFormat="avro",
                     valueSchema=json.dumps(AVRO_SCHEMA), flatten=False)
    row = d.good.collect()[0]
    assert row["value"]["id"] == 7 and "id" not in d.good.columns
