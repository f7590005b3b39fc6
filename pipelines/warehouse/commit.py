"""The exactly-once commit of Kafka ranges into a warehouse table (DESIGN.md section 5).

A :class:`KafkaCommit` is data (run id, operation, ranges, Parquet files to add, rows to
delete, schema to merge). Each attempt of :func:`commit` reloads the table, checks whether
the run id is already in main's ancestry (then it is a no-op,
:func:`~.offsets.find_run`), validates the ranges against the committed offsets with the
pure function :func:`~.offsets.next_offsets` (overlap or gap refused), merges the schema
by name, builds one transaction and commits it. pyiceberg's own retry re-applies a commit
blindly, so every table kafkastore creates or commits to has
``commit.retry.num-retries=0`` (:func:`ensure_no_blind_retry`); a
:class:`CommitFailedException` (another writer won) reaches :func:`commit`, which runs on
kafkastore's one commit engine (:mod:`kafkastore.commit`): it backs off (full jitter) and
starts again from the reload, giving up after ``max_attempts`` with
:class:`~kafkastore.errors.CommitGaveUpError`. Any other failure of the catalog call has
an unknown outcome: the engine reads the table back and looks for the run id; it never
deletes the data files (they may be referenced).

A reprocess's rewind (``delete_from``) drops the files whose rows all go and rewrites the
straddling ones without those rows (copy-on-write, never delete files); the data file
entries of new files are built from the footers their writers kept (:func:`data_file`).
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kafkastore.commit import Backoff, Budget, Clock, CommitEngine, CommitTarget, Done
from kafkastore.errors import (BucketNotFoundError, CommitUnknownError, OffsetGapError,
                               OffsetOverlapError, SchemaEvolutionError, TableChangedError,
                               UnsupportedDeletesError, WarehouseError)

from ..spec.offset_ranges import OffsetRange, TopicPartition, offsets_to_json
from .catalog import missing_bucket, name_of, table_fs
from .iceberg_internals import check_schema_compatible, data_files_of
from .offsets import committed_offsets, find_run, next_offsets
from .properties import (AUDIT_KEY, CARRY_OPERATIONS, GAPS_KEY, NO_BLIND_RETRY, OFFSETS_KEY,
                         OPERATION_KEY, OPERATIONS, RANGES_KEY, RETRY_PROPERTY, RUN_ID_KEY)
from .reads import missing_file, range_filter
from .snapshots import MAIN, ref_head, snapshot_offsets


@dataclass(frozen=True)
class KafkaCommit:
    """One kafkastore commit, as data.

    ``files``: full URLs of Parquet files (no field ids; one partition value
    per file) to add. ``delete_from``: for a reprocess, per range the rows
    ``topic = t AND partition = p AND from <= offset < until`` are deleted in the
    same transaction. ``schema``: a pyarrow schema to merge into the table's by
    name first (new optional columns). ``audit``: JSON-able, recorded as
    ``kafkastore.audit``. ``expected``: see :func:`next_offsets`. ``footers``:
    ``{url: (size in bytes, footer)}`` for files whose writer kept their footer
    (see :func:`data_file`); the others' footers are read from the files.
    """

    run_id: str
    operation: str
    ranges: tuple[OffsetRange, ...]
    files: tuple[str, ...] = ()
    gaps: tuple[OffsetRange, ...] = ()
    delete_from: tuple[OffsetRange, ...] = ()
    schema: Any = None
    audit: Mapping[str, Any] | None = None
    expected: Mapping[TopicPartition, int] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    footers: Mapping[str, tuple[int, bytes]] = field(default_factory=dict)
    #: Copy-on-write: ``rewrite(table, head snapshot id) -> (DataFiles to drop,
    #: [(url, bytes, footer)] to add)``, called on every attempt.
    rewrite: Any = None

    def summary(self, offsets: Mapping[TopicPartition, int]) -> dict[str, str]:
        """The snapshot-summary properties of this commit on top of ``offsets``."""
        out = {OFFSETS_KEY: json.dumps(offsets_to_json(offsets), sort_keys=True),
               RUN_ID_KEY: self.run_id, OPERATION_KEY: self.operation,
               RANGES_KEY: json.dumps([r.to_json() for r in self.ranges])}
        if self.gaps:
            out[GAPS_KEY] = json.dumps([g.to_json() for g in self.gaps])
        if self.audit is not None:
            out[AUDIT_KEY] = json.dumps(self.audit, sort_keys=True, default=str)
        out.update({str(k): str(v) for k, v in self.properties.items()})
        return out


@dataclass
class CommitResult:
    """``snapshot_id`` of the run's (last) snapshot; ``noop``: an earlier
    attempt with the same run id had committed; ``attempts``: tries made;
    ``read_back``: the outcome was decided by reading the table back."""

    snapshot_id: int
    noop: bool = False
    attempts: int = 1
    read_back: bool = False
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


def _delete_filter(ranges: Sequence[OffsetRange]):
    """The rows a rewind of ``ranges`` deletes, as a pyiceberg row filter."""
    return range_filter((r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges)


def _keep_mask(data, ranges: Sequence[OffsetRange]):
    """Rows of ``data`` that survive deleting each range's ``[from, until)``."""
    import pyarrow.compute as pc

    drop = None
    for r in ranges:
        term = pc.and_(pc.and_(pc.equal(data["topic"], r.topic),
                               pc.equal(data["partition"], r.partition)),
                       pc.and_(pc.greater_equal(data["offset"], r.from_offset),
                               pc.less(data["offset"], r.until_offset)))
        drop = term if drop is None else pc.or_(drop, term)
    return pc.invert(pc.fill_null(drop, False))


