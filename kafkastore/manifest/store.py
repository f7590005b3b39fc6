"""The manifest store: a partition's versions on storage (DESIGN.md section 3).

:class:`ManifestStore` reads the head without listing, commits version N+1 by put-if-absent
on the commit engine (:class:`~.commit_target._ManifestTarget`), stores versions full or as deltas
(:mod:`kafkastore.manifest.delta`), writes the checkpoint hint, and expires old versions a
whole group at a time (:mod:`.history`, which it inherits).
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
from dataclasses import replace
from typing import Callable, Iterable, Sequence

from .. import layout
from ..commit import Backoff, Budget, Clock, CommitEngine
from ..errors import (ConfigError, CorruptMetadataError, ManifestGapError, ObjectNotFoundError,
                      StaleUploadError, StorageError)
from ..storage import Storage
from . import delta as manifest_delta
from .commit_target import _ManifestTarget
from .heads import _COMMIT_LOCKS, _HEADS, _full_bytes, _Head
from .history import VersionHistory
from .model import MANIFEST_FORMAT, Manifest, SegmentEntry, _segment_id_set
from .updates import Build

# The logger keeps the name it had before the manifest became a package.
log = logging.getLogger("kafkastore.manifest")

_VERSION_RE = re.compile(r"^(\d{20})\.json$")

#: The back-off jitter of every store made without its own ``rng``: one generator per
#: process (seeding a new one reads the OS's entropy, and a store is made per commit and
#: per read on the broker's hot paths), seeded again in a forked child so that forked
#: writers do not back off in step.
_SHARED_RNG = random.Random()
os.register_at_fork(after_in_child=_SHARED_RNG.seed)


class ManifestStore(VersionHistory):
    """The manifest versions of one topic-partition under a root :class:`Storage`.

    Version N is stored full (the whole snapshot) when N is 1 or a multiple of
    :attr:`full_every`, when its base was read from a format-1 object, or when
    its delta would not be smaller; otherwise as a delta on version N-1 (see
    :mod:`kafkastore.manifest.delta`). After a full version lands, the hint
    ``_manifest/_last_checkpoint.json`` is overwritten with its number (a plain
    put, not a commit point: it may lag or be lost).

    :meth:`latest` never lists in the steady state: it starts from the last
    head this process saw (per store, and in a small process-wide cache) or
    from the full version the hint names, then reads N+1, N+2, ... until one is
    absent. A missing, damaged or expired hint costs one listing instead. A
    head is trusted only when the next version was absent *and* the head
    itself still existed afterwards (or was confirmed less than half of
    :attr:`min_keep_ms` ago): versions expire oldest first, so a version
    deleted by expiry can never be mistaken for one not written yet.
    """

    #: The GC grace floor: :mod:`kafkastore.maintenance.gc` refuses a shorter grace period, and
    #: :meth:`expire_versions` never keeps versions for less. Every commit refuses to list a
    #: newly written segment file older than half of it (:meth:`stale_uploads`), so a file a
    #: commit in flight will list is never old enough for GC. A writer whose commit attempt
    #: takes longer than half of it also checks that it did not re-create an expired version
    #: number (see :meth:`commit`).
    min_keep_ms: int = 60_000
    backoff_initial_s: float = 0.01
    backoff_max_s: float = 1.0
    #: How often a put with an unknown outcome (and the read-back) is retried.
    unknown_retries: int = 3
    #: Every version that is a multiple of this is stored full (Delta Lake's checkpoint
    #: interval); the versions between are deltas. Readers cope with any value.
    full_every: int = 16
    #: A delta at most this long is written without comparing it with the full form.
    small_delta_bytes: int = 4096

    def __init__(self, storage: Storage, topic: str, partition: int, *,
                 sleep: Callable[[float], None] | None = None, rng: random.Random | None = None,
                 clock: Clock | None = None):
        self.storage = storage
        self.topic = layout.validate_topic_name(topic)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ConfigError(f"partition must be an integer >= 0, got {partition!r}")
        self.partition = partition
        self.dir = layout.manifest_dir(topic, partition)
        self._rng = rng or _SHARED_RNG
        # The storage's clock unless told otherwise (one clock per process, injected at the top).
        base = clock or storage.clock
        self._clock = base if sleep is None else Clock(
            wall_ms=base.wall_ms, monotonic_s=base.monotonic_s, sleep=sleep)
        self._cache_key = (storage.url, repr(sorted(storage.storage_options.items())),
                           self.topic, self.partition)
        self._head: _Head | None = None
        self._fenced = False  # _topic.json known to be past format 1 (see _ManifestTarget.plan)

    @property
    def max_upload_age_ms(self) -> float:
        """Oldest a newly written segment file may be when a commit lists it: half the GC floor."""
        return self.min_keep_ms / 2

    def __repr__(self) -> str:
        return f"ManifestStore({self.storage.url!r}, {self.topic!r}, {self.partition})"

    def path(self, version: int) -> str:
        """Relative path of one version."""
        return layout.manifest_path(self.topic, self.partition, version)

    # -- reading ---------------------------------------------------------------
    def _listing(self) -> list[tuple[int, float]]:
        out = []
        for info in self.storage.list(self.dir):
            m = _VERSION_RE.match(info.path.rsplit("/", 1)[-1])
            if m and info.path.rsplit("/", 1)[0] == self.dir:
                out.append((int(m.group(1)), info.mtime))
        out.sort()
        return out

    def versions(self) -> list[int]:
        """Stored version numbers, ascending (one listing)."""
        return [v for v, _ in self._listing()]

    def _damaged(self, version: int, exc: BaseException | str) -> CorruptMetadataError:
        return CorruptMetadataError(
            f"manifest of {self.topic}/{self.partition} version {version} "
            f"({self.path(version)}): {exc}")

    def _gap(self, missing: int, later: int | None = None) -> ManifestGapError:
        return ManifestGapError(
            f"manifest of {self.topic}/{self.partition}: version {missing} is missing "
            f"({self.path(missing)}) while version {later or missing + 1} is stored: the chain "
            f"has a hole (a partial restore?); restore the version or the partition, nothing "
            f"reads or writes it until then")

    def gaps(self, versions: Sequence[int] | None = None) -> list[int]:
        """Versions missing between the oldest and the newest stored one (``versions``: a
        listing already taken; default: one listing). Versions expire oldest first and are
        written in order, so what is stored is always a contiguous run: a hole is damage (a
        partial restore, out-of-order replication). A listing is not a snapshot (a version
        written while it is taken may be missed), so each suspect is confirmed by an
        existence check: no extra request unless the listing shows a hole."""
        listed = sorted(self.versions() if versions is None else versions)
        present = set(listed)
        missing = [v for v in (range(listed[0], listed[-1] + 1) if listed else ())
                   if v not in present and not self.storage.exists(self.path(v))]
        if not missing:
            return []
        # A listing taken while expiry deletes (oldest first) can show an old version that is
        # gone by the time a newer one is listed: the stored run then starts above the
        # "hole". Only a version below the first missing one still stored after it was seen
        # missing proves a hole (expiry would have deleted it first).
        below = max(v for v in listed if v < missing[0])
        return missing if self.storage.exists(self.path(below)) else []

    def _hole_at(self, v: int) -> bool:
        """Whether version ``v`` is a hole in the chain: ``v + 1`` stored, then ``v`` not,
        then ``v - 1`` still stored, checked in that order. ``v + 1`` is written only after
        ``v`` exists, and versions expire oldest first, so ``v - 1`` still stored after ``v``
        was seen absent means ``v`` was never expired: it is lost. (``v`` absent with
        ``v - 1`` gone too is expiry under a slow writer, which the commit handles; a ``v``
        that appears meanwhile is a writer that was quicker than this check.) One
        existence check when ``v + 1`` is absent, the common case."""
        return (self.storage.exists(self.path(v + 1)) and not self.storage.exists(self.path(v))
                and v > 1 and self.storage.exists(self.path(v - 1)))

    def _require_contiguous(self, versions: Sequence[int]) -> None:
        """:class:`ManifestGapError` naming the first hole in ``versions``, if any."""
        holes = self.gaps(versions)
        if holes:
            later = min(v for v in versions if v > holes[0])
            raise self._gap(holes[0], later)

    def _read_doc(self, version: int) -> dict:
        """The parsed object of one stored version (:class:`ObjectNotFoundError` if absent)."""
        data = self.storage.get(self.path(version))
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._damaged(version, f"manifest is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise self._damaged(version, "manifest is not a JSON object")
        return doc

    def _decode(self, version: int, doc: dict, base: Manifest | None) -> tuple[Manifest, int]:
        """``(manifest, stored format)`` of the stored ``doc`` of ``version``; a delta needs
        ``base``, the manifest of ``version - 1``."""
        try:
            if doc.get("kind") == manifest_delta.KIND_DELTA:
                if base is None or base.version != version - 1:
                    raise CorruptMetadataError("a delta read without its base version")
                m = manifest_delta.apply_delta(base, doc)
            else:
                m = Manifest.from_dict(doc)
        except CorruptMetadataError as exc:
            raise self._damaged(version, exc) from None
        if (m.topic, m.partition, m.version) != (self.topic, self.partition, version):
            raise self._damaged(version, f"holds {m.topic}/{m.partition} version {m.version}")
        return m, doc.get("format", 1)

    @staticmethod
    def _is_delta(doc: dict) -> bool:
        return doc.get("kind") == manifest_delta.KIND_DELTA

    def _reconstruct(self, version: int) -> tuple[Manifest, int]:
        """Version ``version`` and its stored format: its full base version plus the deltas
        after it (at most :attr:`full_every` reads while writers keep the rule)."""
        h = self._rebuild(version)
        return h.manifest, h.fmt

    def _rebuild(self, version: int) -> "_Head":
        """Version ``version`` as an unconfirmed head (its group tracked): see :meth:`_reconstruct`."""
        head = self._head
        if head is not None and head.manifest.version == version:
            return _Head(head.manifest, head.fmt, group_start=head.group_start,
                         group_removed=head.group_removed)
        chain: list[tuple[int, dict]] = []
        v = version
        while True:
            if head is not None and head.manifest.version == v and chain:
                at = head
                break
            try:
                doc = self._read_doc(v)
            except ObjectNotFoundError:
                if not chain:
                    raise
                # The base of a stored delta is gone: its group is being expired (oldest first).
                raise ObjectNotFoundError(
                    f"manifest of {self.topic}/{self.partition} version {version} cannot be "
                    f"rebuilt: its base version {v} is no longer stored (expired)") from None
            if not self._is_delta(doc):
                m, fmt = self._decode(v, doc, None)
                at = _Head(m, fmt, group_start=v, group_removed=frozenset())
                break
            chain.append((v, doc))
            if v <= 1:
                raise self._damaged(v, "version 1 is a delta")
            v -= 1
        for v, doc in reversed(chain):
            at = at.followed_by(*self._decode(v, doc, at.manifest), full=False)
        return at

    def load(self, version: int) -> Manifest:
        """One version; :class:`ObjectNotFoundError` if it is not stored,
        :class:`CorruptMetadataError` (naming topic, partition and version) if it, or a
        version it is a delta on, is damaged."""
        return self._reconstruct(version)[0]

    def latest(self) -> Manifest | None:
        """The newest version, or None if the partition has no commit yet.

        Bounded however many versions exist: warm, one GET of the next version
        (absent) plus the versions that landed since; cold, the hint, its full
        version and the deltas after it. See the class docstring.
        """
        head = self._read_head()
        return head.manifest if head is not None else None

    def _remember(self, head: "_Head") -> None:
        self._head = head
        _HEADS.put(self._cache_key, head)

    def forget_cached(self) -> None:
        """Drop the remembered head (this store's and the process-wide one): the next
        :meth:`latest` reads from the hint or a listing, as a new process would."""
        self._head = None
        _HEADS.drop(self._cache_key)

    def _read_head(self) -> "_Head | None":
        known = self._head
        shared = _HEADS.get(self._cache_key)
        if shared is not None and (known is None or shared.manifest.version > known.manifest.version):
            known = shared
        if known is not None:
            head = self._advance(known)
            if head is not None:
                return head
        for _ in range(3):
            start = self._start_from_hint()
            if start is None:
                start = self._start_from_listing()
                if start is None:
                    return None  # no version stored: nothing committed yet
            head = self._advance(start)
            if head is not None:
                return head
        raise StorageError(f"manifest of {self.topic}/{self.partition} keeps vanishing while read")

    def _read_hint(self) -> int | None:
        path = layout.manifest_hint_path(self.topic, self.partition)
        try:
            data = self.storage.get(path)
        except ObjectNotFoundError:
            log.debug("%s/%s: no manifest hint (%s): listing", self.topic, self.partition, path)
            return None
        except StorageError as exc:  # the hint only saves a LIST: let the listing decide
            log.warning("%s/%s: cannot read the manifest hint (%s): listing", self.topic,
                        self.partition, exc)
            return None
        try:
            v = json.loads(data)["version"]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(v)
            return v
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            # Advisory only: the listing below is authoritative, so damage here costs a LIST.
            log.warning("%s/%s: damaged manifest hint %s: listing instead", self.topic,
                        self.partition, path)
            return None

    def _start_from_hint(self) -> "_Head | None":
        v = self._read_hint()
        if v is None:
            return None
        try:
            doc = self._read_doc(v)
        except ObjectNotFoundError:
            log.debug("%s/%s: the manifest hint names version %d, which is gone: listing",
                      self.topic, self.partition, v)
            return None
        if self._is_delta(doc):
            log.warning("%s/%s: the manifest hint names version %d, a delta: listing",
                        self.topic, self.partition, v)
            return None
        m, fmt = self._decode(v, doc, None)
        return _Head(m, fmt, group_start=v, group_removed=frozenset())

    def _start_from_listing(self) -> "_Head | None":
        missing_base: ObjectNotFoundError | None = None
        for _ in range(3):
            versions = self.versions()
            if not versions:
                return None
            # The listing is taken anyway: a hole in it is damage, named as such (existence
            # checks only for a version the listing lacks).
            self._require_contiguous(versions)
            try:
                return self._rebuild(versions[-1])
            except ObjectNotFoundError as exc:
                # Only if the listing went stale while we read: list again. But a head that is
                # still stored while its base is gone was not expired by the rules (a head's
                # group never goes): the chain was cut, e.g. by a gc of code that predates
                # delta versions. Never fall back to older state: say which version.
                missing_base = exc if self.storage.exists(self.path(versions[-1])) else None
        if missing_base is not None:
            raise self._damaged(versions[-1], "a delta whose base versions are no longer stored "
                                "(deleted by a gc that predates delta versions?)")
        raise StorageError(f"manifest of {self.topic}/{self.partition} keeps vanishing while read")

    def _trusted(self, head: "_Head") -> bool:
        # Confirmed less than half the expiry floor ago: nothing after it can have been both
        # written and expired since, so an absent successor was never written.
        return (head.confirmed is not None and head.clock is self._clock
                and self._clock.monotonic_s() - head.confirmed < self.min_keep_ms / 2000)

    def _advance(self, head: "_Head") -> "_Head | None":
        """``head`` moved on through the versions stored after it; None when ``head`` itself
        has expired meanwhile (then the caller starts again from the hint)."""
        trusted = self._trusted(head)
        galloped = False
        while True:
            v = head.manifest.version + 1
            asked = self._clock.monotonic_s()
            try:
                doc = self._read_doc(v)
            except ObjectNotFoundError:
                if not trusted:
                    if not self.storage.exists(self.path(head.manifest.version)):
                        return None  # expired under us: v may have been expired too
                    # v was never written or is lost; lost shows as a later version stored
                    # behind the hole (one more existence check, only when the head is
                    # not trusted, so a warm read stays one GET).
                    if self._hole_at(v):
                        raise self._gap(v)
                head = replace(head, confirmed=asked, clock=self._clock)
                self._remember(head)
                return head
            head = head.followed_by(*self._decode(v, doc, head.manifest),
                                    full=not self._is_delta(doc))
            if not self._is_delta(doc) and not galloped and v % self.full_every == 0:
                # We crossed a group boundary, so the start was stale by a group or more:
                # skip ahead over full versions (multiples of full_every) instead of walking.
                galloped = True
                far = self._gallop(v)
                if far > v:
                    try:
                        head = self._rebuild(far)
                    except ObjectNotFoundError:
                        return None

    def _gallop(self, v: int) -> int:
        """The highest stored multiple of :attr:`full_every` from ``v`` on (``v`` is stored),
        by existence checks on ``v + K``, ``v + 2K``, ``v + 4K``... then bisection."""
        k = self.full_every
        lo, step = v, k
        while self.storage.exists(self.path(lo + step)):
            lo, step = lo + step, step * 2
        hi = lo + step
        while hi - lo > k:
            mid = lo + ((hi - lo) // k // 2) * k
            if self.storage.exists(self.path(mid)):
                lo = mid
            else:
                hi = mid
        return lo

    def replay(self) -> Iterable[tuple[int, Manifest | None, BaseException | None]]:
        """Every stored version, oldest first, as ``(version, manifest, None)`` or
        ``(version, None, error)``: one read per version, deltas applied in order.

        A delta whose base is gone before the first full version is skipped (its group is
        being expired, oldest first) unless it is the newest (a head's group is never
        expired: its chain was cut); a version whose chain is broken by damage is an error.
        """
        state: Manifest | None = None
        seen_full = False
        versions = self.versions()
        for v in versions:
            try:
                doc = self._read_doc(v)
                if self._is_delta(doc) and state is not None and state.version < v - 1:
                    # A directory listing need not show files created while it is taken
                    # (readdir leaves that unspecified): read the versions it skipped.
                    for u in range(state.version + 1, v):
                        try:
                            state = self._decode(u, self._read_doc(u), state)[0]
                        except ObjectNotFoundError:
                            break
                        yield u, state, None
                if self._is_delta(doc):
                    if state is None or state.version != v - 1:
                        if not seen_full and v != versions[-1]:
                            continue  # expired meanwhile, or its base was
                        # The head's group is never expired: its chain was cut (a gc of code
                        # that predates delta versions). gc must not take this for "nothing
                        # is referenced" and delete the partition's files.
                        raise self._damaged(v, f"its base version {v - 1} is unreadable or missing")
                    state = self._decode(v, doc, state)[0]
                else:
                    state = self._decode(v, doc, None)[0]
                    seen_full = True
            except ObjectNotFoundError:
                # Listed, then gone: expired meanwhile (oldest first, so expiry overtook this
                # walk), and the deltas after it up to the next full version go the same way.
                state, seen_full = None, False
                continue
            except CorruptMetadataError as exc:
                state = None
                seen_full = True  # the deltas after a damaged version are reported, not skipped
                yield v, None, exc
                continue
            yield v, state, None

    def hint_problem(self) -> str | None:
        """What is wrong with the hint, if anything (for ``verify``): damaged, or naming a
        delta or a version past the stored ones. A missing hint (a root written before
        format 2) or one naming an expired version is not a problem: readers list instead."""
        path = layout.manifest_hint_path(self.topic, self.partition)
        try:
            data = self.storage.get(path)
        except ObjectNotFoundError:
            return None
        where = f"manifest hint of {self.topic}/{self.partition} ({path})"
        try:
            v = json.loads(data)["version"]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(v)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            return f"{where} is damaged: {bytes(data[:80])!r}"
        kind = self._kind(v)
        if kind == "delta":
            return f"{where} names version {v}, which is a delta, not a full version"
        if kind is None and self.storage.exists(self.path(v)):
            return f"{where} names version {v}, which is not a manifest version"
        if kind is None:
            stored = self.versions()
            if stored and v > stored[-1]:
                return f"{where} names version {v}, past the newest stored version {stored[-1]}"
        return None

    def history(self) -> list[Manifest]:
        """Every stored version, oldest first (for audits and tests; one read per version)."""
        out = []
        for _v, m, err in self.replay():
            if err is not None:
                raise err
            out.append(m)
        return out

    # -- committing ------------------------------------------------------------
    def commit(self, build: Build, *, operation: str = "", writer: str = "",
               now_ms: int | None = None, max_attempts: int | None = None,
               full: bool = False) -> Manifest | None:
        """Commit the updates ``build(base)`` returns, retrying on conflicts.

        ``build`` gets the latest manifest (None if none) and returns
        ``(updates, requirements)``, or None when there is nothing to do (then
        the latest manifest is returned unchanged). The commit runs on the one
        engine, :class:`kafkastore.commit.CommitEngine`: on a conflict ``build``
        is called again on the new latest version, after a back-off with full
        jitter (exponential up to :attr:`backoff_max_s`). A conflict means
        another writer's version landed, i.e. the log made progress, so by
        default there is no attempt cap; ``max_attempts`` sets one (then
        :class:`CommitGaveUpError`, a :class:`CommitConflict`, after that many attempts).
        Errors of :func:`apply` (fencing, failed requirements, invalid updates)
        propagate at once. When the put's outcome is unknown the version is
        read back: ours means success, someone else's means conflict, absent
        means the same bytes are put again; if that cannot settle it,
        :class:`CommitUnknownError`. Nothing is ever deleted here.

        Before the put, every segment the new version lists and the base does
        not must be younger than :attr:`max_upload_age_ms` (by
        :meth:`Storage.upload_time`), else :class:`StaleUploadError` and
        nothing is written: the caller uploads them again or gives up.

        ``operation``, ``writer`` and ``now_ms`` (default: the clock) go
        into the version's audit record. ``full`` stores the version full
        whatever the rule (see the class docstring) says.
        """
        engine = CommitEngine(backoff=Backoff(self.backoff_initial_s, self.backoff_max_s),
                              budget=Budget(max_attempts=max_attempts),
                              unknown_retries=self.unknown_retries, clock=self._clock, rng=self._rng)
        held = _COMMIT_LOCKS.acquire(self._cache_key)  # this process's committers take turns
        try:
            return engine.run(_ManifestTarget(self, build, operation, writer, now_ms, full))
        finally:
            if held is not None:
                held.release()

    def _encode(self, base: Manifest | None, base_fmt: int | None, new: Manifest,
                group: "tuple[int | None, frozenset] | None" = None) -> tuple[str, bytes]:
        """``(kind, bytes)`` to store ``new`` as: a delta on ``base`` unless the rule in the
        class docstring asks for a full version. A full version records ``group`` (see
        :func:`_full_bytes`) when it is known."""
        v = new.version
        if base is None or base_fmt != MANIFEST_FORMAT or v == 1 or v % self.full_every == 0:
            return "full", _full_bytes(new, group)
        delta = manifest_delta.encode(manifest_delta.delta_dict(base, new))
        if len(delta) > self.small_delta_bytes:
            full = _full_bytes(new, group)
            if len(full) <= len(delta):
                return "full", full
        return "delta", delta

    def _write_hint(self, version: int) -> None:
        """Point the hint at full ``version``; best effort (a lost hint costs readers a LIST)."""
        try:
            self.storage.put(layout.manifest_hint_path(self.topic, self.partition),
                             json.dumps({"version": version}).encode())
        except StorageError as exc:
            log.warning("%s/%s: could not write the manifest hint for version %d: %s",
                        self.topic, self.partition, version, exc)

    def stale_uploads(self, segments: Iterable[SegmentEntry]) -> list[SegmentEntry]:
        """Those of ``segments`` that a commit may not newly list: a file of theirs is missing
        or was written more than :attr:`max_upload_age_ms` ago (see :meth:`Storage.upload_time`).

        Writers call this to decide what to upload again; :meth:`commit` calls it on
        every segment it adds. An index whose recorded size is 0 may be absent.
        """
        now = self.storage.clock.wall_ms() / 1000
        limit_s = self.max_upload_age_ms / 1000
        out = []
        for seg in segments:
            for ext, path in seg.paths(self.topic, self.partition).items():
                optional = (ext == ".index" and not seg.index_size
                            or ext == ".timeindex" and not seg.timeindex_size)
                if optional:
                    continue   # never read, so gc deleting it loses nothing: no request
                try:
                    written = self.storage.upload_time(path)
                except ObjectNotFoundError:
                    out.append(seg)
                    break
                if now - written > limit_s:
                    out.append(seg)
                    break
        return out

    def _check_uploads(self, base: Manifest | None, new: Manifest) -> None:
        known = _segment_id_set(base) if base is not None else frozenset()
        start = 0  # an append keeps the base's entries in front: only look past them
        if base is not None and new.segments[:len(base.segments)] == base.segments:
            start = len(base.segments)
        added = [s for s in new.segments[start:] if s.segment_id not in known]
        stale = self.stale_uploads(added) if added else []
        if stale:
            raise StaleUploadError(
                f"refusing to commit {len(stale)} of {len(added)} new segment(s) of "
                f"{self.topic}/{self.partition} (first {stale[0].stem}): written more than "
                f"{self.max_upload_age_ms / 1000:g} s ago (half the GC grace floor) or missing, "
                f"so GC may delete them; upload them again", segment_ids=tuple(s.segment_id for s in stale))

    def _superseded(self, version: int) -> bool:
        """Whether our ``version`` re-created an expired slot behind newer versions.

        A newer version that is merely newer is fine (ours landed and others
        followed). A newer version written long before ours (at least half of
        ``min_keep_ms``: an expired slot was superseded at least ``min_keep_ms``
        earlier) means ours is invisible.
        """
        listing = dict(self._listing())
        ours = listing.get(version)
        if ours is None:
            return True
        slack = self.min_keep_ms / 2000
        return any(v > version and mtime < ours - slack for v, mtime in listing.items())
