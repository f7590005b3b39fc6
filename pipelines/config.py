"""Moved to pipelines.spec.job_config (the jobs' part of the config file); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.spec.job_config import (  # noqa: F401
    Config, DEFAULT_WAREHOUSE, load_config,
)
