"""Writes into topics from Spark (``df.write`` / ``writeStream.format("kafkastore")``), exactly once.

Real Spark (the session-wide fixture, local mode), real readers: the library's reader as
``kafkastore consume`` uses it and a Kafka client through ``kafkastore serve``. Spark's
local mode only retries a task with a ``local[N,F]`` master, so the retry test runs one
Spark job in a child process started with ``local[1,2]`` (this file run as a script).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError, OutOfOrderSequenceError, TopicSinkError
from kafkastore.format.partitioner import murmur2
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.transactions import open_transactions
from pipelines.sink import commit as tsc

from tests.helpers.sink_jobs import half_marked_job

T0 = 1_700_000_000_000


# --------------------------------------------------------------------------- helpers

def _root(tmp_path, topic="out", partitions=3, config=None) -> str:
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), topic, partitions, config or {})
    return root


def _consume(root: str, topic: str, isolation: str = "read_committed") -> list[dict]:
    """Every record of ``topic`` as ``kafkastore consume`` prints it (JSON lines)."""
    out = subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, "consume",
                          topic, "--isolation", isolation],
                         capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def _values(records) -> list[str]:
    return sorted(r["value"] for r in records)


def _open(root: str, topic: str) -> list:
    return open_transactions(Storage(root), topic)


def _write(df, root, topic="out", **options):
    w = df.write.format("kafkastore").option("root", root).mode("append")
    if topic is not None:
        w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def _rows(n, prefix="v"):
    return [(f"k{i}", f"{prefix}{i}") for i in range(n)]


# --------------------------------------------------------------------------- partitioner

def test_murmur2_is_the_java_clients():
    """Our murmur2 is Kafka's (kafka-python's port of the Java client's), on a known vector."""
    from kafka.partitioner.default import murmur2 as kafka_murmur2

    assert kafka_murmur2(b"21") == 3321034988  # the vector kafka-python's tests use
    for key in (b"21", b"", b"a", b"key-1", b"\xff" * 7, "ünïcode".encode()):
        assert murmur2(key) & 0xFFFFFFFF == kafka_murmur2(key)


# --------------------------------------------------------------------------- batch writes

def test_batch_write_columns_read_back_by_consume(spark, tmp_path):
    """key/value/headers/timestamp/partition land as Spark's Kafka sink writes them; keyed rows
    go where the Java client's partitioner sends them."""
    from kafka.partitioner.default import murmur2 as kafka_murmur2

    root = _root(tmp_path, partitions=4)
    rows = [(f"k{i}", f"v{i}".encode(), [("h", f"x{i}".encode())], i)
            for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value binary, "
                                     "headers array<struct<key:string,value:binary>>, i int")
    df = df.selectExpr("key", "value", "headers",
                       f"timestamp_millis({T0} + i) as timestamp").repartition(3)
    _write(df, root)
    recs = _consume(root, "out")
    assert _values(recs) == sorted(f"v{i}" for i in range(40))
    for r in recs:
        i = int(r["value"][1:])
        assert r["key"] == f"k{i}"
        assert r["headers"] == [["h", f"x{i}"]]
        assert r["timestamp"] == T0 + i
        assert r["partition"] == (kafka_murmur2(f"k{i}".encode()) & 0x7FFFFFFF) % 4
    assert _open(root, "out") == []
    assert Storage(root).list("_sink/jobs/") == []   # the decision record is dropped once done

    # an explicit partition column wins; null keys spread (sticky) and stay readable
    df2 = spark.createDataFrame([(None, f"p{i}", 2) for i in range(10)],
                                "key string, value string, partition int")
    _write(df2, root)
    assert {r["partition"] for r in _consume(root, "out") if r["value"].startswith("p")} == {2}


