"""The offset manifest: the commit point of one topic-partition (DESIGN.md section 3).

A partition's state is a sequence of immutable, numbered manifest versions at
``topics/<t>/<p>/_manifest/<20-digit version>.json``. Version 1 is the first
commit; version N+1 is created with put-if-absent, so of two writers racing
from version N exactly one wins and the other gets :class:`CommitConflict` (and retries
on :class:`kafkastore.commit.CommitEngine`).

A version's state is a full snapshot (live segments, log start offset, leader
epoch, producer state, compaction state), but it is *stored* (format 2) either
full or as a delta on the version before (Delta Lake's ``_delta_log`` shape,
where the checkpoint is itself a commit): every :attr:`ManifestStore.full_every`-th
version is full, the others hold only what changed
(:mod:`kafkastore.manifest_delta`), so a commit writes bytes in proportion to
its change, not to the number of live segments. The head is found without
listing: from the last head this process saw, or from the hint
``_manifest/_last_checkpoint.json`` (the newest full version), then by reading
the next versions until one is absent (:meth:`ManifestStore.latest`). Format-1
roots (every version full) are read as they are; their next commit is full.
Old versions are only needed by readers that loaded them before they were
superseded; :meth:`ManifestStore.expire_versions` removes them, a whole group
(a full version and its deltas) at a time, after a grace period.

Commits are data, in the style of Iceberg's table updates: a list of updates
(:class:`AppendSegments`, :class:`ReplaceSegments`, :class:`AdvanceLogStart`,
:class:`SetLeaderEpoch`, :class:`UpdateProducerState`, :class:`SetCleanerOffset`,
:class:`SetExtra`) plus requirements on the base (:class:`AssertVersion`,
:class:`AssertLeaderEpoch`, :class:`AssertSegmentsPresent`,
:class:`AssertHighWatermark`, :class:`AssertLogStartOffset`), applied by the
one pure function :func:`apply`, which also checks every invariant.

Segment checksums are CRC-32C (Castagnoli, the record-batch CRC) of the whole
``.log`` object, stored as an unsigned 32-bit integer.
"""
from __future__ import annotations

import bisect
import json
import logging
import random
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import layout, manifest_delta
from .commit import RETRY, Backoff, Budget, Clock, CommitEngine, Done, ObjectTarget
from .errors import (ConfigError, FencedError, ManifestGapError, ObjectNotFoundError, TopicDeletedError,
                     OffsetOutOfRangeError, StaleUploadError, StorageError)
from .errors import (CorruptMetadataError, InvalidUpdateError,  # noqa: F401 (re-exported)
                     RequirementFailedError)
from .storage import Storage

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 2
#: Formats this code reads: 1 (every version a full snapshot, before deltas) and 2.
READABLE_FORMATS = (1, 2)
NO_TIMESTAMP = -1
MAX_PRODUCER_BATCHES = 5  # as Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_VERSION_RE = re.compile(r"^(\d{20})\.json$")
_SEGMENT_ID_RE = re.compile(r"^[0-9a-zA-Z]+$")








# ---------------------------------------------------------------------------
# value types
# ---------------------------------------------------------------------------

