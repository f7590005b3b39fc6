"""The reader: fetch by offset and timestamp across segments, max_records, offset range
errors, read plans (disjoint, exact byte ranges) and index-driven tail reads."""
from __future__ import annotations

import random
import uuid

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError, OffsetOutOfRangeError, UnknownTopicError
from kafkastore.manifest import AdvanceLogStart, ManifestStore
from kafkastore.read.reader import (READ_COMMITTED, READ_UNCOMMITTED, PartitionReader, first_batch_offset,
                                    read_range)
from kafkastore.format.record_batch import decode_batch
from kafkastore.format.segment_scan import iter_batches
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS

T = "t"


def setup(url, partitions=1, **configs) -> Storage:
    storage = Storage(url)
    create_topic(storage, T, partitions, {k.replace("_", "."): v for k, v in configs.items()})
    return storage


def produce(storage, values, *, timestamps=None, flush_every=None, batch_size=16384, p=0):
    b = Broker(storage, batch_size=batch_size)
    for i, v in enumerate(values):
        b.send(T, v, partition=p, timestamp=None if timestamps is None else timestamps[i])
        if flush_every and (i + 1) % flush_every == 0:
            b.flush()
    b.flush()
    return b


def offsets(table):
    return table.column("offset").to_pylist()


def vals(table):
    return table.column("value").to_pylist()


# ---------------------------------------------------------------------------
# fetch by offset
# ---------------------------------------------------------------------------

def test_fetch_from_offset_across_segments(root_url):
    storage = setup(root_url)
    values = [b"v%03d" % i for i in range(50)]
    produce(storage, values, flush_every=7, batch_size=40)       # 8 segments, small batches
    r = PartitionReader(storage, T, 0)
    assert len(r.manifest.segments) == 8
    assert (r.log_start_offset, r.high_watermark) == (0, 50)
    assert vals(r.read(-2)) == values
    assert vals(r.read(0)) == values
    assert offsets(r.read(6, 15)) == list(range(6, 15))         # spans three segments
    assert vals(r.read(13, max_records=10)) == values[13:23]
    assert vals(r.read(48, max_records=10)) == values[48:]
    assert r.read(50).num_rows == 0                             # at the high watermark: empty
    assert r.read(-1).num_rows == 0                             # latest
    assert r.read(10, 10).num_rows == 0
    assert r.read(0, max_records=0).num_rows == 0
    assert offsets(r.read(40, 10_000)) == list(range(40, 50))   # end clipped to the HW


def test_offset_out_of_range_message(local_root):
    storage = setup(local_root)
    produce(storage, [b"x"] * 10, flush_every=5)
    ManifestStore(storage, T, 0).commit(lambda m: ([AdvanceLogStart(5)], []))
    r = PartitionReader(storage, T, 0)
    for bad in (4, 11, 0):
        with pytest.raises(OffsetOutOfRangeError) as ei:
            r.read(bad)
        msg = str(ei.value)
        assert f"offset {bad}" in msg and "log start offset 5" in msg and "high watermark 10" in msg
        assert (ei.value.log_start_offset, ei.value.high_watermark) == (5, 10)
    assert offsets(r.read(-2)) == list(range(5, 10))
    with pytest.raises(ConfigError):
        r.read(-3)
    with pytest.raises(ConfigError):
        r.read(0, isolation="dirty")
    with pytest.raises(ConfigError):
        r.read(5, max_records=-1)
    # plan() before the log start: an error, or (fail_on_data_loss=False) start at it.
    with pytest.raises(OffsetOutOfRangeError):
        r.plan(0, 10)
    rrs = r.plan(0, 10, fail_on_data_loss=False)
    got = [o for rr in rrs for o in offsets(read_range(storage, rr))]
    assert got == list(range(5, 10))


def test_empty_and_unknown_partitions(local_root):
    storage = setup(local_root, 2)
    r = PartitionReader(storage, T, 1)
    assert (r.log_start_offset, r.high_watermark, r.last_stable_offset) == (0, 0, 0)
    assert r.read(-2).num_rows == 0 and r.read(0).num_rows == 0
    with pytest.raises(OffsetOutOfRangeError, match="high watermark 0"):
        r.read(1)
    assert r.offset_for_timestamp(0) == 0
    with pytest.raises(UnknownTopicError):
        PartitionReader(storage, T, 2)
    with pytest.raises(UnknownTopicError):
        PartitionReader(storage, "nope", 0)


