"""Log segments: building, scanning, recovering and indexing ``.log`` bytes.

A segment is a run of v2 record batches (the ``.log``) plus two sparse
indexes (``.index``, ``.timeindex``, see :mod:`kafkastore.format.offset_index` and
:mod:`kafkastore.format.time_index`). Everything here is a pure function over bytes.

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

Torn tail versus corruption (:func:`recover`). Kafka's recovery cuts the
segment at the first invalid batch, whatever follows. We only cut when the
damage is a *torn tail*: scanning stops at position ``p`` (a batch cut short,
a bad length or magic, zeros, garbage, or a CRC mismatch) and no valid batch
starts anywhere after ``p`` (a CRC-valid v2 batch whose base offset is at
least the next expected offset). When such a batch does follow, bytes in the
middle of the log were damaged, and cutting would silently drop committed
data: :func:`recover` raises :class:`CorruptRecordError` /
:class:`CrcMismatchError` naming the segment, offset and position instead.
A batch that is intact but out of order (offsets going backwards, below the
base offset, or past the segment's int32 range) is never a torn write and
always raises.
"""
from __future__ import annotations

import bisect
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from . import offset_index, time_index
from .crc import crc32c
from ..errors import CorruptRecordError, CrcMismatchError
from .offset_index import INT32_MAX
from ..errors import (CorruptIndexError, OffsetOrderError, SegmentOffsetOverflowError,  # noqa: F401
                     TruncatedBatchError, UnsupportedFormatError)  # (re-exported)
from .record_batch import (ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_APPEND_TIME,
                           LOG_OVERHEAD, MAGIC, MAGIC_OFFSET, MIN_BATCH_LENGTH, NO_TIMESTAMP,
                           BatchHeader, check_crc, decode_batch, parse_header)

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default

_OFFSET_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT64_MAX = (1 << 63) - 1
_UINT32 = struct.Struct(">I")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")










# An intact batch in the wrong place is never a torn write; every other scan
# error (cut short, bad length or magic, zeros, garbage, bad CRC) can be.
_NEVER_TORN = (OffsetOrderError, SegmentOffsetOverflowError, UnsupportedFormatError)

# Work bound for the search for a valid batch after damage: CRC bytes per byte
# searched. Real tails need a tiny fraction of it; only crafted input (length
# fields that fit at many candidate positions) can reach it.
_SEARCH_CRC_BUDGET = 8


# ----------------------------------------------------------------- stats

@dataclass(frozen=True)
class SegmentStats:
    """What a manifest records about a segment.

    ``record_count`` counts every record of every batch, control records
    (transaction markers) included: it is what the batch headers say.
    Timestamps are epoch ms; -1 (Kafka's ``NO_TIMESTAMP``) when there are
    none. ``min_timestamp`` is the smallest *record* timestamp (exact, not
    the smallest batch base timestamp, which is no lower bound);
    ``max_timestamp`` / ``offset_of_max_timestamp`` are Kafka's
    ``maxTimestampSoFar`` / ``offsetOfMaxTimestampSoFar`` (the last offset of
    the batch that first reached it; ``base_offset`` when none).
    ``first_batch_timestamp`` is the first batch's max timestamp, which
    Kafka uses for time-based rolling.
    """

    base_offset: int
    next_offset: int
    record_count: int
    batch_count: int
    size: int
    min_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    first_offset: int | None = None
    first_batch_timestamp: int = NO_TIMESTAMP

    @property
    def is_empty(self) -> bool:
        return self.batch_count == 0

    @property
    def last_offset(self) -> int:
        """``next_offset - 1`` (``base_offset - 1`` for an empty segment)."""
        return self.next_offset - 1


