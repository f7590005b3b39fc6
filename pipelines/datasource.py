"""Moved to pipelines.source.datasource (the ``kafkastore`` Spark data source; its format
name and registration unchanged); this old import path stays as an alias for one release
and holds no code."""
from __future__ import annotations

from pipelines.source.datasource import (  # noqa: F401
    __all__, DEFAULT_MAX_BYTES_PER_PARTITION, KafkaStoreDataSource, KafkaStoreFilteringReader,
    KafkaStorePartition, KafkaStoreReader, OffsetRange, parse_options, plan_offsets,
    plan_partitions, PushedFilters, ranges_to_options, read_topic, register, SOURCE_NAME,
    SourceOptions, spark_schema,
)
