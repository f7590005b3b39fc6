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
   value) each, under the table location (:mod:`pipelines.table_files`).
4. **Commit on the driver** (:func:`pipelines.iceberg.commit`): dead letters
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
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from kafkastore.clock import SYSTEM, Clock
from kafkastore.errors import ConfigError, OffsetOverlapError, WarehouseError
from kafkastore.storage import Storage

from . import iceberg as ice
from .spec.load_spec import LoadSpec, resolve_spec
from .spec.offset_ranges import Latest, OffsetLimit, OffsetRange
from .planning import default_run_id, plan_load, plan_tasks, until_limit
from .table_files import DESCRIPTOR_DDL, check_disjoint, descriptor_schema, write_files
from .spec.table_layout import TableLayout

log = logging.getLogger(__name__)

_RAW_VALUE = "__dl_value"   # the raw value kept next to decoded columns, for dead letters


# ---------------------------------------------------------------------------
# table schemas


def raw_schema():
    """The table schema of raw loads: Spark's Kafka-source columns (all optional)."""
    from kafkastore.format.arrow_decode import KAFKA_SCHEMA

    return KAFKA_SCHEMA


def dead_letter_schema():
    """The dead-letter table schema: the Kafka columns, the raw value, the error."""
    import pyarrow as pa

    from kafkastore.format.arrow_decode import KAFKA_SCHEMA

    from .decoding import DEAD_LETTER_COLUMNS

    fields = [KAFKA_SCHEMA.field(c) for c in DEAD_LETTER_COLUMNS if c != "error"]
    return pa.schema(fields + [pa.field("error", pa.string())])


def base_decoded_schema():
    """The columns every decoded table starts with; decoded columns join at the
    first commit (union by name)."""
    import pyarrow as pa

    from kafkastore.format.arrow_decode import KAFKA_SCHEMA

    return pa.schema([KAFKA_SCHEMA.field(c) for c in ("topic", "partition", "offset", "timestamp")])


