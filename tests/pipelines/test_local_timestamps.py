"""Avro local-timestamp-millis/-micros are timestamps without zone: Iceberg ``timestamp``,
not ``timestamptz``, on the row path (a load with the schema given) and the registry
path's mapping."""
from __future__ import annotations

import datetime as dt
import io
import json

import fastavro
import pytest
from pyiceberg.types import TimestampType, TimestamptzType

from kafkastore.write.log_writer import LogWriter as Broker
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from pipelines.spec.table_layout import TableLayout
from pipelines.decoding.registry_client import WriterSchema
from pipelines.decoding.schema_decoding import AvroGroupDecoder
from kafkastore.storage import Storage
from tests.helpers.loads import make_topic

SCHEMA = {"type": "record", "name": "E", "fields": [
    {"name": "id", "type": "long"},
    {"name": "lms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "lus", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
LOCAL = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)


def _body(i: int) -> bytes:
    bio = io.BytesIO()
    fastavro.schemaless_writer(bio, fastavro.parse_schema(SCHEMA), {
        "id": i, "lms": LOCAL, "lus": LOCAL,
        "ts": LOCAL.replace(tzinfo=dt.timezone.utc)})
    return bio.getvalue()


def test_the_registry_mapping_has_no_zone():
    dec = AvroGroupDecoder(WriterSchema(1, "AVRO", json.dumps(SCHEMA)))
    types = {f.name: f.type for f in dec.arrow}
    assert types["lms"].tz is None and types["lus"].tz is None and types["ts"].tz is not None


def _produce(root: str, ids) -> None:
    broker = Broker(Storage(root), batch_size=64)
    for i in ids:
        broker.send("t", _body(i), key=b"k%d" % i, timestamp=1_700_000_000_000 + i)
    broker.flush()


SPEC = LoadSpec(topic="t", table="lt", value_format="avro", value_schema=json.dumps(SCHEMA),
                partition_by=())


def _zones(tbl) -> dict[str, type]:
    return {f.name: type(f.field_type) for f in tbl.schema().fields
            if isinstance(f.field_type, (TimestampType, TimestamptzType))}


def test_a_load_stores_local_timestamps_without_zone(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    make_topic(root, partitions=1)
    _produce(root, range(3))
    wh = Warehouse(warehouse)
    spec = SPEC
    summary = run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
    assert summary.dead_letters == 0
    tbl = wh.table("lt")
    fields = {f.name: f.field_type for f in tbl.schema().fields}
    assert isinstance(fields["lms"], TimestampType) and isinstance(fields["lus"], TimestampType)
    assert isinstance(fields["ts"], TimestamptzType)
    rows = read_arrow(tbl).to_pylist()
    assert {(r["lms"], r["lus"]) for r in rows} == {(LOCAL, LOCAL)}
    # The next load appends to the same columns; the Kafka timestamp keeps its zone.
    _produce(root, range(3, 5))
    assert run_load(spark, root=root, warehouse=wh, spec=spec, progress=False).rows == 2
    tbl = wh.table("lt")
    assert _zones(tbl) == {"timestamp": TimestamptzType, "lms": TimestampType,
                           "lus": TimestampType, "ts": TimestamptzType}
    rows = read_arrow(tbl).to_pylist()
    assert len(rows) == 5 and {(r["lms"], r["lus"]) for r in rows} == {(LOCAL, LOCAL)}
    assert {r["ts"] for r in rows} == {LOCAL.replace(tzinfo=dt.timezone.utc)}
    assert {r["timestamp"].tzinfo is not None for r in rows} == {True}


def test_a_table_with_zoned_columns_keeps_them(spark, tmp_path):
    """A table whose local-timestamp columns were created as timestamptz (by a load of an
    older version) keeps loading into them: the writer follows the table's column types,
    the values stored as the UTC instants of their wall-clock time, as before."""
    import pyarrow as pa

    from pipelines.jobs.load import base_decoded_schema, nullable

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    make_topic(root, partitions=1)
    _produce(root, range(3))
    wh = Warehouse(warehouse)
    zoned = pa.timestamp("us", tz="UTC")
    old = base_decoded_schema()
    for name, t in (("id", pa.int64()), ("lms", zoned), ("lus", zoned), ("ts", zoned)):
        old = old.append(pa.field(name, t))
    wh.create_table("lt", nullable(old), TableLayout(partition_by=()))
    summary = run_load(spark, root=root, warehouse=wh, spec=SPEC, progress=False)
    assert summary.dead_letters == 0 and summary.rows == 3
    tbl = wh.table("lt")
    assert set(_zones(tbl).values()) == {TimestamptzType}
    utc = LOCAL.replace(tzinfo=dt.timezone.utc)
    assert {(r["lms"], r["lus"], r["ts"]) for r in read_arrow(tbl).to_pylist()} == {
        (utc, utc, utc)}


def test_reprocess_of_local_timestamps_gives_the_same_table(spark, tmp_path):
    from pipelines.jobs.reprocess import run_reprocess

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    make_topic(root, partitions=1)
    _produce(root, range(4))
    wh = Warehouse(warehouse)
    run_load(spark, root=root, warehouse=wh, spec=SPEC, progress=False)
    before = wh.table("lt")
    schema_before = before.schema().as_arrow()
    rows_before = sorted(read_arrow(before).to_pylist(), key=lambda r: r["offset"])
    s = run_reprocess(spark, root=root, warehouse=wh, topic="t", table="lt", from_offset=0,
                      reason="same decoder", progress=False)
    assert not s.noop and s.rows == 4
    after = wh.table("lt")
    assert after.schema().as_arrow() == schema_before
    assert sorted(read_arrow(after).to_pylist(), key=lambda r: r["offset"]) == rows_before
    assert _zones(after)["lms"] is TimestampType


@pytest.fixture
def registry(tmp_path):
    from kafkastore.schema_registry.http import SchemaRegistryThread

    with SchemaRegistryThread(Storage(f"file://{tmp_path}/sr"), host="127.0.0.1", port=0) as sr:
        yield sr


def _registry_values(url: str, ids) -> list[bytes]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(SCHEMA))
    ctx = SerializationContext("t", MessageField.VALUE)
    return [ser({"id": i, "lms": LOCAL, "lus": LOCAL,
                 "ts": LOCAL.replace(tzinfo=dt.timezone.utc)}, ctx) for i in ids]


def _produce_values(root: str, values: list[bytes]) -> None:
    broker = Broker(Storage(root), batch_size=64)
    for i, v in enumerate(values):
        broker.send("t", v, key=b"k%d" % i, timestamp=1_700_000_000_000 + i)
    broker.flush()


@pytest.mark.parametrize("old_table", [False, True], ids=["new", "zoned-table"])
def test_registry_loads_keep_the_table_kind_of_local_timestamps(spark, tmp_path, registry,
                                                                old_table):
    """Registry-decoded local timestamps: a new table's columns have no zone; a table made
    with zoned columns (by an older version) keeps them and keeps loading, twice."""
    import pyarrow as pa

    from pipelines.jobs.load import base_decoded_schema, nullable

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    make_topic(root, partitions=1)
    wh = Warehouse(warehouse)
    zoned = pa.timestamp("us", tz="UTC")
    if old_table:
        old = base_decoded_schema()
        for name, t in (("id", pa.int64()), ("lms", zoned), ("lus", zoned), ("ts", zoned)):
            old = old.append(pa.field(name, t))
        wh.create_table("lt", nullable(old), TableLayout(partition_by=()))
    spec = LoadSpec(topic="t", table="lt", value_format="avro",
                    decode={"schema_registry": registry.url}, partition_by=())
    for ids in (range(3), range(3, 5)):
        _produce_values(root, _registry_values(registry.url, ids))
        summary = run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
        assert summary.dead_letters == 0 and summary.rows == len(ids)
    tbl = wh.table("lt")
    local = TimestamptzType if old_table else TimestampType
    assert _zones(tbl) == {"timestamp": TimestamptzType, "lms": local, "lus": local,
                           "ts": TimestamptzType}
    want = LOCAL.replace(tzinfo=dt.timezone.utc) if old_table else LOCAL
    rows = read_arrow(tbl).to_pylist()
    assert len(rows) == 5 and {(r["lms"], r["lus"]) for r in rows} == {(want, want)}
