"""Log compaction as a Spark job (DESIGN.md section 6; the rules are in :mod:`kafkastore.maintenance.compaction`).

One job compacts every selected partition of a topic:

1. **Plan** (driver): per partition, the latest manifest and
   :func:`kafkastore.maintenance.compaction.plan_cleaning` (selection, first dirty and
   first uncleanable offsets, segment groups). Only metadata is read.
2. **Compact whole partitions** (executors, one stage, ``mapInArrow``): a partition
   whose log below the first uncleanable offset is at most :data:`TASK_BYTES` is
   compacted inside one Spark task, which sees every key of it: the task scans its
   ranges, decides the survivors (:func:`survivors`, the same rule as below) and
   rewrites its groups (:func:`compact_scanned`); no shuffle, one pass over the rows.
   Whole partitions are packed by bytes into about one task per core
   (:func:`~pipelines.source.planning.pack_by_bytes`, as the load does); a task
   with cores to spare (fewer tasks than cores) scans and rewrites on that many
   threads (the C decoder and encoder release the GIL). A task holds one
   partition's scanned rows at a time: at most :data:`TASK_BYTES` of log, the same
   bound as a survivor shuffle partition below.

Partitions bigger than that go through steps 3-5 instead (three stages, two
shuffles), where no process holds the key map of a whole partition:

3. **Scan** (executors, ``mapInArrow``): one task per batch-aligned byte range
   of the segments below the first uncleanable offset
   (:func:`kafkastore.maintenance.compaction.scan_task`) yields a row per keyed committed
   record ``(group, key, offset, dirty)`` and a few rows per transactional
   producer.
4. **Survivors** (executors, one shuffle by key): the scanned rows are
   hash-partitioned by ``(partition, key)`` into enough shuffle partitions
   that each holds a bounded share of the keys (one per
   :data:`SURVIVOR_BYTES` of scanned log, at least four per core); each task
   gives every key the greatest offset of its records in the dirty section
   (Arrow hash codes, numpy) and keeps a record iff there is none or its
   offset is at least that (:func:`survivors`). The producer-id rows of one
   producer meet in the same task, which tells each group which producers'
   transactions have data in earlier groups. No process ever holds the whole
   key map: it only exists spread over the shuffle partitions, whose number
   grows with the log, so a task's memory is bounded by its share, not by
   the number of distinct keys.
5. **Rewrite** (executors, one shuffle by group, ``groupBy().applyInArrow``):
   each task gets the sorted survivor offsets of one segment group (at most a
   segment's worth of records), rewrites the group into one segment
   (:func:`kafkastore.maintenance.compaction_rewrite.rewrite_group`), uploads it and returns
   only the new :class:`~kafkastore.manifest.SegmentEntry` as JSON.
6. **Swap** (driver): per partition, one manifest commit
   (:func:`kafkastore.maintenance.compaction_rewrite.commit_cleaning`).

Executors reach the storage through :class:`~kafkastore.storage.Storage`
(fsspec) rebuilt from the root URL and ``storage_options``; a ``memory://``
root lives in one process only and cannot be compacted by Spark (use
:func:`kafkastore.maintenance.compaction_rewrite.compact_partition_local`).
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from kafkastore.maintenance.compaction import (KIND_GROUP, KIND_RECORD, KIND_TXN, SCAN_SCHEMA,
                                               CleanContext, CleaningPlan, CompactionReport,
                                               GroupSpec, PartitionResult, ScanTask, Skip,
                                               group_specs, latest_dirty_offsets, load_plan,
                                               partition_error, scan_task, scan_tasks,
                                               skipped_result)
from kafkastore.maintenance.compaction_rewrite import GroupResult, finish_partition, rewrite_group
from kafkastore.errors import ConfigError
from kafkastore.manifest import Manifest
from kafkastore.storage import Storage
from kafkastore.topics.admin import load_topic
from pipelines.source.planning import pack_by_bytes
from pipelines.spark_errors import is_spark_error, summarize

__all__ = ["compact_partition", "compact_topic", "compact_scanned", "run_plans", "scan_slices",
           "CompactionReport", "PartitionResult"]

log = logging.getLogger(__name__)

_SCAN_DDL = ("plan int, grp int, kind tinyint, key binary, offset long, dirty boolean, "
             "pid long, last_data long, last_marker long")
_KEEP_DDL = "grp int, kind tinyint, offset long, pid long"
_RESULT_DDL = "grp int, result string"


def _check_storage(storage: Storage) -> None:
    if storage.protocol == "memory":
        raise ConfigError("a memory:// root is private to one process, so Spark workers cannot "
                          "read it; use kafkastore.maintenance.compaction_rewrite.compact_partition_local")


def compact_partition(spark, storage: Storage, topic: str, partition: int, now_ms: int,
                      force: bool = False) -> PartitionResult:
    """Compact one partition with Spark if :func:`~kafkastore.maintenance.compaction.plan_cleaning` selects it
    (or ``force``); ``now_ms`` is the time tombstone horizons and compaction lags are measured
    against. Returns the partition's result (skipped, cleaned, or gave up and why)."""
    _check_storage(storage)
    started = storage.clock.monotonic_s()
    m, plan = load_plan(storage, topic, partition, now_ms, force=force)
    if isinstance(plan, Skip):
        return skipped_result(topic, partition, plan, storage.clock.monotonic_s() - started)
    return run_plans(spark, storage, [plan], [m], raise_errors=True)[0]


