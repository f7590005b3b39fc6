"""Log compaction's rewriting of segment groups and its swap commit (DESIGN.md section 6);
the planning, the scan and the survivors are :mod:`kafkastore.maintenance.compaction`.

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
* a create-time batch whose records all survive (every offset of it is in
  ``keep`` and no delete horizon of it has passed) is not decoded to Arrow: one C
  walk over its decompressed records checks them and finds its tombstones
  (:func:`_keep_whole`). Without a tombstone, or with a horizon already, it is
  copied byte for byte; a first horizon rewrites each record's timestamp delta
  against it and compresses the records again (the same bytes the decode and
  re-encode give);
* only batches that can keep a record are decoded: which data batches hold a
  survivor offset is known from their headers and ``keep``; a stretch of at
  least :data:`REWRITE_SKIP_BYTES` of batches without one is dropped without
  being decoded (shorter gaps are decoded with the batches around them);
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
"""
from __future__ import annotations

import json
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ..clock import Clock, as_clock
from ..errors import CompressionError, CorruptRecordError, StaleUploadError
from ..format import arrow_encode
from ..format.arrow_decode import decode_to_arrow
from ..format.compression import Compression, decompress
from ..format.extensions import use
from ..format.record_batch import (CREATE_TIME, HEADER_SIZE, LOG_APPEND_TIME, BatchHeader,
                                   assemble_batch, decode_batch, encode_batch)
from ..format.segment_build import SegmentBuilder
from ..format.segment_scan import iter_batches
from ..manifest import (AssertSegmentsPresent, Manifest, ManifestStore, ReplaceSegments, SegmentEntry,
                        SetCleanerOffset)
from ..read.reader import check_range, whole_segment_range
from ..storage import Storage
from ..write.segments import write_segment
from .compaction import (COMPACTION_WRITER_ID, DEFAULT_SCAN_BYTES, REWRITE_CHUNK_BYTES,
                         STATUS_CLEANED, STATUS_GAVE_UP, CleanContext, CleaningPlan, GroupSpec,
                         PartitionResult, Skip, _marker_type, group_specs, load_plan,
                         local_survivors, scan_tasks, skipped_result)
from .merge import generation

