"""Building segments: a ``.log`` and its two sparse indexes from batches
(:class:`SegmentBuilder`, :func:`index_batches`, :func:`index_batch_arrays`), and indexes
rebuilt from a ``.log`` (:func:`rebuild_indexes`). Pure functions over bytes.

Index entries are written exactly when Kafka's ``LogSegment`` writes them::

    # per append (LogSegment.append) or per batch (LogSegment.recover)
    if batch.max_timestamp > max_timestamp_so_far:
        max_timestamp_so_far = batch.max_timestamp
        offset_of_max_timestamp = batch.last_offset
    if bytes_since_last_index_entry > index_interval_bytes:
        offset_index.append(batch.last_offset, position_of_batch)
        time_index.maybe_append(max_timestamp_so_far, offset_of_max_timestamp)
        bytes_since_last_index_entry = 0
    bytes_since_last_index_entry += batch.size
    # when the segment is closed / rolled / recovered:
    time_index.maybe_append(max_timestamp_so_far, offset_of_max_timestamp)

So the first batch is never indexed, the check happens *before* the batch's
own bytes are counted, and an offset index entry holds the batch's *last*
offset with the position where the batch starts.
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

import numpy as np

from . import time_index
from .offset_index import INT32_MAX
from ..errors import CorruptRecordError
from .record_batch import NO_TIMESTAMP
from .segment_scan import _valid_batches, iter_batches
from .segment_stats import SegmentStats, _StatsAccumulator, batch_min_timestamp


DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


# ----------------------------------------------------------------- index building

class _IndexAccumulator:
    """Kafka's index-entry rule (see the module docstring), shared by builder and rebuild."""

    def __init__(self, base_offset: int, index_interval_bytes: int):
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
        self.base_offset = base_offset
        self.interval = index_interval_bytes
        self.index = bytearray()
        self.time = time_index.TimeIndexWriter(base_offset)
        self.bytes_since_last_entry = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset

    def add(self, position: int, size: int, largest_offset: int,
            max_timestamp: int, offset_of_max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
        if self.bytes_since_last_entry > self.interval:
            self.index += _OFFSET_ENTRY.pack(largest_offset - self.base_offset, position)
            self.time.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += size

    def finish(self) -> tuple[bytes, bytes]:
        """Index bytes as of closing the segment (the final time index entry added)."""
        timeindex = self.time.to_bytes()
        if self.max_timestamp > self.time.last_entry[0]:
            timeindex += _TIME_ENTRY.pack(self.max_timestamp,
                                          self.offset_of_max_timestamp - self.base_offset)
        return bytes(self.index), timeindex


# ----------------------------------------------------------------- building

class BuiltSegment(NamedTuple):
    log: bytes
    index: bytes
    timeindex: bytes
    stats: SegmentStats


class SegmentBuilder:
    """Append batches to a new segment; :meth:`build` gives ``.log``, ``.index``, ``.timeindex``.

    ``append`` takes the bytes of one or more whole batches and treats them
    as one Kafka append (``LogSegment.append``): at most one offset index
    entry, for the last offset of the appended bytes at the position where
    they start. Appending batch by batch gives exactly the indexes that
    :func:`rebuild_indexes` (Kafka's recovery) computes.
    """

    def __init__(self, base_offset: int, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 name: str | None = None, verify_crc: bool = True):
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset}")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.name = name
        self.verify_crc = verify_crc
        self._log = bytearray()
        self._indexes = _IndexAccumulator(base_offset, index_interval_bytes)
        self._stats = _StatsAccumulator(base_offset)

    @property
    def size(self) -> int:
        return len(self._log)

    @property
    def next_offset(self) -> int:
        return self._stats.next_offset

    @property
    def record_count(self) -> int:
        return self._stats.record_count

    @property
    def batch_count(self) -> int:
        return self._stats.batch_count

    @property
    def is_empty(self) -> bool:
        return not self._log

    @property
    def max_timestamp(self) -> int:
        return self._stats.max_timestamp

    @property
    def first_batch_timestamp(self) -> int:
        return self._stats.first_batch_timestamp

    def can_append(self, last_offset: int) -> bool:
        """Whether a batch ending at ``last_offset`` fits this segment's int32 relative offsets."""
        return 0 <= last_offset - self.base_offset <= INT32_MAX

    def append(self, data, *, min_timestamp: int | None = None) -> int:
        """Append whole batches; returns the position where they start.

        Checks framing, CRC (unless the builder was made with
        ``verify_crc=False``) and that offsets continue the segment; on any
        problem raises (CorruptRecordError, CrcMismatchError,
        OffsetOrderError, SegmentOffsetOverflowError) and appends nothing.
        ``min_timestamp``, the smallest record timestamp of ``data``, saves
        decoding the records when the caller knows it.
        """
        end = len(data)
        position = len(self._log)
        if end == 0:
            return position
        expected = self._stats.next_offset if self._stats.batch_count else None
        try:
            headers = list(iter_batches(data, verify_crc=self.verify_crc, base_offset=self.base_offset,
                                        check_order=True, expected_offset=expected))
        except CorruptRecordError as e:
            # Report where the batch would sit in the segment, not in ``data``.
            raise type(e)(e.reason, segment=self.name, offset=e.offset,
                          position=position + e.position) from None
        mins = []
        max_ts, offset_of_max = NO_TIMESTAMP, self.base_offset
        for pos, header in headers:
            if min_timestamp is None:
                try:
                    mins.append(batch_min_timestamp(data, pos, header))
                except CorruptRecordError as e:
                    raise e.located(segment=self.name, offset=header.base_offset,
                                    position=position + pos) from None
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
        for i, (pos, header) in enumerate(headers):
            self._stats.add(header, min_timestamp if min_timestamp is not None else mins[i])
        self._log += data
        self._indexes.add(position, end, headers[-1][1].last_offset, max_ts, offset_of_max)
        return position

    def stats(self) -> SegmentStats:
        return self._stats.stats()

    def build(self) -> BuiltSegment:
        """The segment as Kafka leaves a closed one: log, trimmed indexes (final time entry), stats.

        Does not seal the builder: more batches may be appended and
        ``build`` called again.
        """
        index, timeindex = self._indexes.finish()
        return BuiltSegment(bytes(self._log), index, timeindex, self._stats.stats())


