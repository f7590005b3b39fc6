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
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualNullSafe, EqualTo,
                                    GreaterThan, GreaterThanOrEqual, In, InputPartition,
                                    LessThan, LessThanOrEqual)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from kafkastore import layout
from kafkastore.errors import ConfigError, DataLossError, OffsetOutOfRangeError
from kafkastore.manifest import Manifest, ManifestStore
from kafkastore.reader import (READ_COMMITTED, READ_UNCOMMITTED, PartitionReader, ReadRange,
                               read_range)
from kafkastore.storage import Storage
from kafkastore.topics import list_topics, load_topic

from .offset_ranges import OffsetRange

__all__ = ["SOURCE_NAME", "KafkaStoreDataSource", "KafkaStoreReader", "KafkaStoreFilteringReader",
           "KafkaStorePartition", "SourceOptions", "OffsetRange", "parse_options", "spark_schema",
           "plan_offsets", "plan_partitions", "PushedFilters", "ranges_to_options", "read_topic",
           "register"]

SOURCE_NAME = "kafkastore"
DEFAULT_MAX_BYTES_PER_PARTITION = 128 << 20
# One fetch + decode on an executor holds at most about this much log in memory,
# whatever maxBytesPerPartition says (an input partition reads several such ranges).
_MAX_FETCH_BYTES = 16 << 20
# Rows per Arrow batch handed to Spark: smaller batches keep the JVM's buffers small.
_ROWS_PER_BATCH = 16384
_PLANNING_THREADS = 16

_SUBSCRIPTION_OPTIONS = ("topic", "subscribe", "subscribePattern", "assign")
_KNOWN_OPTIONS = (
    "root", "path", "storageOptions", *_SUBSCRIPTION_OPTIONS,
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "minPartitions", "maxBytesPerPartition",
    "includeHeaders", "failOnDataLoss", "isolationLevel", "pushFilters",
    "startingOffsetsFromGroup",
)
# Spark Kafka options that mean nothing for a batch read of files: accepted so that
# existing queries run, and ignored.
_IGNORED_OPTIONS = ("kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
                    "fetchOffset.retryIntervalMs", "groupIdPrefix", "maxOffsetsPerTrigger",
                    "minOffsetsPerTrigger", "maxTriggerDelay", "maxRecordsPerPartition")
_CANONICAL = {k.lower(): k for k in _KNOWN_OPTIONS}
_IGNORED_LOWER = frozenset(k.lower() for k in _IGNORED_OPTIONS)

_STARTING_EXAMPLE = '"earliest", or JSON like {"topicA":{"0":23,"1":-2},"topicB":{"0":-2}} (-2 = earliest)'
_ENDING_EXAMPLE = '"latest", or JSON like {"topicA":{"0":50,"1":-1},"topicB":{"0":-1}} (-1 = latest)'
_TIMESTAMPS_EXAMPLE = 'JSON like {"topicA":{"0":1700000000000,"1":1700000000000}} (epoch ms)'
_ASSIGN_EXAMPLE = 'JSON like {"topicA":[0,1],"topicB":[2,4]}'

EARLIEST = -2
LATEST = -1


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


# --------------------------------------------------------------------------- options

