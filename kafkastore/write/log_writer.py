"""The log writer: the write side of the log (the library's ``LogWriter``, formerly ``Broker``).

A :class:`LogWriter` buffers records per topic-partition, seals them into record
batches (``batch.size`` / ``linger.ms``, the topic's or producer's codec), and
on :meth:`LogWriter.flush` (or, with ``commit_on_roll``, when a partition's buffer
reaches ``segment.bytes`` / ``segment.ms``) turns them into segments (rolled
by ``segment.bytes`` / ``segment.ms``), uploads their ``.log`` / ``.index`` /
``.timeindex`` and commits one manifest version per partition. Records are
visible only once that version lands (acks=all).

Offsets are assigned at commit time. A flush builds its segment with offsets
relative to 0; to commit at high watermark ``hw`` it adds ``hw`` to each
batch's 8-byte base offset, which lies outside the CRC (that is why Kafka put
it there), and names the files after ``hw``. The indexes hold offsets relative
to the segment's base, so they do not change. When another writer commits
first, the flush re-reads the manifest and does the same again at the new
high watermark under a new file name: two writers never share an offset, and
nothing is lost. Files of a lost attempt are never deleted here (the outcome
may be unknown); no manifest lists them, so readers never see them, and
:mod:`kafkastore.maintenance.gc` removes them after the grace period.

Fencing: :meth:`LogWriter.claim` raises the partition's leader epoch in the
manifest; every append requires the writer's epoch to be at least the
manifest's, so a writer that lost leadership gets :class:`FencedError` and
cannot touch the log. Writers that never claim (the CLI's ``produce``) write
under the epoch they found and are fenced as soon as someone claims.

Idempotence: the writer has a producer id and numbers its batches as Kafka's
idempotent producer does; the manifest keeps each producer's last five
appends, and an append whose sequence numbers match one of them is a
duplicate and is not written again (:meth:`LogWriter.append_batch` for clients
that retry with their own producer id and sequence).

Batching (records into sealed batches, batches into segments, the producer's state after
an append) is :mod:`kafkastore.write.batching`; the Arrow path (``send_arrow``,
``send_many``) is :mod:`kafkastore.write.arrow_ingest`; finding and aborting a hanging
transaction offline is :mod:`kafkastore.write.transactions`.
"""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from ..clock import Clock, as_clock
from ..errors import (ConfigError, InvalidRecordError, OutOfOrderSequenceError, RecordTooLargeError,
                      StorageError, UnknownTopicError)
from ..format.compression import Compression
from ..format.control import encode_marker_batch
from ..format.partitioner import StickyPartitioner, partition_for_key
from ..format.record_batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Record, encode_batch, parse_header
from ..maintenance.housekeeper import Housekeeper, housekeeper_for
from ..manifest import (AppendSegments, AssertHighWatermark, AssertLeaderEpoch, Manifest, ManifestStore,
                        SetLeaderEpoch, UpdateProducerState)
from ..storage import Storage
from ..topics.admin import TopicMetadata, check_not_internal, load_topic
from .arrow_ingest import ArrowIngest
from .batching import (BATCH_OVERHEAD, LONG_MAX, MAX_TIMESTAMP_MS, MAX_TS_AND_COUNT, MAX_TS_OFFSET,
                       RECORD_OVERHEAD, Buffered, PartitionBuffer, Pending, TopicSettings,
                       aborted_transaction, build_segments, check_timestamp, producer_state,
                       writer_pool)
from .segments import (DUPLICATE, FENCED, OUT_OF_ORDER, TXN_ENDED, Uploads, check_sequence,
                       commit_appending, entries_with_aborted, expired_producers, write_segment)


