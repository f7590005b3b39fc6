"""The DataFrame behind each view :func:`pipelines.sql.query.register_views` registers: a topic,
one snapshot of an Iceberg table (read by Spark from the files, or by pyiceberg to Arrow),
and the metadata views (``kafkastore_offsets``, ``warehouse_offsets``,
``warehouse_snapshots``, ``warehouse_files``). See :mod:`pipelines.sql.query` on how a table is read.
"""
from __future__ import annotations

import contextlib
import decimal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kafkastore.errors import ConfigError, UnsupportedDeletesError, WarehouseError
from kafkastore.storage import Storage
from kafkastore.topics.admin import describe_topic

from ..warehouse import field_ids
from ..warehouse.catalog import name_of, table_fs
from ..warehouse.properties import OPERATION_KEY, RUN_ID_KEY
from ..warehouse.reads import missing_file
from ..warehouse.snapshots import main_ancestry, snapshot_offsets, summary_of

OFFSETS_DDL = "topic string, partition int, log_start_offset bigint, high_watermark bigint"
WAREHOUSE_OFFSETS_DDL = ("table string, topic string, partition int, committed_offset bigint, "
                         "snapshot_id bigint, committed_ms bigint")
SNAPSHOTS_DDL = ("table string, snapshot_id bigint, parent_id bigint, committed_ms bigint, "
                 "operation string, kafkastore_operation string, run_id string, in_main boolean, "
                 "refs array<string>, summary map<string, string>")
FILES_DDL = ("table string, snapshot_id bigint, path string, records bigint, bytes bigint, "
             "delete_files int")


@dataclass
class TableRead:
    """One table as a view reads it: the pyiceberg table and the snapshot chosen."""

    name: str
    table: Any
    snapshot: Any
    schema: Any
    note: str


def topic_frame(spark, root: str, topic: str, storage_options: dict):
    # lazy: pyspark: the SQL module imports Spark only when a query runs
    from ..source.datasource import read_topic

    return read_topic(spark, root, topic, storage_options=storage_options or None,
                      includeHeaders=True)


def table_frame(spark, table, snapshot, schema=None):
    """A DataFrame over one snapshot of an Iceberg table (see the module
    docstring on how it is read). ``schema``: the Iceberg schema to read with
    (default: the table's current one). Columns resolve by Iceberg field id
    (:mod:`pipelines.warehouse.field_ids`): renamed, dropped, re-added and promoted
    columns read as every Iceberg reader reads them."""
    schema = schema or table.schema()
    ddl = spark_ddl(schema)
    if snapshot is None:
        return spark.createDataFrame([], ddl)
    tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
    if not tasks:
        return spark.createDataFrame([], ddl)
    name = name_of(table)
    urls = [t.file.file_path for t in tasks]
    if any(t.delete_files for t in tasks) or not all(u.startswith("file:") for u in urls):
        return _arrow_frame(spark, table, snapshot, schema, tasks, ddl)
    with _unreadable(name, snapshot):
        if not field_ids.needs_field_ids(table.metadata, schema):
            # The common path: no name or type ever changed, so names are ids.
            return spark.read.schema(ddl).parquet(*urls)
        files = [(t.file.file_path, frozenset(t.file.column_sizes or {})
                  | frozenset(t.file.value_counts or {})) for t in tasks]
        plan = field_ids.plan_reads(schema, field_ids.NameIds.of(table.metadata, schema), files,
                                    lambda u: _footer_schema(table, snapshot, u), _spark_type)
        frames = [_group_frame(spark, g) for g in plan.groups]
    if plan.arrow:
        frames.append(_arrow_frame(spark, table, snapshot, schema,
                                   [tasks[i] for i in plan.arrow], ddl))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


@contextlib.contextmanager
def _unreadable(name: str, snapshot):
    """Spark's failure to open a planned file (e.g. deleted behind Iceberg's back) as
    one line."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise WarehouseError(f"table {name} snapshot {snapshot.snapshot_id}: cannot read "
                             f"its data files: {first}") from None


def _footer_schema(table, snapshot, url: str):
    """A data file's Arrow schema (its Parquet footer, field ids in the field metadata)."""
    import pyarrow.parquet as pq

    fs, path = table_fs(table, url)
    try:
        with fs.open(path, "rb") as f:
            return pq.read_schema(f)
    except FileNotFoundError as exc:
        raise missing_file(table, snapshot.snapshot_id, exc) from None


def _group_frame(spark, group):
    """Files that read alike, read by Spark with their own column names and types and
    projected to the read schema (renamed, cast, nulls for columns they lack)."""
    from pyspark.sql import functions as F

    if group.columns:
        df = spark.read.schema(", ".join(f"`{n}` {t}" for n, t in group.columns)).parquet(
            *group.urls)
    else:   # none of the read schema's columns: only the row count matters
        df = spark.read.parquet(*group.urls)
    cols = []
    for name, column, cast in group.select:
        c = F.lit(None) if column is None else F.col(f"`{column}`")
        cols.append((c.cast(cast) if cast else c).alias(name))
    return df.select(*cols)


