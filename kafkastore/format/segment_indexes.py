"""Checking a segment's ``.index`` and ``.timeindex`` against its ``.log``
(:func:`check_indexes`) and loading them, rebuilt when damaged (:func:`load_indexes`).
Pure functions over bytes.
"""
from __future__ import annotations

import bisect

from . import offset_index, time_index
from ..errors import CorruptIndexError
from .record_batch import NO_TIMESTAMP
from .segment_build import DEFAULT_INDEX_INTERVAL_BYTES, rebuild_indexes
from .segment_scan import _valid_batches


# ----------------------------------------------------------------- index validation

def check_indexes(batches, index_bytes, timeindex_bytes, base_offset: int, *,
                  max_problems: int = 20) -> list[str]:
    """Problems that make the indexes unusable for this log (empty list: fine).

    ``batches`` is ``[(position, header)]`` of the log. An index is usable
    when every lookup lands at or before the batch that holds the answer:
    offset index entries must point at batch starts with an offset after the
    previous batch's last offset and within the log; time index entries
    ``(T, O)`` must have ``O`` within the log and no batch before ``O``'s
    batch with a timestamp >= ``T``. Entries need not be exactly the ones
    :func:`rebuild_indexes` would write (a broker restart or a different
    ``index.interval.bytes`` changes those). None means "not given" and is
    not checked.
    """
    problems: list[str] = []
    last_offsets = [h.last_offset for _, h in batches]
    seg_last = last_offsets[-1] if last_offsets else base_offset - 1

    def add(msg: str) -> bool:
        problems.append(msg)
        return len(problems) < max_problems

    if index_bytes is not None:
        try:
            entries = offset_index.parse(index_bytes, base_offset)
        except CorruptIndexError as e:
            add(f"offset index: {e.reason}")
            entries = []
        by_position = {pos: i for i, (pos, _) in enumerate(batches)}
        for offset, position in entries:
            i = by_position.get(position)
            if i is None:
                if not add(f"offset index entry (offset {offset}, position {position}) "
                           f"does not point at a batch start"):
                    break
                continue
            prev_last = last_offsets[i - 1] if i else base_offset - 1
            if offset <= prev_last:
                if not add(f"offset index entry (offset {offset}, position {position}): the batch "
                           f"before that position already reaches offset {prev_last}"):
                    break
            elif offset > seg_last:
                if not add(f"offset index entry (offset {offset}, position {position}) is past "
                           f"the log's last offset {seg_last}"):
                    break

    if timeindex_bytes is not None and len(problems) < max_problems:
        try:
            tentries = time_index.parse(timeindex_bytes, base_offset)
        except CorruptIndexError as e:
            add(f"time index: {e.reason}")
            tentries = []
        # prefix_max[i]: largest max timestamp of the batches before batch i.
        prefix_max = [NO_TIMESTAMP]
        for _, h in batches:
            prefix_max.append(max(prefix_max[-1], h.max_timestamp))
        for ts, offset in tentries:
            if offset > seg_last:
                msg = f"time index entry (timestamp {ts}, offset {offset}) is past the log's last offset {seg_last}"
            else:
                i = bisect.bisect_left(last_offsets, offset)
                if prefix_max[i] >= ts:
                    msg = (f"time index entry (timestamp {ts}, offset {offset}): an earlier batch "
                           f"already has timestamp {prefix_max[i]}")
                elif ts > prefix_max[-1]:
                    msg = (f"time index entry (timestamp {ts}, offset {offset}) is above the log's "
                           f"max timestamp {prefix_max[-1]}")
                else:
                    continue
            if not add(msg):
                break
    return problems


def load_indexes(log_bytes, index_bytes, timeindex_bytes, base_offset: int, *,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, batches=None,
                 segment: str | None = None) -> tuple[bytes, bytes, bool]:
    """Indexes fit to use with ``log_bytes``: ``(index, timeindex, rebuilt)``.

    Drops preallocation padding (trailing zero entries), then checks both
    indexes against the log (:func:`check_indexes`). When either is missing
    (None) or has any problem, both are rebuilt from the log, as Kafka
    rebuilds a segment's indexes together on recovery, and ``rebuilt`` is
    True. The log itself must be valid (see :func:`recover`).
    """
    if batches is None:
        batches = _valid_batches(log_bytes, base_offset, segment)
    if index_bytes is not None and timeindex_bytes is not None:
        index = offset_index.trim_preallocated(index_bytes)
        timeindex = time_index.trim_preallocated(timeindex_bytes)
        if not check_indexes(batches, index, timeindex, base_offset, max_problems=1):
            return index, timeindex, False
    index, timeindex = rebuild_indexes(log_bytes, base_offset, index_interval_bytes, batches=batches)
    return index, timeindex, True
