"""Exactly-once loads of a topic into a warehouse table (pipelines.load).

The helpers (``make_topic``, ``produce``, ``log_records``, ``assert_exactly_once``) are
tests/helpers/loads.py, shared with the reprocess and failure tests.
"""
from __future__ import annotations

import json
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastore.errors import ConfigError, DataLossError, WarehouseError
from kafkastore.read.reader import ReadRange
from kafkastore.maintenance.retention import delete_records
from pipelines.warehouse.snapshots import history
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.commit import commit
from pipelines.source.schema import nullable, raw_schema
from pipelines.jobs.load import load_for_interval, load_options_from_args, run_load
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.source.planning import default_run_id, pack_splits, parse_offsets_json, plan_load
from tests.helpers.loads import (T0, assert_exactly_once, committed, local_log_and_warehouse,
                                 log_and_warehouse, log_records, make_topic, produce,
                                 rows_by_offset, warehouse_for)


# ---------------------------------------------------------------------------
# planning (driver only, no Spark)


def test_parse_offsets_json():
    assert parse_offsets_json('{"t": {"0": 5, "1": -1}}', "t") == {0: 5, 1: -1}
    assert parse_offsets_json({0: 3}, "t") == {0: 3}
    assert parse_offsets_json(None, "t") is None
    with pytest.raises(ConfigError, match="topic"):
        parse_offsets_json('{"other": {"0": 5}}', "t")
    with pytest.raises(ConfigError):
        parse_offsets_json('{"t": {"0": "x"}}', "t")
    with pytest.raises(ConfigError, match="JSON"):
        parse_offsets_json("{nope", "t")


def _spans(plans):
    return {pl.partition: (pl.range.from_offset, pl.range.until_offset, pl.initial) for pl in plans}


def test_plan_load_starts_at_committed_or_log_start(local_root):
    storage = make_topic(local_root, partitions=2)
    produce(storage, "t", 40)
    delete_records(storage, "t", 1, 4)
    spans = _spans(plan_load(storage, "t", {0: 10}))
    assert spans[0] == (10, 20, False)
    # Never loaded: starts at the log start as of now, and says so.
    assert spans[1] == (4, 20, True)
    with pytest.raises(DataLossError, match=r"t/1.*next offset is 2.*starts at 4") as lost:
        plan_load(storage, "t", {0: 10, 1: 2})
    assert str(lost.value).endswith("and go on") and lost.value.log_start_offset == 4
    skipped = {pl.partition: pl for pl in plan_load(storage, "t", {1: 2}, on_data_loss="skip")}
    assert skipped[1].gap == OffsetRange("t", 1, 2, 4) and skipped[1].range.from_offset == 4
    # Explicit ends: clamped to the readable end; unlisted partitions are not loaded.
    ends = plan_load(storage, "t", {}, until_offsets={0: 15})
    assert [(pl.partition, pl.range.from_offset, pl.range.until_offset) for pl in ends] == [(0, 0, 15)]
    assert plan_load(storage, "t", {}, until_offsets={0: 999})[0].range.until_offset == 20
    # End timestamp: records strictly before it (partition 0 holds even i, T0 + i s).
    by_time = {pl.partition: pl.range.until_offset
               for pl in plan_load(storage, "t", {}, until_timestamp=T0 + 10_000)}
    assert by_time == {0: 5, 1: 5}


def test_default_run_id_depends_on_ranges(local_root):
    storage = make_topic(local_root, partitions=1)
    produce(storage, "t", 5)
    a = [pl.range for pl in plan_load(storage, "t", {})]
    b = [pl.range for pl in plan_load(storage, "t", {0: 2})]
    assert default_run_id("load", "t", "tbl", a) == default_run_id("load", "t", "tbl", list(a))
    assert default_run_id("load", "t", "tbl", a) != default_run_id("load", "t", "other", a)
    assert default_run_id("load", "t", "tbl", a) != default_run_id("load", "t", "tbl", b)


