"""The offset manifest: pure apply, JSON, and ManifestStore commits under races and faults."""
from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from kafkastore import layout
from kafkastore.errors import (CommitConflict, CommitUnknownError, FencedError, KafkaStoreError,
                               OffsetOutOfRangeError, StorageError)
from kafkastore.manifest import (MAX_PRODUCER_BATCHES, AdvanceLogStart, AppendSegments, AssertHighWatermark,
                                 AssertLeaderEpoch, AssertLogStartOffset, AssertSegmentsPresent, AssertVersion,
                                 BatchMetadata, CommitInfo, CorruptMetadataError, InvalidUpdateError, Manifest,
                                 ManifestStore, ProducerState, ReplaceSegments, RequirementFailedError,
                                 SegmentEntry, SetCleanerOffset, SetExtra, SetLeaderEpoch, UpdateProducerState,
                                 apply, check_invariants)
from kafkastore.storage import Storage
from tests.faults import FaultyFS

T, P = "orders", 0
_ids = itertools.count()


@pytest.fixture(autouse=True)
def _synthetic_entries(metadata_only_commits):
    """The entries here have no files behind them (see tests/conftest.py)."""


def seg(base, nxt, *, sid=None, epoch=0, count=None, writer=1, **kw):
    return SegmentEntry(base_offset=base, next_offset=nxt, record_count=nxt - base if count is None else count,
                        size=10 * (nxt - base), min_timestamp=1000 + base, max_timestamp=1000 + nxt,
                        segment_id=sid or f"s{next(_ids)}", writer_id=writer, leader_epoch=epoch,
                        checksum=0xDEADBEEF, **kw)


def first(updates, requirements=()):
    return apply(None, updates, requirements, topic=T, partition=P)


# ---------------------------------------------------------------------------
# apply: the pure function
# ---------------------------------------------------------------------------

def test_first_commit_and_append():
    m = first([AppendSegments((seg(0, 10, sid="a"),))])
    assert (m.version, m.log_start_offset, m.high_watermark) == (1, 0, 10)
    m2 = apply(m, [AppendSegments((seg(10, 15, sid="b"), seg(15, 20, sid="c")))])
    assert m2.version == 2 and m2.high_watermark == 20 and m2.segment_ids() == ["a", "b", "c"]
    assert m.segment_ids() == ["a"]  # the base is untouched
    assert m2.segment_for(14).segment_id == "b" and m2.segment_for(20) is None
    assert [s.segment_id for s in m2.segments_from(15)] == ["c"]


def test_apply_needs_topic_for_first_commit():
    with pytest.raises(InvalidUpdateError):
        apply(None, [AppendSegments((seg(0, 1),))])
    m = first([AppendSegments((seg(0, 1),))])
    with pytest.raises(InvalidUpdateError):
        apply(m, [], topic="other")


@pytest.mark.parametrize("base", [9, 11])
def test_append_must_tile(base):
    m = first([AppendSegments((seg(0, 10),))])
    with pytest.raises(InvalidUpdateError):
        apply(m, [AppendSegments((seg(base, 20),))])


def test_append_batch_must_tile_internally_and_ids_unique():
    with pytest.raises(InvalidUpdateError, match="gap"):
        first([AppendSegments((seg(0, 5), seg(6, 8)))])
    with pytest.raises(InvalidUpdateError, match="overlaps"):
        first([AppendSegments((seg(0, 5), seg(4, 8)))])
    with pytest.raises(InvalidUpdateError, match="twice"):
        first([AppendSegments((seg(0, 5, sid="x"), seg(5, 8, sid="x")))])
    with pytest.raises(InvalidUpdateError):
        first([AppendSegments(())])


def test_append_to_empty_log_may_start_higher():
    m = first([AppendSegments((seg(1000, 1010),))])
    assert (m.log_start_offset, m.high_watermark) == (1000, 1010)
    emptied = apply(m, [AdvanceLogStart(1010)])
    assert emptied.segments == () and emptied.high_watermark == 1010
    with pytest.raises(InvalidUpdateError, match="below the high watermark"):
        apply(emptied, [AppendSegments((seg(5, 10),))])
    again = apply(emptied, [AppendSegments((seg(1010, 1020),))])
    assert again.log_start_offset == 1010


