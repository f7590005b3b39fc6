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
from typing import Any, Callable, Mapping

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


# -- The stored JSON, declared once per type -----------------------------------------------
class _Required:
    """Marker of a :class:`Field` with no default: a stored object without its key is damage."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

#: Rolling-upgrade rules a :class:`Field` falls under (docs/DESIGN.md section 3, "Upgrade rules").
OPTIONAL = "optional"            # has a default; losing it to an older writer is harmless
MUST_NOT_DROP = "must_not_drop"  # needed by every reader and writer of its format


@dataclass(frozen=True)
class Field:
    """One key of a stored manifest object, the only place it is listed.

    ``name`` is the attribute, ``key`` the JSON key (the name unless given). ``default``
    (:data:`REQUIRED` if none) is what a stored object without the key reads as; with
    ``omit_if_default`` the key is left out when it holds the default. ``encode`` /
    ``decode`` turn the value into its JSON form and back (identity if None). ``since`` is
    the manifest format that first stores the key (a field whose ``since`` is above
    :data:`MANIFEST_FORMAT` is read but not written yet), and ``rule`` its rolling-upgrade
    rule (:data:`OPTIONAL` needs a default). ``structured``: a collection the delta diffs by
    parts (segments, producers, ...); ``identity``: the partition and version a delta names
    itself; ``derived``: written for readers but computed, never read back (a reader checks
    it). Every other field is a JSON scalar a delta carries in ``changes.set``. ``verify``
    says whether ``kafkastore verify`` compares the value with the segment's bytes:
    ``"always"`` (for every live segment) or ``"given"`` (when a caller's expectation holds it).
    """

    name: str
    key: str = ""
    default: Any = REQUIRED
    omit_if_default: bool = False
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None
    since: int = 1
    rule: str = ""
    structured: bool = False
    identity: bool = False
    derived: bool = False
    verify: str = ""

    def __post_init__(self):
        if not self.key:
            object.__setattr__(self, "key", self.name)
        if not self.rule:
            object.__setattr__(self, "rule", MUST_NOT_DROP if self.default is REQUIRED else OPTIONAL)

    @property
    def required(self) -> bool:
        """True if a stored object must hold the key."""
        return self.default is REQUIRED


def stored_as_json(cls):
    """Class decorator: give ``cls`` the JSON codec of its ``FIELDS``, ``cls._encode_fields()``
    (a method: the JSON-ready dict, keys in ``FIELDS`` order, ``omit_if_default`` keys left out
    when they hold the default) and ``cls._decode_fields(d)`` (constructor arguments from a
    stored dict: unknown keys ignored, a missing key takes its default or raises KeyError,
    derived keys skipped)."""
    enc, dec = _codec(cls.FIELDS)
    cls._encode_fields = enc
    cls._decode_fields = staticmethod(dec)
    return cls


def _codec(fields: tuple[Field, ...]) -> tuple[Callable, Callable]:
    """``(encode, decode)`` functions for ``fields``, generated once (as :mod:`dataclasses`
    generates ``__init__``) so that they run as fast as the hand-written dicts they replace:
    a commit encodes and a cold read decodes every live segment entry."""
    ns: dict[str, Any] = {"_REQUIRED": REQUIRED}
    enc_head: list[str] = []  # keys before the first that may be left out: one dict literal
    enc_tail: list[str] = []  # the rest, one statement each, in order
    dec: list[str] = []
    for i, f in enumerate(fields):
        value = f"obj.{f.name}"
        if f.encode is not None:
            ns[f"_enc{i}"] = f.encode
            value = f"_enc{i}({value})"
        if f.since > MANIFEST_FORMAT:
            pass  # read, not yet written: the release before a format bump (DESIGN.md section 3)
        elif f.omit_if_default:
            ns[f"_def{i}"] = f.default
            enc_tail.append(f"    if obj.{f.name} != _def{i}: d[{f.key!r}] = {value}")
        elif enc_tail:
            enc_tail.append(f"    d[{f.key!r}] = {value}")
        else:
            enc_head.append(f"{f.key!r}: {value}")
        if f.derived:
            continue
        if f.default is REQUIRED:
            stored = f"d[{f.key!r}]"
        else:
            ns[f"_def{i}"] = f.default
            stored = f"d.get({f.key!r}, _def{i})"
        if f.decode is not None:
            ns[f"_dec{i}"] = f.decode
            stored = f"_dec{i}({stored})"
        dec.append(f"{f.name!r}: {stored}")
    lines = ["def encode(obj):", "    d = {" + ", ".join(enc_head) + "}", *enc_tail,
             "    return d", "def decode(d):", "    return {" + ", ".join(dec) + "}"]
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<manifest fields {fields[0].name}...>", "exec"), ns)  # noqa: S102
    return ns["encode"], ns["decode"]


@stored_as_json
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

    #: The stored keys, in their JSON order.
    FIELDS = (
        Field("base_offset", verify="given"), Field("next_offset", verify="given"),
        Field("record_count", verify="always"), Field("size", verify="always"),
        Field("min_timestamp", verify="given"), Field("max_timestamp", verify="given"),
        Field("max_timestamp_offset", default=-1),
        Field("segment_id"), Field("writer_id"), Field("leader_epoch"),
        Field("checksum", verify="always"),
        Field("index_size", default=0), Field("timeindex_size", default=0),
        Field("aborted_txns", default=(), encode=lambda txns: [list(t) for t in txns],
              decode=lambda txns: tuple(tuple(t) for t in txns)),
        Field("delete_horizon_ms", default=None, omit_if_default=True),
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return self._encode_fields()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SegmentEntry":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(**cls._decode_fields(d))
        except (KeyError, TypeError, ValueError, AttributeError, InvalidUpdateError) as exc:
            raise CorruptMetadataError(f"bad segment entry {d!r}: {exc}") from None


@stored_as_json
@dataclass(frozen=True)
class BatchMetadata:
    """What idempotence remembers of one appended producer batch."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int = NO_TIMESTAMP

    #: The stored keys, in their JSON order.
    FIELDS = (Field("first_sequence"), Field("last_sequence"), Field("first_offset"),
              Field("last_offset"), Field("timestamp", default=NO_TIMESTAMP))

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return self._encode_fields()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchMetadata":
        """Inverse of :meth:`to_dict` (KeyError / TypeError on a bad shape: the caller,
        :meth:`ProducerState.from_dict`, reports it)."""
        if not isinstance(d, Mapping):
            raise TypeError(f"batch {d!r} is not an object")
        return cls(**cls._decode_fields(d))


@stored_as_json
@dataclass(frozen=True)
class ProducerState:
    """Idempotent producer state of one producer id: its epoch and last batches (oldest first)."""

    epoch: int
    batches: tuple[BatchMetadata, ...] = ()
    last_timestamp: int = NO_TIMESTAMP
    txn_first_offset: int | None = None  # first offset of an open transaction, if any
    #: The open transaction's start at its coordinator (which transaction of the producer
    #: epoch it is), when a coordinator verified it: a marker of another one must not end it.
    txn_start_ms: int | None = None

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

    #: The stored keys, in their JSON order.
    FIELDS = (
        Field("epoch"),
        Field("batches", default=(), structured=True,
              encode=lambda batches: [b.to_dict() for b in batches],
              decode=lambda batches: tuple(BatchMetadata.from_dict(b) for b in batches)),
        Field("last_timestamp", default=NO_TIMESTAMP),
        Field("txn_first_offset", default=None),
        Field("txn_start_ms", default=None, omit_if_default=True),
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return self._encode_fields()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProducerState":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(**cls._decode_fields(d))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptMetadataError(f"bad producer state {d!r}: {exc}") from None


@stored_as_json
@dataclass(frozen=True)
class CommitInfo:
    """Audit record of the commit that made a version. ``commit_id`` is unique per attempt."""

    commit_id: str
    operation: str
    writer: str
    timestamp_ms: int

    #: The stored keys, in their JSON order.
    FIELDS = (Field("commit_id", key="id", decode=str), Field("operation", decode=str),
              Field("writer", decode=str), Field("timestamp_ms", key="timestamp", decode=int))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return self._encode_fields()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommitInfo":
        """Inverse of :meth:`to_dict`; :class:`CorruptMetadataError` on a bad shape."""
        try:
            return cls(**cls._decode_fields(d))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptMetadataError(f"bad commit record {d!r}: {exc}") from None


@stored_as_json
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
    #: The stored keys after ``format`` and ``kind``, in their JSON order.
    FIELDS = (
        Field("topic", identity=True), Field("partition", identity=True),
        Field("version", identity=True),
        Field("log_start_offset"),
        Field("high_watermark", derived=True),
        Field("leader_epoch"),
        Field("cleaner_offset", default=0),
        Field("segments", structured=True,
              encode=lambda segs: [s.to_dict() for s in segs],
              decode=lambda segs: tuple(SegmentEntry.from_dict(s) for s in segs)),
        Field("producers", default={}, structured=True,
              encode=lambda ps: {str(pid): st.to_dict() for pid, st in sorted(ps.items())},
              decode=lambda ps: {int(k): ProducerState.from_dict(v) for k, v in ps.items()}),
        Field("commit", default=None, structured=True,
              encode=lambda c: c.to_dict() if c else None,
              decode=lambda c: CommitInfo.from_dict(c) if c else None),
        Field("extra", default={}, structured=True, encode=dict, decode=dict),
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the stored shape)."""
        d: dict[str, Any] = {"format": MANIFEST_FORMAT, "kind": "full"}
        d.update(self._encode_fields())
        return d

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
            m = cls(**cls._decode_fields(d))
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
