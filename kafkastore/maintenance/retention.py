"""Retention and delete-records: move a partition's log start offset forward (DESIGN.md section 6).

Retention never deletes a file. It commits one manifest version that advances
the log start offset (:class:`~kafkastore.manifest.AdvanceLogStart`), which
drops the segments wholly below it from the manifest; their files stay in the
store until :mod:`kafkastore.gc` removes them after the grace period, so a
reader or loader that loaded an older manifest version keeps reading them.

Rules (Kafka's ``UnifiedLog.deleteOldSegments``, same order: size, then time):

* only for topics whose ``cleanup.policy`` contains ``delete``;
* ``retention.bytes`` (negative: off): while the partition's size minus the
  oldest remaining segment's size is still at least ``retention.bytes``, drop
  that segment;
* ``retention.ms`` (negative: off): then keep dropping the oldest remaining
  segment while ``now_ms - anchor > retention.ms``, where the anchor is the
  segment's largest record timestamp (see "future timestamps" below);
* only a prefix of the log goes (the log start offset is one number), so the
  first segment that does not qualify stops the sweep;
* **the newest segment is never dropped** (a deliberate difference: Kafka rolls
  an expired active segment and deletes it, leaving an empty log). Keeping it
  keeps the partition's newest records and their timestamps readable, and a
  partition is never emptied by time alone; the high watermark is unaffected.

Future timestamps. Kafka anchors time-based retention on the largest record
timestamp, so a segment holding a timestamp far in the future blocks itself
and, because only prefixes are deleted, every later segment, until that
timestamp plus ``retention.ms`` (KAFKA-18929 merely logs it). Here a segment's
age is measured from its largest timestamp **but never from later than the
time its ``.log`` object was written** (``segment_times``, which
:func:`apply_retention` takes from the object listing, like Kafka's file
``lastModified``; KAFKA-20609 does the same for tiered storage). So a
future-stamped segment becomes eligible ``retention.ms`` after it was written
and delays the segments behind it by at most that: it cannot block retention
forever. A segment without timestamps is anchored on its write time too, as in
Kafka. Where the write time is unknown, Kafka's rule applies, and a segment
whose timestamp is after ``now_ms`` (reported in
:attr:`RetentionPlan.future_segments`) is kept. The anchor does not depend on
``now_ms``, so a later run never keeps what an earlier one would drop.

Unloaded data. Callers may pass each warehouse table's next offset to load for
the partition (``committed``: ``{table: next_offset}``); the plan reports each
table whose committed offset is below the new log start (data it never
loaded is gone), and with ``protect_unloaded`` drops only segments that every
listed table has loaded completely. This module does not know the warehouse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .. import layout
from ..errors import ConfigError, OffsetOutOfRangeError, UnknownTopicError
from ..manifest import NO_TIMESTAMP, AdvanceLogStart, Manifest, ManifestStore, SegmentEntry
from ..storage import Storage
from ..topics.topic_config import TopicConfig
from ..topics.admin import TopicMetadata, load_topic

#: Reason codes in :attr:`RetentionPlan.reasons`.
REASON_SIZE = "retention.bytes"
REASON_TIME = "retention.ms"

CommittedOffsets = Mapping[str, Mapping[int, int]]  # {table: {partition: next offset to load}}


@dataclass(frozen=True)
class UnloadedData:
    """A warehouse table that has not loaded offsets ``[committed_offset, log_start_offset)``.

    ``newly_lost`` is True when this run makes them unreadable (they were
    still in the log before), False when they were gone already.
    """

    table: str
    partition: int
    committed_offset: int
    log_start_offset: int
    newly_lost: bool

    @property
    def offsets_lost(self) -> int:
        """How many offsets the table will never load (an upper bound on records: compaction)."""
        return self.log_start_offset - self.committed_offset


@dataclass(frozen=True)
class RetentionPlan:
    """What retention would do to one manifest; pure data.

    ``drop`` is the prefix of the manifest's segments to drop, ``reasons`` maps
    each dropped segment id to :data:`REASON_SIZE` or :data:`REASON_TIME`.
    ``new_log_start_offset`` is the base offset of the first kept segment (or
    the current log start offset if that is higher, after delete-records).
    ``capped`` is True when ``protect_unloaded`` kept segments retention
    would have dropped. ``future_segments`` lists the ids of segments whose
    largest timestamp is after ``now_ms``.
    """

    topic: str
    partition: int
    log_start_offset: int
    new_log_start_offset: int
    drop: tuple[SegmentEntry, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)
    unloaded: tuple[UnloadedData, ...] = ()
    capped: bool = False
    future_segments: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the plan moves the log start offset."""
        return self.new_log_start_offset > self.log_start_offset

    @property
    def bytes_dropped(self) -> int:
        return sum(s.size for s in self.drop)


