"""Extreme values of every Avro logical type through both registry decode paths (column by
column and value by value): the same rows load and the same values become dead letters,
with a reason. A value the table cannot hold (a timestamp-millis of Long.MAX_VALUE, a date
past year 9999, a decimal beyond its precision, invalid UTF-8) is a dead letter, never a
failed load. Pure: no Spark, no registry."""
from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from pipelines.decoding.registry_client import WriterSchema
from pipelines.decoding.schema_decoding import AvroGroupDecoder

LONG_MIN, LONG_MAX = -2**63, 2**63 - 1
INT_MIN, INT_MAX = -2**31, 2**31 - 1

SCHEMA = {"type": "record", "name": "X", "fields": [
    {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ltsm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "ltsu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "s", "type": "string"},
]}

# The same layout without logical types and with bytes for the string: what a broken or
# hostile producer can put on the wire.
WIRE = {"type": "record", "name": "X", "fields": [
    {"name": f["name"], "type": ("bytes" if f["type"] == "string" else
                                 f["type"]["type"] if isinstance(f["type"], dict) else f["type"])}
    for f in SCHEMA["fields"]]}
_WIRE = fastavro.parse_schema(WIRE)

_longs = st.one_of(st.sampled_from([LONG_MIN, LONG_MAX, 0, -1, 253402300800000,
                                    253402300800000000, -62135596800001]),
                   st.integers(LONG_MIN, LONG_MAX))
_ints = st.one_of(st.sampled_from([INT_MIN, INT_MAX, 0, 2932897, -719163, 86_400_000,
                                   86_400_000 - 1, -1]), st.integers(INT_MIN, INT_MAX))
_unscaled = st.one_of(st.sampled_from([0, 999999, -999999, 1000000, -1000000, 10**40]),
                      st.integers(-10**8, 10**8))


def _twos(n: int) -> bytes:
    return n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)


_records = st.fixed_dictionaries({
    "tsm": _longs, "tsu": _longs, "ltsm": _longs, "ltsu": _longs,
    "day": _ints, "tm": _ints, "tu": _longs,
    "f": st.floats(width=32), "d": st.floats(),
    "i": _ints, "l": _longs,
    "s": st.one_of(st.text(max_size=5).map(str.encode),
                   st.sampled_from([b"\xff", b"\xc3", b"a\xed\xa0\x80", b"\xc0\xaf"])),
})


def _body(rec) -> bytes:
    bio = io.BytesIO()
    fastavro.schemaless_writer(bio, _WIRE, rec)
    return b"\x00\x00\x00\x00\x01" + bio.getvalue()


@settings(max_examples=60, deadline=None)
@given(records=st.lists(_records, min_size=1, max_size=12))
def test_both_decode_paths_agree_on_rows_and_dead_letters(records):
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(SCHEMA)))
    assert dec.columnar
    values = pa.array([_body(r) for r in records], pa.binary())
    starts = [5] * len(records)
    columns, col_errors = dec.decode_array(values, starts)
    rows, row_errors = dec.decode_many(values.to_pylist(), starts)
    assert columns.type == rows.type == dec.arrow
    assert [e is None for e in col_errors] == [e is None for e in row_errors]
    assert columns.to_pylist() == rows.to_pylist()
    for rec, err, row in zip(records, row_errors, rows.to_pylist()):
        if err is None:
            assert row is not None
        else:
            assert row is None and err.strip()


def test_a_timestamp_millis_of_long_max_is_a_dead_letter_on_the_columnar_path():
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(SCHEMA)))
    good = {"tsm": 0, "tsu": 0, "ltsm": 0, "ltsu": 0, "day": 0, "tm": 0, "tu": 0,
            "f": 1.0, "d": 1.0, "i": 1, "l": 1, "s": b"ok"}
    values = pa.array([_body(good), _body(dict(good, tsm=LONG_MAX)), _body(good)], pa.binary())
    arr, errors = dec.decode_array(values, [5, 5, 5])
    assert errors[0] is None and errors[2] is None
    assert errors[1] is not None and "does not fit" in errors[1]
    assert arr.to_pylist()[1] is None and arr.to_pylist()[0]["i"] == 1


def test_local_timestamps_have_no_zone():
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(SCHEMA)))
    types = {f.name: f.type for f in dec.arrow}
    assert types["ltsm"] == types["ltsu"] == pa.timestamp("us")
    assert types["tsm"].tz is not None


DEC = {"type": "record", "name": "D", "fields": [
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                             "scale": 2}}]}
_DEC_WIRE = fastavro.parse_schema({"type": "record", "name": "D",
                                   "fields": [{"name": "dec", "type": "bytes"}]})


@settings(max_examples=40, deadline=None)
@given(unscaled=st.lists(_unscaled, min_size=1, max_size=8))
def test_a_decimal_beyond_its_precision_is_a_dead_letter(unscaled):
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(DEC)))
    bodies = []
    for n in unscaled:
        bio = io.BytesIO()
        fastavro.schemaless_writer(bio, _DEC_WIRE, {"dec": _twos(n)})
        bodies.append(b"\x00\x00\x00\x00\x01" + bio.getvalue())
    values = pa.array(bodies, pa.binary())
    columns, col_errors = dec.decode_array(values, [5] * len(bodies))
    rows, errors = dec.decode_many(bodies, [5] * len(bodies))
    assert columns.to_pylist() == rows.to_pylist() and col_errors == errors
    for n, err in zip(unscaled, errors):
        assert (err is not None) == (abs(n) > 999999), (n, err)
