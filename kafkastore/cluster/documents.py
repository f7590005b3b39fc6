"""Small JSON documents every broker of a root shares: quotas, ACLs, SCRAM credentials.

A document ``name`` is a sequence of immutable, numbered versions, each a full
snapshot (these documents are small)::

    <root>/_cluster/<name>/v<20-digit version>.json   {"name", "version", "id", "doc"}
    <root>/_cluster/<name>/_head.json                 {"version": N}   (hint, overwritten)

Version N+1 is created with put-if-absent through the one commit engine
(:class:`kafkastore.commit.CommitEngine`), so of two writers racing from
version N exactly one wins and the other re-reads and re-applies its change:
no update is lost. A read is one listing of the document's directory: the
newest version listed is the head (the store lists what it holds at that
moment, as S3 does since it lists consistently), and a GET of it follows only
when it is newer than the copy in hand. So keeping a copy fresh costs one
request per read, which matters on an object store, where brokers re-read
these documents every second or so to keep their decisions within a bound.
Versions older than :attr:`ClusterDocument.keep` behind the head are deleted
oldest first, so the directory stays a few entries long. The hint
(``_head.json``) is still written after each commit for readers of older
releases; reads here no longer need it.

Reads never hold the document's lock across a request, so reads overlap: a
refresher may start the next read before a slow one ends. The copy kept is the
newest version any read found, and its *read time* is the latest moment at which
a read started that found it (or something older) as the head: the copy is at
least as new as the head was then.

A document that was never written reads as ``{}``.
"""
from __future__ import annotations

import copy
import json
import logging
import re
import threading
import uuid
from typing import Any, Callable

from ..commit import CommitEngine, Done, ObjectTarget
from ..clock import Clock, as_clock
from ..errors import ClusterDocumentError, ConfigError, ObjectNotFoundError, StorageError
from ..storage import Storage

log = logging.getLogger("kafkastore.cluster_config")  # its name before the move (log filters use it)

CLUSTER_DIR = "_cluster"
HINT_NAME = "_head.json"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_VERSION_RE = re.compile(r"^v(\d{20})\.json$")


def document_dir(name: str) -> str:
    """Relative directory of the document ``name``."""
    return f"{CLUSTER_DIR}/{name}"


