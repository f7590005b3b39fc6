"""Load a topic into an Iceberg warehouse table, exactly once (DESIGN.md section 5).

One run of :func:`run_load` (the spec is a :class:`pipelines.load_spec.LoadSpec`):

1. **Plan on the driver** (:func:`pipelines.planning.plan_load`): per
   partition ``[from, until)`` from the table's committed offsets (the newest
   snapshot of main carrying ``kafkastore.offsets``), never from anywhere else.
2. **Run id.** By default derived from topic, table and the ranges, so
   re-running the same range (after a crash whose commit may or may not have
   landed) is recognised; a committed run id makes the run a no-op.
3. **Read, decode, write on the executors.** The ranges are cut into tasks by
   the planner (:func:`pipelines.planning.plan_tasks`, from range values, no
   option strings); one Spark task per split reads it
   to Arrow with the data source's reader. Raw loads write those batches
   straight to Parquet in the same task, so records never go through Spark's
   row format; decoded loads (JSON, Avro) turn them into a DataFrame, decode in
   Spark SQL and write good rows and dead letters in one ``mapInArrow`` pass.
   Files are Parquet with TIMESTAMP_MICROS, one (topic, partition, partition
   value) each, under the table location (:mod:`pipelines.warehouse.files`).
4. **Commit on the driver** (:func:`pipelines.warehouse.commit.commit`): dead letters
   first, to ``<table>_dead_letters`` (its own offsets; rows below its
   committed offsets are not written again after a crash between the two
   commits), then one snapshot of the table with the ranges, the full offsets
   map and the run id. A decoded load whose schema gained a field widens the
   table's schema (union by name) in the same commit. A racing run that
   committed first makes the commit fail with :class:`OffsetOverlapError`; a
   lost catalog response is settled by reading the table back.

Files of failed or retried tasks are never collected and stay invisible
(``kafkastore vacuum`` removes them). Data loss: if the log start offset moved
past a committed offset, the run fails naming partition and offsets, unless
the spec's ``on_data_loss`` is ``skip``: then it starts at the log start and
the snapshot records the gap (``kafkastore.gaps``).
"""
from __future__ import annotations

import getpass
import logging
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from kafkastore.clock import SYSTEM, Clock
from kafkastore.errors import ConfigError, OffsetOverlapError, WarehouseError
from kafkastore.storage import Storage

from ..decoding.cdc import with_default_keys
from ..decoding.values import parse_avro_schema, parse_json_schema
# The write engine's and the schemas' names stay importable from here (callers of the
# one-module load of earlier releases).
from .executor_io import WriteTarget, file_writer, split_reader  # noqa: F401
from .write_engine import (Progress, Written, kafka_frame, write_job,  # noqa: F401
                                write_ranges)
from ..source.planning import default_run_id, plan_load, until_limit
from ..source.session import get_spark
from ..source.schema import (base_decoded_schema, dead_letter_schema, file_schema,  # noqa: F401
                            nullable, raw_schema)
from ..spec.load_spec import REVISABLE, LoadSpec, resolve_spec, stored_load
from ..spec.offset_ranges import Latest, OffsetLimit, OffsetRange
from ..spec.table_layout import (LOAD_PROPERTIES, TableLayout, check_mode,  # noqa: F401
                                layout_flags, mode_properties, table_identifier)
# The commit is called through its module (``iceberg_commit.commit``): a test stands in for
# it at its home to crash a run between two commits.
from ..warehouse import commit as iceberg_commit
from ..warehouse.catalog import Warehouse
from ..warehouse.offsets import committed_offsets, find_run
from .upsert import remove_staging, upsert_commit

log = logging.getLogger(__name__)


def current_user() -> str | None:
    """The OS user, for the audit of loads and reprocesses (None when unknown)."""
    try:
        return getpass.getuser()
    except Exception:   # no passwd entry (containers): the audit field stays empty
        return None


# ---------------------------------------------------------------------------
# the job


