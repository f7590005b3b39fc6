"""Table maintenance (``kafkastore maintain``): small files into target-sized
ones, delete files folded into the data. No Spark: pyiceberg and pyarrow on one process.

**What is rewritten.** Per partition value of the table's spec, the data files of
main's head smaller than ``small_bytes`` (default three quarters of the target), when
there are at least two of them, and every data file a delete file applies to. They are
read through pyiceberg (positional deletes applied; equality deletes refused: no
reader here applies them) and written again sorted in the row order of the layout the table's properties record
(:meth:`pipelines.spec.table_layout.TableLayout.row_order`: upsert tables by their key, so
loads keep touching few files; others by topic, partition, offset), cut into files of
about ``target_bytes`` (estimated from the rows' size in the inputs).

**One snapshot, offsets carried forward.** The rewrite is a
:class:`pipelines.warehouse.commit.KafkaCommit` of operation ``maintain`` with no ranges: its
snapshot carries the committed offsets of the table it was planned on, unchanged, and
a run id. It goes through the one commit path (:func:`pipelines.warehouse.commit.commit`): the
plan is made again on every attempt against the reloaded table, so a load committing
meanwhile makes maintenance re-plan (its files are never lost, its offsets are the ones
carried), never the other way round.

**Folded deletes.** A data file rewritten with its deletes applied gets a new,
higher sequence number, so the old position delete files apply to nothing any more:
scans plan no delete file for it, and Spark reads the table's files directly again.
pyiceberg cannot drop delete-file entries from a snapshot, so those dangling entries
stay listed (metadata only) until the table's own engine drops them.

**Readers.** Nothing is removed from storage: the replaced files stay readable by
every older snapshot, until ``kafkastore vacuum`` expires those snapshots and, after
its grace period, removes the files.
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from kafkastore.errors import UnsupportedDeletesError

from ..warehouse.catalog import table_fs
from ..warehouse.commit import KafkaCommit, commit, ensure_no_blind_retry
from ..spec.table_layout import TableLayout, table_name
from .upsert import read_tasks, write_sorted

DEFAULT_TARGET_BYTES = 128 << 20


@dataclass
class MaintainStats:
    """What one attempt rewrote."""

    files_before: int = 0
    files_rewritten: int = 0
    files_written: int = 0
    delete_files_folded: int = 0
    rows: int = 0
    bytes_read: int = 0


def plan_groups(tasks, small_bytes: int) -> list[list]:
    """The groups of scan tasks to rewrite together: per partition value, the small
    files when there are two or more, and every file a delete file applies to."""
    by_part: dict[Any, list] = {}
    for t in tasks:
        by_part.setdefault((t.file.spec_id, repr(t.file.partition)), []).append(t)
    groups = []
    for items in by_part.values():
        small = [t for t in items if t.file.file_size_in_bytes < small_bytes and not t.delete_files]
        deleted = [t for t in items if t.delete_files]
        chosen = (small if len(small) >= 2 else []) + deleted
        if chosen:
            groups.append(chosen)
    return groups


@dataclass
class MaintainRewrite:
    """The rewrite of a ``maintain`` commit, planned afresh on every attempt."""

    run_id: str
    target_bytes: int = DEFAULT_TARGET_BYTES
    small_bytes: int | None = None
    stats: MaintainStats = field(default_factory=MaintainStats)

    def __call__(self, table, snapshot_id: int | None):
        if snapshot_id is None:
            self.stats = MaintainStats()
            return [], []
        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
        small = self.small_bytes if self.small_bytes is not None else self.target_bytes * 3 // 4
        groups = plan_groups(tasks, small)
        # The layout as the table records it (declared fields, read generically).
        layout = TableLayout.of_properties(table.metadata.properties)
        sort = layout.row_order(table.schema().column_names)
        drop, written = [], []
        stats = MaintainStats(files_before=len(tasks))
        folded = set()
        for group in groups:
            for t in group:
                if any(d.content != 1 for d in t.delete_files):
                    raise UnsupportedDeletesError(
                        f"table {table_name(table.name())} has equality delete files, which "
                        f"kafkastore cannot apply; compact it with the engine that wrote them")
                folded.update(d.file_path for d in t.delete_files)
            rows = read_tasks(table, group)
            size = sum(t.file.file_size_in_bytes for t in group)
            per_row = size / max(1, sum(t.file.record_count for t in group))
            target_rows = max(1, int(self.target_bytes / max(per_row, 1e-9)))
            written += write_sorted(table.location(), rows, sort, run_id=self.run_id,
                                    partition_by=(), target_rows=target_rows,
                                    io_fs=table_fs(table, table.location()), prefix="maintain")
            drop += [t.file for t in group]
            stats.files_rewritten += len(group)
            stats.rows += rows.num_rows
            stats.bytes_read += size
        stats.files_written = len(written)
        stats.delete_files_folded = len(folded)
        self.stats = stats
        return drop, written


@dataclass
class MaintainResult:
    """One table's maintenance: the snapshot committed (None: nothing to do)."""

    table: str
    snapshot_id: int | None
    stats: MaintainStats
    noop: bool = False

    def render(self) -> str:
        s = self.stats
        if self.snapshot_id is None:
            return (f"maintain {self.table}: nothing to do ({s.files_before} data files, "
                    f"none small or with deletes)")
        return (f"maintain {self.table}: snapshot {self.snapshot_id}: {s.files_rewritten} files "
                f"({s.rows} rows, {s.bytes_read} bytes) rewritten into {s.files_written}, "
                f"{s.delete_files_folded} delete files folded; offsets carried forward")

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "snapshot_id": self.snapshot_id, "noop": self.noop,
                **asdict(self.stats)}


def maintain(table, *, run_id: str | None = None, target_bytes: int = DEFAULT_TARGET_BYTES,
             small_bytes: int | None = None, max_attempts: int = 20) -> MaintainResult:
    """Rewrite ``table``'s small files and fold its delete files (module docstring)."""
    name = table_name(table.name())
    table = ensure_no_blind_retry(table)
    probe = MaintainRewrite("probe", target_bytes, small_bytes)
    head = table.current_snapshot()
    if head is None or not plan_groups(list(table.scan(snapshot_id=head.snapshot_id).plan_files()),
                                       probe.small_bytes if small_bytes is not None
                                       else target_bytes * 3 // 4):
        files = len(list(table.scan().plan_files())) if head is not None else 0
        return MaintainResult(name, None, MaintainStats(files_before=files), noop=True)
    run_id = run_id or f"maintain-{uuid.uuid4().hex}"
    rewrite = MaintainRewrite(run_id, target_bytes, small_bytes)
    result = commit(table, KafkaCommit(run_id, "maintain", (), rewrite=rewrite),
                    max_attempts=max_attempts)
    return MaintainResult(name, result.snapshot_id, rewrite.stats, noop=result.noop)


def maintain_tables(warehouse, names: Sequence[str] | None = None, **kw) -> list[dict[str, Any]]:
    """For the CLI and Airflow: maintain ``names`` (default: every table) of a
    :class:`pipelines.warehouse.catalog.Warehouse`; plain dicts out."""
    names = list(names) if names else warehouse.list_tables()
    return [maintain(warehouse.table(n), **kw).to_dict() for n in names]
