"""Moved to pipelines.source.session (the Spark session); this old import path stays as an
alias for one release and holds no code."""
from __future__ import annotations

from pipelines.source.session import (  # noqa: F401
    DEFAULT_MASTER, get_spark, log, resolve_settings,
)