@dataclass
class JobSummary:
    """What a job (load, reprocess) did to a table: the run, the snapshot it committed;
    ``noop``: nothing committed, and why."""

    topic: str
    table: str
    run_id: str
    snapshot_id: int | None = None
    noop: bool = False
    reason: str = ""
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0

    JOB = "job"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for Airflow's XCom and ``--json``)."""
        return {"topic": self.topic, "table": self.table, "run_id": self.run_id,
                "snapshot_id": self.snapshot_id, "noop": self.noop, "reason": self.reason,
                **self._details()}

    def render(self) -> str:
        """Human-readable summary, one line per partition."""
        head = f"{self.JOB} {self.topic} -> {self.table} (run {self.run_id})"
        if self.noop:
            return f"{head}: nothing to do: {self.reason}"
        return "\n".join([f"{head}: committed snapshot {self.snapshot_id} in "
                          f"{self.seconds:.1f}s: {self._totals()}", *self._lines()])

    def _details(self) -> dict[str, Any]:
        raise NotImplementedError

    def _totals(self) -> str:
        raise NotImplementedError

    def _lines(self) -> list[str]:
        raise NotImplementedError


@dataclass
class LoadSummary(JobSummary):
    """What a load did. ``noop``: nothing committed (run id already committed,
    or nothing new to load). ``ranges``: per partition ``(from, until)``;
    ``rows`` / ``dead_letters`` / ``bytes`` per partition in ``per_partition``."""

    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)
    bytes: int = 0
    files: int = 0
    gaps: list[dict[str, int]] = field(default_factory=list)
    initial: dict[int, int] = field(default_factory=dict)
    dead_letter_snapshot_id: int | None = None
    commit_seconds: float = 0.0
    #: upsert loads: what the copy-on-write commit did (pipelines.upsert.RewriteStats)
    upsert: dict[str, int] | None = None

    JOB = "load"

    def _details(self) -> dict[str, Any]:
        return {"ranges": {str(p): list(r) for p, r in self.ranges.items()},
                "per_partition": {str(p): v for p, v in self.per_partition.items()},
                "rows": self.rows, "dead_letters": self.dead_letters, "bytes": self.bytes,
                "files": self.files, "seconds": round(self.seconds, 3), "gaps": self.gaps,
                "initial": {str(p): o for p, o in self.initial.items()},
                "dead_letter_snapshot_id": self.dead_letter_snapshot_id, "upsert": self.upsert,
                "commit_seconds": round(self.commit_seconds, 3)}

    def _totals(self) -> str:
        return (f"{self.rows} rows, {self.dead_letters} dead letters, {self.files} files, "
                f"{self.bytes} bytes ({self.rows / max(self.seconds, 1e-9):,.0f} records/s)")

    def _lines(self) -> list[str]:
        lines = []
        for p, (a, b) in sorted(self.ranges.items()):
            c = self.per_partition.get(p, {})
            note = " (first load: from the log start)" if p in self.initial else ""
            lines.append(f"  partition {p}: [{a}, {b}) {c.get('rows', 0)} rows, "
                         f"{c.get('dead_letters', 0)} dead letters{note}")
        for g in self.gaps:
            lines.append(f"  GAP partition {g['partition']}: offsets [{g['from']}, {g['until']}) "
                         f"were deleted from the log before being loaded")
        return lines


def ensure_tables(wh: Warehouse, spec: LoadSpec):
    """The spec's table (created if missing: raw Kafka columns, or the base
    columns of a decoded load) and, for decoded loads, its dead-letter table."""

    spec = spec.for_table(wh.load_table(spec.table))
    base = raw_schema() if not spec.decoded else base_decoded_schema()
    layout = spec.layout
    if layout.upsert and spec.decoded and "key" not in base.names:
        import pyarrow as pa

        base = base.append(pa.field("key", pa.binary()))
    keys = layout.upsert_keys if layout.upsert else ()
    tbl = wh.load_table(spec.table)
    check_mode(tbl, spec.table, layout.mode, keys)
    tbl = tbl or wh.create_table(spec.table, nullable(base), layout,
                                 properties={**mode_properties(layout.mode, keys),
                                             **spec.load_properties()})
    dl = None
    if spec.decoded:
        dl = (wh.load_table(spec.dead_letter_table)
              or wh.create_table(spec.dead_letter_table, nullable(dead_letter_schema()),
                                 layout.dead_letters()))
    return tbl, dl