@dataclass(frozen=True)
class RetentionResult:
    """Outcome of :func:`apply_retention` or :func:`delete_records` on one partition.

    ``version`` is the manifest version committed, or None when there was
    nothing to do (then ``dropped`` is empty and both offsets are equal).
    """

    topic: str
    partition: int
    previous_log_start_offset: int
    log_start_offset: int
    high_watermark: int
    dropped: tuple[SegmentEntry, ...] = ()
    version: int | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)
    unloaded: tuple[UnloadedData, ...] = ()
    capped: bool = False
    future_segments: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.version is not None

    @property
    def bytes_dropped(self) -> int:
        return sum(s.size for s in self.dropped)

    @property
    def newly_lost(self) -> tuple[UnloadedData, ...]:
        """The tables that lose never-loaded data because of this run."""
        return tuple(u for u in self.unloaded if u.newly_lost)


# ---------------------------------------------------------------------------
# planning (pure)
# ---------------------------------------------------------------------------

def _anchor(seg: SegmentEntry, now_ms: int, segment_times: Mapping[str, int]) -> int | None:
    """The time a segment's age is measured from, or None if unknown (then it is kept)."""
    ts = seg.max_timestamp
    written = segment_times.get(seg.segment_id)
    if written is not None:
        # A record stamped after its segment was written (a future timestamp) ages from the write.
        return written if ts == NO_TIMESTAMP else min(ts, written)
    return ts if ts != NO_TIMESTAMP and ts <= now_ms else None


def _unloaded(m: Manifest, new_start: int, committed: Mapping[str, int]) -> tuple[UnloadedData, ...]:
    return tuple(UnloadedData(table, m.partition, off, new_start, off >= m.log_start_offset)
                 for table, off in sorted(committed.items()) if off < new_start)


def plan_retention(manifest: Manifest | None, config: TopicConfig, now_ms: int, *,
                   segment_times: Mapping[str, int] | None = None,
                   committed: Mapping[str, int] | None = None,
                   protect_unloaded: bool = False) -> RetentionPlan | None:
    """Plan time- and size-based retention for one partition's manifest (pure).

    ``segment_times`` maps segment ids to the epoch ms their ``.log`` was
    written: a segment's age counts from its largest timestamp, or from its
    write time when that is earlier or the segment has no timestamp (see the
    module docstring). ``committed`` maps warehouse tables to their next
    offset to load from this partition; with ``protect_unloaded`` no segment
    holding an offset some table has not loaded is dropped. Returns None for
    a partition without a manifest.
    """
    if manifest is None:
        return None
    if not isinstance(now_ms, int) or isinstance(now_ms, bool):
        raise ConfigError(f"now_ms must be epoch milliseconds (int), got {now_ms!r}")
    times = segment_times or {}
    committed = dict(committed or {})
    segs = manifest.segments
    future = tuple(s.segment_id for s in segs if s.max_timestamp > now_ms)
    reasons: dict[str, str] = {}
    count = 0
    # The newest segment is never a candidate: at most len - 1 go.
    limit = max(0, len(segs) - 1)
    if config.delete and limit:
        retention_bytes = config.retention_bytes
        if retention_bytes >= 0 and manifest.size >= retention_bytes:
            excess = manifest.size - retention_bytes
            while count < limit and excess - segs[count].size >= 0:
                excess -= segs[count].size
                reasons[segs[count].segment_id] = REASON_SIZE
                count += 1
        retention_ms = config.retention_ms
        if retention_ms >= 0:
            while count < limit:
                anchor = _anchor(segs[count], now_ms, times)
                if anchor is None or now_ms - anchor <= retention_ms:
                    break
                reasons[segs[count].segment_id] = REASON_TIME
                count += 1
    capped = False
    if protect_unloaded and committed and count:
        floor = min(committed.values())
        allowed = 0
        while allowed < count and segs[allowed].next_offset <= floor:
            allowed += 1
        if allowed < count:
            capped = True
            for s in segs[allowed:count]:
                reasons.pop(s.segment_id, None)
            count = allowed
    new_start = manifest.log_start_offset
    if count:
        new_start = max(new_start, segs[count].base_offset)
    return RetentionPlan(
        topic=manifest.topic, partition=manifest.partition,
        log_start_offset=manifest.log_start_offset, new_log_start_offset=new_start,
        drop=tuple(segs[:count]), reasons=reasons,
        unloaded=_unloaded(manifest, new_start, committed), capped=capped,
        future_segments=future)


