"""The Airflow DAGs: they parse, and the load and reprocess DAGs run end to end
with ``dag.test()`` (real Airflow, SQLite metadata DB, tasks in-process on the
test session's SparkSession) against a topic produced with the Broker."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from kafkastore.broker import Broker
from kafkastore.storage import Storage
from kafkastore.topics import create_topic
from pipelines import warehouse as wh

from .conftest import DAGS

DAG_FILE = os.path.join(DAGS, "kafkastore_dags.py")
T0 = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE = 60_000
SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts BIGINT"
BAD_OFFSET_MINUTE = 77          # one record that is not JSON: a dead letter (1/120 < 2%)


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
                   "value_format": "json", "value_schema": SCHEMA, "retries": 0}],
        "compaction": {"schedule": "@daily", "retries": 0},
        "retention": {"schedule": "@hourly", "retries": 0},
        "quality": {"max_dead_letter_fraction": 0.02},
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
        + [f"kafkastore_load_{entry.get('table') or entry['topic']}" for entry in loads])
    load = bag.get_dag(f"kafkastore_load_{loads[0].get('table') or loads[0]['topic']}")
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


def _rows(warehouse, table="order_events"):
    t = wh.Table(warehouse, table)
    files = t.live_files(None)
    tbl = wh.read_files(t.url, files)
    return t.state(), tbl


@pytest.fixture(scope="module")
def loaded(kafkastore_env, airflow_db, spark):
    """The load DAG run once for the interval [01:00, 02:00)."""
    dag = _dagbag().get_dag("kafkastore_load_order_events")
    logical = datetime(2024, 1, 1, 2, tzinfo=timezone.utc)
    dr, states = _run(dag, logical_date=logical)
    return {"dag": dag, "logical": logical, "run": dr, "states": states}


def test_load_dag_loads_the_interval_and_validates(loaded, kafkastore_env):
    assert str(loaded["run"].state) == "success", loaded["states"]
    assert set(loaded["states"].values()) == {"success"}
    state, tbl = _rows(kafkastore_env["warehouse"])
    end_ms = T0 + 120 * MINUTE         # the data interval ends at 02:00
    # Every record before the interval end (the first load starts at the log start), once.
    offsets = sorted(zip(tbl.column("partition").to_pylist(), tbl.column("offset").to_pylist()))
    assert len(offsets) == len(set(offsets)) == 120
    ts = [t.timestamp() * 1000 for t in tbl.column("timestamp").to_pylist()]
    assert max(ts) < end_ms
    dead = [f for f in state.live_files("dead_letter")]
    assert sum(f.rows for f in dead) == 1
    # The validate task passed and recorded it.
    assert state.validation == {1: "passed"}
    assert state.version == 2
    commit = wh.Table(kafkastore_env["warehouse"], "order_events").read_commit(1)
    assert commit.run_id == ("airflow-kafkastore_load_order_events-order_events-"
                             "20240101T010000Z-20240101T020000Z")
    assert commit.info["until_timestamp"] == end_ms
    docs = kafkastore_env["warehouse"][len("file://"):] + "/_quality/order_events/index.html"
    assert os.path.exists(docs)


def test_load_dag_rerun_of_the_same_interval_changes_nothing(loaded, kafkastore_env):
    before, before_rows = _rows(kafkastore_env["warehouse"])
    dr, states = _run(loaded["dag"], logical_date=loaded["logical"])
    assert str(dr.state) == "success", states
    after, after_rows = _rows(kafkastore_env["warehouse"])
    assert after.version == before.version
    assert set(after.files) == set(before.files)
    assert after.offsets == before.offsets
    assert after_rows.num_rows == before_rows.num_rows == 120


def test_reprocess_dag_with_params(loaded, kafkastore_env):
    dag = _dagbag().get_dag("kafkastore_reprocess")
    conf = {"topic": "orders", "table": "order_events", "partition": 0, "from_offset": 5,
            "reason": "test: decoder fix"}
    before, _ = _rows(kafkastore_env["warehouse"])
    dr, states = _run(dag, run_conf=conf,
                      logical_date=datetime.now(timezone.utc) - timedelta(minutes=1))
    assert str(dr.state) == "success", states
    table = wh.Table(kafkastore_env["warehouse"], "order_events")
    state = table.state()
    reprocess = [(v, c) for v, c in table.history() if c.operation == "reprocess"]
    assert len(reprocess) == 1
    version, commit = reprocess[0]
    assert commit.info["reason"] == "test: decoder fix"
    assert [(r.topic, r.partition) for r in commit.ranges] == [("orders", 0)]
    assert state.validation[version] == "passed"
    # The same rows, every offset once, the committed offsets unchanged.
    _, tbl = _rows(kafkastore_env["warehouse"])
    offsets = list(zip(tbl.column("partition").to_pylist(), tbl.column("offset").to_pylist()))
    assert len(offsets) == len(set(offsets)) == 120
    assert state.offsets == before.offsets


def test_reprocess_dag_refuses_bad_params_without_retrying(loaded, kafkastore_env):
    dag = _dagbag().get_dag("kafkastore_reprocess")
    before, _ = _rows(kafkastore_env["warehouse"])
    dr, states = _run(dag, run_conf={"topic": "orders", "reason": "neither offset nor time"},
                      logical_date=datetime.now(timezone.utc) - timedelta(seconds=30))
    assert str(dr.state) == "failed"
    assert str(states["reprocess"]) == "failed"     # not up_for_retry: bad input fails at once
    assert wh.Table(kafkastore_env["warehouse"], "order_events").state().version == before.version


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
