"""The benchmarks' counting filesystem (bench/counting_fs.py) for tests that count store
requests: bench/ is not a package, so it is loaded from its file once per session."""
from __future__ import annotations

import importlib.util
import os
import sys

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
