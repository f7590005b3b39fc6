"""Benchmark: ack latency of a trickle of one-record produces while housekeeping runs.

    ./run bench trickle --minutes M [--s3] [--interval-ms 5] [--no-profile]

1. Starts ``kafkastore serve`` as a subprocess on 127.0.0.1 over a fresh root: a temporary
   directory (``file://``) or, with ``--s3``, a bucket on moto's S3 server (its own process,
   so moto does not share the broker's or this process's GIL).
2. The topic has ``segment.bytes`` 1 MiB (so the housekeeper merges small segments within
   the run) and gc's interval and version grace are shortened to ``--gc-ms`` (through
   bench/short_gc_broker.py), so merging and gc both run all along, as in the steady state.
3. A confluent-kafka producer (acks=all, idempotent, ``linger.ms=0``) sends one 100-byte
   record every ``--interval-ms`` (5) to one partition; a record's ack latency is the time
   from ``produce()`` to its delivery callback. One warm-up record is acknowledged before
   the clock starts (a fresh librdkafka idempotent producer gets its producer id on a
   500 ms timer: its first records wait about half a second on any broker).
4. Prints p50 / p99 ack latency per tenth of the run and each tenth's p99 over the first
   tenth's, the 1-minute load average per tenth (other tenants make latency noisy: read the
   ratios next to it), when the slow acks of the first and the worst tenth were sent (spells
   of consecutive slow acks, with the broker's steps during each), and, unless ``--no-profile``, what the broker was doing during the
   slow acks of the worst tenth: bench/profile_broker.py times each produce commit, merge,
   gc and storage call inside the broker; an ack slower than the first tenth's p99 is
   attributed to the housekeeping steps (merge, gc) whose spans overlap it, and the steps of
   the produce commits that acknowledged it are summed. Then, for the first and the worst
   tenth, what each slow ack waited on most: a storage call of the default lane in flight
   (the ack path's commits, but also heartbeats, leases and fetch reads; and which verb),
   the broker not running Python for it (a probe thread in the broker that sleeps 1 ms at a
   time woke late: where the same probe in this process was late too, no CPU; where it was
   on time, the broker's other threads held the GIL), or neither (queued behind earlier
   requests), and the share of that wait during which housekeeping's storage calls (by
   their lane) were in flight.
5. Per tenth (``--slow-ms``, default 25: the file:// aim), the acks slower than that, what
   each waited on most, the seconds of their waiting during which housekeeping's store
   calls of each verb were in flight, and the broker probe's longest late wake-up inside
   and outside the broker: a trace of every tenth, not only the first and the worst.

No assertion is made on speed.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_T0_ENV = "KAFKASTORE_TRICKLE_T0_FILE"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


_WAITS_ENV = "KAFKASTORE_TRICKLE_WAITS_FILE"
_PROBE_S = 0.001
_IO_VERBS = ("put", "put_many", "put_if_absent", "get", "list", "exists", "delete")


def _start_outside_probe(late: list) -> threading.Event:
    """The same 1 ms sleeper in this (bench) process, whose GIL the broker does not share: its
    late wake-ups are the machine's (no CPU), the broker's probe's beyond them the GIL's."""
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            t = time.monotonic()
            time.sleep(_PROBE_S)
            over = time.monotonic() - t - _PROBE_S
            if over > _PROBE_S:
                late.append((t, over))

    threading.Thread(target=probe, name="trickle-outside-probe", daemon=True).start()
    return stop


def _install_wait_probes(out_path: str) -> None:
    """Inside the broker: record each storage call with its lane (the ack path's or
    housekeeping's) and, from a thread that sleeps 1 ms at a time, every wake-up more than
    1 ms late (the process had no GIL or no CPU to give it); written to ``out_path`` at exit,
    times on the monotonic clock."""
    import atexit
    import functools

    from kafkastore import storage, threads  # lazy: only inside the broker process

    io: list[tuple[float, str, str, float]] = []    # (start, lane, verb, seconds)
    late: list[tuple[float, float, float]] = []      # (sleep began, seconds late, CPU share)

    def timed(verb, orig):
        @functools.wraps(orig)
        def call(*args, **kwargs):
            started = time.monotonic()
            try:
                return orig(*args, **kwargs)
            finally:
                io.append((started, threads.current_lane() or "ack", verb,
                           time.monotonic() - started))
        return call

    for verb in _IO_VERBS:
        setattr(storage.Storage, verb, timed(verb, getattr(storage.Storage, verb)))

    def probe():
        while True:
            t, cpu = time.monotonic(), time.process_time()
            time.sleep(_PROBE_S)
            wall = time.monotonic() - t
            if wall - _PROBE_S > _PROBE_S:   # with the share of a core the broker used
                late.append((t, wall - _PROBE_S, (time.process_time() - cpu) / wall))

    threading.Thread(target=probe, name="trickle-probe", daemon=True).start()

    def dump():
        with open(out_path, "w") as f:
            json.dump({"io": io, "late": late}, f)

    atexit.register(dump)


def _broker_wrapper() -> None:
    """Inside the broker process: note the monotonic clock, install the wait probes, then run
    bench/profile_broker.py.

    profile_broker times its events from its own start; the time written here (a few
    microseconds before it) puts them on this benchmark's clock (both CLOCK_MONOTONIC)."""
    import runpy

    with open(os.environ[_T0_ENV], "w") as f:
        f.write(repr(time.monotonic()))
    if os.environ.get(_WAITS_ENV):
        _install_wait_probes(os.environ[_WAITS_ENV])
    inner = os.path.join(HERE, "profile_broker.py")
    sys.argv = [inner, *sys.argv[1:]]
    runpy.run_path(inner, run_name="__main__")


def _tenths(acks: list[tuple[float, float]], dur: float) -> list[list[float]]:
    """Latencies (s) per tenth of the run by send time."""
    tenth = dur / 10
    out: list[list[float]] = [[] for _ in range(10)]
    for t, lat in acks:
        out[min(9, int(t / tenth))].append(lat)
    return out


def _overlapping(spans: list[tuple[float, float]], lo: float, hi: float):
    """The spans (sorted by start) that overlap [lo, hi): only those that start within the
    longest span's length before ``lo`` are looked at (a 10-minute run has a million spans
    and thousands of slow acks)."""
    index = _SPAN_INDEX.get(id(spans))
    if index is None or index[0] is not spans:
        starts = [a for a, _ in spans]
        index = _SPAN_INDEX[id(spans)] = (spans, starts, max((b - a for a, b in spans), default=0.0))
    _, starts, longest = index
    for i in range(bisect.bisect_left(starts, lo - longest), bisect.bisect_left(starts, hi)):
        a, b = spans[i]
        if b > lo:
            yield a, b


_SPAN_INDEX: dict[int, tuple] = {}


def _attribute(acks, events, t0_broker: float, t_start: float, lo: float, hi: float,
               slow_s: float) -> None:
    """Print what overlapped the acks sent in [lo, hi) (run seconds) slower than ``slow_s``."""
    shift = t0_broker - t_start  # broker event time + shift = run time
    spans: dict[str, list[tuple[float, float]]] = {}
    for start, step, dur in events:
        spans.setdefault(step, []).append((start + shift, start + shift + dur))
    for ss in spans.values():
        ss.sort()
    slow = [(t, lat) for t, lat in acks if lo <= t < hi and lat > slow_s]
    print(f"  worst tenth [{lo:.0f} s, {hi:.0f} s): {len(slow)} acks slower than {slow_s * 1e3:.1f} ms "
          f"(the first tenth's p99)")
    if not slow:
        return
    house = ("merge.merge_partition", "gc.collect_garbage")
    tags: dict[str, int] = {}
    for t, lat in slow:
        hit = [s.split(".")[0] for s in house
               if any(a < t + lat and b > t for a, b in spans.get(s, ()))]
        key = "+".join(hit) or "neither merge nor gc"
        tags[key] = tags.get(key, 0) + 1
    print("  overlapping housekeeping: " + ", ".join(f"{k} {v}" for k, v in sorted(tags.items())))
    _print_spells(acks, lo, hi, slow_s, spans)
    # Time per step inside the slow acks' windows (what the broker spent while they waited).
    busy: dict[str, float] = {}
    for step, ss in spans.items():
        for t, lat in slow:
            for a, b in _overlapping(ss, t, t + lat):
                busy[step] = busy.get(step, 0.0) + min(b, t + lat) - max(a, t)
    total = sum(lat for _, lat in slow)
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:10]
    print(f"  step time overlapping those acks (s, of {total:.2f} s of waiting): "
          + ", ".join(f"{k} {v:.2f}" for k, v in top))
    commits = [(a, b - a) for a, b in spans.get("Appender.commit", ()) if lo <= a < hi]
    if commits:
        ds = [d for _, d in commits]
        print(f"  produce commits in that tenth: {len(ds)}, p50 {statistics.median(ds) * 1e3:.1f} ms, "
              f"p99 {_percentile(ds, 0.99) * 1e3:.1f} ms, max {max(ds) * 1e3:.1f} ms")
        worst = sorted(commits, key=lambda c: -c[1])[:3]
        for a, d in worst:
            inside = sorted(((s, min(b, a + d) - max(x, a)) for s, ss in spans.items()
                             if s != "Appender.commit" for x, b in ss if x < a + d and b > a),
                            key=lambda kv: -kv[1])
            steps: dict[str, float] = {}
            for s, o in inside:
                steps[s] = steps.get(s, 0.0) + o
            print(f"    commit at {a:.1f} s took {d * 1e3:.0f} ms; overlapping: "
                  + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in
                              sorted(steps.items(), key=lambda kv: -kv[1])[:6]))


