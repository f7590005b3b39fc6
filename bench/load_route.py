"""A route-by-field load of 3 tables: one pass against one read per table plus one for the counts.

``kafkastore load --route-field region`` loads a topic of JSON records into one table per
``region`` value. It reads the topic's range once: each task splits its decoded batch by
route value and writes every table's files (``one pass``). The way it worked before, one
read for the value counts and then one load per table with a row filter (``per table``),
is rebuilt here from the same code base (the engine still runs a one-table load with a
route filter) and timed in the same run, on the same SparkSession, alternating the order.

Prints, per run, wall and CPU seconds (this process, the JVM and Spark's Python workers:
``process_cpu.tree_cpu_seconds``) and the load average, then the medians' ratios
one pass / per table. Wall ratios on a shared machine mostly measure the other jobs.

    ./run bench load_route --records 200000 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402
from kafkastore.write.log_writer import LogWriter  # noqa: E402

REGIONS = ("eu", "us", "apac")
ROUTE = {"topic": "events", "route_field": "region", "table_template": "ev_{field}",
         "value_format": "json", "value_schema": "id long, region string, amount double, note string"}


def build_topic(root: str, records: int, partitions: int) -> None:
    """``records`` JSON records over ``partitions``, their region cycling over 3 values."""
    storage = Storage(root)
    create_topic(storage, "events", partitions=partitions,
                 configs={"segment.bytes": str(256 << 20)})
    writer = LogWriter(storage, batch_size=1 << 20, compression="none")
    for i in range(records):
        value = json.dumps({"id": i, "region": REGIONS[i % 3], "amount": i * 0.25,
                            "note": "x" * 40}).encode()
        writer.send("events", value, key=str(i).encode(), partition=i % partitions)
    writer.flush()


def one_pass(spark, root: str, warehouse: str) -> int:
    """The routed load as ``kafkastore load --route-field`` runs it now."""
    from pipelines.jobs.load_many import ManyLoadRequest, load_many

    summary = load_many(spark, ManyLoadRequest.build(root=root, warehouse=warehouse,
                                                     spec=ROUTE, progress=False))
    assert not summary.failed, summary.failed
    return sum(s.rows for s in summary.tables)


def per_table(spark, root: str, warehouse: str) -> int:
    """The routed load as it ran before: a read for the value counts, then one load per
    route table, each reading the whole range and keeping its value's rows."""
    from pyspark.sql import functions as F

    from pipelines.jobs.load import LoadRequest, load
    from pipelines.jobs.write_engine import decoded_frame, kafka_frame
    from pipelines.source.planning import plan_load, plan_tasks
    from pipelines.spec.offset_ranges import SpecificOffsets
    from pipelines.spec.route_filter import RouteFilter
    from pipelines.spec.topic_routing import ManyLoadSpec
    from pipelines.warehouse.catalog import Warehouse

    many = ManyLoadSpec.from_entry(ROUTE)
    storage = Storage(root)
    plans = plan_load(storage, "events", {})
    ranges = [pl.range for pl in plans if not pl.empty]
    until = SpecificOffsets({"events": {r.partition: r.until_offset for r in ranges}})
    probe = many.spec_for("events", "probe")
    splits = plan_tasks(storage, ranges, spark.sparkContext.defaultParallelism, None)
    frame, _split = decoded_frame(kafka_frame(spark, root, splits), probe.decode_options())
    value = F.when(F.col("__error").isNull(), F.col("region").cast("string"))
    counts = {r["v"]: r["count"] for r in
              frame.select(value.alias("v")).groupBy("v").count().collect()}
    wh = Warehouse(warehouse)
    rows = 0
    for v in sorted(v for v in counts if v is not None):
        spec = replace(many.spec_for("events", f"ev_{v}"), route=RouteFilter("region", (v,)))
        rows += load(spark, LoadRequest(root=root, warehouse=wh, spec=spec, until=until,
                                        progress=False)).rows
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs, order alternating")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args(argv)

    from process_cpu import tree_cpu_seconds

    from pipelines.source.session import get_spark

    work = args.work_dir or tempfile.mkdtemp(prefix="kafkastore-bench-route-")
    root = os.path.join(work, "log")
    started = time.monotonic()
    build_topic(root, args.records, args.partitions)
    print(f"topic: {args.records:,} JSON records in {args.partitions} partitions, "
          f"{len(REGIONS)} route values ({time.monotonic() - started:.1f}s)", flush=True)
    spark = get_spark(master=args.master, app_name="kafkastore-bench-load-route",
                      extra_conf={"spark.ui.enabled": "false"})
    ways = {"one pass": one_pass, "per table": per_table}
    # Warm-up: Python workers, the JSON decoder and pyiceberg start before anything is timed.
    for name, fn in ways.items():
        fn(spark, root, f"file://{work}/warm-{name.replace(' ', '_')}")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    order = list(ways)
    for i in range(args.rounds):
        for name in (order if i % 2 == 0 else order[::-1]):
            warehouse = f"file://{work}/wh-{i}-{name.replace(' ', '_')}"
            load_avg = os.getloadavg()[0]
            cpu0, t0 = tree_cpu_seconds(), time.monotonic()
            rows = ways[name](spark, root, warehouse)
            wall, cpu = time.monotonic() - t0, tree_cpu_seconds() - cpu0
            assert rows == args.records, (name, rows)
            results[name].append((wall, cpu))
            print(f"round {i} {name:>9}: {rows:,} rows in 3 tables, wall {wall:6.1f}s, "
                  f"CPU {cpu:6.1f}s (load avg {load_avg:.1f})", flush=True)
    spark.stop()
    med = {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
           for name, r in results.items()}
    print(f"one pass / per table, medians of {args.rounds}: wall "
          f"{med['one pass'][0] / med['per table'][0]:.2f}, CPU "
          f"{med['one pass'][1] / med['per table'][1]:.2f} "
          f"(load avg now {os.getloadavg()[0]:.1f})")
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
