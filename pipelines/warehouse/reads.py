"""Reading one snapshot of a warehouse table (no Spark, no writes).

* :func:`plan_scan`: the data and delete files of exactly one snapshot, chosen by id,
  timestamp or ref name (:func:`~.snapshots.resolve_snapshot`), as fsspec URLs for
  engines that read Parquet by path (Spark here; :meth:`ScanPlan.urls` refuses a snapshot
  with delete files, :class:`~kafkastore.errors.UnsupportedDeletesError`);
* :func:`read_arrow`: one snapshot as Arrow through pyiceberg, which applies positional
  deletes (and refuses what it cannot apply), a missing data file as a one-line
  :class:`~kafkastore.errors.MissingDataFileError` (:func:`missing_file`);
* :func:`read_snapshot`: the readers' form (``kafkastore sql``, the quality gate): a
  snapshot chosen by :func:`~.snapshots.select_snapshot` (None: an empty table), columns
  the table lacks left out;
* :func:`range_filter`: the rows inside half-open offset ranges.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from kafkastore.errors import MissingDataFileError, UnsupportedDeletesError

from .catalog import name_of
from .snapshots import resolve_snapshot


@dataclass(frozen=True)
class ScanPlan:
    """The data files of one snapshot (``snapshot_id`` None: the table is empty)."""

    table: str
    snapshot_id: int | None
    files: tuple[str, ...]
    delete_files: tuple[str, ...]
    records: int

    def urls(self) -> list[str]:
        """The data files as fsspec URLs, for engines that read Parquet by path.
        A snapshot with delete files is refused: reading its data files alone
        would show deleted rows."""
        if self.delete_files:
            raise UnsupportedDeletesError(
                f"table {self.table} snapshot {self.snapshot_id} has {len(self.delete_files)} "
                f"delete file(s); read it through pyiceberg (read_arrow) or compact it first")
        return list(self.files)


def plan_scan(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
              ref: str | None = None, row_filter=None) -> ScanPlan:
    """The data and delete files pyiceberg plans for one snapshot."""
    snap = resolve_snapshot(table, snapshot_id=snapshot_id, as_of_ms=as_of_ms, ref=ref)
    name = name_of(table)
    if snap is None:
        return ScanPlan(name, None, (), (), 0)
    kwargs = {"snapshot_id": snap.snapshot_id}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    tasks = list(table.scan(**kwargs).plan_files())
    deletes = sorted({d.file_path for t in tasks for d in t.delete_files})
    return ScanPlan(name, snap.snapshot_id, tuple(t.file.file_path for t in tasks),
                    tuple(deletes), sum(t.file.record_count for t in tasks))


def read_arrow(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
               ref: str | None = None, row_filter=None, columns: Sequence[str] | None = None):
    """One snapshot as a pyarrow Table through pyiceberg (positional deletes
    applied; what pyiceberg cannot apply is refused, never ignored)."""
    import pyarrow as pa

    snap = resolve_snapshot(table, snapshot_id=snapshot_id, as_of_ms=as_of_ms, ref=ref)
    if snap is None:
        schema = table.schema().as_arrow()
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        return schema.empty_table()
    kwargs: dict[str, Any] = {"snapshot_id": snap.snapshot_id}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    if columns is not None:
        kwargs["selected_fields"] = tuple(columns)
    try:
        return table.scan(**kwargs).to_arrow()
    except FileNotFoundError as exc:
        raise missing_file(table, snap.snapshot_id, exc) from None
    except NotImplementedError as exc:
        raise UnsupportedDeletesError(f"table {name_of(table)} snapshot "
                                      f"{snap.snapshot_id}: {exc}") from None


def missing_file(table, snapshot_id, exc: BaseException) -> MissingDataFileError:
    """The one-line error for a data file of ``snapshot_id`` that is gone."""
    return MissingDataFileError(f"table {name_of(table)}: a data file of snapshot {snapshot_id} "
                                f"is missing ({exc}); it was removed outside Iceberg")


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
    # A missing data file is a one-line MissingDataFileError (read_arrow).
    return read_arrow(table, snapshot_id=snapshot.snapshot_id, row_filter=row_filter,
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
