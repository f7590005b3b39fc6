"""Moved to pipelines.decoding.avro_columns (Avro bodies to Arrow columns); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.avro_columns import (  # noqa: F401
    decode, supported,
)
