"""Planning the offset ranges of loads and reprocesses (driver only, Spark-free).

One module for both jobs, over the one range type
(:class:`pipelines.offset_ranges.OffsetRange`):

* :func:`plan_load` -- per partition ``[from, until)``: ``from`` is the table's
  committed next offset (never anything else); a partition the table never
  loaded starts at the log start offset *as of this run* (``initial``).
  ``until`` is the read-committed end of the log (the last stable offset)
  resolved once, now, or an explicit end (``until_offsets``: partitions it does
  not list are not loaded; ``until_timestamp``: the first offset at or after
  it, so every loaded record is older). A committed offset below the log start
  (retention deleted data the table never loaded) fails, unless
  ``on_data_loss="skip"``: then the range starts at the log start and the gap
  ``[committed, log start)`` is recorded in the commit.
* :func:`plan_rewind` -- per partition the rewind point of a reprocess (an
  offset, or the first offset at or after a timestamp) and the reload range
  ``[point, committed)``; refused below the log start (the table would hold the
  only copy) and over offsets that compaction removed from the log since the
  table loaded them (the superseded records exist only in the table) unless
  explicitly allowed.
"""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from kafkastore.errors import ConfigError, DataLossError, WarehouseError
from kafkastore.reader import EARLIEST, LATEST, PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics import load_topic

from .load_spec import ON_DATA_LOSS
from .offset_ranges import OffsetRange


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
    out: dict[int, int] = {}
    for p, off in value.items():
        try:
            p_i, off_i = int(p), int(off)
        except (TypeError, ValueError):
            raise ConfigError(f"bad offset {off!r} for partition {p!r}: expected integers") from None
        if p_i < 0 or off_i < -2:
            raise ConfigError(f"bad offset {off_i} for partition {p_i}: expected an offset >= 0, "
                              f"-1 (latest) or -2 (earliest)")
        out[p_i] = off_i
    return out


def _readers(storage: Storage, topic: str, partitions: Sequence[int]) -> list[PartitionReader]:
    """A reader (its latest manifest) per partition, loaded in parallel: a manifest read is
    one or two storage calls, which added up to most of the planning of a many-partition
    load when made one after the other."""
    if len(partitions) < 2:
        return [PartitionReader(storage, topic, p) for p in partitions]
    with ThreadPoolExecutor(max_workers=min(16, len(partitions))) as pool:
        return list(pool.map(lambda p: PartitionReader(storage, topic, p), partitions))


def plan_load(storage: Storage, topic: str, committed: Mapping[int, int], *,
              until_offsets: Mapping[int, int] | None = None,
              until_timestamp: int | None = None,
              on_data_loss: str = "fail") -> list[PartitionPlan]:
    """The per-partition plans of one load (see the module docstring).
    ``committed`` is ``{partition: next offset}`` from the table."""
    if on_data_loss not in ON_DATA_LOSS:
        raise ConfigError(f"on_data_loss must be one of {ON_DATA_LOSS}, got {on_data_loss!r}")
    if until_offsets is not None and until_timestamp is not None:
        raise ConfigError("give until_offsets or until_timestamp, not both")
    meta = load_topic(storage, topic)
    if until_offsets is not None:
        bad = sorted(p for p in until_offsets if p >= meta.partitions)
        if bad:
            raise ConfigError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}; "
                              f"end offsets name {bad}")
    out: list[PartitionPlan] = []
    wanted = [p for p in range(meta.partitions) if until_offsets is None or p in until_offsets]
    for p, reader in zip(wanted, _readers(storage, topic, wanted)):
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
        if until_offsets is not None:
            want = until_offsets[p]
            until = upper if want == LATEST else start if want == EARLIEST else min(want, upper)
        elif until_timestamp is not None:
            until = min(reader.offset_for_timestamp(int(until_timestamp)), upper)
        else:
            until = upper
        until = max(until, from_offset)   # an end below the committed offset: nothing to do
        out.append(PartitionPlan(OffsetRange(topic, p, from_offset, until), start, hw,
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
    from kafkastore.compaction import COMPACTION_WRITER_ID

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
