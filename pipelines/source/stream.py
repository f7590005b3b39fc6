"""Streaming reads of the log: ``spark.readStream.format("kafkastore")`` (Spark's Kafka
source, micro-batches over the log on object storage).

::

    q = (spark.readStream.format("kafkastore").option("root", root)
         .option("subscribePattern", "orders.*").option("maxOffsetsPerTrigger", 10000)
         .load()
         .writeStream.trigger(availableNow=True)
         .option("checkpointLocation", ckpt)
         .foreachBatch(table_sink(warehouse, "orders_raw")).start())

**Options** are the batch source's (:mod:`pipelines.datasource`, parsed by the same
:func:`pipelines.source.options.parse_options`) and the same fixed schema, plus:

* ``startingOffsets`` may also be ``latest`` (or ``-1`` for a partition in the JSON);
  with ``startingTimestamp``/``startingOffsetsByTimestamp``/``startingOffsetsFromGroup``
  it is resolved ONCE, when the query's first batch is planned, and Spark keeps the
  result in its offset log from then on;
* ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch, over all
  partitions; ``maxBytesPerTrigger`` (``128m`` etc.): at most about this many bytes of
  log (estimated from each segment's bytes per offset). Both split fairly: every
  partition with a backlog gets an equal share, shares a partition cannot use go to the
  others (max-min fairness); a batch always advances by at least one offset;
* ``endingOffsets``/``endingTimestamp``/``endingOffsetsByTimestamp`` are refused (as
  Spark's streaming Kafka source does).

**Offsets** in Spark's checkpoint are Spark's Kafka form, ``{"topic": {"0": 42}}``: per
topic-partition the next offset to read; a micro-batch reads the half-open ranges
``[start, end)``. Partitions and topics (``subscribePattern``) that appear later are read
from offset 0 (Spark's rule). A topic named by ``subscribe``/``topic`` that does not exist
yet has no partitions: the query waits for it (empty batches) and reads it from offset 0
once it is created, as Spark's Kafka source does; ``assign`` of a missing topic fails the
query with :class:`~kafkastore.errors.UnknownTopicError`. ``Trigger.AvailableNow`` reads up to the readable end seen
when the query started, in batches that respect the limits.

**Isolation**: read_committed by default: a batch never ends past a partition's last
stable offset (an open transaction's records wait), and aborted records are dropped.

**Data loss**: when retention (or delete-records) removed offsets the query has not read
yet, planning raises :class:`~kafkastore.errors.DataLossError` naming the partition and
the missing range; with ``failOnDataLoss=false`` the range starts at the log start.

**Exactly once**: a restarted query replays its last planned batch with the same offsets
(Spark's offset log), so nothing is skipped or read twice; :func:`table_sink` is a
``foreachBatch`` function that writes each batch into an Iceberg table with its offsets
through the load's commit (:func:`pipelines.warehouse.commit.commit`): a batch replayed after a
crash finds its offsets committed and adds nothing.

The classes here are Spark-free except for the base class; the data source
(:class:`pipelines.datasource.KafkaStoreDataSource`) hands in its partition class and
its executor read function, so this module does not import it.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxBytes,
                                              ReadMaxRows, SupportsTriggerAvailableNow)

from kafkastore.errors import ConfigError, DataLossError, UnknownTopicError
from kafkastore.format.arrow_decode import KAFKA_SCHEMA
from kafkastore.groups.admin import committed_offsets
from kafkastore.read.reader import PartitionReader, read_range
from kafkastore.storage import Storage
from kafkastore.topics.admin import topic_exists

from ..spec.offset_ranges import LATEST_OFFSET, Earliest, Latest, OffsetRange, SpecificOffsets, limit_for
from ..spec.spark_options import byte_count, pick_options, positive_integer
from .planning import plan_splits, resolve_range, snapshot_readers, topic_partitions
from .options import SOURCE_NAME, SourceOptions, parse_options
from ..warehouse import catalog as warehouse_catalog, commit as iceberg_commit, offsets as warehouse_offsets
from ..spec.table_layout import TableLayout
from ..warehouse.files import (DESCRIPTOR_DDL, check_disjoint, descriptor_schema,
                               timestamp_zones, write_files)

__all__ = ["StreamOptions", "parse_stream_options", "KafkaStoreStreamReader", "fair_shares",
           "table_sink"]

TP = tuple  # (topic, partition)

_STREAM_ONLY = ("maxOffsetsPerTrigger", "maxBytesPerTrigger")
_ENDING = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class StreamOptions:
    """The batch source's options plus the per-trigger limits (plain data)."""

    source: SourceOptions
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None


