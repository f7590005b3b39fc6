"""Soak benchmark through ``kafkastore serve``: does a steady trickle of acks stay as fast as it began?

    .venv/bin/python bench/soak_serve.py [--seconds 600] [--interval-ms 5] [--s3]

1. Starts ``kafkastore serve`` as a subprocess on 127.0.0.1 over a fresh root:
   a temporary directory (``file://``), or with ``--s3`` a bucket on moto's
   S3 server, also on 127.0.0.1 and started here.
2. A confluent-kafka producer (acks=all, idempotent, ``linger.ms=0``) sends
   one 100-byte record every ``--interval-ms`` to one partition for
   ``--seconds``; each record's ack latency is the time from ``produce()`` to
   its delivery callback (its manifest version landed).
3. Prints p50 / p99 ack latency of the first and of the last minute (or of
   the first and last third of a run shorter than 3 minutes) and
   their ratio last/first, the live segments of the partition at the end
   (from its manifest) against ``size / segment.bytes``, the manifest
   versions still stored, and the PUT count per acknowledged commit where the
   store counts them (S3: moto's request log is not exposed, so objects
   written are counted from the bucket listing instead).
4. Unless ``--probe-interval-ms 0``, a second thread times, every ``--probe-interval-ms``
   (default 500), the requests whose cost could grow with the log's history: one
   transaction of a transactional producer (begin, one record to topic ``soak-txn``,
   commit: the broker verifies the batch against the coordinator's stored state and
   writes markers), a group's OffsetCommit, and its OffsetFetch (``committed()``: the
   coordinator reads the group's partition of ``__consumer_offsets``). It prints their
   p50 per tenth of the run and the last/first tenth ratio of each.
5. Prints the broker's CPU seconds per acknowledged record (from ``/proc/<pid>/stat``) for
   the same two windows, the load averages at start and end, and a series per half window
   (p50, the broker's CPU and bytes written to storage per record from ``/proc/<pid>/io``,
   merging's rewrites included, the 1-minute load and how busy the disks were): with other
   tenants on the machine a latency ratio that follows their lines says little; CPU and
   bytes per record hardly move with the load (CPU falls a little as slower commits group
   more records).
   ``KAFKASTORE_BENCH_BROKER_MAIN=bench/profile_broker.py`` times each step of the
   broker's commits, merges and gc for the same windows (see that file).

The issue's bar: p50 of the last minute within 1.25x of the first, live
segments bounded. Other tenants of the machine make single runs noisy.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from serve_proc import start_broker, stop_broker, wait_serving  # bench/ is sys.path[0]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` used so far (Linux /proc; nan elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_between(samples: list[tuple[float, float]], t0: float, t1: float) -> float:
    """CPU seconds used between run times ``t0`` and ``t1`` from (time, cpu) samples (the
    samples nearest inside the window)."""
    inside = [(t, c) for t, c in samples if t0 - 0.5 <= t <= t1 + 0.5]
    if len(inside) < 2:
        return float("nan")
    return inside[-1][1] - inside[0][1]


def _proc_io(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` (bytes the process had written to storage, write calls...; empty
    where unreadable)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except (OSError, ValueError):
        return {}


def _disk_busy_ms() -> int:
    """Milliseconds the machine's disks were busy so far (io_ticks of whole disks in
    ``/proc/diskstats``): the I/O counterpart of the load average."""
    total = 0
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 12 and (fields[2][:2] in ("vd", "sd", "xv") and fields[2][-1].isalpha()
                                         or fields[2].startswith("nvme") and "p" not in fields[2]):
                    total += int(fields[12])
    except OSError:
        pass
    return total


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def _print_series(acks: list[tuple[float, float]], cpu: list[tuple[float, float]],
                  loads: list[float], io: list[tuple[float, int, int]], dur: float,
                  window: float) -> None:
    """p50 ack latency, broker CPU and bytes written per record, and the machine's CPU load
    and disk busy time, per half window of the run: growth that follows the machine's lines
    is the machine's, growth against flat ones is ours."""
    step = window / 2
    print(f"per {step:.0f} s: start s, p50 ack ms, broker CPU ms / bytes written per record, "
          f"1-min load average, disks busy %")
    t = 0.0
    while t + step <= dur + 1e-6:
        lat = [x for s, x in acks if t <= s < t + step]
        load = [v for i, v in enumerate(loads) if t <= i + 1 < t + step]
        used = _cpu_between(cpu, t, t + step)
        inside = [x for x in io if t - 0.5 <= x[0] <= t + step + 0.5]
        wrote = busy = float("nan")
        if len(inside) >= 2:
            wrote = (inside[-1][1] - inside[0][1]) / max(1, len(lat))
            busy = (inside[-1][2] - inside[0][2]) / 10 / max(1e-9, inside[-1][0] - inside[0][0])
        print(f"  {t:5.0f} {_percentile(lat, 0.5) * 1e3:8.1f} {used / max(1, len(lat)) * 1e3:8.3f} "
              f"{wrote:8.0f} {(sum(load) / len(load)) if load else float('nan'):6.1f} {busy:5.0f}")
        t += step


