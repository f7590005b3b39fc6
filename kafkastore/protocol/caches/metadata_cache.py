"""Short-lived caches of topic metadata and partition manifests for the broker.

Topic metadata (``_topic.json``) and the latest manifest of a partition are
read from the root; a broker that answers many requests a second cannot
re-read them for each, so it keeps them for a short time (``ttl_s``). Appends
this broker commits replace the cached manifest at once, so its own writes
are visible to its fetches immediately; other brokers' writes show up within
``ttl_s``. All methods block (call them in the broker's thread pool).
"""
from __future__ import annotations

import threading

from ...errors import ConfigError, UnknownTopicError
from ...job_commits import PendingJobs
from ...manifest import Manifest, ManifestStore
from ...storage import Storage
from ...topics.admin import TopicMetadata, list_topics, load_topic
from .topic_ids import TopicIdIndex


#: Most topic names (known or unknown) whose lookups are remembered: clients choose the names,
#: so an unbounded cache would grow with every name a client makes up.
MAX_CACHED_TOPICS = 10_000
_MISSING = object()


class MetadataCache:
    """Topic metadata and latest manifests, each cached for ``ttl_s`` seconds."""

    def __init__(self, storage: Storage, ttl_s: float = 1.0, manifest_ttl_s: float = 0.1):
        self.storage = storage
        self.clock = storage.clock
        self.ttl_s = ttl_s
        self.manifest_ttl_s = manifest_ttl_s
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[float, TopicMetadata | None]] = {}
        self._names: tuple[float, list[str]] | None = None
        self._manifests: dict[tuple[str, int], tuple[float, Manifest]] = {}
        #: Fetch v13+'s topic id -> name (remembers the id of every topic loaded here).
        self.topic_ids = TopicIdIndex(self, rescan_interval_s=ttl_s, clock=self.clock)
        #: Write jobs into topics still marking: read_committed reads stay below them.
        self.pending_jobs = PendingJobs(storage, self.clock)

    def topic(self, name: str) -> TopicMetadata | None:
        """The topic's metadata, None if it does not exist."""
        now = self.clock.monotonic_s()
        with self._lock:
            hit = self._topics.get(name)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            meta = load_topic(self.storage, name)
        except (UnknownTopicError, ConfigError):  # ConfigError: not a valid topic name
            meta = None
        with self._lock:
            if len(self._topics) >= MAX_CACHED_TOPICS and name not in self._topics:
                self._topics.clear()
            self._topics[name] = (now, meta)
        self.topic_ids.note(name, meta)
        return meta

    def topic_if_fresh(self, name: str):
        """The cached answer of :meth:`topic` if still fresh (never blocks), else :data:`MISSING`."""
        with self._lock:
            hit = self._topics.get(name)
        if hit is not None and self.clock.monotonic_s() - hit[0] < self.ttl_s:
            return hit[1]
        return _MISSING

    def topic_name_for_id(self, tid) -> str | None:
        """The name last seen for topic id ``tid`` (unchecked; for labels). Never blocks."""
        return self.topic_ids.cached_name(tid)

    def forget_topic(self, name: str) -> None:
        """Drop a topic from the cache (after create / delete)."""
        with self._lock:
            self._topics.pop(name, None)
            self._names = None
            for key in [k for k in self._manifests if k[0] == name]:
                del self._manifests[key]

    def topic_names(self) -> list[str]:
        """Every topic under the root."""
        now = self.clock.monotonic_s()
        with self._lock:
            names = self._names
        if names is not None and now - names[0] < self.ttl_s:
            return names[1]
        found = list_topics(self.storage)
        with self._lock:
            self._names = (now, found)
        return found

    def manifest(self, topic: str, partition: int, max_age_s: float | None = None) -> Manifest:
        """The latest manifest (the empty version 0 before the first commit)."""
        max_age = self.manifest_ttl_s if max_age_s is None else max_age_s
        now = self.clock.monotonic_s()
        with self._lock:
            hit = self._manifests.get((topic, partition))
        if hit is not None and now - hit[0] < max_age:
            return hit[1]
        m = ManifestStore(self.storage, topic, partition).latest() or Manifest.empty(topic, partition)
        self.put_manifest(m, now)
        return m

    def cached_version(self, topic: str, partition: int) -> int | None:
        """The version of the cached manifest, None if none is cached (never blocks on I/O)."""
        with self._lock:
            hit = self._manifests.get((topic, partition))
        return None if hit is None else hit[1].version

    def put_manifest(self, m: Manifest, at: float | None = None) -> None:
        """Remember ``m`` if it is not older than what is cached."""
        at = self.clock.monotonic_s() if at is None else at
        key = (m.topic, m.partition)
        with self._lock:
            if len(self._manifests) >= MAX_CACHED_TOPICS * 10 and key not in self._manifests:
                self._manifests.clear()
            hit = self._manifests.get(key)
            if hit is None or hit[1].version <= m.version:
                self._manifests[key] = (at, m)


MISSING = _MISSING
