"""Moved to pipelines.decoding.registry_client (the schema registry's client); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.registry_client import (  # noqa: F401
    Reference, RegistryClient, SCHEMA_TYPES, WriterSchema,
)