_native = use("kafkastore.format._native")
#: The C walk that keeps a batch whole without decoding it (None: not built or switched
#: off; the batch is then decoded and re-encoded, with the same bytes).
_restamp = getattr(_native, "restamp_records", None)

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

    def is_aborted(self, h: BatchHeader) -> bool:
        """True if the data batch belongs to an aborted transaction (reads only the static
        aborted list: safe from the threads that filter chunks)."""
        return h.is_transactional and any(first <= h.base_offset <= last
                                           for first, last in self.aborted.get(h.producer_id, ()))

    def data_batch(self, h: BatchHeader) -> bool:
        """Note a data batch; True if it belongs to an aborted transaction."""
        if not h.is_transactional:
            return False
        self.has_data[h.producer_id] = True
        return self.is_aborted(h)

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
                  upload: bool = True, threads: int = 1) -> GroupResult:
    """Rewrite one group of segments into one new segment and upload it (unless unchanged).

    ``keep`` holds the sorted offsets of the surviving keyed records of the
    group (see the module docstring for every other rule); ``carry`` the
    producer ids whose transaction has data in earlier groups. Source
    segments are checked against their manifest size and checksum and every
    batch's CRC. Returns the new entry (not committed: see
    :func:`commit_cleaning`). ``clock`` (a :class:`~kafkastore.clock.Clock`, default the storage's; an old bare callable
    reads wall seconds) stamps the upload time. ``threads`` > 1 decodes, filters and
    re-encodes that many chunks at once (the C decoder and encoder release the GIL), at
    most ``threads`` + 1 chunks of :data:`REWRITE_CHUNK_BYTES` in memory; the output is
    the same bytes whatever ``threads`` is.
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
    records_in = sum(seg.record_count for seg in group.segments)

    def filtered(item):
        log, name, chunk_start, batches = item
        return log, _filter_chunk(log, name, chunk_start, batches, keep, ctx, codec, txns)

    # Data batches are filtered chunk by chunk, on threads if asked; what depends on the
    # order of batches (the transaction state, the markers) is decided here, in order.
    for log, (outs, chunk_horizons) in _ordered_map(filtered, _group_chunks(storage, ctx, group),
                                                    threads):
        horizons.extend(chunk_horizons)
        for pos, h, out in outs:
            if h.is_control:
                out = _filter_marker(log, pos, h, ctx, txns, horizons, kept_markers)
            elif txns.data_batch(h):
                out = None                # aborted (the filter dropped it too)
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


def _group_chunks(storage: Storage, ctx: CleanContext, group: GroupSpec
                  ) -> Iterator[tuple[bytes, str, int, list[tuple[int, BatchHeader]]]]:
    """``(log, name, chunk start, batches)`` of every chunk of the group's segments, in order;
    each segment is read when its first chunk is asked for and checked against its entry."""
    for seg in group.segments:
        name = seg.paths(ctx.topic, ctx.partition)[".log"]
        log = storage.get(name)
        check_range(whole_segment_range(ctx.topic, ctx.partition, seg), log)
        for chunk_start, batches in _chunks(log, name):
            yield log, name, chunk_start, batches


def _ordered_map(fn, items: Iterable, threads: int) -> Iterator:
    """``map(fn, items)`` with up to ``threads`` calls running at once and at most
    ``threads`` + 1 results waiting, in the order of ``items`` (the first error is raised)."""
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        window: deque = deque()
        try:
            for item in items:
                window.append(pool.submit(fn, item))
                if len(window) > threads:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for f in window:
                f.cancel()


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

    def surviving(self, keep: np.ndarray) -> np.ndarray:
        """Per row: a keyed record whose offset is in ``keep`` (one search for the whole chunk,
        not one per batch)."""
        n = len(self.offsets)
        if not len(keep) or not n:
            return np.zeros(n, bool)
        first = int(self.offsets[0])
        if int(self.offsets[-1]) - first == n - 1 and (np.diff(self.offsets) == 1).all():
            # Consecutive offsets (a log not compacted before): each kept offset marks its
            # row directly, instead of a binary search per row.
            lo = int(np.searchsorted(keep, first, "left"))
            hi = int(np.searchsorted(keep, first + n - 1, "right"))
            rows = np.zeros(n, bool)
            rows[keep[lo:hi] - first] = True
            return rows & self.keyed
        i = np.searchsorted(keep, self.offsets)
        return (keep[np.minimum(i, len(keep) - 1)] == self.offsets) & self.keyed

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


#: Bytes of consecutive batches without a survivor from which the rewrite skips them
#: instead of decoding them with the batches around them.
REWRITE_SKIP_BYTES = 256 << 10


def _filter_chunk(log: bytes, name: str, chunk_start: int, batches: list[tuple[int, BatchHeader]],
                  keep: np.ndarray, ctx: CleanContext, codec: Compression | None, txns: _TxnState
                  ) -> tuple[list[tuple[int, BatchHeader, tuple | None]], list[int]]:
    """``([(position, header, output)], delete horizons)`` of one chunk: each data batch
    that can keep a record decoded and filtered (:func:`_filter_batch`); the others (no
    offset of theirs in ``keep``, aborted, empty) are dropped, and not decoded when they
    make up a stretch of at least :data:`REWRITE_SKIP_BYTES`.
    Control batches are left to the caller (output None), which walks the batches in
    order. Touches no shared state (``txns`` is only read), so chunks can be filtered on
    threads."""
    needed, whole = _needs_decoding(batches, keep, txns, ctx.now_ms)
    horizons: list[int] = []
    outs: list = [(pos, h, None) for pos, h in batches]
    for i in whole:
        pos, h = batches[i]
        out = _keep_whole(log, pos, h, ctx, codec, horizons)
        if out is not None:           # else decoded below (which raises on damage)
            outs[i] = (pos, h, out)
            needed[i] = False
    for first, last in decode_runs([h.size for _, h in batches], needed, REWRITE_SKIP_BYTES):
        start = batches[first][0]
        end = batches[last][0] + batches[last][1].size
        cols = _decode_chunk(memoryview(log)[start:end], ctx, name, start)
        # Control batches have no rows (the decoder drops them); a batch not needed was
        # decoded with its run (a short gap) and is dropped.
        data = [i for i in range(first, last + 1) if not batches[i][1].is_control]
        stats = _RunStats(cols, keep, [batches[i] for i in data], ctx.now_ms, start)
        for j, i in enumerate(data):
            if needed[i]:
                pos, h = batches[i]
                outs[i] = (pos, h, _filter_batch(log, pos, h, cols, stats, j, ctx, codec, horizons))
    return outs, horizons


class _RunStats:
    """What deciding each data batch of one decoded run needs, computed for the whole run at
    once (a few numpy calls per run, not per batch): each batch's first row, the rows that
    survive (keyed, in ``keep``, not a tombstone past its batch's delete horizon), and per
    batch the survivors, whether a tombstone is among them and their least timestamp."""

    def __init__(self, cols: _Columns, keep: np.ndarray, batches: list[tuple[int, BatchHeader]],
                 now_ms: int, position: int):
        counts = np.fromiter((h.record_count for _, h in batches), np.int64, len(batches))
        ends = np.cumsum(counts)
        n = len(cols.offsets)
        if (ends[-1] if len(ends) else 0) != n:
            raise CorruptRecordError("decoded records do not line up with their batches",
                                     offset=batches[0][1].base_offset if batches else None,
                                     position=position)
        self.starts = ends - counts
        rows = counts > 0
        firsts, lasts = self.starts[rows], ends[rows] - 1
        base = np.fromiter((h.base_offset for _, h in batches), np.int64, len(batches))[rows]
        last = np.fromiter((h.last_offset for _, h in batches), np.int64, len(batches))[rows]
        bad = (cols.offsets[firsts] < base) | (cols.offsets[lasts] > last)
        if bad.any():
            k = int(np.flatnonzero(rows)[np.argmax(bad)])
            raise CorruptRecordError("decoded records do not line up with their batch",
                                     offset=batches[k][1].base_offset, position=batches[k][0])
        passed = np.fromiter((h.delete_horizon_ms is not None and now_ms >= h.delete_horizon_ms
                              for _, h in batches), bool, len(batches))
        # Tombstones past their batch's delete horizon go.
        self.survives = cols.surviving(keep) & ~(cols.tombstone & np.repeat(passed, counts))
        self.count = np.zeros(len(batches), np.int64)
        self.tombstones = np.zeros(len(batches), bool)
        self.min_ts = np.full(len(batches), -1, np.int64)
        if n:
            at = firsts
            self.count[rows] = np.add.reduceat(self.survives, at)
            self.tombstones[rows] = np.logical_or.reduceat(self.survives & cols.tombstone, at)
            top = np.iinfo(np.int64).max
            stamped = np.where(self.survives & (cols.timestamps >= 0), cols.timestamps, top)
            least = np.minimum.reduceat(stamped, at)
            self.min_ts[rows] = np.where(least == top, -1, least)


def _needs_decoding(batches: list[tuple[int, BatchHeader]], keep: np.ndarray,
                    txns: _TxnState, now_ms: int) -> tuple[list[bool], list[int]]:
    """``(needed, whole)``: per batch, whether it is a data batch, not aborted, with records
    and at least one offset of ``keep`` within its offsets (only such a batch can keep a
    record); and the numbers of the needed create-time batches that keep every record
    (each of their offsets is in ``keep``, as offsets are unique, and no horizon of theirs
    has passed), which :func:`_keep_whole` can take without decoding them."""
    if not len(keep):
        return [False] * len(batches), []
    base = np.fromiter((h.base_offset for _, h in batches), np.int64, len(batches))
    last = np.fromiter((h.last_offset for _, h in batches), np.int64, len(batches))
    hits = np.searchsorted(keep, last, "right") - np.searchsorted(keep, base, "left")
    needed = [bool(k) and not h.is_control and h.record_count > 0 and not txns.is_aborted(h)
              for k, (_, h) in zip(hits.tolist(), batches)]
    if _restamp is None:
        return needed, []
    whole = [i for i, (k, (_, h)) in enumerate(zip(hits.tolist(), batches))
             if needed[i] and k == h.record_count and h.timestamp_type == CREATE_TIME
             and (h.delete_horizon_ms is None or now_ms < h.delete_horizon_ms)]
    return needed, whole


def _keep_whole(log: bytes, pos: int, h: BatchHeader, ctx: CleanContext,
                codec: Compression | None, horizons: list[int]):
    """``(bytes, min timestamp, rebuilt)`` of a data batch that keeps every record (see
    :func:`_needs_decoding`), from one C walk over its records instead of a decode and an
    encode: the original bytes unless a first delete horizon is due (a tombstone in a batch
    without one), then the records relative to the horizon, compressed again. None when the
    walk declines (damage, a null key, a timestamp out of range): the caller decodes it."""
    payload = memoryview(log)[pos + HEADER_SIZE:pos + h.size]
    try:
        body = payload if h.compression == Compression.NONE else decompress(h.compression,
                                                                             payload)
    except CompressionError:
        return None
    hz = h.delete_horizon_ms
    new = _horizon(ctx) if hz is None else None
    walked = _restamp(body, h.record_count, h.base_timestamp, h.last_offset_delta, new)
    if walked is None:
        return None
    records, tombstones, min_ts, max_ts = walked
    if not tombstones or hz is not None:
        if tombstones:
            horizons.append(hz)
        return log[pos:pos + h.size], min_ts, False
    horizons.append(new)
    data = assemble_batch(records, h.record_count, h.base_offset, h.last_offset, new, max_ts,
                          codec=codec if codec is not None else h.compression,
                          timestamp_type=h.timestamp_type, producer_id=h.producer_id,
                          producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                          partition_leader_epoch=h.partition_leader_epoch,
                          transactional=h.is_transactional, control=False,
                          delete_horizon=True, max_timestamp=None, compression_level=None)
    return data, min_ts, True


def decode_runs(sizes: Sequence[int], needed: Sequence[bool], skip_bytes: int
                ) -> Iterator[tuple[int, int]]:
    """``(first, last)`` numbers of each run of batches (of byte ``sizes``) to decode as one
    range: from a ``needed`` batch to the last needed one before a stretch of at least
    ``skip_bytes`` of batches that are not (a shorter stretch is decoded with its run: each
    decode has a fixed cost, more than a few small batches' records)."""
    first = last = None
    gap = 0                               # bytes of batches not needed since ``last``
    for i, size in enumerate(sizes):
        if needed[i]:
            if first is None:
                first = i
            last, gap = i, 0
        elif first is not None:
            gap += size
            if gap >= skip_bytes:
                yield first, last
                first = last = None
    if first is not None:
        yield first, last


def _filter_marker(log: bytes, pos: int, h: BatchHeader, ctx: CleanContext, txns: _TxnState,
                   horizons: list[int], kept_markers: set[int]):
    """``(bytes, min timestamp, rebuilt)`` of a control batch, or None if dropped; in log order
    (it reads and updates the transaction state)."""
    now = ctx.now_ms
    original = log[pos:pos + h.size]
    hz = h.delete_horizon_ms
    ctype = _marker_type(log, pos, h)
    if ctype is None:
        if h.record_count == 0:
            return None                   # an empty control batch: already cleaned, Kafka drops it
        return original, -1, False        # other control records are kept as they are
    had_data = txns.marker(h)
    if h.last_offset < ctx.log_start_offset:
        return None
    if had_data:                          # its transaction still had data: keep it, no horizon
        kept_markers.add(h.base_offset)
        return original, -1, False
    if hz is not None and now >= hz:
        return None
    kept_markers.add(h.base_offset)
    if hz is not None:
        horizons.append(hz)
        return original, -1, False
    _, recs = decode_batch(log, pos, verify_crc=False)
    hz = _horizon(ctx)
    horizons.append(hz)
    data = encode_batch(recs, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                        base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
                        timestamp_type=h.timestamp_type, transactional=h.is_transactional,
                        control=True, base_offset=h.base_offset, last_offset=h.last_offset,
                        delete_horizon_ms=hz, max_timestamp=h.max_timestamp)
    return data, -1, True


def _filter_batch(log: bytes, pos: int, h: BatchHeader, cols: _Columns, stats: _RunStats,
                  j: int, ctx: CleanContext, codec: Compression | None, horizons: list[int]):
    """``(bytes, min timestamp, rebuilt)`` of one data batch with records, not aborted, or
    None if it keeps none (``stats``: its run's, ``j``: its number among the run's data
    batches)."""
    count = int(stats.count[j])
    if count == 0:
        return None
    kept_tombstones = bool(stats.tombstones[j])
    min_ts = int(stats.min_ts[j])
    hz = h.delete_horizon_ms
    if count == h.record_count and not (kept_tombstones and hz is None):
        if kept_tombstones:
            horizons.append(hz)
        return log[pos:pos + h.size], min_ts, False
    if kept_tombstones and hz is None:
        hz = _horizon(ctx)
    if kept_tombstones:
        horizons.append(hz)
    # The survivors are encoded straight from the decoded Arrow buffers (C encoder), the
    # same bytes encode_batch gives for the same records.
    lo = int(stats.starts[j])
    idx = np.flatnonzero(stats.survives[lo:lo + h.record_count]) + lo
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
    return data, min_ts, True


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
# the one-process driver
# ---------------------------------------------------------------------------

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
