"""Moved to pipelines.jobs.maintain (kafkastore maintain); this old import path stays as an
alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.maintain import (  # noqa: F401
    DEFAULT_TARGET_BYTES, maintain, maintain_tables, MaintainResult, MaintainRewrite,
    MaintainStats, plan_groups,
)