@dataclass(frozen=True)
class OffsetSpec:
    """Where reads start or end: ``kind`` is "default" (earliest/latest), "offsets" (a JSON of
    offsets), "timestamp" (one for all partitions) or "timestamps" (a JSON of timestamps)."""

    kind: str
    value: Any = None  # offsets/timestamps: {topic: {partition: n}}; timestamp: int

    def for_partition(self, topic: str, partition: int) -> tuple[str, int | None]:
        """``("default", None)``, ``("offset", n)`` or ``("timestamp", ms)`` for one partition."""
        if self.kind == "timestamp":
            return "timestamp", self.value
        if self.kind in ("offsets", "timestamps"):
            n = self.value.get(topic, {}).get(partition)
            if n is None or n in (EARLIEST, LATEST):
                return "default", None
            return ("offset" if self.kind == "offsets" else "timestamp"), n
        return "default", None


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one read (plain data: it travels to Spark's workers)."""

    root: str
    storage_options: Mapping[str, Any]
    subscription: tuple[str, Any]  # ("topics", (t, ...)) | ("pattern", str) | ("assign", {t: (p, ...)})
    starting: OffsetSpec = OffsetSpec("default")
    ending: OffsetSpec = OffsetSpec("default")
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    include_headers: bool = False
    fail_on_data_loss: bool = True
    isolation: str = READ_COMMITTED
    push_filters: bool = True
    starting_group: str | None = None   # startingOffsetsFromGroup


def parse_options(options: Mapping[str, Any]) -> SourceOptions:
    """Validate data source options (case-insensitive names) into :class:`SourceOptions`.

    Raises :class:`ConfigError` naming the option and showing the expected shape.
    """
    opts: dict[str, str] = {}
    storage_keys: dict[str, Any] = {}
    for key, value in options.items():
        low = str(key).lower()
        if value is None:
            continue
        value = str(value)
        if low.startswith("storage."):
            storage_keys[low[len("storage."):]] = _storage_value(value)
        elif low in _CANONICAL:
            opts[_CANONICAL[low]] = value
        elif low.startswith("kafka.") or low in _IGNORED_LOWER:
            if low == "kafka.isolation.level":
                opts.setdefault("kafka.isolation.level", value)
        else:
            raise ConfigError(
                f"unknown option {key!r} for the {SOURCE_NAME} source; known options: "
                f"{', '.join(_KNOWN_OPTIONS)}, storage.<key>")

    root = (opts.get("root") or opts.get("path") or "").strip()
    if not root:
        raise ConfigError("option root is required: the log's storage root URL, e.g. "
                          ".option(\"root\", \"s3://bucket/kafkastore\") or file:///data/log")
    storage_options: dict[str, Any] = {}
    if "storageOptions" in opts:
        try:
            storage_options = json.loads(opts["storageOptions"])
        except ValueError:
            storage_options = None
        if not isinstance(storage_options, dict):
            raise ConfigError(f"option storageOptions: expected a JSON object like "
                              f"{{\"endpoint_url\": \"http://127.0.0.1:9000\"}}, got "
                              f"{opts['storageOptions']!r}")
    storage_options.update(storage_keys)

    subscription = _parse_subscription(opts)
    starting = _parse_bound(opts, "starting")
    ending = _parse_bound(opts, "ending")
    _check_json_topics(subscription, starting, "starting")
    _check_json_topics(subscription, ending, "ending")

    strategy = opts.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"option startingOffsetsByTimestampStrategy: expected error or latest, "
                          f"got {opts['startingOffsetsByTimestampStrategy']!r}")
    min_partitions = None
    if "minPartitions" in opts:
        min_partitions = _parse_int(opts["minPartitions"], "minPartitions", "a positive integer")
        if min_partitions < 1:
            raise ConfigError(f"option minPartitions must be a positive integer, got "
                              f"{opts['minPartitions']!r}")
    max_bytes = DEFAULT_MAX_BYTES_PER_PARTITION
    if "maxBytesPerPartition" in opts:
        max_bytes = _parse_bytes(opts["maxBytesPerPartition"], "maxBytesPerPartition")

    isolation = opts.get("isolationLevel")
    alias = opts.get("kafka.isolation.level")
    if isolation is not None and alias is not None and isolation.strip().lower() != alias.strip().lower():
        raise ConfigError(f"options isolationLevel ({isolation!r}) and kafka.isolation.level "
                          f"({alias!r}) disagree: give one of them")
    isolation = (isolation or alias or READ_COMMITTED).strip().lower()
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise ConfigError(f"option isolationLevel: expected {READ_COMMITTED} or {READ_UNCOMMITTED}, "
                          f"got {isolation!r}")

    return SourceOptions(
        root=root, storage_options=storage_options, subscription=subscription,
        starting=starting, ending=ending, timestamp_strategy=strategy,
        min_partitions=min_partitions, max_bytes_per_partition=max_bytes,
        include_headers=_parse_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_parse_bool(opts, "failOnDataLoss", True),
        isolation=isolation, push_filters=_parse_bool(opts, "pushFilters", True),
        starting_group=_parse_group(opts))


