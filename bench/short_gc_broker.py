"""Run ``kafkastore serve`` with gc's interval and grace shortened, for bench/soak_serve.py.

    KAFKASTORE_BENCH_GC_MS=6000 python bench/short_gc_broker.py --root ROOT serve ...

bench/serve_proc.py starts the broker through this script when soak_serve runs with
``--gc-ms`` (its default): the housekeeper's gc interval and the manifest store's version
grace (``ManifestStore.min_keep_ms``) become ``KAFKASTORE_BENCH_GC_MS``, so gc's steady
cost (its deletes and version expiry) falls in the soak's first window as well as the last,
instead of starting in the third minute (60 s interval + 60 s grace). The topic's
``file.delete.delay.ms`` is set by soak_serve itself. ``KAFKASTORE_BENCH_INNER_MAIN`` names
another wrapper to run after this one (bench/profile_broker.py, say); else the CLI runs.
"""
from __future__ import annotations

import functools
import os
import runpy
import sys


def shorten_gc(gc_ms: int) -> None:
    """gc's interval and the version grace become ``gc_ms`` for every :class:`Housekeeper`
    made from now on in this process (the soaks' one place for both knobs)."""
    from kafkastore.manifest import ManifestStore
    from kafkastore.maintenance.housekeeper import Housekeeper

    ManifestStore.min_keep_ms = gc_ms
    init = getattr(Housekeeper, "_init_before_short_gc", Housekeeper.__init__)

    @functools.wraps(init)
    def short_gc(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.gc_interval_ms = gc_ms

    Housekeeper._init_before_short_gc = init
    Housekeeper.__init__ = short_gc


def main() -> None:
    shorten_gc(int(os.environ["KAFKASTORE_BENCH_GC_MS"]))
    inner = os.environ.get("KAFKASTORE_BENCH_INNER_MAIN")
    if inner:
        sys.argv = [inner, *sys.argv[1:]]
        runpy.run_path(inner, run_name="__main__")
    else:
        sys.argv = ["kafkastore", *sys.argv[1:]]
        runpy.run_module("kafkastore.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
