"""The shape of the compaction job, read from Spark's status tracker (counts, never times):
partitions that fit one task are compacted in one job of one stage (scan, survivors and
rewrite inside the task, no shuffle), packed into at most a task per core; bigger ones
still go through the survivor and group shuffles and give the same log."""
from __future__ import annotations

from kafkastore.maintenance.compaction import STATUS_CLEANED, load_plan
from kafkastore.maintenance.compaction_rewrite import compact_partition_local
from kafkastore.storage import Storage
from kafkastore.write.log_writer import LogWriter as Broker
from pipelines.jobs.log_compaction import compact_topic, planned_bytes, run_plans
from tests.helpers.compaction import (T0, TOPIC, check_compacted, latest_manifest, make_topic,
                                      produce, produce_segments, read_all)
from tests.helpers.spark_counts import count_spark_work


def _topic(storage, partitions, keys_of=lambda p: 7):
    """A compacted topic whose partition ``p`` holds 8 rounds (a segment each) over
    ``keys_of(p)`` keys, tombstones and a committed and an aborted transaction among them."""
    # file.delete.delay.ms: on a loaded machine a pass may take longer than half the default
    # 60 s between its first upload and its commit, and would then give up
    make_topic(storage, partitions=partitions, segment_bytes=400, delete_retention_ms=1000,
               file_delete_delay_ms=3_600_000)
    for p in range(partitions):
        produce_segments(storage, [[(f"k{(i * 3 + j) % keys_of(p)}",
                                     None if (i + j) % 5 == 4 else f"v{i}.{j}")
                                    for j in range(3)] for i in range(8)], partition=p)
        for pid, end in ((60 + 2 * p, "commit_transaction"), (61 + 2 * p, "abort_transaction")):
            txn = Broker(storage, clock=lambda: T0, producer_id=pid)
            txn.begin_transaction()
            produce(storage, [("k1", f"txn{pid}"), ("k9", f"txn{pid}")], broker=txn, partition=p)
            produce(storage, [("k2", "between")], partition=p)
            getattr(txn, end)()
        produce_segments(storage, [[("k3", "late")], [("k0", "last")]], partition=p)


def test_partitions_that_fit_a_task_are_compacted_in_one_stage_without_a_shuffle(spark, local_root):
    storage = Storage(local_root)
    _topic(storage, 3)
    before = [read_all(storage, partition=p) for p in range(3)]
    report, jobs, _ = count_spark_work(spark, lambda: compact_topic(
        spark, local_root, TOPIC, now_ms=T0, force=True), "compaction-shape")
    assert report.ok and [r.status for r in report.partitions] == [STATUS_CLEANED] * 3
    for p in range(3):
        check_compacted(before[p], read_all(storage, partition=p),
                        report.result(p).first_uncleanable_offset)
    # one job, one stage; the three partitions packed into at most a task per core
    assert len(jobs) == 1 and len(jobs[0][1]) == 1
    assert 1 <= jobs[0][1][0][1] <= spark.sparkContext.defaultParallelism


def _compact_between(spark, storage, now):
    """Compact both partitions with the task bound at the smaller one's scanned bytes."""
    plans, manifests, sizes = [], [], []
    for p in range(2):
        m, plan = load_plan(storage, TOPIC, p, now, force=True)
        plans.append(plan)
        manifests.append(m)
        sizes.append(planned_bytes(plan))
    assert sizes[1] < sizes[0]
    work = count_spark_work(spark, lambda: run_plans(spark, storage, plans, manifests,
                                                     task_bytes=sizes[1], raise_errors=True),
                            "compaction-shape")
    return work.out, work.jobs


def test_partitions_too_big_for_a_task_take_the_shuffles_and_agree_with_the_reference(spark, tmp_path):
    """With a task bound below one partition's log and above the other's, the small one is
    compacted whole (a one-stage job) and the big one through the shuffles (a job of
    more stages); both give what the one-process reference gives, pass after pass."""
    a, b = Storage(f"file://{tmp_path}/a"), Storage(f"file://{tmp_path}/b")
    for s in (a, b):
        _topic(s, 2, lambda p: 19 if p == 0 else 5)
    for now in (T0, T0 + 10, T0 + 2000):
        results, jobs = _compact_between(spark, a, now)
        assert [r.status for r in results] == [STATUS_CLEANED] * 2
        stages = sorted(len(stages) for _, stages in jobs)
        assert stages[0] == 1 and len(jobs) >= 2 and sum(stages) >= 3
        for p in range(2):
            compact_partition_local(b, TOPIC, p, now, force=True)
            assert read_all(a, partition=p) == read_all(b, partition=p)
            ma, mb = latest_manifest(a, partition=p), latest_manifest(b, partition=p)
            assert [(s.base_offset, s.next_offset, s.record_count, s.size, s.delete_horizon_ms,
                     s.aborted_txns) for s in ma.segments] == \
                [(s.base_offset, s.next_offset, s.record_count, s.size, s.delete_horizon_ms,
                  s.aborted_txns) for s in mb.segments]
