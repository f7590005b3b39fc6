"""Benchmark: how closely a broker holds real clients to their byte-rate quotas.

    .venv/bin/python bench/quotas.py [--quota 500000] [--seconds 10] [--root URL]

1. Starts a broker in this process (``BrokerThread``) over a fresh root (default: a
   temporary ``file://`` directory) with Kafka's quota sensor settings (11 windows of
   1 s) unless ``--window-s`` / ``--samples`` say otherwise.
2. Sets ``producer_byte_rate`` and ``consumer_byte_rate`` = ``--quota`` for the client id
   ``bench-quota`` (``kafkastore quotas set --client-id bench-quota ...`` does the same).
3. Produce: a confluent-kafka producer with that client id sends 10 KB records as fast
   as it is allowed for ``--seconds``; the rate counts acknowledged bytes only.
4. Fetch: a consumer with that client id reads the topic back for ``--seconds``.
5. Prints each measured rate and its ratio to the quota (1.0 = exactly the quota), over
   the whole phase and over its second half. The whole-phase ratio runs above 1 by about
   ``(samples - 1) * window_s / seconds``: Kafka's sensor measures over at least
   ``samples - 1`` windows, so a new client may burst that many windows' worth at first.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkastore.cluster.documents import ClusterDocument  # noqa: E402
from kafkastore.protocol import quotas as Q  # noqa: E402
from kafkastore.protocol.server import BrokerThread, ServeOptions  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402

CLIENT = "bench-quota"


def produce(bootstrap: str, topic: str, seconds: float) -> tuple[float, float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT, "linger.ms": 5,
                  "compression.type": "none", "queue.buffering.max.kbytes": 1024,
                  "batch.size": 100_000})
    payload = b"x" * 10_000
    delivered = [0]

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += len(msg.value())

    started = time.monotonic()
    half = None
    while time.monotonic() - started < seconds:
        try:
            p.produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
        if half is None and time.monotonic() - started >= seconds / 2:
            half = (time.monotonic(), delivered[0])
    now = time.monotonic()
    rates = delivered[0] / (now - started), (delivered[0] - half[1]) / (now - half[0])
    p.purge()
    p.flush(30)
    return rates


def fetch(bootstrap: str, topic: str, seconds: float) -> tuple[float, float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "client.id": CLIENT, "group.id": "bench-quota",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": 262_144})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.monotonic()
    half = None
    while time.monotonic() - started < seconds:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += len(m.value())
        if half is None and time.monotonic() - started >= seconds / 2:
            half = (time.monotonic(), got)
    now = time.monotonic()
    c.close()
    return got / (now - started), (got - half[1]) / (now - half[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quota", type=int, default=500_000, help="bytes per second (default 500000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase (default 10)")
    ap.add_argument("--window-s", type=float, default=1.0)
    ap.add_argument("--samples", type=int, default=11)
    ap.add_argument("--root", help="root URL (default: a temporary directory)")
    args = ap.parse_args()
    tmp = None
    if args.root is None:
        tmp = tempfile.mkdtemp(prefix="kafkastore-bench-quotas-")
        args.root = f"file://{tmp}"
    try:
        storage = Storage(args.root)
        create_topic(storage, "quota-bench", 1)
        ClusterDocument(storage, "quotas").update(lambda doc: Q.alter(
            doc, {Q.CLIENT_ID: CLIENT}, {Q.PRODUCER_BYTE_RATE: args.quota,
                                         Q.CONSUMER_BYTE_RATE: args.quota}))
        opts = ServeOptions(port=0, quota_window_s=args.window_s, quota_samples=args.samples)
        with BrokerThread(storage, opts) as broker:
            for name, phase in (("produce", produce), ("fetch", fetch)):
                whole, second_half = phase(broker.bootstrap, "quota-bench", args.seconds)
                print(f"{name + ':':8} {whole / 1e3:9.1f} KB/s  quota {args.quota / 1e3:.1f} KB/s  "
                      f"measured/quota {whole / args.quota:.2f} (whole phase), "
                      f"{second_half / args.quota:.2f} (second half)", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