def test_topic_column_routes_and_the_option_wins(spark, tmp_path):
    root = _root(tmp_path, "a", 2)
    create_topic(Storage(root), "b", 1)
    df = spark.createDataFrame([("a" if i % 2 else "b", f"v{i}") for i in range(20)],
                               "topic string, value string")
    _write(df, root, topic=None)
    assert len(_consume(root, "a")) == 10 and len(_consume(root, "b")) == 10
    _write(df, root, topic="b")
    assert len(_consume(root, "a")) == 10 and len(_consume(root, "b")) == 30


def test_bad_frames_and_options_are_config_errors(spark, tmp_path):
    root = _root(tmp_path)
    df = spark.createDataFrame([(1, "v")], "key int, value string")
    with pytest.raises(Exception, match="column 'key' must be string or binary"):
        _write(df, root)
    with pytest.raises(Exception, match="needs the topic option or a topic column"):
        _write(spark.createDataFrame([("v",)], "value string"), root, topic=None)
    with pytest.raises(Exception, match="a topic cannot be overwritten"):
        spark.createDataFrame([("v",)], "value string").write.format("kafkastore") \
            .option("root", root).option("topic", "out").mode("overwrite").save()
    with pytest.raises(ConfigError, match="unknown option"):
        tsc_options = {"root": root, "bogus": "1"}
        from pipelines.sink.writer import parse_sink_options
        parse_sink_options(tsc_options)


def test_topic_limits_apply_and_a_failed_job_leaves_nothing(spark, tmp_path):
    """max.message.bytes refuses a record: the job fails and none of its records is readable;
    the topic's compression is used for what is written."""
    root = _root(tmp_path, partitions=2, config={"max.message.bytes": 2000,
                                                 "compression.type": "gzip"})
    ok = spark.createDataFrame(_rows(50), "key string, value string").repartition(2)
    _write(ok, root)
    reader = PartitionReader(Storage(root), "out", 0)
    assert reader.read(0).num_rows > 0
    log = [i.path for i in Storage(root).list("topics/out/0/") if i.path.endswith(".log")]
    data = Storage(root).get(log[0])
    assert data[21 + 1] & 0x07 == 1  # attributes of the first batch: gzip

    big = spark.createDataFrame([(f"k{i}", "x" * (5000 if i == 7 else 10)) for i in range(20)],
                                "key string, value string").repartition(2)
    with pytest.raises(Exception, match="max.message.bytes"):
        _write(big, root)
    assert len(_consume(root, "out")) == 50
    assert _open(root, "out") == []


def _fail_in_partition(df, partition: int):
    """``df`` through a UDF that raises in Spark partition ``partition`` after its rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def check(value):
        from pyspark import TaskContext
        if TaskContext.get().partitionId() == partition and value.endswith("last"):
            raise RuntimeError("injected task failure")
        return value

    return df.withColumn("value", F.udf(check, StringType())("value"))


def test_aborted_job_leaves_nothing_readable_and_a_later_job_works(spark, tmp_path):
    """A task failing on every attempt: the job is aborted after other tasks (and the failing
    one) appended their transactions; read_committed readers see none of it, no transaction
    stays open, and the next job's records are readable."""
    root = _root(tmp_path, partitions=2, config={"segment.bytes": 1024})
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        rows = [(f"k{i}", f"v{i}" + ("last" if i == 199 else "")) for i in range(200)]
        df = spark.createDataFrame(rows, "key string, value string").coalesce(4)
        df = spark.createDataFrame(df.rdd.zipWithIndex().map(lambda r: (r[0][0], r[0][1], r[1] // 50)),
                                   "key string, value string, part long")
        df = df.repartitionByRange(4, "part").drop("part")
        with pytest.raises(Exception, match="injected task failure"):
            _write(_fail_in_partition(df, 3), root)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    written = _consume(root, "out", "read_uncommitted")
    assert written, "the aborted job's tasks wrote nothing: the test proves nothing"
    assert _consume(root, "out") == []
    assert _open(root, "out") == []
    _write(spark.createDataFrame(_rows(10, "n"), "key string, value string"), root)
    assert _values(_consume(root, "out")) == sorted(f"n{i}" for i in range(10))


def test_retried_task_writes_each_record_once(tmp_path):
    """Attempt 0 of one task appends all its rows (committed as an open transaction) and
    then fails; Spark retries it; every record is read exactly once, the failed attempt's
    records are aborted (read_uncommitted shows they were written)."""
    root = _root(tmp_path, partitions=2)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    subprocess.run([sys.executable, "-m", "tests.pipelines.test_spark_write", "retry", root],
                   check=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                       os.path.abspath(__file__)))), timeout=600)
    committed = _consume(root, "out")
    assert _values(committed) == sorted([f"v{i}" for i in range(200)])
    assert len(_consume(root, "out", "read_uncommitted")) == 300  # attempt 0's 100 aborted
    assert _open(root, "out") == []


