"""The history of a partition's manifest versions: which are old enough to go and which
segment objects any stored version lists (:class:`VersionHistory`, which
:class:`~kafkastore.manifest.store.ManifestStore` inherits).

Expiry goes by whole groups (a full version and the deltas on it), oldest first, so every
version left can be rebuilt and what is left is a contiguous run ending at the head;
:meth:`VersionHistory.referenced_files` is what garbage collection may not delete.
"""
from __future__ import annotations

import logging
import re
from typing import Iterable

from .. import layout
from ..errors import (CorruptMetadataError, FencedError, ObjectNotFoundError, StorageError,
                      TopicDeletedError)
from .heads import _stored_group

# The logger keeps the name it had before the manifest became a package.
log = logging.getLogger("kafkastore.manifest")

_KIND_RE = re.compile(rb'^\{\s*"format"\s*:\s*(\d+)\s*,\s*(?:"kind"\s*:\s*"(full|delta)")?')


class VersionHistory:
    """Expiry and the files the stored versions list, for a store of one partition's versions.

    A mixin: the store supplies ``storage``, ``topic``, ``partition``, ``min_keep_ms``,
    ``full_every``, ``path``, ``versions``, ``load``, ``replay``, ``commit`` and the
    internals ``_listing``, ``_require_contiguous``, ``_read_head``, ``_read_doc``,
    ``_is_delta`` and ``_decode`` (see :class:`~kafkastore.manifest.store.ManifestStore`).
    """

    def _kind(self, version: int) -> str | None:
        """``"full"`` or ``"delta"`` from the first bytes of a stored version (full and delta
        versions begin with their format and kind), None if absent or unrecognised."""
        try:
            head = bytes(self.storage.get_range(self.path(version), 0, 40))
        except ObjectNotFoundError:
            return None
        m = _KIND_RE.match(head)
        if m is None:
            return None
        if m.group(1) == b"1":
            return "full"  # format 1: every version is a full snapshot
        return m.group(2).decode() if m.group(2) else None

    def _expiry_cut(self, listing: list[tuple[int, float]], now_ms: int, keep_ms: int,
                    keep_last: int) -> tuple[int, int]:
        """``(cut, reach)``: indexes in ``listing`` of the first version to keep, and of the
        first one too young to go (``cut <= reach``; they differ when a group holds back)."""
        reach = 0
        for i, (version, _) in enumerate(listing[:-keep_last]):
            next_version, next_mtime = listing[i + 1]
            superseded_ms = next_mtime * 1000 if next_mtime else self._commit_time(next_version)
            if superseded_ms is None or now_ms - superseded_ms <= keep_ms:
                break
            reach = i + 1
        # The first version kept must be full: move the cut back to the start of its group.
        cut = reach
        while cut > 0 and self._kind(listing[cut][0]) != "full":
            cut -= 1
        return cut, reach

    def expire_versions(self, now_ms: int, keep_ms: int, keep_last: int = 1, *,
                        checkpoint: bool = True) -> list[int]:
        """Delete every old version (see :meth:`expire_step`, which this runs uncapped, on a
        trusted clock); return the version numbers deleted."""
        return self.expire_step(now_ms, keep_ms, keep_last, checkpoint=checkpoint)[0]

    def expire_step(self, now_ms: int, keep_ms: int, keep_last: int = 1, *,
                    checkpoint: bool = True, max_versions: int | None = None,
                    clock_trusted: bool = True) -> tuple[list[int], int]:
        """Delete old versions, in one step bounded by ``max_versions`` (default: all).

        A version goes only when it is not among the newest ``keep_last`` (at
        least 1: the latest always stays) and was superseded more than
        ``keep_ms`` ago (by the store's clock: the next version's object
        time), so a reader that loaded it can still read its segment files.
        ``keep_ms`` is raised to :attr:`min_keep_ms` if lower. Versions go
        whole groups at a time (a full version and the deltas on it): the
        oldest version left is always full, so every version left can be
        rebuilt. They go one by one, oldest first, and the first one too
        young stops the sweep, so what is left is always a contiguous run
        ending at the latest; readers rely on that order (see the class docstring).

        When versions old enough to go are held back only because their group
        runs on to the head (a quiet partition: no full version will come by
        itself), a full copy of the head is committed first (operation
        ``checkpoint``, no change to the state), so the old group can go now or,
        on the real clock, one ``keep_ms`` later. With ``checkpoint=False`` it is not.

        Returns ``(deleted, left)``: the versions deleted, oldest first, and how many more
        could have gone now but for the cap (a backlog, for another step).

        ``max_versions`` bounds one step: whole groups, oldest first, up to that many
        versions (at least one group: a group is never split by the cap), so a backlog goes
        in bounded steps, each leaving a contiguous run ending at the latest whose oldest
        version is full, exactly as an uncapped expiry does.

        ``clock_trusted=False`` (``now_ms`` is from a clock that disagrees with the store's)
        takes the newest object time of the listing as now instead: the store gave that time
        to an object it already holds, so it is not ahead of the store's clock, and a version
        goes only once it was superseded ``keep_ms`` before it by the store's own times. The
        process's clock, ahead or behind, then plays no part; on a busy partition the newest
        object is moments old, on a quiet one expiry waits for its next commit.
        """
        keep_ms = max(int(keep_ms), int(self.min_keep_ms))
        keep_last = max(1, int(keep_last))
        listing = self._listing()
        if not clock_trusted:
            now_ms = int(max((t for _, t in listing), default=0) * 1000)
        # A hole is damage: a checkpoint would be written on the state in front of it (a
        # fork) and the versions behind it expired as if superseded. Refuse the partition.
        self._require_contiguous([v for v, _ in listing])
        cut, reach = self._expiry_cut(listing, now_ms, keep_ms, keep_last)
        k = self.full_every
        if (checkpoint and cut < reach
                and not any(v % k == 0 for v, _ in listing[cut + 1:])
                and self._kind(listing[-1][0]) == "delta"):
            try:
                self.commit(lambda base: ([], []) if base is not None else None,
                            operation="checkpoint", writer="expire_versions", full=True)
            except (TopicDeletedError, FencedError) as exc:
                log.info("%s/%s: no checkpoint before expiry: %s", self.topic, self.partition, exc)
            else:
                listing = self._listing()
                cut, reach = self._expiry_cut(listing, now_ms, keep_ms, keep_last)
        stop = cut
        if max_versions is not None and cut > max(1, int(max_versions)):
            # Whole groups only: on from the cap to the start of the next group (listing[cut]
            # is one), so the oldest version left is full, as after an uncapped expiry.
            stop = max(1, int(max_versions))
            while stop < cut and self._kind(listing[stop][0]) != "full":
                stop += 1
        doomed = [v for v, _ in listing[:stop]]
        for v in doomed:  # one at a time, oldest first: readers rely on the order
            self.storage.delete([self.path(v)])
        return doomed, cut - stop

    def _commit_time(self, version: int) -> float | None:
        try:
            m = self.load(version)
        except ObjectNotFoundError:
            return None
        return float(m.commit.timestamp_ms) if m.commit else None

    def referenced_files(self, versions: Iterable[int] | None = None, *,
                         unreadable: list[str] | None = None) -> set[str]:
        """Relative paths of the segment objects that any of ``versions`` lists (default: all stored).

        With ``unreadable`` (a list), a damaged version other than the newest is skipped
        and its error appended there instead of raised (a delta after a damaged version
        cannot be rebuilt either, so nobody can read it: it is skipped the same way).

        Garbage collection may delete a segment object only if it is in no
        such set *and* older than its grace period (an upload whose commit is
        still in flight is not listed yet).

        For all stored versions (the default) this reads the head (as :meth:`latest`) and
        then the chain of full versions back to the oldest stored one, not every delta:
        every full version records the full version its previous group started at and the
        segments some version of that group listed that it no longer does, and the head
        carries the same for its own group. A group's versions list nothing beyond its
        next full version's segments and that record, so the union is exact up to the
        oldest group (whose record may name segments of versions already expired: kept a
        little longer, never too little). Where that record is missing (versions written
        before it existed, format 1, damage) every stored version is replayed instead,
        one read per version, from the oldest stored full version.
        """
        if versions is None:
            fast = self._referenced_by_checkpoints()
            if fast is not None:
                return fast
        chosen = None if versions is None else set(versions)
        out: set[str] = set()
        if versions is None:
            self._require_contiguous(self.versions())   # gc never decides on a cut chain
        replayed = list(self.replay())
        newest = max((v for v, _, _ in replayed if chosen is None or v in chosen), default=None)
        for v, m, err in replayed:
            if chosen is not None and v not in chosen:
                continue
            if err is not None:
                # An older version nobody can read protects nothing (no reader can be using
                # it; the versions after it list every file still live). The newest one
                # decides what is live: damage there stops the caller.
                if unreadable is None or v == newest:
                    raise err
                unreadable.append(str(err))
                continue
            for seg in m.segments:
                out.update(seg.paths(self.topic, self.partition).values())
        return out

    def _referenced_by_checkpoints(self) -> set[str] | None:
        """:meth:`referenced_files` of every stored version from the head and the chain of
        full versions (see there); None when a record it needs is missing or damaged."""
        listing = self.versions()
        if not listing:
            return set()
        self._require_contiguous(listing)   # gc never decides on a cut chain
        oldest = listing[0]
        try:
            head = self._read_head()
        except (CorruptMetadataError, ObjectNotFoundError):
            return None
        if head is None or head.group_removed is None or head.group_start is None:
            return None
        out: set[str] = set()
        t, p = self.topic, self.partition

        def add(pairs) -> None:
            for base_offset, seg_id in pairs:
                out.update(layout.segment_path(t, p, base_offset, seg_id, ext)
                           for ext in layout.SEGMENT_EXTENSIONS)

        add((s.base_offset, s.segment_id) for s in head.manifest.segments)
        add(head.group_removed)
        f: int | None = head.group_start
        while f is not None and f >= oldest:
            try:
                doc = self._read_doc(f)
            except ObjectNotFoundError:
                break  # expired meanwhile: so are (or soon will be) the versions before it
            except (CorruptMetadataError, StorageError):
                return None
            group = _stored_group(doc) if not self._is_delta(doc) else None
            if group is None:
                return None
            try:
                m, _ = self._decode(f, doc, None)
            except CorruptMetadataError:
                return None
            add((s.base_offset, s.segment_id) for s in m.segments)
            prev, removed = group
            if oldest < f:  # some version of the group before f is still stored
                add(removed)
            f = prev
        return out
