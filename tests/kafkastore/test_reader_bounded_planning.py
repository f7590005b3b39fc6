"""Planning a read costs the same however long the partition's history: a segment
wholly inside the range needs no index, and a segment the range cuts costs a binary search
over pages of its ``.index``, not the whole object. Counted in requests and bytes, not time."""
from __future__ import annotations

import math
import random
import uuid

import pytest

from kafkastore.read import reader as reader_mod
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.read.reader import PartitionReader, read_range
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS

T = "bounded"
T0 = 1_700_000_000_000
PAGE = 16   # index entries per ranged read in these tests (the library's default is 4096)


class ReadLog(FaultyFS):
    """Records every read: (path, bytes)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.reads: list[tuple[str, int]] = []

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = super().cat_file(path, start=start, end=end, **kwargs)
        self.reads.append((path, len(data)))
        return data

    def index_reads(self) -> tuple[int, int]:
        """(requests, bytes) of ``.index`` / ``.timeindex`` reads so far."""
        hits = [n for p, n in self.reads if p.endswith((".index", ".timeindex"))]
        return len(hits), sum(hits)


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    monkeypatch.setattr(reader_mod, "INDEX_PAGE_ENTRIES", PAGE)


def _partition(records: int, flush_every: int) -> str:
    """A memory:// root with one partition: one batch (and index entry) per record, one
    segment per ``flush_every`` records, record i stamped T0 + i."""
    url = f"memory://bounded-{uuid.uuid4().hex}"
    storage = Storage(url)
    create_topic(storage, T, 1, {"index.interval.bytes": 1})
    broker = Broker(storage, batch_size=1, housekeeping=False)
    for i in range(records):
        broker.send(T, b"v" * 20, key=b"%d" % i, timestamp=T0 + i, partition=0)
        if (i + 1) % flush_every == 0:
            broker.flush()
    broker.flush()
    return url


def _cold_reader(url: str) -> tuple[PartitionReader, ReadLog]:
    """A reader on a fresh counting view of ``url`` (the index cache is keyed by the store
    URL, so a query string makes it cold) with its manifest already read."""
    fs = ReadLog(Storage(url).fs)
    storage = Storage(url, fs=fs)
    storage.url = f"{url}?cold={uuid.uuid4().hex}"
    r = PartitionReader(storage, T, 0)
    fs.reads.clear()
    return r, fs


def _offsets(r: PartitionReader, plan) -> list[int]:
    return [o for rr in plan for o in read_range(r.storage, rr).column("offset").to_pylist()]


def _search_pages(entries: int) -> int:
    """Pages one binary search may touch: about log2(pages) + 2."""
    return math.ceil(math.log2(max(2, math.ceil(entries / PAGE)))) + 2


def test_whole_segments_need_no_index():
    """Planning a range of whole segments reads no index, however many segments there are."""
    url = _partition(600, flush_every=10)
    r, fs = _cold_reader(url)
    assert len(r.manifest.segments) == 60
    for max_bytes in (None, 128 << 20):
        plan = r.plan(0, r.high_watermark, max_bytes=max_bytes)
        assert [rr.whole_segment for rr in plan] == [True] * 60
    assert fs.reads == []
    assert _offsets(r, plan) == list(range(600))


def test_a_cut_range_reads_the_two_end_segments_pages_only():
    """A range across many segments reads index pages of the two segments it cuts, the same
    requests with 6 or 60 segments in between."""
    counts = []
    for n_segments in (6, 60):
        url = _partition(100 * n_segments, flush_every=100)
        r, fs = _cold_reader(url)
        plan = r.plan(50, r.high_watermark - 50)
        assert _offsets(r, plan) == list(range(50, r.high_watermark - 50))
        fs.reads.clear()
        r, fs = _cold_reader(url)
        r.plan(50, r.high_watermark - 50)
        requests, nbytes = fs.index_reads()
        assert {p.rsplit("/", 1)[-1] for p, _ in fs.reads} <= {
            r.manifest.segments[0].stem + ".index", r.manifest.segments[-1].stem + ".index"}
        counts.append((requests, nbytes))
    assert counts[0] == counts[1]


def test_a_cut_in_a_large_index_reads_a_few_pages_not_the_index():
    """The bytes of index a cut costs grow with log2 of one segment's index, and stay far
    below the index itself."""
    for records in (200, 5000):
        url = _partition(records, flush_every=records)
        r, fs = _cold_reader(url)
        [seg] = r.manifest.segments
        start, end = records // 3, 2 * records // 3
        plan = r.plan(start, end)
        requests, nbytes = fs.index_reads()
        assert requests <= 2 * _search_pages(records)
        assert nbytes <= 2 * _search_pages(records) * PAGE * 8
        if records == 5000:
            assert nbytes * 10 < seg.index_size
        assert _offsets(r, plan) == list(range(start, end))


def test_splits_of_a_large_segment_cost_one_search_each():
    url = _partition(5000, flush_every=5000)
    r, fs = _cold_reader(url)
    [seg] = r.manifest.segments
    max_bytes = seg.size // 7
    plan = r.plan(0, 5000, max_bytes=max_bytes)
    assert 7 <= len(plan) <= 8 and all(rr.size <= max_bytes + 200 for rr in plan)
    requests, nbytes = fs.index_reads()
    assert requests <= len(plan) * _search_pages(5000)
    assert nbytes * 3 < seg.index_size
    assert _offsets(r, plan) == list(range(5000))


def test_offset_for_timestamp_reads_pages_of_both_indexes():
    url = _partition(5000, flush_every=5000)
    r, fs = _cold_reader(url)
    [seg] = r.manifest.segments
    assert r.offset_for_timestamp(T0 + 3210) == 3210
    requests, nbytes = fs.index_reads()
    assert requests <= 2 * _search_pages(5000)
    assert nbytes * 5 < seg.index_size + seg.timeindex_size


@pytest.mark.parametrize("page", [1, 2, 3, 4096])
def test_paged_lookups_agree_with_whole_index_lookups(monkeypatch, page):
    """Every plan and timestamp lookup is the same whatever the page size (pages of one entry
    up to the whole index), on segments with index entries every batch or every few."""
    monkeypatch.setattr(reader_mod, "INDEX_PAGE_ENTRIES", page)
    rng = random.Random(page)
    url = f"memory://bounded-{uuid.uuid4().hex}"
    storage = Storage(url)
    create_topic(storage, T, 1, {"index.interval.bytes": 100})
    broker = Broker(storage, batch_size=60, housekeeping=False)
    stamps = [T0 + i * 10 + rng.randint(-30, 30) for i in range(400)]
    for i, ts in enumerate(stamps):
        broker.send(T, b"x" * rng.randint(1, 40), timestamp=ts, partition=0)
        if i in (150, 290):
            broker.flush()
    broker.flush()
    r = PartitionReader(storage, T, 0)
    assert len(r.manifest.segments) == 3
    for start, end in ((0, 400), (1, 399), (37, 38), (140, 300), (151, 152), (299, 400)):
        for max_bytes in (None, 1, 300, 2000):
            assert _offsets(r, r.plan(start, end, max_bytes=max_bytes)) == list(range(start, end))
    for target in sorted(set(stamps))[::9] + [T0 - 100, max(stamps) + 1]:
        want = next((o for o in range(400) if stamps[o] >= target), 400)
        assert r.offset_for_timestamp(target) == want, target
