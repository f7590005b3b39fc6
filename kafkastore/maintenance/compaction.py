"""Log compaction (DESIGN.md section 6): planning, segment rewriting and the swap commit.

This module holds everything of compaction except the distributed key map,
which is :mod:`pipelines.compaction`'s job (Spark). It never imports pyspark.
Kafka's cleaner (``LogCleanerManager`` + ``Cleaner``) is the model; the
differences are listed at the end.

**Selection** (:func:`plan_cleaning`, pure). A partition of a topic whose
``cleanup.policy`` contains ``compact`` is cut into:

* the *clean* section ``[log start, first dirty)``, with first dirty = the
  manifest's ``cleaner_offset`` (reset to the log start offset when it lies
  outside the log, as Kafka does);
* the *dirty cleanable* section ``[first dirty, first uncleanable)``. The first
  uncleanable offset is the smallest of the base offset of the newest (head)
  segment, the base offset of the first segment at or after first dirty whose
  largest timestamp is younger than ``min.compaction.lag.ms``, and the last
  stable offset (the first offset of the oldest open transaction), rounded
  *down* to a segment boundary. Kafka lets the LSO fall inside a segment; we
  never rewrite the segment holding it at all.

The dirty ratio is dirty bytes / (clean + dirty bytes) over whole segments
below the first uncleanable offset. A partition is cleaned when the ratio is
above ``min.cleanable.dirty.ratio`` (Kafka's strict ``>``), or the oldest
dirty timestamp is older than ``max.compaction.lag.ms``, or some segment below
the first uncleanable offset has a delete horizon that has passed (so expired
tombstones go even when no new data arrives), or when forced.

**Survivors.** As in Kafka, the whole log below the first uncleanable offset
is rewritten against the map key -> greatest offset of the key in the dirty
section. A record at offset ``o`` with key ``k`` survives iff ``k`` is not in
the map or ``o >= map[k]``; records without a key, records of aborted
transactions and records below the log start offset never survive. The map
is built by the caller; this module only needs, per segment group, the
sorted offsets of the survivors (``keep``). :func:`local_survivors` builds
them in one process with a dict (the reference for tests and tiny logs);
:mod:`pipelines.compaction` builds them with Spark without any single-process
map. Both consume the rows of :func:`scan_task` (:data:`SCAN_SCHEMA`).

**Rewrite** (:func:`rewrite_group`). Segments are grouped as Kafka's
``groupSegmentsBySize`` does (total ``.log`` bytes at most ``segment.bytes``,
indexes at most ``segment.index.bytes``, offsets within 2^31-1 of the group's
base) and each group becomes one new segment covering exactly the group's
``[base, next)``. Per batch (Kafka's ``MemoryRecords.filterTo``):

* offsets never change: a rebuilt batch keeps the original base offset and
  last offset delta (so base sequence + delta still gives the producer's last
  sequence), producer id/epoch, base sequence, leader epoch, timestamp type
  and transactional flag; records keep their offsets and timestamps;
* a batch whose records all survive and that needs no new delete horizon is
  copied byte for byte; otherwise it is re-encoded with the topic's codec
  (the batch's own codec under ``compression.type=producer``);
* a batch with no surviving record is dropped, even an idempotent producer's
  last one: kafkastore keeps producer state (sequences, epochs) in the
  manifest, not in the log, so there is nothing to preserve (Kafka keeps
  such empty batches, ``RETAIN_EMPTY``, because it rebuilds producer state
  from the log);
* tombstones (KIP-534): a surviving tombstone in a batch without a delete
  horizon gets one: the batch is rewritten with the delete-horizon attribute
  bit and base timestamp = ``now + delete.retention.ms``. A tombstone in a
  batch whose horizon has passed is removed;
* transactions: data batches of aborted transactions are removed. A
  transaction marker (COMMIT or ABORT control batch) stays as long as any
  data batch of its transaction was in the log when the pass started; the
  first pass that finds none sets the marker's delete horizon, and a later
  pass after that horizon removes it (Kafka's ``CleanedTransactionMetadata``).
  Whether a transaction has data in *earlier groups* comes from the scan
  (``carry``), since groups are rewritten independently.

An all-removed group still needs an entry (the manifest's segments tile the
offsets): it becomes a segment with an empty ``.log`` (and empty indexes),
``record_count`` 0 and timestamps -1. Later passes merge such segments into
their neighbours (their size is 0). The new entry's ``delete_horizon_ms`` is
the earliest delete horizon of the tombstones and markers it still holds (None
if none): the time from which another pass would remove something, which is
what :func:`plan_cleaning` looks at. A single-segment group whose output would
be byte-identical is not rewritten (``GroupResult.entry`` None).

**Swap** (:func:`commit_cleaning`). One manifest commit: a
``ReplaceSegments`` per rewritten group, ``SetCleanerOffset`` (first
uncleanable offset), required ``AssertSegmentsPresent`` on every replaced
segment. Brokers append at the head meanwhile: on a conflict the commit is
rebuilt on the new version as long as the replaced segments are still live;
if compaction or retention removed any of them, the partition is given up and
the uploaded files are left to :mod:`kafkastore.gc`. The same happens when the
rewritten files have become so old that GC may delete them before the commit
lands (half of ``file.delete.delay.ms`` after the first upload). Nothing is
ever deleted here, so readers of older versions keep working.

Differences from Kafka, on purpose: the first uncleanable offset is
segment-aligned; empty batches are not kept for producer state (see above);
the key map is exact (keys, not 16-byte hashes) and never full, so one pass
always covers the whole dirty section.
"""
from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa


from ..clock import Clock, as_clock
from ..format import arrow_encode
from ..format.arrow_decode import decode_to_arrow
from ..format.compression import Compression
from ..format.control import ControlType, parse_control_record
from ..errors import CorruptRecordError, StaleUploadError
from ..manifest import (AssertSegmentsPresent, Manifest, ManifestStore, ReplaceSegments,
                        SegmentEntry, SetCleanerOffset)
from ..format.offset_index import INT32_MAX
from ..read.reader import (PartitionReader, ReadRange, check_range, last_stable_offset, read_checked,
                           whole_segment_range)
from ..format.record_batch import LOG_APPEND_TIME, BatchHeader, decode_batch, encode_batch
from ..format.segment import SegmentBuilder, iter_batches
from ..write.segments import write_segment
from ..storage import Storage
from ..topics.topic_config import TopicConfig
from ..topics.admin import load_topic
from .merge import generation

#: ``SegmentEntry.writer_id`` of segments written by compaction (not a broker).
COMPACTION_WRITER_ID = -1
#: Default byte size of one scan task (a batch-aligned range of a segment).
DEFAULT_SCAN_BYTES = 64 << 20
#: Log bytes decoded at once while rewriting (bounds the Arrow arrays in memory).
REWRITE_CHUNK_BYTES = 16 << 20

STATUS_CLEANED = "cleaned"
STATUS_SKIPPED = "skipped"
STATUS_GAVE_UP = "gave up"
STATUS_ERROR = "error"

# Row kinds in SCAN_SCHEMA.
KIND_RECORD = 0   # a keyed, committed record: (key, offset, dirty)
KIND_TXN = 1      # per (task, producer id): greatest transactional data / marker offsets
KIND_GROUP = 2    # one sentinel per group (added by the job so every group is rewritten)

#: What :func:`scan_task` yields. ``plan``/``grp`` say which partition plan and
#: segment group the row belongs to. Record rows: ``key``, ``offset``, ``dirty``
#: (offset in the dirty section). Transaction rows: ``key`` = the producer id as
#: 8 bytes (so rows of one producer meet in one window partition), ``pid``,
#: ``offset`` = the group's base offset, ``last_data`` / ``last_marker`` = the
#: greatest offset of a transactional data batch / of a COMMIT or ABORT marker
#: of that producer in the task (-1 if none).
SCAN_SCHEMA = pa.schema([
    ("plan", pa.int32()), ("grp", pa.int32()), ("kind", pa.int8()), ("key", pa.binary()),
    ("offset", pa.int64()), ("dirty", pa.bool_()), ("pid", pa.int64()),
    ("last_data", pa.int64()), ("last_marker", pa.int64()),
])
_PID = struct.Struct(">q")


# ---------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CleanContext:
    """What rewriting a partition's groups needs besides the segments (plain, picklable)."""

    topic: str
    partition: int
    log_start_offset: int
    now_ms: int
    delete_retention_ms: int
    codec: str | None                # None: keep each batch's codec (compression.type=producer)
    index_interval_bytes: int
    aborted: tuple[tuple[int, int, int], ...] = ()   # (producer id, first offset, marker offset)


@dataclass(frozen=True)
class GroupSpec:
    """One group of consecutive segments that becomes one new segment."""

    plan: int                          # index of the partition plan in a job
    index: int                         # index of the group (unique within a job)
    segments: tuple[SegmentEntry, ...]

    @property
    def base_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def segment_ids(self) -> tuple[str, ...]:
        return tuple(s.segment_id for s in self.segments)


@dataclass(frozen=True)
class CleaningPlan:
    """What one pass over one partition will do; pure data (see :func:`plan_cleaning`).

    ``groups`` cover every segment in ``[log start, first_uncleanable_offset)``
    in order; ``reason`` says why the partition is cleaned.
    """

    context: CleanContext
    manifest_version: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    groups: tuple[tuple[SegmentEntry, ...], ...]
    clean_bytes: int
    dirty_bytes: int
    reason: str
    file_delete_delay_ms: int = 60_000

    @property
    def topic(self) -> str:
        return self.context.topic

    @property
    def partition(self) -> int:
        return self.context.partition

    @property
    def dirty_ratio(self) -> float:
        return dirty_ratio(self.clean_bytes, self.dirty_bytes)

    @property
    def segments(self) -> tuple[SegmentEntry, ...]:
        return tuple(s for g in self.groups for s in g)


@dataclass(frozen=True)
class Skip:
    """A partition :func:`plan_cleaning` leaves alone, and why."""

    reason: str
    dirty_ratio: float = 0.0
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0


def dirty_ratio(clean_bytes: int, dirty_bytes: int) -> float:
    """Kafka's cleanable ratio: dirty / (clean + dirty), 0 for an empty log."""
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total else 0.0