def compact_topic(spark, root_url: str, topic: str, *, storage_options: dict | None = None,
                  now_ms: int | None = None, force: bool = False,
                  partitions: Iterable[int] | None = None) -> CompactionReport:
    """Compact every selected partition of ``topic`` under ``root_url`` in one Spark job.

    ``now_ms`` defaults to the wall clock; ``force`` ignores the selection
    rules (dirty ratio, lags, horizons) but never cleans the head segment or
    past an open transaction; ``partitions`` limits the run. If the job fails,
    each selected partition is retried in a job of its own so that one bad
    partition does not hold back the others; its error is reported in
    :meth:`CompactionReport.render` (and :attr:`CompactionReport.ok` is False).
    """
    storage = Storage(root_url, storage_options)
    started = storage.clock.monotonic_s()
    _check_storage(storage)
    meta = load_topic(storage, topic)
    now_ms = storage.clock.wall_ms() if now_ms is None else int(now_ms)
    chosen = range(meta.partitions) if partitions is None else sorted(set(partitions))
    report = CompactionReport(topic)
    plans: list[CleaningPlan] = []
    manifests: list[Manifest] = []
    def planned(p):
        t0 = storage.clock.monotonic_s()
        return p, t0, load_plan(storage, topic, p, now_ms, force=force, config=meta.config)

    # Manifests read in parallel: one after the other they were a driver cost per partition.
    for p, t0, (m, plan) in _in_threads(planned, chosen):
        if isinstance(plan, Skip):
            report.partitions.append(skipped_result(topic, p, plan, storage.clock.monotonic_s() - t0))
        else:
            plans.append(plan)
            manifests.append(m)
    # Partitions compacted whole in a task and bigger ones run as separate jobs
    # (run_plans): a failure of one kind's job must not hide the other's commits.
    small = [i for i, plan in enumerate(plans) if planned_bytes(plan) <= TASK_BYTES]
    large = [i for i, plan in enumerate(plans) if planned_bytes(plan) > TASK_BYTES]
    for ids in (small, large):
        if ids:
            _run_isolated(spark, storage, topic, [plans[i] for i in ids],
                          [manifests[i] for i in ids], report)
    report.partitions.sort(key=lambda r: r.partition)
    report.seconds = storage.clock.monotonic_s() - started
    return report


def planned_bytes(plan: CleaningPlan) -> int:
    """The log bytes a compaction of ``plan`` scans: its segments below the first uncleanable
    offset (what decides whether the partition is compacted whole in one task)."""
    return sum(s.size for s in plan.segments)