class _StatsAccumulator:
    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.record_count = 0
        self.batch_count = 0
        self.size = 0
        self.min_timestamp: int | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_offset: int | None = None
        self.first_batch_timestamp = NO_TIMESTAMP

    def add(self, header: BatchHeader, min_timestamp: int | None) -> None:
        if self.first_offset is None:
            self.first_offset = header.base_offset
            self.first_batch_timestamp = header.max_timestamp
        self.next_offset = header.next_offset
        self.record_count += header.record_count
        self.batch_count += 1
        self.size += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if min_timestamp is not None and min_timestamp >= 0 and (
                self.min_timestamp is None or min_timestamp < self.min_timestamp):
            self.min_timestamp = min_timestamp

    def stats(self) -> SegmentStats:
        return SegmentStats(
            base_offset=self.base_offset, next_offset=self.next_offset,
            record_count=self.record_count, batch_count=self.batch_count, size=self.size,
            min_timestamp=NO_TIMESTAMP if self.min_timestamp is None else self.min_timestamp,
            max_timestamp=self.max_timestamp, offset_of_max_timestamp=self.offset_of_max_timestamp,
            first_offset=self.first_offset, first_batch_timestamp=self.first_batch_timestamp)


def batch_min_timestamp(buf, pos: int, header: BatchHeader) -> int | None:
    """Smallest record timestamp (>= 0) of the batch at ``buf[pos]``; None if it has none.

    Under log-append time every record carries the batch's max timestamp;
    otherwise the records are decoded (timestamps inside a batch need not be
    ordered, so the header alone gives no lower bound).
    """
    if header.record_count == 0:
        return None
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.max_timestamp if header.max_timestamp >= 0 else None
    _, records = decode_batch(buf, pos, verify_crc=False)
    stamps = [r.timestamp for r in records if r.timestamp >= 0]
    return min(stamps) if stamps else None


def segment_stats(log_bytes, base_offset: int, *, batches=None,
                  segment: str | None = None) -> SegmentStats:
    """Stats of a whole, valid segment (decodes records for the exact min timestamp).

    ``batches`` (``[(position, header)]``, e.g. from :func:`scan_log`) avoids
    a second scan; without it the log is scanned and must be valid.
    """
    if batches is None:
        batches = _valid_batches(log_bytes, base_offset, segment)
    acc = _StatsAccumulator(base_offset)
    for pos, header in batches:
        try:
            acc.add(header, batch_min_timestamp(log_bytes, pos, header))
        except CorruptRecordError as e:
            raise e.located(segment=segment, offset=header.base_offset, position=pos) from None
    return acc.stats()


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


# ----------------------------------------------------------------- framing

