"""What this process knows about manifest heads: the last head a store saw (:class:`_Head`,
kept per store and in a bounded process-wide cache), the group a full version starts
(the segments its versions dropped, for gc), and the commit turns of this process's
writers of one partition. Pure bookkeeping; no storage.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..commit import Clock
from . import delta as manifest_delta
from .model import _SEGMENT_ID_RE, Manifest


@dataclass(frozen=True)
class _Head:
    """A manifest known to have been the newest stored version: its stored format, and
    when (``clock.monotonic_s()``) the next version was seen absent (None: not confirmed).

    ``group_start`` is the full version its group starts at and ``group_removed`` the
    segments, as ``(base_offset, segment_id)``, that some version of the group from
    ``group_start`` on listed and this one does not (None: not known). The writer of the
    next full version records both in it (see :meth:`ManifestStore.referenced_files`)."""

    manifest: Manifest
    fmt: int
    confirmed: float | None = None
    clock: Clock | None = None
    group_start: int | None = None
    group_removed: frozenset | None = None

    def followed_by(self, m: Manifest, fmt: int, full: bool) -> "_Head":
        """The unconfirmed head ``m`` (stored full or as a delta on this one), its group tracked."""
        if full:
            return _Head(m, fmt, group_start=m.version, group_removed=frozenset())
        if self.group_removed is None:
            return _Head(m, fmt)
        return _Head(m, fmt, group_start=self.group_start,
                     group_removed=self.group_removed | _gone(self.manifest, m))


def _gone(base: Manifest, new: Manifest) -> frozenset:
    """``(base_offset, segment_id)`` of the segments ``base`` lists and ``new`` does not."""
    if new.segments is base.segments:
        return frozenset()
    removed = manifest_delta._segment_changes(base.segments, new.segments)[0]
    if not removed:
        return frozenset()
    live = {s.segment_id for s in new.segments}
    return frozenset((s.base_offset, s.segment_id) for s in base.segments
                     if s.segment_id not in live)


def _full_bytes(m: Manifest, group: "tuple[int | None, frozenset] | None") -> bytes:
    """The stored bytes of full version ``m``; with ``group`` (the previous group's start and
    the segments listed in it that ``m`` no longer lists) also that, for gc."""
    d = m.to_dict()
    if group is not None:
        d["group"] = {"previous_full": group[0],
                      "removed": [[b, i] for b, i in sorted(group[1])]}
    return json.dumps(d, separators=(",", ":"), allow_nan=False).encode()


def _stored_group(doc: dict) -> "tuple[int | None, list] | None":
    """``(previous_full, removed)`` of a stored full version, None if absent or malformed."""
    g = doc.get("group")
    if not isinstance(g, dict):
        return None
    prev, removed = g.get("previous_full"), g.get("removed")
    if prev is not None and (not isinstance(prev, int) or isinstance(prev, bool) or prev < 1
                             or prev >= doc.get("version", 0)):
        return None
    if not isinstance(removed, list) or not all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], int)
            and isinstance(r[1], str) and _SEGMENT_ID_RE.match(r[1]) for r in removed):
        return None
    return prev, removed


class _HeadCache:
    """The last head seen per (root, topic, partition), shared by every :class:`ManifestStore`
    of the process (callers often make a new store per call); bounded, least recently used out."""

    def __init__(self, size: int):
        self.size = size
        self._items: "OrderedDict[tuple, _Head]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> _Head | None:
        with self._lock:
            head = self._items.get(key)
            if head is not None:
                self._items.move_to_end(key)
            return head

    def put(self, key: tuple, head: _Head) -> None:
        with self._lock:
            old = self._items.get(key)
            if old is not None and old.manifest.version > head.manifest.version:
                return  # a slower thread's older head must not replace a newer one
            self._items[key] = head
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_HEADS = _HeadCache(4096)


class _CommitLocks:
    """One lock per (store, topic, partition) for the commits of this process.

    Two writers of one process (a broker's produce commits and its housekeeper's merges)
    would otherwise race for every version number: a committer whose attempt is slow (it
    must read the versions that landed since, a GET each on S3) loses every race against
    one that commits several times a second, until its uploads are too old to commit (a
    merge on a loaded machine's moto S3 lost 26 races in 28 s and merged nothing). Taking
    turns in-process makes their attempts never conflict with each other; other processes
    still race through put-if-absent as before. The lock is reentrant (a test's callback may
    commit from inside a commit) and waited for at most ``wait_s``: past that the commit
    goes ahead unserialised (as before), so a lock can delay but never deadlock a commit.
    """

    wait_s = 10.0

    def __init__(self):
        self._locks: dict[tuple, threading.RLock] = {}
        self._guard = threading.Lock()

    def acquire(self, key: tuple) -> "threading.RLock | None":
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
        return lock if lock.acquire(timeout=self.wait_s) else None


_COMMIT_LOCKS = _CommitLocks()
