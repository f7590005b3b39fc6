"""Moved to pipelines.decoding.values (the value decoders); the names of the old
``pipelines.decoding`` module stay importable from the package for one release, and this
``__init__`` holds no code.

The package turns record values into columns: ``values`` (raw, JSON with a DDL schema,
Avro inline or from a file, the Confluent wire prefix, dead letters), ``schema_decoding``
(by the writer schemas of a registry, one decoder per schema id), ``avro_columns`` (Avro
bodies to Arrow columns in lockstep), ``type_mapping`` (Avro / Protobuf / JSON Schema to
Arrow), ``proto_text``, ``schema_evolution`` (the one merge rule), ``cdc`` and
``debezium_types`` (Debezium change events), ``registry_client`` (the schema registry's
client).
"""
from __future__ import annotations

from pipelines.decoding.values import (  # noqa: F401
    AvroDecoder, count_dead_letters, DEAD_LETTER_COLUMNS, decode_value, Decoded,
    DecodeOptions, ERROR_COLUMN, FORMATS, good_columns, json_error_detail,
    json_mismatch, KAFKA_META_COLUMNS, ON_INCOMPATIBLE, parse_avro_schema,
    parse_json_schema, REGISTRY_FORMATS, WIRE_MODES,
)
