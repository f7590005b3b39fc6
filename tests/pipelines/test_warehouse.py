"""The warehouse commit protocol: pure apply, tables on every backend, races,
lost responses, vacuum, and the executor-side writer."""
from __future__ import annotations

import json
import multiprocessing
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import CommitUnknownError, ConfigError, WarehouseError
from kafkastore.storage import Storage
from pipelines.warehouse import (Commit, DataFile, OffsetRange, Table, TableState, apply_commit,
                                 arrow_writer, copy_rows_below, list_tables, plan_rewind,
                                 read_files, vacuum, write_files, FILE_DESCRIPTOR_DDL)
from tests.faults import FaultyFS

NOW = 1_700_000_000_000
DAY = 86_400_000


def f(path, topic="t", partition=0, lo=0, hi=0, kind="data"):
    """A file entry holding every offset lo..hi (rows = hi - lo + 1)."""
    return DataFile(path=path, topic=topic, partition=partition, min_offset=lo, max_offset=hi,
                    rows=hi - lo + 1, bytes=100, kind=kind)


def load(run, lo, until, files=None, topic="t", partition=0, **kw):
    files = files if files is not None else ([f(f"data/{run}.parquet", topic, partition, lo,
                                                until - 1)] if until > lo else [])
    return Commit.load(run, files, {(topic, partition): (lo, until)}, now_ms=NOW, **kw)


# ---------------------------------------------------------------------------
# pure apply


def test_load_then_continue():
    s1 = apply_commit(TableState(), load("r1", 0, 10))
    assert s1.version == 1 and s1.offsets == {("t", 0): (0, 10)}
    assert [x.path for x in s1.live_files()] == ["data/r1.parquet"]
    assert s1.live_files()[0].version == 1
    s2 = apply_commit(s1, load("r2", 10, 15))
    assert s2.committed_offsets() == {("t", 0): 15}
    assert s1.version == 1 and len(s1.files) == 1   # the input state is untouched


def test_first_load_may_start_past_zero():
    s = apply_commit(TableState(), load("r1", 500, 510))
    assert s.offsets[("t", 0)] == (500, 510)


def test_overlap_refused_with_clear_message():
    s = apply_commit(TableState(), load("r1", 0, 10))
    with pytest.raises(WarehouseError) as e:
        apply_commit(s, load("r2", 5, 20))
    msg = str(e.value)
    assert "t/0" in msg and "[5, 20)" in msg and "[0, 10)" in msg and "overlaps" in msg


def test_gap_refused_unless_allowed_and_then_audited():
    s = apply_commit(TableState(), load("r1", 0, 10))
    with pytest.raises(WarehouseError, match=r"t/0.*gap \[10, 12\)"):
        apply_commit(s, load("r2", 12, 20))
    s2 = apply_commit(s, load("r2", 12, 20, allow_gap=True))
    assert s2.offsets[("t", 0)] == (0, 20)
    assert s2.gaps == [{"topic": "t", "partition": 0, "from": 10, "until": 12, "version": 2}]


def test_rerun_of_committed_run_is_noop():
    s = apply_commit(TableState(), load("r1", 0, 10))
    again = load("r1", 0, 10, files=[f("data/other.parquet", lo=0, hi=9)])
    assert apply_commit(s, again) is s


def test_empty_range_is_accepted():
    s = apply_commit(TableState(), load("r1", 0, 10))
    s2 = apply_commit(s, load("r2", 10, 10))
    assert s2.committed_offsets() == {("t", 0): 10} and s2.version == 2


