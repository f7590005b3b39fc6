"""Profile ``kafkastore serve`` from inside its own process, for bench/soak_serve.py.

    KAFKASTORE_BENCH_BROKER_MAIN=bench/profile_broker.py ./run bench soak_serve --seconds 180

bench/serve_proc.py then starts the broker through this script, which times
each step of the produce commit and of the housekeeping (merge, gc) it
wraps, samples every thread's CPU seconds from ``/proc/self/task`` once a
second, and at exit prints, for the first and the last ``WINDOW`` seconds of
commits (env ``KAFKASTORE_PROFILE_WINDOW``, default 60): calls, p50 and total
seconds of each step, CPU seconds per thread, and the p50 of produce commits
that overlapped a merge job, a gc run or neither. ``KAFKASTORE_PROFILE_OUT``
names a JSON file for the raw events. Timing wrappers cost a few microseconds
per call: compare windows with each other, not with an unprofiled run.

``KAFKASTORE_PROFILE_CPROFILE=<file>`` also runs cProfile in every thread, timed by that
thread's own CPU clock (``time.thread_time``: a blocked wait costs nothing), from the
broker's first SIGUSR1 on (``bench/serve.py --transactions`` sends one before its first
transactional round), and writes the merged pstats to ``<file>`` at exit:

    KAFKASTORE_BENCH_BROKER_MAIN=bench/profile_broker.py KAFKASTORE_PROFILE_CPROFILE=/tmp/txn.prof \
        .venv/bin/python bench/serve.py --transactions --records 50000 --partitions 4 --rounds 1
    .venv/bin/python -c "import pstats; pstats.Stats('/tmp/txn.prof').sort_stats('cumtime').print_stats(40)"

A call that began before the signal counts only the CPU after it.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import runpy
import statistics
import sys
import threading
import time

_T0 = time.monotonic()
_EVENTS: list[tuple[float, str, float]] = []  # (start, step, seconds); list.append is atomic
_CPU: list[tuple[float, dict[str, float]]] = []  # (time, {thread name: cpu seconds})
_WINDOW = float(os.environ.get("KAFKASTORE_PROFILE_WINDOW", "60"))
_COMMIT = "Appender.commit"
_MERGE = "merge.merge_partition"
_GC = "gc.collect_garbage"


def _wrap(owner, name: str, label: str) -> None:
    orig = getattr(owner, name, None)
    if orig is None:  # renamed by a refactor: profile the rest
        print(f"profile_broker: {label} not found, not timed", file=sys.stderr)
        return

    @functools.wraps(orig)
    def timed(*args, **kwargs):
        started = time.monotonic()
        try:
            return orig(*args, **kwargs)
        finally:
            _EVENTS.append((started - _T0, label, time.monotonic() - started))

    setattr(owner, name, timed)


def _instrument() -> None:
    import kafkastore.maintenance.gc as gc
    import kafkastore.manifest as manifest
    import kafkastore.maintenance.merge as merge
    import kafkastore.maintenance.housekeeper as housekeeper
    import kafkastore.storage as storage
    from kafkastore.protocol import appender

    for name in ("put", "put_many", "put_if_absent", "get", "list", "exists", "delete"):
        _wrap(storage.Storage, name, f"Storage.{name}")
    for name in ("commit", "latest", "_encode", "_check_uploads", "expire_versions",
                 "referenced_files"):
        _wrap(manifest.ManifestStore, name, f"ManifestStore.{name}")
    _wrap(manifest, "apply", "manifest.apply")
    for name in ("merge_partition", "build_merged", "plan_for", "rebuild_indexes",
                 "put_segment_objects"):
        _wrap(merge, name, f"merge.{name}")
    _wrap(housekeeper.Housekeeper, "poke", "Housekeeper.poke")
    _wrap(gc, "collect_garbage", _GC)
    _wrap(appender.Appender, "commit", _COMMIT)
    _wrap(appender, "decoded_min_timestamp", "appender.decoded_min_timestamp")


def _thread_cpu() -> dict[str, float]:
    hz = os.sysconf("SC_CLK_TCK")
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = names.get(tid, stat[stat.index("(") + 1:stat.rindex(")")])
        name = name.rsplit("_", 1)[0] if name.startswith("kafkastore-") else name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / hz
    return out


def _sample() -> None:
    while True:
        _CPU.append((time.monotonic() - _T0, _thread_cpu()))
        time.sleep(1.0)


def _overlaps(t0: float, t1: float, spans: list[tuple[float, float]]) -> bool:
    return any(a < t1 and b > t0 for a, b in spans)


def _report() -> None:
    events = list(_EVENTS)
    out = os.environ.get("KAFKASTORE_PROFILE_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"events": events, "cpu": _CPU}, f)
    commits = [e for e in events if e[1] == _COMMIT]
    if len(commits) < 2:
        return
    start, end = commits[0][0], commits[-1][0]
    window = min(_WINDOW, (end - start) / 3)
    windows = {"first": (start, start + window), "last": (end - window, end)}
    p = lambda *a: print(*a, file=sys.stderr)  # noqa: E731
    p(f"profile_broker: steps in the first and the last {window:.0f} s of produce commits")
    p(f"{'step':34s} {'calls':>7s} {'calls':>7s} {'p50 ms':>8s} {'p50 ms':>8s} {'total s':>8s} {'total s':>8s}")
    for step in sorted({e[1] for e in events}):
        cols = []
        for a, b in windows.values():
            ds = [d for t, s, d in events if s == step and a <= t < b]
            cols.append((len(ds), statistics.median(ds) * 1e3 if ds else float("nan"), sum(ds)))
        (n0, m0, s0), (n1, m1, s1) = cols
        p(f"{step:34s} {n0:7d} {n1:7d} {m0:8.2f} {m1:8.2f} {s0:8.2f} {s1:8.2f}")
    for label, (a, b) in windows.items():
        inside = [c for c in _CPU if a - 1 <= c[0] <= b + 1]
        if len(inside) >= 2:
            first, last = inside[0][1], inside[-1][1]
            used = {k: last[k] - first.get(k, 0.0) for k in last}
            top = sorted(used.items(), key=lambda kv: -kv[1])[:8]
            p(f"CPU s per thread, {label} window: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    spans = {k: [(t, t + d) for t, s, d in events if s == k] for k in (_MERGE, _GC)}
    for label, (a, b) in windows.items():
        groups: dict[str, list[float]] = {}
        for t, _, d in commits:
            if a <= t < b:
                tags = [k.split(".")[-1] for k, v in spans.items() if _overlaps(t, t + d, v)]
                groups.setdefault("+".join(tags) or "alone", []).append(d * 1e3)
        p(f"produce commit p50, {label} window: " + ", ".join(
            f"{k} {statistics.median(v):.2f} ms (n={len(v)})" for k, v in sorted(groups.items())))


def _cprofile_threads(out: str) -> None:
    """cProfile in every thread by thread CPU time, counted from the first SIGUSR1; merged
    pstats to ``out`` at exit (see the module docstring)."""
    import cProfile
    import pstats
    import signal

    on, base, profiles = [False], {}, []

    def cpu() -> float:   # each thread's CPU seconds since it first ran after the signal
        if not on[0]:
            return 0.0
        now = time.thread_time()
        return now - base.setdefault(threading.get_ident(), now)

    run = threading.Thread.run

    def profiled(self) -> None:
        prof = cProfile.Profile(cpu)
        profiles.append(prof)
        prof.enable()
        try:
            run(self)
        finally:
            prof.disable()

    def dump() -> None:
        for prof in profiles:
            prof.disable()
        stats = [p for p in profiles if p.getstats()]
        if stats:
            merged = pstats.Stats(stats[0])
            for prof in stats[1:]:
                merged.add(prof)
            merged.dump_stats(out)

    threading.Thread.run = profiled
    signal.signal(signal.SIGUSR1, lambda *_: on.__setitem__(0, True))
    main_thread = cProfile.Profile(cpu)
    profiles.append(main_thread)
    atexit.register(dump)
    main_thread.enable()


def main() -> None:
    if os.environ.get("KAFKASTORE_PROFILE_CPROFILE"):
        _cprofile_threads(os.environ["KAFKASTORE_PROFILE_CPROFILE"])
    _instrument()
    threading.Thread(target=_sample, name="profile-cpu", daemon=True).start()
    atexit.register(_report)
    sys.argv = ["kafkastore", *sys.argv[1:]]
    runpy.run_module("kafkastore.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
