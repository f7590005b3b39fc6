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
import random
import re
import threading
import uuid

from ...commit import Budget, Clock, CommitEngine, ObjectTarget
from ...storage import Storage

PRODUCER_IDS_DIR = "_producer_ids"
_BLOCK_RE = re.compile(r"^(\d{20})\.json$")


class ProducerIdAllocator:
    """Hands out producer ids from blocks claimed under the root."""

    #: Attempts to claim a block before :class:`~kafkastore.errors.CommitGaveUpError`.
    max_attempts = 100

    def __init__(self, storage: Storage, *, block_size: int = 1000, owner: str = "",
                 clock: Clock | None = None, rng: random.Random | None = None):
        self.storage = storage
        self.block_size = block_size
        self.owner = owner
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0
        self._engine = CommitEngine(budget=Budget(max_attempts=self.max_attempts),
                                    clock=clock or storage.clock,
                                    rng=rng)

    def _claimed(self) -> list[int]:
        out = []
        for info in self.storage.list(PRODUCER_IDS_DIR):
            m = _BLOCK_RE.match(info.path.rsplit("/", 1)[-1])
            if m:
                out.append(int(m.group(1)))
        return out

    def _claim_block(self) -> int:
        return self._engine.run(_BlockClaim(self))

    def allocate(self) -> int:
        """A producer id no other broker (or earlier run) has handed out. Blocks on storage."""
        with self._lock:
            if self._next >= self._end:
                block = self._claim_block()
                self._next, self._end = block * self.block_size, (block + 1) * self.block_size
            pid = self._next
            self._next += 1
            return pid


class _BlockClaim(ObjectTarget):
    """Claiming the block after the highest claimed one; a lost race moves on to the next."""

    def __init__(self, allocator: ProducerIdAllocator):
        super().__init__(allocator.storage)
        self.allocator = allocator

    def read(self) -> int:
        return max(self.allocator._claimed(), default=0)

    def plan(self, highest: int, attempt: int) -> tuple[int, bytes]:
        a = self.allocator
        # block 0 unused: ids start at block_size. ``claim`` makes our bytes unique for read-back.
        doc = {"owner": a.owner, "claimed_ms": a._engine.clock.wall_ms(),
               "block_size": a.block_size, "claim": uuid.uuid4().hex}
        return highest + 1, json.dumps(doc).encode()

    def locate(self, planned: tuple[int, bytes]) -> tuple[str, bytes]:
        return f"{PRODUCER_IDS_DIR}/{planned[0]:020d}.json", planned[1]

    def result(self, planned: tuple[int, bytes], *, attempts: int, read_back: bool) -> int:
        return planned[0]
