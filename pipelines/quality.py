"""Quality checks of one warehouse commit, with Great Expectations.

:func:`validate_commit` checks the rows a ``load`` or ``reprocess`` commit
added (data and dead letters together) against the commit itself:

* ``offsets_unique``: no (topic, partition, offset) twice;
* ``offsets_in_range``: every offset inside the commit's ``[from, until)`` for
  its partition (two checks: ``offset >= from`` and ``until > offset``);
* ``rows_match_commit``: the files hold as many rows per partition as the
  commit lists (catches a file rewritten behind the commit log's back);
* ``rows_cover_range``: for topics that are not compacted, rows (data + dead
  letters) per partition equal ``until - from``: every offset loaded once.
  Compacted topics have holes in their offsets, so they skip it; so can topics
  written transactionally (commit markers take offsets) with
  ``thresholds={"exact_row_counts": False}``;
* ``keys_not_null``: compacted topics only;
* ``timestamps_before_interval_end``: when the load was bounded by time (the
  ``interval`` given, else the ``until_timestamp`` the load recorded in its
  commit), every timestamp is before the end. The start of the interval is not
  checked unless ``check_interval_start=True``: a load starts at the committed
  offsets, so a first load, a catch-up or a late record legitimately brings
  older timestamps;
* ``dead_letter_fraction``: dead letters / rows <= ``max_dead_letter_fraction``
  (the config file's ``quality`` section; default 0.01).

Why pandas: the checks need only five narrow columns (topic, partition,
offset, timestamp, whether the key is null) of *one commit's* files, which a
load bounds by its schedule interval (about 40 bytes a row in memory). They
are read with pyarrow through fsspec, so the same code validates ``file://``,
``memory://`` and ``s3://`` tables without an ``s3a`` Spark setup, and GX runs
on its pandas engine, its best-supported one (its Spark engine works with this
pyspark too, but would add a Spark job per metric for no gain at this size).
When a ``spark`` session is passed and the table is on ``file://``, Spark reads
the columns instead (in parallel, through Arrow); the checks are the same.

Outcome: the verdict is recorded in the table's commit log as a ``validate``
commit (``Commit.validate(..., "passed" | "failed")``; none when the status is
already that), so ``<table>_validated`` views and ``warehouse_commits`` see it.
The GX data docs (HTML) and a JSON summary go under the warehouse, written
through fsspec (so ``s3://`` works too)::

    <warehouse>/_quality/<table>/index.html            GX's index of the latest validation
    <warehouse>/_quality/<table>/validations/...       one page per suite and validation
    <warehouse>/_quality/<table>/results/<version>.json  latest verdict on a version
    <warehouse>/_quality/<table>/static/...            GX's styles, written once

A failed validation raises :class:`QualityCheckFailed` (after marking the
commit and writing the docs) unless ``raise_on_failure=False``.
"""
from __future__ import annotations

import getpass
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.storage import Storage

from . import warehouse as wh

log = logging.getLogger(__name__)

QUALITY_DIR = "_quality"
QUALITY_SETTINGS = ("max_dead_letter_fraction", "exact_row_counts")
DEFAULT_MAX_DEAD_LETTER_FRACTION = 0.01
# Rows of a partition the commit has no range for get [2**62, -1): both range checks fail.
_NO_RANGE_FROM = 2 ** 62
_KEY_PRESENT = "present"


class QualityCheckFailed(WarehouseError):
    """A commit failed its quality checks; ``result`` holds the details."""

    def __init__(self, message: str, result: "QualityResult"):
        super().__init__(message)
        self.result = result


