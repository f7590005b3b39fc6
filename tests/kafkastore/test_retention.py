"""Retention planning (pure), its commits, and delete-records: one test per Kafka guarantee."""
from __future__ import annotations

import itertools
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.errors import ConfigError, OffsetOutOfRangeError, UnknownTopicError
from kafkastore.manifest import AdvanceLogStart, AppendSegments, ManifestStore, SegmentEntry, apply
from kafkastore.read.reader import PartitionReader
from kafkastore.maintenance.retention import (REASON_SIZE, REASON_TIME, apply_retention, delete_records,
                                              plan_retention, retention_for_topic)
from kafkastore.storage import Storage
from kafkastore.topics.topic_config import TopicConfig
from kafkastore.topics.admin import create_topic
from tests.helpers.roots import make_root_url
from tests.helpers.logdata import append_segment

T, P = "events", 0
DAY = 24 * 3600 * 1000
_ids = itertools.count()


def seg(base, nxt, *, size=100, max_ts=1000, sid=None):
    return SegmentEntry(base_offset=base, next_offset=nxt, record_count=nxt - base, size=size,
                        min_timestamp=-1 if max_ts == -1 else 0, max_timestamp=max_ts,
                        segment_id=sid or f"s{next(_ids)}", writer_id=1, leader_epoch=0, checksum=0)


def manifest(*segments, log_start=None):
    m = apply(None, [AppendSegments(tuple(segments))], topic=T, partition=P)
    if log_start is not None:
        m = apply(m, [AdvanceLogStart(log_start)])
    return m


def chain(specs, **kw):
    """Segments of 10 offsets each, from (size, max_ts) pairs."""
    return manifest(*[seg(10 * i, 10 * i + 10, size=size, max_ts=ts) for i, (size, ts) in enumerate(specs)],
                    **kw)


def cfg(**kw):
    return TopicConfig({k.replace("_", "."): v for k, v in kw.items()})


def dropped_ids(plan):
    return [s.segment_id for s in plan.drop]


# ---------------------------------------------------------------------------
# planning: Kafka's rules
# ---------------------------------------------------------------------------

def test_time_based_drops_segments_older_than_retention_ms():
    m = chain([(100, 1000), (100, 2000), (100, 3000), (100, 4000)])
    plan = plan_retention(m, cfg(retention_ms=1500), now_ms=4000)
    assert plan.new_log_start_offset == 20 and len(plan.drop) == 2
    assert set(plan.reasons.values()) == {REASON_TIME}
    # Strictly older (Kafka: now - largestTimestamp > retention.ms).
    assert plan_retention(m, cfg(retention_ms=2000), now_ms=4000).new_log_start_offset == 10


def test_time_based_stops_at_the_first_segment_that_is_not_expired():
    m = chain([(100, 1000), (100, 9000), (100, 1000), (100, 9000)])
    plan = plan_retention(m, cfg(retention_ms=100), now_ms=5000)
    assert plan.new_log_start_offset == 10  # only a prefix can go


def test_size_based_drops_oldest_while_the_rest_still_reaches_retention_bytes():
    m = chain([(100, 1000)] * 4)
    plan = plan_retention(m, cfg(retention_bytes=250), now_ms=1000)
    # 400 - 100 = 300 >= 250: drop one; 300 - 100 = 200 < 250: stop (Kafka keeps up to a segment more).
    assert plan.new_log_start_offset == 10 and plan.reasons == {m.segments[0].segment_id: REASON_SIZE}
    assert plan_retention(m, cfg(retention_bytes=200), now_ms=1000).new_log_start_offset == 20
    assert not plan_retention(m, cfg(retention_bytes=400), now_ms=1000).changed
    assert not plan_retention(m, cfg(retention_bytes=10_000), now_ms=1000).changed


def test_size_then_time_as_kafka():
    # Size drops the first two (one of which is not expired), then time continues from there.
    m = chain([(100, 1000), (100, 9000), (100, 1000), (100, 1000), (100, 9000)])
    plan = plan_retention(m, cfg(retention_bytes=300, retention_ms=1000), now_ms=5000)
    assert plan.new_log_start_offset == 40
    assert [plan.reasons[s] for s in dropped_ids(plan)] == [REASON_SIZE] * 2 + [REASON_TIME] * 2


def test_never_drops_the_newest_segment():
    m = chain([(100, 1000)] * 3)
    for c in (cfg(retention_ms=0), cfg(retention_bytes=0), cfg(retention_ms=0, retention_bytes=0)):
        plan = plan_retention(m, c, now_ms=10 * DAY)
        assert plan.new_log_start_offset == 20 and len(plan.drop) == 2
    single = chain([(100, 1000)])
    assert not plan_retention(single, cfg(retention_ms=0, retention_bytes=0), now_ms=DAY).changed


