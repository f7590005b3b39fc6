"""Stress helpers: functions run over and over on threads side by side."""
from __future__ import annotations

import threading
import traceback
from typing import Callable


def run_side_by_side(fns: list[Callable[[], object]], seconds: float) -> None:
    """Call each of ``fns`` in a loop on a thread of its own for ``seconds``, or until one
    raises; then fail with the first error's traceback, if any."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop(fn):
        def run():
            try:
                while not stop.is_set():
                    fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                stop.set()
        return threading.Thread(target=run)

    threads = [loop(fn) for fn in fns]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    assert errors == [], "".join(traceback.format_exception(errors[0]))


def run_at_once(fn: Callable[[int], object], n: int) -> list:
    """Call ``fn(0)`` ... ``fn(n - 1)`` once each on ``n`` threads released together (a barrier,
    so the calls race); their results in that order. Fails with the first error's traceback."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], "".join(traceback.format_exception(errors[0]))
    return results