def _parse_group(opts: Mapping[str, str]) -> str | None:
    if "startingOffsetsFromGroup" not in opts:
        return None
    group = opts["startingOffsetsFromGroup"].strip()
    if not group:
        raise ConfigError("option startingOffsetsFromGroup: expected a consumer group id, got ''")
    return group


def _storage_value(text: str) -> Any:
    # Spark options are strings; fsspec wants typed keyword arguments.
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except ValueError:
            raise ConfigError(f"storage option value {text!r} looks like JSON but does not parse") from None
    return text


def _parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    value = opts[name].strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name}: expected true or false, got {opts[name]!r}")
    return value == "true"


def _parse_int(text: str, name: str, what: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConfigError(f"option {name}: expected {what}, got {text!r}") from None


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def _parse_bytes(text: str, name: str) -> int:
    m = _SIZE_RE.match(str(text))
    value = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()] if m else 0
    if value < 1:
        raise ConfigError(f"option {name}: expected a positive byte count like 134217728 or "
                          f"128m, got {text!r}")
    return value


def _parse_subscription(opts: Mapping[str, str]) -> tuple[str, Any]:
    given = [k for k in _SUBSCRIPTION_OPTIONS if k in opts]
    if len(given) != 1:
        got = ", ".join(given) if given else "none"
        raise ConfigError(f"exactly one of the options {', '.join(_SUBSCRIPTION_OPTIONS)} must be "
                          f"given (e.g. .option(\"topic\", \"orders\"), .option(\"subscribe\", "
                          f"\"orders,payments\")), got {got}")
    kind = given[0]
    value = opts[kind]
    if kind == "topic":
        return "topics", (_topic_name(value.strip(), kind),)
    if kind == "subscribe":
        topics = [t.strip() for t in value.split(",") if t.strip()]
        if not topics:
            raise ConfigError(f"option subscribe: expected a comma-separated list of topics like "
                              f"'orders,payments', got {value!r}")
        return "topics", tuple(dict.fromkeys(_topic_name(t, kind) for t in topics))
    if kind == "subscribePattern":
        pattern = value.strip()
        try:
            if not pattern:
                raise re.error("empty pattern")
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"option subscribePattern: expected a regular expression matched "
                              f"against whole topic names, like 'orders.*', got {value!r} ({exc})") from None
        return "pattern", pattern
    data = _json_object(value, "assign", _ASSIGN_EXAMPLE)
    assign: dict[str, tuple[int, ...]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, list) or not parts or not all(_is_int(p) and p >= 0 for p in parts):
            raise ConfigError(f"option assign: expected {_ASSIGN_EXAMPLE}, got {value!r}")
        assign[_topic_name(topic, kind)] = tuple(sorted(set(parts)))
    if not assign:
        raise ConfigError(f"option assign: expected {_ASSIGN_EXAMPLE}, got {value!r}")
    return "assign", assign


def _topic_name(name: str, option: str) -> str:
    try:
        return layout.validate_topic_name(name)
    except ConfigError as exc:
        raise ConfigError(f"option {option}: {exc}") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_object(text: str, name: str, example: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ConfigError(f"option {name}: expected {example}, got {text!r}")
    return data


def _partition_map(text: str, name: str, example: str, minimum: int) -> dict[str, dict[int, int]]:
    """``{"t": {"0": n}}`` -> ``{"t": {0: n}}``, every n an integer >= ``minimum``."""
    data = _json_object(text, name, example)
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name}: expected {example}, got {text!r}")
        per: dict[int, int] = {}
        for p, n in parts.items():
            if not re.fullmatch(r"\d+", str(p)) or not _is_int(n) or n < minimum:
                raise ConfigError(f"option {name}: expected {example}, got {text!r}")
            per[int(p)] = n
        out[_topic_name(topic, name)] = per
    return out


