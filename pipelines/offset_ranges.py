"""The one offset-range type of the pipelines (load, reprocess, data source, warehouse).

A range is half-open, ``[from_offset, until_offset)``, of one topic-partition.
Spark-free and dependency-free: the CLI, the warehouse commit and the Spark data
source all use it, and ranges travel between them as values, never as option
strings.
"""
from __future__ import annotations

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
    out: dict[TopicPartition, int] = {}
    try:
        for t, parts in d.items():
            for p, n in parts.items():
                out[(str(t), int(p))] = int(n)
    except (AttributeError, TypeError, ValueError) as exc:
        raise WarehouseError(f"bad offsets map {d!r}: {exc}") from None
    return out


def by_partition(ranges: Iterable[OffsetRange]) -> dict[TopicPartition, OffsetRange]:
    """Index ranges by topic-partition; two ranges of one partition are an error."""
    out: dict[TopicPartition, OffsetRange] = {}
    for r in ranges:
        if r.topic_partition in out:
            raise WarehouseError(f"two ranges for {r.topic}/{r.partition}")
        out[r.topic_partition] = r
    return out