def _offset_bound(table, data_file, upper: bool = False) -> int | None:
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    try:
        fid = table.schema().find_field("offset").field_id
    except ValueError:
        return None
    raw = ((data_file.upper_bounds if upper else data_file.lower_bounds) or {}).get(fid)
    return None if raw is None else int(from_bytes(LongType(), raw))


def _rewind_files(table, ranges: Sequence[OffsetRange], run_id: str, snapshot_id: int | None):
    """Files of ``snapshot_id`` holding rows to delete: those whose rows all go
    (dropped whole) and the straddling ones, rewritten without those rows
    (copy-on-write; never delete files). Returns (drop DataFiles, new file URLs)."""
    import uuid

    import pyarrow.parquet as pq

    if snapshot_id is None:
        return [], []
    drop, new_urls = [], []
    low = {r.topic_partition: (r.from_offset, r.until_offset) for r in ranges}
    for task in table.scan(snapshot_id=snapshot_id, row_filter=_delete_filter(ranges)).plan_files():
        if task.delete_files:
            raise UnsupportedDeletesError(f"table {name_of(table)} has delete files; compact it "
                                          f"before reprocessing")
        df = task.file
        lb = _offset_bound(table, df)
        parts = _single_topic_partition(table, df)
        ub = _offset_bound(table, df, upper=True)
        if (parts is not None and parts in low and lb is not None and ub is not None
                and lb >= low[parts][0] and ub < low[parts][1]):
            drop.append(df)
            continue
        fs, path = table_fs(table, df.file_path)
        try:
            with fs.open(path, "rb") as f:
                data = pq.read_table(f)
        except FileNotFoundError as exc:
            raise missing_file(table, snapshot_id, exc) from None
        kept = data.filter(_keep_mask(data, ranges))
        drop.append(df)
        if kept.num_rows:
            url = f"{table.location()}/data/rewind-{_safe(run_id)}-{uuid.uuid4().hex}.parquet"
            fs2, path2 = table_fs(table, url)
            with fs2.open(path2, "wb") as f:
                pq.write_table(kept, f, compression="zstd")
            new_urls.append(url)
    return drop, new_urls


def check_rewind_files(table, ranges: Sequence[OffsetRange]) -> None:
    """Refuse (:class:`MissingDataFileError`) when a data file of main's head that a rewind
    of ``ranges`` must read or drop is gone: checked before a reprocess writes or commits
    anything, so one table of a table and its dead letters is never rewound alone."""
    head = table.current_snapshot()
    if head is None or not ranges:
        return
    for task in table.scan(snapshot_id=head.snapshot_id,
                           row_filter=_delete_filter(ranges)).plan_files():
        fs, path = table_fs(table, task.file.file_path)
        if not fs.exists(path):
            raise missing_file(table, head.snapshot_id, FileNotFoundError(
                f"no such file: {task.file.file_path}"))


