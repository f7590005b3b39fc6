"""Load planning: offset ranges in, Spark tasks out (driver only, Spark-free).

One module for every job that reads the log through Spark (the data source,
loads, reprocesses), as Spark's ``KafkaOffsetReader`` and
``KafkaOffsetRangeCalculator`` are one idea:

1. **Ranges.** Where each partition's read starts and ends, resolved late against
   ONE manifest snapshot per partition (:func:`snapshot_readers`):

   * :func:`resolve_source` -- the data source's options
     (:class:`pipelines.source.options.SourceOptions`, their sealed offset limits);
   * :func:`plan_load` -- per partition ``[from, until)``: ``from`` is the table's
     committed next offset (never anything else); a partition the table never
     loaded starts at the log start offset *as of this run* (``initial``).
     ``until`` is an offset limit (:mod:`pipelines.spec.offset_ranges`): ``Latest``,
     the read-committed end of the log (the last stable offset) resolved once, now;
     ``SpecificOffsets`` (partitions it does not list are not loaded) or
     ``GlobalTimestamp`` (the first offset at or after it, so every loaded record
     is older). A committed offset below the log start (retention deleted data the
     table never loaded) fails, unless ``on_data_loss="skip"``: then the range
     starts at the log start and the gap ``[committed, log start)`` is recorded in
     the commit;
   * :func:`plan_rewind` -- per partition the rewind point of a reprocess (an
     offset, or the first offset at or after a timestamp) and the reload range
     ``[point, committed)``; refused below the log start (the table would hold the
     only copy) and over offsets that compaction removed from the log since the
     table loaded them (the superseded records exist only in the table) unless
     explicitly allowed.

2. **Tasks.** Ranges narrowed by what filters allow (:class:`Pruning`), cut at
   index entries (batch boundaries) into splits of at most about ``max_bytes``
   (:func:`plan_splits`), finer when there are fewer splits than wanted, and
   packed in order into about as many tasks as there are cores
   (:func:`pack_by_bytes`, :func:`plan_tasks`). A task is a tuple of
   :class:`kafkastore.read.reader.ReadRange`: plain data the executors range-read.
"""
from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from kafkastore.errors import (ConfigError, DataLossError, OffsetOutOfRangeError,
                               WarehouseError)
from kafkastore.maintenance.compaction import COMPACTION_WRITER_ID
from kafkastore.groups.admin import committed_offsets
from kafkastore.job_commits import consistent
from kafkastore.read.reader import READ_COMMITTED, PartitionReader, ReadRange
from kafkastore.storage import Storage
from kafkastore.topics.admin import list_topics, load_topic

from .options import DEFAULT_MAX_BYTES, per_partition
from ..spec.load_spec import ON_DATA_LOSS
from ..spec.offset_ranges import (GlobalTimestamp, Latest, OffsetLimit, OffsetRange, SpecificOffsets,
                                 limit_for, partition_map)

# One fetch + decode on an executor holds at most about this much log in memory,
# whatever the split size says (a split reads several such ranges).
MAX_FETCH_BYTES = 16 << 20
_PLANNING_THREADS = 16

Task = tuple  # tuple[ReadRange, ...]: what one Spark task reads


@dataclass(frozen=True)
class PartitionPlan:
    """The planned range of one partition and what the planner saw.

    ``initial``: the table had never loaded this partition. ``gap``: with
    ``on_data_loss="skip"``, the offsets skipped ``[committed, log start)``.
    """

    range: OffsetRange
    log_start_offset: int
    high_watermark: int
    initial: bool = False
    gap: OffsetRange | None = None

    @property
    def partition(self) -> int:
        return self.range.partition

    @property
    def empty(self) -> bool:
        return self.range.empty


