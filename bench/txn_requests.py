"""Store requests and process CPU per transaction through an in-process broker on file://:
``./run bench txn_requests [--txns 20] [--records-per-txn 1000] [--partitions 4]``.

One ``BrokerThread`` over a local root wrapped in bench/counting_fs.py (every store request
counted per thread); a confluent-kafka transactional producer runs 3 warm-up transactions,
then ``--txns`` transactions of ``--records-per-txn`` records (16 B key, 100 B value) spread
over ``--partitions`` partitions. Prints the store requests per transaction by kind, made by
every thread except the background housekeeping's (merging and gc), and the process's CPU
(broker and client together) per transaction. Counts, not times: compare trees with
bench/ab.py. (Through the counting filesystem a segment's files go up as separate puts, as
on an object store, so each file a commit writes is one ``write``.)
"""
import argparse
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from confluent_kafka import Producer  # noqa: E402

from kafkastore.protocol.server import BrokerThread, ServeOptions  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402
from tests.helpers.counting import counting_fs  # noqa: E402


def _counts(fs) -> dict:
    """Requests by kind of every thread but the housekeeping's."""
    out: dict = {}
    for t in threading.enumerate():
        if t.name.startswith("kafkastore-housekeeping"):
            continue
        for k, v in fs.snapshot(thread=t.ident).requests.items():
            out[k] = out.get(k, 0) + v
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=20)
    ap.add_argument("--records-per-txn", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    inner = Storage(f"file://{tempfile.mkdtemp(prefix='bench-txn-requests-')}/root")
    create_topic(inner, "bench", args.partitions)
    fs = counting_fs(inner.fs)
    storage = Storage(inner.url, fs=fs)
    with BrokerThread(storage, ServeOptions(port=0, commit_interval_ms=5, heartbeat_ms=500)) as b:
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "bench-txn-requests",
                      "linger.ms": 5, "batch.size": 1_000_000, "acks": "all"})
        p.init_transactions(30)

        def txn() -> None:
            p.begin_transaction()
            for i in range(args.records_per_txn):
                p.produce("bench", key=i.to_bytes(16, "big"), value=b"v" * 100,
                          partition=i % args.partitions)
            p.commit_transaction(30)

        for _ in range(3):
            txn()
        before, cpu0 = _counts(fs), time.process_time()
        for _ in range(args.txns):
            txn()
        cpu_ms = (time.process_time() - cpu0) / args.txns * 1000
        after = _counts(fs)
    per_txn = {k: round((after.get(k, 0) - before.get(k, 0)) / args.txns, 2)
               for k in sorted(set(after) | set(before))}
    print(f"{args.txns} transactions of {args.records_per_txn} records over {args.partitions} "
          f"partitions: store requests per transaction {per_txn}")
    print(f"process CPU (broker and client) per transaction: {cpu_ms:.1f} ms")
    print(f"load average (1 min): {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
