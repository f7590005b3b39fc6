"""Reading a partition: fetch by offset or timestamp, and read plans for Spark.

Everything a reader sees comes from one manifest version (a snapshot): the
segments it lists are immutable objects, so a read that started on an older
version keeps working while writers, compaction and retention commit newer
ones (their replaced files are removed only after a grace period).

Positions come from the ``.index`` objects (small, cached), so reading the
tail of a long partition costs a few range reads whatever the log's length.
Offset ranges are half-open ``[start, end)``.
"""
from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa

from ..format.arrow_decode import KAFKA_SCHEMA, decode_to_arrow
from ..format.crc import crc32c
from ..errors import (ConfigError, CorruptRecordError, OffsetOutOfRangeError, SegmentMismatchError,
                      UnknownTopicError)
from ..manifest import Manifest, ManifestStore, SegmentEntry
from ..format.record_batch import LOG_OVERHEAD, decode_batch
from ..format.segment_scan import iter_batches
from ..storage import Storage
from ..topics.admin import load_topic
from .verify import mismatch

EARLIEST = -2
LATEST = -1
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
_ISOLATIONS = (READ_COMMITTED, READ_UNCOMMITTED)


@dataclass(frozen=True)
class ReadRange:
    """A unit of reading: bytes ``[byte_start, byte_end)`` of one segment's ``.log``,
    keeping offsets in ``[start_offset, end_offset)``.

    Byte ranges of one plan are disjoint and aligned to batch boundaries, so
    each record is decoded by exactly one range. Plain data (picklable): it is
    what a Spark input partition carries to an executor.
    """

    topic: str
    partition: int
    path: str
    base_offset: int
    byte_start: int
    byte_end: int
    start_offset: int
    end_offset: int
    aborted: tuple[tuple[int, int, int], ...] = ()
    # What the manifest entry promises, checked by read_range (-1: unknown, not checked).
    segment_next_offset: int = -1   # every batch lies in [base_offset, segment_next_offset)
    segment_size: int = -1          # the object's size
    segment_records: int = -1       # records of the whole object (checked on whole reads)
    segment_checksum: int = -1      # CRC-32C of the whole object (checked on whole reads)
    first_anchor: int = -1          # the first batch starts at or before this offset
    last_anchor: int = -1           # the last batch ends at or after this offset

    @property
    def size(self) -> int:
        return self.byte_end - self.byte_start

    @property
    def whole_segment(self) -> bool:
        """Whether the range is the whole object (then count and checksum are checked)."""
        return self.byte_start == 0 and self.byte_end == self.segment_size


