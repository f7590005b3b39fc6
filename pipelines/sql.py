"""Spark SQL over topics and warehouse tables: temporary views and ``kafkastore sql``.

:func:`register_views` registers, in one SparkSession:

=================================  ==========================================================
view                               holds
=================================  ==========================================================
``<topic>``, ``topic_<topic>``     the topic, through the ``kafkastore`` data source (Spark's
                                   Kafka schema, ``headers`` included); read when queried
``<table>``, ``table_<table>``     the table's committed live *data* files, as listed by the
                                   commit log when the view was registered
``<table>_dead_letters``           its live dead-letter files
``<table>_validated``              only the rows of commits whose validation ``passed``
``kafkastore_offsets``             ``topic, partition, log_start_offset, high_watermark``
``warehouse_commits``              ``table, version, run_id, operation, topic, partition,
                                   from, until, validated, user, time, validates``: one row
                                   per commit and offset range (commits without ranges:
                                   one row, null range); ``validated`` is the current status
                                   of a load/reprocess version, or the verdict of a
                                   ``validate`` commit
``warehouse_files``                ``table, path, kind, topic, partition, min_offset,
                                   max_offset, rows, bytes, date, min_timestamp,
                                   max_timestamp, version, validated``: every live file
views in ``sql/views/*.sql``       e.g. ``load_lag``, ``dead_letters_per_table``, built on
                                   the three views above
=================================  ==========================================================

Naming. Topic and table names may hold ``.`` and ``-``; a view name is the
name with every character outside ``[A-Za-z0-9_]`` replaced by ``_`` (and a
leading ``_`` before a digit). Spark compares view names case-insensitively.
When two views want the same name, the first claim in this order wins:
built-in views (the three above and those of ``sql/views``), the aliases
``table_<t>`` and ``topic_<t>``, table names, ``<table>_dead_letters`` /
``<table>_validated``, topic names. So on a topic/table collision **the table
keeps the plain name** and the topic is reachable as ``topic_<name>``. The
aliases always exist: when even an alias is taken (two names that sanitize
alike), it gets a ``_2``, ``_3``, ... suffix. :func:`register_views` returns
what each view name holds.

Reading tables. Views list files from the commit log (``Table.live_files``),
never by directory discovery, so uncommitted or removed files are never read.
``file://`` tables are read by Spark itself (``spark.read.parquet`` over the
file paths, ``mergeSchema`` on, so columns added by later loads appear as null
in older rows): scalable, the files never pass through the driver. Other URLs
(``s3://``, ``memory://``) are read on the driver with pyarrow through fsspec
and handed to Spark as an Arrow table: this session has no ``s3a``
filesystem, and fsspec honours the same ``storage_options`` as every other
part of kafkastore; it suits tables up to a few GB. A view is a snapshot of the
table at registration; register again to see newer commits (``run_sql`` does
for every call).

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
from typing import Any, Iterable, Iterator, TextIO

from kafkastore.errors import ConfigError
from kafkastore.storage import Storage
from kafkastore.topics import describe_topic, list_topics

from . import warehouse as wh

log = logging.getLogger(__name__)

SQL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sql")
VIEWS_DIR = os.path.join(SQL_DIR, "views")
META_VIEWS = ("kafkastore_offsets", "warehouse_commits", "warehouse_files")

TOPIC_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
             "timestamp timestamp, timestampType int, "
             "headers array<struct<key: string, value: binary>>")
DEAD_LETTER_DDL = ("topic string, partition int, offset bigint, timestamp timestamp, "
                   "timestampType int, key binary, value binary, "
                   "headers array<struct<key: string, value: binary>>, error string")
OFFSETS_DDL = "topic string, partition int, log_start_offset bigint, high_watermark bigint"
COMMITS_DDL = ("table string, version bigint, run_id string, operation string, topic string, "
               "partition int, from bigint, until bigint, validated string, user string, "
               "time_ms bigint, validates bigint")
FILES_DDL = ("table string, path string, kind string, topic string, partition int, "
             "min_offset bigint, max_offset bigint, rows bigint, bytes bigint, date string, "
             "min_timestamp_ms bigint, max_timestamp_ms bigint, version bigint, validated string")

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


# ---------------------------------------------------------------------------
# naming


@dataclass(frozen=True)
class _Claim:
    name: str          # wanted view name
    kind: str          # topic | table | dead_letters | validated | meta
    source: str        # topic or table name
    alias: bool        # aliases must exist: suffix on collision instead of skipping


def _claims(topics: list[str], tables: list[str], builtin: Iterable[str]) -> list[_Claim]:
    """Every view anyone wants, in precedence order (first claim of a name wins)."""
    out = [_Claim(n, "meta", n, False) for n in builtin]
    out += [_Claim(f"table_{sanitize(t)}", "table", t, True) for t in sorted(tables)]
    out += [_Claim(f"topic_{sanitize(t)}", "topic", t, True) for t in sorted(topics)]
    out += [_Claim(sanitize(t), "table", t, False) for t in sorted(tables)]
    for t in sorted(tables):
        out.append(_Claim(f"{sanitize(t)}_dead_letters", "dead_letters", t, False))
        out.append(_Claim(f"{sanitize(t)}_validated", "validated", t, False))
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


def register_views(spark, root: str | None, warehouse: str | None,
                   storage_options: dict | None = None, *, only: Iterable[str] | None = None,
                   views_dir: str | None = VIEWS_DIR) -> dict[str, str]:
    """Register topics, tables and the built-in views as temporary views.

    ``root`` / ``warehouse``: storage URLs (either may be None to skip it).
    ``only``: view names (lower case) to register, e.g. the words of a query;
    the views they build on come along. None registers everything.
    ``views_dir``: the ``*.sql`` view definitions (default: the repository's
    ``sql/views``; None for none). Returns ``{view name: what it holds}``.
    Views this function registered earlier in the session and that no longer
    exist (a dropped table) are dropped.
    """
    storage_options = dict(storage_options or {})
    topics = list_topics(Storage(root, storage_options)) if root else []
    tables = wh.list_tables(warehouse, storage_options) if warehouse else []
    sql_views = _sql_views(views_dir)
    names = plan_names(topics, tables, list(META_VIEWS) + [v.name for v in sql_views])
    wanted = _wanted(names, sql_views, only)

    tables_needed = sorted({src for name, (kind, src) in names.items()
                            if name.lower() in wanted and kind in ("table", "dead_letters",
                                                                   "validated")})
    need_meta = {m for m in META_VIEWS if m in wanted}
    if need_meta & {"warehouse_files", "warehouse_commits"}:
        tables_needed = sorted(tables)
    states = _states(warehouse, tables_needed, storage_options)

    registered: dict[str, str] = {}
    for name, (kind, src) in names.items():
        if name.lower() not in wanted or kind == "meta":
            continue
        if kind == "topic":
            _topic_frame(spark, root, src, storage_options).createOrReplaceTempView(name)
            registered[name] = f"topic {src!r} under {root}"
        else:
            table, state = states[src]
            df, note = _table_frame(spark, table, state, kind)
            df.createOrReplaceTempView(name)
            registered[name] = f"{note} of table {src!r} (version {state.version})"
    if "kafkastore_offsets" in need_meta:
        _offsets_frame(spark, root, topics, storage_options).createOrReplaceTempView(
            "kafkastore_offsets")
        registered["kafkastore_offsets"] = "log start offset and high watermark per partition"
    if "warehouse_commits" in need_meta:
        _commits_frame(spark, states).createOrReplaceTempView("warehouse_commits")
        registered["warehouse_commits"] = "every commit and offset range of every table"
    if "warehouse_files" in need_meta:
        _files_frame(spark, states).createOrReplaceTempView("warehouse_files")
        registered["warehouse_files"] = "every live file of every table"
    for v in sql_views:
        if v.name.lower() in wanted:
            spark.sql(v.statement)
            registered[v.name] = f"view from {views_dir}"

    _drop_stale(spark, {n.lower() for n in registered}, wanted, only is None)
    return registered


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


def _states(warehouse: str | None, tables: list[str], storage_options: dict):
    """``{table: (Table, TableState)}``, read in parallel (each is a commit-log replay)."""
    if not tables:
        return {}

    def one(name):
        t = wh.Table(warehouse, name, storage_options=storage_options)
        return name, (t, t.state())

    with ThreadPoolExecutor(max_workers=min(8, len(tables))) as pool:
        return dict(pool.map(one, tables))


def _topic_frame(spark, root: str, topic: str, storage_options: dict):
    from .datasource import read_topic

    return read_topic(spark, root, topic, storage_options=storage_options or None,
                      includeHeaders=True)


def _table_frame(spark, table: wh.Table, state: wh.TableState, kind: str):
    """(DataFrame over the table's live files of ``kind``, description)."""
    if kind == "dead_letters":
        files = state.live_files("dead_letter")
        return _read_files(spark, table, files, DEAD_LETTER_DDL), "live dead-letter files"
    files = state.live_files("data")
    if kind == "validated":
        files = [f for f in files if state.validation.get(f.version) == "passed"]
        note = "rows of validated commits"
    else:
        note = "live data files"
    # The schema comes from all live data files, so <t> and <t>_validated agree
    # even when no validated file carries a newer column yet.
    return _read_files(spark, table, files, TOPIC_DDL, schema_files=state.live_files("data")), note


def _read_files(spark, table: wh.Table, files: list[wh.DataFile], empty_ddl: str,
                schema_files: list[wh.DataFile] | None = None):
    """A DataFrame over ``files`` of ``table`` (see the module docstring on how).

    ``schema_files`` (default ``files``) decide the schema; an empty file list
    gives an empty frame with that schema, or ``empty_ddl`` when there are none.
    """
    schema_files = files if schema_files is None else schema_files
    if not schema_files:
        return spark.createDataFrame([], empty_ddl)
    if table.url.startswith("file://"):
        reader = spark.read.option("mergeSchema", "true")
        if len(schema_files) != len(files):
            schema = reader.parquet(*[table.file_url(f.path) for f in schema_files]).schema
            if not files:
                return spark.createDataFrame([], schema)
            reader = reader.schema(schema)
        return reader.parquet(*[table.file_url(f.path) for f in files])
    if not files:
        import io

        import pyarrow.parquet as pq

        schema = pq.read_schema(io.BytesIO(table.storage.get(schema_files[0].path)))
        return spark.createDataFrame(schema.empty_table())
    return spark.createDataFrame(wh.read_files(table.url, files,
                                               storage_options=table.storage_options))


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


def _commits_frame(spark, states):
    def history(item):
        name, (table, state) = item
        return name, state, table.history()

    rows = []
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(states)))) as pool:
        for name, state, commits in pool.map(history, sorted(states.items())):
            for version, c in commits:
                status = (state.validation.get(version) if c.operation in ("load", "reprocess")
                          else c.validated)
                common = (c.run_id, c.operation)
                tail = (status, c.user, c.now_ms, c.validates)
                if not c.ranges:
                    rows.append((name, version, *common, None, None, None, None, *tail))
                for r in c.ranges:
                    rows.append((name, version, *common, r.topic, r.partition, r.from_offset,
                                 r.until, *tail))
    df = spark.createDataFrame(rows, COMMITS_DDL)
    return df.selectExpr("`table`", "version", "run_id", "operation", "topic", "partition",
                         "`from`", "`until`", "validated", "`user`",
                         "timestamp_millis(time_ms) AS time", "validates")


