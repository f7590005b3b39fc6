"""Moved to pipelines.jobs.reprocess (reprocess); this old import path stays as an alias
for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.reprocess import (  # noqa: F401
    base_snapshot, reprocess, ReprocessRequest, ReprocessSummary, run_reprocess,
)