def _check_int(name: str, value: Any, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidUpdateError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidUpdateError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class SegmentEntry:
    """One live segment: the objects ``<20-digit base offset>-<segment_id>.{log,index,timeindex}``.

    ``[base_offset, next_offset)`` are the offsets the segment covers
    (``record_count`` may be smaller after compaction). Timestamps are epoch
    ms, ``-1`` when the segment holds no timestamps. ``checksum`` is CRC-32C of
    the ``.log`` bytes. ``aborted_txns`` lists ``(producer_id, first_offset,
    last_offset)`` of the aborted transactions whose abort marker is in this
    segment (Kafka's ``.txnindex``). ``delete_horizon_ms`` is set by compaction
    on the segments it writes: the earliest delete horizon (KIP-534, also in
    the batches) of the tombstones and transaction markers the segment still
    holds, so from then on a clean removes some of them; None when nothing in
    it awaits removal.
    """

    base_offset: int
    next_offset: int
    record_count: int
    size: int
    min_timestamp: int
    max_timestamp: int
    segment_id: str
    writer_id: int
    leader_epoch: int
    checksum: int
    index_size: int = 0
    timeindex_size: int = 0
    aborted_txns: tuple[tuple[int, int, int], ...] = ()
    max_timestamp_offset: int = -1
    delete_horizon_ms: int | None = None

    def __post_init__(self):
        # Normalise AbortedTxn named tuples / lists to plain tuples so equality and JSON are stable.
        try:
            txns = tuple(tuple(t) for t in self.aborted_txns)
        except TypeError:
            raise InvalidUpdateError(f"aborted_txns must be (producer_id, first, last) tuples, "
                                     f"got {self.aborted_txns!r}") from None
        for t in txns:
            if len(t) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in t):
                raise InvalidUpdateError(f"aborted transaction {t!r} is not (producer_id, first, last)")
        object.__setattr__(self, "aborted_txns", txns)

    @property
    def last_offset(self) -> int:
        """The last offset the segment covers."""
        return self.next_offset - 1

    @property
    def stem(self) -> str:
        """``<20-digit base offset>-<segment_id>``, the file name without extension."""
        return layout.segment_stem(self.base_offset, self.segment_id)

    def paths(self, topic: str, partition: int) -> dict[str, str]:
        """Relative paths of the segment's objects, keyed by extension."""
        return {ext: layout.segment_path(topic, partition, self.base_offset, self.segment_id, ext)
                for ext in layout.SEGMENT_EXTENSIONS}

    def validate(self) -> None:
        """Raise :class:`InvalidUpdateError` if the entry is inconsistent in itself."""
        if self.__dict__.get("_valid"):
            return  # immutable, so once valid always valid: a commit re-checks only new entries
        for name in ("base_offset", "record_count", "size", "index_size", "timeindex_size",
                     "checksum"):
            _check_int(name, getattr(self, name), 0)
        _check_int("next_offset", self.next_offset, self.base_offset + 1)
        for name in ("min_timestamp", "max_timestamp", "max_timestamp_offset"):
            _check_int(name, getattr(self, name), -1)
        _check_int("writer_id", self.writer_id)
        _check_int("leader_epoch", self.leader_epoch, -1)
        if self.checksum > 0xFFFFFFFF:
            raise InvalidUpdateError(f"checksum {self.checksum} is not a CRC-32C value")
        if self.record_count > self.next_offset - self.base_offset:
            raise InvalidUpdateError(
                f"segment {self.stem}: {self.record_count} records do not fit in offsets "
                f"[{self.base_offset}, {self.next_offset})")
        if not isinstance(self.segment_id, str) or not _SEGMENT_ID_RE.match(self.segment_id):
            raise InvalidUpdateError(f"segment id {self.segment_id!r} must be letters and digits")
        if self.min_timestamp != NO_TIMESTAMP and self.max_timestamp < self.min_timestamp:
            raise InvalidUpdateError(f"segment {self.stem}: max_timestamp < min_timestamp")
        if self.max_timestamp_offset != -1 and not (
                self.base_offset <= self.max_timestamp_offset < self.next_offset):
            raise InvalidUpdateError(f"segment {self.stem}: max_timestamp_offset outside the segment")
        if self.delete_horizon_ms is not None:
            _check_int("delete_horizon_ms", self.delete_horizon_ms, 0)
        for pid, first, last in self.aborted_txns:
            if pid < 0 or not (0 <= first <= last < self.next_offset):
                raise InvalidUpdateError(
                    f"segment {self.stem}: aborted transaction {(pid, first, last)} is not "
                    f"(producer id >= 0, first <= last < next offset)")
        object.__setattr__(self, "_valid", True)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = {
            "base_offset": self.base_offset, "next_offset": self.next_offset,
            "record_count": self.record_count, "size": self.size,
            "min_timestamp": self.min_timestamp, "max_timestamp": self.max_timestamp,
            "max_timestamp_offset": self.max_timestamp_offset,
            "segment_id": self.segment_id, "writer_id": self.writer_id,
            "leader_epoch": self.leader_epoch, "checksum": self.checksum,
            "index_size": self.index_size, "timeindex_size": self.timeindex_size,
            "aborted_txns": [list(t) for t in self.aborted_txns],
        }
        if self.delete_horizon_ms is not None:
            d["delete_horizon_ms"] = self.delete_horizon_ms
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SegmentEntry":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(
                base_offset=d["base_offset"], next_offset=d["next_offset"],
                record_count=d["record_count"], size=d["size"],
                min_timestamp=d["min_timestamp"], max_timestamp=d["max_timestamp"],
                segment_id=d["segment_id"], writer_id=d["writer_id"],
                leader_epoch=d["leader_epoch"], checksum=d["checksum"],
                index_size=d.get("index_size", 0), timeindex_size=d.get("timeindex_size", 0),
                aborted_txns=tuple(tuple(t) for t in d.get("aborted_txns", ())),
                max_timestamp_offset=d.get("max_timestamp_offset", -1),
                delete_horizon_ms=d.get("delete_horizon_ms"),
            )
        except (KeyError, TypeError, ValueError, InvalidUpdateError) as exc:
            raise CorruptMetadataError(f"bad segment entry {d!r}: {exc}") from None