def _run_isolated(spark, storage: Storage, topic: str, plans: list[CleaningPlan],
                  manifests: list[Manifest], report: CompactionReport) -> None:
    """:func:`run_plans` of ``plans`` into ``report``; if the job fails, each partition again in
    a job of its own, so that one bad partition does not hold back the others."""
    try:
        report.partitions.extend(run_plans(spark, storage, plans, manifests))
    except Exception as exc:  # noqa: BLE001 - isolate the failing partition(s) below
        # Info, not warning: the per-partition outcome below is what the user sees (one line
        # each); the first failure's full text would be a Spark trace on stderr.
        log.info("compaction of %s failed (%s); retrying partition by partition", topic,
                 (str(exc).strip().splitlines() or [""])[0])
        for plan, m in zip(plans, manifests):
            t0 = storage.clock.monotonic_s()
            try:
                report.partitions.extend(run_plans(spark, storage, [plan], [m]))
            except Exception as exc2:  # noqa: BLE001 - reported per partition
                if is_spark_error(exc2):  # the worker's own error, not "PythonException"
                    exc2 = summarize(exc2, "compact", topic=topic)
                report.partitions.append(partition_error(topic, plan.partition, exc2,
                                                         storage.clock.monotonic_s() - t0))


#: Scanned log bytes (below the first uncleanable offset) up to which a partition is
#: compacted inside one Spark task (scan, survivors and rewrite; no shuffle): what one
#: task holds, as a survivor shuffle partition of a bigger one does (:data:`SURVIVOR_BYTES`).
TASK_BYTES = 256 << 20
#: Most threads one task scans and rewrites with (when there are fewer tasks than cores).
MAX_TASK_THREADS = 8


def run_plans(spark, storage: Storage, plans: Sequence[CleaningPlan],
              manifests: Sequence[Manifest], *, scan_bytes: int = 64 << 20,
              task_bytes: int = TASK_BYTES, raise_errors: bool = False) -> list[PartitionResult]:
    """Run the Spark job for ``plans`` (planned on ``manifests``) and commit each partition.

    A partition whose scanned log is at most ``task_bytes`` is compacted whole in
    one task (one stage, no shuffle); bigger ones through the survivor and group
    shuffles (a second job when there are both kinds). Returns one result per
    plan, in order. ``seconds`` of each is the wall time from the job's start to
    that partition's commit. A failing job raises; a failing commit raises with
    ``raise_errors``, else it becomes that partition's error result and the other
    partitions still commit.
    """
    started = storage.clock.monotonic_s()
    groups = group_specs(plans)
    tasks = scan_tasks(storage, plans, groups, manifests, max_bytes=scan_bytes)
    contexts = [p.context for p in plans]
    sizes = [planned_bytes(p) for p in plans]
    whole = [i for i, n in enumerate(sizes) if n <= task_bytes]
    big = [i for i, n in enumerate(sizes) if n > task_bytes]
    results: list[PartitionResult | None] = [None] * len(plans)

    def commit(ids: list[int], collected) -> None:
        by_plan: dict[int, list[GroupResult]] = {i: [] for i in ids}
        for row in collected:
            result = GroupResult.from_json(row["result"])
            by_plan[groups[result.group].plan].append(result)
        done = {r.group for rs in by_plan.values() for r in rs}
        missing = [g.index for g in groups if g.plan in by_plan and g.index not in done]
        if missing:
            raise RuntimeError(f"compaction job returned no result for groups {missing}")

        def finish(i):
            plan = plans[i]
            try:
                return finish_partition(storage, plan, by_plan[i], started)
            except Exception as exc:  # noqa: BLE001 - one partition's commit must not sink the others
                if raise_errors:
                    raise
                return partition_error(plan.topic, plan.partition, exc,
                                       storage.clock.monotonic_s() - started)

        # The partitions' manifest swaps are independent: made at once, not one after the other.
        for i, res in zip(ids, _in_threads(finish, ids)):
            results[i] = res

    sc = spark.sparkContext
    sc.setJobDescription(f"compaction of {plans[0].topic} partitions "
                         f"{','.join(str(p.partition) for p in plans)}")
    try:
        # Each kind commits as soon as its job is done: its uploads must not wait for the
        # other job (they would age towards file.delete.delay.ms meanwhile).
        if whole:
            commit(whole, _compact_whole(spark, storage, contexts, groups, tasks, whole, sizes,
                                         task_bytes))
        if big:
            mine = set(big)
            commit(big, _compact_shuffled(spark, storage, contexts, groups,
                                          [t for t in tasks if t.plan in mine],
                                          [g for g in groups if g.plan in mine], scan_bytes))
    finally:
        sc.setJobDescription(None)
    return results