class ClusterDocument:
    """A JSON document under <root>/_cluster/<name>/ that every broker of the root shares.

    :meth:`get` serves a cached copy re-read at most every ``max_age_s`` seconds (by
    ``clock``), so a change made on any broker is seen everywhere within about
    ``max_age_s``; :meth:`refresh` re-reads now; :meth:`update` applies a pure change
    optimistically (see the module docstring). Thread-safe.
    """

    #: Versions kept behind the head (readers that loaded an older one still find its successor).
    keep: int = 8

    def __init__(self, storage: Storage, name: str, *, max_age_s: float = 2.0,
                 clock: Clock | Callable[[], float] | None = None):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(f"invalid cluster document name {name!r}: expected 1-64 characters "
                              "of [a-z0-9_.-] starting with a letter or digit")
        if not max_age_s >= 0:
            raise ConfigError(f"max_age_s must be >= 0, got {max_age_s!r}")
        self.storage = storage
        self.name = name
        self.dir = document_dir(name)
        self.max_age_s = max_age_s
        # Default: the storage's clock; an old bare callable is monotonic seconds.
        self._clock = as_clock(clock, "monotonic_s") if clock is not None else storage.clock
        self._lock = threading.RLock()   # update() holds it across its read (_refresh_locked)
        self._version = 0          # newest version this process has seen (0: none)
        self._doc: dict = {}
        self._read_at: float | None = None
        self._engine = CommitEngine(clock=self._clock)

    def __repr__(self) -> str:
        return f"ClusterDocument({self.storage.url!r}, {self.name!r})"

    def path(self, version: int) -> str:
        """Relative path of one version."""
        return f"{self.dir}/v{version:020d}.json"

    @property
    def version(self) -> int:
        """The version of the document last read or written here (0: none yet)."""
        return self._version

    # -- reading ---------------------------------------------------------------
    def get(self) -> dict:
        """The document (a copy), re-read when the cached one is older than ``max_age_s``."""
        age = self.age_s()
        if age is not None and age < self.max_age_s:
            with self._lock:
                return copy.deepcopy(self._doc)
        return self.refresh()

    def age_s(self) -> float | None:
        """Seconds since the copy in hand was read (by the monotonic clock; None: never read).
        A reader that must not decide on data older than a bound re-reads when this is
        past it (:meth:`refresh`)."""
        read_at = self._read_at
        return None if read_at is None else self._clock.monotonic_s() - read_at

    @property
    def read_at(self) -> float | None:
        """When (monotonic seconds) the read that vouches for the copy in hand started."""
        return self._read_at

    def refresh(self) -> dict:
        """The document as stored now (a copy)."""
        return self.read()[1]

    def read(self) -> tuple[int, dict, float]:
        """Read the head now: ``(version, document copy, read time)`` of the copy kept after
        this read (the newest known; the read time is when this read started, or later if a
        read that started later already vouched for it). Holds no lock across requests."""
        asked = self._clock.monotonic_s()
        version, doc = self._read_head()
        with self._lock:
            self._adopt(version, doc, asked)
            return self._version, copy.deepcopy(self._doc), self._read_at

    def _adopt(self, version: int, doc: dict, asked: float) -> None:
        """Keep what a read that started at ``asked`` found (the lock held)."""
        if version > self._version:
            self._version, self._doc = version, doc
        # What is kept is at least as new as the head was at ``asked``.
        if self._read_at is None or asked > self._read_at:
            self._read_at = asked

    def _refresh_locked(self) -> None:
        asked = self._clock.monotonic_s()
        version, doc = self._read_head()
        self._adopt(version, doc, asked)

    def _damaged(self, version: int, why: str) -> ClusterDocumentError:
        return ClusterDocumentError(
            f"cluster document {self.name!r} version {version} ({self.path(version)} under "
            f"{self.storage.url}) is damaged: {why}")

    def _read_version(self, version: int) -> dict:
        """The ``doc`` of one stored version (:class:`ObjectNotFoundError` if absent)."""
        data = self.storage.get(self.path(version))
        try:
            stored = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._damaged(version, f"not JSON ({exc})") from None
        if not isinstance(stored, dict) or not isinstance(stored.get("doc"), dict):
            raise self._damaged(version, "not an object with a 'doc' object")
        if stored.get("version") != version or stored.get("name") != self.name:
            raise self._damaged(version, f"holds {stored.get('name')!r} version "
                                f"{stored.get('version')!r}")
        return stored["doc"]

    def _listed_versions(self) -> list[int]:
        out = []
        for info in self.storage.list(self.dir):
            parent, _, leaf = info.path.rpartition("/")
            m = _VERSION_RE.match(leaf)
            if m and parent == self.dir:
                out.append(int(m.group(1)))
        return sorted(out)

    def _read_hint(self) -> int:
        """The version the head hint names (0: none, or unreadable). Reads here do not need
        it; subclasses that never prune find their head from it."""
        try:
            data = self.storage.get(f"{self.dir}/{HINT_NAME}")
        except ObjectNotFoundError:
            return 0
        except StorageError as exc:  # the hint only saves a listing
            log.warning("%s: cannot read the head hint (%s)", self, exc)
            return 0
        try:
            v = json.loads(data)["version"]
            if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                return v
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            pass
        log.warning("%s: damaged head hint", self)
        return 0

    def _read_head(self) -> tuple[int, dict]:
        """``(version, doc)`` of the head: one listing, and a GET of the head only when it is
        not the version in hand. Called with or without the (reentrant) lock held."""
        with self._lock:
            known, known_doc, have = self._version, self._doc, self._read_at is not None
        for _ in range(5):
            listed = self._listed_versions()
            if not listed:
                if known:
                    raise StorageError(f"{self}: every version vanished (version {known} "
                                       "was read before)")
                return 0, {}
            head = listed[-1]
            if head < known:
                # Versions are never taken back: a listing without the version in hand is
                # damage or a store that lists stale state, never the head going back.
                raise StorageError(f"{self}: the store lists version {head} as the newest, "
                                   f"but version {known} was read before")
            if head == known and have:
                return known, known_doc
            try:
                return head, self._read_version(head)
            except ObjectNotFoundError:
                continue   # pruned since the listing (keep versions written meanwhile): list again
        raise StorageError(f"{self}: versions keep vanishing while read")

    # -- writing ---------------------------------------------------------------
    def update(self, change: Callable[[dict], dict]) -> dict:
        """Apply ``change`` (pure: it gets a copy of the head and returns the new document)
        and store the result as the next version; on a lost race re-read and apply again.
        Returns the document written (a copy). A change that returns its input unchanged
        writes nothing."""
        with self._lock:
            version, doc = self._engine.run(_NextVersion(self, change))
            if version > self._version:
                # The engine's read (the start of which is the read time now) found the
                # version before this one as the head: what is kept is newer.
                self._version, self._doc = version, doc
            result = copy.deepcopy(self._doc if version < self._version else doc)
        if version:
            self._after_commit(version)
        return result

    def _after_commit(self, version: int) -> None:
        try:
            self.storage.put(f"{self.dir}/{HINT_NAME}", json.dumps({"version": version}).encode())
        except StorageError as exc:  # advisory: readers probe forward or list
            log.warning("%s: cannot write the head hint (%s)", self, exc)
        old = version - self.keep - 1
        if old < 1:
            return
        try:
            if version % self.keep == 0:  # now and then sweep what crashed writers left
                stale = [v for v in self._listed_versions() if v <= old]
            else:
                stale = [old]
            self.storage.delete([self.path(v) for v in stale])  # oldest first (see module doc)
        except StorageError as exc:
            log.warning("%s: cannot prune old versions (%s)", self, exc)


class _NextVersion(ObjectTarget):
    """The put-if-absent of version head+1 holding ``change(head)``."""

    def __init__(self, document: ClusterDocument, change: Callable[[dict], dict]):
        super().__init__(document.storage)
        self.document = document
        self.change = change

    def read(self) -> tuple[int, dict]:
        d = self.document
        d._refresh_locked()   # the writer holds the document's lock: writes are rare
        return d._version, d._doc

    def plan(self, base: tuple[int, dict], attempt: int):
        version, doc = base
        new = self.change(copy.deepcopy(doc))
        if not isinstance(new, dict):
            raise ConfigError(f"a change to {self.document} must return a dict, "
                              f"got {type(new).__name__}")
        try:
            # Round-trip so what we return is exactly what readers will see.
            new = json.loads(json.dumps(new, sort_keys=True))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.document}: the new document is not JSON: {exc}") from None
        if new == doc:
            return Done((0, new))
        stored = {"name": self.document.name, "version": version + 1,
                  "id": uuid.uuid4().hex, "doc": new}
        return version + 1, new, json.dumps(stored, sort_keys=True).encode()

    def locate(self, planned) -> tuple[str, bytes]:
        return self.document.path(planned[0]), planned[2]

    def result(self, planned, *, attempts: int, read_back: bool):
        return planned[0], planned[1]