def test_minus_one_disables():
    m = chain([(100, 1000)] * 3)
    plan = plan_retention(m, cfg(retention_ms=-1, retention_bytes=-1), now_ms=100 * 365 * DAY)
    assert not plan.changed and plan.drop == ()
    # retention.bytes accepts any negative value as "no limit".
    assert not plan_retention(m, cfg(retention_ms=-1, retention_bytes=-5), now_ms=DAY).changed


def test_compact_only_topics_are_untouched_and_compact_delete_is_not():
    m = chain([(100, 1000)] * 3)
    plan = plan_retention(m, cfg(cleanup_policy="compact", retention_ms=0, retention_bytes=0), now_ms=DAY)
    assert not plan.changed
    plan = plan_retention(m, cfg(cleanup_policy="compact,delete", retention_ms=0), now_ms=DAY)
    assert plan.new_log_start_offset == 20


def test_future_timestamp_without_write_time_blocks_as_in_kafka():
    future = 50 * 365 * DAY
    m = chain([(100, future), (100, 1000), (100, 1000)])
    plan = plan_retention(m, cfg(retention_ms=1000), now_ms=DAY)
    assert not plan.changed and plan.future_segments == (m.segments[0].segment_id,)


def test_future_timestamp_ages_from_the_segment_write_time():
    future = 50 * 365 * DAY
    m = chain([(100, future), (100, 1000), (100, 1000)])
    first = m.segments[0].segment_id
    # Written at t=5000: eligible once 1000 ms have passed since, not before.
    times = {first: 5000}
    assert not plan_retention(m, cfg(retention_ms=1000), now_ms=6000, segment_times=times).changed
    plan = plan_retention(m, cfg(retention_ms=1000), now_ms=6001, segment_times=times)
    assert plan.new_log_start_offset == 20  # and the segments behind it are no longer blocked


def test_segment_without_timestamps_ages_from_its_write_time():
    m = chain([(100, -1), (100, 1000)])
    sid = m.segments[0].segment_id
    assert not plan_retention(m, cfg(retention_ms=10), now_ms=DAY).changed
    assert plan_retention(m, cfg(retention_ms=10), now_ms=DAY, segment_times={sid: 0}).changed


def test_write_time_never_delays_retention():
    # A segment written after its records' timestamps (imported, compacted) ages from the timestamps.
    m = chain([(100, 1000), (100, 1000)])
    plan = plan_retention(m, cfg(retention_ms=10), now_ms=2000,
                          segment_times={m.segments[0].segment_id: 1999})
    assert plan.changed


def test_log_start_inside_a_segment_is_kept_or_advanced():
    m = chain([(100, 1000), (100, 1000), (100, 9000)], log_start=15)
    plan = plan_retention(m, cfg(retention_ms=10), now_ms=5000)
    assert plan.log_start_offset == 15 and plan.new_log_start_offset == 20
    m2 = chain([(100, 9000), (100, 9000)], log_start=5)
    assert plan_retention(m2, cfg(retention_ms=10), now_ms=5000).new_log_start_offset == 5


def test_unloaded_report_and_protection():
    m = chain([(100, 1000)] * 4)
    c = cfg(retention_ms=10)
    plan = plan_retention(m, c, now_ms=DAY, committed={"loaded": 40, "behind": 15, "far": 35})
    assert plan.new_log_start_offset == 30
    assert [(u.table, u.committed_offset, u.offsets_lost, u.newly_lost) for u in plan.unloaded] == [
        ("behind", 15, 15, True)]
    protected = plan_retention(m, c, now_ms=DAY, committed={"loaded": 40, "behind": 15},
                               protect_unloaded=True)
    # Only segments wholly below every table's committed offset go: [0, 10).
    assert protected.new_log_start_offset == 10 and protected.capped and protected.unloaded == ()
    assert set(protected.reasons) == {m.segments[0].segment_id}


def test_no_manifest_means_no_plan():
    assert plan_retention(None, cfg(retention_ms=0), now_ms=0) is None


# ---------------------------------------------------------------------------
# planning invariants
# ---------------------------------------------------------------------------

@st.composite
def manifests(draw):
    n = draw(st.integers(1, 8))
    now = 10_000
    ts = st.one_of(st.just(-1), st.integers(0, 2 * now), st.just(10 ** 12))
    lengths = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    segs, base = [], 0
    for i, length in enumerate(lengths):
        segs.append(seg(base, base + length, size=draw(st.integers(0, 300)), max_ts=draw(ts), sid=f"x{i}"))
        base += length
    start = draw(st.integers(0, lengths[0] - 1))
    m = manifest(*segs, log_start=start)
    times = draw(st.dictionaries(st.sampled_from([s.segment_id for s in segs]), st.integers(0, 2 * now)))
    return m, times