def _child_retry(root: str) -> None:
    """The retry job, in its own session: ``local[1,2]`` lets a failed task run again. The
    sink's writer is subclassed here (test code only) so that attempt 0 of task 1 fails
    after it appended all its rows, the worst case for duplicates."""
    from pyspark import TaskContext

    from pipelines.source.datasource import KafkaStoreDataSource
    from pipelines.source.session import get_spark
    from pipelines.sink.writer import TopicBatchWriter, batch_writer

    class FlakyWriter(TopicBatchWriter):
        def write(self, iterator):
            message = super().write(iterator)
            ctx = TaskContext.get()
            if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
                raise RuntimeError("injected failure of attempt 0, after it wrote")
            return message

    class FlakySource(KafkaStoreDataSource):
        @classmethod
        def name(cls):
            return "kafkastore_flaky"

        def writer(self, schema, overwrite):
            return FlakyWriter(batch_writer(self.options, schema, overwrite).opts)

    spark = get_spark(master="local[1,2]", app_name="kafkastore-retry-test")
    spark.dataSource.register(FlakySource)
    df = spark.createDataFrame([(f"k{i}", f"v{i}", i // 100) for i in range(200)],
                               "key string, value string, part int")
    df = df.repartitionByRange(2, "part").drop("part")
    df.write.format("kafkastore_flaky").option("root", root).option("topic", "out") \
        .mode("append").save()
    spark.stop()


# --------------------------------------------------------------------------- the commit protocol

def _task(storage, prefix, attempt, rows, job, topic="out"):
    import pyarrow as pa
    table = pa.table({"key": [f"k{i}" for i in rows], "value": [f"v{i}" for i in rows]})
    return tsc.write_task(storage, [table], prefix=prefix, task_attempt_id=attempt,
                          topic=topic, job=job)


def test_a_crash_after_the_decision_is_rolled_forward(tmp_path):
    """The driver stored its decision and died before the markers: the next writer on the
    root writes them; a job that never decided is not touched by recovery."""
    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    results = [_task(storage, prefix, 1, range(0, 10), "j1"), _task(storage, prefix, 2, range(10, 20), "j1")]
    txns = [{"topic": t, "partition": p, "producer_id": r.producer_id, "producer_epoch": 0}
            for r in results for t, p in r.partitions]
    storage.put_if_absent(tsc.job_record_path("j1"), json.dumps(
        {"format": 1, "job": "j1", "sink": None, "batch_id": None, "records": 20,
         "transactions": txns}).encode())
    assert _consume(root, "out") == []
    assert tsc.recover_jobs(storage) == len(txns)
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(20))
    assert _open(root, "out") == [] and storage.list("_sink/jobs/") == []


def test_losing_attempts_are_aborted_and_fenced(tmp_path):
    """The driver commits only the attempt Spark chose; another attempt of the same task
    (a speculative one) is aborted at a newer epoch, so its later appends are refused."""
    root = _root(tmp_path, partitions=1)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    winner = _task(storage, prefix, 7, range(10), "j2")
    loser = _task(storage, prefix, 8, range(10), "j2")
    tsc.commit_job(storage, [winner], job="j2", prefix=prefix, topics=["out"])
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(10))
    zombie = Broker(storage, producer_id=loser.producer_id, producer_epoch=0, housekeeping=False)
    zombie.begin_transaction()
    zombie.send("out", b"late", partition=0)
    with pytest.raises(OutOfOrderSequenceError):
        zombie.flush()
    assert _open(root, "out") == []