def iter_batches(buf, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
                 base_offset: int | None = None, expected_offset: int | None = None,
                 check_order: bool = False, stop_offset: int | None = None,
                 partial: bool = False,
                 segment: str | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """The batch walker: yields ``(position, header)`` for each batch of ``buf[start:end]``.

    Every reader of batch framing comes through here (segment scans and
    recovery, import, verify, compaction, timestamp lookups, the pure Arrow
    decoder), so a log is judged the same way everywhere; the C kernel in
    ``_native.c`` is its accelerated twin. Per batch (:func:`_read_batch`):
    the bytes are there (a batch or header cut short is
    :class:`TruncatedBatchError`, as are zeros), magic 2 (an intact legacy
    message is :class:`UnsupportedFormatError`), length and header fields
    consistent, the last offset within int64, the CRC-32C (``verify_crc``);
    given ``base_offset``, offsets within ``[base_offset, base_offset + 2^31-1]``
    (:class:`SegmentOffsetOverflowError`, :class:`OffsetOrderError`); with
    ``check_order``, each batch after the previous one (``expected_offset``:
    the first batch's lower bound).

    Damage raises (located with ``segment``, the batch's offset and its
    position in ``buf``) after the batches before it were yielded; for the
    recovery mode that stops at the last valid batch and keeps the error see
    :func:`scan_log`. The walk ends quietly at the first batch whose base
    offset is ``>= stop_offset`` (before its CRC is checked), and with
    ``partial`` (``buf`` is a window of a longer log) at a batch that runs
    past ``end``: the caller resumes at the last yielded batch's end.
    """
    if end is None:
        end = len(buf)
    pos = start
    expected = expected_offset if check_order else None
    while pos < end:
        if partial:
            avail = end - pos
            if avail < LOG_OVERHEAD or _OFFSET_LENGTH.unpack_from(buf, pos)[1] > avail - LOG_OVERHEAD:
                return
        try:
            header = _read_batch(buf, pos, end, base_offset, expected, verify_crc, stop_offset)
        except CorruptRecordError as e:
            raise e.located(segment=segment, position=pos) from None
        if header is None:
            return
        yield pos, header
        if check_order:
            expected = header.next_offset
        pos += header.size


def _read_batch(buf, pos: int, end: int, base_offset: int | None, expected_offset: int | None,
                verify_crc: bool, stop_offset: int | None = None) -> BatchHeader | None:
    """Header of the batch at ``pos`` after framing, CRC and offset checks (None: at or past
    ``stop_offset``, CRC not checked).

    Raises TruncatedBatchError / CorruptRecordError / CrcMismatchError for
    bytes that are not an intact batch, OffsetOrderError /
    SegmentOffsetOverflowError for an intact batch in the wrong place.
    """
    avail = end - pos
    if avail < LOG_OVERHEAD:
        offset = _INT64.unpack_from(buf, pos)[0] if avail >= 8 else None
        raise TruncatedBatchError(
            f"truncated batch header: {avail} bytes left are too short for its {HEADER_SIZE}",
            offset=offset, position=pos)
    batch_offset, length = _OFFSET_LENGTH.unpack_from(buf, pos)
    magic = buf[pos + MAGIC_OFFSET] if avail > MAGIC_OFFSET else MAGIC
    if length < MIN_BATCH_LENGTH or magic != MAGIC:
        if _all_zero(buf, pos, end):
            raise TruncatedBatchError(
                f"{avail} zero bytes (preallocated or never written)", position=pos)
        if _is_legacy_message(buf, pos, end, length):
            raise UnsupportedFormatError(
                f"message format v{magic} (magic {magic}): only record batch v2 is supported; "
                f"convert the topic with a Kafka broker first", offset=batch_offset, position=pos)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}",
                offset=batch_offset, position=pos)
        raise CorruptRecordError(
            f"unsupported magic {magic if magic < 128 else magic - 256} "
            f"(only v2 record batches are supported)", offset=batch_offset, position=pos)
    # A size running past the end is a partial write (Kafka's
    # FileLogInputStream stops there too).
    if length > avail - LOG_OVERHEAD:
        raise TruncatedBatchError(
            f"batch length {length} runs past the end of the buffer "
            f"({avail - LOG_OVERHEAD} bytes left): cut short", offset=batch_offset, position=pos)
    header = parse_header(buf, pos)
    if header.base_offset + header.last_offset_delta > _INT64_MAX:
        raise CorruptRecordError("last offset overflows int64", offset=batch_offset, position=pos)
    if stop_offset is not None and header.base_offset >= stop_offset:
        return None
    if verify_crc:
        check_crc(buf, pos, header)
    if base_offset is not None:
        if header.base_offset < base_offset:
            raise OffsetOrderError(
                f"batch offset {header.base_offset} is below the segment's base offset {base_offset}",
                offset=header.base_offset, position=pos)
        if header.last_offset - base_offset > INT32_MAX:
            raise SegmentOffsetOverflowError(
                f"last offset {header.last_offset} is more than {INT32_MAX} past the segment's "
                f"base offset {base_offset}", offset=header.base_offset, position=pos)
    if expected_offset is not None and header.base_offset < expected_offset:
        raise OffsetOrderError(
            f"batch offset {header.base_offset} does not follow the previous batch "
            f"(expected >= {expected_offset})", offset=header.base_offset, position=pos)
    return header


