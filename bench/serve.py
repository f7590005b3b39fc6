"""Benchmark: a real Kafka client producing into and fetching from ``kafkastore serve``.

    .venv/bin/python bench/serve.py [--records 1000000] [--partitions 1] [--root URL]
    .venv/bin/python bench/serve.py --transactions [--records 100000] [--partitions 4] [--rounds 2]
        [--records-per-txn 1000]
    .venv/bin/python bench/serve.py --authorizer [--records 300000] [--rounds 2]

1. Starts ``kafkastore serve`` as a subprocess (its own interpreter, as in
   production) on 127.0.0.1 over a fresh root (default: a temporary
   directory, ``file://``), group commit every ``--commit-interval-ms`` (5).
2. Baseline in the same run: one sequential write + fsync of the same
   payload bytes (records x (16 B key + 100 B value)) to a file on the same
   filesystem as the root; prints its MB/s.
3. Produce: confluent-kafka (librdkafka), ``linger.ms=5``, ``batch.size`` 1 MB,
   ``acks=all``, idempotent, no compression; records of 16 B keys and 100 B
   values (message dicts built before the clock starts, handed over with
   ``produce_batch``); timed from the first hand-over to the end of
   ``flush`` (every record acknowledged, i.e. in a committed manifest version).
4. Fetch: a confluent-kafka consumer reads every record back from offset 0;
   then plain Fetch v12 requests read every batch again without decoding
   records (what the broker alone sustains; the Python consumer spends most
   of its time creating one Message object per record).
5. Prints payload MB/s of produce and fetch and their ratios to the baseline,
   the broker's commit count (segments written) and where the time goes
   (the broker's CPU seconds during each phase, from /proc).

Other processes on the machine make the numbers noisy: rerun and compare.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

from serve_proc import start_broker, stop_broker, wait_serving  # bench/ is sys.path[0]

KEY, VALUE = 16, 100


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _cpu_split(pid: int) -> tuple[float, float, int]:
    """``(user CPU s, system CPU s, voluntary context switches of all its threads)`` of
    process ``pid``: system time and switches are the fsyncs, file operations and thread
    hand-offs, user time the Python."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        hz = os.sysconf("SC_CLK_TCK")
        switches = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    switches += sum(int(line.split()[1]) for line in f
                                    if line.startswith("voluntary_ctxt_switches"))
            except OSError:   # a thread that ended meanwhile
                continue
        return int(fields[11]) / hz, int(fields[12]) / hz, switches
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan"), 0


def _record_failure(failed: list):
    def cb(err, _msg):
        if err is not None:
            failed.append(err)
    return cb


def raw_fetch(port: int, partitions: int) -> tuple[float, int]:
    """Fetch every partition to its end with plain Fetch v12 requests; (seconds, bytes)."""
    import datetime

    from kio.schema.fetch.v12 import request as fr

    from kafkastore.protocol.wire import codec

    sock = socket.create_connection(("127.0.0.1", port))
    offsets = {q: 0 for q in range(partitions)}
    done: set[int] = set()
    total, cid = 0, 0
    t0 = time.perf_counter()
    while len(done) < partitions:
        cid += 1
        req = fr.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=0,
                              topics=(fr.FetchTopic(topic="bench", partitions=tuple(
                                  fr.FetchPartition(partition=q, fetch_offset=offsets[q],
                                                    partition_max_bytes=8 << 20)
                                  for q in range(partitions) if q not in done)),),
                              forgotten_topics_data=())
        sock.sendall(codec.encode_request(req, cid))
        size = int.from_bytes(_recv(sock, 4), "big")
        _, resp = codec.decode_response(_recv(sock, size), 1, 12)
        for part in resp.responses[0].partitions:
            data = part.records or b""
            total += len(data)
            pos = 0
            while pos + 12 <= len(data):  # walk batch headers to the next offset
                base = int.from_bytes(data[pos:pos + 8], "big")
                length = int.from_bytes(data[pos + 8:pos + 12], "big")
                delta = int.from_bytes(data[pos + 23:pos + 27], "big")
                offsets[part.partition_index] = base + delta + 1
                pos += 12 + length
            if offsets[part.partition_index] >= part.high_watermark:
                done.add(part.partition_index)
    sock.close()
    return time.perf_counter() - t0, total


