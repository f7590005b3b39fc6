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

This module holds the verdict (:class:`QualityResult`), the checking of one snapshot, the
reports and the entry points; what a snapshot brought is :mod:`pipelines.quality.rows`,
the Great Expectations checks :mod:`pipelines.quality.checks`, and the move of the tag
:mod:`pipelines.quality.gate`. The package (:mod:`pipelines.quality`) re-exports the public names.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafkastore.errors import ConfigError, KafkaStoreError
from kafkastore.errors import QualityCheckFailed  # noqa: F401  (re-exported)
from kafkastore.storage import Storage
from kafkastore.topics.admin import load_topic
from kafkastore.topics.topic_config import TopicConfig

from ..spec.job_config import load_config
from ..spec.table_layout import dead_letter_table
from ..warehouse.catalog import Warehouse, name_of
from ..warehouse.properties import MODE_PROPERTY, OPERATION_KEY, OPERATIONS, VALIDATED_TAG
from ..warehouse.snapshots import main_ancestry, summary_of
from .checks import expectation_checks, import_gx, run_gx
from .gate import PUBLISH_ATTEMPTS, publish  # noqa: F401 (re-exported)
from .rows import (Range, check_frames, is_kafkastore, read_rows,  # noqa: F401 (re-exported)
                   snapshot_ranges)

log = logging.getLogger(__name__)

QUALITY_DIR = "_quality"
QUALITY_SETTINGS = ("max_dead_letter_fraction", "exact_row_counts")
DEFAULT_MAX_DEAD_LETTER_FRACTION = 0.01
KAFKASTORE_OPERATIONS = OPERATIONS


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
        cfg = topic_config if isinstance(topic_config, TopicConfig) else TopicConfig.from_dict(
            dict(topic_config))
        return set(topics) if cfg.compact else set()
    if root is None:
        return set()
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
        # An upsert snapshot keeps one row per key it won (pipelines.jobs.upsert): like a
        # compacted topic, its ranges have holes; every other check applies.
        exact = set()
    start, end = settings.interval or (None, None)
    if not settings.check_interval_start:
        start = None
    append = summary.get("operation") == "append"
    added = int(summary["added-records"]) if append and "added-records" in summary else None

    rows, parts, totals = check_frames(ranges, read_rows(table, dl_table, snapshot, ranges), added)
    checks = expectation_checks(import_gx(), compacted=compacted, exact=exact,
                     interval_end=None if end is None else int(end),
                     interval_start=None if start is None else int(start),
                     max_fraction=settings.max_fraction, any_rows=len(rows) > 0,
                     compare_added=added is not None)
    own_dir = docs_dir or tempfile.mkdtemp(prefix="kafkastore-quality-")
    try:
        entries, pages = run_gx(name, snapshot.snapshot_id,
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
        snap = next((s for s in main if is_kafkastore(summary_of(s))), None)
        if snap is None:
            raise ConfigError(f"table {name_of(tbl)} has no load or "
                              f"reprocess snapshot to validate")
        return snap
    name = name_of(tbl)
    snap = tbl.snapshot_by_id(int(snapshot_id))
    if snap is None or not is_kafkastore(summary_of(snap)):
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