def _is_legacy_message(buf, pos: int, end: int, length: int) -> bool:
    """Whether an intact magic 0/1 message (Kafka < 0.11 format, zlib CRC-32) starts at ``pos``."""
    # 14 = Kafka's LegacyRecord.RECORD_OVERHEAD_V0: crc, magic, attributes, key and value lengths.
    if (end - pos <= MAGIC_OFFSET or buf[pos + MAGIC_OFFSET] not in (0, 1)
            or not 14 <= length <= end - pos - LOG_OVERHEAD):
        return False
    stored = _UINT32.unpack_from(buf, pos + LOG_OVERHEAD)[0]
    return zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET:pos + LOG_OVERHEAD + length]) == stored


def _all_zero(buf, pos: int, end: int) -> bool:
    # numpy reads the buffer in place: a crashed broker's preallocated
    # segment can hold a gigabyte of zeros.
    return not np.frombuffer(buf, dtype=np.uint8, count=end - pos, offset=pos).any()


class _SearchGaveUp(Exception):
    pass


def _find_valid_batch(buf, start: int, min_offset: int | None,
                      base_offset: int | None = None) -> tuple[int, int] | None:
    """First position >= ``start`` where a CRC-valid v2 batch with offset >= ``min_offset`` starts.

    Returns ``(position, base_offset)`` or None. Jumps between candidate
    magic bytes with ``bytes.find`` (C speed over zeros or garbage) and only
    computes a CRC where the length field fits and the offset is plausible
    (>= ``min_offset``, within int32 of ``base_offset``). Raises
    _SearchGaveUp when crafted input would make the search quadratic.
    """
    data = buf if isinstance(buf, (bytes, bytearray)) else memoryview(buf).tobytes()
    end = len(data)
    budget = _SEARCH_CRC_BUDGET * max(end - start, 0) + (1 << 20)
    magic = bytes([MAGIC])
    search = start + MAGIC_OFFSET
    while True:
        m = data.find(magic, search)
        if m < 0:
            return None
        cand = m - MAGIC_OFFSET
        if cand + HEADER_SIZE > end:
            return None
        search = m + 1
        batch_offset, length = _OFFSET_LENGTH.unpack_from(data, cand)
        if length < MIN_BATCH_LENGTH or length > end - cand - LOG_OVERHEAD:
            continue
        if min_offset is not None and batch_offset < min_offset:
            continue
        if base_offset is not None and not 0 <= batch_offset - base_offset <= INT32_MAX:
            continue
        budget -= length
        if budget < 0:
            raise _SearchGaveUp()
        stored = _UINT32.unpack_from(data, cand + CRC_OFFSET)[0]
        view = memoryview(data)[cand + ATTRIBUTES_OFFSET:cand + LOG_OVERHEAD + length]
        if crc32c(view) == stored:
            return cand, batch_offset


# ----------------------------------------------------------------- scanning

@dataclass
class LogScan:
    """Result of :func:`scan_log`: the intact prefix of a log and what stopped it."""

    batches: list[tuple[int, BatchHeader]]
    valid_bytes: int
    size: int
    base_offset: int | None = None
    error: CorruptRecordError | None = None

    @property
    def complete(self) -> bool:
        """True when every byte belongs to a valid batch."""
        return self.error is None

    @property
    def next_offset(self) -> int | None:
        """Offset after the last valid batch (``base_offset`` if there is none)."""
        return self.batches[-1][1].next_offset if self.batches else self.base_offset


def scan_log(buf, *, base_offset: int | None = None, segment: str | None = None,
             verify_crc: bool = True) -> LogScan:
    """Walk the batches of ``buf`` until the end or the first problem.

    Checks each batch's framing, header, CRC (unless ``verify_crc=False``),
    that offsets increase and, given ``base_offset``, that they lie in
    ``[base_offset, base_offset + 2^31-1]``. Never raises for bad bytes: the
    problem is returned in ``error`` (located with ``segment``, offset and
    position) and ``valid_bytes`` is where it starts.
    """
    batches: list[tuple[int, BatchHeader]] = []
    error = None
    try:
        # extend keeps the batches yielded before an error
        batches.extend(iter_batches(buf, verify_crc=verify_crc, base_offset=base_offset,
                                    check_order=True, segment=segment))
    except CorruptRecordError as e:
        error = e
    pos = batches[-1][0] + batches[-1][1].size if batches else 0
    return LogScan(batches, pos, len(buf), base_offset, error)


