"""Walking the batches of a ``.log``: framing (:func:`iter_batches`), scanning for the
valid prefix (:func:`scan_log`) and recovery (:func:`recover`). Pure functions over bytes.

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

import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .crc import crc32c
from ..errors import (CorruptRecordError, CrcMismatchError, OffsetOrderError,
                      SegmentOffsetOverflowError, TruncatedBatchError, UnsupportedFormatError)
from .offset_index import INT32_MAX
from .record_batch import (ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC,
                           MAGIC_OFFSET, MIN_BATCH_LENGTH, BatchHeader, check_crc, parse_header)


_OFFSET_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT64_MAX = (1 << 63) - 1
_UINT32 = struct.Struct(">I")

# An intact batch in the wrong place is never a torn write; every other scan
# error (cut short, bad length or magic, zeros, garbage, bad CRC) can be.
_NEVER_TORN = (OffsetOrderError, SegmentOffsetOverflowError, UnsupportedFormatError)

# Work bound for the search for a valid batch after damage: CRC bytes per byte
# searched. Real tails need a tiny fraction of it; only crafted input (length
# fields that fit at many candidate positions) can reach it.
_SEARCH_CRC_BUDGET = 8


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
