"""The compaction Spark job: Kafka's documented guarantees (one test each), the swap under faults
and concurrent writers, agreement with the one-process reference, the CLI.

Topics are tiny; every test shares the session's ``spark`` fixture.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance.compaction import (KIND_RECORD, KIND_TXN, SCAN_SCHEMA, STATUS_SKIPPED,
                                               ScanTask)
from kafkastore.maintenance.compaction_rewrite import (STATUS_CLEANED, STATUS_GAVE_UP,
                                                       compact_partition_local)
from kafkastore.errors import CommitUnknownError, ConfigError
from kafkastore.manifest import AdvanceLogStart, ManifestStore
from kafkastore.read.reader import PartitionReader, ReadRange
from kafkastore.format.segment_scan import iter_batches
from kafkastore.storage import Storage
from pipelines.jobs.log_compaction import compact_partition, compact_topic, drop_superseded, scan_slices
from tests.faults import faulty_storage
from tests.helpers.compaction import (T0, TOPIC, check_compacted, latest_manifest,
                                      latest_per_key, make_topic, produce,
                                      produce_segments, read_all, scan_rows, scan_table)

ROUNDS = [[("a", "1"), ("b", "1"), ("c", "1")], [("a", "2"), ("b", "2")], [("a", "3"), ("d", "1")],
          [("c", "2"), ("e", "1")], [("a", "4"), ("f", "1")]]


@pytest.fixture
def storage(local_root):
    return Storage(local_root)


def compact(spark, storage, now=T0, *, force=False, partition=0):
    return compact_partition(spark, storage, TOPIC, partition, now, force)


def _values(records):
    return {k: v for k, (_, v) in latest_per_key(records).items()}


# ---------------------------------------------------------------------------
# Kafka's guarantees for compacted topics
# ---------------------------------------------------------------------------

def test_consumers_caught_up_within_the_head_see_every_message(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6, min_compaction_lag_ms=1000)
    produce_segments(storage, ROUNDS[:3], ts=T0)
    produce_segments(storage, ROUNDS[3:], ts=T0 + 5000)          # the head: younger than the lag
    before = read_all(storage)
    res = compact(spark, storage, now=T0 + 5500)
    assert res.status == STATUS_CLEANED
    head = res.first_uncleanable_offset
    assert head == 7                                             # rounds 4-5 are within the lag
    after = read_all(storage)
    assert [r for r in after if r[0] >= head] == [r for r in before if r[0] >= head]


def test_ordering_never_changes(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    before = read_all(storage)
    compact(spark, storage)
    after = read_all(storage)
    assert len(after) < len(before)
    positions = [before.index(r) for r in after]
    assert positions == sorted(positions)


def test_offsets_never_change(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    before = {o: (k, v) for o, k, v in read_all(storage)}
    compact(spark, storage)
    after = read_all(storage)
    assert all(before[o] == (k, v) for o, k, v in after)
    # Reading from a removed offset starts at the next one still there (Kafka's 36, 37 -> 38).
    reader = PartitionReader(storage, TOPIC, 0)
    assert reader.read(1, max_records=1)["offset"].to_pylist() == [after[0][0]]


def test_a_consumer_from_the_start_sees_the_final_value_of_every_key_in_order(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    before = read_all(storage)
    res = compact(spark, storage)
    after = read_all(storage)
    check_compacted(before, after, res.first_uncleanable_offset)
    assert _values(after) == _values(before)
    # Below the head exactly the last record of each key there is left (the head is not mapped).
    fu = res.first_uncleanable_offset
    last = latest_per_key([r for r in before if r[0] < fu])
    assert [o for o, _, _ in after if o < fu] == sorted(o for o, _ in last.values())


def test_tombstones_stay_delete_retention_ms_then_go_even_without_new_data(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=60_000)
    produce_segments(storage, [[("a", "1"), ("b", "1")], [("a", None)], [("z", "1")]])
    first = T0 + 1000
    assert compact(spark, storage, now=first).status == STATUS_CLEANED
    assert read_all(storage) == [(1, "b", "1"), (2, "a", None), (3, "z", "1")]
    assert latest_manifest(storage).segments[0].delete_horizon_ms == first + 60_000
    skipped = compact(spark, storage, now=first + 59_999)
    assert skipped.status == STATUS_SKIPPED
    assert (2, "a", None) in read_all(storage)
    res = compact(spark, storage, now=first + 60_000)            # nothing new was produced
    assert res.status == STATUS_CLEANED and "delete horizon" in res.reason
    assert read_all(storage) == [(1, "b", "1"), (3, "z", "1")]


def test_min_compaction_lag_ms_keeps_young_records(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6, min_compaction_lag_ms=10_000)
    produce_segments(storage, ROUNDS, ts=T0)
    before = read_all(storage)
    young = compact(spark, storage, now=T0 + 9_999, force=True)
    assert young.status == STATUS_SKIPPED and "min.compaction.lag.ms" in young.reason
    assert read_all(storage) == before
    assert compact(spark, storage, now=T0 + 10_001).status == STATUS_CLEANED
    assert len(read_all(storage)) < len(before)


def test_max_compaction_lag_ms_forces_cleaning_below_the_dirty_ratio(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6, min_cleanable_dirty_ratio=0.99,
               max_compaction_lag_ms=60_000)
    produce_segments(storage, [[(k, "1") for k in "abcdefgh"]] * 4, ts=T0)
    assert compact(spark, storage, now=T0 + 1000).status == STATUS_CLEANED   # all dirty: ratio 1
    produce_segments(storage, [[("a", "2")], [("z", "1")]], ts=T0 + 2000)
    early = compact(spark, storage, now=T0 + 3000)
    assert early.status == STATUS_SKIPPED and "dirty ratio" in early.reason
    late = compact(spark, storage, now=T0 + 2000 + 60_001)
    assert late.status == STATUS_CLEANED and "max.compaction.lag.ms" in late.reason
    assert ("a", "1") not in {(k, v) for _, k, v in read_all(storage)}


def test_the_head_segment_is_never_touched(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    head = latest_manifest(storage).segments[-1]
    head_bytes = storage.get(head.paths(TOPIC, 0)[".log"])
    compact(spark, storage, force=True)
    compact(spark, storage, force=True)
    assert latest_manifest(storage).segments[-1] == head
    assert storage.get(head.paths(TOPIC, 0)[".log"]) == head_bytes


def test_aborted_transactions_are_removed(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce(storage, [("a", "1")])
    txn = Broker(storage, clock=lambda: T0, producer_id=9)
    txn.begin_transaction()
    produce(storage, [("a", "aborted"), ("x", "aborted")], broker=txn, flush=False)
    txn.abort_transaction()
    produce(storage, [("b", "1")])
    produce(storage, [("z", "1")])
    assert compact(spark, storage).status == STATUS_CLEANED
    uncommitted = PartitionReader(storage, TOPIC, 0).read(-2, isolation="read_uncommitted")
    assert b"aborted" not in uncommitted["value"].to_pylist()
    assert read_all(storage) == [(0, "a", "1"), (4, "b", "1"), (5, "z", "1")]


def test_never_clean_past_an_open_transaction(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1")], [("a", "2")]])
    txn = Broker(storage, clock=lambda: T0, producer_id=9)
    txn.begin_transaction()
    produce(storage, [("t", "open")], broker=txn)                # offset 2, uncommitted
    produce_segments(storage, [[("a", "3")], [("a", "4")], [("z", "1")]])
    res = compact(spark, storage, force=True)
    assert res.first_uncleanable_offset == 2
    raw = PartitionReader(storage, TOPIC, 0).read(-2, isolation="read_uncommitted")
    assert raw["offset"].to_pylist() == [1, 2, 3, 4, 5]          # nothing from the txn on
    txn.commit_transaction()                                     # the marker at 6
    produce(storage, [("y", "1")])
    res = compact(spark, storage, force=True)
    assert res.first_uncleanable_offset == 7
    assert read_all(storage) == [(2, "t", "open"), (4, "a", "4"), (5, "z", "1"), (7, "y", "1")]


# ---------------------------------------------------------------------------
# the job against the one-process reference, several partitions, the report
# ---------------------------------------------------------------------------

def _mixed(storage):
    make_topic(storage, partitions=2, segment_bytes=220, delete_retention_ms=1000)
    for p in range(2):
        produce_segments(storage, [[(f"k{(i * 3 + j) % 7}", None if (i + j) % 5 == 4 else f"v{i}.{j}")
                                    for j in range(3)] for i in range(8)], partition=p)
        txn = Broker(storage, clock=lambda: T0, producer_id=40 + p)
        txn.begin_transaction()
        produce(storage, [("k1", "txn"), ("k9", "txn")], broker=txn, partition=p)
        produce(storage, [("k2", "between")], partition=p)
        (txn.abort_transaction if p else txn.commit_transaction)()
        produce_segments(storage, [[("k3", "late")], [("k0", "last")]], partition=p)


def _structure(storage, partition):
    m = latest_manifest(storage, partition=partition)
    out = []
    for s in m.segments:
        log = storage.get(s.paths(TOPIC, partition)[".log"])
        out.append((s.base_offset, s.next_offset, s.record_count, s.delete_horizon_ms, s.aborted_txns,
                    [(h.base_offset, h.last_offset, h.record_count, h.attributes, h.base_timestamp)
                     for _, h in iter_batches(log)]))
    return m.cleaner_offset, out


def test_spark_and_the_local_reference_agree(spark, tmp_path):
    a, b = Storage(f"file://{tmp_path}/a"), Storage(f"file://{tmp_path}/b")
    _mixed(a)
    _mixed(b)
    for now in (T0, T0 + 10, T0 + 2000):
        report = compact_topic(spark, a.url, TOPIC, now_ms=now, force=True)
        assert report.ok and len(report.partitions) == 2
        for p in range(2):
            compact_partition_local(b, TOPIC, p, now, force=True)
            assert read_all(a, partition=p) == read_all(b, partition=p)
            assert _structure(a, p) == _structure(b, p)
    assert any(h for p in range(2) for seg in _structure(a, p)[1] for h in seg[5])


def test_report_renders_every_partition(spark, storage):
    make_topic(storage, partitions=3, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS, partition=0)
    produce(storage, [("a", "1")], partition=1)
    report = compact_topic(spark, storage.url, TOPIC, now_ms=T0)
    assert [r.status for r in report.partitions] == [STATUS_CLEANED, STATUS_SKIPPED, STATUS_SKIPPED]
    text = report.render()
    assert "cleaned" in text and "head segment" in text and "empty partition" in text
    r0 = report.result(0)
    assert r0.records_in == 9 and r0.records_out == 5 and r0.bytes_out < r0.bytes_in  # head apart
    assert r0.segments_in == 4 and r0.segments_out == 1 and r0.dirty_ratio == 1.0


def test_the_cli_runs_the_job(spark, storage, capsys):
    from pipelines.cli import main

    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS, ts=1000)
    assert main(["--root", storage.url, "compact", TOPIC]) == 0
    assert "1 of 1 partitions cleaned" in capsys.readouterr().err


def test_a_memory_root_is_refused(spark):
    storage = Storage("memory://compaction-refused")
    with pytest.raises(ConfigError, match="memory://"):
        compact(spark, storage)


def test_on_s3(spark, s3_endpoint, request, tmp_path):
    from tests.helpers.roots import make_root_url

    url = make_root_url("s3", tmp_path, request)
    # Python workers may have started before the moto environment was set: be explicit.
    options = {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}
    storage = Storage(url, options)
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    before = read_all(storage)
    report = compact_topic(spark, url, TOPIC, storage_options=options, now_ms=T0)
    assert report.result(0).status == STATUS_CLEANED, report.render()
    after = read_all(storage)
    check_compacted(before, after, report.result(0).first_uncleanable_offset)
    assert _values(after) == _values(before)


# ---------------------------------------------------------------------------
# the swap: faults at the commit, concurrent writers, readers of old versions
# ---------------------------------------------------------------------------

def test_a_failed_commit_leaves_the_old_log(spark, local_root):
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10 ** 6)
    produce_segments(plain, ROUNDS)
    before, version = read_all(plain), latest_manifest(plain).version
    storage, fs = faulty_storage(local_root)
    fs.fail_before_write(match="_manifest/", count=None)
    saved = ManifestStore.backoff_initial_s
    ManifestStore.backoff_initial_s = 0.0
    try:
        with pytest.raises(CommitUnknownError):
            compact(spark, storage)
    finally:
        ManifestStore.backoff_initial_s = saved
    assert latest_manifest(plain).version == version and read_all(plain) == before
    # The rewritten segments were uploaded but nothing lists them; a rerun cleans normally.
    res = compact(spark, plain)
    assert res.status == STATUS_CLEANED and _values(read_all(plain)) == _values(before)


def test_a_lost_commit_response_still_swaps_once(spark, local_root):
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10 ** 6)
    produce_segments(plain, ROUNDS)
    before, version = read_all(plain), latest_manifest(plain).version
    storage, fs = faulty_storage(local_root)
    fs.lose_response(match="_manifest/")
    res = compact(spark, storage)
    assert res.status == STATUS_CLEANED and latest_manifest(plain).version == version + 1
    after = read_all(plain)
    check_compacted(before, after, res.first_uncleanable_offset)
    assert _values(after) == _values(before)


def test_broker_appends_during_compaction_are_not_lost(spark, local_root):
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10 ** 6)
    produce_segments(plain, ROUNDS)
    before = read_all(plain)
    storage, fs = faulty_storage(local_root)
    late = [("a", "late"), ("new", "1")]
    fs.on_write(lambda op, path: produce(plain, late), match="_manifest/")
    res = compact(spark, storage)
    assert res.status == STATUS_CLEANED
    after = read_all(plain)
    hw = before[-1][0] + 1
    assert after[-2:] == [(hw, "a", "late"), (hw + 1, "new", "1")]
    check_compacted(before, [r for r in after if r[0] < hw], res.first_uncleanable_offset)


def test_compaction_gives_up_when_retention_took_its_segments(spark, local_root):
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10 ** 6, cleanup_policy="compact,delete")
    produce_segments(plain, ROUNDS)
    storage, fs = faulty_storage(local_root)

    def retention(op, path):
        store = ManifestStore(plain, TOPIC, 0)
        store.commit(lambda m: ([AdvanceLogStart(m.segments[1].base_offset)], []))

    fs.on_write(retention, match="_manifest/")
    res = compact(spark, storage)
    assert res.status == STATUS_GAVE_UP
    assert latest_manifest(plain).cleaner_offset == 0


def test_a_reader_on_the_old_version_reads_all_of_it_after_the_swap(spark, storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, ROUNDS)
    old = latest_manifest(storage)
    before = read_all(storage, manifest=old)
    assert compact(spark, storage).status == STATUS_CLEANED
    assert len(read_all(storage)) < len(before)
    assert read_all(storage, manifest=old) == before
    assert json.loads(storage.get(f"topics/{TOPIC}/0/_manifest/{old.version:020d}.json"))


def _scan_task(i: int, size: int) -> ScanTask:
    rr = ReadRange("t", i % 3, f"s{i}.log", 0, 0, size, 0, 1)
    return ScanTask(i % 3, i, 0, 0, rr)


@given(sizes=st.lists(st.integers(1, 1000), max_size=60), parallelism=st.integers(1, 8),
       max_bytes=st.integers(1, 5000))
def test_scan_slices_pack_tasks_by_bytes_not_by_segment(sizes, parallelism, max_bytes):
    """Every scan task is read once, in order; there are as many Spark tasks as cores (if
    there are that many scan tasks) or as the bytes need, not one per segment."""
    tasks = [_scan_task(i, n) for i, n in enumerate(sizes)]
    slices = scan_slices(tasks, parallelism, max_bytes)
    assert [i for s in slices for i in s] == list(range(len(tasks)))
    assert all(slices)
    total = sum(sizes)
    want = min(len(tasks), max(parallelism, -(-total // max_bytes)))
    assert len(slices) <= want   # never a straggler task beyond the cores / the bytes
    for s in slices:  # over the even share (so over max_bytes) by less than one scan task
        assert sum(sizes[i] for i in s) < total / want + max(sizes[i] for i in s)
    if len(set(sizes)) == 1:
        assert len(slices) >= want  # equal segments: never fewer tasks than cores


@given(rows=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([KIND_RECORD, KIND_TXN]),
                               st.sampled_from([b"a", b"b", b"c"]), st.booleans()), max_size=40))
@settings(deadline=None)   # the first call imports pyarrow.compute
def test_drop_superseded_keeps_what_the_survivor_rule_needs(rows):
    """The scan task's partial "latest per key" drops exactly the dirty records that a later
    dirty record of their key (same partition plan) supersedes; nothing else."""
    import pyarrow as pa

    table = pa.Table.from_pylist(
        [{"plan": p, "grp": 0, "kind": k, "key": key, "offset": i, "dirty": d, "pid": -1,
          "last_data": -1, "last_marker": -1} for i, (p, k, key, d) in enumerate(rows)],
        schema=SCAN_SCHEMA)
    latest: dict = {}
    for i, (p, k, key, d) in enumerate(rows):
        if k == KIND_RECORD and d:
            latest[(p, key)] = i
    want = sorted(i for i, (p, k, key, d) in enumerate(rows)
                  if not (k == KIND_RECORD and d) or latest[(p, key)] == i)
    assert sorted(drop_superseded(table).column("offset").to_pylist()) == want


@given(rows=scan_rows([b"a", b"b", b"c", b"d"]), shuffle=st.randoms(use_true_random=False))
@settings(deadline=None)
def test_vectorised_survivors_equal_the_reference_rule(rows, shuffle):
    """The rule one shuffle partition applies (pipelines.compaction.survivors, Arrow and
    numpy) keeps exactly the records and carries exactly the transactions that the
    dict-based reference (kafkastore.compaction.survivor_rule) does, in any row order."""
    from kafkastore.maintenance.compaction import survivor_rule
    from pipelines.jobs.log_compaction import survivors

    table = scan_table(rows, shuffle)
    keep, carry = survivor_rule([table.to_pydict()])
    got = survivors(table).to_pylist()
    assert sorted((r["grp"], r["offset"]) for r in got if r["kind"] == KIND_RECORD) == \
        sorted((g, o) for g, offs in keep.items() for o in offs)
    assert {(r["grp"], r["pid"]) for r in got if r["kind"] == KIND_TXN} == \
        {(g, p) for g, pids in carry.items() for p in pids}
