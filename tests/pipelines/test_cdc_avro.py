"""Debezium change events in Avro (the AvroConverter against a schema registry) loaded
as the source table's state (pipelines.cdc on the registry path).

The schemas are the Postgres connector's for Debezium's tutorial table
inventory.customers: the key ``dbserver1.inventory.customers.Key``, the value the
``dbserver1.inventory.customers.Envelope`` whose ``before``/``after`` are
``...customers.Value`` and whose ``source`` is ``io.debezium.connector.postgresql.Source``.
confluent-kafka's AvroSerializer registers them with kafkastore's own registry.
"""
from __future__ import annotations

import json
import re

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from tests.helpers.loads import make_topic, warehouse_for

pytest.importorskip("confluent_kafka.schema_registry")

TOPIC = "dbserver1.inventory.customers"
KEY = {"type": "record", "name": "Key", "namespace": TOPIC, "fields": [
    {"name": "id", "type": "int"}], "connect.name": f"{TOPIC}.Key"}


def _value(extra=()):
    return {"type": "record", "name": "Value", "namespace": TOPIC, "fields": [
        {"name": "id", "type": "int"},
        {"name": "first_name", "type": "string"},
        {"name": "last_name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None}, *extra],
        "connect.name": f"{TOPIC}.Value"}


SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
          "fields": [
              {"name": "version", "type": "string"},
              {"name": "connector", "type": "string"},
              {"name": "name", "type": "string"},
              {"name": "ts_ms", "type": "long"},
              {"name": "snapshot", "type": [
                  {"type": "string", "connect.version": 1,
                   "connect.parameters": {"allowed": "true,last,false,incremental"},
                   "connect.default": "false", "connect.name": "io.debezium.data.Enum"},
                  "null"], "default": "false"},
              {"name": "db", "type": "string"},
              {"name": "sequence", "type": ["null", "string"], "default": None},
              {"name": "schema", "type": "string"},
              {"name": "table", "type": "string"},
              {"name": "txId", "type": ["null", "long"], "default": None},
              {"name": "lsn", "type": ["null", "long"], "default": None},
              {"name": "xmin", "type": ["null", "long"], "default": None}],
          "connect.name": "io.debezium.connector.postgresql.Source"}
BLOCK = {"type": "record", "name": "block", "namespace": "event", "fields": [
    {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}],
    "connect.version": 1, "connect.name": "event.block"}


def envelope(value):
    return {"type": "record", "name": "Envelope", "namespace": TOPIC, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{TOPIC}.Value"], "default": None},
        {"name": "source", "type": SOURCE},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", BLOCK], "default": None}],
        "connect.version": 1, "connect.name": f"{TOPIC}.Envelope"}


@pytest.fixture
def registry(tmp_path):
    from kafkastore.schema_registry.http import SchemaRegistryThread

    with SchemaRegistryThread(Storage(f"file://{tmp_path}/sr"), host="127.0.0.1", port=0) as sr:
        yield sr


def _serializers(url: str, value_schema: dict):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    key = AvroSerializer(client, json.dumps(KEY))
    value = AvroSerializer(client, json.dumps(value_schema))
    kctx = SerializationContext(TOPIC, MessageField.KEY)
    vctx = SerializationContext(TOPIC, MessageField.VALUE)
    return (lambda k: key(k, kctx)), (lambda v: None if v is None else value(v, vctx))


def _source(lsn: int, ts: int, snapshot: str = "false") -> dict:
    return {"version": "2.5.0.Final", "connector": "postgresql", "name": "dbserver1",
            "ts_ms": ts, "snapshot": snapshot, "db": "postgres", "sequence": None,
            "schema": "inventory", "table": "customers", "txId": 780, "lsn": lsn, "xmin": None}


def _event(op, before, after, lsn, ts, snapshot="false"):
    return {"before": before, "after": after, "source": _source(lsn, ts, snapshot), "op": op,
            "ts_ms": ts + 7, "transaction": None}


def _row(i, first, last, email):
    return {"id": i, "first_name": first, "last_name": last, "email": email}


def _send(storage, key, value, events, t0: int) -> None:
    broker = Broker(storage, batch_size=64)
    for i, (k, e) in enumerate(events):
        broker.send(TOPIC, value(e), key=key({"id": k}), timestamp=t0 + i)
    broker.flush()


def _spec(url: str, keys=("id",)) -> LoadSpec:
    return LoadSpec(topic=TOPIC, table="customers", cdc="debezium", key_columns=keys,
                    value_format="avro", partition_by=(), decode={"schema_registry": url})


def _state(tbl) -> dict:
    return {r["id"]: r for r in read_arrow(tbl).to_pylist()}


def test_avro_snapshot_update_delete_give_the_source_table(spark, tmp_path, registry):
    root = f"file://{tmp_path}/log"
    storage = make_topic(root, TOPIC, partitions=2)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    key, value = _serializers(registry.url, envelope(_value()))
    sally = _row(1001, "Sally", "Thomas", "sally.thomas@acme.com")
    george = _row(1002, "George", "Bailey", "gbailey@foobar.com")
    edward = _row(1003, "Edward", "Walker", "ed@walker.com")
    _send(storage, key, value, [
        (1001, _event("r", None, sally, 33815736, 1700000000100, "true")),
        (1002, _event("r", None, george, 33815736, 1700000000101, "true")),
        (1003, _event("r", None, edward, 33815736, 1700000000102, "last")),
        (1001, _event("u", sally, {**sally, "email": "sally@thomas.example"}, 33817344,
                      1700000120070)),
        (1002, _event("d", george, None, 33817500, 1700000130000)),
        (1002, None),                                   # the tombstone after the delete
        (1004, _event("c", None, _row(1004, "Anne", "Kretchmar", None), 33818000,
                      1700000140000)),
    ], 1_700_000_000_000)
    s = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    assert s.dead_letters == 0
    tbl = wh.table("customers")
    state = _state(tbl)
    assert {i: r["email"] for i, r in state.items()} == {
        1001: "sally@thomas.example", 1003: "ed@walker.com", 1004: None}
    r = state[1001]
    assert (r["first_name"], r["cdc_op"], r["cdc_ts_ms"], r["cdc_position"]) == (
        "Sally", "u", 1700000120077, "33817344")
    assert json.loads(r["cdc_source"])["table"] == "customers"
    assert state[1003]["cdc_op"] == "r"
    columns = {f.name for f in tbl.schema().fields}
    assert not columns & {"before", "after", "op", "source", "transaction"}
    first_ids = json.loads(tbl.current_snapshot().summary["kafkastore.schema-ids"])
    assert len(first_ids) == 1

    # The source table gains a nullable column: the next Value version evolves the table
    # in the commit of the changes; rows last written by the old version read null.
    phone = ({"name": "phone", "type": ["null", "string"], "default": None},)
    key, value2 = _serializers(registry.url, envelope(_value(phone)))
    _send(storage, key, value2, [
        (1003, _event("u", None, {**edward, "phone": "+1 555 0100"}, 33819000, 1700000150000)),
        (1004, _event("d", {**_row(1004, "Anne", "Kretchmar", None), "phone": None}, None,
                      33819100, 1700000160000)),
    ], 1_700_000_100_000)
    s = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    assert s.dead_letters == 0
    tbl = wh.table("customers")
    state = _state(tbl)
    assert {i: (r["email"], r["phone"]) for i, r in state.items()} == {
        1001: ("sally@thomas.example", None), 1003: ("ed@walker.com", "+1 555 0100")}
    ids = json.loads(tbl.current_snapshot().summary["kafkastore.schema-ids"])
    assert len(ids) == 1 and ids != first_ids      # this run's writer schema: the new one


def test_avro_events_that_are_not_row_changes_are_dead_letters(spark, tmp_path, registry):
    root = f"file://{tmp_path}/log"
    storage = make_topic(root, TOPIC, partitions=1)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    key, value = _serializers(registry.url, envelope(_value()))
    _send(storage, key, value, [
        (1001, _event("r", None, _row(1001, "Sally", "Thomas", None), 1, 1700000000000)),
        (1002, _event("t", None, None, 2, 1700000000001)),
        (1003, _event("c", None, None, 3, 1700000000002)),
    ], 1_700_000_000_000)
    s = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    assert s.dead_letters == 2
    dead = read_arrow(wh.table("customers_dead_letters")).to_pylist()
    assert sorted(d["error"] for d in dead) == ["Debezium op t is not a row change",
                                                "op c without after"]
    assert list(_state(wh.table("customers"))) == [1001]


def test_avro_keys_default_to_the_key_records_fields(spark, tmp_path, registry):
    """No --key-columns: the Avro key record's fields (read through the registry)."""
    from pipelines.jobs.upsert import table_mode

    root = f"file://{tmp_path}/log"
    storage = make_topic(root, TOPIC, partitions=1)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    key, value = _serializers(registry.url, envelope(_value()))
    sally = _row(1001, "Sally", "Thomas", "a@b")
    _send(storage, key, value, [
        (1001, _event("r", None, sally, 1, 1700000000000)),
        (1002, _event("c", None, _row(1002, "G", "B", None), 2, 1700000000001)),
        (1001, _event("u", sally, {**sally, "email": "new@b"}, 3, 1700000000002)),
        (1002, _event("d", _row(1002, "G", "B", None), None, 4, 1700000000003)),
    ], 1_700_000_000_000)
    s = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url, keys=()),
                 progress=False)
    assert s.dead_letters == 0
    tbl = wh.table("customers")
    assert table_mode(tbl) == ("upsert", ("id",))
    assert {i: r["email"] for i, r in _state(tbl).items()} == {1001: "new@b"}


