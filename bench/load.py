"""Benchmark: loading a topic into the warehouse vs Spark's own Parquet -> Parquet copy.

    .venv/bin/python bench/load.py [--records N] [--partitions P] [--master local[2]]

1. Builds (once; reused from ``--cache-dir`` afterwards) a topic of P partitions
   and N records (default 10,000,000: 16-byte keys, 100-byte JSON-like values that
   differ per record, no headers, one record every ms) with the Broker to a file:// root; the build time is printed
   on its own.
2. Loads it into a fresh warehouse table with :func:`pipelines.load.run_load`
   (data source read, executor-side decode into Arrow, executor-side Parquet
   writes, one commit) on ``--master`` (default local[2]).
3. In the same session copies the identical rows (the table's data files) from
   a Parquet dataset to a Parquet dataset with Spark alone: the native
   columnar ceiling for "read N rows, write them as Parquet".
   The load is also timed through the data source's row path
   (``read_path="datasource"``, what JSON/Avro loads use) for comparison.
4. Prints the rates (records/s, and MB/s of the log's bytes for those rows,
   the same denominator for both) and the ratio load/copy (target >= 0.8).
5. Tail reads: time to read the last 1,000 records of a partition of N/10 and
   of N records (a separate two-partition topic, also cached) with the reader:
   it must stay flat as the partition grows.

Other processes on the machine make the numbers noisy: rerun and compare.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore.broker import Broker  # noqa: E402
from kafkastore.reader import PartitionReader  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics import create_topic, load_topic  # noqa: E402

KEY_SIZE = 16
VALUE_SIZE = 100
BASE_TS = 1_700_000_000_000
FLUSH_EVERY = 500_000          # records per partition buffer before a segment is written
TOPIC_CONFIG = {"segment.bytes": str(256 << 20), "compression.type": "producer"}


_PAD = b"abcdefghijklmnopqrstuvwxyz0123456789" * 3


def _value(i: int) -> bytes:
    """A 100-byte JSON-like value that varies per record (so Parquet cannot
    dictionary-encode the column away, as it could a constant)."""
    head = b'{"n":%d,"user":"u%d","amount":%d.%02d,"pad":"' % (i, i % 99991, i % 977, i % 100)
    return head + _PAD[:VALUE_SIZE - len(head) - 2] + b'"}'


def _produce(storage: Storage, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records into partition p, through the Broker (uncompressed)."""
    broker = Broker(storage, batch_size=1 << 20, compression="none")
    i = 0
    for p, n in counts.items():
        for j in range(n):
            broker.send(topic, _value(i), key=b"key-%012d" % i, timestamp=BASE_TS + i, partition=p)
            i += 1
            if (j + 1) % FLUSH_EVERY == 0:
                broker.flush()
        broker.flush()


def build_topic(cache: str, name: str, counts: dict[int, int]) -> tuple[str, float | None]:
    """A cached root holding topic ``name`` with ``counts`` records per partition.
    Returns (root URL, build seconds or None when reused)."""
    tag = "-".join(str(counts[p]) for p in sorted(counts))
    path = os.path.join(cache, f"{name}-v2-{tag}")
    done = os.path.join(path, "COMPLETE")
    root = f"file://{path}"
    if os.path.exists(done):
        return root, None
    shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    storage = Storage(root)
    create_topic(storage, name, len(counts), TOPIC_CONFIG)
    _produce(storage, name, counts)
    with open(done, "w") as f:
        f.write(json.dumps(counts))
    return root, time.monotonic() - started


def log_bytes(root: str, topic: str) -> int:
    storage = Storage(root)
    return sum(PartitionReader(storage, topic, p).manifest.size
               for p in range(load_topic(storage, topic).partitions))


def tail_read_seconds(root: str, topic: str, partition: int, n: int = 1000,
                      repeat: int = 5) -> tuple[float, float, int]:
    """(first, best) seconds to read the last ``n`` records with a fresh reader."""
    times, rows = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        reader = PartitionReader(Storage(root), topic, partition)
        table = reader.read(reader.high_watermark - n)
        times.append(time.perf_counter() - started)
        rows = table.num_rows
    return times[0], min(times), rows


