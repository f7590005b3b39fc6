"""Merging small segments (kafkastore.merge): byte-identical results on every backend, readers
of older versions, the automatic housekeeping of a Broker, and crashes at each step."""
from __future__ import annotations

import time

import pytest

from kafkastore import layout
from kafkastore.read.verify import verify_partition
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import KafkaStoreError
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import Housekeeper
from kafkastore.maintenance.merge import generation, merge_partition, plan_for
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, load_topic
from tests.faults import FaultyFS

T, P = "events", 0


def fill(storage, flushes=12, *, txn=True):
    """Small flushes, with headers, keys, one aborted and one committed transaction."""
    b = Broker(storage, housekeeping=False, clock=lambda: 1_700_000_000_000)
    for i in range(flushes):
        if txn and i == 3:
            b.begin_transaction()
            b.send(T, b"aborted-%d" % i, key=b"k", partition=P)
            b.abort_transaction()
        elif txn and i == 5:
            b.begin_transaction()
            b.send(T, b"committed-%d" % i, key=b"k", partition=P)
            b.commit_transaction()
        else:
            for j in range(3):
                b.send(T, b"v%d-%d" % (i, j), key=b"k%d" % j, partition=P,
                       headers=[("h", b"x%d" % i)], timestamp=1_700_000_000_000 + i * 10 + j)
            b.flush()
    return b


def snapshot(storage, manifest=None, isolation="read_committed"):
    r = PartitionReader(storage, T, P, manifest)
    return r.read(r.log_start_offset, isolation=isolation).to_pylist()


def logs(storage, m):
    return b"".join(storage.get(s.paths(T, P)[".log"]) for s in m.segments)


@pytest.fixture
def storage(root_url):
    s = Storage(root_url)
    create_topic(s, T, 1)
    return s


def test_merge_is_byte_identical_on_every_backend(storage):
    fill(storage)
    store = ManifestStore(storage, T, P)
    before = store.latest()
    committed, uncommitted = snapshot(storage), snapshot(storage, isolation="read_uncommitted")
    assert any(r["value"] == b"aborted-3" for r in uncommitted)
    assert not any(r["value"] == b"aborted-3" for r in committed)
    stamps = sorted({int(r["timestamp"].timestamp() * 1000) for r in snapshot(storage, before)})

    report = merge_partition(storage, T, P, min_segments=0, rounds=10)
    after = store.latest()
    assert report.merged and len(after.segments) < len(before.segments)
    assert max(generation(s.segment_id) for s in after.segments) >= 1
    # the same bytes, offsets, records, headers, transactions
    assert logs(storage, after) == logs(storage, before)
    assert snapshot(storage) == committed
    assert snapshot(storage, isolation="read_uncommitted") == uncommitted
    assert (after.log_start_offset, after.high_watermark, dict(after.producers)) == (
        before.log_start_offset, before.high_watermark, dict(before.producers))
    assert sum(s.record_count for s in after.segments) == sum(s.record_count for s in before.segments)
    assert {t for s in after.segments for t in s.aborted_txns} == {
        t for s in before.segments for t in s.aborted_txns}
    merged = [s for s in after.segments if generation(s.segment_id)][0]
    assert merged.timeindex_size > 0  # (.index is sparse: every index.interval.bytes)
    # fetch by timestamp lands on the same offsets through the rebuilt time index
    r = PartitionReader(storage, T, P)
    assert stamps
    for ts in stamps + [stamps[-1] + 1]:
        assert r.offset_for_timestamp(ts) == PartitionReader(storage, T, P, before).offset_for_timestamp(ts)
    assert verify_partition(storage, T, P).ok


def test_reader_holding_the_pre_merge_manifest_keeps_reading(storage):
    fill(storage, txn=False)
    before = ManifestStore(storage, T, P).latest()
    expected = snapshot(storage, before)
    merge_partition(storage, T, P, min_segments=0, rounds=10)
    # gc within the grace keeps the old files: the old version still reads
    collect_garbage(storage, T, P, now_ms=storage.clock.wall_ms())
    assert snapshot(storage, before) == expected
    # after the grace the merged-away files go, the latest version reads the same
    later = storage.clock.wall_ms() + 10 * 60_000
    report = collect_garbage(storage, T, P, now_ms=later)
    assert any(layout.parse_segment_name(p)[1] in before.segment_ids() for p in report.deleted)
    assert snapshot(storage) == expected


