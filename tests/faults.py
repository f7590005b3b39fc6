"""A fault-injecting fsspec filesystem for tests.

``FaultyFS(inner)`` delegates every operation kafkastore uses to ``inner`` (a
real local, memory or s3 filesystem) and fires scheduled faults first::

    fs = FaultyFS(Storage(url).fs)
    storage = Storage(url, fs=fs)
    fs.fail_before_write(match="_manifest/")        # (a) the put never happens
    fs.lose_response(match="_manifest/")            # (b) the put happens, then an error
    fs.fail_reads(match=lambda op, path: ..., count=3)  # (c) reads fail
    fs.on_write(callback, match="_manifest/")       # run callback just before a write (races)

Operations are ``"write"`` (whole-object writes), ``"read"`` (``cat_file``),
``"stat"`` (``exists``, ``size``, ``info``), ``"list"`` (``ls``, ``find``) and
``"delete"``. ``match`` is a substring of the path, or a predicate
``(op, path) -> bool``; ``count`` is how many times the fault fires (``None``:
forever). Writes are intercepted through the ``kafkastore_write`` hook of
:func:`kafkastore.storage.write_object`, which then writes through the inner
filesystem's own strategy, so exclusive create keeps working on every backend.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from fsspec.spec import AbstractFileSystem

from kafkastore.storage import Storage, write_object

Match = str | Callable[[str, str], bool] | None

OPS = ("write", "read", "stat", "list", "delete")


class InjectedFault(ConnectionError):
    """The error a scheduled fault raises (an OSError, like a real network failure)."""


@dataclass
class Fault:
    """One scheduled fault. ``when`` is ``"before"`` or ``"after"`` the real operation."""

    ops: tuple[str, ...]
    when: str
    match: Match = None
    count: int | None = 1
    error: Callable[[str, str], BaseException] | None = None
    callback: Callable[[str, str], None] | None = None
    fired: int = 0
    hits: list = field(default_factory=list)

    def matches(self, op: str, path: str) -> bool:
        if op not in self.ops or (self.count is not None and self.fired >= self.count):
            return False
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match in path
        return bool(self.match(op, path))


class FaultyFS(AbstractFileSystem):
    """Delegates to ``inner``; raises or runs callbacks where faults are scheduled."""

    cachable = False  # every wrapper is its own instance with its own schedule
    protocol = "faulty"

    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, str]] = []  # (op, when, path) of every fault fired
        self._lock = threading.Lock()

    # -- scheduling ------------------------------------------------------------
    def inject(self, ops, when: str = "before", *, match: Match = None, count: int | None = 1,
               error=None, callback=None) -> Fault:
        """Schedule a fault on ``ops`` (a name or tuple of names from :data:`OPS`)."""
        ops = (ops,) if isinstance(ops, str) else tuple(ops)
        unknown = set(ops) - set(OPS)
        if unknown or when not in ("before", "after"):
            raise ValueError(f"bad fault: ops {ops}, when {when!r}")
        fault = Fault(ops, when, match, count, error, callback)
        with self._lock:
            self.faults.append(fault)
        return fault

    def fail_before_write(self, match: Match = None, count: int | None = 1) -> Fault:
        """(a) The write fails before anything is stored."""
        return self.inject("write", "before", match=match, count=count)

    def lose_response(self, match: Match = None, count: int | None = 1) -> Fault:
        """(b) The write is stored, then the caller gets an error (a lost response)."""
        return self.inject("write", "after", match=match, count=count)

    def fail_reads(self, match: Match = None, count: int | None = 1,
                   ops=("read", "stat", "list")) -> Fault:
        """(c) Reads (and by default stats and listings) fail."""
        return self.inject(ops, "before", match=match, count=count)

    def fail_reads_from_write(self, match: str) -> Fault:
        """(c') Reads of paths containing ``match`` fail from the next write of one on (that
        write is made): a commit's reads before its put still work, its read-back does not."""
        return self.on_write(lambda op, path: self.fail_reads(
            match=lambda o, p: o == "read" and match in p, count=None), match=match, count=1)

    def on_write(self, callback: Callable[[str, str], None], match: Match = None,
                 count: int | None = 1) -> Fault:
        """Run ``callback(op, path)`` just before a matching write (to stage races)."""
        return self.inject("write", "before", match=match, count=count, callback=callback)

    def clear(self) -> None:
        """Drop every scheduled fault."""
        with self._lock:
            self.faults.clear()

    def _fire(self, op: str, when: str, path: str) -> None:
        # Every matching fault fires: callbacks run first, then the first error is raised.
        with self._lock:
            matching = [f for f in self.faults if f.when == when and f.matches(op, path)]
            first_error = next((f for f in matching if f.callback is None), None)
            due = [f for f in matching if f.callback is not None or f is first_error]
            for fault in due:
                fault.fired += 1
                fault.hits.append(path)
                self.log.append((op, when, path))
        errors = []
        for fault in due:
            if fault.callback is not None:
                fault.callback(op, path)  # outside the lock: callbacks may use this filesystem
            else:
                errors.append(fault)
        if errors:
            fault = errors[0]
            if fault.error is not None:
                raise fault.error(op, path)
            raise InjectedFault(f"injected fault: {op} {when} {path}")

    def _around(self, op: str, path: str, call):
        self._fire(op, "before", path)
        result = call()
        self._fire(op, "after", path)
        return result

    # -- writes ----------------------------------------------------------------
    def kafkastore_write(self, path, data, exclusive):
        self._around("write", path, lambda: write_object(self.inner, path, data, exclusive=exclusive))

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        self.kafkastore_write(path, value, mode == "create")

    def _open(self, path, mode="rb", **kwargs):
        if "r" not in mode:
            raise NotImplementedError("FaultyFS writes whole objects only (pipe_file / kafkastore_write)")
        self._fire("read", "before", path)
        return self.inner.open(path, mode, **kwargs)

    # -- reads -----------------------------------------------------------------
    def cat_file(self, path, start=None, end=None, **kwargs):
        return self._around("read", path, lambda: self.inner.cat_file(path, start=start, end=end, **kwargs))

    def exists(self, path, **kwargs):
        return self._around("stat", path, lambda: self.inner.exists(path, **kwargs))

    def size(self, path):
        return self._around("stat", path, lambda: self.inner.size(path))

    def info(self, path, **kwargs):
        return self._around("stat", path, lambda: self.inner.info(path, **kwargs))

    def ls(self, path, detail=True, **kwargs):
        return self._around("list", path, lambda: self.inner.ls(path, detail=detail, **kwargs))

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        return self._around("list", path, lambda: self.inner.find(
            path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs))

    # -- deletes and housekeeping ------------------------------------------------
    def rm_file(self, path):
        return self._around("delete", path, lambda: self.inner.rm_file(path))

    def rm(self, path, recursive=False, maxdepth=None):
        return self._around("delete", str(path), lambda: self.inner.rm(path, recursive=recursive,
                                                                        maxdepth=maxdepth))

    def mkdir(self, path, create_parents=True, **kwargs):
        return self.inner.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        return self.inner.makedirs(path, exist_ok=exist_ok)

    def invalidate_cache(self, path=None):
        return self.inner.invalidate_cache(path)


def faulty_storage(url: str, storage_options=None) -> tuple[Storage, FaultyFS]:
    """A Storage on ``url`` whose filesystem is a fresh :class:`FaultyFS` (returned too)."""
    fs = FaultyFS(Storage(url, storage_options).fs)
    return Storage(url, storage_options, fs=fs), fs


class LostCatalogResponse(ConnectionError):
    """A catalog call whose response was lost (see :func:`lose_catalog_response`)."""


def lose_catalog_response(monkeypatch, catalog, *, landed: bool) -> list:
    """Make the next ``commit_table`` of ``catalog``'s class fail with an unknown outcome:
    applied first when ``landed``, not applied otherwise. Returns a list that gets one
    entry when the fault fired."""
    real = type(catalog).commit_table
    fired: list = []

    def flaky(self, tbl, requirements, updates):
        if not fired:
            fired.append(1)
            if landed:
                real(self, tbl, requirements, updates)
            raise LostCatalogResponse("connection reset")
        return real(self, tbl, requirements, updates)

    monkeypatch.setattr(type(catalog), "commit_table", flaky)
    return fired
