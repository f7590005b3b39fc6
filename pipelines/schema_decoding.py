"""Moved to pipelines.decoding.schema_decoding (decoding by the writer schemas of a
registry); this old import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.schema_decoding import (  # noqa: F401
    AvroGroupDecoder, decode_groups, DecoderCache, FORMATS, Group, GroupDecoder,
    JsonGroupDecoder, out_of_range_to_dead_letters, protobuf_file, ProtobufGroupDecoder,
    read_varint, split_frame,
)
