"""The broker: the write side of the log.

A :class:`Broker` buffers records per topic-partition, seals them into record
batches (``batch.size`` / ``linger.ms``, the topic's or producer's codec), and
on :meth:`Broker.flush` (or, with ``commit_on_roll``, when a partition's buffer
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

import operator
import random
import struct
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, NamedTuple, Sequence

from .clock import Clock, as_clock
from .format.compression import Compression
from .format.control import encode_marker_batch
from .errors import (ConfigError, InvalidRecordError, KafkaStoreError, OutOfOrderSequenceError,
                     RecordTooLargeError, StorageError, UnknownTopicError)
from .manifest import (AppendSegments, AssertHighWatermark, AssertLeaderEpoch, BatchMetadata,
                       Manifest, ManifestStore, ProducerState, SetLeaderEpoch,
                       UpdateProducerState)
from .format.partitioner import StickyPartitioner, partition_for_key, partitions_for_keys
from .format.record_batch import (CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Record, encode_batch,
                                  parse_header)
from .format.segment import index_batch_arrays, index_batches
from .maintenance.housekeeper import Housekeeper, housekeeper_for
from .write.segments import (FENCED, OUT_OF_ORDER, Uploads, check_sequence, commit_appending,
                             entries_with_aborted, expired_producers, write_segment)
from .storage import Storage
from .threads import shared_pool
from .topics.admin import TopicMetadata, load_topic

_BASE_OFFSET = struct.Struct(">q")
# Kafka's estimate of a record's overhead inside a v2 batch (varints, attributes, deltas).
_RECORD_OVERHEAD = 21
_BATCH_OVERHEAD = 61
#: Largest record timestamp accepted: readers hold timestamps as int64 microseconds.
MAX_TIMESTAMP_MS = (2 ** 63 - 1) // 1000
_LONG_MAX = 2 ** 63 - 1




@dataclass(frozen=True)
class AppendResult:
    """Where one flush put a partition's records: offsets ``[base_offset, next_offset)``."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    record_count: int
    duplicate: bool = False


class _Run(NamedTuple):
    """The batches of a :class:`_Pending` holding many (send_arrow's fast path), as arrays."""

    positions: object     # int64[k+1]: each batch's byte position in the data, then its size
    rels: object          # int64[k]: each batch's relative base offset
    counts: object        # int64[k]: records per batch
    max_ts: object        # int64[k]: each batch's MaxTimestamp field
    min_ts: object        # int64[k]: each batch's smallest record timestamp


@dataclass
class _Pending:
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
    run: _Run | None = None