@pytest.mark.parametrize("bad, match", [
    (lambda: load("r", 0, 10, files=[f("data/a", lo=5, hi=12)]), "outside the commit's range"),
    (lambda: load("r", 0, 10, files=[f("data/a", partition=1, lo=0, hi=3)]), "no offset range"),
    (lambda: load("r", 0, 10, files=[f("data/a", lo=0, hi=3), f("data/a", lo=4, hi=9)]),
     "twice"),
    (lambda: load("r", 0, 10, files=[f("data/live", lo=0, hi=3)]), "already live"),
    (lambda: load("r", 0, 10, files=[f("_commits/x", lo=0, hi=3)]), "outside _commits"),
    (lambda: load("r", 0, 10, files=[f("../x", lo=0, hi=3)]), "plain path"),
    (lambda: load("r", 5, 3), "expected 0 <= from <= until"),
    (lambda: load("r", 0, 10, files=[f("data/a", lo=0, hi=3, kind="weird")]), "kind"),
    (lambda: Commit("r", "merge", NOW), "unknown operation"),
    (lambda: Commit("", "load", NOW), "run id"),
    (lambda: Commit("r", "load", NOW, remove=("data/live",)), "cannot remove"),
    (lambda: Commit("r", "reprocess", NOW, ranges=(OffsetRange("t", 9, 0, 1),)),
     "nothing committed yet"),
])
def test_refused_commits_leave_state_alone(bad, match):
    s = apply_commit(TableState(), Commit.load(
        "r0", [f("data/live", topic="u", lo=0, hi=0)], {("u", 0): (0, 1)}, now_ms=NOW))
    before = s.to_json()
    with pytest.raises(WarehouseError, match=match):
        apply_commit(s, bad())
    assert s.to_json() == before


def _loaded(files_spec):
    """State with one load per (lo, hi) file of t/0, consecutive."""
    s = TableState()
    for i, (lo, hi) in enumerate(files_spec):
        s = apply_commit(s, load(f"r{i}", lo, hi + 1, files=[f(f"data/f{i}", lo=lo, hi=hi)]))
    return s


def test_rewind_plan_widens_to_whole_files():
    s = _loaded([(0, 9), (10, 19), (20, 29)])
    plan = plan_rewind(s, "t", 0, 15)
    assert plan.requested_from == 15 and plan.effective_from == 10
    assert [x.path for x in plan.remove] == ["data/f1", "data/f2"]
    assert [x.path for x in plan.straddling] == ["data/f1"]
    # On a boundary nothing straddles.
    plan = plan_rewind(s, "t", 0, 20)
    assert plan.effective_from == 20 and plan.straddling == ()
    # At the end: nothing to remove; past the end: refused.
    assert plan_rewind(s, "t", 0, 30).remove == ()
    with pytest.raises(WarehouseError, match="past the committed range"):
        plan_rewind(s, "t", 0, 31)


def test_rewind_plan_follows_overlapping_files():
    # A dead-letter file interleaves with a data file: lowering the point catches it too.
    s = TableState()
    s = apply_commit(s, Commit.load("r0", [f("data/a", lo=0, hi=9),
                                           f("dead_letters/b", lo=5, hi=12, kind="dead_letter"),
                                           f("data/c", lo=13, hi=19)],
                                    {("t", 0): (0, 20)}, now_ms=NOW))
    plan = plan_rewind(s, "t", 0, 11)
    assert plan.effective_from == 0
    assert {x.path for x in plan.remove} == {"data/a", "dead_letters/b", "data/c"}


def test_reprocess_replaces_rows_atomically():
    s = _loaded([(0, 9), (10, 19), (20, 29)])
    plan = plan_rewind(s, "t", 0, 15)
    c = Commit.reprocess("rw", [f("data/n1", lo=10, hi=14), f("data/n2", lo=15, hi=24)],
                         {("t", 0): (plan.effective_from, 25)}, plan.remove, now_ms=NOW + 5,
                         info={"requested_from_offset": 15})
    s2 = apply_commit(s, c)
    assert s2.offsets[("t", 0)] == (0, 25)
    assert [x.path for x in s2.live_files()] == ["data/f0", "data/n1", "data/n2"]
    assert s2.removed == {"data/f1": (4, NOW + 5), "data/f2": (4, NOW + 5)}
    # The next load continues from the rewound end.
    assert apply_commit(s2, load("r9", 25, 30)).committed_offsets() == {("t", 0): 30}