def _compact_whole(spark, storage: Storage, contexts, groups: Sequence[GroupSpec],
                   tasks: Sequence[ScanTask], plan_ids: Sequence[int], sizes: Sequence[int],
                   task_bytes: int) -> list:
    """The result rows ``(grp, result)`` of the partitions ``plan_ids``, each compacted whole
    inside one Spark task (:func:`compact_scanned`): one stage, whole partitions packed by
    bytes into about one task per core, the cores a task has to spare used as threads."""
    sc = spark.sparkContext
    slices = [[plan_ids[j] for j in s]
              for s in pack_by_bytes([sizes[i] for i in plan_ids], sc.defaultParallelism, task_bytes)]
    threads = max(1, min(MAX_TASK_THREADS, sc.defaultParallelism // len(slices)))
    groups_of = {p: [g for g in groups if g.plan == p] for p in plan_ids}
    tasks_of = {p: [t for t in tasks if t.plan == p] for p in plan_ids}
    schema = pa.schema([("grp", pa.int32()), ("result", pa.string())])

    def compact(batches):
        for b in batches:
            for s in b.column(0).to_pylist():
                for p in slices[s]:
                    results = compact_scanned(storage, contexts[p], groups_of[p], tasks_of[p],
                                              threads=threads)
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([r.group for r in results], pa.int32()),
                         pa.array([r.to_json() for r in results], pa.string())], schema=schema)

    return spark.range(0, len(slices), 1, len(slices)).mapInArrow(compact, _RESULT_DDL).collect()


def compact_scanned(storage: Storage, ctx: CleanContext, groups: Sequence[GroupSpec],
                    tasks: Sequence[ScanTask], *, threads: int = 1) -> list[GroupResult]:
    """Rewrite the ``groups`` of one partition from its scan ``tasks``, in this process: the
    rows of every task (:func:`~kafkastore.maintenance.compaction.scan_task`), the survivors
    of the whole partition (:func:`survivors`), then each group
    (:func:`~kafkastore.maintenance.compaction_rewrite.rewrite_group`), all on up to
    ``threads`` threads. Holds the partition's scanned rows: for partitions of a bounded
    size (:data:`TASK_BYTES`). Returns one uploaded (not committed) result per group."""
    scanned = _in_threads(lambda t: scan_task(storage, t), tasks, threads)
    keep, carry = _by_group(survivors(pa.Table.from_batches(scanned, schema=SCAN_SCHEMA)))
    none = np.zeros(0, np.int64)
    return [rewrite_group(storage, ctx, g, keep.get(g.index, none), carry.get(g.index, ()),
                          threads=threads) for g in groups]


def _by_group(decided: pa.Table) -> tuple[dict[int, np.ndarray], dict[int, set[int]]]:
    """``({group: sorted survivor offsets}, {group: carried producer ids})`` of
    :func:`survivors`' rows."""
    grp = decided.column("grp").to_numpy()
    kind = decided.column("kind").to_numpy()
    offsets = decided.column("offset").to_numpy()
    rec = kind == KIND_RECORD
    g, o = grp[rec], offsets[rec]
    order = np.lexsort((o, g))
    g, o = g[order], o[order]
    firsts, starts = np.unique(g, return_index=True)
    ends = list(starts[1:]) + [len(g)]
    keep = {int(x): o[a:b] for x, a, b in zip(firsts, starts, ends)}
    carry: dict[int, set[int]] = {}
    for x, pid in zip(grp[~rec].tolist(), decided.column("pid").to_numpy()[~rec].tolist()):
        carry.setdefault(x, set()).add(pid)
    return keep, carry