class _IndexCache:
    """Segment objects are immutable, so their indexes (whole, or pages of them) can be
    cached by path (and byte range)."""

    def __init__(self, capacity: int = 256):
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def _cached(self, key: str, load) -> bytes:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        data = load()
        with self._lock:
            self._items[key] = data
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return data

    def get(self, storage: Storage, path: str) -> bytes:
        """The whole object at ``path``."""
        return self._cached(f"{storage.url}|{path}", lambda: storage.get(path))

    def get_range(self, storage: Storage, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``path`` (a page of an index)."""
        return self._cached(f"{storage.url}|{path}|{start}-{end}",
                            lambda: bytes(storage.get_range(path, start, end)))


_INDEXES = _IndexCache()

#: Entries per ranged read of an index (32 KiB of ``.index``, 48 KiB of ``.timeindex``). A
#: lookup reads the pages its binary search touches, so its cost depends on the size of one
#: segment's index (bounded by ``segment.bytes``), never on the rest of the partition; an
#: index of at most one page (every small segment) is one read, as a whole-object read was.
INDEX_PAGE_ENTRIES = 4096


class _ShortIndex(Exception):
    """An index object shorter than its manifest entry says: read it whole instead."""


class IndexView:
    """The entries of one ``.index`` or ``.timeindex`` object, read a page at a time on demand
    (or all held in memory): a binary search touches about log2(pages) + 1 pages.

    ``key(i)`` is the entry's first field (relative offset, or timestamp), ``value(i)`` its
    second (position, or relative offset). Entries are trusted to increase as Kafka writes
    them; a non-monotonic index gives some entry, never a hang (readers check what an index
    points at against the log, see :func:`check_range`).
    """

    def __init__(self, entry: struct.Struct, data=None, *, storage: Storage | None = None,
                 path: str = "", size: int = 0):
        self._entry = entry
        self._storage, self._path = storage, path
        self._data = data
        if data is not None:
            self.count = len(memoryview(data).cast("B")) // entry.size
        else:
            self.count = size // entry.size
            if self.count <= INDEX_PAGE_ENTRIES:  # one page: the whole object, cached as before
                self._data = self._whole()
                self.count = len(self._data) // entry.size

    @classmethod
    def offsets(cls, data=None, **kw) -> "IndexView":
        """A view of an ``.index`` (entries: relative offset, position)."""
        return cls(_OFFSET_ENTRY, data, **kw)

    @classmethod
    def times(cls, data=None, **kw) -> "IndexView":
        """A view of a ``.timeindex`` (entries: timestamp, relative offset)."""
        return cls(_TIME_ENTRY, data, **kw)

    def _whole(self) -> bytes:
        return _INDEXES.get(self._storage, self._path)

    def entry(self, i: int) -> tuple[int, int]:
        """Entry ``i`` (0 <= i < count) as stored: ``(key, value)``."""
        if self._data is not None:
            return self._entry.unpack_from(self._data, i * self._entry.size)
        page, at = divmod(i, INDEX_PAGE_ENTRIES)
        size = self._entry.size
        start = page * INDEX_PAGE_ENTRIES * size
        end = min(start + INDEX_PAGE_ENTRIES * size, self.count * size)
        data = _INDEXES.get_range(self._storage, self._path, start, end)
        if len(data) < end - start:
            raise _ShortIndex
        return self._entry.unpack_from(data, at * size)

    def _search(self, fn):
        try:
            return fn()
        except _ShortIndex:
            self._data = self._whole()
            self.count = len(self._data) // self._entry.size
            return fn()

    def last_key_at_most(self, target: int) -> int:
        """The number of the last entry whose key is <= ``target`` (-1 if none)."""
        def run():
            lo, hi = 0, self.count - 1
            if hi < 0 or self.entry(0)[0] > target:
                return -1
            while lo < hi:
                mid = (lo + hi + 1) >> 1
                if self.entry(mid)[0] <= target:
                    lo = mid
                else:
                    hi = mid - 1
            return lo
        return self._search(run)

    def first_at_least(self, target: int, *, field: int = 0, lo: int = 0) -> int:
        """The number of the first entry from ``lo`` whose ``field`` (0: key, 1: value) is
        >= ``target`` (``count`` if none)."""
        def run():
            a, b = lo, self.count
            while a < b:
                mid = (a + b) // 2
                if self.entry(mid)[field] >= target:
                    b = mid
                else:
                    a = mid + 1
            return a
        return self._search(run)


_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _offset_index(storage: Storage, topic: str, partition: int, seg: SegmentEntry) -> IndexView:
    return IndexView.offsets(storage=storage, path=seg.paths(topic, partition)[".index"],
                             size=seg.index_size)


def index_lookup(index: IndexView, base_offset: int, target_offset: int) -> tuple[int, int]:
    """The entry with the largest offset <= ``target_offset`` as ``(offset, position)``;
    ``(base_offset, 0)`` when there is none (Kafka's ``OffsetIndex.lookup``)."""
    i = index.last_key_at_most(target_offset - base_offset)
    if i < 0:
        return base_offset, 0
    rel, pos = index.entry(i)
    return base_offset + rel, pos


def segment_position(storage: Storage, topic: str, partition: int, seg: SegmentEntry,
                     offset: int) -> int:
    """Byte position in ``seg``'s ``.log`` to scan from for ``offset``: an index lookup
    reading only the pages of the ``.index`` its binary search needs (0 without an index)."""
    if offset <= seg.base_offset or not seg.index_size:
        return 0
    return index_lookup(_offset_index(storage, topic, partition, seg), seg.base_offset, offset)[1]


def last_stable_offset(m: Manifest) -> int:
    """First offset of the oldest open transaction, else the high watermark (Kafka's LSO)."""
    open_starts = [p.txn_first_offset for p in m.producers.values() if p.txn_first_offset is not None]
    return min(open_starts + [m.high_watermark])


class PartitionReader:
    """Reads one partition as of one manifest version (the latest when not given)."""

    def __init__(self, storage: Storage, topic: str, partition: int,
                 manifest: Manifest | None = None):
        meta = load_topic(storage, topic)
        if not 0 <= partition < meta.partitions:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}")
        self.storage = storage
        self.topic = topic
        self.partition = partition
        if manifest is None:
            manifest = ManifestStore(storage, topic, partition).latest() or Manifest.empty(topic, partition)
        self.manifest = manifest

    # -- offsets -------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.manifest.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.manifest.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return last_stable_offset(self.manifest)

    def upper_bound(self, isolation: str = READ_COMMITTED) -> int:
        """The offset reads stop before: the LSO under read_committed, else the high watermark."""
        if isolation not in _ISOLATIONS:
            raise ConfigError(f"isolation must be one of {_ISOLATIONS}, got {isolation!r}")
        return self.last_stable_offset if isolation == READ_COMMITTED else self.high_watermark

    def resolve(self, offset: int, isolation: str = READ_COMMITTED) -> int:
        """Resolve the EARLIEST (-2) / LATEST (-1) sentinels against this snapshot."""
        if offset == EARLIEST:
            return self.log_start_offset
        if offset == LATEST:
            return self.upper_bound(isolation)
        if offset < 0:
            raise ConfigError(f"offset must be >= 0, -2 (earliest) or -1 (latest), got {offset}")
        return offset

    def check_in_range(self, offset: int) -> None:
        """Raise OffsetOutOfRangeError unless ``log start <= offset <= high watermark``."""
        if not self.log_start_offset <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}/{self.partition}",
                log_start_offset=self.log_start_offset, high_watermark=self.high_watermark)

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """First offset whose timestamp is >= ``timestamp_ms`` (the high watermark if none), as
        Kafka's ``ListOffsets``: the first segment whose max timestamp reaches it, then its indexes.

        Exact: every offset below the answer (from the log start) has a smaller timestamp, so
        a reader may skip them when it only wants records at or after ``timestamp_ms``. The
        ``.log`` is read in growing windows from the indexed position, never whole.
        """
        for seg in self.manifest.segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            paths = seg.paths(self.topic, self.partition)
            index = (IndexView.offsets(storage=self.storage, path=paths[".index"],
                                       size=seg.index_size) if seg.index_size else None)
            tindex = (IndexView.times(storage=self.storage, path=paths[".timeindex"],
                                      size=seg.timeindex_size) if seg.timeindex_size else None)
            found = _offset_for_timestamp_in(
                self.storage, paths[".log"], seg.size, index, tindex, seg.base_offset,
                timestamp_ms, max(seg.base_offset, self.log_start_offset))
            if found is not None:
                return found
        return self.high_watermark

    # -- planning ------------------------------------------------------------
    def _aborted_in(self, start: int, end: int) -> tuple[tuple[int, int, int], ...]:
        # An abort marker lands after its data, so every aborted transaction with
        # data at or after ``start`` is listed by a segment at or after it. Ones that
        # begin at or after ``end`` cannot hide a batch of the range: leave them out,
        # since every ReadRange of a plan carries this list to an executor.
        return tuple(t for seg in self.manifest.segments_from(start) for t in seg.aborted_txns
                     if t[2] >= start and t[1] < end)

    def _byte_bounds(self, seg: SegmentEntry, index: IndexView | None, start: int,
                     end: int) -> tuple[int, int, int, int]:
        """``(lo, hi, first_anchor, last_anchor)``: the byte range of ``seg`` holding offsets
        ``[start, end)`` by its index, and what the batches there must then hold (see
        :func:`read_range`): an index entry is (last offset of an append, its position)."""
        lo, first_anchor = 0, -1
        if index is not None and start > seg.base_offset:
            first_anchor, lo = index_lookup(index, seg.base_offset, start)
            if lo == 0:
                first_anchor = -1
        hi, last_anchor = seg.size, -1
        if index is not None and end < seg.next_offset:
            # Entries are (last offset of a batch, its position). The entry after
            # the first one reaching end-1 starts past the batch holding end-1.
            i = index.first_at_least(end - 1 - seg.base_offset)
            if i + 1 < index.count:
                hi = index.entry(i + 1)[1]
                last_anchor = seg.base_offset + index.entry(i)[0]
        return lo, max(lo, hi), first_anchor, last_anchor

    def plan(self, start: int, end: int, *, max_bytes: int | None = None,
             fail_on_data_loss: bool = True) -> list[ReadRange]:
        """Read ranges covering offsets ``[start, end)``, each at most ~``max_bytes`` (split at
        index entries, which are batch boundaries). Sentinels must be resolved already.

        Bounded work per segment, whatever the partition's history: a segment wholly inside
        the range is one whole-object range and its index is not read; a segment the range
        cuts, or one split in ``max_bytes`` pieces, costs binary searches over pages of its
        ``.index`` (:class:`IndexView`), one per end and per split."""
        if start < self.log_start_offset:
            if fail_on_data_loss:
                self.check_in_range(start)
            start = self.log_start_offset
        end = min(end, self.high_watermark)
        if start >= end:
            return []
        aborted = self._aborted_in(start, end)
        out = []
        for seg in self.manifest.segments_from(start):
            if seg.base_offset >= end:
                break
            path = seg.paths(self.topic, self.partition)[".log"]
            cut = start > seg.base_offset or end < seg.next_offset
            split = bool(max_bytes) and seg.size > max_bytes
            index = (_offset_index(self.storage, self.topic, self.partition, seg)
                     if seg.index_size and (cut or split) else None)
            lo, hi, first_anchor, last_anchor = self._byte_bounds(seg, index, start, end)
            cuts = [(lo, first_anchor)]
            if max_bytes and max_bytes > 0 and hi - lo > max_bytes and index is not None:
                # Positions strictly increase: each split point is the first entry at least
                # max_bytes past the previous one (a batch boundary), found by binary search.
                i = 0
                while True:
                    i = index.first_at_least(cuts[-1][0] + max_bytes, field=1, lo=i)
                    if i >= index.count:
                        break
                    rel, pos = index.entry(i)
                    if pos >= hi:
                        break
                    cuts.append((pos, seg.base_offset + rel))
            cuts.append((hi, -1))
            for (a, anchor), (b, _) in zip(cuts, cuts[1:]):
                if b > a:
                    out.append(ReadRange(
                        self.topic, self.partition, path, seg.base_offset, a, b, start, end,
                        aborted, segment_next_offset=seg.next_offset, segment_size=seg.size,
                        segment_records=seg.record_count, segment_checksum=seg.checksum,
                        first_anchor=anchor, last_anchor=last_anchor if b == hi else -1))
        return out

    # -- reading -------------------------------------------------------------
    def read(self, start: int, end: int | None = None, *, max_records: int | None = None,
             isolation: str = READ_COMMITTED, include_headers: bool = True) -> pa.Table:
        """Records with offsets in ``[start, end)`` (end defaults to the isolation's upper bound),
        at most ``max_records``, as an Arrow table with the Kafka schema.

        With ``max_records`` the log is read in growing windows of offsets, so
        that offsets holding no records for this reader (transaction markers,
        aborted transactions, compacted-away records) do not cut the result
        short, and a small read of a long partition stays small.
        """
        upper = self.upper_bound(isolation)
        start = self.resolve(start, isolation)
        self.check_in_range(start)
        end = upper if end is None else min(self.resolve(end, isolation), upper)
        if max_records is not None and (not isinstance(max_records, int) or max_records < 0):
            raise ConfigError(f"max_records must be a non-negative integer, got {max_records!r}")
        batches, count = [], 0
        pos, window = start, max_records or 0
        while pos < end and (max_records is None or count < max_records):
            stop = end if max_records is None else min(end, pos + max(window, max_records - count))
            for rr in self.plan(pos, stop, max_bytes=8 << 20):
                rb = read_range(self.storage, rr, include_headers=include_headers,
                                isolation=isolation)
                if max_records is not None and count + rb.num_rows > max_records:
                    rb = rb.slice(0, max_records - count)
                if rb.num_rows:
                    batches.append(rb)
                    count += rb.num_rows
                if max_records is not None and count >= max_records:
                    break
            pos, window = stop, window * 2
        return pa.Table.from_batches(batches, schema=KAFKA_SCHEMA)


