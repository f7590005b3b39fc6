"""Debezium change events loaded as the source table's state (pipelines.cdc).

The fixtures are Debezium Postgres connector events (inventory.customers, as in
Debezium's tutorial): an initial snapshot (op r), an insert, an update, a delete with
REPLICA IDENTITY DEFAULT (before holds the primary key only) and its tombstone; and
the same connector with the JsonConverter's schemas.enable=true wrapper.
"""
from __future__ import annotations

import io
import json
import os

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.decoding.cdc import key_fields, with_default_keys
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from tests.helpers.loads import make_topic

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
DDL = "id INT, first_name STRING, last_name STRING, email STRING"


def _events(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _send(storage, events, t0):
    broker = Broker(storage, batch_size=64)
    for i, e in enumerate(events):
        broker.send("t", None if e["value"] is None else json.dumps(e["value"]).encode(),
                    key=json.dumps(e["key"]).encode(), timestamp=t0 + i)
    broker.flush()


def _spec(keys=("id",), **kw):
    return LoadSpec(topic="t", table="customers", cdc="debezium", key_columns=keys,
                    value_format="json", value_schema=DDL, partition_by=(), **kw)


def _state(wh):
    rows = read_arrow(wh.table("customers")).to_pylist()
    return {r["id"]: r for r in rows}


def test_snapshot_then_changes_give_the_source_table(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=2)
    wh = Warehouse(warehouse)
    _send(storage, _events("debezium_postgres_customers.jsonl"), 1_700_000_000_000)
    summary = run_load(spark, root=root, warehouse=wh, spec=_spec(), progress=False)
    assert summary.dead_letters == 0
    state = _state(wh)
    assert {i: r["email"] for i, r in state.items()} == {
        1001: "sally@thomas.example", 1003: "ed@walker.com", 1004: "annek@noanswer.org"}
    r = state[1001]
    assert (r["first_name"], r["cdc_op"], r["cdc_ts_ms"], r["cdc_position"]) == (
        "Sally", "u", 1700000120077, "33817344")
    assert json.loads(r["cdc_source"])["table"] == "customers"
    assert state[1003]["cdc_op"] == "r"
    # The schemas.enable=true wrapper, loaded by a second run: update, delete, tombstone,
    # insert.
    _send(storage, _events("debezium_postgres_customers_schemas.jsonl"), 1_700_000_100_000)
    run_load(spark, root=root, warehouse=wh, spec=_spec(), progress=False)
    state = _state(wh)
    assert {i: r["email"] for i, r in state.items()} == {
        1001: "sally@thomas.example", 1003: "edward@walker.example", 1005: "jon@doe.example"}
    assert state[1005]["cdc_position"] == "33820000"
    # kafkastore sql reads the same state.
    from pipelines.sql import run_sql

    out = io.StringIO()
    run_sql(spark, "SELECT id, email FROM customers ORDER BY id", root=None,
            warehouse=warehouse, fmt="jsonl", out=out)
    assert [json.loads(x)["id"] for x in out.getvalue().splitlines()] == [1001, 1003, 1005]


def test_events_that_are_not_row_changes_are_dead_letters(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=1)
    good = _events("debezium_postgres_customers.jsonl")[0]
    truncate = {"key": None, "value": {"before": None, "after": None, "op": "t",
                                       "ts_ms": 1700000400000, "source": {"lsn": 1}}}
    not_cdc = {"key": {"id": 9}, "value": {"id": 9, "email": "plain row"}}
    _send(storage, [good, truncate, not_cdc], 1_700_000_000_000)
    wh = Warehouse(warehouse)
    summary = run_load(spark, root=root, warehouse=wh, spec=_spec(), progress=False)
    assert summary.dead_letters == 2
    dead = read_arrow(wh.table("customers_dead_letters")).to_pylist()
    assert sorted(d["error"] for d in dead) == ["Debezium op t is not a row change",
                                                "not a Debezium change event (no op field)"]
    assert list(_state(wh)) == [1001]


def test_cdc_spec_checks():
    assert _spec().mode == "upsert"
    # No key columns: the load takes the Kafka key's fields (explicit ones win).
    keyless = LoadSpec(topic="t", table="c", cdc="debezium", value_format="json", value_schema=DDL)
    assert (keyless.mode, keyless.key_columns) == ("upsert", ())
    assert with_default_keys(_spec(), None, []) == _spec()
    with pytest.raises(ConfigError, match="value-schema"):
        LoadSpec(topic="t", table="c", cdc="debezium", key_columns=("id",))
    with pytest.raises(ConfigError, match="cdc must be"):
        LoadSpec(topic="t", table="c", cdc="maxwell", key_columns=("id",), value_format="json",
                 value_schema=DDL)
    entry = LoadSpec.from_entry({"topic": "t", "table": "c", "cdc": "debezium",
                                 "key_columns": "id", "value_format": "json",
                                 "value_schema": DDL})
    assert (entry.mode, entry.key_columns) == ("upsert", ("id",))


def test_key_fields_of_debezium_keys():
    assert key_fields(b'{"id": 1001}') == ("id",)
    assert key_fields(b'{"schema": {"type": "struct", "fields": [{"field": "a"}, {"field": "b"}]},'
                      b' "payload": {"a": 1, "b": "x"}}') == ("a", "b")
    assert key_fields(None) is None and key_fields(b"1001") is None
    assert key_fields(b"not json") is None and key_fields(b"{}") is None


def test_key_columns_default_to_the_kafka_key(spark, tmp_path):
    """No --key-columns: the primary key is the Kafka key's fields, bare JSON keys on the
    first load, schemas.enable=true keys on the second (the table's recorded keys)."""
    from pipelines.jobs.upsert import table_mode

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=2)
    wh = Warehouse(warehouse)
    _send(storage, _events("debezium_postgres_customers.jsonl"), 1_700_000_000_000)
    summary = run_load(spark, root=root, warehouse=wh, spec=_spec(keys=()), progress=False)
    assert summary.dead_letters == 0
    assert table_mode(wh.table("customers")) == ("upsert", ("id",))
    _send(storage, _events("debezium_postgres_customers_schemas.jsonl"), 1_700_000_100_000)
    run_load(spark, root=root, warehouse=wh, spec=_spec(keys=()), progress=False)
    state = _state(wh)
    assert {i: r["email"] for i, r in state.items()} == {
        1001: "sally@thomas.example", 1003: "edward@walker.example", 1005: "jon@doe.example"}


def test_keys_that_name_no_columns_ask_for_key_columns(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=1)
    events = [dict(e, key="1001") for e in _events("debezium_postgres_customers.jsonl")[:1]]
    _send(storage, events, 1_700_000_000_000)
    wh = Warehouse(warehouse)
    with pytest.raises(ConfigError, match="key-columns"):
        run_load(spark, root=root, warehouse=wh, spec=_spec(keys=()), progress=False)
    assert wh.load_table("customers") is None
