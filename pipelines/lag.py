"""Moved to pipelines.jobs.lag (the tables' lag behind the log); this old import path stays
as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.lag import (  # noqa: F401
    committed_offsets_by_table, table_lag,
)
