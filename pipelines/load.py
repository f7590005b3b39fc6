"""Load a topic into a warehouse table, exactly once (DESIGN.md section 5).

One run of :func:`run_load`:

1. **Plan on the driver.** Per partition, the range ``[from, until)``:
   ``from`` is the table's committed next offset (never anything else); a
   partition the table never loaded starts at the log start offset *as of this
   run* (``earliest``; the commit's ``info.initial`` records it). ``until`` is
   the read-committed end of the log (the last stable offset) resolved once,
   now, from the manifests, or the explicit end: ``until_offsets`` (Spark
   Kafka-source JSON; partitions it does not list are not loaded this run) or
   ``until_timestamp`` (per partition the first offset whose timestamp is at or
   after it, so every loaded record is older). A scheduled run therefore covers
   a fixed range whatever arrives while it runs.
2. **Run id.** By default derived from topic, table and the ranges, so
   re-running the same range (after a crash whose commit may or may not have
   landed) is recognised; a committed run id makes the run a no-op.
3. **Read, decode, write on the executors.** The ``kafkastore`` data source
   reads exactly the planned ranges (``assign`` + explicit ``startingOffsets`` /
   ``endingOffsets``); values are decoded with :mod:`pipelines.decoding`; one
   ``mapInArrow`` pass writes the good rows as data files and the rows that do
   not decode as dead-letter files (Parquet, ``topic=`` / ``date=`` layout of
   :mod:`pipelines.warehouse`) and returns one descriptor per file. Raw loads
   (nothing to decode) take a faster path by default: the data source's planner
   cuts the same splits and each writing task reads its split with the data
   source's reader, so records never go through Spark's row format (see
   :func:`write_ranges`; ``bench/load.py`` measures both). Only URLs, options,
   the run id and the planned splits travel to executors.
4. **Commit on the driver.** One warehouse commit lists every file and the
   per-partition ranges. Files of failed or retried tasks are never collected
   and stay invisible orphans (``warehouse.vacuum`` removes them later). A
   racing run that committed first makes the commit fail with
   :class:`WarehouseError` (overlap); a lost response is settled by reading the
   commit log back.

Data loss: if the log start offset moved past a committed offset (retention
ran before the table loaded the data), the run fails with a
:class:`WarehouseError` naming partition and offsets, unless
``on_data_loss="skip"``: then it starts at the log start offset and the commit
records the gap (``allow_gap``; ``TableState.gaps``).
"""
from __future__ import annotations

import getpass
import hashlib
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.reader import EARLIEST, LATEST, PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics import load_topic

from . import warehouse as wh

log = logging.getLogger(__name__)

ON_DATA_LOSS = ("fail", "skip")
DEFAULT_MAX_BYTES = 128 << 20          # input split size: bounds a task's memory
DEFAULT_MAX_ROWS_PER_FILE = 1_000_000
_DECODE_KEYS = ("value_format", "value_schema", "value_schema_file", "confluent_wire_format",
                "value_schema_id", "flatten", "keep_raw_value")
_RAW_VALUE = "__dl_value"   # the raw value kept next to decoded columns, for dead letters


# ---------------------------------------------------------------------------
# planning (driver)


@dataclass(frozen=True)
class PartitionRange:
    """The planned range of one partition: ``[from_offset, until)``.

    ``initial``: the table had never loaded this partition (``from_offset`` is
    the log start offset). ``gap_from``: with ``on_data_loss="skip"``, the
    committed offset the run skipped from (``[gap_from, from_offset)`` is lost).
    """

    partition: int
    from_offset: int
    until: int
    log_start_offset: int
    high_watermark: int
    initial: bool = False
    gap_from: int | None = None

    @property
    def empty(self) -> bool:
        return self.until <= self.from_offset