@pytest.mark.parametrize("bad", [
    dict(count=11),                      # more records than offsets
    dict(sid="not-alnum"),
    dict(aborted_txns=((1, 5, 12),)),    # past the segment
    dict(max_timestamp_offset=50),
    dict(delete_horizon_ms=-5),
])
def test_segment_entry_validation(bad):
    with pytest.raises(InvalidUpdateError):
        first([AppendSegments((seg(0, 10, **bad),))])


def test_segment_entry_rejects_empty_range_and_bad_checksum():
    with pytest.raises(InvalidUpdateError):
        first([AppendSegments((seg(5, 5),))])
    with pytest.raises(InvalidUpdateError):
        first([AppendSegments((replace(seg(0, 5), checksum=2 ** 32),))])
    with pytest.raises(InvalidUpdateError):
        seg(0, 5, aborted_txns=((1, 2),))


def test_replace_segments():
    m = first([AppendSegments((seg(0, 10, sid="a"), seg(10, 20, sid="b"), seg(20, 30, sid="c")))])
    m2 = apply(m, [ReplaceSegments(("a", "b"), (seg(0, 20, sid="ab", count=3),))],
               [AssertSegmentsPresent(("a", "b"))])
    assert m2.segment_ids() == ["ab", "c"] and m2.high_watermark == 30
    with pytest.raises(RequirementFailedError):
        apply(m2, [ReplaceSegments(("a",), (seg(0, 10),))])
    with pytest.raises(RequirementFailedError):
        apply(m2, [], [AssertSegmentsPresent(("a",))])
    with pytest.raises(InvalidUpdateError, match="contiguous"):
        apply(m, [ReplaceSegments(("a", "c"), (seg(0, 30),))])
    with pytest.raises(InvalidUpdateError, match="cover exactly"):
        apply(m, [ReplaceSegments(("b",), (seg(10, 19),))])
    with pytest.raises(InvalidUpdateError):  # the replacement must tile the range itself
        apply(m, [ReplaceSegments(("b",), (seg(10, 14), seg(15, 20)))])
    with pytest.raises(InvalidUpdateError):  # a new id may not clash with a remaining one
        apply(m, [ReplaceSegments(("b",), (seg(10, 20, sid="c"),))])


def test_advance_log_start():
    m = first([AppendSegments((seg(0, 10, sid="a"), seg(10, 20, sid="b")))])
    m2 = apply(m, [AdvanceLogStart(12)])
    assert m2.log_start_offset == 12 and m2.segment_ids() == ["b"]
    assert apply(m2, [AdvanceLogStart(5)]).log_start_offset == 12  # idempotent, never backwards
    m3 = apply(m, [AdvanceLogStart(10)])
    assert m3.segment_ids() == ["b"]
    with pytest.raises(OffsetOutOfRangeError):
        apply(m, [AdvanceLogStart(21)])
    with pytest.raises(InvalidUpdateError):
        apply(m, [AdvanceLogStart(-1)])
    m4 = apply(m, [AdvanceLogStart(20)])
    assert m4.segments == () and (m4.log_start_offset, m4.high_watermark) == (20, 20)


def test_leader_epoch_fencing():
    m = first([SetLeaderEpoch(3)])
    assert m.leader_epoch == 3
    with pytest.raises(FencedError):
        apply(m, [SetLeaderEpoch(2)])
    with pytest.raises(FencedError):
        apply(m, [AppendSegments((seg(0, 1),))], [AssertLeaderEpoch(2)])
    assert apply(m, [AppendSegments((seg(0, 1),))], [AssertLeaderEpoch(3)]).high_watermark == 1
    assert apply(m, [], [AssertLeaderEpoch(7)]).leader_epoch == 3


