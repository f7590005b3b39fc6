"""The load DAG of an upsert entry: load, validate, then maintain the table."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.properties import VALIDATED_TAG

DAG_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "dags", "kafkastore_dags.py")
T0 = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)


@pytest.fixture(scope="module")
def upsert_env(tmp_path_factory):
    base = tmp_path_factory.mktemp("upsert_dags")
    root, warehouse = f"file://{base}/log", f"file://{base}/warehouse"
    storage = Storage(root)
    create_topic(storage, "accounts", 2)
    broker = Broker(storage)
    for i in range(40):   # 40 changes of 5 accounts; account a4 deleted at the end
        broker.send("accounts", json.dumps({"id": f"a{i % 5}", "balance": i}).encode(),
                    key=f"a{i % 5}".encode(), timestamp=T0 + i * 60_000, partition=i % 2)
    broker.send("accounts", None, key=b"a4", timestamp=T0 + 41 * 60_000, partition=0)
    broker.flush()
    conf = base / "kafkastore.yaml"
    conf.write_text(json.dumps({
        "root": root, "warehouse": warehouse, "spark": {"master": "local[2]"},
        "loads": [{"topic": "accounts", "table": "accounts", "schedule": "@hourly",
                   "mode": "upsert", "value_format": "json",
                   "value_schema": "id STRING, balance BIGINT", "partition_by": [],
                   "retries": 0, "start_date": "2023-12-31"}]}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKASTORE_CONF", str(conf))
        yield {"root": root, "warehouse": warehouse}


def test_upsert_load_dag_loads_validates_and_maintains(upsert_env, airflow_db, spark):
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=DAG_FILE).get_dag("kafkastore_load_accounts")
    assert [t.task_id for t in dag.topological_sort()] == ["load", "validate", "maintain"]
    dr = dag.test(logical_date=datetime(2024, 1, 1, 1, tzinfo=timezone.utc))
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert states == {"load": "success", "validate": "success", "maintain": "success"}, states
    table = Warehouse(upsert_env["warehouse"]).table("accounts")
    rows = {r["id"]: r["balance"] for r in table.scan().to_arrow().to_pylist()}
    assert rows == {"a0": 35, "a1": 36, "a2": 37, "a3": 38}
    # The load's snapshot is validated; maintenance found nothing small to merge
    # (one file) and committed nothing.
    assert table.snapshot_by_name(VALIDATED_TAG).snapshot_id == \
        table.current_snapshot().snapshot_id
