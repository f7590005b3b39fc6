"""Warehouse tables: Parquet files plus a commit log, exactly-once per offset.

A table is the directory ``<warehouse>/<table>/``::

    _commits/<20-digit version>.json              one commit, created put-if-absent
    _commits/<20-digit version>.checkpoint.json   the whole state after that version
    data/topic=<topic>/date=<yyyy-mm-dd>/part-<partition>-<20-digit min offset>-<run>-<uuid>.parquet
    dead_letters/topic=<topic>/date=<yyyy-mm-dd>/part-...parquet

Layout: Hive-style ``topic=`` / ``date=`` directories (``date`` is the UTC day of
the Kafka record timestamp) so that queries by topic and day touch few files,
both for readers that prune from the commit metadata (every file entry carries
topic, partition, date, offset and timestamp bounds) and for people browsing the
bucket. The files themselves keep every column, ``topic`` included, and no
``date`` column: they are self-describing when read alone, and readers list
files from the commit log, never by directory discovery. The file name starts
with partition and first offset so a directory listing sorts in log order; the
run id and a random suffix keep retried tasks and racing jobs apart.

Commits are data (:class:`Commit`), applied to a :class:`TableState` by the pure
function :func:`apply_commit`, which refuses overlaps and gaps. The state after
version N is the replay of commits 1..N (from the newest checkpoint).
Files no commit lists are invisible; :func:`vacuum` deletes them after a grace
period, as it does files that commits removed.

Rewinds: a ``reprocess`` commit for (topic, partition) starting at ``from``
must remove *every* live file of that partition holding an offset >= ``from``
and no file holding an offset below it. A file straddling the requested offset
is therefore rewritten whole: :func:`plan_rewind` lowers the rewind point to the
first offset of the first straddling file (``effective_from``), and the job
writes the rows ``[effective_from, requested)`` again (copied from the old files
with :func:`copy_rows_below`, or re-read from the log) together with the
reprocessed rows. The commit records both offsets; every offset stays covered
exactly once.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from kafkastore.errors import (CommitConflict, CommitUnknownError, ConfigError,
                               ObjectNotFoundError, StorageError, WarehouseError)
from kafkastore.storage import Storage

FORMAT = 1
COMMITS_DIR = "_commits"
DATA_DIR = "data"
DEAD_LETTER_DIR = "dead_letters"
KINDS = {"data": DATA_DIR, "dead_letter": DEAD_LETTER_DIR}
OPERATIONS = ("load", "reprocess", "validate", "vacuum")
VALIDATION_STATUSES = ("passed", "failed")
DEFAULT_CHECKPOINT_INTERVAL = 20
NULL_DATE = "__HIVE_DEFAULT_PARTITION__"   # Hive's name for a null partition value

_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.json$")
_TABLE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
_RUN_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")

TopicPartition = tuple[str, int]


# ---------------------------------------------------------------------------
# commit data


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table, as a commit lists it.

    ``path`` is relative to the table directory; offsets are inclusive bounds of
    the Kafka offsets the file holds for its single (topic, partition);
    timestamps are epoch ms. ``version`` is filled in by the state (the commit
    that added the file) and is not part of the commit's JSON.
    """

    path: str
    topic: str
    partition: int
    min_offset: int
    max_offset: int
    rows: int
    bytes: int
    kind: str = "data"
    date: str | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    version: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The commit-file form (no ``version``)."""
        d = dataclasses.asdict(self)
        d.pop("version")
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DataFile":
        """Build from a commit entry, a writer descriptor or a Spark ``Row.asDict()``."""
        try:
            return cls(
                path=str(d["path"]), topic=str(d["topic"]), partition=int(d["partition"]),
                min_offset=int(d["min_offset"]), max_offset=int(d["max_offset"]),
                rows=int(d["rows"]), bytes=int(d["bytes"]), kind=str(d.get("kind") or "data"),
                date=d.get("date"),
                min_timestamp=None if d.get("min_timestamp") is None else int(d["min_timestamp"]),
                max_timestamp=None if d.get("max_timestamp") is None else int(d["max_timestamp"]),
                version=None if d.get("version") is None else int(d["version"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WarehouseError(f"bad file entry {dict(d)!r}: {exc}") from None

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class OffsetRange:
    """Half-open offset range ``[from_offset, until)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "from": self.from_offset, "until": self.until}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OffsetRange":
        try:
            return cls(str(d["topic"]), int(d["partition"]), int(d["from"]), int(d["until"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise WarehouseError(f"bad offset range {dict(d)!r}: {exc}") from None

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def _ranges(ranges) -> tuple[OffsetRange, ...]:
    """Accept OffsetRanges or a mapping {(topic, partition): (from, until)}."""
    if isinstance(ranges, Mapping):
        return tuple(OffsetRange(t, int(p), int(a), int(b))
                     for (t, p), (a, b) in sorted(ranges.items()))
    return tuple(ranges)


def _files(files) -> tuple[DataFile, ...]:
    return tuple(f if isinstance(f, DataFile) else DataFile.from_json(f) for f in files)


@dataclass(frozen=True)
class Commit:
    """One commit, as stored in ``_commits/<version>.json``.

    * ``load``: ``ranges`` (one per topic-partition, each starting exactly at the
      committed next offset) and the files it adds.
    * ``reprocess``: rewinds each range's partition to ``from``; removes every
      live file of it at or after ``from`` and adds the rewritten ones.
    * ``validate``: sets the validation status (``passed`` / ``failed``) of the
      commit numbered ``validates``.
    * ``vacuum``: records the files :func:`vacuum` deleted (``deleted``).

    ``validated`` on a load/reprocess is its status at commit time (``None`` =
    not checked yet); later ``validate`` commits override it. ``commit_id`` tells
    this attempt apart from an earlier run with the same ``run_id``.
    """

    run_id: str
    operation: str
    now_ms: int
    add: tuple[DataFile, ...] = ()
    remove: tuple[str, ...] = ()
    ranges: tuple[OffsetRange, ...] = ()
    user: str | None = None
    validated: str | None = None
    validates: int | None = None
    deleted: tuple[str, ...] = ()
    allow_gap: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    commit_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def load(cls, run_id: str, files, ranges, *, now_ms: int, user: str | None = None,
             validated: str | None = None, allow_gap: bool = False,
             info: dict | None = None) -> "Commit":
        """A load: ``files`` (DataFiles or descriptors) covering ``ranges``
        (OffsetRanges or ``{(topic, partition): (from, until)}``)."""
        return cls(run_id=run_id, operation="load", now_ms=int(now_ms), add=_files(files),
                   ranges=_ranges(ranges), user=user, validated=validated,
                   allow_gap=allow_gap, info=dict(info or {}))

    @classmethod
    def reprocess(cls, run_id: str, files, ranges, remove, *, now_ms: int,
                  user: str | None = None, validated: str | None = None,
                  info: dict | None = None) -> "Commit":
        """A rewind: ``ranges`` start at the effective rewind offsets, ``remove``
        lists the replaced files' paths (see :func:`plan_rewind`)."""
        return cls(run_id=run_id, operation="reprocess", now_ms=int(now_ms), add=_files(files),
                   remove=tuple(r.path if isinstance(r, DataFile) else str(r) for r in remove),
                   ranges=_ranges(ranges), user=user, validated=validated, info=dict(info or {}))

    @classmethod
    def validate(cls, run_id: str, version: int, status: str, *, now_ms: int,
                 user: str | None = None, info: dict | None = None) -> "Commit":
        """A quality verdict ``status`` on commit ``version``."""
        return cls(run_id=run_id, operation="validate", now_ms=int(now_ms), validates=int(version),
                   validated=status, user=user, info=dict(info or {}))

    def to_json(self, version: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": FORMAT, "version": version, "commit_id": self.commit_id,
            "run_id": self.run_id, "operation": self.operation, "now_ms": self.now_ms,
            "user": self.user, "ranges": [r.to_json() for r in self.ranges],
            "add": [f.to_json() for f in self.add], "remove": list(self.remove),
            "validated": self.validated, "allow_gap": self.allow_gap, "info": self.info,
        }
        if self.operation == "validate":
            d["validates"] = self.validates
        if self.operation == "vacuum":
            d["deleted"] = list(self.deleted)
        return d

    def encode(self, version: int) -> bytes:
        return json.dumps(self.to_json(version), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Commit":
        try:
            return cls(
                run_id=str(d["run_id"]), operation=str(d["operation"]), now_ms=int(d["now_ms"]),
                add=_files(d.get("add") or ()), remove=tuple(str(p) for p in d.get("remove") or ()),
                ranges=tuple(OffsetRange.from_json(r) for r in d.get("ranges") or ()),
                user=d.get("user"), validated=d.get("validated"),
                validates=None if d.get("validates") is None else int(d["validates"]),
                deleted=tuple(str(p) for p in d.get("deleted") or ()),
                allow_gap=bool(d.get("allow_gap", False)), info=dict(d.get("info") or {}),
                commit_id=str(d["commit_id"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WarehouseError(f"bad commit record: {exc}") from None


# ---------------------------------------------------------------------------
# table state and the pure apply


@dataclass(frozen=True)
class RunRecord:
    """Where a run id was committed."""

    version: int
    commit_id: str
    operation: str


@dataclass
class TableState:
    """The table after ``version`` commits.

    ``offsets[(topic, partition)] = (start, next)``: the committed half-open
    range; ``files``: live files by path; ``removed[path] = (version, now_ms)``
    of the commit that removed a file not yet vacuumed; ``validation[version]``:
    the current status of each load/reprocess commit (``None`` = unchecked);
    ``gaps``: audited gaps accepted with ``allow_gap``.
    """

    version: int = 0
    files: dict[str, DataFile] = field(default_factory=dict)
    offsets: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    removed: dict[str, tuple[int, int]] = field(default_factory=dict)
    validation: dict[int, str | None] = field(default_factory=dict)
    gaps: list[dict[str, Any]] = field(default_factory=list)

    def copy(self) -> "TableState":
        return TableState(self.version, dict(self.files), dict(self.offsets), dict(self.runs),
                          dict(self.removed), dict(self.validation), list(self.gaps))

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): next offset to load}``."""
        return {tp: nxt for tp, (_start, nxt) in self.offsets.items()}

    def live_files(self, kind: str | None = "data") -> list[DataFile]:
        """Live files of ``kind`` (``None`` = all kinds), sorted by partition and offset."""
        out = [f for f in self.files.values() if kind is None or f.kind == kind]
        out.sort(key=lambda f: (f.topic, f.partition, f.min_offset, f.kind, f.path))
        return out

    def files_of(self, topic: str, partition: int) -> list[DataFile]:
        return [f for f in self.live_files(None) if f.topic == topic and f.partition == partition]

    # -- checkpoint form -----------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": self.version,
            "files": [dict(f.to_json(), version=f.version) for f in self.files.values()],
            "offsets": [{"topic": t, "partition": p, "start": a, "next": b}
                        for (t, p), (a, b) in sorted(self.offsets.items())],
            "runs": {r: [rec.version, rec.commit_id, rec.operation] for r, rec in self.runs.items()},
            "removed": {p: list(v) for p, v in self.removed.items()},
            "validation": {str(v): s for v, s in self.validation.items()},
            "gaps": self.gaps,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TableState":
        try:
            files = [DataFile.from_json(f) for f in d["files"]]
            return cls(
                version=int(d["version"]),
                files={f.path: f for f in files},
                offsets={(str(o["topic"]), int(o["partition"])): (int(o["start"]), int(o["next"]))
                         for o in d["offsets"]},
                runs={str(r): RunRecord(int(v[0]), str(v[1]), str(v[2]))
                      for r, v in d["runs"].items()},
                removed={str(p): (int(v[0]), int(v[1])) for p, v in d["removed"].items()},
                validation={int(v): s for v, s in d["validation"].items()},
                gaps=list(d.get("gaps") or []),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise WarehouseError(f"bad checkpoint: {exc}") from None


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}/{tp[1]}"


def _check_path(path: str) -> None:
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or ".." in parts or "" in parts
            or parts[0] == COMMITS_DIR):
        raise WarehouseError(f"file path {path!r} must be a plain path relative to the table "
                             f"directory, outside {COMMITS_DIR}/")


def _check_common(state: TableState, c: Commit) -> dict[TopicPartition, OffsetRange]:
    if c.operation not in OPERATIONS:
        raise WarehouseError(f"unknown operation {c.operation!r}; expected one of {OPERATIONS}")
    if not isinstance(c.run_id, str) or not c.run_id:
        raise WarehouseError("a commit needs a non-empty run id")
    if c.validated not in (None, *VALIDATION_STATUSES):
        raise WarehouseError(f"validated must be null or one of {VALIDATION_STATUSES}, "
                             f"got {c.validated!r}")
    ranges: dict[TopicPartition, OffsetRange] = {}
    for r in c.ranges:
        if r.topic_partition in ranges:
            raise WarehouseError(f"commit {c.run_id!r} lists {_tp(r.topic_partition)} twice")
        if r.from_offset < 0 or r.until < r.from_offset:
            raise WarehouseError(f"bad range [{r.from_offset}, {r.until}) for "
                                 f"{_tp(r.topic_partition)}: expected 0 <= from <= until")
        ranges[r.topic_partition] = r
    seen: set[str] = set()
    for f in c.add:
        _check_path(f.path)
        if f.path in seen:
            raise WarehouseError(f"commit {c.run_id!r} adds {f.path} twice")
        seen.add(f.path)
        if f.path in state.files:
            raise WarehouseError(f"{f.path} is already live in the table")
        if f.path in state.removed:
            raise WarehouseError(f"{f.path} was removed at version {state.removed[f.path][0]} "
                                 f"and awaits vacuum; write a new file name")
        if f.kind not in KINDS:
            raise WarehouseError(f"{f.path}: kind must be one of {sorted(KINDS)}, got {f.kind!r}")
        if f.rows < 1 or f.bytes < 0 or f.min_offset < 0 or f.max_offset < f.min_offset:
            raise WarehouseError(f"{f.path}: bad counts or offsets (rows {f.rows}, bytes {f.bytes}, "
                                 f"offsets {f.min_offset}..{f.max_offset})")
        r = ranges.get(f.topic_partition)
        if r is None:
            raise WarehouseError(f"{f.path} holds {_tp(f.topic_partition)}, for which the commit "
                                 f"declares no offset range")
        if f.min_offset < r.from_offset or f.max_offset >= r.until:
            raise WarehouseError(
                f"{f.path} holds offsets {f.min_offset}..{f.max_offset} of "
                f"{_tp(f.topic_partition)}, outside the commit's range [{r.from_offset}, {r.until})")
    removing: set[str] = set()
    for p in c.remove:
        if p in removing:
            raise WarehouseError(f"commit {c.run_id!r} removes {p} twice")
        removing.add(p)
        if p not in state.files:
            raise WarehouseError(f"commit {c.run_id!r} removes {p}, which is not a live file")
    return ranges


def _check_load(state: TableState, c: Commit, ranges: dict[TopicPartition, OffsetRange]) -> None:
    if c.remove:
        raise WarehouseError("a load cannot remove files; use a reprocess commit")
    for tp, r in ranges.items():
        if tp not in state.offsets:
            continue
        start, nxt = state.offsets[tp]
        if r.from_offset < nxt:
            raise WarehouseError(
                f"{_tp(tp)}: range [{r.from_offset}, {r.until}) overlaps the committed range "
                f"[{start}, {nxt}); the next load must start at offset {nxt}")
        if r.from_offset > nxt and not c.allow_gap:
            raise WarehouseError(
                f"{_tp(tp)}: range [{r.from_offset}, {r.until}) leaves a gap [{nxt}, "
                f"{r.from_offset}) after the committed range [{start}, {nxt})")


def _check_reprocess(state: TableState, c: Commit,
                     ranges: dict[TopicPartition, OffsetRange]) -> None:
    if not ranges:
        raise WarehouseError("a reprocess commit needs at least one offset range")
    removing = set(c.remove)
    for tp, r in ranges.items():
        if tp not in state.offsets:
            raise WarehouseError(f"{_tp(tp)}: nothing committed yet, so nothing to reprocess; "
                                 f"use a load")
        start, nxt = state.offsets[tp]
        if r.from_offset > nxt and not c.allow_gap:
            raise WarehouseError(
                f"{_tp(tp)}: rewind to {r.from_offset} leaves a gap [{nxt}, {r.from_offset}) "
                f"after the committed range [{start}, {nxt})")
        for f in state.files.values():
            if f.topic_partition != tp:
                continue
            if f.max_offset >= r.from_offset and f.path not in removing:
                raise WarehouseError(
                    f"{_tp(tp)}: rewind to {r.from_offset} must remove {f.path} (offsets "
                    f"{f.min_offset}..{f.max_offset}); rewrite whole affected files")
    for p in c.remove:
        f = state.files[p]
        r = ranges.get(f.topic_partition)
        if r is None:
            raise WarehouseError(f"reprocess removes {p} of {_tp(f.topic_partition)}, which it "
                                 f"does not rewind")
        if f.min_offset < r.from_offset:
            raise WarehouseError(
                f"{_tp(f.topic_partition)}: {p} holds offsets {f.min_offset}..{f.max_offset}, "
                f"straddling the rewind point {r.from_offset}; rewind from {f.min_offset} "
                f"(see plan_rewind) and rewrite the whole file")


def _check_validate(state: TableState, c: Commit) -> None:
    if c.add or c.remove or c.ranges:
        raise WarehouseError("a validate commit carries no files or ranges")
    if c.validated not in VALIDATION_STATUSES:
        raise WarehouseError(f"a validate commit needs status one of {VALIDATION_STATUSES}")
    if c.validates not in state.validation:
        raise WarehouseError(f"version {c.validates} is not a load or reprocess commit of this "
                             f"table (latest version {state.version})")


def _check_vacuum(state: TableState, c: Commit) -> None:
    if c.add or c.remove or c.ranges:
        raise WarehouseError("a vacuum commit carries no added/removed files or ranges")
    for p in c.deleted:
        if p in state.files:
            raise WarehouseError(f"vacuum deleted {p}, which is live")


def apply_commit(state: TableState, commit: Commit, version: int | None = None) -> TableState:
    """Apply ``commit`` to ``state`` and return the new state (``state`` is untouched).

    Raises :class:`WarehouseError` when the commit is refused (overlap, gap,
    unknown or duplicate file, a rewind that leaves rows behind, ...). A commit
    whose run id is already committed is a no-op: ``state`` itself is returned.
    ``version`` defaults to ``state.version + 1``.
    """
    if commit.run_id in state.runs:
        return state
    new = state.copy()
    _apply_into(new, commit, state.version + 1 if version is None else version)
    return new


def _apply_into(state: TableState, c: Commit, version: int) -> None:
    """Validate ``c`` against ``state``, then mutate ``state``. Validation comes first,
    so a refused commit leaves ``state`` as it was."""
    if version != state.version + 1:
        raise WarehouseError(f"commit version {version} does not follow version {state.version}")
    ranges = _check_common(state, c)
    if c.operation == "load":
        _check_load(state, c, ranges)
    elif c.operation == "reprocess":
        _check_reprocess(state, c, ranges)
    elif c.operation == "validate":
        _check_validate(state, c)
    else:
        _check_vacuum(state, c)

    for p in c.remove:
        del state.files[p]
        state.removed[p] = (version, c.now_ms)
    for f in c.add:
        state.files[f.path] = dataclasses.replace(f, version=version)
    for tp, r in ranges.items():
        if tp in state.offsets:
            start, nxt = state.offsets[tp]
            if r.from_offset > nxt:
                state.gaps.append({"topic": tp[0], "partition": tp[1], "from": nxt,
                                   "until": r.from_offset, "version": version})
            state.offsets[tp] = (min(start, r.from_offset), r.until)
        else:
            state.offsets[tp] = (r.from_offset, r.until)
    if c.operation in ("load", "reprocess"):
        state.validation[version] = c.validated
    elif c.operation == "validate":
        state.validation[c.validates] = c.validated
    for p in c.deleted:
        state.removed.pop(p, None)
    state.runs[c.run_id] = RunRecord(version, c.commit_id, c.operation)
    state.version = version


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind of one partition to ``requested_from`` must replace.

    ``effective_from`` <= ``requested_from`` is where the reprocess commit's range
    starts (the first offset of the first straddling file, if any); ``remove``
    are the files to remove (all live files with rows at or after it);
    ``straddling`` are the ones among them holding rows below ``requested_from``,
    whose rows ``[effective_from, requested_from)`` the job writes again.
    """

    topic: str
    partition: int
    requested_from: int
    effective_from: int
    remove: tuple[DataFile, ...]
    straddling: tuple[DataFile, ...]


def plan_rewind(state: TableState, topic: str, partition: int, from_offset: int) -> RewindPlan:
    """Plan a reprocess of (topic, partition) from ``from_offset`` (see :class:`RewindPlan`)."""
    tp = (topic, int(partition))
    if tp not in state.offsets:
        raise WarehouseError(f"{_tp(tp)}: nothing committed yet, so nothing to reprocess")
    start, nxt = state.offsets[tp]
    if from_offset > nxt:
        raise WarehouseError(f"{_tp(tp)}: cannot rewind to {from_offset}, past the committed "
                             f"range [{start}, {nxt})")
    files = state.files_of(topic, int(partition))
    straddling = [f for f in files if f.min_offset < from_offset <= f.max_offset]
    effective = min([from_offset] + [f.min_offset for f in straddling])
    # Lowering the rewind point can catch more straddlers (a file holding rows on
    # both sides of the new point); repeat until stable.
    while True:
        more = [f for f in files if f.min_offset < effective <= f.max_offset]
        if not more:
            break
        effective = min(f.min_offset for f in more)
    remove = tuple(f for f in files if f.max_offset >= effective)
    straddling = tuple(f for f in remove if f.min_offset < from_offset)
    return RewindPlan(topic, int(partition), int(from_offset), effective, remove, straddling)


# ---------------------------------------------------------------------------
# the table on storage


def commit_path(version: int) -> str:
    return f"{COMMITS_DIR}/{version:020d}.json"


def checkpoint_path(version: int) -> str:
    return f"{COMMITS_DIR}/{version:020d}.checkpoint.json"


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is a valid table name, else raise ConfigError."""
    if not isinstance(name, str) or not _TABLE_RE.match(name):
        raise ConfigError(f"invalid table name {name!r}: expected 1-249 characters of "
                          f"[A-Za-z0-9._-], starting with a letter or digit")
    return name


@dataclass(frozen=True)
class CommitResult:
    """Outcome of :meth:`Table.commit`.

    ``committed``: this call's commit is in the log at ``version``.
    ``noop``: the run id was already committed (at ``version``) by an earlier
    attempt with another commit id, so nothing was written.
    """

    version: int
    committed: bool
    noop: bool
    state: TableState
    attempts: int = 1


class Table:
    """A warehouse table: ``Table(storage_or_url, name)``.

    ``storage_or_url`` is the warehouse root (a :class:`Storage` or a URL;
    ``storage_options`` go to fsspec for a URL).
    """

    def __init__(self, storage_or_url: Storage | str, name: str, *,
                 storage_options: dict | None = None,
                 checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL):
        self.name = validate_table_name(name)
        root = (storage_or_url if isinstance(storage_or_url, Storage)
                else Storage(storage_or_url, storage_options))
        self.storage = root.child(name)
        self.checkpoint_interval = max(1, int(checkpoint_interval))
        self._cache: TableState | None = None

    def __repr__(self) -> str:
        return f"Table({self.url!r})"

    @property
    def url(self) -> str:
        """URL of the table directory (what executor-side writers take)."""
        return self.storage.url

    @property
    def storage_options(self) -> dict:
        return self.storage.storage_options

    # -- reading -------------------------------------------------------------
    def _list_versions(self) -> tuple[list[int], list[int]]:
        commits, checkpoints = [], []
        for obj in self.storage.list(COMMITS_DIR):
            name = obj.path.rsplit("/", 1)[-1]
            m = _COMMIT_RE.match(name)
            if m:
                commits.append(int(m.group(1)))
                continue
            m = _CHECKPOINT_RE.match(name)
            if m:
                checkpoints.append(int(m.group(1)))
        return sorted(commits), sorted(checkpoints)

    def read_commit(self, version: int) -> Commit:
        """The commit stored as ``version``."""
        raw = self.storage.get(commit_path(version))
        try:
            d = json.loads(raw)
        except ValueError as exc:
            raise WarehouseError(f"{self.url}: commit {version} is not JSON: {exc}") from None
        if d.get("version") not in (None, version):
            raise WarehouseError(f"{self.url}: commit file {version} says version {d.get('version')}")
        return Commit.from_json(d)

    def _load_checkpoint(self, version: int) -> TableState | None:
        try:
            state = TableState.from_json(json.loads(self.storage.get(checkpoint_path(version))))
        except (StorageError, ValueError, WarehouseError):
            return None   # a damaged or vanished checkpoint only costs a longer replay
        return state if state.version == version else None

    def state(self) -> TableState:
        """The current state: replay of the commit log from the newest usable checkpoint."""
        commits, checkpoints = self._list_versions()
        latest = commits[-1] if commits else 0
        base = self._cache if self._cache is not None and self._cache.version <= latest else None
        for cp in reversed(checkpoints):
            if cp > latest or (base is not None and cp <= base.version):
                continue
            loaded = self._load_checkpoint(cp)
            if loaded is not None:
                base = loaded
                break
        state = base.copy() if base is not None else TableState()
        known = set(commits)
        for v in range(state.version + 1, latest + 1):
            if v not in known:
                raise WarehouseError(f"{self.url}: the commit log has no version {v} "
                                     f"(latest {latest}); the table is damaged")
            c = self.read_commit(v)
            if c.run_id in state.runs:
                raise WarehouseError(f"{self.url}: commit {v} repeats run id {c.run_id!r}")
            try:
                _apply_into(state, c, v)
            except WarehouseError as exc:
                raise WarehouseError(f"{self.url}: commit {v} does not apply: {exc}") from None
        self._cache = state
        return state.copy()

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): next offset}`` as committed; loads start here."""
        return self.state().committed_offsets()

    def live_files(self, kind: str | None = "data") -> list[DataFile]:
        """Live files of ``kind`` (``"data"``, ``"dead_letter"``, ``None`` = both)."""
        return self.state().live_files(kind)

    def file_url(self, path: str) -> str:
        """Full URL of a file given its table-relative path."""
        return f"{self.url.rstrip('/')}/{path}"

    def history(self) -> list[tuple[int, Commit]]:
        """Every commit, oldest first (reads every commit file: for audits, not hot paths)."""
        commits, _ = self._list_versions()
        return [(v, self.read_commit(v)) for v in commits]

    # -- committing ----------------------------------------------------------
    def commit(self, build: Commit | Callable[[TableState], Commit], *, max_attempts: int = 20,
               backoff_s: float = 0.05) -> CommitResult:
        """Commit ``build`` (a :class:`Commit`, or a function of the current state
        returning one) as the next version.

        On :class:`CommitConflict` the state is re-read and the commit re-validated
        (and rebuilt, for a function), then retried; a refused commit raises
        :class:`WarehouseError`. A lost response is resolved by reading the
        version back; if even that fails, :class:`CommitUnknownError` is raised and
        the caller must keep its files (rerunning with the same run id settles
        it). Files are never deleted here: losers' files are orphans for
        :func:`vacuum`.
        """
        commit_id: str | None = None
        attempts = 0
        while True:
            attempts += 1
            state = self.state()
            c = build(state) if callable(build) else build
            if commit_id is None:
                commit_id = c.commit_id
            elif c.commit_id != commit_id:
                # Keep the identity across rebuilds so read-back recognises our own commit.
                c = dataclasses.replace(c, commit_id=commit_id)
            prior = state.runs.get(c.run_id)
            if prior is not None:
                mine = prior.commit_id == commit_id
                return CommitResult(prior.version, mine, not mine, state, attempts)
            new_state = apply_commit(state, c)
            version = state.version + 1
            try:
                self.storage.put_if_absent(commit_path(version), c.encode(version))
            except CommitConflict:
                pass
            except StorageError as exc:
                if not self._read_back(version, commit_id, exc):
                    pass   # absent or someone else's: loop, re-read and retry
                else:
                    return self._committed(new_state, attempts)
            else:
                return self._committed(new_state, attempts)
            if attempts >= max_attempts:
                raise WarehouseError(f"{self.url}: gave up committing run {c.run_id!r} after "
                                     f"{attempts} conflicting attempts")
            time.sleep(random.uniform(0, backoff_s * min(attempts, 10)))

    def _committed(self, new_state: TableState, attempts: int) -> CommitResult:
        self._cache = new_state
        version = new_state.version
        if version % self.checkpoint_interval == 0:
            try:
                self.storage.put(checkpoint_path(version), json.dumps(
                    new_state.to_json(), sort_keys=True, separators=(",", ":")).encode())
            except StorageError:
                pass   # optional: the next checkpoint or a longer replay covers it
        return CommitResult(version, True, False, new_state.copy(), attempts)

    def _read_back(self, version: int, commit_id: str, cause: Exception, tries: int = 5) -> bool:
        """Whether ``version`` holds our commit, after an ambiguous put."""
        last: Exception = cause
        for i in range(tries):
            try:
                raw = self.storage.get(commit_path(version))
            except ObjectNotFoundError:
                return False
            except StorageError as exc:
                last = exc
                time.sleep(0.05 * (i + 1))
                continue
            try:
                return json.loads(raw).get("commit_id") == commit_id
            except ValueError:
                return False
        raise CommitUnknownError(
            f"{self.url}: outcome of commit version {version} is unknown ({last}); keep its "
            f"files and rerun with the same run id to settle it")


def list_tables(warehouse_url: str | Storage, storage_options: dict | None = None) -> list[str]:
    """Names of the tables (directories with at least one commit) under a warehouse URL."""
    root = (warehouse_url if isinstance(warehouse_url, Storage)
            else Storage(warehouse_url, storage_options))
    out = []
    for name in root.list_dirs(""):
        if not _TABLE_RE.match(name):
            continue
        if any(_COMMIT_RE.match(o.path.rsplit("/", 1)[-1])
               for o in root.list(f"{name}/{COMMITS_DIR}")):
            out.append(name)
    return out


# ---------------------------------------------------------------------------
# vacuum


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum` deleted (or would delete, with ``dry_run``) and kept for now."""

    deleted: tuple[str, ...]
    kept: tuple[str, ...]
    version: int | None


def vacuum(table: Table, now_ms: int, grace_ms: int, *, dry_run: bool = False,
           run_id: str | None = None, user: str | None = None) -> VacuumResult:
    """Delete files no commit lists (orphans of failed or losing jobs) and files
    removed by commits, once older than ``grace_ms``.

    Age is counted from the removing commit's ``now_ms`` for removed files and
    from the object's modification time for orphans. The grace period must
    exceed the longest query and the longest load (file write to commit): an
    in-flight load's files are orphans until it commits. Deletions are recorded
    in a ``vacuum`` commit for the audit trail.
    """
    state = table.state()
    cutoff = int(now_ms) - int(grace_ms)
    deleted: list[str] = []
    kept: list[str] = []
    for path, (_version, removed_ms) in sorted(state.removed.items()):
        (deleted if removed_ms <= cutoff else kept).append(path)
    pending = set(state.removed)
    # Only the data directories: the commit log itself is never vacuumed.
    for prefix in (DATA_DIR, DEAD_LETTER_DIR):
        for obj in table.storage.list(prefix):
            if obj.path in state.files or obj.path in pending:
                continue
            (deleted if obj.mtime * 1000 <= cutoff else kept).append(obj.path)
    version = None
    if deleted and not dry_run:
        table.storage.delete(deleted)
        gone = tuple(p for p in deleted if p in pending)
        orphans = [p for p in deleted if p not in pending]
        c = Commit(run_id=run_id or f"vacuum-{uuid.uuid4().hex}", operation="vacuum",
                   now_ms=int(now_ms), user=user, deleted=gone,
                   info={"orphans_deleted": orphans, "grace_ms": int(grace_ms)})
        version = table.commit(c).version
    return VacuumResult(tuple(deleted), tuple(kept), version)


# ---------------------------------------------------------------------------
# writing files (runs on executors: only URLs and options travel)

FILE_DESCRIPTOR_DDL = ("path string, topic string, partition int, min_offset long, "
                       "max_offset long, rows long, bytes long, kind string, date string, "
                       "min_timestamp long, max_timestamp long")


def _safe_run(run_id: str) -> str:
    return _RUN_SAFE_RE.sub("_", run_id)[:64] or "run"


def _timestamps_ms(column):
    """Kafka ``timestamp`` column (Arrow timestamp of any unit, or int64 ms) as int64 ms."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type):
        raw = pc.cast(column, pa.int64())
        unit = column.type.unit
        if unit == "ms":
            return raw
        if unit == "s":
            return pc.multiply(raw, 1000)
        # Floor (not truncate) to whole ms, so times before 1970 land on the right day.
        per_ms = pa.scalar(1000 if unit == "us" else 1_000_000, pa.int64())
        q = pc.divide(raw, per_ms)                      # integer division truncates
        return pc.if_else(pc.less(raw, pc.multiply(q, per_ms)), pc.subtract(q, 1), q)
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.int64())
    raise ConfigError(f"timestamp column must be a timestamp or epoch-ms integer, got {column.type}")


def _day(ms: int | None) -> str:
    if ms is None:
        return NULL_DATE
    return (_dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=ms)).date().isoformat()


def write_files(table_url: str, data, *, run_id: str, storage_options: dict | None = None,
                kind: str = "data", max_rows_per_file: int = 1_000_000,
                compression: str = "zstd") -> list[dict[str, Any]]:
    """Write Kafka-schema rows (plus any decoded columns) as Parquet under the table.

    ``data`` is a pyarrow Table, a RecordBatch or an iterable of RecordBatches
    with at least ``topic``, ``partition``, ``offset`` and ``timestamp`` columns.
    Rows are split by (topic, partition, UTC date), sorted by offset, and at most
    ``max_rows_per_file`` go in one file. Returns one descriptor per file
    (a dict, see :data:`FILE_DESCRIPTOR_DDL` / :meth:`DataFile.from_json`) for the
    commit. Safe on executors: takes only a URL and options, and files stay
    invisible until a commit lists them.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if isinstance(data, pa.RecordBatch):
        tbl = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        tbl = data
    else:
        batches = list(data)
        if not batches:
            return []
        tbl = pa.Table.from_batches(batches)
    if tbl.num_rows == 0:
        return []
    missing = [c for c in ("topic", "partition", "offset", "timestamp") if c not in tbl.column_names]
    if missing:
        raise ConfigError(f"rows to write lack column(s) {missing}; expected the Kafka schema")
    for name in ("topic", "partition", "offset"):
        if tbl.column(name).null_count:
            raise ConfigError(f"rows to write have null {name!r} values; every row needs "
                              f"topic, partition and offset")
    storage = Storage(table_url, storage_options)
    ts = _timestamps_ms(tbl.column("timestamp"))
    days = pc.floor(pc.divide(pc.cast(ts, pa.float64()), 86_400_000.0))
    keyed = tbl.append_column("__day", pc.cast(days, pa.int64()))
    groups = keyed.group_by(["topic", "partition", "__day"], use_threads=False).aggregate([])
    out: list[dict[str, Any]] = []
    for topic, partition, day in zip(groups.column("topic").to_pylist(),
                                     groups.column("partition").to_pylist(),
                                     groups.column("__day").to_pylist()):
        mask = pc.and_(pc.equal(keyed.column("topic"), topic),
                       pc.equal(keyed.column("partition"), partition))
        mask = pc.and_(mask, pc.is_null(keyed.column("__day")) if day is None
                       else pc.equal(keyed.column("__day"), day))
        part = keyed.filter(pc.fill_null(mask, False)).sort_by("offset")
        date = _day(None if day is None else int(day) * 86_400_000)
        for start in range(0, part.num_rows, max_rows_per_file):
            chunk = part.slice(start, max_rows_per_file)
            out.append(_write_one(storage, chunk.drop_columns(["__day"]), topic, int(partition),
                                  date, run_id, kind, compression, pq, pa, pc))
    return out


def _write_one(storage, chunk, topic, partition, date, run_id, kind, compression, pq, pa, pc):
    offsets = pc.min_max(chunk.column("offset"))
    ts = pc.min_max(_timestamps_ms(chunk.column("timestamp")))
    lo, hi = offsets["min"].as_py(), offsets["max"].as_py()
    path = (f"{KINDS[kind]}/topic={topic}/date={date}/part-{partition}-{lo:020d}-"
            f"{_safe_run(run_id)}-{uuid.uuid4().hex[:12]}.parquet")
    buf = pa.BufferOutputStream()
    pq.write_table(chunk, buf, compression=compression)
    body = buf.getvalue()
    # Whole-object put: atomic on every backend, and the byte count is exact.
    storage.put(path, body.to_pybytes())
    return DataFile(path=path, topic=topic, partition=partition, min_offset=lo, max_offset=hi,
                    rows=chunk.num_rows, bytes=body.size, kind=kind, date=date,
                    min_timestamp=ts["min"].as_py(), max_timestamp=ts["max"].as_py()).to_json()


def arrow_writer(table_url: str, *, run_id: str, storage_options: dict | None = None,
                 kind: str = "data", max_rows_per_file: int = 1_000_000,
                 compression: str = "zstd") -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A function for ``df.mapInArrow(fn, FILE_DESCRIPTOR_DDL)``: each Spark task
    writes its rows with :func:`write_files` and yields one descriptor row per file.

    Collect the descriptors on the driver and commit them; files from failed or
    speculative task attempts are never collected, so they stay orphans.
    """
    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        buffered, rows = [], 0
        descriptors: list[dict[str, Any]] = []
        for batch in batches:
            if batch.num_rows:
                buffered.append(batch)
                rows += batch.num_rows
            if rows >= max_rows_per_file:
                descriptors += write_files(table_url, buffered, run_id=run_id,
                                           storage_options=storage_options, kind=kind,
                                           max_rows_per_file=max_rows_per_file,
                                           compression=compression)
                buffered, rows = [], 0
        if buffered:
            descriptors += write_files(table_url, buffered, run_id=run_id,
                                       storage_options=storage_options, kind=kind,
                                       max_rows_per_file=max_rows_per_file, compression=compression)
        if descriptors:
            yield pa.RecordBatch.from_pylist(descriptors, schema=descriptor_schema())

    return write_partition


def descriptor_schema():
    """The Arrow schema of writer descriptors (matches :data:`FILE_DESCRIPTOR_DDL`)."""
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                      ("min_offset", pa.int64()), ("max_offset", pa.int64()),
                      ("rows", pa.int64()), ("bytes", pa.int64()), ("kind", pa.string()),
                      ("date", pa.string()), ("min_timestamp", pa.int64()),
                      ("max_timestamp", pa.int64())])


def read_files(table_url: str, files: Iterable[DataFile | str], *,
               storage_options: dict | None = None, columns: list[str] | None = None):
    """Read table files (DataFiles or relative paths) into one pyarrow Table."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    storage = Storage(table_url, storage_options)
    parts = [pq.read_table(io.BytesIO(storage.get(f.path if isinstance(f, DataFile) else f)),
                           columns=columns) for f in files]
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="default")


def copy_rows_below(table_url: str, file: DataFile, below_offset: int, *, run_id: str,
                    storage_options: dict | None = None,
                    compression: str = "zstd") -> list[dict[str, Any]]:
    """Rewrite the rows of ``file`` with offset < ``below_offset`` as new file(s).

    For a rewind whose requested offset falls inside ``file``: the reprocess
    commit removes ``file`` whole and adds these copies plus the reprocessed rows.
    """
    import pyarrow.compute as pc

    tbl = read_files(table_url, [file], storage_options=storage_options)
    if tbl is None:
        return []
    keep = tbl.filter(pc.less(tbl.column("offset"), below_offset))
    return write_files(table_url, keep, run_id=run_id, storage_options=storage_options,
                       kind=file.kind, compression=compression)
