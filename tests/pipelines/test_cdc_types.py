"""Debezium's own encodings of dates, times, timestamps and decimals under the
JsonConverter's schemas.enable=true (io.debezium.time.*, org.apache.kafka.connect.data.*,
io.debezium.data.VariableScaleDecimal) become the table's types; a value that does not fit
its column (an id beyond INT, a decimal as base64 bytes without its schema, a Debezium
date sent for a timestamp column) is a dead letter with a reason, as in a plain JSON load:
never nulled, never dropped."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

from kafkastore.write.log_writer import LogWriter as Broker
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.decoding.cdc import debezium_row
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from tests.helpers.loads import make_topic

UTC = dt.timezone.utc
DDL = ("id INT, born DATE, seen TIMESTAMP, local_seen TIMESTAMP_NTZ, zoned TIMESTAMP, "
       "price DECIMAL(10,2), ratio DECIMAL(12,4), note STRING")
FIELDS = [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "born", "type": "int32", "optional": True, "name": "io.debezium.time.Date"},
    {"field": "seen", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"},
    {"field": "local_seen", "type": "int64", "optional": True,
     "name": "org.apache.kafka.connect.data.Timestamp"},
    {"field": "zoned", "type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp"},
    {"field": "price", "type": "bytes", "optional": True,
     "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
    {"field": "ratio", "type": "struct", "optional": True,
     "name": "io.debezium.data.VariableScaleDecimal",
     "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}]},
    {"field": "note", "type": "string", "optional": True},
]


def _b64(n: int) -> str:
    return base64.b64encode(n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big",
                                       signed=True)).decode()


def _wrapped(row, op="c", fields=FIELDS):
    schema = {"type": "struct", "name": "dbz.Envelope", "fields": [
        {"field": "before", "type": "struct", "optional": True, "fields": fields},
        {"field": "after", "type": "struct", "optional": True, "fields": fields},
        {"field": "op", "type": "string"}, {"field": "ts_ms", "type": "int64"}]}
    return {"schema": schema, "payload": {"before": None, "after": row, "op": op,
                                          "ts_ms": 1700000000000, "source": {"lsn": row["id"]}}}


GOOD = {"id": 1, "born": 19_000, "seen": 1_700_000_000_123_456,
        "local_seen": 1_700_000_000_123, "zoned": "2023-11-14T22:13:20.5+01:00",
        "price": _b64(-12345), "ratio": {"scale": 3, "value": _b64(1500)}, "note": "ok"}


def test_debezium_encodings_are_converted_row_by_row(spark):
    from pipelines.decoding.values import parse_json_schema

    row_type = parse_json_schema(DDL)
    values, error = debezium_row(json.dumps(_wrapped(GOOD)), row_type)
    assert error is None
    assert values == {
        "id": 1, "born": dt.date(1970, 1, 1) + dt.timedelta(days=19_000),
        "seen": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
        "local_seen": dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
        "zoned": dt.datetime(2023, 11, 14, 21, 13, 20, 500000, tzinfo=UTC),
        "price": decimal.Decimal("-123.45"), "ratio": decimal.Decimal("1.5000"), "note": "ok"}


def test_values_that_do_not_fit_are_dead_letters_with_a_reason(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=1)
    date_into_ts = [dict(f, name="io.debezium.time.Date", type="int32") if f["field"] == "seen"
                    else f for f in FIELDS]
    events = [
        _wrapped(GOOD),
        _wrapped(dict(GOOD, id=2, seen=19_000), fields=date_into_ts),        # a date, column ts
        {"before": None, "after": {"id": 3_000_000_000, "note": "big"}, "op": "c"},  # > INT
        {"before": None, "after": {"id": 4, "price": _b64(12345)}, "op": "c"},  # no schema
        _wrapped(dict(GOOD, id=5, price=_b64(10**12))),                      # > DECIMAL(10,2)
        {"before": None, "after": {"id": 6, "born": 19_000}, "op": "r"},     # int days, bare
        {"before": None, "after": {"id": 7, "note": "plain"}, "op": "c"},
    ]
    broker = Broker(storage, batch_size=64)
    for i, e in enumerate(events):
        broker.send("t", json.dumps(e).encode(), key=b'{"id": %d}' % i, timestamp=1_700_000_000_000 + i)
    broker.flush()
    wh = Warehouse(warehouse)
    spec = LoadSpec(topic="t", table="typed", cdc="debezium", key_columns=("id",),
                    value_format="json", value_schema=DDL, partition_by=())
    summary = run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
    rows = {r["id"]: r for r in read_arrow(wh.table("typed")).to_pylist()}
    dead = sorted((d["offset"], d["error"]) for d in
                  read_arrow(wh.table("typed_dead_letters")).to_pylist())
    assert sorted(rows) == [1, 7], dead
    r = rows[1]
    assert r["born"] == dt.date(2022, 1, 8)
    assert r["seen"].replace(tzinfo=None) == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert r["local_seen"].replace(tzinfo=None) == dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert r["zoned"].replace(tzinfo=None) == dt.datetime(2023, 11, 14, 21, 13, 20, 500000)
    assert (r["price"], r["ratio"]) == (decimal.Decimal("-123.45"), decimal.Decimal("1.5000"))
    assert summary.dead_letters == 5
    assert [o for o, _ in dead] == [1, 2, 3, 4, 5]
    reasons = dict(dead)
    assert "seen" in reasons[1] and "io.debezium.time.Date" in reasons[1]
    assert reasons[2] == "id: 3000000000 out of range for integer"
    assert "price" in reasons[3]
    assert "price" in reasons[4] and "decimal(10,2)" in reasons[4]
    assert "born" in reasons[5]
