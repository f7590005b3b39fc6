"""The broker: the write side of the log.

A :class:`Broker` buffers records per topic-partition, seals them into record
batches (``batch.size`` / ``linger.ms``, the topic's or producer's codec), and
on :meth:`Broker.flush` (or when a partition's buffer reaches
``segment.bytes`` / ``segment.ms``) turns them into a segment, uploads its
``.log`` / ``.index`` / ``.timeindex`` and commits one manifest version per
partition. Records are visible only once that version lands (acks=all).

Offsets are assigned at commit time. A flush builds its segment with offsets
relative to 0; to commit at high watermark ``hw`` it adds ``hw`` to each
batch's 8-byte base offset, which lies outside the CRC (that is why Kafka put
it there), and names the files after ``hw``. The indexes hold offsets relative
to the segment's base, so they do not change. When another writer commits
first, the flush re-reads the manifest and does the same again at the new
high watermark under a new file name: two writers never share an offset, and
nothing is lost. Files of a lost attempt are never deleted here (the outcome
may be unknown); no manifest lists them, so readers never see them, and
:mod:`kafkastore.gc` removes them after the grace period.

Fencing: :meth:`Broker.claim` raises the partition's leader epoch in the
manifest; every append requires the writer's epoch to be at least the
manifest's, so a writer that lost leadership gets :class:`FencedError` and
cannot touch the log. Writers that never claim (the CLI's ``produce``) write
under the epoch they found and are fenced as soon as someone claims.

Idempotence: the broker has a producer id and numbers its batches as Kafka's
idempotent producer does; the manifest keeps each producer's last five
appends, and an append whose sequence numbers match one of them is a
duplicate and is not written again (:meth:`Broker.append_batch` for clients
that retry with their own producer id and sequence).
"""
from __future__ import annotations

import random
import struct
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from . import layout
from .compression import Compression
from .control import encode_marker_batch
from .crc import crc32c
from .errors import (ConfigError, InvalidRecordError,
                     OutOfOrderSequenceError, RecordTooLargeError, UnknownTopicError)
from .manifest import (AppendSegments, AssertLeaderEpoch, BatchMetadata, Manifest,
                       ManifestStore, ProducerState, SegmentEntry, SetLeaderEpoch,
                       UpdateProducerState)
from .partitioner import StickyPartitioner, partition_for_key
from .record_batch import (CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Record, encode_batch,
                           parse_header)
from .segment import SegmentBuilder
from .storage import Storage
from .topics import TopicMetadata, load_topic

