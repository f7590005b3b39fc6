"""Compaction without Spark: selection (pure), the rewrite rules, and the swap under faults.

The Spark job (tests/pipelines/test_compaction.py) shares the planning,
rewriting and commit code tested here; these tests drive them through
:func:`compact_partition_local` (a one-process key map), which is also the
reference the Spark job is compared with. The helpers shared with the pipeline
tests are tests/helpers/compaction.py.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance.compaction import (COMPACTION_WRITER_ID, STATUS_CLEANED, STATUS_GAVE_UP,
                                               STATUS_SKIPPED, CleaningPlan, Skip, dirty_ratio,
                                               group_segments_by_size, group_specs, load_plan,
                                               local_survivors, plan_cleaning, scan_tasks)
from kafkastore.maintenance.compaction_rewrite import GroupResult, compact_partition_local, rewrite_group
from kafkastore.format.compression import Compression
from kafkastore.errors import CommitUnknownError, CorruptRecordError, StorageError
from kafkastore.manifest import (AdvanceLogStart, AppendSegments, Manifest, ManifestStore,
                                 ProducerState, SegmentEntry, SetCleanerOffset, apply)
from kafkastore.format.record_batch import DELETE_HORIZON_MASK, Record, decode_batch, encode_batch
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.format.segment_scan import iter_batches
from kafkastore.storage import Storage
from kafkastore.write.segments import write_segment
from kafkastore.topics.topic_config import TopicConfig
from kafkastore.topics.admin import alter_topic
from tests.faults import faulty_storage
from tests.helpers.compaction import (DAY, T0, TOPIC, check_compacted, latest_manifest,
                                      latest_per_key, make_topic, produce, produce_segments,
                                      read_all)


_ids = itertools.count()


def entry(base, nxt, *, size=100, max_ts=T0, min_ts=None, horizon=None, sid=None) -> SegmentEntry:
    return SegmentEntry(base_offset=base, next_offset=nxt, record_count=nxt - base, size=size,
                        min_timestamp=max_ts if min_ts is None else min_ts, max_timestamp=max_ts,
                        segment_id=sid or f"s{next(_ids)}", writer_id=1, leader_epoch=0, checksum=0,
                        delete_horizon_ms=horizon)


def manifest_of(*segments, cleaner=0, producers=None) -> Manifest:
    m = apply(None, [AppendSegments(tuple(segments)), SetCleanerOffset(cleaner)], topic=TOPIC,
              partition=0)
    if producers:
        m = replace(m, producers=producers)
    return m


def cfg(**kw) -> TopicConfig:
    conf = {"cleanup.policy": "compact"}
    conf.update({k.replace("_", "."): v for k, v in kw.items()})
    return TopicConfig(conf)


@pytest.fixture
def storage(local_root):
    return Storage(local_root)


# ---------------------------------------------------------------------------
# selection (pure)
# ---------------------------------------------------------------------------

def test_topics_without_compact_are_skipped():
    m = manifest_of(entry(0, 10), entry(10, 20))
    plan = plan_cleaning(m, TopicConfig({"cleanup.policy": "delete"}), T0)
    assert isinstance(plan, Skip) and "no compact" in plan.reason
    assert isinstance(plan_cleaning(None, cfg(), T0), Skip)


def test_the_head_segment_alone_is_never_cleaned():
    plan = plan_cleaning(manifest_of(entry(0, 10)), cfg(), T0, force=True)
    assert isinstance(plan, Skip) and "head segment" in plan.reason


def test_dirty_ratio_must_exceed_min_cleanable_dirty_ratio():
    m = manifest_of(entry(0, 10, size=100), entry(10, 20, size=100), entry(20, 30), cleaner=10)
    assert dirty_ratio(100, 100) == 0.5
    skip = plan_cleaning(m, cfg(min_cleanable_dirty_ratio=0.5), T0)
    assert isinstance(skip, Skip) and "0.500 <=" in skip.reason  # Kafka's strict >
    plan = plan_cleaning(m, cfg(min_cleanable_dirty_ratio=0.4), T0)
    assert isinstance(plan, CleaningPlan)
    assert (plan.first_dirty_offset, plan.first_uncleanable_offset) == (10, 20)
    assert plan.dirty_ratio == 0.5 and [s.base_offset for s in plan.segments] == [0, 10]


def test_min_compaction_lag_holds_back_young_segments():
    m = manifest_of(entry(0, 10, max_ts=T0 - 1000), entry(10, 20, max_ts=T0 - 10), entry(20, 30))
    plan = plan_cleaning(m, cfg(min_compaction_lag_ms=100), T0)
    assert plan.first_uncleanable_offset == 10 and len(plan.segments) == 1
    skip = plan_cleaning(m, cfg(min_compaction_lag_ms=5000), T0)
    assert isinstance(skip, Skip) and "min.compaction.lag.ms" in skip.reason


def test_max_compaction_lag_forces_a_clean_below_the_ratio():
    m = manifest_of(entry(0, 10, size=1000), entry(10, 20, size=10, min_ts=T0 - 5000),
                    entry(20, 30), cleaner=10)
    assert isinstance(plan_cleaning(m, cfg(), T0), Skip)          # ratio 10/1010
    plan = plan_cleaning(m, cfg(max_compaction_lag_ms=1000), T0)
    assert isinstance(plan, CleaningPlan) and "max.compaction.lag.ms" in plan.reason


def test_an_expired_delete_horizon_triggers_a_clean_without_dirty_data():
    m = manifest_of(entry(0, 10, horizon=T0), entry(10, 20), cleaner=10)
    assert isinstance(plan_cleaning(m, cfg(), T0 - 1), Skip)
    plan = plan_cleaning(m, cfg(), T0)
    assert isinstance(plan, CleaningPlan) and "delete horizon" in plan.reason
    assert plan.first_dirty_offset == plan.first_uncleanable_offset == 10


def test_never_clean_past_an_open_transaction():
    m = manifest_of(entry(0, 10), entry(10, 20), entry(20, 30), entry(30, 40),
                    producers={5: ProducerState(epoch=0, txn_first_offset=25)})
    plan = plan_cleaning(m, cfg(), T0)
    # The LSO (25) falls inside [20, 30): that whole segment stays dirty.
    assert plan.first_uncleanable_offset == 20
    m = manifest_of(entry(0, 10), entry(10, 20), producers={5: ProducerState(0, txn_first_offset=3)})
    skip = plan_cleaning(m, cfg(), T0, force=True)
    assert isinstance(skip, Skip) and "open transaction at offset 3" in skip.reason


def test_a_cleaner_offset_outside_the_log_is_reset_to_the_log_start():
    m = manifest_of(entry(0, 10), entry(10, 20), entry(20, 30), cleaner=20)
    m = apply(m, [AdvanceLogStart(10)])
    m = apply(m, [SetCleanerOffset(5)])
    plan = plan_cleaning(m, cfg(), T0)
    assert plan.first_dirty_offset == 10


def test_force_ignores_the_ratio():
    m = manifest_of(entry(0, 10, size=1000), entry(10, 20, size=1), entry(20, 30), cleaner=10)
    assert plan_cleaning(m, cfg(), T0, force=True).reason == "forced"


def test_groups_by_size_index_size_and_int32_offsets():
    segs = [entry(0, 10, size=40), entry(10, 20, size=40), entry(20, 30, size=40), entry(30, 40, size=0)]
    groups = group_segments_by_size(segs, 100, 10 ** 6, 40)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30]]
    big = [entry(0, 10), entry(10, 2 ** 31 + 5), entry(2 ** 31 + 5, 2 ** 31 + 10)]
    groups = group_segments_by_size(big, 10 ** 9, 10 ** 6, 2 ** 31 + 10)
    assert [len(g) for g in groups] == [1, 2]   # [10, 2^31+5) cannot join offset 0


# ---------------------------------------------------------------------------
# rewriting (local key map)
# ---------------------------------------------------------------------------

def test_compaction_keeps_offsets_batches_and_the_last_value_of_every_key(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1"), ("b", "1")], [("a", "2"), ("c", "1"), ("b", "2")],
                               [("a", "3")], [("d", "1")]])
    before = read_all(storage)
    old = {s.segment_id for s in latest_manifest(storage).segments}
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_CLEANED and res.first_uncleanable_offset == 6
    after = read_all(storage)
    check_compacted(before, after, 6)
    assert after == [(3, "c", "1"), (4, "b", "2"), (5, "a", "3"), (6, "d", "1")]
    m = latest_manifest(storage)
    assert m.cleaner_offset == 6
    assert [(s.base_offset, s.next_offset) for s in m.segments] == [(0, 6), (6, 7)]  # one group
    new = m.segments[0]
    assert new.segment_id not in old and new.writer_id == COMPACTION_WRITER_ID
    # Every batch keeps its base offset and last offset delta (hence its producer's sequences).
    log = storage.get(new.paths(TOPIC, 0)[".log"])
    headers = [h for _, h in iter_batches(log)]
    assert [(h.base_offset, h.last_offset, h.record_count, h.base_sequence) for h in headers] == [
        (2, 4, 2, 2), (5, 5, 1, 5)]
    assert headers[0].producer_id == 1


def test_a_clean_log_is_left_as_it_is(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1"), ("b", "1")], [("c", "1")]])
    ids = latest_manifest(storage).segment_ids()
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_CLEANED
    m = latest_manifest(storage)
    assert m.segment_ids() == ids and m.cleaner_offset == 2   # only the checkpoint moved


def test_tombstones_get_a_delete_horizon_and_go_after_it(storage):
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=1000)
    produce_segments(storage, [[("a", "1"), ("b", "1")], [("a", None)], [("c", "1")]])
    compact_partition_local(storage, TOPIC, 0, T0 + 10)
    assert read_all(storage) == [(1, "b", "1"), (2, "a", None), (3, "c", "1")]
    m = latest_manifest(storage)
    assert m.segments[0].delete_horizon_ms == T0 + 10 + 1000
    log = storage.get(m.segments[0].paths(TOPIC, 0)[".log"])
    batches = [decode_batch(log, pos) for pos, _ in iter_batches(log)]
    tomb_header, tomb_records = batches[-1]
    assert tomb_header.attributes & DELETE_HORIZON_MASK
    assert tomb_header.base_timestamp == T0 + 1010 and tomb_records[0].timestamp == T0
    # Before the horizon nothing is due, and a forced clean keeps the tombstone; at the
    # horizon it goes without new data.
    assert compact_partition_local(storage, TOPIC, 0, T0 + 1009).status == STATUS_SKIPPED
    assert compact_partition_local(storage, TOPIC, 0, T0 + 1009, force=True).status == STATUS_CLEANED
    assert read_all(storage) == [(1, "b", "1"), (2, "a", None), (3, "c", "1")]
    res = compact_partition_local(storage, TOPIC, 0, T0 + 1010)
    assert res.status == STATUS_CLEANED and "delete horizon" in res.reason
    assert read_all(storage) == [(1, "b", "1"), (3, "c", "1")]
    assert latest_manifest(storage).segments[0].delete_horizon_ms is None


def test_a_superseded_tombstone_goes_at_once(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1")], [("a", None)], [("a", "2")], [("z", "1")]])
    compact_partition_local(storage, TOPIC, 0, T0)
    assert read_all(storage) == [(2, "a", "2"), (3, "z", "1")]


def test_an_all_removed_group_leaves_an_empty_segment_that_later_merges(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1")], [("a", "2")], [("a", "3")], [("z", "1")]])
    compact_partition_local(storage, TOPIC, 0, T0)
    first = latest_manifest(storage).segments[0]
    assert (first.base_offset, first.next_offset, first.record_count) == (0, 3, 1)
    # Now with several groups (tiny segment.bytes): the first ones end up empty.
    other = Storage(storage.url + "-2")
    make_topic(other, segment_bytes=100)
    produce_segments(other, [[("a", str(i))] for i in range(6)] + [[("z", "1")]])
    compact_partition_local(other, TOPIC, 0, T0)
    m = latest_manifest(other)
    empty = [s for s in m.segments if s.record_count == 0]
    assert empty and all(s.size == 0 and s.min_timestamp == -1 for s in empty)
    assert read_all(other) == [(5, "a", "5"), (6, "z", "1")]
    produce(other, [("y", "1")])
    compact_partition_local(other, TOPIC, 0, T0, force=True)
    m = latest_manifest(other)
    assert sum(1 for s in m.segments if s.record_count == 0) < len(empty)
    assert read_all(other) == [(5, "a", "5"), (6, "z", "1"), (7, "y", "1")]


def test_rebuilt_batches_use_the_topic_codec_and_copies_stay_as_they_were(storage):
    make_topic(storage, segment_bytes=10 ** 6)          # compression.type=producer
    broker = Broker(storage, clock=lambda: T0, producer_id=1, compression="gzip")
    produce(storage, [("a", "1"), ("b", "1")], broker=broker)
    produce(storage, [("c", "1")], broker=broker)
    produce(storage, [("a", "2")], broker=broker)
    produce(storage, [("z", "1")], broker=broker)
    alter_topic(storage, TOPIC, set_configs={"compression.type": "zstd"})
    compact_partition_local(storage, TOPIC, 0, T0)
    m = latest_manifest(storage)
    log = storage.get(m.segments[0].paths(TOPIC, 0)[".log"])
    codecs = {h.base_offset: h.compression for _, h in iter_batches(log)}
    assert codecs == {0: Compression.ZSTD, 2: Compression.GZIP, 3: Compression.GZIP}
    assert read_all(storage)[:3] == [(1, "b", "1"), (2, "c", "1"), (3, "a", "2")]


def append_raw(storage: Storage, records, *, topic: str = TOPIC, partition: int = 0) -> SegmentEntry:
    """Commit one segment holding ``records`` (kafkastore.format.record_batch.Record, offsets from the
    high watermark) in one batch, bypassing the broker's checks (as an imported Kafka log would)."""
    store = ManifestStore(storage, topic, partition)
    hw = store.latest().high_watermark if store.latest() else 0
    records = [replace(r, offset=hw + i) for i, r in enumerate(records)]
    builder = SegmentBuilder(hw)
    builder.append(encode_batch(records))
    built = builder.build()
    seg = write_segment(storage, topic, partition, built.stats, built.log, built.index,
                        built.timeindex, writer_id=1, leader_epoch=0)
    store.commit(lambda m: ([AppendSegments((seg,))], []), operation="append")
    return seg