def test_producer_state():
    m = first([AppendSegments((seg(0, 100),))])
    st_ = ProducerState(epoch=1)
    for i in range(8):
        st_ = st_.with_batch(BatchMetadata(i * 10, i * 10 + 9, i * 10, i * 10 + 9, timestamp=i))
    assert len(st_.batches) == MAX_PRODUCER_BATCHES and st_.last_sequence == 79 and st_.last_offset == 79
    assert st_.find_batch(70, 79).first_offset == 70 and st_.find_batch(0, 9) is None
    m2 = apply(m, [UpdateProducerState(7, st_)])
    assert m2.producers[7].last_sequence == 79
    many = ProducerState(epoch=1, batches=tuple(BatchMetadata(i, i, i, i) for i in range(9)))
    assert len(apply(m, [UpdateProducerState(7, many)]).producers[7].batches) == MAX_PRODUCER_BATCHES
    with pytest.raises(FencedError):
        apply(m2, [UpdateProducerState(7, ProducerState(epoch=0))])
    with pytest.raises(InvalidUpdateError, match="high watermark"):
        apply(m, [UpdateProducerState(8, ProducerState(0, (BatchMetadata(0, 0, 100, 100),)))])
    assert 7 not in apply(m2, [UpdateProducerState(7, None)]).producers


def test_extra_and_cleaner_offset():
    m = first([AppendSegments((seg(0, 10),))])
    value = {"cleaned": [1, 2]}
    m2 = apply(m, [SetExtra("compaction", value), SetCleanerOffset(8)])
    value["cleaned"].append(3)  # no aliasing with the caller's object
    assert m2.extra == {"compaction": {"cleaned": [1, 2]}} and m2.cleaner_offset == 8
    assert "compaction" not in apply(m2, [SetExtra("compaction", None)]).extra
    with pytest.raises(InvalidUpdateError):
        apply(m, [SetExtra("x", object())])
    with pytest.raises(InvalidUpdateError):
        apply(m, [SetExtra("", 1)])
    with pytest.raises(InvalidUpdateError):
        apply(m, [SetCleanerOffset(11)])


def test_requirements():
    m = first([AppendSegments((seg(0, 10),))])
    apply(m, [], [AssertVersion(1), AssertHighWatermark(10), AssertLogStartOffset(0)])
    first([], [AssertVersion(0)])
    for req in (AssertVersion(2), AssertHighWatermark(9), AssertLogStartOffset(1)):
        with pytest.raises(RequirementFailedError):
            apply(m, [], [req])
    with pytest.raises(InvalidUpdateError):
        apply(m, ["not an update"])
    with pytest.raises(InvalidUpdateError):
        apply(m, [], ["not a requirement"])


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------

def full_manifest() -> Manifest:
    m = first([AppendSegments((seg(0, 10, sid="a", aborted_txns=((5, 2, 4),), max_timestamp_offset=3),
                               seg(10, 20, sid="b", delete_horizon_ms=123, index_size=8, timeindex_size=12))),
               SetLeaderEpoch(2),
               UpdateProducerState(42, ProducerState(1, (BatchMetadata(0, 4, 0, 4, 99),), 99, 5)),
               SetCleanerOffset(10), SetExtra("retention", {"last_run_ms": 5})])
    return replace(m, commit=CommitInfo("c0ffee", "append", "broker-1", 1_700_000_000_000))


def test_json_round_trip_and_shape():
    m = full_manifest()
    again = Manifest.from_json(m.to_json())
    assert again == m
    d = json.loads(m.to_json())
    assert list(d) == ["format", "kind", "topic", "partition", "version", "log_start_offset", "high_watermark",
                       "leader_epoch", "cleaner_offset", "segments", "producers", "commit", "extra"]
    assert d["high_watermark"] == 20 and d["producers"]["42"]["batches"][0]["last_offset"] == 4
    assert d["segments"][0]["aborted_txns"] == [[5, 2, 4]]
    assert d["commit"] == {"id": "c0ffee", "operation": "append", "writer": "broker-1",
                           "timestamp": 1_700_000_000_000}


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(format=99),
    lambda d: d.update(high_watermark=21),
    lambda d: d["segments"][1].update(base_offset=11),
    lambda d: d.pop("segments"),
    lambda d: d["segments"][0].update(record_count="ten"),
    lambda d: d.update(log_start_offset=25),
    lambda d: d.update(producers={"x": {}}),
    lambda d: d.update(topic="bad name!"),
])
def test_corrupt_json_is_rejected(mutate):
    d = json.loads(full_manifest().to_json())
    mutate(d)
    with pytest.raises(CorruptMetadataError):
        Manifest.from_json(json.dumps(d))


def test_not_json():
    for data in (b"", b"{", b"[]", b"\xff\xfe"):
        with pytest.raises(CorruptMetadataError):
            Manifest.from_json(data)