@dataclass
class QualityResult:
    """The outcome of :func:`validate_commit`.

    ``checks``: one entry per check: ``name``, ``success``, ``observed`` (a
    short text) and ``expectation`` (the GX expectation type).
    ``marked_version``: the ``validate`` commit written (None when the status
    was already recorded or ``mark=False``). ``docs_url``: the data docs index.
    """

    table: str
    version: int
    operation: str
    success: bool
    checks: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    dead_letters: int = 0
    marked_version: int | None = None
    docs_url: str | None = None
    result_url: str | None = None
    pages: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "passed" if self.success else "failed"

    @property
    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if not c["success"]]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for Airflow's XCom and ``results/<version>.json``)."""
        return {"table": self.table, "version": self.version, "operation": self.operation,
                "status": self.status, "rows": self.rows, "dead_letters": self.dead_letters,
                "checks": self.checks, "marked_version": self.marked_version,
                "docs_url": self.docs_url, "result_url": self.result_url, "pages": self.pages}

    def render(self) -> str:
        """One line per check."""
        lines = [f"quality of {self.table} version {self.version} ({self.operation}): "
                 f"{self.status.upper()} ({self.rows} rows, {self.dead_letters} dead letters)"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c['success'] else 'FAIL'}] {c['name']}: {c['observed']}")
        if self.docs_url:
            lines.append(f"  data docs: {self.docs_url}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# reading the commit's rows


def _read_rows(spark, table: wh.Table, files: list[wh.DataFile]):
    """pyarrow Table of topic, partition, offset, timestamp_ms, key, dead_letter
    for the rows of ``files``."""
    import pyarrow as pa

    parts = []
    use_spark = spark is not None and table.url.startswith("file://") and files
    groups = [(kind, [f for f in files if f.kind == kind]) for kind in wh.KINDS]
    for kind, group in groups:
        if not group:
            continue
        if use_spark:
            parts.append(_narrow(_read_spark(spark, table, group), kind))
            continue
        for f in group:
            parts.append(_narrow(_read_arrow(table, f), kind))
    if not parts:
        return pa.table(_empty_columns())
    return pa.concat_tables(parts)


def _read_arrow(table: wh.Table, f: wh.DataFile):
    """The needed columns of one file, range-read through fsspec."""
    import pyarrow.parquet as pq

    storage = table.storage
    try:
        with storage.fs.open(storage.full_path(f.path), "rb") as fh:
            pf = pq.ParquetFile(fh)
            cols = [c for c in ("topic", "partition", "offset", "timestamp", "key")
                    if c in pf.schema_arrow.names]
            return pf.read(columns=cols)
    except FileNotFoundError:
        raise WarehouseError(f"{table.url}: file {f.path} of the commit is missing "
                             f"(vacuumed or deleted); cannot validate it") from None


def _read_spark(spark, table: wh.Table, files: list[wh.DataFile]):
    paths = [table.file_url(f.path) for f in files]
    df = spark.read.option("mergeSchema", "true").parquet(*paths)
    cols = [c for c in ("topic", "partition", "offset", "timestamp", "key") if c in df.columns]
    return df.select(*cols).toArrow()


def _empty_columns():
    import pyarrow as pa

    return {"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
            "offset": pa.array([], pa.int64()), "timestamp_ms": pa.array([], pa.int64()),
            "key": pa.array([], pa.string()), "dead_letter": pa.array([], pa.int8())}


def _narrow(tbl, kind: str):
    """Kafka columns -> the frame the checks read (no payload kept)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = tbl.num_rows
    if "key" in tbl.column_names:
        key = pc.if_else(pc.is_valid(tbl.column("key")), pa.scalar(_KEY_PRESENT),
                         pa.scalar(None, pa.string()))
    else:
        key = pa.nulls(n, pa.string())
    if "timestamp" in tbl.column_names:
        ts = wh._timestamps_ms(tbl.column("timestamp"))
    else:
        ts = pa.nulls(n, pa.int64())
    return pa.table({
        "topic": pc.cast(tbl.column("topic"), pa.string()),
        "partition": pc.cast(tbl.column("partition"), pa.int32()),
        "offset": pc.cast(tbl.column("offset"), pa.int64()),
        "timestamp_ms": pc.cast(ts, pa.int64()),
        "key": key,
        "dead_letter": pa.array([1 if kind == "dead_letter" else 0] * n, pa.int8()),
    })


def _frames(commit: wh.Commit, rows):
    """(row frame, partition frame) as pandas DataFrames."""
    import pandas as pd

    ranges = {(r.topic, r.partition): r for r in commit.ranges}
    df = rows.to_pandas()
    tp = list(zip(df["topic"], df["partition"]))
    df["range_from"] = [ranges[k].from_offset if k in ranges else _NO_RANGE_FROM for k in tp]
    df["range_until"] = [ranges[k].until if k in ranges else -1 for k in tp]
    df = df.astype({"range_from": "int64", "range_until": "int64"})

    counts = df.groupby(["topic", "partition"]).agg(
        rows=("offset", "size"), dead_letters=("dead_letter", "sum")).to_dict("index")
    committed: dict[tuple[str, int], int] = {}
    for f in commit.add:
        committed[f.topic_partition] = committed.get(f.topic_partition, 0) + f.rows
    keys = sorted(set(ranges) | set(counts) | set(committed))
    parts = pd.DataFrame([{
        "topic": t, "partition": p,
        "range_from": ranges[(t, p)].from_offset if (t, p) in ranges else None,
        "range_until": ranges[(t, p)].until if (t, p) in ranges else None,
        "expected_rows": (ranges[(t, p)].until - ranges[(t, p)].from_offset
                          if (t, p) in ranges else 0),
        "rows": int(counts.get((t, p), {}).get("rows", 0)),
        "dead_letters": int(counts.get((t, p), {}).get("dead_letters", 0)),
        "committed_rows": committed.get((t, p), 0),
    } for t, p in keys], columns=["topic", "partition", "range_from", "range_until",
                                  "expected_rows", "rows", "dead_letters", "committed_rows"])
    return df, parts


# ---------------------------------------------------------------------------
# Great Expectations


def _import_gx():
    """Import great_expectations, working around pyspark.sql.connect's doctest guard.

    GX imports ``pyspark.sql.connect``, whose dependency check calls
    ``sys.exit(0)`` when ``__main__`` has neither ``__file__`` nor a spec and
    the interpreter is not interactive (``python -c``, code piped to stdin):
    it takes that for a doctest run. Looking interactive for the import
    avoids the exit; nothing else changes.
    """
    if "great_expectations" in sys.modules:
        return sys.modules["great_expectations"]
    main = sys.modules.get("__main__")
    fake = (main is not None and getattr(main, "__spec__", None) is None
            and not hasattr(main, "__file__") and not hasattr(sys, "ps1"))
    if fake:
        sys.ps1 = ">>> "
    try:
        import great_expectations as gx
    finally:
        if fake:
            del sys.ps1
    return gx


def _context(docs_dir: str):
    """An ephemeral GX context (in-memory stores) whose data docs site is ``docs_dir``."""
    gx = _import_gx()
    from great_expectations.data_context.types.base import (DataContextConfig,
                                                            InMemoryStoreBackendDefaults,
                                                            ProgressBarsConfig)

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites={"kafkastore": {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}},
        progress_bars=ProgressBarsConfig(globally=False),
        analytics_enabled=False)   # no usage statistics leave the machine
    return gx, gx.get_context(project_config=config, mode="ephemeral")


@dataclass(frozen=True)
class _Check:
    name: str
    frame: str                 # "rows" or "partitions"
    expectation: Any


def _checks(gx, *, compacted: set[str], exact: set[str], interval_end: int | None,
            interval_start: int | None, max_fraction: float, any_rows: bool) -> list[_Check]:
    E = gx.expectations
    checks = [
        _Check("offsets_unique", "rows",
               E.ExpectCompoundColumnsToBeUnique(column_list=["topic", "partition", "offset"])),
        _Check("offsets_at_or_after_range_from", "rows",
               E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="offset", column_B="range_from",
                                                         or_equal=True)),
        _Check("offsets_before_range_until", "rows",
               E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="range_until",
                                                         column_B="offset")),
        _Check("rows_match_commit", "partitions",
               E.ExpectColumnPairValuesToBeEqual(column_A="rows", column_B="committed_rows")),
    ]
    if exact:
        checks.append(_Check("rows_cover_range", "partitions", E.ExpectColumnPairValuesToBeEqual(
            column_A="rows", column_B="expected_rows", row_condition=_topic_in(exact),
            condition_parser="pandas")))
    if compacted:
        checks.append(_Check("keys_not_null", "rows", E.ExpectColumnValuesToNotBeNull(
            column="key", row_condition=_topic_in(compacted), condition_parser="pandas")))
    if interval_end is not None or interval_start is not None:
        checks.append(_Check("timestamps_in_interval", "rows", E.ExpectColumnValuesToBeBetween(
            column="timestamp_ms", min_value=interval_start, max_value=interval_end,
            strict_max=interval_end is not None)))
    if any_rows:
        checks.append(_Check("dead_letter_fraction", "rows", E.ExpectColumnMeanToBeBetween(
            column="dead_letter", min_value=0, max_value=max_fraction)))
    return checks


def _topic_in(topics: set[str]) -> str:
    return f"topic in {json.dumps(sorted(topics))}"


def _observed(name: str, result) -> str:
    r = result.result or {}
    if "observed_value" in r:
        return f"observed {_plain(r['observed_value'])!r}"
    if "unexpected_count" in r:
        sample = r.get("partial_unexpected_list") or []
        text = f"{r['unexpected_count']} unexpected of {r.get('element_count', '?')}"
        if sample:
            text += f", e.g. {[_plain(v) for v in sample[:5]]}"
        return text
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"error: {result.exception_info.get('exception_message')}"
    return "ok" if result.success else "failed"


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if hasattr(v, "item") else v


def _run_gx(table_name: str, version: int, frames: dict[str, Any], checks: list[_Check],
            docs_dir: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the checks (one suite and checkpoint per frame) and build the data docs
    in ``docs_dir``. Returns (check entries, relative paths of validation pages)."""
    gx, ctx = _context(docs_dir)
    from great_expectations.core.run_identifier import RunIdentifier

    source = ctx.data_sources.add_pandas("kafkastore")
    run_id = RunIdentifier(run_name=f"version-{version}")
    by_type: dict[tuple[str, str], str] = {}
    entries: list[dict[str, Any]] = []
    for frame_name, df in frames.items():
        mine = [c for c in checks if c.frame == frame_name]
        if not mine:
            continue
        batch = source.add_dataframe_asset(frame_name).add_batch_definition_whole_dataframe(
            "commit")
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"{table_name}.{frame_name}"))
        for c in mine:
            added = suite.add_expectation(c.expectation)
            by_type[(frame_name, added.id)] = c.name
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(
            name=f"{table_name}.{frame_name}", data=batch, suite=suite))
        cp = ctx.checkpoints.add(gx.Checkpoint(
            name=f"{table_name}.{frame_name}", validation_definitions=[vd],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="data_docs")],
            result_format={"result_format": "SUMMARY"}))
        res = cp.run(batch_parameters={"dataframe": df}, run_id=run_id)
        for vr in res.run_results.values():
            for r in vr.results:
                name = by_type.get((frame_name, r.expectation_config.id),
                                   r.expectation_config.type)
                entries.append({"name": name, "success": bool(r.success),
                                "observed": _observed(name, r),
                                "expectation": r.expectation_config.type, "frame": frame_name})
    order = {c.name: i for i, c in enumerate(checks)}
    entries.sort(key=lambda e: order.get(e["name"], len(order)))
    pages = []
    for base, _dirs, names in os.walk(os.path.join(docs_dir, "validations")):
        pages += [os.path.relpath(os.path.join(base, n), docs_dir) for n in names
                  if n.endswith(".html")]
    return entries, sorted(pages)