@dataclass(frozen=True)
class BatchMetadata:
    """What idempotence remembers of one appended producer batch."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int = NO_TIMESTAMP

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return {"first_sequence": self.first_sequence, "last_sequence": self.last_sequence,
                "first_offset": self.first_offset, "last_offset": self.last_offset,
                "timestamp": self.timestamp}


@dataclass(frozen=True)
class ProducerState:
    """Idempotent producer state of one producer id: its epoch and last batches (oldest first)."""

    epoch: int
    batches: tuple[BatchMetadata, ...] = ()
    last_timestamp: int = NO_TIMESTAMP
    txn_first_offset: int | None = None  # first offset of an open transaction, if any

    @property
    def last_sequence(self) -> int:
        """Last sequence number appended, -1 if none."""
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        """Offset of the last record appended, -1 if none."""
        return self.batches[-1].last_offset if self.batches else -1

    def with_batch(self, batch: BatchMetadata) -> "ProducerState":
        """This state plus ``batch``, keeping the newest :data:`MAX_PRODUCER_BATCHES`."""
        batches = (self.batches + (batch,))[-MAX_PRODUCER_BATCHES:]
        return replace(self, batches=batches, last_timestamp=max(self.last_timestamp, batch.timestamp))

    def find_batch(self, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        """The retained batch with these sequence numbers (a duplicate send), if any."""
        for b in self.batches:
            if b.first_sequence == first_sequence and b.last_sequence == last_sequence:
                return b
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"epoch": self.epoch, "batches": [b.to_dict() for b in self.batches],
                "last_timestamp": self.last_timestamp, "txn_first_offset": self.txn_first_offset}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProducerState":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(epoch=d["epoch"],
                       batches=tuple(BatchMetadata(**b) for b in d.get("batches", ())),
                       last_timestamp=d.get("last_timestamp", NO_TIMESTAMP),
                       txn_first_offset=d.get("txn_first_offset"))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptMetadataError(f"bad producer state {d!r}: {exc}") from None


@dataclass(frozen=True)
class CommitInfo:
    """Audit record of the commit that made a version. ``commit_id`` is unique per attempt."""

    commit_id: str
    operation: str
    writer: str
    timestamp_ms: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"id": self.commit_id, "operation": self.operation, "writer": self.writer,
                "timestamp": self.timestamp_ms}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommitInfo":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(str(d["id"]), str(d["operation"]), str(d["writer"]), int(d["timestamp"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptMetadataError(f"bad commit record {d!r}: {exc}") from None


@dataclass(frozen=True)
class Manifest:
    """One version of a partition's manifest. Treat ``producers`` and ``extra`` as read-only.

    ``version`` 0 is the empty state before the first commit (never stored).
    ``cleaner_offset`` is compaction's checkpoint (Kafka's first dirty offset):
    offsets below it have been cleaned. ``extra`` holds durable state of the
    batch jobs (JSON values).
    """

    topic: str
    partition: int
    version: int = 0
    segments: tuple[SegmentEntry, ...] = ()
    log_start_offset: int = 0
    leader_epoch: int = 0
    producers: Mapping[int, ProducerState] = field(default_factory=dict)
    cleaner_offset: int = 0
    commit: CommitInfo | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, topic: str, partition: int) -> "Manifest":
        """The state of a partition that has no manifest yet (version 0)."""
        return cls(topic=topic, partition=partition)

    @property
    def high_watermark(self) -> int:
        """Next offset to be written: next offset of the last segment, or the log start offset."""
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def size(self) -> int:
        """Total bytes of the live ``.log`` objects."""
        return sum(s.size for s in self.segments)

    def segment_ids(self) -> list[str]:
        """Ids of the live segments, in offset order."""
        return [s.segment_id for s in self.segments]

    def segment_for(self, offset: int) -> SegmentEntry | None:
        """The live segment whose range holds ``offset``, else None."""
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        if i >= 0 and offset < self.segments[i].next_offset:
            return self.segments[i]
        return None

    def segments_from(self, offset: int) -> tuple[SegmentEntry, ...]:
        """Live segments holding offsets ``>= offset``, in order."""
        return tuple(s for s in self.segments if s.next_offset > offset)

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the stored shape)."""
        return {
            "format": MANIFEST_FORMAT,
            "kind": "full",
            "topic": self.topic,
            "partition": self.partition,
            "version": self.version,
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "leader_epoch": self.leader_epoch,
            "cleaner_offset": self.cleaner_offset,
            "segments": [s.to_dict() for s in self.segments],
            "producers": {str(pid): st.to_dict() for pid, st in sorted(self.producers.items())},
            "commit": self.commit.to_dict() if self.commit else None,
            "extra": dict(self.extra),
        }

    def to_json(self) -> bytes:
        """The stored bytes: compact UTF-8 JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        """Inverse of :meth:`to_dict`; checks every invariant (:class:`CorruptMetadataError`)."""
        if not isinstance(d, Mapping):
            raise CorruptMetadataError("manifest is not a JSON object")
        if d.get("format") not in READABLE_FORMATS:
            raise CorruptMetadataError(f"unsupported manifest format {d.get('format')!r}")
        if d.get("format") != 1 and d.get("kind") != "full":
            raise CorruptMetadataError(
                f"not a full manifest version (kind {d.get('kind')!r}): a delta is read through "
                f"ManifestStore.load")
        try:
            m = cls(
                topic=d["topic"], partition=d["partition"], version=d["version"],
                segments=tuple(SegmentEntry.from_dict(s) for s in d["segments"]),
                log_start_offset=d["log_start_offset"], leader_epoch=d["leader_epoch"],
                producers={int(k): ProducerState.from_dict(v) for k, v in d.get("producers", {}).items()},
                cleaner_offset=d.get("cleaner_offset", 0),
                commit=CommitInfo.from_dict(d["commit"]) if d.get("commit") else None,
                extra=dict(d.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptMetadataError(f"bad manifest: {exc!r}") from None
        try:
            check_invariants(m)
        except InvalidUpdateError as exc:
            raise CorruptMetadataError(f"manifest breaks an invariant: {exc}") from None
        if d.get("high_watermark") != m.high_watermark:
            raise CorruptMetadataError(
                f"manifest high_watermark {d.get('high_watermark')!r} does not match its segments "
                f"({m.high_watermark})")
        return m

    @classmethod
    def from_json(cls, data: bytes | str) -> "Manifest":
        """Parse stored bytes."""
        try:
            return cls.from_dict(json.loads(data))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptMetadataError(f"manifest is not JSON: {exc}") from None


def _segment_id_set(m: Manifest) -> frozenset:
    """The ids of ``m``'s segments, computed once per (immutable) manifest."""
    ids = m.__dict__.get("_segment_ids")
    if ids is None:
        ids = frozenset(s.segment_id for s in m.segments)
        object.__setattr__(m, "_segment_ids", ids)
    return ids


