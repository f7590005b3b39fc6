"""Rewind an Iceberg warehouse table to an offset or a time and reload it (DESIGN.md section 5).

One run is ONE Iceberg transaction per table (one overwrite snapshot) that,
per partition, deletes ``topic = t AND partition = p AND offset >= N`` and
appends the rows ``[N, committed)`` read again from the log and decoded with
the load spec (a changed schema is merged by name, as for loads):

* ``N`` is ``from_offset``, or per partition the first offset whose timestamp
  is at or after ``from_timestamp`` (:func:`pipelines.source.planning.plan_rewind`);
* the reload ends at the table's committed offset as it was when the run
  planned: a reprocess replaces what the table held and never advances it, so
  the next load continues from the same offset. If a load (or another
  reprocess) commits meanwhile, the commit is refused
  (:class:`TableChangedError`) and nothing changes: run it again;
* data files straddling ``N`` are rewritten without the deleted rows
  (copy-on-write, :func:`pipelines.warehouse.commit.commit`), so no delete files;
* the dead-letter table gets the same treatment first (its dead letters at
  and after ``N`` are derived again).

Refused (:class:`WarehouseError`), unless explicitly allowed and then recorded
in the audit: a rewind point below the log start offset (the table holds the
only copy of those rows; ``allow_below_log_start`` drops them from the table),
and a range where the table holds offsets that compaction removed from the
log since it loaded them (records superseded by newer keys exist only in the
table; ``allow_compacted``). A range compacted before it was loaded is fine.

The snapshot summary carries ``kafkastore.operation = reprocess`` and
``kafkastore.audit``: requested and effective offsets per partition, the
offset or timestamp asked for, user, reason and the flags.

**Upsert tables** hold one row per key, so deleting ``offset >= N`` would
lose the older rows those offsets replaced. Their reprocess rebuilds the state instead
(:func:`_reprocess_upsert`): from the newest snapshot of main whose committed offsets
are all at or before the rewind points (its rows, read through pyiceberg: the state
as of then; the empty table before the first snapshot), replaying every partition of
the topic from that snapshot's offsets up to the committed ones with the spec's
decoder, merged by the upsert rule; the result replaces every data file in one
snapshot, offsets unchanged. Refused with a one-line reason when that snapshot was
expired by ``kafkastore vacuum`` (``allow_expired``: replay from the log start
instead), or when a replayed range lies below the log start or lost records to
compaction since it was loaded (the same flags as above).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafkastore.clock import SYSTEM, Clock
from kafkastore.errors import ConfigError, ExpiredSnapshotError
from kafkastore.storage import Storage

from ..warehouse.catalog import Warehouse
from ..warehouse.commit import KafkaCommit, check_rewind_files, commit
from ..warehouse.offsets import committed_offsets
from ..warehouse.reads import read_arrow
from ..warehouse.snapshots import ancestry, snapshot_offsets
from . import load as _load
from .executor_io import WriteTarget
from .write_engine import Written, write_job, write_ranges
from ..spec.load_spec import LoadSpec
from ..spec.offset_ranges import OffsetRange
from ..source.planning import plan_rewind
from ..spec.table_layout import table_mode, table_name
from . import upsert as up


@dataclass
class ReprocessSummary(_load.JobSummary):
    """What a reprocess did: per partition the requested and effective rewind
    offsets and the reloaded range; rows written."""

    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)

    JOB = "reprocess"

    def _details(self) -> dict[str, Any]:
        return {"partitions": {str(p): v for p, v in self.partitions.items()},
                "rows": self.rows, "dead_letters": self.dead_letters,
                "seconds": round(self.seconds, 3)}

    def _totals(self) -> str:
        return f"{self.rows} rows reloaded, {self.dead_letters} dead letters"

    def _lines(self) -> list[str]:
        lines = []
        for p, d in sorted(self.partitions.items()):
            notes = "".join(f" ({k.replace('_', ' ')})" for k in ("compacted", "below_log_start")
                            if d.get(k))
            lines.append(f"  partition {p}: rewound to {d['requested_from']}, reloaded "
                         f"[{d['effective_from']}, {d['until']}){notes}")
        return lines


def _table_offsets(wh, spec: LoadSpec):
    """``(partition, lo, hi) -> offsets`` the table and its dead letters hold."""
    def offsets(partition: int, lo: int, hi: int) -> set:
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

        flt = And(And(EqualTo("topic", spec.topic), EqualTo("partition", partition)),
                  And(GreaterThanOrEqual("offset", lo), LessThan("offset", hi)))
        out: set = set()
        for name in (spec.table, spec.dead_letter_table):
            tbl = wh.load_table(name)
            if tbl is not None:
                out.update(read_arrow(tbl, row_filter=flt, columns=["offset"])
                       .column("offset").to_pylist())
        return out

    return offsets


@dataclass(frozen=True)
class ReprocessRequest:
    """One reprocess, parsed once: the spec (decoding and the table's layout), the
    rewind point (``from_offset`` or ``from_timestamp``), the partitions (None: every
    partition the table loaded), the audit's reason and user, and what is allowed."""

    root: str
    warehouse: Warehouse
    spec: LoadSpec
    from_offset: int | None = None
    from_timestamp: int | None = None
    partitions: tuple[int, ...] | None = None
    reason: str = ""
    run_id: str | None = None
    user: str | None = None
    allow_compacted: bool = False
    allow_below_log_start: bool = False
    allow_expired: bool = False
    register_existing: bool = False
    storage_options: Mapping[str, Any] | None = None
    max_bytes_per_partition: int | None = None
    progress: bool = True
    #: The job's clock (durations); the entry point's, the system's by default.
    clock: Clock = SYSTEM

    @classmethod
    def build(cls, *, root: str, warehouse, spec: LoadSpec | None = None,
              topic: str | None = None, table: str | None = None,
              load_options: Mapping[str, Any] | None = None,
              catalog: Mapping[str, Any] | None = None, storage_options: dict | None = None,
              max_rows_per_file: int | None = None, compression: str | None = None,
              partitions: list[int] | None = None, **fields: Any) -> "ReprocessRequest":
        """The request of these keywords (and the other fields of the request), checked
        here. ``spec`` (or ``topic``, ``table`` and ``load_options``, a ``loads:`` entry)
        says how to decode; ``max_rows_per_file`` and ``compression`` override its
        table layout; ``warehouse`` and ``catalog`` as for
        :meth:`pipelines.jobs.load.LoadRequest.build`."""
        if spec is None:
            if not topic or not table:
                raise ConfigError("run_reprocess needs a spec, or a topic and a table")
            spec = LoadSpec.from_entry({**dict(load_options or {}), "topic": topic, "table": table})
        spec = spec.with_overrides(max_rows_per_file=max_rows_per_file, compression=compression)
        spec.decode_options()
        return cls(root=root, warehouse=Warehouse.of(warehouse, catalog, storage_options),
                   spec=spec, storage_options=dict(storage_options or {}) or None,
                   partitions=None if partitions is None else tuple(partitions), **fields)


def run_reprocess(spark, request: ReprocessRequest | None = None,
                  **options: Any) -> ReprocessSummary:
    """:func:`reprocess` of ``request``, or of the request :meth:`ReprocessRequest.build`
    makes of ``options`` (``root``, ``warehouse``, ``spec`` or ``topic`` and ``table``,
    ``from_offset`` or ``from_timestamp``, ...)."""
    return reprocess(spark, _load.request_of(ReprocessRequest, request, options))


def reprocess(spark, request: ReprocessRequest) -> ReprocessSummary:
    """Replace the table's rows of the topic at and after ``request.from_offset`` (or
    the first offset at or after ``request.from_timestamp``, per partition) with a
    fresh read of the log, for ``request.partitions`` (default: every partition the
    table loaded), in one audited transaction. See the module docstring for refusals
    (``allow_expired``: upsert tables only). ``register_existing``: a table the
    catalog lost is registered again from its newest metadata file (else refused, see
    :meth:`pipelines.warehouse.catalog.Warehouse.recover`)."""
    started = request.clock.monotonic_s()
    spec, wh, root = request.spec, request.warehouse, request.root
    storage_options, run_id = request.storage_options, request.run_id
    partitions = None if request.partitions is None else list(request.partitions)
    from_offset, from_timestamp = request.from_offset, request.from_timestamp
    allow_compacted, allow_below_log_start = request.allow_compacted, request.allow_below_log_start
    topic, table = spec.topic, spec.table
    wh.recover([table] + ([spec.dead_letter_table] if spec.decoded else []),
               request.register_existing)
    tbl = wh.table(table)
    # Rebuilt as loaded: the table's recorded decoder, CDC, keys and partitioning fill
    # what the request leaves out (a conflicting value is refused).
    spec = spec.for_table(tbl)
    if spec.decoded and not request.spec.decoded:
        wh.recover([spec.dead_letter_table], request.register_existing)
    storage = Storage(root, storage_options)
    committed = {p: n for (t, p), n in committed_offsets(tbl).items() if t == topic}
    mode, keys = table_mode(tbl)
    if mode == "upsert":
        from dataclasses import replace

        return _reprocess_upsert(spark, request, replace(spec, mode="upsert", key_columns=keys),
                                 tbl, storage, committed, started)
    plans = plan_rewind(storage, topic, committed, partitions=partitions, from_offset=from_offset,
                        from_timestamp=from_timestamp, allow_compacted=allow_compacted,
                        allow_below_log_start=allow_below_log_start,
                        table_offsets=_table_offsets(wh, spec))
    run_id = run_id or f"reprocess-{topic}-{uuid.uuid4().hex[:16]}"
    summary = ReprocessSummary(topic, table, run_id)
    if not plans:
        summary.noop = True
        summary.reason = "the table holds no rows at or after the rewind point"
        summary.seconds = request.clock.monotonic_s() - started
        return summary
    for pl in plans:
        summary.partitions[pl.range.partition] = {
            "requested_from": pl.requested, "effective_from": pl.range.from_offset,
            "until": pl.committed, "compacted": pl.compacted,
            "below_log_start": pl.below_log_start}
    who = request.user or _load.current_user()
    audit = {"reason": request.reason or "", "user": who, "from_offset": from_offset,
             "from_timestamp": from_timestamp,
             "requested": {str(pl.range.partition): pl.requested for pl in plans},
             "effective": {str(pl.range.partition): pl.range.from_offset for pl in plans},
             "previous": {str(pl.range.partition): pl.committed for pl in plans},
             "allow_compacted": allow_compacted, "allow_below_log_start": allow_below_log_start,
             "compacted": sorted(pl.range.partition for pl in plans if pl.compacted),
             "below_log_start": sorted(pl.range.partition for pl in plans if pl.below_log_start)}
    tbl, dl = _load.ensure_tables(wh, spec)
    rewind = [OffsetRange(topic, pl.range.partition, pl.requested, pl.committed) for pl in plans]
    for t in (tbl, dl):
        if t is not None:    # a data file deleted outside Iceberg: refuse before any work
            check_rewind_files(t, rewind)
    target = WriteTarget(tbl.location(), dl.location() if dl is not None else None,
                               spec.layout, storage_options, {}).of_table(tbl)
    reads = [pl.range for pl in plans if not pl.range.empty]
    written = write_job(spark, f"reprocess {topic} -> {table}", root, reads, spec, target,
                              run_id, tbl, storage_options=storage_options,
                              max_bytes=request.max_bytes_per_partition,
                              progress=request.progress, clock=request.clock)
    summary.rows, summary.dead_letters = written.rows, written.dead_letters
    audit.update(rows=summary.rows, dead_letters=summary.dead_letters)
    # The claimed ranges start at the rewind point: every offset from there to
    # the committed end is replaced (rows below the log start only deleted).
    claims = tuple(OffsetRange(topic, pl.range.partition, pl.requested, pl.committed)
                   for pl in plans)
    data, dead, footers = written.data, written.dead, written.footers
    extras = written.registry_extras(spec, tbl)   # writer schemas the table follows
    if dl is not None:
        dl_done = committed_offsets(dl)
        commit(dl, KafkaCommit(
            run_id, "reprocess", claims, dead, delete_from=claims, audit=audit, footers=footers,
            expected={c.topic_partition: dl_done.get(c.topic_partition) for c in claims}))
    result = commit(tbl, KafkaCommit(
        run_id, "reprocess", claims, data, delete_from=claims,
        schema=written.schema(spec, storage_options, extras), audit=audit, footers=footers,
        properties=extras.properties if extras else {},
        expected={(topic, pl.range.partition): pl.committed for pl in plans}))
    summary.snapshot_id = result.snapshot_id
    _load.record_load_properties(wh.table(table), spec)
    if result.noop:
        summary.noop, summary.reason = True, f"run id committed earlier at snapshot {result.snapshot_id}"
    summary.seconds = request.clock.monotonic_s() - started
    return summary


def base_snapshot(table, topic: str, points: Mapping[int, int]):
    """The newest snapshot of main's ancestry carrying kafkastore offsets whose offsets
    of ``topic`` are all at or before ``points`` (``{partition: offset}``; a partition it
    lacks is at 0). None when the table's first snapshot is already past them (the
    state then was the empty table). :class:`WarehouseError` when such a snapshot
    existed but was expired."""
    last = None
    for snap in ancestry(table):
        last = snap
        offsets = snapshot_offsets(snap)
        if offsets is None:
            continue
        mine = {p: n for (t, p), n in offsets.items() if t == topic}
        if all(mine.get(p, 0) <= n for p, n in points.items()):
            return snap
    if last is not None and (last.parent_snapshot_id is not None
                             or (last.sequence_number or 1) > 1):
        raise ExpiredSnapshotError(
            f"table {table_name(table.name())}: the state at or before offsets "
            f"{dict(sorted(points.items()))} of {topic} was in snapshots expired by kafkastore "
            f"vacuum (the oldest left, {last.snapshot_id}, is past them); pass "
            f"--allow-expired to rebuild from the log start instead")
    return None


def _reprocess_upsert(spark, request: ReprocessRequest, spec: LoadSpec, tbl, storage, committed,
                      started: float) -> ReprocessSummary:
    """Rebuild an upsert table as of the rewind points (module docstring)."""
    topic, table = spec.topic, spec.table
    wh, root, storage_options, run_id = (request.warehouse, request.root,
                                         request.storage_options, request.run_id)
    partitions = None if request.partitions is None else list(request.partitions)
    from_offset, from_timestamp = request.from_offset, request.from_timestamp
    allow_compacted, allow_below_log_start = request.allow_compacted, request.allow_below_log_start
    plans = plan_rewind(storage, topic, committed, partitions=partitions, from_offset=from_offset,
                        from_timestamp=from_timestamp, allow_compacted=allow_compacted,
                        allow_below_log_start=allow_below_log_start)
    run_id = run_id or f"reprocess-{topic}-{uuid.uuid4().hex[:16]}"
    summary = ReprocessSummary(topic, table, run_id)
    if not plans:
        summary.noop, summary.reason = True, "the table holds nothing at or after the rewind point"
        summary.seconds = request.clock.monotonic_s() - started
        return summary
    points = {pl.range.partition: pl.requested for pl in plans}
    try:
        base = base_snapshot(tbl, topic, points)
    except ExpiredSnapshotError:
        if not request.allow_expired:
            raise
        base = None
    base_offsets = {} if base is None else {
        p: n for (t, p), n in (snapshot_offsets(base) or {}).items() if t == topic}
    # Every partition replays from the base's offsets (the log start for one it lacks),
    # with the refusals of a rewind to there.
    replay = []
    for p, nxt in sorted(committed.items()):
        start = base_offsets.get(p, 0)
        if start >= nxt:
            continue
        (pl,) = plan_rewind(storage, topic, committed, partitions=[p], from_offset=start,
                            allow_compacted=allow_compacted,
                            allow_below_log_start=allow_below_log_start) or (None,)
        if pl is not None:
            replay.append(pl)
    for pl in plans:
        summary.partitions[pl.range.partition] = {
            "requested_from": pl.requested, "effective_from": pl.range.from_offset,
            "until": pl.committed, "compacted": pl.compacted,
            "below_log_start": pl.below_log_start}
    audit = {"reason": request.reason or "", "user": request.user or _load.current_user(),
             "from_offset": from_offset,
             "from_timestamp": from_timestamp, "mode": "upsert",
             "requested": {str(p): n for p, n in points.items()},
             "base_snapshot": None if base is None else base.snapshot_id,
             "replayed": {str(pl.range.partition): [pl.range.from_offset, pl.committed]
                          for pl in replay},
             "allow_compacted": allow_compacted, "allow_below_log_start": allow_below_log_start,
             "compacted": sorted(pl.range.partition for pl in replay if pl.compacted),
             "below_log_start": sorted(pl.range.partition for pl in replay if pl.below_log_start)}
    tbl, dl = _load.ensure_tables(wh, spec)
    # Dead letters: only the rewound ranges [N, committed) are derived again.
    dl_from = {p: points.get(p, n) for p, n in committed.items()}
    target = WriteTarget(tbl.location() + "/upsert-staging",
                               dl.location() if dl is not None else None, spec.layout,
                               storage_options, dl_from).of_table(tbl)
    reads = [pl.range for pl in replay if not pl.range.empty]
    # The replay decodes against no table schema: the state is rebuilt from the base.
    written = Written(write_ranges(spark, root, reads, spec, target, run_id,
                                               storage_options=storage_options,
                                               max_bytes=request.max_bytes_per_partition))
    staged_urls, dead, footers = list(written.data), written.dead, written.footers
    summary.rows, summary.dead_letters = written.rows, written.dead_letters
    audit.update(rows=summary.rows, dead_letters=summary.dead_letters)
    claims = tuple(OffsetRange(topic, pl.range.partition, pl.range.from_offset, pl.committed)
                   for pl in replay)
    if dl is not None:
        dl_claims = tuple(OffsetRange(topic, p, n, committed[p]) for p, n in points.items())
        dl_done = committed_offsets(dl)
        commit(dl, KafkaCommit(
            run_id, "reprocess", dl_claims, dead, delete_from=dl_claims, audit=audit,
            footers=footers,
            expected={c.topic_partition: dl_done.get(c.topic_partition) for c in dl_claims}))
    state = (read_arrow(tbl, snapshot_id=base.snapshot_id) if base is not None else None)
    staged = up.staged_rows(staged_urls, storage_options)
    c = up.rebuild_commit(run_id, spec.upsert_keys, spec.layout.partition_by, claims, state,
                          staged, audit=audit,
                          expected={(topic, pl.range.partition): pl.committed for pl in replay})
    result = commit(tbl, c)
    up.remove_staging(staged_urls, storage_options)
    summary.snapshot_id = result.snapshot_id
    _load.record_load_properties(wh.table(table), spec)
    if result.noop:
        summary.noop, summary.reason = True, f"run id committed earlier at snapshot {result.snapshot_id}"
    summary.seconds = request.clock.monotonic_s() - started
    return summary