# ---------------------------------------------------------------------------
# hypothesis: random update sequences keep the invariants or raise typed errors
# ---------------------------------------------------------------------------

EXPECTED_ERRORS = (InvalidUpdateError, RequirementFailedError, FencedError, OffsetOutOfRangeError)


def independent_check(m: Manifest):
    """The invariants, restated naively (not by calling check_invariants)."""
    offsets = []
    for s in m.segments:
        assert s.base_offset < s.next_offset
        assert 0 <= s.record_count <= s.next_offset - s.base_offset
        offsets.extend(range(s.base_offset, s.next_offset))
    assert offsets == sorted(set(offsets))  # no overlap
    if m.segments:
        assert offsets == list(range(m.segments[0].base_offset, m.segments[-1].next_offset))  # no gap
        assert m.segments[0].base_offset <= m.log_start_offset < m.segments[0].next_offset
        assert m.high_watermark == m.segments[-1].next_offset
    else:
        assert m.high_watermark == m.log_start_offset
    assert len({s.segment_id for s in m.segments}) == len(m.segments)
    assert 0 <= m.cleaner_offset <= m.high_watermark
    for st_ in m.producers.values():
        assert len(st_.batches) <= MAX_PRODUCER_BATCHES
        assert all(b.last_offset < m.high_watermark for b in st_.batches)


@st.composite
def an_update(draw, m: Manifest):
    hw = m.high_watermark
    ids = m.segment_ids()
    kind = draw(st.sampled_from(["append", "append", "append", "replace", "advance", "epoch",
                                 "producer", "cleaner", "extra"]))
    sid = lambda: draw(st.sampled_from(["a", "b", "c"])) + str(draw(st.integers(0, 30)))  # noqa: E731
    if kind == "append":
        base = hw + draw(st.sampled_from([0, 0, 0, 0, -1, 1, 5]))
        n = draw(st.integers(1, 3))
        segs, b = [], max(base, 0)
        for _ in range(n):
            length = draw(st.integers(0, 20))
            segs.append(seg(b, b + length, sid=sid()) if length else seg(b, b + 1, sid=sid()))
            b += length or 1
        return AppendSegments(tuple(segs))
    if kind == "replace" and ids:
        i = draw(st.integers(0, len(ids) - 1))
        j = draw(st.integers(i, min(len(ids) - 1, i + 2)))
        run = m.segments[i:j + 1]
        remove = tuple(s.segment_id for s in run)
        if draw(st.booleans()) and len(ids) > j + 1:
            remove = remove + (ids[-1],)  # maybe not contiguous
        lo, hi = run[0].base_offset, run[-1].next_offset + draw(st.sampled_from([0, 0, 0, 1, -1]))
        if hi <= lo:
            hi = lo + 1
        cut = draw(st.integers(lo, hi))
        add = (seg(lo, hi, sid=sid(), count=0),) if cut in (lo, hi) else (
            seg(lo, cut, sid=sid()), seg(cut, hi, sid=sid()))
        return ReplaceSegments(remove, add)
    if kind == "advance":
        return AdvanceLogStart(draw(st.integers(0, hw + 2)))
    if kind == "epoch":
        return SetLeaderEpoch(max(0, m.leader_epoch + draw(st.integers(-1, 2))))
    if kind == "producer":
        pid = draw(st.integers(0, 3))
        if draw(st.integers(0, 5)) == 0:
            return UpdateProducerState(pid, None)
        cur = m.producers.get(pid)
        epoch = max(0, (cur.epoch if cur else 0) + draw(st.integers(-1, 1)))
        last = draw(st.integers(0, hw + 1))
        batch = BatchMetadata(0, 0, max(0, last - 1), last)
        # Up to 7 batches on purpose: apply keeps the newest MAX_PRODUCER_BATCHES.
        return UpdateProducerState(pid, ProducerState(epoch, ((cur.batches if cur else ()) + (batch,))[-7:]))
    if kind == "cleaner":
        return SetCleanerOffset(draw(st.integers(0, hw + 1)))
    return SetExtra(draw(st.sampled_from(["x", "y"])), draw(st.one_of(st.none(), st.integers(), st.text(max_size=5))))


