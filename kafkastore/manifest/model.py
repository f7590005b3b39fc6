"""The manifest's model: what one version of a partition's state holds, as immutable values
(:class:`SegmentEntry`, :class:`BatchMetadata`, :class:`ProducerState`, :class:`CommitInfo`,
:class:`Manifest`), their stored JSON form, and the invariants every version keeps
(:func:`check_invariants`). Pure: no storage, no clock.
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .. import layout
from ..errors import ConfigError, CorruptMetadataError, InvalidUpdateError

MANIFEST_FORMAT = 2
#: Formats this code reads: 1 (every version a full snapshot, before deltas) and 2.
READABLE_FORMATS = (1, 2)
NO_TIMESTAMP = -1
MAX_PRODUCER_BATCHES = 5  # as Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_SEGMENT_ID_RE = re.compile(r"^[0-9a-zA-Z]+$")


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
