"""CPU seconds of this process and every process it started (the JVM, Spark's Python
daemon and workers), for benchmarks on a shared machine.

Wall times there follow the other jobs' load (a run at load 30 gets about a fifteenth
of a core); CPU seconds spent by the benchmark's own processes do not, so a ratio of
CPU seconds inside one run compares the work two ways of doing the same thing cost.
"""
from __future__ import annotations


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads), its live descendants,
    and the children each of them has reaped (Spark's Python workers that ended)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me] + me.children(recursive=True):
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue   # ended since the listing: its time is in its parent's reaped children
        total += t.user + t.system + t.children_user + t.children_system
    return total