@st.composite
def a_requirement(draw, m: Manifest):
    kind = draw(st.sampled_from(["version", "epoch", "hw", "present"]))
    if kind == "version":
        return AssertVersion(m.version + draw(st.sampled_from([0, 0, 0, -1])))
    if kind == "epoch":
        return AssertLeaderEpoch(m.leader_epoch + draw(st.sampled_from([0, 0, 1, -1])))
    if kind == "hw":
        return AssertHighWatermark(m.high_watermark + draw(st.sampled_from([0, 0, 0, 1])))
    ids = m.segment_ids() or ["zz"]
    return AssertSegmentsPresent((draw(st.sampled_from(ids + ["zz"])),))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_update_sequences_keep_invariants(data):
    m = None
    for _ in range(data.draw(st.integers(1, 25))):
        cur = m or Manifest.empty(T, P)
        updates = [data.draw(an_update(cur)) for _ in range(data.draw(st.integers(1, 3)))]
        reqs = [data.draw(a_requirement(cur)) for _ in range(data.draw(st.integers(0, 2)))]
        before = None if m is None else m.to_json()
        try:
            new = apply(m, updates, reqs, topic=T, partition=P)
        except EXPECTED_ERRORS as exc:
            assert isinstance(exc, KafkaStoreError)
            assert before is None or m.to_json() == before  # apply is pure
            continue
        independent_check(new)
        check_invariants(new)
        assert new.version == cur.version + 1
        assert new.high_watermark >= cur.high_watermark
        assert new.log_start_offset >= cur.log_start_offset
        assert new.leader_epoch >= cur.leader_epoch
        assert Manifest.from_json(new.to_json()) == new
        m = new


# ---------------------------------------------------------------------------
# ManifestStore
# ---------------------------------------------------------------------------

def fast(store: ManifestStore) -> ManifestStore:
    store.backoff_initial_s = 0.001
    store.backoff_max_s = 0.01
    return store


def appender(n, *, epoch=None, sid=None):
    def build(base):
        hw = base.high_watermark if base else 0
        reqs = [AssertLeaderEpoch(epoch)] if epoch is not None else []
        return [AppendSegments((seg(hw, hw + n, sid=sid),))], reqs
    return build


def test_store_commit_latest_load(root_url):
    store = fast(ManifestStore(Storage(root_url), T, P))
    assert store.latest() is None and store.versions() == []
    m1 = store.commit(appender(5), writer="b1", now_ms=123)
    assert (m1.version, m1.high_watermark) == (1, 5)
    assert m1.commit.writer == "b1" and m1.commit.timestamp_ms == 123 and m1.commit.operation == "AppendSegments"
    m2 = store.commit(appender(3), operation="produce")
    assert store.latest() == m2 and store.load(1) == m1 and store.versions() == [1, 2]
    assert Storage(root_url).exists(layout.manifest_path(T, P, 2))
    assert store.commit(lambda base: None) == m2  # nothing to do: no new version
    assert store.versions() == [1, 2]
    assert [m.version for m in store.history()] == [1, 2]


def test_latest_ignores_unrelated_files(local_root):
    storage = Storage(local_root)
    store = ManifestStore(storage, T, P)
    store.commit(appender(1))
    storage.put(layout.manifest_dir(T, P) + "/notes.txt", b"x")
    storage.put(layout.manifest_dir(T, P) + "/sub/00000000000000000009.json", b"x")
    assert store.latest().version == 1


def test_store_fencing(root_url):
    storage = Storage(root_url)
    a, b = fast(ManifestStore(storage, T, P)), fast(ManifestStore(storage, T, P))
    a.commit(lambda base: ([SetLeaderEpoch(1)], []))
    a.commit(appender(2, epoch=1))
    b.commit(lambda base: ([SetLeaderEpoch(base.leader_epoch + 1)], []))  # b takes over: epoch 2
    with pytest.raises(FencedError):
        a.commit(appender(2, epoch=1))
    assert b.commit(appender(2, epoch=2)).high_watermark == 4
    assert b.latest().leader_epoch == 2


