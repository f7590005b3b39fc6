"""Benchmark: does a merge's walk of its merged log let another thread have the GIL?

    ./run bench merge_walk [--walks 6] [--switch-interval 1.0] [--mib 1]

Builds a log of one-record batches (``--mib`` MiB), then walks it, as a merge does, on one
thread while another thread sleeps 1 ms at a time (the ack path's shape: short GIL holds
between waits): the old way (``rebuild_indexes`` over the whole log in one call) and the new
way (``merge.scan_steps`` with ``threads.between_steps`` between steps, in the housekeeping
lane), in turns. Prints, per way, the walk's CPU ms (p50) and how many times the sleeper woke
inside each walk's window. ``--switch-interval`` sets ``sys.setswitchinterval`` (1.0 turns
the interpreter's forced switching off, so only a voluntary hand-over lets the sleeper in);
a count, not a time, so the machine's load does not decide it. No assertion is made.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkastore import threads  # noqa: E402
from kafkastore.format.record_batch import Record, encode_batch  # noqa: E402
from kafkastore.format.segment_build import rebuild_indexes  # noqa: E402
from kafkastore.maintenance.merge import scan_steps  # noqa: E402


def one_record_log(mib: float) -> bytes:
    parts, size, off = [], 0, 0
    while size < mib * (1 << 20):
        parts.append(encode_batch([Record(off, 1_700_000_000_000 + off, off.to_bytes(8, "big"),
                                          b"v" * 100)]))
        size += len(parts[-1])
        off += 1
    return b"".join(parts)


def whole(log: bytes) -> None:
    rebuild_indexes(log, 0, 4096)


def stepped(log: bytes) -> None:
    with threads.in_lane(threads.HOUSEKEEPING):
        batches: list = []
        for step in scan_steps(log, 0, "walk"):
            batches.extend(step)
            threads.between_steps()
        rebuild_indexes(log, 0, 4096, batches=batches)


def trial(walk, log: bytes) -> tuple[int, float]:
    """(sleeper wake-ups inside the walk, the walk's CPU seconds)."""
    stop = threading.Event()
    wakes: list[float] = []

    def sleeper():
        while not stop.is_set():
            time.sleep(0.001)
            wakes.append(time.perf_counter())

    th = threading.Thread(target=sleeper)
    th.start()
    time.sleep(0.01)
    cpu, w0 = time.thread_time(), time.perf_counter()
    walk(log)
    w1, cpu = time.perf_counter(), time.thread_time() - cpu
    stop.set()
    th.join()
    return sum(1 for x in wakes if w0 < x < w1), cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--walks", type=int, default=6)
    ap.add_argument("--switch-interval", type=float, default=None)
    ap.add_argument("--mib", type=float, default=1.0)
    args = ap.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    log = one_record_log(args.mib)
    res: dict[str, list[tuple[int, float]]] = {"whole": [], "stepped": []}
    for i in range(args.walks):
        order = (("whole", whole), ("stepped", stepped))
        for name, walk in order if i % 2 == 0 else order[::-1]:
            res[name].append(trial(walk, log))
    print(f"merge walk of {len(log)} bytes of one-record batches, switch interval "
          f"{sys.getswitchinterval():g} s, load1 {os.getloadavg()[0]:.1f}")
    for name, rs in res.items():
        print(f"  {name:8s} walk CPU ms p50 {statistics.median(c for _, c in rs) * 1e3:.1f}; "
              f"sleeper wake-ups inside each walk: {[n for n, _ in rs]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
