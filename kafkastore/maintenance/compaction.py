"""Log compaction (DESIGN.md section 6): planning, the scan and the survivors, and the
results. Rewriting the segments and the swap commit are :mod:`.compaction_rewrite`.

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

Differences from Kafka, on purpose: the first uncleanable offset is
segment-aligned; empty batches are not kept for producer state (see above);
the key map is exact (keys, not 16-byte hashes) and never full, so one pass
always covers the whole dirty section.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..format.arrow_decode import decode_to_arrow
from ..format.control import ControlType, parse_control_record
from ..format.extensions import ENABLED, load
from ..format.offset_index import INT32_MAX
from ..format.record_batch import BatchHeader, decode_batch
from ..format.segment_scan import iter_batches
from ..manifest import Manifest, ManifestStore, SegmentEntry
from ..read.reader import PartitionReader, ReadRange, last_stable_offset, read_checked
from ..storage import Storage
from ..topics.admin import load_topic
from ..topics.topic_config import TopicConfig

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

# The C key map (format/native/keymap.c); an extension built before it lacks the function.
_native = load("kafkastore.format._native")
#: Whether the C key map is built (:func:`latest_dirty_offsets`' fast path).
KEY_MAP_NATIVE_AVAILABLE = _native is not None and hasattr(_native, "latest_per_key")
#: The key map :func:`latest_dirty_offsets` runs by default: ``"native"`` or ``"arrow"``.
KEY_MAP_IMPLEMENTATION = "native" if KEY_MAP_NATIVE_AVAILABLE and ENABLED else "arrow"


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
        _with_pid_keys(keys, pids),
        pa.array(np.concatenate([offs, np.full(m, task.group_base, np.int64)])),
        pa.array(np.concatenate([offs >= task.dirty_from, np.zeros(m, bool)])),
        pa.array(np.concatenate([minus, np.array(pids, np.int64)])),
        pa.array(np.concatenate([minus, np.array([last_data.get(p, -1) for p in pids], np.int64)])),
        pa.array(np.concatenate([minus, np.array([last_marker.get(p, -1) for p in pids], np.int64)])),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCAN_SCHEMA)


def _with_pid_keys(keys: pa.Array, pids: list[int]) -> pa.Array:
    """The record keys followed by each producer id as 8 bytes (the keys of the transaction
    rows); the record keys as they are (no copy of their bytes) when there is none."""
    keys = keys.cast(pa.binary())
    if not pids:
        return keys
    return pa.concat_arrays([keys, pa.array([_PID.pack(p) for p in pids], pa.binary())])


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


def latest_dirty_offsets(keys: pa.Array | pa.ChunkedArray, dirty: np.ndarray, offsets: np.ndarray,
                         plans: np.ndarray | None = None, *, native: bool | None = None
                         ) -> np.ndarray:
    """The key map of the survivor rule, per row: the greatest ``offsets`` value over the
    ``dirty`` rows whose key (and ``plans`` value: offsets are unique within one partition
    only) equals the row's, -1 where there is none (int64, one per row of ``keys``).

    Exact: keys are compared by their bytes, never by a hash alone. The C kernel
    (``native``, the default when built) hashes each key into a table whose entries
    point at a representative key, so keys that share a hash are told apart by their
    bytes; the other path (``native=False``, or a null key) encodes the keys against a
    dictionary of their bytes with Arrow. Both give the same answer
    (:func:`survivor_rule` is the reference)."""
    dirty = np.ascontiguousarray(dirty, dtype=np.bool_)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    use_native = (KEY_MAP_IMPLEMENTATION == "native") if native is None else native
    if use_native and KEY_MAP_NATIVE_AVAILABLE and not any(c.null_count for c in chunks):
        return _latest_native(chunks, dirty, offsets, plans)
    return _latest_arrow(keys, dirty, offsets, plans)


def _latest_native(chunks: Sequence[pa.Array], dirty: np.ndarray, offsets: np.ndarray,
                   plans: np.ndarray | None) -> np.ndarray:
    """:func:`latest_dirty_offsets` by the C key map (no copy of the key bytes)."""
    parts = []
    for c in chunks:
        if not pa.types.is_binary(c.type):   # large_binary / string from another producer
            c = c.cast(pa.binary())
        _, offs, data = c.buffers()
        if offs is None:                     # an empty array may come without buffers
            continue
        parts.append((len(c), c.offset, offs, data if data is not None else b""))
    if plans is not None:
        plans = np.ascontiguousarray(plans, dtype=np.int32)
    out = _native.latest_per_key(parts, dirty.view(np.uint8), offsets, plans)
    return np.frombuffer(out, np.int64)


def _latest_arrow(keys: pa.Array | pa.ChunkedArray, dirty: np.ndarray, offsets: np.ndarray,
                  plans: np.ndarray | None) -> np.ndarray:
    """:func:`latest_dirty_offsets` by Arrow: keys encoded against one dictionary of their
    bytes (a code per key, across chunks), the maximum per code by numpy."""
    import pyarrow.compute as pc  # lazy: the fallback path only; importing it costs a few ms

    encoded = pc.dictionary_encode(keys, null_encoding="encode")   # a null key is a key too
    parts = encoded.chunks if isinstance(encoded, pa.ChunkedArray) else [encoded]
    width = max((len(k.dictionary) for k in parts), default=0)
    codes = np.concatenate([k.indices.to_numpy(zero_copy_only=False) for k in parts]
                           or [np.zeros(0, np.int32)]).astype(np.int64)
    groups = 1
    if plans is not None and len(plans):
        uniq, inverse = np.unique(np.asarray(plans), return_inverse=True)
        groups = len(uniq)
        codes += width * inverse.astype(np.int64)
    latest = np.full(width * groups, -1, np.int64)
    np.maximum.at(latest, codes[dirty], offsets[dirty])
    return latest[codes]


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
# results
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


def load_plan(storage: Storage, topic: str, partition: int, now_ms: int, *, force: bool = False,
              config: TopicConfig | None = None) -> tuple[Manifest | None, CleaningPlan | Skip]:
    """The latest manifest of a partition and the plan for it."""
    if config is None:
        config = load_topic(storage, topic).config
    m = ManifestStore(storage, topic, partition).latest()
    return m, plan_cleaning(m, config, now_ms, force=force)


def partition_error(topic: str, partition: int, exc: BaseException, seconds: float = 0.0
                    ) -> PartitionResult:
    """A :class:`PartitionResult` for a partition whose compaction raised ``exc``."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return PartitionResult(topic, partition, STATUS_ERROR, f"{type(exc).__name__}: {first_line}",
                           seconds=seconds)
