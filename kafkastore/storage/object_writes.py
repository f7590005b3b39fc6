"""Whole-object writes, atomic and durable, on each kind of store: :func:`write_object`.

The strategy follows the filesystem's type:

* local files: write a temporary file in the target directory, fsync, then
  ``os.link`` it to the final name (exclusive: ``link`` fails with EEXIST
  atomically) or ``os.replace`` it (overwrite). The final name only ever
  points at a complete file. Temporary files are named ``.tmp-*``
  (:data:`TEMP_PREFIX`) and are hidden from :meth:`Storage.list`.
  :func:`write_many_local` writes several files so (fsyncs side by side on a small
  pool, each directory fsynced once), and :func:`pace_local_delete` makes
  housekeeping's local deletes pay for their directories' journal commits themselves.
* memory: every call under one process-wide lock (:data:`MEMORY_LOCK`: ``MemoryFileSystem``
  keeps one class-level store, which a listing in one thread and a write in another would
  race on).
* S3: ``PutObject`` with ``If-None-Match: *`` (s3fs ``mode="create"``); a
  single PUT is atomic, so overwrite is a plain ``pipe_file``.
* anything else: fsspec's exclusive open mode ``"xb"``, if the backend has it.

Extension point: a filesystem object that defines
``kafkastore_write(path, data, exclusive)`` takes over whole-object writes.
Wrappers (the fault injector in ``tests/faults.py``) use it to intercept
writes and then call :func:`write_object` on the filesystem they wrap, so the
wrapped backend keeps its exclusive-create semantics.

Exceptions come from the filesystem unchanged; :class:`kafkastore.storage.Storage` maps
them to its error contract.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
import uuid
from concurrent.futures import wait
from typing import Any

from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from ..threads import shared_pool, yield_to_foreground

# fsspec's memory store is one dict per process. Its listings copy the dict first, but a
# garbage collection inside that copy can run Python code (finalizers, gc callbacks) and so
# let another thread change the dict: "dictionary changed size during iteration". Every
# Storage call on it holds this lock (re-entrant: a write nests write_object's check-and-set).
MEMORY_LOCK = threading.RLock()
#: Names of the temporary files of local writes (hidden from listings, removed by gc if left).
TEMP_PREFIX = ".tmp-"


def _protocols(fs) -> tuple[str, ...]:
    proto = getattr(fs, "protocol", ())
    return (proto,) if isinstance(proto, str) else tuple(proto)


def write_object(fs, path: str, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` as the whole object ``path`` (a path as ``fs`` spells it).

    Readers never observe a partial object. With ``exclusive`` the write
    happens only if ``path`` does not exist, else ``FileExistsError``. Other
    exceptions come from the filesystem unchanged (the caller maps them).
    """
    hook = getattr(fs, "kafkastore_write", None)
    if hook is not None:
        hook(path, data, exclusive)
        return
    if isinstance(fs, LocalFileSystem):
        _local_write(path, data, exclusive)
    elif isinstance(fs, MemoryFileSystem):
        with MEMORY_LOCK:
            if exclusive and fs.exists(path):
                raise FileExistsError(errno.EEXIST, "object exists", path)
            fs.pipe_file(path, data)
    elif "s3" in _protocols(fs):
        fs.pipe_file(path, data, mode="create" if exclusive else "overwrite")
    elif exclusive:
        with fs.open(path, "xb") as f:
            f.write(data)
    else:
        fs.pipe_file(path, data)


def _local_write(path: str, data: bytes, exclusive: bool) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = _local_temp(directory, data)
    _local_publish(tmp, path, exclusive)
    # fsync the directory so the new name survives a crash once we report success.
    _fsync_dir(directory)


def _local_temp(directory: str, data) -> str:
    """Write ``data`` to a new temporary file in ``directory`` and fsync it; its path."""
    tmp = _temp_path(directory)
    _write_durably(tmp, data)
    return tmp


def _temp_path(directory: str) -> str:
    """A fresh temporary name in ``directory`` (hidden from listings, removed by gc if left)."""
    return os.path.join(directory, f"{TEMP_PREFIX}{uuid.uuid4().hex}")


