"""Readers check what they decode against the manifest entry.

A truncated ``.log``, a segment object replaced by another of the same size and
an ``.index`` that points a few batches too far each used to read as other or
fewer records. Every reader goes through :func:`kafkastore.reader.read_range`
(consume, the Spark data source, the load's split reader, compaction's scan), so
they all raise the same :class:`SegmentMismatchError` that ``verify`` reports.
"""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.read.verify import verify_partition
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance.compaction import ScanTask, scan_task
from kafkastore.errors import SegmentMismatchError
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader, read_range
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

T, P = "dmg", 0


@pytest.fixture
def log(root_url):
    """Three segments of ten one-record batches each (offsets 0-9, 10-19, 20-29), every batch
    indexed; values of equal length, so the segments have equal sizes."""
    storage = Storage(root_url)
    create_topic(storage, T, 1, {"index.interval.bytes": 1})
    broker = Broker(storage, batch_size=1, commit_on_roll=False)
    for i in range(30):
        broker.send(T, b"value-%02d" % i, partition=P, timestamp=1_700_000_000_000 + i)
        if i % 10 == 9:
            broker.flush()
    segments = ManifestStore(storage, T, P).latest().segments
    assert [(s.base_offset, s.next_offset) for s in segments] == [(0, 10), (10, 20), (20, 30)]
    return storage, segments


def paths(seg):
    return seg.paths(T, P)


def offsets(storage, start=-2):
    return PartitionReader(storage, T, P).read(start).column("offset").to_pylist()


def verify_problems(storage) -> str:
    return "\n".join(verify_partition(storage, T, P).lines())


def test_intact_log_reads_whole(log):
    storage, _ = log
    assert offsets(storage) == list(range(30))
    assert offsets(storage, 15) == list(range(15, 30))


@pytest.mark.parametrize("cut", ["batch boundary", "empty"])
def test_truncated_log_is_refused_like_verify(log, cut):
    storage, segs = log
    data = storage.get(paths(segs[1])[".log"])
    batch = len(data) // 10
    storage.put(paths(segs[1])[".log"], data[:4 * batch] if cut == "batch boundary" else b"")
    with pytest.raises(SegmentMismatchError) as err:
        offsets(storage)
    want = f"size is {4 * batch if cut == 'batch boundary' else 0}, expected {segs[1].size}"
    assert want in str(err.value) and segs[1].stem in str(err.value)
    assert want in verify_problems(storage)  # the same words as verify


def test_replaced_segment_of_the_same_size_is_refused(log):
    storage, segs = log
    storage.put(paths(segs[1])[".log"], storage.get(paths(segs[0])[".log"]))
    with pytest.raises(SegmentMismatchError, match="checksum is crc32c:") as err:
        offsets(storage)
    assert f"expected crc32c:{segs[1].checksum:08x}" in str(err.value)
    assert f"expected crc32c:{segs[1].checksum:08x}" in verify_problems(storage)
    # A partial read (from an index position) sees offsets outside the segment's range.
    with pytest.raises(SegmentMismatchError, match=r"batch offsets is \[\d+, \d+\), expected inside"):
        offsets(storage, 15)


def test_index_pointing_too_far_is_refused(log):
    storage, segs = log
    index = bytearray(storage.get(paths(segs[1])[".index"]))
    data = storage.get(paths(segs[1])[".log"])
    batch = len(data) // 10
    # Every entry (relative offset, position) points three batches further than it should.
    for i in range(0, len(index), 8):
        rel, pos = struct.unpack_from(">ii", index, i)
        struct.pack_into(">ii", index, i, rel, min(pos + 3 * batch, 9 * batch))
    storage.put(paths(segs[1])[".index"], bytes(index))
    with pytest.raises(SegmentMismatchError, match="the index points past it"):
        offsets(storage, 15)


def test_index_pointing_too_early_at_the_end_is_refused(log):
    """An end position that stops before the last requested offset would drop records."""
    storage, segs = log
    index = bytearray(storage.get(paths(segs[1])[".index"]))
    for i in range(0, len(index), 8):
        rel, pos = struct.unpack_from(">ii", index, i)
        struct.pack_into(">ii", index, i, rel, max(pos - 2 * (len(storage.get(paths(segs[1])[".log"])) // 10), 0))
    storage.put(paths(segs[1])[".index"], bytes(index))
    reader = PartitionReader(storage, T, P)
    with pytest.raises(SegmentMismatchError):
        reader.read(12, 16)


def test_compaction_scan_checks_too(log):
    storage, segs = log
    storage.put(paths(segs[1])[".log"], storage.get(paths(segs[0])[".log"]))
    m = ManifestStore(storage, T, P).latest()
    [rr] = PartitionReader(storage, T, P, manifest=m).plan(10, 20)
    with pytest.raises(SegmentMismatchError):
        scan_task(storage, ScanTask(0, 0, 10, 0, rr))


@settings(max_examples=25, deadline=None)
@given(flushes=st.lists(st.integers(1, 12), min_size=1, max_size=6),
       batch_size=st.sampled_from([1, 40, 120, 16384]),
       interval=st.sampled_from([1, 100, 300, 4096]),
       window=st.tuples(st.integers(0, 80), st.integers(0, 80)),
       max_bytes=st.sampled_from([None, 64, 200, 1000]))
def test_intact_segments_never_fail_the_checks(flushes, batch_size, interval, window, max_bytes):
    """No false alarms: on an intact log, every plan (index lookups at both ends, splits at
    index entries) reads exactly the requested offsets."""
    storage = Storage(f"memory://dmg-prop-{uuid.uuid4().hex}")
    create_topic(storage, T, 1, {"index.interval.bytes": interval})
    broker = Broker(storage, commit_on_roll=False, batch_size=batch_size)
    total = 0
    for n in flushes:  # one segment per flush, batches as batch.size seals them
        for j in range(n):
            broker.send(T, b"x" * (j + 1), partition=P)
        total += n
        broker.flush()
    lo, hi = sorted(w % (total + 1) for w in window)
    reader = PartitionReader(storage, T, P)
    got = []
    for rr in reader.plan(lo, hi, max_bytes=max_bytes):
        got += read_range(storage, rr).column("offset").to_pylist()
    assert got == list(range(lo, hi))
