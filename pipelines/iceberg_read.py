"""What readers of a warehouse table need beyond :mod:`pipelines.iceberg`.

The read side shared by ``kafkastore sql`` (:mod:`pipelines.sql`) and the
quality gate (:mod:`pipelines.quality`); no Spark, no writes. Opening
catalogs, offsets and planning are :mod:`pipelines.iceberg`'s; this module adds

* :class:`AsOf` and its parsers: what a reader asks for (the current snapshot,
  a snapshot id, a time, a ref), with one-line :class:`ConfigError` for bad
  input;
* :func:`select_snapshot`: the snapshot that names, or None when the table had
  none then (a time before its first snapshot reads as an empty table; a time
  whose snapshot vacuum expired is an ExpiredSnapshotError);
* :func:`read_snapshot`: one snapshot through pyiceberg (deletes applied,
  equality deletes refused) with a missing data file as a one-line
  :class:`~kafkastore.errors.MissingDataFileError`;
* :func:`range_filter`: the rows inside half-open offset ranges.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from kafkastore.errors import ConfigError

from . import iceberg
from .warehouse.properties import VALIDATED_TAG


@dataclass(frozen=True)
class AsOf:
    """What a reader asks for: the current snapshot (all None), a snapshot id,
    a time (epoch ms: the newest main snapshot at or before it) or a ref."""

    snapshot_id: int | None = None
    timestamp_ms: int | None = None
    ref: str | None = None

    def describe(self) -> str:
        if self.snapshot_id is not None:
            return f"snapshot {self.snapshot_id}"
        if self.timestamp_ms is not None:
            return f"as of {iso(self.timestamp_ms)}"
        if self.ref is not None:
            return f"ref {self.ref}"
        return "main"


def parse_timestamp(text: str | int) -> int:
    """Epoch ms from ``1700000000000`` or ISO 8601 (``2026-11-22T15:00:00Z``;
    no zone means UTC). Anything else is a ConfigError."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        when = _dt.datetime.fromisoformat(s[:-1] + "+00:00" if s[-1:] in "Zz" and s else s)
    except ValueError:
        raise ConfigError(f"bad timestamp {text!r}: give epoch milliseconds or ISO 8601 "
                          f"(e.g. 2026-11-22T15:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1000)


def parse_snapshot_id(text: str | int) -> int:
    """A snapshot id (a 64-bit integer); anything else is a ConfigError."""
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConfigError(f"bad snapshot id {text!r}: give the integer id "
                          f"(see the warehouse_snapshots view)") from None


def iso(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat().replace(
        "+00:00", "Z")


def select_snapshot(table, as_of: AsOf | None = None):
    """The snapshot ``as_of`` names, or None when the table had none then (no
    snapshot yet, a time before the first one, a ref that does not exist).
    An unknown snapshot id is a ConfigError."""
    as_of = as_of or AsOf()
    if as_of.snapshot_id is not None:
        snap = table.snapshot_by_id(int(as_of.snapshot_id))
        if snap is None:
            raise ConfigError(f"table {iceberg.table_name(table.name())} has no snapshot "
                              f"{as_of.snapshot_id}")
        return snap
    if as_of.timestamp_ms is not None:   # an expired one is an ExpiredSnapshotError
        return iceberg.snapshot_as_of(table, int(as_of.timestamp_ms))
    if as_of.ref is not None:
        return table.snapshot_by_name(as_of.ref)
    return table.current_snapshot()


def main_ancestry(table, snapshot=None) -> Iterable:
    """Snapshots from ``snapshot`` (default: main's head) back to the first."""
    from pyiceberg.table.snapshots import ancestors_of

    head = snapshot if snapshot is not None else table.current_snapshot()
    return ancestors_of(head, table.metadata) if head is not None else iter(())


def summary_of(snapshot) -> dict[str, str]:
    """A snapshot's summary as plain strings (``operation`` included)."""
    if snapshot is None or snapshot.summary is None:
        return {}
    s = snapshot.summary
    out = {k: str(v) for k, v in s.additional_properties.items()}
    out["operation"] = str(getattr(s.operation, "value", s.operation))
    return out


def read_snapshot(table, snapshot, row_filter=None, columns: Sequence[str] | None = None):
    """The rows of ``snapshot`` (filtered, projected to the ``columns`` the table
    has) as a pyarrow Table through pyiceberg. None: an empty table."""
    if snapshot is None:
        schema = table.schema().as_arrow()
        if columns:
            import pyarrow as pa

            schema = pa.schema([schema.field(c) for c in columns if c in schema.names])
        return schema.empty_table()
    if columns:
        have = set(table.schema().column_names)
        columns = [c for c in columns if c in have]
    # A missing data file is a one-line MissingDataFileError (iceberg.read_arrow).
    return iceberg.read_arrow(table, snapshot_id=snapshot.snapshot_id, row_filter=row_filter,
                              columns=columns or None)


def range_filter(ranges: Iterable[tuple[str, int, int, int]]) -> Any:
    """A pyiceberg row filter for rows inside half-open offset ranges:
    ``ranges`` holds ``(topic, partition, from, until)``."""
    from pyiceberg.expressions import (AlwaysFalse, And, EqualTo, GreaterThanOrEqual, LessThan,
                                       Or)

    expr = AlwaysFalse()
    for topic, partition, start, until in ranges:
        one = And(EqualTo("topic", topic), EqualTo("partition", int(partition)),
                  GreaterThanOrEqual("offset", int(start)), LessThan("offset", int(until)))
        expr = one if isinstance(expr, AlwaysFalse) else Or(expr, one)
    return expr