# ---------------------------------------------------------------------------
# committing
# ---------------------------------------------------------------------------

def segment_write_times(storage: Storage, topic: str, partition: int) -> dict[str, int]:
    """Segment id -> epoch ms its ``.log`` object was last written (one listing; unknown ones left out)."""
    out: dict[str, int] = {}
    prefix = layout.partition_dir(topic, partition)
    for info in storage.list(prefix):
        if info.path.rsplit("/", 1)[0] != prefix or not info.mtime:
            continue
        parsed = layout.parse_segment_name(info.path)
        if parsed and parsed[2] == ".log":
            out[parsed[1]] = int(info.mtime * 1000)
    return out


def _check_partition(storage: Storage, topic: str, partition: int) -> TopicMetadata:
    meta = load_topic(storage, topic)
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < meta.partitions:
        raise UnknownTopicError(
            f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition!r}")
    return meta


def _partition_committed(committed_offsets: CommittedOffsets | None, partition: int) -> dict[str, int]:
    # A table that lists no offset for this partition is not checked for it.
    out = {}
    for table, offsets in (committed_offsets or {}).items():
        if partition in offsets:
            out[table] = int(offsets[partition])
    return out


def _result(base: Manifest | None, new: Manifest | None, plan: RetentionPlan | None,
            topic: str, partition: int, committed: Mapping[str, int]) -> RetentionResult:
    """Result of a commit from ``base`` to ``new`` (None: nothing was committed)."""
    current = new or base
    if current is None:
        return RetentionResult(topic, partition, 0, 0, 0)
    if new is None or base is None or new.version == base.version:
        return RetentionResult(
            topic, partition, current.log_start_offset, current.log_start_offset,
            current.high_watermark,
            unloaded=_unloaded(current, current.log_start_offset, committed),
            capped=bool(plan and plan.capped),
            future_segments=plan.future_segments if plan else ())
    kept = {s.segment_id for s in new.segments}
    dropped = tuple(s for s in base.segments if s.segment_id not in kept)
    return RetentionResult(
        topic, partition, base.log_start_offset, new.log_start_offset, new.high_watermark,
        dropped=dropped, version=new.version,
        reasons={k: v for k, v in (plan.reasons if plan else {}).items()
                 if k in {s.segment_id for s in dropped}},
        unloaded=_unloaded(base, new.log_start_offset, committed),
        capped=bool(plan and plan.capped),
        future_segments=plan.future_segments if plan else ())