def test_reader_is_a_snapshot(local_root):
    storage = setup(local_root)
    produce(storage, [b"a", b"b"])
    old = PartitionReader(storage, T, 0)
    produce(storage, [b"c"])
    assert vals(old.read(-2)) == [b"a", b"b"]
    assert vals(PartitionReader(storage, T, 0).read(-2)) == [b"a", b"b", b"c"]


def test_max_records_not_cut_short_by_markers_or_aborted_data(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    b.begin_transaction()
    for i in range(3):
        b.send(T, b"c%d" % i)
    b.commit_transaction()                   # offsets 0-2 and a COMMIT marker at 3
    b.begin_transaction()
    for i in range(10):
        b.send(T, b"a%d" % i)
    b.abort_transaction()                    # offsets 4-13, ABORT marker at 14
    for i in range(6):
        b.send(T, b"p%d" % i)                # offsets 15-20
    b.flush()
    r = PartitionReader(storage, T, 0)
    assert vals(r.read(0, max_records=5)) == [b"c0", b"c1", b"c2", b"p0", b"p1"]
    assert vals(r.read(3, max_records=2)) == [b"p0", b"p1"]
    assert vals(r.read(0, max_records=100)) == [b"c0", b"c1", b"c2"] + [b"p%d" % i for i in range(6)]
    assert vals(r.read(0, max_records=5, isolation=READ_UNCOMMITTED)) == [b"c0", b"c1", b"c2",
                                                                          b"a0", b"a1"]
    assert vals(r.read(4, 16, max_records=5)) == [b"p0"]   # the end still bounds it


# ---------------------------------------------------------------------------
# fetch by timestamp
# ---------------------------------------------------------------------------

def test_offset_for_timestamp_within_between_and_after_segments(root_url):
    storage = setup(root_url, index_interval_bytes=64)
    b = Broker(storage, batch_size=60)
    # Segment 1: offsets 0-9 at 1000, 1010, ...; segment 2: offsets 10-19 at 2000, ...
    for seg in range(2):
        for i in range(10):
            b.send(T, b"x", timestamp=1000 * (seg + 1) + 10 * i)
        b.flush()
    r = PartitionReader(storage, T, 0)
    assert len(r.manifest.segments) == 2
    cases = {0: 0, 1000: 0, 1001: 1, 1055: 6, 1090: 9, 1091: 10, 1500: 10, 2000: 10,
             2045: 15, 2090: 19, 2091: 20, 10 ** 12: 20}
    for ts, expected in cases.items():
        assert r.offset_for_timestamp(ts) == expected, ts
    t = r.read(r.offset_for_timestamp(1500))
    assert offsets(t)[0] == 10
    assert t.column("timestamp").cast("int64").to_pylist()[0] == 2_000_000


def test_offset_for_timestamp_out_of_order_timestamps(local_root):
    storage = setup(local_root, index_interval_bytes=1)
    ts = [500, 100, 900, 300, 700, 200, 1000, 50]
    produce(storage, [b"x"] * len(ts), timestamps=ts, batch_size=30)   # ~one record a batch
    r = PartitionReader(storage, T, 0)
    for target in range(0, 1100, 25):
        expected = next((i for i, t in enumerate(ts) if t >= target), len(ts))
        assert r.offset_for_timestamp(target) == expected, target


def test_offset_for_timestamp_log_append_time(local_root):
    # Under LogAppendTime the append time counts, not what the producer put in the record.
    storage = setup(local_root, message_timestamp_type="LogAppendTime")
    now = [5000]
    b = Broker(storage, clock=lambda: now[0])
    b.send(T, b"a", timestamp=10)
    b.flush()
    now[0] = 6000
    b.send(T, b"b", timestamp=20)
    b.send(T, b"c", timestamp=30)
    b.flush()
    r = PartitionReader(storage, T, 0)
    assert [r.offset_for_timestamp(ts) for ts in (0, 15, 5000, 5001, 6000, 6001)] == [0, 0, 0, 1, 1, 3]


def test_offset_for_timestamp_respects_log_start(local_root):
    storage = setup(local_root)
    produce(storage, [b"x"] * 10, timestamps=list(range(100, 200, 10)))
    ManifestStore(storage, T, 0).commit(lambda m: ([AdvanceLogStart(4)], []))
    r = PartitionReader(storage, T, 0)
    assert r.offset_for_timestamp(0) == 4
    assert r.offset_for_timestamp(165) == 7


# ---------------------------------------------------------------------------
# read plans
# ---------------------------------------------------------------------------

def all_records(storage, m):
    """Brute force: every data record of every live segment, decoded from whole objects."""
    out = []
    for seg in m.segments:
        log = storage.get(seg.paths(T, 0)[".log"])
        for pos, h in iter_batches(log):
            if h.is_control:
                continue
            _, rs = decode_batch(log, pos)
            out += [(r.offset, r.value) for r in rs]
    return out


def check_plan(storage, r, start, end, max_bytes):
    m = r.manifest
    rrs = r.plan(start, end, max_bytes=max_bytes)
    seg_sizes = {seg.paths(T, 0)[".log"]: seg.size for seg in m.segments}
    by_path = {}
    for rr in rrs:
        assert 0 <= rr.byte_start < rr.byte_end <= seg_sizes[rr.path]
        by_path.setdefault(rr.path, []).append((rr.byte_start, rr.byte_end))
        # Ranges start on a batch boundary and hold whole batches.
        data = storage.get_range(rr.path, rr.byte_start, rr.byte_end)
        assert sum(h.size for _, h in iter_batches(data)) == len(data)
        assert first_batch_offset(storage, rr) >= rr.base_offset
    for spans in by_path.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))           # disjoint
    got = []
    for rr in rrs:
        t = read_range(storage, rr, isolation=READ_UNCOMMITTED)
        got += list(zip(offsets(t), vals(t)))
    lo, hi = max(start, m.log_start_offset), min(end, m.high_watermark)
    expected = [x for x in all_records(storage, m) if lo <= x[0] < hi]
    assert got == expected                            # exact cover, no duplicates, in order
    # Covering exactly: every batch holding a wanted offset is inside some range.
    for seg in m.segments:
        log = storage.get(seg.paths(T, 0)[".log"])
        for pos, h in iter_batches(log):
            if lo < hi and h.base_offset < hi and h.last_offset >= lo and not h.is_control:
                spans = by_path.get(seg.paths(T, 0)[".log"], [])
                assert any(a <= pos and pos + h.size <= b for a, b in spans)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plan_ranges_disjoint_and_exact(data):
    root = f"memory://plan-{uuid.uuid4().hex[:12]}"
    try:
        storage = setup(root, index_interval_bytes=data.draw(st.sampled_from([1, 100, 400, 4096])),
                        segment_bytes=data.draw(st.sampled_from([300, 1000, 10 ** 6])))
        # No background merging: the example's root is removed when it ends, and a merge
        # still running then would race the removal.
        b = Broker(storage, batch_size=data.draw(st.integers(30, 600)), housekeeping=False)
        n = data.draw(st.integers(1, 150))
        sizes = data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
        flushes = set(data.draw(st.lists(st.integers(0, n - 1), max_size=5)))
        txn_at = data.draw(st.none() | st.integers(0, n - 1))
        for i, size in enumerate(sizes):
            if i == txn_at:
                b.begin_transaction()
            b.send(T, b"%d:" % i + b"x" * size)
            if txn_at is not None and i == min(n - 1, txn_at + 3):
                b.abort_transaction() if size % 2 else b.commit_transaction()
                txn_at = None
            if i in flushes:
                b.flush()
        if txn_at is None or b._txn_partitions is None:
            b.flush()
        else:
            b.commit_transaction()
        r = PartitionReader(storage, T, 0)
        hw = r.high_watermark
        start = data.draw(st.integers(0, hw))
        end = data.draw(st.integers(start, hw + 3))
        max_bytes = data.draw(st.none() | st.integers(1, 2000))
        check_plan(storage, r, start, end, max_bytes)
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(root.split("://", 1)[1]):
            fs.rm(root.split("://", 1)[1], recursive=True)