def _recv(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def baseline(path: str, nbytes: int) -> float:
    """MB/s of one sequential write + fsync of ``nbytes``."""
    chunk = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    dt = time.perf_counter() - t0
    os.unlink(path)
    return nbytes / dt / 1e6


def bench_transactions(bootstrap: str, n: int, partitions: int, per_txn: int = 1000, rounds: int = 2,
                       broker_pid: int | None = None) -> int:
    """Records/s of a transactional producer committing every ``per_txn`` records against the
    same producer (idempotent, same batching) without transactions, alternating ``rounds``
    times in this run; prints the best of each and their ratio, the broker's CPU seconds
    per mode (``broker_pid``) and the load average."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "acks": "all",
            "enable.idempotence": True, "compression.codec": "none",
            "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576}
    blob = os.urandom(VALUE + KEY + 1024)
    msgs = [{"key": i.to_bytes(KEY, "big"), "value": blob[i % 1024:i % 1024 + VALUE],
             "partition": i % partitions} for i in range(n)]
    failed: list = []
    on_delivery = _record_failure(failed)

    def hand_over(p, batch):
        while batch:
            queued = p.produce_batch("bench", batch, on_delivery=on_delivery)
            batch = batch[queued:]
            p.poll(0 if not batch else 0.005)

    def plain() -> float:
        p = Producer(conf)
        t0 = time.perf_counter()
        hand_over(p, msgs)
        if p.flush(300):
            raise RuntimeError("plain produce did not finish")
        return n / (time.perf_counter() - t0)

    def transactional(r: int) -> float:
        p = Producer({**conf, "transactional.id": f"bench-txn-{r}", "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        t0 = time.perf_counter()
        for j in range(0, n, per_txn):
            p.begin_transaction()
            hand_over(p, msgs[j:j + per_txn])
            p.commit_transaction(60)
        return n / (time.perf_counter() - t0)

    best_plain = best_txn = 0.0
    cpu = {"plain": 0.0, "txn": 0.0}
    split = {"plain": [0.0, 0.0, 0], "txn": [0.0, 0.0, 0]}   # user s, system s, switches
    loads = [os.getloadavg()[0]]

    def add_split(mode: str, before: tuple, after: tuple) -> None:
        for i in range(3):
            split[mode][i] += after[i] - before[i]

    for r in range(rounds):
        c0 = _cpu_seconds(broker_pid) if broker_pid else 0.0
        s0 = _cpu_split(broker_pid) if broker_pid else (0.0, 0.0, 0)
        best_plain = max(best_plain, plain())
        if broker_pid and r == 0 and os.environ.get("KAFKASTORE_PROFILE_CPROFILE"):
            os.kill(broker_pid, signal.SIGUSR1)   # bench/profile_broker.py: count from here
        c1 = _cpu_seconds(broker_pid) if broker_pid else 0.0
        s1 = _cpu_split(broker_pid) if broker_pid else (0.0, 0.0, 0)
        best_txn = max(best_txn, transactional(r))
        c2 = _cpu_seconds(broker_pid) if broker_pid else 0.0
        s2 = _cpu_split(broker_pid) if broker_pid else (0.0, 0.0, 0)
        cpu["plain"] += c1 - c0
        cpu["txn"] += c2 - c1
        add_split("plain", s0, s1)
        add_split("txn", s1, s2)
        loads.append(os.getloadavg()[0])
    if failed:
        print(f"produce failed: {failed[:3]}", file=sys.stderr)
        return 1
    print(f"records: {n} x ({KEY} B key + {VALUE} B value), partitions: {partitions}, best of {rounds} rounds")
    print(f"idempotent producer without transactions: {best_plain:,.0f} records/s")
    print(f"transactional producer, commit every {per_txn} records: {best_txn:,.0f} records/s "
          f"({n // per_txn} transactions, {per_txn / best_txn * 1000 - per_txn / best_plain * 1000:.1f} ms "
          f"each beyond the records)")
    print(f"ratio transactional / plain: {best_txn / best_plain:.2f}")
    if broker_pid:
        print(f"broker CPU per 1,000 records: plain {cpu['plain'] / rounds / n * 1000 * 1000:.1f} ms, "
              f"transactional {cpu['txn'] / rounds / n * 1000 * 1000:.1f} ms (mean of {rounds} rounds)")
        txns = rounds * (n // per_txn)
        (pu, ps, pc), (tu, ts, tc) = split["plain"], split["txn"]
        per_1k = rounds * n / 1000
        print(f"broker CPU per transaction: {(tu + ts) / txns * 1000:.1f} ms (user {tu / txns * 1000:.1f}, "
              f"system {ts / txns * 1000:.1f}), {tc / txns:.0f} voluntary context switches; the plain "
              f"producer per 1,000 records: user {pu / per_1k * 1000:.1f} ms, system "
              f"{ps / per_1k * 1000:.1f} ms, {pc / per_1k:.0f} switches")
    print(f"load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f}")
    return 0


def bench_acls(root: str) -> int:
    """Store 1,000 ACLs under ``root``: the ones the bench's client (``User:ANONYMOUS``: no SASL,
    so both modes pay the same for the connection) needs on topic and group ``bench``, a DENY on
    a prefix of other names, and 993 for other users, topics, prefixes and groups."""
    from kafkastore.cluster.acls import (AclBinding, Operation as Op, PatternType as P, Permission,
                                         ResourceType as R)
    from kafkastore.cluster.acls import acl_document, add_acls, list_acls
    from kafkastore.storage import Storage

    me, allow = "User:ANONYMOUS", Permission.ALLOW
    acls = [AclBinding(R.TOPIC, "bench", P.LITERAL, me, "*", Op.WRITE, allow),
            AclBinding(R.TOPIC, "bench", P.LITERAL, me, "*", Op.READ, allow),
            AclBinding(R.GROUP, "bench", P.LITERAL, me, "*", Op.READ, allow),
            AclBinding(R.TOPIC, "bench-private.", P.PREFIXED, me, "*", Op.ALL, Permission.DENY)]
    kinds = [(R.TOPIC, P.LITERAL, "orders-{i}", Op.WRITE), (R.TOPIC, P.PREFIXED, "team{i}.", Op.READ),
             (R.GROUP, P.LITERAL, "consumers-{i}", Op.READ), (R.TOPIC, P.PREFIXED, "be{i}", Op.DESCRIBE),
             (R.TRANSACTIONAL_ID, P.PREFIXED, "app{i}-", Op.WRITE)]
    for i in range(1000 - len(acls) - 3):
        rtype, pattern, name, op = kinds[i % len(kinds)]
        acls.append(AclBinding(rtype, name.format(i=i), pattern, f"User:user{i % 97}", "*", op,
                               Permission.DENY if i % 11 == 0 else allow))
    acls += [AclBinding(R.TOPIC, "b", P.PREFIXED, "User:user1", "*", Op.READ, allow),
             AclBinding(R.TOPIC, "*", P.LITERAL, "User:user2", "*", Op.DESCRIBE, allow),
             AclBinding(R.TOPIC, "bench", P.LITERAL, "User:user3", "10.0.0.1", Op.WRITE, Permission.DENY)]
    add_acls(acl_document(Storage(root)), acls)
    return len(list_acls(acl_document(Storage(root))))


def bench_authorizer(args) -> int:
    """Produce and fetch rates with ``serve --authorizer`` and 1,000 ACLs against the same broker
    without it, in this run: alternating rounds on fresh roots, best of each; prints the ratios."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    n = args.records
    blob = os.urandom(VALUE + KEY + 1024)
    msgs = [{"key": i.to_bytes(KEY, "big"), "value": blob[i % 1024:i % 1024 + VALUE],
             "partition": i % args.partitions} for i in range(n)]
    payload = n * (KEY + VALUE)
    best: dict = {}
    for r in range(args.rounds):
        for mode in ("off", "on"):
            tmp = tempfile.mkdtemp(prefix="bench-serve-acl-")
            root = f"file://{tmp}/root"
            create_topic(Storage(root), "bench", args.partitions)
            flags = ["--authorizer"] if mode == "on" else []
            if mode == "on":
                count = bench_acls(root)
            broker = start_broker(root, "--commit-interval-ms", str(args.commit_interval_ms), *flags)
            try:
                port = wait_serving(broker)
                p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5,
                              "batch.size": 1_000_000, "acks": "all", "enable.idempotence": True,
                              "compression.codec": "none", "queue.buffering.max.messages": 2_000_000,
                              "queue.buffering.max.kbytes": 1_048_576})
                failed: list = []
                on_delivery = _record_failure(failed)
                cpu0 = _cpu_seconds(broker.pid)
                t0 = time.perf_counter()
                for j in range(0, n, 10_000):
                    batch = msgs[j:j + 10_000]
                    while batch:
                        queued = p.produce_batch("bench", batch, on_delivery=on_delivery)
                        batch = batch[queued:]
                        p.poll(0 if not batch else 0.005)
                if p.flush(300) or failed:
                    print(f"produce failed ({mode}): {failed[:3]}", file=sys.stderr)
                    return 1
                produce = payload / (time.perf_counter() - t0) / 1e6
                produce_cpu = _cpu_seconds(broker.pid) - cpu0
                c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench",
                              "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                              "max.partition.fetch.bytes": 8_388_608})
                c.assign([TopicPartition("bench", q, 0) for q in range(args.partitions)])
                got, t0, cpu0 = 0, time.perf_counter(), _cpu_seconds(broker.pid)
                deadline = time.time() + 600
                while got < n and time.time() < deadline:
                    got += sum(1 for m in c.consume(num_messages=100_000, timeout=1.0) if m.error() is None)
                fetch = payload / (time.perf_counter() - t0) / 1e6
                fetch_cpu = _cpu_seconds(broker.pid) - cpu0
                c.close()
                if got != n:
                    print(f"fetch ({mode}) got {got} of {n} records", file=sys.stderr)
                    return 1
                raw_s, _ = raw_fetch(port, args.partitions)
                # Broker CPU: MB handled per CPU second (less sensitive to a busy machine).
                rates = (produce, fetch, payload / raw_s / 1e6, payload / 1e6 / produce_cpu,
                         payload / 1e6 / fetch_cpu)
                hidden = p.list_topics("bench-private.x", timeout=10).topics["bench-private.x"].error
                if (hidden is not None and hidden.code() == 29) != (mode == "on"):  # the DENY applies
                    print(f"the authorizer is not {mode}: Metadata answered {hidden}", file=sys.stderr)
                    return 1
                print(f"round {r + 1}, authorizer {mode}: produce {rates[0]:.1f} MB/s, fetch "
                      f"(consumer) {rates[1]:.1f} MB/s, fetch (raw Fetch v12) {rates[2]:.1f} MB/s; "
                      f"broker CPU: produce {rates[3]:.1f} MB per CPU s, fetch {rates[4]:.1f}")
                best[mode] = tuple(max(a, b) for a, b in zip(best.get(mode, rates), rates))
            finally:
                stop_broker(broker)
                shutil.rmtree(tmp, ignore_errors=True)
    on, off = best["on"], best["off"]
    from kafkastore.cluster.acls import Operation, ResourceType, acl_document, list_acls
    from kafkastore.protocol.authorizer import AclIndex

    tmp = tempfile.mkdtemp(prefix="bench-serve-acl-")
    try:
        bench_acls(f"file://{tmp}/root")
        index = AclIndex(list_acls(acl_document(Storage(f"file://{tmp}/root"))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    names = [f"orders-{i}x" for i in range(20_000)]  # never seen: every call decides afresh
    t0 = time.perf_counter()
    for name in names:
        index.authorize("User:ANONYMOUS", "127.0.0.1", Operation.WRITE, ResourceType.TOPIC, name)
    fresh_us = (time.perf_counter() - t0) / len(names) * 1e6
    t0 = time.perf_counter()
    for name in names:
        index.authorize("User:ANONYMOUS", "127.0.0.1", Operation.WRITE, ResourceType.TOPIC, name)
    cached_us = (time.perf_counter() - t0) / len(names) * 1e6
    print(f"one decision over {len(index.bindings)} ACLs: {fresh_us:.1f} us, remembered {cached_us:.2f} us")
    print(f"records: {n} x ({KEY} B key + {VALUE} B value), partitions: {args.partitions}, "
          f"{count} ACLs, best of {args.rounds} rounds")
    for i, what in enumerate(("produce MB/s", "fetch (consumer) MB/s", "fetch (raw Fetch v12) MB/s",
                              "produce MB per broker CPU s", "fetch (consumer) MB per broker CPU s")):
        print(f"{what}: authorizer on {on[i]:.1f}, off {off[i]:.1f}, ratio {on[i] / off[i]:.2f}")
    return 0


def main() -> int:
    from kafkastore.cli.parser import flag

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--commit-interval-ms", type=float, default=5.0)
    flag(ap, "--verbose", "the broker logs every commit (stderr)")
    ap.add_argument("--root", help="root URL (default: a fresh temporary directory)")
    flag(ap, "--transactions",
         "instead: records/s of a transactional producer committing every "
         "--records-per-txn records against the same producer without transactions")
    flag(ap, "--authorizer",
         "instead: produce and fetch rates with serve --authorizer and 1,000 ACLs "
         "against the authorizer off, in this run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="--authorizer, --transactions: rounds of each mode, alternating (best kept)")
    ap.add_argument("--records-per-txn", type=int, default=1000,
                    help="--transactions: records per transaction (default 1,000)")
    args = ap.parse_args()
    if args.authorizer:
        return bench_authorizer(args)

    from confluent_kafka import Consumer, Producer, TopicPartition

    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    root = args.root or f"file://{tmp}/root"
    create_topic(Storage(root), "bench", args.partitions)
    broker = start_broker(root, "--commit-interval-ms", str(args.commit_interval_ms),
                          *(["-vv"] if args.verbose else []))
    try:
        port = wait_serving(broker)
        n = args.records
        if args.transactions:
            return bench_transactions(f"127.0.0.1:{port}", n, args.partitions,
                                      per_txn=args.records_per_txn, rounds=args.rounds,
                                      broker_pid=broker.pid)
        payload = n * (KEY + VALUE)
        base = baseline(os.path.join(tmp, "baseline.bin"), payload)
        print(f"baseline: sequential write + fsync of {payload / 1e6:.1f} MB: {base:.1f} MB/s")

        blob = os.urandom(VALUE + KEY + 1024)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5, "batch.size": 1_000_000,
                      "acks": "all", "enable.idempotence": True, "compression.codec": "none",
                      "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576,
                      "message.max.bytes": 2_000_000, "max.in.flight.requests.per.connection": 5})
        failed = []
        # Messages are built before the clock starts (a Python loop building 1M dicts would
        # measure the interpreter, not the broker); produce_batch hands 10,000 at a time to
        # librdkafka, which batches them (linger.ms, batch.size) as any producer does.
        chunk = 10_000
        chunks = [[{"key": i.to_bytes(KEY, "big"), "value": blob[i % 1024:i % 1024 + VALUE],
                    "partition": i % args.partitions} for i in range(j, min(n, j + chunk))]
                  for j in range(0, n, chunk)]
        on_delivery = _record_failure(failed)
        cpu0 = _cpu_seconds(broker.pid)
        t0 = time.perf_counter()
        for msgs in chunks:
            while msgs:
                queued = p.produce_batch("bench", msgs, on_delivery=on_delivery)
                msgs = msgs[queued:]
                p.poll(0 if not msgs else 0.005)
        loop_s = time.perf_counter() - t0
        left = p.flush(300)
        produce_s = time.perf_counter() - t0
        produce_cpu = _cpu_seconds(broker.pid) - cpu0
        if left or failed:
            print(f"produce failed: {left} undelivered, errors {failed[:3]}", file=sys.stderr)
            return 1
        prod_mbs = payload / produce_s / 1e6

        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench",
                      "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                      "max.partition.fetch.bytes": 8_388_608})
        c.assign([TopicPartition("bench", q, 0) for q in range(args.partitions)])
        got = 0
        cpu0 = _cpu_seconds(broker.pid)
        t0 = time.perf_counter()
        deadline = time.time() + 600
        while got < n and time.time() < deadline:
            for m in c.consume(num_messages=100_000, timeout=1.0):
                if m.error() is None:
                    got += 1
        fetch_s = time.perf_counter() - t0
        fetch_cpu = _cpu_seconds(broker.pid) - cpu0
        c.close()
        if got != n:
            print(f"fetch got {got} of {n} records", file=sys.stderr)
            return 1
        fetch_mbs = payload / fetch_s / 1e6
        raw_s, raw_bytes = raw_fetch(port, args.partitions)
        segments = sum(1 for dirpath, _, files in os.walk(tmp) for f in files if f.endswith(".log"))
        print(f"records: {n} x ({KEY} B key + {VALUE} B value), partitions: {args.partitions}, "
              f"group commit {args.commit_interval_ms} ms, {segments} segments written")
        print(f"produce (confluent-kafka, linger 5 ms, 1 MB batches, acks=all): {produce_s:.2f} s, "
              f"{prod_mbs:.1f} MB/s, ratio to baseline {prod_mbs / base:.3f}; "
              f"broker CPU {produce_cpu:.1f} s ({produce_cpu / produce_s:.0%} of a core); client produce_batch() loop {loop_s:.2f} s")
        print(f"fetch (confluent-kafka consumer): {fetch_s:.2f} s, {fetch_mbs:.1f} MB/s, "
              f"ratio to baseline {fetch_mbs / base:.3f}; broker CPU {fetch_cpu:.1f} s "
              f"({fetch_cpu / fetch_s:.0%} of a core)")
        raw_mbs = payload / raw_s / 1e6
        print(f"fetch (raw Fetch v12 requests, 8 MB per partition, records not decoded: the broker's "
              f"side alone): {raw_s:.2f} s for {raw_bytes / 1e6:.1f} MB stored, {raw_mbs:.1f} MB/s of "
              f"payload, ratio to baseline {raw_mbs / base:.3f}")
        return 0
    finally:
        stop_broker(broker)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