def cleanable_offsets(m: Manifest, config: TopicConfig, now_ms: int) -> tuple[int, int, str]:
    """``(first_dirty, first_uncleanable, limit)`` of a non-empty manifest (Kafka's ``cleanableOffsets``).

    ``first_uncleanable`` is a segment base offset (see the module docstring);
    ``limit`` names what set it: ``"head segment"``, ``"min.compaction.lag.ms"``
    or ``"open transaction at offset N"``.
    """
    first_dirty = m.cleaner_offset
    if not m.log_start_offset <= first_dirty <= m.high_watermark:
        first_dirty = m.log_start_offset
    head = m.segments[-1]
    candidates = [(head.base_offset, "head segment")]
    lso = last_stable_offset(m)
    if lso < m.high_watermark:
        candidates.append((lso, f"open transaction at offset {lso}"))
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in m.segments[:-1]:
            if seg.next_offset > first_dirty and seg.max_timestamp > now_ms - lag:
                candidates.append((seg.base_offset, "min.compaction.lag.ms"))
                break
    offset, limit = min(candidates)
    seg = m.segment_for(offset)
    if seg is not None:
        offset = seg.base_offset  # never rewrite the segment the limit falls into
    return first_dirty, offset, limit


def group_segments_by_size(segments: Sequence[SegmentEntry], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[tuple[SegmentEntry, ...]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose ``.log`` bytes add up to at most
    ``max_size`` and whose indexes to at most ``max_index_size``, all offsets within 2^31-1 of the
    group's base (relative offsets in the indexes are int32)."""
    groups: list[tuple[SegmentEntry, ...]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, index, tindex = segments[i].size, segments[i].index_size, segments[i].timeindex_size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = nxt.next_offset - 1 if nxt.next_offset <= first_uncleanable_offset \
                else first_uncleanable_offset - 1
            if (size + nxt.size > max_size or index + nxt.index_size > max_index_size
                    or tindex + nxt.timeindex_size > max_index_size
                    or (nxt.size and last - group[0].base_offset > INT32_MAX)):
                break
            group.append(nxt)
            size += nxt.size
            index += nxt.index_size
            tindex += nxt.timeindex_size
            i += 1
        groups.append(tuple(group))
    return groups


def plan_cleaning(m: Manifest | None, config: TopicConfig, now_ms: int, *,
                  force: bool = False) -> CleaningPlan | Skip:
    """Decide whether and what to clean in one partition (pure; see the module docstring).

    ``m`` is the partition's latest manifest (None: no commit yet). Returns a
    :class:`CleaningPlan`, or a :class:`Skip` with the reason.
    """
    if not config.compact:
        return Skip(f"cleanup.policy={','.join(config.cleanup_policy)} has no compact")
    if m is None or not m.segments:
        return Skip("empty partition")
    first_dirty, first_uncleanable, limit = cleanable_offsets(m, config, now_ms)
    cleanable = [s for s in m.segments if s.next_offset <= first_uncleanable]
    clean = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in cleanable if s.next_offset > first_dirty)
    ratio = dirty_ratio(clean, dirty)
    if not cleanable:
        return Skip(f"nothing below the {limit}", ratio, first_dirty, first_uncleanable)
    min_ratio = config.min_cleanable_dirty_ratio
    dirty_stamps = [s.min_timestamp for s in m.segments[:-1]
                    if s.next_offset > first_dirty and s.min_timestamp > 0]
    expired = [s for s in cleanable
               if s.delete_horizon_ms is not None and s.delete_horizon_ms <= now_ms]
    if force:
        reason = "forced"
    elif dirty and ratio > min_ratio:
        reason = f"dirty ratio {ratio:.3f} > min.cleanable.dirty.ratio {min_ratio}"
    elif dirty and dirty_stamps and min(dirty_stamps) < now_ms - config.max_compaction_lag_ms:
        reason = "max.compaction.lag.ms passed"
    elif expired:
        reason = f"delete horizon passed in {len(expired)} segment(s)"
    else:
        why = (f"dirty ratio {ratio:.3f} <= min.cleanable.dirty.ratio {min_ratio}" if dirty
               else f"no dirty data below the {limit}")
        return Skip(why, ratio, first_dirty, first_uncleanable)
    groups = group_segments_by_size(cleanable, config.segment_bytes, config.segment_index_bytes,
                                    first_uncleanable)
    ctx = CleanContext(
        topic=m.topic, partition=m.partition, log_start_offset=m.log_start_offset, now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms, codec=config.compression_codec,
        index_interval_bytes=config.index_interval_bytes,
        aborted=tuple(t for s in m.segments for t in s.aborted_txns))
    return CleaningPlan(ctx, m.version, first_dirty, first_uncleanable, tuple(groups), clean, dirty,
                        reason, file_delete_delay_ms=config.file_delete_delay_ms)


# ---------------------------------------------------------------------------
# scanning: the rows the key map is built from
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScanTask:
    """One batch-aligned byte range of one segment, to be read into :data:`SCAN_SCHEMA` rows."""

    plan: int
    group: int
    group_base: int
    dirty_from: int
    range: ReadRange


def group_specs(plans: Sequence[CleaningPlan]) -> list[GroupSpec]:
    """The groups of several plans, numbered consecutively across them."""
    out = []
    for p, plan in enumerate(plans):
        for segs in plan.groups:
            out.append(GroupSpec(p, len(out), segs))
    return out


def scan_tasks(storage: Storage, plans: Sequence[CleaningPlan], groups: Sequence[GroupSpec],
               manifests: Sequence[Manifest], *, max_bytes: int = DEFAULT_SCAN_BYTES) -> list[ScanTask]:
    """Read ranges covering ``[log start, first uncleanable)`` of every plan, tagged with their group.

    Ranges come from :meth:`PartitionReader.plan` on the planned manifest, so
    they carry the aborted transactions a read_committed decode needs.
    """
    by_segment = {(g.plan, s.segment_id): g for g in groups for s in g.segments}
    tasks = []
    for p, (plan, m) in enumerate(zip(plans, manifests)):
        reader = PartitionReader(storage, plan.topic, plan.partition, manifest=m)
        ids = {s.base_offset: s.segment_id for s in m.segments}
        for rr in reader.plan(m.log_start_offset, plan.first_uncleanable_offset, max_bytes=max_bytes):
            g = by_segment[(p, ids[rr.base_offset])]
            tasks.append(ScanTask(p, g.index, g.base_offset, plan.first_dirty_offset, rr))
    return tasks


def scan_task(storage: Storage, task: ScanTask) -> pa.RecordBatch:
    """The :data:`SCAN_SCHEMA` rows of one task: keyed committed records, and per producer
    the greatest offsets of its transactional data batches and markers (see :data:`SCAN_SCHEMA`)."""
    rr = task.range
    data = read_checked(storage, rr)  # checked against the manifest entry, as every reader
    rb = decode_to_arrow(data, topic=rr.topic, partition=rr.partition, start_offset=rr.start_offset,
                         end_offset=rr.end_offset, aborted=rr.aborted, include_headers=False,
                         segment=f"{rr.path}@{rr.byte_start}", base_position=rr.byte_start)
    keys, offsets = rb.column("key"), rb.column("offset")
    if keys.null_count:
        mask = keys.is_valid()
        keys, offsets = keys.filter(mask), offsets.filter(mask)
    n = len(keys)
    offs = offsets.to_numpy(zero_copy_only=False)
    last_data: dict[int, int] = {}
    last_marker: dict[int, int] = {}
    for pos, h in iter_batches(data, verify_crc=False):  # CRCs were checked by the decode
        if h.last_offset < rr.start_offset or h.base_offset >= rr.end_offset:
            continue
        if h.is_control:
            if _marker_type(data, pos, h) is not None:
                last_marker[h.producer_id] = max(last_marker.get(h.producer_id, -1), h.base_offset)
        elif h.is_transactional:
            last_data[h.producer_id] = max(last_data.get(h.producer_id, -1), h.last_offset)
    pids = sorted(set(last_data) | set(last_marker))
    m = len(pids)
    minus = np.full(n, -1, dtype=np.int64)
    columns = [
        pa.array(np.full(n + m, task.plan, dtype=np.int32)),
        pa.array(np.full(n + m, task.group, dtype=np.int32)),
        pa.array(np.concatenate([np.full(n, KIND_RECORD, np.int8), np.full(m, KIND_TXN, np.int8)])),
        pa.concat_arrays([keys.cast(pa.binary()), pa.array([_PID.pack(p) for p in pids], pa.binary())]),
        pa.array(np.concatenate([offs, np.full(m, task.group_base, np.int64)])),
        pa.array(np.concatenate([offs >= task.dirty_from, np.zeros(m, bool)])),
        pa.array(np.concatenate([minus, np.array(pids, np.int64)])),
        pa.array(np.concatenate([minus, np.array([last_data.get(p, -1) for p in pids], np.int64)])),
        pa.array(np.concatenate([minus, np.array([last_marker.get(p, -1) for p in pids], np.int64)])),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCAN_SCHEMA)


def _marker_type(buf, pos: int, h: BatchHeader) -> ControlType | None:
    """COMMIT or ABORT for a transaction marker batch, None for anything else (or an empty one)."""
    _, records = decode_batch(buf, pos, verify_crc=False)
    if not records:
        return None
    ctype = parse_control_record(records[0].key)
    return ctype if ctype in (ControlType.ABORT, ControlType.COMMIT) else None


def survivor_rule(rows: Iterable[dict[str, list]]) -> tuple[dict[int, list[int]],
                                                            dict[int, set[int]]]:
    """The survivor rule over :data:`SCAN_SCHEMA` rows (column dicts, as
    ``Table.to_pydict`` gives them) in plain Python, holding the whole key map:
    ``({group: survivor offsets}, {group: producer ids whose transaction has data in
    earlier groups})``, groups without any left out. The reference the Spark job's
    vectorised rule is tested against."""
    rows = list(rows)
    key_max: dict[tuple[int, bytes], int] = {}
    for r in rows:
        for plan, kind, key, off, dirty in zip(r["plan"], r["kind"], r["key"], r["offset"], r["dirty"]):
            if kind == KIND_RECORD and dirty:
                k = (plan, key)
                if off > key_max.get(k, -1):
                    key_max[k] = off
    keep: dict[int, list[int]] = {}
    txn: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    for r in rows:
        for plan, grp, kind, key, off, pid, ld, lm in zip(
                r["plan"], r["grp"], r["kind"], r["key"], r["offset"], r["pid"],
                r["last_data"], r["last_marker"]):
            if kind == KIND_RECORD:
                if off >= key_max.get((plan, key), -1):
                    keep.setdefault(grp, []).append(off)
            else:
                txn.setdefault((plan, pid), []).append((off, grp, ld, lm))
    carry: dict[int, set[int]] = {}
    for (plan, pid), events in txn.items():
        for off, grp, _, _ in events:
            earlier = [(ld, lm) for o, _, ld, lm in events if o < off]
            if earlier and max(e[0] for e in earlier) > max(e[1] for e in earlier):
                carry.setdefault(grp, set()).add(pid)
    return keep, carry


def local_survivors(storage: Storage, plans: Sequence[CleaningPlan], groups: Sequence[GroupSpec],
                    tasks: Sequence[ScanTask]) -> tuple[dict[int, np.ndarray], dict[int, set[int]]]:
    """Survivor offsets and transaction carries per group, computed in this process.

    The reference for :mod:`pipelines.compaction` (same rows, same rule) and
    the way to compact tiny logs without Spark: it holds the dirty section's
    whole key map in a dict, so it is for tests and small partitions only.
    Returns ``({group: sorted keep offsets}, {group: producer ids whose
    transaction has data in earlier groups})``.
    """
    keep, carry = survivor_rule(scan_task(storage, t).to_pydict() for t in tasks)
    keep = {g.index: keep.get(g.index, []) for g in groups}
    carry = {g.index: carry.get(g.index, set()) for g in groups}
    return {g: np.array(sorted(v), dtype=np.int64) for g, v in keep.items()}, carry


# ---------------------------------------------------------------------------
# rewriting one group
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupResult:
    """What rewriting one group produced. ``entry`` is None when the group was left as it is."""

    group: int
    replaced: tuple[str, ...]
    entry: SegmentEntry | None
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    uploaded_ms: int | None = None   # wall time of the first upload (None: nothing uploaded)

    def to_json(self) -> str:
        """Compact JSON (how executors hand results to the driver)."""
        d = asdict(self)
        d["entry"] = self.entry.to_dict() if self.entry else None
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "GroupResult":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        d["replaced"] = tuple(d["replaced"])
        d["entry"] = SegmentEntry.from_dict(d["entry"]) if d["entry"] else None
        return cls(**d)


class _TxnState:
    """Which producers have transactional data seen since their last marker (this pass)."""

    def __init__(self, aborted: Iterable[tuple[int, int, int]], carry: Iterable[int]):
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in aborted:
            self.aborted.setdefault(pid, []).append((first, last))
        self.has_data = {pid: True for pid in carry}

    def data_batch(self, h: BatchHeader) -> bool:
        """Note a data batch; True if it belongs to an aborted transaction."""
        if not h.is_transactional:
            return False
        self.has_data[h.producer_id] = True
        return any(first <= h.base_offset <= last for first, last in self.aborted.get(h.producer_id, ()))

    def marker(self, h: BatchHeader) -> bool:
        """A COMMIT/ABORT marker: True if its transaction still had data (the marker must stay)."""
        return self.has_data.pop(h.producer_id, False)


def _clock(clock, storage: Storage | None) -> Clock:
    """The clock to read: ``clock`` if given (an old bare callable reads wall seconds), else
    the storage's."""
    if clock is not None:
        return as_clock(clock, "s")
    return storage.clock if storage is not None else as_clock(None)


def rewrite_group(storage: Storage, ctx: CleanContext, group: GroupSpec, keep: np.ndarray,
                  carry: Iterable[int] = (), *, clock: Clock | Callable[[], float] | None = None,
                  upload: bool = True) -> GroupResult:
    """Rewrite one group of segments into one new segment and upload it (unless unchanged).

    ``keep`` holds the sorted offsets of the surviving keyed records of the
    group (see the module docstring for every other rule); ``carry`` the
    producer ids whose transaction has data in earlier groups. Source
    segments are checked against their manifest size and checksum and every
    batch's CRC. Returns the new entry (not committed: see
    :func:`commit_cleaning`). ``clock`` (a :class:`~kafkastore.clock.Clock`, default the storage's; an old bare callable
    reads wall seconds) stamps the upload time.
    """
    clock = _clock(clock, storage)
    keep = np.asarray(keep, dtype=np.int64)
    txns = _TxnState(ctx.aborted, carry)
    builder = SegmentBuilder(group.base_offset, index_interval_bytes=ctx.index_interval_bytes,
                             verify_crc=False)
    codec = Compression.parse(ctx.codec) if ctx.codec is not None else None
    horizons: list[int] = []         # delete horizons of what still awaits removal
    kept_markers: set[int] = set()
    changed = len(group.segments) != 1
    records_in = 0
    for seg in group.segments:
        records_in += seg.record_count
        name = seg.paths(ctx.topic, ctx.partition)[".log"]
        log = storage.get(name)
        check_range(whole_segment_range(ctx.topic, ctx.partition, seg), log)
        for chunk_start, batches in _chunks(log, name):
            chunk = memoryview(log)[chunk_start:batches[-1][0] + batches[-1][1].size]
            cols = _decode_chunk(chunk, ctx, name, chunk_start)
            row = 0
            for pos, h in batches:
                out, row = _filter_batch(log, pos, h, cols, row, keep, ctx, codec, txns,
                                         horizons, kept_markers)
                if out is None:
                    changed = True
                    continue
                data, min_ts, rebuilt = out
                changed |= rebuilt
                builder.append(data, min_timestamp=min_ts)
    built = builder.build()
    horizon = min(horizons) if horizons else None
    source = group.segments[0]
    if not changed and horizon == source.delete_horizon_ms:
        return GroupResult(group.index, group.segment_ids, None, records_in, records_in,
                           source.size, source.size)
    st = built.stats
    uploaded = clock.wall_ms() if upload else None
    # The rewrite keeps the whole file set of the segments it replaces (empty indexes too).
    entry = write_segment(
        storage if upload else None, ctx.topic, ctx.partition, st, built.log, built.index,
        built.timeindex, writer_id=COMPACTION_WRITER_ID,
        leader_epoch=max(s.leader_epoch for s in group.segments), next_offset=group.next_offset,
        aborted_txns=tuple(t for s in group.segments for t in s.aborted_txns if t[2] in kept_markers),
        delete_horizon_ms=horizon, empty_indexes=True)
    return GroupResult(group.index, group.segment_ids, entry, records_in, st.record_count,
                       sum(s.size for s in group.segments), len(built.log), uploaded)


def _chunks(log: bytes, name: str) -> Iterator[tuple[int, list[tuple[int, BatchHeader]]]]:
    """Batch-aligned runs of about :data:`REWRITE_CHUNK_BYTES` (CRCs checked)."""
    run: list[tuple[int, BatchHeader]] = []
    start = 0
    for pos, h in iter_batches(log, verify_crc=True, segment=name):
        if not run:
            start = pos
        run.append((pos, h))
        if pos + h.size - start >= REWRITE_CHUNK_BYTES:
            yield start, run
            run = []
    if run:
        yield start, run


class _Columns:
    """Decoded data records of a chunk, as numpy arrays plus the Arrow columns for rebuilding."""

    def __init__(self, rb: pa.RecordBatch):
        self.rb = rb
        self.offsets = rb.column("offset").to_numpy(zero_copy_only=False)
        ts = rb.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
        self.timestamps = np.floor_divide(ts, 1000)   # Arrow holds microseconds
        self.tombstone = rb.column("value").is_null().to_numpy(zero_copy_only=False)
        self.keyed = rb.column("key").is_valid().to_numpy(zero_copy_only=False)
        self._prepared = None

    def encodable(self) -> arrow_encode.Columns:
        """Key, value and headers flattened for the encoder (once per chunk, when needed)."""
        if self._prepared is None:
            self._prepared = arrow_encode.prepare(self.rb.select(["key", "value", "headers"]))
        return self._prepared


def _decode_chunk(chunk, ctx: CleanContext, name: str, position: int) -> _Columns:
    # Every data record, aborted ones included (they are dropped batch by batch),
    # so rows line up with the batches' record counts.
    rb = decode_to_arrow(chunk, topic=ctx.topic, partition=ctx.partition, include_headers=True,
                         verify_crc=False, segment=name, base_position=position)
    return _Columns(rb)


def _horizon(ctx: CleanContext) -> int:
    """The delete horizon a pass sets: now + delete.retention.ms, within int64 (the batch field)."""
    return min(ctx.now_ms + ctx.delete_retention_ms, (1 << 63) - 1)


def _filter_batch(log: bytes, pos: int, h: BatchHeader, cols: _Columns, row: int, keep: np.ndarray,
                  ctx: CleanContext, codec: Compression | None, txns: _TxnState,
                  horizons: list[int], kept_markers: set[int]):
    """``((bytes, min timestamp, rebuilt) or None if dropped, next row)`` for one batch."""
    now = ctx.now_ms
    original = log[pos:pos + h.size]
    if h.is_control:
        hz = h.delete_horizon_ms
        ctype = _marker_type(log, pos, h)
        if ctype is None:
            if h.record_count == 0:
                return None, row          # an empty control batch: already cleaned, Kafka drops it
            return (original, -1, False), row  # other control records are kept as they are
        had_data = txns.marker(h)
        if h.last_offset < ctx.log_start_offset:
            return None, row
        if had_data:                      # its transaction still had data: keep it, no horizon
            kept_markers.add(h.base_offset)
            return (original, -1, False), row
        if hz is not None and now >= hz:
            return None, row
        kept_markers.add(h.base_offset)
        if hz is not None:
            horizons.append(hz)
            return (original, -1, False), row
        _, recs = decode_batch(log, pos, verify_crc=False)
        hz = _horizon(ctx)
        horizons.append(hz)
        data = encode_batch(recs, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                            base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
                            timestamp_type=h.timestamp_type, transactional=h.is_transactional,
                            control=True, base_offset=h.base_offset, last_offset=h.last_offset,
                            delete_horizon_ms=hz, max_timestamp=h.max_timestamp)
        return (data, -1, True), row

    n = h.record_count
    lo, row = row, row + n
    if n and not (cols.offsets[lo] >= h.base_offset and cols.offsets[row - 1] <= h.last_offset):
        raise CorruptRecordError("decoded records do not line up with their batch",
                                 offset=h.base_offset, position=pos)
    if txns.data_batch(h) or n == 0:
        return None, row                  # aborted transaction, or an empty batch
    offs = cols.offsets[lo:row]
    i = np.searchsorted(keep, offs)
    survives = (i < len(keep)) & (keep[np.minimum(i, len(keep) - 1)] == offs) if len(keep) else \
        np.zeros(n, bool)
    survives &= cols.keyed[lo:row]
    tomb = cols.tombstone[lo:row]
    hz = h.delete_horizon_ms
    if hz is not None and now >= hz:
        survives &= ~tomb                 # tombstones past their delete horizon go
    count = int(survives.sum())
    if count == 0:
        return None, row
    kept_tombstones = bool((tomb & survives).any())
    ts = cols.timestamps[lo:row][survives]
    stamped = ts[ts >= 0]
    min_ts = int(stamped.min()) if len(stamped) else -1
    if count == n and not (kept_tombstones and hz is None):
        if kept_tombstones:
            horizons.append(hz)
        return (original, min_ts, False), row
    if kept_tombstones and hz is None:
        hz = _horizon(ctx)
    if kept_tombstones:
        horizons.append(hz)
    # The survivors are encoded straight from the decoded Arrow buffers (C encoder), the
    # same bytes encode_batch gives for the same records.
    idx = np.nonzero(survives)[0] + lo
    log_append = h.timestamp_type == LOG_APPEND_TIME
    data = arrow_encode.encode_rows(
                        cols.encodable(), 0, len(idx), rows=idx, offsets=cols.offsets[idx],
                        timestamps=cols.timestamps[idx],
                        compression=codec if codec is not None else h.compression,
                        timestamp_type=h.timestamp_type, producer_id=h.producer_id,
                        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                        partition_leader_epoch=h.partition_leader_epoch,
                        transactional=h.is_transactional, base_offset=h.base_offset,
                        last_offset=h.last_offset, delete_horizon_ms=hz,
                        max_timestamp=h.max_timestamp if log_append else None)
    return (data, min_ts, True), row


# ---------------------------------------------------------------------------
# the swap
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CommitOutcome:
    """Result of :func:`commit_cleaning`: the new manifest, or None and why it gave up."""

    manifest: Manifest | None
    reason: str = ""


def _live_ids_of_group(m: Manifest | None, group: Sequence[SegmentEntry],
                       planned: Sequence[str]) -> tuple[str, ...] | None:
    """The live segments that now hold exactly the offsets of a planned ``group``, or None.

    The planned ones while all are live. Otherwise only a merge may have touched them
    (:mod:`kafkastore.merge` never changes bytes or offsets, and its ids carry a
    generation above 0): the live segments covering the group's range must start and end at its
    bounds and be planned or merged ones. Anything else (retention, another compaction,
    a merge across the group's bounds) is None: the rewrite no longer fits.
    """
    if m is None:
        return None
    live = set(m.segment_ids())
    if all(i in live for i in planned):
        return tuple(planned)
    lo, hi = group[0].base_offset, group[-1].next_offset
    cover = [s for s in m.segments if s.next_offset > lo and s.base_offset < hi]
    known = set(planned)
    if (not cover or cover[0].base_offset != lo or cover[-1].next_offset != hi
            or any(s.segment_id not in known and not generation(s.segment_id) for s in cover)):
        return None
    return tuple(s.segment_id for s in cover)


def commit_cleaning(storage: Storage, plan: CleaningPlan, results: Sequence[GroupResult], *,
                    clock: Clock | Callable[[], float] | None = None, writer: str = "compaction",
                    max_attempts: int | None = None) -> CommitOutcome:
    """Swap the rewritten groups in with one manifest commit (see the module docstring).

    Rebuilds the commit on the latest version after each conflict (brokers
    append meanwhile); gives up, leaving the uploaded files to GC, when a
    replaced segment is no longer live or when the files are older than half
    of ``file.delete.delay.ms`` by ``clock`` (wall seconds). Never deletes.
    """
    clock = _clock(clock, storage)
    changed = [r for r in sorted(results, key=lambda r: r.group) if r.entry is not None]
    ids = tuple(i for r in results for i in r.replaced)
    uploads = [r.uploaded_ms for r in changed if r.uploaded_ms is not None]
    first_upload = min(uploads) if uploads else None
    why: dict[str, str] = {}
    # Group numbers are unique within a job, not indexes into this plan: find groups by ids.
    planned = {s.segment_id: s for s in plan.segments}

    def build(m: Manifest | None):
        # A merge may have concatenated segments of a group meanwhile (same bytes, same
        # offsets): the group's rewrite then replaces the merged segments instead.
        current = {r.group: _live_ids_of_group(m, [planned[i] for i in r.replaced], r.replaced)
                   for r in results}
        missing = [r for r in results if current[r.group] is None]
        if missing:
            why["reason"] = (f"{sum(len(r.replaced) for r in missing)} of the {len(ids)} cleaned "
                             f"segments were replaced or removed meanwhile (compaction or "
                             f"retention); files left to GC")
            return None
        if first_upload is not None and clock.wall_ms() - first_upload > plan.file_delete_delay_ms / 2:
            why["reason"] = ("the rewrite took longer than half of file.delete.delay.ms "
                             f"({plan.file_delete_delay_ms} ms): GC may delete the new files; "
                             "raise file.delete.delay.ms for this topic")
            return None
        updates = [ReplaceSegments(current[r.group], (r.entry,)) for r in changed]
        updates.append(SetCleanerOffset(max(m.cleaner_offset, plan.first_uncleanable_offset)))
        return updates, [AssertSegmentsPresent(tuple(i for r in results for i in current[r.group]))]

    store = ManifestStore(storage, plan.topic, plan.partition)
    try:
        new = store.commit(build, operation="compaction", writer=writer, now_ms=clock.wall_ms(),
                           max_attempts=max_attempts)
    except StaleUploadError as exc:
        return CommitOutcome(None, f"{exc}; files left to GC (raise file.delete.delay.ms or "
                                   f"compact smaller groups)")
    if "reason" in why:
        return CommitOutcome(None, why["reason"])
    return CommitOutcome(new)


# ---------------------------------------------------------------------------
# results and the one-process driver
# ---------------------------------------------------------------------------

@dataclass
class PartitionResult:
    """Outcome of compacting one partition (one row of :class:`CompactionReport`)."""

    topic: str
    partition: int
    status: str                     # cleaned | skipped | gave up | error
    reason: str = ""
    dirty_ratio: float = 0.0
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    segments_in: int = 0
    segments_out: int = 0
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    version: int | None = None      # the manifest version committed

    @property
    def cleaned(self) -> bool:
        return self.status == STATUS_CLEANED


@dataclass
class CompactionReport:
    """Per-partition results of one compaction run of a topic."""

    topic: str
    partitions: list[PartitionResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no partition ended in an error."""
        return all(r.status != STATUS_ERROR for r in self.partitions)

    def result(self, partition: int) -> PartitionResult:
        """The result of one partition (KeyError if it was not part of the run)."""
        for r in self.partitions:
            if r.partition == partition:
                return r
        raise KeyError(partition)

    def render(self) -> str:
        """A plain-text table, one line per partition, then totals."""
        head = (f"{'part':>4} {'status':<8} {'ratio':>6} {'segs in>out':>11} {'records in>out':>21} "
                f"{'bytes in>out':>23} {'secs':>6}  reason")
        lines = [f"compaction of topic {self.topic!r}", head]
        for r in sorted(self.partitions, key=lambda r: r.partition):
            lines.append(
                f"{r.partition:>4} {r.status:<8} {r.dirty_ratio:>6.3f} "
                f"{f'{r.segments_in}>{r.segments_out}':>11} {f'{r.records_in}>{r.records_out}':>21} "
                f"{f'{r.bytes_in}>{r.bytes_out}':>23} {r.seconds:>6.2f}  {r.reason}")
        cleaned = [r for r in self.partitions if r.cleaned]
        lines.append(f"{len(cleaned)} of {len(self.partitions)} partitions cleaned, "
                     f"{sum(r.records_in for r in cleaned)} -> {sum(r.records_out for r in cleaned)} "
                     f"records, {sum(r.bytes_in for r in cleaned)} -> "
                     f"{sum(r.bytes_out for r in cleaned)} bytes in {self.seconds:.2f} s")
        return "\n".join(lines)


def skipped_result(topic: str, partition: int, skip: Skip, seconds: float = 0.0) -> PartitionResult:
    """The :class:`PartitionResult` of a partition :func:`plan_cleaning` skipped."""
    return PartitionResult(topic, partition, STATUS_SKIPPED, skip.reason, skip.dirty_ratio,
                           skip.first_dirty_offset, skip.first_uncleanable_offset, seconds=seconds)


def finish_partition(storage: Storage, plan: CleaningPlan, results: Sequence[GroupResult],
                     started: float, *, clock: Clock | Callable[[], float] | None = None) -> PartitionResult:
    """Commit one partition's rewritten groups and summarise the outcome (``started``: the
    clock's monotonic seconds when the partition's work began)."""
    clock = _clock(clock, storage)
    outcome = commit_cleaning(storage, plan, results, clock=clock)
    res = PartitionResult(
        plan.topic, plan.partition, STATUS_CLEANED if outcome.manifest else STATUS_GAVE_UP,
        plan.reason if outcome.manifest else outcome.reason, plan.dirty_ratio,
        plan.first_dirty_offset, plan.first_uncleanable_offset,
        segments_in=sum(len(r.replaced) for r in results),
        segments_out=sum(1 if r.entry is not None else len(r.replaced) for r in results),
        records_in=sum(r.records_in for r in results), records_out=sum(r.records_out for r in results),
        bytes_in=sum(r.bytes_in for r in results), bytes_out=sum(r.bytes_out for r in results),
        version=outcome.manifest.version if outcome.manifest else None)
    res.seconds = clock.monotonic_s() - started
    return res


def load_plan(storage: Storage, topic: str, partition: int, now_ms: int, *, force: bool = False,
              config: TopicConfig | None = None) -> tuple[Manifest | None, CleaningPlan | Skip]:
    """The latest manifest of a partition and the plan for it."""
    if config is None:
        config = load_topic(storage, topic).config
    m = ManifestStore(storage, topic, partition).latest()
    return m, plan_cleaning(m, config, now_ms, force=force)


def compact_partition_local(storage: Storage, topic: str, partition: int, now_ms: int, *,
                            force: bool = False, clock: Clock | Callable[[], float] | None = None,
                            scan_bytes: int = DEFAULT_SCAN_BYTES) -> PartitionResult:
    """Compact one partition in this process (:func:`local_survivors`: a dict key map).

    The reference implementation for tests and tiny logs; use
    :func:`pipelines.compaction.compact_partition` for real ones.
    """
    clock = _clock(clock, storage)
    started = clock.monotonic_s()
    m, plan = load_plan(storage, topic, partition, now_ms, force=force)
    if isinstance(plan, Skip):
        return skipped_result(topic, partition, plan, clock.monotonic_s() - started)
    groups = group_specs([plan])
    tasks = scan_tasks(storage, [plan], groups, [m], max_bytes=scan_bytes)
    keep, carry = local_survivors(storage, [plan], groups, tasks)
    results = [rewrite_group(storage, plan.context, g, keep[g.index], carry[g.index], clock=clock)
               for g in groups]
    return finish_partition(storage, plan, results, started, clock=clock)


def partition_error(topic: str, partition: int, exc: BaseException, seconds: float = 0.0
                    ) -> PartitionResult:
    """A :class:`PartitionResult` for a partition whose compaction raised ``exc``."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return PartitionResult(topic, partition, STATUS_ERROR, f"{type(exc).__name__}: {first_line}",
                           seconds=seconds)
