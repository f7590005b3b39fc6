"""Zig-zag varints as Kafka's record format v2 uses them.

Kafka writes signed integers zig-zag encoded (0, -1, 1, -2, ... -> 0, 1, 2, 3,
...) in little-endian base-128 groups of 7 bits, high bit = "more follows"
(the protobuf encoding). ``varint`` is for int32 values (at most 5 bytes),
``varlong`` for int64 values (at most 10 bytes).

Decoders take ``(buf, pos[, end])`` and return ``(value, new_pos)``. They
never read past ``end`` (default ``len(buf)``) and never more than the maximum
number of bytes for the type; anything else raises :class:`~kafkastore.errors.CorruptRecordError`.
"""
from __future__ import annotations

from ..errors import CorruptRecordError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def _encode_unsigned(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint bytes of an int32 ``value`` (1 to 5 bytes)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varlong bytes of an int64 ``value`` (1 to 10 bytes)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def write_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint (or varlong: same bytes) of ``value`` to ``out``.

    The fast path for encoders: no range check (callers have checked), no
    intermediate bytes object. Values in int32 range give Kafka's varint,
    values in int64 range its varlong.
    """
    n = (value << 1) ^ (value >> 63)
    if n < 0x80:  # the common case: small deltas and lengths
        out.append(n)
        return
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def size_of_varint(value: int) -> int:
    """Number of bytes the zig-zag varint/varlong of ``value`` takes."""
    n = (value << 1) ^ (value >> 63)
    size = 1
    while n > 0x7F:
        n >>= 7
        size += 1
    return size


def _decode(buf, pos: int, end: int | None, max_bytes: int, bits: int,
            what: str) -> tuple[int, int]:
    if end is None or end > len(buf):
        end = len(buf)
    result = 0
    shift = 0
    start = pos
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError(f"truncated {what} at byte {start}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> bits:
                # The last group carried bits beyond the type's width.
                raise CorruptRecordError(f"{what} too large at byte {start}")
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise CorruptRecordError(f"{what} longer than {max_bytes} bytes at byte {start}")


def decode_varint(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zig-zag int32 varint at ``buf[pos]``; returns ``(value, new_pos)``.

    Reads nothing at or past ``end`` (default: the end of ``buf``).
    """
    return _decode(buf, pos, end, MAX_VARINT_BYTES, 32, "varint")


def decode_varlong(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zig-zag int64 varlong at ``buf[pos]``; returns ``(value, new_pos)``.

    Reads nothing at or past ``end`` (default: the end of ``buf``).
    """
    return _decode(buf, pos, end, MAX_VARLONG_BYTES, 64, "varlong")
