"""Batching for the log writer: records -> sealed record batches -> segments.

The pieces :class:`kafkastore.write.log_writer.LogWriter` builds a flush from, none of
which touches storage:

* what waits in a partition's buffer (:class:`Buffered` records, :class:`Pending` sealed
  batches with offsets relative to the flush, :class:`Run` for many batches encoded in one
  C call) and the topic's settings the write path reads (:class:`TopicSettings`);
* Kafka's record checks that do not need the buffer (:func:`check_timestamp`, the size
  estimates :data:`RECORD_OVERHEAD` / :data:`BATCH_OVERHEAD`);
* how sealed batches become segments as Kafka rolls them (:func:`build_segments`), with
  their indexes from the batches' header fields and the base offsets written at commit;
* what an append does to the producer's state in the manifest (:func:`producer_state`,
  :func:`aborted_transaction`).
"""
from __future__ import annotations

import operator
import struct
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..errors import ConfigError, InvalidRecordError
from ..format.compression import Compression
from ..format.record_batch import parse_header
from ..format.segment_build import index_batch_arrays, index_batches
from ..manifest import BatchMetadata, ProducerState
from ..threads import shared_pool
from ..topics.admin import TopicMetadata

_BASE_OFFSET = struct.Struct(">q")
# Kafka's estimate of a record's overhead inside a v2 batch (varints, attributes, deltas).
RECORD_OVERHEAD = 21
BATCH_OVERHEAD = 61
#: Largest record timestamp accepted: readers hold timestamps as int64 microseconds.
MAX_TIMESTAMP_MS = (2 ** 63 - 1) // 1000
LONG_MAX = 2 ** 63 - 1


class Run(NamedTuple):
    """The batches of a :class:`Pending` holding many (send_arrow's fast path), as arrays."""

    positions: object     # int64[k+1]: each batch's byte position in the data, then its size
    rels: object          # int64[k]: each batch's relative base offset
    counts: object        # int64[k]: records per batch
    max_ts: object        # int64[k]: each batch's MaxTimestamp field
    min_ts: object        # int64[k]: each batch's smallest record timestamp


@dataclass
class Pending:
    """A sealed batch waiting for its flush: bytes encoded with offsets relative to the flush.

    With ``run`` set, ``data`` is many data batches back to back (one C encoder call);
    ``rel_base`` / ``count`` / ``min_timestamp`` are then those of the whole run.
    """

    data: bytes
    rel_base: int
    count: int            # offsets the batch takes (records, or 1 for a marker)
    min_timestamp: int
    transactional: bool
    marker: bool = False  # a transaction marker
    abort: bool = False
    appended_ms: int = 0  # broker clock when the batch's first record was buffered
    run: Run | None = None


