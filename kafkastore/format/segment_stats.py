"""What a manifest records about a segment (:class:`SegmentStats`), gathered batch by
batch (:func:`segment_stats`). Pure functions over bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptRecordError
from .record_batch import LOG_APPEND_TIME, NO_TIMESTAMP, BatchHeader, decode_batch
from .segment_scan import _valid_batches


# ----------------------------------------------------------------- stats

@dataclass(frozen=True)
class SegmentStats:
    """What a manifest records about a segment.

    ``record_count`` counts every record of every batch, control records
    (transaction markers) included: it is what the batch headers say.
    Timestamps are epoch ms; -1 (Kafka's ``NO_TIMESTAMP``) when there are
    none. ``min_timestamp`` is the smallest *record* timestamp (exact, not
    the smallest batch base timestamp, which is no lower bound);
    ``max_timestamp`` / ``offset_of_max_timestamp`` are Kafka's
    ``maxTimestampSoFar`` / ``offsetOfMaxTimestampSoFar`` (the last offset of
    the batch that first reached it; ``base_offset`` when none).
    ``first_batch_timestamp`` is the first batch's max timestamp, which
    Kafka uses for time-based rolling.
    """

    base_offset: int
    next_offset: int
    record_count: int
    batch_count: int
    size: int
    min_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    first_offset: int | None = None
    first_batch_timestamp: int = NO_TIMESTAMP

    @property
    def is_empty(self) -> bool:
        return self.batch_count == 0

    @property
    def last_offset(self) -> int:
        """``next_offset - 1`` (``base_offset - 1`` for an empty segment)."""
        return self.next_offset - 1


class _StatsAccumulator:
    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.record_count = 0
        self.batch_count = 0
        self.size = 0
        self.min_timestamp: int | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_offset: int | None = None
        self.first_batch_timestamp = NO_TIMESTAMP

    def add(self, header: BatchHeader, min_timestamp: int | None) -> None:
        if self.first_offset is None:
            self.first_offset = header.base_offset
            self.first_batch_timestamp = header.max_timestamp
        self.next_offset = header.next_offset
        self.record_count += header.record_count
        self.batch_count += 1
        self.size += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if min_timestamp is not None and min_timestamp >= 0 and (
                self.min_timestamp is None or min_timestamp < self.min_timestamp):
            self.min_timestamp = min_timestamp

    def stats(self) -> SegmentStats:
        return SegmentStats(
            base_offset=self.base_offset, next_offset=self.next_offset,
            record_count=self.record_count, batch_count=self.batch_count, size=self.size,
            min_timestamp=NO_TIMESTAMP if self.min_timestamp is None else self.min_timestamp,
            max_timestamp=self.max_timestamp, offset_of_max_timestamp=self.offset_of_max_timestamp,
            first_offset=self.first_offset, first_batch_timestamp=self.first_batch_timestamp)


def batch_min_timestamp(buf, pos: int, header: BatchHeader) -> int | None:
    """Smallest record timestamp (>= 0) of the batch at ``buf[pos]``; None if it has none.

    Under log-append time every record carries the batch's max timestamp;
    otherwise the records are decoded (timestamps inside a batch need not be
    ordered, so the header alone gives no lower bound).
    """
    if header.record_count == 0:
        return None
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.max_timestamp if header.max_timestamp >= 0 else None
    _, records = decode_batch(buf, pos, verify_crc=False)
    stamps = [r.timestamp for r in records if r.timestamp >= 0]
    return min(stamps) if stamps else None


def segment_stats(log_bytes, base_offset: int, *, batches=None,
                  segment: str | None = None) -> SegmentStats:
    """Stats of a whole, valid segment (decodes records for the exact min timestamp).

    ``batches`` (``[(position, header)]``, e.g. from :func:`scan_log`) avoids
    a second scan; without it the log is scanned and must be valid.
    """
    if batches is None:
        batches = _valid_batches(log_bytes, base_offset, segment)
    acc = _StatsAccumulator(base_offset)
    for pos, header in batches:
        try:
            acc.add(header, batch_min_timestamp(log_bytes, pos, header))
        except CorruptRecordError as e:
            raise e.located(segment=segment, offset=header.base_offset, position=pos) from None
    return acc.stats()