def parse_offsets_json(value, topic: str) -> dict[int, int] | None:
    """``{"t": {"0": 10, "1": -1}}`` (Spark Kafka-source JSON, text or mapping) ->
    ``{partition: offset}`` for ``topic``; ``{0: 10}`` accepted; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f'offsets must be JSON like {{"{topic}": {{"0": 100}}}}: {exc}') from None
    if not isinstance(value, Mapping):
        raise ConfigError(f'offsets must be JSON like {{"{topic}": {{"0": 100}}}}, got {value!r}')
    if value and all(isinstance(v, Mapping) for v in value.values()):
        others = sorted(set(value) - {topic})
        if others:
            raise ConfigError(f"offsets name topic(s) {others}; this load reads only {topic!r}")
        value = value.get(topic, {})
    try:
        out = partition_map({topic: value})[topic]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for p_i, off_i in out.items():
        if p_i < 0 or off_i < -2:
            raise ConfigError(f"bad offset {off_i} for partition {p_i}: expected an offset >= 0, "
                              f"-1 (latest) or -2 (earliest)")
    return out


def until_limit(topic: str, until_offsets=None, until_timestamp: int | None = None) -> OffsetLimit:
    """The end of a load as a limit: ``until_offsets`` (Spark Kafka JSON or
    ``{partition: offset}``), ``until_timestamp`` (epoch ms), or neither (Latest)."""
    offsets = parse_offsets_json(until_offsets, topic)
    if offsets is not None and until_timestamp is not None:
        raise ConfigError("give until_offsets or until_timestamp, not both")
    if offsets is not None:
        return SpecificOffsets({topic: offsets})
    if until_timestamp is not None:
        return GlobalTimestamp(int(until_timestamp))
    return Latest()


def plan_load(storage: Storage, topic: str, committed: Mapping[int, int], *,
              until: OffsetLimit | None = None, until_offsets: Mapping[int, int] | None = None,
              until_timestamp: int | None = None,
              on_data_loss: str = "fail") -> list[PartitionPlan]:
    """The per-partition plans of one load (see the module docstring).
    ``committed`` is ``{partition: next offset}`` from the table; the end is ``until``
    (or, the same parsed, ``until_offsets``/``until_timestamp``; default Latest)."""
    if on_data_loss not in ON_DATA_LOSS:
        raise ConfigError(f"on_data_loss must be one of {ON_DATA_LOSS}, got {on_data_loss!r}")
    if until is None:
        until = until_limit(topic, until_offsets, until_timestamp)
    meta = load_topic(storage, topic)
    listed = until.offsets.get(topic, {}) if isinstance(until, SpecificOffsets) else None
    if listed is not None:
        bad = sorted(p for p in listed if p >= meta.partitions)
        if bad:
            raise ConfigError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}; "
                              f"end offsets name {bad}")
    out: list[PartitionPlan] = []
    wanted = [(topic, p) for p in range(meta.partitions) if listed is None or p in listed]
    readers = snapshot_readers(storage, wanted)
    for tp in wanted:
        reader, p = readers[tp], tp[1]
        start, hw = reader.log_start_offset, reader.high_watermark
        upper = reader.last_stable_offset   # read_committed: never past an open transaction
        initial = p not in committed
        from_offset = start if initial else int(committed[p])
        gap = None
        if from_offset < start:
            if on_data_loss == "fail":
                raise DataLossError(
                    f"data loss in {topic}/{p}: the table's next offset is {from_offset} but the "
                    f"log now starts at {start} (offsets [{from_offset}, {start}) were deleted "
                    f"before they were loaded); rerun with `kafkastore load --on-data-loss skip` to record the gap "
                    f"and go on",
                    log_start_offset=start, high_watermark=hw, bounds_in_message=False)
            gap, from_offset = OffsetRange(topic, p, from_offset, start), start
        kind, value = limit_for(until, topic, p)
        if kind == "offset":
            until_offset = min(value, upper)
        elif kind == "timestamp":
            until_offset = min(reader.offset_for_timestamp(int(value)), upper)
        else:
            until_offset = start if kind == "earliest" else upper
        until_offset = max(until_offset, from_offset)   # below the committed offset: nothing to do
        out.append(PartitionPlan(OffsetRange(topic, p, from_offset, until_offset), start, hw,
                                 initial, gap))
    return out


def default_run_id(prefix: str, topic: str, table: str, ranges: Sequence[OffsetRange]) -> str:
    """A run id determined by topic, table and ranges: rerunning one range is recognised."""
    key = json.dumps([topic, table, [(r.partition, r.from_offset, r.until_offset)
                                     for r in sorted(ranges, key=lambda r: r.partition)]])
    return f"{prefix}-{topic}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


@dataclass(frozen=True)
class RewindPlan:
    """One partition of a reprocess: delete the table's rows at and after
    ``requested``, reload ``range`` = ``[max(requested, log start), committed)``."""

    range: OffsetRange
    requested: int
    committed: int
    compacted: bool = False
    below_log_start: bool = False


def _compacted_span(reader: PartitionReader, lo: int, hi: int) -> tuple[int, int] | None:
    """The offsets of ``[lo, hi)`` that segments written by compaction cover, as
    one span ``[a, b)``, or None when compaction rewrote none of them."""
    spans = [(max(lo, s.base_offset), min(hi, s.next_offset)) for s in reader.manifest.segments
             if s.writer_id == COMPACTION_WRITER_ID and s.base_offset < hi and s.next_offset > lo]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


def lost_to_compaction(reader: PartitionReader, lo: int, hi: int,
                       table_offsets: Callable[[int, int, int], set] | None) -> bool:
    """Whether the table holds offsets of ``[lo, hi)`` that compaction removed
    from the log since (a reprocess would drop them). Without
    ``table_offsets`` (``(partition, lo, hi) -> offsets in the table``) any
    compacted segment in the range counts (conservative)."""
    span = _compacted_span(reader, lo, hi)
    if span is None:
        return False
    if table_offsets is None:
        return True
    a, b = span
    in_log = set(reader.read(a, b, include_headers=False).column("offset").to_pylist())
    return bool(table_offsets(reader.partition, a, b) - in_log)


def plan_rewind(storage: Storage, topic: str, committed: Mapping[int, int], *,
                partitions: Sequence[int] | None = None, from_offset: int | None = None,
                from_timestamp: int | None = None, allow_compacted: bool = False,
                allow_below_log_start: bool = False,
                table_offsets: Callable[[int, int, int], set] | None = None) -> list[RewindPlan]:
    """The per-partition rewind plans of a reprocess (see the module docstring).

    ``committed``: ``{partition: next offset}`` of the table. Partitions whose
    rewind point is at or after the committed offset are left out (nothing to
    redo). Refusals are :class:`WarehouseError` naming partition and offsets.
    ``table_offsets``: see :func:`lost_to_compaction` (exact check when given).
    """
    if (from_offset is None) == (from_timestamp is None):
        raise ConfigError("give exactly one of from_offset and from_timestamp")
    if partitions is None:
        partitions = sorted(committed)
        if not partitions:
            raise WarehouseError(f"the table has loaded nothing from topic {topic!r}: nothing to "
                                 f"reprocess")
    out = []
    for p in partitions:
        if p not in committed:
            raise WarehouseError(f"{topic}/{p}: the table has loaded nothing from this partition: "
                                 f"nothing to reprocess (use a load)")
        nxt = int(committed[p])
        reader = PartitionReader(storage, topic, p)
        if from_offset is not None:
            requested = int(from_offset)
            if requested > nxt:
                raise WarehouseError(f"{topic}/{p}: cannot rewind to {requested}: the table has "
                                     f"loaded up to {nxt} only")
        else:
            requested = min(reader.offset_for_timestamp(int(from_timestamp)), nxt)
        if requested >= nxt:
            continue
        start = reader.log_start_offset
        below = requested < start
        if below and not allow_below_log_start:
            raise WarehouseError(
                f"{topic}/{p}: cannot reprocess from {requested}: the log now starts at {start}, "
                f"so offsets [{requested}, {start}) cannot be read again and the table holds the "
                f"only copy; rewind from {start} or later, or pass --allow-below-log-start to "
                f"drop them from the table")
        compacted = lost_to_compaction(reader, max(requested, start), nxt, table_offsets)
        if compacted and not allow_compacted:
            raise WarehouseError(
                f"{topic}/{p}: offsets in [{requested}, {nxt}) were compacted since the table "
                f"loaded them: records superseded by newer keys exist only in the table and a "
                f"reprocess would drop them; pass --allow-compacted to reprocess anyway (recorded "
                f"in the audit)")
        out.append(RewindPlan(OffsetRange(topic, p, max(requested, start), nxt), requested,
                              nxt, compacted, below))
    return out


# --------------------------------------------------------------------------- snapshots


def snapshot_readers(storage: Storage, tps: Sequence[tuple[str, int]]
                     ) -> dict[tuple[str, int], PartitionReader]:
    """One reader (its latest manifest snapshot) per topic-partition, loaded in parallel:
    a manifest read is one or two storage calls, which added up to most of the planning
    of a many-partition read when made one after the other. Many partitions are taken
    together with the jobs that commit in several at once (a Spark write into topics):
    each such job in all of them or in none (:func:`kafkastore.job_commits.consistent`)."""
    if not tps:
        return {}
    if len(tps) == 1:
        return {tps[0]: PartitionReader(storage, *tps[0])}

    def take() -> dict[tuple[str, int], PartitionReader]:
        with ThreadPoolExecutor(max_workers=min(_PLANNING_THREADS, len(tps))) as pool:
            return dict(zip(tps, pool.map(lambda tp: PartitionReader(storage, *tp), tps)))

    return consistent(storage, take)


# --------------------------------------------------------------------------- ranges of a data source read


def open_storage(opts) -> Storage:
    """The log's storage for :class:`pipelines.source.options.SourceOptions`."""
    return Storage(opts.root, dict(opts.storage_options))


