"""Benchmark: loading a topic into an Iceberg table vs Spark's Parquet copy and the no-Spark ceiling.

    .venv/bin/python bench/load.py [--records N] [--partitions P] [--master local[2]]

1. Builds (once; reused from ``--cache-dir`` afterwards) a topic of P partitions
   and N records (default 3,000,000: 16-byte keys, 100-byte JSON-like values that
   differ per record, no headers, one record every ms) with the Broker to a
   file:// root; the build time is printed on its own.
2. Loads it into a fresh Iceberg table (embedded SQLite catalog) with
   :func:`pipelines.jobs.load.run_load` (planned splits read on the executors to
   Arrow, Parquet written there, one snapshot committed by the driver) on
   ``--master`` (default local[2]).
3. Baseline, same session: copies the identical rows (the table's data files,
   as pyiceberg plans them) from Parquet to Parquet with Spark alone.
4. Ceiling, same process, no Spark: the same splits decoded to Arrow with the
   same reader and written as the same Parquet (same writer, partitioning and
   codec) by pyarrow on 2 threads.
5. Prints rates and the ratios load/copy (copy time / load time: > 1 means the
   load is faster than Spark's copy) and load/ceiling (ceiling time / load time),
   and the same ratio by CPU seconds (this process, the JVM and Spark's Python
   workers: :mod:`process_cpu`), which other jobs on the machine do not move as
   they move wall times; the 1-minute load average is printed next to each.
6. Tail reads: time to read the last 1,000 records of a partition of N/10 and
   of N records with the reader: it must stay flat as the partition grows.

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

from kafkastore.write.log_writer import LogWriter as Broker  # noqa: E402
from kafkastore.read.reader import PartitionReader  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic, load_topic  # noqa: E402

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


def ceiling(root: str, topic: str, out_dir: str, compression: str, threads: int = 2):
    """The load's work without Spark: the same splits (same planner, same split
    size) read to Arrow and written as the same Parquet, ``threads`` at a time.
    Returns (seconds, rows)."""
    from concurrent.futures import ThreadPoolExecutor

    from kafkastore.read.reader import READ_COMMITTED, read_range
    from pipelines.spec.offset_ranges import OffsetRange
    from pipelines.source.planning import DEFAULT_MAX_BYTES, plan_range_splits
    from pipelines.spec.table_layout import TableLayout
    from pipelines.warehouse.files import write_files

    storage = Storage(root)
    ranges = []
    for p in range(load_topic(storage, topic).partitions):
        r = PartitionReader(storage, topic, p)
        ranges.append(OffsetRange(topic, p, r.log_start_offset, r.last_stable_offset))
    started = time.monotonic()
    splits = plan_range_splits(storage, ranges, DEFAULT_MAX_BYTES)

    def one(split) -> int:
        batches = [read_range(storage, rr, include_headers=True, isolation=READ_COMMITTED)
                   for rr in split]
        files = write_files(f"file://{out_dir}", batches, run_id="ceiling",
                            layout=TableLayout(compression=compression))
        return sum(f["rows"] for f in files)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        rows = sum(pool.map(one, splits))
    return time.monotonic() - started, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--cache-dir", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kafkastore-bench"))
    ap.add_argument("--work-dir", default=None, help="warehouse and copy output (default: cache)")
    ap.add_argument("--compression", default="zstd", help="Parquet codec for both sides")
    ap.add_argument("--skip-tail", action="store_true")
    ap.add_argument("--value-format", choices=("raw", "avro"), default="raw",
                    help="avro: Avro values framed for the built-in schema registry, loaded "
                         "decoded to columns vs raw (see bench/load_avro.py)")
    ap.add_argument("--mode", choices=("append", "upsert"), default="append",
                    help="upsert: upsert loads vs an append load (see bench/load_upsert.py)")
    ap.add_argument("--keys", type=int, default=100_000, help="--mode upsert: distinct keys")
    ap.add_argument("--spread", action="store_true",
                    help="--mode upsert: the change set's keys spread over the 10x table")
    args = ap.parse_args(argv)
    if args.mode == "upsert":
        from load_upsert import upsert_main

        return upsert_main(args)
    if args.value_format == "avro":
        from load_avro import avro_main

        return avro_main(args)
    os.makedirs(args.cache_dir, exist_ok=True)
    n, parts = args.records, args.partitions

    per = {p: n // parts + (1 if p < n % parts else 0) for p in range(parts)}
    root, built = build_topic(args.cache_dir, "bench", per)
    print(f"topic: {n:,} records in {parts} partitions ({VALUE_SIZE}-byte values), {root}")
    print("build: " + (f"{built:.1f} s ({n / built:,.0f} records/s through the Broker)"
                       if built else "reused from the cache"))
    nbytes = log_bytes(root, "bench")
    print(f"log size: {nbytes / 1e6:,.1f} MB")

    from pipelines.warehouse.catalog import Warehouse
    from pipelines.warehouse.reads import plan_scan
    from pipelines.jobs.load import run_load
    from pipelines.source.session import get_spark

    work = args.work_dir or os.path.join(args.cache_dir, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spark = get_spark(master=args.master, app_name="kafkastore-bench-load",
                      extra_conf={"spark.driver.memory": "4g", "spark.ui.enabled": "false",
                                  "spark.sql.parquet.compression.codec": args.compression})
    # Warm-up on a small slice: Python workers (planning, reading, mapInArrow), the
    # JVM's Parquet paths and pyiceberg start once, before anything is timed.
    warm = Warehouse(f"file://{work}/warm")
    run_load(spark, root=root, topic="bench", warehouse=warm, table="warm", progress=False,
             until_offsets={p: min(per[p], 10_000) for p in per})
    warm_files = [u[len("file://"):] for u in plan_scan(warm.table("warm")).urls()]
    spark.read.parquet(*warm_files).write.mode("overwrite").parquet(os.path.join(work, "warm-copy"))

    from process_cpu import tree_cpu_seconds

    wh = Warehouse(f"file://{work}/warehouse")
    load_avg = os.getloadavg()[0]
    cpu0 = tree_cpu_seconds()
    started = time.monotonic()
    summary = run_load(spark, root=root, topic="bench", warehouse=wh, table="bench",
                       compression=args.compression, progress=True, progress_interval_s=15)
    load_s = time.monotonic() - started
    load_cpu = tree_cpu_seconds() - cpu0
    table = wh.table("bench")
    plan = plan_scan(table)
    paths = [u[len("file://"):] for u in plan.urls()]
    parquet_bytes = sum(os.path.getsize(p) for p in paths)
    print(summary.render().splitlines()[0])

    started = time.monotonic()
    src = spark.read.parquet(*paths)
    src.write.mode("overwrite").option("compression", args.compression).parquet(
        os.path.join(work, "copy"))
    copy_s = time.monotonic() - started
    copied = spark.read.parquet(os.path.join(work, "copy")).count()
    spark.stop()

    ceiling_avg = os.getloadavg()[0]
    cpu0 = time.process_time()   # the ceiling's threads are this process's
    ceiling_s, ceiling_rows = ceiling(root, "bench", os.path.join(work, "ceiling"),
                                      args.compression, threads=2)
    ceiling_cpu = time.process_time() - cpu0

    print()
    print(f"rows: loaded {summary.rows:,}, copied {copied:,}, ceiling {ceiling_rows:,}; "
          f"Parquet {parquet_bytes / 1e6:,.1f} MB in {len(paths)} files ({args.compression}); "
          f"master {args.master}")
    print(f"load (log -> Iceberg table):   {_rate(summary.rows, nbytes, load_s)}")
    print(f"copy (Spark Parquet copy):     {_rate(copied, nbytes, copy_s)}")
    print(f"ceiling (no Spark, 2 threads): {_rate(ceiling_rows, nbytes, ceiling_s)}")
    print(f"  of the load: Iceberg commit (footers, manifests, catalog) "
          f"{summary.commit_seconds:.2f} s")
    print(f"ratio load/copy:    {copy_s / load_s:.2f} (copy s / load s; target >= 1.0)")
    print(f"ratio load/ceiling: {ceiling_s / load_s:.2f} (ceiling s / load s; aim >= 0.8)")
    print(f"ratio load/ceiling by CPU: {ceiling_cpu / load_cpu:.2f} (ceiling {ceiling_cpu:.2f} "
          f"CPU s / load {load_cpu:.2f} CPU s, JVM and workers included); load average "
          f"{load_avg:.1f} at the load, {ceiling_avg:.1f} at the ceiling")

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