configs = st.builds(
    lambda policy, ms, size: TopicConfig({"cleanup.policy": policy, "retention.ms": ms,
                                          "retention.bytes": size}),
    st.sampled_from(["delete", "compact", "compact,delete"]),
    st.one_of(st.just(-1), st.integers(0, 20_000)),
    st.one_of(st.just(-1), st.integers(0, 2000)))


@settings(max_examples=300, deadline=None)
@given(manifests(), configs, st.integers(0, 25_000), st.integers(0, 5000),
       st.dictionaries(st.sampled_from("abc"), st.integers(0, 45)), st.booleans())
def test_plan_invariants(mt, config, now, later, committed, protect):
    m, times = mt
    plan = plan_retention(m, config, now, segment_times=times, committed=committed,
                          protect_unloaded=protect)
    k = len(plan.drop)
    assert plan.drop == m.segments[:k]  # a prefix
    assert k < len(m.segments)  # never the newest
    assert plan.new_log_start_offset >= m.log_start_offset  # only forward
    assert plan.new_log_start_offset == (max(m.log_start_offset, m.segments[k].base_offset) if k
                                         else m.log_start_offset)
    assert set(plan.reasons) == {s.segment_id for s in plan.drop}
    if not config.delete:
        assert k == 0
    if protect and committed:
        assert all(s.next_offset <= min(committed.values()) for s in plan.drop)
    # What the manifest makes of it: exactly the kept segments.
    new = apply(m, [AdvanceLogStart(plan.new_log_start_offset)])
    assert new.segments == m.segments[k:]
    # Idempotent: planning again on the result changes nothing.
    again = plan_retention(new, config, now, segment_times=times, committed=committed,
                           protect_unloaded=protect)
    assert not again.changed
    # Monotone in time: later never keeps what earlier drops.
    assert len(plan_retention(m, config, now + later, segment_times=times, committed=committed,
                              protect_unloaded=protect).drop) >= k


# ---------------------------------------------------------------------------
# committing
# ---------------------------------------------------------------------------

@pytest.fixture(params=["file", "memory"])
def storage(request, tmp_path):
    return Storage(make_root_url(request.param, tmp_path, request))


def old_log(storage, n=4, *, config=None, now=None):
    """A topic with ``n`` one-segment appends, 3 records each, timestamps ``DAY * i`` ago."""
    now = now if now is not None else int(time.time() * 1000)
    create_topic(storage, T, 1, config or {"retention.ms": DAY})
    for i in range(n):
        ts = now - (n - i) * DAY
        append_segment(storage, T, P, [ts, ts, ts])
    return now


def test_apply_retention_commits_advance_and_reads_fail_below(root_url):
    storage = Storage(root_url)
    now = old_log(storage, 4, config={"retention.ms": int(2.5 * DAY)})
    store = ManifestStore(storage, T, P)
    before = store.latest()
    res = apply_retention(storage, T, P, now)
    assert res.changed and (res.previous_log_start_offset, res.log_start_offset) == (0, 6)
    assert [s.segment_id for s in res.dropped] == before.segment_ids()[:2]
    assert res.version == before.version + 1 == store.latest().version
    assert res.bytes_dropped == sum(s.size for s in before.segments[:2])
    latest = PartitionReader(storage, T, P)
    assert latest.read(-2).column("offset").to_pylist() == list(range(6, 12))
    with pytest.raises(OffsetOutOfRangeError):
        latest.read(0)
    # A reader on the old version still reads everything (files are gc's business, after a grace).
    old = PartitionReader(storage, T, P, manifest=before)
    assert old.read(0).column("offset").to_pylist() == list(range(12))


def test_apply_retention_twice_is_a_noop(storage):
    now = old_log(storage, 4, config={"retention.ms": int(1.5 * DAY)})
    first = apply_retention(storage, T, P, now)
    version = ManifestStore(storage, T, P).latest().version
    second = apply_retention(storage, T, P, now)
    assert first.changed and not second.changed and second.dropped == ()
    assert second.log_start_offset == first.log_start_offset == 9
    assert ManifestStore(storage, T, P).latest().version == version


def test_concurrent_runs_end_in_the_same_state(storage):
    now = old_log(storage, 6, config={"retention.ms": int(2.5 * DAY), "retention.bytes": 10 ** 6})
    results, errors = [], []
    barrier = threading.Barrier(4)

    def run():
        barrier.wait()
        try:
            results.append(apply_retention(storage, T, P, now))
        except Exception as exc:  # noqa: BLE001 - the test reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r.changed for r in results) == 1  # one commit; the others re-planned into a no-op
    assert {r.log_start_offset for r in results} == {12}
    history = ManifestStore(storage, T, P).history()
    assert [m.log_start_offset for m in history][-2:] == [0, 12]


