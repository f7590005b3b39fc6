"""The produce path: batches as received, group-committed per partition through the manifest.

A produce request's batch for one partition is checked where it arrives
(:func:`check_batch`: record batch v2, framing, CRC-32C) and handed to the
:class:`Appender`, which queues it on its partition. One worker per partition
takes everything queued (waiting up to ``commit_interval_ms`` for more only when
several batches are queued already: group commit, see ``Appender._lingers``), and commits it in the thread pool as one segment
upload (more if ``segment.bytes`` says so) and one manifest version
(:meth:`kafkastore.manifest.ManifestStore.commit` with
:class:`~kafkastore.manifest.AppendSegments` and
:class:`~kafkastore.manifest.UpdateProducerState`). Every queued batch's
future resolves only after that version has landed (acks=1 and acks=all are
the same here: the manifest is the only replica that counts).

Batches are stored byte for byte as received; only the 8-byte base offset
(outside the CRC, which is why Kafka put it there) is assigned. Two cases
rewrite more, as Kafka does: a topic with ``message.timestamp.type=LogAppendTime``
gets the append time in the header (attributes and max timestamp, CRC
recomputed, records untouched), and a topic whose ``compression.type`` names
a codec other than the batch's gets the batch recompressed.

Idempotence follows Kafka's ``ProducerStateManager`` against the manifest's
producer state (the last five batches per producer): a batch whose sequence
numbers match a retained one is a duplicate and is answered with the offset
it got the first time, without writing it again (also after a broker
restart, and whichever broker took the first attempt); a sequence that does
not follow the last one is OUT_OF_ORDER_SEQUENCE_NUMBER; an older producer
epoch is INVALID_PRODUCER_EPOCH.

Transactions: a producer's first transactional batch at a partition opens
its transaction there (``ProducerState.txn_first_offset``, which holds the
last stable offset back); the coordinator's COMMIT / ABORT marker
(:meth:`Appender.submit_marker`, never a client's) closes it, and an ABORT
records ``(producer id, first offset, marker offset)`` on the segment entry
holding the marker, which is what Fetch serves as aborted transactions.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, replace
from typing import Callable

import pyarrow.compute as pc

from ..format.arrow_decode import decode_to_arrow
from ..format.compression import Compression
from ..format.control import encode_marker_batch
from ..format.crc import crc32c
from ..maintenance.housekeeper import housekeeper_for
from ..errors import (CommitConflict, CommitUnknownError, CompressionError, CorruptRecordError,
                      CrcMismatchError, KafkaStoreError, StorageError, TopicDeletedError)
from ..errors import BatchRejected  # noqa: F401  (re-exported)
from ..manifest import (AppendSegments, BatchMetadata, Manifest, ManifestStore, ProducerState,
                        SegmentEntry, UpdateProducerState)
from ..format.record_batch import (ATTRIBUTES_OFFSET, HEADER_SIZE, MAGIC, MAGIC_OFFSET,
                            TIMESTAMP_TYPE_MASK, BatchHeader, check_crc, decode_batch,
                            encode_batch, parse_header)
from ..format.segment_build import SegmentBuilder
from ..write.segments import (APPEND, DUPLICATE, FENCED, PRODUCER_ID_EXPIRATION_MS, TXN_ENDED,
                              Uploads, check_sequence, commit_appending, entries_with_aborted,
                              expired_producers, write_segment)
from .wire import error_codes as E
from .wire.error_codes import NOT_COORDINATOR  # a marker whose fencing condition failed (see submit_marker)

log = logging.getLogger("kafkastore.serve.append")

_BASE_OFFSET = struct.Struct(">q")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_CRC_OFFSET = 17
_MAX_TIMESTAMP_OFFSET = 35
_INT32_MASK = 0x7FFFFFFF
#: A partition with this many bytes queued commits at once instead of waiting the interval.
GROUP_COMMIT_BYTES = 1 << 20
#: A partition's commit lingers only when at least this many appends are queued as it starts
#: (evidence that appends are arriving together); fewer commit at once (see Appender._lingers).
GROUP_COMMIT_SIBLINGS = 2
#: Seconds a partition's worker waits for appends before it and its queue go (bounded state).
WORKER_IDLE_S = 60.0




def check_batch(data) -> BatchHeader:
    """Check that ``data`` is exactly one record batch v2 with a valid CRC; its header.

    Raises :class:`BatchRejected` with CORRUPT_MESSAGE (bad framing or CRC),
    UNSUPPORTED_FOR_MESSAGE_FORMAT (magic other than 2) or INVALID_RECORD
    (offsets and counts that do not agree, more than one batch).
    """
    n = len(data)
    if n < HEADER_SIZE:
        raise BatchRejected(E.CORRUPT_MESSAGE, f"record set of {n} bytes is shorter than a batch header")
    if data[MAGIC_OFFSET] != MAGIC:
        raise BatchRejected(E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                            f"record batch magic {data[MAGIC_OFFSET]} (only v2 is accepted)")
    try:
        header = parse_header(data, 0)
    except CorruptRecordError as exc:
        raise BatchRejected(E.CORRUPT_MESSAGE, str(exc)) from None
    if header.size != n:
        raise BatchRejected(E.INVALID_RECORD if header.size < n else E.CORRUPT_MESSAGE,
                            f"record set of {n} bytes holds a batch of {header.size} bytes "
                            f"(exactly one batch per partition)")
    try:
        check_crc(data, 0, header)
    except CrcMismatchError as exc:
        raise BatchRejected(E.CORRUPT_MESSAGE, str(exc)) from None
    if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
        raise BatchRejected(E.INVALID_RECORD,
                            f"batch of {header.record_count} records with last offset delta "
                            f"{header.last_offset_delta}")
    if header.is_control:
        raise BatchRejected(E.INVALID_RECORD, "clients may not produce control batches")
    if header.is_transactional and header.producer_id < 0:
        raise BatchRejected(E.INVALID_RECORD, "a transactional batch needs a producer id")
    return header



@dataclass
class Outcome:
    """What a produce partition response says."""

    error: int = E.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass
class _Item:
    data: bytes
    header: BatchHeader
    future: asyncio.Future | None
    marker: bool = False  # a COMMIT / ABORT control batch from the transaction coordinator
    abort: bool = False
    #: A marker's condition, asked at each attempt of the conditional commit with the
    #: producer's state in the manifest being committed on (see :meth:`Appender.submit_marker`).
    guard: "Callable[[ProducerState | None], bool] | None" = None
    #: A transactional batch's transaction (its start at the coordinator), kept on the
    #: producer's state when the batch opens a transaction here (see submit).
    txn_start_ms: int | None = None


@dataclass
class _Prepared:
    index: int
    data: bytes
    header: BatchHeader
    min_timestamp: int
    append_time: int
    marker: bool = False
    abort: bool = False
    guard: "Callable[[ProducerState | None], bool] | None" = None
    txn_start_ms: int | None = None


def _set_log_append_time(data: bytes, header: BatchHeader, now_ms: int) -> tuple[bytes, BatchHeader]:
    buf = bytearray(data)
    attrs = header.attributes | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, ATTRIBUTES_OFFSET, attrs)
    _I64.pack_into(buf, _MAX_TIMESTAMP_OFFSET, now_ms)
    _U32.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    out = bytes(buf)
    return out, parse_header(out, 0)


def _recompress(data: bytes, header: BatchHeader, codec: Compression) -> tuple[bytes, BatchHeader]:
    _, records = decode_batch(data, 0, verify_crc=False)
    out = encode_batch(records, compression=codec, timestamp_type=header.timestamp_type,
                       producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                       base_sequence=header.base_sequence,
                       partition_leader_epoch=header.partition_leader_epoch,
                       base_offset=0, last_offset=header.last_offset_delta,
                       max_timestamp=header.max_timestamp)
    return out, parse_header(out, 0)


def decoded_min_timestamp(data: bytes, topic: str, partition: int) -> int:
    """Smallest record timestamp of a batch (-1 if none); decodes the records (C kernel),
    which also proves that they decode (the broker's warm-up runs it once at start)."""
    rb = decode_to_arrow(data, topic=topic, partition=partition, include_headers=False)
    ts = rb.column(rb.schema.get_field_index("timestamp"))
    low = pc.min(ts).as_py()
    if low is None:
        return -1
    return int(low.timestamp() * 1000) if hasattr(low, "timestamp") else int(low)


class Appender:
    """Per-partition queues and group commits (see the module docstring)."""

    def __init__(self, server):
        self.server = server
        self._queues: dict[tuple[str, int], list[_Item]] = {}
        self._wake: dict[tuple[str, int], asyncio.Event] = {}
        self._workers: dict[tuple[str, int], asyncio.Task] = {}
        self._busy: set[tuple[str, int]] = set()
        self.commits = 0
        #: Commit attempts (plans built); beyond ``commits`` they are lost races (metrics).
        self.commit_attempts = 0
        #: A partition's worker, queue and wake-up go after this many idle seconds.
        self.idle_s = WORKER_IDLE_S
        self.producer_expiration_ms = PRODUCER_ID_EXPIRATION_MS

    @property
    def clock(self):
        """The server's :class:`~kafkastore.clock.Clock` (append times, producer expiry)."""
        return self.server.clock

    @property
    def interval_s(self) -> float:
        return max(0.0, self.server.options.commit_interval_ms / 1000)

    def submit(self, topic: str, partition: int, data: bytes, header: BatchHeader,
               wait: bool = True, guard: "Callable[[ProducerState | None], bool] | None" = None,
               txn_start_ms: int | None = None) -> asyncio.Future:
        """Queue one checked batch; the future gives its :class:`Outcome` once committed.

        Synchronous (no await), so batches queue in the order their requests arrived.
        ``guard``, for a transactional batch: asked at each attempt of the commit when the
        batch would open a transaction at the partition; False refuses it (INVALID_TXN_STATE:
        its transaction ended since it was verified, see ``coordinators.txn_service.append_guard``).
        ``txn_start_ms``: the start of the transaction it was verified for, kept on the
        producer's state with the open transaction, so that a marker of another transaction
        of the same producer epoch cannot end it (see :meth:`submit_marker`).
        """
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        tp = (topic, partition)
        self._queues.setdefault(tp, []).append(_Item(data, header, fut, guard=guard,
                                                     txn_start_ms=txn_start_ms))
        if tp not in self._workers:
            self._wake[tp] = asyncio.Event()
            self._workers[tp] = loop.create_task(self._worker(tp))
        self._wake[tp].set()
        return fut

    def submit_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                      commit: bool, now_ms: int, coordinator_epoch: int = 0,
                      guard: "Callable[[ProducerState | None], bool] | None" = None) -> asyncio.Future:
        """Queue a transaction's COMMIT or ABORT marker (the coordinator's, never a client's);
        the future gives its :class:`Outcome` once committed. It ends the producer's open
        transaction at the partition (the last stable offset moves past it) and, for an abort,
        records the aborted range on the segment holding the marker (Kafka's ``.txnindex``).

        ``guard``, when given, is the marker's fencing condition: it is asked at every attempt
        of the partition's conditional commit, with the producer's state in the manifest that
        attempt commits on, and a False answer refuses the marker (NOT_COORDINATOR) instead of
        writing it (the coordinator lost its authority meanwhile, or the open transaction an
        operator's abort was aimed at changed)."""

        data = encode_marker_batch(offset=0, timestamp=now_ms, producer_id=producer_id,
                                   producer_epoch=producer_epoch, commit=commit,
                                   coordinator_epoch=coordinator_epoch)
        fut = self.submit(topic, partition, data, parse_header(data, 0))
        item = self._queues[(topic, partition)][-1]
        item.marker, item.abort, item.guard = True, not commit, guard
        return fut

    async def _worker(self, tp: tuple[str, int]) -> None:
        wake = self._wake[tp]
        while True:
            try:
                await asyncio.wait_for(wake.wait(), self.idle_s)
            except asyncio.TimeoutError:
                if not self._queues.get(tp):
                    # Idle: the partition's state goes (no await from here on, so a submit
                    # either came before and is seen above, or comes after and starts anew).
                    self._queues.pop(tp, None)
                    self._wake.pop(tp, None)
                    self._workers.pop(tp, None)
                    return
                continue
            wake.clear()
            if not self._queues.get(tp):
                continue
            self._busy.add(tp)
            try:
                if self._lingers(self._queues[tp]):
                    await asyncio.sleep(self.interval_s)  # linger: let more appends join
                items, self._queues[tp] = self._queues[tp], []
                started = self.clock.monotonic_s()
                try:
                    outcomes, manifest = await self.server.run(self.commit, tp, items)
                except Exception as exc:  # noqa: BLE001 - every failure becomes an error code
                    outcomes, manifest = [_failure(exc)] * len(items), None
                log.debug("%s/%d: %d batches, %d bytes committed in %.1f ms", tp[0], tp[1], len(items),
                          sum(i.header.size for i in items), (self.clock.monotonic_s() - started) * 1000)
                for item, outcome in zip(items, outcomes):
                    if item.future is not None and not item.future.done():
                        item.future.set_result(outcome)
                if manifest is not None:
                    self.server.meta.put_manifest(manifest)
                    self.server.notify_data(tp)
            finally:
                self._busy.discard(tp)
            if self._queues.get(tp):
                wake.set()

    def _lingers(self, queued: list[_Item]) -> bool:
        """Whether a partition's commit waits ``commit_interval_ms`` for more appends first.

        Adaptive, as a database's group commit: only when ``GROUP_COMMIT_SIBLINGS`` appends
        are already queued as the commit starts (they arrived together, or while the last
        commit ran: more are likely on their way). A lone append commits at once; appends
        arriving while it commits queue up and share the next commit (which lingers only if
        they are several).
        Not for a queue with a marker or a transactional batch in it: a transaction's end
        waits on every one of its batches (its client sends EndTxn once they are all
        acknowledged) and then on its markers, so a linger there is added to each transaction
        in full, once per partition stage. Appends that arrive while such a commit runs still
        share the next one (its worker takes everything queued)."""
        return (bool(self.interval_s) and len(queued) >= GROUP_COMMIT_SIBLINGS
                and sum(i.header.size for i in queued) < GROUP_COMMIT_BYTES
                and not any(i.marker or i.header.is_transactional for i in queued))

    async def close(self) -> None:
        """Wait until every queued batch is committed (or failed), then stop the workers."""
        for _ in range(600):
            if not any(self._queues.values()) and not self._busy:
                break
            await asyncio.sleep(0.05)
        for task in self._workers.values():
            task.cancel()

    # -- the commit (runs in the thread pool) -------------------------------------
    def commit(self, tp: tuple[str, int], items: list[_Item]) -> tuple[list[Outcome], Manifest | None]:
        """Commit ``items`` to the partition as one manifest version; one outcome per item."""
        topic, partition = tp
        outcomes = [Outcome() for _ in items]
        meta = self.server.meta.topic(topic)
        if meta is None or not 0 <= partition < meta.partitions:
            return [Outcome(E.UNKNOWN_TOPIC_OR_PARTITION, message=f"unknown partition {topic}/{partition}")
                    for _ in items], None
        cfg = meta.config
        now = self.clock.wall_ms()
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        codec_name = cfg.compression_codec
        codec = Compression.parse(codec_name) if codec_name is not None else None
        before = cfg["message.timestamp.before.max.ms"]
        after = cfg["message.timestamp.after.max.ms"]
        prepared: list[_Prepared] = []
        for i, item in enumerate(items):
            data, header = item.data, item.header
            if item.marker:
                prepared.append(_Prepared(i, data, header, header.max_timestamp, -1, True, item.abort,
                                          item.guard))
                continue
            try:
                if header.size > cfg.max_message_bytes:
                    raise BatchRejected(E.MESSAGE_TOO_LARGE,
                                        f"batch of {header.size} bytes exceeds max.message.bytes="
                                        f"{cfg.max_message_bytes} of topic {topic!r}")
                if codec is not None and header.compression != codec:
                    data, header = _recompress(data, header, codec)
                if log_append:
                    data, header = _set_log_append_time(data, header, now)
                    min_ts = now
                else:
                    min_ts = decoded_min_timestamp(data, topic, partition)
                    if now - min_ts > before or header.max_timestamp - now > after:
                        raise BatchRejected(E.INVALID_TIMESTAMP,
                                            f"timestamp outside message.timestamp.before/after.max.ms "
                                            f"of topic {topic!r}")
            except BatchRejected as exc:
                outcomes[i] = Outcome(exc.code, message=str(exc))
                continue
            except (CorruptRecordError, CompressionError) as exc:
                outcomes[i] = Outcome(E.CORRUPT_MESSAGE, message=str(exc))
                continue
            prepared.append(_Prepared(i, data, header, min_ts, now if log_append else -1,
                                      guard=item.guard, txn_start_ms=item.txn_start_ms))
        if not prepared:
            return outcomes, None

        store = ManifestStore(self.server.storage, topic, partition)
        uploads = Uploads(store)
        planned: dict[int, Outcome] = {}
        wrote = [False]   # whether the last build accepted anything (then a put followed)

        def build(m: Manifest | None):
            self.commit_attempts += 1
            m = m or Manifest.empty(topic, partition)
            planned.clear()
            wrote[0] = False
            producers: dict[int, ProducerState] = dict(m.producers)
            changed: dict[int, ProducerState] = {}
            offset = m.high_watermark
            accepted: list[tuple[_Prepared, int]] = []
            aborted: list[tuple[int, int, int]] = []
            for p in prepared:
                h = p.header
                if p.marker:
                    if p.guard is not None and not p.guard(producers.get(h.producer_id)):
                        planned[p.index] = Outcome(NOT_COORDINATOR, message=(
                            f"marker of producer {h.producer_id} epoch {h.producer_epoch} fenced: "
                            f"its writer's authority or the transaction it ends changed"),
                            log_start_offset=m.log_start_offset)
                        continue
                    verdict = _end_transaction(producers.get(h.producer_id), h, offset)
                    if isinstance(verdict, Outcome):
                        verdict.log_start_offset = m.log_start_offset
                        planned[p.index] = verdict
                        continue
                    st, first = verdict
                    if p.abort and first is not None:
                        aborted.append((h.producer_id, first, offset))
                    producers[h.producer_id] = changed[h.producer_id] = st
                elif h.producer_id >= 0:
                    verdict = _check_sequence(producers.get(h.producer_id), h)
                    if isinstance(verdict, Outcome):
                        verdict.log_start_offset = m.log_start_offset
                        planned[p.index] = verdict
                        continue
                    last_seq = (h.base_sequence + h.last_offset_delta) & _INT32_MASK
                    st = verdict.with_batch(BatchMetadata(h.base_sequence, last_seq, offset,
                                                          offset + h.last_offset_delta,
                                                          h.max_timestamp))
                    if h.is_transactional and st.txn_first_offset is None:
                        # Opens a transaction here: only while the one it was verified for
                        # is still open at its coordinator (a marker may have ended it since).
                        if p.guard is not None and not p.guard(producers.get(h.producer_id)):
                            planned[p.index] = Outcome(E.INVALID_TXN_STATE, message=(
                                f"the transaction of producer {h.producer_id} epoch "
                                f"{h.producer_epoch} ended before this batch was appended"),
                                log_start_offset=m.log_start_offset)
                            continue
                        st = replace(st, txn_first_offset=offset, txn_start_ms=p.txn_start_ms)
                    producers[h.producer_id] = changed[h.producer_id] = st
                planned[p.index] = Outcome(E.NONE, offset, p.append_time, m.log_start_offset)
                accepted.append((p, offset))
                offset += h.last_offset_delta + 1
            if not accepted:
                return None
            wrote[0] = True
            # Uploaded once per placement (high watermark, batches); what grew too old
            # meanwhile goes up again (kafkastore.segment_writer).
            groups = _roll(accepted, cfg.segment_bytes)
            entries = uploads.get((m.high_watermark, tuple(p.index for p, _ in accepted)),
                                  len(groups), lambda i: self._write(topic, partition, groups[i],
                                                                     cfg, m.leader_epoch))
            updates = [AppendSegments(tuple(entries_with_aborted(entries, aborted)))]
            updates += [UpdateProducerState(pid, st) for pid, st in changed.items()]
            updates += [UpdateProducerState(pid, None)
                        for pid in expired_producers(m, changed, now, self.producer_expiration_ms)]
            for i in planned:
                planned[i].log_start_offset = m.log_start_offset
            return updates, []

        for pause in (*OUT_OF_ORDER_RECHECKS_S, None):
            new = commit_appending(store, build, operation="produce",
                                   writer=f"broker-{self.server.node_id}", now_ms=now,
                                   uploaded=f"the segment(s) of {len(prepared)} batch(es)",
                                   consequence="nothing of them was committed")
            if pause is None or wrote[0] or not any(o.error == E.OUT_OF_ORDER_SEQUENCE_NUMBER
                                                    for o in planned.values()):
                break
            # Nothing was put, so no conditional write checked the verdict, and OUT_OF_ORDER
            # ends an idempotent producer (librdkafka makes it fatal at the head of its
            # line). Any broker may append to a partition: after a leader move the batch
            # before this one may still be landing through the old leader, acknowledged to
            # the client by the time this answer arrives. Decide again on a fresh head.
            self.clock.sleep(pause)
            store.forget_cached()
        self.commits += 1
        # merging + gc of what we write, on its own thread
        housekeeper_for(self.server.storage).poke(topic, partition, new)
        for i, o in planned.items():
            outcomes[i] = o
        return outcomes, new

    def _write(self, topic: str, partition: int, group: list[tuple[_Prepared, int]], cfg,
               epoch: int) -> SegmentEntry:
        """Write one segment of accepted batches at their offsets; its entry."""
        builder = SegmentBuilder(group[0][1], index_interval_bytes=cfg.index_interval_bytes,
                                 verify_crc=False)
        for p, offset in group:
            buf = bytearray(p.data)
            _BASE_OFFSET.pack_into(buf, 0, offset)
            builder.append(buf, min_timestamp=p.min_timestamp if p.min_timestamp >= 0 else None)
        built = builder.build()
        return write_segment(self.server.storage, topic, partition, built.stats, built.log,
                             built.index, built.timeindex, writer_id=max(self.server.node_id, 0),
                             leader_epoch=epoch, index_interval_bytes=cfg.index_interval_bytes)