def parse_offsets_json(value: str | Mapping | None, topic: str) -> dict[int, int] | None:
    """``{"t": {"0": 10, "1": -1}}`` (Spark Kafka-source JSON, text or mapping) ->
    ``{partition: offset}`` for ``topic``. A mapping of partitions (``{0: 10}``)
    is accepted too. None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f'offsets must be JSON like {{"{topic}": {{"0": 100}}}}: {exc}') from None
    if not isinstance(value, Mapping):
        raise ConfigError(f'offsets must be JSON like {{"{topic}": {{"0": 100}}}}, got {value!r}')
    if value and all(isinstance(v, Mapping) for v in value.values()):
        others = sorted(set(value) - {topic})
        if others:
            raise ConfigError(f"offsets name topic(s) {others}; this load reads only {topic!r}")
        value = value.get(topic, {})
    out: dict[int, int] = {}
    for p, off in value.items():
        try:
            p_i, off_i = int(p), int(off)
        except (TypeError, ValueError):
            raise ConfigError(f"bad offset {off!r} for partition {p!r}: expected integers") from None
        if p_i < 0 or off_i < -2:
            raise ConfigError(f"bad offset {off_i} for partition {p_i}: expected an offset >= 0, "
                              f"-1 (latest) or -2 (earliest)")
        out[p_i] = off_i
    return out


def plan_ranges(storage: Storage, topic: str, committed: Mapping[int, int], *,
                until_offsets: Mapping[int, int] | None = None,
                until_timestamp: int | None = None,
                on_data_loss: str = "fail") -> list[PartitionRange]:
    """Resolve the per-partition ranges of one load (see the module docstring).

    ``committed`` is ``{partition: next offset}`` from the table. Raises
    :class:`WarehouseError` when a committed offset is below the log start
    offset and ``on_data_loss`` is ``"fail"``.
    """
    if on_data_loss not in ON_DATA_LOSS:
        raise ConfigError(f"on_data_loss must be one of {ON_DATA_LOSS}, got {on_data_loss!r}")
    if until_offsets is not None and until_timestamp is not None:
        raise ConfigError("give until_offsets or until_timestamp, not both")
    meta = load_topic(storage, topic)
    if until_offsets is not None:
        bad = sorted(p for p in until_offsets if p >= meta.partitions)
        if bad:
            raise ConfigError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}; "
                              f"end offsets name {bad}")
    out: list[PartitionRange] = []
    for p in range(meta.partitions):
        if until_offsets is not None and p not in until_offsets:
            continue
        reader = PartitionReader(storage, topic, p)
        start, hw = reader.log_start_offset, reader.high_watermark
        upper = reader.last_stable_offset   # read_committed: never past an open transaction
        initial = p not in committed
        from_offset = start if initial else int(committed[p])
        gap_from = None
        if from_offset < start:
            if on_data_loss == "fail":
                raise WarehouseError(
                    f"data loss in {topic}/{p}: the table's next offset is {from_offset} but the "
                    f"log now starts at {start} (offsets [{from_offset}, {start}) were deleted "
                    f"before they were loaded); rerun with `kafkastore load --on-data-loss skip` "
                    f"(on_data_loss: skip in a loads entry) to record the gap and go on")
            gap_from, from_offset = from_offset, start
        if until_offsets is not None:
            want = until_offsets[p]
            until = (upper if want == LATEST else start if want == EARLIEST else min(want, upper))
        elif until_timestamp is not None:
            until = min(reader.offset_for_timestamp(int(until_timestamp)), upper)
        else:
            until = upper
        # An end below the committed offset (an older explicit end): nothing to do here.
        until = max(until, from_offset)
        out.append(PartitionRange(p, from_offset, until, start, hw, initial, gap_from))
    return out


def default_run_id(topic: str, table: str, ranges: list[PartitionRange]) -> str:
    """A run id determined by topic, table and ranges: rerunning one range is recognised."""
    key = json.dumps([topic, table, [(r.partition, r.from_offset, r.until) for r in ranges]])
    return f"load-{topic}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


# ---------------------------------------------------------------------------
# reading (data source)


def read_ranges(spark, root: str, topic: str, ranges: list[PartitionRange], *,
                storage_options: dict | None = None, max_bytes: int | None = None,
                include_headers: bool = True):
    """A DataFrame (Kafka schema, with headers) of exactly the records in ``ranges``,
    through the ``kafkastore`` data source: ``assign`` plus explicit starting and
    ending offsets, so the read does not depend on when it is planned."""
    from .datasource import OffsetRange, ranges_to_options, read_topic

    options = ranges_to_options([OffsetRange(topic, r.partition, r.from_offset, r.until)
                                 for r in ranges])
    if max_bytes:
        options["maxBytesPerPartition"] = str(int(max_bytes))
    return read_topic(spark, root, storage_options=storage_options,
                      includeHeaders=include_headers, failOnDataLoss=True, **options)


def plan_splits(root: str, topic: str, ranges: list[PartitionRange], *,
                storage_options: dict | None = None, max_bytes: int | None = None,
                include_headers: bool = True) -> list[tuple]:
    """The data source's input partitions for exactly ``ranges`` (same planner,
    same options as :func:`read_ranges`): a list of ReadRange tuples, one per split."""
    from .datasource import OffsetRange, parse_options, plan_partitions, ranges_to_options

    options = ranges_to_options([OffsetRange(topic, r.partition, r.from_offset, r.until)
                                 for r in ranges])
    options.update({"root": root, "includeHeaders": "true" if include_headers else "false",
                    "failOnDataLoss": "true"})
    if max_bytes:
        options["maxBytesPerPartition"] = str(int(max_bytes))
    if storage_options:
        options["storageOptions"] = json.dumps(storage_options)
    return [tuple(p.ranges) for p in plan_partitions(parse_options(options))]


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
                    rb = read_range(storage, rr, include_headers=include_headers,
                                    isolation=READ_COMMITTED)
                    if rb.num_rows:
                        yield rb

    return read


# ---------------------------------------------------------------------------
# decoding and writing (executors)


def decode_options(value_format: str | None = "raw", value_schema: str | None = None,
                   value_schema_file: str | None = None, **more: Any):
    """:class:`pipelines.decoding.DecodeOptions` from load keyword arguments."""
    from .decoding import DecodeOptions

    opts = {"value_format": value_format or "raw", "value_schema": value_schema,
            "value_schema_file": value_schema_file}
    opts.update({k: v for k, v in more.items() if v is not None})
    return DecodeOptions.parse(opts)


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
    good_cols = decoding._good_columns(df, dec.combined, opts)
    return dec.combined.select(*good_cols, F.col("value").alias(_RAW_VALUE),
                               F.col(decoding._ERROR).alias("__error")), True


def _json_schema_text(opts) -> str | None:
    if opts.value_format != "json":
        return None
    from .decoding import parse_json_schema

    return parse_json_schema(opts.schema_text()).json()


def file_writer(table_url: str, *, run_id: str, storage_options: dict | None,
                split_dead_letters: bool, json_schema: str | None = None,
                max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE, compression: str = "zstd",
                counter=None):
    """The ``mapInArrow`` function of a load: write each task's rows as Parquet
    (data and, when ``split_dead_letters``, dead-letter files) and yield one
    descriptor per file. ``counter`` is an optional Spark accumulator of
    ``{partition: rows}`` for progress. Takes only plain values: safe on executors.
    """
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from pipelines import warehouse as w
        from pipelines.decoding import DEAD_LETTER_COLUMNS, json_error_detail

        good: list = []
        dead: list = []
        rows = 0
        descriptors: list[dict] = []
        seen: dict[int, int] = {}

        def flush():
            nonlocal good, dead, rows
            if good:
                descriptors.extend(w.write_files(
                    table_url, good, run_id=run_id, storage_options=storage_options,
                    max_rows_per_file=max_rows_per_file, compression=compression))
            if dead:
                descriptors.extend(w.write_files(
                    table_url, dead, run_id=run_id, storage_options=storage_options,
                    kind="dead_letter", max_rows_per_file=max_rows_per_file,
                    compression=compression))
            good, dead, rows = [], [], 0

        for batch in batches:
            if not batch.num_rows:
                continue
            batch = _restore_null_headers(batch)
            for p, n in zip(*_value_counts(batch.column("partition"))):
                seen[p] = seen.get(p, 0) + n
            if split_dead_letters:
                failed = pc.is_valid(batch.column("__error"))
                ok = batch.filter(pc.invert(failed))
                bad = batch.filter(failed)
                if ok.num_rows:
                    good.append(ok.drop_columns([_RAW_VALUE, "__error"]))
                if bad.num_rows:
                    dead.append(_dead_letter_batch(bad, json_schema, json_error_detail,
                                                   DEAD_LETTER_COLUMNS, pa))
            else:
                good.append(batch)
            rows += batch.num_rows
            if rows >= max_rows_per_file:
                flush()
        flush()
        if counter is not None and seen:
            counter.add(seen)
        if descriptors:
            yield pa.RecordBatch.from_pylist(descriptors, schema=w.descriptor_schema())

    return run


def _value_counts(column):
    import pyarrow.compute as pc

    counts = pc.value_counts(column)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


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


def write_frame(df, table: wh.Table, run_id: str, opts, *, counter=None,
                max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
                compression: str = "zstd") -> list[wh.DataFile]:
    """Decode ``df`` (Kafka schema), write it under ``table`` on the executors,
    and return the written files (data and dead letters), not yet committed."""
    frame, split = _decoded_frame(df, opts)
    frame = _headers_never_null(frame)
    fn = file_writer(table.url, run_id=run_id, storage_options=table.storage_options or None,
                     split_dead_letters=split, json_schema=_json_schema_text(opts) if split else None,
                     max_rows_per_file=max_rows_per_file, compression=compression,
                     counter=counter)
    rows = frame.mapInArrow(fn, wh.FILE_DESCRIPTOR_DDL).collect()
    files = [wh.DataFile.from_json(r.asDict()) for r in rows]
    check_disjoint(files)
    return files


def write_splits(spark, splits: list[tuple], root: str, table: wh.Table, run_id: str, *,
                 storage_options: dict | None = None, counter=None,
                 max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
                 compression: str = "zstd") -> list[wh.DataFile]:
    """Raw loads: one Spark task per split reads it (the data source's reader) and
    writes it, in the same Python worker. Only descriptors cross into the JVM."""
    read = split_reader(root, storage_options, splits)
    write = file_writer(table.url, run_id=run_id, storage_options=table.storage_options or None,
                        split_dead_letters=False, max_rows_per_file=max_rows_per_file,
                        compression=compression, counter=counter)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        yield from write(read(batches))

    n = len(splits)
    if not n:
        return []
    # range(0, n) in n slices: exactly one split number per task.
    rows = spark.range(0, n, 1, n).mapInArrow(run, wh.FILE_DESCRIPTOR_DDL).collect()
    files = [wh.DataFile.from_json(r.asDict()) for r in rows]
    check_disjoint(files)
    return files


READ_PATHS = ("auto", "datasource", "splits")


def write_ranges(spark, root: str, topic: str, ranges: list[PartitionRange], table: wh.Table,
                 run_id: str, opts, *, storage_options: dict | None = None,
                 max_bytes: int | None = None, counter=None,
                 max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE, compression: str = "zstd",
                 read_path: str = "auto") -> list[wh.DataFile]:
    """Read exactly ``ranges`` of ``topic``, decode, write under ``table``; return
    the files (not committed).

    ``read_path``: ``datasource`` reads through ``spark.read.format("kafkastore")``
    and decodes in Spark SQL; ``splits`` plans the same splits with the data
    source's planner and reads them inside the writing task, skipping Spark's
    row conversion both ways (about 2-3x faster; raw values only, since decoding
    needs Spark SQL); ``auto`` takes ``splits`` for raw and ``datasource`` otherwise.
    """
    if read_path not in READ_PATHS:
        raise ConfigError(f"read_path must be one of {READ_PATHS}, got {read_path!r}")
    max_bytes = max_bytes or DEFAULT_MAX_BYTES
    if read_path == "splits" and opts.value_format != "raw":
        raise ConfigError("read_path='splits' loads raw values only; decoding needs the "
                          "data source path")
    if read_path == "splits" or (read_path == "auto" and opts.value_format == "raw"):
        splits = plan_splits(root, topic, ranges, storage_options=storage_options,
                             max_bytes=max_bytes)
        return write_splits(spark, splits, root, table, run_id, storage_options=storage_options,
                            counter=counter, max_rows_per_file=max_rows_per_file,
                            compression=compression)
    df = read_ranges(spark, root, topic, ranges, storage_options=storage_options,
                     max_bytes=max_bytes)
    return write_frame(df, table, run_id, opts, counter=counter,
                       max_rows_per_file=max_rows_per_file, compression=compression)


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


def check_disjoint(files: list[wh.DataFile]) -> None:
    """Refuse to commit two files of one kind holding the same offset of one partition.

    Spark discards the output of failed and duplicate task attempts, so this
    never fires unless something upstream double-reads; it is cheap insurance
    for the exactly-once promise.
    """
    by_tp: dict[tuple[str, int, str], list[wh.DataFile]] = {}
    for f in files:
        # Data and dead-letter files interleave in offsets; within a kind they never may.
        by_tp.setdefault((f.topic, f.partition, f.kind), []).append(f)
    for tp, fs in by_tp.items():
        fs.sort(key=lambda f: f.min_offset)
        for a, b in zip(fs, fs[1:]):
            if b.min_offset <= a.max_offset:
                raise WarehouseError(
                    f"{tp[0]}/{tp[1]}: written {tp[2]} files {a.path} and {b.path} overlap (offsets "
                    f"{a.min_offset}..{a.max_offset} and {b.min_offset}..{b.max_offset}); "
                    f"not committing")


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

    def __init__(self, spark, label: str, interval_s: float = 10.0, out=None):
        from pyspark.accumulators import AccumulatorParam

        param = type("_DictSumParam", (_DictSum, AccumulatorParam), {})()
        self.counter = spark.sparkContext.accumulator({}, param)
        self._sc = spark.sparkContext
        self._label = label
        self._interval = interval_s
        self._out = out or sys.stderr
        self._stop = threading.Event()
        self._started = time.monotonic()
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
        secs = max(time.monotonic() - self._started, 1e-9)
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


# ---------------------------------------------------------------------------
# the job


@dataclass
class LoadSummary:
    """What a load did. ``noop``: nothing committed (run id already committed,
    or nothing new to load). ``ranges``: per partition ``(from, until)``;
    ``rows`` / ``dead_letters`` / ``bytes`` per partition in ``per_partition``."""

    topic: str
    table: str
    run_id: str
    version: int | None = None
    noop: bool = False
    reason: str = ""
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)
    rows: int = 0
    dead_letters: int = 0
    bytes: int = 0
    files: int = 0
    seconds: float = 0.0
    gaps: list[dict[str, int]] = field(default_factory=list)
    initial: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for Airflow's XCom)."""
        return {"topic": self.topic, "table": self.table, "run_id": self.run_id,
                "version": self.version, "noop": self.noop, "reason": self.reason,
                "ranges": {str(p): list(r) for p, r in self.ranges.items()},
                "per_partition": {str(p): v for p, v in self.per_partition.items()},
                "rows": self.rows, "dead_letters": self.dead_letters, "bytes": self.bytes,
                "files": self.files, "seconds": round(self.seconds, 3), "gaps": self.gaps,
                "initial": {str(p): o for p, o in self.initial.items()}}

    def render(self) -> str:
        """Human-readable summary, one line per partition."""
        head = f"load {self.topic} -> {self.table} (run {self.run_id})"
        if self.noop:
            return f"{head}: nothing to do: {self.reason}"
        lines = [f"{head}: committed version {self.version} in {self.seconds:.1f}s: "
                 f"{self.rows} rows, {self.dead_letters} dead letters, {self.files} files, "
                 f"{self.bytes} bytes ({self.rows / max(self.seconds, 1e-9):,.0f} records/s)"]
        for p, (a, b) in sorted(self.ranges.items()):
            c = self.per_partition.get(p, {})
            note = " (first load: from the log start)" if p in self.initial else ""
            lines.append(f"  partition {p}: [{a}, {b}) {c.get('rows', 0)} rows, "
                         f"{c.get('dead_letters', 0)} dead letters{note}")
        for g in self.gaps:
            lines.append(f"  GAP partition {g['partition']}: offsets [{g['from']}, {g['until']}) "
                         f"were deleted from the log before being loaded")
        return "\n".join(lines)


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:   # no passwd entry (containers): the audit field stays empty
        return None


def run_load(spark, *, root: str, topic: str, warehouse: "str | Storage", table: str,
             run_id: str | None = None, until_offsets: str | Mapping | None = None,
             until_timestamp: int | None = None, value_format: str | None = "raw",
             value_schema: str | None = None, value_schema_file: str | None = None,
             decode: Mapping[str, Any] | None = None,
             storage_options: dict | None = None, max_bytes_per_partition: int | None = None,
             max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE, compression: str = "zstd",
             on_data_loss: str = "fail", read_path: str = "auto", progress: bool = True,
             progress_interval_s: float = 10.0, now_ms: int | None = None) -> LoadSummary:
    """Load ``topic`` (under ``root``) into ``warehouse``/``table``, exactly once.

    See the module docstring for how the range is chosen. ``until_offsets``:
    Spark Kafka JSON (``{"t": {"0": 100}}``) or ``{partition: offset}``;
    ``until_timestamp``: epoch ms, load records before it. ``decode``: more
    decoder options (:mod:`pipelines.decoding`). ``read_path``: see
    :func:`write_ranges`. ``storage_options`` serve both
    the log and the warehouse; ``warehouse`` may also be a
    :class:`~kafkastore.storage.Storage` (the driver commits through it, e.g. a
    fault-injecting one in tests; executors write through its URL and options).
    Returns a :class:`LoadSummary`; raises
    :class:`WarehouseError` when the commit is refused (a racing run committed
    first) or data was lost (unless ``on_data_loss="skip"``).
    """
    started = time.monotonic()
    opts = decode_options(value_format, value_schema, value_schema_file, **dict(decode or {}))
    storage = Storage(root, storage_options)
    tbl = wh.Table(warehouse, table, storage_options=storage_options)
    state = tbl.state()
    if run_id is not None and run_id in state.runs:
        return LoadSummary(topic, table, run_id, state.runs[run_id].version, noop=True,
                           reason=f"run id already committed at version {state.runs[run_id].version}",
                           seconds=time.monotonic() - started)
    committed = {p: n for (t, p), n in state.committed_offsets().items() if t == topic}
    ranges = plan_ranges(storage, topic, committed,
                         until_offsets=parse_offsets_json(until_offsets, topic),
                         until_timestamp=until_timestamp, on_data_loss=on_data_loss)
    todo = [r for r in ranges if not r.empty]
    run_id = run_id or default_run_id(topic, table, todo)
    summary = LoadSummary(topic, table, run_id,
                          ranges={r.partition: (r.from_offset, r.until) for r in todo},
                          initial={r.partition: r.from_offset for r in todo if r.initial},
                          gaps=[{"partition": r.partition, "from": r.gap_from,
                                 "until": r.from_offset} for r in todo if r.gap_from is not None])
    if run_id in state.runs:
        summary.version, summary.noop = state.runs[run_id].version, True
        summary.reason = f"this range was committed at version {summary.version}"
        summary.seconds = time.monotonic() - started
        return summary
    if not todo:
        summary.noop, summary.reason = True, "no new records"
        summary.seconds = time.monotonic() - started
        return summary

    tracker = Progress(spark, f"load {topic} -> {table}", progress_interval_s) if progress else None
    if tracker:
        tracker.start()
        _log_plan(topic, table, run_id, todo)
    try:
        files = write_ranges(spark, root, topic, todo, tbl, run_id, opts,
                             storage_options=storage_options, max_bytes=max_bytes_per_partition,
                             counter=tracker.counter if tracker else None,
                             max_rows_per_file=max_rows_per_file, compression=compression,
                             read_path=read_path)
    finally:
        if tracker:
            tracker.stop()
    _tally(summary, files)
    info = {"ranges_planned_at_ms": int(time.time() * 1000), "rows": summary.rows,
            "dead_letters": summary.dead_letters, "bytes": summary.bytes,
            "per_partition": {str(p): v for p, v in summary.per_partition.items()},
            "initial": {str(p): o for p, o in summary.initial.items()},
            "gaps": summary.gaps, "value_format": opts.value_format,
            "max_bytes_per_partition": max_bytes_per_partition or DEFAULT_MAX_BYTES}
    if until_timestamp is not None:
        info["until_timestamp"] = int(until_timestamp)
    commit = wh.Commit.load(run_id, files, {(topic, r.partition): (r.from_offset, r.until)
                                            for r in todo},
                            now_ms=int(time.time() * 1000) if now_ms is None else int(now_ms),
                            user=_user(), allow_gap=bool(summary.gaps), info=info)
    try:
        result = tbl.commit(commit)
    except WarehouseError as exc:
        # Typically a racing run committed these offsets first.
        raise WarehouseError(f"load of {topic} into {table} (run {run_id}) refused: {exc}. Its "
                             f"files stay invisible; rerun to load from the committed "
                             f"offsets") from None
    summary.version = result.version
    if result.noop:
        summary.noop = True
        summary.reason = f"run id committed by an earlier attempt at version {result.version}"
    summary.seconds = time.monotonic() - started
    return summary


def _log_plan(topic, table, run_id, todo):
    parts = ", ".join(f"p{r.partition} [{r.from_offset}, {r.until})" for r in todo)
    print(f"load {topic} -> {table} (run {run_id}): {parts}", file=sys.stderr, flush=True)


def _tally(summary: LoadSummary, files: list[wh.DataFile]) -> None:
    for p in summary.ranges:
        summary.per_partition[p] = {"rows": 0, "dead_letters": 0, "bytes": 0, "files": 0}
    for f in files:
        c = summary.per_partition.setdefault(f.partition, {"rows": 0, "dead_letters": 0,
                                                           "bytes": 0, "files": 0})
        c["rows" if f.kind == "data" else "dead_letters"] += f.rows
        c["bytes"] += f.bytes
        c["files"] += 1
    summary.rows = sum(c["rows"] for c in summary.per_partition.values())
    summary.dead_letters = sum(c["dead_letters"] for c in summary.per_partition.values())
    summary.bytes = sum(c["bytes"] for c in summary.per_partition.values())
    summary.files = len(files)


# ---------------------------------------------------------------------------
# entry points: CLI and Airflow


def load_options_from_args(args, cfg) -> dict[str, Any]:
    """``run_load`` keyword arguments from the CLI's ``load`` arguments and the
    config file (its ``loads`` entry for the topic fills what flags leave out)."""
    entry = dict(cfg.load_for(args.topic, getattr(args, "table", None)) or {})
    if not entry and not getattr(args, "table", None):
        entry = dict(cfg.load_for(args.topic) or {})
    table = getattr(args, "table", None) or entry.get("table")
    if not table:
        raise ConfigError(f"give --table, or add a 'loads' entry for topic {args.topic!r} with a "
                          f"table to the config file")
    fmt = getattr(args, "value_format", None)
    schema = getattr(args, "value_schema", None)
    schema_file = getattr(args, "value_schema_file", None)
    if fmt is None and schema is None and schema_file is None:
        fmt = entry.get("value_format")
        schema, schema_file = entry.get("value_schema"), entry.get("value_schema_file")
    extra = {k: entry[k] for k in _DECODE_KEYS[3:] if entry.get(k) is not None}
    return {
        "root": cfg.root, "topic": args.topic,
        "warehouse": getattr(args, "warehouse", None) or cfg.warehouse, "table": table,
        "run_id": getattr(args, "run_id", None),
        "until_offsets": getattr(args, "until_offsets", None),
        "until_timestamp": getattr(args, "until_timestamp", None),
        "value_format": fmt or "raw", "value_schema": schema, "value_schema_file": schema_file,
        "decode": extra or None, "storage_options": dict(cfg.storage_options or {}) or None,
        "on_data_loss": getattr(args, "on_data_loss", None) or entry.get("on_data_loss", "fail"),
    }


def load_for_interval(root: str, topic: str, warehouse: str, table: str,
                      data_interval_end_ms: int, run_id: str | None = None, *,
                      value_format: str | None = "raw", value_schema: str | None = None,
                      value_schema_file: str | None = None,
                      storage_options: dict | None = None, on_data_loss: str = "fail",
                      master: str | None = None, spark_conf: Mapping[str, Any] | None = None,
                      conf_file: str | None = None) -> dict[str, Any]:
    """For Airflow: load the records with timestamp < ``data_interval_end_ms``.

    Plain arguments in, a plain dict (:meth:`LoadSummary.to_dict`) out; creates
    (or reuses) the process's SparkSession with :func:`pipelines.session.get_spark`.
    Pass the DAG run's id as ``run_id`` so a retried task is a no-op once its
    commit landed. Records that arrive late (timestamp before an interval
    already loaded) are loaded by the next interval: ranges are by offset.
    """
    from .session import get_spark

    spark = get_spark(master=master, app_name=f"kafkastore-load-{table}",
                      extra_conf=spark_conf, conf_file=conf_file)
    summary = run_load(spark, root=root, topic=topic, warehouse=warehouse, table=table,
                       run_id=run_id, until_timestamp=int(data_interval_end_ms),
                       value_format=value_format, value_schema=value_schema,
                       value_schema_file=value_schema_file, storage_options=storage_options,
                       on_data_loss=on_data_loss, progress=False)
    log.info("%s", summary.render())
    return summary.to_dict()