def topic_partitions(opts, storage: Storage) -> list[tuple[str, int]]:
    """The (topic, partition) pairs a read covers, checked against the topics' metadata."""
    kind, value = opts.subscription
    limits = (("starting", per_partition(opts.starting)), ("ending", per_partition(opts.ending)))
    if kind == "pattern":
        pattern = re.compile(value)
        topics = [t for t in list_topics(storage) if pattern.fullmatch(t)]
        for side, named in limits:
            if named is not None:
                extra = sorted(set(named) - set(topics))
                if extra:
                    raise ConfigError(
                        f"{side} offsets name topic(s) {', '.join(extra)} that subscribePattern "
                        f"{value!r} does not match (it matches {', '.join(topics) or 'no topic'})")
    else:
        topics = sorted(value)
    out = []
    for topic in topics:
        count = load_topic(storage, topic).partitions
        wanted = value[topic] if kind == "assign" else range(count)
        named_here = set(wanted)
        for _, named in limits:
            if named is not None:
                named_here |= set(named.get(topic, {}))
        bad = sorted(p for p in named_here if p >= count)
        if bad:
            raise ConfigError(f"topic {topic!r} has partitions 0..{count - 1}; the options name "
                              f"partition(s) {', '.join(map(str, bad))}")
        if kind == "assign":
            for side, named in limits:
                if named is not None:
                    extra = sorted(set(named.get(topic, {})) - set(wanted))
                    if extra:
                        raise ConfigError(f"{side} offsets name partition(s) {extra} of {topic!r} "
                                          f"that option assign does not list")
        out.extend((topic, p) for p in wanted)
    return out