def _rate(records: int, nbytes: int, seconds: float) -> str:
    return (f"{seconds:7.2f} s  {records / seconds:12,.0f} records/s  "
            f"{nbytes / seconds / 1e6:8.1f} MB/s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--cache-dir", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kafkastore-bench"))
    ap.add_argument("--work-dir", default=None, help="warehouse and copy output (default: cache)")
    ap.add_argument("--compression", default="zstd", help="Parquet codec for both sides")
    ap.add_argument("--skip-tail", action="store_true")
    ap.add_argument("--skip-datasource", action="store_true",
                    help="do not also time the load through the data source's row path")
    args = ap.parse_args(argv)
    os.makedirs(args.cache_dir, exist_ok=True)
    n, parts = args.records, args.partitions

    per = {p: n // parts + (1 if p < n % parts else 0) for p in range(parts)}
    root, built = build_topic(args.cache_dir, "bench", per)
    print(f"topic: {n:,} records in {parts} partitions ({VALUE_SIZE}-byte values), {root}")
    print("build: " + (f"{built:.1f} s ({n / built:,.0f} records/s through the Broker)"
                       if built else "reused from the cache"))
    nbytes = log_bytes(root, "bench")
    print(f"log size: {nbytes / 1e6:,.1f} MB")

    from pipelines.load import run_load
    from pipelines.session import get_spark
    from pipelines import warehouse as wh

    work = args.work_dir or os.path.join(args.cache_dir, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spark = get_spark(master=args.master, app_name="kafkastore-bench-load",
                      extra_conf={"spark.driver.memory": "4g", "spark.ui.enabled": "false",
                                  "spark.sql.parquet.compression.codec": args.compression})
    # Warm-up on a small slice: Python workers (data source planning and reading,
    # mapInArrow) and the JVM's Parquet paths start once, before anything is timed.
    warm = f"file://{work}/warm"
    run_load(spark, root=root, topic="bench", warehouse=warm, table="warm", progress=False,
             until_offsets={p: min(per[p], 10_000) for p in per})
    warm_files = [os.path.join(work, "warm", "warm", f.path)
                  for f in wh.Table(warm, "warm").live_files()]
    spark.read.parquet(*warm_files).write.mode("overwrite").parquet(os.path.join(work, "warm-copy"))

    started = time.monotonic()
    summary = run_load(spark, root=root, topic="bench", warehouse=f"file://{work}/warehouse",
                       table="bench", compression=args.compression, progress=True,
                       progress_interval_s=15)
    load_s = time.monotonic() - started
    table = wh.Table(f"file://{work}/warehouse", "bench")
    files = table.live_files()
    parquet_bytes = sum(f.bytes for f in files)
    print(summary.render().splitlines()[0])

    ds_s = None
    if not args.skip_datasource:
        # The same load through spark.read.format("kafkastore") (the path decoded
        # formats take): Spark converts every record to its row format and back.
        started = time.monotonic()
        run_load(spark, root=root, topic="bench", warehouse=f"file://{work}/warehouse-ds",
                 table="bench", compression=args.compression, read_path="datasource",
                 progress=False)
        ds_s = time.monotonic() - started

    paths = [os.path.join(work, "warehouse", "bench", f.path) for f in files]
    started = time.monotonic()
    src = spark.read.parquet(*paths)
    src.write.mode("overwrite").option("compression", args.compression).parquet(
        os.path.join(work, "copy"))
    copy_s = time.monotonic() - started
    copied = spark.read.parquet(os.path.join(work, "copy")).count()

    print()
    print(f"rows: loaded {summary.rows:,}, copied {copied:,}; Parquet {parquet_bytes / 1e6:,.1f} MB "
          f"in {len(files)} files ({args.compression}); master {args.master}")
    print(f"load (log -> warehouse):       {_rate(summary.rows, nbytes, load_s)}")
    if ds_s is not None:
        print(f"load, data source row path:    {_rate(summary.rows, nbytes, ds_s)}")
    print(f"copy (Parquet -> Parquet):     {_rate(copied, nbytes, copy_s)}")
    print(f"ratio load/copy: {copy_s / load_s:.2f} (target >= 0.8)")
    spark.stop()

    if not args.skip_tail:
        small, large = max(1000, n // 10), max(1000, n)
        troot, tbuilt = build_topic(args.cache_dir, "tail", {0: small, 1: large})
        print()
        print("tail topic build: " + (f"{tbuilt:.1f} s" if tbuilt else "reused from the cache"))
        for p, size in ((0, small), (1, large)):
            first, best, rows = tail_read_seconds(troot, "tail", p)
            print(f"tail read, last {rows:,} of {size:,} records: first {first * 1000:7.1f} ms, "
                  f"best {best * 1000:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
