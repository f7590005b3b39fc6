"""Wake-ups for long-poll fetches, per partition: a waiting fetch costs nothing until then.

A fetch that found too little data waits on the partitions it asked for. It is
woken when this broker commits to one of them (:meth:`DataWatch.notify`, called
by the appender) or when another broker's commit shows up: one poller per
broker reads the manifest head of each partition somebody waits on every
``poll_s`` (one read per partition, however many fetches wait on it) and
notifies the partitions whose version moved. Nothing runs while nobody waits.
A round reads at most ``max_reads_per_s * poll_s`` heads, taking the waited
partitions in turn, so the poll's cost is bounded whatever the number of parked
fetches (with many partitions each is polled less often: another broker's write
then wakes a fetch later, at worst when its own max wait ends).

Each partition has a generation counter, bumped by every notification; a fetch
takes the generations before it reads and :meth:`DataWatch.wait` returns at
once if one moved meanwhile, so a commit between the read and the wait is
never missed.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

log = logging.getLogger("kafkastore.serve.fetch")

TP = tuple[str, int]


class DataWatch:
    """Per-partition waiters, generations and the shared manifest-head poller (event loop only)."""

    def __init__(self, read_versions: Callable[[list[TP]], Awaitable[dict[TP, int]]],
                 known_version: Callable[[TP], int | None], poll_s: float = 0.25,
                 max_reads_per_s: float = 10.0):
        """``read_versions(tps)``: the current manifest version of each partition (storage);
        ``known_version(tp)``: the version this broker last read, if any (no I/O)."""
        self._read_versions = read_versions
        self._known_version = known_version
        self.poll_s = poll_s
        self.max_reads_per_s = max_reads_per_s
        self._cursor = 0  # where the next round starts among the waited partitions
        self._gen: dict[TP, int] = {}
        self._waiters: dict[TP, set[asyncio.Future]] = {}
        self._seen: dict[TP, int] = {}
        self._poller: asyncio.Task | None = None
        self.polls = 0  # manifest-head reads done by the poller (tests, stats)

    def generations(self, tps: Iterable[TP]) -> tuple[int, ...]:
        """The partitions' generations now (pass them to :meth:`wait`)."""
        return tuple(self._gen.get(tp, 0) for tp in tps)

    def notify(self, tp: TP) -> None:
        """New data in ``tp``: wake every fetch waiting on it."""
        self._gen[tp] = self._gen.get(tp, 0) + 1
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(True)

    def waiting(self) -> int:
        """How many partitions have waiting fetches."""
        return len(self._waiters)

    async def wait(self, tps: list[TP], since: tuple[int, ...], timeout: float) -> bool:
        """Wait until one of ``tps`` is notified after ``since`` (True) or ``timeout`` (False)."""
        if self.generations(tps) != since:
            return True
        if timeout <= 0 or not tps:
            return False
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
            if tp not in self._seen:
                known = self._known_version(tp)
                if known is not None:
                    self._seen[tp] = known
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[tp]

    async def _poll(self) -> None:
        """Read the heads of the waited-on partitions every ``poll_s`` while anyone waits."""
        while self._waiters:
            await asyncio.sleep(self.poll_s)
            waited = list(self._waiters)
            if not waited:
                break
            budget = max(1, int(self.max_reads_per_s * self.poll_s))
            start = self._cursor % len(waited)
            tps = (waited[start:] + waited[:start])[:budget]
            self._cursor = start + len(tps)
            try:
                versions = await self._read_versions(tps)
            except Exception:  # noqa: BLE001 - a failed poll is retried next interval
                log.warning("polling manifest heads failed", exc_info=True)
                continue
            self.polls += len(tps)
            for tp, version in versions.items():
                old = self._seen.get(tp)
                self._seen[tp] = version
                if old is not None and version != old:
                    self.notify(tp)
            for tp in [tp for tp in self._seen if tp not in self._waiters]:
                del self._seen[tp]
        # Nobody waits: forget what was seen (bounded state).
        self._seen.clear()

    def close(self) -> None:
        """Stop the poller."""
        if self._poller is not None:
            self._poller.cancel()