def test_a_broker_doing_500_small_flushes_stays_bounded(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1, configs={"segment.bytes": 16384})
    hk = Housekeeper(storage, min_segments=0)
    b = Broker(storage, housekeeping=hk)
    for i in range(500):
        b.send(T, b"x" * 60, partition=P)
        b.flush()
    hk.wait()
    # one more poke merges whatever the last commits left behind
    hk.poke(T, P, ManifestStore(storage, T, P).latest())
    hk.wait()
    assert not hk.errors
    m = ManifestStore(storage, T, P).latest()
    assert m.high_watermark == 500
    size = sum(s.size for s in m.segments)
    assert len(m.segments) <= 2 * size / 16384 + 4 * 6 + 1, (len(m.segments), size)
    assert len(m.segments) < 60
    assert [r["offset"] for r in snapshot(storage)] == list(range(500))


def test_a_backlog_is_merged_by_bounded_jobs_one_after_another(tmp_path):
    """A log that arrives with a backlog of small segments (an old root, a writer that ran
    without merging) is worked off by jobs of at most max_runs_per_job runs, each its own
    commit, not one job growing with the backlog (which once outran the upload-freshness
    window and never landed)."""
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1, configs={"segment.bytes": 1 << 20})
    b = Broker(storage, housekeeping=False)
    for i in range(300):
        b.send(T, b"x" * 60, partition=P)
        b.flush()
    store = ManifestStore(storage, T, P)
    before = store.latest()
    assert len(before.segments) == 300
    hk = Housekeeper(storage, min_segments=0)
    hk.max_runs_per_job = 4
    hk.poke(T, P, before)  # one poke, no writer: the housekeeper carries on by itself
    hk.wait(60)
    assert not hk.errors
    after = store.latest()
    merges = [v for v in range(before.version + 1, after.version + 1)
              if store.load(v).commit.operation == "merge"]
    assert len(merges) >= 300 // 4 // 4  # many bounded commits, not one
    for v in merges:
        m, prev = store.load(v), store.load(v - 1)
        assert len(prev.segments) - len(m.segments) <= 4 * 3  # at most 4 runs of 4 -> 1
    assert len(after.segments) < 30, len(after.segments)
    assert [r["offset"] for r in snapshot(storage)] == list(range(300))


def test_broker_merges_by_default_and_can_be_turned_off(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    b = Broker(storage, housekeeping=False)
    assert b.housekeeper is None
    assert Broker(storage).housekeeper is not None


def faulty(root_url):
    inner = Storage(root_url)
    create_topic(inner, T, 1)
    fill(inner, txn=False)
    fs = FaultyFS(inner.fs)
    return inner, Storage(root_url, fs=fs), fs


@pytest.mark.parametrize("step", ["index", "log", "commit-before", "commit-lost"])
def test_a_crash_at_each_step_loses_nothing_and_the_next_run_finishes(root_url, step):
    inner, storage, fs = faulty(root_url)
    store = ManifestStore(inner, T, P)
    before = store.latest()
    expected = snapshot(inner)
    merged_ext = {"index": "index", "log": ".log"}.get(step)  # "index": the first index written
    if merged_ext:
        fs.fail_before_write(match=lambda op, path: "-m1g" in path and path.endswith(merged_ext))
    elif step == "commit-before":
        fs.fail_before_write(match="_manifest/", count=None)
    else:
        fs.lose_response(match="_manifest/")
    try:
        merge_partition(storage, T, P, min_segments=0)
        crashed = False
    except (KafkaStoreError, OSError):
        crashed = True
    fs.clear()
    now = store.latest()
    if step == "commit-lost":
        # the read-back found our version: the merge landed exactly once
        assert not crashed and now.version == before.version + 1
    else:
        assert crashed and now == before
    assert snapshot(inner) == expected
    merge_partition(inner, T, P, min_segments=0, rounds=10)
    final = store.latest()
    assert snapshot(inner) == expected
    assert len(final.segments) < len(before.segments)
    # leftovers are unlisted: gc after the grace removes them and every listed file stays
    collect_garbage(inner, T, P, now_ms=inner.clock.wall_ms() + 10 * 60_000)
    assert snapshot(inner) == expected
    assert verify_partition(inner, T, P).ok


def test_a_run_raced_by_compaction_or_retention_is_dropped(storage):
    fill(storage, txn=False)
    store = ManifestStore(storage, T, P)
    m = store.latest()
    config = load_topic(storage, T).config
    runs = plan_for(m, config, min_segments=0)
    assert runs
    from kafkastore.manifest import AdvanceLogStart
    # retention drops the first segment between planning and commit
    victim = runs[0].segments[0]
    store.commit(lambda base: ([AdvanceLogStart(victim.next_offset)], []), operation="retention")
    report = merge_partition(storage, T, P, min_segments=0)
    # re-planned on the latest version: never resurrects the dropped segment
    assert victim.segment_id not in store.latest().segment_ids()
    assert snapshot(storage)[0]["offset"] == victim.next_offset
    assert report.manifest is not None


def test_merge_command_for_a_log_nobody_serves(tmp_path, capsys, monkeypatch, clean_config_env):
    from kafkastore.cli.entry import main
    from tests.helpers.cli import cli_runner

    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, T, 2)
    fill(storage, txn=False)
    expected = snapshot(storage)
    before = len(ManifestStore(storage, T, P).latest().segments)
    run = cli_runner(main, capsys, monkeypatch, root)
    rc, out, err = run("merge", T, "--partition", "0")
    assert rc == 0, err
    assert f"merge {T}/0:" in out
    after = ManifestStore(storage, T, P).latest()
    assert len(after.segments) == 1 < before  # a dozen tiny flushes fit one segment
    assert snapshot(storage) == expected
    rc, out, err = run("merge", T)  # every partition; nothing left to do, partition 1 is empty
    assert rc == 0 and f"merge {T}/1: 0 of 0" in out
    rc, out, err = run("merge", T, "--partition", "7")
    assert rc == 1 and "partitions 0..1" in err


