"""``bench/load.py --value-format avro``: a registry load decoding Avro into columns vs the
raw load of the same records, same Spark session.

    .venv/bin/python bench/load.py --value-format avro [--records N] [--partitions P]

1. Builds (once; cached under ``--cache-dir``) a root with the built-in schema
   registry's ``_schemas`` topic and a topic of N Avro records (long, string, double,
   a nested record with an optional field, a 40-byte string: about 80 bytes a body),
   framed by the schema id the registry gave (magic 0 + id).
2. Serves the registry on loopback (``SchemaRegistryThread``).
3. Warms up both paths on a slice, then loads the whole topic raw (bytes kept) and
   decoded (``--value-format avro --schema-registry``) into two fresh tables.
4. Prints both rates and the ratio raw seconds / decoded seconds (aim >= 0.5), and the
   same ratio by CPU seconds (this process, the JVM and Spark's Python workers:
   :mod:`process_cpu`), which other jobs on a shared machine move far less than wall time.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import time

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

SCHEMA = {"type": "record", "name": "Payment", "namespace": "bench", "fields": [
    {"name": "n", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "card", "type": {"type": "record", "name": "Card", "fields": [
        {"name": "brand", "type": "string"}, {"name": "last4", "type": ["null", "int"]}]}},
    {"name": "pad", "type": "string"}]}
PAD = "abcdefghijklmnopqrstuvwxyz0123456789abcd"


def _register(url: str) -> int:
    import urllib.request

    body = json.dumps({"schema": json.dumps(SCHEMA)}).encode()
    req = urllib.request.Request(f"{url}/subjects/bench_avro-value/versions", data=body,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(json.loads(resp.read())["id"])


def build(cache: str, counts: dict[int, int]) -> tuple[str, float | None]:
    """(root URL, build seconds or None when reused from the cache)."""
    import fastavro

    from kafkastore.schema_registry.http import SchemaRegistryThread

    tag = "-".join(str(counts[p]) for p in sorted(counts))
    path = os.path.join(cache, f"avro-v1-{tag}")
    root = f"file://{path}"
    if os.path.exists(os.path.join(path, "COMPLETE")):
        return root, None
    shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    storage = Storage(root)
    with SchemaRegistryThread(storage, host="127.0.0.1", port=0) as sr:
        sid = _register(sr.url)
    parsed = fastavro.parse_schema(SCHEMA)
    header = b"\x00" + sid.to_bytes(4, "big")
    create_topic(storage, "bench_avro", len(counts),
                 {"segment.bytes": str(256 << 20), "compression.type": "producer"})
    broker = Broker(storage, batch_size=1 << 20, compression="none")
    i = 0
    for p, n in counts.items():
        for j in range(n):
            buf = io.BytesIO()
            buf.write(header)
            fastavro.schemaless_writer(buf, parsed, {
                "n": i, "user": f"u{i % 99991}", "amount": (i % 977) + (i % 100) / 100,
                "at": 1_700_000_000_000 + i,
                "card": {"brand": "visa" if i % 3 else "amex", "last4": None if i % 7 else i % 10000},
                "pad": PAD})
            broker.send("bench_avro", buf.getvalue(), key=b"key-%012d" % i,
                        timestamp=1_700_000_000_000 + i, partition=p)
            i += 1
            if (j + 1) % 500_000 == 0:
                broker.flush()
        broker.flush()
    with open(os.path.join(path, "COMPLETE"), "w") as f:
        f.write(json.dumps(counts))
    return root, time.monotonic() - started


def avro_main(args) -> int:
    from kafkastore.schema_registry.http import SchemaRegistryThread
    from pipelines.warehouse.catalog import Warehouse
    from pipelines.jobs.load import run_load
    from pipelines.spec.load_spec import LoadSpec
    from pipelines.source.session import get_spark
    from process_cpu import tree_cpu_seconds  # bench/ is sys.path[0]

    os.makedirs(args.cache_dir, exist_ok=True)
    n, parts = args.records, args.partitions
    per = {p: n // parts + (1 if p < n % parts else 0) for p in range(parts)}
    root, built = build(args.cache_dir, per)
    print(f"topic: {n:,} Avro records in {parts} partitions, {root}")
    print("build: " + (f"{built:.1f} s" if built else "reused from the cache"))
    work = args.work_dir or os.path.join(args.cache_dir, "work-avro")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spark = get_spark(master=args.master, app_name="kafkastore-bench-load-avro",
                      extra_conf={"spark.driver.memory": "4g", "spark.ui.enabled": "false"})
    with SchemaRegistryThread(Storage(root), host="127.0.0.1", port=0) as sr:
        raw = LoadSpec(topic="bench_avro", table="raw")
        avro = LoadSpec(topic="bench_avro", table="avro", value_format="avro",
                        decode={"schema_registry": sr.url})
        warm = Warehouse(f"file://{work}/warm")
        small = {p: min(per[p], 10_000) for p in per}
        for spec in (raw, avro):
            run_load(spark, root=root, warehouse=warm, spec=spec, progress=False,
                     until_offsets=small)
        wh = Warehouse(f"file://{work}/warehouse")
        times = {}
        cpus = {}
        for spec in (raw, avro):
            started, cpu0 = time.monotonic(), tree_cpu_seconds()
            s = run_load(spark, root=root, warehouse=wh, spec=spec, compression=args.compression,
                         progress=False)
            times[spec.table] = (time.monotonic() - started, s)
            cpus[spec.table] = tree_cpu_seconds() - cpu0
    spark.stop()
    for name, (secs, s) in times.items():
        print(f"{name:5s} load: {secs:7.2f} s  {s.rows / secs:12,.0f} records/s  "
              f"({s.rows:,} rows, {s.dead_letters} dead letters, {s.files} files)")
    cols = [f.name for f in wh.table("avro").schema().fields]
    print(f"decoded columns: {cols}")
    ratio = times["raw"][0] / times["avro"][0]
    print(f"ratio avro/raw: {ratio:.2f} (raw s / decoded s; aim >= 0.5)")
    print(f"ratio avro/raw by CPU: {cpus['raw'] / cpus['avro']:.2f} (raw {cpus['raw']:.2f} CPU s / "
          f"decoded {cpus['avro']:.2f} CPU s, JVM and workers included); load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    return 0
