"""Moved to pipelines.decoding.schema_evolution (the one schema merge rule); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.schema_evolution import (  # noqa: F401
    fit, IncompatibleChange, merge_schemas, merge_types, normalize, normalize_schema,
)