def test_reprocess_must_remove_every_affected_file_and_no_straddler():
    s = _loaded([(0, 9), (10, 19), (20, 29)])
    with pytest.raises(WarehouseError, match="must remove data/f2"):
        apply_commit(s, Commit.reprocess("rw", [], {("t", 0): (10, 10)}, ["data/f1"], now_ms=NOW))
    with pytest.raises(WarehouseError, match="straddling the rewind point 15"):
        apply_commit(s, Commit.reprocess("rw", [f("data/n", lo=15, hi=29)], {("t", 0): (15, 30)},
                                         ["data/f1", "data/f2"], now_ms=NOW))
    with pytest.raises(WarehouseError, match="gap"):
        apply_commit(s, Commit.reprocess("rw", [], {("t", 0): (31, 31)}, [], now_ms=NOW))


def test_reprocess_before_first_offset_lowers_start():
    s = _loaded([(100, 109)])
    s2 = apply_commit(s, Commit.reprocess("rw", [f("data/n", lo=50, hi=109)], {("t", 0): (50, 110)},
                                          ["data/f0"], now_ms=NOW))
    assert s2.offsets[("t", 0)] == (50, 110)


def test_validate_sets_status_of_a_load():
    s = _loaded([(0, 9)])
    assert s.validation == {1: None}
    s2 = apply_commit(s, Commit.validate("q1", 1, "passed", now_ms=NOW))
    assert s2.validation == {1: "passed"} and s2.version == 2
    s3 = apply_commit(s2, Commit.validate("q2", 1, "failed", now_ms=NOW))
    assert s3.validation == {1: "failed"}
    with pytest.raises(WarehouseError, match="not a load or reprocess"):
        apply_commit(s3, Commit.validate("q3", 2, "passed", now_ms=NOW))
    with pytest.raises(WarehouseError, match="validated must be"):
        apply_commit(s3, Commit.validate("q4", 1, "maybe", now_ms=NOW))  # bad status
    pre = apply_commit(s3, load("r5", 10, 12, validated="passed"))
    assert pre.validation[4] == "passed"


def test_vacuum_commit_cannot_delete_live_files():
    s = _loaded([(0, 9)])
    with pytest.raises(WarehouseError, match="live"):
        apply_commit(s, Commit("v", "vacuum", NOW, deleted=("data/f0",)))


def test_state_and_commit_json_round_trip():
    s = _loaded([(0, 9), (10, 19)])
    s = apply_commit(s, Commit.reprocess("rw", [f("data/n", lo=10, hi=19)], {("t", 0): (10, 20)},
                                         ["data/f1"], now_ms=NOW))
    s = apply_commit(s, Commit.validate("q", 1, "passed", now_ms=NOW))
    assert TableState.from_json(json.loads(json.dumps(s.to_json()))).to_json() == s.to_json()
    c = load("r", 0, 10, user="alice", info={"job": "x"})
    assert Commit.from_json(json.loads(c.encode(3))) == c


# ---------------------------------------------------------------------------
# random sequences keep the invariants

TPS = [("a", 0), ("a", 1), ("b", 0)]


def _covered(state, tp):
    out = []
    for x in state.files_of(*tp):
        out.extend(range(x.min_offset, x.max_offset + 1))
    return sorted(out)