def resolve_range(opts, reader: PartitionReader, committed: int | None = None) -> OffsetRange:
    """The [from, until) one partition's options select, against its snapshot (``committed``:
    the startingOffsetsFromGroup group's offset, which wins over the starting options)."""
    topic, partition = reader.topic, reader.partition
    log_start, hw = reader.log_start_offset, reader.high_watermark
    upper = reader.upper_bound(opts.isolation)
    upper_name = "last stable offset" if opts.isolation == READ_COMMITTED else "high watermark"

    s_kind, s_val = (("offset", committed) if committed is not None
                     else limit_for(opts.starting, topic, partition))
    if s_kind == "offset":
        start = s_val
    elif s_kind == "timestamp":
        start = reader.offset_for_timestamp(s_val)
        if start >= hw:  # no record at or after the timestamp (Kafka answers null)
            if opts.timestamp_strategy == "error":
                raise OffsetOutOfRangeError(
                    f"No offset matched from request of topic-partition {topic}-{partition} and "
                    f"timestamp {s_val}: no record has a timestamp at or after it (set option "
                    f"startingOffsetsByTimestampStrategy to latest to read nothing instead)",
                    log_start_offset=log_start, high_watermark=hw)
            start = upper
    else:   # earliest (a starting "latest" is refused when the options are parsed)
        start = log_start

    e_kind, e_val = limit_for(opts.ending, topic, partition)
    if e_kind == "offset":
        end = e_val
    elif e_kind == "timestamp":
        found = reader.offset_for_timestamp(e_val)
        end = upper if found >= hw else min(found, upper)
    else:   # latest (an ending "earliest" is refused when the options are parsed)
        end = upper

    if s_kind == "offset" and start > end and not end < log_start:
        raise ConfigError(
            f"Beginning offset {start} is after the ending offset {end} for topic {topic} "
            f"partition {partition}: startingOffsets must not be past endingOffsets (or past the "
            f"{upper_name} {upper} when reading to latest)")
    lost = [f"{name} offset {n}" for name, kind, n in (("starting", s_kind, start), ("ending", e_kind, end))
            if kind == "offset" and n < log_start]
    if lost and opts.fail_on_data_loss:
        raise DataLossError(
            f"Cannot read {' and '.join(lost)} of {topic}-{partition}: the log now starts at "
            f"offset {log_start}, so offsets [{min(start, end)}, {log_start}) are no longer "
            f"available (deleted by retention or delete-records). Some data may have been lost. "
            f"Set the source option failOnDataLoss to false to read from the log start instead",
            log_start_offset=log_start, high_watermark=hw)
    if e_kind == "offset" and end > upper:
        if opts.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"Cannot read up to ending offset {end} of {topic}-{partition}: the {upper_name} "
                f"is {upper} ({opts.isolation}). Set the source option failOnDataLoss to false to "
                f"read up to it instead",
                log_start_offset=log_start, high_watermark=hw)
        end = upper
    start = max(start, log_start)
    return OffsetRange(topic, partition, start, max(start, end))


