"""Reading one snapshot of an Iceberg warehouse table (no Spark, no writes).

The read side shared by ``kafkastore sql`` (:mod:`pipelines.sql`) and the
quality gate (:mod:`pipelines.quality`):

* :func:`select_snapshot` picks the snapshot a reader sees: the table's
  current one (main), a snapshot id, the newest main snapshot at or before a
  time, or a ref (the ``validated`` tag);
* :func:`plan` lists the files pyiceberg plans for that snapshot, with their
  delete files, so a reader can hand data files to Spark and never ignore a
  delete file;
* :func:`read_arrow` reads a snapshot (optionally filtered) through
  pyiceberg, which applies positional deletes and refuses equality deletes;
  both it and a missing data file end as one-line :class:`WarehouseError`.

Catalogs come from :func:`pipelines.warehouse.open_catalog` when the Iceberg
warehouse module provides it; the fallback here opens the embedded default
(a SQL catalog on SQLite at ``<warehouse>/catalog.db``) or the ``catalog:``
properties given.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any, Mapping

from kafkastore.errors import ConfigError, WarehouseError

VALIDATED_TAG = "validated"
DEAD_LETTERS_SUFFIX = "_dead_letters"
DEFAULT_NAMESPACE = "default"
OFFSETS_KEY = "kafkastore.offsets"


# ---------------------------------------------------------------------------
# catalog and tables


def open_catalog(warehouse: str, catalog: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, Any] | None = None):
    """The pyiceberg catalog of ``warehouse`` (see the module docstring)."""
    try:   # the warehouse module owns the catalog rules once it exists
        from . import warehouse as wh

        opener = getattr(wh, "open_catalog", None)
    except ImportError:   # pragma: no cover - the module is always there
        opener = None
    if opener is not None:
        return opener(warehouse, catalog, storage_options)
    from pyiceberg.catalog import load_catalog

    props = dict(catalog or {})
    if not props:
        if not warehouse.startswith("file://"):
            raise ConfigError(f"warehouse {warehouse} is not local: configure its catalog "
                              f"(the config file's catalog: section)")
        path = warehouse[len("file://"):].rstrip("/")
        props = {"type": "sql", "uri": f"sqlite:///{path}/catalog.db", "warehouse": warehouse}
    props.setdefault("warehouse", warehouse)
    return load_catalog(str(props.pop("name", "kafkastore")), **props)


def identifier(name: str) -> str:
    """``NAME`` means ``default.NAME``; ``ns.NAME`` stays."""
    return name if "." in name else f"{DEFAULT_NAMESPACE}.{name}"


def list_table_names(catalog) -> list[str]:
    """Every table of the catalog as ``ns.name`` (sorted); no namespace, no tables."""
    out = []
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            out.append(".".join(ident))
    return sorted(out)


def load_table(catalog, name: str):
    """The pyiceberg table ``name``; a missing one is a ConfigError."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier(name))
    except NoSuchTableError:
        raise ConfigError(f"no warehouse table {identifier(name)}") from None


# ---------------------------------------------------------------------------
# picking a snapshot


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
            return f"as of {_iso(self.timestamp_ms)}"
        if self.ref is not None:
            return f"ref {self.ref}"
        return "current snapshot"


