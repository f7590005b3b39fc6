"""Moved to pipelines.jobs.log_compaction (the log compaction job); this old import path
stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.log_compaction import (  # noqa: F401
    compact_partition, compact_scanned, compact_topic, CompactionReport, drop_superseded, log,
    PartitionResult, run_plans, scan_slices, SURVIVOR_BYTES, survivors, TASK_BYTES,
)