#: Pauses before deciding an all-refused OUT_OF_ORDER_SEQUENCE_NUMBER again (error path only).
OUT_OF_ORDER_RECHECKS_S = (0.05, 0.25, 1.0)


def _roll(accepted: list[tuple[_Prepared, int]], segment_bytes: int
          ) -> list[list[tuple[_Prepared, int]]]:
    """The accepted batches cut into segments of at most ``segment.bytes`` (one batch at least)."""
    groups: list[list[tuple[_Prepared, int]]] = []
    size = 0
    for p, offset in accepted:
        if not groups or (size + p.header.size > segment_bytes and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append((p, offset))
        size += p.header.size
    return groups


def _check_sequence(state: ProducerState | None, h: BatchHeader) -> ProducerState | Outcome:
    """Kafka's sequence check: the state to append to, or the outcome (duplicate or error).
    A transactional copy of a batch whose transaction already ended (``TXN_ENDED``) is
    INVALID_TXN_STATE: the client aborts and bumps its epoch, so nothing is lost."""
    verdict, value = check_sequence(state, h.producer_id, h.producer_epoch, h.base_sequence,
                                    (h.base_sequence + h.last_offset_delta) & _INT32_MASK,
                                    transactional=h.is_transactional)
    if verdict == APPEND:
        return value
    if verdict == DUPLICATE:
        return Outcome(E.NONE, value.first_offset)
    code = {FENCED: E.INVALID_PRODUCER_EPOCH, TXN_ENDED: E.INVALID_TXN_STATE}.get(
        verdict, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    return Outcome(code, message=value)


def _end_transaction(state: ProducerState | None, h: BatchHeader, offset: int
                     ) -> tuple[ProducerState, int | None] | Outcome:
    """A marker at ``offset``: the producer's state with its transaction closed, and the first
    offset of the transaction it closed (None if none was open here); an older epoch than the
    partition knows is INVALID_PRODUCER_EPOCH (Kafka refuses such markers too). A newer epoch
    (a fencing abort) replaces the partition's epoch, so the fenced instance's writes fail."""
    if state is None:
        return ProducerState(epoch=h.producer_epoch, last_timestamp=h.max_timestamp), None
    if h.producer_epoch < state.epoch:
        return Outcome(E.INVALID_PRODUCER_EPOCH,
                       message=f"marker of producer {h.producer_id} epoch {h.producer_epoch} is "
                               f"older than {state.epoch}")
    first = state.txn_first_offset
    if h.producer_epoch > state.epoch:
        state = replace(state, epoch=h.producer_epoch, batches=())
    return replace(state, txn_first_offset=None, txn_start_ms=None,
                   last_timestamp=max(state.last_timestamp, h.max_timestamp)), first


def _failure(exc: BaseException) -> Outcome:
    if isinstance(exc, TopicDeletedError):  # deleted (maybe by another broker) since looked up
        return Outcome(E.UNKNOWN_TOPIC_OR_PARTITION, message=str(exc))
    if isinstance(exc, CommitConflict):
        return Outcome(E.REQUEST_TIMED_OUT, message=f"commit kept conflicting: {exc}")
    if isinstance(exc, CommitUnknownError):
        # Kafka's answer when a write may have been persisted. KAFKA_STORAGE_ERROR tells
        # clients it was not (librdkafka marks the records NOT_PERSISTED and an idempotent
        # producer may renumber them under a bumped epoch: stored twice).
        return Outcome(E.REQUEST_TIMED_OUT, message=str(exc))
    if isinstance(exc, StorageError):   # failed before the commit: nothing was written
        return Outcome(E.KAFKA_STORAGE_ERROR, message=str(exc))
    if isinstance(exc, KafkaStoreError):
        log.warning("append failed: %s", exc)
        return Outcome(E.UNKNOWN_SERVER_ERROR, message=str(exc))
    log.error("append failed", exc_info=exc)
    return Outcome(E.UNKNOWN_SERVER_ERROR, message=repr(exc))