def test_avro_cdc_spec():
    spec = _spec("http://127.0.0.1:1")
    assert (spec.mode, spec.key_columns) == ("upsert", ("id",))


def _encoded(name: str, kind: str, **more) -> dict:
    return {"type": kind, "connect.version": 1, "connect.name": name, **more}


VSD = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
       "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
       "connect.doc": "Variable scaled decimal", "connect.version": 1,
       "connect.name": "io.debezium.data.VariableScaleDecimal"}
ENCODED = (
    {"name": "d", "type": ["null", _encoded("io.debezium.time.Date", "int")], "default": None},
    {"name": "ts", "type": ["null", _encoded("io.debezium.time.Timestamp", "long")],
     "default": None},
    {"name": "mts", "type": ["null", _encoded("io.debezium.time.MicroTimestamp", "long")],
     "default": None},
    {"name": "nts", "type": ["null", _encoded("io.debezium.time.NanoTimestamp", "long")],
     "default": None},
    {"name": "t", "type": ["null", _encoded("io.debezium.time.Time", "int")], "default": None},
    {"name": "mt", "type": ["null", _encoded("io.debezium.time.MicroTime", "long")],
     "default": None},
    {"name": "nt", "type": ["null", _encoded("io.debezium.time.NanoTime", "long")],
     "default": None},
    {"name": "zts", "type": ["null", _encoded("io.debezium.time.ZonedTimestamp", "string")],
     "default": None},
    # the AvroConverter's Decimal: an Avro decimal with Connect's parameters too
    {"name": "price", "type": ["null", _encoded(
        "org.apache.kafka.connect.data.Decimal", "bytes", scale=2, precision=10,
        logicalType="decimal",
        **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}})],
     "default": None},
    # ... and without the Avro logical type: the scale only in Connect's parameters
    {"name": "amount", "type": ["null", _encoded(
        "org.apache.kafka.connect.data.Decimal", "bytes",
        **{"connect.parameters": {"scale": "3"}})], "default": None},
    {"name": "vsd", "type": ["null", VSD], "default": None},
)


