"""Real speculation: a Spark write into a topic with ``spark.speculation`` on, where one
task's first attempt is slow, so that Spark launches a copy of it; every record must be
readable exactly once.

    ./run bench speculation [--records N] [--tasks T] [--slow-s S] [--master M]

Spark never speculates in local mode (``local[*]``): this starts its own SparkSession on
``local-cluster[2,1,1024]`` (two executor JVMs with one core each, started by a worker of
a standalone cluster inside this process), with ``spark.speculation=true``, a low
multiplier and quantile and a short interval. The DataFrame of N rows (default 20,000) in
T partitions (default 4) goes through a Python function that sleeps ``--slow-s`` seconds
(default 60) in attempt 0 of partition 0 only, then ``df.write.format("kafkastore")`` into
a fresh 3-partition topic on a ``file://`` root. Spark sees that attempt run far longer
than the others and launches attempt 1 of the same task, which finishes first; the
driver's commit takes the attempt Spark chose, the other's transaction is aborted.

The script then reads the topic back read_committed (``kafkastore consume``) and checks
that every value is there exactly once, and reports which attempts ran (each attempt
leaves a note in a scratch directory) and whether the speculative copy ran. Exit status:
0 when every record was read exactly once AND a speculative attempt ran; 1 when records
are missing or repeated; 2 when Spark did not speculate (nothing was shown). The start of
``local-cluster`` takes minutes on a loaded machine; the time of each step is printed.
No assertion on speed.

**local-cluster does not speculate either**: its executors all run on one host, and Spark's
scheduler never launches a speculative copy on a host where the task already has an
attempt (``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index,
host))``). On ``local-cluster`` the script therefore shows the write exactly once with the
straggler alone (exit 2); a real copy needs executors on two hosts: pass ``--master
spark://...`` of a standalone cluster whose workers have different host names.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from kafkastore.clock import SYSTEM  # noqa: E402

monotonic_s = SYSTEM.monotonic_s


def _slow_first_attempt(notes: str, slow_s: float):
    """``mapInArrow`` function: notes its (partition, attempt); attempt 0 of partition 0
    sleeps ``slow_s`` after its first batch (the straggler speculation is for; it has
    handed the writer some records by then)."""
    def run(batches):
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        with open(os.path.join(notes, f"{part}-{attempt}"), "w") as f:
            f.write(str(ctx.taskAttemptId()))
        for n, batch in enumerate(batches):
            yield batch
            if n == 0 and part == 0 and attempt == 0:
                time.sleep(slow_s)   # after some records: the loser has written some

    return run


def _consume(root: str, topic: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, "consume",
                          topic], capture_output=True, text=True, check=True, cwd=HERE)
    return [json.loads(line)["value"] for line in out.stdout.splitlines()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--slow-s", type=float, default=60.0)
    p.add_argument("--master", default="local-cluster[2,1,1024]")
    args = p.parse_args(argv)

    from kafkastore.storage import Storage
    from kafkastore.topics import create_topic

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The executors' Python workers import the data source's writer (pipelines.*).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = monotonic_s()
    from pipelines.source.session import get_spark

    spark = get_spark(master=args.master, app_name="bench-speculation", extra_conf={
        "spark.speculation": "true",
        "spark.speculation.interval": "200ms",
        "spark.speculation.multiplier": "1.5",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "1s",
        "spark.executor.memory": "768m",
        "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"],
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.task.maxFailures": "4",
    })
    print(f"{args.master} started in {monotonic_s() - t0:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = f"file://{tmp}/root"
        notes = os.path.join(tmp, "attempts")
        os.makedirs(notes)
        create_topic(Storage(root), "out", 3)
        rows = [(f"k{i}", f"v{i}") for i in range(args.records)]
        df = spark.createDataFrame(rows, "key string, value string").repartition(args.tasks)
        df = df.mapInArrow(_slow_first_attempt(notes, args.slow_s), df.schema)
        t1 = monotonic_s()
        df.write.format("kafkastore").option("root", root).option("topic", "out") \
            .mode("append").save()
        print(f"write took {monotonic_s() - t1:.0f} s", flush=True)
        attempts = sorted(os.listdir(notes))
        speculated = any(a.startswith("0-") and a != "0-0" for a in attempts)
        got = _consume(root, "out")
        want = {f"v{i}" for i in range(args.records)}
        missing = len(want - set(got))
        repeated = len(got) - len(set(got))
        print(f"attempts that ran (partition-attempt): {attempts}")
        print(f"speculative copy of the slow task ran: {speculated}")
        print(f"records read: {len(got)} of {args.records}; missing {missing}, "
              f"repeated {repeated}", flush=True)
    spark.stop()
    if missing or repeated or len(got) != args.records:
        return 1
    return 0 if speculated else 2


if __name__ == "__main__":
    sys.exit(main())
