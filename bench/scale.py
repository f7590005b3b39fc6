"""Benchmark: how the cost of a load and of a compaction grows with partitions and records.

    .venv/bin/python bench/scale.py [--records 1000000,10000000,30000000]
                                    [--partitions 1,4,16,64] [--master local[2]]

For each record count R and partition count P (every pair), builds a topic of
R records over P partitions (16-byte keys drawn from R/10 distinct ones, so a
compaction has work; 100-byte values; about 8 segments a partition unless
``--segment-bytes``), written
with ``Broker.send_arrow`` (build time printed on its own, not part of the
figures), then in one Spark session (warmed up by a small load and
compaction first):

* loads it into a fresh warehouse table through :func:`pipelines.jobs.load.run_load`
  (only through that function: its internals are being ported; a failing load
  is reported and the run goes on);
* compacts it (forced, every partition) with
  :func:`pipelines.jobs.log_compaction.compact_topic`.

Printed per pair: microseconds per record of each, wall and by CPU (this process,
the JVM and Spark's Python workers: :mod:`process_cpu`; other jobs on a shared
machine move it far less than wall time), and the peak RSS of the Python driver
(sampled every 50 ms) during each. At the end, per job: the
cost per record at the largest size over the smallest (the issue's bound:
within 1.25), by partition count and by record count, then "largest/smallest"
(most records and partitions over fewest) and max/min over every pair.

Defaults are the issue's sizes (1M, 10M, 30M records; 1 to 64 partitions),
which take long: ``--records 100000,300000 --partitions 1,4,16`` is a quick
run. Other processes on the machine make the numbers noisy (the load average
is printed): compare ratios and rerun.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from kafkastore.write.log_writer import LogWriter as Broker  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402

TOPIC = "scale"
BASE_TS = 1_700_000_000_000
CHUNK = 500_000


class DriverPeak:
    """Peak RSS of this process while the ``with`` block runs (sampled)."""

    def __init__(self, interval: float = 0.05):
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def build(root: str, records: int, partitions: int, segment_bytes: int | None) -> float:
    storage = Storage(root)
    if segment_bytes is None:   # about 8 segments a partition: the head one is never cleaned
        segment_bytes = max(64 << 10, records * 140 // partitions // 8)
    create_topic(storage, TOPIC, partitions, {"cleanup.policy": "compact",
                                              "segment.bytes": min(segment_bytes, 1 << 30)})
    broker = Broker(storage, clock=lambda: BASE_TS + 10 ** 6, batch_size=64 << 10)
    rng = np.random.default_rng(records * 100 + partitions)
    distinct = max(1, records // 10)
    t = time.perf_counter()
    for start in range(0, records, CHUNK):
        n = min(CHUNK, records - start)
        ids = rng.integers(0, distinct, n)
        keys = pa.array(np.char.encode(np.char.zfill(ids.astype(str), 16)), pa.binary())
        vals = rng.integers(97, 123, (n, 100), dtype=np.uint8)
        values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
            np.arange(0, 100 * (n + 1), 100, dtype=np.int32)), pa.py_buffer(vals)])
        ts = pa.array(BASE_TS + start + np.arange(n, dtype=np.int64))
        broker.send_arrow(TOPIC, pa.table({"key": keys, "value": values, "timestamp": ts}))
        broker.flush()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="1000000,10000000,30000000",
                    help="comma list of record counts")
    ap.add_argument("--partitions", default="1,4,16,64", help="comma list of partition counts")
    ap.add_argument("--segment-bytes", type=int, default=None,
                    help="segment.bytes (default: about 8 segments a partition)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work-dir", default=None, help="where topics and tables go (temporary)")
    args = ap.parse_args(argv)
    sizes = [int(float(x)) for x in args.records.split(",")]
    parts = [int(x) for x in args.partitions.split(",")]

    from pipelines.jobs.log_compaction import compact_topic
    from pipelines.jobs.load import run_load
    from pipelines.source.session import get_spark
    from process_cpu import tree_cpu_seconds  # bench/ is sys.path[0]

    spark = get_spark(master=args.master, app_name="bench-scale",
                      extra_conf={"spark.ui.enabled": "false"})
    print(f"kafkastore scale benchmark: records {sizes}, partitions {parts}, "
          f"master {args.master}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'records':>11} {'parts':>5} | {'load us/rec':>11} {'CPU us/rec':>10} {'driver MB':>9} | "
          f"{'compact us/rec':>14} {'CPU us/rec':>10} {'driver MB':>9} | build s")
    work = args.work_dir or tempfile.mkdtemp(prefix="kafkastore-scale-")
    # warm-up (JVM, Python workers, imports): a small load and compaction, not reported
    warm = os.path.join(work, "warm")
    build(f"file://{warm}/log", 20_000, 2, 300_000)
    try:
        run_load(spark, root=f"file://{warm}/log", topic=TOPIC, warehouse=f"file://{warm}/wh",
                 table="t", progress=False)
    except Exception as e:  # noqa: BLE001 - reported below for each size
        print(f"(warm-up load failed: {type(e).__name__}: {e})")
    compact_topic(spark, f"file://{warm}/log", TOPIC, force=True, now_ms=BASE_TS + 10 ** 9)
    shutil.rmtree(warm, ignore_errors=True)
    cost: dict[str, dict[tuple[int, int], float]] = {"load": {}, "compaction": {},
                                                     "load CPU": {}, "compaction CPU": {}}
    try:
        for records in sizes:
            for p in parts:
                base = os.path.join(work, f"r{records}-p{p}")
                root = f"file://{base}/log"
                built = build(root, records, p, args.segment_bytes)
                row = [f"{records:>11,} {p:>5} |"]
                with DriverPeak() as peak:
                    t, cpu0 = time.perf_counter(), tree_cpu_seconds()
                    try:
                        run_load(spark, root=root, topic=TOPIC, warehouse=f"file://{base}/wh",
                                 table="t", progress=False)
                        secs = time.perf_counter() - t
                        cpu = tree_cpu_seconds() - cpu0
                        cost["load"][(records, p)] = secs / records
                        cost["load CPU"][(records, p)] = cpu / records
                        row.append(f"{secs / records * 1e6:>11.3f} {cpu / records * 1e6:>10.3f} "
                                   f"{peak.peak / 2**20:>9,.0f} |")
                    except Exception as e:  # noqa: BLE001 - the load API is being ported: report, go on
                        row.append(f"{'failed':>11} {'':>9} | ({type(e).__name__}: {e})"[:60])
                with DriverPeak() as peak:
                    t, cpu0 = time.perf_counter(), tree_cpu_seconds()
                    report = compact_topic(spark, root, TOPIC, force=True,
                                           now_ms=BASE_TS + 10 ** 9)
                    secs = time.perf_counter() - t
                    cpu = tree_cpu_seconds() - cpu0
                if not report.ok:
                    print(report.render())
                cost["compaction"][(records, p)] = secs / records
                cost["compaction CPU"][(records, p)] = cpu / records
                row.append(f"{secs / records * 1e6:>14.3f} {cpu / records * 1e6:>10.3f} "
                           f"{peak.peak / 2**20:>9,.0f} | {built:.1f}")
                print(" ".join(row), flush=True)
                shutil.rmtree(base, ignore_errors=True)
        print()
        for job, c in cost.items():
            if not c:
                continue
            for p in parts:
                pts = [c[(r, p)] for r in sizes if (r, p) in c]
                if len(pts) > 1:
                    print(f"{job:<14} {p:>3} partitions: cost per record at {sizes[-1]:,} / "
                          f"at {sizes[0]:,} records = {pts[-1] / pts[0]:.2f}")
            for r in sizes:
                pts = [c[(r, p)] for p in parts if (r, p) in c]
                if len(pts) > 1:
                    print(f"{job:<14} {r:>11,} records: cost per record at {parts[-1]} / at "
                          f"{parts[0]} partitions = {pts[-1] / pts[0]:.2f}")
            small, large = (sizes[0], parts[0]), (sizes[-1], parts[-1])
            if small in c and large in c and small != large:
                print(f"{job:<14} cost per record largest/smallest ({large[0]:,} records x "
                      f"{large[1]} partitions / {small[0]:,} x {small[1]}) = "
                      f"{c[large] / c[small]:.2f}  (bound: <= 1.25)")
            if len(c) > 1:
                hi, lo = max(c, key=c.get), min(c, key=c.get)
                print(f"{job:<14} cost per record max/min over all sizes = {c[hi] / c[lo]:.2f} "
                      f"(max at {hi[0]:,} x {hi[1]}, min at {lo[0]:,} x {lo[1]})")
    finally:
        spark.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