def _unscaled(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8 or 1, "big", signed=True)


def test_avro_debezium_encodings_become_the_columns_types(spark, tmp_path, registry):
    """Debezium's encodings named only by ``connect.name`` in the Avro schema (days, epoch
    milli/micro/nanoseconds, times of day, zoned text, Connect and variable-scale decimals)
    load as dates, timestamps, times and decimals; a value the column cannot hold is a dead
    letter with its reason, the other events of the batch load."""
    import datetime as dt
    import decimal

    from pyiceberg.types import (DateType, DecimalType, TimestampType, TimestamptzType,
                                 TimeType)

    root = f"file://{tmp_path}/log"
    storage = make_topic(root, TOPIC, partitions=1)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    key, value = _serializers(registry.url, envelope(_value(ENCODED)))
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    epoch_us = int((at - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000 + 123456
    day_us = (7 * 3600 + 8 * 60 + 9) * 1_000_000 + 123456
    good = {"d": 19849, "ts": epoch_us // 1000, "mts": epoch_us, "nts": epoch_us * 1000 + 789,
            "t": day_us // 1000, "mt": day_us, "nt": day_us * 1000 + 789,
            "zts": "2024-05-06T09:08:09.123456+02:00", "price": decimal.Decimal("12.34"),
            "amount": _unscaled(-12345), "vsd": {"scale": 4, "value": _unscaled(1234567)}}

    def row(i, **over):
        return {**_row(i, "F", "L", None), **good, **over}

    bad = {1002: {"d": 10 ** 9}, 1003: {"nt": 86_400 * 10 ** 9}, 1004: {"zts": "yesterday"},
           1005: {"vsd": {"scale": 30, "value": _unscaled(1)}},
           1006: {"mts": 2 ** 63 - 1}}
    events = [(1001, _event("r", None, row(1001), 1, 1700000000000))]
    events += [(i, _event("c", None, row(i, **over), i, 1700000000000 + i))
               for i, over in bad.items()]
    events += [(1007, _event("c", None, row(1007, **dict.fromkeys(good)), 9, 1700000000009))]
    _send(storage, key, value, events, 1_700_000_000_000)
    s = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    tbl = wh.table("customers")
    types = {f.name: f.field_type for f in tbl.schema().fields}
    assert isinstance(types["d"], DateType)
    assert all(isinstance(types[c], TimestampType) for c in ("ts", "mts", "nts"))
    assert isinstance(types["zts"], TimestamptzType)
    assert all(isinstance(types[c], TimeType) for c in ("t", "mt", "nt"))
    assert (types["price"], types["amount"]) == (DecimalType(10, 2), DecimalType(38, 3))
    assert isinstance(types["vsd"], DecimalType)
    state = _state(tbl)
    assert sorted(state) == [1001, 1007]
    r = state[1001]
    assert r["d"] == dt.date(2024, 5, 6)
    assert (r["ts"], r["mts"], r["nts"]) == (at.replace(microsecond=123000), at, at)
    assert (r["t"], r["mt"], r["nt"]) == (dt.time(7, 8, 9, 123000), at.time(), at.time())
    assert r["zts"] == dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone.utc)
    assert (r["price"], r["amount"], r["vsd"]) == (
        decimal.Decimal("12.34"), decimal.Decimal("-12.345"), decimal.Decimal("123.4567"))
    assert all(state[1007][c] is None for c in good)
    assert s.dead_letters == len(bad)
    dead = {json.loads(json.dumps(d["offset"])): d["error"]
            for d in read_arrow(wh.table("customers_dead_letters")).to_pylist()}
    assert len(dead) == len(bad) and all(dead.values())
    by_offset = dict(zip(range(1, 1 + len(bad)), bad))
    for offset, error in dead.items():
        column = next(iter(bad[by_offset[offset]]))
        # the reason names the column: after.d (out of range) or "after: nt:" (converted)
        assert re.search(rf"\bafter(\.|: ){column}\b", error), (column, error)
        assert "does not fit" in error


def test_a_table_holding_an_encoding_as_stored_keeps_loading(spark, tmp_path, registry):
    """A table whose column got a Debezium date as the int Avro stores (loaded before the
    encodings were read) keeps that column's type: the next load appends days, no dead
    letters; a new encoded column of the same run becomes a date."""
    import datetime as dt

    import pyarrow as pa
    from pyiceberg.types import DateType, IntegerType

    from pipelines.jobs.load import ensure_tables

    root = f"file://{tmp_path}/log"
    storage = make_topic(root, TOPIC, partitions=1)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    spec = _spec(registry.url)
    tbl, _ = ensure_tables(wh, spec)
    with tbl.update_schema() as up:      # the column as the earlier version made it
        up.union_by_name(pa.schema([pa.field("d", pa.int32())]))
    date = _encoded("io.debezium.time.Date", "int")
    extra = ({"name": "d", "type": ["null", date], "default": None},
             {"name": "d2", "type": ["null", date], "default": None})
    key, value = _serializers(registry.url, envelope(_value(extra)))
    _send(storage, key, value, [
        (1001, _event("r", None, {**_row(1001, "F", "L", None), "d": 19849, "d2": 19849},
                      1, 1700000000000))], 1_700_000_000_000)
    s = run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
    assert s.dead_letters == 0 and s.rows == 1
    tbl = wh.table("customers")
    types = {f.name: f.field_type for f in tbl.schema().fields}
    assert isinstance(types["d"], IntegerType) and isinstance(types["d2"], DateType)
    r = _state(tbl)[1001]
    assert (r["d"], r["d2"]) == (19849, dt.date(2024, 5, 6))