def test_conflict_rebuilds_on_new_base(root_url):
    storage = Storage(root_url)
    other = ManifestStore(storage, T, P)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    store.commit(appender(1))
    fs.on_write(lambda op, path: other.commit(appender(10, sid="racer")), match="_manifest/")
    bases = []

    def build(base):
        bases.append(base.version)
        return appender(2)(base)

    m = store.commit(build)
    assert bases == [1, 2] and m.version == 3 and m.high_watermark == 13
    assert m.segment_ids()[1] == "racer"


def test_conflict_gives_up_after_max_attempts(root_url):
    storage = Storage(root_url)
    other = ManifestStore(storage, T, P)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.on_write(lambda op, path: other.commit(appender(1)), match="_manifest/", count=None)
    with pytest.raises(CommitConflict):
        store.commit(appender(2, sid="mine"), max_attempts=3)
    assert all("mine" not in m.segment_ids() for m in other.history())
    assert other.latest().version == 3


def test_lost_response_is_read_back_as_success(root_url):
    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.lose_response(match="_manifest/")
    # The two read-backs fail (from the put on: a failed read before it is no unknown outcome).
    fs.on_write(lambda op, path: fs.fail_reads(
        match=lambda o, p: o == "read" and "_manifest/" in p, count=2), match="_manifest/")
    m = store.commit(appender(4))
    assert m.version == 1 and ManifestStore(storage, T, P).latest() == m
    assert ManifestStore(storage, T, P).versions() == [1]


def test_failed_put_is_retried_with_same_bytes(root_url):
    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.fail_before_write(match="_manifest/", count=2)
    calls = []
    m = store.commit(lambda base: (calls.append(1), appender(1)(base))[1])
    assert len(calls) == 1 and m.version == 1  # settled without rebuilding
    assert ManifestStore(storage, T, P).latest().commit.commit_id == m.commit.commit_id


def test_lost_response_while_another_commit_wins(root_url):
    """Our put fails, someone else's version lands: read back says conflict, so we rebuild on top."""
    storage = Storage(root_url)
    other = ManifestStore(storage, T, P)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.on_write(lambda op, path: other.commit(appender(10, sid="racer")), match="_manifest/")
    fs.fail_before_write(match="_manifest/")
    m = store.commit(appender(1, sid="mine"))
    assert m.version == 2 and m.segment_ids() == ["racer", "mine"]


def test_undecidable_outcome_raises_commit_unknown(root_url):
    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.fail_before_write(match="_manifest/", count=None)
    with pytest.raises(CommitUnknownError):
        store.commit(appender(1))
    fs.clear()
    fs.lose_response(match="_manifest/")
    fs.fail_reads_from_write("_manifest/")   # the read-back fails; the put is made
    with pytest.raises(CommitUnknownError):
        store.commit(appender(1))
    fs.clear()
    assert store.latest().version == 1  # the second one had landed; nothing was deleted


def test_storage_error_before_put_propagates(root_url):
    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
    fs.fail_reads(match=lambda op, path: op == "list")
    with pytest.raises(StorageError):
        store.commit(appender(1))
    assert store.latest() is None


def test_threads_racing_commit_linear_history(root_url):
    """Real concurrency: writers race; every success is in the history exactly once, in order."""
    storage = Storage(root_url)
    writers, per_writer = 4, 5 if root_url.startswith("s3") else 8
    results, errors = [], []
    lock = threading.Lock()

    def run(w):
        fs = FaultyFS(storage.fs)
        store = fast(ManifestStore(Storage(storage.url, fs=fs), T, P))
        for i in range(per_writer):
            if i % 3 == 1:
                fs.lose_response(match="_manifest/")
            try:
                m = store.commit(appender(1, sid=f"w{w}n{i}"), max_attempts=100)
                with lock:
                    results.append((f"w{w}n{i}", m.version))
            except KafkaStoreError as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    history = ManifestStore(storage, T, P).history()
    assert [m.version for m in history] == list(range(1, writers * per_writer + 1))
    final = history[-1].segment_ids()
    assert sorted(final) == sorted(sid for sid, _ in results)
    for sid, version in results:
        assert history[version - 1].segment_ids()[-1] == sid


