"""Benchmark: ack latency of lone one-record produces (each waits for its ack before the next).

    PYTHONPATH=<tree> .venv/bin/python bench/lone_ack.py [--records 300] [--commit-interval-ms 5]

A broker in this process (``BrokerThread``, file:// root in a temporary directory) and one
confluent-kafka producer (acks=all, idempotent, ``linger.ms=0``) that sends one 100-byte
record and flushes, ``--records`` times: every append finds its partition's queue empty,
which is where a group commit's linger is pure delay. Prints the p50 and p90 ack latency,
this process's CPU per ack (broker and client together) and the load average. Run it in two
trees alternately (bench/ab.py) and compare the trees' figures at the same load.

No assertion is made on speed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--commit-interval-ms", type=float, default=5.0)
    args = ap.parse_args()
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, os.path.dirname(HERE))
    from confluent_kafka import Producer

    from kafkastore.protocol.server import BrokerThread, ServeOptions
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    tmp = tempfile.mkdtemp(prefix="bench-lone-ack-")
    try:
        root = f"file://{tmp}/root"
        create_topic(Storage(root), "lone", 1)
        opts = ServeOptions(port=0, commit_interval_ms=args.commit_interval_ms)
        with BrokerThread(Storage(root), opts) as b:
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all",
                          "enable.idempotence": True})
            p.produce("lone", b"warm-up", partition=0)   # the producer id, the first commit
            p.flush(30)
            lat = []
            cpu = time.process_time()
            for _ in range(args.records):
                t = time.perf_counter()
                p.produce("lone", b"x" * 100, partition=0)
                if p.flush(30):
                    print("produce failed: a record was not acknowledged", file=sys.stderr)
                    return 1
                lat.append(time.perf_counter() - t)
            cpu = time.process_time() - cpu
            del p
        lat.sort()
        n = len(lat)
        print(f"lone acks: {n} records, commit_interval_ms {args.commit_interval_ms:g}: "
              f"p50 {lat[n // 2] * 1e3:.1f} ms, p90 {lat[n * 9 // 10] * 1e3:.1f} ms, "
              f"CPU per ack {cpu / n * 1e3:.2f} ms (broker and client), "
              f"load {os.getloadavg()[0]:.1f}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
