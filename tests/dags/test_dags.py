"""The Airflow DAGs: they parse, and the load and reprocess DAGs run end to end
with ``dag.test()`` (real Airflow, SQLite metadata DB, tasks in-process on the
test session's SparkSession) against a topic produced with the Broker."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import committed_offsets
from pipelines.warehouse.properties import VALIDATED_TAG

DAGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "dags")

DAG_FILE = os.path.join(DAGS, "kafkastore_dags.py")
T0 = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE = 60_000
SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts BIGINT"
BAD_OFFSET_MINUTE = 77          # one record that is not JSON: a dead letter (1/120, 1/49 < 5%)


def _dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=DAG_FILE)


@pytest.fixture(scope="module")
def kafkastore_env(tmp_path_factory):
    """A root with topic ``orders`` (180 records, one a minute from 2024-01-01T00:00Z)
    and a config file naming it, pointed to by KAFKASTORE_CONF."""
    base = tmp_path_factory.mktemp("dags")
    root, warehouse = f"file://{base}/log", f"file://{base}/warehouse"
    storage = Storage(root)
    create_topic(storage, "orders", 3)
    broker = Broker(storage)
    for i in range(180):
        value = {"order_id": f"o{i}", "customer": f"c{i % 11}", "amount": float(i),
                 "currency": "EUR", "ts": T0 + i * MINUTE}
        body = b"not json" if i == BAD_OFFSET_MINUTE else json.dumps(value).encode()
        broker.send("orders", body, key=f"c{i % 11}".encode(), timestamp=T0 + i * MINUTE)
    create_topic(storage, "customers", 1, {"cleanup.policy": "compact"})
    for i in range(20):
        broker.send("customers", b"v%d" % i, key=b"c%d" % (i % 4), timestamp=T0 + i)
    broker.flush()
    conf = base / "kafkastore.yaml"
    conf.write_text(json.dumps({   # JSON is YAML
        "root": root, "warehouse": warehouse,
        "spark": {"master": "local[2]"},
        "topics": {"orders": {"partitions": 3}},
        "loads": [{"topic": "orders", "table": "order_events", "schedule": "@hourly",
                   "value_format": "json", "value_schema": SCHEMA, "retries": 0,
                   "retry_delay_s": 7, "start_date": "2023-12-31"}],
        "compaction": {"schedule": "@daily", "retries": 0},
        "retention": {"schedule": "@hourly", "retries": 0},
        "quality": {"max_dead_letter_fraction": 0.05},
    }))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKASTORE_CONF", str(conf))
        yield {"root": root, "warehouse": warehouse, "conf": str(conf)}


def test_every_dag_file_parses_with_the_repository_conf(airflow_db, monkeypatch):
    monkeypatch.delenv("KAFKASTORE_CONF", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    import yaml

    with open(os.path.join(os.path.dirname(DAGS), "conf", "kafkastore.yaml")) as f:
        loads = yaml.safe_load(f)["loads"]
    bag = DagBag(dag_folder=DAGS)
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == sorted(
        ["kafkastore_compaction", "kafkastore_reprocess", "kafkastore_retention"]
        + [f"kafkastore_load_{entry['table']}" for entry in loads if "table" in entry]
        + ["kafkastore_load_web._topic_"])   # the pattern entry, by its table template
    load = bag.get_dag(f"kafkastore_load_{loads[0]['table']}")
    assert load.max_active_runs == 1
    assert [t.task_id for t in load.tasks] == ["load", "validate"]
    task = load.get_task("load")
    assert task.retries == int(loads[0].get("retries", 3)) and task.retry_exponential_backoff
    assert load.get_task("validate").upstream_task_ids == {"load"}
    assert type(load.timetable).__name__ == "CronDataIntervalTimetable"
    reprocess = bag.get_dag("kafkastore_reprocess")
    assert set(reprocess.params) == {"topic", "table", "partition", "from_offset",
                                     "from_timestamp", "reason"}
    for dag_id in ("kafkastore_compaction", "kafkastore_retention", "kafkastore_reprocess"):
        assert bag.get_dag(dag_id).max_active_runs == 1


def _run(dag, **kwargs):
    dr = dag.test(**kwargs)
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    return dr, states


def _table(warehouse, table="order_events"):
    return Warehouse(warehouse).table(table)


def _rows(warehouse, table="order_events"):
    """(the pyiceberg table, its current rows read through pyiceberg)."""
    t = _table(warehouse, table)
    return t, t.scan().to_arrow()


@pytest.fixture(scope="module")
def loaded(kafkastore_env, airflow_db, spark):
    """The load DAG run once for the interval [01:00, 02:00)."""
    dag = _dagbag().get_dag("kafkastore_load_order_events")
    logical = datetime(2024, 1, 1, 2, tzinfo=timezone.utc)
    dr, states = _run(dag, logical_date=logical)
    return {"dag": dag, "logical": logical, "run": dr, "states": states}


def test_load_dag_loads_the_interval_and_validates(loaded, kafkastore_env):
    assert str(loaded["run"].state) == "success", loaded["states"]
    # The entry's scheduling keys reach the DAG (through LoadSpec.scheduling).
    dag = loaded["dag"]
    assert dag.start_date == datetime(2023, 12, 31, tzinfo=timezone.utc)
    task = dag.get_task("load")
    assert task.retries == 0 and task.retry_delay == timedelta(seconds=7)
    assert set(loaded["states"].values()) == {"success"}
    table, tbl = _rows(kafkastore_env["warehouse"])
    end_ms = T0 + 120 * MINUTE         # the data interval ends at 02:00
    # Every record before the interval end (the first load starts at the log start), once.
    offsets = sorted(zip(tbl.column("partition").to_pylist(), tbl.column("offset").to_pylist()))
    assert len(offsets) + 1 == len(set(offsets)) + 1 == 120        # + the dead letter
    ts = [t.timestamp() * 1000 for t in tbl.column("timestamp").to_pylist()]
    assert max(ts) < end_ms
    _, dead = _rows(kafkastore_env["warehouse"], "order_events_dead_letters")
    assert dead.num_rows == 1
    # One load snapshot, with the DAG's run id; the validate task passed and
    # moved the validated tag onto it.
    snap = table.current_snapshot()
    summary = snap.summary.additional_properties
    assert summary["kafkastore.run-id"] == ("airflow-kafkastore_load_order_events-order_events-"
                                            "20240101T010000Z-20240101T020000Z")
    assert summary["kafkastore.operation"] == "load"
    assert table.snapshot_by_name(VALIDATED_TAG).snapshot_id == snap.snapshot_id
    docs = kafkastore_env["warehouse"][len("file://"):] + "/_quality/order_events/index.html"
    assert os.path.exists(docs)


def test_load_dag_rerun_of_the_same_interval_changes_nothing(loaded, kafkastore_env):
    before, before_rows = _rows(kafkastore_env["warehouse"])
    dr, states = _run(loaded["dag"], logical_date=loaded["logical"])
    assert str(dr.state) == "success", states
    after, after_rows = _rows(kafkastore_env["warehouse"])
    assert after.current_snapshot().snapshot_id == before.current_snapshot().snapshot_id
    assert committed_offsets(after) == committed_offsets(before)
    assert after_rows.num_rows == before_rows.num_rows == 119


def test_reprocess_dag_with_params(loaded, kafkastore_env):
    dag = _dagbag().get_dag("kafkastore_reprocess")
    conf = {"topic": "orders", "table": "order_events", "partition": 0, "from_offset": 5,
            "reason": "test: decoder fix"}
    before, _ = _rows(kafkastore_env["warehouse"])
    dr, states = _run(dag, run_conf=conf,
                      logical_date=datetime.now(timezone.utc) - timedelta(minutes=1))
    assert str(dr.state) == "success", states
    table, tbl = _rows(kafkastore_env["warehouse"])
    snap = table.current_snapshot()
    summary = snap.summary.additional_properties
    assert summary["kafkastore.operation"] == "reprocess"
    assert "test: decoder fix" in summary["kafkastore.audit"]
    assert [(r["topic"], r["partition"]) for r in json.loads(summary["kafkastore.ranges"])] == [
        ("orders", 0)]
    assert table.snapshot_by_name(VALIDATED_TAG).snapshot_id == snap.snapshot_id
    # The same rows, every offset once, the committed offsets unchanged.
    offsets = list(zip(tbl.column("partition").to_pylist(), tbl.column("offset").to_pylist()))
    assert len(offsets) == len(set(offsets)) == 119
    assert committed_offsets(table) == committed_offsets(before)


def test_reprocess_dag_refuses_bad_params_without_retrying(loaded, kafkastore_env):
    dag = _dagbag().get_dag("kafkastore_reprocess")
    before = _table(kafkastore_env["warehouse"]).current_snapshot().snapshot_id
    dr, states = _run(dag, run_conf={"topic": "orders", "reason": "neither offset nor time"},
                      logical_date=datetime.now(timezone.utc) - timedelta(seconds=30))
    assert str(dr.state) == "failed"
    assert str(states["reprocess"]) == "failed"     # not up_for_retry: bad input fails at once
    assert _table(kafkastore_env["warehouse"]).current_snapshot().snapshot_id == before


def test_maintenance_dags_map_over_the_topics(kafkastore_env, airflow_db, spark):
    bag = _dagbag()
    logical = datetime(2024, 1, 2, tzinfo=timezone.utc)
    dr, _ = _run(bag.get_dag("kafkastore_retention"), logical_date=logical)
    assert str(dr.state) == "success"
    mapped = sorted((ti.map_index, ti.rendered_map_index) for ti in dr.get_task_instances()
                    if ti.task_id == "retention")
    assert mapped == [(0, "customers"), (1, "orders")]
    dr, _ = _run(bag.get_dag("kafkastore_compaction"), logical_date=logical)
    assert str(dr.state) == "success"
    mapped = [ti.rendered_map_index for ti in dr.get_task_instances() if ti.task_id == "compact"]
    assert mapped == ["customers"]
