"""Quality gate of an Iceberg warehouse table, with Great Expectations.

Each load or reprocess is one snapshot on ``main``. :func:`validate_snapshot`
checks the rows that snapshot brought, and publishes them to readers of
validated data by moving the table's ``validated`` **tag** (write-audit-publish
with Iceberg's own refs; no side file holds a verdict):

* ``main`` is everything loaded, validated or not: loads commit there and read
  their offsets from it (DESIGN section 5).
* ``validated`` is a tag on a snapshot of main's history such that every row
  visible in it comes from a load or reprocess whose checks passed. Readers of
  validated data read the table as of that tag (``<table>_validated`` in
  ``kafkastore sql``; ``scan(snapshot_id=table.snapshot_by_name("validated")
  .snapshot_id)`` in pyiceberg; ``FOR VERSION AS OF 'validated'`` in Trino or
  Spark). No tag yet means no validated rows.

Publishing walks main's history from the tag to the snapshot asked for,
oldest first, and validates every kafkastore snapshot on the way (the verdict
is recomputed, not stored: it is deterministic for a snapshot). The tag moves
to the newest snapshot such that nothing between the old tag and it failed,
except failures a later reprocess has replaced (a reprocess that deletes
``offset >= N`` with ``N`` at or before the failed load's first offset, for
every partition that load wrote). The move is a compare-and-set on the tag
(pyiceberg's ``AssertRefSnapshotId``): two validators racing (two loads, a
retried task) cannot move it backwards or past a failure; the loser reloads
and walks again. Snapshots of other engines (maintenance rewrites) change no
rows and are passed through.

The rows of a snapshot are those inside the offset ranges its summary lists,
read from that snapshot through pyiceberg's planning (deletes applied), plus
the same ranges of ``<table>_dead_letters`` (at the snapshot with the same run
id). The checks:

* ``offsets_unique``: no (topic, partition, offset) twice (data and dead
  letters together);
* ``rows_match_snapshot``: an append snapshot holds as many rows in its ranges
  as its summary's ``added-records`` (catches files written behind Iceberg's
  back or rows outside the ranges it claims);
* ``rows_cover_range``: for topics that are not compacted, rows plus dead
  letters per partition equal ``until - from``: every offset loaded once.
  Compacted topics have holes in their offsets, so they skip it; so can topics
  written transactionally (commit markers take offsets) with
  ``thresholds={"exact_row_counts": False}``;
* ``keys_not_null``: compacted topics only;
* upsert tables (``kafkastore.mode=upsert``): a snapshot's rows are the
  winners it wrote in its ranges, so ``rows_cover_range`` is skipped as for
  compacted topics; ``kafkastore maintain`` snapshots change no rows and pass;
* ``timestamps_in_interval``: when the load was bounded by time (the
  ``interval`` given), every timestamp is before the end; the start is checked
  only with ``check_interval_start=True`` (a first load or a catch-up brings
  older records);
* ``dead_letter_fraction``: dead letters / rows <= ``max_dead_letter_fraction``
  (the config file's ``quality`` section; default 0.01).

GX runs on its pandas engine over five narrow columns of one snapshot's new
rows (about 40 bytes a row), read with pyiceberg, so ``file://`` and ``s3://``
tables validate alike and no ``[spark]`` extra is needed.

The GX data docs (HTML) and a JSON summary of each validation are written
under the warehouse through fsspec (reports for people, not state the gate
reads)::

    <warehouse>/_quality/<table>/index.html                 GX's index
    <warehouse>/_quality/<table>/validations/...            one page per validation
    <warehouse>/_quality/<table>/results/<snapshot id>.json  the latest verdict on a snapshot

A failed validation raises :class:`QualityCheckFailed` unless
``raise_on_failure=False``; the tag then stays where it was.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafkastore.commit import Budget, Clock, CommitEngine, CommitTarget, Done
from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.errors import QualityCheckFailed  # noqa: F401  (re-exported)
from kafkastore.storage import Storage

from .spec.table_layout import dead_letter_table
from .warehouse.catalog import Warehouse, name_of
from .warehouse.properties import (MODE_PROPERTY, OPERATION_KEY, OPERATIONS, RANGES_KEY,
                                   RUN_ID_KEY, VALIDATED_TAG)
from .warehouse.reads import range_filter, read_snapshot
from .warehouse.snapshots import main_ancestry, summary_of

log = logging.getLogger(__name__)

QUALITY_DIR = "_quality"
QUALITY_SETTINGS = ("max_dead_letter_fraction", "exact_row_counts")
DEFAULT_MAX_DEAD_LETTER_FRACTION = 0.01
KAFKASTORE_OPERATIONS = OPERATIONS
PUBLISH_ATTEMPTS = 10
_KEY_PRESENT = "present"
_COLUMNS = ("topic", "partition", "offset", "timestamp", "key")




@dataclass
class QualityResult:
    """The outcome of :func:`validate_snapshot`.

    ``checks``: one entry per check: ``name``, ``success``, ``observed`` (a
    short text) and ``expectation`` (the GX expectation type).
    ``validated_snapshot``: where the ``validated`` tag points after this call
    (None: no validated rows yet). ``published``: whether this snapshot's rows
    are now visible through the tag. ``held_by``: the failed snapshot that keeps
    them out when the checks passed but an earlier load failed.
    """

    table: str
    snapshot_id: int
    operation: str
    success: bool
    checks: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    dead_letters: int = 0
    validated_snapshot: int | None = None
    published: bool = False
    held_by: int | None = None
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
        """Plain JSON-able form (for Airflow's XCom and ``results/<id>.json``)."""
        return {"table": self.table, "snapshot_id": self.snapshot_id,
                "operation": self.operation, "status": self.status, "rows": self.rows,
                "dead_letters": self.dead_letters, "checks": self.checks,
                "validated_snapshot": self.validated_snapshot, "published": self.published,
                "held_by": self.held_by, "docs_url": self.docs_url,
                "result_url": self.result_url, "pages": self.pages}

    def render(self) -> str:
        """One line per check, then where the ``validated`` tag is."""
        lines = [f"quality of {self.table} snapshot {self.snapshot_id} ({self.operation}): "
                 f"{self.status.upper()} ({self.rows} rows, {self.dead_letters} dead letters)"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c['success'] else 'FAIL'}] {c['name']}: {c['observed']}")
        tag = f"  tag {VALIDATED_TAG} -> {self.validated_snapshot}"
        if self.held_by is not None:
            tag += f" (held back by failed snapshot {self.held_by})"
        lines.append(tag)
        if self.docs_url:
            lines.append(f"  data docs: {self.docs_url}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# what a snapshot brought


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    until: int


def snapshot_ranges(summary: Mapping[str, str]) -> list[Range]:
    """The half-open offset ranges a kafkastore snapshot covers (its summary's
    ``kafkastore.ranges``: ``{"<topic>": {"<partition>": [from, until]}}``)."""
    raw = summary.get(RANGES_KEY)
    if raw is None:
        return []
    data = json.loads(raw) if isinstance(raw, str) else raw
    out = []
    if isinstance(data, dict):
        for topic, parts in data.items():
            for p, bounds in parts.items():
                start, until = _bounds(bounds)
                out.append(Range(topic, int(p), start, until))
    else:   # a list of {"topic", "partition", "from", "until"}
        for r in data:
            out.append(Range(r["topic"], int(r["partition"]), int(r["from"]), int(r["until"])))
    return sorted(out, key=lambda r: (r.topic, r.partition))


def _bounds(b) -> tuple[int, int]:
    if isinstance(b, dict):
        return int(b["from"]), int(b["until"])
    return int(b[0]), int(b[1])


def _is_kafkastore(summary: Mapping[str, str]) -> bool:
    return summary.get(OPERATION_KEY) in KAFKASTORE_OPERATIONS


def _dead_letter_snapshot(dl_table, run_id: str | None):
    """The newest snapshot of the dead-letter table written by ``run_id`` (else its
    current one: a run without dead letters may not commit there)."""
    if dl_table is None:
        return None
    if run_id:
        for snap in main_ancestry(dl_table):
            if summary_of(snap).get(RUN_ID_KEY) == run_id:
                return snap
    return dl_table.current_snapshot()


def _read_rows(table, dl_table, snapshot, ranges: list[Range]):
    """pyarrow Table of topic, partition, offset, timestamp_ms, key, dead_letter:
    the rows of ``snapshot`` (and its dead letters) inside ``ranges``."""
    import pyarrow as pa

    if not ranges:
        return pa.table(_empty_columns())
    expr = range_filter((r.topic, r.partition, r.start, r.until) for r in ranges)
    parts = [_narrow(read_snapshot(table, snapshot, expr, _COLUMNS), "data")]
    run_id = summary_of(snapshot).get(RUN_ID_KEY)
    dl_snap = _dead_letter_snapshot(dl_table, run_id)
    if dl_snap is not None:
        parts.append(_narrow(read_snapshot(dl_table, dl_snap, expr, _COLUMNS), "dead_letter"))
    return pa.concat_tables(parts)


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
        ts = pc.cast(pc.cast(tbl.column("timestamp"), pa.timestamp("ms", tz="UTC")), pa.int64())
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


def _frames(ranges: list[Range], rows, added_records: int | None):
    """(row frame, partition frame) as pandas DataFrames."""
    import pandas as pd

    df = rows.to_pandas()
    counts = df.groupby(["topic", "partition"]).agg(
        rows=("offset", "size"), dead_letters=("dead_letter", "sum")).to_dict("index")
    parts = pd.DataFrame([{
        "topic": r.topic, "partition": r.partition, "range_from": r.start,
        "range_until": r.until, "expected_rows": r.until - r.start,
        "rows": int(counts.get((r.topic, r.partition), {}).get("rows", 0)),
        "dead_letters": int(counts.get((r.topic, r.partition), {}).get("dead_letters", 0)),
    } for r in ranges], columns=["topic", "partition", "range_from", "range_until",
                                 "expected_rows", "rows", "dead_letters"])
    totals = pd.DataFrame([{"data_rows": int((df["dead_letter"] == 0).sum()) if len(df) else 0,
                            "added_records": added_records}])
    return df, parts, totals


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
            interval_start: int | None, max_fraction: float, any_rows: bool,
            compare_added: bool) -> list[_Check]:
    E = gx.expectations
    checks = [
        _Check("offsets_unique", "rows",
               E.ExpectCompoundColumnsToBeUnique(column_list=["topic", "partition", "offset"])),
    ]
    if compare_added:
        checks.append(_Check("rows_match_snapshot", "totals", E.ExpectColumnPairValuesToBeEqual(
            column_A="data_rows", column_B="added_records")))
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


