"""Spark SQL over topics and Iceberg warehouse tables: temporary views and ``kafkastore sql``.

:func:`register_views` registers, in one SparkSession:

=================================  ==========================================================
view                               holds
=================================  ==========================================================
``<topic>``, ``topic_<topic>``     the topic, through the ``kafkastore`` data source (Spark's
                                   Kafka schema, ``headers`` included); read when queried
``<table>``, ``table_<table>``     one snapshot of the Iceberg table (the current one of
                                   ``main``, or the one time travel asks for)
``<table>_dead_letters``           the dead-letter table, itself an Iceberg table
``<table>_validated``              the table as of its ``validated`` tag: only rows of loads
                                   whose quality checks passed (see docs/DECISIONS.md);
                                   empty while no load passed
``kafkastore_offsets``             ``topic, partition, log_start_offset, high_watermark``
``warehouse_offsets``              ``table, topic, partition, committed_offset, snapshot_id,
                                   committed_at``: the ``kafkastore.offsets`` of the snapshot
                                   read (the newest carrying them in its ancestry)
``warehouse_snapshots``            ``table, snapshot_id, parent_id, committed_at, operation,
                                   kafkastore_operation, run_id, in_main, refs, summary``:
                                   every snapshot of every table (summary as a map)
``warehouse_files``                ``table, snapshot_id, path, records, bytes,
                                   delete_files``: the data files planned for the snapshot
                                   read
views in ``sql/views/*.sql``       e.g. ``load_lag``, ``dead_letters_per_table``, built on
                                   the views above
=================================  ==========================================================

Naming. Tables of the ``default`` namespace are named as they are
(``order_events``); tables of another namespace ``ns`` as ``ns.name``. Topic
and table names may hold ``.`` and ``-``; a view name is the name with every
character outside ``[A-Za-z0-9_]`` replaced by ``_`` (and a leading ``_``
before a digit). Spark compares view names case-insensitively. When two views
want the same name, the first claim in this order wins: built-in views (those
above and those of ``sql/views``), the aliases ``table_<t>`` and
``topic_<t>``, table names, ``<table>_validated``, topic names. So on a
topic/table collision **the table keeps the plain name** and the topic is
reachable as ``topic_<name>``. The aliases always exist: when even an alias
is taken (two names that sanitize alike), it gets a ``_2``, ``_3``, ...
suffix. :func:`register_views` returns what each view name holds.

Reading tables. A view reads exactly one snapshot: the data files pyiceberg
plans for it (:mod:`pipelines.warehouse.reads`), never a directory listing, so
uncommitted, replaced or expired files are never read. When every planned file
is on ``file://`` and none has delete files, Spark reads the Parquet files
itself with the snapshot's Iceberg schema (columns a file lacks are null):
scalable, the files never pass through the driver. Otherwise (``s3://`` and
other object stores, which this Spark cannot read without ``s3a``; files with
positional deletes) pyiceberg reads the snapshot to Arrow on the driver,
applying the deletes (equality deletes are refused with an error), and hands
it to Spark; that suits tables up to a few GB. A view is the snapshot chosen at
registration; ``run_sql`` registers again for every call.

Columns resolve by Iceberg field id, as every Iceberg reader's do
(:mod:`pipelines.warehouse.field_ids`): after another engine renamed a column, dropped
one and added another under its name, or promoted ``int`` to ``long`` or
``float`` to ``double``, a view reads the old files' values under the new
names and types, and nulls for a re-added column in files written before it.
Spark matches Parquet columns by name, so it reads the files directly only
while no name or type of the schema read ever changed (checked from table
metadata: the common path costs nothing more); otherwise the files are grouped
by how their columns resolve and each group is read by Spark under its own
column names and projected, and a file whose nested columns differ is read by
pyiceberg's Arrow reader.

Time travel (:class:`~pipelines.warehouse.snapshots.AsOf`): ``as_of_snapshot`` reads
the one table holding that snapshot id as of it (an id no table holds is an
error); ``as_of_timestamp`` reads every table and dead-letter table as of its
newest ``main`` snapshot at or before that time (empty when the table had
none then; an :class:`~kafkastore.errors.ExpiredSnapshotError` naming the
oldest snapshot left when vacuum expired the one it had then, see
:func:`pipelines.warehouse.snapshots.snapshot_as_of`). ``<table>_validated`` always reads the tag as it is now, and
topics are always read as they are now (the log has no history).

:func:`run_sql` registers the views a query needs (names it mentions, plus
the dependencies of ``sql/views``; everything for ``SHOW ...``), runs one
statement or several separated by ``;`` and prints each result as a text
table or as JSON lines (binary as UTF-8 text, or ``{"base64": ...}`` when not
UTF-8; timestamps ISO 8601 in UTC).
"""
from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import decimal
import json
import logging
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, TextIO

