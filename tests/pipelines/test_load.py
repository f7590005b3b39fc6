"""Exactly-once loads of a topic into a warehouse table (pipelines.load).

Helpers here (``make_topic``, ``produce``, ``log_records``, ``assert_exactly_once``)
are shared with the reprocess and failure tests.
"""
from __future__ import annotations

import json
import os
import threading

import pytest

from kafkastore.broker import Broker
from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.reader import PartitionReader
from kafkastore.retention import delete_records
from kafkastore.storage import Storage
from kafkastore.topics import create_topic, load_topic
from pipelines import warehouse as wh
from pipelines.load import (default_run_id, load_for_interval, load_options_from_args,
                            parse_offsets_json, plan_ranges, run_load)

DAY = 86_400_000
T0 = 1_700_000_000_000 - (1_700_000_000_000 % DAY) + DAY - 30_000   # 30 s before midnight UTC


# ---------------------------------------------------------------------------
# helpers (imported by the other pipeline test modules)


def storage_options_for(url: str) -> dict | None:
    """Explicit S3 options for moto (Python workers may predate the moto env)."""
    if url.startswith("s3://"):
        return {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing",
                "secret": "testing"}
    return None


def make_topic(root: str, topic: str = "t", partitions: int = 2, options=None, **configs) -> Storage:
    storage = Storage(root, options)
    create_topic(storage, topic, partitions, {"segment.bytes": "2048", **configs})
    return storage


def produce(storage: Storage, topic: str, count: int, *, start: int = 0, value=None,
            ts=None, flush_every: int = 7) -> None:
    """``count`` records numbered ``start..``, round-robin over partitions, with a
    header, a key, and timestamps one second apart from T0 (crossing midnight)."""
    broker = Broker(storage, batch_size=256)
    parts = load_topic(storage, topic).partitions
    for i in range(start, start + count):
        v = value(i) if value else f"value-{i}".encode()
        broker.send(topic, v, key=f"k{i}".encode(), headers=[("h", str(i).encode())],
                    timestamp=ts(i) if ts else T0 + i * 1000, partition=i % parts)
        if (i + 1) % flush_every == 0:
            broker.flush()
    broker.flush()


def log_records(storage: Storage, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """``{partition: [(offset, value), ...]}`` of the whole readable log."""
    out = {}
    for p in range(load_topic(storage, topic).partitions):
        t = PartitionReader(storage, topic, p).read(-2)
        out[p] = list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))
    return out


def table_offsets(table: wh.Table, kinds=("data", "dead_letter")) -> dict[int, list[int]]:
    """``{partition: sorted offsets}`` over the live files of ``kinds``."""
    files = [f for f in table.live_files(None) if f.kind in kinds]
    if not files:
        return {}
    rows = wh.read_files(table.url, files, storage_options=table.storage_options or None,
                         columns=["partition", "offset"])
    out: dict[int, list[int]] = {}
    for p, o in zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist()):
        out.setdefault(p, []).append(o)
    return {p: sorted(v) for p, v in out.items()}


def assert_exactly_once(storage: Storage, topic: str, table: wh.Table) -> None:
    """Every log offset up to the committed one is in the table exactly once, and
    nothing else is; the commit log's ranges have no gaps."""
    log = log_records(storage, topic)
    committed = {p: n for (t, p), n in table.committed_offsets().items() if t == topic}
    got = table_offsets(table)
    for p, records in log.items():
        want = [o for o, _ in records if o < committed.get(p, 0)]
        have = got.get(p, [])
        assert len(have) == len(set(have)), f"p{p}: duplicate offsets in the table"
        assert have == want, f"p{p}: table offsets differ from the log"
        assert committed.get(p, 0) <= PartitionReader(storage, topic, p).high_watermark
    start = {p: a for (t, p), (a, _b) in table.state().offsets.items() if t == topic}
    assert all(a == 0 for a in start.values())