def test_records_without_a_key_are_removed(storage):
    # The broker refuses them on compacted topics; an imported Kafka log may hold some.
    make_topic(storage, segment_bytes=10 ** 6)
    append_raw(storage, [Record(0, T0, None, b"x"), Record(1, T0, b"a", b"1")])
    produce(storage, [("b", "1")])
    compact_partition_local(storage, TOPIC, 0, T0)
    assert read_all(storage) == [(1, "a", "1"), (2, "b", "1")]


def _txn(storage, items, *, abort, pid=9, ts=T0):
    broker = Broker(storage, clock=lambda: ts, producer_id=pid)
    broker.begin_transaction()
    produce(storage, items, broker=broker, flush=False, ts=ts)
    return broker.abort_transaction() if abort else broker.commit_transaction()


def _batches(storage):
    m = latest_manifest(storage)
    out = []
    for s in m.segments:
        log = storage.get(s.paths(TOPIC, 0)[".log"])
        out.extend(h for _, h in iter_batches(log))
    return out


def test_aborted_transactions_are_removed_and_their_marker_later(storage):
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=1000)
    produce(storage, [("a", "1")])
    _txn(storage, [("a", "x"), ("b", "x")], abort=True)          # offsets 1-2, marker at 3
    produce(storage, [("c", "1")])
    produce(storage, [("z", "1")])
    assert read_all(storage) == [(0, "a", "1"), (4, "c", "1"), (5, "z", "1")]
    compact_partition_local(storage, TOPIC, 0, T0)
    assert read_all(storage) == [(0, "a", "1"), (4, "c", "1"), (5, "z", "1")]
    controls = [h for h in _batches(storage) if h.is_control]
    assert [(h.base_offset, h.delete_horizon_ms) for h in controls] == [(3, None)]   # data was there
    assert not any(h.is_transactional and not h.is_control for h in _batches(storage))
    assert latest_manifest(storage).segments[0].aborted_txns == ((9, 1, 3),)
    compact_partition_local(storage, TOPIC, 0, T0 + 5, force=True)                 # no data left
    controls = [h for h in _batches(storage) if h.is_control]
    assert [(h.base_offset, h.delete_horizon_ms) for h in controls] == [(3, T0 + 1005)]
    assert compact_partition_local(storage, TOPIC, 0, T0 + 1005).status == STATUS_CLEANED
    assert not [h for h in _batches(storage) if h.is_control]
    assert latest_manifest(storage).segments[0].aborted_txns == ()
    assert read_all(storage) == [(0, "a", "1"), (4, "c", "1"), (5, "z", "1")]


