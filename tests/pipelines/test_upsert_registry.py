"""Upsert loads that follow a schema registry: the table evolves and the schema ids are
recorded in the one commit that carries the copy-on-write rewrite and the offsets, as
for an append registry load (pipelines.registry_load, pipelines.upsert)."""
from __future__ import annotations

import json

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from tests.helpers.loads import make_topic, warehouse_for

pytest.importorskip("confluent_kafka.schema_registry")

V1 = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}
V2 = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None}]}


@pytest.fixture
def registry(tmp_path):
    from kafkastore.schema_registry.http import SchemaRegistryThread

    with SchemaRegistryThread(Storage(f"file://{tmp_path}/sr"), host="127.0.0.1", port=0) as sr:
        yield sr


def _serializer(url: str, schema: dict):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    ctx = SerializationContext("customers", MessageField.VALUE)
    return lambda record: ser(record, ctx)


def _send(storage, records, t0: int) -> None:
    broker = Broker(storage, batch_size=64)
    for i, (key, value) in enumerate(records):
        broker.send("customers", value, key=key, timestamp=t0 + i)
    broker.flush()


def _spec(url: str) -> LoadSpec:
    return LoadSpec(topic="customers", table="customers", mode="upsert", key_columns=("id",),
                    value_format="avro", partition_by=(), decode={"schema_registry": url})


def _columns(tbl) -> set[str]:
    return {f.name for f in tbl.schema().fields}


def _state(tbl) -> dict:
    return {r["id"]: r for r in read_arrow(tbl).to_pylist()}


def test_upsert_over_two_schema_versions_evolves_and_records_ids(spark, tmp_path, registry):
    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "customers", partitions=2)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    v1, v2 = _serializer(registry.url, V1), _serializer(registry.url, V2)
    _send(storage, [(b"1", v1({"id": 1, "name": "ann"})), (b"2", v1({"id": 2, "name": "bob"})),
                    (b"3", v1({"id": 3, "name": "cy"}))], 1_700_000_000_000)
    s1 = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    assert s1.dead_letters == 0
    tbl = wh.table("customers")
    first_ids = json.loads(tbl.current_snapshot().summary["kafkastore.schema-ids"])
    assert len(first_ids) == 1
    assert "email" not in _columns(tbl)
    # v2 adds an optional field: 1 is updated (with an email), 4 is new, 2 is updated by v1
    # again in the same run, 3 keeps its v1 row.
    _send(storage, [(b"1", v2({"id": 1, "name": "ann", "email": "ann@x.example"})),
                    (b"2", v1({"id": 2, "name": "bobby"})),
                    (b"4", v2({"id": 4, "name": "dee", "email": None})),
                    (b"1", v2({"id": 1, "name": "anne", "email": "anne@x.example"}))],
          1_700_000_100_000)
    s2 = run_load(spark, root=root, warehouse=wh, spec=_spec(registry.url), progress=False)
    assert s2.dead_letters == 0
    tbl = wh.table("customers")
    snap = tbl.current_snapshot()
    assert "email" in _columns(tbl)
    assert str(tbl.schema().find_field("email").field_type) == "string"
    ids = json.loads(snap.summary["kafkastore.schema-ids"])
    assert len(ids) == 2 and first_ids[0] in ids
    # one commit per run: the evolution rides with the rewrite and the offsets
    assert len(tbl.metadata.snapshots) == 2
    state = _state(tbl)
    assert {i: (r["name"], r["email"]) for i, r in state.items()} == {
        1: ("anne", "anne@x.example"), 2: ("bobby", None), 3: ("cy", None), 4: ("dee", None)}
    assert "__kafkastore_tombstone" not in _columns(tbl)