def _parse_bound(opts: Mapping[str, str], side: str) -> OffsetSpec:
    """One side's spec, with Spark's precedence: *Timestamp, then *OffsetsByTimestamp, then *Offsets."""
    ts_key, by_key, off_key = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if ts_key in opts:
        ts = _parse_int(opts[ts_key], ts_key, "a single long value (epoch ms)")
        if ts < 0:
            raise ConfigError(f"option {ts_key}: expected a timestamp >= 0 (epoch ms), got {ts}")
        return OffsetSpec("timestamp", ts)
    if by_key in opts:
        return OffsetSpec("timestamps", _partition_map(opts[by_key], by_key, _TIMESTAMPS_EXAMPLE, 0))
    if off_key not in opts:
        return OffsetSpec("default")
    text = opts[off_key].strip()
    starting = side == "starting"
    if text.lower() == ("earliest" if starting else "latest"):
        return OffsetSpec("default")
    if text.lower() == ("latest" if starting else "earliest"):
        raise ConfigError(f"{'starting' if starting else 'ending'} offset can't be {text.lower()} "
                          f"for batch queries on {SOURCE_NAME}: option {off_key} expects "
                          f"{_STARTING_EXAMPLE if starting else _ENDING_EXAMPLE}")
    example = _STARTING_EXAMPLE if starting else _ENDING_EXAMPLE
    offsets = _partition_map(text, off_key, example, -2)
    refused = LATEST if starting else EARLIEST
    for topic, parts in offsets.items():
        for p, n in parts.items():
            if n == refused:
                raise ConfigError(
                    f"option {off_key} for {topic}-{p} can't be {n} "
                    f"({'latest' if starting else 'earliest'}) for batch queries; expected {example}")
    return OffsetSpec("offsets", offsets)


def _check_json_topics(subscription: tuple[str, Any], spec: OffsetSpec, side: str) -> None:
    """Topics named in an offsets/timestamps JSON must be read (checked again for patterns)."""
    if spec.kind not in ("offsets", "timestamps") or subscription[0] == "pattern":
        return
    read = set(subscription[1])
    extra = sorted(set(spec.value) - read)
    if extra:
        raise ConfigError(f"{side} offsets name topic(s) {', '.join(extra)} that this read does "
                          f"not subscribe to (it reads {', '.join(sorted(read))})")


# --------------------------------------------------------------------------- planning

def _open_storage(opts: SourceOptions) -> Storage:
    return Storage(opts.root, dict(opts.storage_options))


def _topic_partitions(opts: SourceOptions, storage: Storage) -> list[tuple[str, int]]:
    """The (topic, partition) pairs this read covers, checked against the topics' metadata."""
    kind, value = opts.subscription
    if kind == "pattern":
        pattern = re.compile(value)
        topics = [t for t in list_topics(storage) if pattern.fullmatch(t)]
        for spec, side in ((opts.starting, "starting"), (opts.ending, "ending")):
            if spec.kind in ("offsets", "timestamps"):
                extra = sorted(set(spec.value) - set(topics))
                if extra:
                    raise ConfigError(
                        f"{side} offsets name topic(s) {', '.join(extra)} that subscribePattern "
                        f"{value!r} does not match (it matches {', '.join(topics) or 'no topic'})")
    else:
        topics = sorted(value)
    out = []
    for topic in topics:
        count = load_topic(storage, topic).partitions
        wanted = value[topic] if kind == "assign" else range(count)
        named = set(wanted)
        for spec in (opts.starting, opts.ending):
            if spec.kind in ("offsets", "timestamps"):
                named |= set(spec.value.get(topic, {}))
        bad = sorted(p for p in named if p >= count)
        if bad:
            raise ConfigError(f"topic {topic!r} has partitions 0..{count - 1}; the options name "
                              f"partition(s) {', '.join(map(str, bad))}")
        if kind == "assign":
            for spec, side in ((opts.starting, "starting"), (opts.ending, "ending")):
                if spec.kind in ("offsets", "timestamps"):
                    extra = sorted(set(spec.value.get(topic, {})) - set(wanted))
                    if extra:
                        raise ConfigError(f"{side} offsets name partition(s) {extra} of {topic!r} "
                                          f"that option assign does not list")
        out.extend((topic, p) for p in wanted)
    return out


