"""Moved to pipelines.jobs.vacuum (vacuum); this old import path stays as an alias for one
release and holds no code."""
from __future__ import annotations

from pipelines.jobs.vacuum import (  # noqa: F401
    awaiting_validation, check_grace, DEFAULT_GRACE_MS, log, MIN_GRACE_MS,
    referenced_files, vacuum, VacuumResult,
)
