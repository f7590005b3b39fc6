"""Spark's own counters around one call: the jobs it started (with their stages and task
counts, from the status tracker) and the SQL queries it ran (from the SQL status store).
Shape tests assert on these counts, never on times."""
from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple

_groups = itertools.count()


class SparkWork(NamedTuple):
    """What ``run`` returned, ``[(job id, [(stage id, task count)])]`` of the jobs it
    started, and how many SQL queries it ran."""
    out: Any
    jobs: list
    sql_queries: int


def sql_executions(spark) -> int:
    """How many SQL queries the session has run (the JVM's SQL status store)."""
    return spark._jsparkSession.sharedState().statusStore().executionsList().size()


def count_spark_work(spark, run: Callable[[], Any], label: str = "spark-counts") -> SparkWork:
    """Run ``run()`` under a fresh job group and count the Spark work it started."""
    sc = spark.sparkContext
    group = f"{label}-{next(_groups)}"
    queries = sql_executions(spark)
    sc.setJobGroup(group, label)
    try:
        out = run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    jobs = [(job, [(s, tracker.getStageInfo(s).numTasks)
                   for s in sorted(tracker.getJobInfo(job).stageIds)])
            for job in sorted(tracker.getJobIdsForGroup(group))]
    return SparkWork(out, jobs, sql_executions(spark) - queries)