def test_a_transaction_ended_before_the_commit_fails_the_job(tmp_path):
    root = _root(tmp_path, partitions=1)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    r = _task(storage, prefix, 1, range(5), "j3")
    tsc.abort_job(storage, job="j3", prefix=prefix, topics=["out"])   # e.g. a hanging abort
    with pytest.raises(TopicSinkError, match="ended before the job committed"):
        tsc.commit_job(storage, [r], job="j3", prefix=prefix, topics=["out"])
    assert _consume(root, "out") == []


def test_a_replayed_stream_batch_is_a_no_op(tmp_path):
    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    first, again = tsc.new_job_prefix(), tsc.new_job_prefix()
    r1 = _task(storage, first, 1, range(10), "run1")
    tsc.commit_job(storage, [r1], job="run1", prefix=first, topics=["out"], sink_id="s", batch_id=0)
    r2 = _task(storage, again, 1, range(10), "run2")
    first_record = json.loads(storage.get(tsc.stream_record_path("s", 0)))
    stored = tsc.commit_job(storage, [r2], job="run2", prefix=again, topics=["out"],
                            sink_id="s", batch_id=0)
    assert stored == first_record
    assert len(_consume(root, "out")) == 10 and _open(root, "out") == []
    assert tsc.last_committed_batch(storage, "s") == 0


def test_a_replayed_batch_aborts_what_a_dead_run_left_open(tmp_path):
    """A run killed in the middle of batch 3 (no abort ran) left an open transaction; the
    next run replays batch 3 under the same prefix and its commit aborts the dead attempt."""
    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    prefix, job = tsc.stream_prefix("s", 3), tsc.stream_job("s", 3)
    _task(storage, prefix, 1, range(10), job)                 # the dead run's attempt
    assert _open(root, "out") != []
    replay = _task(storage, prefix, 1 ^ 0x5A5A, range(10), job)
    tsc.commit_job(storage, [replay], job=job, prefix=prefix, topics=["out"],
                   sink_id="s", batch_id=3)
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(10))
    assert _open(root, "out") == []


# --------------------------------------------------------------------------- streaming writes

def _stream(spark, src, root, ckpt, fail_flag=None):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    df = spark.readStream.schema("key string, value string").json(str(src))
    if fail_flag is not None:
        flag = str(fail_flag)

        def maybe_fail(value):
            if os.path.exists(flag) and value == "v129":   # the batch's last row
                raise RuntimeError("injected crash mid-batch")
            return value
        df = df.withColumn("value", F.udf(maybe_fail, StringType())("value"))
    q = (df.writeStream.format("kafkastore").option("root", root).option("topic", "out")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()
    return q


def _add_file(src, name, lo, hi):
    src.mkdir(exist_ok=True)
    tmp = src.parent / f".{name}"
    tmp.write_text("".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n"
                           for i in range(lo, hi)))
    os.replace(tmp, src / name)


