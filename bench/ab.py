"""Run one benchmark in two source trees, alternating (A B A B ...), in one session.

Each tree is a git worktree with its C extensions built in place; a run is
`PYTHONPATH=<tree> <python> <tree>/bench/<name>.py ARGS`, so each tree's benchmark
measures its own code with its own in-run baseline. Every run's output goes to
`<logs>/<name>-<tag>-<label>-<round>.log`, and the summary line of each run gives
its wall seconds, the CPU seconds of the run's process tree (reaped children) and
the 1-minute load average before and after, since other jobs share the machine.

    python bench/ab.py --trees old=/tmp/ab_old new=/tmp/ab_new --rounds 2 \
        --grep 'ratio|/' decode -- --records 200000 --repeat 3

Compare the ratio each run prints against its own baseline, not wall times across
runs: the load moves between runs. ``--side-by-side`` starts every tree's run of a round
at the same time instead (for long runs whose figures follow the machine's load, such
as soak_serve: both trees then see the same load); each run's CPU is then its own
process tree's, from ``wait4``.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time


def run_once(tree: str, name: str, args: list[str], log_path: str, timeout: float) -> dict:
    """Run bench/<name>.py of `tree` once; return wall, CPU (children) and load figures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = tree
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                [sys.executable, os.path.join(tree, "bench", name + ".py"), *args],
                cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"code": code, "wall": wall, "cpu": cpu,
            "load": (load_before, os.getloadavg()[0])}


def run_side_by_side(runs: list[tuple[str, str]], name: str, args: list[str],
                     timeout: float) -> list[dict]:
    """Start bench/<name>.py of every (tree, log path) in `runs` at once; wait for all.

    Each run's CPU is its own process tree's (its reaped children included), read with
    `os.wait4` on its pid, so runs that overlap do not share one RUSAGE_CHILDREN."""
    venv_bin = os.path.dirname(sys.executable)
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    procs = []
    for tree, log_path in runs:
        env = dict(os.environ)
        env["PYTHONPATH"] = tree
        env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        log = open(log_path, "w")
        procs.append((subprocess.Popen(
            [sys.executable, os.path.join(tree, "bench", name + ".py"), *args],
            cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    results: dict[int, dict] = {}
    deadline = start + timeout
    while len(results) < len(procs):
        for proc, log in procs:
            if proc.pid in results:
                continue
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == 0 and time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                status = None
            if pid:
                proc.returncode = 0  # reaped here: keep Popen from waiting on it again
                log.close()
                code = os.waitstatus_to_exitcode(status) if status is not None else "timeout"
                results[proc.pid] = {"code": code, "wall": time.monotonic() - start,
                                     "cpu": usage.ru_utime + usage.ru_stime,
                                     "load": (load_before, os.getloadavg()[0])}
        time.sleep(0.5)
    return [results[proc.pid] for proc, _log in procs]


def matching_lines(path: str, pattern: str | None) -> list[str]:
    """The lines of a run's log that match `pattern` (the lines that carry its ratios)."""
    if not pattern:
        return []
    rx = re.compile(pattern)
    with open(path, errors="replace") as f:
        return [line.rstrip() for line in f if rx.search(line)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trees", nargs="+", required=True, help="LABEL=PATH, in run order")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--logs", default="/tmp/ab_logs")
    p.add_argument("--tag", default="", help="added to the log names (several argument sets)")
    p.add_argument("--grep", default=None, help="regex: print these lines of each log")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--side-by-side", action="store_true",
                   help="start every tree's run of a round at the same time")
    p.add_argument("name", help="bench/<name>.py")
    p.add_argument("args", nargs=argparse.REMAINDER, help="after --: the benchmark's arguments")
    opts = p.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    trees = [t.split("=", 1) for t in opts.trees]
    os.makedirs(opts.logs, exist_ok=True)
    tag = "-" + opts.tag if opts.tag else ""
    for rnd in range(1, opts.rounds + 1):
        logs = [os.path.join(opts.logs, f"{opts.name}{tag}-{label}-{rnd}.log") for label, _ in trees]
        if opts.side_by_side:
            together = run_side_by_side([(tree, log) for (_, tree), log in zip(trees, logs)],
                                        opts.name, args, opts.timeout)
        for i, (label, tree) in enumerate(trees):
            log_path = logs[i]
            if opts.side_by_side:
                r = together[i]
            else:
                r = run_once(tree, opts.name, args, log_path, opts.timeout)
            print(f"== {opts.name}{tag} {label} round {rnd}: exit {r['code']} "
                  f"wall {r['wall']:.1f}s cpu {r['cpu']:.1f}s "
                  f"load {r['load'][0]:.1f}->{r['load'][1]:.1f}  ({log_path})", flush=True)
            for line in matching_lines(log_path, opts.grep):
                print("   " + line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
