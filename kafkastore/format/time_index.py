"""The ``.timeindex`` file: sparse map from timestamp to offset.

Format (Kafka's ``TimeIndex``): a sequence of 12-byte entries, each a
big-endian int64 timestamp (ms) followed by a big-endian int32 offset
relative to the segment's base offset. An entry ``(T, O)`` means "the largest
timestamp in the log up to the batch ending at ``O`` is ``T``, and ``O`` is
where it was first reached": any record with a timestamp >= ``T`` sits in
``O``'s batch or later.

Kafka's rules, which this module keeps:

* ``maybeAppend(timestamp, offset)`` appends only when ``timestamp`` is
  strictly larger than the last entry's (initially ``NO_TIMESTAMP`` = -1, so
  a log without timestamps has an empty time index); a smaller offset than
  the last entry's is an error, an equal one with an equal timestamp is
  silently ignored (the entry is already there);
* the values appended are the segment's running ``maxTimestampSoFar`` and the
  last offset of the batch that first reached it, so timestamps in the file
  strictly increase even when record timestamps do not;
* when a segment stops being the active one (roll, close,
  ``onBecomeInactiveSegment``) and after recovery, one more
  ``maybeAppend(maxTimestampSoFar, offsetOfMaxTimestampSoFar)`` is made, so
  the last entry holds the segment's maximum timestamp;
* ``lookup(target)`` returns the entry with the largest timestamp <=
  ``target``, or ``(-1, base_offset)`` when there is none; the offset is
  where to start scanning (through the offset index) for the first record
  with timestamp >= ``target``.
"""
from __future__ import annotations

import struct
from typing import Iterable

from .offset_index import INT32_MAX, CorruptIndexError

ENTRY_SIZE = 12
NO_TIMESTAMP = -1

_ENTRY = struct.Struct(">qi")
_TS = struct.Struct(">q")

__all__ = ["ENTRY_SIZE", "NO_TIMESTAMP", "CorruptIndexError", "TimeIndexWriter", "encode",
           "parse", "entry_count", "entry", "last_entry", "lookup_entry", "lookup",
           "trim_preallocated"]


class TimeIndexWriter:
    """Accumulates time index entries with Kafka's ``maybeAppend`` rule."""

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.entries: list[tuple[int, int]] = []
        self._buf = bytearray()

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, ``(-1, base_offset)`` when empty."""
        return self.entries[-1] if self.entries else (NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last one.

        Returns whether an entry was written. Raises ValueError, as Kafka
        does, for an offset or timestamp smaller than the last entry's, or an
        offset outside the segment's int32 range.
        """
        last_ts, last_off = self.last_entry
        if self.entries and offset < last_off:
            raise ValueError(f"time index offset {offset} smaller than last offset {last_off}")
        if self.entries and timestamp < last_ts:
            raise ValueError(f"time index timestamp {timestamp} smaller than last timestamp {last_ts}")
        if timestamp <= last_ts:
            return False
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"offset {offset} does not fit a time index with base offset {self.base_offset}")
        self._buf += _ENTRY.pack(timestamp, rel)
        self.entries.append((timestamp, offset))
        return True

    def to_bytes(self) -> bytes:
        return bytes(self._buf)


def encode(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode ``(timestamp, offset)`` pairs (absolute offsets) as ``.timeindex`` bytes.

    Every entry must be one Kafka's ``maybeAppend`` would write (timestamps
    strictly increasing, offsets not decreasing); raises ValueError otherwise.
    """
    writer = TimeIndexWriter(base_offset)
    for timestamp, offset in entries:
        if not writer.maybe_append(timestamp, offset):
            raise ValueError(f"time index entry ({timestamp}, {offset}) would not be appended "
                             f"after {writer.last_entry}")
    return writer.to_bytes()


def parse(data, base_offset: int, *, segment: str | None = None) -> list[tuple[int, int]]:
    """Decode and validate ``.timeindex`` bytes into ``(timestamp, offset)`` pairs.

    Raises :class:`CorruptIndexError` when the size is not a multiple of 12, a
    relative offset is negative, timestamps do not strictly increase or
    offsets decrease.
    """
    mv = memoryview(data).cast("B")
    if len(mv) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"time index size {len(mv)} is not a multiple of {ENTRY_SIZE}", segment=segment)
    entries = []
    last_ts, last_rel = NO_TIMESTAMP, 0
    for i, (ts, rel) in enumerate(_ENTRY.iter_unpack(mv)):
        if rel < 0:
            raise CorruptIndexError(f"time index entry {i} has negative relative offset {rel}",
                                    segment=segment)
        if ts <= last_ts or rel < last_rel:
            raise CorruptIndexError(
                f"time index entry {i} ({ts}, {base_offset + rel}) does not increase over "
                f"({last_ts}, {base_offset + last_rel})", segment=segment)
        entries.append((ts, base_offset + rel))
        last_ts, last_rel = ts, rel
    return entries


def entry_count(data) -> int:
    """Number of whole entries in ``data``."""
    return len(memoryview(data).cast("B")) // ENTRY_SIZE


def entry(data, base_offset: int, n: int) -> tuple[int, int]:
    """The ``n``-th entry as ``(timestamp, offset)``."""
    ts, rel = _ENTRY.unpack_from(data, n * ENTRY_SIZE)
    return ts, base_offset + rel


def last_entry(data, base_offset: int) -> tuple[int, int]:
    """The last entry, ``(-1, base_offset)`` when empty (Kafka's ``lastEntry``)."""
    n = entry_count(data)
    return entry(data, base_offset, n - 1) if n else (NO_TIMESTAMP, base_offset)


def lookup_entry(data, base_offset: int, target_timestamp: int) -> tuple[int, int]:
    """The entry with the largest timestamp <= ``target_timestamp``, as ``(timestamp, offset)``.

    ``(-1, base_offset)`` when there is none. Binary search over the bytes.
    """
    lo, hi = 0, entry_count(data) - 1
    unpack = _TS.unpack_from
    if hi < 0 or unpack(data, 0)[0] > target_timestamp:
        return NO_TIMESTAMP, base_offset
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if unpack(data, mid * ENTRY_SIZE)[0] <= target_timestamp:
            lo = mid
        else:
            hi = mid - 1
    return entry(data, base_offset, lo)


def lookup(index_bytes, base_offset: int, target_timestamp: int) -> int:
    """Offset to start scanning from for the first record with timestamp >= ``target_timestamp``."""
    return lookup_entry(index_bytes, base_offset, target_timestamp)[1]


def trim_preallocated(data) -> bytes:
    """Drop the trailing all-zero entries of a preallocated time index.

    Same padding as the offset index (see
    :func:`kafkastore.format.offset_index.trim_preallocated`). An all-zero entry
    would mean timestamp 0 at the base offset; dropping such an entry at
    worst makes lookups scan a little more, never answer wrongly, because a
    time index is sparse.
    """
    raw = bytes(data)
    used = len(raw.rstrip(b"\0"))
    return raw[:-(-used // ENTRY_SIZE) * ENTRY_SIZE]
