"""The one progress line of every job that writes records: the load's (the driver's
:class:`pipelines.jobs.write_engine.Progress`), a write into topics' tasks and its commit
(:mod:`pipelines.sink.commit`). Plain formatting, no Spark: executors import it."""
from __future__ import annotations

from typing import Mapping

__all__ = ["progress_line"]


def progress_line(label: str, seconds: float, records: Mapping[str, int], *,
                  tasks: tuple[int, int] | None = None,
                  sizes: Mapping[str, int] | None = None, extra: str = "") -> str:
    """``label: Ns[, tasks d/t], R records (rate/s)[extra] name=count ...``: the records
    written so far per partition (``records``, in the order given) and their rate; with
    ``sizes`` each partition also shows its bytes (``name=count/bytesB``)."""
    rows = sum(records.values())
    secs = max(seconds, 1e-9)
    head = f"{label}: {secs:.0f}s" + (f", tasks {tasks[0]}/{tasks[1]}" if tasks else "")
    if sizes is not None:
        extra = f", {sum(sizes.values())} bytes{extra}"
    per = " ".join(f"{name}={n}" + (f"/{sizes.get(name, 0)}B" if sizes is not None else "")
                   for name, n in records.items())
    return f"{head}, {rows} records ({rows / secs:,.0f}/s){extra}{' ' + per if per else ''}"