def _valid_batches(buf, base_offset: int | None, segment: str | None,
                   verify_crc: bool = True) -> list[tuple[int, BatchHeader]]:
    scan = scan_log(buf, base_offset=base_offset, segment=segment, verify_crc=verify_crc)
    if scan.error is not None:
        raise scan.error
    return scan.batches


# ----------------------------------------------------------------- recovery

@dataclass
class RecoveryResult:
    """Result of :func:`recover`: the log cut back to its last valid batch."""

    log: bytes
    batches: list[tuple[int, BatchHeader]]
    truncated_bytes: int
    base_offset: int | None = None
    note: str | None = None
    error: CorruptRecordError | None = field(default=None, repr=False)

    @property
    def valid_bytes(self) -> int:
        return len(self.log)

    @property
    def next_offset(self) -> int | None:
        return self.batches[-1][1].next_offset if self.batches else self.base_offset


def recover(buf, *, base_offset: int | None = None, segment: str | None = None,
            allow_torn_tail: bool = True) -> RecoveryResult:
    """Cut a torn tail off a segment's log, as Kafka's ``LogSegment.recover`` does.

    A torn tail is damage after the last valid batch with no valid batch
    after it (see the module docstring): a batch cut short, trailing zeros or
    garbage, or a CRC mismatch in the last batch. It is cut and described in
    ``note``. Damage followed by a valid batch, or an intact batch with bad
    offsets, raises CorruptRecordError / CrcMismatchError naming ``segment``,
    the offset and the byte position. With ``allow_torn_tail=False`` (a
    sealed segment that must be whole) any damage raises.
    """
    scan = scan_log(buf, base_offset=base_offset, segment=segment)
    data = buf if isinstance(buf, bytes) else memoryview(buf).tobytes()
    if scan.error is None:
        return RecoveryResult(data, scan.batches, 0, base_offset)
    err = scan.error
    pos = scan.valid_bytes
    expected = scan.next_offset
    where_offset = err.offset if err.offset is not None else expected
    if isinstance(err, _NEVER_TORN):
        raise err
    try:
        follower = _find_valid_batch(data, pos + 1, expected, base_offset)
    except _SearchGaveUp:
        raise _relabel(err, f"{err.reason}; cannot tell a torn tail from corruption in the "
                            f"{len(data) - pos} bytes after it, refusing to cut", where_offset) from None
    if follower is not None:
        raise _relabel(err, f"{err.reason}; a valid batch follows at position {follower[0]} "
                            f"(offset {follower[1]}), so this is corruption inside the log, "
                            f"not a torn tail", where_offset)
    if not allow_torn_tail:
        raise _relabel(err, f"{err.reason}; damaged tail of {len(data) - pos} bytes in a "
                            f"segment that must be complete", where_offset)
    last = f"after offset {expected - 1}" if scan.batches else "no valid batch before it"
    note = f"cut {len(data) - pos} bytes of torn tail at position {pos} ({last}): {err.reason}"
    return RecoveryResult(data[:pos], scan.batches, len(data) - pos, base_offset, note, err)


