"""Moved to pipelines.jobs.upsert (upsert tables); this old import path stays as an alias
for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.upsert import (  # noqa: F401
    apply_model, beats, check_mode, check_staged, DEFAULT_TARGET_ROWS,
    KEY_COLUMNS_PROPERTY, key_ids, keyed_rows, last_per_partition, merge,
    mode_properties, MODE_PROPERTY, nullable, read_tasks, rebuild_commit,
    RebuildRewrite, reduce_batch, remove_staging, RewriteStats, rows_commit,
    staged_rows, table_mode, TOMBSTONE, touched_tasks, upsert_commit, UpsertRewrite,
    write_sorted,
)
