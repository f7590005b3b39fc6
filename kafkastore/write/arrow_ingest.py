"""The log writer's Arrow path: many records in one call, checked and batched vectorised.

:class:`ArrowIngest` gives :class:`kafkastore.write.log_writer.LogWriter` its
``send_arrow`` (the rows of an Arrow table: checks, murmur2 and sticky partitioning
vectorised, batches encoded straight from the Arrow buffers by the C encoder, for
uncompressed topics every batch of a partition in one call into one buffer, the
partitions of one call encoded on threads side by side) and ``send_many`` (lists converted
to Arrow in one C pass, else record by record through ``send``).

It is a mixin: it works on the writer's own state (partition buffers ``_buffers``,
sequence numbers ``_sequences``, sticky partitioners ``_sticky``, the open transaction
``_txn_partitions``) through the writer's steps (``_topic_settings``, ``_seal``,
``_flush_partition``, ``_next_sequence``, ``_check_partition``), and applies, vectorised,
exactly the rules :meth:`LogWriter.send` applies one record at a time.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ConfigError, InvalidRecordError, KafkaStoreError, RecordTooLargeError, UnknownTopicError
from ..format.compression import Compression
from ..format.partitioner import StickyPartitioner, partitions_for_keys
from ..format.record_batch import CREATE_TIME, LOG_APPEND_TIME
from .batching import (BATCH_OVERHEAD, MAX_TIMESTAMP_MS, RECORD_OVERHEAD, PartitionBuffer, Pending,
                       Run, TopicSettings, check_timestamp, writer_pool)


class ArrowIngest:
    """``send_arrow`` and ``send_many`` of :class:`~kafkastore.write.log_writer.LogWriter`
    (see the module docstring for what it needs of the writer)."""

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
        table = as_table(values, keys, headers, timestamps)
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

        # lazy: pyarrow: the log writer loads it only for Arrow input
        from ..format import arrow_encode

        st = self._settings.get(topic) or self._topic_settings(topic)
        cols = arrow_encode.prepare(table)
        n = cols.n
        if n == 0:
            return np.zeros(0, np.int32)
        now = self.clock.wall_ms()
        klen, vlen = cols.key.lengths(), cols.value.lengths()
        sizes = (RECORD_OVERHEAD + np.maximum(klen, 0) + np.maximum(vlen, 0)
                 + cols.header_bytes() + 2 * cols.header_counts())
        if cols.timestamps is None:
            ts = np.full(n, now, np.int64)
        elif cols.ts_valid is not None:
            ts = np.where(cols.ts_valid == 1, cols.timestamps, now)
        else:
            ts = cols.timestamps
        bad = sizes + BATCH_OVERHEAD > st.max_message_bytes
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
            if sizes[i] + BATCH_OVERHEAD > st.max_message_bytes:
                raise RecordTooLargeError(
                    f"record of about {int(sizes[i])} bytes exceeds max.message.bytes="
                    f"{st.max_message_bytes} of topic {topic!r}")
            check_timestamp(st, timestamp, now)
            if partition is not None:
                self._check_partition(st.meta, partition)
        except (ConfigError, InvalidRecordError, RecordTooLargeError, UnknownTopicError) as e:
            e.row = i
            raise
        raise ConfigError(f"row {i} was refused")  # not reached: one of the checks fails

    def _buffer_groups(self, st: TopicSettings, cols, groups, now: int) -> None:
        """Buffer each ``(tp, rows, n, ts, sizes)`` group of :meth:`send_arrow`, in order.
        With several groups and the C encoder, their runs are encoded side by side first
        (the encoder releases the GIL); the groups are then buffered (and rolled) one
        after another, as without. If one fails, the later groups are not buffered and
        their sequence numbers are given back."""
        # lazy: pyarrow: the log writer loads it only for Arrow input
        from ..format.arrow_encode import IMPLEMENTATION

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
                    self._buffers.setdefault(tp, PartitionBuffer())
                    self._seal(tp, st)
                    seq0, append_time, encode = self._start_run(tp, st, cols, rows, n, ts,
                                                                sizes, in_txn)
                    started[tp] = (seq0, append_time)
                    encodes.append(encode)
                for (tp, *_), enc in zip(groups, writer_pool().map(attempt, encodes)):
                    started[tp] += (enc,)
            for tp, rows, n, ts, sizes in groups:
                self._buffer_rows(tp, st, cols, rows, n, ts, sizes, now, started.pop(tp, None))
        finally:
            for tp, (seq0, *_) in started.items():  # sequences taken, never buffered
                self._sequences[tp] = seq0

    def _buffer_rows(self, tp: tuple[str, int], st: TopicSettings, cols, rows, n: int, ts,
                     sizes, now: int, started: tuple | None = None) -> None:
        """Seal ``n`` rows of ``cols`` (``rows``: their numbers, None: ``[0, n)``; ``ts``
        and ``sizes``: theirs) into batches of ``tp`` (the Arrow path of send).
        ``started``: the run :meth:`_buffer_groups` already encoded for them."""
        import numpy as np

        # lazy: pyarrow: the log writer loads it only for Arrow input
        from ..format.arrow_encode import encode_rows

        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = PartitionBuffer()
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
            buf.sealed.append(Pending(data, buf.next_rel, k, min_ts, in_txn, appended_ms=now))
            buf.sealed_bytes += len(data)
            buf.next_rel += k
            i = j
        if in_txn:
            self._txn_partitions.add(tp)

    def _start_run(self, tp: tuple[str, int], st: TopicSettings, cols, rows, n: int, ts,
                   sizes, in_txn: bool):
        """Take the sequence numbers of a run of ``n`` rows; returns ``(seq0, append_time,
        encode)``, where ``encode()`` runs the C encoder over them (any thread)."""
        import numpy as np

        # lazy: pyarrow: the log writer loads it only for Arrow input
        from ..format.arrow_encode import encode_batches

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

    def _buffer_run(self, tp: tuple[str, int], st: TopicSettings, cols, rows, n: int, ts,
                    sizes, now: int, in_txn: bool, started: tuple | None = None) -> bool:
        """The fast path of :meth:`_buffer_rows` (uncompressed topics, C encoder): every
        batch in one call, into one buffer, cut and rolled as the batch-by-batch path
        does; sealed as one :class:`Pending` per segment roll. False (nothing changed)
        when the encoder declines or a batch exceeds max.message.bytes: the caller then
        goes batch by batch, which halves batches or raises the precise error.
        ``started``: ``(seq0, append_time, encoded or the error encoding raised)`` of a
        run :meth:`_buffer_groups` encoded."""
        import numpy as np

        # lazy: pyarrow: the log writer loads it only for Arrow input
        from ..format.arrow_encode import IMPLEMENTATION

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
                run = Run(pos[b:e + 1] - pos[b], rel + (cuts[b:e] - cuts[b]),
                           cuts[b + 1:e + 1] - cuts[b:e], enc.max_timestamps[b:e], mins[b:e])
                if not buf.sealed and not buf.records:
                    buf.first_append_ms = now
                min_ts = int(run.min_ts.min())
                buf.sealed.append(Pending(data[pos[b]:pos[e]], rel, count, min_ts, in_txn,
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



def as_table(values, keys, headers, timestamps):
    """send_many's arguments as an Arrow table, or None when they do not convert exactly
    (then :meth:`LogWriter.send` judges each record as before)."""
    import pyarrow as pa

    # lazy: pyarrow: the log writer loads it only for Arrow input
    from ..format.arrow_decode import HEADERS_TYPE
    from ..format.arrow_encode import binary_array, int64_array

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