def parse_timestamp(text: str | int) -> int:
    """Epoch ms from ``1700000000000`` or ISO 8601 (``2026-11-22T15:00:00Z``;
    no zone means UTC). Anything else is a ConfigError."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        when = _dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
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


def _iso(ms: int) -> str:
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
            raise ConfigError(f"table {_name(table)} has no snapshot {as_of.snapshot_id}")
        return snap
    if as_of.timestamp_ms is not None:
        return table.snapshot_as_of_timestamp(int(as_of.timestamp_ms))
    if as_of.ref is not None:
        return table.snapshot_by_name(as_of.ref)
    return table.current_snapshot()


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)


def main_ancestry(table, snapshot=None):
    """Snapshots from ``snapshot`` (default: main's head) back to the first."""
    snap = snapshot if snapshot is not None else table.current_snapshot()
    while snap is not None:
        yield snap
        parent = snap.parent_snapshot_id
        snap = table.snapshot_by_id(parent) if parent is not None else None


def summary_of(snapshot) -> dict[str, str]:
    """A snapshot's summary as plain strings (``operation`` included)."""
    if snapshot is None or snapshot.summary is None:
        return {}
    s = snapshot.summary
    out = {k: str(v) for k, v in s.additional_properties.items()}
    out["operation"] = str(s.operation.value if hasattr(s.operation, "value") else s.operation)
    return out


def committed_offsets(table, snapshot=None) -> tuple[Any, dict[str, dict[int, int]]]:
    """(the snapshot carrying them, ``{topic: {partition: next offset}}``): the
    ``kafkastore.offsets`` of the newest snapshot in ``snapshot``'s ancestry
    that has them; snapshots of other engines are skipped."""
    for snap in main_ancestry(table, snapshot):
        raw = summary_of(snap).get(OFFSETS_KEY)
        if raw is None:
            continue
        data = json.loads(raw)
        return snap, {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    return None, {}


# ---------------------------------------------------------------------------
# planning and reading


@dataclass(frozen=True)
class PlannedFile:
    path: str              # the data file's URL as the table metadata lists it
    records: int
    bytes: int
    delete_files: tuple[str, ...]


def plan(table, snapshot, row_filter=None) -> list[PlannedFile]:
    """The data files pyiceberg plans for ``snapshot`` (none for None)."""
    if snapshot is None:
        return []
    scan = table.scan(snapshot_id=snapshot.snapshot_id,
                      **({"row_filter": row_filter} if row_filter is not None else {}))
    return [PlannedFile(t.file.file_path, int(t.file.record_count),
                        int(t.file.file_size_in_bytes),
                        tuple(sorted(d.file_path for d in t.delete_files)))
            for t in scan.plan_files()]


def read_arrow(table, snapshot, row_filter=None, columns: tuple[str, ...] | None = None):
    """The rows of ``snapshot`` (filtered, projected) as a pyarrow Table, read
    through pyiceberg (deletes applied; equality deletes refused). No snapshot
    gives an empty table with the current schema."""
    if snapshot is None:
        schema = table.schema().as_arrow()
        if columns:
            schema = _pa().schema([schema.field(c) for c in columns if c in schema.names])
        return schema.empty_table()
    kw: dict[str, Any] = {"snapshot_id": snapshot.snapshot_id}
    if row_filter is not None:
        kw["row_filter"] = row_filter
    if columns:
        names = set(table.schemas()[snapshot.schema_id].column_names
                    if snapshot.schema_id is not None and snapshot.schema_id in table.schemas()
                    else table.schema().column_names)
        kw["selected_fields"] = tuple(c for c in columns if c in names)
    try:
        return table.scan(**kw).to_arrow()
    except FileNotFoundError as exc:
        raise WarehouseError(f"table {_name(table)}: a data file of snapshot "
                             f"{snapshot.snapshot_id} is missing ({exc}); the table was "
                             f"damaged outside Iceberg") from None
    except NotImplementedError as exc:   # pyiceberg: equality deletes
        raise WarehouseError(f"table {_name(table)}: cannot read snapshot "
                             f"{snapshot.snapshot_id}: {exc}") from None


def _pa():
    import pyarrow as pa

    return pa


def range_filter(ranges) -> Any:
    """A pyiceberg row filter for rows inside half-open offset ranges:
    ``ranges`` is an iterable of ``(topic, partition, from, until)``."""
    from pyiceberg.expressions import (AlwaysFalse, And, EqualTo, GreaterThanOrEqual, LessThan,
                                       Or)

    expr = AlwaysFalse()
    for topic, partition, start, until in ranges:
        one = And(EqualTo("topic", topic), And(EqualTo("partition", int(partition)),
                                               And(GreaterThanOrEqual("offset", int(start)),
                                                   LessThan("offset", int(until)))))
        expr = one if isinstance(expr, AlwaysFalse) else Or(expr, one)
    return expr
