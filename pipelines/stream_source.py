"""Moved to pipelines.source.stream (streaming reads, ``spark.readStream.format("kafkastore")``,
and ``table_sink``); this old import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.source.stream import (  # noqa: F401
    bytes_between, fair_shares, initial_offsets, KafkaStoreStreamReader, offsets_within,
    parse_stream_options, stream_partitions, StreamOptions, StreamPartition, table_sink, TP,
)