def test_a_commit_marker_stays_while_its_data_does(storage):
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=1000)
    _txn(storage, [("a", "1")], abort=False)                     # data 0, marker 1
    produce(storage, [("b", "1")])
    produce(storage, [("z", "1")])
    compact_partition_local(storage, TOPIC, 0, T0)
    assert [(h.base_offset, h.delete_horizon_ms) for h in _batches(storage) if h.is_control] == [(1, None)]
    produce(storage, [("a", "2")])                               # supersedes the transaction's data
    produce(storage, [("y", "1")])
    compact_partition_local(storage, TOPIC, 0, T0 + 1, force=True)
    assert (0, "a", "1") not in read_all(storage)
    # The data was still there when this pass started: the marker stays, without a horizon.
    assert [(h.base_offset, h.delete_horizon_ms) for h in _batches(storage) if h.is_control] == [(1, None)]
    compact_partition_local(storage, TOPIC, 0, T0 + 2, force=True)
    assert [h.delete_horizon_ms for h in _batches(storage) if h.is_control] == [T0 + 1002]
    compact_partition_local(storage, TOPIC, 0, T0 + 1002)
    assert not [h for h in _batches(storage) if h.is_control]


def test_transaction_data_in_an_earlier_group_keeps_its_marker(storage):
    make_topic(storage, segment_bytes=120, delete_retention_ms=1000)
    broker = Broker(storage, clock=lambda: T0, producer_id=9)
    broker.begin_transaction()
    produce(storage, [("a", "1")], broker=broker)                # a segment of its own
    produce(storage, [("b", "1")])                               # another producer, another segment
    broker.commit_transaction()                                  # the marker, in a later segment
    produce(storage, [("z", "1")])
    m, plan = load_plan(storage, TOPIC, 0, T0)
    groups = group_specs([plan])
    assert len(groups) >= 2
    tasks = scan_tasks(storage, [plan], groups, [m])
    keep, carry = local_survivors(storage, [plan], groups, tasks)
    marker_group = next(g for g in groups if any(s.base_offset <= 2 < s.next_offset for s in g.segments))
    assert marker_group.index > 0 and carry[marker_group.index] == {9}
    compact_partition_local(storage, TOPIC, 0, T0)
    assert [(h.base_offset, h.delete_horizon_ms) for h in _batches(storage) if h.is_control] == [(2, None)]


