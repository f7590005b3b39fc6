"""Moved to pipelines.source.planning (load planning: ranges in, Spark tasks out); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.source.planning import (  # noqa: F401
    DEFAULT_MAX_BYTES, default_run_id, lost_to_compaction, MAX_FETCH_BYTES,
    open_storage, pack_by_bytes, pack_splits, parse_offsets_json, PartitionPlan,
    plan_load, plan_range_splits, plan_rewind, plan_source_splits, plan_splits,
    plan_tasks, prune, Pruning, resolve_range, resolve_source, RewindPlan,
    snapshot_readers, Task, task_size, topic_partitions, until_limit,
)