def _split_files(draw, run, tp, lo, until):
    """Files exactly covering [lo, until), of random sizes and kinds."""
    files, pos, i = [], lo, 0
    while pos < until:
        size = draw(st.integers(1, max(1, until - pos)))
        kind = draw(st.sampled_from(["data", "data", "dead_letter"]))
        files.append(f(f"data/{run}-{i}", tp[0], tp[1], pos, pos + size - 1, kind))
        pos += size
        i += 1
    return files


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_commit_sequences_keep_exactly_once(data):
    state = TableState()
    runs: list[str] = []
    for step in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(["load", "load", "load", "reprocess", "rerun", "validate",
                                        "bad_reprocess"]))
        tp = data.draw(st.sampled_from(TPS))
        run = f"run{step}"
        before = state.to_json()
        nxt = state.offsets.get(tp, (None, None))[1]
        try:
            if op == "load":
                lo = data.draw(st.integers(0, 30)) if nxt is None else nxt + data.draw(
                    st.sampled_from([0, 0, 0, -1, 1, -3]))
                lo = max(lo, 0)
                until = lo + data.draw(st.integers(0, 8))
                ok = nxt is None or lo == nxt
                c = Commit.load(run, _split_files(data.draw, run, tp, lo, until),
                                {tp: (lo, until)}, now_ms=NOW)
            elif op in ("reprocess", "bad_reprocess"):
                if nxt is None:
                    continue
                start = state.offsets[tp][0]
                req = data.draw(st.integers(max(0, start - 2), nxt))
                plan = plan_rewind(state, tp[0], tp[1], req)
                until = plan.effective_from + data.draw(st.integers(0, 8))
                remove = list(plan.remove)
                ok = True
                if op == "bad_reprocess":
                    if not remove:
                        continue
                    remove = remove[:-1]
                    ok = False
                c = Commit.reprocess(run, _split_files(data.draw, run, tp, plan.effective_from,
                                                       until),
                                     {tp: (plan.effective_from, until)}, remove, now_ms=NOW)
            elif op == "rerun":
                if not runs:
                    continue
                old = data.draw(st.sampled_from(runs))
                assert apply_commit(state, load(old, 0, 1)) is state
                continue
            else:
                if not state.validation:
                    continue
                v = data.draw(st.sampled_from(sorted(state.validation)))
                c = Commit.validate(run, v, data.draw(st.sampled_from(["passed", "failed"])),
                                    now_ms=NOW)
                ok = True
            new = apply_commit(state, c)
            assert ok, f"{op} should have been refused"
            state = new
            runs.append(run)
        except WarehouseError:
            assert not ok, f"{op} was refused"
            assert state.to_json() == before
        # Invariants: each committed offset is held by exactly one live file, and
        # no file lies outside its partition's committed range.
        for t, (start, until) in state.offsets.items():
            assert _covered(state, t) == list(range(start, until))
        for x in state.files.values():
            start, until = state.offsets[x.topic_partition]
            assert start <= x.min_offset <= x.max_offset < until
        assert set(state.files).isdisjoint(state.removed)
        assert state.version == len(state.runs)


# ---------------------------------------------------------------------------
# tables on storage


def test_table_on_every_backend(root_url):
    t = Table(root_url, "orders")
    assert t.state().version == 0 and t.committed_offsets() == {}
    r = t.commit(load("r1", 0, 10))
    assert (r.version, r.committed, r.noop) == (1, True, False)
    t.commit(load("r2", 10, 20))
    other = Table(root_url, "orders")
    assert other.committed_offsets() == {("t", 0): 20}
    assert [x.path for x in other.live_files()] == ["data/r1.parquet", "data/r2.parquet"]
    assert [c.run_id for _, c in other.history()] == ["r1", "r2"]
    # A rerun is a no-op, reported as such.
    again = other.commit(load("r1", 0, 10))
    assert (again.version, again.committed, again.noop) == (1, False, True)
    assert other.state().version == 2
    assert list_tables(root_url) == ["orders"]
    stored = json.loads(Storage(root_url).get("orders/_commits/00000000000000000001.json"))
    assert stored["version"] == 1 and stored["operation"] == "load"


def test_checkpoints_keep_replay_short_and_equal(local_root):
    t = Table(local_root, "tbl", checkpoint_interval=3)
    for i in range(7):
        t.commit(load(f"r{i}", i * 10, i * 10 + 10))
    names = [o.path for o in t.storage.list("_commits")]
    assert "_commits/00000000000000000003.checkpoint.json" in names
    assert "_commits/00000000000000000006.checkpoint.json" in names
    from_checkpoint = Table(local_root, "tbl").state().to_json()
    t.storage.delete([n for n in names if "checkpoint" in n])
    assert Table(local_root, "tbl").state().to_json() == from_checkpoint


