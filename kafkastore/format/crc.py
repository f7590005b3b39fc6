"""CRC-32C (Castagnoli), the checksum of Kafka record batches v2.

Uses the ``crc32c`` package (C, hardware accelerated where the CPU has it) and
falls back to a table-driven pure-Python implementation when the package is
missing or ``KAFKASTORE_NO_EXTENSIONS=1`` is set (:mod:`.extensions`: the same switch
turns off the C kernel, so the pure paths can be tested on their own).
"""
from __future__ import annotations

from .extensions import use

_POLY = 0x82F63B78  # CRC-32C polynomial, bit-reversed


def _make_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c_pure(data, value: int = 0) -> int:
    """CRC-32C of ``data`` continuing from ``value``, in pure Python (slow)."""
    table = _TABLE
    crc = value ^ 0xFFFFFFFF
    for b in memoryview(data).cast("B"):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_lib = use("crc32c")
_native = _lib.crc32c if _lib is not None else None

#: True when the C implementation is in use.
NATIVE = _native is not None

if _native is not None:
    def crc32c(data, value: int = 0) -> int:
        """CRC-32C of ``data`` (bytes-like) continuing from ``value``."""
        return _native(data, value)
else:
    crc32c = crc32c_pure
