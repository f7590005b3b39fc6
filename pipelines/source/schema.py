"""The Arrow schemas of the jobs' tables: raw loads (Spark's Kafka-source columns), dead
letters, the columns every decoded table starts with; :func:`nullable` (every field
optional, nested too) and :func:`file_schema` (a Parquet file's footer).

pyarrow is imported when a function runs, not with the module (planning and the CLI
import the jobs' modules without paying for it).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..decoding.values import DEAD_LETTER_COLUMNS


def raw_schema():
    """The table schema of raw loads: Spark's Kafka-source columns (all optional)."""
    from kafkastore.format.arrow_decode import KAFKA_SCHEMA  # lazy: pyarrow start-up

    return KAFKA_SCHEMA


def dead_letter_schema():
    """The dead-letter table schema: the Kafka columns, the raw value, the error."""
    import pyarrow as pa

    from kafkastore.format.arrow_decode import KAFKA_SCHEMA  # lazy: pyarrow start-up

    fields = [KAFKA_SCHEMA.field(c) for c in DEAD_LETTER_COLUMNS if c != "error"]
    return pa.schema(fields + [pa.field("error", pa.string())])


def base_decoded_schema():
    """The columns every decoded table starts with; decoded columns join at the
    first commit (union by name)."""
    import pyarrow as pa

    from kafkastore.format.arrow_decode import KAFKA_SCHEMA  # lazy: pyarrow start-up

    return pa.schema([KAFKA_SCHEMA.field(c) for c in ("topic", "partition", "offset", "timestamp")])


def nullable(schema):
    """``schema`` with every field (nested too) optional: tables accept files
    whatever Spark declared, and later schema unions never tighten a column."""
    import pyarrow as pa

    def fix_type(t):
        if pa.types.is_struct(t):
            return pa.struct([fix_field(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(fix_field(t.value_field))
        if pa.types.is_map(t):
            return pa.map_(t.key_type, fix_field(t.item_field))
        return t

    def fix_field(f):
        return pa.field(f.name, fix_type(f.type), True)

    return pa.schema([fix_field(f) for f in schema])


def file_schema(url: str, storage_options: Mapping[str, Any] | None):
    """The Arrow schema stored in a Parquet file's footer."""
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(url, "rb", **dict(storage_options or {})) as f:
        return pq.read_schema(f)
