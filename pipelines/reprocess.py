"""Rewind a warehouse table to an offset or a time and reload from the log (DESIGN.md section 5).

One run is ONE audited ``reprocess`` commit (operation, user, reason, the
requested offsets or timestamp) that atomically replaces, per partition, the
table's rows at and after the rewind point:

* the rewind point is ``from_offset``, or per partition the first offset whose
  timestamp is at or after ``from_timestamp``;
* :func:`pipelines.warehouse.plan_rewind` lists the live files to remove (data
  and dead letters) and lowers the commit's range start to the first offset of
  any file straddling the point (``effective_from``); the rows of those files
  below the point are copied into new files (:func:`~pipelines.warehouse.copy_rows_below`),
  so nothing below the requested point changes;
* the rows ``[requested, end)`` are read again from the log with the data
  source, decoded with the table's load options (``load_options``: the config
  file's ``loads`` entry) and written on the executors.

**End of the reload**: the table's committed end for that partition, as it was
when the run started. A reprocess replaces what the table held and never
advances it: the next scheduled load continues from the same offset, so the
two never overlap. If a load commits in between, the reprocess commit is
refused (:class:`WarehouseError`: "table changed"), nothing changes, rerun it.

The rewind point must still be in the log (at or after the log start offset):
rows the log no longer holds cannot be reloaded, and the warehouse's copy is
then the only one, so such a rewind is refused rather than losing them.
``Table.history()`` shows who rewound what, when and why.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.reader import PartitionReader
from kafkastore.storage import Storage

from . import load as _load
from . import warehouse as wh


@dataclass
class ReprocessSummary:
    """What a reprocess did: per partition the requested and effective rewind
    offsets, the reloaded range, the removed files and the rows written."""

    topic: str
    table: str
    run_id: str
    version: int | None = None
    noop: bool = False
    reason: str = ""
    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)
    rows: int = 0
    dead_letters: int = 0
    copied_rows: int = 0
    removed_files: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"topic": self.topic, "table": self.table, "run_id": self.run_id,
                "version": self.version, "noop": self.noop, "reason": self.reason,
                "partitions": {str(p): v for p, v in self.partitions.items()},
                "rows": self.rows, "dead_letters": self.dead_letters,
                "copied_rows": self.copied_rows, "removed_files": self.removed_files,
                "seconds": round(self.seconds, 3)}

    def render(self) -> str:
        """Human-readable summary, one line per partition."""
        head = f"reprocess {self.topic} -> {self.table} (run {self.run_id})"
        if self.noop:
            return f"{head}: nothing to do: {self.reason}"
        lines = [f"{head}: committed version {self.version} in {self.seconds:.1f}s: "
                 f"{self.rows} rows reloaded, {self.dead_letters} dead letters, "
                 f"{self.copied_rows} rows copied, {self.removed_files} files replaced"]
        for p, d in sorted(self.partitions.items()):
            lines.append(f"  partition {p}: rewound to {d['requested_from']} (effective "
                         f"{d['effective_from']}), reloaded [{d['requested_from']}, {d['until']})")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Part:
    partition: int
    requested: int
    plan: wh.RewindPlan
    until: int
    committed: tuple[int, int]


def _decode_opts(load_options: Mapping[str, Any] | None):
    entry = dict(load_options or {})
    extra = {k: entry[k] for k in _load._DECODE_KEYS[3:] if entry.get(k) is not None}
    return _load.decode_options(entry.get("value_format") or "raw", entry.get("value_schema"),
                                entry.get("value_schema_file"), **extra)


def plan_reprocess(state: wh.TableState, storage: Storage, topic: str, *,
                   partitions: list[int] | None = None, from_offset: int | None = None,
                   from_timestamp: int | None = None) -> list[_Part]:
    """Per partition: the rewind point, the rewind plan and the reload end (driver only)."""
    if (from_offset is None) == (from_timestamp is None):
        raise ConfigError("give exactly one of from_offset and from_timestamp")
    committed = {p: rng for (t, p), rng in state.offsets.items() if t == topic}
    if partitions is None:
        partitions = sorted(committed)
        if not partitions:
            raise WarehouseError(f"the table has loaded nothing from topic {topic!r}: nothing to "
                                 f"reprocess")
    out = []
    for p in partitions:
        if p not in committed:
            raise WarehouseError(f"{topic}/{p}: the table has loaded nothing from this partition: "
                                 f"nothing to reprocess (use a load)")
        start, nxt = committed[p]
        reader = PartitionReader(storage, topic, p)
        if from_offset is not None:
            requested = int(from_offset)
            if requested > nxt:
                raise WarehouseError(f"{topic}/{p}: cannot rewind to {requested}: the table has "
                                     f"loaded [{start}, {nxt}) only")
        else:
            # Records at or after the time that the table holds; none: nothing to rewind.
            requested = min(reader.offset_for_timestamp(int(from_timestamp)), nxt)
        if requested >= nxt:
            continue
        if requested < reader.log_start_offset:
            raise WarehouseError(
                f"{topic}/{p}: cannot reprocess from {requested}: the log now starts at "
                f"{reader.log_start_offset}, so offsets [{requested}, {reader.log_start_offset}) "
                f"cannot be read again and the table holds the only copy; rewind from "
                f"{reader.log_start_offset} or later")
        plan = wh.plan_rewind(state, topic, p, requested)
        out.append(_Part(p, requested, plan, nxt, (start, nxt)))
    return out


def run_reprocess(spark, *, root: str, topic: str, warehouse: str, table: str,
                  partitions: list[int] | None = None, from_offset: int | None = None,
                  from_timestamp: int | None = None, storage_options: dict | None = None,
                  reason: str = "", load_options: Mapping[str, Any] | None = None,
                  run_id: str | None = None, user: str | None = None,
                  max_bytes_per_partition: int | None = None,
                  max_rows_per_file: int = _load.DEFAULT_MAX_ROWS_PER_FILE,
                  compression: str = "zstd", progress: bool = True,
                  now_ms: int | None = None) -> ReprocessSummary:
    """Replace ``table``'s rows of ``topic`` at and after ``from_offset`` (or the
    first offset at or after ``from_timestamp``, per partition) with a fresh read
    of the log, for ``partitions`` (default: every partition the table loaded),
    in one audited commit. See the module docstring.
    """
    started = time.monotonic()
    opts = _decode_opts(load_options)
    storage = Storage(root, storage_options)
    tbl = wh.Table(warehouse, table, storage_options=storage_options)
    state = tbl.state()
    parts = plan_reprocess(state, storage, topic, partitions=partitions, from_offset=from_offset,
                           from_timestamp=from_timestamp)
    run_id = run_id or f"reprocess-{topic}-{uuid.uuid4().hex[:16]}"
    summary = ReprocessSummary(topic, table, run_id)
    if not parts:
        summary.noop = True
        summary.reason = "the table holds no rows at or after the rewind point"
        summary.seconds = time.monotonic() - started
        return summary

    files: list[wh.DataFile] = []
    # Rows of straddling files below the requested point: copied, unchanged.
    for part in parts:
        for f in part.plan.straddling:
            copies = wh.copy_rows_below(tbl.url, f, part.requested, run_id=run_id,
                                        storage_options=tbl.storage_options or None,
                                        compression=compression)
            files += [wh.DataFile.from_json(c) for c in copies]
    copied = sum(f.rows for f in files)

    tracker = _load.Progress(spark, f"reprocess {topic} -> {table}") if progress else None
    if tracker:
        tracker.start()
    try:
        ranges = [_load.PartitionRange(x.partition, x.requested, x.until, 0, 0) for x in parts]
        reloaded = _load.write_ranges(spark, root, topic, ranges, tbl, run_id, opts,
                                      storage_options=storage_options,
                                      max_bytes=max_bytes_per_partition,
                                      counter=tracker.counter if tracker else None,
                                      max_rows_per_file=max_rows_per_file,
                                      compression=compression)
    finally:
        if tracker:
            tracker.stop()
    files += reloaded
    _load.check_disjoint(files)

    for x in parts:
        summary.partitions[x.partition] = {
            "requested_from": x.requested, "effective_from": x.plan.effective_from,
            "until": x.until, "removed": [f.path for f in x.plan.remove],
            "previous": list(x.committed)}
    summary.rows = sum(f.rows for f in reloaded if f.kind == "data")
    summary.dead_letters = sum(f.rows for f in reloaded if f.kind == "dead_letter")
    summary.copied_rows = copied
    summary.removed_files = sum(len(x.plan.remove) for x in parts)
    info = {"reason": reason or "", "from_offset": from_offset, "from_timestamp": from_timestamp,
            "requested_from": {str(x.partition): x.requested for x in parts},
            "effective_from": {str(x.partition): x.plan.effective_from for x in parts},
            "rows": summary.rows, "dead_letters": summary.dead_letters,
            "copied_rows": copied, "value_format": opts.value_format}
    who = user or _load._user()
    commit_now = int(time.time() * 1000) if now_ms is None else int(now_ms)

    def build(current: wh.TableState) -> wh.Commit:
        commit = wh.Commit.reprocess(
            run_id, files,
            {(topic, x.partition): (x.plan.effective_from, x.until) for x in parts},
            [f.path for x in parts for f in x.plan.remove],
            now_ms=commit_now, user=who, info=info)
        if run_id in current.runs:
            return commit   # already ours (a settled lost response): Table.commit makes it a no-op
        # Refuse if a load or another rewind changed these partitions since we planned.
        for x in parts:
            again = wh.plan_rewind(current, topic, x.partition, x.requested) \
                if (topic, x.partition) in current.offsets else None
            if (current.offsets.get((topic, x.partition)) != x.committed or again is None
                    or {f.path for f in again.remove} != {f.path for f in x.plan.remove}):
                raise WarehouseError(
                    f"{topic}/{x.partition}: the table changed while reprocessing (a load or "
                    f"another reprocess committed); nothing was changed, run it again")
        return commit

    result = tbl.commit(build)
    summary.version = result.version
    if result.noop:
        summary.noop, summary.reason = True, f"run id committed earlier at version {result.version}"
    summary.seconds = time.monotonic() - started
    return summary