def _snapshot_readers(storage: Storage, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], PartitionReader]:
    """One manifest snapshot per partition, loaded in parallel (object stores are slow per call)."""
    def load(tp: tuple[str, int]) -> PartitionReader:
        m = ManifestStore(storage, *tp).latest() or Manifest.empty(*tp)
        return PartitionReader(storage, tp[0], tp[1], manifest=m)

    if not tps:
        return {}
    with ThreadPoolExecutor(max_workers=min(_PLANNING_THREADS, len(tps))) as pool:
        return dict(zip(tps, pool.map(load, tps)))


def _resolve_range(opts: SourceOptions, reader: PartitionReader,
                   committed: int | None = None) -> OffsetRange:
    """The [from, until) one partition's options select, against its snapshot (``committed``:
    the startingOffsetsFromGroup group's offset, which wins over the starting options)."""
    topic, partition = reader.topic, reader.partition
    log_start, hw = reader.log_start_offset, reader.high_watermark
    upper = reader.upper_bound(opts.isolation)
    upper_name = "last stable offset" if opts.isolation == READ_COMMITTED else "high watermark"

    s_kind, s_val = (("offset", committed) if committed is not None
                     else opts.starting.for_partition(topic, partition))
    if s_kind == "offset":
        start = s_val
    elif s_kind == "timestamp":
        start = reader.offset_for_timestamp(s_val)
        if start >= hw:  # no record at or after the timestamp (Kafka answers null)
            if opts.timestamp_strategy == "error":
                raise OffsetOutOfRangeError(
                    f"No offset matched from request of topic-partition {topic}-{partition} and "
                    f"timestamp {s_val}: no record has a timestamp at or after it (set option "
                    f"startingOffsetsByTimestampStrategy to latest to read nothing instead)",
                    log_start_offset=log_start, high_watermark=hw)
            start = upper
    else:
        start = log_start

    e_kind, e_val = opts.ending.for_partition(topic, partition)
    if e_kind == "offset":
        end = e_val
    elif e_kind == "timestamp":
        found = reader.offset_for_timestamp(e_val)
        end = upper if found >= hw else min(found, upper)
    else:
        end = upper

    if s_kind == "offset" and start > end and not end < log_start:
        raise ConfigError(
            f"Beginning offset {start} is after the ending offset {end} for topic {topic} "
            f"partition {partition}: startingOffsets must not be past endingOffsets (or past the "
            f"{upper_name} {upper} when reading to latest)")
    lost = [f"{name} offset {n}" for name, kind, n in (("starting", s_kind, start), ("ending", e_kind, end))
            if kind == "offset" and n < log_start]
    if lost and opts.fail_on_data_loss:
        raise DataLossError(
            f"Cannot read {' and '.join(lost)} of {topic}-{partition}: the log now starts at "
            f"offset {log_start}, so offsets [{min(start, end)}, {log_start}) are no longer "
            f"available (deleted by retention or delete-records). Some data may have been lost. "
            f"Set the source option failOnDataLoss to false to read from the log start instead",
            log_start_offset=log_start, high_watermark=hw)
    if e_kind == "offset" and end > upper:
        if opts.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"Cannot read up to ending offset {end} of {topic}-{partition}: the {upper_name} "
                f"is {upper} ({opts.isolation}). Set the source option failOnDataLoss to false to "
                f"read up to it instead",
                log_start_offset=log_start, high_watermark=hw)
        end = upper
    start = max(start, log_start)
    return OffsetRange(topic, partition, start, max(start, end))


