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

This module holds the naming, the registration and :func:`run_sql`; the SQL text
(statements, names, ``sql/views``) is :mod:`pipelines.sql.statements`, the DataFrame of
each view :mod:`pipelines.sql.frames`, and the printing of results
:mod:`pipelines.sql.output`. The package (:mod:`pipelines.sql`) re-exports the public names.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, TextIO

from kafkastore.errors import ConfigError
from kafkastore.storage import Storage
from kafkastore.topics.admin import list_topics

from ..spark_errors import summarize
from ..spec.table_layout import DEAD_LETTERS_SUFFIX
from ..warehouse.catalog import Warehouse
from ..warehouse.properties import VALIDATED_TAG
from ..warehouse.snapshots import AsOf, parse_snapshot_id, parse_timestamp, select_snapshot
from .frames import (FILES_DDL, OFFSETS_DDL, SNAPSHOTS_DDL,  # noqa: F401 (re-exported)
                     WAREHOUSE_OFFSETS_DDL, files_frame, offsets_frame, TableRead,
                     snapshots_frame, topic_frame, warehouse_offsets_frame, spark_ddl,
                     table_frame)
from .output import to_json_value, write_jsonl, write_table  # noqa: F401 (re-exported)
from .statements import (read_sql_files, referenced_names,  # noqa: F401 (re-exported)
                         split_statements, sql_views_in)

log = logging.getLogger(__name__)

# The repository's sql/ folder (views and examples), beside pipelines/.
SQL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "sql")
VIEWS_DIR = os.path.join(SQL_DIR, "views")
META_VIEWS = ("kafkastore_offsets", "warehouse_offsets", "warehouse_snapshots", "warehouse_files")

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")

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
# registration


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
    sql_views = sql_views_in(views_dir)
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
            topic_frame(spark, root, src, storage_options).createOrReplaceTempView(name)
            registered[name] = f"topic {src!r} under {root}"
            continue
        if kind == "validated":
            table = loaded[src]
            read = TableRead(src, table, table.snapshot_by_name(VALIDATED_TAG), table.schema(),
                         f"tag {VALIDATED_TAG}")
        else:
            read = reads[src]
        table_frame(spark, read.table, read.snapshot, read.schema).createOrReplaceTempView(name)
        sid = read.snapshot.snapshot_id if read.snapshot is not None else None
        registered[name] = f"table {src!r} at {read.note} (snapshot {sid})"
    if "kafkastore_offsets" in need_meta:
        offsets_frame(spark, root, topics, storage_options).createOrReplaceTempView(
            "kafkastore_offsets")
        registered["kafkastore_offsets"] = "log start offset and high watermark per partition"
    if "warehouse_offsets" in need_meta:
        warehouse_offsets_frame(spark, reads).createOrReplaceTempView("warehouse_offsets")
        registered["warehouse_offsets"] = "committed offsets of every table"
    if "warehouse_snapshots" in need_meta:
        snapshots_frame(spark, loaded).createOrReplaceTempView("warehouse_snapshots")
        registered["warehouse_snapshots"] = "every snapshot of every table"
    if "warehouse_files" in need_meta:
        files_frame(spark, reads).createOrReplaceTempView("warehouse_files")
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


def _choose(loaded: dict[str, Any], as_of: AsOf, warehouse: str | None) -> dict[str, TableRead]:
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
        reads[name] = TableRead(name, table, snap, schema, mine.describe())
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
            raise summarize(exc, "sql") from None
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise ConfigError(f"SQL error: {first}") from None
    finally:
        for lg, was in zip(loggers, saved):
            lg.disabled = was


