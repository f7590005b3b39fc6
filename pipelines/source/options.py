"""The options of the ``kafkastore`` data source, parsed once into typed values.

:func:`parse_options` turns Spark's option strings (case-insensitive names, see
:mod:`pipelines.source.datasource` for the table) into :class:`SourceOptions`: plain data
that travels to Spark's workers. Where a read starts and ends is a sealed offset
limit (:mod:`pipelines.spec.offset_ranges`: ``Earliest``, ``Latest``,
``SpecificOffsets``, ``SpecificTimestamps``, ``GlobalTimestamp``), as Spark's
``KafkaOffsetRangeLimit``; :mod:`pipelines.source.planning` resolves them against the log.

Spark-free: the options are checked on the driver before Spark plans anything.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kafkastore import layout
from kafkastore.errors import ConfigError
from kafkastore.read.reader import READ_COMMITTED, READ_UNCOMMITTED

from ..spec.offset_ranges import (EARLIEST_OFFSET, LATEST_OFFSET, Earliest, GlobalTimestamp, Latest,
                                 OffsetLimit, OffsetRange, SpecificOffsets, SpecificTimestamps,
                                 is_json_int, partition_map)
from ..spec.spark_options import byte_count, gather_options, integer, positive_integer
from ..spec.spark_options import storage_value  # noqa: F401 (its old home: the sink's, users')

SOURCE_NAME = "kafkastore"
#: Bytes of log one split (a Spark input partition, a load task's unit) reads.
DEFAULT_MAX_BYTES = 128 << 20
#: maxBytesPerPartition's default: the planner's split size
DEFAULT_MAX_BYTES_PER_PARTITION = DEFAULT_MAX_BYTES

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
# Read as isolationLevel is (Spark's Kafka source takes it so); other kafka.* are ignored.
_KAFKA_ISOLATION = "kafka.isolation.level"

_STARTING_EXAMPLE = '"earliest", or JSON like {"topicA":{"0":23,"1":-2},"topicB":{"0":-2}} (-2 = earliest)'
_ENDING_EXAMPLE = '"latest", or JSON like {"topicA":{"0":50,"1":-1},"topicB":{"0":-1}} (-1 = latest)'
_TIMESTAMPS_EXAMPLE = 'JSON like {"topicA":{"0":1700000000000,"1":1700000000000}} (epoch ms)'
_ASSIGN_EXAMPLE = 'JSON like {"topicA":[0,1],"topicB":[2,4]}'


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one read (plain data: it travels to Spark's workers)."""

    root: str
    storage_options: Mapping[str, Any]
    subscription: tuple[str, Any]  # ("topics", (t, ...)) | ("pattern", str) | ("assign", {t: (p, ...)})
    starting: OffsetLimit = Earliest()
    ending: OffsetLimit = Latest()
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
    opts, storage_keys = gather_options(options, (*_KNOWN_OPTIONS, _KAFKA_ISOLATION),
                                        owner=f"the {SOURCE_NAME} source",
                                        ignored=("kafka.", *_IGNORED_OPTIONS))
    root = (opts.get("root") or opts.get("path") or "").strip()
    if not root:
        raise ConfigError("option root is required: the log's storage root URL, e.g. "
                          ".option(\"root\", \"s3://bucket/kafkastore\") or file:///data/log")
    storage_options = storage_options_of(opts, storage_keys)

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
        min_partitions = positive_integer(opts["minPartitions"], "minPartitions")
    max_bytes = DEFAULT_MAX_BYTES_PER_PARTITION
    if "maxBytesPerPartition" in opts:
        max_bytes = byte_count(opts["maxBytesPerPartition"], "maxBytesPerPartition")

    isolation = opts.get("isolationLevel")
    alias = opts.get(_KAFKA_ISOLATION)
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


def storage_options_of(opts: Mapping[str, str], storage_keys: Mapping[str, Any]) -> dict[str, Any]:
    """The fsspec storage options of a read or a write: the ``storageOptions`` JSON object,
    then each ``storage.<key>`` option (typed by :func:`storage_value`) over it."""
    storage_options: Any = {}
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
    return storage_options


def _parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    value = opts[name].strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name}: expected true or false, got {opts[name]!r}")
    return value == "true"


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
        if not isinstance(parts, list) or not parts or not all(is_json_int(p) and p >= 0 for p in parts):
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
    try:
        parsed = partition_map(_json_object(text, name, example), strict=True)
    except ValueError:
        parsed = None
    if parsed is None or any(n < minimum for parts in parsed.values() for n in parts.values()):
        raise ConfigError(f"option {name}: expected {example}, got {text!r}")
    return {_topic_name(topic, name): parts for topic, parts in parsed.items()}


def _parse_bound(opts: Mapping[str, str], side: str) -> OffsetLimit:
    """One side's limit, with Spark's precedence: *Timestamp, then *OffsetsByTimestamp, then
    *Offsets; none given: Earliest (starting) or Latest (ending)."""
    ts_key, by_key, off_key = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if ts_key in opts:
        ts = integer(opts[ts_key], ts_key, "a single long value (epoch ms)")
        if ts < 0:
            raise ConfigError(f"option {ts_key}: expected a timestamp >= 0 (epoch ms), got {ts}")
        return GlobalTimestamp(ts)
    if by_key in opts:
        return SpecificTimestamps(_partition_map(opts[by_key], by_key, _TIMESTAMPS_EXAMPLE, 0))
    starting = side == "starting"
    default = Earliest() if starting else Latest()
    if off_key not in opts:
        return default
    text = opts[off_key].strip()
    if text.lower() == ("earliest" if starting else "latest"):
        return default
    if text.lower() == ("latest" if starting else "earliest"):
        raise ConfigError(f"{'starting' if starting else 'ending'} offset can't be {text.lower()} "
                          f"for batch queries on {SOURCE_NAME}: option {off_key} expects "
                          f"{_STARTING_EXAMPLE if starting else _ENDING_EXAMPLE}")
    example = _STARTING_EXAMPLE if starting else _ENDING_EXAMPLE
    offsets = _partition_map(text, off_key, example, -2)
    refused = LATEST_OFFSET if starting else EARLIEST_OFFSET
    for topic, parts in offsets.items():
        for p, n in parts.items():
            if n == refused:
                raise ConfigError(
                    f"option {off_key} for {topic}-{p} can't be {n} "
                    f"({'latest' if starting else 'earliest'}) for batch queries; expected {example}")
    return SpecificOffsets(offsets)


def per_partition(limit: OffsetLimit) -> Mapping[str, Mapping[int, int]] | None:
    """The ``{topic: {partition: n}}`` a limit names (offsets or timestamps JSON), else None."""
    if isinstance(limit, SpecificOffsets):
        return limit.offsets
    if isinstance(limit, SpecificTimestamps):
        return limit.timestamps
    return None


def _check_json_topics(subscription: tuple[str, Any], limit: OffsetLimit, side: str) -> None:
    """Topics named in an offsets/timestamps JSON must be read (checked again for patterns)."""
    named = per_partition(limit)
    if named is None or subscription[0] == "pattern":
        return
    read = set(subscription[1])
    extra = sorted(set(named) - read)
    if extra:
        raise ConfigError(f"{side} offsets name topic(s) {', '.join(extra)} that this read does "
                          f"not subscribe to (it reads {', '.join(sorted(read))})")



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



def option_strings(root: str | None, topic: str | None, storage_options: Mapping[str, Any] | None,
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