def _files_frame(spark, states):
    rows = []
    for name, (_table, state) in sorted(states.items()):
        for f in state.live_files(None):
            rows.append((name, f.path, f.kind, f.topic, f.partition, f.min_offset, f.max_offset,
                         f.rows, f.bytes, f.date, f.min_timestamp, f.max_timestamp, f.version,
                         state.validation.get(f.version)))
    df = spark.createDataFrame(rows, FILES_DDL)
    return df.selectExpr("`table`", "path", "kind", "topic", "partition", "min_offset",
                         "max_offset", "rows", "bytes", "date",
                         "timestamp_millis(min_timestamp_ms) AS min_timestamp",
                         "timestamp_millis(max_timestamp_ms) AS max_timestamp",
                         "version", "validated")


# ---------------------------------------------------------------------------
# running queries and printing results


def run_sql(spark, query: str, *, root: str | None, warehouse: str | None,
            storage_options: dict | None = None, fmt: str = "table",
            out: TextIO | None = None, views_dir: str | None = VIEWS_DIR) -> list[Any]:
    """Register the views ``query`` needs, run its statements in order and print
    every result that has columns to ``out`` (default stdout).

    ``fmt``: ``table`` (aligned text, cells cut at 120 characters) or ``jsonl``
    (one JSON object per row). Returns the DataFrames of the statements.
    """
    if fmt not in ("table", "jsonl"):
        raise ConfigError(f"format must be table or jsonl, got {fmt!r}")
    out = out or sys.stdout
    statements = split_statements(query)
    if not statements:
        raise ConfigError("no SQL statement given")
    words = referenced_names(query)
    only = None if "show" in words or "describe" in words else words
    register_views(spark, root, warehouse, storage_options, only=only, views_dir=views_dir)
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
