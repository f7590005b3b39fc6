"""Moved to pipelines.decoding.debezium_types (Debezium's semantic types); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.decoding.debezium_types import (  # noqa: F401
    AVRO_CONVERTED, avro_converted, avro_converter, avro_schema, DATES, DECIMAL,
    epoch_date, epoch_timestamp, fit_decimal, is_encoding, stored_columns, time_of_day,
    TIMES, TIMESTAMPS, unscaled_decimal, VARIABLE_DECIMAL, VARIABLE_DECIMAL_TYPE, ZONED,
    zoned_timestamp,
)
