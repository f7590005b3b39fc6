"""Moved to pipelines.jobs.log_retention (the retention job); this old import path stays as
an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.log_retention import (  # noqa: F401
    RetentionReport, run_retention,
)