class _Probes:
    """Times a transaction, an OffsetCommit and an OffsetFetch every ``interval_s`` on a thread
    of its own (each against the one broker at ``port``), until :meth:`stop`."""

    kinds = ("transaction", "offset commit", "offset fetch")

    def __init__(self, port: int, interval_s: float, t_start: float):
        self.port, self.interval_s, self.t_start = port, interval_s, t_start
        self.samples: list[tuple[float, str, float]] = []  # (run time, kind, seconds)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-probes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _timed(self, kind: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        self.samples.append((t0 - self.t_start, kind, time.perf_counter() - t0))

    def _run(self) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        boot = f"127.0.0.1:{self.port}"
        txp = Producer({"bootstrap.servers": boot, "transactional.id": "soak-txn", "linger.ms": 0,
                        "log.connection.close": False})
        group = Consumer({"bootstrap.servers": boot, "group.id": "soak-group",
                          "enable.auto.commit": False, "log.connection.close": False})
        tp = TopicPartition("soak-txn", 0)
        try:
            txp.init_transactions(60)
            n = 0
            while not self._stop.wait(self.interval_s):
                n += 1

                def transaction():
                    txp.begin_transaction()
                    txp.produce("soak-txn", value=b"t" * 100, partition=0)
                    txp.commit_transaction(60)

                self._timed("transaction", transaction)
                self._timed("offset commit", lambda: group.commit(
                    offsets=[TopicPartition("soak-txn", 0, n)], asynchronous=False))
                self._timed("offset fetch", lambda: group.committed([tp], timeout=60))
        except Exception as exc:  # noqa: BLE001 -- reported with the figures
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            group.close()

    def report(self, dur: float, cpu: list[tuple[float, float]]) -> None:
        """p50 per tenth of the run and last/first tenth, per kind; and the broker's CPU per
        probe round per tenth (all its work, the main producer's included: with a slow main
        producer, e.g. ``--interval-ms 50``, it is mostly the probes', and far less sensitive
        to other tenants of the machine than latency)."""
        if self.errors:
            print(f"probe errors: {self.errors[:3]}")
        tenth = dur / 10
        rounds = [sum(1 for t, k, _x in self.samples if k == "offset fetch"
                      and i * tenth <= t < (i + 1) * tenth) for i in range(10)]
        per_round = [_cpu_between(cpu, i * tenth, (i + 1) * tenth) / max(1, rounds[i]) * 1e3
                     for i in range(10)]
        print("broker CPU ms per probe round per tenth: "
              + " ".join(f"{v:.1f}" for v in per_round)
              + f"; last/first tenth {per_round[-1] / per_round[0]:.2f}")
        for kind in self.kinds:
            per = [[x for t, k, x in self.samples if k == kind and i * tenth <= t < (i + 1) * tenth]
                   for i in range(10)]
            p50 = [_percentile(xs, 0.5) * 1e3 for xs in per]
            total = sum(len(xs) for xs in per)
            print(f"{kind} p50 ms per tenth ({total} timed): "
                  + " ".join(f"{v:.1f}" for v in p50)
                  + f"; last/first tenth {p50[-1] / p50[0]:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--s3", action="store_true", help="root on moto's S3 server (default: file://)")
    ap.add_argument("--segment-bytes", type=int, default=1 << 20,
                    help="the topic's segment.bytes (default 1 MiB, so merging shows within minutes)")
    ap.add_argument("--gc-ms", type=int, default=6000,
                    help="gc interval and grace (file.delete.delay.ms, the broker's version grace) "
                         "in ms, short so that gc's steady cost is in the first minute too "
                         "(0: the defaults, 60 s each: gc's first deletes come in the third minute)")
    ap.add_argument("--probe-interval-ms", type=float, default=500.0,
                    help="time a transaction, an OffsetCommit and an OffsetFetch this often "
                         "(0: no probes)")
    args = ap.parse_args()

    from confluent_kafka import Producer

    from kafkastore.manifest import ManifestStore
    from kafkastore.maintenance.merge import DEFAULT_GC_INTERVAL_MS
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    tmp = tempfile.mkdtemp(prefix="bench-soak-")
    moto = None
    env = dict(os.environ)
    if args.s3:
        from produce import start_moto  # bench/ is sys.path[0] when run as a script

        moto = start_moto("soak")
        env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})
        root = "s3://soak/root"
    else:
        root = f"file://{tmp}/root"
    storage = Storage(root)
    configs = {"segment.bytes": args.segment_bytes}
    if args.gc_ms:
        configs["file.delete.delay.ms"] = args.gc_ms
        env["KAFKASTORE_BENCH_GC_MS"] = str(args.gc_ms)
        if env.get("KAFKASTORE_BENCH_BROKER_MAIN"):
            env["KAFKASTORE_BENCH_INNER_MAIN"] = env["KAFKASTORE_BENCH_BROKER_MAIN"]
        env["KAFKASTORE_BENCH_BROKER_MAIN"] = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                           "short_gc_broker.py")
    create_topic(storage, "soak", 1, configs)
    create_topic(storage, "soak-txn", 1, configs)
    broker = start_broker(root, env=env)
    try:
        port = wait_serving(broker)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0, "acks": "all",
                      "enable.idempotence": True, "log.connection.close": False})
        sent: dict[int, float] = {}
        acks: list[tuple[float, float]] = []  # (send time since start, latency s)
        failed: list = []
        t_start = time.perf_counter()
        probes = None
        if args.probe_interval_ms > 0:
            probes = _Probes(port, args.probe_interval_ms / 1000, t_start)
            probes.start()

        def on_delivery(err, msg, _sent=sent):
            now = time.perf_counter()
            i = int.from_bytes(msg.key(), "big")
            if err is not None:
                failed.append(err)
                return
            t = _sent.pop(i)
            acks.append((t - t_start, now - t))

        interval = args.interval_ms / 1000
        value = b"v" * 100
        i = 0
        next_at = t_start
        # The broker's CPU seconds over the run (once a second): CPU per acknowledged record
        # hardly depends on what else the machine runs, unlike latency.
        cpu: list[tuple[float, float]] = [(0.0, _cpu_seconds(broker.pid))]
        loads: list[float] = []  # the 1-minute load average, once a second
        # (time, bytes the broker wrote to storage, disk busy ms), once a second
        io: list[tuple[float, int, int]] = [(0.0, _proc_io(broker.pid).get("write_bytes", 0),
                                             _disk_busy_ms())]
        load_start = _loadavg()
        while time.perf_counter() - t_start < args.seconds:
            now = time.perf_counter()
            if now - t_start - cpu[-1][0] >= 1.0:
                cpu.append((now - t_start, _cpu_seconds(broker.pid)))
                loads.append(float(_loadavg().split()[0]))
                io.append((now - t_start, _proc_io(broker.pid).get("write_bytes", 0), _disk_busy_ms()))
            if now < next_at:
                p.poll(next_at - now)
                continue
            sent[i] = time.perf_counter()
            p.produce("soak", key=i.to_bytes(8, "big"), value=value, partition=0, on_delivery=on_delivery)
            i += 1
            next_at += interval
            p.poll(0)
        cpu.append((time.perf_counter() - t_start, _cpu_seconds(broker.pid)))
        if probes is not None:
            probes.stop()
        load_end = _loadavg()
        left = p.flush(120)
        if left or failed:
            print(f"produce failed: {left} undelivered, errors {failed[:3]}", file=sys.stderr)
            return 1
        dur = args.seconds
        window = min(60.0, dur / 3)  # the bar: the first and the last minute
        first = [lat for t, lat in acks if t < window]
        last = [lat for t, lat in acks if t >= dur - window]
        p50f, p50l = _percentile(first, 0.5) * 1e3, _percentile(last, 0.5) * 1e3
        p99f, p99l = _percentile(first, 0.99) * 1e3, _percentile(last, 0.99) * 1e3
        del p  # before the broker stops, so librdkafka does not log the closed connection
        time.sleep(2)  # let the broker's background merge of the last writes land
        m = ManifestStore(Storage(root), "soak", 0).latest()
        size = m.size if m else 0
        live = len(m.segments) if m else 0
        versions = len(ManifestStore(Storage(root), "soak", 0).versions())
        print(f"root: {root}; {len(acks)} records acknowledged over {dur:.0f} s "
              f"(one every {args.interval_ms:g} ms, acks=all, idempotent, linger 0; "
              f"gc interval and grace {args.gc_ms or DEFAULT_GC_INTERVAL_MS} ms)")
        print(f"ack latency, first {window:.0f} s: p50 {p50f:.1f} ms, p99 {p99f:.1f} ms "
              f"({len(first)} records)")
        print(f"ack latency, last {window:.0f} s:  p50 {p50l:.1f} ms, p99 {p99l:.1f} ms "
              f"({len(last)} records)")
        print(f"ratio last/first: p50 {p50l / p50f:.2f}, p99 {p99l / p99f:.2f} (bar: p50 within 1.25)")
        cpu_f = _cpu_between(cpu, 0.0, window) / max(1, len(first)) * 1e3
        cpu_l = _cpu_between(cpu, dur - window, dur) / max(1, len(last)) * 1e3
        print(f"broker CPU per acknowledged record: first {cpu_f:.3f} ms, last {cpu_l:.3f} ms, "
              f"ratio {cpu_l / cpu_f:.2f} (less sensitive to other load than latency)")
        print(f"load average (1/5/15 min) at start: {load_start}; at the end: {load_end}")
        _print_series(acks, cpu, loads, io, dur, window)
        bound = size / args.segment_bytes
        print(f"live segments at the end: {live} for {size / 1e6:.2f} MB "
              f"(size / segment.bytes = {bound:.1f}); manifest versions stored: {versions}")
        if probes is not None:
            probes.report(dur, cpu)
        return 0
    finally:
        stop_broker(broker)
        if moto is not None:
            moto.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
