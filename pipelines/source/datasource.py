"""The ``kafkastore`` batch data source: Spark's Kafka source, over a log on object storage.

::

    spark.read.format("kafkastore").option("root", "s3://bucket/log").option("topic", "orders").load()
    CREATE TEMPORARY VIEW orders USING kafkastore OPTIONS (root 's3://bucket/log', topic 'orders')
    read_topic(spark, "s3://bucket/log", "orders", startingOffsets={"orders": {"0": 23}})

Schema: Spark's Kafka source schema, so existing queries work unchanged::

    key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int
    [, headers array<struct<key: string, value: binary>>]   (only with includeHeaders=true)

Like Spark, the ``headers`` column exists only when ``includeHeaders`` is true
(Spark's ``KafkaRecordToRowConverter.kafkaSchema(includeHeaders)``); a record
without headers has a null ``headers`` value.

Options (names are case-insensitive, values strings as Spark passes them):

==================================  ================  ==========================================
option                              default           meaning
==================================  ================  ==========================================
root (or the load() path)           required          storage root URL: file://, s3://bucket/prefix
storageOptions                      {}                JSON object of fsspec/s3fs keyword arguments
storage.<key>                       -                 one storage option (``true``/``false``, integers
                                                      and JSON objects/arrays are decoded)
topic | subscribe |                 exactly one       one topic | comma list | regex matched against
subscribePattern | assign                             whole topic names | JSON ``{"t":[0,1]}``
startingOffsets                     earliest          ``earliest`` or JSON ``{"t":{"0":23,"1":-2}}``
                                                      (-2 = earliest); "latest"/-1 refused (batch)
endingOffsets                       latest            ``latest`` or JSON ``{"t":{"0":50,"1":-1}}``
                                                      (-1 = latest); "earliest"/-2 refused (batch)
startingTimestamp / endingTimestamp -                 epoch ms for every partition (wins over the
                                                      ByTimestamp JSON, which wins over *Offsets)
startingOffsetsFromGroup            -                 a consumer group: start each partition at the
                                                      group's committed offset (others: as the
                                                      starting options say); never writes to it
startingOffsetsByTimestamp /        -                 JSON ``{"t":{"0":1700000000000}}``
endingOffsetsByTimestamp
startingOffsetsByTimestampStrategy  error             no record at/after the starting timestamp:
                                                      ``error`` fails, ``latest`` reads nothing
minPartitions                       -                 split large partitions (at batch boundaries
                                                      from ``.index``) into at least this many
                                                      input partitions when the data allows
maxBytesPerPartition                128m              bytes of log one input partition reads
                                                      (suffix k/m/g allowed)
includeHeaders                      false             add the ``headers`` column
failOnDataLoss                      true              a requested offset below the log start (or
                                                      an explicit end past the readable end)
                                                      fails; false: clamp and go on
isolationLevel                      read_committed    or read_uncommitted (``kafka.isolation.level``
                                                      is accepted as an alias)
pushFilters                         true              prune with pushed filters; set false when
                                                      spark.sql.python.filterPushdown.enabled is
                                                      false (Spark refuses a reader with pushFilters
                                                      then); read_topic does it for you
==================================  ================  ==========================================

Partitions missing from an offsets JSON default to earliest (starting) and
latest (ending); Spark's batch source requires every partition instead, so
every query Spark accepts means the same here. ``kafka.*`` options and
Spark's streaming-only or consumer options are accepted and ignored; any
other unknown option is a :class:`~kafkastore.errors.ConfigError`.

Planning happens on the driver side (Spark's planner worker) from ONE manifest
snapshot per partition: earliest, latest and timestamps are resolved there,
once. "latest" is the last stable offset under read_committed (an open
transaction's records are not readable yet) and the high watermark under
read_uncommitted. One input partition reads one (topic, partition) range;
large ones are cut at index entries (batch boundaries) into pieces of at most
about ``maxBytesPerPartition``. Executors get plain data (:class:`ReadRange`,
the root URL and storage options), range-read the ``.log`` objects and decode
straight into Arrow record batches.

Storage: the planner and the executors are Spark's Python workers, separate
processes started by the JVM. They see the JVM's environment (set before the
session started) plus the storage options, not variables the driver sets
later: pass ``storage.endpoint_url`` etc. when in doubt. ``memory://`` roots
live in one process and are refused.

Offsets: reads cover half-open ranges ``[from, until)`` of offsets, so gaps
(compacted topics, transaction markers, aborted records) are simply absent.
:func:`plan_offsets` returns the ranges a read would cover and
:func:`ranges_to_options` turns them into ``assign`` + explicit offsets JSON
options, so a loader can fix its ranges first and then read exactly them.

Filter pushdown (``pushFilters``, needs ``spark.sql.python.filterPushdown.enabled``):

* ``partition`` =, <=>, IN, <, <=, >, >=: input partitions are pruned; exact, so
  Spark does not evaluate them again;
* ``offset`` =, <=>, <, <=, >, >=: the offset range (hence segments and byte
  ranges) is narrowed and the decoder keeps exactly those offsets; exact.
  ``offset IN (...)`` narrows to [min, max] and is left to Spark;
* ``timestamp`` >, >=, = and IN: the start offset moves to the first offset at
  or after the bound (segment max timestamps, then ``.timeindex``): exact for
  skipping, but the filter is always left to Spark (timestamps are not ordered
  within a partition). Upper bounds (``<``, ``<=``) do not prune: a segment's
  recorded minimum timestamp ignores records without a timestamp (-1), so it is
  no safe lower bound for them;
* everything else is left to Spark.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualNullSafe, EqualTo,
                                    GreaterThan, GreaterThanOrEqual, In, InputPartition,
                                    LessThan, LessThanOrEqual)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from kafkastore.errors import ConfigError
from kafkastore.read.reader import ReadRange, read_range
from kafkastore.storage import Storage

from ..sink.writer import batch_writer, stream_writer
from ..spec.offset_ranges import OffsetRange, is_json_int
from .planning import Pruning, open_storage, plan_source_splits, resolve_source
from .options import (DEFAULT_MAX_BYTES_PER_PARTITION, SOURCE_NAME, SourceOptions,
                      option_strings, parse_options, ranges_to_options)
from .stream import KafkaStoreStreamReader, parse_stream_options

__all__ = ["SOURCE_NAME", "KafkaStoreDataSource", "KafkaStoreReader", "KafkaStoreFilteringReader",
           "KafkaStorePartition", "SourceOptions", "OffsetRange", "parse_options", "spark_schema",
           "plan_offsets", "plan_partitions", "PushedFilters", "ranges_to_options", "read_topic",
           "register", "DEFAULT_MAX_BYTES_PER_PARTITION"]

# Rows per Arrow batch handed to Spark: smaller batches keep the JVM's buffers small.
_ROWS_PER_BATCH = 16384


# --------------------------------------------------------------------------- schema

def spark_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema; ``headers`` only with ``include_headers`` (as Spark)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)



# --------------------------------------------------------------------------- pushed filters and input partitions

_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


class PushedFilters(Pruning):
    """The :class:`pipelines.source.planning.Pruning` of the filters Spark pushes down."""

    def absorb(self, f: Any) -> bool:
        """Use filter ``f`` for pruning if it is understood; True when pruning applies it exactly
        (Spark need not evaluate it again), False when Spark must still evaluate it."""
        column = getattr(f, "attribute", None)
        if column == ("partition",):
            return self._absorb_int(f, "partition")
        if column == ("offset",):
            return self._absorb_int(f, "offset")
        if column == ("timestamp",):
            self._absorb_timestamp(f)
        return False

    def _absorb_int(self, f: Any, column: str) -> bool:
        lo_name, hi_name = f"{column}_lo", f"{column}_hi"
        if not isinstance(f, (In, *_COMPARISONS)):
            return False  # IsNull, IsNotNull, Not, string filters: Spark's job
        value = f.value
        if isinstance(f, In):
            values = [v for v in value if v is not None]  # x IN (.., NULL) is never true for NULL
            if not all(is_json_int(v) for v in values):
                return False
            if column == "partition":
                self.partitions = _intersect(self.partitions, values)
                return True
            if not values:
                self._narrow(lo_name, hi_name, 0, 0)
                return True
            self._narrow(lo_name, hi_name, min(values), max(values) + 1)
            return False  # only the span is used: Spark keeps the exact membership test
        if not is_json_int(value):
            return False
        if isinstance(f, (EqualTo, EqualNullSafe)):
            self._narrow(lo_name, hi_name, value, value + 1)
        elif isinstance(f, GreaterThan):
            self._narrow(lo_name, hi_name, value + 1, None)
        elif isinstance(f, GreaterThanOrEqual):
            self._narrow(lo_name, hi_name, value, None)
        elif isinstance(f, LessThan):
            self._narrow(lo_name, hi_name, None, value)
        elif isinstance(f, LessThanOrEqual):
            self._narrow(lo_name, hi_name, None, value + 1)
        else:
            return False
        return True

    def _narrow(self, lo_name: str, hi_name: str, lo: int | None, hi: int | None) -> None:
        if lo is not None:
            cur = getattr(self, lo_name)
            setattr(self, lo_name, lo if cur is None else max(cur, lo))
        if hi is not None:
            cur = getattr(self, hi_name)
            setattr(self, hi_name, hi if cur is None else min(cur, hi))

    def _absorb_timestamp(self, f: Any) -> None:
        # Spark timestamps are microseconds, the log's are milliseconds: a record with m ms
        # passes "ts >= X" iff m >= ceil(X / 1000) and "ts > X" iff m >= floor(X / 1000) + 1.
        if isinstance(f, In):
            values = [_micros(v) for v in f.value if v is not None]
            if not values or any(v is None for v in values):
                return
            lo = -(-min(values) // 1000)
        elif isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo, EqualNullSafe)):
            micros = _micros(f.value)
            if micros is None:
                return
            lo = micros // 1000 + 1 if isinstance(f, GreaterThan) else -(-micros // 1000)
        else:
            return
        if self.timestamp_lo_ms is None or lo > self.timestamp_lo_ms:
            self.timestamp_lo_ms = lo


def _intersect(current: frozenset[int] | None, values: Sequence[int]) -> frozenset[int]:
    new = frozenset(values)
    return new if current is None else current & new


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _micros(value: Any) -> int | None:
    """Epoch microseconds of a pushed timestamp literal; None for anything but an aware datetime."""
    if not isinstance(value, _dt.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _dt.timedelta(microseconds=1)


class KafkaStorePartition(InputPartition):
    """One Spark input partition: consecutive byte ranges of one topic-partition (plain data)."""

    def __init__(self, ranges: Sequence[ReadRange]):
        super().__init__(None)
        self.ranges = tuple(ranges)

    @property
    def size(self) -> int:
        """Bytes of log this partition reads."""
        return sum(r.size for r in self.ranges)


def plan_partitions(opts: SourceOptions, pushed: PushedFilters | None = None,
                    storage: Storage | None = None) -> list[KafkaStorePartition]:
    """The input partitions of a read (:func:`pipelines.source.planning.plan_source_splits`)."""
    return [KafkaStorePartition(split) for split in plan_source_splits(opts, pushed, storage)]


def plan_offsets(root: str, topic: str | None = None, *,
                 storage_options: Mapping[str, Any] | None = None, **options: Any) -> list[OffsetRange]:
    """The ``[from, until)`` ranges a read with these options covers now, one per partition.

    Options as for the data source (``startingOffsets=...``; dicts are turned into JSON).
    Resolves earliest/latest/timestamps against one manifest snapshot per partition and
    applies ``failOnDataLoss``. To read exactly these ranges later (a loader storing them
    with its output), pass :func:`ranges_to_options` of them to :func:`read_topic`: offsets
    are then explicit and the read is deterministic.
    """
    opts = parse_options(option_strings(root, topic, storage_options, options))
    ranges, _ = resolve_source(opts, open_storage(opts))
    return ranges


# --------------------------------------------------------------------------- Spark classes

class KafkaStoreDataSource(DataSource):
    """``spark.read.format("kafkastore")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka schema (``headers`` only with includeHeaders); validates the options."""
        opts = parse_stream_options(self.options, refuse_ending=False).source   # batch or stream
        if opts.root.lower().startswith("memory://"):
            # Spark's Python workers are separate processes: a memory:// store is not shared.
            raise ConfigError(f"root {opts.root!r}: memory:// stores live inside one process and "
                              f"Spark's Python workers cannot see them; use file:// or s3://")
        return spark_schema(opts.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader; with pushFilters (the default) one that prunes with pushed filters."""
        opts = parse_options(self.options)
        expected = spark_schema(opts.include_headers)
        if schema != expected:
            raise ConfigError(f"the {SOURCE_NAME} source has a fixed schema, "
                              f"{expected.simpleString()}; got {schema.simpleString()}")
        cls = KafkaStoreFilteringReader if opts.push_filters else KafkaStoreReader
        return cls(opts)

    def streamReader(self, schema: StructType) -> KafkaStoreStreamReader:
        """``spark.readStream.format("kafkastore")``: see :mod:`pipelines.source.stream`."""
        opts = parse_stream_options(self.options)
        expected = spark_schema(opts.source.include_headers)
        if schema != expected:
            raise ConfigError(f"the {SOURCE_NAME} source has a fixed schema, "
                              f"{expected.simpleString()}; got {schema.simpleString()}")
        return KafkaStoreStreamReader(opts, KafkaStorePartition, _read_batches)

    def writer(self, schema: StructType, overwrite: bool):
        """``df.write.format("kafkastore")``: exactly-once writes into topics
        (:mod:`pipelines.sink.writer`)."""
        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """``df.writeStream.format("kafkastore")``: each micro-batch exactly once
        (:mod:`pipelines.sink.writer`)."""
        return stream_writer(self.options, schema, overwrite)