def test_expire_versions_and_referenced_files(root_url):
    storage = Storage(root_url)
    store = ManifestStore(storage, T, P)
    store.full_every = 1  # every version full: each is a group of its own (groups: test_manifest_delta.py)
    for i in range(5):
        store.commit(appender(1, sid=f"v{i}"))
    store.commit(lambda base: ([AdvanceLogStart(4)], []))  # version 6 lists only v4
    now = int(time.time() * 1000)
    assert store.expire_versions(now, keep_ms=0) == []  # raised to min_keep_ms: all too young
    assert store.expire_versions(now + 10 * 86_400_000, keep_ms=3_600_000, keep_last=3) == [1, 2, 3]
    assert store.versions() == [4, 5, 6]
    refs = store.referenced_files()
    v0 = layout.segment_path(T, P, 0, "v0", ".log")
    assert v0 in refs  # version 4 still lists it: a reader may hold version 4
    assert refs == store.referenced_files([4, 5, 6])
    assert store.referenced_files([6]) == set(seg_paths(store.latest()))
    assert store.expire_versions(now + 10 * 86_400_000, keep_ms=0, keep_last=0) == [4, 5]
    assert store.versions() == [6] and store.latest().version == 6
    assert v0 not in store.referenced_files()
    store.commit(appender(1))
    assert store.versions() == [6, 7]


def seg_paths(m):
    return [p for s in m.segments for p in s.paths(T, P).values()]


def test_expire_keeps_a_contiguous_suffix(local_root):
    store = ManifestStore(Storage(local_root), T, P)
    store.min_keep_ms = 0
    store.full_every = 1
    for i in range(4):
        store.commit(appender(1))
    # Versions superseded long ago go, the first young one stops the sweep.
    listing = store._listing()
    future = int(listing[-1][1] * 1000) + 1
    assert store.expire_versions(future, keep_ms=0, keep_last=1) == [1, 2, 3]


def test_slow_writer_cannot_resurrect_an_expired_version(local_root):
    storage = Storage(local_root)
    store = fast(ManifestStore(storage, T, P))
    store.full_every = 1
    for _ in range(3):
        store.commit(appender(1))
    stale = store.load(1)
    assert store.expire_versions(int(time.time() * 1000) + 10 * 86_400_000, 0) == [1, 2]
    slow = fast(ManifestStore(storage, T, P))
    slow.min_keep_ms = 0  # every attempt counts as slow, so it checks for newer versions
    reads = iter([stale])
    real_latest = slow.latest
    slow.latest = lambda: next(reads, None) or real_latest()
    m = slow.commit(appender(1, sid="late"))
    assert m.version == 4 and store.latest().segment_ids()[-1] == "late"
    assert 2 in store.versions()  # the orphan re-created version stays (invisible) until expired


# ---------------------------------------------------------------------------
# stateful: racing writers and injected faults on every backend
# ---------------------------------------------------------------------------

FAULTS = ["none", "none", "before", "lost", "lost_then_read_fail", "conflict", "always_conflict",
          "race_then_fail", "always_fail", "list_fail"]


