"""Benchmark: committing consumer-group offsets to ``__consumer_offsets``, and reading them back.

    .venv/bin/python bench/groups.py [--commits N] [--partitions P] [--root URL]

1. Baseline in the same process: N commits of P records each written with a
   plain :class:`kafkastore.write.log_writer.LogWriter` (``send`` P records, ``flush``: one
   manifest commit) to an ordinary compacted topic: the floor that any
   offset commit through the log pays.
2. N OffsetCommits of P partitions through :class:`OffsetsStore` (the path
   the broker's OffsetCommit handler takes: encode Kafka's records, one
   manifest commit, then catch up the store's cache); prints commits/s and
   the ratio to the baseline.
3. Reading a group back: a fresh store (a restarted broker: reads the whole
   partition) vs. the warm store (reads only what was appended since), as
   milliseconds per ``group()`` call.

The default root is a fresh ``file://`` directory; numbers on a shared
machine are noisy: rerun and compare ratios, not absolute values.
"""
from __future__ import annotations

import argparse
import tempfile
import time

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.groups.offsets import OFFSETS_TOPIC_CONFIG, OffsetAndMetadata, OffsetsStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    root = args.root or "file://" + tempfile.mkdtemp(prefix="bench-groups-")
    storage = Storage(root)

    create_topic(storage, "baseline", 1, OFFSETS_TOPIC_CONFIG)
    broker = Broker(storage)
    t0 = time.perf_counter()
    for i in range(args.commits):
        for p in range(args.partitions):
            broker.send("baseline", b"%032d" % i, key=b"g/t/%d" % p, partition=0)
        broker.flush()
    base = time.perf_counter() - t0
    print(f"baseline Broker send+flush: {args.commits / base:8.1f} commits/s "
          f"({args.partitions} records each)")

    store = OffsetsStore(storage, partitions=1)
    t0 = time.perf_counter()
    for i in range(args.commits):
        store.commit_offsets("g", {("t", p): OffsetAndMetadata(i, -1, "", i) for p in range(args.partitions)})
    took = time.perf_counter() - t0
    print(f"OffsetsStore.commit_offsets: {args.commits / took:8.1f} commits/s "
          f"(ratio to baseline {base / took:.2f})")

    t0 = time.perf_counter()
    fresh = OffsetsStore(Storage(root)).group("g")
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(20):
        store.group("g")
    warm = (time.perf_counter() - t0) / 20
    assert fresh.offsets == store.group("g").offsets
    print(f"group() read-back: fresh store {cold * 1000:.1f} ms ({args.commits} commits to replay), "
          f"warm store {warm * 1000:.2f} ms (ratio {cold / warm:.1f}x)")


if __name__ == "__main__":
    main()
