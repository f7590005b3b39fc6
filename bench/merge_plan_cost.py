"""Benchmark: what merging costs per commit under a merge policy, counted (no clock, no load).

    .venv/bin/python bench/merge_plan_cost.py [--commits 20000] [--first-fan-in 4 8 16]

Replays a partition's history as the housekeeper sees it, with the pure planner
(:func:`kafkastore.maintenance.merge.plan_merge`): every commit adds one segment; after each,
when the plan is not empty, one merge job merges up to ``Housekeeper.max_runs_per_job`` of
its runs and commits them once. Two shapes of history:

* ``trickle``: one small segment per commit (bench/trickle.py: a produce commit of one or two
  170-byte records, ``segment.bytes`` 1 MiB);
* ``txn``: the segments a transaction of 1,000 records over 4 partitions leaves on one of
  them (bench/serve.py --transactions: a data segment of about 250 records and a marker
  segment, the default ``segment.bytes`` of 1 GiB).

Prints, per policy (the fan-in of generation 0; later generations keep the default), per
1,000 commits: merge jobs (each a manifest commit that takes the partition's commit turn
from the ack path, and one more version for expiry to delete), runs, segments read, objects
uploaded (.log, .index, .timeindex of each run's output), files gc deletes afterwards (the
inputs'), bytes rewritten per byte written, and the live segments (mean, max). Each of these
is a store request, an fsync or a Python step of the broker; the counts do not depend on the
machine's load, so policies compare exactly.

``--cpu N``: the same for real, on a file:// root, N commits of the ``txn`` shape per
policy (a writer without housekeeping; after each commit, a merge job as the housekeeper's
when the plan is not empty), policies in turns for ``--rounds``: CPU seconds (this process,
all threads) spent in merge jobs per 1,000 commits, with the load average.
"""
from __future__ import annotations

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore.manifest import SegmentEntry  # noqa: E402
from kafkastore.maintenance.housekeeper import Housekeeper  # noqa: E402
from kafkastore.maintenance.merge import (DEFAULT_FAN_IN, DEFAULT_MIN_SEGMENTS,  # noqa: E402
                                          merged_segment_id, plan_merge)

#: A writer's segment shorter than index.interval.bytes (4 KiB) goes up as its .log alone.
_INDEX_INTERVAL = 4096


def _segment(base: int, count: int, size: int, gen: int, n: int) -> SegmentEntry:
    sid = merged_segment_id(gen) if gen else f"{n:016x}"
    return SegmentEntry(base_offset=base, next_offset=base + count, record_count=count,
                        size=size, min_timestamp=1000, max_timestamp=1000, segment_id=sid,
                        writer_id=0, leader_epoch=0, checksum=0)


def _files(seg: SegmentEntry, gen: int) -> int:
    return 1 if gen == 0 and seg.size < _INDEX_INTERVAL else 3


def replay(sizes: list[int], segment_bytes: int, first_fan_in: int) -> dict:
    """Counts of one history under one policy (see the module docstring)."""
    segs: list[tuple[SegmentEntry, int]] = []   # (entry, generation)
    base = 0
    c = dict(jobs=0, runs=0, reads=0, uploads=0, deletes=0, rewritten=0, live=0, live_max=0)
    cap = Housekeeper.max_runs_per_job
    for n, size in enumerate(sizes):
        segs.append((_segment(base, 1, size, 0, n), 0))
        base += 1
        while True:
            runs = plan_merge([s for s, _ in segs], segment_bytes, fan_in=DEFAULT_FAN_IN,
                              min_segments=DEFAULT_MIN_SEGMENTS, first_fan_in=first_fan_in)[:cap]
            if not runs:
                break
            c["jobs"] += 1
            for run in reversed(runs):
                i = next(k for k, (s, _) in enumerate(segs) if s is run.segments[0])
                j = i + len(run.segments)
                c["runs"] += 1
                c["reads"] += len(run.segments)
                c["uploads"] += 3
                c["deletes"] += sum(_files(s, g) for s, g in segs[i:j])
                c["rewritten"] += run.size
                merged = _segment(run.segments[0].base_offset,
                                  run.segments[-1].next_offset - run.segments[0].base_offset,
                                  run.size, run.generation, 0)
                segs[i:j] = [(merged, run.generation)]
            if len(runs) < cap:
                break   # the job merged everything planned; the next commit pokes again
        c["live"] += len(segs)
        c["live_max"] = max(c["live_max"], len(segs))
    k = len(sizes) / 1000
    return {"jobs": c["jobs"] / k, "runs": c["runs"] / k, "reads": c["reads"] / k,
            "uploads": c["uploads"] / k, "deletes": c["deletes"] / k,
            "rewrites per byte": c["rewritten"] / sum(sizes), "live mean": c["live"] / len(sizes),
            "live max": c["live_max"]}


