"""Store requests per transaction and per produce on an S3 root:
``./run bench s3_txn_requests [--txns N] [--produces N] [--brokers N] [--offsets]``.

Brokers over an S3 bucket on a moto server on loopback, reached through the fault
harness's proxy with no fault scheduled: the proxy counts every request. A
confluent-kafka transactional producer runs ``--txns`` transactions over two partitions
(one record each, committed; with ``--offsets`` each also sends a group's offset with
``send_offsets_to_transaction``); then an idempotent producer sends ``--produces`` single
records, each waited for. Prints the store requests per transaction and per produce, by
method and by what they touch (manifests, segments, ``__transaction_state``, ...), counted
while the client runs, and the requests of the idle brokers over the same time (their
heartbeats and housekeeping) so the difference is what the client's work cost.
"""
import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.helpers.jepsen.runner import Cluster  # noqa: E402


def _kind(method: str, path: str, conditional: bool) -> str:
    """A request's method and what it touches, e.g. ``PUT! manifest`` (``!``: conditional)."""
    p = path.split("?", 1)[0]
    q = path.split("?", 1)[1] if "?" in path else ""
    what = ("brokers" if "/_brokers" in p else "txn-offsets" if "/_txn_offsets" in p
            else "txn-state" if "__transaction_state" in p or "transaction_state" in q
            else "group-offsets" if "__consumer_offsets" in p or "consumer_offsets" in q
            else "manifest" if re.search(r"/_manifest/|\.manifest|manifest", p)
            else "segment" if re.search(r"\.(log|index|timeindex)$", p)
            else "list" if "list-type" in q else "other:" + "/".join(p.split("/")[3:5]))
    return f"{method}{'!' if conditional else ''} {what}"


def _measure(proxy, seconds_idle: float, work) -> tuple[Counter, Counter, float]:
    """(requests during ``work()``, requests of the idle brokers over as long, seconds)."""
    proxy.trace = []
    time.sleep(seconds_idle)
    idle = list(proxy.trace)
    idle_s = seconds_idle
    proxy.trace = []
    t0 = time.monotonic()
    work()
    took = time.monotonic() - t0
    busy = list(proxy.trace)
    proxy.trace = None
    if os.environ.get("BENCH_RAW"):   # every request, in order, to see what one unit costs
        for r in busy:
            print("   ", *r, file=sys.stderr)
    scale = took / idle_s
    idle_counts = Counter(_kind(*r) for r in idle)
    return Counter(_kind(*r) for r in busy), Counter({k: v * scale for k, v in idle_counts.items()}), took


def _print(title: str, busy: Counter, idle: Counter, n: int) -> None:
    total = sum(busy.values()) - sum(idle.values())
    print(f"{title}: {total / n:.1f} store requests each (n={n}; "
          f"{sum(busy.values())} during, minus {sum(idle.values()):.0f} idle-equivalent)")
    for k in sorted(set(busy) | set(idle), key=lambda k: -(busy[k] - idle[k])):
        net = (busy[k] - idle[k]) / n
        if abs(net) >= 0.05:
            print(f"  {k:<28} {net:6.1f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=10)
    ap.add_argument("--produces", type=int, default=20)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--offsets", action="store_true",
                    help="each transaction also sends a group's offset (send_offsets_to_transaction)")
    args = ap.parse_args()
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as workdir:
        cluster = Cluster("s3", args.brokers, workdir, log=lambda m: print(m, file=sys.stderr))
        try:
            cluster.start_all()
            boot = cluster.bootstrap
            admin = AdminClient({"bootstrap.servers": boot})
            for f in admin.create_topics([NewTopic("bt", 2, 1)]).values():
                f.result(60)
            p = Producer({"bootstrap.servers": boot, "transactional.id": "bench-txn",
                          "transaction.timeout.ms": 60000, "linger.ms": 0})
            p.init_transactions(120)
            group = Consumer({"bootstrap.servers": boot, "group.id": "bench-txn-g",
                              "enable.auto.commit": False}) if args.offsets else None
            sent = [0]

            def one_txn():
                p.begin_transaction()
                p.produce("bt", b"x", partition=0)
                p.produce("bt", b"y", partition=1)
                if group is not None:
                    sent[0] += 1
                    p.send_offsets_to_transaction([TopicPartition("bt", 0, sent[0])],
                                                  group.consumer_group_metadata(), 120)
                p.commit_transaction(120)

            one_txn()   # warm: the coordinator loaded, the partitions' heads read
            busy, idle, took = _measure(cluster.proxy, args.idle_s,
                                        lambda: [one_txn() for _ in range(args.txns)])
            _print(f"transaction over 2 partitions{' with offsets' if group is not None else ''} "
                   f"({took / args.txns:.2f} s each)", busy, idle, args.txns)
            q = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "linger.ms": 0})

            def one_produce():
                q.produce("bt", b"z", partition=0)
                q.flush(60)

            one_produce()
            busy, idle, took = _measure(cluster.proxy, args.idle_s,
                                        lambda: [one_produce() for _ in range(args.produces)])
            _print(f"idempotent produce of one record ({took / args.produces:.2f} s each)",
                   busy, idle, args.produces)
            print(f"load average {os.getloadavg()[0]:.1f}")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
