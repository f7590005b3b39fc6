"""The benchmarks' counting filesystem (bench/counting_fs.py) for tests that count store
requests: bench/ is not a package, so it is loaded from its file once per session."""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections import Counter

_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "counting_fs.py")


def counting_module():
    """bench/counting_fs.py as a module (loaded once)."""
    mod = sys.modules.get("bench_counting_fs")
    if mod is None:
        spec = importlib.util.spec_from_file_location("bench_counting_fs", _BENCH)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_counting_fs"] = mod  # its dataclasses look their module up
        spec.loader.exec_module(mod)
    return mod


def counting_fs(inner, **kw):
    """``inner`` (an fsspec filesystem) wrapped to count, and optionally delay, requests."""
    return counting_module().CountingFS(inner, **kw)


def count_under(fs, under: str):
    """A ``collections.Counter`` of the requests (per kind: read, stat, list, write, delete)
    that ``fs`` (a :func:`counting_fs`) serves for paths holding ``under`` from now on, kept
    up to date as they are served (e.g. ``"/mytopic/"``: one topic's requests, not the
    broker's own documents and registration)."""
    seen: Counter = Counter()
    lock = threading.Lock()   # the broker's I/O threads serve requests side by side
    count = fs._count

    def counted(op, nbytes=0, path=""):
        if under in str(path):
            with lock:
                seen[op] += 1
        return count(op, nbytes, path)

    fs._count = counted
    return seen