def cpu_replay(commits: int, first_fan_in: int, tmp: str) -> tuple[float, int]:
    """CPU seconds of the merge jobs over ``commits`` commits of the txn shape, and the jobs."""
    import time

    from kafkastore.maintenance.merge import merge_partition, plan_for
    from kafkastore.manifest import ManifestStore
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic, load_topic
    from kafkastore.write.log_writer import LogWriter

    storage = Storage(f"file://{tmp}/root-{first_fan_in}-{time.monotonic_ns()}")
    create_topic(storage, "t", 1)
    config = load_topic(storage, "t").config
    writer = LogWriter(storage, housekeeping=False)
    store = ManifestStore(storage, "t", 0)
    cpu, jobs = 0.0, 0
    big = [b"v" * 100] * 250
    for n in range(commits):
        if n % 2 == 0:
            writer.send_many("t", big, partition=0)
        else:
            writer.send("t", b"m", partition=0)
        writer.flush()
        if plan_for(store.latest(), config, fan_in=DEFAULT_FAN_IN, first_fan_in=first_fan_in):
            t = time.process_time()
            merge_partition(storage, "t", 0, config=config, fan_in=DEFAULT_FAN_IN,
                            max_runs=Housekeeper.max_runs_per_job, writer="housekeeping",
                            first_fan_in=first_fan_in)
            cpu += time.process_time() - t
            jobs += 1
    writer.close()
    return cpu, jobs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=20_000)
    ap.add_argument("--first-fan-in", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu", type=int, default=0, help="commits per policy on a file:// root")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.cpu:
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="bench-merge-cost-")
        try:
            for r in range(args.rounds):
                line = []
                for f in args.first_fan_in:
                    cpu, jobs = cpu_replay(args.cpu, f, tmp)
                    line.append(f"first fan-in {f}: {cpu / args.cpu * 1000:.2f} CPU s per 1,000 "
                                f"commits ({jobs} jobs)")
                print(f"round {r + 1}: " + "; ".join(line) + f"; load {os.getloadavg()[0]:.1f}",
                      flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    rng = random.Random(args.seed)
    shapes = {
        # one or two 170-byte records per produce commit
        "trickle": ([rng.choice((170, 170, 340)) for _ in range(args.commits)], 1 << 20),
        # per transaction on one partition: ~250 records of 100 bytes, then a marker batch
        "txn": ([rng.randint(24_000, 28_000) if n % 2 == 0 else 78 for n in range(args.commits)],
                1 << 30),
    }
    for shape, (sizes, segment_bytes) in shapes.items():
        print(f"{shape}: {args.commits} commits, segment.bytes {segment_bytes}, "
              f"fan-in {DEFAULT_FAN_IN} above generation 0; per 1,000 commits:")
        cols = ["jobs", "runs", "reads", "uploads", "deletes", "rewrites per byte",
                "live mean", "live max"]
        print(f"  {'first fan-in':>12} " + " ".join(f"{c:>17}" for c in cols))
        baseline = None
        for f in args.first_fan_in:
            r = replay(sizes, segment_bytes, f)
            baseline = baseline or r
            print(f"  {f:>12} " + " ".join(
                f"{r[c]:>9.2f} ({r[c] / baseline[c]:4.2f}x)" if baseline[c] else f"{r[c]:>17.2f}"
                for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
