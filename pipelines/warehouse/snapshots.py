"""A table's snapshots: ancestry, history, time travel and the snapshot a reader asks for.

One walk of a ref's ancestry (:func:`ancestry`, :func:`main_ancestry`) serves the offsets
protocol, commits, the quality gate, ``kafkastore sql`` and vacuum. A snapshot's
kafkastore summary fields are decoded here (:func:`snapshot_offsets`, :func:`history`,
:func:`summary_of`).

Choosing a snapshot, two ways over one lookup:

* :func:`resolve_snapshot` (planning and reading, :mod:`.reads`): by id, the newest at or
  before a time, a branch or tag name, else main's head; what does not exist is a
  :class:`~kafkastore.errors.TableNotFoundError`;
* :func:`select_snapshot` (readers' :class:`AsOf`: ``kafkastore sql``, the quality gate):
  the same choice, but a table that had no snapshot then reads as empty (None) and an
  unknown snapshot id is a :class:`~kafkastore.errors.ConfigError`.

Both refuse a time whose snapshot was expired (:func:`snapshot_as_of`,
:class:`~kafkastore.errors.ExpiredSnapshotError`).
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any, Iterable

from kafkastore.errors import ConfigError, ExpiredSnapshotError, TableNotFoundError, WarehouseError

from ..spec.offset_ranges import TopicPartition, offsets_from_json, offsets_to_json
from .catalog import name_of
from .properties import AUDIT_KEY, OFFSETS_KEY, OPERATION_KEY, RANGES_KEY, RUN_ID_KEY
from .properties import VALIDATED_TAG  # noqa: F401  (readers take the tag's name from here)

MAIN = "main"


# ---------------------------------------------------------------------------
# ancestry


def ref_head(table, ref: str):
    """The snapshot ``ref`` (main, a branch or a tag) points at, or None."""
    if ref == MAIN:
        return table.current_snapshot()
    return table.snapshot_by_name(ref)


def ancestors(table, head) -> Iterable:
    """Snapshots from ``head`` back to the first, newest first (empty for None)."""
    from pyiceberg.table.snapshots import ancestors_of

    return ancestors_of(head, table.metadata) if head is not None else iter(())


def ancestry(table, ref: str = MAIN) -> Iterable:
    """Snapshots of ``ref``'s ancestry, newest first (empty for a table without one)."""
    return ancestors(table, ref_head(table, ref))


def main_ancestry(table, snapshot=None) -> Iterable:
    """Snapshots from ``snapshot`` (default: main's head) back to the first."""
    return ancestors(table, snapshot if snapshot is not None else table.current_snapshot())


# ---------------------------------------------------------------------------
# a snapshot's summary


def summary_of(snapshot) -> dict[str, str]:
    """A snapshot's summary as plain strings (``operation`` included)."""
    if snapshot is None or snapshot.summary is None:
        return {}
    s = snapshot.summary
    out = {k: str(v) for k, v in s.additional_properties.items()}
    out["operation"] = str(getattr(s.operation, "value", s.operation))
    return out


def snapshot_offsets(snapshot) -> dict[TopicPartition, int] | None:
    """The ``kafkastore.offsets`` map of a snapshot, or None if it carries none."""
    if snapshot is None or snapshot.summary is None:
        return None
    text = snapshot.summary.additional_properties.get(OFFSETS_KEY)
    if text is None:
        return None
    try:
        return offsets_from_json(json.loads(text))
    except ValueError as exc:
        raise WarehouseError(f"snapshot {snapshot.snapshot_id}: bad {OFFSETS_KEY}: {exc}") from None


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot as :func:`history` reports it."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str
    kafkastore_operation: str | None
    run_id: str | None
    offsets: dict[str, dict[str, int]] | None
    ranges: list[dict[str, Any]]
    audit: dict[str, Any] | None
    summary: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "parent_id": self.parent_id,
                "timestamp_ms": self.timestamp_ms, "operation": self.operation,
                "kafkastore_operation": self.kafkastore_operation, "run_id": self.run_id,
                "offsets": self.offsets, "ranges": self.ranges, "audit": self.audit}


def history(table, ref: str = MAIN) -> list[SnapshotInfo]:
    """``ref``'s ancestry, oldest first, with the kafkastore fields decoded."""
    out = []
    for snap in ancestry(table, ref):
        props = dict(snap.summary.additional_properties) if snap.summary is not None else {}
        offsets = snapshot_offsets(snap)
        out.append(SnapshotInfo(
            snapshot_id=snap.snapshot_id, parent_id=snap.parent_snapshot_id,
            timestamp_ms=snap.timestamp_ms,
            operation=str(snap.summary.operation.value) if snap.summary is not None else "",
            kafkastore_operation=props.get(OPERATION_KEY), run_id=props.get(RUN_ID_KEY),
            offsets=None if offsets is None else offsets_to_json(offsets),
            ranges=json.loads(props.get(RANGES_KEY, "[]")),
            audit=json.loads(props[AUDIT_KEY]) if AUDIT_KEY in props else None,
            summary=props))
    return out[::-1]


# ---------------------------------------------------------------------------
# what a reader asks for