def test_load_spec_from_config(tmp_path):
    from pipelines.spec.job_config import Config
    from pipelines.spec.load_spec import LoadSpec, load_specs, resolve_spec

    cfg = Config(loads=[{"topic": "orders", "table": "sales.orders", "value_format": "json",
                         "value_schema": "id long", "partition_by": ["hour(timestamp)"],
                         "on_data_loss": "skip", "confluent_wire_format": True}])
    spec = load_specs(cfg)[0]
    assert spec == LoadSpec("orders", "sales.orders", "json", "id long", None,
                            {"confluent_wire_format": True}, ("hour(timestamp)",), "skip")
    assert spec.dead_letter_table == "sales.orders_dead_letters"
    assert resolve_spec(cfg, "orders", partition_by=[]).partition_by == ()
    assert resolve_spec(cfg, "other", "tbl").value_format == "raw"
    with pytest.raises(ConfigError, match="--table"):
        resolve_spec(cfg, "other")
    # The DAG's keys are parsed with the rest and kept as given (the DAG reads them).
    dag = LoadSpec.from_entry({"topic": "t", "table": "x", "schedule": None, "retries": 0,
                               "start_date": "2024-01-01", "catchup": True})
    assert dag.scheduling == {"schedule": None, "retries": 0, "start_date": "2024-01-01",
                              "catchup": True}
    assert spec.scheduling == {} and dag == LoadSpec("t", "x", scheduling=dag.scheduling)
    for bad in ({"topic": "t", "table": "x", "nope": 1}, {"topic": "t", "table": "x",
                                                          "value_format": "xml"},
                {"topic": "t", "table": "x", "partition_by": ["bucket(2, key)"]},
                {"topic": "t", "table": "x", "on_data_loss": "maybe"}, {"topic": "t"}):
        with pytest.raises(ConfigError):
            LoadSpec.from_entry(bad)


# ---------------------------------------------------------------------------
# loads (Spark)


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_load_holds_exactly_the_log(spark, backend, tmp_path, request):
    root, wh, storage, options = log_and_warehouse(backend, tmp_path, request, partitions=3)
    produce(storage, "t", 60)
    summary = run_load(spark, root=root, topic="t", warehouse=wh, table="events",
                       storage_options=options, progress=False)
    assert not summary.noop and summary.snapshot_id is not None
    assert summary.rows == 60 and summary.dead_letters == 0
    assert summary.ranges == {0: (0, 20), 1: (0, 20), 2: (0, 20)}
    assert summary.initial == {0: 0, 1: 0, 2: 0}
    assert_exactly_once(storage, "t", wh, "events")
    rows = rows_by_offset(wh, "events")
    for p, records in log_records(storage, "t").items():
        for offset, value in records:
            row = rows[(p, offset)]
            i = int(value.decode().split("-")[1])
            assert row["value"] == value and row["key"] == f"k{i}".encode()
            assert row["topic"] == "t" and row["headers"] == [{"key": "h", "value": str(i).encode()}]
            assert int(row["timestamp"].timestamp() * 1000) == T0 + i * 1000
    tbl = wh.table("events")
    # Hidden partitioning by day(timestamp): the run crosses midnight UTC.
    assert [f.name for f in tbl.spec().fields] == ["timestamp_day"]
    days = {t.file.partition[0] for t in tbl.scan().plan_files()}
    assert len(days) == 2
    # TIMESTAMP_MICROS in the files, offsets in the snapshot summary.
    import fsspec
    import pyarrow.parquet as pq

    url = next(iter(tbl.scan().plan_files())).file.file_path
    with fsspec.open(url, "rb", **(options or {})) as f:
        schema = pq.ParquetFile(f).schema
        col = next(schema.column(i) for i in range(len(schema)) if schema.column(i).path == "timestamp")
        assert col.physical_type == "INT64" and "microseconds" in str(col.logical_type)
    info = history(tbl)[-1]
    assert info.kafkastore_operation == "load" and info.run_id == summary.run_id
    assert {(r["partition"], r["from"], r["until"]) for r in info.ranges} == \
        {(0, 0, 20), (1, 0, 20), (2, 0, 20)}
    assert info.offsets == {"t": {"0": 20, "1": 20, "2": 20}}
    assert "60 rows" in summary.render()