def check_invariants(m: Manifest, base: Manifest | None = None) -> None:
    """Raise :class:`InvalidUpdateError` unless ``m`` is a well-formed manifest.

    Segments are sorted, unique by id, and tile the offsets: each starts where
    the previous ends. The log start offset lies in the first segment (or equals
    the high watermark when there is none). Producer batches refer to offsets
    below the high watermark.

    ``base``, a manifest that passed this check: when ``m``'s segments begin with
    ``base``'s (the same objects, as after an append), only the rest is checked, so
    a commit costs the same however many segments are live.
    """
    if not isinstance(m.topic, str):
        raise InvalidUpdateError("topic must be a string")
    try:
        layout.validate_topic_name(m.topic)
    except ConfigError as exc:
        raise InvalidUpdateError(str(exc)) from None
    _check_int("partition", m.partition, 0)
    _check_int("version", m.version, 0)
    _check_int("log_start_offset", m.log_start_offset, 0)
    _check_int("leader_epoch", m.leader_epoch, 0)
    _check_int("cleaner_offset", m.cleaner_offset, 0)
    segs = m.segments
    known = 0  # leading segments that are base's, already checked
    if base is not None and base.segments and len(segs) >= len(base.segments):
        k = len(base.segments)
        if segs[:k] == base.segments:  # identity first: a pointer walk at C speed
            known = k
    for seg in segs[known:]:
        if not isinstance(seg, SegmentEntry):
            raise InvalidUpdateError(f"segments must be SegmentEntry, got {type(seg).__name__}")
        if not seg.__dict__.get("_valid"):
            # Entries are immutable: one that passed once needs no second check (a merge
            # in the middle of a long log re-checks only the tiling, not every entry).
            seg.validate()
            object.__setattr__(seg, "_valid", True)
    new_ids = [seg.segment_id for seg in segs[known:]]
    old_ids = _segment_id_set(base) if known else frozenset()
    if len(set(new_ids)) != len(new_ids) or not old_ids.isdisjoint(new_ids):
        seen: set[str] = set(old_ids)
        for sid in new_ids:
            if sid in seen:
                raise InvalidUpdateError(f"segment id {sid!r} listed twice")
            seen.add(sid)
    if known:  # so the next commit on m does not collect them again
        object.__setattr__(m, "_segment_ids", old_ids.union(new_ids))
    # Tiling, checked with list comparison (C speed: this runs on every commit and read).
    lo = max(known - 1, 0)
    if [s.base_offset for s in segs[lo + 1:]] != [s.next_offset for s in segs[lo:-1]]:
        for i in range(lo + 1, len(segs)):
            seg, prev = segs[i], segs[i - 1]
            if seg.base_offset != prev.next_offset:
                kind = "overlaps" if seg.base_offset < prev.next_offset else "leaves a gap after"
                raise InvalidUpdateError(
                    f"segment {seg.stem} [{seg.base_offset}, {seg.next_offset}) {kind} segment "
                    f"{prev.stem} [{prev.base_offset}, {prev.next_offset})")
    if m.segments:
        first = m.segments[0]
        if not first.base_offset <= m.log_start_offset < first.next_offset:
            raise InvalidUpdateError(
                f"log start offset {m.log_start_offset} is not in the first segment "
                f"[{first.base_offset}, {first.next_offset})")
    hw = m.high_watermark
    if m.cleaner_offset > hw:
        raise InvalidUpdateError(f"cleaner offset {m.cleaner_offset} is past the high watermark {hw}")
    for pid, st in m.producers.items():
        _check_int("producer id", pid, 0)
        if not isinstance(st, ProducerState):
            raise InvalidUpdateError(f"producer {pid}: state must be a ProducerState")
        _check_int(f"producer {pid} epoch", st.epoch, 0)
        if len(st.batches) > MAX_PRODUCER_BATCHES:
            raise InvalidUpdateError(f"producer {pid}: more than {MAX_PRODUCER_BATCHES} batches")
        for b in st.batches:
            if not 0 <= b.first_offset <= b.last_offset < hw:
                raise InvalidUpdateError(
                    f"producer {pid}: batch offsets [{b.first_offset}, {b.last_offset}] are not "
                    f"below the high watermark {hw}")
        if st.txn_first_offset is not None and not 0 <= st.txn_first_offset < hw:
            raise InvalidUpdateError(f"producer {pid}: open transaction offset outside the log")


