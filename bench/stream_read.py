"""Benchmark: a streaming read of a topic (Trigger.AvailableNow) vs the batch read of the same data.

    ./run bench stream_read [--records N] [--partitions P] [--max-offsets M] [--master local[2]]

1. Builds a topic of P partitions and N records (default 1,000,000: 16-byte keys,
   100-byte values) with the Broker to a fresh file:// root; build time not measured.
2. Batch: ``spark.read.format("kafkastore")`` of the whole topic, counted with a
   ``foreach``-free aggregation over every row's bytes (``sum(length(value))``), so
   every record is read and decoded.
3. Stream: ``spark.readStream.format("kafkastore")`` with ``Trigger.AvailableNow`` and a
   fresh checkpoint, the same aggregation per micro-batch in ``foreachBatch``; once
   without a limit (one batch) and once with ``maxOffsetsPerTrigger`` = M (default
   N / 4: four batches), so the per-batch cost of the offset log and planning shows.
4. Prints records/s of each and the ratios stream/batch (batch time / stream time:
   1.0 means streaming costs nothing extra). Same Spark session, batch first timed
   after a warm-up read; other processes on the machine make the numbers noisy.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore.write.log_writer import LogWriter as Broker  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402


def build(root: str, records: int, partitions: int) -> None:
    """``records`` records round robin over ``partitions`` of topic ``bench``."""
    storage = Storage(root)
    create_topic(storage, "bench", partitions)
    broker = Broker(storage, batch_size=500)
    value = b"x" * 100
    for i in range(records):
        broker.send("bench", value, key=b"%016d" % i, partition=i % partitions)
    broker.flush()


def batch_read(spark, root: str) -> tuple[float, int]:
    """Seconds and rows of one batch read of the whole topic."""
    t = time.perf_counter()
    row = (spark.read.format("kafkastore").option("root", root).option("topic", "bench")
           .load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0])
    return time.perf_counter() - t, row.n


def stream_read(spark, root: str, checkpoint: str, max_offsets: int | None) -> tuple[float, int, int]:
    """Seconds, rows and micro-batches of one AvailableNow query over the whole topic."""
    counts: list[int] = []

    def sink(df, batch_id):
        counts.append(df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0].n)

    reader = spark.readStream.format("kafkastore").option("root", root).option("topic", "bench")
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    t = time.perf_counter()
    q = (reader.load().writeStream.trigger(availableNow=True)
         .option("checkpointLocation", checkpoint).foreachBatch(sink).start())
    q.awaitTermination()
    return time.perf_counter() - t, sum(counts), len(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets", type=int, default=None)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ks-bench-stream-")
    root = f"file://{work}/root"
    try:
        t = time.perf_counter()
        build(root, args.records, args.partitions)
        print(f"built {args.records:,} records in {args.partitions} partitions "
              f"({time.perf_counter() - t:.1f}s, not measured)")
        from pipelines.source.session import get_spark

        spark = get_spark(master=args.master, app_name="kafkastore-bench-stream-read")
        spark.sparkContext.setLogLevel("ERROR")
        batch_read(spark, root)                                  # warm-up: workers, imports
        b_s, b_n = batch_read(spark, root)
        assert b_n == args.records, (b_n, args.records)
        print(f"batch read:              {b_s:7.2f}s  {b_n / b_s:12,.0f} records/s")
        limit = args.max_offsets or max(1, args.records // 4)
        for label, max_offsets in (("stream, one batch", None),
                                   (f"stream, {limit:,}/trigger", limit)):
            s_s, s_n, batches = stream_read(spark, root, f"{work}/ckpt-{max_offsets}", max_offsets)
            assert s_n == args.records, (s_n, args.records)
            print(f"{label + ':':24s} {s_s:7.2f}s  {s_n / s_s:12,.0f} records/s  "
                  f"{batches} batch(es)  stream/batch ratio {b_s / s_s:.2f}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