def _last_job_tasks(spark) -> int:
    tracker = spark.sparkContext.statusTracker()
    job = tracker.getJobInfo(max(tracker.getJobIdsForGroup()))
    return sum(tracker.getStageInfo(s).numTasks for s in job.stageIds)


def test_load_task_count_follows_cores_not_partitions(spark, local_root):
    """Many small partitions are packed into about one Spark task per core (a task per
    partition made a load's cost per record grow with the partition count); every record
    is still loaded exactly once and files still hold one partition each."""
    root, wh, storage = local_log_and_warehouse(local_root, partitions=9, records=90)
    summary = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert summary.rows == 90
    assert _last_job_tasks(spark) <= spark.sparkContext.defaultParallelism
    assert_exactly_once(storage, "t", wh)
    assert sorted(summary.per_partition) == list(range(9))
    assert all(c["files"] >= 1 and c["rows"] == 10 for c in summary.per_partition.values())


def test_load_of_one_partition_uses_every_core(spark, local_root):
    """A partition smaller than a split is cut finer when there are fewer splits than cores,
    so a one-partition load is not read on one core."""
    root, wh, storage = local_log_and_warehouse(local_root, partitions=1, records=60)
    assert run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False).rows == 60
    assert _last_job_tasks(spark) == spark.sparkContext.defaultParallelism
    assert_exactly_once(storage, "t", wh)


@given(sizes=st.lists(st.lists(st.integers(1, 500), min_size=1, max_size=4), max_size=30),
       parallelism=st.integers(1, 8), max_bytes=st.integers(1, 3000))
def test_pack_splits_keeps_every_range_once_in_order(sizes, parallelism, max_bytes):
    splits = [tuple(ReadRange("t", i, f"s{i}-{j}.log", 0, 0, n, 0, 1) for j, n in enumerate(split))
              for i, split in enumerate(sizes)]
    packed = pack_splits(splits, parallelism, max_bytes)
    assert [rr for s in packed for rr in s] == [rr for s in splits for rr in s]
    assert all(packed)
    total = sum(map(sum, sizes))
    want = min(len(splits), max(parallelism, -(-total // max_bytes))) if splits else 0
    assert len(packed) <= want
    if len(set(map(sum, sizes))) == 1:
        assert len(packed) == want   # equal splits: as many tasks as cores or bytes want
    largest = max(map(sum, sizes), default=0)
    for s in packed:   # over the even share by less than one split of the plan
        assert sum(rr.size for rr in s) < total / max(want, 1) + largest


def test_incremental_loads_and_noop_reruns(spark, local_root):
    root = f"{local_root}/log"
    wh = Warehouse(f"{local_root}/wh")
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 10)
    first = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                     run_id="run-1", progress=False, max_bytes_per_partition=1024)
    assert first.ranges == {0: (0, 5), 1: (0, 5)}
    # A rerun of a committed run id is a no-op, even with new data in the log.
    produce(storage, "t", 6, start=10)
    again = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                     run_id="run-1", progress=False)
    assert again.noop and again.snapshot_id == first.snapshot_id
    assert "already committed" in again.render()
    second = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert second.ranges == {0: (5, 8), 1: (5, 8)} and second.rows == 6
    nothing = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert nothing.noop and nothing.reason == "no new records"
    assert len(wh.table("tbl").metadata.snapshots) == 2
    assert_exactly_once(storage, "t", wh)


def test_explicit_end_offsets_and_end_timestamp(spark, local_root):
    root, url = f"{local_root}/log", f"{local_root}/wh"
    wh = Warehouse(url)
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 20)
    s1 = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                  until_offsets='{"t": {"0": 4}}', progress=False)
    assert s1.ranges == {0: (0, 4)} and s1.rows == 4
    assert committed(wh) == {0: 4}
    # By time: records before T0 + 12 s are i < 12, i.e. offsets < 6 per partition.
    s2 = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                  until_timestamp=T0 + 12_000, progress=False)
    assert s2.ranges == {0: (4, 6), 1: (0, 6)}
    assert all(int(r["timestamp"].timestamp() * 1000) < T0 + 12_000
               for r in rows_by_offset(wh, columns=["partition", "offset", "timestamp"]).values())
    # The Airflow entry point: plain arguments, its own (here: the existing) session.
    entry = {"topic": "t", "table": "tbl"}
    out = load_for_interval(root, url, entry, T0 + 16_000, "dag-run-1")
    assert out["ranges"] == {"0": [6, 8], "1": [6, 8]} and not out["noop"]
    assert load_for_interval(root, url, entry, T0 + 16_000, "dag-run-1")["noop"]
    assert_exactly_once(storage, "t", wh)