def rows_by_offset(table: wh.Table, columns=None) -> dict[tuple[int, int], dict]:
    back = wh.read_files(table.url, table.live_files(),
                         storage_options=table.storage_options or None, columns=columns)
    return {(r["partition"], r["offset"]): r for r in back.to_pylist()} if back else {}


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


def test_plan_ranges_starts_at_committed_or_log_start(local_root):
    storage = make_topic(local_root, partitions=2)
    produce(storage, "t", 40)
    delete_records(storage, "t", 1, 4)
    ranges = {r.partition: r for r in plan_ranges(storage, "t", {0: 10})}
    assert (ranges[0].from_offset, ranges[0].until, ranges[0].initial) == (10, 20, False)
    # Never loaded: starts at the log start as of now, and says so.
    assert (ranges[1].from_offset, ranges[1].until, ranges[1].initial) == (4, 20, True)
    with pytest.raises(WarehouseError, match=r"t/1.*next offset is 2.*starts at 4"):
        plan_ranges(storage, "t", {0: 10, 1: 2})
    skipped = {r.partition: r for r in plan_ranges(storage, "t", {1: 2}, on_data_loss="skip")}
    assert (skipped[1].gap_from, skipped[1].from_offset) == (2, 4)
    # Explicit ends: clamped to the readable end; unlisted partitions are not loaded.
    ends = plan_ranges(storage, "t", {}, until_offsets={0: 15})
    assert [(r.partition, r.from_offset, r.until) for r in ends] == [(0, 0, 15)]
    assert plan_ranges(storage, "t", {}, until_offsets={0: 999})[0].until == 20
    # End timestamp: records strictly before it (partition 0 holds even i, T0 + i s).
    by_time = {r.partition: r.until for r in plan_ranges(storage, "t", {}, until_timestamp=T0 + 10_000)}
    assert by_time == {0: 5, 1: 5}


def test_default_run_id_depends_on_ranges(local_root):
    storage = make_topic(local_root, partitions=1)
    produce(storage, "t", 5)
    a = plan_ranges(storage, "t", {})
    assert default_run_id("t", "tbl", a) == default_run_id("t", "tbl", plan_ranges(storage, "t", {}))
    assert default_run_id("t", "tbl", a) != default_run_id("t", "other", a)
    assert default_run_id("t", "tbl", a) != default_run_id("t", "tbl", plan_ranges(storage, "t", {0: 2}))


# ---------------------------------------------------------------------------
# loads (Spark)


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_load_holds_exactly_the_log(spark, backend, tmp_path, request):
    from tests.conftest import make_root_url

    base = make_root_url(backend, tmp_path, request)
    options = storage_options_for(base)
    root, warehouse = f"{base}/log", f"{base}/warehouse"
    storage = make_topic(root, partitions=3, options=options)
    produce(storage, "t", 60)
    summary = run_load(spark, root=root, topic="t", warehouse=warehouse, table="events",
                       storage_options=options, progress=False)
    assert not summary.noop and summary.version == 1
    assert summary.rows == 60 and summary.dead_letters == 0
    assert summary.ranges == {0: (0, 20), 1: (0, 20), 2: (0, 20)}
    assert summary.initial == {0: 0, 1: 0, 2: 0}
    table = wh.Table(warehouse, "events", storage_options=options)
    assert_exactly_once(storage, "t", table)
    rows = rows_by_offset(table)
    for p, records in log_records(storage, "t").items():
        for offset, value in records:
            row = rows[(p, offset)]
            i = int(value.decode().split("-")[1])
            assert row["value"] == value and row["key"] == f"k{i}".encode()
            assert row["topic"] == "t" and row["headers"] == [{"key": "h", "value": str(i).encode()}]
            assert int(row["timestamp"].timestamp() * 1000) == T0 + i * 1000
    # Output laid out by topic and event date; the run crosses midnight UTC.
    dates = {f.date for f in table.live_files()}
    assert len(dates) == 2 and all(f.path.startswith(f"data/topic=t/date={f.date}/")
                                   for f in table.live_files())
    commit = table.read_commit(1)
    assert commit.operation == "load" and commit.run_id == summary.run_id
    assert {(r.partition, r.from_offset, r.until) for r in commit.ranges} == \
        {(0, 0, 20), (1, 0, 20), (2, 0, 20)}
    assert "60 rows" in summary.render()


