"""Real speculation: a Spark write into a topic with ``spark.speculation`` on, where one
task's first attempt straggles, so that Spark launches a copy of it on another host; every
record must be readable exactly once, and the job's output all at once or not at all.

    ./run bench speculation [--records N] [--tasks T] [--slow-s S] [--master M] [--workdir D]

Spark never speculates in local mode, nor on ``local-cluster``: its scheduler never starts
a copy of a task on a host where the task already has an attempt
(``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index,
host))``), and every executor of those masters is on one host. By default (``--master
standalone``) this starts a Spark standalone cluster from pyspark's own classes
(:mod:`tests.helpers.cluster`): a master on 127.0.0.1 and two workers bound to 127.0.0.2
and 127.0.0.3, one core each, and checks that the two executors report those two hosts.
``--master spark://...`` uses a cluster of yours instead.

The session runs with ``spark.speculation`` on (interval 100 ms, quantile 0.5, multiplier
1.5, minimum runtime 1 s, the efficiency check off) and ``spark.task.maxFailures=1``: a
failed attempt fails the job, so a second attempt of a task in a job that succeeded can
only be a speculative copy. N rows (default 20,000; keys padded to 200 bytes) in T
partitions (default 4) go through a Python function that, in attempt 0 of partition 0
only, sleeps ``--slow-s`` seconds (default 60) after its first 2 Arrow batches of 300 rows,
then ``df.write.format("kafkastore")`` into a fresh 3-partition topic on a ``file://``
root whose ``segment.bytes`` is 16 KiB: the straggler's writer has committed some records
to the log (in its open transaction) before it stalls, and the driver must abort them.

Checked, and printed:

* the attempts Spark ran, from the driver's status API (``/api/v1/.../taskList``: index,
  attempt, host, status, ``speculative``) and from the notes each attempt leaves (its
  executor's work directory names its worker's host);
* while the write runs, a reader thread takes read_committed snapshots of the topic as
  ``kafkastore consume`` does and counts the records: every count must be 0 or N;
* afterwards ``kafkastore consume`` reads every value exactly once, and read_uncommitted
  shows how many records of the aborted attempts are in the log;
* with ``--master standalone``, no process of the cluster is left once it is stopped.

Exit status: 0 when every check passed and a speculative copy of the straggler ran on a
host other than its original's; 1 when records are missing, repeated or seen partially, or
a process was left behind; 2 when Spark did not speculate. Times of each step and the
load average are printed; no assertion on speed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from tests.helpers.cluster import processes_under, standalone_cluster  # noqa: E402
from kafkastore.clock import SYSTEM  # noqa: E402

monotonic_s = SYSTEM.monotonic_s
TOPIC = "out"
#: The workers' addresses: two hosts to Spark's scheduler.
HOSTS = ("127.0.0.2", "127.0.0.3")
PARTITIONS = 3
#: Rows per Arrow batch and the batches the straggler hands on before it sleeps. Of those,
#: about one batch reaches the writer before the sleep (the rest waits in the buffers
#: between the Python workers); with the keys' padding that is past the topic's small
#: segment size in every partition, so the writer commits some records mid-task.
BATCH_ROWS = 300
SLOW_AFTER = 2
KEY_PAD = "." * 200
TOPIC_CONFIG = {"segment.bytes": "16384"}


def _loser_wrote(notes: str, root: str) -> bool:
    """Whether the straggler (attempt 0 of partition 0, whose task attempt id its note
    holds) has records in the log: an open transaction of its producer id (the sink's
    producer ids end in the task attempt id) in some partition."""
    from kafkastore.storage import Storage
    from kafkastore.write.transactions import open_transactions

    try:
        with open(os.path.join(notes, "0-0")) as f:
            tid = json.load(f)["task_attempt_id"]
    except (OSError, ValueError):
        return False
    storage = Storage(root)
    return any(t.producer_id & 0xFFFFFFFF == tid for p in range(PARTITIONS)
               for t in open_transactions(storage, TOPIC, p))


def _slow_first_attempt(notes: str, slow_s: float, root: str):
    """``mapInArrow`` function: notes its (partition, attempt, task attempt id, working
    directory); attempt 0 of partition 0 sleeps ``slow_s`` after :data:`SLOW_AFTER`
    batches (the straggler speculation is for: by then the writer has committed some of
    its records to the log, in a transaction the driver must abort). A copy of partition 0
    first waits (at most ``slow_s``) for those records, so that the loser has written some
    however slowly the straggler's workers start on a loaded machine."""
    def run(batches):
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        saw = None
        if part == 0 and attempt > 0:
            waited = 0.0
            while not (saw := _loser_wrote(notes, root)) and waited < slow_s:
                time.sleep(0.2)
                waited += 0.2
        with open(os.path.join(notes, f"{part}-{attempt}"), "w") as f:
            json.dump({"task_attempt_id": ctx.taskAttemptId(), "cwd": os.getcwd(),
                       "saw_loser_records": saw}, f)
        for n, batch in enumerate(batches):
            yield batch
            if n == SLOW_AFTER - 1 and part == 0 and attempt == 0:
                time.sleep(slow_s)   # after some records: the loser has written some

    return run