def test_json_values_dead_letters_and_schema_evolution(spark, local_root):
    root = f"{local_root}/log"
    wh = Warehouse(f"{local_root}/wh")
    storage = make_topic(root, partitions=2)

    def value(i):
        if i % 7 == 3:
            return b"{not json"
        if i % 7 == 5:
            return json.dumps({"id": "abc"}).encode()     # wrong type for id
        return json.dumps({"id": i, "name": f"n{i}"}).encode()

    produce(storage, "t", 28, value=value)
    s = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", value_format="json",
                 value_schema="id long, name string", partition_by=["partition"], progress=False)
    assert s.rows == 20 and s.dead_letters == 8
    good = rows_by_offset(wh)
    assert all(r["id"] == int(r["name"][1:]) and "value" not in r for r in good.values())
    assert set(next(iter(good.values()))) >= {"topic", "partition", "offset", "timestamp", "id"}
    assert [f.name for f in wh.table("tbl").spec().fields] == ["partition"]
    dl = wh.table("tbl_dead_letters")
    dead = read_arrow(dl).to_pylist()
    assert {d["value"] for d in dead} == {b"{not json", b'{"id": "abc"}'}
    assert all(d["error"] for d in dead) and any("malformed JSON" in d["error"] for d in dead)
    # Same offset protocol: the dead-letter table committed the same ranges.
    assert committed_offsets(dl) == committed_offsets(wh.table("tbl"))
    assert_exactly_once(storage, "t", wh)
    # The schema gains a field: the table's schema widens (union by name).
    produce(storage, "t", 4, start=28,
            value=lambda i: json.dumps({"id": i, "name": "x", "color": "red"}).encode())
    run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", value_format="json",
             value_schema="id long, name string, color string", progress=False)
    rows = rows_by_offset(wh)
    assert rows[(0, 14)]["color"] == "red" and rows[(0, 0)]["color"] is None
    # An incompatible change (id long -> string) is a clear error, nothing committed.
    produce(storage, "t", 2, start=32, value=lambda i: b'{"id": "s"}')
    before = committed_offsets(wh.table("tbl"))
    with pytest.raises(WarehouseError, match="cannot be merged|do not fit"):
        run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", value_format="json",
                 value_schema="id string", progress=False)
    assert committed_offsets(wh.table("tbl")) == before


def test_racing_loads_one_commits_the_other_fails_cleanly(spark, local_root, monkeypatch):
    root = f"{local_root}/log"
    url = f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 12)
    Warehouse(url).create_table("tbl", nullable(raw_schema()))
    # Both runs plan the same range; hold each at its commit until both got there.
    barrier = threading.Barrier(2, timeout=120)
    real = commit

    def held(table, c, **kw):
        barrier.wait()
        return real(table, c, **kw)

    monkeypatch.setattr("pipelines.warehouse.commit.commit", held)
    results: dict[str, object] = {}

    def run(name):
        try:
            results[name] = run_load(spark, root=root, topic="t", warehouse=url,
                                     table="tbl", run_id=name, progress=False)
        except Exception as exc:   # noqa: BLE001 - the test inspects it
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    won = [r for r in results.values() if not isinstance(r, Exception)]
    lost = [r for r in results.values() if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], WarehouseError) and "overlaps" in str(lost[0])
    wh = Warehouse(url)
    assert len(wh.table("tbl").metadata.snapshots) == 1
    assert_exactly_once(storage, "t", wh)


