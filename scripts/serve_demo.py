"""Demo: start ``kafkastore serve`` and produce / consume through it with a real Kafka client.

    python scripts/serve_demo.py [--root URL] [--topic clicks] [--records 100]

Creates the topic (3 partitions) under the root (default: a temporary
directory), starts a broker on 127.0.0.1 (a free port), produces records with
confluent-kafka (idempotent, acks=all, zstd), consumes them back with a
confluent-kafka consumer of group ``demo`` that commits its offsets, and shows
that ``kafkastore consume`` and ``kafkastore groups describe`` read the very
same log and offsets from the object store, without the broker.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", help="root URL (default: a fresh temporary directory)")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--records", type=int, default=100)
    args = ap.parse_args()
    root = args.root or f"file://{tempfile.mkdtemp(prefix='kafkastore-serve-demo-')}"
    kafkastore = [sys.executable, "-m", "kafkastore.cli", "--root", root]

    from confluent_kafka import Consumer, Producer, TopicPartition

    subprocess.run(kafkastore + ["topics", "create", args.topic, "--partitions", "3"], check=False)
    broker = subprocess.Popen(kafkastore + ["serve", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = broker.stdout.readline().strip()
        print(line)
        if "serving" not in line:
            return 1
        bootstrap = line.rsplit("advertised ", 1)[1].rstrip(")")
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "compression.codec": "zstd", "partitioner": "murmur2_random"})
        for i in range(args.records):
            p.produce(args.topic, key=f"user-{i % 10}", value=json.dumps({"n": i, "event": "click"}))
        if p.flush(30):
            print("produce did not complete", file=sys.stderr)
            return 1
        del p  # close the producer now, not when the broker is gone
        print(f"produced {args.records} records to {args.topic} via {bootstrap} (confluent-kafka, idempotent, zstd)")
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo", "enable.auto.commit": False})
        c.assign([TopicPartition(args.topic, q, 0) for q in range(3)])
        got, deadline = 0, time.time() + 30
        while got < args.records and time.time() < deadline:
            got += sum(1 for m in c.consume(500, timeout=1.0) if m.error() is None)
        c.commit(asynchronous=False)   # group "demo" now stands at the end of the topic
        c.close()
        print(f"consumed {got} records back through the broker; group 'demo' committed its offsets")
    finally:
        broker.terminate()
        broker.wait(30)
    print("the same log, read from the object store by the CLI (no broker):")
    subprocess.run(kafkastore + ["consume", args.topic, "--partition", "0", "--limit", "3"], check=False)
    subprocess.run(kafkastore + ["groups", "describe", "demo"], check=False)
    return 0 if got == args.records else 1


if __name__ == "__main__":
    sys.exit(main())
