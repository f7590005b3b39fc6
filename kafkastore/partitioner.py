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
from typing import Callable

from .errors import ConfigError

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


def choose_partition(key: bytes | None, partitions: int, sticky: StickyPartitioner,
                     record_size: int) -> int:
    """Kafka's default choice: murmur2 for keys, sticky for null keys."""
    if key is None:
        return sticky.next(record_size)
    return partition_for_key(key, partitions)