def _single_topic_partition(table, data_file):
    """(topic, partition) when the file's bounds say it holds exactly one."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, StringType

    schema = table.schema()
    try:
        tid, pid = schema.find_field("topic").field_id, schema.find_field("partition").field_id
    except ValueError:
        return None
    lo, hi = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    if not all(k in lo and k in hi for k in (tid, pid)) or lo[tid] != hi[tid] or lo[pid] != hi[pid]:
        return None
    # string bounds may be truncated: equal truncated bounds do not prove one value
    topic = from_bytes(StringType(), lo[tid])
    if len(lo[tid]) >= 16:
        return None
    return (topic, int(from_bytes(IntegerType(), lo[pid])))


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:60]


def ensure_no_blind_retry(table):
    """Set ``commit.retry.num-retries=0`` on a table that lacks it (created elsewhere)."""
    if table.metadata.properties.get(RETRY_PROPERTY) == "0":
        return table
    with table.transaction() as txn:
        txn.set_properties(**NO_BLIND_RETRY)
    return table.refresh()


def _build(table, c: KafkaCommit, branch: str):
    """Stage ``c`` on a fresh transaction of ``table``; returns (txn, new offsets)."""
    committed = committed_offsets(table, branch)
    if c.operation in CARRY_OPERATIONS:
        if c.ranges:
            raise WarehouseError(f"a {c.operation} commit carries offsets forward; it has no ranges")
        new = dict(committed)
    else:
        new = next_offsets(committed, c.operation, c.ranges, gaps=c.gaps, expected=c.expected)
    props = c.summary(new)
    txn = table.transaction()
    if c.schema is not None:
        from pyiceberg.exceptions import ValidationError

        try:
            with txn.update_schema() as update:
                update.union_by_name(c.schema)
        except (ValueError, TypeError, ValidationError) as exc:
            raise SchemaEvolutionError(f"the new data's schema cannot be merged into table "
                                       f"{name_of(table)}: {exc}") from None
    from pyiceberg.table import TableProperties

    if txn.table_metadata.name_mapping() is None:
        # Our files carry no field ids; readers map their columns by name.
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                              txn.table_metadata.schema().name_mapping.model_dump_json()})
    drop, rewritten = [], []
    if c.delete_from:
        head = ref_head(table, branch)
        drop, rewritten = _rewind_files(table, c.delete_from, c.run_id,
                                        head.snapshot_id if head is not None else None)
    footers = dict(c.footers)
    if c.rewrite is not None:
        # Copy-on-write (upsert loads, maintenance): planned against this attempt's
        # table, so a racing commit makes the next attempt plan again.
        head = ref_head(table, branch)
        more_drop, written = c.rewrite(table, head.snapshot_id if head is not None else None)
        drop = list(drop) + list(more_drop)
        rewritten = rewritten + [u for u, _, _ in written]
        footers.update({u: (size, footer) for u, size, footer in written})
    try:
        files = list(c.files) + rewritten
        unread = [u for u in files if u not in footers]   # e.g. reprocess rewrites
        read = dict(zip(unread, data_files_of(txn.table_metadata, unread, table.io)))
        added = [read[u] if u in read else data_file(txn.table_metadata, u, *footers[u])
                 for u in files]
    except ValueError as exc:
        raise SchemaEvolutionError(f"files of run {c.run_id} do not fit table "
                                   f"{name_of(table)}: {exc}") from None
    # One snapshot per commit, even with no files: offsets advance over ranges
    # that held only control records, aborted data or dead letters.
    update = txn.update_snapshot(snapshot_properties=props, branch=branch)
    with (update.overwrite() if drop else update.fast_append()) as producer:
        for df in drop:
            producer.delete_data_file(df)
        for df in added:
            producer.append_data_file(df)
    return txn, new


def data_file(metadata, url: str, size: int, footer: bytes):
    """The Iceberg data file entry of the Parquet file at ``url`` (``size`` bytes) from
    its ``footer`` (a standalone Parquet metadata file, as
    :func:`pipelines.warehouse.files.write_files` keeps it): what pyiceberg's
    ``parquet_file_to_data_file`` builds after reading the footer back from the file, the
    same checks (ValueError if the schema does not fit) and statistics, without the read. Loads write many files and the executors that
    wrote them already had their footers."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (compute_statistics_plan,
                                      data_file_statistics_from_parquet_metadata,
                                      parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    parquet = pq.read_metadata(pa.BufferReader(footer))
    schema = metadata.schema()
    check_schema_compatible(schema, parquet.schema.to_arrow_schema(), metadata.format_version)
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet, stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=url, file_format=FileFormat.PARQUET,
        partition=stats.partition(metadata.spec(), schema), file_size_in_bytes=size,
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None,
        key_metadata=None, **stats.to_serialized_dict())