@dataclass(frozen=True)
class AppendResult:
    """Where one flush put a partition's records: offsets ``[base_offset, next_offset)``."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    record_count: int
    duplicate: bool = False



class LogWriter(ArrowIngest):
    """Writes records to the topics under ``storage``; see the module docstring.

    ``compression`` is the producer's codec (used where the topic says
    ``compression.type=producer``); ``clock`` is a :class:`~kafkastore.clock.Clock`
    (default: the storage's; an old bare epoch-ms callable still works); ``producer_id`` defaults to a random positive
    63-bit id (Kafka allocates them; a random id collides with negligible
    probability).

    ``commit_on_roll`` (default True): when a record would take a
    partition's buffer past ``segment.bytes``, or arrives ``segment.ms`` or
    more after the buffer's first one, :meth:`send` commits the buffer before
    buffering the record (a producer that never flushes still writes bounded
    segments; if that commit fails, the record was not buffered). False keeps everything
    buffered until :meth:`flush`, which then writes as many segments as
    ``segment.bytes`` / ``segment.ms`` call for in one commit per partition:
    nothing is visible unless the whole flush of a partition lands (the CLI's
    ``produce`` uses this so a bad input line leaves the log untouched).

    When a flush fails with a storage error (including an unknown commit
    outcome), the partition's batches stay buffered with their sequence
    numbers: calling :meth:`flush` again retries them, and idempotence drops
    them if the failed attempt did land. Other failures (fencing, a
    sequence error) drop the buffer.
    """

    def __init__(self, storage: Storage, *, broker_id: int = 0, producer_id: int | None = None,
                 producer_epoch: int = 0, compression: str | int | None = None,
                 batch_size: int = 16384, linger_ms: int = 0,
                 clock: Clock | Callable[[], int] | None = None, rng: random.Random | None = None,
                 commit_on_roll: bool = True, housekeeping: "bool | Housekeeper" = True):
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
        # Epoch ms from one Clock: the storage's unless given (an old bare ms callable still works).
        self.clock = as_clock(clock, "ms") if clock is not None else storage.clock
        self.commit_on_roll = commit_on_roll
        #: Called with each :class:`AppendResult` once its manifest version landed (also for
        #: commits made by :meth:`send` when a segment rolls), so callers can always tell
        #: exactly what is committed, even when a later commit fails.
        self.on_commit: Callable[[AppendResult], None] | None = None
        self._topics: dict[str, TopicMetadata] = {}
        self._settings: dict[str, TopicSettings] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        self._buffers: dict[tuple[str, int], PartitionBuffer] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self._sequences: dict[tuple[str, int], int] = {}
        self._txn_partitions: set[tuple[str, int]] | None = None
        #: Merges small segments and runs gc for the partitions this writer writes, on a
        #: background thread after its commits (kafkastore.maintenance.housekeeper); False turns it off.
        self.housekeeper: Housekeeper | None = (
            housekeeper_for(storage) if housekeeping is True
            else housekeeping if isinstance(housekeeping, Housekeeper) else None)

    # -- topics --------------------------------------------------------------
    #: Internal topics (:func:`kafkastore.topics.is_internal_topic`) refuse every write
    #: (:class:`InternalTopicError`) unless their owner, e.g. the OffsetsStore, sets this.
    allow_internal: bool = False
    #: ``{(topic, partition): offset}``: a commit to such a partition lands only while its high
    #: watermark is still ``offset`` (else :class:`RequirementFailedError`, nothing written).
    #: For writers that allocate from what they read, e.g. the schema registry's ids.
    expect_high_watermark: dict | None = None

    def topic(self, name: str) -> TopicMetadata:
        """Topic metadata (cached for the writer's life; configs are read once)."""
        meta = self._topics.get(name)
        if meta is None:
            if not self.allow_internal:
                check_not_internal(name, "produce to")
            meta = self._topics[name] = load_topic(self.storage, name)
        return meta

    def _topic_settings(self, name: str) -> TopicSettings:
        st = self._settings.get(name)
        if st is None:
            meta = self.topic(name)
            c = meta.config
            st = self._settings[name] = TopicSettings(
                meta=meta, codec=self._codec(meta), compact=c.compact,
                max_message_bytes=c.max_message_bytes,
                batch_limit=min(self.batch_size, c.max_message_bytes - BATCH_OVERHEAD),
                segment_bytes=c.segment_bytes, segment_ms=c.segment_ms,
                index_interval_bytes=c.index_interval_bytes,
                log_append=c.message_timestamp_type == "LogAppendTime",
                before_max_ms=c["message.timestamp.before.max.ms"],
                after_max_ms=c["message.timestamp.after.max.ms"],
                any_timestamp=(c.message_timestamp_type == "LogAppendTime"
                               or c["message.timestamp.before.max.ms"] == LONG_MAX
                               and c["message.timestamp.after.max.ms"] == LONG_MAX))
        return st

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
                                             now_ms=self.clock.wall_ms())
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
        st = self._settings.get(topic) or self._topic_settings(topic)
        if key is None:
            if st.compact:
                raise InvalidRecordError(
                    f"topic {topic!r} is compacted (cleanup.policy=compact): records need a key")
            size = RECORD_OVERHEAD
        else:
            size = RECORD_OVERHEAD + len(key)
        if value is not None:
            size += len(value)
        if headers:
            headers = tuple(headers)
            size += sum(len(k.encode()) + len(v or b"") + 2 for k, v in headers)
        else:
            headers = ()
        if size + BATCH_OVERHEAD > st.max_message_bytes:
            raise RecordTooLargeError(
                f"record of about {size} bytes exceeds max.message.bytes={st.max_message_bytes} "
                f"of topic {topic!r}")
        now = self.clock.wall_ms()
        if timestamp is None:
            timestamp = now
        elif not (st.any_timestamp and type(timestamp) is int
                  and 0 <= timestamp <= MAX_TIMESTAMP_MS):
            timestamp = check_timestamp(st, timestamp, now)
        if partition is None:
            if key is None:
                sticky = self._sticky.get(topic)
                if sticky is None:
                    sticky = self._sticky[topic] = StickyPartitioner(
                        st.meta.partitions, self.batch_size, self._rng.randrange)
                partition = sticky.next(size)
            else:
                partition = partition_for_key(key, st.meta.partitions)
        elif type(partition) is not int or not 0 <= partition < st.meta.partitions:
            self._check_partition(st.meta, partition)
        tp = (topic, partition)
        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = PartitionBuffer()
        elif (self.commit_on_roll and (buf.records or buf.sealed)
              and (now - buf.first_append_ms >= st.segment_ms
                   or buf.sealed_bytes + buf.records_bytes + size > st.segment_bytes)):
            # Roll before this record (segment.ms reached, or it would not fit segment.bytes):
            # if that commit fails, this record was not buffered and the caller knows it.
            self._flush_partition(tp)
            buf = self._buffers[tp]
        in_txn = self._txn_partitions is not None
        records = buf.records
        if records and (
                buf.in_txn != in_txn
                or buf.records_bytes + size > st.batch_limit
                or (self.linger_ms and now - buf.batch_started_ms >= self.linger_ms)):
            self._seal(tp, st)
            records = buf.records
        if not records:
            buf.batch_started_ms = now
            buf.in_txn = in_txn
            if not buf.sealed:
                buf.first_append_ms = now
        records.append(Buffered(buf.next_rel + len(records), timestamp, key, value, headers))
        buf.records_bytes += size
        if in_txn:
            self._txn_partitions.add(tp)
        return partition

    def _check_partition(self, meta: TopicMetadata, partition: int) -> None:
        if (not isinstance(partition, int) or isinstance(partition, bool)
                or not 0 <= partition < meta.partitions):
            raise UnknownTopicError(
                f"topic {meta.name!r} has partitions 0..{meta.partitions - 1}, not {partition!r}")

    def _next_sequence(self, tp: tuple[str, int], count: int) -> int:
        if tp not in self._sequences:
            m = self._store(*tp).latest()
            state = m.producers.get(self.producer_id) if m else None
            same_epoch = state is not None and state.epoch == self.producer_epoch
            self._sequences[tp] = (state.last_sequence + 1) & 0x7FFFFFFF if same_epoch else 0
        seq = self._sequences[tp]
        self._sequences[tp] = (seq + count) & 0x7FFFFFFF
        return seq

    def _seal(self, tp: tuple[str, int], st: TopicSettings) -> None:
        buf = self._buffers[tp]
        if not buf.records:
            return
        records = buf.records
        append_time = self.clock.wall_ms()
        data = encode_batch(
            records, compression=st.codec,
            timestamp_type=LOG_APPEND_TIME if st.log_append else CREATE_TIME,
            max_timestamp=append_time if st.log_append else None,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self._next_sequence(tp, len(records)),
            transactional=buf.in_txn)
        if len(data) > st.max_message_bytes:
            if len(records) == 1:
                # The estimate in send() let it through; drop it so the buffer is not stuck.
                self._sequences[tp] = (self._sequences[tp] - 1) & 0x7FFFFFFF
                buf.records = []
                buf.records_bytes = 0
                raise RecordTooLargeError(
                    f"record batch of {len(data)} bytes exceeds max.message.bytes="
                    f"{st.max_message_bytes} of topic {st.meta.name!r}")
            # Split in two and try again: the size estimate was too optimistic.
            half = len(records) // 2
            self._sequences[tp] = (self._sequences[tp] - len(records)) & 0x7FFFFFFF
            buf.records = records[:half]
            rest = records[half:]
            self._seal(tp, st)
            buf.records = [r._replace(offset=buf.next_rel + i) for i, r in enumerate(rest)]
            buf.records_bytes = 0
            self._seal(tp, st)
            return
        min_ts = append_time if st.log_append else min(r.timestamp for r in records)
        buf.sealed.append(Pending(data, buf.next_rel, len(records), min_ts, buf.in_txn,
                                   appended_ms=buf.batch_started_ms))
        buf.sealed_bytes += len(data)
        buf.next_rel += len(records)
        buf.records = []
        buf.records_bytes = 0

    def flush(self) -> list[AppendResult]:
        """Commit everything buffered; returns one result per partition written.

        Partitions commit concurrently (each is its own manifest, so their
        commits are independent); :attr:`on_commit` is called on this thread,
        in partition order, for every commit that landed. If some partition
        fails, the others still commit and the first failure (in partition
        order) is raised once all have finished."""
        tps = [tp for tp in sorted(self._buffers)
               if self._buffers[tp].sealed or self._buffers[tp].records]
        if len(tps) < 2:
            results = []
            for tp in tps:
                results += self._flush_partition(tp)
            return results
        for tp in tps:
            self._seal(tp, self._topic_settings(tp[0]))  # clock and sequences: this thread

        def run(tp):
            landed: list[AppendResult] = []
            try:
                self._flush_partition(tp, notify=landed.append)
                return landed, None
            except BaseException as exc:  # noqa: BLE001 -- re-raised below, in order
                return landed, exc

        outcomes = list(writer_pool().map(run, tps))
        results, error = [], None
        for landed, exc in outcomes:
            for result in landed:
                if self.on_commit is not None:
                    self.on_commit(result)
            results += landed
            if error is None:
                error = exc
        if error is not None:
            raise error
        return results

    def _flush_partition(self, tp: tuple[str, int],
                         notify: Callable[[AppendResult], None] | None = None
                         ) -> list[AppendResult]:
        """Commit the partition's buffer: one result, or two when batches of an earlier
        flush with an unknown outcome go first (they may turn out to be duplicates).
        Each result that lands goes to ``notify`` (default :attr:`on_commit`)."""
        st = self._topic_settings(tp[0])
        buf = self._buffers.get(tp)
        if buf is None:
            return []
        self._seal(tp, st)
        if notify is None:
            notify = self.on_commit
        results = []
        if 0 < buf.in_doubt < len(buf.sealed):
            unit = buf.sealed[:buf.in_doubt]
            results.append(self._commit_unit(tp, st, buf, unit, notify))
            del buf.sealed[:len(unit)]
            buf.sealed_bytes -= sum(len(p.data) for p in unit)
            buf.in_doubt = 0
        if buf.sealed:
            results.append(self._commit_unit(tp, st, buf, buf.sealed, notify))
            self._buffers[tp] = PartitionBuffer()
        return results

    def _commit_unit(self, tp: tuple[str, int], st: TopicSettings, buf: PartitionBuffer,
                     unit: list[Pending], notify) -> AppendResult:
        try:
            result = self._commit(tp, st, unit)
        except StorageError:
            # Failed or unknown outcome: keep the batches (and their sequence numbers) for
            # the next flush; if this attempt landed after all, idempotence drops the retry.
            buf.in_doubt = len(unit)
            raise
        except BaseException:
            # Fenced, out of sequence, invalid: these records will never be written.
            self._buffers[tp] = PartitionBuffer()
            self._sequences.pop(tp, None)
            raise
        if notify is not None:
            notify(result)
        return result

    def _commit(self, tp: tuple[str, int], st: TopicSettings,
                pending: list[Pending]) -> AppendResult:
        topic, partition = tp
        rel0 = pending[0].rel_base  # the unit's first relative offset lands at the HW
        segments = build_segments(pending, st.segment_bytes, st.segment_ms,
                                   st.index_interval_bytes)
        count = sum(p.count for p in pending)
        data_batches = [p for p in pending if not p.marker]
        # Transactional data retained from before the open transaction is a copy, not a
        # retry; but a unit holding its own marker that finds its data retained landed
        # whole (that marker ended the transaction): a retry, whatever the state says.
        ended_copy_refused = (any(p.transactional for p in data_batches)
                              and len(data_batches) == len(pending))
        first_seq = parse_header(data_batches[0].data).base_sequence if data_batches else -1
        last_seq = ((first_seq + sum(p.count for p in data_batches) - 1) & 0x7FFFFFFF
                    if data_batches else -1)
        max_ts = max((MAX_TS_AND_COUNT.unpack_from(p.data, MAX_TS_OFFSET)[0] if p.run is None
                      else int(p.run.max_ts.max()) for p in pending), default=NO_TIMESTAMP)
        outcome: dict[str, object] = {}
        store = self._store(topic, partition)
        uploads = Uploads(store)
        now = self.clock.wall_ms()

        def build(m: Manifest | None):
            m = m or Manifest.empty(topic, partition)
            if self.expect_high_watermark and tp in self.expect_high_watermark:
                AssertHighWatermark(self.expect_high_watermark[tp]).check(m)
            epoch = self._epochs.get(tp)
            if epoch is None:
                epoch = self._epochs[tp] = m.leader_epoch
            state = m.producers.get(self.producer_id)
            if data_batches and state is not None:
                # The writer numbers its own batches: only fencing, a retry (dropped) and a
                # copy of an ended transaction's batch matter here, not the order.
                verdict, value = check_sequence(state, self.producer_id, self.producer_epoch,
                                                first_seq, last_seq,
                                                transactional=ended_copy_refused)
                if verdict in (FENCED, TXN_ENDED):
                    raise OutOfOrderSequenceError(f"{value} on {topic}/{partition}")
                if verdict == DUPLICATE:
                    outcome["dup"] = value
                    return None
            hw = m.high_watermark
            # Uploaded once per high watermark; what grew too old meanwhile goes up again.
            fresh = uploads.get(hw, len(segments), lambda i: write_segment(
                self.storage, topic, partition, segments[i].stats, segments[i].log(hw - rel0),
                segments[i].index, segments[i].timeindex, writer_id=self.broker_id,
                leader_epoch=epoch, shift=hw - rel0, index_interval_bytes=st.index_interval_bytes))
            entries = entries_with_aborted(fresh, aborted_transaction(pending, hw - rel0, state))
            new_state = producer_state(state, self.producer_epoch, pending, hw - rel0,
                                        first_seq, last_seq, max_ts)
            updates = [AppendSegments(tuple(entries)),
                       UpdateProducerState(self.producer_id, new_state)]
            # Idle producers' state goes, as on serve's Appender (segment_writer's one policy).
            updates += [UpdateProducerState(pid, None)
                        for pid in expired_producers(m, (self.producer_id,), now)]
            outcome["hw"] = hw
            return updates, [AssertLeaderEpoch(epoch)]

        new = commit_appending(
            store, build, operation="append", writer=self._writer(), now_ms=now,
            uploaded=f"{len(segments)} segment(s)",
            consequence=f"their upload takes longer than {store.max_upload_age_ms / 1000:g} s, "
                        f"nothing of this flush was committed (flush fewer records at a time, "
                        f"e.g. produce --flush-every)")
        if self.housekeeper is not None and "hw" in outcome:
            self.housekeeper.poke(topic, partition, new)
        if "dup" in outcome:
            dup = outcome["dup"]
            return AppendResult(topic, partition, dup.first_offset, dup.last_offset + 1, count,
                                duplicate=True)
        hw = outcome["hw"]
        return AppendResult(topic, partition, hw, hw + count, count)

    # -- idempotent appends from clients ------------------------------------
    def append_batch(self, topic: str, partition: int, records: Sequence[Record], *,
                     producer_id: int, producer_epoch: int, base_sequence: int,
                     compression: str | int | None = None,
                     transactional: bool = False) -> AppendResult:
        """Append one producer batch with the client's own producer id and sequence.

        A retry of a batch already in the log (same producer id, epoch and
        sequence numbers) is not written again: the result has
        ``duplicate=True`` and the offsets of the first write. A sequence that
        does not follow the last one of the same epoch (or, after an epoch
        bump, is not 0) raises :class:`OutOfOrderSequenceError`, as Kafka does.
        A ``transactional`` batch opens (or joins) the producer's transaction at
        the partition, which a COMMIT or ABORT marker ends (:meth:`write_marker`);
        a transactional copy of a batch whose transaction already ended is no
        retry and raises :class:`OutOfOrderSequenceError` too.
        The topic's rules apply as to :meth:`send` (keys on compacted topics,
        ``max.message.bytes``, timestamps, ``LogAppendTime``).
        """
        st = self._topic_settings(topic)
        self._check_partition(st.meta, partition)
        if not records:
            raise ConfigError("append_batch needs at least one record")
        now = self.clock.wall_ms()
        for r in records:
            if r.key is None and st.compact:
                raise InvalidRecordError(
                    f"topic {topic!r} is compacted (cleanup.policy=compact): records need a key")
            check_timestamp(st, r.timestamp, now)
        rel = [replace(r, offset=i) for i, r in enumerate(records)]
        codec = Compression.parse(compression) if compression is not None else st.codec
        data = encode_batch(rel, compression=codec, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=base_sequence,
                            transactional=transactional,
                            timestamp_type=LOG_APPEND_TIME if st.log_append else CREATE_TIME,
                            max_timestamp=now if st.log_append else None)
        if len(data) > st.max_message_bytes:
            raise RecordTooLargeError(f"batch of {len(data)} bytes exceeds max.message.bytes="
                                      f"{st.max_message_bytes} of topic {topic!r}")
        saved = (self.producer_id, self.producer_epoch)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        try:
            m = self._store(topic, partition).latest()
            verdict, why = check_sequence(m.producers.get(producer_id) if m else None, producer_id,
                                          producer_epoch, base_sequence,
                                          (base_sequence + len(records) - 1) & 0x7FFFFFFF,
                                          transactional=transactional)
            if verdict in (FENCED, OUT_OF_ORDER, TXN_ENDED):
                raise OutOfOrderSequenceError(f"{why} on {topic}/{partition}")
            min_ts = now if st.log_append else min(r.timestamp for r in records)
            pending = [Pending(data, 0, len(records), min_ts, transactional, appended_ms=now)]
            return self._commit((topic, partition), st, pending)
        finally:
            self.producer_id, self.producer_epoch = saved

    # -- transactions --------------------------------------------------------
    def begin_transaction(self) -> None:
        """Start a transaction: records sent until commit/abort are transactional."""
        if self._txn_partitions is not None:
            raise ConfigError("a transaction is already open; commit or abort it first")
        for tp in list(self._buffers):
            self._seal(tp, self._topic_settings(tp[0]))
        self._txn_partitions = set()

    def commit_transaction(self) -> list[AppendResult]:
        """Write the records and a COMMIT marker to every partition the transaction touched."""
        return self._end_transaction(abort=False)

    def abort_transaction(self) -> list[AppendResult]:
        """Write an ABORT marker: read_committed readers never see the transaction's records."""
        return self._end_transaction(abort=True)

    def write_marker(self, topic: str, partition: int, *, commit: bool) -> list[AppendResult]:
        """End this producer's open transaction at one partition with a COMMIT or ABORT marker
        (an operator clearing a hanging transaction: ``kafkastore transactions abort``, as
        Kafka's ``kafka-transactions.sh abort``). The producer id and epoch are this
        writer's; an epoch older than the partition's is fenced."""
        if self._txn_partitions is not None:
            raise ConfigError("a transaction of this writer is open: end it first")
        self._txn_partitions = {(topic, partition)}
        return self._end_transaction(abort=not commit)

    def _end_transaction(self, abort: bool) -> list[AppendResult]:
        if self._txn_partitions is None:
            raise ConfigError("no transaction is open")
        touched = sorted(self._txn_partitions)
        self._txn_partitions = None
        # Markers go into every touched partition's buffer first: if a commit below fails
        # with a storage error, the remaining markers stay buffered for the next flush.
        for tp in touched:
            if tp in self._buffers:
                self._seal(tp, self._topic_settings(tp[0]))
            buf = self._buffers.setdefault(tp, PartitionBuffer())
            now = self.clock.wall_ms()
            if not buf.sealed:
                buf.first_append_ms = now
            marker = encode_marker_batch(offset=buf.next_rel, timestamp=now,
                                         producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch, commit=not abort)
            buf.sealed.append(Pending(marker, buf.next_rel, 1, now, True,
                                       marker=True, abort=abort, appended_ms=now))
            buf.sealed_bytes += len(marker)
            buf.next_rel += 1
        results = []
        for tp in touched:
            results += self._flush_partition(tp)
        return results

    def close(self) -> list[AppendResult]:
        """Flush and forget buffers; an open transaction is aborted."""
        if self._txn_partitions is not None:
            self.abort_transaction()
        return self.flush()



def unique_writer_id() -> str:
    """An id for ad-hoc writers (CLI runs) in audit records."""
    return uuid.uuid4().hex[:8]