def _host_of_cwd(cwd: str, hosts) -> str | None:
    """The host of the worker whose work directory (``work-<i>``, worker i on
    ``hosts[i]``) holds ``cwd``."""
    return next((h for i, h in enumerate(hosts) if f"{os.sep}work-{i}{os.sep}" in cwd + os.sep),
                None)


def _consume(root: str, isolation: str = "read_committed") -> list[str]:
    out = subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, "consume",
                          TOPIC, "--isolation-level", isolation], capture_output=True,
                         text=True, check=True, cwd=HERE)
    return [json.loads(line)["value"] for line in out.stdout.splitlines()]


class SnapshotCounter(threading.Thread):
    """Counts the topic's read_committed records over and over while the write runs, from
    one snapshot of all its partitions at a time (as ``kafkastore consume`` takes them);
    ``counts`` holds every distinct count seen."""

    def __init__(self, root: str):
        super().__init__(daemon=True)
        self.root = root
        self.counts: set[int] = set()
        self.snapshots = 0
        self.uncommitted_max = 0   # the most records (of open transactions too) in the log
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        from kafkastore.job_commits import consistent
        from kafkastore.read.reader import EARLIEST, PartitionReader
        from kafkastore.storage import Storage

        storage = Storage(self.root)

        def snapshot():
            return {p: PartitionReader(storage, TOPIC, p) for p in range(PARTITIONS)}

        try:
            while not self._stop_event.is_set():
                readers = consistent(storage, snapshot)
                self.counts.add(sum(r.read(EARLIEST, isolation="read_committed").num_rows
                                    for r in readers.values()))
                self.uncommitted_max = max(self.uncommitted_max, sum(
                    r.read(EARLIEST, isolation="read_uncommitted").num_rows
                    for r in readers.values()))
                self.snapshots += 1
                self._stop_event.wait(0.05)
        except BaseException as exc:   # reported by the main thread
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)


def _spark_tasks(spark) -> list[dict]:
    """Every task attempt of the application's stages, from the driver's status API."""
    base = spark.sparkContext.uiWebUrl.rstrip("/")
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/stages", timeout=30) as r:
        stages = json.load(r)
    tasks = []
    for st in stages:
        url = (f"{base}/api/v1/applications/{app}/stages/{st['stageId']}/{st['attemptId']}"
               f"/taskList?length=10000")
        with urllib.request.urlopen(url, timeout=30) as r:
            for t in json.load(r):
                tasks.append({"stage": st["stageId"], "name": st.get("name", ""),
                              "index": t["index"], "attempt": t["attempt"],
                              "host": t["host"], "status": t["status"],
                              "speculative": t["speculative"]})
    return tasks