def _compact_shuffled(spark, storage: Storage, contexts, groups: Sequence[GroupSpec],
                      tasks: Sequence[ScanTask], mine: Sequence[GroupSpec], scan_bytes: int) -> list:
    """The result rows ``(grp, result)`` of the groups ``mine`` (of partitions too big for one
    task), through the survivor shuffle by key (:func:`_survivors`) and a shuffle by group
    into ``applyInArrow`` (:func:`_rewriter`); ``groups`` are all the job's groups."""
    sc = spark.sparkContext
    keep = _survivors(spark, storage, tasks, scan_slices(tasks, sc.defaultParallelism, scan_bytes))
    sentinels = spark.createDataFrame([(g.index, KIND_GROUP, -1, -1) for g in mine], _KEEP_DDL)
    rows = keep.unionByName(sentinels)
    # One task per group as far as the cluster allows; an explicit count is
    # not coalesced by adaptive execution (tiny rows would otherwise end up
    # in a single task, rewriting every group one after the other).
    width = max(1, min(len(mine), 4 * sc.defaultParallelism))
    rows = rows.repartition(width, "grp")
    rewrite = _rewriter(storage, contexts, groups)
    return rows.groupBy("grp").applyInArrow(rewrite, _RESULT_DDL).collect()


def _in_threads(fn, items, threads: int = 16) -> list:
    """``[fn(x) for x in items]``, on up to ``threads`` threads (storage calls wait, and
    the C decoder releases the GIL); the first exception is raised."""
    items = list(items)
    if len(items) < 2 or threads < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def scan_slices(tasks: Sequence[ScanTask], parallelism: int, max_bytes: int) -> list[list[int]]:
    """The scan tasks (numbers, in order) each Spark task reads: consecutive tasks packed into
    slices of about equal bytes, at most ~``max_bytes`` each, and as many slices as
    ``parallelism`` (the cores) when there are that many tasks. The Spark task count so
    follows the bytes to read and the cores, not the number of segments or partitions (a
    task per segment made the cost per record grow with the partition count)."""
    return pack_by_bytes([t.range.size for t in tasks], parallelism, max_bytes)