def test_load_options_from_args_uses_the_conf_entry():
    from types import SimpleNamespace

    from pipelines.spec.job_config import Config

    cfg = Config(root="file:///r", warehouse="file:///w",
                 loads=[{"topic": "orders", "table": "order_events", "value_format": "json",
                         "value_schema": "id long"}])
    args = SimpleNamespace(topic="orders", warehouse=None, table=None, run_id=None,
                           until_offsets=None, until_timestamp=None, value_format=None,
                           value_schema=None, value_schema_file=None)
    opts = load_options_from_args(args, cfg)
    spec = opts["spec"]
    assert (spec.table, opts["warehouse"].url, spec.value_format, spec.value_schema) == \
        ("order_events", "file:///w", "json", "id long")
    args.topic = "other"
    with pytest.raises(ConfigError, match="--table"):
        load_options_from_args(args, cfg)


def test_cli_load_offsets_reprocess_retention_vacuum(spark, local_root, tmp_path, capsys):
    from pipelines.cli import main

    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2, **{"retention.bytes": "1"})
    produce(storage, "t", 20)
    base = ["--root", root]
    # Read-only uses of a warehouse that does not exist create nothing.
    assert main(base + ["offsets", "t", "--warehouse", warehouse]) == 0
    assert json.loads(capsys.readouterr().out)["tables"] == {}
    assert not os.path.exists(warehouse[len("file://"):])
    assert main(base + ["load", "t", "--warehouse", warehouse, "--table", "tbl",
                        "--until-offsets", '{"t": {"0": 6, "1": 10}}']) == 0
    assert "committed snapshot" in capsys.readouterr().err
    assert main(base + ["offsets", "t", "--warehouse", warehouse]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tables"]["tbl"]["partitions"]["0"] == {"committed": 6, "lag": 4, "lost": 0}
    assert out["tables"]["tbl"]["partitions"]["1"] == {"committed": 10, "lag": 0, "lost": 0}
    assert out["tables"]["tbl"]["lag"] == 4
    assert main(base + ["reprocess", "t", "--warehouse", warehouse, "--table", "tbl",
                        "--partition", "0", "--from-offset", "3", "--reason", "bad parser"]) == 0
    assert "rewound to 3" in capsys.readouterr().err
    wh = Warehouse(warehouse)
    last = history(wh.table("tbl"))[-1]
    assert last.kafkastore_operation == "reprocess" and last.audit["reason"] == "bad parser"
    assert_exactly_once(storage, "t", wh)
    # A grace below the floor is refused in one line (it deleted a racing load's files).
    assert main(base + ["vacuum", "--warehouse", warehouse, "--table", "tbl",
                        "--grace-ms", "0"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "below the safe floor of 3600000 ms" in err
    # Nothing validated yet: vacuum keeps every snapshot of main for the quality gate
    # (expiry itself is tested with a clock in tests/pipelines/test_vacuum.py).
    assert main(base + ["vacuum", "--warehouse", warehouse, "--table", "tbl",
                        "--grace-ms", "3600000"]) == 0
    assert "expired 0 snapshot(s), kept 2 (2 awaiting validation)" in capsys.readouterr().err
    assert_exactly_once(storage, "t", wh)
    # Retention (retention.bytes=1 drops all but the newest segment) reports what
    # the table never loaded from partition 0.
    assert main(base + ["retention", "t", "--warehouse", warehouse]) == 0
    err = capsys.readouterr().err
    assert "table tbl LOSES offsets [6," in err
    assert main(base + ["load", "t", "--warehouse", warehouse, "--table", "tbl"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error: data loss in t/0") and len(err.splitlines()) == 1
    assert main(base + ["load", "t", "--warehouse", warehouse, "--table", "tbl",
                        "--on-data-loss", "skip"]) == 0
    assert "GAP partition 0" in capsys.readouterr().err
    # A non-local warehouse without a catalog: one line, exit 1.
    assert main(base + ["offsets", "t", "--warehouse", "s3://b/wh"]) == 1
    err = capsys.readouterr().err
    assert "catalog" in err and len(err.splitlines()) == 1
