"""Moved to pipelines.source.options (the data source's options); this old import path
stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.source.options import (  # noqa: F401
    DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES_PER_PARTITION, option_strings, parse_options,
    per_partition, ranges_to_options, SOURCE_NAME, SourceOptions, storage_options_of,
    storage_value,
)
