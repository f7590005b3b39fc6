"""Moved to pipelines.spec.offset_ranges (offset ranges and limits); this old import path
stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.spec.offset_ranges import (  # noqa: F401
    by_partition, Earliest, EARLIEST_OFFSET, GlobalTimestamp, is_json_int, Latest,
    LATEST_OFFSET, limit_for, OffsetLimit, OffsetRange, offsets_from_json,
    offsets_to_json, partition_map, SpecificOffsets, SpecificTimestamps, TopicPartition,
)