# ---------------------------------------------------------------------------
# updates and requirements
# ---------------------------------------------------------------------------

class Update:
    """A change to a manifest. ``apply_to`` is pure: it returns a new Manifest."""

    def apply_to(self, m: Manifest) -> Manifest:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class AppendSegments(Update):
    """Append segments at the high watermark (or, to an empty log, at or above it)."""

    segments: tuple[SegmentEntry, ...]

    def apply_to(self, m: Manifest) -> Manifest:
        segs = tuple(self.segments)
        if not segs:
            raise InvalidUpdateError("AppendSegments needs at least one segment")
        first = segs[0]
        hw = m.high_watermark
        if m.segments and first.base_offset != hw:
            raise InvalidUpdateError(
                f"appended segment starts at {first.base_offset}, expected the high watermark {hw}")
        if not m.segments and first.base_offset < hw:
            raise InvalidUpdateError(
                f"appended segment starts at {first.base_offset}, below the high watermark {hw}")
        # An empty log may start higher up (adopting a Kafka log whose start was deleted).
        start = m.log_start_offset if m.segments else first.base_offset
        return replace(m, segments=m.segments + segs, log_start_offset=start)


@dataclass(frozen=True)
class ReplaceSegments(Update):
    """Swap a contiguous run of segments for new ones covering exactly the same offsets (compaction)."""

    remove: tuple[str, ...]
    add: tuple[SegmentEntry, ...]

    def apply_to(self, m: Manifest) -> Manifest:
        remove = list(self.remove)
        add = tuple(self.add)
        if not remove or not add:
            raise InvalidUpdateError("ReplaceSegments needs segments to remove and to add")
        # Fast path: the run starts where its replacement starts; find it by bisection on the
        # sorted base offsets (O(log n): a merge commit holds many replacements of a long log).
        segs, start = m.segments, add[0].base_offset
        lo, hi = 0, len(segs)
        while lo < hi:
            mid = (lo + hi) // 2
            if segs[mid].base_offset < start:
                lo = mid + 1
            else:
                hi = mid
        end = lo + len(remove)
        if (end <= len(segs) and [s.segment_id for s in segs[lo:end]] == remove
                and add[-1].next_offset == segs[end - 1].next_offset):
            return replace(m, segments=segs[:lo] + add + segs[end:])
        # Otherwise the slow path finds out exactly what is wrong.
        ids = m.segment_ids()
        missing = [r for r in remove if r not in ids]
        if missing:
            raise RequirementFailedError(f"segments {missing} are no longer live")
        positions = sorted(ids.index(r) for r in set(remove))
        if len(positions) != len(remove) or positions != list(range(positions[0], positions[-1] + 1)):
            raise InvalidUpdateError("ReplaceSegments must remove a contiguous run of distinct segments")
        lo, hi = positions[0], positions[-1]
        start, end = m.segments[lo].base_offset, m.segments[hi].next_offset
        if add[0].base_offset != start or add[-1].next_offset != end:
            raise InvalidUpdateError(
                f"replacement covers [{add[0].base_offset}, {add[-1].next_offset}), "
                f"must cover exactly [{start}, {end})")
        return replace(m, segments=m.segments[:lo] + add + m.segments[hi + 1:])


