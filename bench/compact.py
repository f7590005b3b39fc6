"""Benchmark: compacting one partition with Spark, and what it costs the driver.

    .venv/bin/python bench/compact.py [--records N] [--keys K] [--master local[2]]

1. Builds (once; reused from ``--cache-dir`` afterwards) a one-partition
   compacted topic of N records (default 10,000,000) over K distinct keys
   (default 1,000,000; 20% of the records are tombstones), zstd batches of 500
   records, segments of ``--segment-records`` records written directly (not
   through the Broker, which would take longer than the benchmark), and a
   second topic of N records with N distinct keys (every record is the only
   one of its key). Build times are printed on their own.
2. Warms the session up: a small load, then (unless ``--cold``) a compaction of a small
   topic of 20,000 records, so that neither timed job pays the first run of its code
   path (the JVM's and the Python workers' start, the workers' imports, the JIT).
3. Baseline in the same Spark session: loads the first topic into a fresh
   warehouse table with :func:`pipelines.load.run_load` (the load job: read,
   decode, write Parquet) if :mod:`pipelines.load` exists, else a plain read of
   the topic through the same read path the compaction scans with; prints its
   rate.
4. Compacts a fresh copy of each topic with
   :func:`pipelines.compaction.compact_partition` (forced, so the run does the
   same work whatever the dirty ratio) and prints records/s (records read from
   the cleaned section per second of the whole job, commit included), records
   and bytes in and out, and the peak resident memory (RSS, sampled every
   50 ms with psutil) of the Python driver, of the JVM (in local mode the
   JVM hosts the Spark driver *and* the executors: shuffle and sort buffers are
   there) and of the Python workers (largest single worker and largest sum).
   The two topics differ only in how many distinct keys they hold, so equal
   driver figures show that the driver's memory does not grow with the key count.
5. Prints the ratio compaction / baseline by records per second of wall time and by
   records per CPU second (this process, the JVM and Spark's Python workers:
   :mod:`process_cpu`; other jobs on a shared machine move wall times, not these),
   with the 1-minute load average of each run.

``--one-process REPEAT`` skips Spark: it times the compaction task's steps (scan, survivors,
the whole task) in one process, by CPU seconds, ``REPEAT`` times per topic.

Other processes on the machine make the numbers noisy: rerun and compare.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore import layout  # noqa: E402
from kafkastore.format.crc import crc32c  # noqa: E402
from kafkastore.manifest import AppendSegments, ManifestStore, SegmentEntry  # noqa: E402
from kafkastore.format.record_batch import Record, encode_batch  # noqa: E402
from kafkastore.format.segment_build import SegmentBuilder  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402
from process_cpu import tree_cpu_seconds  # noqa: E402

TOPIC = "compact-bench"
BASE_TS = 1_700_000_000_000
BATCH = 500
TOMBSTONES = 0.2


def _build_segment(args) -> tuple[int, bytes, bytes, bytes, dict]:
    """Segment ``index``: records [base, base + n), keys drawn from K (seeded, reproducible)."""
    root, index, base, n, keys, distinct = args
    rng = random.Random(index)
    filler = bytes(rng.randrange(97, 123) for _ in range(64))
    builder = SegmentBuilder(base)
    for start in range(base, base + n, BATCH):
        records = []
        for o in range(start, min(start + BATCH, base + n)):
            k = o if distinct else rng.randrange(keys)
            value = None if rng.random() < TOMBSTONES else b"v%d-" % o + filler[: 20 + o % 40]
            records.append(Record(o, BASE_TS + o // 1000, b"key-%012d" % k, value))
        builder.append(encode_batch(records, compression="zstd", producer_id=1, producer_epoch=0,
                                    base_sequence=start % (1 << 31)))
    built = builder.build()
    st = built.stats
    meta = dict(next_offset=st.next_offset, record_count=st.record_count,
                min_timestamp=st.min_timestamp, max_timestamp=st.max_timestamp,
                max_timestamp_offset=st.offset_of_max_timestamp)
    return index, built.log, built.index, built.timeindex, meta


def build_topic(root: str, records: int, keys: int, distinct: bool, segment_records: int,
                segment_bytes: int, workers: int) -> float:
    """Write the topic under ``root`` (file URL); returns the seconds it took."""
    t0 = time.monotonic()
    storage = Storage(root)
    create_topic(storage, TOPIC, 1, {"cleanup.policy": "compact", "compression.type": "zstd",
                                     "segment.bytes": segment_bytes,
                                     # the rewrite of a big partition can take longer than the
                                     # default 60 s grace before GC may take unlisted files
                                     "file.delete.delay.ms": 3_600_000})
    jobs = [(root, i, b, min(segment_records, records - b), keys, distinct)
            for i, b in enumerate(range(0, records, segment_records))]
    store = ManifestStore(storage, TOPIC, 0)
    with ProcessPoolExecutor(workers) as pool:
        for index, log, index_bytes, tindex, meta in pool.map(_build_segment, jobs):
            base = jobs[index][2]
            sid = layout.new_segment_id()
            for ext, data in ((".index", index_bytes), (".timeindex", tindex), (".log", log)):
                storage.put(layout.segment_path(TOPIC, 0, base, sid, ext), data)
            entry = SegmentEntry(base_offset=base, segment_id=sid, size=len(log), writer_id=0,
                                 leader_epoch=0, checksum=crc32c(log), index_size=len(index_bytes),
                                 timeindex_size=len(tindex), **meta)
            store.commit(lambda m, e=entry: ([AppendSegments((e,))], []), operation="append")
    return time.monotonic() - t0


class PeakRss:
    """Samples RSS of this process, the JVM (a child) and the Python workers (the JVM's children)."""

    def __init__(self, interval: float = 0.05):
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.interval = interval
        self.driver = self.jvm = self.worker_max = self.workers_sum = 0
        self.cpu = 0.0   # CPU seconds of the run it wraps (set by compact_once)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        ps = self.psutil
        while not self._stop.is_set():
            try:
                self.driver = max(self.driver, self.me.memory_info().rss)
                for child in self.me.children():
                    if "java" not in child.name():
                        continue
                    self.jvm = max(self.jvm, child.memory_info().rss)
                    workers = [p for p in child.children(recursive=True) if "python" in p.name()]
                    rss = [p.memory_info().rss for p in workers]
                    if rss:
                        self.worker_max = max(self.worker_max, max(rss))
                        self.workers_sum = max(self.workers_sum, sum(rss))
            except (ps.NoSuchProcess, ps.AccessDenied):
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def render(self) -> str:
        mb = 1 << 20
        return (f"peak RSS: python driver {self.driver / mb:,.0f} MB, JVM {self.jvm / mb:,.0f} MB, "
                f"python workers max {self.worker_max / mb:,.0f} MB / sum {self.workers_sum / mb:,.0f} MB")


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f} records/s ({n:,} records in {seconds:.1f} s)"