def _resolve(opts: SourceOptions, storage: Storage) -> tuple[list[OffsetRange], dict]:
    readers = _snapshot_readers(storage, _topic_partitions(opts, storage))
    committed: dict[tuple[str, int], int] = {}
    if opts.starting_group is not None:
        from kafkastore.group_admin import committed_offsets

        for topic, parts in committed_offsets(storage, opts.starting_group).items():
            committed.update({(topic, p): n for p, n in parts.items()})
    ranges = [_resolve_range(opts, readers[tp], committed.get(tp)) for tp in sorted(readers)]
    return ranges, readers


_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass
class PushedFilters:
    """What pushed filters allow the planner to skip (all bounds inclusive-exclusive as noted)."""

    partitions: frozenset[int] | None = None  # None: any
    partition_lo: int | None = None           # inclusive
    partition_hi: int | None = None           # exclusive
    offset_lo: int | None = None              # inclusive
    offset_hi: int | None = None              # exclusive
    timestamp_lo_ms: int | None = None        # records with a smaller timestamp are not wanted

    def keeps_partition(self, p: int) -> bool:
        """Whether partition ``p`` may hold wanted rows."""
        return ((self.partitions is None or p in self.partitions)
                and (self.partition_lo is None or p >= self.partition_lo)
                and (self.partition_hi is None or p < self.partition_hi))

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
            if not all(_is_int(v) for v in values):
                return False
            if column == "partition":
                self.partitions = _intersect(self.partitions, values)
                return True
            if not values:
                self._narrow(lo_name, hi_name, 0, 0)
                return True
            self._narrow(lo_name, hi_name, min(values), max(values) + 1)
            return False  # only the span is used: Spark keeps the exact membership test
        if not _is_int(value):
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


def _pruned_ranges(ranges: Sequence[OffsetRange], readers: Mapping, pushed: PushedFilters) -> list[OffsetRange]:
    """The option ranges narrowed by the pushed filters (empty ones dropped)."""
    out = []
    for r in ranges:
        if r.count == 0 or not pushed.keeps_partition(r.partition):
            continue
        lo, hi = r.from_offset, r.until_offset
        if pushed.offset_lo is not None:
            lo = max(lo, pushed.offset_lo)
        if pushed.offset_hi is not None:
            hi = min(hi, pushed.offset_hi)
        # Timestamps at or below 0 can sit on records without one (-1): never prune for those.
        if lo < hi and pushed.timestamp_lo_ms is not None and pushed.timestamp_lo_ms > 0:
            lo = max(lo, readers[(r.topic, r.partition)].offset_for_timestamp(pushed.timestamp_lo_ms))
        if lo < hi:
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def _group_ranges(work: Sequence[OffsetRange], readers: Mapping, budget: int) -> list[KafkaStorePartition]:
    """Byte ranges of every range, packed per topic-partition into partitions of <= ~budget bytes."""
    parts = []
    for r in work:
        planned = readers[(r.topic, r.partition)].plan(
            r.from_offset, r.until_offset, max_bytes=min(budget, _MAX_FETCH_BYTES),
            fail_on_data_loss=False)
        group: list[ReadRange] = []
        size = 0
        for rr in planned:
            if group and size + rr.size > budget:
                parts.append(KafkaStorePartition(group))
                group, size = [], 0
            group.append(rr)
            size += rr.size
        if group:
            parts.append(KafkaStorePartition(group))
    return parts