class KafkaStoreReader(DataSourceReader):
    """Plans input partitions on the driver side and reads them on executors (no pushdown)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self.pushed = PushedFilters()

    def partitions(self) -> list[InputPartition]:
        """One manifest snapshot per partition, resolved once, pruned, cut by bytes."""
        return list(plan_partitions(self.opts, self.pushed))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one input partition (none for Spark's placeholder partition)."""
        ranges = getattr(partition, "ranges", ())
        return _read_batches(self.opts.root, dict(self.opts.storage_options), ranges,
                             self.opts.include_headers, self.opts.isolation)


class KafkaStoreFilteringReader(KafkaStoreReader):
    """:class:`KafkaStoreReader` that also prunes with filters Spark pushes down."""

    def pushFilters(self, filters: list) -> list:
        """Absorb partition/offset/timestamp filters; return those Spark must still evaluate."""
        pushed = PushedFilters()
        rest = [f for f in filters if not pushed.absorb(f)]
        self.pushed = pushed
        return rest


_STORAGES: dict[str, Storage] = {}


def _cached_storage(root: str, storage_options: Mapping[str, Any]) -> Storage:
    # Python workers are reused across tasks: keep one Storage (and its connections) per
    # root. No lock: two threads racing here build two equal Storage objects, one is kept
    # (and a module-level lock would make the classes unpicklable by value).
    key = json.dumps([root, storage_options], sort_keys=True, default=str)
    storage = _STORAGES.get(key)
    if storage is None:
        storage = _STORAGES.setdefault(key, Storage(root, dict(storage_options)))
    return storage


