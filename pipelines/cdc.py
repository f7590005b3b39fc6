"""Moved to pipelines.decoding.cdc (Debezium change events); this old import path stays as
an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.cdc import (  # noqa: F401
    CDC_COLUMNS, CDC_FORMATS, check_spec, debezium_batch, debezium_frame, debezium_row,
    debezium_writer, default_key_columns, key_fields, KEY_SAMPLE, POSITION_FIELDS,
    registry_table_value, with_default_keys,
)