def read_range(storage: Storage, rr: ReadRange, *, include_headers: bool = True,
               isolation: str = READ_COMMITTED, verify_crc: bool = True,
               reuse_input: bool = False) -> pa.RecordBatch:
    """Range-read and decode one :class:`ReadRange` into an Arrow record batch.

    The bytes are checked against what the manifest entry promises before
    anything is decoded (:func:`check_range`), so a truncated, replaced or
    mis-indexed segment is a :class:`SegmentMismatchError`, never silently
    other or fewer records. Every reader (consume, the Spark data source, the
    load, the broker's fetch) comes through here. ``reuse_input=True``: read
    local files into writable memory and let the decoder write the value
    column into it (``decode_to_arrow(..., reuse_input=True)``: less fresh memory).
    """
    data = read_checked(storage, rr, writable=reuse_input)
    aborted = rr.aborted if isolation == READ_COMMITTED else ()
    return decode_to_arrow(data, topic=rr.topic, partition=rr.partition,
                           start_offset=rr.start_offset, end_offset=rr.end_offset,
                           aborted=aborted, include_headers=include_headers,
                           verify_crc=verify_crc, segment=rr.path, base_position=rr.byte_start,
                           reuse_input=reuse_input)


def read_checked(storage: Storage, rr: ReadRange, *, writable: bool = False):
    """The bytes of ``rr`` (bytes-like), checked by :func:`check_range`. One extra byte is
    asked for at the end of the object, so an object longer than listed is caught without
    a HEAD; it is cut off with a view, not a copy. ``writable``: see ``Storage.get_range``."""
    at_end = rr.segment_size >= 0 and rr.byte_end == rr.segment_size
    data = storage.get_range(rr.path, rr.byte_start, rr.byte_end + (1 if at_end else 0),
                             **({"writable": True} if writable else {}))
    check_range(rr, data)
    return memoryview(data)[:rr.size] if len(data) > rr.size else data