def test_hole_in_commit_log_is_reported(local_root):
    t = Table(local_root, "tbl")
    for i in range(3):
        t.commit(load(f"r{i}", i * 10, i * 10 + 10))
    t.storage.delete(["_commits/00000000000000000002.json"])
    with pytest.raises(WarehouseError, match="no version 2"):
        Table(local_root, "tbl").state()


def test_conflict_is_retried_after_revalidation(root_url):
    a, b = Table(root_url, "tbl"), Table(root_url, "tbl")
    a.commit(load("r0", 0, 10))
    b.state()
    a.state()
    # b commits first; a's next attempt conflicts on version 2, re-reads and retries.
    b.commit(load("rb", 0, 5, partition=1))
    seen = []

    def build(state):
        seen.append(state.version)
        return load("ra", 10, 20)
    r = a.commit(build)
    assert r.version == 3 and r.committed
    # Same range again from a stale reader: refused after re-validation.
    stale = Table(root_url, "tbl")
    with pytest.raises(WarehouseError, match="overlaps"):
        stale.commit(load("rc", 10, 20))


def _race(table_factory, commits):
    results, errors = [None] * len(commits), [None] * len(commits)
    barrier = threading.Barrier(len(commits))

    def go(i):
        t = table_factory()
        t.state()
        barrier.wait()
        try:
            results[i] = t.commit(commits[i])
        except WarehouseError as exc:
            errors[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(commits))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results, errors


def test_racing_loads_exactly_one_wins(root_url):
    Table(root_url, "tbl").commit(load("r0", 0, 10))
    commits = [load(f"racer{i}", 10, 20) for i in range(4)]
    results, errors = _race(lambda: Table(root_url, "tbl"), commits)
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and sum(e is not None for e in errors) == 3
    assert all("overlaps" in str(e) for e in errors if e is not None)
    state = Table(root_url, "tbl").state()
    assert state.version == 2 and state.committed_offsets() == {("t", 0): 20}
    assert len(state.live_files()) == 2


def test_racing_loads_of_different_partitions_all_land(root_url):
    commits = [load(f"p{i}", 0, 5, partition=i) for i in range(3)]
    results, errors = _race(lambda: Table(root_url, "tbl"), commits)
    assert errors == [None] * 3
    assert Table(root_url, "tbl").committed_offsets() == {("t", i): 5 for i in range(3)}


def _process_racer(url, i, start_at, queue):
    t = Table(url, "tbl")
    t.state()
    while time.time() < start_at:
        time.sleep(0.001)
    try:
        r = t.commit(load(f"proc{i}", 0, 10))
        queue.put(("ok", r.version))
    except WarehouseError as exc:
        queue.put(("refused", str(exc)))


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_racing_processes_exactly_one_wins(backend, tmp_path, request):
    from tests.conftest import make_root_url

    url = make_root_url(backend, tmp_path, request)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0
    procs = [ctx.Process(target=_process_racer, args=(url, i, start_at, queue)) for i in range(3)]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert sorted(o[0] for o in outcomes) == ["ok", "refused", "refused"]
    assert Table(url, "tbl").state().version == 1


# -- lost responses ----------------------------------------------------------


def _faulty_table(url):
    fs = FaultyFS(Storage(url).fs)
    return Table(Storage(url, fs=fs), "tbl"), fs


def test_lost_response_is_resolved_by_reading_back(root_url):
    t, fs = _faulty_table(root_url)
    fs.lose_response(match="_commits/")
    r = t.commit(load("r1", 0, 10))
    assert (r.version, r.committed, r.noop) == (1, True, False)
    assert len(fs.log) == 1   # the fault did fire
    assert [o.path for o in Storage(root_url).list("tbl/_commits")] == [
        "tbl/_commits/00000000000000000001.json"]


