"""Loads that follow a schema registry, end to end: confluent-kafka's serializers
register against kafkastore's own registry (kafkastore.schema_registry) and frame the
values; the library's producer writes them to a topic; ``run_load`` decodes by id,
evolves the table in the commit, and pyiceberg and ``kafkastore sql`` read it back."""
from __future__ import annotations

import io
import json

import pytest

from kafkastore.errors import IncompatibleSchemaError
from kafkastore.storage import Storage
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import committed_offsets
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from tests.helpers.loads import make_topic, produce, warehouse_for

confluent = pytest.importorskip("confluent_kafka.schema_registry")

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "item", "type": "string"}]}
V2 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "item", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "string"], "default": None}]}], "default": None}]}
V3 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "string"], "default": None},
        {"name": "floor", "type": ["null", "int"], "default": None}]}], "default": None},
    {"name": "price", "type": ["null", "double"], "default": None}]}


@pytest.fixture
def registry(tmp_path):
    from kafkastore.schema_registry.http import SchemaRegistryThread

    with SchemaRegistryThread(Storage(f"file://{tmp_path}/sr"), host="127.0.0.1", port=0) as sr:
        yield sr


def avro_values(url: str, topic: str, schema: dict, records: list[dict]) -> list[bytes]:
    """``records`` framed by confluent-kafka's AvroSerializer (registering ``schema``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [ser(r, ctx) for r in records]


def write(storage, topic: str, values: list, start: int) -> None:
    produce(storage, topic, len(values), start=start, value=lambda i: values[i - start])


def spec(url: str, **kw) -> LoadSpec:
    return LoadSpec(topic="orders", table="orders", value_format="avro",
                    decode={"schema_registry": url, **kw})


def rows(tbl, snapshot_id=None) -> list[dict]:
    data = read_arrow(tbl, snapshot_id=snapshot_id)
    cols = [c for c in ("id", "item", "note", "ship", "price") if c in data.column_names]
    return sorted(data.select(cols).to_pylist(), key=lambda r: r["id"])


def three_versions(url: str) -> list[list[bytes]]:
    v1 = avro_values(url, "orders", V1, [{"id": i, "item": f"i{i}"} for i in range(4)])
    v2 = avro_values(url, "orders", V2, [
        {"id": 4, "item": "i4", "note": None, "ship": {"city": "Oslo", "zip": None}},
        {"id": 5, "item": "i5", "note": None, "ship": None}])
    v3 = avro_values(url, "orders", V3, [
        {"id": 6, "item": "i6", "note": None, "price": 9.5,
         "ship": {"city": "Rome", "zip": "00100", "floor": 3}}])
    return [v1, v2, v3]


EXPECTED = [
    {"id": 0, "item": "i0", "note": None, "ship": None, "price": None},
    {"id": 1, "item": "i1", "note": None, "ship": None, "price": None},
    {"id": 2, "item": "i2", "note": None, "ship": None, "price": None},
    {"id": 3, "item": "i3", "note": None, "ship": None, "price": None},
    {"id": 4, "item": "i4", "note": None, "ship": {"city": "Oslo", "zip": None, "floor": None},
     "price": None},
    {"id": 5, "item": "i5", "note": None, "ship": None, "price": None},
    {"id": 6, "item": "i6", "note": None, "ship": {"city": "Rome", "zip": "00100", "floor": 3},
     "price": 9.5},
]


def test_three_schema_versions_in_one_run(spark, tmp_path, registry):
    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=2)
    versions = three_versions(registry.url)
    write(storage, "orders", [v for vs in versions for v in vs], 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    assert (s.rows, s.dead_letters) == (7, 0)
    tbl = wh.table("orders")
    assert rows(tbl) == EXPECTED
    fields = {f.name: str(f.field_type) for f in tbl.schema().fields}
    assert fields["id"] == "long" and fields["price"] == "double"   # int promoted to long
    ids = json.loads(tbl.current_snapshot().summary["kafkastore.schema-ids"])
    assert len(ids) == 3


def test_three_schema_versions_in_three_runs_and_time_travel(spark, tmp_path, registry):
    from pipelines.sql import run_sql

    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=1)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    snaps, start = [], 0
    for values in three_versions(registry.url):
        write(storage, "orders", values, start)
        start += len(values)
        s = run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
        assert s.dead_letters == 0
        snaps.append(s.snapshot_id)
    tbl = wh.table("orders")
    assert rows(tbl) == EXPECTED
    # Each snapshot keeps the schema it was committed with.
    first = read_arrow(tbl, snapshot_id=snaps[0])
    assert set(first.column_names) >= {"id", "item"} and "ship" not in first.column_names
    assert "price" not in read_arrow(tbl, snapshot_id=snaps[1]).column_names
    out = io.StringIO()
    run_sql(spark, "SELECT id, ship.city AS city, price FROM orders ORDER BY id", root=root,
            warehouse=f"file://{tmp_path}/wh", fmt="jsonl", out=out, views_dir=None)
    got = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(r["id"], r["city"], r["price"]) for r in got] == [
        (0, None, None), (1, None, None), (2, None, None), (3, None, None), (4, "Oslo", None),
        (5, None, None), (6, "Rome", 9.5)]
    out = io.StringIO()
    run_sql(spark, "SELECT * FROM orders", root=root, warehouse=f"file://{tmp_path}/wh",
            fmt="jsonl", out=out, views_dir=None, as_of_snapshot=snaps[0])
    old = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(old) == 4 and all("ship" not in r and "price" not in r for r in old)


def test_bad_records_among_good_are_dead_letters(spark, tmp_path, registry):
    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=1)
    good = avro_values(registry.url, "orders", V1, [{"id": i, "item": "x"} for i in range(3)])
    sid = int.from_bytes(good[0][1:5], "big")
    values = [good[0], b"plain bytes", good[1], b"\x00" + (sid + 999).to_bytes(4, "big") + b"\x02",
              good[2][:-1], None, good[2]]
    write(storage, "orders", values, 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    assert (s.rows, s.dead_letters) == (4, 3)
    got = read_arrow(wh.table("orders")).sort_by("offset")
    assert got.column("offset").to_pylist() == [0, 2, 5, 6]
    assert got.column("id").to_pylist() == [0, 1, None, 2]    # the tombstone: a null row
    dead = read_arrow(wh.table("orders_dead_letters")).sort_by("offset").to_pylist()
    assert [d["offset"] for d in dead] == [1, 3, 4]
    assert "no schema registry header" in dead[0]["error"]
    assert f"unknown schema id {sid + 999}" in dead[1]["error"]
    assert "Avro decode failed" in dead[2]["error"]
    assert dead[0]["value"] == b"plain bytes"


def _incompatible_topic(tmp_path, registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=1)
    SchemaRegistryClient({"url": registry.url}).set_compatibility("orders-value", "NONE")
    v1 = avro_values(registry.url, "orders", V1, [{"id": 1, "item": "a"}])
    changed = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "int"}, {"name": "item", "type": "long"}]}
    v2 = avro_values(registry.url, "orders", changed, [{"id": 2, "item": 7}])
    write(storage, "orders", v1, 0)
    return root, storage, v2


def test_incompatible_change_goes_to_dead_letters(spark, tmp_path, registry):
    root, storage, v2 = _incompatible_topic(tmp_path, registry)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    write(storage, "orders", v2, 1)
    s = run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    assert (s.rows, s.dead_letters) == (0, 1)
    dead = read_arrow(wh.table("orders_dead_letters")).to_pylist()
    assert "incompatible" in dead[0]["error"] and "item" in dead[0]["error"]
    assert str(wh.table("orders").schema().find_field("item").field_type) == "string"


def test_incompatible_change_fails_the_load(spark, tmp_path, registry):
    root, storage, v2 = _incompatible_topic(tmp_path, registry)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    before = wh.table("orders").current_snapshot().snapshot_id
    write(storage, "orders", v2, 1)
    with pytest.raises(IncompatibleSchemaError, match="item"):
        run_load(spark, root=root, warehouse=wh, progress=False,
                 spec=spec(registry.url, on_incompatible="fail"))
    assert wh.table("orders").current_snapshot().snapshot_id == before
    assert committed_offsets(wh.table("orders_dead_letters")).get(("orders", 0)) in (None, 1)


def _order_class(version: int):
    """A protobuf message class built at run time: shop.Order v1 (id, item), v2 adds a
    nested message and a well-known Timestamp."""
    from google.protobuf import descriptor_pb2 as d
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    F = d.FieldDescriptorProto
    f = d.FileDescriptorProto(name=f"order_v{version}.proto", package="shop", syntax="proto3")
    m = f.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    m.field.add(name="item", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    if version > 1:
        f.dependency.append("google/protobuf/timestamp.proto")
        ship = m.nested_type.add(name="Ship")
        ship.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        m.field.add(name="ship", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".shop.Order.Ship")
        m.field.add(name="at", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")
        pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_serializer_two_versions(spark, tmp_path, registry):
    import datetime as dt

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url})
    ctx = SerializationContext("orders", MessageField.VALUE)
    v1, v2 = _order_class(1), _order_class(2)
    s1 = ProtobufSerializer(v1, client, {"use.deprecated.format": False})
    s2 = ProtobufSerializer(v2, client, {"use.deprecated.format": False})
    late = v2(id=2, item="b")
    late.ship.city = "Oslo"
    late.at.FromDatetime(dt.datetime(2024, 1, 2, 3, 4, 5))
    values = [s1(v1(id=1, item="a"), ctx), s2(late, ctx), s2(v2(id=3), ctx)]
    root = f"file://{tmp_path}/root"
    write(make_topic(root, "orders", partitions=1), "orders", values, 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, progress=False, spec=LoadSpec(
        topic="orders", table="orders", value_format="protobuf",
        decode={"schema_registry": registry.url}))
    assert (s.rows, s.dead_letters) == (3, 0)
    got = sorted(read_arrow(wh.table("orders")).select(["id", "item", "ship", "at"])
                 .to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "item": "a", "ship": None, "at": None},
        {"id": 2, "item": "b", "ship": {"city": "Oslo"},
         "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)},
        {"id": 3, "item": "", "ship": None, "at": None}]


def test_json_schema_serializer_two_versions(spark, tmp_path, registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url})
    # An open content model refuses an added property under BACKWARD (as Confluent does).
    client.set_compatibility("orders-value", "NONE")
    ctx = SerializationContext("orders", MessageField.VALUE)
    one = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order",
           "type": "object", "properties": {"id": {"type": "integer"},
                                            "item": {"type": "string"}}}
    two = {**one, "properties": {**one["properties"],
                                 "tags": {"type": "array", "items": {"type": "string"}}}}
    a = JSONSerializer(json.dumps(one), client)
    b = JSONSerializer(json.dumps(two), client)
    values = [a({"id": 1, "item": "x"}, ctx), b({"id": 2, "item": "y", "tags": ["t"]}, ctx)]
    root = f"file://{tmp_path}/root"
    write(make_topic(root, "orders", partitions=1), "orders", values, 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, progress=False, spec=LoadSpec(
        topic="orders", table="orders", value_format="json-schema",
        decode={"schema_registry": registry.url}))
    assert (s.rows, s.dead_letters) == (2, 0)
    got = sorted(read_arrow(wh.table("orders")).select(["id", "item", "tags"]).to_pylist(),
                 key=lambda r: r["id"])
    assert got == [{"id": 1, "item": "x", "tags": None}, {"id": 2, "item": "y", "tags": ["t"]}]


def test_contradicting_new_schemas_in_one_run_the_older_id_wins(spark, tmp_path, registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    SchemaRegistryClient({"url": registry.url}).set_compatibility("orders-value", "NONE")
    older = avro_values(registry.url, "orders", V1, [{"id": 1, "item": "a"}, {"id": 3, "item": "c"}])
    changed = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "int"}, {"name": "item", "type": "long"}]}
    newer = avro_values(registry.url, "orders", changed, [{"id": 0, "item": 7}, {"id": 2, "item": 8}])
    root = f"file://{tmp_path}/root"
    # The newer schema's records come first in the log (partition 0), the older's in partition 1.
    write(make_topic(root, "orders", partitions=2), "orders",
          [newer[0], older[0], newer[1], older[1]], 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    assert (s.rows, s.dead_letters) == (2, 2)
    assert sorted(read_arrow(wh.table("orders")).column("item").to_pylist()) == ["a", "c"]
    dead = read_arrow(wh.table("orders_dead_letters")).to_pylist()
    assert all("contradicts an older schema" in d["error"] and "item" in d["error"] for d in dead)
    assert sorted(d["partition"] for d in dead) == [0, 0]


def test_cli_flags_and_config_entry(spark, tmp_path, registry, capsys, clean_config_env):
    from pipelines.cli import main
    from tests.helpers.cli import one_error_line, write_conf

    warehouse = f"file://{tmp_path}/wh"
    root, storage, v2 = _incompatible_topic(tmp_path, registry)
    assert main(["--root", root, "load", "orders", "--warehouse", warehouse, "--table", "orders",
                 "--value-format", "avro", "--schema-registry", registry.url]) == 0
    write(storage, "orders", v2, 1)
    conf = write_conf(tmp_path, f"""root: {root}