def plan_partitions(opts: SourceOptions, pushed: PushedFilters | None = None,
                    storage: Storage | None = None) -> list[KafkaStorePartition]:
    """The input partitions of a read: resolve ranges on one snapshot per partition, prune with
    ``pushed``, cut at index entries, and cut finer until there are ``minPartitions`` if the
    data allows (the finest cut is one ``.index`` entry, i.e. ``index.interval.bytes``)."""
    storage = storage or _open_storage(opts)
    ranges, readers = _resolve(opts, storage)
    work = _pruned_ranges(ranges, readers, pushed or PushedFilters())
    budget = opts.max_bytes_per_partition
    parts = _group_ranges(work, readers, budget)
    wanted = opts.min_partitions or 0
    if len(parts) < wanted:
        total = sum(p.size for p in parts)
        budget = min(budget, max(1, -(-total // wanted)))
        while True:
            finer = _group_ranges(work, readers, budget)
            if len(finer) > len(parts):
                parts = finer
            if len(parts) >= wanted or budget == 1:
                break
            budget = max(1, budget // 2)
    return parts


def plan_offsets(root: str, topic: str | None = None, *,
                 storage_options: Mapping[str, Any] | None = None, **options: Any) -> list[OffsetRange]:
    """The ``[from, until)`` ranges a read with these options covers now, one per partition.

    Options as for the data source (``startingOffsets=...``; dicts are turned into JSON).
    Resolves earliest/latest/timestamps against one manifest snapshot per partition and
    applies ``failOnDataLoss``. To read exactly these ranges later (a loader storing them
    with its output), pass :func:`ranges_to_options` of them to :func:`read_topic`: offsets
    are then explicit and the read is deterministic.
    """
    opts = parse_options(_option_strings(root, topic, storage_options, options))
    ranges, _ = _resolve(opts, _open_storage(opts))
    return ranges


def plan_range_splits(storage: Storage, ranges: Sequence[OffsetRange],
                      max_bytes: int = DEFAULT_MAX_BYTES_PER_PARTITION) -> list[tuple[ReadRange, ...]]:
    """The input splits (ReadRange tuples, at most ~``max_bytes`` each) of exactly
    ``ranges``: the same cut as :func:`plan_partitions`, from range values (jobs
    such as loads and reprocesses plan this way; no option strings)."""
    work = [r for r in ranges if not r.empty]
    readers = _snapshot_readers(storage, sorted({r.topic_partition for r in work}))
    return [tuple(p.ranges) for p in _group_ranges(work, readers, int(max_bytes))]


def ranges_to_options(ranges: Sequence[OffsetRange]) -> dict[str, str]:
    """``assign``, ``startingOffsets`` and ``endingOffsets`` options that read exactly ``ranges``."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.from_offset
        ending.setdefault(r.topic, {})[str(r.partition)] = r.until_offset
    if not assign:
        raise ConfigError("ranges_to_options needs at least one range")
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending)}


# --------------------------------------------------------------------------- Spark classes

class KafkaStoreDataSource(DataSource):
    """``spark.read.format("kafkastore")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka schema (``headers`` only with includeHeaders); validates the options."""
        opts = parse_options(self.options)
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


def _option_strings(root: str | None, topic: str | None, storage_options: Mapping[str, Any] | None,
                    options: Mapping[str, Any]) -> dict[str, str]:
    """Python values to Spark option strings (bools lower-case, dicts and lists as JSON)."""
    out: dict[str, str] = {}
    if root is not None:
        out["root"] = root
    if topic is not None:
        out["topic"] = topic
    if storage_options:
        out["storageOptions"] = json.dumps(dict(storage_options))
    for key, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (dict, list, tuple)):
            value = json.dumps(value)
        out[key] = str(value)
    return out


def read_topic(spark, root: str, topic: str | None = None, *,
               storage_options: Mapping[str, Any] | None = None, **options: Any):
    """A DataFrame over ``topic`` (or the ``subscribe``/``subscribePattern``/``assign`` option)
    under ``root``; options as for the source, Python values allowed (dicts become JSON).

    Options are validated here, on the driver, so mistakes raise :class:`ConfigError`
    directly. When the session has Python filter pushdown disabled, ``pushFilters`` is set
    to false (Spark refuses a pushdown-capable reader then).
    """
    strings = _option_strings(root, topic, storage_options, options)
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
