"""``df.write`` / ``df.writeStream.format("kafkastore")``: exactly-once writes into topics.

::

    df.write.format("kafkastore").option("root", "s3://bucket/log").option("topic", "out").save()
    (df.writeStream.format("kafkastore").option("root", root).option("topic", "out")
       .option("checkpointLocation", ckpt).start())

Columns, as Spark's Kafka sink takes them (other columns are ignored):

=========  ==========================================  ======================================
column     type                                        meaning
=========  ==========================================  ======================================
value      string or binary (required)                 the record's value (null allowed)
key        string or binary                            murmur2 of the key picks the partition
                                                       (the Java client's), null: sticky
topic      string                                      the topic, unless the topic option is
                                                       set (the option wins, as in Spark)
partition  int                                         an explicit partition
timestamp  timestamp                                   the record's timestamp (null: now)
headers    array<struct<key string, value binary>>     record headers
=========  ==========================================  ======================================

Options: ``root`` (or the save() path), ``storageOptions`` / ``storage.<key>`` as for
the source, ``topic``; for streams ``sinkId`` (default: derived from the query's
``checkpointLocation``), which names the sink's decision records. ``kafka.*`` options are
accepted and ignored. The topic's compression, ``max.message.bytes``, timestamp rules and
``cleanup.policy=compact`` (keys required) apply as to any producer.

Exactly once: each task attempt writes one open transaction; the driver's commit makes
the chosen attempts' transactions readable together and aborts the rest
(:mod:`pipelines.sink.commit`; docs/DESIGN.md, "Writes into topics").

Progress, as the load prints it: every task prints its records and bytes per partition
every 10 s and when it ends (the executors' stderr), and the driver's commit one line for
the job: records and bytes per partition, tasks, markers written, attempts aborted.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, DataType, IntegerType, StringType,
                               StructField, StructType, TimestampType)

from kafkastore.clock import SYSTEM
from kafkastore.errors import ConfigError
from kafkastore.storage import Storage

from ..source.options import storage_options_of
from ..spec.spark_options import gather_options
from .commit import (TaskResult, abort_job, commit_job, new_job_prefix,
                                recover_jobs, recover_stream, stream_job, stream_prefix,
                                write_task)

__all__ = ["SinkOptions", "parse_sink_options", "check_sink_schema", "batch_writer",
           "stream_writer", "TopicBatchWriter", "TopicStreamWriter", "TaskMessage"]

_HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                 StructField("value", BinaryType())]))
_COLUMN_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "key": ((StringType, BinaryType), "string or binary"),
    "value": ((StringType, BinaryType), "string or binary"),
    "topic": ((StringType,), "string"),
    "partition": ((IntegerType,), "int"),
    "timestamp": ((TimestampType,), "timestamp"),
}
_KNOWN = ("root", "path", "storageOptions", "topic", "sinkId", "checkpointLocation")


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write into topics (plain data: it travels to the tasks)."""

    root: str
    storage_options: Mapping[str, Any]
    topic: str | None
    sink_id: str | None


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Validate the sink's options (case-insensitive names); :class:`ConfigError` otherwise."""
    opts, storage_keys = gather_options(options, _KNOWN, owner="a write into topics",
                                        ignored=("kafka.",),
                                        shown="storage.<key>, kafka.* (ignored)")
    root = (opts.get("root") or opts.get("path") or "").strip()
    if not root:
        raise ConfigError("option root is required: the log's storage root URL, e.g. "
                          ".option(\"root\", \"s3://bucket/kafkastore\")")
    if root.lower().startswith("memory://"):
        raise ConfigError(f"root {root!r}: memory:// stores live inside one process and "
                          f"Spark's Python workers cannot see them; use file:// or s3://")
    storage_options = storage_options_of(opts, storage_keys)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option topic: expected a topic name, got ''")
    sink_id = opts.get("sinkId")
    if sink_id is None and "checkpointLocation" in opts:
        sink_id = "ckpt-" + hashlib.sha256(opts["checkpointLocation"].encode()).hexdigest()[:24]
    if sink_id is not None and not sink_id.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"option sinkId: letters, digits, '-' and '_' only, got {sink_id!r}")
    return SinkOptions(root, storage_options, topic.strip() if topic else None, sink_id)


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write (Spark's Kafka sink's rules), on the driver."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ConfigError(f"a write into topics needs a value column; got "
                          f"{schema.simpleString()}")
    if opts.topic is None and "topic" not in fields:
        raise ConfigError("a write into topics needs the topic option or a topic column")
    for name, (types, shown) in _COLUMN_TYPES.items():
        if name in fields and not isinstance(fields[name], types):
            raise ConfigError(f"column {name!r} must be {shown}, got "
                              f"{fields[name].simpleString()}")
    if "headers" in fields and not _headers_ok(fields["headers"]):
        raise ConfigError(f"column 'headers' must be {_HEADERS.simpleString()}, got "
                          f"{fields['headers'].simpleString()}")


def _headers_ok(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in t.elementType.fields}
    return (set(inner) == {"key", "value"} and isinstance(inner["key"], StringType)
            and isinstance(inner["value"], (BinaryType, StringType)))


_COLUMNS = ("key", "value", "topic", "partition", "timestamp", "headers")


@dataclass
class TaskMessage(WriterCommitMessage):
    """One task attempt's commit message: what it wrote (:class:`TaskResult`)."""

    result: TaskResult


