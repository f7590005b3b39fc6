"""A bounded cache of segment bytes for fetches: fixed-size blocks, least recently used out.

Segment objects are immutable once written (a new version of a segment is a
new object with a new id), so bytes cached by ``(path, block)`` never go
stale. Fetches read ranges; a range is served from the blocks covering it,
and missing blocks are read with one range request each.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ...storage import Storage

BLOCK = 1 << 20


class RangeCache:
    """``get(path, start, end, size)``: bytes ``[start, end)`` of an object of ``size`` bytes."""

    def __init__(self, storage: Storage, capacity_bytes: int = 64 << 20, block: int = BLOCK):
        self.storage = storage
        self.capacity = capacity_bytes
        self.block = block
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _block(self, path: str, n: int, size: int) -> bytes:
        key = (path, n)
        with self._lock:
            data = self._blocks.get(key)
            if data is not None:
                self._blocks.move_to_end(key)
                self.hits += 1
                return data
        start = n * self.block
        data = self.storage.get_range(path, start, min(size, start + self.block))
        with self._lock:
            self.misses += 1
            if key not in self._blocks:
                self._blocks[key] = data
                self._bytes += len(data)
                while self._bytes > self.capacity and self._blocks:
                    _, old = self._blocks.popitem(last=False)
                    self._bytes -= len(old)
        return data

    def get(self, path: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``[start, end)`` (clipped to ``size``)."""
        end = min(end, size)
        if start >= end:
            return b""
        first, last = start // self.block, (end - 1) // self.block
        parts = []
        for n in range(first, last + 1):
            data = self._block(path, n, size)
            lo = start - n * self.block if n == first else 0
            hi = end - n * self.block if n == last else len(data)
            parts.append(data[lo:hi] if (lo, hi) != (0, len(data)) else data)
        return parts[0] if len(parts) == 1 else b"".join(parts)