class Buffered(NamedTuple):
    """A record waiting in a batch: what :func:`encode_batch` reads of a :class:`Record`
    (three times cheaper to create than the frozen dataclass, once per record sent)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@dataclass
class PartitionBuffer:
    """One partition's records waiting in the writer: the open batch (``records``) and the
    sealed batches of the next flush, with offsets relative to it (``next_rel``)."""

    records: list[Buffered] = field(default_factory=list)
    records_bytes: int = 0
    batch_started_ms: int = 0
    sealed: list[Pending] = field(default_factory=list)
    sealed_bytes: int = 0
    next_rel: int = 0
    first_append_ms: int = 0
    in_txn: bool = False  # records now in ``records`` are transactional
    # Sealed batches (a prefix of ``sealed``) whose commit failed with an unknown outcome:
    # the next flush commits them alone first, so that idempotence recognises them if
    # that commit did land.
    in_doubt: int = 0


@dataclass(frozen=True)
class TopicSettings:
    """What the write path needs of a topic, looked up once (configs are read once anyway)."""

    meta: TopicMetadata
    codec: Compression
    compact: bool
    max_message_bytes: int
    batch_limit: int      # bytes (estimated) at which a batch is sealed
    segment_bytes: int
    segment_ms: int
    index_interval_bytes: int
    log_append: bool
    before_max_ms: int
    after_max_ms: int
    any_timestamp: bool   # no message.timestamp.before/after.max.ms limit to check


def writer_pool():
    """Threads on which :meth:`LogWriter.flush` commits partitions side by side (a commit
    mostly waits on fsync or an object store with the GIL released) and
    :meth:`LogWriter.send_arrow` encodes them (the C encoder releases it too)."""
    return shared_pool("broker", 8)


def check_timestamp(st: TopicSettings, timestamp: int, now: int) -> int:
    """Kafka's timestamp validation (range, ``message.timestamp.before/after.max.ms``);
    returns the timestamp as an int (any integer type is accepted, bool is not)."""
    try:
        if isinstance(timestamp, bool):
            raise TypeError
        timestamp = operator.index(timestamp)
    except TypeError:
        raise ConfigError(f"timestamp must be an integer (epoch ms), got {timestamp!r}") from None
    if not 0 <= timestamp <= MAX_TIMESTAMP_MS:
        raise ConfigError(f"timestamp must be epoch ms between 0 and {MAX_TIMESTAMP_MS}, "
                          f"got {timestamp!r}")
    if st.log_append:
        return timestamp  # the append time replaces it
    if now - timestamp > st.before_max_ms:
        raise InvalidRecordError(
            f"timestamp {timestamp} is more than message.timestamp.before.max.ms="
            f"{st.before_max_ms} before the broker's time {now} (topic {st.meta.name!r})")
    if timestamp - now > st.after_max_ms:
        raise InvalidRecordError(
            f"timestamp {timestamp} is more than message.timestamp.after.max.ms="
            f"{st.after_max_ms} after the broker's time {now} (topic {st.meta.name!r})")
    return timestamp


# MaxTimestamp (offset 35 of a v2 batch) and RecordCount (offset 57) in one read.
MAX_TS_AND_COUNT = struct.Struct(">q14xi")
MAX_TS_OFFSET = 35


@dataclass(frozen=True)
class BuiltSegment:
    """A segment of sealed batches, its log not yet joined: :meth:`log` writes the batches'
    final base offsets into the one copy that joins them."""

    rels: tuple[int, ...]            # each batch's relative base offset
    tails: tuple[memoryview, ...]    # each batch after its BaseOffset field
    index: bytes
    timeindex: bytes
    stats: object
    pending: tuple[Pending, ...]

    def log(self, shift: int) -> tuple[bytes]:
        """The ``.log`` bytes (one buffer) with every batch's base offset moved by ``shift``.
        BaseOffset is outside the batch CRC, so the batches stay valid."""
        pack = _BASE_OFFSET.pack
        parts = [b""] * (2 * len(self.rels))
        parts[0::2] = [pack(rel + shift) for rel in self.rels]
        parts[1::2] = self.tails
        return (b"".join(parts),)


@dataclass(frozen=True)
class RunSegment:
    """A segment holding batches of runs (:class:`Run`): the batches' base offsets are
    written by :meth:`log`, vectorised, into the runs' own buffers, which are then
    written one after another (no joined copy)."""

    parts: tuple[memoryview, ...]    # contiguous stretches of the pendings' data, in order
    rels: object                     # int64[k]: each batch's relative base offset
    positions: object                # int64[k]: each batch's position in the log
    index: bytes
    timeindex: bytes
    stats: object

    def log(self, shift: int) -> tuple:
        """The ``.log`` bytes as buffers to write one after another (no joined copy), with
        every batch's base offset moved by ``shift``, written into the runs' own buffers.
        BaseOffset is outside the batch CRC, so the batches stay valid."""
        import numpy as np

        parts = tuple(p if not p.readonly else memoryview(bytearray(p)) for p in self.parts)
        starts = np.cumsum([0] + [p.nbytes for p in parts])   # each part's place in the log
        bounds = np.searchsorted(self.positions, starts)      # its batches (none straddle)
        values = (self.rels + shift).astype(">i8").view(np.uint8).reshape(-1, 8)
        for part, start, lo, hi in zip(parts, starts.tolist(), bounds.tolist(),
                                       bounds[1:].tolist()):
            arr = np.frombuffer(part, np.uint8)
            arr[(self.positions[lo:hi] - start)[:, None] + np.arange(8)] = values[lo:hi]
        return parts


def build_run_segments(pending: list[Pending], segment_bytes: int, segment_ms: int,
                        index_interval_bytes: int) -> list[RunSegment]:
    """:func:`build_segments` when some pendings are runs: the same rolls, per batch."""
    import numpy as np

    unpack = MAX_TS_AND_COUNT.unpack_from
    cols: dict[str, list] = {k: [] for k in ("size", "app", "rel", "count", "offsets", "max",
                                             "min", "src", "start")}
    for i, p in enumerate(pending):
        r = p.run
        if r is None:
            mts, cnt = unpack(p.data, MAX_TS_OFFSET)
            r = Run(np.array([0, len(p.data)], np.int64), np.array([p.rel_base], np.int64),
                     np.array([cnt], np.int64), np.array([mts], np.int64),
                     np.array([p.min_timestamp], np.int64))
            taken = np.array([p.count], np.int64)
        else:
            taken = r.counts
        k = len(r.rels)
        cols["size"].append(np.diff(r.positions))
        cols["app"].append(np.full(k, p.appended_ms, np.int64))
        cols["rel"].append(r.rels)
        cols["count"].append(r.counts)
        cols["offsets"].append(taken)
        cols["max"].append(r.max_ts)
        cols["min"].append(r.min_ts)
        cols["src"].append(np.full(k, i, np.int64))
        cols["start"].append(r.positions[:-1])
    a = {k: np.concatenate(v).astype(np.int64) for k, v in cols.items()}
    sizes, app = a["size"], a["app"]
    lasts = a["rel"] + a["offsets"] - 1
    cum = np.concatenate(([0], np.cumsum(sizes)))
    total = len(sizes)
    out = []
    s = 0
    while s < total:
        # first batch after s that would take the segment past segment.bytes, or came
        # segment.ms or more after the segment's first batch
        e = max(s + 1, int(np.searchsorted(cum, cum[s] + segment_bytes, side="right")) - 1)
        e = min(e, total)
        late = np.flatnonzero(app[s + 1:e] - app[s] >= segment_ms)
        if late.size:
            e = s + 1 + int(late[0])
        built = index_batch_arrays(
            int(a["rel"][s]), sizes[s:e], int(a["rel"][s]), lasts[s:e], a["count"][s:e],
            a["max"][s:e], a["min"][s:e], index_interval_bytes=index_interval_bytes)
        src = a["src"][s:e]
        breaks = np.flatnonzero(np.diff(src)) + 1
        parts = []
        for lo, hi in zip(np.concatenate(([0], breaks)).tolist(),
                          np.concatenate((breaks, [e - s])).tolist()):
            data = memoryview(pending[int(src[lo])].data)
            first, last = s + lo, s + hi - 1
            parts.append(data[int(a["start"][first]):int(a["start"][last] + sizes[last])])
        out.append(RunSegment(tuple(parts), a["rel"][s:e], cum[s:e] - cum[s],
                               built.index, built.timeindex, built.stats))
        s = e
    return out


def build_segments(pending: list[Pending], segment_bytes: int, segment_ms: int,
                    index_interval_bytes: int) -> list:
    """Group sealed batches into segments (at least one batch each) as Kafka rolls them: a new
    segment when the next batch would take the segment past ``segment.bytes``, or arrived
    ``segment.ms`` or more after the segment's first batch. The batches were encoded here,
    so their indexes come from their header fields (:func:`index_batches`), unchecked."""
    if any(p.run is not None for p in pending):
        return build_run_segments(pending, segment_bytes, segment_ms, index_interval_bytes)
    out: list[BuiltSegment] = []
    group: list[Pending] = []
    size = 0
    unpack = MAX_TS_AND_COUNT.unpack_from

    def close():
        fields = [unpack(p.data, MAX_TS_OFFSET) for p in group]
        built = index_batches(
            group[0].rel_base, [len(p.data) for p in group], group[0].rel_base,
            [p.rel_base + p.count - 1 for p in group], [f[1] for f in fields],
            [f[0] for f in fields], [p.min_timestamp for p in group],
            index_interval_bytes=index_interval_bytes)
        out.append(BuiltSegment(tuple(p.rel_base for p in group),
                                 tuple(memoryview(p.data)[8:] for p in group),
                                 built.index, built.timeindex, built.stats, tuple(group)))

    for p in pending:
        if group and (size + len(p.data) > segment_bytes
                      or p.appended_ms - group[0].appended_ms >= segment_ms):
            close()
            group, size = [], 0
        group.append(p)
        size += len(p.data)
    if group:
        close()
    return out


def aborted_transaction(pending: list[Pending], hw: int,
             state: ProducerState | None) -> list[tuple[int, int, int]]:
    """The transaction this unit aborts, ``(producer id, first offset, marker offset)``,
    if it holds an ABORT marker of a non-empty transaction (else nothing to hide)."""
    abort = next((p for p in pending if p.marker and p.abort), None)
    if abort is None:
        return []
    first_txn = next((p for p in pending if p.transactional and not p.marker), None)
    if state is not None and state.txn_first_offset is not None:
        first = state.txn_first_offset
    elif first_txn is not None:
        first = hw + first_txn.rel_base
    else:
        return []
    return [(_pid_of(abort), first, hw + abort.rel_base)]


def _pid_of(p: Pending) -> int:
    return parse_header(p.data).producer_id


def producer_state(state: ProducerState | None, epoch: int, pending: list[Pending], hw: int,
                    first_seq: int, last_seq: int, max_ts: int) -> ProducerState:
    """The producer's state after this append (idempotence window and open transaction)."""
    data = [p for p in pending if not p.marker]
    if state is None:
        state = ProducerState(epoch=epoch)
    elif epoch > state.epoch:
        # A new producer epoch starts a new sequence space (Kafka forgets the old batches).
        state = replace(state, epoch=epoch, batches=())
    if data:
        first_offset = hw + data[0].rel_base
        last_offset = hw + data[-1].rel_base + data[-1].count - 1
        state = state.with_batch(BatchMetadata(first_seq, last_seq, first_offset, last_offset, max_ts))
    txn_first = state.txn_first_offset
    for p in pending:
        if p.marker:
            txn_first = None
        elif p.transactional and txn_first is None:
            txn_first = hw + p.rel_base
    return replace(state, txn_first_offset=txn_first)