def whole_segment_range(topic: str, partition: int, seg: SegmentEntry) -> ReadRange:
    """The :class:`ReadRange` of a whole segment object, all of it, with its manifest facts
    (for readers that fetch whole objects, such as compaction, and check them with
    :func:`check_range`)."""
    return ReadRange(topic, partition, seg.paths(topic, partition)[".log"], seg.base_offset,
                     0, seg.size, seg.base_offset, seg.next_offset,
                     segment_next_offset=seg.next_offset, segment_size=seg.size,
                     segment_records=seg.record_count, segment_checksum=seg.checksum)


# baseOffset, batchLength, (epoch, magic, crc, attributes), lastOffsetDelta,
# (timestamps, producer id/epoch, base sequence), recordCount: one unpack per batch.
_HEADER_FIELDS = struct.Struct(">qi11xi30xi")
_BATCH_HEADER_SIZE = 61
_LAST_DELTA_AT = 23


def check_range(rr: ReadRange, data) -> None:
    """Raise :class:`SegmentMismatchError` unless ``data`` (the bytes of ``rr``, plus one
    more byte when the range ends the object) agrees with the manifest entry: the object's
    size; for a whole-object read its CRC-32C (which implies the rest); otherwise every batch
    inside ``[base_offset, segment_next_offset)`` and in order, the first batch starting at
    or before the index entry the range starts at, the last one reaching the entry it ends
    at, and (whole object without a checksum) the record count.

    Only batch headers are read here (the decoder checks the rest, CRCs included).
    """
    size = rr.size
    if rr.segment_size < 0:
        return  # a range planned without its manifest entry (nothing to check against)

    def fail(what: str, got, want, *, offset=None, position=None):
        raise SegmentMismatchError(f"does not match its manifest entry: {mismatch(what, got, want)}",
                                   segment=rr.path, offset=offset, position=position)

    if len(data) < size:
        fail("size", rr.byte_start + len(data), rr.segment_size)
    if len(data) > size:
        fail("size", f"more than {rr.segment_size}", rr.segment_size)
    view = memoryview(data)[:size]
    if rr.whole_segment and rr.segment_checksum >= 0:
        got = crc32c(view)
        if got != rr.segment_checksum:
            fail("checksum", f"crc32c:{got:08x}", f"crc32c:{rr.segment_checksum:08x}")
        # The bytes are exactly the ones committed (whose batches, ranges and record count
        # the writer derived the entry from): walking the headers again would prove nothing
        # more, and costs a Python step per batch (CRC-32C runs at memory speed).
        return
    pos, prev_last, records = 0, None, 0
    unpack = _HEADER_FIELDS.unpack_from
    seg_base, seg_next = rr.base_offset, rr.segment_next_offset
    anchor = rr.first_anchor
    while pos < size:
        if size - pos < _BATCH_HEADER_SIZE:
            fail("batch header", f"cut short after {size - pos} bytes", "a whole batch",
                 position=rr.byte_start + pos)
        base, length, last_delta, count = unpack(view, pos)
        last = base + last_delta
        end = pos + LOG_OVERHEAD + length
        if length < _BATCH_HEADER_SIZE - LOG_OVERHEAD or end > size:
            fail("batch length", length, f"a batch within the range's {size - pos} bytes",
                 offset=base, position=rr.byte_start + pos)
        if not seg_base <= base <= last < seg_next:
            fail("batch offsets", f"[{base}, {last + 1})",
                 f"inside the segment's [{seg_base}, {seg_next})",
                 offset=base, position=rr.byte_start + pos)
        if prev_last is None:
            if 0 <= anchor < base:
                fail("first batch at the indexed position", f"offset {base}",
                     f"a batch holding offset {anchor} (the index points past it)",
                     offset=base, position=rr.byte_start + pos)
        elif base <= prev_last:
            fail("batch base offset", base, f"after the previous batch's last offset {prev_last}",
                 offset=base, position=rr.byte_start + pos)
        records += count
        prev_last = last
        pos = end
    if rr.last_anchor >= 0 and (prev_last is None or prev_last < rr.last_anchor):
        fail("last offset before the indexed end", prev_last,
             f"at least {rr.last_anchor} (the index points before it)",
             position=rr.byte_start + pos)
    if rr.whole_segment and rr.segment_records >= 0 and records != rr.segment_records:
        fail("record count", records, rr.segment_records)