@dataclass
class CreatedTables:
    """The tables (and namespace) a load is about to create: dropped again, files and
    all, when the load fails before its first commit, so that a load refused on its
    arguments or its data leaves the warehouse as it found it."""

    warehouse: Warehouse
    names: list[str]
    namespace_existed: bool

    @classmethod
    def before(cls, wh: Warehouse, names: list[str]) -> "CreatedTables":
        """The tables of ``names`` that do not exist yet."""
        missing = [n for n in names if wh.load_table(n) is None]
        ns = table_identifier(names[0])[0]
        existed = bool(missing) and wh.namespace_exists(ns)
        return cls(wh, missing, existed or not missing)

    def drop_unused(self) -> None:
        """Drop each of the tables that holds no snapshot (nobody committed to it)."""
        for name in self.names:
            try:
                self.warehouse.drop_if_empty(name)
            except Exception as exc:   # the load's own error is the one to report
                log.warning("could not drop the empty table %s: %s", name, exc)
        if self.names and not self.namespace_existed:
            self.warehouse.drop_namespace_if_empty(table_identifier(self.names[0])[0])


def record_load_properties(tbl, spec: LoadSpec) -> None:
    """After a run's commit: a table with load properties records the value schema the
    run decoded with when it was given anew (a reprocess fixing the decoder), so the
    next run without decoder flags decodes the same way."""

    props = tbl.metadata.properties
    if stored_load(props) is None:
        return
    names = {LOAD_PROPERTIES[f] for f in REVISABLE}
    wanted = {k: v for k, v in spec.load_properties().items() if k in names}
    changed = {k: v for k, v in wanted.items() if props.get(k) != v}
    stale = [k for k in names if k in props and k not in wanted]
    if changed or stale:
        with tbl.transaction() as txn:
            if changed:
                txn.set_properties(**changed)
            if stale:   # a schema file replaced by an inline schema, or the reverse
                txn.remove_properties(*stale)


def check_before_creating(spark, spec: LoadSpec) -> None:
    """What can be checked of a load before anything is created: the upsert key
    columns name columns of the decoded records when the value schema is given
    (not a registry's, not a CDC envelope's). A ConfigError here leaves the
    warehouse untouched."""
    if not (spec.layout.upsert and spec.decoded) or spec.registry or spec.cdc is not None:
        return

    opts = spec.decode_options()
    if not getattr(opts, "flatten", True):
        return
    text = opts.schema_text()
    if text is None:
        return
    if spec.value_format == "json":
        names = parse_json_schema(text, spark).fieldNames()
    elif spec.value_format == "avro":
        names = parse_avro_schema(text)[1].fieldNames()
    else:
        return
    columns = set(names) | set(base_decoded_schema().names) | {"key"}
    missing = [c for c in spec.upsert_keys if c not in columns]
    if missing:
        raise ConfigError(f"key column(s) {missing} are not columns of the decoded records "
                          f"(columns: {sorted(names)})")


def _dead_letter_plan(dl, topic: str, ranges: list[OffsetRange], gaps: list[OffsetRange]):
    """Per partition where dead letters start (the dead-letter table's own
    committed offsets) and the ranges/gaps of its commit."""
    done = {p: n for (t, p), n in committed_offsets(dl).items() if t == topic}
    start: dict[int, int] = {}
    dl_ranges, dl_gaps = [], []
    gap_by_p = {g.partition: g for g in gaps}
    for r in ranges:
        d = done.get(r.partition)
        if d is not None and d < r.from_offset and not (
                r.partition in gap_by_p and gap_by_p[r.partition].from_offset == d):
            raise WarehouseError(
                f"{topic}/{r.partition}: the dead-letter table's next offset {d} is behind the "
                f"table's {r.from_offset}; it was changed outside kafkastore")
        if d is not None and d < r.from_offset:
            dl_gaps.append(OffsetRange(topic, r.partition, d, r.from_offset))
        s = r.from_offset if d is None else max(d, r.from_offset)
        start[r.partition] = s
        if s < r.until_offset:
            dl_ranges.append(OffsetRange(topic, r.partition, s, r.until_offset))
    return start, dl_ranges, dl_gaps


