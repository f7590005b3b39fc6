"""The ``.index`` file: sparse map from offset to byte position in the ``.log``.

Format (Kafka's ``OffsetIndex``): a sequence of 8-byte entries, each a
big-endian int32 *relative* offset (``offset - base_offset``) followed by a
big-endian int32 byte position of a batch start in the segment's log. No
header, no checksum: a bad index is rebuilt from the log, never trusted.

Kafka's rules, which this module keeps:

* entries are appended with strictly increasing offsets
  (``OffsetIndex.append`` refuses ``offset <= lastOffset``), and since each
  entry is written for a later batch, positions strictly increase as well;
* the offset of an entry is the *last* offset of the batch (or group of
  batches appended together) that starts at that position
  (``LogSegment.append(largestOffset, ...)`` and ``LogSegment.recover``);
* ``lookup(target)`` returns the entry with the largest offset <= target, or
  ``(base_offset, 0)`` when there is none (empty index or target smaller than
  every entry); the reader then scans batch headers forward from there;
* brokers preallocate index files (``segment.index.bytes``, 10 MiB) and fill
  them with zeros; a file left behind by a crash may therefore end in all-zero
  entries, which :func:`trim_preallocated` drops.
"""
from __future__ import annotations

import struct
from typing import Iterable

from ..errors import CorruptIndexError

ENTRY_SIZE = 8
INT32_MAX = (1 << 31) - 1

_ENTRY = struct.Struct(">ii")
_REL = struct.Struct(">i")




def encode(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode ``(offset, position)`` pairs (absolute offsets) as ``.index`` bytes.

    Raises ValueError for entries Kafka would refuse to append (offsets not
    strictly increasing, positions not increasing, relative offset or position
    outside int32).
    """
    out = bytearray()
    last_offset = last_position = None
    for offset, position in entries:
        rel = offset - base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"offset {offset} does not fit an index with base offset {base_offset}")
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} outside 0..{INT32_MAX}")
        if last_offset is not None and (offset <= last_offset or position <= last_position):
            raise ValueError(f"index entry ({offset}, {position}) not after ({last_offset}, {last_position})")
        out += _ENTRY.pack(rel, position)
        last_offset, last_position = offset, position
    return bytes(out)


def parse(data, base_offset: int, *, segment: str | None = None) -> list[tuple[int, int]]:
    """Decode and validate ``.index`` bytes into ``(offset, position)`` pairs.

    Raises :class:`CorruptIndexError` (an index problem: rebuild the index)
    when the size is not a multiple of 8, a relative offset or position is
    negative, or offsets / positions do not strictly increase.
    """
    mv = memoryview(data).cast("B")
    if len(mv) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"offset index size {len(mv)} is not a multiple of {ENTRY_SIZE}", segment=segment)
    entries = []
    last_rel = last_pos = -1
    for i, (rel, pos) in enumerate(_ENTRY.iter_unpack(mv)):
        if rel < 0 or pos < 0:
            raise CorruptIndexError(
                f"offset index entry {i} has negative relative offset {rel} or position {pos}",
                segment=segment)
        if rel <= last_rel or pos <= last_pos:
            raise CorruptIndexError(
                f"offset index entry {i} ({base_offset + rel}, {pos}) does not increase over "
                f"({base_offset + last_rel}, {last_pos})", segment=segment)
        entries.append((base_offset + rel, pos))
        last_rel, last_pos = rel, pos
    return entries


def entry_count(data) -> int:
    """Number of whole entries in ``data``."""
    return len(memoryview(data).cast("B")) // ENTRY_SIZE


def entry(data, base_offset: int, n: int) -> tuple[int, int]:
    """The ``n``-th entry as ``(offset, position)``."""
    rel, pos = _ENTRY.unpack_from(data, n * ENTRY_SIZE)
    return base_offset + rel, pos


def lookup_entry(data, base_offset: int, target_offset: int) -> tuple[int, int]:
    """The entry with the largest offset <= ``target_offset``, as ``(offset, position)``.

    ``(base_offset, 0)`` when there is none, as Kafka's ``OffsetIndex.lookup``.
    Binary search straight over the bytes (no per-entry objects); trailing
    bytes short of a whole entry are ignored. On an unvalidated (non-monotonic)
    index the answer is some entry, never a hang.
    """
    target_rel = target_offset - base_offset
    lo, hi = 0, entry_count(data) - 1
    if hi < 0 or target_rel < 0:
        return base_offset, 0
    unpack = _REL.unpack_from
    if unpack(data, 0)[0] > target_rel:
        return base_offset, 0
    # Invariant: entry lo <= target; find the last such entry (Kafka's
    # largestLowerBoundSlotFor, without its page-cache "warm section" split,
    # which only matters for mmapped files).
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if unpack(data, mid * ENTRY_SIZE)[0] <= target_rel:
            lo = mid
        else:
            hi = mid - 1
    return entry(data, base_offset, lo)


def lookup(index_bytes, base_offset: int, target_offset: int) -> int:
    """Byte position to start scanning from for ``target_offset`` (0 if no entry <= it)."""
    return lookup_entry(index_bytes, base_offset, target_offset)[1]


def trim_preallocated(data) -> bytes:
    """Drop the trailing all-zero entries of a preallocated index.

    Kafka sizes a new index file to ``segment.index.bytes`` up front and trims
    it when the segment is closed or rolled; a file copied from a running or
    crashed broker still has the zero padding. An all-zero entry (relative
    offset 0, position 0) is never one Kafka writes: position 0 is never
    indexed (the first batch comes before ``index.interval.bytes`` have
    accumulated) and later entries must have larger offsets.
    """
    raw = bytes(data)
    # rstrip runs in C; rounding up keeps an entry whose last bytes happen to
    # be zero (a position like 0x100). A non-zero partial entry is kept so
    # that parse() reports the bad size.
    used = len(raw.rstrip(b"\0"))
    return raw[:-(-used // ENTRY_SIZE) * ENTRY_SIZE]