def _latest_dirty(rows: pa.Table, dirty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, greatest dirty offset of each row's key)`` over ``rows`` (in any number
    of chunks: none is copied) (-1 where the key has no ``dirty`` row), one key per
    (partition plan, key bytes): :func:`~kafkastore.maintenance.compaction.latest_dirty_offsets`
    (the C key map, exact)."""
    offsets = rows.column("offset").to_numpy()
    plan = rows.column("plan").to_numpy()
    plans = plan if len(plan) and (plan != plan[0]).any() else None
    return offsets, latest_dirty_offsets(rows.column("key"), dirty, offsets, plans)


def drop_superseded(rows: pa.Table) -> pa.Table:
    """``rows`` (:data:`~kafkastore.maintenance.compaction.SCAN_SCHEMA`) without the dirty records that a
    later dirty record of the same key in ``rows`` supersedes: a partial "latest per key"
    done in the scan task (no per-record Python), so the survivor shuffle carries about
    one row per key and slice instead of every record. Dropping them changes no other
    row's outcome: the greatest dirty offset of each key stays. Clean records and
    transaction rows are kept as they are."""
    import pyarrow.compute as pc

    if rows.num_rows < 2:
        return rows
    rows = rows.combine_chunks()
    dirty = pc.and_(pc.equal(rows.column("kind").chunk(0), KIND_RECORD),
                    rows.column("dirty").chunk(0)).to_numpy(zero_copy_only=False)
    if dirty.sum() < 2:
        return rows
    offsets, latest = _latest_dirty(rows, dirty)
    return rows.filter(pa.array(~dirty | (offsets == latest)))


def survivors(rows: pa.Table) -> pa.Table:
    """The survivor rule (:mod:`kafkastore.maintenance.compaction`) over ``rows``
    (:data:`~kafkastore.maintenance.compaction.SCAN_SCHEMA`) holding every row of their keys, as one
    shuffle partition by ``(plan, key)`` does: ``(grp, kind, offset, pid)`` of each record
    that survives (no dirty record of its key, or it is the greatest dirty one) and of
    each transaction row whose producer has data, and no marker after it, in earlier
    groups (``offset`` -1). Records are decided vectorised (the greatest dirty
    offset of each key by the C key map, exact); transaction rows, a few per
    producer and task, in a loop. The same answer as
    :func:`kafkastore.maintenance.compaction.survivor_rule`, the reference."""
    out_schema = pa.schema([("grp", pa.int32()), ("kind", pa.int8()), ("offset", pa.int64()),
                            ("pid", pa.int64())])
    if rows.num_rows == 0:
        return out_schema.empty_table()
    kind = rows.column("kind").to_numpy()
    rec = kind == KIND_RECORD
    parts = []
    if rec.any():
        # Every row is hashed, transaction rows too (no copy of the record rows): only
        # dirty record rows set a key's latest offset, and only record rows are kept.
        dirty = rows.column("dirty").to_numpy() & rec
        offsets, latest = _latest_dirty(rows, dirty)
        keep = rec & (offsets >= latest)
        n = int(keep.sum())
        parts.append(pa.table([pa.array(rows.column("grp").to_numpy()[keep]),
                               pa.array(np.full(n, KIND_RECORD, np.int8)),
                               pa.array(offsets[keep]), pa.array(np.full(n, -1, np.int64))],
                              schema=out_schema))
    txn = rows.filter(pa.array(kind == KIND_TXN)).to_pydict()
    events: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    for plan, grp, off, pid, ld, lm in zip(txn["plan"], txn["grp"], txn["offset"], txn["pid"],
                                           txn["last_data"], txn["last_marker"]):
        events.setdefault((plan, pid), []).append((off, grp, ld, lm))
    carried = []
    for (_, pid), evs in events.items():
        for off, grp, _, _ in evs:
            earlier = [(ld, lm) for o, _, ld, lm in evs if o < off]
            if earlier and max(e[0] for e in earlier) > max(e[1] for e in earlier):
                carried.append((grp, pid))
    if carried:
        parts.append(pa.table([pa.array([g for g, _ in carried], pa.int32()),
                               pa.array(np.full(len(carried), KIND_TXN, np.int8)),
                               pa.array(np.full(len(carried), -1, np.int64)),
                               pa.array([p for _, p in carried], pa.int64())], schema=out_schema))
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


#: Scanned log bytes per shuffle partition of the survivor step: what one task holds.
SURVIVOR_BYTES = 256 << 20


def _survivors(spark, storage: Storage, tasks: Sequence[ScanTask], slices: list[list[int]]):
    """DataFrame ``(grp, kind, offset, pid)``: survivor offsets and transaction carries per group;
    one Spark task per slice of scan tasks (:func:`scan_slices`), then one shuffle by
    ``(plan, key)`` into partitions of a bounded share of the keys, each decided by
    :func:`survivors` in its task (a Spark window over the same shuffle sorted every row
    by key and offset: most of a one-partition compaction's time)."""
    if tasks:
        def scan(batches):
            for b in batches:
                for s in b.column(0).to_pylist():
                    yield from drop_superseded(
                        pa.Table.from_batches([scan_task(storage, tasks[i]) for i in slices[s]],
                                              schema=SCAN_SCHEMA)).to_batches()

        scanned = spark.range(0, len(slices), 1, len(slices)).mapInArrow(scan, _SCAN_DDL)
    else:  # only empty segments below the first uncleanable offset
        return spark.createDataFrame([], _KEEP_DDL)

    def decide(batches):
        batches = [b for b in batches if b.num_rows]
        if batches:   # every row of this partition's keys, then the rule
            yield from survivors(pa.Table.from_batches(batches)).to_batches()

    scanned_bytes = sum(t.range.size for t in tasks)
    # An explicit count: adaptive execution would merge small partitions into big ones.
    width = max(4 * spark.sparkContext.defaultParallelism, -(-scanned_bytes // SURVIVOR_BYTES))
    return scanned.repartition(width, "plan", "key").mapInArrow(decide, _KEEP_DDL)


def _rewriter(storage: Storage, contexts, groups):
    """The ``applyInArrow`` function: rewrite one group from its survivor and carry rows."""
    def rewrite(key, table):
        g = key[0].as_py()
        kind = table.column("kind").to_numpy()
        offsets = table.column("offset").to_numpy()
        keep = np.sort(offsets[kind == KIND_RECORD])
        carry = set(table.column("pid").to_numpy()[kind == KIND_TXN].tolist())
        spec = groups[g]
        result = rewrite_group(storage, contexts[spec.plan], spec, keep, carry)
        return pa.table({"grp": pa.array([g], pa.int32()), "result": [result.to_json()]})
    return rewrite
