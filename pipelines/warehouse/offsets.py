"""The offsets protocol: a table's committed Kafka offsets live in its snapshots.

Every kafkastore commit is one Iceberg snapshot (a reprocess: a delete snapshot and an
append snapshot committed together) whose summary carries (names in :mod:`.properties`)

* ``kafkastore.offsets``: JSON ``{"<topic>": {"<partition>": <next offset>}}``,
  the full committed map of the table;
* ``kafkastore.run-id``, ``kafkastore.operation`` (``load`` / ``reprocess``, or
  ``maintain``, which carries the offsets forward);
* ``kafkastore.ranges``: JSON list of ``{"topic", "partition", "from", "until"}``;
* optionally ``kafkastore.gaps`` (offsets skipped because retention deleted
  them first) and ``kafkastore.audit`` (reprocess: requested and effective
  offsets, user, reason, flags).

A table's committed offsets (:func:`committed_offsets`) are those of the newest
snapshot in the ancestry of ``main`` (or another branch) carrying
``kafkastore.offsets``; snapshots of other engines (compaction rewrites,
expiry, manual fixes) are skipped, never read as "nothing loaded". A commit's new
offsets are decided by the pure :func:`next_offsets` (overlap or gap refused); a run
already committed is found by its run id (:func:`find_run`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from kafkastore.errors import OffsetGapError, OffsetOverlapError, TableChangedError, WarehouseError

from ..spec.offset_ranges import OffsetRange, TopicPartition, by_partition
from .properties import OPERATIONS, RUN_ID_KEY
from .snapshots import MAIN, ancestry, snapshot_offsets


def offsets_snapshot(table, ref: str = MAIN):
    """The newest snapshot in ``ref``'s ancestry carrying kafkastore offsets, or None."""
    for snap in ancestry(table, ref):
        if snapshot_offsets(snap) is not None:
            return snap
    return None


def committed_offsets(table, ref: str = MAIN) -> dict[TopicPartition, int]:
    """``{(topic, partition): next offset}`` committed in ``table`` (``{}`` if none;
    ``table`` may be ``None``, a table that does not exist)."""
    if table is None:
        return {}
    return snapshot_offsets(offsets_snapshot(table, ref)) or {}


def find_run(table, run_id: str, ref: str = MAIN):
    """The snapshot of ``ref``'s ancestry committed by ``run_id``, or None."""
    for snap in ancestry(table, ref):
        if snap.summary is not None and snap.summary.additional_properties.get(RUN_ID_KEY) == run_id:
            return snap
    return None


# ---------------------------------------------------------------------------
# validation (pure)


def next_offsets(committed: Mapping[TopicPartition, int], operation: str,
                 ranges: Sequence[OffsetRange], *, gaps: Sequence[OffsetRange] = (),
                 expected: Mapping[TopicPartition, int] | None = None
                 ) -> dict[TopicPartition, int]:
    """The full offsets map after committing ``ranges`` on top of ``committed``.

    ``load``: a range starts exactly at the committed offset of its partition
    (anywhere for a partition never loaded), unless ``gaps`` holds the skipped
    ``[committed, from)`` (data deleted from the log before it was loaded).
    Below: :class:`OffsetOverlapError`; above: :class:`OffsetGapError`.
    ``reprocess``: a range starts at or below the committed offset (anywhere
    for a partition the table never committed: nothing to replace); ``expected``
    (the offsets the reprocess was planned on) must still be the committed ones
    for its partitions, else :class:`TableChangedError`. Every range ends at or
    after its start.
    """
    if operation not in OPERATIONS:
        raise WarehouseError(f"unknown operation {operation!r}; expected one of {OPERATIONS}")
    indexed = by_partition(ranges)
    gap_map = by_partition(gaps)
    out = dict(committed)
    for tp, r in indexed.items():
        if r.until_offset < r.from_offset:
            raise WarehouseError(f"bad range [{r.from_offset}, {r.until_offset}) of {r.topic}/{r.partition}")
        c = committed.get(tp)
        if operation == "load":
            if c is not None and r.from_offset < c:
                raise OffsetOverlapError(
                    f"{r.topic}/{r.partition}: range [{r.from_offset}, {r.until_offset}) overlaps "
                    f"offsets already committed (next offset {c})")
            if c is not None and r.from_offset > c:
                g = gap_map.get(tp)
                if g is None or (g.from_offset, g.until_offset) != (c, r.from_offset):
                    raise OffsetGapError(
                        f"{r.topic}/{r.partition}: range starts at {r.from_offset} but the table's "
                        f"next offset is {c}: offsets [{c}, {r.from_offset}) would be skipped")
        else:
            if expected is not None and expected.get(tp) != c:
                raise TableChangedError(
                    f"{r.topic}/{r.partition}: the table's next offset moved from "
                    f"{expected.get(tp)} to {c} since the reprocess was planned; rerun it")
            if c is not None and r.from_offset > c:
                raise OffsetGapError(
                    f"{r.topic}/{r.partition}: cannot reprocess from {r.from_offset}: the table's "
                    f"next offset is {c}")
        # A reprocess replaces [from, until) and never moves offsets back: a
        # dead-letter table ahead of its table keeps its end.
        out[tp] = r.until_offset if operation == "load" or c is None else max(c, r.until_offset)
    return out