@dataclass(frozen=True)
class AdvanceLogStart(Update):
    """Move the log start offset forward (retention, delete-records); drops segments wholly below it.

    A lower offset than the current one is a no-op (idempotent retries).
    """

    offset: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("log start offset", self.offset, 0)
        hw = m.high_watermark
        if self.offset > hw:
            raise OffsetOutOfRangeError(
                f"cannot advance the log start offset to {self.offset}",
                log_start_offset=m.log_start_offset, high_watermark=hw)
        if self.offset <= m.log_start_offset:
            return m
        return replace(m, log_start_offset=self.offset, segments=m.segments_from(self.offset))


@dataclass(frozen=True)
class SetLeaderEpoch(Update):
    """Raise the fencing epoch; writers with an older epoch lose (:class:`FencedError`)."""

    epoch: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("leader epoch", self.epoch, 0)
        if self.epoch < m.leader_epoch:
            raise FencedError(f"leader epoch {self.epoch} is older than the manifest's {m.leader_epoch}")
        return replace(m, leader_epoch=self.epoch)


@dataclass(frozen=True)
class UpdateProducerState(Update):
    """Set (or with ``state=None`` forget) one producer's idempotence state."""

    producer_id: int
    state: ProducerState | None

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("producer id", self.producer_id, 0)
        producers = dict(m.producers)
        if self.state is None:
            producers.pop(self.producer_id, None)
            return replace(m, producers=producers)
        old = producers.get(self.producer_id)
        if old is not None and self.state.epoch < old.epoch:
            raise FencedError(f"producer {self.producer_id}: epoch {self.state.epoch} is older than "
                              f"the current {old.epoch}")
        producers[self.producer_id] = replace(
            self.state, batches=tuple(self.state.batches)[-MAX_PRODUCER_BATCHES:])
        return replace(m, producers=producers)