_BASE_OFFSET = struct.Struct(">q")
# Kafka's estimate of a record's overhead inside a v2 batch (varints, attributes, deltas).
_RECORD_OVERHEAD = 21


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class AppendResult:
    """Where one flush put a partition's records: offsets ``[base_offset, next_offset)``."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    record_count: int
    duplicate: bool = False


@dataclass
class _Pending:
    """A sealed batch waiting for its flush: bytes encoded with offsets relative to the flush."""

    data: bytes
    rel_base: int
    count: int            # offsets the batch takes (records, or 1 for a marker)
    min_timestamp: int
    transactional: bool
    marker: bool = False  # a transaction marker
    abort: bool = False


@dataclass
class _PartitionBuffer:
    records: list[Record] = field(default_factory=list)
    records_bytes: int = 0
    batch_started_ms: int = 0
    sealed: list[_Pending] = field(default_factory=list)
    sealed_bytes: int = 0
    next_rel: int = 0
    first_append_ms: int = 0
    in_txn: bool = False  # records now in ``records`` are transactional


class Broker:
    """Writes records to the topics under ``storage``; see the module docstring.

    ``compression`` is the producer's codec (used where the topic says
    ``compression.type=producer``); ``clock`` returns epoch ms and is
    injectable for tests; ``producer_id`` defaults to a random positive
    63-bit id (Kafka allocates them; a random id collides with negligible
    probability).
    """

    def __init__(self, storage: Storage, *, broker_id: int = 0, producer_id: int | None = None,
                 producer_epoch: int = 0, compression: str | int | None = None,
                 batch_size: int = 16384, linger_ms: int = 0,
                 clock: Callable[[], int] | None = None, rng: random.Random | None = None):
        if batch_size < 1:
            raise ConfigError(f"batch.size must be >= 1, got {batch_size}")
        if linger_ms < 0:
            raise ConfigError(f"linger.ms must be >= 0, got {linger_ms}")
        self.storage = storage
        self.broker_id = broker_id
        self._rng = rng or random.Random()
        self.producer_id = producer_id if producer_id is not None else self._rng.getrandbits(62) + 1
        self.producer_epoch = producer_epoch
        self.compression = Compression.parse(compression or "none")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.clock = clock or _now_ms
        self._topics: dict[str, TopicMetadata] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        self._buffers: dict[tuple[str, int], _PartitionBuffer] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self._sequences: dict[tuple[str, int], int] = {}
        self._txn_partitions: set[tuple[str, int]] | None = None

    # -- topics --------------------------------------------------------------
    def topic(self, name: str) -> TopicMetadata:
        """Topic metadata (cached for the broker's life; configs are read once)."""
        meta = self._topics.get(name)
        if meta is None:
            meta = self._topics[name] = load_topic(self.storage, name)
        return meta

    def _store(self, topic: str, partition: int) -> ManifestStore:
        return ManifestStore(self.storage, topic, partition)

    def _codec(self, meta: TopicMetadata) -> Compression:
        codec = meta.config.compression_codec
        return self.compression if codec is None else Compression.parse(codec)

    # -- leadership ----------------------------------------------------------
    def claim(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Become the leader of these partitions (all by default): raise each one's epoch.

        Any other writer on them is fenced from its next commit on.
        """
        meta = self.topic(topic)
        out = {}
        for p in (range(meta.partitions) if partitions is None else partitions):
            self._check_partition(meta, p)

            def build(m: Manifest | None):
                epoch = (m.leader_epoch if m else 0) + 1
                return [SetLeaderEpoch(epoch)], []

            m = self._store(topic, p).commit(build, operation="claim", writer=self._writer(),
                                             now_ms=self.clock())
            self._epochs[(topic, p)] = m.leader_epoch
            out[p] = m.leader_epoch
        return out

    def _writer(self) -> str:
        return f"broker-{self.broker_id}"

    # -- producing -----------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes | None]] = (), timestamp: int | None = None,
             partition: int | None = None) -> int:
        """Buffer one record; returns its partition. Visible after :meth:`flush`."""
        meta = self.topic(topic)
        if key is None and meta.config.compact and not meta.config.delete:
            raise InvalidRecordError(
                f"topic {topic!r} is compacted (cleanup.policy=compact): records need a key")
        size = (len(key or b"") + len(value or b"") + _RECORD_OVERHEAD
                + sum(len(k) + len(v or b"") + 2 for k, v in headers))
        limit = meta.config.max_message_bytes
        if size + 61 > limit:
            raise RecordTooLargeError(
                f"record of about {size} bytes exceeds max.message.bytes={limit} of topic {topic!r}")
        if partition is None:
            if key is None:
                sticky = self._sticky.get(topic)
                if sticky is None:
                    sticky = self._sticky[topic] = StickyPartitioner(
                        meta.partitions, self.batch_size, self._rng.randrange)
                partition = sticky.next(size)
            else:
                partition = partition_for_key(key, meta.partitions)
        else:
            self._check_partition(meta, partition)
        now = self.clock()
        if timestamp is None:
            timestamp = now
        elif timestamp < 0:
            raise ConfigError(f"timestamp must be >= 0 (epoch ms), got {timestamp}")
        tp = (topic, partition)
        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = _PartitionBuffer()
        in_txn = self._txn_partitions is not None
        if buf.records and (
                buf.in_txn != in_txn
                or buf.records_bytes + size > min(self.batch_size, limit - 61)
                or (self.linger_ms and now - buf.batch_started_ms >= self.linger_ms)):
            self._seal(tp, meta)
        if not buf.records:
            buf.batch_started_ms = now
            buf.in_txn = in_txn
        if not buf.sealed and not buf.records:
            buf.first_append_ms = now
        buf.records.append(Record(buf.next_rel + len(buf.records), timestamp, key, value,
                                  tuple(headers)))
        buf.records_bytes += size
        if in_txn:
            self._txn_partitions.add(tp)
        if (buf.sealed_bytes + buf.records_bytes >= meta.config.segment_bytes
                or now - buf.first_append_ms >= meta.config.segment_ms):
            self._flush_partition(tp)
        return partition

    def _check_partition(self, meta: TopicMetadata, partition: int) -> None:
        if not isinstance(partition, int) or not 0 <= partition < meta.partitions:
            raise UnknownTopicError(
                f"topic {meta.name!r} has partitions 0..{meta.partitions - 1}, not {partition!r}")

    def _next_sequence(self, tp: tuple[str, int], count: int) -> int:
        if tp not in self._sequences:
            m = self._store(*tp).latest()
            state = m.producers.get(self.producer_id) if m else None
            self._sequences[tp] = state.last_sequence + 1 if state else 0
        seq = self._sequences[tp]
        self._sequences[tp] = (seq + count) & 0x7FFFFFFF
        return seq

    def _seal(self, tp: tuple[str, int], meta: TopicMetadata) -> None:
        buf = self._buffers[tp]
        if not buf.records:
            return
        records = buf.records
        log_append = meta.config.message_timestamp_type == "LogAppendTime"
        append_time = self.clock()
        data = encode_batch(
            records, compression=self._codec(meta),
            timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
            max_timestamp=append_time if log_append else None,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self._next_sequence(tp, len(records)),
            transactional=buf.in_txn)
        if len(data) > meta.config.max_message_bytes:
            if len(records) == 1:
                raise RecordTooLargeError(
                    f"record batch of {len(data)} bytes exceeds max.message.bytes="
                    f"{meta.config.max_message_bytes} of topic {meta.name!r}")
            # Split in two and try again: the size estimate was too optimistic.
            half = len(records) // 2
            self._sequences[tp] -= len(records)
            buf.records = records[:half]
            rest = records[half:]
            self._seal(tp, meta)
            buf.records = [replace(r, offset=buf.next_rel + i) for i, r in enumerate(rest)]
            buf.records_bytes = 0
            self._seal(tp, meta)
            return
        min_ts = append_time if log_append else min(r.timestamp for r in records)
        buf.sealed.append(_Pending(data, buf.next_rel, len(records), min_ts, buf.in_txn))
        buf.sealed_bytes += len(data)
        buf.next_rel += len(records)
        buf.records = []
        buf.records_bytes = 0

    def flush(self) -> list[AppendResult]:
        """Commit everything buffered; returns one result per partition written."""
        results = []
        for tp in sorted(self._buffers):
            result = self._flush_partition(tp)
            if result is not None:
                results.append(result)
        return results

    def _flush_partition(self, tp: tuple[str, int]) -> AppendResult | None:
        meta = self.topic(tp[0])
        self._seal(tp, meta)
        buf = self._buffers.get(tp)
        if buf is None or not buf.sealed:
            return None
        pending = buf.sealed
        # The buffer is consumed whatever happens: on failure the records were not written
        # and the caller is told so; the sequence restarts from what the manifest says.
        self._buffers[tp] = _PartitionBuffer()
        try:
            return self._commit(tp, meta, pending)
        except BaseException:
            self._sequences.pop(tp, None)
            raise

    def _commit(self, tp: tuple[str, int], meta: TopicMetadata,
                pending: list[_Pending]) -> AppendResult:
        topic, partition = tp
        segments = _build_segments(pending, meta.config.segment_bytes,
                                   meta.config.index_interval_bytes)
        count = sum(p.count for p in pending)
        data_batches = [p for p in pending if not p.marker]
        first_seq = parse_header(data_batches[0].data).base_sequence if data_batches else -1
        last_seq = first_seq + sum(p.count for p in data_batches) - 1 if data_batches else -1
        max_ts = max((parse_header(p.data).max_timestamp for p in pending), default=NO_TIMESTAMP)
        uploaded: dict[int, list[SegmentEntry]] = {}
        outcome: dict[str, object] = {}

        def build(m: Manifest | None):
            m = m or Manifest.empty(topic, partition)
            epoch = self._epochs.get(tp)
            if epoch is None:
                epoch = self._epochs[tp] = m.leader_epoch
            state = m.producers.get(self.producer_id)
            if data_batches and state is not None:
                if state.epoch > self.producer_epoch:
                    raise OutOfOrderSequenceError(
                        f"producer {self.producer_id} epoch {self.producer_epoch} is older than "
                        f"{state.epoch} on {topic}/{partition}")
                dup = state.find_batch(first_seq, last_seq)
                if dup is not None:
                    outcome["dup"] = dup
                    return None
            hw = m.high_watermark
            if hw not in uploaded:
                uploaded[hw] = [self._upload(topic, partition, seg, hw, epoch)
                                for seg in segments]
            entries = _with_aborted(uploaded[hw], pending, hw, state)
            new_state = _producer_state(state, self.producer_epoch, pending, hw, first_seq,
                                        last_seq, max_ts)
            updates = [AppendSegments(tuple(entries))]
            if new_state is not None:
                updates.append(UpdateProducerState(self.producer_id, new_state))
            outcome["hw"] = hw
            return updates, [AssertLeaderEpoch(epoch)]

        store = self._store(topic, partition)
        store.commit(build, operation="append", writer=self._writer(), now_ms=self.clock())
        if "dup" in outcome:
            dup = outcome["dup"]
            return AppendResult(topic, partition, dup.first_offset, dup.last_offset + 1, count,
                                duplicate=True)
        hw = outcome["hw"]
        return AppendResult(topic, partition, hw, hw + count, count)

    def _upload(self, topic: str, partition: int, seg: "_BuiltSegment", shift: int,
                epoch: int) -> SegmentEntry:
        log = bytearray(seg.log)
        for pos in seg.positions:
            rel = _BASE_OFFSET.unpack_from(log, pos)[0]
            _BASE_OFFSET.pack_into(log, pos, rel + shift)
        base = seg.stats.base_offset + shift
        seg_id = layout.new_segment_id()
        # Index and time index first, the log last: a half-uploaded set is an orphan either way.
        for ext, data in ((".index", seg.index), (".timeindex", seg.timeindex), (".log", log)):
            self.storage.put(layout.segment_path(topic, partition, base, seg_id, ext), data)
        st = seg.stats
        return SegmentEntry(
            base_offset=base, next_offset=st.next_offset + shift, record_count=st.record_count,
            size=len(log), min_timestamp=st.min_timestamp, max_timestamp=st.max_timestamp,
            segment_id=seg_id, writer_id=self.broker_id, leader_epoch=epoch,
            checksum=crc32c(bytes(log)), index_size=len(seg.index),
            timeindex_size=len(seg.timeindex),
            max_timestamp_offset=(st.offset_of_max_timestamp + shift
                                  if st.offset_of_max_timestamp >= 0 else -1))

    # -- idempotent appends from clients ------------------------------------
    def append_batch(self, topic: str, partition: int, records: Sequence[Record], *,
                     producer_id: int, producer_epoch: int, base_sequence: int,
                     compression: str | int | None = None) -> AppendResult:
        """Append one producer batch with the client's own producer id and sequence.

        A retry of a batch already in the log (same producer id, epoch and
        sequence numbers) is not written again: the result has
        ``duplicate=True`` and the offsets of the first write. A sequence that
        does not follow the last one raises :class:`OutOfOrderSequenceError`.
        """
        meta = self.topic(topic)
        self._check_partition(meta, partition)
        if not records:
            raise ConfigError("append_batch needs at least one record")
        rel = [replace(r, offset=i) for i, r in enumerate(records)]
        codec = Compression.parse(compression) if compression is not None else self._codec(meta)
        data = encode_batch(rel, compression=codec, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=base_sequence)
        if len(data) > meta.config.max_message_bytes:
            raise RecordTooLargeError(f"batch of {len(data)} bytes exceeds max.message.bytes="
                                      f"{meta.config.max_message_bytes} of topic {topic!r}")
        saved = (self.producer_id, self.producer_epoch)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        try:
            m = self._store(topic, partition).latest()
            state = m.producers.get(producer_id) if m else None
            last = state.last_sequence if state else -1
            if state is not None and state.find_batch(
                    base_sequence, base_sequence + len(records) - 1) is None \
                    and base_sequence != (last + 1) & 0x7FFFFFFF:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: sequence {base_sequence} does not follow {last} "
                    f"on {topic}/{partition}")
            pending = [_Pending(data, 0, len(records), min(r.timestamp for r in records), False)]
            return self._commit((topic, partition), meta, pending)
        finally:
            self.producer_id, self.producer_epoch = saved

    # -- transactions --------------------------------------------------------
    def begin_transaction(self) -> None:
        """Start a transaction: records sent until commit/abort are transactional."""
        if self._txn_partitions is not None:
            raise ConfigError("a transaction is already open; commit or abort it first")
        for tp in list(self._buffers):
            self._seal(tp, self.topic(tp[0]))
        self._txn_partitions = set()

    def commit_transaction(self) -> list[AppendResult]:
        """Write the records and a COMMIT marker to every partition the transaction touched."""
        return self._end_transaction(abort=False)

    def abort_transaction(self) -> list[AppendResult]:
        """Write an ABORT marker: read_committed readers never see the transaction's records."""
        return self._end_transaction(abort=True)

    def _end_transaction(self, abort: bool) -> list[AppendResult]:
        if self._txn_partitions is None:
            raise ConfigError("no transaction is open")
        touched = sorted(self._txn_partitions)
        self._txn_partitions = None
        results = []
        for tp in touched:
            meta = self.topic(tp[0])
            self._seal(tp, meta)
            buf = self._buffers.setdefault(tp, _PartitionBuffer())
            marker = encode_marker_batch(offset=buf.next_rel, timestamp=self.clock(),
                                         producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch, commit=not abort)
            buf.sealed.append(_Pending(marker, buf.next_rel, 1, self.clock(), True,
                                       marker=True, abort=abort))
            buf.sealed_bytes += len(marker)
            buf.next_rel += 1
            result = self._flush_partition(tp)
            if result is not None:
                results.append(result)
        return results

    def close(self) -> list[AppendResult]:
        """Flush and forget buffers; an open transaction is aborted."""
        if self._txn_partitions is not None:
            self.abort_transaction()
        return self.flush()


@dataclass(frozen=True)
class _BuiltSegment:
    log: bytes
    index: bytes
    timeindex: bytes
    stats: object
    positions: tuple[int, ...]
    pending: tuple[_Pending, ...]


def _build_segments(pending: list[_Pending], segment_bytes: int,
                    index_interval_bytes: int) -> list[_BuiltSegment]:
    """Group sealed batches into segments of at most ``segment.bytes`` (at least one batch each)."""
    out: list[_BuiltSegment] = []
    group: list[_Pending] = []
    size = 0

    def close():
        builder = SegmentBuilder(group[0].rel_base, index_interval_bytes=index_interval_bytes)
        positions = tuple(builder.append(p.data, min_timestamp=p.min_timestamp) for p in group)
        built = builder.build()
        out.append(_BuiltSegment(built.log, built.index, built.timeindex, built.stats,
                                 positions, tuple(group)))

    for p in pending:
        if group and size + len(p.data) > segment_bytes:
            close()
            group, size = [], 0
        group.append(p)
        size += len(p.data)
    if group:
        close()
    return out


def _with_aborted(entries: list[SegmentEntry], pending: list[_Pending], hw: int,
                  state: ProducerState | None) -> list[SegmentEntry]:
    """Record an aborted transaction on the segment holding its ABORT marker (Kafka's .txnindex)."""
    abort = next((p for p in pending if p.marker and p.abort), None)
    if abort is None:
        return entries
    first_txn = next((p for p in pending if p.transactional and not p.marker), None)
    if state is not None and state.txn_first_offset is not None:
        first = state.txn_first_offset
    elif first_txn is not None:
        first = hw + first_txn.rel_base
    else:
        return entries  # an empty transaction: nothing to hide
    marker_offset = hw + abort.rel_base
    out = []
    for e in entries:
        if e.base_offset <= marker_offset < e.next_offset:
            e = replace(e, aborted_txns=tuple(e.aborted_txns) + ((_pid_of(abort), first, marker_offset),))
        out.append(e)
    return out


def _pid_of(p: _Pending) -> int:
    return parse_header(p.data).producer_id


def _producer_state(state: ProducerState | None, epoch: int, pending: list[_Pending], hw: int,
                    first_seq: int, last_seq: int, max_ts: int) -> ProducerState | None:
    """The producer's state after this append (idempotence window and open transaction)."""
    data = [p for p in pending if not p.marker]
    if state is None:
        state = ProducerState(epoch=epoch)
    else:
        state = replace(state, epoch=max(epoch, state.epoch))
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


def unique_writer_id() -> str:
    """An id for ad-hoc writers (CLI runs) in audit records."""
    return uuid.uuid4().hex[:8]