@dataclass(frozen=True)
class LoadRequest:
    """One load, parsed once: the spec (topic, table, decoding and the table's
    :class:`~pipelines.table_layout.TableLayout`), where the log and the warehouse
    are, and where the load ends (a sealed offset limit: ``Latest``,
    ``SpecificOffsets`` or ``GlobalTimestamp``, resolved when the run plans)."""

    root: str
    warehouse: Warehouse
    spec: LoadSpec
    until: OffsetLimit = Latest()
    run_id: str | None = None
    storage_options: Mapping[str, Any] | None = None
    max_bytes_per_partition: int | None = None
    register_existing: bool = False
    progress: bool = True
    progress_interval_s: float = 10.0
    #: The job's clock (durations); the entry point's, the system's by default.
    clock: Clock = SYSTEM

    @classmethod
    def build(cls, *, root: str, warehouse, spec: LoadSpec | None = None,
              topic: str | None = None, table: str | None = None,
              run_id: str | None = None, until_offsets: str | Mapping | None = None,
              until_timestamp: int | None = None, value_format: str | None = None,
              value_schema: str | None = None, value_schema_file: str | None = None,
              decode: Mapping[str, Any] | None = None, partition_by=None,
              on_data_loss: str | None = None, catalog: Mapping[str, Any] | None = None,
              storage_options: dict | None = None, max_bytes_per_partition: int | None = None,
              max_rows_per_file: int | None = None, compression: str | None = None,
              progress: bool = True, progress_interval_s: float = 10.0,
              register_existing: bool = False) -> "LoadRequest":
        """The request of these keywords, every option parsed and checked here, before
        any work.

        ``warehouse``: a URL (with ``catalog``: the config's ``catalog:`` section)
        or a :class:`pipelines.warehouse.catalog.Warehouse`. Without ``spec``, one is built
        from ``topic``, ``table`` and the decoding keywords; ``partition_by``,
        ``on_data_loss``, ``max_rows_per_file`` and ``compression`` override the
        spec's (its table layout). ``until_offsets``: Spark Kafka JSON
        (``{"t": {"0": 100}}``) or ``{partition: offset}``; ``until_timestamp``: epoch
        ms, load records before it. ``storage_options`` serve the log and the
        warehouse. ``register_existing``: see :func:`load`.
        """
        if spec is None:
            if not topic or not table:
                raise ConfigError("run_load needs a spec, or a topic and a table")
            spec = LoadSpec(topic=topic, table=table).with_overrides(
                value_format=value_format, value_schema=value_schema,
                value_schema_file=value_schema_file, decode=dict(decode) if decode else None,
                partition_by=partition_by, on_data_loss=on_data_loss)
        else:
            spec = spec.with_overrides(on_data_loss=on_data_loss, partition_by=partition_by)
        spec = spec.with_overrides(max_rows_per_file=max_rows_per_file, compression=compression)
        spec.decode_options()   # bad decoder options fail before any work
        return cls(root=root, warehouse=Warehouse.of(warehouse, catalog, storage_options),
                   spec=spec, until=until_limit(spec.topic, until_offsets, until_timestamp),
                   run_id=run_id, storage_options=dict(storage_options or {}) or None,
                   max_bytes_per_partition=max_bytes_per_partition,
                   register_existing=register_existing, progress=progress,
                   progress_interval_s=progress_interval_s)


def run_load(spark, request: LoadRequest | None = None, **options: Any) -> LoadSummary:
    """:func:`load` of ``request``, or of the request :meth:`LoadRequest.build` makes of
    ``options`` (its keywords: ``root``, ``warehouse``, ``spec`` or ``topic`` and
    ``table``, ``until_offsets``, ...)."""
    return load(spark, request_of(LoadRequest, request, options))


def request_of(cls, request, options: Mapping[str, Any]):
    """``request``, or ``cls.build(**options)`` (a job's request or its keywords)."""
    if request is None:
        return cls.build(**options)
    if options:
        raise ConfigError(f"give a {cls.__name__} or its keywords, not both")
    return request