def commit(table, c: KafkaCommit, *, branch: str = MAIN, max_attempts: int = 20,
           backoff_s: float = 0.05, max_backoff_s: float = 5.0,
           read_back_tries: int = 5, clock: Clock | None = None,
           rng: random.Random | None = None) -> CommitResult:
    """Commit ``c`` to ``table`` exactly once (see the module docstring), on the one
    commit engine (:class:`kafkastore.commit.CommitEngine`).

    Raises the validation errors of :func:`next_offsets` (nothing committed),
    :class:`SchemaEvolutionError`, :class:`kafkastore.errors.CommitGaveUpError` after
    ``max_attempts`` conflicts, :class:`kafkastore.errors.CommitUnknownError` when reading
    back cannot decide (the files stay; rerunning the same run id is safe).
    """
    if c.operation not in OPERATIONS + CARRY_OPERATIONS:
        raise WarehouseError(f"unknown operation {c.operation!r}")
    engine = CommitEngine(backoff=Backoff(backoff_s, max_backoff_s),
                          budget=Budget(max_attempts=max_attempts),
                          unknown_retries=max(1, read_back_tries) - 1, clock=clock, rng=rng)
    return engine.run(_TableTarget(ensure_no_blind_retry(table), c, branch))


class _TableTarget(CommitTarget):
    """One :func:`commit` as the engine sees it: the catalog's atomic swap of the table's
    metadata. A pyiceberg transaction cannot be committed twice, so after an unknown
    outcome read back as absent the engine plans afresh; the run id (looked up first on
    every attempt) recognises a late landing."""

    fatal_errors = (TableChangedError, OffsetGapError, OffsetOverlapError, SchemaEvolutionError,
                    BucketNotFoundError)
    unknown_errors = (Exception,)   # a catalog call that failed otherwise may have been applied
    refused_errors = ()
    reusable = False
    unknown_hint = "; its files are kept; rerun with the same run id"

    def __init__(self, table, c: KafkaCommit, branch: str):
        from pyiceberg.exceptions import CommitFailedException

        self.conflict_errors = (CommitFailedException,)
        self.table, self.c, self.branch = table, c, branch
        self.fresh = True
        self.found = None

    def read(self):
        if not self.fresh:
            self.table = self.table.refresh()
        self.fresh = False
        return self.table

    def plan(self, table, attempt: int):
        done = find_run(table, self.c.run_id, self.branch)
        if done is not None:
            return Done(CommitResult(done.snapshot_id, noop=True, attempts=attempt,
                                     offsets=snapshot_offsets(done) or {}))
        try:
            txn, new = _build(table, self.c, self.branch)   # re-validates the offsets every attempt
        except FileNotFoundError:
            self._raise_if_no_bucket()
            raise
        return txn, new

    def _raise_if_no_bucket(self) -> None:
        """Writing the manifests failed with "not found" before the catalog swap: with
        the bucket gone that is a definite failure, not an unknown outcome to read back."""
        missing = missing_bucket(self.table.io.properties, self.table.location())
        if missing is not None:
            raise missing from None

    def put(self, planned) -> None:
        try:
            self.table = planned[0].commit_transaction()
        except FileNotFoundError:
            self._raise_if_no_bucket()
            raise

    def read_back(self, planned) -> bool | None:
        self.table = self.table.refresh()
        self.found = find_run(self.table, self.c.run_id, self.branch)
        return True if self.found is not None else None

    def result(self, planned, *, attempts: int, read_back: bool) -> CommitResult:
        if read_back:
            return CommitResult(self.found.snapshot_id, attempts=attempts, read_back=True,
                                offsets=snapshot_offsets(self.found) or {})
        snap = find_run(self.table, self.c.run_id, self.branch)
        if snap is None:   # pragma: no cover - a catalog that acknowledged and lost the commit
            raise CommitUnknownError(f"commit of run {self.c.run_id} acknowledged but not in "
                                     f"{self.branch}")
        return CommitResult(snap.snapshot_id, attempts=attempts, offsets=planned[1])

    def describe(self, planned) -> str:
        return f"commit of run {self.c.run_id}"
