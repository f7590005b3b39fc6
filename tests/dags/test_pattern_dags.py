"""The load DAG of a ``loads`` entry with a topic pattern: one load task for every
matching topic's table, then one validate per table (a mapped task named by the table)."""
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
MINUTE = 60_000
SITES = ("clicks.eu", "clicks.us")


def _send(storage, topic, n, start=0):
    broker = Broker(storage)
    for i in range(start, start + n):
        broker.send(topic, json.dumps({"page": f"p{i}", "n": i}).encode(),
                    timestamp=T0 + i * MINUTE, partition=i % 2)
    broker.flush()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("pattern_dags")
    root, warehouse = f"file://{base}/log", f"file://{base}/warehouse"
    storage = Storage(root)
    for topic in (*SITES, "views"):
        create_topic(storage, topic, 2)
        _send(storage, topic, 90)      # 01:30: an hour and a half of records
    conf = base / "kafkastore.yaml"
    conf.write_text(json.dumps({
        "root": root, "warehouse": warehouse, "spark": {"master": "local[2]"},
        "loads": [{"topic_pattern": r"clicks\..*", "table_template": "web.{topic}",
                   "schedule": "@hourly", "retries": 0, "start_date": "2023-12-31",
                   "value_format": "json", "value_schema": "page STRING, n BIGINT"}],
        "quality": {"max_dead_letter_fraction": 0.05}}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKASTORE_CONF", str(conf))
        yield {"root": root, "warehouse": warehouse, "storage": storage}


def test_the_pattern_dag_loads_and_validates_one_table_per_topic(env, airflow_db, spark):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAG_FILE)
    assert bag.import_errors == {}
    dag = bag.get_dag("kafkastore_load_web._topic_")
    assert [t.task_id for t in dag.tasks] == ["load", "validate"]
    dr = dag.test(logical_date=datetime(2024, 1, 1, 1, tzinfo=timezone.utc))   # [00:00, 01:00)
    assert str(dr.state) == "success"
    tis = dr.get_task_instances()
    results = next(ti for ti in tis if ti.task_id == "load").xcom_pull(task_ids="load")
    assert sorted(r["table"] for r in results) == ["web.clicks_eu", "web.clicks_us"]
    assert all(r["rows"] == 60 and not r["noop"] for r in results)
    validated = sorted(ti.rendered_map_index for ti in tis if ti.task_id == "validate")
    assert validated == ["web.clicks_eu", "web.clicks_us"]
    assert all(str(ti.state) == "success" for ti in tis)
    wh = Warehouse(env["warehouse"])
    assert sorted(wh.list_tables()) == ["web.clicks_eu", "web.clicks_eu_dead_letters",
                                        "web.clicks_us", "web.clicks_us_dead_letters"]
    for table in ("web.clicks_eu", "web.clicks_us"):
        tbl = wh.table(table)
        snap = tbl.current_snapshot()
        assert tbl.snapshot_by_name(VALIDATED_TAG).snapshot_id == snap.snapshot_id
        assert snap.summary.additional_properties["kafkastore.run-id"] == (
            f"airflow-kafkastore_load_web._topic_-many-20240101T000000Z-20240101T010000Z-"
            f"{table}")
