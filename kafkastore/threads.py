"""Thread pools shared by the whole process, one per purpose.

The log's I/O waits with the GIL released (fsync, an object store's round
trips, the C codec), so a few long-lived threads overlap those waits. A pool
belongs to the process that made it: a forked child (a Spark worker, say)
gets its own on first use, because the parent's threads do not exist there.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_LOCK = threading.Lock()


def shared_pool(name: str, max_workers: int) -> ThreadPoolExecutor:
    """This process's pool called ``name`` (made on first use, ``max_workers`` threads
    named ``kafkastore-<name>``)."""
    with _LOCK:
        made = _POOLS.get(name)
        if made is None or made[0] != os.getpid():
            made = _POOLS[name] = (os.getpid(), ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix=f"kafkastore-{name}"))
        return made[1]