_SCAN_WINDOW = 64 << 10       # first read of a timestamp search: the answer is usually close
_MAX_SCAN_WINDOW = 8 << 20    # later reads grow up to this, so a long scan costs few requests
_OFFSET_LENGTH = struct.Struct(">qi")


def segment_offset_for_timestamp(storage: Storage, path: str, size: int, index: bytes,
                                 timeindex: bytes, base_offset: int, timestamp_ms: int,
                                 start_offset: int) -> int | None:
    """First offset >= ``start_offset`` whose timestamp >= ``timestamp_ms`` in one segment
    (``size`` bytes at ``path``, its indexes possibly empty), None if none: Kafka's
    ``findOffsetByTimestamp``, a time index lookup, an offset index lookup of
    ``max(that offset, start_offset)``, then a forward scan of the log from there."""
    return _offset_for_timestamp_in(
        storage, path, size, IndexView.offsets(index) if index else None,
        IndexView.times(timeindex) if timeindex else None, base_offset, timestamp_ms,
        start_offset)


def _offset_for_timestamp_in(storage: Storage, path: str, size: int, index: IndexView | None,
                             timeindex: IndexView | None, base_offset: int, timestamp_ms: int,
                             start_offset: int) -> int | None:
    """:func:`segment_offset_for_timestamp` over index views (pages read as needed)."""
    approx = base_offset
    if timeindex is not None:
        i = timeindex.last_key_at_most(timestamp_ms)
        if i >= 0:
            approx = base_offset + timeindex.entry(i)[1]
    pos = (index_lookup(index, base_offset, max(approx, start_offset))[1]
           if index is not None else 0)
    return _scan_for_timestamp(storage, path, pos, size, timestamp_ms, start_offset)