def baseline(spark, root: str, work: str, records: int) -> tuple[str, float, int]:
    """(what, records/s, records) of the load job, or of a plain read when pipelines.load is
    missing."""
    try:
        from pipelines.jobs.load import run_load
    except ImportError:
        run_load = None
    if run_load is not None:
        t0 = time.monotonic()
        summary = run_load(spark, root=root, topic=TOPIC, warehouse=f"file://{work}/warehouse",
                           table="bench", progress=False)
        seconds = time.monotonic() - t0
        return "load (pipelines.load.run_load, Parquet)", summary.rows / seconds, summary.rows
    from kafkastore.maintenance.compaction import group_specs, load_plan, scan_task, scan_tasks

    storage = Storage(root)
    m, plan = load_plan(storage, TOPIC, 0, BASE_TS, force=True)
    groups = group_specs([plan])
    tasks = scan_tasks(storage, [plan], groups, [m])

    def scan(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                yield scan_task(storage, tasks[i])

    t0 = time.monotonic()
    n = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(
        scan, "plan int, grp int, kind tinyint, key binary, offset long, dirty boolean, pid long, "
              "last_data long, last_marker long").count()
    return "plain read (the compaction's scan, counted)", n / (time.monotonic() - t0), n


def compact_once(spark, cache_root: str, work_root: str) -> tuple[object, float, PeakRss]:
    from pipelines.jobs.log_compaction import compact_partition

    src, dst = cache_root[len("file://"):], work_root[len("file://"):]
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    storage = Storage(work_root)
    with PeakRss() as peak:
        cpu0 = tree_cpu_seconds()
        t0 = time.monotonic()
        result = compact_partition(spark, storage, TOPIC, 0, BASE_TS + 10 ** 7, force=True)
        seconds = time.monotonic() - t0
        peak.cpu = tree_cpu_seconds() - cpu0
    return result, seconds, peak


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_process(cache_root: str, work: str, name: str, keys: int, repeat: int) -> None:
    """What one compaction task does (:func:`pipelines.jobs.log_compaction.compact_scanned`),
    in this process, ``repeat`` times on fresh copies of the topic: the scan, the survivors
    (the key map) and the whole task (scan, survivors, rewrite and upload; the rewrite is the
    difference), each in CPU seconds of this process, so other jobs on the machine move them
    little. The first repetition pays the first touches of the process's memory."""
    import numpy as np  # noqa: F401 - imported before timing
    import pyarrow as pa

    from kafkastore.maintenance.compaction import (SCAN_SCHEMA, group_specs, load_plan,
                                                   scan_task, scan_tasks)
    from pipelines.jobs.log_compaction import compact_scanned, survivors

    src = cache_root[len("file://"):]
    for rep in range(repeat):
        # A fresh path per copy: the manifest's head cache is per process and path.
        copy = os.path.join(work, f"{name}-{rep}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(src, copy)
        storage = Storage(f"file://{copy}")
        m, plan = load_plan(storage, TOPIC, 0, BASE_TS + 10 ** 7, force=True)
        groups = group_specs([plan])
        tasks = scan_tasks(storage, [plan], groups, [m])
        c0 = _cpu()
        rows = pa.Table.from_batches([scan_task(storage, t) for t in tasks], schema=SCAN_SCHEMA)
        c1 = _cpu()
        survivors(rows)
        c2 = _cpu()
        del rows
        c3 = _cpu()
        results = compact_scanned(storage, plan.context, groups, tasks)
        c4 = _cpu()
        scan, surv, task = c1 - c0, c2 - c1, c4 - c3
        print(f"one process, {keys:,} distinct keys, repetition {rep + 1}: scan {scan:.3f}, "
              f"survivors {surv:.3f}, whole task {task:.3f} (rewrite and upload "
              f"{task - scan - surv:.3f}) CPU s; records out "
              f"{sum(r.records_out for r in results):,}; load average {os.getloadavg()[0]:.1f}")
    shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--segment-records", type=int, default=250_000)
    ap.add_argument("--segment-bytes", type=int, default=64 << 20,
                    help="topic segment.bytes: the size of the cleaned groups (one task each)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--cache-dir", default="/tmp/kafkastore-bench-compact")
    ap.add_argument("--skip-distinct", action="store_true", help="skip the all-distinct-keys run")
    ap.add_argument("--cold", action="store_true",
                    help="no warm-up compaction: the first timed compaction pays its code path's start")
    ap.add_argument("--one-process", type=int, metavar="REPEAT", default=0,
                    help="no Spark: time the compaction task's steps in this process REPEAT times "
                         "per topic (CPU seconds) and exit")
    args = ap.parse_args(argv)

    os.makedirs(args.cache_dir, exist_ok=True)
    runs = [("keys", args.keys, False)]
    if not args.skip_distinct:
        runs.append(("distinct", args.records, True))
    roots = {}
    for name, keys, distinct in runs:
        tag = f"{name}-{args.records}-{keys}-{args.segment_records}-{args.segment_bytes}"
        path = os.path.join(args.cache_dir, f"cache-{tag}")
        root = f"file://{path}"
        if not os.path.exists(os.path.join(path, "READY")):
            shutil.rmtree(path, ignore_errors=True)
            secs = build_topic(root, args.records, keys, distinct, args.segment_records,
                               args.segment_bytes, workers=os.cpu_count() or 2)
            open(os.path.join(path, "READY"), "w").close()
            print(f"built {name}: {args.records:,} records, {keys:,} keys in {secs:.1f} s")
        roots[name] = root

    if args.one_process:
        for name, keys, _ in runs:
            one_process(roots[name], os.path.join(args.cache_dir, "work-one"), name, keys,
                        args.one_process)
        return 0
    from pipelines.source.session import get_spark

    spark = get_spark(master=args.master, app_name="bench-compact",
                      extra_conf={"spark.ui.enabled": "false"})
    print(f"spark {spark.version}, master {args.master}, {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    work = os.path.join(args.cache_dir, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The first job of a session pays the JVM's and the Python workers' start: a small
    # load before the timed one, so neither the baseline nor the compaction pays it.
    from pipelines.jobs.load import run_load

    run_load(spark, root=roots["keys"], topic=TOPIC, warehouse=f"file://{work}/warm",
             table="warm", progress=False, until_offsets={0: min(args.records, 10_000)})
    if not args.cold:   # the same for the compaction's code path, on a small topic of its own
        from pipelines.jobs.log_compaction import compact_partition

        warm = f"file://{work}/warm-compact"
        build_topic(warm, 20_000, 1_000, False, 5_000, args.segment_bytes, workers=1)
        compact_partition(spark, Storage(warm), TOPIC, 0, BASE_TS + 10 ** 7, force=True)
    base_avg = os.getloadavg()[0]
    cpu0 = tree_cpu_seconds()
    what, base_rate, base_rows = baseline(spark, roots["keys"], work, args.records)
    base_cpu = tree_cpu_seconds() - cpu0
    print(f"baseline {what}: {base_rate:,.0f} records/s, {base_rows / base_cpu:,.0f} records "
          f"per CPU s ({base_cpu:.2f} CPU s); load average {base_avg:.1f}")
    for name, keys, _ in runs:
        run_avg = os.getloadavg()[0]
        result, seconds, peak = compact_once(spark, roots[name], f"file://{work}/{name}")
        rate = result.records_in / seconds
        print(f"compaction, {keys:,} distinct keys: {_rate(result.records_in, seconds)}; "
              f"{result.status} ({result.reason}); records {result.records_in:,} -> "
              f"{result.records_out:,}, bytes {result.bytes_in:,} -> {result.bytes_out:,}, "
              f"segments {result.segments_in} -> {result.segments_out}")
        print(f"  {peak.render()}")
        print(f"  ratio compaction / baseline: {rate / base_rate:.2f}; by CPU: "
              f"{result.records_in / peak.cpu / (base_rows / base_cpu):.2f} "
              f"({peak.cpu:.2f} CPU s); load average {run_avg:.1f}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