def load(spark, request: LoadRequest) -> LoadSummary:
    """Load ``request.spec.topic`` (under ``request.root``) into the warehouse table
    ``request.spec.table``, exactly once (the module docstring's steps).

    Raises :class:`OffsetOverlapError` when a racing run committed first,
    :class:`~kafkastore.errors.DataLossError` on data loss (unless the spec's
    ``on_data_loss`` is ``skip``), :class:`~kafkastore.errors.OrphanedTableError` when
    the catalog lost the table but its location holds it (``register_existing``:
    register its newest metadata file again and carry on from its committed offsets).
    """
    run = plan_table_load(spark, request)
    if isinstance(run, LoadSummary):
        return run
    spec = run.spec
    created = CreatedTables.before(request.warehouse,
                                   [spec.table] + ([spec.dead_letter_table] if spec.decoded else []))
    try:
        return write_and_commit(spark, run)
    except BaseException:
        created.drop_unused()   # a failed first load leaves no table behind
        raise


@dataclass
class TableRun:
    """One table's load, planned (:func:`plan_table_load`): the spec settled against the
    table, the ranges and gaps to load, the run id and the summary it fills in."""

    request: LoadRequest
    spec: LoadSpec
    summary: LoadSummary
    ranges: list[OffsetRange]
    gaps: list[OffsetRange]
    run_id: str
    started: float


def plan_table_load(spark, request: LoadRequest) -> "TableRun | LoadSummary":
    """Steps 1 and 2 of :func:`load`: the table's run planned (a :class:`TableRun`), or
    the summary of a run with nothing to do (run id committed, no new records)."""
    clock = request.clock
    started = clock.monotonic_s()
    spec, wh, run_id = request.spec, request.warehouse, request.run_id
    topic, table = spec.topic, spec.table
    storage = Storage(request.root, request.storage_options)
    # A table the catalog lost (an emptied catalog.db) is refused or registered again,
    # never created anew from offset 0 next to its own files.
    wh.recover([table] + ([spec.dead_letter_table] if spec.decoded else []),
               request.register_existing)
    existing = wh.load_table(table)
    # Flags left out: the table's recorded load (a conflicting one: refused); no mode
    # given: the table's (append when new).
    spec = spec.for_table(existing)
    if spec.decoded and not request.spec.decoded:   # decoded as the table records
        wh.recover([spec.dead_letter_table], request.register_existing)
    check_before_creating(spark, spec)
    if run_id is not None and existing is not None:
        done = find_run(existing, run_id)
        if done is not None:
            return LoadSummary(topic, table, run_id, done.snapshot_id, noop=True,
                               reason=f"run id already committed at snapshot {done.snapshot_id}",
                               seconds=clock.monotonic_s() - started)
    committed = {p: n for (t, p), n in committed_offsets(existing).items() if t == topic}
    plans = plan_load(storage, topic, committed, until=request.until,
                      on_data_loss=spec.on_data_loss)
    todo = [pl for pl in plans if not pl.empty]
    ranges = [pl.range for pl in todo]
    gaps = [pl.gap for pl in todo if pl.gap is not None]
    run_id = run_id or default_run_id("load", topic, table, ranges)
    summary = LoadSummary(topic, table, run_id,
                          ranges={r.partition: (r.from_offset, r.until_offset) for r in ranges},
                          initial={pl.partition: pl.range.from_offset for pl in todo if pl.initial},
                          gaps=[{"partition": g.partition, "from": g.from_offset,
                                 "until": g.until_offset} for g in gaps])
    done = find_run(existing, run_id) if existing is not None else None
    if done is not None:
        summary.snapshot_id, summary.noop = done.snapshot_id, True
        summary.reason = f"this range was committed at snapshot {done.snapshot_id}"
        summary.seconds = clock.monotonic_s() - started
        return summary
    if not todo:
        summary.noop, summary.reason = True, "no new records"
        summary.seconds = clock.monotonic_s() - started
        return summary
    if spec.cdc is not None and not spec.key_columns:   # Debezium: the Kafka key's fields
        spec = with_default_keys(spec, storage, ranges)
    return TableRun(request, spec, summary, ranges, gaps, run_id, started)


@dataclass
class TableWrite:
    """Where a planned run writes (:func:`prepare_write`): its tables (created if
    missing), the dead-letter table's part, and the executors' :class:`WriteTarget`."""

    run: TableRun
    tbl: Any
    dl: Any
    dl_ranges: list[OffsetRange]
    dl_gaps: list[OffsetRange]
    target: WriteTarget


