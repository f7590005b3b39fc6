"""Producer ids for InitProducerId, unique across every broker of a root.

A broker claims a block of ids by creating ``<root>/_producer_ids/<20-digit
block>.json`` with put-if-absent (block ``b`` holds ids ``[b * size, (b + 1)
* size)``); losing the race for a block number means another broker owns it,
so it lists again and tries the next. Ids of a claimed block are handed out
from memory; a broker that restarts claims a fresh block (the rest of its old
one is never reused, so ids are never given twice).
"""
from __future__ import annotations

import json
import re
import threading
import time

from ..errors import CommitConflict, StorageError
from ..storage import Storage

PRODUCER_IDS_DIR = "_producer_ids"
_BLOCK_RE = re.compile(r"^(\d{20})\.json$")


class ProducerIdAllocator:
    """Hands out producer ids from blocks claimed under the root."""

    def __init__(self, storage: Storage, *, block_size: int = 1000, owner: str = ""):
        self.storage = storage
        self.block_size = block_size
        self.owner = owner
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0

    def _claimed(self) -> list[int]:
        out = []
        for info in self.storage.list(PRODUCER_IDS_DIR):
            m = _BLOCK_RE.match(info.path.rsplit("/", 1)[-1])
            if m:
                out.append(int(m.group(1)))
        return out

    def _claim_block(self) -> int:
        for _ in range(100):
            block = max(self._claimed(), default=0) + 1  # block 0 unused: ids start at block_size
            doc = json.dumps({"owner": self.owner, "claimed_ms": int(time.time() * 1000),
                              "block_size": self.block_size}).encode()
            try:
                self.storage.put_if_absent(f"{PRODUCER_IDS_DIR}/{block:020d}.json", doc)
                return block
            except CommitConflict:
                continue
        raise StorageError("could not claim a producer id block after 100 attempts")

    def allocate(self) -> int:
        """A producer id no other broker (or earlier run) has handed out. Blocks on storage."""
        with self._lock:
            if self._next >= self._end:
                block = self._claim_block()
                self._next, self._end = block * self.block_size, (block + 1) * self.block_size
            pid = self._next
            self._next += 1
            return pid