def iso(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC (``2026-11-22T15:00:00Z``)."""
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat().replace(
        "+00:00", "Z")


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


def _lookup(table, snapshot_id: int | None, as_of_ms: int | None, ref: str | None):
    """(snapshot or None, what was asked for when it is None): the one choice behind
    :func:`resolve_snapshot` and :func:`select_snapshot`. Main's head when nothing is
    asked (None with what None: a table without snapshots)."""
    if snapshot_id is not None:
        return table.snapshot_by_id(int(snapshot_id)), f"snapshot {snapshot_id}"
    if as_of_ms is not None:   # an expired one is an ExpiredSnapshotError
        return snapshot_as_of(table, int(as_of_ms)), f"snapshot at or before {int(as_of_ms)} ms"
    if ref is not None:
        return table.snapshot_by_name(ref), f"branch or tag {ref!r}"
    return table.current_snapshot(), None


def resolve_snapshot(table, *, snapshot_id: int | None = None, as_of_ms: int | None = None,
                     ref: str | None = None):
    """The snapshot to read: by id, the newest at or before ``as_of_ms``, a branch or
    tag name, else main's head. None for a table without snapshots."""
    given = [x is not None for x in (snapshot_id, as_of_ms, ref)]
    if sum(given) > 1:
        raise ConfigError("give at most one of snapshot id, timestamp and ref")
    snap, asked = _lookup(table, snapshot_id, as_of_ms, ref)
    if snap is None and asked is not None:
        raise TableNotFoundError(f"table {name_of(table)} has no {asked}")
    return snap


def select_snapshot(table, as_of: AsOf | None = None):
    """The snapshot ``as_of`` names, or None when the table had none then (no
    snapshot yet, a time before the first one, a ref that does not exist).
    An unknown snapshot id is a ConfigError."""
    as_of = as_of or AsOf()
    snap, asked = _lookup(table, as_of.snapshot_id, as_of.timestamp_ms, as_of.ref)
    if snap is None and as_of.snapshot_id is not None:
        raise ConfigError(f"table {name_of(table)} has no {asked}")
    return snap


def snapshot_as_of(table, timestamp_ms: int):
    """Main's snapshot at ``timestamp_ms`` (the newest in the snapshot log at or before
    it), None when the table had none then; :class:`ExpiredSnapshotError` when the one
    it had then was expired (pyiceberg alone answers with an older snapshot or None).

    Expiry removes snapshots from the snapshot log, so the log alone cannot tell "no
    snapshot yet" from "expired". The metadata log can: the newest previous metadata
    file written at or before the time names the snapshot current then, and lists it
    with its commit time. When the metadata log does not reach back that far, the parent
    links decide conservatively: a surviving snapshot whose parent is gone means
    snapshots were expired before it, and a time before it is refused."""
    snap = table.snapshot_as_of_timestamp(timestamp_ms)
    lost = _expired_then(table, timestamp_ms, snap)
    if lost is None:
        return snap
    log = table.metadata.snapshot_log
    oldest = table.snapshot_by_id(log[0].snapshot_id) if log else table.current_snapshot()
    since = (f"the oldest snapshot still available is {oldest.snapshot_id} at "
             f"{iso(oldest.timestamp_ms)}" if oldest is not None else "no snapshot is left")
    raise ExpiredSnapshotError(
        f"table {name_of(table)}: the snapshot current at {iso(timestamp_ms)} "
        f"({timestamp_ms} ms){lost} was expired (kafkastore vacuum); {since}")


def _expired_then(table, timestamp_ms: int, found) -> str | None:
    """None when ``found`` (pyiceberg's answer) is right, else a note on the expired
    snapshot that was current at ``timestamp_ms`` ("" when its id is unknown)."""
    meta = table.metadata
    older = [e for e in meta.metadata_log if e.timestamp_ms <= timestamp_ms]
    if older:
        from pyiceberg.serializers import FromInputFile

        newest = max(older, key=lambda e: e.timestamp_ms)
        try:
            then = FromInputFile.table_metadata(table.io.new_input(newest.metadata_file))
        except FileNotFoundError:
            then = None
        if then is not None:
            sid = then.current_snapshot_id
            old = then.snapshot_by_id(sid) if sid is not None else None
            if old is None or table.snapshot_by_id(sid) is not None:
                return None
            if found is not None and found.timestamp_ms >= old.timestamp_ms:
                return None      # committed after that metadata file, still at or before the time
            return f" (snapshot {sid}, committed {old.timestamp_ms} ms)"
    # The metadata log does not reach back: judge from the parent links of the snapshot log.
    log = meta.snapshot_log
    ids = [e.snapshot_id for e in log]
    if found is None:
        first = table.snapshot_by_id(ids[0]) if ids else None
        return "" if first is not None and first.parent_snapshot_id is not None else None
    i = ids.index(found.snapshot_id) if found.snapshot_id in ids else len(ids) - 1
    if i + 1 < len(ids):
        nxt = table.snapshot_by_id(ids[i + 1])
        if nxt is not None and nxt.parent_snapshot_id not in (None, found.snapshot_id) \
                and table.snapshot_by_id(nxt.parent_snapshot_id) is None:
            return ""            # a snapshot committed between the two was expired
    return None