warehouse: {warehouse}
loads:
  - topic: orders
    table: orders
    value_format: avro
    schema_registry: {registry.url}
    on_incompatible: fail
""")
    capsys.readouterr()
    rc = main(["--conf", conf, "load", "orders"])
    err = capsys.readouterr().err.splitlines()
    line = one_error_line(rc, err[-1])    # after the load's plan line
    assert "incompatible" in line and "item" in line and "dead-letter" in line
    # the flag overrides the entry's on_incompatible
    assert main(["--conf", conf, "load", "orders", "--on-incompatible", "dead-letter"]) == 0
    wh = Warehouse(warehouse)
    assert len(read_arrow(wh.table("orders_dead_letters"))) == 1


def test_keys_decoded_by_their_schema_id(spark, tmp_path, registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kafkastore.write.log_writer import LogWriter as Broker

    key_schema = {"type": "record", "name": "OrderKey", "fields": [
        {"name": "customer", "type": "string"}]}
    ser = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(key_schema))
    keys = [ser({"customer": c}, SerializationContext("orders", MessageField.KEY))
            for c in ("ann", "bob")] + [b"plain key", None]
    values = avro_values(registry.url, "orders", V1, [{"id": i, "item": "x"} for i in range(4)])
    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=1)
    broker = Broker(storage)
    for k, v in zip(keys, values):
        broker.send("orders", v, key=k, partition=0)
    broker.flush()
    wh = warehouse_for(f"file://{tmp_path}/wh")
    s = run_load(spark, root=root, warehouse=wh, progress=False,
                 spec=spec(registry.url, key_format="avro"))
    assert (s.rows, s.dead_letters) == (3, 1)
    tbl = wh.table("orders")
    got = read_arrow(tbl).sort_by("offset").select(["key", "id"]).to_pylist()
    assert got == [{"key": {"customer": "ann"}, "id": 0}, {"key": {"customer": "bob"}, "id": 1},
                   {"key": None, "id": 3}]
    dead = read_arrow(wh.table("orders_dead_letters")).to_pylist()
    assert dead[0]["key"] == b"plain key" and dead[0]["error"].startswith("key: no schema")
    summary = tbl.current_snapshot().summary
    assert len(json.loads(summary["kafkastore.key-schema-ids"])) == 1


def test_reprocess_follows_the_registry(spark, tmp_path, registry):
    from pipelines.jobs.reprocess import run_reprocess

    root = f"file://{tmp_path}/root"
    storage = make_topic(root, "orders", partitions=1)
    v1, v2, _ = three_versions(registry.url)
    write(storage, "orders", v1 + v2, 0)
    wh = warehouse_for(f"file://{tmp_path}/wh")
    run_load(spark, root=root, warehouse=wh, spec=spec(registry.url), progress=False)
    s = run_reprocess(spark, root=root, warehouse=wh, spec=spec(registry.url), from_offset=3,
                      reason="test", progress=False)
    assert (s.rows, s.dead_letters) == (3, 0)
    tbl = wh.table("orders")
    assert [(r["id"], r["ship"]) for r in rows(tbl)][3:] == [
        (3, None), (4, {"city": "Oslo", "zip": None}), (5, None)]
    summary = tbl.current_snapshot().summary
    assert summary["kafkastore.operation"] == "reprocess"
    assert len(json.loads(summary["kafkastore.schema-ids"])) == 2


def test_producer_through_serve_and_its_registry(spark, tmp_path, capsys):
    """confluent-kafka's Producer and AvroSerializer against `kafkastore serve
    --schema-registry-listen`, then `kafkastore load --schema-registry` of what it wrote."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pipelines.cli import main
    from tests.helpers.serve_procs import start_serve, stop_serve

    root, warehouse = f"file://{tmp_path}/root", f"file://{tmp_path}/wh"
    make_topic(root, "orders", partitions=1)
    proc = start_serve(root, extra=["--schema-registry-listen", "127.0.0.1:0"])
    try:
        url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        client = SchemaRegistryClient({"url": url})
        ctx = SerializationContext("orders", MessageField.VALUE)
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for schema, rec in ((V1, {"id": 1, "item": "a"}),
                            (V2, {"id": 2, "item": "b", "note": "n", "ship": None})):
            producer.produce("orders", AvroSerializer(client, json.dumps(schema))(rec, ctx))
        assert producer.flush(30) == 0
        capsys.readouterr()
        assert main(["--root", root, "load", "orders", "--warehouse", warehouse, "--table",
                     "orders", "--value-format", "avro", "--schema-registry", url]) == 0
    finally:
        stop_serve(proc)
    got = rows(Warehouse(warehouse).table("orders"))
    assert got == [{"id": 1, "item": "a", "note": None, "ship": None},
                   {"id": 2, "item": "b", "note": "n", "ship": None}]