def _read_batches(root: str, storage_options: Mapping[str, Any], ranges: Sequence[ReadRange],
                  include_headers: bool, isolation: str) -> Iterator[Any]:
    if not ranges:
        return
    storage = _cached_storage(root, storage_options)
    for rr in ranges:
        # reuse_input: the range is read for this decode only, so the value column may be
        # written into it (local files; other stores hand back read-only bytes).
        batch = read_range(storage, rr, include_headers=include_headers, isolation=isolation,
                           reuse_input=True)
        if not include_headers:
            batch = batch.drop_columns(["headers"])
        for start in range(0, batch.num_rows, _ROWS_PER_BATCH):
            yield batch.slice(start, _ROWS_PER_BATCH)


# --------------------------------------------------------------------------- driver helpers

def register(spark) -> None:
    """Register the ``kafkastore`` source with ``spark`` (get_spark does this)."""
    spark.dataSource.register(KafkaStoreDataSource)
    try:
        spark._kafkastore_registered = True
    except AttributeError:  # a session object that refuses attributes: re-register next time
        pass


def read_topic(spark, root: str, topic: str | None = None, *,
               storage_options: Mapping[str, Any] | None = None, **options: Any):
    """A DataFrame over ``topic`` (or the ``subscribe``/``subscribePattern``/``assign`` option)
    under ``root``; options as for the source, Python values allowed (dicts become JSON).

    Options are validated here, on the driver, so mistakes raise :class:`ConfigError`
    directly. When the session has Python filter pushdown disabled, ``pushFilters`` is set
    to false (Spark refuses a pushdown-capable reader then).
    """
    strings = option_strings(root, topic, storage_options, options)
    opts = parse_options(strings)
    if opts.root.lower().startswith("memory://"):
        raise ConfigError(f"root {opts.root!r}: memory:// stores live inside one process and "
                          f"Spark's Python workers cannot see them; use file:// or s3://")
    if not any(k.lower() == "pushfilters" for k in strings):
        enabled = spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")
        if str(enabled).strip().lower() != "true":
            strings["pushFilters"] = "false"
    if not getattr(spark, "_kafkastore_registered", False):
        register(spark)
    reader = spark.read.format(SOURCE_NAME)
    for key, value in strings.items():
        reader = reader.option(key, value)
    return reader.load()