@dataclass(frozen=True)
class SetCleanerOffset(Update):
    """Record compaction's checkpoint: offsets below ``offset`` have been cleaned."""

    offset: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("cleaner offset", self.offset, 0)
        return replace(m, cleaner_offset=self.offset)


@dataclass(frozen=True)
class SetExtra(Update):
    """Set ``extra[key]`` to a JSON value (``None`` removes the key): durable state of batch jobs."""

    key: str
    value: Any

    def apply_to(self, m: Manifest) -> Manifest:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidUpdateError(f"extra key must be a non-empty string, got {self.key!r}")
        extra = dict(m.extra)
        if self.value is None:
            extra.pop(self.key, None)
        else:
            try:  # round trip: reject non-JSON values and drop aliasing with the caller's object
                extra[self.key] = json.loads(json.dumps(self.value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise InvalidUpdateError(f"extra[{self.key!r}] is not a JSON value: {exc}") from None
        return replace(m, extra=extra)


class Requirement:
    """A precondition on the base manifest of a commit."""

    def check(self, m: Manifest) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class AssertVersion(Requirement):
    """The base is exactly this version (0: no manifest yet)."""

    version: int

    def check(self, m: Manifest) -> None:
        if m.version != self.version:
            raise RequirementFailedError(f"manifest is at version {m.version}, expected {self.version}")


@dataclass(frozen=True)
class AssertLeaderEpoch(Requirement):
    """The writer's epoch is at least the manifest's; else it is fenced (:class:`FencedError`)."""

    epoch: int

    def check(self, m: Manifest) -> None:
        if m.leader_epoch > self.epoch:
            raise FencedError(f"writer epoch {self.epoch} is fenced by leader epoch {m.leader_epoch} "
                              f"(manifest version {m.version})")


@dataclass(frozen=True)
class AssertSegmentsPresent(Requirement):
    """These segment ids are all still live."""

    segment_ids: tuple[str, ...]

    def check(self, m: Manifest) -> None:
        missing = sorted(set(self.segment_ids) - set(m.segment_ids()))
        if missing:
            raise RequirementFailedError(f"segments {missing} are no longer live (version {m.version})")


@dataclass(frozen=True)
class AssertHighWatermark(Requirement):
    """The high watermark is exactly ``offset``."""

    offset: int

    def check(self, m: Manifest) -> None:
        if m.high_watermark != self.offset:
            raise RequirementFailedError(
                f"high watermark is {m.high_watermark}, expected {self.offset} (version {m.version})")


@dataclass(frozen=True)
class AssertLogStartOffset(Requirement):
    """The log start offset is exactly ``offset``."""

    offset: int

    def check(self, m: Manifest) -> None:
        if m.log_start_offset != self.offset:
            raise RequirementFailedError(
                f"log start offset is {m.log_start_offset}, expected {self.offset} (version {m.version})")


def apply(base: Manifest | None, updates: Iterable[Update], requirements: Iterable[Requirement] = (),
          *, topic: str | None = None, partition: int | None = None,
          commit: CommitInfo | None = None) -> Manifest:
    """The next version: check ``requirements`` on ``base``, apply ``updates`` in order.

    Pure. ``base`` None means no manifest yet (then ``topic`` and ``partition``
    are required). Raises :class:`FencedError` for an older epoch,
    :class:`RequirementFailedError` when a requirement does not hold,
    :class:`OffsetOutOfRangeError` for a log start past the high watermark and
    :class:`InvalidUpdateError` for anything that would break an invariant.
    """
    if base is None:
        if topic is None or partition is None:
            raise InvalidUpdateError("apply(None, ...) needs the topic and partition")
        current = Manifest.empty(topic, partition)
        check_invariants(current)
    else:
        current = base
        if (topic is not None and topic != base.topic) or (partition is not None and partition != base.partition):
            raise InvalidUpdateError(f"manifest is for {base.topic}/{base.partition}, not {topic}/{partition}")
    for req in requirements:
        if not isinstance(req, Requirement):
            raise InvalidUpdateError(f"not a requirement: {req!r}")
        req.check(current)
    new = current
    for upd in updates:
        if not isinstance(upd, Update):
            raise InvalidUpdateError(f"not an update: {upd!r}")
        new = upd.apply_to(new)
    new = replace(new, version=current.version + 1, commit=commit)
    check_invariants(new, current)
    # Transition rules on top of the per-version invariants.
    if new.high_watermark < current.high_watermark:
        raise InvalidUpdateError(
            f"high watermark would move back from {current.high_watermark} to {new.high_watermark}")
    if new.log_start_offset < current.log_start_offset:
        raise InvalidUpdateError(
            f"log start offset would move back from {current.log_start_offset} to {new.log_start_offset}")
    if new.leader_epoch < current.leader_epoch:
        raise FencedError(f"leader epoch would move back from {current.leader_epoch} to {new.leader_epoch}")
    return new


# ---------------------------------------------------------------------------
# the store
# ---------------------------------------------------------------------------

Build = Callable[[Manifest | None], "tuple[Sequence[Update], Sequence[Requirement]] | None"]

_KIND_RE = re.compile(rb'^\{\s*"format"\s*:\s*(\d+)\s*,\s*(?:"kind"\s*:\s*"(full|delta)")?')


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


class ManifestStore:
    """The manifest versions of one topic-partition under a root :class:`Storage`.

    Version N is stored full (the whole snapshot) when N is 1 or a multiple of
    :attr:`full_every`, when its base was read from a format-1 object, or when
    its delta would not be smaller; otherwise as a delta on version N-1 (see
    :mod:`kafkastore.manifest_delta`). After a full version lands, the hint
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

    #: The GC grace floor: :mod:`kafkastore.gc` refuses a shorter grace period, and
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
        self._rng = rng or random.Random()
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
                state = None
                continue  # expired meanwhile
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
                try:
                    written = self.storage.upload_time(path)
                except ObjectNotFoundError:
                    optional = (ext == ".index" and not seg.index_size
                                or ext == ".timeindex" and not seg.timeindex_size)
                    if optional:
                        continue
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

    # -- history housekeeping --------------------------------------------------
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
        """Delete old versions; return the version numbers deleted.

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
        """
        keep_ms = max(int(keep_ms), int(self.min_keep_ms))
        keep_last = max(1, int(keep_last))
        listing = self._listing()
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
        doomed = [v for v, _ in listing[:cut]]
        for v in doomed:  # one at a time, oldest first: readers rely on the order
            self.storage.delete([self.path(v)])
        return doomed

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


#: A put sent more than this after the upload ages were last checked checks them again.
_RECHECK_AFTER_MS = 1000


class _ManifestTarget(ObjectTarget):
    """One :meth:`ManifestStore.commit` as the engine sees it: version N+1, put-if-absent."""

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
            from .errors import TopicDeletedError
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
            # topic first (kafkastore.topics.fence_old_readers; imported here, as topics
            # imports this module).
            from .topics import fence_old_readers
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
        # would fill; a put there forks it. One existence check per attempt when N+2 is
        # absent, the only one on the warm path (a trusted head does not probe further).
        if self.store._hole_at(new.version):
            raise self.store._gap(new.version)
        super().put(new)

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
