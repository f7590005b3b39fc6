"""One manifest commit as the commit engine sees it: version N+1 of a partition, put if
absent (:class:`_ManifestTarget`, built by :meth:`ManifestStore.commit
<kafkastore.manifest.store.ManifestStore.commit>`).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from ..commit import RETRY, Done, ObjectTarget
from ..errors import ObjectNotFoundError, ReadBeforePutError, StorageError, TopicDeletedError
from .heads import _gone, _Head
from .model import MANIFEST_FORMAT, CommitInfo, Manifest
from .updates import Build, SetExtra, apply
from .upgrade import fence_old_readers

if TYPE_CHECKING:
    from .store import ManifestStore


#: A put sent more than this after the upload ages were last checked checks them again.
_RECHECK_AFTER_MS = 1000


class _ManifestTarget(ObjectTarget):
    """One :meth:`ManifestStore.commit` as the engine sees it: version N+1, put-if-absent."""

    #: A failed read just before the put (the probe for a hole) means the put was not sent:
    #: the commit fails as a failed read of the head does (unless an earlier put of it may
    #: have landed: the engine reads back then).
    refused_errors = ObjectTarget.refused_errors + (ReadBeforePutError,)

    def __init__(self, store: ManifestStore, build: Build, operation: str, writer: str,
                 now_ms: int | None, full: bool = False):
        super().__init__(store.storage)
        self.store, self.build = store, build
        self.operation, self.writer, self.now_ms = operation, writer, now_ms
        self.started = 0.0
        self.put_started = 0.0
        self.base_fmt: int | None = None
        self.full = full
        self.base_head: _Head | None = None  # the head the base was, when read through the store
        # (new, kind, stored bytes, new's head with its group tracked)
        self.encoded: tuple[Manifest, str, bytes, _Head] | None = None
        # (the base the upload ages were checked against, when: wall ms)
        self.checked: tuple[Manifest | None, int] = (None, 0)

    def read(self) -> Manifest | None:
        self.started = self.store._clock.monotonic_s()
        base = self.store.latest()
        head = self.store._head
        # The stored format of the base decides whether the next version may be a delta;
        # unknown (a base not read through this store) means full, the safe choice.
        self.base_fmt = head.fmt if head is not None and head.manifest is base else None
        self.base_head = head if head is not None and head.manifest is base else None
        return base

    def plan(self, base: Manifest | None, attempt: int):
        planned = self.build(base)
        if planned is None:
            return Done(base)
        updates, requirements = (list(x) for x in planned)
        if (base is not None and base.extra.get("deleted")
                and not any(isinstance(u, SetExtra) and u.key == "deleted" for u in updates)):
            # A deletion tombstone (kafkastore.topics.delete_topic): a writer racing the delete
            # re-read and lost. Only the commits that set or clear the tombstone pass.
            raise TopicDeletedError(f"topic {self.store.topic!r} was deleted "
                                    f"(partition {self.store.partition}, version {base.version})")
        info = CommitInfo(
            commit_id=uuid.uuid4().hex,
            operation=self.operation or ",".join(type(u).__name__ for u in updates),
            writer=self.writer,
            timestamp_ms=self.store._clock.wall_ms() if self.now_ms is None else int(self.now_ms))
        new = apply(base, updates, requirements, topic=self.store.topic,
                    partition=self.store.partition, commit=info)
        self.store._check_uploads(base, new)
        self.checked = (base, self.store.storage.clock.wall_ms())
        bh = self.base_head
        if base is None:
            group: tuple[int | None, frozenset] | None = (None, frozenset())
        elif bh is not None and bh.group_removed is not None:
            group = (bh.group_start, bh.group_removed | _gone(base, new))
        else:
            group = None  # the base's group is not known: gc reads its versions instead
        kind, data = self.store._encode(None if self.full else base, self.base_fmt, new, group)
        if kind == "full":
            after = _Head(new, MANIFEST_FORMAT, group_start=new.version, group_removed=frozenset())
        elif group is not None:
            after = _Head(new, MANIFEST_FORMAT, group_start=group[0], group_removed=group[1])
        else:
            after = _Head(new, MANIFEST_FORMAT)
        self.encoded = (new, kind, data, after)
        if base is not None and self.base_fmt != MANIFEST_FORMAT and not self.store._fenced:
            # The first format-2 version on a format-1 log: fence older kafkastore off the
            # topic first.
            fence_old_readers(self.store.storage, self.store.topic)
            self.store._fenced = True
        return new

    def locate(self, new: Manifest) -> tuple[str, bytes]:
        if self.encoded is None or self.encoded[0] is not new:
            self.encoded = (new, "full", new.to_json(),
                            _Head(new, MANIFEST_FORMAT, group_start=new.version,
                                  group_removed=frozenset()))
        return self.store.path(new.version), self.encoded[2]

    def put(self, new: Manifest) -> None:
        # Nothing after new.version can be written before new lands, so once it has, this
        # moment confirms new as the head (see ManifestStore._trusted).
        self.put_started = self.store._clock.monotonic_s()
        # The point of no return: the files this version newly lists must still be inside
        # the window gc guarantees when the put is sent, on every attempt (a re-put after an
        # unknown outcome, a put after a pause), not only when the commit was planned.
        base, checked_ms = self.checked
        if self.store.storage.clock.wall_ms() - checked_ms > _RECHECK_AFTER_MS:
            self.store._check_uploads(base, new)
            self.checked = (base, self.store.storage.clock.wall_ms())
        # Never write into a hole: N+2 stored while N+1 is not (out-of-order replication, a
        # partial restore) while N is means the chain already goes on past the slot we
        # would fill; a put there forks it. One read of N+2 per attempt (a GET answered 404:
        # one request on S3, where an existence check is a HEAD and then a LIST), the only
        # probe on the warm path (a trusted head does not probe further); the full check
        # only when N+2 is there.
        try:
            hole = self._stored(new.version + 1) and self.store._hole_at(new.version)
        except ReadBeforePutError:
            raise
        except StorageError as exc:
            # The put is not sent: a definite failure (refused_errors), not an unknown outcome.
            raise ReadBeforePutError(f"{self.describe(new)}: the check for a hole before the "
                                     f"put failed ({type(exc).__name__}: {exc}); nothing was "
                                     f"put") from exc
        if hole:
            raise self.store._gap(new.version)
        super().put(new)

    def _stored(self, version: int) -> bool:
        """Whether ``version`` of the partition is stored, by one read of it."""
        try:
            self.store.storage.get(self.store.path(version))
        except ObjectNotFoundError:
            return False
        return True

    def is_ours(self, stored: bytes, new: Manifest) -> bool:
        try:
            found = json.loads(stored).get("commit", {}).get("id")
        except (ValueError, AttributeError):
            found = None
        return found is not None and new.commit is not None and found == new.commit.commit_id

    def result(self, new: Manifest, *, attempts: int, read_back: bool):
        slow = (self.store._clock.monotonic_s() - self.started) * 1000 >= self.store.min_keep_ms / 2
        if slow and self.store._superseded(new.version):
            # So slow that our version number may have been expired and re-created:
            # the version we wrote is invisible (latest() never returns it). Plan again.
            return RETRY
        if self.encoded is not None and self.encoded[0] is new:
            kind, after = self.encoded[1], self.encoded[3]
        else:
            kind, after = "full", _Head(new, MANIFEST_FORMAT)
        self.store._remember(replace(after, confirmed=self.put_started,
                                     clock=self.store._clock))
        if kind == "full":
            self.store._write_hint(new.version)
        return new

    def describe(self, new: Manifest) -> str:
        return (f"version {new.version} of {self.store.topic}/{self.store.partition} "
                f"(commit {new.commit.commit_id if new.commit else '?'})")