def _write(opts: SinkOptions, prefix: int, job: str, iterator: Iterator[Any],
           salt: int = 0) -> TaskMessage:
    """The task side of both writers: this attempt's transaction. ``salt`` (a stream run's)
    is xor-ed into Spark's task attempt id, which restarts from 0 in every application."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.taskAttemptId() if ctx is not None else uuid.uuid4().int & 0xFFFFFFFF
    storage = Storage(opts.root, dict(opts.storage_options))
    batches = (_known_columns(b) for b in iterator)
    return TaskMessage(write_task(storage, batches, prefix=prefix, task_attempt_id=attempt ^ salt,
                                  topic=opts.topic, job=job))


def _batch_id_of_task() -> int:
    """The micro-batch this task belongs to (Spark's ``streaming.sql.batchId`` property)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if value is None:
        raise ConfigError("a streaming write task without Spark's streaming.sql.batchId")
    return int(value)


def _known_columns(batch):
    """The batch with the sink's columns only, named in lower case (Spark's names are
    case-insensitive)."""
    import pyarrow as pa

    keep = [(i, n.lower()) for i, n in enumerate(batch.schema.names) if n.lower() in _COLUMNS]
    return pa.RecordBatch.from_arrays([batch.column(i) for i, _ in keep],
                                      names=[n for _, n in keep])


def _results(messages) -> list[TaskResult | None]:
    return [m.result if isinstance(m, TaskMessage) else None for m in messages]


class TopicBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kafkastore")``: the job's output readable all at once or never."""

    def __init__(self, opts: SinkOptions):
        self.opts = opts
        self.job = uuid.uuid4().hex
        self.prefix = new_job_prefix()
        self.started_ms = SYSTEM.wall_ms()   # the commit's progress line: the job's rate

    def write(self, iterator: Iterator[Any]) -> TaskMessage:
        """Append this task's rows as an open transaction of this attempt (executor)."""
        return _write(self.opts, self.prefix, self.job, iterator)

    def commit(self, messages) -> None:
        """Commit the chosen attempts' transactions as one job (driver)."""
        commit_job(self._storage(), _results(messages), job=self.job, prefix=self.prefix,
                   topics=[self.opts.topic] if self.opts.topic else [],
                   started_ms=self.started_ms)

    def abort(self, messages) -> None:
        """Abort every transaction of the job: nothing of it is readable (driver). Spark
        calls this while tasks it cancelled may still be appending: the job is closed first,
        and such a task aborts its own transaction after its next append."""
        storage = self._storage()
        topics = [self.opts.topic] if self.opts.topic else []
        abort_job(storage, job=self.job, prefix=self.prefix, topics=topics, close=True)

    def _storage(self) -> Storage:
        return Storage(self.opts.root, dict(self.opts.storage_options))


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafkastore")``: each micro-batch exactly once, a replayed
    batch id (after a restart) a no-op.

    Spark builds a new instance for every commit, so nothing here is kept between the tasks
    and the commit: both derive the batch's producer-id prefix and job name from the sink
    id and the batch id (:func:`pipelines.sink.commit.stream_prefix`)."""

    def __init__(self, opts: SinkOptions):
        if opts.sink_id is None:
            raise ConfigError("a streaming write into topics needs a checkpointLocation or the "
                              "sinkId option (it names the sink's committed batches)")
        self.opts = opts
        self.salt = uuid.uuid4().int & 0xFFFFFFFF

    def write(self, iterator: Iterator[Any]) -> TaskMessage:
        """Append this task's rows as an open transaction of this attempt (executor)."""
        batch_id = _batch_id_of_task()
        return _write(self.opts, stream_prefix(self.opts.sink_id, batch_id),
                      stream_job(self.opts.sink_id, batch_id), iterator, self.salt)

    def commit(self, messages, batchId: int) -> None:
        """Commit micro-batch ``batchId`` unless an earlier run committed it (driver)."""
        sink = self.opts.sink_id
        commit_job(self._storage(), _results(messages), job=stream_job(sink, batchId),
                   prefix=stream_prefix(sink, batchId),
                   topics=[self.opts.topic] if self.opts.topic else [],
                   sink_id=sink, batch_id=batchId)

    def abort(self, messages, batchId: int) -> None:
        """Abort the micro-batch's transactions (driver). A replay of the batch id reuses
        its name, so it is not closed: a task still appending is aborted by the replay."""
        sink, storage = self.opts.sink_id, self._storage()
        topics = [self.opts.topic] if self.opts.topic else []
        abort_job(storage, job=stream_job(sink, batchId), prefix=stream_prefix(sink, batchId),
                  topics=topics)

    def _storage(self) -> Storage:
        return Storage(self.opts.root, dict(self.opts.storage_options))


def _refuse_overwrite(overwrite: bool) -> None:
    # A topic is an append-only log: as Spark's Kafka sink, no overwrite (or complete mode).
    if overwrite:
        raise ConfigError("a topic cannot be overwritten: write with mode(\"append\") "
                          "(streams: outputMode append or update)")


def batch_writer(options: Mapping[str, Any], schema: StructType, overwrite: bool) -> TopicBatchWriter:
    """The writer for ``DataSource.writer``: validates, rolls forward jobs a crash left
    decided but not fully marked, and returns a writer for one job."""
    opts = parse_sink_options(options)
    check_sink_schema(schema, opts)
    _refuse_overwrite(overwrite)
    recover_jobs(Storage(opts.root, dict(opts.storage_options)))
    return TopicBatchWriter(opts)


def stream_writer(options: Mapping[str, Any], schema: StructType,
                  overwrite: bool) -> TopicStreamWriter:
    """The writer for ``DataSource.streamWriter`` (Spark calls it at the query's start and
    again for every commit): validates and rolls forward the sink's newest decided batch."""
    opts = parse_sink_options(options)
    check_sink_schema(schema, opts)
    _refuse_overwrite(overwrite)
    writer = TopicStreamWriter(opts)
    recover_stream(Storage(opts.root, dict(opts.storage_options)), opts.sink_id)
    return writer