def _slow_spells(acks, lo: float, hi: float, slow_s: float, gap_s: float = 0.05) -> list:
    """The acks sent in [lo, hi) slower than ``slow_s``, grouped into spells (sends less than
    ``gap_s`` apart): (first send, last send, count, slowest latency, when the last was acked)."""
    spells: list[list[float]] = []
    for t, lat in sorted(acks):
        if not lo <= t < hi or lat <= slow_s:
            continue
        if spells and t - spells[-1][1] <= gap_s:
            s = spells[-1]
            s[1], s[2], s[3], s[4] = t, s[2] + 1, max(s[3], lat), max(s[4], t + lat)
        else:
            spells.append([t, t, 1, lat, t + lat])
    return [tuple(s) for s in spells]


def _print_spells(acks, lo: float, hi: float, slow_s: float, spans: dict | None = None,
                  most: int = 5) -> None:
    """When the slow acks of [lo, hi) were sent: the longest spells, to set beside the
    broker's log (first merge, first gc, lazy imports, the first commit), with the broker's
    steps (run seconds) that overlapped each spell."""
    spells = sorted(_slow_spells(acks, lo, hi, slow_s), key=lambda s: -s[2])[:most]
    for a, b, n, worst, done in sorted(spells):
        print(f"    spell: {n} slow acks sent {a:.3f}-{b:.3f} s, slowest {worst * 1e3:.0f} ms, "
              f"all acked by {done:.3f} s")
        steps: dict[str, float] = {}
        for step, ss in (spans or {}).items():
            for x, y in ss:
                if x < done and y > a:
                    steps[step] = steps.get(step, 0.0) + min(y, done) - max(x, a)
        if steps:
            print("      broker steps in it (s): " + ", ".join(
                f"{k} {v:.3f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1])[:8]))


class _Cover:
    """The union of some spans as disjoint intervals with running totals, so the seconds of
    any window they cover take two bisections (a 10-minute run has about a million storage
    calls and thousands of slow acks: walking the spans per ack took longer than the run)."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            elif b > a:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]
        self.before = [0.0]   # seconds covered before interval i
        for a, b in merged:
            self.before.append(self.before[-1] + b - a)

    def _upto(self, x: float) -> float:
        """Seconds covered before ``x``."""
        i = bisect.bisect_right(self.starts, x)
        if i == 0:
            return 0.0
        return self.before[i - 1] + min(x, self.ends[i - 1]) - self.starts[i - 1]

    def within(self, lo: float, hi: float) -> float:
        """Seconds of [lo, hi) covered by at least one span."""
        return max(0.0, self._upto(hi) - self._upto(lo)) if hi > lo else 0.0


_COVERS: dict[int, tuple[list, _Cover]] = {}


def _union_within(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi) covered by at least one of ``spans`` (the cover of a list is made
    once and kept while the list lives)."""
    hit = _COVERS.get(id(spans))
    if hit is None or hit[0] is not spans:
        hit = _COVERS[id(spans)] = (spans, _Cover(spans))
    return hit[1].within(lo, hi)


_GIL = "broker's other threads (GIL)"
_NO_CPU = "no CPU (late outside the broker too)"


def _waited_on(acks, waits: dict, t_start: float, lo: float, hi: float, slow_s: float) -> None:
    """Print, for the acks sent in [lo, hi) slower than ``slow_s``, what most of each one's
    wait was: a store call of the default lane in flight, the broker not running Python for it
    (the probe's late wake-ups: where the same probe outside the broker was late too, no
    CPU; else the GIL), or neither (queued behind earlier requests, sockets);
    and how much of it housekeeping's store calls were in flight."""
    by_lane: dict[str, list[tuple[float, float]]] = {"ack": [], "housekeeping": []}
    by_verb: dict[str, list[tuple[float, float]]] = {}
    for start, lane, verb, dur in waits["io"]:
        span = (start - t_start, start - t_start + dur)
        by_lane.setdefault(lane, []).append(span)
        if lane == "ack":
            by_verb.setdefault(verb, []).append(span)
    for spans in (*by_lane.values(), *by_verb.values()):
        spans.sort()
    inside = sorted((t - t_start + _PROBE_S, t - t_start + _PROBE_S + over)
                    for t, over, _ in waits["late"])
    outside = sorted((t - t_start + _PROBE_S, t - t_start + _PROBE_S + over)
                     for t, over in waits.get("outside", ()))
    both = sorted(inside + outside)
    slow = [(t, lat) for t, lat in acks if lo <= t < hi and lat > slow_s]
    if not slow:
        return
    kinds: dict[str, int] = {}
    verbs: dict[str, int] = {}
    share_hk = 0.0
    totals = {"default-lane store calls": 0.0, _GIL: 0.0, _NO_CPU: 0.0, "neither": 0.0}
    for t, lat in slow:
        io = _union_within(by_lane["ack"], t, t + lat)
        # Late inside the broker while a probe outside it was on time: the broker's own
        # threads kept the probe from the GIL. Late in both: the machine gave no CPU.
        no_cpu = _union_within(outside, t, t + lat)
        gil = _union_within(both, t, t + lat) - no_cpu
        parts = {"default-lane store calls": io, _GIL: gil, _NO_CPU: no_cpu,
                 "neither": max(0.0, lat - max(io, gil + no_cpu))}
        for k, v in parts.items():
            totals[k] += v
        kind = max(parts, key=parts.get)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "default-lane store calls":
            verb = max(by_verb, key=lambda v: _union_within(by_verb[v], t, t + lat))
            verbs[verb] = verbs.get(verb, 0) + 1
        share_hk += _union_within(by_lane["housekeeping"], t, t + lat) / lat
    print(f"  what each of those {len(slow)} acks waited on most: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
          + (" (longest store call: " + ", ".join(f"{k} {v}" for k, v in sorted(verbs.items()))
             + ")" if verbs else ""))
    print("  their waiting, summed (s): " + ", ".join(f"{k} {v:.2f}" for k, v in totals.items())
          + f"; housekeeping's store calls in flight during {share_hk / len(slow):.0%} of it")
    wide = [o for _, o, _ in waits["late"]]
    if wide:
        print(f"  broker late wake-ups over the run: {len(wide)}, p50 {statistics.median(wide) * 1e3:.1f} ms, "
              f"max {max(wide) * 1e3:.0f} ms")


def _tenth_traces(acks, waits: dict, t_start: float, dur: float, slow_s: float) -> None:
    """One line per tenth: how many acks were slower than ``slow_s`` (the aim's bound), what
    most of each one's wait was (as :func:`_waited_on`), the seconds of their waiting during
    which housekeeping's store calls of each verb were in flight, and the broker probe's
    longest late wake-up in the tenth split into GIL (late only inside the broker) and no
    CPU (late outside too)."""
    by_lane: dict[str, list[tuple[float, float]]] = {"ack": [], "housekeeping": []}
    hk_verbs: dict[str, list[tuple[float, float]]] = {}
    for start, lane, verb, d in waits["io"]:
        span = (start - t_start, start - t_start + d)
        by_lane.setdefault(lane, []).append(span)
        if lane != "ack":
            hk_verbs.setdefault(verb, []).append(span)
    for spans in (*by_lane.values(), *hk_verbs.values()):
        spans.sort()
    inside = sorted((t - t_start + _PROBE_S, t - t_start + _PROBE_S + o) for t, o, _ in waits["late"])
    outside = sorted((t - t_start + _PROBE_S, t - t_start + _PROBE_S + o)
                     for t, o in waits.get("outside", ()))
    both = sorted(inside + outside)
    print(f"  per tenth, acks slower than {slow_s * 1e3:g} ms and what they waited on most "
          "(store = a default-lane store call in flight; housekeeping verbs: seconds of their "
          "waiting with one in flight; probe: the broker's longest late wake-up)")
    tenth = dur / 10
    for k in range(10):
        lo, hi = k * tenth, (k + 1) * tenth
        slow = [(t, lat) for t, lat in acks if lo <= t < hi and lat > slow_s]
        kinds: dict[str, int] = {}
        verbs: dict[str, float] = {}
        for t, lat in slow:
            io = _union_within(by_lane["ack"], t, t + lat)
            no_cpu = _union_within(outside, t, t + lat)
            gil = _union_within(both, t, t + lat) - no_cpu
            parts = {"store": io, "GIL": gil, "no CPU": no_cpu,
                     "neither": max(0.0, lat - max(io, gil + no_cpu))}
            kind = max(parts, key=parts.get)
            kinds[kind] = kinds.get(kind, 0) + 1
            for v, spans in hk_verbs.items():
                verbs[v] = verbs.get(v, 0.0) + _union_within(spans, t, t + lat)
        late_in = [o for t, o, _ in waits["late"] if lo <= t - t_start < hi]
        late_out = [o for t, o in waits.get("outside", ()) if lo <= t - t_start < hi]
        waited = sum(lat for _, lat in slow)
        print(f"    tenth {k + 1:2d}: {len(slow):5d} slow ("
              + (", ".join(f"{n} {c}" for n, c in sorted(kinds.items(), key=lambda kv: -kv[1]))
                 or "none") + ")"
              + (f", {waited:.2f} s waited; housekeeping in flight: "
                 + (", ".join(f"{v} {s:.2f}" for v, s in sorted(verbs.items(), key=lambda kv: -kv[1]) if s > 0)
                    or "none") if slow else "")
              + f"; probe max {max(late_in, default=0) * 1e3:.0f} ms in, "
                f"{max(late_out, default=0) * 1e3:.0f} ms out")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--s3", action="store_true", help="root on moto's S3 server (default: file://)")
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    ap.add_argument("--gc-ms", type=int, default=6000,
                    help="gc interval and version grace in ms (short: gc runs all along)")
    ap.add_argument("--slow-ms", type=float, default=25.0,
                    help="per-tenth traces of the acks slower than this (default: the file:// aim)")
    ap.add_argument("--no-profile", action="store_true",
                    help="no timing of the broker's steps (bench/profile_broker.py)")
    args = ap.parse_args()

    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.dirname(HERE))
    from confluent_kafka import Producer

    from serve_proc import start_broker, stop_broker, wait_serving
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    tmp = tempfile.mkdtemp(prefix="bench-trickle-")
    moto = None
    env = dict(os.environ)
    if args.s3:
        from produce import start_moto

        moto = start_moto("trickle", own_process=True)
        env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})
        root = "s3://trickle/root"
    else:
        root = f"file://{tmp}/root"
    create_topic(Storage(root), "trickle", 1, {"segment.bytes": args.segment_bytes,
                                               "file.delete.delay.ms": args.gc_ms})
    env["KAFKASTORE_BENCH_GC_MS"] = str(args.gc_ms)
    env["KAFKASTORE_BENCH_BROKER_MAIN"] = os.path.join(HERE, "short_gc_broker.py")
    t0_file = os.path.join(tmp, "broker_t0")
    prof_file = os.path.join(tmp, "profile.json")
    if not args.no_profile:
        env["KAFKASTORE_BENCH_INNER_MAIN"] = os.path.abspath(__file__)
        env[_T0_ENV] = t0_file
        env["KAFKASTORE_PROFILE_OUT"] = prof_file
        env[_WAITS_ENV] = os.path.join(tmp, "waits.json")
    broker = start_broker(root, env=env)
    dur = args.minutes * 60
    try:
        port = wait_serving(broker)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0, "acks": "all",
                      "enable.idempotence": True, "log.connection.close": False})
        # One record acknowledged before the clock starts: the client's start is not the
        # broker's tail. librdkafka's idempotent producer asks for its producer id only on a
        # timer (500 ms) when its first look finds no broker connection up, so the first
        # records of a fresh producer wait about half a second on any Kafka.
        warm = time.perf_counter()
        p.produce("trickle", key=b"warm-up", value=b"w", partition=0)
        if p.flush(60):
            print("produce failed: the warm-up record was not acknowledged", file=sys.stderr)
            return 1
        warm_s = time.perf_counter() - warm
        sent: dict[int, float] = {}
        acks: list[tuple[float, float]] = []  # (send time since start, latency s)
        failed: list = []
        loads: list[tuple[float, float]] = []
        outside_late: list[tuple[float, float]] = []
        stop_probe = _start_outside_probe(outside_late)
        t_start = time.perf_counter()  # CLOCK_MONOTONIC on Linux, as the broker's time.monotonic

        def on_delivery(err, msg):
            now = time.perf_counter()
            if err is not None:
                failed.append(err)
                return
            t = sent.pop(int.from_bytes(msg.key(), "big"))
            acks.append((t - t_start, now - t))

        interval = args.interval_ms / 1000
        value = b"v" * 100
        i = 0
        next_at = t_start
        while (now := time.perf_counter()) - t_start < dur:
            if not loads or now - t_start - loads[-1][0] >= 1.0:
                loads.append((now - t_start, os.getloadavg()[0]))
            if now < next_at:
                p.poll(next_at - now)
                continue
            sent[i] = time.perf_counter()
            p.produce("trickle", key=i.to_bytes(8, "big"), value=value, partition=0,
                      on_delivery=on_delivery)
            i += 1
            next_at += interval
            p.poll(0)
        left = p.flush(120)
        stop_probe.set()
        del p
        if left or failed:
            print(f"produce failed: {left} undelivered, errors {failed[:3]}", file=sys.stderr)
            return 1
    finally:
        stop_broker(broker)
        if moto is not None:
            moto.stop()
    try:
        per = _tenths(acks, dur)
        p50 = [_percentile(x, 0.5) * 1e3 for x in per]
        p99 = [_percentile(x, 0.99) * 1e3 for x in per]
        load = [statistics.mean([v for t, v in loads if k * dur / 10 <= t < (k + 1) * dur / 10] or [float("nan")])
                for k in range(10)]
        print(f"trickle: root {root.split(':')[0]}://, {len(acks)} records acknowledged over "
              f"{dur:.0f} s (one every {args.interval_ms:g} ms, acks=all, idempotent, linger 0; "
              f"segment.bytes {args.segment_bytes}, gc interval and grace {args.gc_ms} ms; "
              f"a warm-up record before, acknowledged in {warm_s * 1e3:.0f} ms)")
        print(f"{'tenth':>5} {'acks':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99/first':>9} {'load1':>6}")
        for k in range(10):
            print(f"{k + 1:5d} {len(per[k]):6d} {p50[k]:8.1f} {p99[k]:8.1f} {p99[k] / p99[0]:9.2f} "
                  f"{load[k]:6.1f}")
        worst = max(range(10), key=lambda k: p99[k])
        print(f"worst tenth: {worst + 1} (p99 {p99[worst]:.1f} ms, {p99[worst] / p99[0]:.2f}x the "
              f"first's); max p99/first {max(p99) / p99[0]:.2f}")
        if not args.no_profile and os.path.exists(prof_file) and os.path.exists(t0_file):
            with open(prof_file) as f:
                events = json.load(f)["events"]
            with open(t0_file) as f:
                t0_broker = float(f.read())
            _attribute(acks, events, t0_broker, t_start, worst * dur / 10, (worst + 1) * dur / 10,
                       p99[0] / 1e3)
        waits_file = env.get(_WAITS_ENV)
        if waits_file and os.path.exists(waits_file):
            with open(waits_file) as f:
                waits = json.load(f)
            waits["outside"] = outside_late
            _tenth_traces(acks, waits, t_start, dur, args.slow_ms / 1e3)
            for k in sorted({0, worst}):
                print(f"  tenth {k + 1}:" if k != worst else f"  worst tenth {k + 1}:")
                if k != worst:
                    _print_spells(acks, k * dur / 10, (k + 1) * dur / 10, p99[0] / 1e3)
                _waited_on(acks, waits, t_start, k * dur / 10, (k + 1) * dur / 10, p99[0] / 1e3)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if os.environ.get(_T0_ENV) and os.environ.get("KAFKASTORE_BENCH_INNER_MAIN") == os.path.abspath(__file__) \
            and "serve" in sys.argv:
        _broker_wrapper()
    else:
        sys.exit(main())
