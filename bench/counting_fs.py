"""An fsspec filesystem that counts the requests and bytes going through it (for bench/).

``CountingFS(inner)`` delegates every operation kafkastore uses to ``inner`` (as
tests/faults.py's FaultyFS does) and counts, per kind, requests and bytes::

    fs = CountingFS(Storage(url).fs)
    storage = Storage(url, fs=fs)
    before = fs.snapshot()
    ...
    used = fs.snapshot() - before      # Counts(requests={"write": 4, ...}, bytes={"write": 5120, ...})

Whole-object writes go through the ``kafkastore_write`` hook of
:func:`kafkastore.storage.write_object`, so exclusive create keeps working on
every backend (on local files this also means one write per object instead of
:meth:`Storage.put_many`'s single ``writev``: the same for every commit measured).

``CountingFS(inner, delay_s=0.3)`` also makes every request take ``delay_s`` longer (an
object store's latency over a local directory); ``delay_under="/_cluster/"`` delays only
the requests whose path holds that string.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from fsspec.spec import AbstractFileSystem

from kafkastore.storage import write_object


@dataclass
class Counts:
    """Requests and bytes per kind: write, read, stat, list, delete."""

    requests: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(self.requests - other.requests, self.bytes - other.bytes)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


class CountingFS(AbstractFileSystem):
    """Delegates to ``inner`` and counts every request and the bytes written and read."""

    cachable = False
    protocol = "counting"

    def __init__(self, inner, *, delay_s: float = 0.0, delay_under: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.delay_s = delay_s
        self.delay_under = delay_under
        self._counts = Counts()
        self._by_thread: dict[int, Counts] = {}
        self._lock = threading.Lock()

    def snapshot(self, thread: int | None = None) -> Counts:
        """Counts so far: of every thread, or only of ``thread`` (a ``threading.get_ident()``,
        e.g. the writer's, to leave out background merging and gc)."""
        with self._lock:
            c = self._counts if thread is None else self._by_thread.get(thread, Counts())
            return Counts(Counter(c.requests), Counter(c.bytes))

    def _count(self, op: str, nbytes: int = 0, path: str = "") -> None:
        if self.delay_s > 0 and (self.delay_under is None or self.delay_under in str(path)):
            time.sleep(self.delay_s)   # the store's latency, before the request is served
        ident = threading.get_ident()
        with self._lock:
            mine = self._by_thread.get(ident)
            if mine is None:
                mine = self._by_thread[ident] = Counts()
            for c in (self._counts, mine):
                c.requests[op] += 1
                if nbytes:
                    c.bytes[op] += nbytes

    # -- writes
    def kafkastore_write(self, path, data, exclusive):
        self._count("write", len(data), path)
        write_object(self.inner, path, data, exclusive=exclusive)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        self.kafkastore_write(path, value, mode == "create")

    def _open(self, path, mode="rb", **kwargs):
        if "r" not in mode:
            raise NotImplementedError("CountingFS writes whole objects only")
        self._count("read", path=path)
        return self.inner.open(path, mode, **kwargs)

    # -- reads
    def cat_file(self, path, start=None, end=None, **kwargs):
        self._count("read", path=path)
        data = self.inner.cat_file(path, start=start, end=end, **kwargs)
        with self._lock:
            self._counts.bytes["read"] += len(data)
            self._by_thread[threading.get_ident()].bytes["read"] += len(data)
        return data

    def exists(self, path, **kwargs):
        self._count("stat", path=path)
        return self.inner.exists(path, **kwargs)

    def size(self, path):
        self._count("stat", path=path)
        return self.inner.size(path)

    def info(self, path, **kwargs):
        self._count("stat", path=path)
        return self.inner.info(path, **kwargs)

    def ls(self, path, detail=True, **kwargs):
        self._count("list", path=path)
        return self.inner.ls(path, detail=detail, **kwargs)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        self._count("list", path=path)
        return self.inner.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)

    # -- deletes and housekeeping
    def rm_file(self, path):
        self._count("delete", path=path)
        return self.inner.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        self._count("delete", path=path)
        return self.inner.rm(path, recursive=recursive, maxdepth=maxdepth)

    def mkdir(self, path, create_parents=True, **kwargs):
        return self.inner.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        return self.inner.makedirs(path, exist_ok=exist_ok)

    def invalidate_cache(self, path=None):
        return self.inner.invalidate_cache(path)