def prepare_write(run: TableRun) -> TableWrite:
    """The tables of ``run`` (created if missing) and where its executors write."""
    request, spec = run.request, run.spec
    tbl, dl = ensure_tables(request.warehouse, spec)
    dl_start, dl_ranges, dl_gaps = ({}, [], []) if dl is None else _dead_letter_plan(
        dl, spec.topic, run.ranges, run.gaps)
    # Upsert runs stage their decoded rows (never committed; pipelines.upsert) and the
    # commit writes the table's files.
    target = WriteTarget(tbl.location() + ("/upsert-staging" if spec.layout.upsert else ""),
                         dl.location() if dl is not None else None, spec.layout,
                         request.storage_options, dl_start).of_table(tbl)
    return TableWrite(run, tbl, dl, dl_ranges, dl_gaps, target)


def write_and_commit(spark, run: TableRun) -> LoadSummary:
    """The write (its own read of the run's ranges) and commit of :func:`load` (tables
    created if missing)."""
    request, spec, run_id, ranges = run.request, run.spec, run.run_id, run.ranges
    topic, table = spec.topic, spec.table
    prepared = prepare_write(run)
    written = write_job(spark, f"load {topic} -> {table}", request.root, ranges, spec,
                        prepared.target, run_id, prepared.tbl,
                        storage_options=request.storage_options,
                        max_bytes=request.max_bytes_per_partition, progress=request.progress,
                        progress_interval_s=request.progress_interval_s, clock=request.clock,
                        on_start=lambda: _log_plan(topic, table, run_id, ranges))
    return commit_written(prepared, written)


def commit_written(prepared: TableWrite, written: Written) -> LoadSummary:
    """Step 4 of :func:`load`: commit what the executors wrote for ``prepared``'s run (dead
    letters first, then the table), and the run's summary."""
    run = prepared.run
    request, spec, summary, run_id = run.request, run.spec, run.summary, run.run_id
    clock, storage_options = request.clock, request.storage_options
    topic, table, tbl, dl = spec.topic, spec.table, prepared.tbl, prepared.dl
    upsert = spec.layout.upsert
    _tally(summary, written.files)
    data, dead, footers = list(written.data), written.dead, written.footers
    commit_started = clock.monotonic_s()
    extras = written.registry_extras(spec, tbl)   # onIncompatible=fail stops here
    try:
        if dl is not None and prepared.dl_ranges:
            r = iceberg_commit.commit(dl, iceberg_commit.KafkaCommit(
                run_id, "load", tuple(prepared.dl_ranges), dead,
                gaps=tuple(prepared.dl_gaps), footers=footers))
            summary.dead_letter_snapshot_id = r.snapshot_id
        if upsert:
            kc = upsert_commit(run_id, spec, run.ranges, run.gaps, data, storage_options,
                               extras=extras)
        else:
            kc = iceberg_commit.KafkaCommit(
                run_id, "load", tuple(run.ranges), tuple(data), gaps=tuple(run.gaps),
                schema=written.schema(spec, storage_options, extras), footers=footers,
                properties=extras.properties if extras else {})
        result = iceberg_commit.commit(tbl, kc)
    except OffsetOverlapError as exc:
        raise OffsetOverlapError(f"load of {topic} into {table} (run {run_id}) refused: {exc}. "
                                 f"Its files stay invisible; rerun to load from the committed "
                                 f"offsets") from None
    summary.snapshot_id = result.snapshot_id
    summary.commit_seconds = clock.monotonic_s() - commit_started
    record_load_properties(request.warehouse.table(table), spec)
    if upsert:
        summary.upsert = {**asdict(kc.rewrite.stats), "keys": kc.rewrite.winners.num_rows,
                          "skipped_null_keys": kc.rewrite.skipped}
        remove_staging(data, storage_options)
    if result.noop:
        summary.noop = True
        summary.reason = f"run id committed by an earlier attempt at snapshot {result.snapshot_id}"
    summary.seconds = clock.monotonic_s() - run.started
    return summary


def _log_plan(topic, table, run_id, ranges):
    parts = ", ".join(f"p{r.partition} [{r.from_offset}, {r.until_offset})" for r in ranges)
    print(f"load {topic} -> {table} (run {run_id}): {parts}", file=sys.stderr, flush=True)