def nullable(schema):
    """``schema`` with every field (nested too) optional: tables accept files
    whatever Spark declared, and later schema unions never tighten a column."""
    import pyarrow as pa

    def fix_type(t):
        if pa.types.is_struct(t):
            return pa.struct([fix_field(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(fix_field(t.value_field))
        if pa.types.is_map(t):
            return pa.map_(t.key_type, fix_field(t.item_field))
        return t

    def fix_field(f):
        return pa.field(f.name, fix_type(f.type), True)

    return pa.schema([fix_field(f) for f in schema])


def file_schema(url: str, storage_options: Mapping[str, Any] | None):
    """The Arrow schema stored in a Parquet file's footer."""
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(url, "rb", **dict(storage_options or {})) as f:
        return pq.read_schema(f)


# ---------------------------------------------------------------------------
# reading and writing (executors)


def split_reader(root: str, storage_options: dict | None, splits: list[tuple],
                 include_headers: bool = True):
    """For ``mapInArrow`` over a frame of split numbers: the Kafka-schema Arrow
    batches of each split, read on the executor (the data source's own reader)."""
    def read(batches: Iterator[Any]) -> Iterator[Any]:
        from kafkastore.reader import READ_COMMITTED, read_range

        storage = Storage(root, storage_options)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                for rr in splits[i]:
                    # The range is read for this decode only: values may be decoded
                    # into the read buffer (see DECISIONS "Cold decodes").
                    rb = read_range(storage, rr, include_headers=include_headers,
                                    isolation=READ_COMMITTED, reuse_input=True)
                    if rb.num_rows:
                        yield rb

    return read


def _split_frame(spark, n: int):
    # range(0, n) in n slices: exactly one split number per task.
    return spark.range(0, n, 1, n)


def kafka_frame(spark, root: str, splits: list[tuple], storage_options: dict | None = None):
    """A DataFrame (Spark's Kafka schema, with headers) of exactly ``splits``."""
    from .datasource import spark_schema

    return _split_frame(spark, len(splits)).mapInArrow(
        split_reader(root, storage_options, splits), spark_schema(include_headers=True))


@dataclass(frozen=True)
class WriteTarget:
    """Where and how the executors write: table locations (plain strings) and the
    table's layout. An upsert layout stages: each task keeps the last record per key
    and partition, with a column telling tombstones (null raw value) apart."""

    data_location: str
    dead_letter_location: str | None = None
    layout: TableLayout = TableLayout()
    storage_options: Mapping[str, Any] | None = None
    dead_letters_from: Mapping[int, int] = field(default_factory=dict)
    #: ``{column: has a zone}`` of the data table's timestamp columns: the files keep
    #: a column's kind (:func:`pipelines.table_files.micros_timestamps`).
    timestamp_zones: Mapping[str, bool] = field(default_factory=dict)

    def of_table(self, tbl) -> "WriteTarget":
        """This target writing timestamps as the columns of ``tbl`` (an Iceberg table) are."""
        from dataclasses import replace

        from .table_files import timestamp_zones

        return replace(self, timestamp_zones=timestamp_zones(tbl.schema()))


def file_writer(target: WriteTarget, *, run_id: str, split_dead_letters: bool,
                json_schema: str | None = None, counter=None):
    """The ``mapInArrow`` function of a load: write each task's rows as Parquet
    (data and, when ``split_dead_letters``, dead letters at or after
    ``target.dead_letters_from`` of their partition) and yield one descriptor per
    file. ``counter`` is an optional accumulator of ``{partition: rows}``."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from pipelines.decoding import DEAD_LETTER_COLUMNS, json_error_detail

        so = dict(target.storage_options or {})
        layout = target.layout
        good: list = []
        dead: list = []
        rows = 0
        descriptors: list[dict] = []
        seen: dict[int, int] = {}

        def flush():
            nonlocal good, dead, rows
            if good and layout.upsert:
                # Upsert staging: only the last record per (key, partition) of this task
                # can win (pipelines.upsert), so only those are staged.
                from pipelines.upsert import last_per_partition

                good = last_per_partition(pa.Table.from_batches(good), layout.upsert_keys)
            if good:
                descriptors.extend(write_files(
                    target.data_location, good, run_id=run_id, storage_options=so,
                    partition_by=layout.partition_by, max_rows_per_file=layout.max_rows_per_file,
                    compression=layout.compression, zoned=target.timestamp_zones))
            if dead:
                descriptors.extend(write_files(
                    target.dead_letter_location, dead, run_id=run_id, storage_options=so,
                    kind="dead_letter", partition_by=layout.partition_by,
                    max_rows_per_file=layout.max_rows_per_file, compression=layout.compression))
            good, dead, rows = [], [], 0

        for batch in batches:
            if not batch.num_rows:
                continue
            batch = _restore_null_headers(batch)
            for p, n in zip(*_value_counts(batch.column("partition"))):
                seen[p] = seen.get(p, 0) + n
            if layout.upsert:
                from pipelines.upsert import TOMBSTONE

                raw = batch.column(_RAW_VALUE if split_dead_letters else "value")
                batch = batch.append_column(TOMBSTONE, pc.is_null(raw))
            if split_dead_letters:
                failed = pc.is_valid(batch.column("__error"))
                ok = batch.filter(pc.invert(failed))
                bad = batch.filter(failed)
                if ok.num_rows:
                    good.append(ok.drop_columns([_RAW_VALUE, "__error"]))
                if bad.num_rows and target.dead_letters_from:
                    # Dead letters the dead-letter table already committed (a crash
                    # between its commit and the table's) are not written again.
                    low = pa.array([target.dead_letters_from.get(p, 0)
                                    for p in bad.column("partition").to_pylist()], pa.int64())
                    bad = bad.filter(pc.greater_equal(bad.column("offset"), low))
                if bad.num_rows:
                    dead.append(_dead_letter_batch(bad, json_schema, json_error_detail,
                                                   DEAD_LETTER_COLUMNS, pa))
            else:
                good.append(batch)
            rows += batch.num_rows
            if rows >= layout.max_rows_per_file:
                flush()
        flush()
        if counter is not None and seen:
            counter.add(seen)
        if descriptors:
            yield pa.RecordBatch.from_pylist(descriptors, schema=descriptor_schema())

    return run


def _dead_letter_batch(bad, json_schema, json_error_detail, columns, pa):
    """Dead-letter rows: the Kafka columns, the raw value and the error text."""
    errors = bad.column("__error").to_pylist()
    if json_schema is not None:
        # Spark's parser only says "does not match"; say why, for failed rows only.
        values = bad.column(_RAW_VALUE).to_pylist()
        errors = [json_error_detail(v, json_schema) or e for v, e in zip(values, errors)]
    arrays, names = [], []
    for name in columns:
        if name == "error":
            arrays.append(pa.array(errors, pa.string()))
        elif name == "value":
            arrays.append(bad.column(_RAW_VALUE))
        elif name in bad.schema.names:
            arrays.append(bad.column(name))
        else:
            continue
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _json_schema_text(opts) -> str | None:
    if opts.value_format != "json":
        return None
    from .decoding import parse_json_schema

    return parse_json_schema(opts.schema_text()).json()


def write_ranges(spark, root: str, ranges: list[OffsetRange], spec: LoadSpec, target: WriteTarget,
                 run_id: str, *, storage_options: dict | None = None,
                 max_bytes: int | None = None, counter=None, table_schema=None) -> list[dict]:
    """Read exactly ``ranges``, decode per ``spec``, write to ``target`` on the
    executors; return the file descriptors (nothing committed). ``table_schema``:
    the table's (pyarrow) for loads that follow a schema registry."""
    splits = plan_tasks(Storage(root, storage_options), ranges,
                        spark.sparkContext.defaultParallelism, max_bytes)
    if not splits:
        return []
    opts = spec.decode_options()
    if opts.schema_registry:
        from .registry_load import load_files

        files = load_files(spark, root, splits, opts, target, run_id, table_schema,
                           storage_options=storage_options, counter=counter, cdc=spec.cdc)
        check_disjoint(files)
        return files
    if not spec.decoded:
        read = split_reader(root, storage_options, splits)
        write = file_writer(target, run_id=run_id, split_dead_letters=False, counter=counter)

        def run(batches: Iterator[Any]) -> Iterator[Any]:
            yield from write(read(batches))

        rows = _split_frame(spark, len(splits)).mapInArrow(run, DESCRIPTOR_DDL).collect()
    else:
        if spec.cdc:
            from .cdc import debezium_frame

            frame = debezium_frame(kafka_frame(spark, root, splits, storage_options), opts,
                                   _RAW_VALUE, "__error")
            split, detail = True, None
        else:
            frame, split = _decoded_frame(kafka_frame(spark, root, splits, storage_options), opts)
            detail = _json_schema_text(opts) if split else None
        frame = _headers_never_null(frame)
        fn = file_writer(target, run_id=run_id, split_dead_letters=split,
                         json_schema=detail, counter=counter)
        rows = frame.mapInArrow(fn, DESCRIPTOR_DDL).collect()
    files = [r.asDict() for r in rows]
    check_disjoint(files)
    return files


@dataclass(frozen=True)
class Written:
    """The file descriptors a job's tasks wrote (nothing committed yet), by kind."""

    files: list[dict]

    @property
    def data(self) -> tuple[str, ...]:
        return tuple(f["url"] for f in self.files if f["kind"] == "data")

    @property
    def dead(self) -> tuple[str, ...]:
        return tuple(f["url"] for f in self.files if f["kind"] == "dead_letter")

    @property
    def footers(self) -> dict[str, tuple[int, bytes]]:
        """``{url: (bytes, footer)}``: commits build data file entries without a read."""
        return {f["url"]: (f["bytes"], f["footer"]) for f in self.files if f.get("footer")}

    @property
    def rows(self) -> int:
        return sum(f["rows"] for f in self.files if f["kind"] == "data")

    @property
    def dead_letters(self) -> int:
        return sum(f["rows"] for f in self.files if f["kind"] == "dead_letter")

    def registry_extras(self, spec: LoadSpec, tbl):
        """For loads that follow a schema registry, the writer schemas the table follows
        (:func:`pipelines.registry_load.commit_extras`; onIncompatible=fail raises here,
        before any commit); None otherwise."""
        if not spec.registry:
            return None
        from .registry_load import commit_extras

        dopts = spec.decode_options()
        return commit_extras(self.files, tbl.schema().as_arrow(), dopts.on_incompatible,
                             key_decoded=dopts.key_format != "raw")

    def schema(self, spec: LoadSpec, storage_options, extras=None):
        """The schema a commit merges into the table: the registry's, else the written
        files' for decoded loads (None: unchanged)."""
        if extras is not None:
            return extras.schema
        data = self.data
        return nullable(file_schema(data[0], storage_options)) if data and spec.decoded else None


def write_job(spark, label: str, root: str, ranges: list[OffsetRange], spec: LoadSpec,
              target: WriteTarget, run_id: str, tbl, *, storage_options=None,
              max_bytes: int | None = None, progress: bool = True,
              progress_interval_s: float = 10.0, on_start=None,
              clock: Clock = SYSTEM) -> Written:
    """:func:`write_ranges` of a job (load, reprocess) into ``tbl``, with a
    :class:`Progress` line every ``progress_interval_s`` when ``progress``
    (``on_start``: called once it runs)."""
    tracker = Progress(spark, label, progress_interval_s, clock=clock) if progress else None
    if tracker:
        tracker.start()
        if on_start is not None:
            on_start()
    try:
        return Written(write_ranges(
            spark, root, ranges, spec, target, run_id, storage_options=storage_options,
            max_bytes=max_bytes, counter=tracker.counter if tracker else None,
            table_schema=tbl.schema().as_arrow() if spec.registry else None))
    finally:
        if tracker:
            tracker.stop()


# ---------------------------------------------------------------------------
# progress


class _DictSum:
    """AccumulatorParam summing ``{key: count}`` dicts."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


class Progress:
    """A driver thread printing one line every ``interval_s``: tasks done, rows
    written so far (per partition, from an accumulator updated as tasks end),
    and the rate. Stop it with :meth:`stop`."""

    def __init__(self, spark, label: str, interval_s: float = 10.0, out=None,
                 clock: Clock = SYSTEM):
        from pyspark.accumulators import AccumulatorParam

        param = type("_DictSumParam", (_DictSum, AccumulatorParam), {})()
        self.counter = spark.sparkContext.accumulator({}, param)
        self._sc = spark.sparkContext
        self._label = label
        self._interval = interval_s
        self._out = out or sys.stderr
        self._stop = threading.Event()
        self._clock = clock
        self._started = clock.monotonic_s()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="load-progress")

    def start(self) -> "Progress":
        self._thread.start()
        return self

    def line(self) -> str:
        tracker = self._sc.statusTracker()
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        counts = dict(self.counter.value)
        rows = sum(counts.values())
        secs = max(self._clock.monotonic_s() - self._started, 1e-9)
        per = " ".join(f"p{p}={n}" for p, n in sorted(counts.items()))
        return (f"{self._label}: {secs:.0f}s, tasks {done}/{total}, {rows} records "
                f"({rows / secs:,.0f}/s){' ' + per if per else ''}")

    def _loop(self):
        while not self._stop.wait(self._interval):
            try:
                print(self.line(), file=self._out, flush=True)
            except Exception:   # progress must never break a load (e.g. a stopping context)
                return

    def stop(self) -> None:
        self._stop.set()



def _decoded_frame(df, opts):
    """One frame carrying good rows and dead letters, told apart by ``error``.

    Decoding once and splitting inside the writer reads the log once; two
    separate frames (good, dead letters) would read it twice.
    """
    from pyspark.sql import functions as F

    from . import decoding

    if opts.value_format == "raw":
        return df, False
    dec = decoding.decode_value(df, opts)
    good_cols = decoding.good_columns(df, dec.combined, opts)
    return dec.combined.select(*good_cols, F.col("value").alias(_RAW_VALUE),
                               F.col(decoding.ERROR_COLUMN).alias("__error")), True


def _value_counts(column):
    import pyarrow.compute as pc

    counts = pc.value_counts(column)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


def _headers_never_null(frame):
    """Send empty header lists instead of nulls to the Python writer.

    Spark's JVM-to-Arrow conversion of null ``array<struct>`` values is an order
    of magnitude slower than of empty arrays (measured: 1M null headers ~15 s,
    empty ~2 s on local[2]); the writer turns them back into nulls, which is
    what the data source (and Spark's Kafka source) gives for "no headers".
    """
    from pyspark.sql import functions as F

    if "headers" not in frame.columns:
        return frame
    htype = frame.schema["headers"].dataType
    return frame.withColumn("headers", F.coalesce(F.col("headers"), F.array().cast(htype)))


def _restore_null_headers(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    i = batch.schema.get_field_index("headers")
    if i < 0:
        return batch
    h = batch.column(i)
    empty = pc.equal(pc.list_value_length(h), 0)
    if not pc.any(empty).as_py():
        return batch
    return batch.set_column(i, batch.schema.field(i), pc.if_else(empty, pa.nulls(len(h), h.type), h))



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


def ensure_tables(wh: ice.Warehouse, spec: LoadSpec):
    """The spec's table (created if missing: raw Kafka columns, or the base
    columns of a decoded load) and, for decoded loads, its dead-letter table."""
    from .upsert import check_mode, mode_properties

    spec = spec.for_table(wh.load_table(spec.table))
    base = raw_schema() if not spec.decoded else base_decoded_schema()
    layout = spec.layout
    if layout.upsert and spec.decoded and "key" not in base.names:
        import pyarrow as pa

        base = base.append(pa.field("key", pa.binary()))
    keys = layout.upsert_keys if layout.upsert else ()
    tbl = wh.load_table(spec.table)
    check_mode(tbl, spec.table, layout.mode, keys)
    tbl = tbl or wh.create_table(spec.table, nullable(base), layout.partition_by,
                                 properties={**mode_properties(layout.mode, keys),
                                             **spec.load_properties()})
    dl = None
    if spec.decoded:
        dl = (wh.load_table(spec.dead_letter_table)
              or wh.create_table(spec.dead_letter_table, nullable(dead_letter_schema()),
                                 layout.partition_by))
    return tbl, dl


@dataclass
class CreatedTables:
    """The tables (and namespace) a load is about to create: dropped again, files and
    all, when the load fails before its first commit, so that a load refused on its
    arguments or its data leaves the warehouse as it found it."""

    warehouse: ice.Warehouse
    names: list[str]
    namespace_existed: bool

    @classmethod
    def before(cls, wh: ice.Warehouse, names: list[str]) -> "CreatedTables":
        """The tables of ``names`` that do not exist yet."""
        from .spec.table_layout import table_identifier

        missing = [n for n in names if wh.load_table(n) is None]
        ns = table_identifier(names[0])[0]
        existed = bool(missing) and wh.namespace_exists(ns)
        return cls(wh, missing, existed or not missing)

    def drop_unused(self) -> None:
        """Drop each of the tables that holds no snapshot (nobody committed to it)."""
        from .spec.table_layout import table_identifier

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
    from .spec.load_spec import REVISABLE, stored_load
    from .spec.table_layout import LOAD_PROPERTIES

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
    from .decoding import parse_avro_schema, parse_json_schema

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
    done = {p: n for (t, p), n in ice.committed_offsets(dl).items() if t == topic}
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
    warehouse: ice.Warehouse
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
        or a :class:`pipelines.iceberg.Warehouse`. Without ``spec``, one is built
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
        return cls(root=root, warehouse=ice.Warehouse.of(warehouse, catalog, storage_options),
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
    clock = request.clock
    started = clock.monotonic_s()
    spec, wh, run_id = request.spec, request.warehouse, request.run_id
    storage_options = request.storage_options
    topic, table = spec.topic, spec.table
    storage = Storage(request.root, storage_options)
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
        done = ice.find_run(existing, run_id)
        if done is not None:
            return LoadSummary(topic, table, run_id, done.snapshot_id, noop=True,
                               reason=f"run id already committed at snapshot {done.snapshot_id}",
                               seconds=clock.monotonic_s() - started)
    committed = {p: n for (t, p), n in ice.committed_offsets(existing).items() if t == topic}
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
    done = ice.find_run(existing, run_id) if existing is not None else None
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
        from .cdc import with_default_keys

        spec = with_default_keys(spec, storage, ranges)

    created = CreatedTables.before(wh, [table] + ([spec.dead_letter_table] if spec.decoded else []))
    try:
        return _load_into(spark, request, spec, summary, ranges, gaps, run_id, started)
    except BaseException:
        created.drop_unused()   # a failed first load leaves no table behind
        raise


def _load_into(spark, request: LoadRequest, spec: LoadSpec, summary: LoadSummary,
               ranges: list[OffsetRange], gaps: list[OffsetRange], run_id: str,
               started: float) -> LoadSummary:
    """The write and commit of :func:`load` (tables created if missing)."""
    clock, wh, storage_options = request.clock, request.warehouse, request.storage_options
    topic, table = spec.topic, spec.table
    tbl, dl = ensure_tables(wh, spec)
    dl_start, dl_ranges, dl_gaps = ({}, [], []) if dl is None else _dead_letter_plan(
        dl, topic, ranges, gaps)
    upsert = spec.layout.upsert
    # Upsert runs stage their decoded rows (never committed; pipelines.upsert) and the
    # commit writes the table's files.
    target = WriteTarget(tbl.location() + ("/upsert-staging" if upsert else ""),
                         dl.location() if dl is not None else None, spec.layout,
                         storage_options, dl_start).of_table(tbl)
    written = write_job(spark, f"load {topic} -> {table}", request.root, ranges, spec, target,
                        run_id, tbl, storage_options=storage_options,
                        max_bytes=request.max_bytes_per_partition, progress=request.progress,
                        progress_interval_s=request.progress_interval_s, clock=clock,
                        on_start=lambda: _log_plan(topic, table, run_id, ranges))
    _tally(summary, written.files)
    data, dead, footers = list(written.data), written.dead, written.footers
    commit_started = clock.monotonic_s()
    extras = written.registry_extras(spec, tbl)   # onIncompatible=fail stops here
    try:
        if dl is not None and dl_ranges:
            r = ice.commit(dl, ice.KafkaCommit(run_id, "load", tuple(dl_ranges), dead,
                                               gaps=tuple(dl_gaps), footers=footers))
            summary.dead_letter_snapshot_id = r.snapshot_id
        if upsert:
            from .upsert import upsert_commit

            kc = upsert_commit(run_id, spec, ranges, gaps, data, storage_options, extras=extras)
        else:
            kc = ice.KafkaCommit(run_id, "load", tuple(ranges), tuple(data), gaps=tuple(gaps),
                                 schema=written.schema(spec, storage_options, extras),
                                 footers=footers,
                                 properties=extras.properties if extras else {})
        result = ice.commit(tbl, kc)
    except OffsetOverlapError as exc:
        raise OffsetOverlapError(f"load of {topic} into {table} (run {run_id}) refused: {exc}. "
                                 f"Its files stay invisible; rerun to load from the committed "
                                 f"offsets") from None
    summary.snapshot_id = result.snapshot_id
    summary.commit_seconds = clock.monotonic_s() - commit_started
    record_load_properties(wh.table(table), spec)
    if upsert:
        from dataclasses import asdict

        from .upsert import remove_staging

        summary.upsert = {**asdict(kc.rewrite.stats), "keys": kc.rewrite.winners.num_rows,
                          "skipped_null_keys": kc.rewrite.skipped}
        remove_staging(data, storage_options)
    if result.noop:
        summary.noop = True
        summary.reason = f"run id committed by an earlier attempt at snapshot {result.snapshot_id}"
    summary.seconds = clock.monotonic_s() - started
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
                        partition_by=getattr(args, "partition_by", None),
                        mode=getattr(args, "mode", None),
                        key_columns=getattr(args, "key_columns", None))
    if decoding:
        # Given flags, even --value-format raw, must agree with the table's recorded load.
        # (a schema without --value-format: the table's format, else raw)
        spec = spec.given(value_format=fmt, value_schema=decoding["value_schema"],
                          value_schema_file=decoding["value_schema_file"], decode=registry)
    elif registry:
        from dataclasses import replace

        spec = replace(spec, decode={**spec.decode, **registry})
    if getattr(args, "cdc", None):
        from dataclasses import replace

        spec = replace(spec, cdc=args.cdc)   # checked with the value flags applied
    wh = ice.Warehouse(getattr(args, "warehouse", None) or cfg.warehouse, cfg.catalog or None,
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
    from .session import get_spark

    if not isinstance(spec, LoadSpec):
        spec = LoadSpec.from_entry(spec)
    spark = get_spark(master=master, app_name=f"kafkastore-load-{spec.table}",
                      extra_conf=spark_conf, conf_file=conf_file)
    summary = run_load(spark, root=root, warehouse=warehouse, spec=spec, run_id=run_id,
                       until_timestamp=int(data_interval_end_ms), catalog=catalog,
                       storage_options=storage_options, progress=False)
    log.info("%s", summary.render())
    return summary.to_dict()