def test_failed_write_is_retried(root_url):
    t, fs = _faulty_table(root_url)
    fs.fail_before_write(match="_commits/")
    r = t.commit(load("r1", 0, 10))
    assert r.version == 1 and r.committed and len(fs.log) == 1


def test_lost_response_with_rebuilt_commit_still_recognised(local_root):
    # The builder makes a fresh Commit (fresh commit_id) per attempt: the table
    # must still recognise its own landed commit rather than report a no-op.
    t, fs = _faulty_table(local_root)
    fs.lose_response(match="_commits/")
    r = t.commit(lambda state: load("r1", 0, 10))
    assert r.committed and not r.noop


def test_unknown_outcome_raises_and_keeps_files(local_root):
    t, fs = _faulty_table(local_root)
    t.storage.put("data/r1.parquet", b"x")
    fs.lose_response(match="_commits/")
    fs.fail_reads(match="_commits/0", count=None, ops=("read",))
    with pytest.raises(CommitUnknownError, match="rerun with the same run id"):
        t.commit(load("r1", 0, 10))
    fs.clear()
    assert t.storage.exists("data/r1.parquet")
    # Rerunning with the same run id settles it: the commit had landed.
    r = Table(local_root, "tbl").commit(load("r1", 0, 10))
    assert r.version == 1 and r.noop


# -- vacuum --------------------------------------------------------------------


def _rows(offsets, topic="t", partition=0, ts=None):
    """Kafka-schema rows; ``ts`` in epoch microseconds (default NOW + offset ms)."""
    offsets = list(offsets)
    n = len(offsets)
    ts_us = ts if ts is not None else [(NOW + o) * 1000 for o in offsets]
    return pa.table({
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array([f"v{o}".encode() for o in offsets], pa.binary()),
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(ts_us, pa.timestamp("us", tz="UTC")),
    })


def test_vacuum_respects_grace(root_url):
    t = Table(root_url, "tbl")
    d1 = write_files(t.url, _rows(range(0, 10)), run_id="r1")
    t.commit(Commit.load("r1", d1, {("t", 0): (0, 10)}, now_ms=NOW))
    orphan = write_files(t.url, _rows(range(10, 20)), run_id="crashed")[0]["path"]
    d2 = write_files(t.url, _rows(range(0, 10)), run_id="rw")
    t.commit(Commit.reprocess("rw", d2, {("t", 0): (0, 10)}, [x["path"] for x in d1],
                              now_ms=NOW + 1000))
    removed = d1[0]["path"]
    real_now = int(time.time() * 1000)

    kept = vacuum(t, now_ms=NOW + 1100, grace_ms=3_600_000, dry_run=True)
    assert kept.deleted == () and set(kept.kept) == {removed, orphan}

    # Removal age counts from the removing commit's time; orphans from their mtime.
    r = vacuum(t, now_ms=NOW + 1000 + 500, grace_ms=400)
    assert r.deleted == (removed,) and r.kept == (orphan,)
    assert not t.storage.exists(removed) and t.storage.exists(orphan)
    assert t.state().removed == {}

    r = vacuum(t, now_ms=real_now + 10 * 3_600_000, grace_ms=3_600_000)
    assert r.deleted == (orphan,) and not t.storage.exists(orphan)
    last = t.history()[-1][1]
    assert last.operation == "vacuum" and last.info["orphans_deleted"] == [orphan]
    assert [x.path for x in t.live_files()] == [d2[0]["path"]]
    assert t.storage.exists(d2[0]["path"])


# -- writer ----------------------------------------------------------------------