def _tally(summary, files: list[dict]) -> None:
    for p in summary.ranges:
        summary.per_partition[p] = {"rows": 0, "dead_letters": 0, "bytes": 0, "files": 0}
    for f in files:
        c = summary.per_partition.setdefault(f["partition"], {"rows": 0, "dead_letters": 0,
                                                              "bytes": 0, "files": 0})
        c["rows" if f["kind"] == "data" else "dead_letters"] += f["rows"]
        c["bytes"] += f["bytes"]
        c["files"] += 1
    summary.rows = sum(c["rows"] for c in summary.per_partition.values())
    summary.dead_letters = sum(c["dead_letters"] for c in summary.per_partition.values())
    summary.bytes = sum(c["bytes"] for c in summary.per_partition.values())
    summary.files = len(files)


# ---------------------------------------------------------------------------
# entry points: CLI and Airflow


def load_options_from_args(args, cfg) -> dict[str, Any]:
    """``run_load`` keyword arguments from the CLI's ``load`` arguments and the
    config (its ``loads`` entry for the topic fills what flags leave out)."""
    fmt = getattr(args, "value_format", None)
    schema = getattr(args, "value_schema", None)
    schema_file = getattr(args, "value_schema_file", None)
    registry = {k: getattr(args, k, None) for k in ("schema_registry", "on_incompatible",
                                                     "key_format")}
    registry = {k: v for k, v in registry.items() if v is not None}
    decoding = {}
    if fmt is not None or schema is not None or schema_file is not None:
        # Flags describing the value replace the entry's decoding as a whole.
        decoding = {"value_schema": schema, "value_schema_file": schema_file}
    spec = resolve_spec(cfg, args.topic, getattr(args, "table", None),
                        on_data_loss=getattr(args, "on_data_loss", None),
                        **layout_flags(args))
    if decoding:
        # Given flags, even --value-format raw, must agree with the table's recorded load.
        # (a schema without --value-format: the table's format, else raw)
        spec = spec.given(value_format=fmt, value_schema=decoding["value_schema"],
                          value_schema_file=decoding["value_schema_file"], decode=registry)
    elif registry:

        spec = replace(spec, decode={**spec.decode, **registry})
    if getattr(args, "cdc", None):

        spec = replace(spec, cdc=args.cdc)   # checked with the value flags applied
    wh = Warehouse(getattr(args, "warehouse", None) or cfg.warehouse, cfg.catalog or None,
                       dict(cfg.storage_options or {}) or None)
    return {"root": cfg.root, "warehouse": wh, "spec": spec,
            "run_id": getattr(args, "run_id", None),
            "until_offsets": getattr(args, "until_offsets", None),
            "until_timestamp": getattr(args, "until_timestamp", None),
            "register_existing": bool(getattr(args, "register_existing", False)),
            "storage_options": dict(cfg.storage_options or {}) or None}


def load_for_interval(root: str, warehouse: str, spec: LoadSpec | Mapping[str, Any],
                      data_interval_end_ms: int, run_id: str | None = None, *,
                      catalog: Mapping[str, Any] | None = None,
                      storage_options: dict | None = None, master: str | None = None,
                      spark_conf: Mapping[str, Any] | None = None,
                      conf_file: str | None = None) -> dict[str, Any]:
    """For Airflow: load the records with timestamp < ``data_interval_end_ms``.

    ``spec``: a :class:`LoadSpec` or a ``loads:`` entry (parsed here). Plain
    arguments in, a plain dict (:meth:`LoadSummary.to_dict`) out; creates (or
    reuses) the process's SparkSession. Pass the DAG run's id as ``run_id`` so
    a retried task is a no-op once its commit landed. Records that arrive late
    (timestamp before an interval already loaded) are loaded by the next
    interval: ranges are by offset.
    """

    if not isinstance(spec, LoadSpec):
        spec = LoadSpec.from_entry(spec)
    spark = get_spark(master=master, app_name=f"kafkastore-load-{spec.table}",
                      extra_conf=spark_conf, conf_file=conf_file)
    summary = run_load(spark, root=root, warehouse=warehouse, spec=spec, run_id=run_id,
                       until_timestamp=int(data_interval_end_ms), catalog=catalog,
                       storage_options=storage_options, progress=False)
    log.info("%s", summary.render())
    return summary.to_dict()