def test_retention_while_a_writer_appends(storage):
    now = old_log(storage, 3, config={"retention.ms": int(1.5 * DAY)})
    stop = threading.Event()
    appended = []

    def writer():
        while not stop.is_set() and len(appended) < 20:
            appended.append(append_segment(storage, T, P, [now]))

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(5):
            apply_retention(storage, T, P, now)
    finally:
        stop.set()
        t.join()
    m = ManifestStore(storage, T, P).latest()
    assert m.log_start_offset == 6 and m.high_watermark == 9 + len(appended)


def test_compact_topic_is_left_alone(storage):
    now = old_log(storage, 3, config={"cleanup.policy": "compact", "retention.ms": 0,
                                      "retention.bytes": 0})
    assert not apply_retention(storage, T, P, now).changed
    assert ManifestStore(storage, T, P).latest().log_start_offset == 0


def test_future_timestamps_do_not_block_forever(storage):
    real_now = int(time.time() * 1000)
    create_topic(storage, T, 1, {"retention.ms": DAY})
    append_segment(storage, T, P, [real_now + 100 * 365 * DAY])  # a producer with a broken clock
    append_segment(storage, T, P, [real_now - 10 * DAY])
    append_segment(storage, T, P, [real_now])
    assert not apply_retention(storage, T, P, real_now).changed
    # Kafka would keep all of it until the year 2125; here one retention period after the write.
    res = apply_retention(storage, T, P, real_now + DAY + 60_000)
    assert res.log_start_offset == 2 and res.future_segments


def test_unloaded_tables_are_reported_and_protected(storage):
    now = old_log(storage, 4, config={"retention.ms": int(1.5 * DAY)})
    committed = {"orders_wh": {0: 12}, "slow_table": {0: 4}, "other_partition_only": {1: 0}}
    res = apply_retention(storage, T, P, now, committed_offsets=committed, protect_unloaded=True)
    assert res.log_start_offset == 3 and res.capped and res.unloaded == ()
    res = apply_retention(storage, T, P, now, committed_offsets=committed)
    assert res.log_start_offset == 9
    assert [(u.table, u.committed_offset, u.newly_lost) for u in res.newly_lost] == [("slow_table", 4, True)]
    again = apply_retention(storage, T, P, now, committed_offsets=committed)
    assert not again.changed and [u.newly_lost for u in again.unloaded] == [False]


def test_retention_for_topic_covers_every_partition(storage):
    now = int(time.time() * 1000)
    create_topic(storage, T, 3, {"retention.ms": DAY})
    for p in (0, 1):
        for age in (5, 4, 0):
            append_segment(storage, T, p, [now - age * DAY])
    results = retention_for_topic(storage, T, now)
    assert [(r.partition, r.log_start_offset, r.changed) for r in results] == [
        (0, 2, True), (1, 2, True), (2, 0, False)]


# ---------------------------------------------------------------------------
# delete-records
# ---------------------------------------------------------------------------

def test_delete_records_inside_a_segment(root_url):
    storage = Storage(root_url)
    old_log(storage, 3, config={"retention.ms": -1})
    store = ManifestStore(storage, T, P)
    before = store.latest()
    res = delete_records(storage, T, P, 4)
    assert (res.log_start_offset, res.dropped) == (4, (before.segments[0],))
    m = store.latest()
    assert m.log_start_offset == 4 and m.segments == before.segments[1:]  # [3, 6) stays
    reader = PartitionReader(storage, T, P)
    assert reader.read(-2).column("offset").to_pylist() == [4, 5, 6, 7, 8]
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(3)
    # Lower or equal: no-op; past the segment's end: it goes.
    assert not delete_records(storage, T, P, 2).changed
    assert not delete_records(storage, T, P, 4).changed
    assert delete_records(storage, T, P, 6).dropped == (before.segments[1],)


def test_delete_records_bounds(storage):
    old_log(storage, 2)
    with pytest.raises(OffsetOutOfRangeError):
        delete_records(storage, T, P, 7)
    with pytest.raises(UnknownTopicError):
        delete_records(storage, T, 1, 0)
    with pytest.raises(UnknownTopicError):
        apply_retention(storage, "nope", 0, 0)
    with pytest.raises(ConfigError):
        delete_records(storage, T, P, -2)
    res = delete_records(storage, T, P, -1)  # Kafka: -1 = the high watermark
    assert res.log_start_offset == res.high_watermark == 6
    m = ManifestStore(storage, T, P).latest()
    assert m.segments == () and m.log_start_offset == m.high_watermark == 6
    # The log goes on from there.
    append_segment(storage, T, P, [1])
    assert PartitionReader(storage, T, P).read(-2).column("offset").to_pylist() == [6]
