"""Demo: start ``kafkastore serve`` and produce / consume through it with a real Kafka client.

    python scripts/serve_demo.py [--root URL] [--records 100]

Creates topic ``demo`` (3 partitions) under the root (default: a temporary
directory), starts a broker on 127.0.0.1 (a free port), produces records with
confluent-kafka (idempotent, acks=all, zstd), consumes them back with a
confluent-kafka consumer, and shows that ``kafkastore consume`` reads the
very same log from the object store, without the broker.
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
    ap.add_argument("--records", type=int, default=100)
    args = ap.parse_args()
    root = args.root or f"file://{tempfile.mkdtemp(prefix='kafkastore-serve-demo-')}"
    kafkastore = [sys.executable, "-m", "kafkastore.cli", "--root", root]

    from confluent_kafka import Consumer, Producer, TopicPartition

    subprocess.run(kafkastore + ["topics", "create", "demo", "--partitions", "3"], check=False)
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
            p.produce("demo", key=f"user-{i % 10}", value=json.dumps({"n": i, "event": "click"}))
        if p.flush(30):
            print("produce did not complete", file=sys.stderr)
            return 1
        print(f"produced {args.records} records to demo via {bootstrap} (confluent-kafka, idempotent, zstd)")
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo", "enable.auto.commit": False})
        c.assign([TopicPartition("demo", q, 0) for q in range(3)])
        got, deadline = 0, time.time() + 30
        while got < args.records and time.time() < deadline:
            got += sum(1 for m in c.consume(500, timeout=1.0) if m.error() is None)
        c.close()
        print(f"consumed {got} records back through the broker")
    finally:
        broker.terminate()
        broker.wait(30)
    print("the same log, read from the object store by the CLI (no broker):")
    subprocess.run(kafkastore + ["consume", "demo", "--partition", "0", "--limit", "3"], check=False)
    subprocess.run(kafkastore + ["offsets", "demo"], check=False)
    return 0 if got == args.records else 1


if __name__ == "__main__":
    sys.exit(main())