def make_machine(url: str):
    class ManifestMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.root = Storage(url).child(f"m-{uuid.uuid4().hex[:10]}")
            self.observer = ManifestStore(self.root, T, P)
            self.racer = fast(ManifestStore(self.root, T, P))
            self.writers = []
            for _ in range(3):
                fs = FaultyFS(self.root.fs)
                store = fast(ManifestStore(Storage(self.root.url, fs=fs), T, P))
                self.writers.append({"store": store, "fs": fs, "epoch": 0})
            self.outcomes = {}  # tag -> (status, version, epoch used)
            self.tags = itertools.count()
            self.seen = {}  # version -> Manifest, loaded incrementally

        def _racer_commit(self):
            tag = f"r{next(self.tags)}"
            m = self.racer.commit(lambda base: ([AppendSegments((seg(base.high_watermark if base else 0,
                                                                      (base.high_watermark if base else 0) + 1),))],
                                                []), operation=tag)
            self.outcomes[tag] = ("ok", m.version, None)

        def _arm(self, fs, fault):
            manifest = "_manifest/"
            if fault == "before":
                fs.fail_before_write(match=manifest)
            elif fault == "lost":
                fs.lose_response(match=manifest)
            elif fault == "lost_then_read_fail":
                fs.lose_response(match=manifest)
                fs.fail_reads(match=lambda op, path: op == "read" and manifest in path, count=2)
            elif fault == "conflict":
                fs.on_write(lambda op, path: self._racer_commit(), match=manifest)
            elif fault == "race_then_fail":  # another commit takes the version, and our put fails
                fs.on_write(lambda op, path: self._racer_commit(), match=manifest)
                fs.fail_before_write(match=manifest)
            elif fault == "always_conflict":
                fs.on_write(lambda op, path: self._racer_commit(), match=manifest, count=None)
            elif fault == "always_fail":
                fs.fail_before_write(match=manifest, count=None)
            elif fault == "list_fail":
                fs.fail_reads(match=lambda op, path: op == "list", count=1)

        def _run(self, w, fault, tag, build):
            writer = self.writers[w]
            self._arm(writer["fs"], fault)
            epoch = writer["epoch"]
            try:
                m = writer["store"].commit(build, operation=tag, writer=f"w{w}", max_attempts=4)
                self.outcomes[tag] = ("ok", m.version, epoch)
                return m
            except FencedError:
                self.outcomes[tag] = ("fenced", None, epoch)
            except CommitConflict:
                self.outcomes[tag] = ("conflict", None, epoch)
            except CommitUnknownError:
                self.outcomes[tag] = ("unknown", None, epoch)
            except StorageError:
                self.outcomes[tag] = ("failed", None, epoch)
            finally:
                writer["fs"].clear()
            return None

        @rule(w=st.integers(0, 2), n=st.integers(1, 5), fault=st.sampled_from(FAULTS))
        def append(self, w, n, fault):
            tag = f"a{next(self.tags)}"
            epoch = self.writers[w]["epoch"]

            def build(base):
                hw = base.high_watermark if base else 0
                return [AppendSegments((seg(hw, hw + n),))], [AssertLeaderEpoch(epoch)]

            self._run(w, fault, tag, build)

        @rule(w=st.integers(0, 2), fault=st.sampled_from(FAULTS))
        def take_over(self, w, fault):
            tag = f"e{next(self.tags)}"
            m = self._run(w, fault, tag, lambda base: ([SetLeaderEpoch((base.leader_epoch if base else 0) + 1)], []))
            if m is not None:
                self.writers[w]["epoch"] = m.leader_epoch

        @precondition(lambda self: self.observer.latest() is not None)
        @rule(w=st.integers(0, 2), fault=st.sampled_from(FAULTS), frac=st.floats(0, 1))
        def retention(self, w, fault, frac):
            tag = f"d{next(self.tags)}"

            def build(base):
                if base is None or not base.segments:
                    return [AdvanceLogStart(0)], []
                target = base.segments[int(frac * (len(base.segments) - 1))].base_offset
                return [AdvanceLogStart(target)], []

            self._run(w, fault, tag, build)

        @invariant()
        def history_is_linear_and_complete(self):
            versions = self.observer.versions()
            assert versions == list(range(1, len(versions) + 1))
            for v in versions:
                if v not in self.seen:
                    self.seen[v] = self.observer.load(v)
            tags_in_history = {}
            for v in versions:
                m = self.seen[v]
                assert m.commit.operation not in tags_in_history, "a commit landed twice"
                tags_in_history[m.commit.operation] = v
                if v > 1:
                    prev = self.seen[v - 1]
                    assert m.high_watermark >= prev.high_watermark
                    assert m.leader_epoch >= prev.leader_epoch
                    assert m.log_start_offset >= prev.log_start_offset
                    # nothing committed is lost: what survived retention is a prefix of the next version
                    kept = prev.segments_from(m.log_start_offset)
                    assert m.segments[:len(kept)] == kept
            for tag, (status, version, epoch) in self.outcomes.items():
                if status == "ok":
                    assert tags_in_history.get(tag) == version
                    if epoch is not None and tag.startswith("a"):
                        assert self.seen[version].leader_epoch <= epoch  # fencing held
                elif status == "unknown":
                    pass  # at most once, checked above
                else:
                    assert tag not in tags_in_history, f"{tag} reported {status} but committed"
            latest = self.observer.latest()
            assert (latest.version if latest else 0) == len(versions)

    return ManifestMachine


def test_manifest_store_stateful(root_url):
    s3 = root_url.startswith("s3")
    machine = make_machine(root_url)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=6 if s3 else 25, stateful_step_count=10 if s3 else 20, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