def test_a_corrupt_source_segment_stops_the_partition_and_commits_nothing(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1")], [("a", "2")], [("z", "1")]])
    m = latest_manifest(storage)
    path = m.segments[0].paths(TOPIC, 0)[".log"]
    data = bytearray(storage.get(path))
    data[-1] ^= 0xFF
    storage.put(path, bytes(data))
    with pytest.raises(CorruptRecordError):
        compact_partition_local(storage, TOPIC, 0, T0)
    assert latest_manifest(storage).version == m.version


def test_group_results_travel_as_json(storage):
    make_topic(storage, segment_bytes=10 ** 6)
    produce_segments(storage, [[("a", "1")], [("a", "2")], [("z", "1")]])
    m, plan = load_plan(storage, TOPIC, 0, T0)
    groups = group_specs([plan])
    keep, carry = local_survivors(storage, [plan], groups, scan_tasks(storage, [plan], groups, [m]))
    res = rewrite_group(storage, plan.context, groups[0], keep[0], carry[0], upload=False)
    assert GroupResult.from_json(res.to_json()) == res and res.uploaded_ms is None


# ---------------------------------------------------------------------------
# the swap: crashes, lost responses, concurrent writers (every backend)
# ---------------------------------------------------------------------------

def _scenario(storage):
    make_topic(storage, segment_bytes=150, delete_retention_ms=DAY)
    produce_segments(storage, [[("a", "1"), ("b", "1")], [("a", "2"), ("c", "1")], [("b", None)],
                               [("a", "3"), ("d", "1")], [("e", "1")]])


def _expected_after(before):
    return {k: v for k, v in latest_per_key(before).items()}


@pytest.mark.parametrize("nth", [1, 2])
def test_crash_after_uploading_some_segments_leaves_the_old_log(root_url, nth):
    plain = Storage(root_url)
    _scenario(plain)
    before, version = read_all(plain), latest_manifest(plain).version
    storage, fs = faulty_storage(root_url)
    calls = itertools.count(1)
    fs.inject("write", match=lambda op, path: path.endswith(".log") and next(calls) == nth, count=None)
    with pytest.raises(StorageError):
        compact_partition_local(storage, TOPIC, 0, T0)
    assert latest_manifest(plain).version == version and read_all(plain) == before
    res = compact_partition_local(plain, TOPIC, 0, T0)          # a later run cleans as usual
    assert res.status == STATUS_CLEANED
    after = read_all(plain)
    check_compacted(before, after, res.first_uncleanable_offset)
    assert latest_per_key(after) == _expected_after(before)


def test_crash_before_the_commit_leaves_the_old_log(root_url):
    plain = Storage(root_url)
    _scenario(plain)
    before, version = read_all(plain), latest_manifest(plain).version
    storage, fs = faulty_storage(root_url)
    ManifestStore.backoff_initial_s, saved = 0.0, ManifestStore.backoff_initial_s
    try:
        fs.fail_before_write(match="_manifest/", count=None)
        with pytest.raises(CommitUnknownError):
            compact_partition_local(storage, TOPIC, 0, T0)
    finally:
        ManifestStore.backoff_initial_s = saved
    assert latest_manifest(plain).version == version and read_all(plain) == before


def test_a_lost_commit_response_is_read_back(root_url):
    plain = Storage(root_url)
    _scenario(plain)
    before, version = read_all(plain), latest_manifest(plain).version
    storage, fs = faulty_storage(root_url)
    fs.lose_response(match="_manifest/")
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_CLEANED and res.version == version + 1
    assert latest_manifest(plain).version == version + 1
    after = read_all(plain)
    check_compacted(before, after, res.first_uncleanable_offset)
    assert latest_per_key(after) == _expected_after(before)


def test_broker_appends_during_the_swap_are_kept(root_url):
    plain = Storage(root_url)
    _scenario(plain)
    before = read_all(plain)
    storage, fs = faulty_storage(root_url)
    fs.on_write(lambda op, path: produce(plain, [("late", "1"), ("a", "4")]), match="_manifest/")
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_CLEANED
    after = read_all(plain)
    hw = before[-1][0] + 1
    assert after[-2:] == [(hw, "late", "1"), (hw + 1, "a", "4")]
    check_compacted(before, [r for r in after if r[0] < hw], res.first_uncleanable_offset)


def test_retention_during_compaction_makes_it_give_up(local_root):
    plain = Storage(local_root)
    _scenario(plain)
    storage, fs = faulty_storage(local_root)

    def retention(op, path):
        store = ManifestStore(plain, TOPIC, 0)
        second = store.latest().segments[1].base_offset
        store.commit(lambda m: ([AdvanceLogStart(second)], []), operation="retention")

    fs.on_write(retention, match="_manifest/")
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_GAVE_UP and "replaced or removed" in res.reason
    m = latest_manifest(plain)
    assert m.cleaner_offset == 0 and all(s.writer_id != COMPACTION_WRITER_ID for s in m.segments)
    # The rewritten files stay (unlisted) for GC.
    listed = {p for s in m.segments for p in s.paths(TOPIC, 0).values()}
    stray = [o.path for o in plain.list(f"topics/{TOPIC}/0") if o.path.endswith(".log")
             and o.path not in listed]
    assert stray


def test_a_slow_rewrite_gives_up_before_gc_could_take_its_files(local_root):
    storage = Storage(local_root)
    _scenario(storage)
    version = latest_manifest(storage).version
    times = iter([1000.0] + [1000.0 + 31.0] * 10)   # upload at t, commit 31 s later (grace 60 s)
    res = compact_partition_local(storage, TOPIC, 0, T0, clock=lambda: next(times))
    assert res.status == STATUS_GAVE_UP and "file.delete.delay.ms" in res.reason
    assert latest_manifest(storage).version == version


def test_a_reader_of_the_old_version_keeps_reading_after_the_swap(root_url):
    storage = Storage(root_url)
    _scenario(storage)
    old = latest_manifest(storage)
    before = read_all(storage, manifest=old)
    assert compact_partition_local(storage, TOPIC, 0, T0).status == STATUS_CLEANED
    assert latest_manifest(storage).version > old.version
    assert read_all(storage, manifest=old) == before


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.tuples(st.sampled_from("abcde"),
                                  st.one_of(st.none(), st.text("xyz", max_size=30)),
                                  st.lists(st.tuples(st.sampled_from(["h", "é"]),
                                                     st.one_of(st.none(), st.binary(max_size=4))),
                                           max_size=2),
                                  st.integers(0, 5000)),
                        min_size=2, max_size=40),
       log_append=st.booleans())