def parse_stream_options(options: Mapping[str, Any], *, refuse_ending: bool = True) -> StreamOptions:
    """Options of a streaming read: the batch source's (:func:`parse_options`), a starting
    ``latest``, and the trigger limits; ending options are refused (unless
    ``refuse_ending`` is false: the source's schema check, which serves both kinds of read)."""
    given, rest = pick_options(options, _STREAM_ONLY + (_ENDING if refuse_ending else ()))
    for name in _ENDING:
        if name in given:
            raise ConfigError(f"option {name} is not valid in streaming queries on {SOURCE_NAME}: "
                              f"a stream has no end (use a batch read, or Trigger.AvailableNow "
                              f"to stop at the data present when the query starts)")
    starting_key = next((k for k in rest if str(k).lower() == "startingoffsets"), None)
    latest: bool | set = False
    if starting_key is not None:
        latest, rest[starting_key] = _without_latest(str(rest[starting_key]))
        if rest[starting_key] is None:
            del rest[starting_key]
    source = parse_options(rest)
    if latest is True and isinstance(source.starting, Earliest):
        source = replace(source, starting=Latest())
    elif latest and isinstance(source.starting, SpecificOffsets):
        source = replace(source, starting=SpecificOffsets({
            t: {p: (LATEST_OFFSET if (t, p) in latest else n) for p, n in parts.items()}
            for t, parts in source.starting.offsets.items()}))
    limits = given.get("maxOffsetsPerTrigger"), given.get("maxBytesPerTrigger")
    return StreamOptions(
        source,
        None if limits[0] is None else positive_integer(limits[0], "maxOffsetsPerTrigger"),
        None if limits[1] is None else byte_count(limits[1], "maxBytesPerTrigger"))


def _without_latest(text: str) -> tuple[bool | set, str | None]:
    """A streaming ``startingOffsets`` the batch parser accepts: ``latest`` is taken out
    (True), and each ``-1`` of a JSON map becomes ``-2`` for validation and is remembered
    as ``{(topic, partition)}``."""
    if text.strip().lower() == "latest":
        return True, None
    try:
        data = json.loads(text)
    except ValueError:
        return False, text   # the batch parser says what is wrong with it
    if not isinstance(data, dict):
        return False, text
    latest = set()
    for topic, parts in data.items():
        if isinstance(parts, dict):
            for p, n in parts.items():
                if n == LATEST_OFFSET and not isinstance(n, bool) and str(p).isdigit():
                    latest.add((topic, int(p)))
                    parts[p] = -2
    return latest, json.dumps(data)


# --------------------------------------------------------------------------- offsets


