"""Moved to pipelines.decoding.type_mapping (schema types to Arrow types); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.type_mapping import (  # noqa: F401
    avro_mapping, avro_named_types, json_schema_mapping, Mapped, protobuf_mapping,
    RAW_TIME_LOGICAL, UnmappableSchema,
)
