"""Topic id -> topic name for one broker (Fetch v13+ names topics by id, KIP-516).

A topic's id is random, stored in its metadata when it is created (topics created
before ids were stored keep an id derived from name and creation time,
:func:`kafkastore.protocol.placement.topic_id_of`), so it cannot be inverted: the
broker remembers the id of every topic whose metadata it loads (Metadata,
Produce and Fetch all load it), and a fetch resolves ids with one dict lookup
per topic. An id not remembered (a client that asked another broker for
metadata, or a made-up id) triggers a rescan of the root's topics; rescans
are shared by concurrent misses and happen at most once per
``rescan_interval_s``, so a client sending unknown ids costs one bounded scan
per interval, never one scan per request. A remembered id is always checked
against the topic's current metadata, so a deleted or re-created topic's old
id is unknown, never the new topic.
"""
from __future__ import annotations

import threading
import uuid
from typing import Callable

from ...clock import Clock, as_clock
from ..placement import topic_id_of

#: :meth:`TopicIdIndex.resolve_cached`'s answer when only :meth:`TopicIdIndex.resolve` (I/O) can tell.
NEEDS_LOOKUP = object()


class TopicIdIndex:
    """``resolve(id)``: the ``(name, metadata)`` of the live topic with that id, else None.

    ``meta`` is the broker's :class:`~kafkastore.protocol.caches.metadata_cache.MetadataCache` (its
    ``topic(name)`` and ``topic_names()``); ``clock`` is a :class:`~kafkastore.clock.Clock`
    (or an old callable giving monotonic seconds)."""

    #: Most ids remembered between scans (only live topics' ids are noted; this bounds
    #: re-creations piling up on a long-lived broker).
    MAX_IDS = 100_000

    def __init__(self, meta, rescan_interval_s: float = 1.0,
                 clock: Clock | Callable[[], float] | None = None):
        self.meta = meta
        self.rescan_interval_s = rescan_interval_s
        self.clock = as_clock(clock, "monotonic_s")
        self._ids: dict[uuid.UUID, str] = {}
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._scanned_at: float | None = None
        self.scans = 0

    def note(self, name: str, meta) -> None:
        """Remember a topic's id from its just-loaded metadata (None: nothing to remember)."""
        if meta is not None:
            tid = topic_id_of(name, meta)
            with self._lock:
                if len(self._ids) >= self.MAX_IDS and tid not in self._ids:
                    self._ids.clear()
                self._ids[tid] = name

    def cached_name(self, tid) -> str | None:
        """The remembered name of id ``tid`` (not checked against the topic). Never blocks."""
        with self._lock:
            return self._ids.get(tid)

    def resolve_cached(self, tid):
        """:meth:`resolve` from fresh cached metadata only, never blocking: ``(name, meta)``,
        or :data:`NEEDS_LOOKUP` when only :meth:`resolve` can tell."""
        name = self.cached_name(tid)
        if name is None:
            return NEEDS_LOOKUP
        meta = self.meta.topic_if_fresh(name)
        if meta is not None and getattr(meta, "created_ms", None) is not None \
                and topic_id_of(name, meta) == tid:
            return name, meta
        return NEEDS_LOOKUP

    def resolve(self, tid):
        """``(name, metadata)`` of the live topic whose id is ``tid``, else None. Blocking."""
        if tid is None:
            return None
        found = self._check(tid)
        if found is not None:
            return found
        asked = self.clock.monotonic_s()
        with self._scan_lock:
            # A scan that started after this miss was seen answers it as well as a new one would.
            if self._scanned_at is None or (self._scanned_at < asked and
                                            self.clock.monotonic_s() - self._scanned_at >= self.rescan_interval_s):
                self._scan()
        return self._check(tid)

    def _check(self, tid):
        name = self.cached_name(tid)
        if name is None:
            return None
        meta = self.meta.topic(name)
        if meta is not None and topic_id_of(name, meta) == tid:
            return name, meta
        return None

    def _scan(self) -> None:
        self._scanned_at = self.clock.monotonic_s()
        self.scans += 1
        found: dict[uuid.UUID, str] = {}
        for name in self.meta.topic_names():
            meta = self.meta.topic(name)
            if meta is not None:
                found[topic_id_of(name, meta)] = name
        with self._lock:  # replaced, not merged: ids of deleted topics do not pile up
            self._ids = found