@pytest.mark.parametrize("backend", ["file", "memory"])  # (48 commits + compaction: slow on moto)
def test_every_reader_copes_with_index_free_segments_and_with_merged_ones(backend, tmp_path,
                                                                          request):
    """Small flush segments carry no .index/.timeindex; fetch by offset and by timestamp,
    verify, compaction, retention and delete-records work on them, before and after merging."""
    from kafkastore.maintenance.compaction_rewrite import compact_partition_local
    from kafkastore.maintenance.retention import apply_retention, delete_records
    from tests.helpers.roots import make_root_url

    storage = Storage(make_root_url(backend, tmp_path, request))
    create_topic(storage, T, 1, configs={"cleanup.policy": "compact,delete",
                                         "min.cleanable.dirty.ratio": "0.01",
                                         "index.interval.bytes": "200"})
    base_ts = 1_700_000_000_000
    b = Broker(storage, housekeeping=False)
    for i in range(48):  # one small batch per flush: under index.interval.bytes
        b.send(T, b"v%d" % i, key=b"k%d" % (i % 4), partition=P, timestamp=base_ts + i)
        b.flush()
    m = ManifestStore(storage, T, P).latest()
    assert all(s.index_size == 0 and s.timeindex_size == 0 for s in m.segments)
    paths = {o.path for o in storage.list(layout.partition_dir(T, P))}
    assert not any(p.endswith("index") for p in paths)

    def check():
        r = PartitionReader(storage, T, P)
        start = r.log_start_offset
        assert [x["offset"] for x in r.read(start).to_pylist()] == list(range(start, 48))
        assert [x["offset"] for x in r.read(21, 30).to_pylist()] == list(range(max(21, start), 30))
        for ts in (base_ts, base_ts + 21, base_ts + 47, base_ts + 48):
            want = max(ts - base_ts, start)
            assert r.offset_for_timestamp(ts) == (want if ts - base_ts < 48 else 48)
        assert verify_partition(storage, T, P).ok

    check()
    merge_partition(storage, T, P, min_segments=0, rounds=10, pack=True)
    merged = ManifestStore(storage, T, P).latest()
    assert len(merged.segments) == 1 and merged.segments[0].index_size > 0  # built by the merge
    check()
    delete_records(storage, T, P, 3)
    apply_retention(storage, T, P, storage.clock.wall_ms())
    check()
    # compaction of the merged log keeps the last record per key (head segment untouched)
    for j in range(4):
        b.send(T, b"last-%d" % j, key=b"k%d" % j, partition=P, timestamp=base_ts + 100)
    b.flush()
    result = compact_partition_local(storage, T, P, storage.clock.wall_ms(), force=True)
    assert result.cleaned, result
    rows = PartitionReader(storage, T, P).read(-2).to_pylist()
    assert [r["value"] for r in rows][-4:] == [b"last-%d" % j for j in range(4)]
    assert verify_partition(storage, T, P).ok


