"""The offset values of the pipelines (load, reprocess, data source, warehouse): the one
range type, the offsets maps and the sealed offset limits.

A range is half-open, ``[from_offset, until_offset)``, of one topic-partition.
Spark-free and dependency-free: the CLI, the warehouse commit and the Spark data
source all use it, and ranges travel between them as values, never as option
strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kafkastore.errors import WarehouseError

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    """The offsets ``[from_offset, until_offset)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def count(self) -> int:
        """Number of offsets covered (records may be fewer: compaction, markers, aborts)."""
        return max(0, self.until_offset - self.from_offset)

    @property
    def empty(self) -> bool:
        return self.until_offset <= self.from_offset

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    def to_json(self) -> dict[str, Any]:
        """``{"topic", "partition", "from", "until"}`` (the snapshot-summary form)."""
        return {"topic": self.topic, "partition": self.partition,
                "from": self.from_offset, "until": self.until_offset}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OffsetRange":
        try:
            return cls(str(d["topic"]), int(d["partition"]), int(d["from"]), int(d["until"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise WarehouseError(f"bad offset range {dict(d)!r}: {exc}") from None


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` -> ``{"t": {"p": n}}`` (DESIGN section 5's summary form)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), n in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(n)
    return out


def offsets_from_json(d: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json`; raises WarehouseError on a bad map."""
    try:
        parsed = partition_map(d)
    except ValueError as exc:
        raise WarehouseError(f"bad offsets map {d!r}: {exc}") from None
    return {(t, p): n for t, parts in parsed.items() for p, n in parts.items()}


def by_partition(ranges: Iterable[OffsetRange]) -> dict[TopicPartition, OffsetRange]:
    """Index ranges by topic-partition; two ranges of one partition are an error."""
    out: dict[TopicPartition, OffsetRange] = {}
    for r in ranges:
        if r.topic_partition in out:
            raise WarehouseError(f"two ranges for {r.topic}/{r.partition}")
        out[r.topic_partition] = r
    return out


# ---------------------------------------------------------------------------
# where reads start and end: sealed offset limits, resolved late
#
# As Spark's KafkaOffsetRangeLimit: options and flags are parsed once into one of
# these values; they say *what* was asked (earliest, latest, these offsets, the first
# offset at a time) and the planner (pipelines.source.planning) resolves them against one
# manifest snapshot per partition, when it plans.

EARLIEST_OFFSET = -2   # in an offsets map: the partition's log start
LATEST_OFFSET = -1     # in an offsets map: the partition's readable end


@dataclass(frozen=True)
class Earliest:
    """The log start offset of every partition."""


@dataclass(frozen=True)
class Latest:
    """The readable end of every partition (the last stable offset under
    read_committed, the high watermark under read_uncommitted)."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Per topic and partition an offset (``EARLIEST_OFFSET``/``LATEST_OFFSET`` allowed)."""

    offsets: Mapping[str, Mapping[int, int]]

    def get(self, topic: str, partition: int) -> int | None:
        return self.offsets.get(topic, {}).get(partition)


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per topic and partition an epoch-ms timestamp: the first offset at or after it."""

    timestamps: Mapping[str, Mapping[int, int]]

    def get(self, topic: str, partition: int) -> int | None:
        return self.timestamps.get(topic, {}).get(partition)


@dataclass(frozen=True)
class GlobalTimestamp:
    """One epoch-ms timestamp for every partition: the first offset at or after it."""

    timestamp: int


OffsetLimit = Earliest | Latest | SpecificOffsets | SpecificTimestamps | GlobalTimestamp


def limit_for(limit: OffsetLimit, topic: str, partition: int) -> tuple[str, int | None]:
    """What ``limit`` asks of one partition: ``("earliest"|"latest", None)``,
    ``("offset", n)``, ``("timestamp", ms)`` or ``("default", None)`` (the limit does
    not name the partition: the caller's default side)."""
    if isinstance(limit, Earliest):
        return "earliest", None
    if isinstance(limit, Latest):
        return "latest", None
    if isinstance(limit, GlobalTimestamp):
        return "timestamp", limit.timestamp
    n = limit.get(topic, partition)
    if n is None:
        return "default", None
    if isinstance(limit, SpecificTimestamps):
        return "timestamp", n
    if n == EARLIEST_OFFSET:
        return "earliest", None
    if n == LATEST_OFFSET:
        return "latest", None
    return "offset", n


def partition_map(data: Mapping[Any, Any], *, strict: bool = False) -> dict[str, dict[int, int]]:
    """``{"t": {"0": n}}`` (decoded JSON) -> ``{"t": {0: n}}``: THE parser of the
    Spark Kafka-source offsets form (data source options, ``--until-offsets``) and of
    the snapshot summary's ``kafkastore.offsets``. ``strict`` (Spark's option
    grammar): partitions must be digit strings and values JSON integers; else
    anything ``int()`` takes. Raises ValueError naming the bad entry; callers turn it
    into their own error."""
    out: dict[str, dict[int, int]] = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a JSON object, got {data!r}")
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"topic {topic!r}: expected an object of partitions, got {parts!r}")
        per: dict[int, int] = {}
        for p, n in parts.items():
            if strict:
                if not re.fullmatch(r"\d+", str(p)) or not is_json_int(n):
                    raise ValueError(f"bad offset {n!r} for partition {p!r}")
                per[int(p)] = n
            else:
                try:
                    per[int(p)] = int(n)
                except (TypeError, ValueError):
                    raise ValueError(f"bad offset {n!r} for partition {p!r}: expected "
                                     f"integers") from None
        out[str(topic)] = per
    return out


def is_json_int(v: Any) -> bool:
    """An integer as JSON decodes it (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool)