def test_rebuilt_batches_equal_the_pure_encoder_of_their_records(tmp_path_factory, records,
                                                                 log_append):
    """The native rewrite (survivors encoded from the decoded Arrow buffers) writes every
    batch exactly as the pure encoder writes the same records with the same header."""
    storage = Storage(tmp_path_factory.mktemp("c").as_uri())
    make_topic(storage, segment_bytes=10 ** 6,
               **({"message_timestamp_type": "LogAppendTime"} if log_append else {}))
    append_raw(storage, [Record(i, T0 + ts, k.encode(), v if v is None else v.encode(), tuple(hs))
                         for i, (k, v, hs, ts) in enumerate(records)])
    produce(storage, [("z", "1")])
    before = read_all(storage)
    compact_partition_local(storage, TOPIC, 0, T0 + 10_000)
    check_compacted(before, read_all(storage), len(records))
    for s in latest_manifest(storage).segments:
        log = storage.get(s.paths(TOPIC, 0)[".log"])
        for pos, h in iter_batches(log):
            _, recs = decode_batch(log, pos)
            if h.is_control or not recs:
                continue
            again = encode_batch(recs, compression=h.compression, timestamp_type=h.timestamp_type,
                                 producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                                 base_sequence=h.base_sequence,
                                 partition_leader_epoch=h.partition_leader_epoch,
                                 transactional=h.is_transactional, base_offset=h.base_offset,
                                 last_offset=h.last_offset, delete_horizon_ms=h.delete_horizon_ms,
                                 max_timestamp=h.max_timestamp if h.timestamp_type else None)
            assert again == bytes(log[pos:pos + h.size])