# ---------------------------------------------------------------------------
# publishing and marking


def quality_url(warehouse: str, table: str) -> str:
    """Where the data docs of ``table`` live."""
    return f"{warehouse.rstrip('/')}/{QUALITY_DIR}/{table}"


def _publish(storage: Storage, docs_dir: str, result: QualityResult) -> None:
    """Upload the local docs site and the JSON summary (whole-object puts)."""
    static_done = storage.exists("static/styles/data_docs_default_styles.css")
    for base, _dirs, names in os.walk(docs_dir):
        for n in names:
            local = os.path.join(base, n)
            rel = os.path.relpath(local, docs_dir).replace(os.sep, "/")
            if rel.startswith("static/") and static_done:
                continue   # GX's fonts and images (about 4 MB) are the same every time
            with open(local, "rb") as f:
                storage.put(rel, f.read())
    storage.put(f"results/{result.version:020d}.json",
                json.dumps(result.to_dict(), indent=1, sort_keys=True).encode())


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:   # no passwd entry (containers): the audit field stays empty
        return None


def _mark(table: wh.Table, version: int, status: str, info: dict, now_ms: int) -> int | None:
    """Record ``status`` for ``version`` unless it is already the recorded one.

    The run id is unique per attempt: a verdict may flip back and forth (fixed
    thresholds, a repaired file), and each flip is its own audited commit.
    """
    if table.state().validation.get(version) == status:
        return None
    commit = wh.Commit.validate(f"validate-{version}-{status}-{uuid.uuid4().hex[:12]}",
                                version, status, now_ms=now_ms, user=_user(), info=info)
    return table.commit(commit).version