def test_plan_splits_large_segments_at_index_entries(local_root):
    storage = setup(local_root, index_interval_bytes=500)
    produce(storage, [b"%040d" % i for i in range(2000)], batch_size=400)
    r = PartitionReader(storage, T, 0)
    [seg] = r.manifest.segments
    rrs = r.plan(0, 2000, max_bytes=5000)
    assert len(rrs) >= seg.size // 5000 - 1
    assert all(rr.size <= 5000 + 500 for rr in rrs[:-1])     # cut at the first entry past max_bytes
    assert rrs[0].byte_start == 0 and rrs[-1].byte_end == seg.size
    check_plan(storage, r, 0, 2000, 5000)
    check_plan(storage, r, 777, 1234, 3000)
    # A narrow range reads a narrow slice of the segment: the wanted batches plus at most
    # an index interval (and a batch) on either side.
    [rr] = r.plan(1500, 1510)
    assert rr.size < 2 * (500 + 2 * 400) + 600 < seg.size / 30


# ---------------------------------------------------------------------------
# tail reads go through the index
# ---------------------------------------------------------------------------

class CountingFS(FaultyFS):
    """Counts the bytes read per kind of object."""

    def __init__(self, inner):
        super().__init__(inner)
        self.bytes = {}

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = super().cat_file(path, start=start, end=end, **kwargs)
        kind = path.rsplit(".", 1)[-1] if "_manifest" not in path else "manifest"
        self.bytes[kind] = self.bytes.get(kind, 0) + len(data)
        return data