def _offsets_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` -> ``{"t": {"p": n}}`` in (topic, partition) order: Spark compares
    offsets by their JSON text, so equal offsets must print equally."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), n in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(n)
    return out


def _offsets_of(data: Mapping[str, Mapping[str, int]] | None) -> dict[TP, int]:
    return {(t, int(p)): int(n) for t, parts in (data or {}).items() for p, n in parts.items()}


def fair_shares(backlog: Mapping[TP, int], budget: int) -> dict[TP, int]:
    """Max-min fair split of ``budget`` units over partitions with ``backlog`` units to read:
    each gets an equal share, what a partition cannot use goes to the others. When fewer
    units than partitions remain, they go one each to the largest backlogs (ties in
    partition order), so a small budget still reaches every partition over batches."""
    alloc = {tp: 0 for tp in backlog}
    left = {tp: n for tp, n in backlog.items() if n > 0}
    while budget > 0 and left:
        share = budget // len(left)
        if share == 0:
            for tp in sorted(left, key=lambda tp: (-left[tp], tp))[:budget]:
                alloc[tp] += 1
            break
        for tp in sorted(left):
            take = min(share, left[tp])
            alloc[tp] += take
            left[tp] -= take
            budget -= take
            if not left[tp]:
                del left[tp]
    return alloc


def bytes_between(reader: PartitionReader, start: int, end: int) -> int:
    """About how many bytes of log ``[start, end)`` holds (each segment's bytes per offset)."""
    total = 0.0
    for seg in reader.manifest.segments_from(start):
        if seg.base_offset >= end:
            break
        span = seg.next_offset - seg.base_offset
        if span > 0:
            total += seg.size * (min(end, seg.next_offset) - max(start, seg.base_offset)) / span
    return int(total)


def offsets_within(reader: PartitionReader, start: int, end: int, budget: int) -> int:
    """The end offset (in ``[start, end]``) of about ``budget`` bytes read from ``start``."""
    pos, left = start, float(budget)
    for seg in reader.manifest.segments_from(start):
        if seg.base_offset >= end:
            break
        span = seg.next_offset - seg.base_offset
        lo, hi = max(pos, seg.base_offset), min(end, seg.next_offset)
        if span <= 0 or hi <= lo:
            continue
        per = seg.size / span
        can = int(left // per) if per > 0 else hi - lo
        if can < hi - lo:
            return lo + can
        left -= per * (hi - lo)
        pos = hi
    return end


# --------------------------------------------------------------------------- the reader


class StreamPartition(InputPartition):
    """Default input partition of a micro-batch: read ranges of one topic-partition."""

    def __init__(self, ranges: Sequence[Any]):
        super().__init__(None)
        self.ranges = tuple(ranges)


class KafkaStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the log, with admission control and Trigger.AvailableNow.

    Lives in Spark's planner process for the whole query: the resolved starting offsets
    and the AvailableNow target are kept on the object (the planner calls
    :meth:`initialOffset` more than once). ``partition`` and ``read_batches`` are the
    batch source's input partition class and executor read function."""

    def __init__(self, opts: StreamOptions, partition: Callable[[Sequence[Any]], InputPartition]
                 = StreamPartition, read_batches: Callable[..., Iterator[Any]] | None = None,
                 label: str | None = None, out=None):
        self.opts = opts
        self.partition_class = partition
        self.read_batches = read_batches
        self.label = label or _label(opts.source)
        self._out = out
        self._initial: dict[str, dict[str, int]] | None = None
        self._target: dict[TP, int] | None = None
        self._storage: Storage | None = None

    def __getstate__(self):   # executors get plain data: no storage handle, no file object
        state = dict(self.__dict__)
        state["_storage"] = None
        state["_out"] = None
        return state

    # -- driver side ---------------------------------------------------------
    @property
    def storage(self) -> Storage:
        if self._storage is None:
            src = self.opts.source
            self._storage = Storage(src.root, dict(src.storage_options))
        return self._storage

    def initialOffset(self) -> dict:
        """The starting offsets, resolved once per query (see the module docstring)."""
        if self._initial is None:
            self._initial = _offsets_json(initial_offsets(self.opts.source, self.storage))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as ReadMaxRows, else maxBytesPerTrigger as ReadMaxBytes."""
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the readable end of every partition now: the query stops there."""
        self._target = {tp: r.upper_bound(self.opts.source.isolation)
                        for tp, r in self._readers().items()}

    def _readers(self) -> dict[TP, PartitionReader]:
        src = self.opts.source
        return snapshot_readers(self.storage, stream_partitions(src, self.storage))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: the readable end of every partition (capped by the
        AvailableNow target), cut by ``limit`` (and the other trigger limit option)."""
        begin = _offsets_of(start)
        readers = self._readers()
        fail = self.opts.source.fail_on_data_loss
        ends: dict[TP, int] = dict(begin)   # partitions no longer listed keep their offset
        froms: dict[TP, int] = {}
        for tp, reader in readers.items():
            upper = reader.upper_bound(self.opts.source.isolation)
            if self._target is not None:
                if tp not in self._target:
                    continue   # appeared after the AvailableNow query started
                upper = min(upper, self._target[tp])
            frm = begin.get(tp, 0)
            if frm < reader.log_start_offset:
                if fail:
                    raise _data_loss(tp, frm, reader)
                frm = reader.log_start_offset
            froms[tp] = frm
            ends[tp] = max(frm, upper)
        ends.update(self._limited(froms, ends, readers, limit))
        out = _offsets_json(ends)
        return start if out == start else out

    def _limited(self, froms: Mapping[TP, int], ends: Mapping[TP, int],
                 readers: Mapping[TP, PartitionReader], limit: ReadLimit) -> dict[TP, int]:
        max_offsets = max_bytes = None
        if isinstance(limit, ReadMaxRows):
            max_offsets, max_bytes = limit.max_rows, self.opts.max_bytes_per_trigger
        elif isinstance(limit, ReadMaxBytes):
            max_offsets, max_bytes = self.opts.max_offsets_per_trigger, limit.max_bytes
        if max_offsets is None and max_bytes is None:
            return {}
        backlog = {tp: max(0, ends[tp] - frm) for tp, frm in froms.items()}
        cap = dict(backlog)
        if max_offsets is not None:
            shares = fair_shares(backlog, max_offsets)
            cap = {tp: min(cap[tp], shares[tp]) for tp in cap}
        if max_bytes is not None:
            sizes = {tp: bytes_between(readers[tp], froms[tp], ends[tp]) if backlog[tp] else 0
                     for tp in backlog}
            shares = fair_shares(sizes, max_bytes)
            by_bytes = {tp: offsets_within(readers[tp], froms[tp], ends[tp], shares[tp]) - froms[tp]
                        for tp in backlog}
            cap = {tp: min(cap[tp], by_bytes[tp]) for tp in cap}
        if backlog and not any(cap.values()) and any(backlog.values()):
            # Always advance: one offset of the largest backlog (a record over the budget).
            tp = max(backlog, key=lambda tp: (backlog[tp], tp))
            cap[tp] = 1
        return {tp: froms[tp] + cap[tp] for tp in froms}

    def reportLatestOffset(self) -> dict | None:
        """The readable end of every partition now (the query's status shows it)."""
        iso = self.opts.source.isolation
        return _offsets_json({tp: r.upper_bound(iso) for tp, r in self._readers().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The input partitions of ``[start, end)``: per partition from its start offset
        (0 for a partition new since ``start``), cut by ``maxBytesPerPartition``; data loss
        below the log start is raised or skipped per ``failOnDataLoss``."""
        begin, until = _offsets_of(start), _offsets_of(end)
        wanted = {tp: (begin.get(tp, 0), n) for tp, n in until.items() if n > begin.get(tp, 0)}
        readers = snapshot_readers(self.storage, sorted(wanted))
        work = []
        for tp, (frm, to) in sorted(wanted.items()):
            reader = readers[tp]
            if frm < reader.log_start_offset:
                if self.opts.source.fail_on_data_loss:
                    raise _data_loss(tp, frm, reader)
                frm = reader.log_start_offset
            if to > frm:
                work.append(OffsetRange(tp[0], tp[1], frm, to))
        src = self.opts.source
        splits = plan_splits(work, readers, src.max_bytes_per_partition, src.min_partitions or 0)
        if work:
            self._log_batch(work, readers)
        return [self.partition_class(split) for split in splits]

    def _log_batch(self, work: Sequence[OffsetRange], readers: Mapping[TP, PartitionReader]) -> None:
        # The load's plan line, per micro-batch, with how far each partition is behind.
        iso = self.opts.source.isolation
        parts = ", ".join(f"{_name(r.topic_partition)} [{r.from_offset}, {r.until_offset})"
                          for r in work)
        behind = " ".join(
            f"{_name(r.topic_partition)}="
            f"{max(0, readers[r.topic_partition].upper_bound(iso) - r.until_offset)}"
            for r in work)
        try:
            print(f"stream {self.label}: {sum(r.count for r in work)} offsets: {parts}; "
                  f"behind: {behind}", file=self._out or sys.stderr, flush=True)
        except Exception:   # progress must never fail a batch
            pass

    # -- executors -----------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one input partition."""
        ranges = getattr(partition, "ranges", ())
        src = self.opts.source
        if self.read_batches is None:
            return _read_ranges(src, ranges)
        return self.read_batches(src.root, dict(src.storage_options), ranges,
                                 src.include_headers, src.isolation)


def _read_ranges(src: SourceOptions, ranges) -> Iterator[Any]:
    storage = Storage(src.root, dict(src.storage_options))
    for rr in ranges:
        batch = read_range(storage, rr, include_headers=src.include_headers,
                           isolation=src.isolation)
        if not src.include_headers:
            batch = batch.drop_columns(["headers"])
        if batch.num_rows:
            yield batch


def _name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def _label(src: SourceOptions) -> str:
    kind, value = src.subscription
    if kind == "pattern":
        return f"pattern {value!r}"
    return ",".join(sorted(value))


def _data_loss(tp: TP, frm: int, reader: PartitionReader) -> DataLossError:
    start = reader.log_start_offset
    return DataLossError(
        f"data loss in {_name(tp)}: the query's next offset is {frm} but the log now starts at "
        f"{start}, so offsets [{frm}, {start}) were deleted (retention or delete-records) before "
        f"the query read them. Set the source option failOnDataLoss to false to skip them and "
        f"go on", log_start_offset=start, high_watermark=reader.high_watermark)


def stream_partitions(src: SourceOptions, storage: Storage) -> list[TP]:
    """The topic-partitions a stream reads now. A subscribed topic that does not exist yet
    has none (the query waits for it, as Spark's Kafka source does for ``subscribe`` and
    ``subscribePattern``); ``assign`` names exact partitions, so a missing topic there is
    an :class:`UnknownTopicError`."""
    kind, value = src.subscription
    if kind == "topics":
        present = tuple(t for t in value if topic_exists(storage, t))
        if not present:
            return []
        if present != tuple(value):
            src = replace(src, subscription=("topics", present))
    elif kind == "assign":
        missing = sorted(t for t in value if not topic_exists(storage, t))
        if missing:
            raise UnknownTopicError(
                f"option assign names topic(s) {', '.join(missing)} that do not exist; assign "
                f"reads exactly the partitions it names, so it cannot wait for a topic (use "
                f"subscribe or subscribePattern to wait until a topic is created)")
    return topic_partitions(src, storage)


def initial_offsets(src: SourceOptions, storage: Storage) -> dict[TP, int]:
    """Where a new query starts in every partition: the batch source's resolution of the
    starting options (group offsets, timestamps, JSON, earliest) and ``latest``/``-1``
    as the readable end (the last stable offset under read_committed)."""
    readers = snapshot_readers(storage, stream_partitions(src, storage))
    committed: dict[TP, int] = {}
    if src.starting_group is not None:
        for topic, parts in committed_offsets(storage, src.starting_group).items():
            committed.update({(topic, p): n for p, n in parts.items()})
    to_end = replace(src, ending=Latest())
    out = {}
    for tp, reader in sorted(readers.items()):
        if tp not in committed and limit_for(src.starting, *tp)[0] == "latest":
            out[tp] = reader.upper_bound(src.isolation)
        else:
            out[tp] = resolve_range(to_end, reader, committed.get(tp)).from_offset
    return out


# --------------------------------------------------------------------------- exactly-once sink


def table_sink(warehouse, table: str, *, catalog: Mapping[str, Any] | None = None,
               storage_options: Mapping[str, Any] | None = None,
               partition_by: Sequence[str] | None = None) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function writing each micro-batch (the source's columns, headers
    optional) into the Iceberg table ``table`` exactly once.

    Per batch: rows at or above the table's committed offset of their partition are
    written as Parquet on the executors (the load's file writer), then one snapshot
    commits the files with the ranges ``[committed, last offset + 1)`` through the load's
    commit (:func:`pipelines.warehouse.commit.commit`, offsets in ``kafkastore.offsets``). A batch
    replayed after a crash (Spark replays its last planned batch on restart) finds its
    offsets committed and adds nothing; the run id (topic-partitions and ranges) makes a
    commit whose response was lost a no-op when retried."""

    layout = TableLayout(partition_by=tuple(partition_by)) if partition_by else TableLayout()

    def write(df, batch_id: int) -> None:
        wh = warehouse_catalog.Warehouse.of(warehouse, catalog, storage_options)
        tbl = wh.load_table(table) or wh.create_table(table, KAFKA_SCHEMA, layout)
        committed = warehouse_offsets.committed_offsets(tbl)
        so = dict(storage_options or {})
        run_id = f"stream-{batch_id}"
        writer = _batch_writer(tbl.location(), {f"{t}\0{p}": n for (t, p), n in committed.items()},
                               run_id, so, layout, timestamp_zones(tbl.schema()))
        files = [r.asDict() for r in df.mapInArrow(writer, DESCRIPTOR_DDL).collect()]
        check_disjoint(files)
        ranges = _sink_ranges(files, committed)
        if not ranges:
            return
        key = json.dumps([(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges])
        run_id = f"stream-{table}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"
        iceberg_commit.commit(tbl, iceberg_commit.KafkaCommit(
            run_id, "load", tuple(ranges), tuple(f["url"] for f in files),
            footers={f["url"]: (f["bytes"], f["footer"]) for f in files}))

    return write


def _sink_ranges(files: Sequence[Mapping[str, Any]], committed: Mapping[TP, int]) -> list[OffsetRange]:
    """Per topic-partition written: ``[committed (or the first written offset), last + 1)``."""
    lo: dict[TP, int] = {}
    hi: dict[TP, int] = {}
    for f in files:
        tp = (f["topic"], f["partition"])
        lo[tp] = min(lo.get(tp, f["min_offset"]), f["min_offset"])
        hi[tp] = max(hi.get(tp, f["max_offset"]), f["max_offset"])
    return [OffsetRange(t, p, committed.get((t, p), lo[(t, p)]), hi[(t, p)] + 1)
            for t, p in sorted(hi)]


def _batch_writer(location: str, low: Mapping[str, int], run_id: str, storage_options: dict,
                  layout: TableLayout, zones: Mapping[str, bool]):
    """``mapInArrow`` function: the rows not yet committed, as Parquet files + descriptors."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = []
        for batch in batches:
            if not batch.num_rows:
                continue
            floor = pa.array([low.get(f"{t}\0{p}", 0) for t, p in
                              zip(batch.column("topic").to_pylist(),
                                  batch.column("partition").to_pylist())], pa.int64())
            batch = batch.filter(pc.greater_equal(batch.column("offset"), floor))
            if batch.num_rows:
                keep.append(batch)
        if not keep:
            return
        out = write_files(location, keep, run_id=run_id, layout=layout,
                          storage_options=storage_options, zoned=zones)
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=descriptor_schema())

    return run
