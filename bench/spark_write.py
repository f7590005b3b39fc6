"""Benchmark: a Spark write into a topic (``df.write.format("kafkastore")``) vs the library's
``Broker.send_arrow`` on the same data.

    ./run bench spark_write [--records N] [--partitions P] [--tasks T] [--repeat R]

N records (default 500,000) with 16-byte keys and 100-byte values go into a P-partition
topic (default 4) on a ``file://`` root, twice:

* ``send_arrow``: one Broker, the Arrow table in one call, one flush (one manifest commit
  per partition), no transaction: the library's fastest path;
* Spark: a DataFrame of the same rows cached in T partitions (default 2), written with
  ``df.write.format("kafkastore")``: T task transactions and the driver's commit
  (decision record, COMMIT markers), end to end as a user sees it.

Each runs ``--repeat`` times (default 3) into a fresh topic; the fastest is reported, as
records/s and MB/s of values, and the ratio Spark / send_arrow. The Spark session is
started (and warmed up by one small write) before timing. Other processes make the numbers
noisy (the load average is printed): compare ratios and rerun. No assertion on speed.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkastore.clock import SYSTEM  # noqa: E402

monotonic_s = SYSTEM.monotonic_s


def _table(n: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    keys = rng.integers(0, 256, (n, 16), dtype=np.uint8).tobytes()
    values = rng.integers(0, 256, (n, 100), dtype=np.uint8).tobytes()
    key = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
        (np.arange(n + 1, dtype=np.int32) * 16).tobytes()), pa.py_buffer(keys)])
    value = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
        (np.arange(n + 1, dtype=np.int32) * 100).tobytes()), pa.py_buffer(values)])
    return pa.table({"key": key, "value": value})


def _send_arrow(root: str, topic: str, table) -> float:
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.storage import Storage

    t0 = monotonic_s()
    broker = Broker(Storage(root), housekeeping=False)
    broker.send_arrow(topic, table)
    broker.flush()
    return monotonic_s() - t0


def _spark_write(df, root: str, topic: str) -> float:
    t0 = monotonic_s()
    df.write.format("kafkastore").option("root", root).option("topic", topic).mode("append").save()
    return monotonic_s() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from kafkastore.read.reader import PartitionReader
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from pipelines.source.session import get_spark

    table = _table(args.records)
    root = f"file://{tempfile.mkdtemp(prefix='bench-spark-write-')}/root"
    storage = Storage(root)
    spark = get_spark(master=f"local[{args.tasks}]", app_name="bench-spark-write")
    df = spark.createDataFrame(table.to_pandas()).repartition(args.tasks).cache()
    df.count()
    create_topic(storage, "warmup", args.partitions)
    _spark_write(df.limit(1000), root, "warmup")

    best = {"send_arrow": float("inf"), "spark": float("inf")}
    for r in range(args.repeat):
        for name in best:
            topic = f"{name}-{r}"
            create_topic(storage, topic, args.partitions)
            took = (_send_arrow(root, topic, table) if name == "send_arrow"
                    else _spark_write(df, root, topic))
            count = sum(PartitionReader(storage, topic, p).read(0).num_rows
                        for p in range(args.partitions))
            assert count == args.records, (name, count)
            best[name] = min(best[name], took)
    mb = args.records * 100 / 1e6
    print(f"load average {os.getloadavg()[0]:.2f}; {args.records} records, "
          f"{args.partitions} partitions, {args.tasks} Spark tasks, best of {args.repeat}")
    for name, took in best.items():
        print(f"  {name:<10} {took:7.2f} s  {args.records / took:>12,.0f} rec/s  "
              f"{mb / took:7.1f} MB/s")
    print(f"  ratio spark / send_arrow (time): {best['spark'] / best['send_arrow']:.2f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