def _local_publish(tmp: str, path: str, exclusive: bool) -> None:
    """Give the complete temporary file ``tmp`` its final name (not yet durable: the
    caller fsyncs the directory)."""
    try:
        if exclusive:
            os.link(tmp, path)  # EEXIST atomically if someone else got there first
        else:
            os.replace(tmp, path)
    finally:
        _unlink_quietly(tmp)  # a no-op after os.replace


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(directory: str) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _fsync_pool():
    """A few threads for :func:`_all_done`: side-by-side fsyncs, and writes that end in one
    (housekeeping's own twin of the pool in its lane: see :mod:`kafkastore.threads`)."""
    return shared_pool("fsync", 4)


#: Housekeeping's local deletes between two fsyncs of their directories (pace_local_delete).
DELETES_PER_SYNC = 16
_PACE = threading.local()


def pace_local_delete(path: str) -> None:
    """After one of housekeeping's local deletes: every :data:`DELETES_PER_SYNC` of them, fsync
    their directories. A journaling filesystem commits a directory's unlinks with the next
    fsync anyone makes: without this, gc's hundreds of unlinks ride on the next produce
    commit's fsync as one long journal commit; with it housekeeping pays for them itself, a
    few at a time (bounded work per step), after letting the ack path's writes pass."""
    dirs = _PACE.__dict__.setdefault("dirs", {})
    dirs[os.path.dirname(path)] = None
    _PACE.n = getattr(_PACE, "n", 0) + 1
    if _PACE.n < DELETES_PER_SYNC:
        return
    _PACE.n = 0
    yield_to_foreground()
    for directory in list(dirs):
        with contextlib.suppress(OSError):   # a removed directory has nothing to commit
            _fsync_dir(directory)
    dirs.clear()

def _fsync_all(fds: list[int]) -> None:
    """fsync every descriptor, concurrently: a journaling filesystem (ext4's jbd2, XFS)
    commits concurrent fsyncs together, so three files cost about one commit, not three.
    Returns (or raises the first error) once every fsync has finished."""
    _all_done([functools.partial(os.fsync, fd) for fd in fds])


def write_all(fd: int, data) -> None:
    """Write ``data`` (a bytes-like object, or a tuple or list of them, one after another)
    whole to ``fd``: ``writev`` of up to IOV_MAX buffers at a time, short writes resumed."""
    parts = data if isinstance(data, (tuple, list)) else (data,)
    bufs = [memoryview(b).cast("B") for b in parts]
    i = 0
    while i < len(bufs):
        n = os.writev(fd, bufs[i:i + _IOV_MAX])
        while i < len(bufs) and n >= bufs[i].nbytes:
            n -= bufs[i].nbytes
            i += 1
        if n:
            bufs[i] = bufs[i][n:]


_IOV_MAX = 1024


def write_many_local(items: list[tuple[str, Any]]) -> None:
    """Overwrite several local files: each written to a temporary file and fsynced, side by
    side (one thread each: the writes overlap, and ext4's jbd2 commits concurrent fsyncs
    together), renamed in order, then each directory fsynced once (not once per file).
    Success means every file is durable under its final name, as after that many
    :func:`_local_write` calls; a failure part way leaves each name either old or new."""
    directories: dict[str, None] = {}
    temps: list[tuple[str, str]] = []
    for path, _ in items:
        directory = os.path.dirname(path)
        if directory not in directories:
            os.makedirs(directory, exist_ok=True)
            directories[directory] = None
        temps.append((_temp_path(directory), path))
    try:
        _all_done([functools.partial(_write_durably, tmp, data)
                   for (tmp, _), (_, data) in zip(temps, items)])
        while temps:
            tmp, path = temps.pop(0)
            _local_publish(tmp, path, False)
    finally:
        for tmp, _ in temps:
            _unlink_quietly(tmp)
    dfds = [os.open(d, os.O_RDONLY) for d in directories]
    try:
        _fsync_all(dfds)
    finally:
        for fd in dfds:
            os.close(fd)


def _write_durably(tmp: str, data) -> None:
    """Create ``tmp``, write ``data`` whole and fsync it; on failure no ``tmp`` is left."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            write_all(fd, data)
            yield_to_foreground()   # housekeeping's fsync waits for the ack path's to pass
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _all_done(jobs: list) -> None:
    """Run every job, the first in this thread and the rest on the fsync pool; return (or
    raise the first error) once all have finished."""
    if len(jobs) <= 1:
        for job in jobs:
            job()
        return
    pool = _fsync_pool()
    futures = [pool.submit(job) for job in jobs[1:]]
    try:
        jobs[0]()
    finally:
        wait(futures)
    for f in futures:
        f.result()