def _arrow_frame(spark, table, snapshot, schema, tasks, ddl):
    """``tasks`` read on the driver by pyiceberg's Arrow reader with ``schema`` (by field
    id at every depth; positional deletes applied, what it cannot apply refused)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    try:
        arrow = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks)
    except FileNotFoundError as exc:
        raise missing_file(table, snapshot.snapshot_id, exc) from None
    except NotImplementedError as exc:
        raise UnsupportedDeletesError(f"table {name_of(table)} snapshot "
                                      f"{snapshot.snapshot_id}: {exc}") from None
    if arrow.num_rows == 0:
        return spark.createDataFrame([], ddl)
    return spark.createDataFrame(arrow, ddl)


def spark_ddl(schema) -> str:
    """Spark DDL for an Iceberg schema (``timestamptz`` -> ``timestamp``)."""
    return ", ".join(f"`{f.name}` {_spark_type(f.field_type)}" for f in schema.fields)


_PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float",
               "double": "double", "date": "date", "string": "string", "uuid": "string",
               "binary": "binary", "timestamptz": "timestamp", "timestamp": "timestamp_ntz",
               "timestamptz_ns": "timestamp", "timestamp_ns": "timestamp_ntz", "time": "bigint"}


def _spark_type(t) -> str:
    from pyiceberg import types as it

    if isinstance(t, it.StructType):
        return "struct<" + ", ".join(f"`{f.name}`: {_spark_type(f.field_type)}"
                                     for f in t.fields) + ">"
    if isinstance(t, it.ListType):
        return f"array<{_spark_type(t.element_type)}>"
    if isinstance(t, it.MapType):
        return f"map<{_spark_type(t.key_type)}, {_spark_type(t.value_type)}>"
    if isinstance(t, it.DecimalType):
        return f"decimal({t.precision}, {t.scale})"
    if isinstance(t, it.FixedType):
        return "binary"
    name = str(t)
    if name not in _PRIMITIVES:
        raise ConfigError(f"Iceberg type {name} has no Spark equivalent here")
    return _PRIMITIVES[name]


def offsets_frame(spark, root: str | None, topics: list[str], storage_options: dict):
    rows = []
    if root and topics:
        storage = Storage(root, storage_options)
        with ThreadPoolExecutor(max_workers=min(8, len(topics))) as pool:
            infos = list(pool.map(lambda t: describe_topic(storage, t), topics))
        for info in infos:
            rows += [(info.name, o.partition, o.log_start_offset, o.high_watermark)
                     for o in info.offsets]
    return spark.createDataFrame(rows, OFFSETS_DDL)


def _with_time(df, column: str, alias: str):
    cols = [f"`{c}`" if c != column else f"timestamp_millis(`{c}`) AS {alias}"
            for c in df.columns]
    return df.selectExpr(*cols)


def warehouse_offsets_frame(spark, reads: dict[str, TableRead]):
    rows = []
    for name, r in sorted(reads.items()):
        snap = next((s for s in main_ancestry(r.table, r.snapshot)
                     if snapshot_offsets(s) is not None), None)
        if snap is None:
            continue
        for (topic, p), o in sorted(snapshot_offsets(snap).items()):
            rows.append((name, topic, p, o, snap.snapshot_id, snap.timestamp_ms))
    return _with_time(spark.createDataFrame(rows, WAREHOUSE_OFFSETS_DDL), "committed_ms",
                      "committed_at")


def snapshots_frame(spark, loaded: dict[str, Any]):
    rows = []
    for name, table in sorted(loaded.items()):
        main = {s.snapshot_id for s in main_ancestry(table)}
        refs: dict[int, list[str]] = {}
        for ref, r in table.refs().items():
            refs.setdefault(r.snapshot_id, []).append(ref)
        for s in table.snapshots():
            summary = summary_of(s)
            rows.append((name, s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms,
                         summary.get("operation"), summary.get(OPERATION_KEY),
                         summary.get(RUN_ID_KEY), s.snapshot_id in main,
                         sorted(refs.get(s.snapshot_id, [])), summary))
    return _with_time(spark.createDataFrame(rows, SNAPSHOTS_DDL), "committed_ms", "committed_at")


def files_frame(spark, reads: dict[str, TableRead]):
    rows = []
    for name, r in sorted(reads.items()):
        if r.snapshot is None:
            continue
        for t in r.table.scan(snapshot_id=r.snapshot.snapshot_id).plan_files():
            rows.append((name, r.snapshot.snapshot_id, t.file.file_path, t.file.record_count,
                         t.file.file_size_in_bytes, len(t.delete_files)))
    return spark.createDataFrame(rows, FILES_DDL)
