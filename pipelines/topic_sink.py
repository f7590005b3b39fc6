"""Moved to pipelines.sink.writer (the Spark side of writes into topics); this old import
path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.sink.writer import (  # noqa: F401
    batch_writer, check_sink_schema, parse_sink_options, SinkOptions, stream_writer,
    TaskMessage, TopicBatchWriter, TopicStreamWriter,
)