from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.storage import Storage
from kafkastore.topics import describe_topic, list_topics

from .spec.table_layout import DEAD_LETTERS_SUFFIX
from .warehouse.catalog import Warehouse, name_of, table_fs
from .warehouse.properties import OPERATION_KEY, RUN_ID_KEY, VALIDATED_TAG
from .warehouse.reads import missing_file
from .warehouse.snapshots import (AsOf, main_ancestry, parse_snapshot_id, parse_timestamp,
                                  select_snapshot, snapshot_offsets, summary_of)

log = logging.getLogger(__name__)

SQL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sql")
VIEWS_DIR = os.path.join(SQL_DIR, "views")
META_VIEWS = ("kafkastore_offsets", "warehouse_offsets", "warehouse_snapshots", "warehouse_files")

OFFSETS_DDL = "topic string, partition int, log_start_offset bigint, high_watermark bigint"
WAREHOUSE_OFFSETS_DDL = ("table string, topic string, partition int, committed_offset bigint, "
                         "snapshot_id bigint, committed_ms bigint")
SNAPSHOTS_DDL = ("table string, snapshot_id bigint, parent_id bigint, committed_ms bigint, "
                 "operation string, kafkastore_operation string, run_id string, in_main boolean, "
                 "refs array<string>, summary map<string, string>")
FILES_DDL = ("table string, snapshot_id bigint, path string, records bigint, bytes bigint, "
             "delete_files int")

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VIEW_NAME = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:GLOBAL\s+)?TEMP(?:ORARY)?\s+VIEW\s+"
                        r"(?:IF\s+NOT\s+EXISTS\s+)?`?([A-Za-z_][A-Za-z0-9_]*)`?", re.IGNORECASE)
_TABLE_CELL_MAX = 120       # characters per cell in table output; longer values end in "..."
_WIDTH_SAMPLE = 1000        # rows buffered to size the table columns before streaming the rest

# Views registered by the last register_views call per session, to drop stale ones.
_REGISTERED: dict[int, set[str]] = {}


