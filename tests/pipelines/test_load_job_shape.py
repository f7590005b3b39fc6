"""The shape of a raw load's Spark work, counted (never timed): one job of one stage with
about a task per core, no SQL query planned, every record read from the log once, and
the executors' task module light to import.

A raw load's records never pass through the JVM (each task reads its splits and writes
Parquet in Python), so the JVM's part is the scheduling of one job; a SQL query around
it (a mapInArrow over ``spark.range``) cost the JVM about three times an RDD job's CPU
for the same tasks."""
from __future__ import annotations

import subprocess
import sys

from pipelines.jobs.load import run_load
from tests.helpers.loads import assert_exactly_once, count_split_reads, local_log_and_warehouse
from tests.helpers.spark_counts import count_spark_work


def test_a_raw_load_is_one_job_of_one_stage_and_plans_no_sql_query(spark, local_root):
    root, wh, storage = local_log_and_warehouse(local_root, partitions=5, records=150)
    summary, jobs, queries = count_spark_work(spark, lambda: run_load(
        spark, root=root, topic="t", warehouse=wh, table="tbl", progress=True,
        progress_interval_s=3600), "load-shape")
    assert summary.rows == 150
    assert len(jobs) == 1 and len(jobs[0][1]) == 1
    assert 1 <= jobs[0][1][0][1] <= spark.sparkContext.defaultParallelism
    assert queries == 0
    assert_exactly_once(storage, "t", wh)


def test_a_raw_load_reads_each_record_of_its_range_once(spark, local_root, tmp_path,
                                                       monkeypatch):
    """No second pass over the log (a count, a schema pass, a cache filled by a re-read):
    the tasks read exactly the records of the range. Each read of a split appends its
    record count to a file, since the tasks run in Spark's Python workers."""
    records_read = count_split_reads(monkeypatch, tmp_path / "reads")
    root, wh, storage = local_log_and_warehouse(local_root, partitions=3, records=90)
    summary = run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert summary.rows == 90
    assert records_read() == 90
    assert_exactly_once(storage, "t", wh)


def test_the_executors_task_module_imports_no_driver_stack():
    """A load's task function is pickled by reference to pipelines.jobs.executor_io (and
    the write engine's raw task is pickled by value): a Python worker imports that module
    and the log reader, never pyspark's SQL layer, pyiceberg or the driver's planning."""
    code = ("import sys, pipelines.jobs.executor_io; "
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split())
    heavy = {"pyiceberg", "pyspark", "pyspark.sql", "pandas", "sqlalchemy", "pydantic",
             "pipelines.jobs.write_engine", "pipelines.jobs.load", "pipelines.source.planning",
             "pipelines.warehouse.commit", "pipelines.warehouse.catalog"}
    assert not heavy & loaded, sorted(heavy & loaded)