def _merge_now(storage, first: int, count: int) -> None:
    """Merge ``count`` live segments from index ``first`` in one commit, as housekeeping would."""
    from kafkastore.manifest import AssertSegmentsPresent, ReplaceSegments
    from kafkastore.maintenance.merge import MergeRun, build_merged

    store = ManifestStore(storage, TOPIC, 0)
    run = MergeRun(tuple(store.latest().segments[first:first + count]), generation=1)
    entry = build_merged(storage, TOPIC, 0, run, index_interval_bytes=4096)
    store.commit(lambda m: ([ReplaceSegments(run.segment_ids, (entry,))],
                            [AssertSegmentsPresent(run.segment_ids)]), operation="merge")


def test_a_merge_inside_a_cleaned_group_during_the_swap_is_taken_in(local_root):
    """Housekeeping merges small segments of a served topic at any time: a compaction whose
    group was merged meanwhile (same bytes, same offsets) still swaps its rewrite in."""
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10_000, delete_retention_ms=DAY)
    produce_segments(plain, [[("a", "1"), ("b", "1")], [("a", "2"), ("c", "1")], [("b", None)],
                             [("a", "3"), ("d", "1")], [("e", "1")]])
    before = read_all(plain)
    storage, fs = faulty_storage(local_root)
    fs.on_write(lambda op, path: _merge_now(plain, 0, 2), match="_manifest/")
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_CLEANED, res.reason
    after = read_all(plain)
    check_compacted(before, after, res.first_uncleanable_offset)
    assert latest_per_key(after) == _expected_after(before)
    assert not any(s.segment_id.startswith("m1g") for s in latest_manifest(plain).segments)


