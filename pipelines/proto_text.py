"""Moved to pipelines.decoding.proto_text (.proto text to a descriptor); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.proto_text import (  # noqa: F401
    parse_proto,
)