def test_write_files_splits_by_partition_and_day(root_url):
    t = Table(root_url, "tbl")
    day0 = 1_700_006_400_000                                    # 2023-11-15T00:00Z
    ts = [(day0 - 2 + i) * 1000 for i in range(4)]              # 2 rows each side of midnight
    a = _rows([1, 0, 3, 2], ts=ts)
    b = _rows([7, 8], partition=1)                              # 2023-11-14
    descs = write_files(t.url, pa.concat_tables([a, b]), run_id="run/1 x", max_rows_per_file=1)
    assert len(descs) == 6
    descs = write_files(t.url, [*pa.concat_tables([a, b]).to_batches()], run_id="run/1 x")
    got = {(d["partition"], d["date"]) for d in descs}
    assert got == {(0, "2023-11-14"), (0, "2023-11-15"), (1, "2023-11-14")}
    for d in descs:
        assert d["path"].startswith(f"data/topic=t/date={d['date']}/part-{d['partition']}-")
        assert "run_1_x" in d["path"]
        assert d["bytes"] == t.storage.size(d["path"])
    p0 = sorted((d for d in descs if d["partition"] == 0), key=lambda d: d["min_offset"])
    assert [(d["min_offset"], d["max_offset"], d["rows"]) for d in p0] == [(0, 1, 2), (2, 3, 2)]
    back = read_files(t.url, [DataFile.from_json(d) for d in p0])
    assert back.column("offset").to_pylist() == [0, 1, 2, 3]
    assert back.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v3"]
    assert (p0[0]["min_timestamp"], p0[0]["max_timestamp"]) == (day0 - 2, day0 - 1)


def test_write_files_rejects_bad_input(local_root):
    with pytest.raises(ConfigError, match="lack column"):
        write_files(local_root, pa.table({"offset": [1]}), run_id="r")
    with pytest.raises(ConfigError, match="kind"):
        write_files(local_root, _rows([1]), run_id="r", kind="nope")
    assert write_files(local_root, _rows([]), run_id="r") == []


def test_copy_rows_below_for_straddling_rewind(local_root):
    t = Table(local_root, "tbl")
    d = write_files(t.url, _rows(range(10)), run_id="r1")
    t.commit(Commit.load("r1", d, {("t", 0): (0, 10)}, now_ms=NOW))
    plan = plan_rewind(t.state(), "t", 0, 6)
    assert plan.effective_from == 0 and len(plan.straddling) == 1
    kept = copy_rows_below(t.url, plan.straddling[0], 6, run_id="rw")
    redo = write_files(t.url, _rows(range(6, 12)), run_id="rw")
    r = t.commit(Commit.reprocess("rw", kept + redo, {("t", 0): (plan.effective_from, 12)},
                                  plan.remove, now_ms=NOW, info={"requested_from_offset": 6}))
    assert r.committed
    rows = read_files(t.url, t.live_files()).sort_by("offset")
    assert rows.column("offset").to_pylist() == list(range(12))


def test_arrow_writer_on_spark_executors(spark, root_url):
    if root_url.startswith("memory://"):
        pytest.skip("memory:// lives in one process; Spark's Python workers are others")
    options = None
    if root_url.startswith("s3://"):
        # Python workers inherit the JVM's environment from when it started, which
        # may predate the moto fixture: pass the endpoint explicitly, as jobs do.
        import os

        options = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing",
                   "secret": "testing"}
    t = Table(root_url, "tbl", storage_options=options)
    df = spark.createDataFrame(_rows(list(range(20))).to_pandas()).repartition(2)
    writer = arrow_writer(t.url, run_id="spark-run", storage_options=t.storage_options)
    rows = df.mapInArrow(writer, FILE_DESCRIPTOR_DDL).collect()
    descs = [DataFile.from_json(r.asDict()) for r in rows]
    assert sum(x.rows for x in descs) == 20
    t.commit(Commit.load("spark-run", descs, {("t", 0): (0, 20)}, now_ms=NOW))
    back = read_files(t.url, t.live_files(), storage_options=t.storage_options)
    assert sorted(back.column("offset").to_pylist()) == list(range(20))
    assert pc.all(pc.equal(back.column("topic"), "t")).as_py()


def test_table_name_is_validated(local_root):
    with pytest.raises(ConfigError, match="invalid table name"):
        Table(local_root, "../x")
    with pytest.raises(ConfigError):
        Table(local_root, "_commits")