def _topic_policies(commit: wh.Commit, root: str | None, topic_config,
                    compacted: bool | None, storage_options: dict | None) -> set[str]:
    """The topics of the commit that are compacted."""
    topics = sorted({r.topic for r in commit.ranges} | {f.topic for f in commit.add})
    if compacted is not None:
        return set(topics) if compacted else set()
    if topic_config is not None:
        from kafkastore.topic_config import TopicConfig

        cfg = topic_config if isinstance(topic_config, TopicConfig) else TopicConfig.from_dict(
            dict(topic_config))
        return set(topics) if cfg.compact else set()
    if root is None:
        return set()
    from kafkastore.topics import load_topic

    storage = Storage(root, storage_options)
    return {t for t in topics if load_topic(storage, t).config.compact}


# ---------------------------------------------------------------------------
# the entry point


def validate_commit(spark, warehouse: str, table: str, version: int, *,
                    root: str | None = None, topic_config=None, compacted: bool | None = None,
                    interval: tuple[int | None, int | None] | None = None,
                    check_interval_start: bool = False,
                    thresholds: Mapping[str, Any] | None = None,
                    storage_options: dict | None = None, mark: bool = True, docs: bool = True,
                    raise_on_failure: bool = True, now_ms: int | None = None) -> QualityResult:
    """Validate load/reprocess commit ``version`` of ``warehouse``/``table``.

    ``spark``: a SparkSession or None (see the module docstring). Whether the
    topic is compacted: ``compacted`` if given, else ``topic_config`` (a
    ``TopicConfig`` or a mapping of Kafka config names), else read from the
    topic under ``root``, else not compacted. ``interval``: ``(start_ms,
    end_ms)`` of the run (epoch ms; either may be None). ``thresholds``: the
    config file's ``quality`` mapping (``max_dead_letter_fraction``,
    ``exact_row_counts``). ``mark``: record the verdict in the commit log;
    ``docs``: write data docs and the JSON summary under the warehouse.

    Returns a :class:`QualityResult`; raises :class:`QualityCheckFailed` on a
    failed validation (unless ``raise_on_failure=False``) and
    :class:`WarehouseError` when ``version`` is not a load or reprocess commit.
    """
    thresholds = dict(thresholds or {})
    unknown = sorted(set(thresholds) - set(QUALITY_SETTINGS))
    if unknown:
        # Warn, not fail: the config file's quality section may carry settings
        # for other checks; a typo still shows up in the task log.
        log.warning("ignoring unknown quality setting(s) %s; known: %s", unknown,
                    ", ".join(QUALITY_SETTINGS))
    try:
        max_fraction = float(thresholds.get("max_dead_letter_fraction",
                                            DEFAULT_MAX_DEAD_LETTER_FRACTION))
    except (TypeError, ValueError):
        raise ConfigError("quality.max_dead_letter_fraction must be a number between 0 and 1, "
                          f"got {thresholds.get('max_dead_letter_fraction')!r}") from None
    if not 0 <= max_fraction <= 1:
        raise ConfigError(f"quality.max_dead_letter_fraction must be between 0 and 1, "
                          f"got {max_fraction}")

    tbl = wh.Table(warehouse, table, storage_options=storage_options)
    state = tbl.state()
    version = int(version)
    if version not in state.validation:
        raise WarehouseError(f"{tbl.url}: version {version} is not a load or reprocess commit "
                             f"(latest version {state.version})")
    commit = tbl.read_commit(version)

    compacted_topics = _topic_policies(commit, root, topic_config, compacted, storage_options)
    all_topics = {r.topic for r in commit.ranges} | {f.topic for f in commit.add}
    exact_counts = str(thresholds.get("exact_row_counts", True)).strip().lower()
    exact = set() if exact_counts in ("false", "0", "no", "off") else (
        all_topics - compacted_topics)
    start, end = (interval or (None, None))
    if end is None and commit.info.get("until_timestamp") is not None:
        end = int(commit.info["until_timestamp"])
    if not check_interval_start:
        start = None

    rows, parts = _frames(commit, _read_rows(spark, tbl, list(commit.add)))
    checks = _checks(_import_gx(), compacted=compacted_topics, exact=exact,
                     interval_end=None if end is None else int(end),
                     interval_start=None if start is None else int(start),
                     max_fraction=max_fraction, any_rows=len(rows) > 0)
    with tempfile.TemporaryDirectory(prefix="kafkastore-quality-") as docs_dir:
        entries, pages = _run_gx(table, version, {"rows": rows, "partitions": parts}, checks,
                                 docs_dir)
        result = QualityResult(
            table=table, version=version, operation=commit.operation,
            success=all(e["success"] for e in entries), checks=entries, rows=len(rows),
            dead_letters=int(rows["dead_letter"].sum()) if len(rows) else 0)
        site = quality_url(warehouse, table)
        if docs:
            result.docs_url = f"{site}/index.html"
            result.result_url = f"{site}/results/{version:020d}.json"
            result.pages = [f"{site}/{p}" for p in pages]
            qstore = Storage(warehouse, storage_options).child(f"{QUALITY_DIR}/{table}")
            _publish(qstore, docs_dir, result)
    if mark:
        info = {"failed": result.failed, "checks": len(entries), "rows": result.rows,
                "dead_letters": result.dead_letters, "docs": result.result_url}
        result.marked_version = _mark(tbl, version, result.status, info,
                                      int(time.time() * 1000) if now_ms is None else int(now_ms))
    if not result.success and raise_on_failure:
        raise QualityCheckFailed(
            f"{table} version {version} failed quality checks {result.failed}: "
            + "; ".join(f"{c['name']}: {c['observed']}" for c in entries if not c["success"]),
            result)
    return result


def validate_for_airflow(warehouse: str, table: str, version: int | None, *,
                         root: str | None = None,
                         interval: tuple[int | None, int | None] | None = None,
                         thresholds: Mapping[str, Any] | None = None,
                         storage_options: dict | None = None) -> dict[str, Any]:
    """For Airflow tasks: plain arguments in, a plain dict out (``{"status": "skipped"}``
    when there is no version to check, e.g. a load that found nothing new)."""
    if version is None:
        return {"table": table, "version": None, "status": "skipped"}
    result = validate_commit(None, warehouse, table, int(version), root=root, interval=interval,
                             thresholds=thresholds, storage_options=storage_options)
    print(result.render(), file=sys.stderr)
    return result.to_dict()