def tail_read_bytes(url, n_records):
    storage = setup(url)
    b = Broker(storage, batch_size=1000)
    for i in range(n_records):
        b.send(T, b"%030d" % i)
        if (i + 1) % 5000 == 0:
            b.flush()                      # segments of 5000 records
    b.flush()
    counting = CountingFS(Storage(url).fs)
    cstorage = Storage(url, fs=counting)
    r = PartitionReader(cstorage, T, 0)
    t = r.read(r.high_watermark - 1000)
    assert offsets(t) == list(range(n_records - 1000, n_records))
    total_log = sum(s.size for s in r.manifest.segments)
    return counting.bytes, total_log


def test_tail_read_uses_the_index(tmp_path):
    small, small_log = tail_read_bytes(f"file://{tmp_path}/a", 10_000)
    large, large_log = tail_read_bytes(f"file://{tmp_path}/b", 40_000)
    record_bytes = 1000 * 40                # ~40 bytes a record in the log
    for got in (small, large):
        assert got["log"] < record_bytes + 2 * 4096 + 2000   # the tail plus at most an index gap
    assert abs(small["log"] - large["log"]) <= 4096 + 1000
    assert small["index"] == large["index"]                   # only the last segment's index
    assert "timeindex" not in small
    assert sum(large.values()) < large_log / 20               # a small fraction of the partition


def test_isolation_upper_bounds(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    b.send(T, b"a")
    b.flush()
    b.begin_transaction()
    b.send(T, b"t")
    b.flush()
    r = PartitionReader(storage, T, 0)
    assert r.upper_bound(READ_COMMITTED) == 1 and r.upper_bound(READ_UNCOMMITTED) == 2
    assert r.resolve(-1) == 1 and r.resolve(-1, READ_UNCOMMITTED) == 2 and r.resolve(-2) == 0
    assert r.read(1).num_rows == 0                            # in range, but above the LSO
    assert vals(r.read(1, isolation=READ_UNCOMMITTED)) == [b"t"]
    b.commit_transaction()
    assert vals(PartitionReader(storage, T, 0).read(-2)) == [b"a", b"t"]


def test_random_reads_match_brute_force(local_root):
    storage = setup(local_root, segment_bytes=3000, index_interval_bytes=200)
    rnd = random.Random(11)
    values = [b"%d-" % i + b"y" * rnd.randrange(0, 80) for i in range(600)]
    produce(storage, values, flush_every=97, batch_size=350)
    r = PartitionReader(storage, T, 0)
    assert len(r.manifest.segments) > 6
    for _ in range(40):
        a = rnd.randrange(0, 601)
        e = rnd.randrange(a, 605)
        k = rnd.choice([None, 1, 7, 250])
        got = vals(r.read(a, e, max_records=k))
        want = values[a:min(e, 600)]
        assert got == (want if k is None else want[:k])
