"""The retention job: apply ``retention.ms`` / ``retention.bytes`` to a topic and
report warehouse tables that lose data they never loaded.

Wraps :func:`kafkastore.maintenance.retention.retention_for_topic`, passing the committed
offsets of every warehouse table that loads the topic (the Iceberg snapshot
offsets, :func:`pipelines.jobs.lag.committed_offsets_by_table`), so the report names each
table whose next offset falls below the new log start offset (its next load
then fails with a data-loss error unless it skips the gap). With
``protect_unloaded=True`` retention keeps the segments some table has not
loaded yet (a departure from Kafka, where retention ignores consumers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kafkastore.maintenance.merge import merge_partition
from kafkastore.maintenance.retention import RetentionResult, retention_for_topic
from kafkastore.storage import Storage

from .lag import committed_offsets_by_table


@dataclass
class RetentionReport:
    """Per-partition results of one retention run and the tables it checked."""

    topic: str
    results: list[RetentionResult] = field(default_factory=list)
    tables: dict[str, dict[int, int]] = field(default_factory=dict)
    #: What merging small segments did afterwards (kafkastore.maintenance.merge), per partition.
    merges: list = field(default_factory=list)

    @property
    def newly_lost(self):
        """(table, partition, committed, new log start) for data lost by this run."""
        return [(u.table, u.partition, u.committed_offset, u.log_start_offset)
                for r in self.results for u in r.newly_lost]

    def to_dict(self) -> dict:
        """Plain JSON-able form."""
        return {"topic": self.topic, "tables": {t: {str(p): n for p, n in o.items()}
                                                for t, o in self.tables.items()},
                "partitions": {str(r.partition): {
                    "previous_log_start_offset": r.previous_log_start_offset,
                    "log_start_offset": r.log_start_offset, "high_watermark": r.high_watermark,
                    "segments_dropped": len(r.dropped), "bytes_dropped": r.bytes_dropped,
                    "capped": r.capped,
                    "unloaded": [{"table": u.table, "committed": u.committed_offset,
                                  "newly_lost": u.newly_lost} for u in r.unloaded]}
                    for r in self.results}}

    def render(self) -> str:
        """Human-readable report, one line per partition plus one per table losing data."""
        lines = [f"retention {self.topic}: checked against {len(self.tables)} warehouse "
                 f"table(s){': ' + ', '.join(sorted(self.tables)) if self.tables else ''}"]
        for r in self.results:
            if r.changed:
                what = (f"log start {r.previous_log_start_offset} -> {r.log_start_offset}, "
                        f"dropped {len(r.dropped)} segment(s), {r.bytes_dropped} bytes")
            else:
                what = f"unchanged (log start {r.log_start_offset})"
            if r.capped:
                what += ", capped to keep data not loaded yet"
            lines.append(f"  partition {r.partition}: {what}")
            for u in r.unloaded:
                verb = "LOSES" if u.newly_lost else "already lost"
                lines.append(f"    WARNING table {u.table} {verb} offsets [{u.committed_offset}, "
                             f"{u.log_start_offset}) it never loaded")
        lines += [f"  {m}" for m in self.merges if m.merged or m.dropped]
        return "\n".join(lines)


def run_retention(root: str, topic: str, *, warehouse=None,
                  storage_options: dict | None = None, protect_unloaded: bool = False,
                  now_ms: int | None = None, catalog: dict | None = None,
                  merge: bool = True) -> RetentionReport:
    """Apply retention to every partition of ``topic``; with ``warehouse`` (a URL,
    with the config's ``catalog`` section, or a :class:`pipelines.warehouse.catalog.Warehouse`),
    check (and with ``protect_unloaded``, protect) the data its tables have not loaded.
    Then, with ``merge``, merge each partition's small segments (the tiered policy of
    :mod:`kafkastore.maintenance.merge`), for the logs no ``serve`` broker or long-running producer merges."""
    tables = (committed_offsets_by_table(warehouse, topic, storage_options, catalog)
              if warehouse else {})
    storage = Storage(root, storage_options)
    now = storage.clock.wall_ms() if now_ms is None else int(now_ms)
    results = retention_for_topic(storage, topic, now,
                                  committed_offsets=tables, protect_unloaded=protect_unloaded)
    report = RetentionReport(topic, results, tables)
    if merge:
        for r in results:
            report.merges.append(merge_partition(storage, topic, r.partition, min_segments=0,
                                                 rounds=64, writer="retention-job"))
    return report