def resolve_source(opts, storage: Storage
                   ) -> tuple[list[OffsetRange], dict[tuple[str, int], PartitionReader]]:
    """The ranges a data source read covers now (one per partition, resolved on one
    snapshot per partition) and the readers of those snapshots."""
    readers = snapshot_readers(storage, topic_partitions(opts, storage))
    committed: dict[tuple[str, int], int] = {}
    if opts.starting_group is not None:
        for topic, parts in committed_offsets(storage, opts.starting_group).items():
            committed.update({(topic, p): n for p, n in parts.items()})
    ranges = [resolve_range(opts, readers[tp], committed.get(tp)) for tp in sorted(readers)]
    return ranges, readers


# --------------------------------------------------------------------------- tasks


@dataclass
class Pruning:
    """What a read's filters let the planner skip (the data source fills it from the
    filters Spark pushes down: :class:`pipelines.source.datasource.PushedFilters`)."""

    partitions: frozenset[int] | None = None  # None: any
    partition_lo: int | None = None           # inclusive
    partition_hi: int | None = None           # exclusive
    offset_lo: int | None = None              # inclusive
    offset_hi: int | None = None              # exclusive
    timestamp_lo_ms: int | None = None        # records with a smaller timestamp are not wanted

    def keeps_partition(self, p: int) -> bool:
        """Whether partition ``p`` may hold wanted rows."""
        return ((self.partitions is None or p in self.partitions)
                and (self.partition_lo is None or p >= self.partition_lo)
                and (self.partition_hi is None or p < self.partition_hi))


def prune(ranges: Sequence[OffsetRange], readers: Mapping, pruning: Pruning) -> list[OffsetRange]:
    """``ranges`` narrowed by ``pruning`` (empty ones dropped)."""
    out = []
    for r in ranges:
        if r.count == 0 or not pruning.keeps_partition(r.partition):
            continue
        lo, hi = r.from_offset, r.until_offset
        if pruning.offset_lo is not None:
            lo = max(lo, pruning.offset_lo)
        if pruning.offset_hi is not None:
            hi = min(hi, pruning.offset_hi)
        # Timestamps at or below 0 can sit on records without one (-1): never prune for those.
        if lo < hi and pruning.timestamp_lo_ms is not None and pruning.timestamp_lo_ms > 0:
            lo = max(lo, readers[(r.topic, r.partition)].offset_for_timestamp(pruning.timestamp_lo_ms))
        if lo < hi:
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def _cut(work: Sequence[OffsetRange], readers: Mapping, budget: int) -> list[Task]:
    """Byte ranges of every range, grouped per topic-partition into splits of <= ~budget bytes."""
    splits: list[Task] = []
    for r in work:
        planned = readers[(r.topic, r.partition)].plan(
            r.from_offset, r.until_offset, max_bytes=min(budget, MAX_FETCH_BYTES),
            fail_on_data_loss=False)
        group: list[ReadRange] = []
        size = 0
        for rr in planned:
            if group and size + rr.size > budget:
                splits.append(tuple(group))
                group, size = [], 0
            group.append(rr)
            size += rr.size
        if group:
            splits.append(tuple(group))
    return splits


def task_size(task: Task) -> int:
    """Bytes of log a task (or split) reads."""
    return sum(rr.size for rr in task)