def test_a_merge_across_a_cleaned_group_bound_makes_compaction_give_up(local_root):
    plain = Storage(local_root)
    make_topic(plain, segment_bytes=10_000, delete_retention_ms=DAY)
    produce_segments(plain, [[("a", "1"), ("b", "1")], [("a", "2"), ("c", "1")], [("b", None)],
                             [("a", "3"), ("d", "1")], [("e", "1")]])
    before = read_all(plain)
    storage, fs = faulty_storage(local_root)
    fs.on_write(lambda op, path: _merge_now(plain, 3, 2), match="_manifest/")  # into the head
    res = compact_partition_local(storage, TOPIC, 0, T0)
    assert res.status == STATUS_GAVE_UP and "replaced or removed" in res.reason
    assert read_all(plain) == before


def test_one_job_over_two_partitions_commits_both(local_root):
    """The Spark job numbers groups across all partitions of a job, so a group's number is no
    index into its own partition's plan (the demo's two-partition compaction hit that)."""
    from kafkastore.maintenance.compaction import group_specs, load_plan, local_survivors, scan_tasks
    from kafkastore.maintenance.compaction_rewrite import finish_partition, rewrite_group

    plain = Storage(local_root)
    make_topic(plain, partitions=2, segment_bytes=150, delete_retention_ms=DAY)
    rounds = [[("a", "1"), ("b", "1")], [("a", "2"), ("c", "1")], [("b", None)],
              [("a", "3"), ("d", "1")], [("e", "1")]]
    for p in (0, 1):
        produce_segments(plain, rounds, partition=p)
    before = {p: read_all(plain, partition=p) for p in (0, 1)}
    loaded = [load_plan(plain, TOPIC, p, T0) for p in (0, 1)]
    plans = [plan for _, plan in loaded]
    groups = group_specs(plans)
    tasks = scan_tasks(plain, plans, groups, [m for m, _ in loaded])
    keep, carry = local_survivors(plain, plans, groups, tasks)
    for plan in plans:
        mine = [g for g in groups if plans[g.plan] is plan]
        results = [rewrite_group(plain, plan.context, g, keep[g.index], carry[g.index]) for g in mine]
        res = finish_partition(plain, plan, results, 0.0)
        assert res.status == STATUS_CLEANED, res.reason
        after = read_all(plain, partition=plan.partition)
        check_compacted(before[plan.partition], after, res.first_uncleanable_offset)