def test_stream_write_exactly_once_across_restarts(spark, tmp_path):
    """Batch 0 commits; Spark's own commit log then loses it (a crash between the sink's
    commit and the checkpoint's): the restart replays batch 0, which adds nothing. A crash
    in the middle of batch 1 (a task fails after others wrote) and a restart: batch 1's
    records appear once."""
    root = _root(tmp_path, partitions=2, config={"segment.bytes": 1024})
    src, ckpt, flag = tmp_path / "src", tmp_path / "ckpt", tmp_path / "fail"
    _add_file(src, "a.json", 0, 30)
    _stream(spark, src, root, ckpt)
    assert len(_consume(root, "out")) == 30
    for name in os.listdir(ckpt / "commits"):
        os.remove(ckpt / "commits" / name)           # Spark forgets it committed batch 0
    _stream(spark, src, root, ckpt)
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(30))

    _add_file(src, "b.json", 30, 130)
    flag.write_text("x")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        with pytest.raises(Exception, match="injected crash mid-batch"):
            _stream(spark, src, root, ckpt, fail_flag=flag)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    flag.unlink()
    assert len(_consume(root, "out", "read_uncommitted")) > 30, "the failed batch wrote nothing"
    assert len(_consume(root, "out")) == 30 and _open(root, "out") == []
    _stream(spark, src, root, ckpt, fail_flag=flag)
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(130))
    assert _open(root, "out") == []


# --------------------------------------------------------------------------- a Kafka client reads it

def test_a_kafka_client_reads_the_job_through_serve(spark, tmp_path):
    """confluent-kafka, read_committed, through ``kafkastore serve``: exactly the job's records."""
    from confluent_kafka import Consumer

    from tests.helpers.serve_procs import start_serve, stop_serve

    root = _root(tmp_path, partitions=3)
    _write(spark.createDataFrame(_rows(60), "key string, value string").repartition(3), root)
    proc = start_serve(root)
    try:
        c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "spark-write-test",
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        c.subscribe(["out"])
        got = []
        for _ in range(120):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.key().decode(), m.value().decode()))
            if len(got) >= 60:
                break
        for _ in range(4):  # nothing more arrives
            m = c.poll(0.25)
            assert m is None or m.error() is not None
        c.close()
    finally:
        stop_serve(proc)
    assert sorted(got) == sorted(_rows(60))


# --------------------------------------------------------------------------- progress

def test_the_loads_progress_line_is_the_one_shared_formatter():
    """The load's Progress prints through progress_line; its line is unchanged."""
    from pipelines.progress_line import progress_line

    assert (progress_line("load orders", 5.0, {"p0": 10, "p1": 20}, tasks=(1, 2))
            == "load orders: 5s, tasks 1/2, 30 records (6/s) p0=10 p1=20")


def test_a_write_prints_the_loads_progress_per_task_and_at_the_commit(tmp_path):
    """Each task prints records and bytes per partition every 10 s and at its end; the
    driver's commit prints the job's, with the markers written and attempts aborted."""
    import io

    import pyarrow as pa

    from kafkastore.clock import ManualClock

    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    clock = ManualClock()
    task_out, commit_out = io.StringIO(), io.StringIO()

    def batches():   # keys k0..k9 go to fixed partitions; 12 s pass before each later batch
        for lo in (0, 5, 10):
            if lo:
                clock.advance(12)
            yield pa.table({"key": [f"k{i}" for i in range(lo, lo + 5)],
                            "value": [f"value-{i}" for i in range(lo, lo + 5)]})

    r = tsc.write_task(storage, batches(), prefix=prefix, task_attempt_id=1, topic="out",
                       job="jg", out=task_out, clock=clock)
    lines = task_out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "write jg task 1: 12s, 10 records", "write jg task 1: 24s, 15 records",
        "write jg task 1: 24s, 15 records"]
    assert "done" in lines[2] and "done" not in lines[1]
    want = {}
    for i in range(15):
        p = (murmur2(f"k{i}".encode()) & 0x7FFFFFFF) % 2
        n, b = want.get(p, (0, 0))
        want[p] = (n + 1, b + len(f"k{i}") + len(f"value-{i}"))
    for p, (n, b) in want.items():
        assert f"out-{p}={n}/{b}B" in lines[2]
    assert {(t, p): (n, b) for t, p, n, b in r.sizes} == {("out", p): v for p, v in want.items()}
    loser = _task(storage, prefix, 2, range(3), "jg")
    assert loser.producer_id != r.producer_id
    tsc.commit_job(storage, [r], job="jg", prefix=prefix, topics=["out"], out=commit_out)
    line = commit_out.getvalue()
    assert line.startswith("write jg committed: ") and "tasks 1/1, 15 records" in line
    assert f"{sum(b for _, b in want.values())} bytes" in line
    assert f"markers {len(want)}, attempts aborted {len(loser.partitions)}" in line
    assert all(f"out-{p}={n}/{b}B" in line for p, (n, b) in want.items())