def test_both_read_paths_give_the_same_table(spark, local_root):
    root = f"{local_root}/log"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 40)
    tables = {}
    for path in ("splits", "datasource"):
        warehouse = f"{local_root}/wh-{path}"
        s = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                     read_path=path, max_bytes_per_partition=1024, progress=False)
        assert s.rows == 40
        tables[path] = wh.Table(warehouse, "tbl")
        assert_exactly_once(storage, "t", tables[path])
    assert rows_by_offset(tables["splits"]) == rows_by_offset(tables["datasource"])
    # Small splits: several files per partition, from several tasks.
    assert len(tables["splits"].live_files()) > 2
    with pytest.raises(ConfigError, match="raw values only"):
        run_load(spark, root=root, topic="t", warehouse=f"{local_root}/wh-x", table="tbl",
                 read_path="splits", value_format="json", value_schema="id long")


def test_incremental_loads_and_noop_reruns(spark, local_root):
    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 10)
    first = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                     run_id="run-1", progress=False)
    assert first.version == 1 and first.ranges == {0: (0, 5), 1: (0, 5)}
    # A rerun of a committed run id is a no-op, even with new data in the log.
    produce(storage, "t", 6, start=10)
    again = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                     run_id="run-1", progress=False)
    assert again.noop and again.version == 1 and "already committed" in again.render()
    second = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                      progress=False)
    assert second.version == 2 and second.ranges == {0: (5, 8), 1: (5, 8)}
    assert second.rows == 6
    nothing = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                       progress=False)
    assert nothing.noop and nothing.reason == "no new records"
    table = wh.Table(warehouse, "tbl")
    assert table.state().version == 2
    assert_exactly_once(storage, "t", table)


def test_explicit_end_offsets_and_end_timestamp(spark, local_root):
    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 20)
    s1 = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                  until_offsets='{"t": {"0": 4}}', progress=False)
    assert s1.ranges == {0: (0, 4)} and s1.rows == 4
    table = wh.Table(warehouse, "tbl")
    assert table.committed_offsets() == {("t", 0): 4}
    # By time: records before T0 + 12 s are i < 12, i.e. offsets < 6 per partition.
    s2 = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                  until_timestamp=T0 + 12_000, progress=False)
    assert s2.ranges == {0: (4, 6), 1: (0, 6)}
    assert table.read_commit(2).info["until_timestamp"] == T0 + 12_000
    assert all(int(r["timestamp"].timestamp() * 1000) < T0 + 12_000
               for r in rows_by_offset(table, ["partition", "offset", "timestamp"]).values())
    # The Airflow entry point: plain arguments, its own (here: the existing) session.
    out = load_for_interval(root, "t", warehouse, "tbl", T0 + 16_000, "dag-run-1")
    assert out["ranges"] == {"0": [6, 8], "1": [6, 8]} and out["version"] == 3
    assert load_for_interval(root, "t", warehouse, "tbl", T0 + 16_000, "dag-run-1")["noop"]
    assert_exactly_once(storage, "t", table)


