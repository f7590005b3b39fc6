"""Kafka's default partitioner, so a key lands where Kafka's Java client puts it.

Keyed records: ``toPositive(murmur2(key)) % partitions`` with the exact murmur2
variant of ``org.apache.kafka.common.utils.Utils.murmur2`` (seed 0x9747b28c,
little-endian 4-byte words, signed 32-bit arithmetic emulated with masks).

Null keys: the sticky partitioner (KIP-480 / KIP-794): stay on one partition
until about ``batch.size`` bytes went to it, then switch to another.
"""
from __future__ import annotations

import random
import struct
import sys
from typing import Callable

from ..errors import ConfigError

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


_WORDS: dict[int, struct.Struct] = {}  # "<nI" unpackers by word count
_CACHE: dict[bytes, int] = {}           # murmur2 of recently seen keys (keys repeat in practice)
_CACHE_MAX = 1 << 16


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (equals the Java result).

    The 4-byte words are read with one ``struct`` unpack rather than byte by
    byte; ``(h*m) ^ (k*m)`` is masked once (masking distributes over xor).
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        words = _WORDS.get(n4)
        if words is None:
            words = _WORDS[n4] = struct.Struct(f"<{n4}I")
        for k in words.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) ^ (k * _M)) & _MASK
    rest = length & 3
    if rest:
        # Java's switch falls through: 3 -> 2 -> 1.
        i = n4 << 2
        if rest == 3:
            h ^= data[i + 2] << 16
        if rest >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if partitions <= 0:
        raise ConfigError(f"partition count must be positive, got {partitions}")
    if type(key) is not bytes:
        key = bytes(key)
    h = _CACHE.get(key)
    if h is None:
        h = murmur2(key)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = h
    return (h & 0x7FFFFFFF) % partitions


_VECTOR_MIN = 32  # keys of one length below which the per-key loop is faster


def murmur2_many(keys) -> list[int]:
    """:func:`murmur2` of every key (bytes-like, not None), vectorised with Arrow compute.

    Keys are grouped by length; each group of at least ``_VECTOR_MIN`` keys
    is hashed column by column (word ``j`` of every key at once) with
    Arrow's wrapping uint32 arithmetic, which is Java's int arithmetic bit
    for bit. Smaller groups go through :func:`murmur2`.
    """
    keys = [k if type(k) is bytes else bytes(k) for k in keys]
    lengths = set(map(len, keys))
    if len(lengths) == 1:  # the common case: fixed-size keys
        groups = {lengths.pop(): range(len(keys))}
    else:
        groups = {}
        for i, k in enumerate(keys):
            groups.setdefault(len(k), []).append(i)
    out: list[int] = [0] * len(keys)
    for length, idx in groups.items():
        group = [keys[i] for i in idx] if isinstance(idx, list) else keys
        if len(group) < _VECTOR_MIN or sys.byteorder != "little":
            hashes = [murmur2(k) for k in group]
        else:
            hashes = _murmur2_same_length(group, length)
        if isinstance(idx, range):
            return hashes
        for i, h in zip(idx, hashes):
            out[i] = h
    return out


def _murmur2_same_length(keys: list[bytes], length: int) -> list[int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if length == 0:
        return [murmur2(b"")] * len(keys)
    n4, rest = length >> 2, length & 3
    u32 = pa.uint32()
    m = pa.scalar(_M, u32)
    mul, xor, shr, shl = pc.multiply, pc.bit_wise_xor, pc.shift_right, pc.shift_left
    # Each key as a fixed-size list of its bytes; word j of every key is list element j of
    # the same buffer seen as uint32 words (little-endian, as Java reads them).
    data = pa.py_buffer(b"".join(keys))
    h = pa.scalar((_SEED ^ length) & _MASK, u32)
    if n4:
        if rest:
            data = pa.py_buffer(b"".join(k[:n4 * 4] for k in keys))
        words = pa.FixedSizeListArray.from_arrays(
            pa.Array.from_buffers(u32, len(keys) * n4, [None, data]), n4)
        for j in range(n4):
            k = mul(pc.list_element(words, j), m)
            k = xor(k, shr(k, pa.scalar(24, u32)))
            h = xor(mul(h, m), mul(k, m))
    if rest:
        tail = pa.FixedSizeListArray.from_arrays(pa.Array.from_buffers(
            pa.uint8(), len(keys) * rest,
            [None, pa.py_buffer(b"".join(k[n4 * 4:] for k in keys))]), rest)

        def byte(b):
            return pc.list_element(tail, b).cast(u32)

        if rest == 3:
            h = xor(h, shl(byte(2), pa.scalar(16, u32)))
        if rest >= 2:
            h = xor(h, shl(byte(1), pa.scalar(8, u32)))
        h = mul(xor(h, byte(0)), m)
    h = xor(h, shr(h, pa.scalar(13, u32)))
    h = mul(h, m)
    h = xor(h, shr(h, pa.scalar(15, u32)))
    return h.view(pa.int32()).to_pylist()


def partitions_for_keys(keys, partitions: int) -> list[int | None]:
    """:func:`partition_for_key` of every key (None for a None key), hashed in one pass."""
    if partitions <= 0:
        raise ConfigError(f"partition count must be positive, got {partitions}")
    present = [i for i, k in enumerate(keys) if k is not None]
    out: list[int | None] = [None] * len(keys)
    for i, h in zip(present, murmur2_many([keys[i] for i in present])):
        out[i] = (h & 0x7FFFFFFF) % partitions
    return out


class StickyPartitioner:
    """Picks partitions for null-key records the way Kafka's built-in partitioner does.

    ``batch_size`` bytes go to one partition before it switches to a different
    random one; ``rng`` is injectable so tests are deterministic.
    """

    def __init__(self, partitions: int, batch_size: int = 16384,
                 rng: Callable[[int], int] | None = None):
        if partitions <= 0:
            raise ConfigError(f"partition count must be positive, got {partitions}")
        self.partitions = partitions
        self.batch_size = max(1, batch_size)
        self._rng = rng or random.Random().randrange
        self._current = self._rng(partitions)
        self._bytes = 0

    def next(self, record_size: int) -> int:
        """Partition for the next null-key record of ``record_size`` bytes."""
        if self._bytes >= self.batch_size:
            self._bytes = 0
            if self.partitions > 1:
                # Never the same partition twice in a row, as Kafka avoids.
                step = 1 + self._rng(self.partitions - 1)
                self._current = (self._current + step) % self.partitions
        self._bytes += record_size
        return self._current

    def next_many(self, record_sizes):
        """:meth:`next` for many records at once (int32 partitions), one step per switch."""
        import numpy as np

        sizes = np.asarray(record_sizes, np.int64)
        n = len(sizes)
        out = np.empty(n, np.int32)
        csum = np.cumsum(sizes)
        i = 0
        while i < n:
            if self._bytes >= self.batch_size:
                self.next(0)      # switch partition (adds nothing)
            before = int(csum[i - 1]) if i else 0
            # records i..m stay here: m is the first whose bytes reach batch.size
            m = int(np.searchsorted(csum, self.batch_size - self._bytes + before, side="left"))
            m = min(m, n - 1)
            out[i:m + 1] = self._current
            self._bytes += int(csum[m]) - before
            i = m + 1
        return out


def choose_partition(key: bytes | None, partitions: int, sticky: StickyPartitioner,
                     record_size: int) -> int:
    """Kafka's default choice: murmur2 for keys, sticky for null keys."""
    if key is None:
        return sticky.next(record_size)
    return partition_for_key(key, partitions)