# --------------------------------------------------------------------------- speculation

def test_speculative_attempts_both_finishing_or_still_running_add_nothing(tmp_path):
    """Speculation, through the sink's DataSourceWriter API called as Spark calls it
    (``spark.speculation`` is a start-up setting of the SparkContext, and Spark never
    speculates in local mode, so the one shared session cannot run it). The writer is
    built by ``DataSource.writer``, pickled to each attempt, and each attempt's commit
    message pickled back. Task 0 runs twice and both attempts finish; Spark passes the
    first one's message. Task 1's speculative copy is still appending when the driver
    commits. Every record is readable exactly once; the losers' records are aborted."""
    import pickle

    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from pipelines.sink.writer import batch_writer

    root = _root(tmp_path, partitions=2)
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    driver = batch_writer({"root": root, "topic": "out"}, schema, False)

    def rows(lo, hi):
        return pa.RecordBatch.from_pydict({"key": [f"k{i}" for i in range(lo, hi)],
                                           "value": [f"v{i}" for i in range(lo, hi)]})

    def attempt(batches):
        task = pickle.loads(pickle.dumps(driver))          # what an executor gets
        return pickle.loads(pickle.dumps(task.write(iter(batches))))   # what comes back

    task0 = attempt([rows(0, 10), rows(10, 20)])
    task0_copy = attempt([rows(0, 10), rows(10, 20)])      # finishes too; Spark drops it
    task1 = attempt([rows(20, 30), rows(30, 40)])
    assert task0.result.producer_id != task0_copy.result.producer_id

    def still_running():
        yield rows(20, 30)
        driver.commit([task0, task1])   # the job commits while this copy is mid-task
        yield rows(30, 40)

    with pytest.raises(TopicSinkError, match="ended without this attempt"):
        attempt(still_running())
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(40))
    # The losers' records were written (task 0's copy: 20; task 1's: 10 before the commit
    # and 10 after, when buffered appends flush with its abort) and aborted.
    assert len(_consume(root, "out", "read_uncommitted")) == 40 + 20 + 20
    assert _open(root, "out") == []


# --------------------------------------------------------------------------- all partitions or none

def _killed_between_markers(tmp_path) -> str:
    """A root whose job ``jk`` (40 records over partitions 0 and 1 of ``out``) was decided
    and marked in partition 0 only: the driver died between the two partitions' markers."""
    root = f"file://{tmp_path}/root"
    half_marked_job(root, "out", 40, "jk")
    return root


def test_consume_sees_a_job_killed_between_two_partitions_markers_whole(tmp_path):
    """`consume` (read_committed) plans all partitions first: it rolls the pending job
    forward, so it prints all 40 records, and nothing is left pending or open."""
    root = _killed_between_markers(tmp_path)
    assert _values(_consume(root, "out")) == sorted(f"v{i}" for i in range(40))
    assert _open(root, "out") == [] and Storage(root).list("_sink/pending/") == []


def test_spark_reads_see_a_job_killed_between_two_partitions_markers_whole(spark, tmp_path):
    """The Spark source's planning (batch here; the stream source and the load plan with
    the same snapshot) sees the half-marked job in both partitions."""
    root = _killed_between_markers(tmp_path)
    df = spark.read.format("kafkastore").option("root", root).option("subscribe", "out").load()
    got = sorted(r.value.decode() for r in df.select("value").collect())
    assert got == sorted(f"v{i}" for i in range(40))
    assert _open(root, "out") == []


def _marked_in(storage, p: int) -> int:
    return PartitionReader(storage, "out", p).last_stable_offset