def sanitize(name: str) -> str:
    """A SQL identifier for a topic or table name: ``web.clicks-v2`` -> ``web_clicks_v2``."""
    ident = _NON_IDENT.sub("_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    return ident


def is_dead_letter_table(name: str) -> bool:
    return name.endswith(DEAD_LETTERS_SUFFIX)


# ---------------------------------------------------------------------------
# naming


@dataclass(frozen=True)
class _Claim:
    name: str          # wanted view name
    kind: str          # topic | table | validated | meta
    source: str        # topic or table name
    alias: bool        # aliases must exist: suffix on collision instead of skipping


def _claims(topics: list[str], tables: list[str], builtin: Iterable[str]) -> list[_Claim]:
    """Every view anyone wants, in precedence order (first claim of a name wins)."""
    out = [_Claim(n, "meta", n, False) for n in builtin]
    out += [_Claim(f"table_{sanitize(t)}", "table", t, True) for t in sorted(tables)]
    out += [_Claim(f"topic_{sanitize(t)}", "topic", t, True) for t in sorted(topics)]
    out += [_Claim(sanitize(t), "table", t, False) for t in sorted(tables)]
    out += [_Claim(f"{sanitize(t)}_validated", "validated", t, False) for t in sorted(tables)
            if not is_dead_letter_table(t)]
    out += [_Claim(sanitize(t), "topic", t, False) for t in sorted(topics)]
    return out


def plan_names(topics: Iterable[str], tables: Iterable[str],
               builtin: Iterable[str] = META_VIEWS) -> dict[str, tuple[str, str]]:
    """``{view name: (kind, topic or table name)}`` after resolving collisions
    (see the module docstring). Pure: no Spark, no storage."""
    taken: dict[str, tuple[str, str]] = {}
    lower: set[str] = set()
    for c in _claims(list(topics), list(tables), builtin):
        name = c.name
        if name.lower() in lower:
            if not c.alias:
                log.info("view name %r is taken; %s %r stays reachable under its alias",
                         name, c.kind, c.source)
                continue
            n = 2
            while f"{c.name}_{n}".lower() in lower:
                n += 1
            name = f"{c.name}_{n}"
        taken[name] = (c.kind, c.source)
        lower.add(name.lower())
    return taken


# ---------------------------------------------------------------------------
# statements and sql/ files


def split_statements(text: str) -> list[str]:
    """Split SQL text on ``;`` outside quotes (``'``, ``"``, backticks) and comments.

    Comments stay with their statement; statements holding only comments and
    whitespace are dropped.
    """
    out, buf, i, n = [], [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            buf.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            buf.append(text[i:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            buf.append(text[i:j])
            i = j
        elif ch == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(ch)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if _strip_comments(s).strip()]


def _strip_comments(sql: str) -> str:
    """The text with comments and quoted strings blanked (for scanning identifiers)."""
    out, i, n = [], 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def referenced_names(sql: str) -> set[str]:
    """Lower-cased words of ``sql`` outside strings and comments (a superset of the
    views it reads; backticked names count too)."""
    return {w.lower() for w in _WORD.findall(_strip_comments(sql))}


def read_sql_files(directory: str) -> list[tuple[str, str]]:
    """``[(file name, text)]`` of the ``*.sql`` files in ``directory``, sorted by name."""
    if not directory or not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".sql"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out.append((name, f.read()))
    return out


@dataclass(frozen=True)
class _SqlView:
    name: str
    statement: str
    needs: frozenset[str]


def _sql_views(directory: str | None) -> list[_SqlView]:
    """The views defined by ``CREATE ... TEMPORARY VIEW`` statements in ``directory``."""
    out = []
    for fname, text in read_sql_files(directory or ""):
        for stmt in split_statements(text):
            m = _VIEW_NAME.search(_strip_comments(stmt))
            if not m:
                raise ConfigError(f"{os.path.join(directory, fname)}: every statement must be "
                                  f"CREATE OR REPLACE TEMPORARY VIEW name AS ...")
            out.append(_SqlView(m.group(1), stmt, frozenset(referenced_names(stmt))))
    return out


# ---------------------------------------------------------------------------
# registration


@dataclass
class _Read:
    """One table as a view reads it: the pyiceberg table and the snapshot chosen."""

    name: str
    table: Any
    snapshot: Any
    schema: Any
    note: str


def register_views(spark, root: str | None, warehouse: str | None,
                   storage_options: dict | None = None, *, only: Iterable[str] | None = None,
                   views_dir: str | None = VIEWS_DIR, catalog: Mapping[str, Any] | None = None,
                   as_of_snapshot: int | str | None = None,
                   as_of_timestamp: int | str | None = None) -> dict[str, str]:
    """Register topics, tables and the built-in views as temporary views.

    ``root`` / ``warehouse``: storage URLs (either may be None to skip it).
    ``catalog``: the config file's ``catalog:`` properties (None: the embedded
    default). ``only``: view names (lower case) to register, e.g. the words of
    a query; the views they build on come along. None registers everything.
    ``views_dir``: the ``*.sql`` view definitions (default: the repository's
    ``sql/views``; None for none). ``as_of_snapshot`` / ``as_of_timestamp``
    (epoch ms or ISO 8601): time travel, see the module docstring. Returns
    ``{view name: what it holds}``. Views this function registered earlier in
    the session and that no longer exist (a dropped table) are dropped.
    """
    storage_options = dict(storage_options or {})
    snapshot_id = None if as_of_snapshot is None else parse_snapshot_id(as_of_snapshot)
    ts = None if as_of_timestamp is None else parse_timestamp(as_of_timestamp)
    if snapshot_id is not None and ts is not None:
        raise ConfigError("give --as-of-snapshot or --as-of-timestamp, not both")
    topics = list_topics(Storage(root, storage_options)) if root else []
    wh = Warehouse(warehouse, catalog, storage_options) if warehouse else None
    tables = wh.list_tables() if wh is not None else []
    sql_views = _sql_views(views_dir)
    names = plan_names(topics, tables, list(META_VIEWS) + [v.name for v in sql_views])
    wanted = _wanted(names, sql_views, only)

    need_meta = {m for m in META_VIEWS if m in wanted}
    tables_needed = sorted({src for name, (kind, src) in names.items()
                            if name.lower() in wanted and kind in ("table", "validated")})
    if need_meta - {"kafkastore_offsets"} or snapshot_id is not None:
        tables_needed = sorted(tables)
    loaded = _load_tables(wh, tables_needed)
    reads = _choose(loaded, AsOf(snapshot_id=snapshot_id, timestamp_ms=ts), warehouse)

    registered: dict[str, str] = {}
    for name, (kind, src) in names.items():
        if name.lower() not in wanted or kind == "meta":
            continue
        if kind == "topic":
            _topic_frame(spark, root, src, storage_options).createOrReplaceTempView(name)
            registered[name] = f"topic {src!r} under {root}"
            continue
        if kind == "validated":
            table = loaded[src]
            read = _Read(src, table, table.snapshot_by_name(VALIDATED_TAG), table.schema(),
                         f"tag {VALIDATED_TAG}")
        else:
            read = reads[src]
        table_frame(spark, read.table, read.snapshot, read.schema).createOrReplaceTempView(name)
        sid = read.snapshot.snapshot_id if read.snapshot is not None else None
        registered[name] = f"table {src!r} at {read.note} (snapshot {sid})"
    if "kafkastore_offsets" in need_meta:
        _offsets_frame(spark, root, topics, storage_options).createOrReplaceTempView(
            "kafkastore_offsets")
        registered["kafkastore_offsets"] = "log start offset and high watermark per partition"
    if "warehouse_offsets" in need_meta:
        _warehouse_offsets_frame(spark, reads).createOrReplaceTempView("warehouse_offsets")
        registered["warehouse_offsets"] = "committed offsets of every table"
    if "warehouse_snapshots" in need_meta:
        _snapshots_frame(spark, loaded).createOrReplaceTempView("warehouse_snapshots")
        registered["warehouse_snapshots"] = "every snapshot of every table"
    if "warehouse_files" in need_meta:
        _files_frame(spark, reads).createOrReplaceTempView("warehouse_files")
        registered["warehouse_files"] = "the planned data files of every table"
    for v in sql_views:
        if v.name.lower() in wanted:
            spark.sql(v.statement)
            registered[v.name] = f"view from {views_dir}"

    _drop_stale(spark, {n.lower() for n in registered}, wanted, only is None)
    return registered


def _load_tables(wh, names: list[str]) -> dict[str, Any]:
    """``{name: pyiceberg table}``, loaded in parallel (each reads its metadata file)."""
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        return dict(zip(names, pool.map(wh.table, names)))


def _choose(loaded: dict[str, Any], as_of: AsOf, warehouse: str | None) -> dict[str, _Read]:
    """The snapshot each table is read at (time travel applied)."""
    reads = {}
    holder = None
    if as_of.snapshot_id is not None:
        holder = next((n for n, t in loaded.items()
                       if t.snapshot_by_id(as_of.snapshot_id) is not None), None)
        if holder is None:
            raise ConfigError(f"unknown snapshot {as_of.snapshot_id}: no table under "
                              f"{warehouse} has it (see the warehouse_snapshots view)")
    for name, table in loaded.items():
        if holder is not None and name != holder:
            mine = AsOf()
        else:
            mine = as_of
        snap = select_snapshot(table, mine)
        schema = table.schema()
        if mine != AsOf() and snap is not None and snap.schema_id is not None:
            schema = table.schemas().get(snap.schema_id, schema)
        reads[name] = _Read(name, table, snap, schema, mine.describe())
    return reads


def _drop_stale(spark, now: set[str], wanted: set[str], full: bool) -> None:
    """Drop views an earlier call registered that should exist but no longer do
    (a table or topic gone); a partial call only looks at the names it wanted."""
    previous = _REGISTERED.get(id(spark), set())
    stale = {n for n in previous - now if full or n in wanted}
    for name in stale:
        spark.catalog.dropTempView(name)
    _REGISTERED[id(spark)] = (previous - stale) | now


def _wanted(names: dict[str, tuple[str, str]], sql_views: list[_SqlView],
            only: Iterable[str] | None) -> set[str]:
    """Lower-case names to register: ``only`` plus what the sql/views among them need."""
    if only is None:
        return {n.lower() for n in names}
    wanted = {w.lower() for w in only}
    by_name = {v.name.lower(): v for v in sql_views}
    todo = [w for w in wanted if w in by_name]
    while todo:
        for dep in by_name[todo.pop()].needs:
            if dep not in wanted:
                wanted.add(dep)
                if dep in by_name:
                    todo.append(dep)
    return wanted



def _topic_frame(spark, root: str, topic: str, storage_options: dict):
    from .datasource import read_topic

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
    from .warehouse import field_ids

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
        from kafkastore.errors import UnsupportedDeletesError

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


def _offsets_frame(spark, root: str | None, topics: list[str], storage_options: dict):
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


def _warehouse_offsets_frame(spark, reads: dict[str, _Read]):
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


def _snapshots_frame(spark, loaded: dict[str, Any]):
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


def _files_frame(spark, reads: dict[str, _Read]):
    rows = []
    for name, r in sorted(reads.items()):
        if r.snapshot is None:
            continue
        for t in r.table.scan(snapshot_id=r.snapshot.snapshot_id).plan_files():
            rows.append((name, r.snapshot.snapshot_id, t.file.file_path, t.file.record_count,
                         t.file.file_size_in_bytes, len(t.delete_files)))
    return spark.createDataFrame(rows, FILES_DDL)


# ---------------------------------------------------------------------------
# running queries and printing results


def run_sql(spark, query: str, *, root: str | None, warehouse: str | None,
            storage_options: dict | None = None, fmt: str = "table",
            out: TextIO | None = None, views_dir: str | None = VIEWS_DIR,
            catalog: Mapping[str, Any] | None = None, as_of_snapshot: int | str | None = None,
            as_of_timestamp: int | str | None = None) -> list[Any]:
    """Register the views ``query`` needs, run its statements in order and print
    every result that has columns to ``out`` (default stdout).

    ``fmt``: ``table`` (aligned text, cells cut at 120 characters) or ``jsonl``
    (one JSON object per row). ``catalog``, ``as_of_snapshot`` and
    ``as_of_timestamp``: see :func:`register_views`. Returns the DataFrames of
    the statements.
    """
    if fmt not in ("table", "jsonl"):
        raise ConfigError(f"format must be table or jsonl, got {fmt!r}")
    out = out or sys.stdout
    statements = split_statements(query)
    if not statements:
        raise ConfigError("no SQL statement given")
    words = referenced_names(query)
    only = None if "show" in words or "describe" in words else words
    register_views(spark, root, warehouse, storage_options, only=only, views_dir=views_dir,
                   catalog=catalog, as_of_snapshot=as_of_snapshot,
                   as_of_timestamp=as_of_timestamp)
    frames, printed = [], 0
    for stmt in statements:
        with _spark_errors():
            df = spark.sql(stmt)
            frames.append(df)
            if not df.columns:
                continue
            if fmt == "jsonl":
                write_jsonl(df, out)
            else:
                if printed:
                    out.write("\n")
                write_table(df, out)
            printed += 1
    out.flush()
    return frames


@contextlib.contextmanager
def _spark_errors():
    """Spark's analysis and runtime errors as one-line ConfigErrors.

    PySpark also logs every such error with its JVM stack trace to stderr (its
    query-context loggers); the message we raise says the same in one line,
    so those loggers are muted meanwhile.
    """
    from pyspark.errors import PySparkException

    loggers = [logging.getLogger(n) for n in ("SQLQueryContextLogger",
                                              "DataFrameQueryContextLogger")]
    saved = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    except PySparkException as exc:
        if "Python worker" in str(exc):  # a worker's own error (a damaged segment...): name it
            from pipelines.spark_errors import summarize
            raise summarize(exc, "sql") from None
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise ConfigError(f"SQL error: {first}") from None
    finally:
        for lg, was in zip(loggers, saved):
            lg.disabled = was


def _prepared(df):
    """(DataFrame with top-level timestamps as epoch microseconds, their names).

    Python's Row conversion renders timestamps in the *process* time zone; epoch
    microseconds keep them exact, and we print them in UTC ourselves. Timestamps
    without a zone (``timestamp_ntz``) become ISO text in Spark.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    micros, cols, changed = set(), [], False
    for field in df.schema.fields:
        c = F.col(f"`{field.name}`")
        if isinstance(field.dataType, TimestampType):
            micros.add(field.name)
            c, changed = F.unix_micros(c).alias(field.name), True
        elif isinstance(field.dataType, TimestampNTZType):
            c = F.date_format(c, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS").alias(field.name)
            changed = True
        cols.append(c)
    return (df.select(*cols) if changed else df), micros


def _rows(df) -> Iterator[dict[str, Any]]:
    """The rows of ``df`` as ``{column: value}``, streamed partition by partition."""
    prepared, micros = _prepared(df)
    names = df.columns
    for row in prepared.toLocalIterator(prefetchPartitions=True):
        yield {name: (_Micros(value) if name in micros and value is not None else value)
               for name, value in zip(names, row)}


@dataclass(frozen=True)
class _Micros:
    """A timestamp as epoch microseconds (exact), printed as ISO 8601."""

    us: int

    def iso(self) -> str:
        t = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=self.us)
        return t.isoformat(timespec="milliseconds" if self.us % 1000 == 0 else "microseconds") + "Z"


def to_json_value(value: Any) -> Any:
    """A query result value as JSON: bytes as UTF-8 text or ``{"base64": ...}``,
    timestamps and dates ISO 8601, decimals as numbers, rows and maps as objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        finite = value == value and value not in (float("inf"), float("-inf"))
        return value if finite else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, _Micros):
        return value.iso()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
            return value.isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "asDict"):
        return {k: to_json_value(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(to_json_value(k)): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    return str(value)


def write_jsonl(df, out: TextIO) -> int:
    """Write ``df`` as JSON lines; returns the row count."""
    n = 0
    for row in _rows(df):
        out.write(json.dumps({k: to_json_value(v) for k, v in row.items()},
                             ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    return n


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        v = to_json_value(value)
        text = v if isinstance(v, str) else "base64:" + v["base64"]
    elif isinstance(value, _Micros):
        text = value.iso()
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (bool, int)):
        text = str(value).lower() if isinstance(value, bool) else str(value)
    else:
        text = json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(text) > _TABLE_CELL_MAX:
        text = text[:_TABLE_CELL_MAX - 3] + "..."
    return text


def write_table(df, out: TextIO) -> int:
    """Write ``df`` as an aligned text table (Spark's ``show`` style, cells up to
    120 characters, every row); returns the row count."""
    names = df.columns
    numeric = {f.name for f in df.schema.fields
               if f.dataType.typeName() in ("byte", "short", "integer", "long", "float", "double",
                                            "decimal")}
    rows = _rows(df)
    head: list[list[str]] = []
    for row in rows:
        head.append([_cell(row[n]) for n in names])
        if len(head) >= _WIDTH_SAMPLE:
            break
    widths = [max([len(n)] + [len(r[i]) for r in head]) for i, n in enumerate(names)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+\n"

    def fmt(cells):
        parts = []
        for i, (c, w) in enumerate(zip(cells, widths)):
            c = c if len(c) <= w else c[:max(0, w - 3)] + "..."
            parts.append(c.rjust(w) if names[i] in numeric else c.ljust(w))
        return "| " + " | ".join(parts) + " |\n"

    out.write(line + fmt(names) + line)
    count = 0
    for cells in head:
        out.write(fmt(cells))
        count += 1
    for row in rows:   # the rest streams with the widths of the first rows
        out.write(fmt([_cell(row[n]) for n in names]))
        count += 1
    out.write(line)
    out.write(f"({count} row{'s' if count != 1 else ''})\n")
    return count
