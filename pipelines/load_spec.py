"""Moved to pipelines.spec.load_spec (the typed load spec); this old import path stays as
an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.spec.load_spec import (  # noqa: F401
    DECODE_EXTRA, DEFAULTS, KNOWN, load_specs, LoadSpec, ON_DATA_LOSS, resolve_spec,
    REVISABLE, RUN_POLICIES, SCHEDULING, stored_load, VALUE_FORMATS, MANY_TABLE_KEYS,
    SPEC_LAYOUT_FIELDS,
)