def test_housekeeping_removes_old_versions_and_merged_away_files_by_itself(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    fill(storage, txn=False)
    store = ManifestStore(storage, T, P)
    before = store.latest()
    now = [storage.clock.wall_ms()]
    hk = Housekeeper(storage, clock=lambda: now[0], min_segments=0)
    # a commit landed: the housekeeper merges (no gc yet: the first is due one interval later)
    assert hk.poke(T, P, before)
    hk.wait()
    assert hk.merges and hk.gc_runs == 0 and not hk.errors
    old_files = {p for s in before.segments for p in s.paths(T, P).values()}
    assert old_files & {o.path for o in storage.list(layout.partition_dir(T, P))}
    # rate limit: nothing to merge and gc not due yet
    assert not hk.poke(T, P, store.latest())
    # past the interval and the grace: gc expires old versions and deletes merged-away files
    now[0] += 10 * 60_000
    assert hk.poke(T, P, store.latest())
    hk.wait()
    assert hk.gc_runs == 1 and not hk.errors
    left = {o.path for o in storage.list(layout.partition_dir(T, P))}
    assert not old_files & left
    assert len(store.versions()) < before.version
    assert [r["offset"] for r in snapshot(storage)] == list(range(before.high_watermark))
    assert not hk.poke(T, P, store.latest())  # and not again within the interval
    hk.close()


def test_a_partition_gone_quiet_is_collected_without_another_commit(tmp_path):
    """The merged-away files and old versions of a partition that receives no more commits
    still go, one interval and one grace after its last commit (the housekeeper's sweeper)."""
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    fill(storage, txn=False)
    store = ManifestStore(storage, T, P)
    before = store.latest()
    now = [storage.clock.wall_ms()]
    hk = Housekeeper(storage, clock=lambda: now[0], min_segments=0)
    hk.sweep_s = 0.05
    assert hk.poke(T, P, before)  # the last commit: merges, gc not due yet
    hk.wait()
    old_files = {p for s in before.segments for p in s.paths(T, P).values()}
    assert old_files & {o.path for o in storage.list(layout.partition_dir(T, P))}
    now[0] += 10 * 60_000  # no poke from here on: the partition went quiet
    deadline = time.monotonic() + 20
    while hk.gc_runs == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    hk.wait()
    assert hk.gc_runs >= 1 and not hk.errors
    assert not old_files & {o.path for o in storage.list(layout.partition_dir(T, P))}
    assert [r["offset"] for r in snapshot(storage)] == list(range(before.high_watermark))
    hk.close()


def test_a_gc_that_keeps_failing_is_not_retried_at_every_sweep(tmp_path):
    """A partition whose gc fails (its topic deleted, its root removed) owes nothing more after
    two tries spaced an interval and a grace apart: no sweep loop burning a core."""
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    fill(storage, txn=False)
    now = [storage.clock.wall_ms()]
    hk = Housekeeper(storage, clock=lambda: now[0], min_segments=0)
    hk.sweep_s = 0.02
    hk.poke(T, P, ManifestStore(storage, T, P).latest())
    hk.wait()
    import shutil
    shutil.rmtree(tmp_path / "root")  # the root goes away under the housekeeper
    for _ in range(4):
        now[0] += 10 * 60_000
        time.sleep(0.2)
        hk.wait()
    runs = hk.gc_runs + len(hk.errors)
    time.sleep(0.5)  # sweeps keep coming, but nothing is owed any more
    assert hk.gc_runs + len(hk.errors) == runs
    assert (T, P) not in hk._quiet
    hk.close()


def test_two_mergers_at_once_merge_each_run_once(tmp_path):
    """B plans, merges and commits while A is about to commit the same runs: A's commit
    conflicts, is rebuilt on B's version and drops its runs (their inputs are gone)."""
    root = f"file://{tmp_path}/root"
    inner = Storage(root)
    create_topic(inner, T, 1)
    fill(inner, flushes=16, txn=False)
    expected = snapshot(inner)
    fs = FaultyFS(inner.fs)
    a_storage = Storage(root, fs=fs)
    reports = {}
    fs.on_write(lambda op, path: reports.setdefault("b", merge_partition(inner, T, P, min_segments=0)),
                match="_manifest/")
    reports["a"] = merge_partition(a_storage, T, P, min_segments=0)
    m = ManifestStore(inner, T, P).latest()
    assert len(reports["b"].merged) == 4 and not reports["a"].merged and reports["a"].dropped
    assert len(m.segments) == 4 and all(generation(s.segment_id) == 1 for s in m.segments)
    assert snapshot(inner) == expected
