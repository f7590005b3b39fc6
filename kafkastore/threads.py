"""Thread pools shared by the whole process, one per purpose and lane.

The log's I/O waits with the GIL released (fsync, an object store's round
trips, the C codec), so a few long-lived threads overlap those waits. A pool
belongs to the process that made it: a forked child (a Spark worker, say)
gets its own on first use, because the parent's threads do not exist there.

**Lanes.** Background housekeeping (merging, gc, version expiry) runs in the
``housekeeping`` lane (:func:`in_lane`); everything else (a produce's commit, a
flush, a fetch) in the default lane. A pool asked for from a thread in the
housekeeping lane is that pool's housekeeping twin (``<name>-housekeeping``, its
threads in the lane too), so a merge's uploads and fsyncs never queue in front
of a produce commit's, however long they take, and a produce commit never waits
for a housekeeping thread to come free. Code below the housekeeper needs no
change to be kept off the ack path: it asks for its pool by name as before.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

#: The lane of background housekeeping (see the module docstring).
HOUSEKEEPING = "housekeeping"

_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_LOCK = threading.Lock()
_LANE = threading.local()


def current_lane() -> str | None:
    """The lane the calling thread works in (:data:`HOUSEKEEPING`), None for the default lane."""
    return getattr(_LANE, "name", None)


@contextlib.contextmanager
def in_lane(name: str | None) -> Iterator[None]:
    """Run the block in lane ``name`` (None: the default lane); the previous lane after."""
    before = current_lane()
    _LANE.name = name
    try:
        yield
    finally:
        _LANE.name = before


def _enter_lane(name: str) -> None:
    _LANE.name = name   # a twin pool's thread initializer: its threads live in the lane


def shared_pool(name: str, max_workers: int, *, lane: str | None = None) -> ThreadPoolExecutor:
    """This process's pool called ``name`` in the caller's lane (or ``lane``), made on first
    use with ``max_workers`` threads named ``kafkastore-<name>`` (``-<lane>`` appended for a
    lane's twin)."""
    lane = lane or current_lane()
    key = f"{name}-{lane}" if lane else name
    with _LOCK:
        made = _POOLS.get(key)
        if made is None or made[0] != os.getpid():
            extra = {"initializer": _enter_lane, "initargs": (lane,)} if lane else {}
            made = _POOLS[key] = (os.getpid(), ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix=f"kafkastore-{key}", **extra))
        return made[1]


class _ForegroundIO:
    """How many writes of the default lane (a produce's uploads and commit) are in flight, so
    housekeeping can let them go first (:func:`yield_to_foreground`)."""

    def __init__(self) -> None:
        self.busy = 0
        self.cond = threading.Condition(threading.Lock())


_FOREGROUND = _ForegroundIO()

#: The longest one :func:`yield_to_foreground` waits: housekeeping goes on after it even
#: under a steady stream of commits (it is slowed, never starved).
YIELD_MAX_S = 0.02


@contextlib.contextmanager
def foreground_io() -> Iterator[None]:
    """Mark a write of the ack path (default lane) as in flight for the block; in the
    housekeeping lane this does nothing."""
    if current_lane() == HOUSEKEEPING:
        yield
        return
    fg = _FOREGROUND
    with fg.cond:
        fg.busy += 1
    try:
        yield
    finally:
        with fg.cond:
            fg.busy -= 1
            if not fg.busy:
                fg.cond.notify_all()


def yield_to_foreground(max_wait_s: float = YIELD_MAX_S) -> bool:
    """In the housekeeping lane, before a step of I/O: wait until no write of the ack path is
    in flight, at most ``max_wait_s``, so a merge's fsyncs and gc's deletes do not share the
    disk's journal (or the GIL) with a produce commit's. Returns whether it waited; outside
    the housekeeping lane it returns False at once."""
    if current_lane() != HOUSEKEEPING:
        return False
    fg = _FOREGROUND
    with fg.cond:
        if not fg.busy:
            return False
        fg.cond.wait_for(lambda: not fg.busy, timeout=max_wait_s)
    return True


def between_steps() -> None:
    """In the housekeeping lane, between two CPU-bound steps (a merge's batch walk, say):
    let the ack path's writes in flight pass (bounded, :func:`yield_to_foreground`), else
    drop the GIL once, so a produce commit's thread waiting for it runs now rather than after
    the interpreter's switch interval. Outside the lane it does nothing (a ``merge`` command
    has no ack path to wait for)."""
    if current_lane() != HOUSEKEEPING:
        return
    if not yield_to_foreground():
        time.sleep(0)   # a wait of nothing: releasing the GIL is the point