def plan_splits(work: Sequence[OffsetRange], readers: Mapping, max_bytes: int = DEFAULT_MAX_BYTES,
                at_least: int = 0, rounds: int | None = None) -> list[Task]:
    """The splits of ``work``: cut at index entries into splits of at most about
    ``max_bytes``; with fewer than ``at_least``, cut finer (the bytes over ``at_least``,
    then halving, at most ``rounds`` times) while the data allows (the finest cut is
    one ``.index`` entry, i.e. ``index.interval.bytes``)."""
    budget = int(max_bytes)
    splits = _cut(work, readers, budget)
    if 0 < len(splits) < at_least:
        total = sum(task_size(t) for t in splits)
        budget = min(budget, max(1, -(-total // at_least)))
        done = 0
        while True:
            finer = _cut(work, readers, budget)
            done += 1
            if len(finer) > len(splits):
                splits = finer
            if len(splits) >= at_least or budget == 1 or (rounds is not None and done >= rounds):
                break
            budget = max(1, budget // 2)
    return splits


def plan_range_splits(storage: Storage, ranges: Sequence[OffsetRange],
                      max_bytes: int = DEFAULT_MAX_BYTES, at_least: int = 0,
                      rounds: int | None = None) -> list[Task]:
    """The splits of exactly ``ranges`` (range values in, no option strings)."""
    work = [r for r in ranges if not r.empty]
    readers = snapshot_readers(storage, sorted({r.topic_partition for r in work}))
    return plan_splits(work, readers, max_bytes, at_least, rounds)


def plan_source_splits(opts, pruning: Pruning | None = None,
                       storage: Storage | None = None) -> list[Task]:
    """The splits of a data source read: its ranges resolved on one snapshot per
    partition, pruned, cut by ``maxBytesPerPartition`` and ``minPartitions``."""
    storage = storage or open_storage(opts)
    ranges, readers = resolve_source(opts, storage)
    work = prune(ranges, readers, pruning or Pruning())
    return plan_splits(work, readers, opts.max_bytes_per_partition, opts.min_partitions or 0)


def pack_by_bytes(sizes: Sequence[int], parallelism: int, max_bytes: int) -> list[list[int]]:
    """The units (numbers, in order) each task gets: consecutive units packed into at most
    ``want = min(len(sizes), max(parallelism, ceil(total / max_bytes)))`` slices of about
    equal bytes: a unit goes to the slice its byte midpoint falls in, so a slice exceeds the
    even share ``total / want`` by less than its largest unit and there are never more
    slices than ``want`` (greedy filling left a small extra task, a straggler on its own
    core). Every unit is in exactly one slice; no slice is empty.

    A Spark task costs a fixed amount (scheduling, a Python worker round trip, output
    files) whatever it reads, so a job with one task per partition or per segment costs
    more per record the more partitions a topic has: jobs (loads, compaction) pack their
    units into about as many tasks as there are cores, or as the bytes need."""
    if not sizes:
        return []
    total = sum(sizes)
    want = min(len(sizes), max(parallelism, -(-total // max(1, max_bytes)), 1))
    share = total / want
    slices: list[list[int]] = [[] for _ in range(want)]
    before = 0
    for i, n in enumerate(sizes):
        slices[min(want - 1, int((before + n / 2) / share)) if share else 0].append(i)
        before += n
    return [s for s in slices if s]


def pack_splits(splits: Sequence[Task], parallelism: int, max_bytes: int) -> list[Task]:
    """``splits`` packed in order into about ``max(parallelism, bytes / max_bytes)`` tasks
    of about equal bytes (:func:`pack_by_bytes`), so a job's Spark task count follows the
    bytes and the cores, not the partition count (docs/DECISIONS.md)."""
    sizes = [task_size(split) for split in splits]
    return [tuple(rr for i in group for rr in splits[i])
            for group in pack_by_bytes(sizes, parallelism, max_bytes)]


def plan_tasks(storage: Storage, ranges: Sequence[OffsetRange], parallelism: int,
               max_bytes: int | None = None) -> list[Task]:
    """The Spark tasks of a job reading exactly ``ranges`` (loads, reprocesses): splits of
    at most about ``max_bytes``, cut finer once when fewer than ``parallelism`` (few, big
    partitions: every core reads; one partition otherwise loads on one core), packed
    into about ``parallelism`` tasks."""
    max_bytes = max_bytes or DEFAULT_MAX_BYTES
    splits = plan_range_splits(storage, ranges, max_bytes, at_least=parallelism, rounds=1)
    return pack_splits(splits, parallelism, max_bytes)