class IndexedBatches(NamedTuple):
    """What :func:`index_batches` computes for a segment made of known batches."""

    index: bytes
    timeindex: bytes
    stats: SegmentStats
    positions: tuple[int, ...]


def index_batches(base_offset: int, sizes: Sequence[int], first_offset: int, last_offsets: Sequence[int],
                  record_counts: Sequence[int], max_timestamps: Sequence[int],
                  min_timestamps: Sequence[int], *,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> IndexedBatches:
    """Indexes, stats and positions of a segment that is the concatenation of whole, valid
    batches, each appended on its own (as :class:`SegmentBuilder` appending them one by one
    would compute them, byte for byte), from the batches' header fields alone.

    For a writer that encoded the batches itself: nothing is parsed or checked
    (no framing, CRC or offset order checks), so the log can be joined in one
    copy when it is written. ``first_offset``: the first batch's base offset;
    ``min_timestamps``: smallest record timestamp of each batch (< 0 or None: none).
    """
    n = len(sizes)
    if n == 0:
        raise ValueError("index_batches needs at least one batch")
    positions = [0] * n
    indexes = _IndexAccumulator(base_offset, index_interval_bytes)
    pos = 0
    max_ts, offset_of_max = NO_TIMESTAMP, base_offset
    min_ts = None
    for i in range(n):
        positions[i] = pos
        size, last, ts = sizes[i], last_offsets[i], max_timestamps[i]
        indexes.add(pos, size, last, ts, last)
        if ts > max_ts:
            max_ts, offset_of_max = ts, last
        low = min_timestamps[i]
        if low is not None and low >= 0 and (min_ts is None or low < min_ts):
            min_ts = low
        pos += size
    index, timeindex = indexes.finish()
    stats = SegmentStats(
        base_offset=base_offset, next_offset=last_offsets[-1] + 1,
        record_count=int(sum(record_counts)), batch_count=n, size=pos,
        min_timestamp=NO_TIMESTAMP if min_ts is None else min_ts,
        max_timestamp=max_ts, offset_of_max_timestamp=offset_of_max,
        first_offset=first_offset, first_batch_timestamp=max_timestamps[0])
    return IndexedBatches(index, timeindex, stats, tuple(positions))


def index_batch_arrays(base_offset: int, sizes, first_offset: int, last_offsets,
                       record_counts, max_timestamps, min_timestamps, *,
                       index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> IndexedBatches:
    """:func:`index_batches` with int64 arrays in and out, vectorised (the byte-identical
    result: tests compare the two). ``positions`` is an int64 array here. For a writer
    with thousands of batches per segment (LogWriter.send_arrow)."""
    sizes = np.asarray(sizes, np.int64)
    last = np.asarray(last_offsets, np.int64)
    max_ts = np.asarray(max_timestamps, np.int64)
    min_ts = np.asarray(min_timestamps, np.int64)
    n = len(sizes)
    if n == 0:
        raise ValueError("index_batches needs at least one batch")
    if index_interval_bytes < 0:
        raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
    cum = np.concatenate(([0], np.cumsum(sizes)))
    positions = cum[:-1]
    # Kafka's rule: an entry at batch i when more than index_interval_bytes were appended
    # since the last entry (or the segment start); batch i's bytes count after it.
    if n == 1:
        entries = np.zeros(0, np.int64)
    elif int(sizes[:-1].min()) > index_interval_bytes:
        entries = np.arange(1, n, dtype=np.int64)
    else:
        found, e = [], 0
        while True:
            e = int(np.searchsorted(cum, cum[e] + index_interval_bytes, side="right"))
            if e >= n:
                break
            found.append(e)
        entries = np.array(found, np.int64)
    # maxTimestampSoFar / offsetOfMaxTimestampSoFar after each batch (strict increases)
    run_max = np.maximum.accumulate(np.maximum(max_ts, NO_TIMESTAMP))
    prev = np.concatenate(([NO_TIMESTAMP], run_max[:-1]))
    rises = max_ts > prev
    at = np.maximum.accumulate(np.where(rises, np.arange(n), -1))
    off_max = np.where(at >= 0, last[np.maximum(at, 0)], base_offset)
    rel_last = last[entries] - base_offset
    if len(rel_last) and (rel_last.min() < 0 or rel_last.max() > INT32_MAX
                          or positions[entries].max() > INT32_MAX):
        raise ValueError(f"offsets or positions of segment {base_offset} do not fit its index")
    index = np.empty(len(entries), [("off", ">i4"), ("pos", ">i4")])
    index["off"], index["pos"] = rel_last, positions[entries]
    t_ts, t_off = run_max[entries], off_max[entries]
    keep = t_ts > np.concatenate(([NO_TIMESTAMP], t_ts[:-1]))  # maybeAppend: larger only
    t_ts, t_off = t_ts[keep], t_off[keep]
    last_ts = int(t_ts[-1]) if len(t_ts) else NO_TIMESTAMP
    if int(run_max[-1]) > last_ts:  # the final entry of a closed segment
        t_ts = np.append(t_ts, run_max[-1])
        t_off = np.append(t_off, off_max[-1])
    rel = t_off - base_offset
    if len(rel) and (rel.min() < 0 or rel.max() > INT32_MAX):
        raise ValueError(f"offsets of segment {base_offset} do not fit its time index")
    tindex = np.empty(len(t_ts), [("ts", ">i8"), ("off", ">i4")])
    tindex["ts"], tindex["off"] = t_ts, rel
    valid_min = min_ts[min_ts >= 0]
    stats = SegmentStats(
        base_offset=base_offset, next_offset=int(last[-1]) + 1,
        record_count=int(np.sum(record_counts)), batch_count=n, size=int(cum[-1]),
        min_timestamp=int(valid_min.min()) if len(valid_min) else NO_TIMESTAMP,
        max_timestamp=int(run_max[-1]), offset_of_max_timestamp=int(off_max[-1]),
        first_offset=first_offset, first_batch_timestamp=int(max_ts[0]))
    return IndexedBatches(index.tobytes(), tindex.tobytes(), stats, positions)


def rebuild_indexes(log_bytes, base_offset: int,
                    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, *,
                    batches=None, segment: str | None = None) -> tuple[bytes, bytes]:
    """``(index_bytes, timeindex_bytes)`` for a valid log, as Kafka's recovery rebuilds them.

    ``batches`` (from :func:`scan_log`/:func:`recover`) avoids rescanning;
    otherwise the log is scanned (CRC checked) and must be valid.
    """
    if batches is None:
        batches = _valid_batches(log_bytes, base_offset, segment)
    acc = _IndexAccumulator(base_offset, index_interval_bytes)
    for pos, header in batches:
        acc.add(pos, header.size, header.last_offset, header.max_timestamp, header.last_offset)
    return acc.finish()
