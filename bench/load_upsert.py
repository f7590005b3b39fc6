"""Benchmark: upsert loads, run as ``bench/load.py --mode upsert``.

    .venv/bin/python bench/load.py --mode upsert [--records 1000000] [--keys 100000]

1. Builds (cached) two topics of ``--partitions`` partitions with the Broker, keys
   ``key-%012d`` (a key always in the same partition), 100-byte values:
   ``upsert`` = round 1 (``--records`` records over ``--keys`` keys) then round 2 (the
   change set: again ``--records`` records over the same keys); ``upsert10x`` = round 1
   of ``10 x --keys`` keys, each once, then the same change set as ``upsert`` (keys
   ``0 .. --keys``).
2. Append: the change set's ``--records`` records appended into a fresh table (timed).
3. Upsert: round 1 loaded with ``--mode upsert`` (setup, untimed: the table holds the
   keys), then the change set (timed): records/s and the ratio to the append.
4. The same change set upserted into the 10x table (setup: its round 1): records/s,
   files touched and rows rewritten. The change set's keys are one contiguous key
   range, so with files sorted by key it touches about 1/10 of the 10x table; with
   ``--spread`` its keys are every 10th key of the 10x table instead, so every file
   holds some and is rewritten (copy-on-write's worst case).
"""
from __future__ import annotations

import json
import os
import shutil
import time

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

BASE_TS = 1_700_000_000_000
_PAD = b"abcdefghijklmnopqrstuvwxyz0123456789" * 3


def _value(i: int) -> bytes:
    head = b'{"n":%d,"amount":%d.%02d,"pad":"' % (i, i % 977, i % 100)
    return head + _PAD[:100 - len(head) - 2] + b'"}'


def _build(cache: str, name: str, rounds: list[tuple[int, int]], parts: int, stride: int = 1):
    """A cached root with topic ``name``: per round (records, keys), record j of a round
    has key ``j % keys`` (times ``stride`` after the first round). Returns (root,
    {partition: end offset of round 1})."""
    tag = "-".join(f"{r}x{k}" for r, k in rounds) + f"-p{parts}-s{stride}"
    path = os.path.join(cache, f"{name}-v1-{tag}")
    done = os.path.join(path, "COMPLETE")
    root = f"file://{path}"
    if os.path.exists(done):
        with open(done) as f:
            return root, {int(p): n for p, n in json.load(f).items()}
    shutil.rmtree(path, ignore_errors=True)
    storage = Storage(root)
    create_topic(storage, name, parts, {"segment.bytes": str(256 << 20)})
    broker = Broker(storage, batch_size=1 << 20, compression="none")
    ends: dict[int, int] = {}
    i = 0
    started = time.monotonic()
    for rnd, (records, keys) in enumerate(rounds):
        for j in range(records):
            k = (j % keys) * (stride if rnd else 1)
            p = k % parts
            broker.send(name, _value(i), key=b"key-%012d" % k, timestamp=BASE_TS + i, partition=p)
            if rnd == 0:
                ends[p] = ends.get(p, 0) + 1
            i += 1
            if i % 200_000 == 0:
                broker.flush()
        broker.flush()
    with open(done, "w") as f:
        json.dump(ends, f)
    print(f"built {name}: {i:,} records in {time.monotonic() - started:.1f} s")
    return root, ends


def _timed(fn):
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started


def upsert_main(args) -> int:
    """``bench/load.py --mode upsert`` (see the module docstring)."""
    from pipelines.warehouse.catalog import Warehouse
    from pipelines.warehouse.reads import plan_scan
    from pipelines.jobs.load import run_load
    from pipelines.spec.load_spec import LoadSpec
    from pipelines.source.session import get_spark

    n, keys, parts = args.records, args.keys, args.partitions
    os.makedirs(args.cache_dir, exist_ok=True)
    root1, r1 = _build(args.cache_dir, "upsert", [(n, keys), (n, keys)], parts)
    stride = 10 if args.spread else 1
    root10, r10 = _build(args.cache_dir, "upsert10x", [(10 * keys, 10 * keys), (n, keys)], parts,
                         stride)
    work = args.work_dir or os.path.join(args.cache_dir, "work-upsert")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spark = get_spark(master=args.master, app_name="kafkastore-bench-upsert",
                      extra_conf={"spark.driver.memory": "4g", "spark.ui.enabled": "false"})
    wh = Warehouse(f"file://{work}/warehouse")
    up = dict(mode="upsert", partition_by=())

    # warm-up: workers, JVM paths, pyiceberg
    run_load(spark, root=root1, warehouse=wh, spec=LoadSpec(topic="upsert", table="warm", **up),
             until_offsets={p: min(10_000, e) for p, e in r1.items()}, progress=False)

    # append: round 1's records (the same count and shape as the change set)
    appended, append_s = _timed(lambda: run_load(
        spark, root=root1, warehouse=wh, spec=LoadSpec(topic="upsert", table="appended",
                                                       partition_by=()),
        until_offsets=r1, progress=False))
    # upsert 1x: round 1 as setup, the change set timed
    run_load(spark, root=root1, warehouse=wh, spec=LoadSpec(topic="upsert", table="state", **up),
             until_offsets=r1, progress=False)
    changed, upsert_s = _timed(lambda: run_load(
        spark, root=root1, warehouse=wh, spec=LoadSpec(topic="upsert", table="state", **up),
        progress=False))
    # upsert 10x: its round 1 as setup, the same change set timed
    run_load(spark, root=root10, warehouse=wh,
             spec=LoadSpec(topic="upsert10x", table="state10x", **up), until_offsets=r10,
             progress=False)
    changed10, upsert10_s = _timed(lambda: run_load(
        spark, root=root10, warehouse=wh,
        spec=LoadSpec(topic="upsert10x", table="state10x", **up), progress=False))
    rows1 = plan_scan(wh.table("state")).records
    rows10 = plan_scan(wh.table("state10x")).records
    spark.stop()

    def records(summary):
        return sum(b - a for a, b in summary.ranges.values())

    def rate(rows, s, summary=None):
        commit = f" (commit {summary.commit_seconds:.2f} s)" if summary is not None else ""
        return f"{s:7.2f} s  {rows / s:12,.0f} records/s{commit}"

    print()
    print(f"{n:,} records over {keys:,} keys, {parts} partitions, master {args.master}")
    print(f"append (fresh table):              {rate(records(appended), append_s, appended)}")
    print(f"upsert into {rows1:>9,}-row table:    {rate(records(changed), upsert_s, changed)}  "
          f"{changed.upsert}")
    print(f"upsert into {rows10:>9,}-row table:    {rate(records(changed10), upsert10_s, changed10)}  "
          f"{changed10.upsert}")
    print(f"ratio upsert/append: {append_s / upsert_s:.2f} (aim >= 0.5); "
          f"10x table / 1x table: {upsert_s / upsert10_s:.2f} (1.0 = cost independent of size)")
    return 0