class _Buffered(NamedTuple):
    """A record waiting in a batch: what :func:`encode_batch` reads of a :class:`Record`
    (three times cheaper to create than the frozen dataclass, once per record sent)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@dataclass
class _PartitionBuffer:
    records: list[_Buffered] = field(default_factory=list)
    records_bytes: int = 0
    batch_started_ms: int = 0
    sealed: list[_Pending] = field(default_factory=list)
    sealed_bytes: int = 0
    next_rel: int = 0
    first_append_ms: int = 0
    in_txn: bool = False  # records now in ``records`` are transactional
    # Sealed batches (a prefix of ``sealed``) whose commit failed with an unknown outcome:
    # the next flush commits them alone first, so that idempotence recognises them if
    # that commit did land.
    in_doubt: int = 0


@dataclass(frozen=True)
class _TopicSettings:
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


class Broker:
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
        self._settings: dict[str, _TopicSettings] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        self._buffers: dict[tuple[str, int], _PartitionBuffer] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self._sequences: dict[tuple[str, int], int] = {}
        self._txn_partitions: set[tuple[str, int]] | None = None
        #: Merges small segments and runs gc for the partitions this broker writes, on a
        #: background thread after its commits (kafkastore.merge); False turns it off.
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
        """Topic metadata (cached for the broker's life; configs are read once)."""
        meta = self._topics.get(name)
        if meta is None:
            if not self.allow_internal:
                from .topics.admin import check_not_internal
                check_not_internal(name, "produce to")
            meta = self._topics[name] = load_topic(self.storage, name)
        return meta

    def _topic_settings(self, name: str) -> _TopicSettings:
        st = self._settings.get(name)
        if st is None:
            meta = self.topic(name)
            c = meta.config
            st = self._settings[name] = _TopicSettings(
                meta=meta, codec=self._codec(meta), compact=c.compact,
                max_message_bytes=c.max_message_bytes,
                batch_limit=min(self.batch_size, c.max_message_bytes - _BATCH_OVERHEAD),
                segment_bytes=c.segment_bytes, segment_ms=c.segment_ms,
                index_interval_bytes=c.index_interval_bytes,
                log_append=c.message_timestamp_type == "LogAppendTime",
                before_max_ms=c["message.timestamp.before.max.ms"],
                after_max_ms=c["message.timestamp.after.max.ms"],
                any_timestamp=(c.message_timestamp_type == "LogAppendTime"
                               or c["message.timestamp.before.max.ms"] == _LONG_MAX
                               and c["message.timestamp.after.max.ms"] == _LONG_MAX))
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
            size = _RECORD_OVERHEAD
        else:
            size = _RECORD_OVERHEAD + len(key)
        if value is not None:
            size += len(value)
        if headers:
            headers = tuple(headers)
            size += sum(len(k.encode()) + len(v or b"") + 2 for k, v in headers)
        else:
            headers = ()
        if size + _BATCH_OVERHEAD > st.max_message_bytes:
            raise RecordTooLargeError(
                f"record of about {size} bytes exceeds max.message.bytes={st.max_message_bytes} "
                f"of topic {topic!r}")
        now = self.clock.wall_ms()
        if timestamp is None:
            timestamp = now
        elif not (st.any_timestamp and type(timestamp) is int
                  and 0 <= timestamp <= MAX_TIMESTAMP_MS):
            timestamp = _check_timestamp(st, timestamp, now)
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
            buf = self._buffers[tp] = _PartitionBuffer()
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
        records.append(_Buffered(buf.next_rel + len(records), timestamp, key, value, headers))
        buf.records_bytes += size
        if in_txn:
            self._txn_partitions.add(tp)
        return partition

    def send_many(self, topic: str, values: Sequence[bytes | None],
                  keys: Sequence[bytes | None] | None = None, *,
                  headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
                  timestamps: Sequence[int | None] | None = None,
                  partition: int | None = None) -> list[int]:
        """:meth:`send` for many records; returns their partitions.

        The records go through :meth:`send_arrow` (one Arrow table, checks
        and partitioning vectorised, batches encoded in C) when they convert
        to Arrow cleanly (bytes keys and values, int timestamps), else one by
        one through :meth:`send`. Records are buffered in order; the first
        refused one raises its error, and those before it stay buffered (as
        with the same calls to :meth:`send`).
        """
        n = len(values)
        for name, seq in (("keys", keys), ("headers", headers), ("timestamps", timestamps)):
            if seq is not None and len(seq) != n:
                raise ConfigError(f"send_many: {len(seq)} {name} for {n} values")
        table = _as_table(values, keys, headers, timestamps)
        if table is not None:
            return self.send_arrow(topic, table, partition=partition).tolist()
        if keys is None:
            keys = [None] * n
        if partition is None and any(k is not None for k in keys):
            partitions = partitions_for_keys(keys, self.topic(topic).partitions)
        else:
            partitions = [partition] * n
        send = self.send
        return [send(topic, values[i], keys[i], headers[i] if headers is not None else (),
                     timestamps[i] if timestamps is not None else None, partitions[i])
                for i in range(n)]

    def send_arrow(self, topic: str, table, *, partition: int | None = None):
        """Buffer the rows of an Arrow table or record batch; returns their partitions
        (numpy int32). Visible after :meth:`flush`, as with :meth:`send`.

        Columns (see :mod:`kafkastore.format.arrow_encode`): ``value`` (required),
        ``key``, ``timestamp`` (epoch ms or a timestamp type; null: now),
        ``headers``, ``partition`` (null: ``partition``, else murmur2 of the key,
        else sticky). The same rules as :meth:`send` apply, checked vectorised;
        the batches are encoded straight from the Arrow buffers (C encoder).
        Rows before the first refused one stay buffered and that row's error is
        raised with ``error.row`` set to its index and ``error.partitions`` to the
        partitions of the rows buffered before it (as the same :meth:`send`
        calls would do).
        """
        import numpy as np

        from .format import arrow_encode

        st = self._settings.get(topic) or self._topic_settings(topic)
        cols = arrow_encode.prepare(table)
        n = cols.n
        if n == 0:
            return np.zeros(0, np.int32)
        now = self.clock.wall_ms()
        klen, vlen = cols.key.lengths(), cols.value.lengths()
        sizes = (_RECORD_OVERHEAD + np.maximum(klen, 0) + np.maximum(vlen, 0)
                 + cols.header_bytes() + 2 * cols.header_counts())
        if cols.timestamps is None:
            ts = np.full(n, now, np.int64)
        elif cols.ts_valid is not None:
            ts = np.where(cols.ts_valid == 1, cols.timestamps, now)
        else:
            ts = cols.timestamps
        bad = sizes + _BATCH_OVERHEAD > st.max_message_bytes
        if st.compact:
            bad |= klen < 0
        bad |= (ts < 0) | (ts > MAX_TIMESTAMP_MS)
        if not st.any_timestamp:
            bad |= (now - ts > st.before_max_ms) | (ts - now > st.after_max_ms)
        parts = np.full(n, -1, np.int64)
        explicit = np.zeros(n, bool)
        names = table.schema.names
        if "partition" in names:
            pcol = table.column("partition")
            pvals, valid = arrow_encode.int64_values(pcol, fill=-1)
            explicit = np.ones(n, bool) if valid is None else valid.view(bool)
            parts[explicit] = pvals[explicit]
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < st.meta.partitions:
                self._check_partition(st.meta, partition)
            parts[~explicit] = partition
            explicit[:] = True
        bad |= explicit & ((parts < 0) | (parts >= st.meta.partitions))
        first_bad = int(np.argmax(bad)) if bad.any() else n
        rows = first_bad
        auto = ~explicit[:rows]
        if auto.any():
            keyed = auto & (klen[:rows] >= 0)
            if keyed.any():
                h = arrow_encode.murmur2_column(cols.key, n)[:rows].astype(np.int64)
                parts[:rows][keyed] = (h[keyed] & 0x7FFFFFFF) % st.meta.partitions
            sticky_rows = auto & (klen[:rows] < 0)
            if sticky_rows.any():
                sticky = self._sticky.get(topic)
                if sticky is None:
                    sticky = self._sticky[topic] = StickyPartitioner(
                        st.meta.partitions, self.batch_size, self._rng.randrange)
                parts[:rows][sticky_rows] = sticky.next_many(sizes[:rows][sticky_rows])
        if rows:
            # small ints sort by radix (numpy's stable sort of 16-bit keys)
            key = parts[:rows].astype(np.int16) if st.meta.partitions <= 32767 else parts[:rows]
            order = np.argsort(key, kind="stable")
            cuts = np.flatnonzero(np.diff(key[order])) + 1
            groups = []
            for idx in np.split(order, cuts):
                whole = len(idx) == rows
                groups.append(((topic, int(parts[idx[0]])), None if whole else idx, len(idx),
                               ts[:rows] if whole else ts[idx],
                               sizes[:rows] if whole else sizes[idx]))
            self._buffer_groups(st, cols, groups, now)
        if first_bad < n:
            try:
                self._raise_for_row(topic, st, cols, first_bad, int(ts[first_bad]), klen, sizes,
                                    int(parts[first_bad]) if explicit[first_bad] else None, now)
            except KafkaStoreError as exc:
                exc.partitions = parts[:first_bad].astype(np.int32)  # of the rows buffered
                raise
        return parts.astype(np.int32)

    def _raise_for_row(self, topic, st, cols, i, timestamp, klen, sizes, partition, now):
        """Raise the error :meth:`send` gives for row ``i`` of :meth:`send_arrow`."""
        try:
            if klen[i] < 0 and st.compact:
                raise InvalidRecordError(
                    f"topic {topic!r} is compacted (cleanup.policy=compact): records need a key")
            if sizes[i] + _BATCH_OVERHEAD > st.max_message_bytes:
                raise RecordTooLargeError(
                    f"record of about {int(sizes[i])} bytes exceeds max.message.bytes="
                    f"{st.max_message_bytes} of topic {topic!r}")
            _check_timestamp(st, timestamp, now)
            if partition is not None:
                self._check_partition(st.meta, partition)
        except (ConfigError, InvalidRecordError, RecordTooLargeError, UnknownTopicError) as e:
            e.row = i
            raise
        raise ConfigError(f"row {i} was refused")  # not reached: one of the checks fails

    def _buffer_groups(self, st: _TopicSettings, cols, groups, now: int) -> None:
        """Buffer each ``(tp, rows, n, ts, sizes)`` group of :meth:`send_arrow`, in order.
        With several groups and the C encoder, their runs are encoded side by side first
        (the encoder releases the GIL); the groups are then buffered (and rolled) one
        after another, as without. If one fails, the later groups are not buffered and
        their sequence numbers are given back."""
        from .format.arrow_encode import IMPLEMENTATION

        in_txn = self._txn_partitions is not None
        started: dict[tuple[str, int], tuple] = {}

        def attempt(encode):
            try:
                return encode()
            except BaseException as exc:  # noqa: BLE001 -- raised when its group is buffered
                return exc

        try:
            if len(groups) > 1 and st.codec == Compression.NONE and IMPLEMENTATION == "native":
                encodes = []
                for tp, rows, n, ts, sizes in groups:
                    self._buffers.setdefault(tp, _PartitionBuffer())
                    self._seal(tp, st)
                    seq0, append_time, encode = self._start_run(tp, st, cols, rows, n, ts,
                                                                sizes, in_txn)
                    started[tp] = (seq0, append_time)
                    encodes.append(encode)
                for (tp, *_), enc in zip(groups, _workers().map(attempt, encodes)):
                    started[tp] += (enc,)
            for tp, rows, n, ts, sizes in groups:
                self._buffer_rows(tp, st, cols, rows, n, ts, sizes, now, started.pop(tp, None))
        finally:
            for tp, (seq0, *_) in started.items():  # sequences taken, never buffered
                self._sequences[tp] = seq0

    def _buffer_rows(self, tp: tuple[str, int], st: _TopicSettings, cols, rows, n: int, ts,
                     sizes, now: int, started: tuple | None = None) -> None:
        """Seal ``n`` rows of ``cols`` (``rows``: their numbers, None: ``[0, n)``; ``ts``
        and ``sizes``: theirs) into batches of ``tp`` (the Arrow path of send).
        ``started``: the run :meth:`_buffer_groups` already encoded for them."""
        import numpy as np

        from .format.arrow_encode import encode_rows

        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = _PartitionBuffer()
        self._seal(tp, st)
        in_txn = self._txn_partitions is not None
        if st.codec == Compression.NONE and self._buffer_run(tp, st, cols, rows, n, ts, sizes,
                                                              now, in_txn, started):
            if in_txn:
                self._txn_partitions.add(tp)
            return
        csum = np.cumsum(sizes)
        i = 0
        while i < n:
            before = int(csum[i - 1]) if i else 0
            # a batch takes records while they fit batch.size (at least one)
            j = max(i + 1, int(np.searchsorted(csum, st.batch_limit + before, side="right")))
            j = min(j, n)
            if (self.commit_on_roll and buf.sealed
                    and (now - buf.first_append_ms >= st.segment_ms
                         or buf.sealed_bytes + int(csum[j - 1]) - before > st.segment_bytes)):
                self._flush_partition(tp)
                buf = self._buffers[tp]
            while True:
                k = j - i
                append_time = self.clock.wall_ms()
                seq = self._next_sequence(tp, k)
                data = encode_rows(
                    cols, i, j, offsets=np.arange(buf.next_rel, buf.next_rel + k, dtype=np.int64),
                    timestamps=ts[i:j], rows=rows, compression=st.codec,
                    timestamp_type=LOG_APPEND_TIME if st.log_append else CREATE_TIME,
                    max_timestamp=append_time if st.log_append else None,
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                    base_sequence=seq, transactional=in_txn)
                if len(data) <= st.max_message_bytes:
                    break
                self._sequences[tp] = (self._sequences[tp] - k) & 0x7FFFFFFF
                if k == 1:
                    e = RecordTooLargeError(
                        f"record batch of {len(data)} bytes exceeds max.message.bytes="
                        f"{st.max_message_bytes} of topic {st.meta.name!r}")
                    e.row = int(rows[i]) if rows is not None else i
                    raise e
                j = i + k // 2      # the size estimate was too optimistic: halve the batch
            if not buf.sealed and not buf.records:
                buf.first_append_ms = now
            min_ts = append_time if st.log_append else int(ts[i:j].min())
            buf.sealed.append(_Pending(data, buf.next_rel, k, min_ts, in_txn, appended_ms=now))
            buf.sealed_bytes += len(data)
            buf.next_rel += k
            i = j
        if in_txn:
            self._txn_partitions.add(tp)

    def _start_run(self, tp: tuple[str, int], st: _TopicSettings, cols, rows, n: int, ts,
                   sizes, in_txn: bool):
        """Take the sequence numbers of a run of ``n`` rows; returns ``(seq0, append_time,
        encode)``, where ``encode()`` runs the C encoder over them (any thread)."""
        import numpy as np

        from .format.arrow_encode import encode_batches

        buf = self._buffers[tp]
        append_time = self.clock.wall_ms() if st.log_append else None
        offsets = np.arange(buf.next_rel, buf.next_rel + n, dtype=np.int64)
        seq0 = self._next_sequence(tp, n)

        def encode():
            return encode_batches(
                cols, sizes, st.batch_limit, offsets=offsets, timestamps=ts, rows=rows,
                timestamp_type=LOG_APPEND_TIME if st.log_append else CREATE_TIME,
                max_timestamp=append_time, producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, base_sequence=seq0, transactional=in_txn)
        return seq0, append_time, encode

    def _buffer_run(self, tp: tuple[str, int], st: _TopicSettings, cols, rows, n: int, ts,
                    sizes, now: int, in_txn: bool, started: tuple | None = None) -> bool:
        """The fast path of :meth:`_buffer_rows` (uncompressed topics, C encoder): every
        batch in one call, into one buffer, cut and rolled as the batch-by-batch path
        does; sealed as one :class:`_Pending` per segment roll. False (nothing changed)
        when the encoder declines or a batch exceeds max.message.bytes: the caller then
        goes batch by batch, which halves batches or raises the precise error.
        ``started``: ``(seq0, append_time, encoded or the error encoding raised)`` of a
        run :meth:`_buffer_groups` encoded."""
        import numpy as np

        from .format.arrow_encode import IMPLEMENTATION

        if IMPLEMENTATION != "native":
            return False
        buf = self._buffers[tp]
        ts, sizes = ts[:n], sizes[:n]  # with rows=None: rows [0, n) of longer columns
        if started is None:
            seq0, append_time, encode = self._start_run(tp, st, cols, rows, n, ts, sizes, in_txn)
            try:
                enc = encode()
            except BaseException:
                self._sequences[tp] = seq0
                raise
        else:
            seq0, append_time, enc = started
            if isinstance(enc, BaseException):
                self._sequences[tp] = seq0
                raise enc
        pos = enc.positions if enc is not None else None
        if enc is None or int(np.diff(pos).max()) > st.max_message_bytes:
            self._sequences[tp] = seq0
            return False
        cuts = enc.cuts
        k = len(cuts) - 1
        csum = np.concatenate(([0], np.cumsum(sizes)))
        est = csum[cuts[1:]] - csum[cuts[:-1]]  # the estimate the batch-by-batch path rolls by
        # under LogAppendTime every record's timestamp is the append time
        mins = np.full(k, append_time, np.int64) if st.log_append else enc.min_timestamps
        data = memoryview(enc.data)
        b = 0
        try:
            while b < k:
                e = k
                if self.commit_on_roll:
                    # Roll before batch c when the buffer holds sealed batches and segment.ms
                    # has passed or batch c's estimate would not fit segment.bytes.
                    first_ms = buf.first_append_ms if buf.sealed else now
                    sealed = buf.sealed_bytes + (pos[b:k] - pos[b])
                    has_sealed = np.arange(b, k) > b
                    if buf.sealed:
                        has_sealed[:] = True
                    roll = has_sealed & ((now - first_ms >= st.segment_ms)
                                         | (sealed + est[b:k] > st.segment_bytes))
                    hit = np.flatnonzero(roll)
                    if hit.size:
                        if hit[0] == 0:
                            self._flush_partition(tp)
                            buf = self._buffers[tp]
                            continue
                        e = b + int(hit[0])
                rel = buf.next_rel
                count = int(cuts[e] - cuts[b])
                run = _Run(pos[b:e + 1] - pos[b], rel + (cuts[b:e] - cuts[b]),
                           cuts[b + 1:e + 1] - cuts[b:e], enc.max_timestamps[b:e], mins[b:e])
                if not buf.sealed and not buf.records:
                    buf.first_append_ms = now
                min_ts = int(run.min_ts.min())
                buf.sealed.append(_Pending(data[pos[b]:pos[e]], rel, count, min_ts, in_txn,
                                           appended_ms=now, run=run))
                buf.sealed_bytes += int(pos[e] - pos[b])
                buf.next_rel += count
                b = e
                if b < k:
                    self._flush_partition(tp)
                    buf = self._buffers[tp]
        except BaseException:
            # Batches from b on were not buffered: give their sequence numbers back.
            if tp in self._sequences:
                self._sequences[tp] = (seq0 + int(cuts[b])) & 0x7FFFFFFF
            raise
        return True

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

    def _seal(self, tp: tuple[str, int], st: _TopicSettings) -> None:
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
        buf.sealed.append(_Pending(data, buf.next_rel, len(records), min_ts, buf.in_txn,
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

        outcomes = list(_workers().map(run, tps))
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
            self._buffers[tp] = _PartitionBuffer()
        return results

    def _commit_unit(self, tp: tuple[str, int], st: _TopicSettings, buf: _PartitionBuffer,
                     unit: list[_Pending], notify) -> AppendResult:
        try:
            result = self._commit(tp, st, unit)
        except StorageError:
            # Failed or unknown outcome: keep the batches (and their sequence numbers) for
            # the next flush; if this attempt landed after all, idempotence drops the retry.
            buf.in_doubt = len(unit)
            raise
        except BaseException:
            # Fenced, out of sequence, invalid: these records will never be written.
            self._buffers[tp] = _PartitionBuffer()
            self._sequences.pop(tp, None)
            raise
        if notify is not None:
            notify(result)
        return result

    def _commit(self, tp: tuple[str, int], st: _TopicSettings,
                pending: list[_Pending]) -> AppendResult:
        topic, partition = tp
        rel0 = pending[0].rel_base  # the unit's first relative offset lands at the HW
        segments = _build_segments(pending, st.segment_bytes, st.segment_ms,
                                   st.index_interval_bytes)
        count = sum(p.count for p in pending)
        data_batches = [p for p in pending if not p.marker]
        first_seq = parse_header(data_batches[0].data).base_sequence if data_batches else -1
        last_seq = ((first_seq + sum(p.count for p in data_batches) - 1) & 0x7FFFFFFF
                    if data_batches else -1)
        max_ts = max((_MAX_TS_AND_COUNT.unpack_from(p.data, _MAX_TS_OFFSET)[0] if p.run is None
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
                if state.epoch > self.producer_epoch:
                    raise OutOfOrderSequenceError(
                        f"producer {self.producer_id} epoch {self.producer_epoch} is older than "
                        f"{state.epoch} on {topic}/{partition}")
                dup = (state.find_batch(first_seq, last_seq)
                       if state.epoch == self.producer_epoch else None)
                if dup is not None:
                    outcome["dup"] = dup
                    return None
            hw = m.high_watermark
            # Uploaded once per high watermark; what grew too old meanwhile goes up again.
            fresh = uploads.get(hw, len(segments), lambda i: write_segment(
                self.storage, topic, partition, segments[i].stats, segments[i].log(hw - rel0),
                segments[i].index, segments[i].timeindex, writer_id=self.broker_id,
                leader_epoch=epoch, shift=hw - rel0, index_interval_bytes=st.index_interval_bytes))
            entries = entries_with_aborted(fresh, _aborted(pending, hw - rel0, state))
            new_state = _producer_state(state, self.producer_epoch, pending, hw - rel0,
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
                     compression: str | int | None = None) -> AppendResult:
        """Append one producer batch with the client's own producer id and sequence.

        A retry of a batch already in the log (same producer id, epoch and
        sequence numbers) is not written again: the result has
        ``duplicate=True`` and the offsets of the first write. A sequence that
        does not follow the last one of the same epoch (or, after an epoch
        bump, is not 0) raises :class:`OutOfOrderSequenceError`, as Kafka does.
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
            _check_timestamp(st, r.timestamp, now)
        rel = [replace(r, offset=i) for i, r in enumerate(records)]
        codec = Compression.parse(compression) if compression is not None else st.codec
        data = encode_batch(rel, compression=codec, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=base_sequence,
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
                                          (base_sequence + len(records) - 1) & 0x7FFFFFFF)
            if verdict in (FENCED, OUT_OF_ORDER):
                raise OutOfOrderSequenceError(f"{why} on {topic}/{partition}")
            min_ts = now if st.log_append else min(r.timestamp for r in records)
            pending = [_Pending(data, 0, len(records), min_ts, False, appended_ms=now)]
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
        broker's; an epoch older than the partition's is fenced."""
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
            buf = self._buffers.setdefault(tp, _PartitionBuffer())
            now = self.clock.wall_ms()
            if not buf.sealed:
                buf.first_append_ms = now
            marker = encode_marker_batch(offset=buf.next_rel, timestamp=now,
                                         producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch, commit=not abort)
            buf.sealed.append(_Pending(marker, buf.next_rel, 1, now, True,
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


def _workers():
    """Threads on which :meth:`Broker.flush` commits partitions side by side (a commit
    mostly waits on fsync or an object store with the GIL released) and
    :meth:`Broker.send_arrow` encodes them (the C encoder releases it too)."""
    return shared_pool("broker", 8)


def _as_table(values, keys, headers, timestamps):
    """send_many's arguments as an Arrow table, or None when they do not convert exactly
    (then :meth:`Broker.send` judges each record as before)."""
    import pyarrow as pa

    from .format.arrow_decode import HEADERS_TYPE
    from .format.arrow_encode import binary_array, int64_array

    # Exact types only (as send() would judge them), converted in one C pass when built.
    cols = {"value": binary_array(values)}
    if keys is not None:
        cols["key"] = binary_array(keys)
    if timestamps is not None:
        cols["timestamp"] = int64_array(timestamps)
    if any(c is None for c in cols.values()):
        return None
    try:
        if headers is not None and any(headers):
            cols["headers"] = pa.array(
                [[{"key": k, "value": v} for k, v in hs] if hs else None for hs in headers],
                HEADERS_TYPE)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return pa.table(cols)


def _check_timestamp(st: _TopicSettings, timestamp: int, now: int) -> int:
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
_MAX_TS_AND_COUNT = struct.Struct(">q14xi")
_MAX_TS_OFFSET = 35


@dataclass(frozen=True)
class _BuiltSegment:
    """A segment of sealed batches, its log not yet joined: :meth:`log` writes the batches'
    final base offsets into the one copy that joins them."""

    rels: tuple[int, ...]            # each batch's relative base offset
    tails: tuple[memoryview, ...]    # each batch after its BaseOffset field
    index: bytes
    timeindex: bytes
    stats: object
    pending: tuple[_Pending, ...]

    def log(self, shift: int) -> tuple[bytes]:
        """The ``.log`` bytes (one buffer) with every batch's base offset moved by ``shift``.
        BaseOffset is outside the batch CRC, so the batches stay valid."""
        pack = _BASE_OFFSET.pack
        parts = [b""] * (2 * len(self.rels))
        parts[0::2] = [pack(rel + shift) for rel in self.rels]
        parts[1::2] = self.tails
        return (b"".join(parts),)


@dataclass(frozen=True)
class _RunSegment:
    """A segment holding batches of runs (:class:`_Run`): the batches' base offsets are
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


def _build_run_segments(pending: list[_Pending], segment_bytes: int, segment_ms: int,
                        index_interval_bytes: int) -> list[_RunSegment]:
    """:func:`_build_segments` when some pendings are runs: the same rolls, per batch."""
    import numpy as np

    unpack = _MAX_TS_AND_COUNT.unpack_from
    cols: dict[str, list] = {k: [] for k in ("size", "app", "rel", "count", "offsets", "max",
                                             "min", "src", "start")}
    for i, p in enumerate(pending):
        r = p.run
        if r is None:
            mts, cnt = unpack(p.data, _MAX_TS_OFFSET)
            r = _Run(np.array([0, len(p.data)], np.int64), np.array([p.rel_base], np.int64),
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
        out.append(_RunSegment(tuple(parts), a["rel"][s:e], cum[s:e] - cum[s],
                               built.index, built.timeindex, built.stats))
        s = e
    return out


def _build_segments(pending: list[_Pending], segment_bytes: int, segment_ms: int,
                    index_interval_bytes: int) -> list:
    """Group sealed batches into segments (at least one batch each) as Kafka rolls them: a new
    segment when the next batch would take the segment past ``segment.bytes``, or arrived
    ``segment.ms`` or more after the segment's first batch. The batches were encoded here,
    so their indexes come from their header fields (:func:`index_batches`), unchecked."""
    if any(p.run is not None for p in pending):
        return _build_run_segments(pending, segment_bytes, segment_ms, index_interval_bytes)
    out: list[_BuiltSegment] = []
    group: list[_Pending] = []
    size = 0
    unpack = _MAX_TS_AND_COUNT.unpack_from

    def close():
        fields = [unpack(p.data, _MAX_TS_OFFSET) for p in group]
        built = index_batches(
            group[0].rel_base, [len(p.data) for p in group], group[0].rel_base,
            [p.rel_base + p.count - 1 for p in group], [f[1] for f in fields],
            [f[0] for f in fields], [p.min_timestamp for p in group],
            index_interval_bytes=index_interval_bytes)
        out.append(_BuiltSegment(tuple(p.rel_base for p in group),
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


def _aborted(pending: list[_Pending], hw: int,
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


def _pid_of(p: _Pending) -> int:
    return parse_header(p.data).producer_id


def _producer_state(state: ProducerState | None, epoch: int, pending: list[_Pending], hw: int,
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


def unique_writer_id() -> str:
    """An id for ad-hoc writers (CLI runs) in audit records."""
    return uuid.uuid4().hex[:8]