def apply_retention(storage: Storage, topic: str, partition: int, now_ms: int, *,
                    config: TopicConfig | None = None,
                    committed_offsets: CommittedOffsets | None = None,
                    protect_unloaded: bool = False, writer: str = "retention",
                    max_attempts: int | None = None) -> RetentionResult:
    """Apply retention to one partition: commit the planned log start advance, if any.

    Plans against the latest manifest and commits an
    :class:`~kafkastore.manifest.AdvanceLogStart` through
    :meth:`ManifestStore.commit`, which re-plans on the newer manifest after
    a conflict; a plan with nothing to drop commits nothing. Hence running it
    twice, or twice at once, ends in the same state: the second run is a
    no-op (``version`` None). ``config`` defaults to the topic's;
    ``committed_offsets`` is ``{table: {partition: next_offset}}`` (see
    :func:`plan_retention`). No file is deleted here: see :mod:`kafkastore.gc`.
    """
    if config is None:
        config = _check_partition(storage, topic, partition).config
    committed = _partition_committed(committed_offsets, partition)
    store = ManifestStore(storage, topic, partition)
    times: dict[str, int] = {}
    seen: dict[str, object] = {}

    def build(m: Manifest | None):
        seen["base"] = m
        if (m is not None and config.delete and config.retention_ms >= 0
                and any(s.segment_id not in times for s in m.segments[:-1])):
            # One listing per run (again only if a conflict brought new segments).
            times.update(segment_write_times(storage, topic, partition))
        plan = plan_retention(m, config, now_ms, segment_times=times, committed=committed,
                              protect_unloaded=protect_unloaded)
        seen["plan"] = plan
        if plan is None or not plan.changed:
            return None
        return [AdvanceLogStart(plan.new_log_start_offset)], []

    new = store.commit(build, operation="retention", writer=writer, now_ms=now_ms,
                       max_attempts=max_attempts)
    return _result(seen.get("base"), new, seen.get("plan"), topic, partition, committed)


def retention_for_topic(storage: Storage, topic: str, now_ms: int, *,
                        committed_offsets: CommittedOffsets | None = None,
                        protect_unloaded: bool = False,
                        writer: str = "retention") -> list[RetentionResult]:
    """:func:`apply_retention` on every partition of ``topic`` (the topic's config), in order."""
    meta = load_topic(storage, topic)
    return [apply_retention(storage, topic, p, now_ms, config=meta.config,
                            committed_offsets=committed_offsets,
                            protect_unloaded=protect_unloaded, writer=writer)
            for p in range(meta.partitions)]


def delete_records(storage: Storage, topic: str, partition: int, before_offset: int, *,
                   committed_offsets: CommittedOffsets | None = None,
                   now_ms: int | None = None, writer: str = "delete-records",
                   max_attempts: int | None = None) -> RetentionResult:
    """Kafka's DeleteRecords: make offsets below ``before_offset`` unreadable.

    The log start offset moves to ``before_offset`` (``-1``: the high
    watermark, as in Kafka's API); reads below it then fail with
    :class:`OffsetOutOfRangeError`. The segment holding ``before_offset``
    stays until the log start passes its end; segments wholly below go (at
    ``before_offset`` equal to the high watermark that is every segment).
    An offset at or below the current log start is a no-op; one above the
    high watermark raises :class:`OffsetOutOfRangeError`. It ignores
    ``cleanup.policy`` (as Kafka does). ``committed_offsets`` only feeds the
    report of unloaded data: an explicit delete is never capped.
    """
    if not isinstance(before_offset, int) or isinstance(before_offset, bool) or before_offset < -1:
        raise ConfigError(f"before_offset must be an offset >= 0 or -1 (the high watermark), "
                          f"got {before_offset!r}")
    _check_partition(storage, topic, partition)
    committed = _partition_committed(committed_offsets, partition)
    store = ManifestStore(storage, topic, partition)
    seen: dict[str, object] = {}

    def build(m: Manifest | None):
        seen["base"] = m
        current = m or Manifest.empty(topic, partition)
        target = current.high_watermark if before_offset == -1 else before_offset
        if target > current.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {topic}/{partition} before offset {target}",
                log_start_offset=current.log_start_offset, high_watermark=current.high_watermark)
        if m is None or target <= current.log_start_offset:
            return None
        return [AdvanceLogStart(target)], []

    new = store.commit(build, operation="delete-records", writer=writer, now_ms=now_ms,
                       max_attempts=max_attempts)
    return _result(seen.get("base"), new, None, topic, partition, committed)
