"""Loads under failure: SIGKILL at random points, a failed and retried Spark task,
a lost catalog response, and data deleted from the log before it was loaded.

The SIGKILL and task-retry cases run the job in a separate Python process (its
own SparkSession): the test session's session is local[2] and must survive.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kafkastore.errors import CommitUnknownError, DataLossError
from kafkastore.read.reader import PartitionReader
from kafkastore.maintenance.retention import delete_records
from pipelines.warehouse.reads import plan_scan
from pipelines.warehouse.catalog import table_fs, Warehouse
from pipelines.warehouse.commit import commit
from pipelines.jobs.load import run_load
from pipelines.jobs.vacuum import MIN_GRACE_MS, vacuum
from tests.helpers.cluster import PROJECT_ROOT, group_alive
from tests.helpers.loads import (assert_exactly_once, committed, log_and_warehouse, make_topic,
                                 produce, table_offsets)

# Loads the topic in steps of `step` offsets per partition (several commits per
# process lifetime, so a kill lands before, during or after any of them) until
# a load finds nothing new.
JOB = textwrap.dedent(r'''
    import json, sys
    from pipelines.source.session import get_spark
    from pipelines.jobs.load import run_load
    from pipelines.warehouse.catalog import Warehouse
    from pipelines.warehouse.offsets import committed_offsets

    root, warehouse, master, step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    opts = json.loads(sys.argv[5]) or None
    catalog = json.loads(sys.argv[6]) or None
    spark = get_spark(master=master, app_name="kafkastore-load-job",
                      extra_conf={"spark.ui.enabled": "false"})
    print("READY", flush=True)
    wh = Warehouse(warehouse, catalog, opts)
    while True:
        done = committed_offsets(wh.load_table("tbl"))
        ends = {"t": {str(p): done.get(("t", p), 0) + step for p in range(3)}}
        s = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                     value_format="json", value_schema="id long",
                     until_offsets=ends, storage_options=opts, progress=False)
        print("LOADED", json.dumps(s.to_dict()), flush=True)
        if s.noop:
            break
''')

# Makes the first Parquet file write of the job fail once, after the file is
# stored: the task fails, Spark retries it, the first attempt's file is an orphan.
FAIL_ONCE = textwrap.dedent(r'''
    import os
    marker = os.environ.get("KAFKASTORE_TEST_FAIL_MARKER")
    if marker:
        import pipelines.warehouse.files as _w   # before the executors import it
        _orig = _w.write_files

        def write_files(*args, **kwargs):
            out = _orig(*args, **kwargs)
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return out
            raise RuntimeError("injected executor failure (once)")

        _w.write_files = write_files
''')


def _start_job(tmp_path, root, warehouse, *, master="local[2]", step=10, options=None,
               env=None, catalog=None):
    script = tmp_path / "load_job.py"
    script.write_text(JOB)
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([PROJECT_ROOT] + [
        p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env or {})
    full_env.pop("KAFKASTORE_SPARK_MASTER", None)
    return subprocess.Popen(
        [sys.executable, str(script), root, warehouse, master, str(step), json.dumps(options),
         json.dumps(catalog)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
        start_new_session=True)   # its own group: the kill reaches the JVM and Python workers


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _run_killed(tmp_path, root, warehouse, after, delay_s, options, catalog=None):
    """Start the job; SIGKILL its whole process group ``delay_s`` after its first
    output line starting with ``after`` (``READY``: Spark is up; ``LOADED``: the
    first load committed, later ones take well under a second each)."""
    proc = _start_job(tmp_path, root, warehouse, options=options, catalog=catalog)
    lines: list[str] = []
    seen = threading.Event()

    def pump():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(after):
                seen.set()
        seen.set()   # the job ended first

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        if not seen.wait(180):
            raise AssertionError(f"job made no progress: {proc.stderr.read()[-3000:]}")
        time.sleep(delay_s)
    finally:
        _kill_group(proc)
    reader.join(10)
    return [ln for ln in lines if ln.startswith("LOADED")]


def _run_to_completion(tmp_path, root, warehouse, options, **kw):
    proc = _start_job(tmp_path, root, warehouse, options=options, **kw)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, err[-4000:]
    return [json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("LOADED")]


def _value(i):
    return b"oops" if i % 9 == 4 else json.dumps({"id": i}).encode()


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend,kills", [("file", 3), ("s3", 1)])
def test_sigkill_at_random_points_then_rerun(backend, kills, tmp_path, request):
    """JSON loads (a table and its dead letters, two commits per load) killed at
    random points; whatever was committed holds each offset exactly once."""
    root, wh, storage, options = log_and_warehouse(backend, tmp_path, request, partitions=3)
    catalog = wh.catalog_config or None
    rng = random.Random(int(os.environ.get("KAFKASTORE_TEST_SEED", "0")) or None)
    history = []
    for k in range(kills):
        # New records each round, so every killed run has several loads to do
        # (steps of 10 offsets per partition: 3 commits and a final no-op).
        produce(storage, "t", 90, start=90 * k, flush_every=13, value=_value)
        # Alternate: during the first load of a fresh process (startup, read, write),
        # or among the later, quicker loads (write, commit, between commits).
        after = "LOADED" if k % 2 == 0 else "READY"
        delay = rng.uniform(0.0, 1.5) if after == "LOADED" else rng.uniform(0.0, 6.0)
        loaded = _run_killed(tmp_path, root, wh.url, after, delay, options, catalog)
        history.append((after, round(delay, 2), len(loaded), committed(wh)))
        # Whatever was committed so far holds each offset exactly once.
        assert_exactly_once(storage, "t", wh)
    print("kills (after, delay s, loads reported, committed):", history)
    produce(storage, "t", 90, start=90 * kills, flush_every=13, value=_value)
    proc = _start_job(tmp_path, root, wh.url, options=options, catalog=catalog)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, err[-4000:]
    final = [json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("LOADED")]
    assert final and final[-1]["noop"], (history, final)
    assert_exactly_once(storage, "t", wh)
    for p in range(3):
        hw = PartitionReader(storage, "t", p).high_watermark
        assert committed(wh)[p] == hw == 30 * (kills + 1), history
    # Killed runs may leave files no snapshot lists: invisible, and vacuum removes them.
    for name in ("tbl", "tbl_dead_letters"):
        vacuum(wh.table(name), now_ms=int(time.time() * 1000) + MIN_GRACE_MS + 10_000,
               grace_ms=MIN_GRACE_MS)
        tbl = wh.table(name)
        listed = {u.split("://", 1)[1].lstrip("/") for u in plan_scan(tbl).files}
        fs, path = table_fs(tbl, tbl.location() + "/data")
        assert {p.lstrip("/") for p in fs.find(path)} == listed
    assert_exactly_once(storage, "t", wh)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failed_and_retried_task_leaves_no_duplicates(tmp_path, local_root):
    root, url = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=3)
    produce(storage, "t", 45, value=_value)
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(FAIL_ONCE)
    marker = tmp_path / "failed-once"
    env = {"KAFKASTORE_TEST_FAIL_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(hook_dir), PROJECT_ROOT])}
    # local[2,2]: two cores, a task may fail twice before the job fails.
    runs = _run_to_completion(tmp_path, root, url, None, master="local[2,2]", step=100, env=env)
    assert marker.exists(), "the injected failure never fired"
    assert [r["rows"] + r["dead_letters"] for r in runs] == [45, 0] and not runs[0]["noop"]
    wh = Warehouse(url)
    assert_exactly_once(storage, "t", wh)
    # The failed attempt's file is on storage but no snapshot lists it.
    tbl = wh.table("tbl")
    listed = {u.split("://", 1)[1] for u in plan_scan(tbl).files}
    fs, path = table_fs(tbl, tbl.location() + "/data")
    assert [p for p in fs.find(path) if p not in listed]


class _LostResponse(Exception):
    pass


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_lost_catalog_response_is_settled_by_reading_back(spark, backend, tmp_path, request,
                                                          monkeypatch):
    from pyiceberg.catalog.sql import SqlCatalog

    root, wh, storage, options = log_and_warehouse(backend, tmp_path, request, partitions=2)
    produce(storage, "t", 10)
    real_commit, real_load = SqlCatalog.commit_table, SqlCatalog.load_table
    state = {"lose": 1, "unreadable": 0}

    def commit_table(self, table, requirements, updates):
        out = real_commit(self, table, requirements, updates)   # the commit lands...
        if state["lose"]:
            state["lose"] -= 1
            raise _LostResponse("connection reset")              # ...the response is lost
        return out

    def load_table(self, identifier):
        if state["unreadable"]:
            raise _LostResponse("catalog unreachable")
        return real_load(self, identifier)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    monkeypatch.setattr(SqlCatalog, "load_table", load_table)
    s = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                 storage_options=options, progress=False)
    assert not s.noop and state["lose"] == 0   # the fault fired; read-back found ours
    assert len(wh.table("tbl").metadata.snapshots) == 1
    assert_exactly_once(storage, "t", wh)
    if backend == "s3":
        return
    # Response lost AND the catalog unreadable: the outcome is unknown. The commit
    # did land, so a rerun (same default run id, same range) finds nothing to do.
    produce(storage, "t", 4, start=10)
    state["lose"] = 1
    real_refresh = type(wh.table("tbl")).refresh

    def refresh(self):
        if state["unreadable"]:
            raise _LostResponse("catalog unreachable")
        return real_refresh(self)

    def commit_then_unreadable(self, table, requirements, updates):
        real_commit(self, table, requirements, updates)
        state["unreadable"] = 1
        raise _LostResponse("connection reset")

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_then_unreadable)
    monkeypatch.setattr(type(wh.table("tbl")), "refresh", refresh)
    with pytest.raises(CommitUnknownError, match="rerun with the same run id"):
        run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    state["unreadable"] = 0
    monkeypatch.setattr(SqlCatalog, "commit_table", real_commit)
    again = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert again.noop and len(wh.table("tbl").metadata.snapshots) == 2
    assert_exactly_once(storage, "t", wh)


def test_data_loss_fails_or_records_a_gap(spark, local_root):
    root = f"{local_root}/log"
    wh = Warehouse(f"{local_root}/wh")
    storage = make_topic(root, partitions=1)
    produce(storage, "t", 6)
    run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    produce(storage, "t", 10, start=6)
    delete_records(storage, "t", 0, 9)      # offsets 6..8 go before the table loaded them
    with pytest.raises(DataLossError, match=r"t/0.*next offset is 6.*starts at 9"):
        run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    s = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl",
                 on_data_loss="skip", progress=False)
    assert s.ranges == {0: (9, 16)} and s.gaps == [{"partition": 0, "from": 6, "until": 9}]
    assert "GAP partition 0" in s.render()
    props = wh.table("tbl").current_snapshot().summary.additional_properties
    assert json.loads(props["kafkastore.gaps"]) == [{"topic": "t", "partition": 0, "from": 6,
                                                     "until": 9}]
    assert table_offsets(wh)[0] == list(range(6)) + list(range(9, 16))


def test_crash_between_the_dead_letter_and_the_table_commit(spark, tmp_path, request,
                                                             monkeypatch):
    """Dead letters commit first: a crash before the table's commit leaves them ahead of
    the table (the state the SIGKILL loop can land in), and the rerun loads the rest
    without writing those dead letters again."""
    root, wh, storage, options = log_and_warehouse("file", tmp_path, request, partitions=3)
    produce(storage, "t", 90, value=_value)
    real = commit

    def crash_before_the_table(table, c, **kw):
        if not table.name()[-1].endswith("_dead_letters"):
            raise KeyboardInterrupt("killed between the two commits")
        return real(table, c, **kw)

    load = dict(root=root, topic="t", warehouse=wh, table="tbl", value_format="json",
                value_schema="id long", progress=False)
    monkeypatch.setattr("pipelines.warehouse.commit.commit", crash_before_the_table)
    with pytest.raises(KeyboardInterrupt):
        run_load(spark, **load)
    assert committed(wh) == {} and table_offsets(wh, kinds=("dead_letter",))[1]
    assert_exactly_once(storage, "t", wh)
    monkeypatch.setattr("pipelines.warehouse.commit.commit", real)
    assert run_load(spark, **load).rows == 80
    assert committed(wh) == {0: 30, 1: 30, 2: 30}
    assert_exactly_once(storage, "t", wh)
