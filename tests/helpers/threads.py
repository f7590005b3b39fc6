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