def _executor_hosts(spark) -> list[str]:
    """The hosts of the executors registered with the driver (the driver's own excluded)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    driver = spark.sparkContext.getConf().get("spark.driver.host")
    # The driver's own entry is on its host (127.0.0.1; the workers' hosts differ).
    return sorted(i.host() for i in infos if i.host() != driver)


def _wait_for_executors(spark, want: int, timeout_s: float) -> list[str]:
    deadline = monotonic_s() + timeout_s
    while True:
        hosts = _executor_hosts(spark)
        if len(set(hosts)) >= want or monotonic_s() > deadline:
            return hosts
        SYSTEM.sleep(0.5)


def run_write(args, master: str, hosts, tmp: str) -> int:
    """The session, the straggling write and the checks; the exit status."""
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from pipelines.source.session import get_spark

    t0 = monotonic_s()
    spark = get_spark(master=master, app_name="bench-speculation", extra_conf={
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.multiplier": "1.5",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "1s",
        "spark.speculation.efficiency.enabled": "false",
        "spark.task.maxFailures": "1",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH_ROWS),
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        "spark.cores.max": str(max(2, len(hosts))),
        "spark.executor.cores": "1",
        "spark.executor.memory": "768m",
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"],
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    })
    try:
        print(f"session on {master} started in {monotonic_s() - t0:.0f} s", flush=True)
        if hosts:
            seen = _wait_for_executors(spark, len(hosts), 240)
            print(f"executors on hosts: {seen}", flush=True)
            if set(seen) != set(hosts):
                print(f"the executors do not run on the hosts {sorted(hosts)}", flush=True)
                return 1
        root = f"file://{tmp}/root"
        notes = os.path.join(tmp, "attempts")
        os.makedirs(notes)
        create_topic(Storage(root), TOPIC, PARTITIONS, TOPIC_CONFIG)
        rows = [(f"k{i}{KEY_PAD}", f"v{i}") for i in range(args.records)]
        df = spark.createDataFrame(rows, "key string, value string").repartition(args.tasks)
        df = df.mapInArrow(_slow_first_attempt(notes, args.slow_s, root), df.schema)
        counter = SnapshotCounter(root)
        counter.start()
        t1 = monotonic_s()
        try:
            df.write.format("kafkastore").option("root", root).option("topic", TOPIC) \
                .mode("append").save()
        finally:
            print(f"write took {monotonic_s() - t1:.0f} s", flush=True)
            counter.stop()
        tasks = _spark_tasks(spark)
        attempts = {}
        for name in sorted(os.listdir(notes)):
            with open(os.path.join(notes, name)) as f:
                note = json.load(f)
            attempts[name] = _host_of_cwd(note["cwd"], hosts) or note["cwd"]
            if note.get("saw_loser_records") is not None:
                print(f"copy {name} saw the straggler's records in the log before it "
                      f"started: {note['saw_loser_records']}", flush=True)
        got = _consume(root)
        in_log = len(_consume(root, "read_uncommitted"))
    finally:
        spark.stop()
    return _verdict(args, tasks, attempts, counter, got, in_log)


def _verdict(args, tasks, attempts, counter, got, in_log) -> int:
    for t in sorted(tasks, key=lambda t: (t["stage"], t["index"], t["attempt"])):
        print(f"  stage {t['stage']} task {t['index']} attempt {t['attempt']} on {t['host']}: "
              f"{t['status']}{' (speculative)' if t['speculative'] else ''}")
    print(f"attempts that ran (partition-attempt: host): {attempts}")
    copies = [t for t in tasks if t["speculative"]]
    originals = {(t["stage"], t["index"]): t["host"] for t in tasks if not t["speculative"]}
    elsewhere = [t for t in copies if t["host"] != originals.get((t["stage"], t["index"]))]
    # The straggler is task 0 of the write's stage; its copy also left the note "0-1".
    speculated = any(t["index"] == 0 for t in elsewhere) and "0-1" in attempts
    print(f"speculative copy of the slow task ran on another host: {speculated} "
          f"({len(copies)} speculative attempt(s) in all)")
    if counter.error is not None:
        print(f"the snapshot reader failed: {counter.error!r}")
    partial = sorted(c for c in counter.counts if c not in (0, args.records))
    print(f"read_committed snapshots during the write: {counter.snapshots}, counts seen "
          f"{sorted(counter.counts)} (partial: {partial or 'none'})")
    want = {f"v{i}" for i in range(args.records)}
    missing = len(want - set(got))
    repeated = len(got) - len(set(got))
    print(f"records read: {len(got)} of {args.records}; missing {missing}, "
          f"repeated {repeated}", flush=True)
    print(f"records in the log read_uncommitted: {in_log} (the aborted attempts': "
          f"{in_log - len(got)}); at most {counter.uncommitted_max} during the write",
          flush=True)
    if missing or repeated or len(got) != args.records or partial or counter.error:
        return 1
    return 0 if speculated else 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--slow-s", type=float, default=60.0)
    p.add_argument("--master", default="standalone",
                   help="standalone (start a two-host cluster here) or a master URL")
    p.add_argument("--workdir", help="where the cluster and the root live (default: a "
                                     "temporary directory, removed at the end)")
    args = p.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    # The executors' Python workers import the data source's writer (pipelines.*).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.workdir:
        # The cluster's directory (mkdtemp) and every temporary file go under it.
        os.environ["TMPDIR"] = args.workdir
        tempfile.tempdir = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.master != "standalone":
            return run_write(args, args.master, (), tmp)
        t0 = monotonic_s()
        cluster = None
        try:
            with standalone_cluster(workers=len(HOSTS), hosts=HOSTS, timeout=240) as cluster:
                print(f"standalone cluster {cluster.master_url} with workers on {list(HOSTS)} "
                      f"started in {monotonic_s() - t0:.0f} s", flush=True)
                status = run_write(args, cluster.master_url, HOSTS, tmp)
        finally:
            left = processes_under(cluster.work_dir) if cluster is not None else []
            print(f"processes of the cluster still running after its stop: {len(left)}",
                  flush=True)
            for pid, cmd in left:
                print(f"  killed: {pid} {cmd[:200]}")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        print(f"load average {os.getloadavg()[0]:.1f}; all done in {monotonic_s() - t0:.0f} s",
              flush=True)
        return 1 if left else status


if __name__ == "__main__":
    sys.exit(main())