def test_a_snapshot_a_job_finished_marking_under_is_taken_again(tmp_path):
    """A reader's snapshot reads partition 0, a whole job then commits (pending object,
    markers, settled token), then the snapshot reads partition 1: the snapshot holds the
    job in partition 1 only. The changed token makes the reader take it again."""
    from kafkastore.job_commits import consistent

    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    results = [_task(storage, prefix, 1, range(0, 40), "jt")]
    calls = []

    def take():
        first = _marked_in(storage, 0)
        if not calls:
            tsc.commit_job(storage, results, job="jt", prefix=prefix, topics=["out"])
        calls.append((first, _marked_in(storage, 1)))
        return calls[-1]

    lso0, lso1 = consistent(storage, take)
    assert calls[0][0] == 0 and calls[0][1] > 0       # the first snapshot was partial
    assert lso0 > 0 and lso1 > 0 and len(calls) == 2


def test_a_snapshot_under_a_pending_job_rolls_it_forward_and_is_taken_again(tmp_path):
    """The job decides and marks partition 1 while a snapshot is between partitions 0 and
    1, and its driver dies: the reader finds the pending object after its snapshot, writes
    partition 0's marker and takes the snapshot again, whole."""
    from kafkastore.write.log_writer import LogWriter as B
    from kafkastore.job_commits import consistent, mark_pending

    root = _root(tmp_path, partitions=2)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    r = _task(storage, prefix, 1, range(0, 40), "jp")
    record = {"format": 1, "job": "jp", "commit_id": "c1", "sink": None, "batch_id": None,
              "records": 40, "transactions": [
                  {"topic": t, "partition": p, "producer_id": r.producer_id, "producer_epoch": 0}
                  for t, p in r.partitions]}
    calls = []

    def take():
        first = _marked_in(storage, 0)
        if not calls:   # the driver, mid-snapshot: decided, pending, partition 1 marked
            storage.put_if_absent(tsc.job_record_path("jp"), json.dumps(record).encode())
            mark_pending(storage, record)
            B(storage, producer_id=r.producer_id, producer_epoch=0,
              housekeeping=False).write_marker("out", 1, commit=True)
        calls.append((first, _marked_in(storage, 1)))
        return calls[-1]

    lso0, lso1 = consistent(storage, take)
    assert calls[0][0] == 0 and calls[0][1] > 0
    assert lso0 > 0 and lso1 > 0 and len(calls) == 2
    assert storage.list("_sink/pending/") == [] and _open(root, "out") == []


def test_readers_do_not_pay_for_past_jobs(spark, tmp_path):
    """After committed jobs nothing stays pending: a planning reader lists an empty
    directory and reads one token, however many jobs wrote before."""
    root = _root(tmp_path, partitions=2)
    for n in range(3):
        _write(spark.createDataFrame(_rows(10, f"j{n}-"), "key string, value string"), root)
    storage = Storage(root)
    assert storage.list("_sink/pending/") == [] and storage.list("_sink/jobs/") == []
    assert storage.exists("_sink/settled")


if __name__ == "__main__":
    if sys.argv[1] == "retry":
        _child_retry(sys.argv[2])


def test_an_attempt_appending_after_its_job_closed_aborts_itself(tmp_path):
    """Spark aborts a job while a task it cancelled is still appending: the driver closes
    the job before it looks for transactions, and an append after that look is followed by
    the attempt's own check, which aborts its transaction. Nothing stays open."""
    root = _root(tmp_path, partitions=1)
    storage = Storage(root)
    prefix = tsc.new_job_prefix()
    assert tsc.abort_job(storage, job="j4", prefix=prefix, topics=["out"], close=True) == 0
    with pytest.raises(TopicSinkError, match="ended without this attempt"):
        _task(storage, prefix, 3, range(5), "j4")   # appends after the driver's scan
    assert _consume(root, "out") == []
    assert _open(root, "out") == []