def _relabel(err: CorruptRecordError, reason: str, offset: int | None) -> CorruptRecordError:
    cls = CrcMismatchError if isinstance(err, CrcMismatchError) else CorruptRecordError
    return cls(reason, segment=err.segment, offset=offset, position=err.position)


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
    with thousands of batches per segment (Broker.send_arrow)."""
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


# ----------------------------------------------------------------- index validation

def check_indexes(batches, index_bytes, timeindex_bytes, base_offset: int, *,
                  max_problems: int = 20) -> list[str]:
    """Problems that make the indexes unusable for this log (empty list: fine).

    ``batches`` is ``[(position, header)]`` of the log. An index is usable
    when every lookup lands at or before the batch that holds the answer:
    offset index entries must point at batch starts with an offset after the
    previous batch's last offset and within the log; time index entries
    ``(T, O)`` must have ``O`` within the log and no batch before ``O``'s
    batch with a timestamp >= ``T``. Entries need not be exactly the ones
    :func:`rebuild_indexes` would write (a broker restart or a different
    ``index.interval.bytes`` changes those). None means "not given" and is
    not checked.
    """
    problems: list[str] = []
    last_offsets = [h.last_offset for _, h in batches]
    seg_last = last_offsets[-1] if last_offsets else base_offset - 1

    def add(msg: str) -> bool:
        problems.append(msg)
        return len(problems) < max_problems

    if index_bytes is not None:
        try:
            entries = offset_index.parse(index_bytes, base_offset)
        except CorruptIndexError as e:
            add(f"offset index: {e.reason}")
            entries = []
        by_position = {pos: i for i, (pos, _) in enumerate(batches)}
        for offset, position in entries:
            i = by_position.get(position)
            if i is None:
                if not add(f"offset index entry (offset {offset}, position {position}) "
                           f"does not point at a batch start"):
                    break
                continue
            prev_last = last_offsets[i - 1] if i else base_offset - 1
            if offset <= prev_last:
                if not add(f"offset index entry (offset {offset}, position {position}): the batch "
                           f"before that position already reaches offset {prev_last}"):
                    break
            elif offset > seg_last:
                if not add(f"offset index entry (offset {offset}, position {position}) is past "
                           f"the log's last offset {seg_last}"):
                    break

    if timeindex_bytes is not None and len(problems) < max_problems:
        try:
            tentries = time_index.parse(timeindex_bytes, base_offset)
        except CorruptIndexError as e:
            add(f"time index: {e.reason}")
            tentries = []
        # prefix_max[i]: largest max timestamp of the batches before batch i.
        prefix_max = [NO_TIMESTAMP]
        for _, h in batches:
            prefix_max.append(max(prefix_max[-1], h.max_timestamp))
        for ts, offset in tentries:
            if offset > seg_last:
                msg = f"time index entry (timestamp {ts}, offset {offset}) is past the log's last offset {seg_last}"
            else:
                i = bisect.bisect_left(last_offsets, offset)
                if prefix_max[i] >= ts:
                    msg = (f"time index entry (timestamp {ts}, offset {offset}): an earlier batch "
                           f"already has timestamp {prefix_max[i]}")
                elif ts > prefix_max[-1]:
                    msg = (f"time index entry (timestamp {ts}, offset {offset}) is above the log's "
                           f"max timestamp {prefix_max[-1]}")
                else:
                    continue
            if not add(msg):
                break
    return problems


def load_indexes(log_bytes, index_bytes, timeindex_bytes, base_offset: int, *,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, batches=None,
                 segment: str | None = None) -> tuple[bytes, bytes, bool]:
    """Indexes fit to use with ``log_bytes``: ``(index, timeindex, rebuilt)``.

    Drops preallocation padding (trailing zero entries), then checks both
    indexes against the log (:func:`check_indexes`). When either is missing
    (None) or has any problem, both are rebuilt from the log, as Kafka
    rebuilds a segment's indexes together on recovery, and ``rebuilt`` is
    True. The log itself must be valid (see :func:`recover`).
    """
    if batches is None:
        batches = _valid_batches(log_bytes, base_offset, segment)
    if index_bytes is not None and timeindex_bytes is not None:
        index = offset_index.trim_preallocated(index_bytes)
        timeindex = time_index.trim_preallocated(timeindex_bytes)
        if not check_indexes(batches, index, timeindex, base_offset, max_problems=1):
            return index, timeindex, False
    index, timeindex = rebuild_indexes(log_bytes, base_offset, index_interval_bytes, batches=batches)
    return index, timeindex, True
