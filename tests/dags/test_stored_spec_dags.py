"""DAG runs of a table loaded first from the command line with flags: the config's
``loads`` entry names only topic, table and schedule, and the load and reprocess DAGs
decode and key the rows as the table's recorded load does."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.warehouse.catalog import Warehouse

DAG_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "dags", "kafkastore_dags.py")
T0 = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)


def _send(storage, start, n):
    broker = Broker(storage)
    for i in range(start, start + n):
        broker.send("accounts", json.dumps({"id": f"a{i % 5}", "balance": i}).encode(),
                    key=f"a{i % 5}".encode(), timestamp=T0 + i * 60_000, partition=i % 2)
    broker.flush()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("stored_spec_dags")
    root, warehouse = f"file://{base}/log", f"file://{base}/warehouse"
    storage = Storage(root)
    create_topic(storage, "accounts", 2)
    _send(storage, 0, 20)
    conf = base / "kafkastore.yaml"
    conf.write_text(json.dumps({
        "root": root, "warehouse": warehouse, "spark": {"master": "local[2]"},
        "loads": [{"topic": "accounts", "table": "accounts", "schedule": "@hourly",
                   "retries": 0, "start_date": "2023-12-31"}]}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKASTORE_CONF", str(conf))
        yield {"root": root, "warehouse": warehouse, "storage": storage}


def _state(warehouse):
    rows = Warehouse(warehouse).table("accounts").scan().to_arrow().to_pylist()
    assert rows and "value" not in rows[0]
    return {r["id"]: r["balance"] for r in rows}


def test_dag_runs_use_the_tables_recorded_load(env, airflow_db, spark):
    from airflow.dag_processing.dagbag import DagBag

    from pipelines.cli import main

    assert main(["--root", env["root"], "load", "accounts", "--warehouse", env["warehouse"],
                 "--table", "accounts", "--mode", "upsert", "--value-format", "json",
                 "--value-schema", "id STRING, balance BIGINT"]) == 0
    assert _state(env["warehouse"]) == {f"a{i}": 15 + i for i in range(5)}
    _send(env["storage"], 20, 7)
    bag = DagBag(dag_folder=DAG_FILE)
    dr = bag.get_dag("kafkastore_load_accounts").test(
        logical_date=datetime(2024, 1, 1, 1, tzinfo=timezone.utc))
    assert str(dr.state) == "success"
    model = {f"a{i % 5}": i for i in range(27)}
    assert _state(env["warehouse"]) == model
    dr = bag.get_dag("kafkastore_reprocess").test(
        run_conf={"topic": "accounts", "table": "accounts", "from_offset": 3,
                  "reason": "test: rebuild as loaded"},
        logical_date=datetime.now(timezone.utc) - timedelta(minutes=1))
    assert str(dr.state) == "success"
    assert _state(env["warehouse"]) == model