def test_json_values_and_dead_letters(spark, local_root):
    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)

    def value(i):
        if i % 7 == 3:
            return b"{not json"
        if i % 7 == 5:
            return json.dumps({"id": "abc"}).encode()     # wrong type for id
        return json.dumps({"id": i, "name": f"n{i}"}).encode()

    produce(storage, "t", 28, value=value)
    s = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                 value_format="json", value_schema="id long, name string", progress=False)
    assert s.rows == 20 and s.dead_letters == 8
    table = wh.Table(warehouse, "tbl")
    assert table.read_commit(1).info["dead_letters"] == 8
    good = rows_by_offset(table)
    assert all(r["id"] == int(r["name"][1:]) and "value" not in r for r in good.values())
    dead = wh.read_files(table.url, table.live_files("dead_letter")).to_pylist()
    assert {d["value"] for d in dead} == {b"{not json", b'{"id": "abc"}'}
    assert all(d["error"] for d in dead)
    assert any("malformed JSON" in d["error"] for d in dead)
    assert all(f.path.startswith("dead_letters/topic=t/") for f in table.live_files("dead_letter"))
    # Good rows and dead letters together cover the range exactly once.
    assert_exactly_once(storage, "t", table)


def test_racing_loads_one_commits_the_other_fails_cleanly(spark, local_root):
    from tests.faults import faulty_storage

    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 12)
    # Both runs plan the same range; hold each at its commit until both got there.
    barrier = threading.Barrier(2, timeout=120)
    wh_storage, fs = faulty_storage(warehouse)
    fs.on_write(lambda op, path: barrier.wait(), match="_commits/", count=2)
    results: dict[str, object] = {}

    def run(name):
        try:
            results[name] = run_load(spark, root=root, topic="t", warehouse=wh_storage,
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
    table = wh.Table(warehouse, "tbl")
    assert table.state().version == 1
    assert_exactly_once(storage, "t", table)


def test_load_options_from_args_uses_the_conf_entry():
    from types import SimpleNamespace

    from kafkastore.config import Config

    cfg = Config(root="file:///r", warehouse="file:///w",
                 loads=[{"topic": "orders", "table": "order_events", "value_format": "json",
                         "value_schema": "id long"}])
    args = SimpleNamespace(topic="orders", warehouse=None, table=None, run_id=None,
                           until_offsets=None, until_timestamp=None, value_format=None,
                           value_schema=None, value_schema_file=None)
    opts = load_options_from_args(args, cfg)
    assert (opts["table"], opts["warehouse"], opts["value_format"], opts["value_schema"]) == \
        ("order_events", "file:///w", "json", "id long")
    args.topic = "other"
    with pytest.raises(ConfigError, match="--table"):
        load_options_from_args(args, cfg)


def test_cli_load_offsets_reprocess_retention(spark, local_root, capsys):
    from kafkastore.cli import main

    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2, **{"retention.bytes": "1"})
    produce(storage, "t", 20)
    base = ["--root", root]
    assert main(base + ["load", "t", "--warehouse", warehouse, "--table", "tbl",
                        "--until-offsets", '{"t": {"0": 6, "1": 10}}']) == 0
    assert "committed version 1" in capsys.readouterr().err
    assert main(base + ["offsets", "t", "--warehouse", warehouse]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tables"]["tbl"]["partitions"]["0"] == {"committed": 6, "lag": 4, "lost": 0}
    assert out["tables"]["tbl"]["partitions"]["1"] == {"committed": 10, "lag": 0, "lost": 0}
    assert out["tables"]["tbl"]["lag"] == 4
    assert main(base + ["reprocess", "t", "--warehouse", warehouse, "--table", "tbl",
                        "--partition", "0", "--from-offset", "3", "--reason", "bad parser"]) == 0
    assert "rewound to 3" in capsys.readouterr().err
    table = wh.Table(warehouse, "tbl")
    last = table.history()[-1][1]
    assert last.operation == "reprocess" and last.info["reason"] == "bad parser"
    assert_exactly_once(storage, "t", table)
    # Retention (retention.bytes=1 drops all but the newest segment) reports what
    # the table never loaded from partition 0.
    assert main(base + ["retention", "t", "--warehouse", warehouse]) == 0
    err = capsys.readouterr().err
    assert "table tbl LOSES offsets [6," in err
    assert main(base + ["load", "t", "--warehouse", warehouse, "--table", "tbl"]) == 1
    assert "data loss in t/0" in capsys.readouterr().err
