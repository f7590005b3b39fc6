"""The driver's side of a job that writes a table (load, reprocess, upsert and registry
loads): plan the ranges into Spark tasks, build the frame (raw, decoded, CDC or
registry-following), run :mod:`pipelines.jobs.executor_io`'s writer on the executors
(:func:`write_ranges`, :func:`write_job` with a :class:`Progress` line) and hand back
what was :class:`Written` (file descriptors; nothing committed: the job commits). A
route-by-field load writes all its tables from one read (:func:`routed_frame`,
:func:`write_routes`).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from kafkastore.clock import SYSTEM, Clock
from kafkastore.storage import Storage

from ..decoding import values as decoding
from ..decoding.cdc import debezium_frame
from ..progress_line import progress_line
from ..decoding.values import parse_json_schema
from ..source.planning import plan_tasks
from .registry_load import commit_extras, load_files
from ..source.schema import file_schema, nullable
from ..spec.load_spec import LoadSpec
from ..spec.offset_ranges import OffsetRange
from ..warehouse.files import DESCRIPTOR_DDL, check_disjoint
from .executor_io import (RAW_VALUE_COLUMN, ROUTE_COLUMN, ROUTED_DESCRIPTOR_DDL, WriteTarget,
                          file_writer, routed_writer, split_reader)
from .routing import check_column, route_rows


def _split_frame(spark, n: int):
    # range(0, n) in n slices: exactly one split number per task.
    return spark.range(0, n, 1, n)


def kafka_frame(spark, root: str, splits: list[tuple], storage_options: dict | None = None):
    """A DataFrame (Spark's Kafka schema, with headers) of exactly ``splits``."""
    from ..source.datasource import spark_schema  # lazy: pyspark start-up (the data source imports it)

    return _split_frame(spark, len(splits)).mapInArrow(
        split_reader(root, storage_options, splits), spark_schema(include_headers=True))


def raw_split_task(read, write):
    """For ``mapPartitions`` over an RDD of split numbers: ``write(read(...))`` of this
    task's splits (``read``/``write``: :func:`split_reader` / :func:`file_writer` functions
    over Arrow batches), yielding one descriptor dict per file written."""
    def run(numbers: Iterator[int]) -> Iterator[dict]:
        import pyarrow as pa

        ids = pa.RecordBatch.from_pydict({"id": pa.array(list(numbers), pa.int64())})
        for out in write(read(iter([ids]))):
            yield from out.to_pylist()

    return run


def _json_schema_text(opts) -> str | None:
    if opts.value_format != "json":
        return None
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
        files = load_files(spark, root, splits, opts, target, run_id, table_schema,
                           storage_options=storage_options, counter=counter, cdc=spec.cdc)
        check_disjoint(files)
        return files
    if not spec.decoded:
        # Nothing of a raw load's rows passes through the JVM: an RDD job of split numbers
        # plans no SQL query and hands no Arrow stream over (a third of a mapInArrow
        # job's JVM CPU, about 0.1 CPU s a load).
        files = spark.sparkContext.parallelize(range(len(splits)), len(splits)).mapPartitions(
            raw_split_task(split_reader(root, storage_options, splits),
                           file_writer(target, run_id=run_id, split_dead_letters=False,
                                       counter=counter))).collect()
        check_disjoint(files)
        return files
    else:
        if spec.cdc:
            frame = debezium_frame(kafka_frame(spark, root, splits, storage_options), opts,
                                   RAW_VALUE_COLUMN, "__error")
            split, detail = True, None
        else:
            frame, split = decoded_frame(kafka_frame(spark, root, splits, storage_options), opts)
            detail = _json_schema_text(opts) if split else None
        frame = _headers_never_null(frame)
        if spec.route is not None:   # a route-by-field load: this table's records only
            frame = route_rows(frame, spec.route)
        fn = file_writer(target, run_id=run_id, split_dead_letters=split,
                         json_schema=detail, counter=counter)
        rows = frame.mapInArrow(fn, DESCRIPTOR_DDL).collect()
    files = [r.asDict() for r in rows]
    check_disjoint(files)
    return files


def routed_frame(spark, root: str, storage_options, spec: LoadSpec, field: str,
                 ranges: list[OffsetRange]):
    """``(frame, split)``: the records of ``ranges``, read once and decoded as ``spec``
    says (``split``: dead letters are told apart by ``__error``), with each record's route
    value in :data:`ROUTE_COLUMN` (``field`` as a string; null for a null value or a
    record that does not decode), kept by Spark (persisted: the value counts and the
    write of every route table read it, not the log; the caller unpersists it)."""
    from pyspark import StorageLevel  # lazy: pyspark on the driver of a routed load only
    from pyspark.sql import functions as F  # lazy: as above

    splits = plan_tasks(Storage(root, storage_options), ranges,
                        spark.sparkContext.defaultParallelism, None)
    frame, split = decoded_frame(kafka_frame(spark, root, splits, storage_options),
                                 spec.decode_options())
    check_column(frame, field)
    value = F.when(F.col(decoding.ERROR_COLUMN).isNull(), F.col(field).cast("string"))
    frame = _headers_never_null(frame).withColumn(ROUTE_COLUMN, value)
    return frame.persist(StorageLevel.MEMORY_AND_DISK), split


def write_routes(spark, routed, targets: list[tuple[WriteTarget, str]], spec: LoadSpec, *,
                 label: str, progress: bool = True, progress_interval_s: float = 10.0,
                 clock: Clock = SYSTEM) -> list["Written"]:
    """Write every ``(target, run id)`` of a routed load from one pass over ``routed``
    (:func:`routed_frame`'s pair; each task splits its batch by route value,
    :func:`pipelines.jobs.executor_io.routed_writer`); the :class:`Written` of each target,
    in order (nothing committed)."""
    frame, split = routed
    detail = _json_schema_text(spec.decode_options()) if split else None
    tracker = Progress(spark, label, progress_interval_s, clock=clock) if progress else None
    if tracker:
        tracker.start()
    try:
        fn = routed_writer(targets, split_dead_letters=split, json_schema=detail,
                           counter=tracker.counter if tracker else None)
        rows = frame.mapInArrow(fn, ROUTED_DESCRIPTOR_DDL).collect()
    finally:
        if tracker:
            tracker.stop()
    by_target: list[list[dict]] = [[] for _ in targets]
    for r in rows:
        d = r.asDict()
        by_target[d.pop("target")].append(d)
    for files in by_target:
        check_disjoint(files)
    return [Written(files) for files in by_target]


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
        (:func:`pipelines.jobs.registry_load.commit_extras`; onIncompatible=fail raises here,
        before any commit); None otherwise."""
        if not spec.registry:
            return None
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
        return progress_line(self._label, self._clock.monotonic_s() - self._started,
                             {f"p{p}": n for p, n in sorted(counts.items())},
                             tasks=(done, total))

    def _loop(self):
        while not self._stop.wait(self._interval):
            try:
                print(self.line(), file=self._out, flush=True)
            except Exception:   # progress must never break a load (e.g. a stopping context)
                return

    def stop(self) -> None:
        self._stop.set()



def decoded_frame(df, opts):
    """One frame carrying good rows and dead letters, told apart by ``error``.

    Decoding once and splitting inside the writer reads the log once; two
    separate frames (good, dead letters) would read it twice.
    """
    from pyspark.sql import functions as F

    if opts.value_format == "raw":
        return df, False
    dec = decoding.decode_value(df, opts)
    good_cols = decoding.good_columns(df, dec.combined, opts)
    return dec.combined.select(*good_cols, F.col("value").alias(RAW_VALUE_COLUMN),
                               F.col(decoding.ERROR_COLUMN).alias("__error")), True


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
