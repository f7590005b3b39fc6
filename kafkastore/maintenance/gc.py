"""Garbage collection: delete segment files no manifest version lists (DESIGN.md sections 3 and 6).

Files become garbage in three ways: retention or delete-records drop segments
from the manifest, compaction replaces segments, and a writer uploads a
segment and then loses its commit race or crashes before committing. None of
them deletes files itself (after an ambiguous commit nobody could tell whether
the files are live). This module does, per partition, in this order:

1. expire old manifest versions (:meth:`ManifestStore.expire_versions` with
   ``keep_ms`` = the grace period): the latest version always stays, and so
   does every version superseded less than the grace period ago, because a
   reader that loaded it may still be reading its files. Versions go by whole
   groups (a full version and the deltas on it, oldest first), so every version
   left can be rebuilt; on a quiet partition whose head is a delta, expiry first
   commits a full copy of the head (no change to the state), so files dropped by
   the last commits still go within about two grace periods without more writes;
2. list the partition's objects;
3. collect the files referenced by **all** remaining versions;
4. delete the segment files (``.log``, ``.index``, ``.timeindex``) and stray
   temporary files (``.tmp-*`` of interrupted local writes) that none of them
   references and whose object time is more than the grace period before
   ``now_ms``. Anything else (manifest versions, unknown files, objects without
   a modification time) is never deleted here.

The grace period is ``grace_ms`` or the topic's ``file.delete.delay.ms``
(Kafka's name for the delay before a deleted segment's files go), at least
:attr:`ManifestStore.min_keep_ms` (an explicit shorter one is refused).

Why this is safe to run at any time, concurrently with itself, writers,
compaction and readers:

* A reader works from one manifest version. That version stays stored until
  it has been superseded for the grace period, and while it is stored its
  files are referenced, so they are not deleted. Assumption: a reader (or a
  Spark job) finishes with a version within the grace period after it was
  superseded.
* A writer uploads segment files first and commits the version listing them
  afterwards; until then the files are unreferenced but young. Assumption (the
  writer's guarantee, enforced for every writer by
  :meth:`ManifestStore.commit`, which refuses to list a new file older than
  half the floor): **a version that lists a segment file is committed
  within the grace period after the file was written, or never**; a writer
  whose commit would land later must re-upload under a new segment id
  instead. Then a file older than the grace period that no stored version
  lists will never be listed, and deleting it is safe.
* Versions are never un-expired and a new version only lists segments that
  the previous one listed or that were freshly uploaded, so computing the
  referenced set after expiring (and after listing the objects) cannot miss
  a live file. Two collectors may race to delete the same file; deletes are
  idempotent.
* The referenced set covers every stored version's segments without reading
  every delta: the head (with what its own group listed before it) and the
  chain of full versions back to the oldest stored one, each recording what
  its previous group listed and it no longer does
  (:meth:`ManifestStore.referenced_files`; where that record is missing, every
  stored version is replayed, one read each). A delta whose base was expired is
  itself being expired (groups go oldest first), and protects nothing.
* Any failure to list or read a manifest version aborts the partition before
  anything is deleted (a partial referenced set would be unsafe); a failed
  delete is recorded in :attr:`GcReport.errors` and retried by the next run.

``now_ms`` must be the real time: object times come from the store's clock, and
skew between the two eats into the grace period. The automatic gc (the housekeeper of
``serve`` and of long-running writers) and ``kafkastore gc`` therefore first measure
this process's clock against the store's (:func:`require_clock_agreement`) and refuse
to delete anything when they differ by more than :data:`MAX_CLOCK_SKEW_MS`. The margins
(docs/DESIGN.md section 9): a commit lists files at most half the floor old when each
attempt is sent (30 s, re-checked when more than 1 s passed since the last check), an
attempt takes at most ``MAX_COMMIT_PUT_S`` on S3 (17 s), the tolerated skew is 10 s and
S3's object times are whole seconds (1 s): 31 + 17 + 10 + 1 = 59 < 60, the floor. A
writer ages its uploads on its own clock alone (the time it started the write, read at
the check), so its skew does not enter; gc's does, hence the skew check on gc only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import layout
from ..errors import ClockSkewError, ConfigError, StorageError, UnknownTopicError
from ..manifest import ManifestStore
from ..storage import ObjectInfo, Storage, _mtime
from ..topics.admin import load_topic

#: The largest disagreement between a process's clock and the store's that gc tolerates.
MAX_CLOCK_SKEW_MS = 10_000
#: How long a skew measurement is trusted (monotonic seconds) before it is taken again.
_SKEW_CHECK_EVERY_S = 60.0
_skew_checked: dict[tuple[str, int], float] = {}


def require_clock_agreement(storage: Storage, *, max_skew_ms: int = MAX_CLOCK_SKEW_MS) -> int:
    """This process's clock minus the store's, in ms; :class:`ClockSkewError` when they
    differ by more than ``max_skew_ms``. A measurement that agreed is reused for a minute
    (per root), so the automatic gc pays one probe a minute, not one per run."""
    key = (storage.url, id(storage.clock))
    now = storage.clock.monotonic_s()
    last = _skew_checked.get(key)
    if last is not None and 0 <= now - last < _SKEW_CHECK_EVERY_S:
        return 0
    skew = storage.clock_skew_ms()
    if abs(skew) > max_skew_ms:
        _skew_checked.pop(key, None)
        raise ClockSkewError(
            f"this machine's clock is {skew / 1000:+.1f} s off the store's clock ({storage.url}); "
            f"gc deletes nothing while the skew exceeds {max_skew_ms / 1000:g} s (fix the clock)")
    _skew_checked[key] = now
    return skew


_TEMP_PREFIX = ".tmp-"  # as kafkastore.storage names the temporary files of local writes


@dataclass
class GcReport:
    """What one :func:`collect_garbage` run did (or, with ``dry_run``, would delete).

    ``deleted`` are the relative paths deleted (would be deleted), ``young``
    the unreferenced files kept because they are within the grace period,
    ``skipped`` the unreferenced objects never touched (unknown names or no
    modification time), ``errors`` the deletes that failed.
    """

    topic: str
    grace_ms: int
    dry_run: bool = False
    partitions: list[int] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    bytes_deleted: int = 0
    versions_expired: dict[int, list[int]] = field(default_factory=dict)
    #: Per partition, versions old enough to go that a capped expiry step left (a backlog).
    expiry_left: dict[int, int] = field(default_factory=dict)
    young: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def files_deleted(self) -> int:
        return len(self.deleted)

    def to_dict(self) -> dict:
        """JSON-ready form (paths in full)."""
        return {"topic": self.topic, "grace_ms": self.grace_ms, "dry_run": self.dry_run,
                "partitions": list(self.partitions), "deleted": list(self.deleted),
                "bytes_deleted": self.bytes_deleted,
                "versions_expired": {str(p): v for p, v in self.versions_expired.items()},
                "young": list(self.young), "skipped": list(self.skipped), "errors": list(self.errors)}

    def __str__(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        expired = sum(len(v) for v in self.versions_expired.values())
        lines = [f"gc {self.topic}: {verb} {len(self.deleted)} file(s), {self.bytes_deleted} bytes; "
                 f"expired {expired} manifest version(s); kept {len(self.young)} unlisted file(s) "
                 f"younger than {self.grace_ms} ms; skipped {len(self.skipped)} unknown object(s)"]
        lines += [f"  failed: {e}" for e in self.errors]
        return "\n".join(lines)


def collect_garbage(storage: Storage, topic: str, partition: int | None = None, *, now_ms: int,
                    grace_ms: int | None = None, dry_run: bool = False, files: bool = True,
                    max_versions: int | None = None, clock_trusted: bool = True) -> GcReport:
    """Expire old manifest versions and delete unreferenced files older than the grace period.

    ``partition`` None means every partition of the topic. ``grace_ms``
    defaults to the topic's ``file.delete.delay.ms`` (raised to
    :attr:`ManifestStore.min_keep_ms`, 60 s, the floor version expiry uses
    too); an explicit ``grace_ms`` below that floor is a :class:`ConfigError`. With
    ``dry_run`` nothing is expired or deleted and the files that would go are
    reported (computed against every stored version, so possibly fewer than a
    real run deletes). See the module docstring for the safety argument.

    The background housekeeper runs it in bounded steps: ``max_versions`` caps one
    partition's expiry (:meth:`ManifestStore.expire_step`; what it left is in
    :attr:`GcReport.expiry_left`), ``files=False`` expires versions only, and so does a
    step that left a backlog (the files go in the step that finishes it, so a step's work
    never grows with the backlog). ``clock_trusted=False`` (``now_ms`` from a clock that
    disagrees with the store's) expires versions by the store's own object times only and
    deletes no file.
    """
    if not isinstance(now_ms, int) or isinstance(now_ms, bool):
        raise ConfigError(f"now_ms must be epoch milliseconds (int), got {now_ms!r}")
    if grace_ms is not None and (not isinstance(grace_ms, int) or grace_ms < 0):
        raise ConfigError(f"grace_ms must be an integer >= 0, got {grace_ms!r}")
    meta = None
    if grace_ms is None or partition is None:
        meta = load_topic(storage, topic)
    floor = int(ManifestStore.min_keep_ms)
    if grace_ms is not None and grace_ms < floor:
        # Commits list files up to half the floor old: a shorter grace would delete the files
        # of commits in flight. Refused rather than silently raised, so the user knows.
        raise ConfigError(f"grace period {grace_ms} ms is below the safe floor of {floor} ms "
                          f"(commits list files up to {floor // 2} ms old)")
    # A topic's file.delete.delay.ms below the floor (0 is a valid Kafka config) is raised to it.
    grace = grace_ms if grace_ms is not None else max(meta.config.file_delete_delay_ms, floor)
    if partition is None:
        partitions = list(range(meta.partitions))
    else:
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ConfigError(f"partition must be an integer >= 0, got {partition!r}")
        if meta is not None and partition >= meta.partitions:
            raise UnknownTopicError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}")
        partitions = [partition]
    report = GcReport(topic=topic, grace_ms=grace, dry_run=dry_run)
    for p in partitions:
        _collect_partition(storage, topic, p, now_ms, grace, dry_run, report, files=files,
                           max_versions=max_versions, clock_trusted=clock_trusted)
    return report


def _collect_partition(storage: Storage, topic: str, partition: int, now_ms: int, grace: int,
                       dry_run: bool, report: GcReport, *, files: bool = True,
                       max_versions: int | None = None, clock_trusted: bool = True) -> None:
    store = ManifestStore(storage, topic, partition)
    report.partitions.append(partition)
    if not dry_run:
        expired, left = store.expire_step(now_ms, keep_ms=grace, keep_last=1,
                                          max_versions=max_versions, clock_trusted=clock_trusted)
        report.versions_expired[partition] = expired
        report.expiry_left[partition] = left
        if left or not files or not clock_trusted:
            return   # the files go in the step that finishes the backlog, on a trusted clock
    candidates = _candidates(storage, topic, partition, report)
    if not candidates:
        return
    # After expiry and after the listing: every version that may still be read is among these.
    unreadable: list[str] = []
    referenced = store.referenced_files(unreadable=unreadable)
    report.errors.extend(f"skipped unreadable {e}" for e in unreadable)
    doomed: list[ObjectInfo] = []
    for info in candidates:
        if info.path in referenced:
            continue
        if not info.mtime:
            report.skipped.append(info.path)  # no object time: cannot tell its age, keep it
        elif now_ms - int(info.mtime * 1000) <= grace:
            report.young.append(info.path)
        else:
            doomed.append(info)
    for info in doomed:
        if not dry_run:
            try:
                storage.delete([info.path])
            except StorageError as exc:
                report.errors.append(f"{info.path}: {exc}")
                continue
        report.deleted.append(info.path)
        report.bytes_deleted += info.size


def _candidates(storage: Storage, topic: str, partition: int, report: GcReport) -> list[ObjectInfo]:
    """The partition's segment files and temporary files; unknown objects go to ``report.skipped``."""
    pdir = layout.partition_dir(topic, partition)
    mdir = layout.manifest_dir(topic, partition)
    out = []
    for info in storage.list(pdir):
        parent = info.path.rsplit("/", 1)[0]
        if parent == pdir and layout.parse_segment_name(info.path) is not None:
            out.append(info)
        elif parent != mdir:
            report.skipped.append(info.path)
    for d in (pdir, mdir):
        out.extend(_temp_files(storage, d))
    return out


def _temp_files(storage: Storage, rel_dir: str) -> list[ObjectInfo]:
    """``.tmp-*`` files directly in ``rel_dir`` (only local writes leave them; Storage.list hides them)."""
    if storage.protocol != "file":
        return []
    try:
        entries = storage.fs.ls(storage.full_path(rel_dir), detail=True)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {rel_dir!r} under {storage.url}: {exc}") from exc
    out = []
    for e in entries:
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if e.get("type") != "directory" and name.startswith(_TEMP_PREFIX):
            out.append(ObjectInfo(f"{rel_dir}/{name}", int(e.get("size") or 0), _mtime(e)))
    return out