def _run_gx(table_name: str, snapshot_id: int, frames: dict[str, Any], checks: list[_Check],
            docs_dir: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the checks (one suite and checkpoint per frame) and build the data docs
    in ``docs_dir``. Returns (check entries, relative paths of validation pages)."""
    gx, ctx = _context(docs_dir)
    from great_expectations.core.run_identifier import RunIdentifier

    source = ctx.data_sources.add_pandas("kafkastore")
    run_id = RunIdentifier(run_name=f"snapshot-{snapshot_id}")
    by_type: dict[tuple[str, str], str] = {}
    entries: list[dict[str, Any]] = []
    for frame_name, df in frames.items():
        mine = [c for c in checks if c.frame == frame_name]
        if not mine:
            continue
        batch = source.add_dataframe_asset(frame_name).add_batch_definition_whole_dataframe(
            "snapshot")
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
# docs


def quality_url(warehouse: str, table: str) -> str:
    """Where the data docs of ``table`` live."""
    return f"{warehouse.rstrip('/')}/{QUALITY_DIR}/{table}"


def _publish_docs(storage: Storage, docs_dir: str, result: QualityResult) -> None:
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
    storage.put(f"results/{result.snapshot_id}.json",
                json.dumps(result.to_dict(), indent=1, sort_keys=True).encode())


def _topic_policies(topics: set[str], root: str | None, topic_config,
                    compacted: bool | None, storage_options: dict | None) -> set[str]:
    """The topics among ``topics`` that are compacted."""
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
# checking one snapshot


@dataclass
class _Settings:
    root: str | None
    topic_config: Any
    compacted: bool | None
    interval: tuple[int | None, int | None] | None
    check_interval_start: bool
    max_fraction: float
    exact_counts: bool
    storage_options: dict | None


def _settings(thresholds: Mapping[str, Any] | None, **kw) -> _Settings:
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
    exact = str(thresholds.get("exact_row_counts", True)).strip().lower()
    return _Settings(max_fraction=max_fraction,
                     exact_counts=exact not in ("false", "0", "no", "off"), **kw)


def check_snapshot(table, dl_table, snapshot, settings: _Settings, *, name: str,
                   docs_dir: str | None = None) -> QualityResult:
    """Run the checks on the rows ``snapshot`` brought (no tag is moved)."""
    summary = summary_of(snapshot)
    ranges = snapshot_ranges(summary)
    topics = {r.topic for r in ranges}
    compacted = _topic_policies(topics, settings.root, settings.topic_config,
                                settings.compacted, settings.storage_options)
    exact = (topics - compacted) if settings.exact_counts else set()
    if table.metadata.properties.get(MODE_PROPERTY) == "upsert":
        # An upsert snapshot keeps one row per key it won (pipelines.upsert): like a
        # compacted topic, its ranges have holes; every other check applies.
        exact = set()
    start, end = settings.interval or (None, None)
    if not settings.check_interval_start:
        start = None
    append = summary.get("operation") == "append"
    added = int(summary["added-records"]) if append and "added-records" in summary else None

    rows, parts, totals = _frames(ranges, _read_rows(table, dl_table, snapshot, ranges), added)
    checks = _checks(_import_gx(), compacted=compacted, exact=exact,
                     interval_end=None if end is None else int(end),
                     interval_start=None if start is None else int(start),
                     max_fraction=settings.max_fraction, any_rows=len(rows) > 0,
                     compare_added=added is not None)
    own_dir = docs_dir or tempfile.mkdtemp(prefix="kafkastore-quality-")
    try:
        entries, pages = _run_gx(name, snapshot.snapshot_id,
                                 {"rows": rows, "partitions": parts, "totals": totals},
                                 checks, own_dir)
    finally:
        if docs_dir is None:
            import shutil

            shutil.rmtree(own_dir, ignore_errors=True)
    result = QualityResult(
        table=name, snapshot_id=snapshot.snapshot_id,
        operation=summary.get(OPERATION_KEY, summary.get("operation", "?")),
        success=all(e["success"] for e in entries), checks=entries, rows=len(rows),
        dead_letters=int(rows["dead_letter"].sum()) if len(rows) else 0)
    result.pages = pages
    return result


# ---------------------------------------------------------------------------
# the gate: moving the validated tag


def _supersedes(reprocess: list[Range], failed: list[Range]) -> bool:
    """Does a reprocess with ``reprocess`` ranges delete every row a failed
    snapshot with ``failed`` ranges brought (``offset >= from`` per partition)?"""
    starts = {(r.topic, r.partition): r.start for r in reprocess}
    return all((f.topic, f.partition) in starts and starts[(f.topic, f.partition)] <= f.start
               for f in failed if f.until > f.start)


def _pending_after(chain, verdict) -> tuple[Any, int | None]:
    """Walk ``chain`` (snapshots after the tag, oldest first) and return (the
    newest snapshot the tag may point at, the failed snapshot holding back the
    rest). ``verdict(snapshot)`` is True/False for kafkastore snapshots."""
    pending: list[tuple[int, list[Range]]] = []
    candidate = None
    for snap in chain:
        summary = summary_of(snap)
        if _is_kafkastore(summary):
            ranges = snapshot_ranges(summary)
            if summary.get(OPERATION_KEY) == "reprocess":
                pending = [(sid, r) for sid, r in pending if not _supersedes(ranges, r)]
            if not verdict(snap):
                pending.append((snap.snapshot_id, ranges))
        if not pending:
            candidate = snap
    return candidate, (pending[0][0] if pending else None)


def _chain(table, target, tag_snapshot):
    """Snapshots of main's history after the tag up to ``target``, oldest first;
    None when the tag is already at or past ``target``.

    A snapshot expired in between (its rows are still in the table but can no
    longer be read on their own) is a WarehouseError: the tag is not moved over
    unvalidated rows. ``kafkastore vacuum`` never expires these snapshots
    (``pipelines.vacuum.awaiting_validation``) unless told to. pyiceberg's expiry cuts the child's parent link, so a cut
    shows as a walk that ends at a root which is not the table's first snapshot
    (sequence number above 1) or at a parent id that no longer exists.
    """
    tag_line = set()
    if tag_snapshot is not None:
        tag_line = {s.snapshot_id for s in main_ancestry(table, tag_snapshot)}
        if target.snapshot_id in tag_line:
            return None
    out, snap = [], target
    while snap.snapshot_id not in tag_line:
        out.append(snap)
        parent = snap.parent_snapshot_id
        nxt = None if parent is None else table.snapshot_by_id(parent)
        if nxt is None:
            if parent is not None or (snap.sequence_number or 1) > 1:
                raise WarehouseError(
                    f"table {name_of(table)}: snapshots before "
                    f"{snap.snapshot_id}, after the {VALIDATED_TAG} tag, were expired before "
                    f"they were validated; their rows cannot be checked, so the tag stays "
                    f"(kafkastore vacuum keeps such snapshots unless run with "
                    f"--expire-unvalidated; a reprocess does not restore them)")
            break
        snap = nxt
    return list(reversed(out))


def publish(table, dl_table, target, verdict, *, attempts: int = PUBLISH_ATTEMPTS,
            clock: Clock | None = None, rng=None):
    """Move the ``validated`` tag as far towards ``target`` as the verdicts allow
    (see the module docstring); returns (tag snapshot id or None, held_by).

    The move is a commit on kafkastore's one engine (:mod:`kafkastore.commit`): a tag
    moved meanwhile by another validator means walking again from the new tag;
    :class:`kafkastore.errors.CommitGaveUpError` after ``attempts`` such races."""
    engine = CommitEngine(budget=Budget(max_attempts=attempts), clock=clock, rng=rng)
    return engine.run(_TagMove(table, target, verdict))


class _TagMove(CommitTarget):
    """Moving the ``validated`` tag: the catalog's atomic swap of the table's refs. The
    plan walks from the current tag; a lost response is read back from the tag itself."""

    refused_errors = ()
    unknown_errors = (Exception,)   # a failed catalog call may have been applied
    reusable = False                 # a pyiceberg update cannot be committed twice

    def __init__(self, table, target, verdict):
        from pyiceberg.exceptions import CommitFailedException

        self.conflict_errors = (CommitFailedException,)
        self.table, self.target, self.verdict = table, target, verdict

    def read(self):
        self.table = self.table.refresh()
        return self.table

    def plan(self, table, attempt: int):
        tag = table.snapshot_by_name(VALIDATED_TAG)
        chain = _chain(table, self.target, tag)
        if chain is None:
            return Done((tag.snapshot_id, None))
        candidate, held_by = _pending_after(chain, self.verdict)
        if candidate is None:
            return Done(((tag.snapshot_id if tag is not None else None), held_by))
        return (tag.snapshot_id if tag is not None else None), candidate.snapshot_id, held_by

    def put(self, planned) -> None:
        old, candidate, _ = planned
        with self.table.manage_snapshots() as ms:
            if old is not None:
                ms.remove_tag(VALIDATED_TAG)
            ms.create_tag(candidate, VALIDATED_TAG)

    def read_back(self, planned) -> bool | None:
        old, candidate, _ = planned
        now = self.table.refresh().snapshot_by_name(VALIDATED_TAG)
        now_id = now.snapshot_id if now is not None else None
        if now_id == candidate:
            return True
        return None if now_id == old else False

    def result(self, planned, *, attempts: int, read_back: bool):
        return planned[1], planned[2]

    def describe(self, planned) -> str:
        return (f"moving tag {VALIDATED_TAG} of table {name_of(self.table)} "
                f"to snapshot {planned[1]}")


# ---------------------------------------------------------------------------
# the entry points


def validate_snapshot(warehouse: str, table: str, snapshot_id: int | None = None, *,
                      catalog: Mapping[str, Any] | None = None, root: str | None = None,
                      topic_config=None, compacted: bool | None = None,
                      interval: tuple[int | None, int | None] | None = None,
                      check_interval_start: bool = False,
                      thresholds: Mapping[str, Any] | None = None,
                      storage_options: dict | None = None, publish_tag: bool = True,
                      docs: bool = True, raise_on_failure: bool = True) -> QualityResult:
    """Validate the load/reprocess snapshot ``snapshot_id`` of ``table`` (default:
    main's newest kafkastore snapshot) and, with ``publish_tag``, move the
    ``validated`` tag (see the module docstring).

    ``catalog``: the config file's ``catalog:`` properties (None: the embedded
    default). Whether a topic is compacted: ``compacted`` if given, else
    ``topic_config`` (a ``TopicConfig`` or a mapping of Kafka config names),
    else read from the topic under ``root``, else not compacted.
    ``interval``: ``(start_ms, end_ms)`` of the run. ``thresholds``: the config
    file's ``quality`` mapping. ``docs``: write data docs and a JSON summary
    under the warehouse.

    Returns a :class:`QualityResult`; raises :class:`QualityCheckFailed` on a
    failed validation (unless ``raise_on_failure=False``) and
    :class:`ConfigError` for a snapshot that is not a load or reprocess on main.
    """
    settings = _settings(thresholds, root=root, topic_config=topic_config, compacted=compacted,
                         interval=interval, check_interval_start=check_interval_start,
                         storage_options=storage_options)
    wh = Warehouse(warehouse, catalog, storage_options)
    tbl = wh.table(table)
    dl_tbl = wh.load_table(dead_letter_table(table))
    target = _target(tbl, snapshot_id)
    name = table

    with tempfile.TemporaryDirectory(prefix="kafkastore-quality-") as docs_dir:
        result = check_snapshot(tbl, dl_tbl, target, settings, name=name, docs_dir=docs_dir)
        if publish_tag:
            verdicts = {target.snapshot_id: result.success}

            def verdict(snap) -> bool:
                if snap.snapshot_id not in verdicts:
                    verdicts[snap.snapshot_id] = check_snapshot(
                        tbl, dl_tbl, snap, settings, name=name).success
                return verdicts[snap.snapshot_id]

            result.validated_snapshot, held_by = publish(tbl, dl_tbl, target, verdict)
            if result.success and result.validated_snapshot is not None:
                now = tbl.refresh()
                tag = now.snapshot_by_name(VALIDATED_TAG)
                line = {s.snapshot_id for s in main_ancestry(now, tag)} if tag else set()
                result.published = target.snapshot_id in line
            result.held_by = None if result.published else held_by
        if docs:
            site = quality_url(warehouse, table)
            result.docs_url = f"{site}/index.html"
            result.result_url = f"{site}/results/{result.snapshot_id}.json"
            result.pages = [f"{site}/{p}" for p in result.pages]
            qstore = Storage(warehouse, storage_options).child(f"{QUALITY_DIR}/{table}")
            _publish_docs(qstore, docs_dir, result)
        else:
            result.pages = []
    if not result.success and raise_on_failure:
        raise QualityCheckFailed(
            f"{table} snapshot {result.snapshot_id} failed quality checks {result.failed}: "
            + "; ".join(f"{c['name']}: {c['observed']}" for c in result.checks
                        if not c["success"]), result)
    return result


def _target(tbl, snapshot_id: int | None):
    """The snapshot to validate: a kafkastore snapshot of main's history."""
    main = list(main_ancestry(tbl))
    if snapshot_id is None:
        snap = next((s for s in main if _is_kafkastore(summary_of(s))), None)
        if snap is None:
            raise ConfigError(f"table {name_of(tbl)} has no load or "
                              f"reprocess snapshot to validate")
        return snap
    name = name_of(tbl)
    snap = tbl.snapshot_by_id(int(snapshot_id))
    if snap is None or not _is_kafkastore(summary_of(snap)):
        raise ConfigError(f"snapshot {snapshot_id} of {name} is not a load or reprocess snapshot")
    if snap.snapshot_id not in {s.snapshot_id for s in main}:
        raise ConfigError(f"snapshot {snapshot_id} of {name} is not in the history of main "
                          f"(rolled back?)")
    return snap


def validate_for_airflow(warehouse: str, table: str, snapshot_id: int | None, *,
                         catalog: Mapping[str, Any] | None = None, root: str | None = None,
                         interval: tuple[int | None, int | None] | None = None,
                         thresholds: Mapping[str, Any] | None = None,
                         storage_options: dict | None = None) -> dict[str, Any]:
    """For Airflow tasks: plain arguments in, a plain dict out (``{"status": "skipped"}``
    when there is no snapshot to check, e.g. a load that found nothing new)."""
    if snapshot_id is None:
        return {"table": table, "snapshot_id": None, "status": "skipped"}
    result = validate_snapshot(warehouse, table, int(snapshot_id), catalog=catalog, root=root,
                               interval=interval, thresholds=thresholds,
                               storage_options=storage_options)
    print(result.render(), file=sys.stderr)
    return result.to_dict()


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.quality --table T [--snapshot ID]``: validate a load's
    snapshot (default: the newest) and move the ``validated`` tag; for the demo
    and for people (Airflow runs :func:`validate_for_airflow`). Exit 1 on a
    failed check or bad input (one line ``kafkastore: error: ...``)."""
    import argparse

    from pipelines.config import load_config
    from kafkastore.errors import KafkaStoreError

    p = argparse.ArgumentParser(prog="python -m pipelines.quality",
                                description="validate a load's snapshot; move the validated tag")
    p.add_argument("--conf")
    p.add_argument("--root")
    p.add_argument("--warehouse")
    p.add_argument("--table", required=True)
    p.add_argument("--snapshot", type=int, help="snapshot id (default: the newest load)")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.conf, root=args.root)
        result = validate_snapshot(args.warehouse or cfg.warehouse, args.table, args.snapshot,
                                   catalog=getattr(cfg, "catalog", None) or None, root=cfg.root,
                                   thresholds=cfg.quality,
                                   storage_options=cfg.storage_options or None,
                                   raise_on_failure=False)
    except KafkaStoreError as exc:
        print(f"kafkastore: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(result.render())
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