def _scan_for_timestamp(storage: Storage, path: str, pos: int, end: int, timestamp_ms: int,
                        start_offset: int) -> int | None:
    """First offset >= ``start_offset`` with a timestamp >= ``timestamp_ms`` in the batches of
    ``path`` from byte ``pos`` (a batch boundary) to ``end``; None if there is none.

    Reads windows of whole batches (a batch larger than the window widens it) instead of
    the rest of the segment, and decodes only batches whose max timestamp reaches the target.
    """
    window = _SCAN_WINDOW
    while pos < end:
        want = min(end, pos + window)
        buf = storage.get_range(path, pos, want)
        done = 0
        try:
            # A window that stops short of the segment's end cuts its last batch: partial.
            for i, header in iter_batches(buf, verify_crc=False, check_order=False,
                                          partial=pos + len(buf) == want < end):
                done = i + header.size
                if header.last_offset >= start_offset and header.max_timestamp >= timestamp_ms:
                    _, records = decode_batch(buf, i, verify_crc=False)
                    for r in records:
                        if r.offset >= start_offset and r.timestamp >= timestamp_ms:
                            return r.offset
        except CorruptRecordError as e:
            raise type(e)(e.reason, segment=path, offset=e.offset, position=pos + e.position) from None
        if done == 0:  # one batch larger than the window: fetch it whole
            window = LOG_OVERHEAD + _OFFSET_LENGTH.unpack_from(buf, 0)[1]
            continue
        pos += done
        window = min(window * 2, _MAX_SCAN_WINDOW)
    return None


def first_batch_offset(storage: Storage, rr: ReadRange) -> int:
    """Base offset of the first batch of a range (for diagnostics and tests)."""
    head = storage.get_range(rr.path, rr.byte_start, rr.byte_start + 8)
    if len(head) < 8:
        raise CorruptRecordError(f"{rr.path} ends before byte {rr.byte_start + 8}",
                                 segment=rr.path, position=rr.byte_start)
    return int.from_bytes(head, "big", signed=True)
