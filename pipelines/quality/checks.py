"""The quality gate's checks, run with Great Expectations: the expectations for one
snapshot's rows (offsets unique and in their ranges, counts, dead-letter fraction, keys on
compacted topics) and their run in an ephemeral GX context.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any



# ---------------------------------------------------------------------------
# Great Expectations


def import_gx():
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
    gx = import_gx()
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


def expectation_checks(gx, *, compacted: set[str], exact: set[str], interval_end: int | None,
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


def run_gx(table_name: str, snapshot_id: int, frames: dict[str, Any], checks: list[_Check],
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
