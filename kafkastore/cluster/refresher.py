"""Keeping a copy of a shared document younger than a bound, whatever the store's latency.

A broker decides ACLs, SCRAM logins and client quotas on copies of cluster documents
(:mod:`kafkastore.cluster.documents`) that must never be older than a bound (2 s) when a
decision is made. A copy's age is counted from the moment the read that produced it
*started*, so a read that takes ``L`` seconds and is started every ``P`` seconds after the
previous one ended leaves copies up to ``P + L`` old, more than the bound as soon as the
store is slow (a second a request on S3 under load). A request that finds the copy too old
waits for a read of its own, so on a slow store every request waited.

:class:`Refresher` starts reads on a schedule of their own, whether or not the previous
read has ended (reads overlap the copy's life): the next read starts ``period`` after the
previous one *started*, where ``period = bound - margin - latency`` (clamped to
``[bound / 8, bound / 2]``) and ``latency`` is the longest of the last few reads, or the
age of the oldest read still in flight if that is longer. A copy is then at most
``period + latency`` old when its successor lands, under the bound while the store answers
within about ``bound - margin - bound / 8``. At most ``max_in_flight`` reads run at once.

The refresher never vouches for a copy by itself: a read that fails leaves the copy as old
as it was, so decisions that need it wait for a fresh read and fail closed when none comes
(the callers' rule, :mod:`kafkastore.protocol.fencing`).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..clock import Clock

log = logging.getLogger("kafkastore.cluster.refresher")

#: Reads whose durations make the latency estimate.
LATENCY_SAMPLES = 4


class Refresher:
    """Runs ``read`` (a blocking read and apply of one document; raises on failure) so that
    a new read starts at least every :meth:`period` seconds, on threads of its own.

    :meth:`step` is the whole schedule (it starts a read when one is due and says how long
    until the next is); :meth:`start` runs it on a thread until :meth:`stop`.
    """

    def __init__(self, name: str, read: Callable[[], object], bound_s: float, *, clock: Clock,
                 max_in_flight: int = 4, margin_s: float | None = None):
        self.name = name
        self.bound_s = bound_s
        self.margin_s = bound_s / 4 if margin_s is None else margin_s
        self.max_in_flight = max_in_flight
        self._read = read
        self._clock = clock
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._in_flight: dict[int, float] = {}   # read number -> when it started
        self._started = 0
        self._last_start: float | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        #: Reads that ended in an error (the copy kept its age).
        self.failures = 0
        #: Reads that ended well.
        self.reads = 0

    def __repr__(self) -> str:
        return f"Refresher({self.name!r}, bound {self.bound_s:g} s)"

    # -- the schedule --------------------------------------------------------------------------
    def latency_s(self, now: float) -> float:
        """The read latency to plan for: the longest recent read, or the oldest read still in
        flight if it has taken longer already."""
        with self._lock:
            longest = max(self._latencies, default=0.0)
            if self._in_flight:
                longest = max(longest, now - min(self._in_flight.values()))
        return longest

    def period(self, now: float) -> float:
        """Seconds between the starts of two reads."""
        wanted = self.bound_s - self.margin_s - self.latency_s(now)
        return min(self.bound_s / 2, max(self.bound_s / 8, wanted))

    def in_flight(self) -> int:
        """Reads started and not ended."""
        with self._lock:
            return len(self._in_flight)

    def step(self, now: float, submit: Callable | None = None) -> float:
        """Start a read if one is due at ``now`` (through ``submit``, default the refresher's
        own threads; a test may run it inline); seconds until the next one is due."""
        period = self.period(now)
        due = self._last_start is None or now - self._last_start >= period
        if due:
            with self._lock:
                if len(self._in_flight) >= self.max_in_flight:
                    return period / 4   # the store is stuck: try again soon, start nothing
                self._started += 1
                number = self._started
                self._in_flight[number] = now
            self._last_start = now
            run = submit or self._submit
            try:
                run(self._run_read, number, now)
            except RuntimeError:   # the pool is shutting down
                with self._lock:
                    self._in_flight.pop(number, None)
            period = self.period(now)
        return max(0.0, self._last_start + period - now)

    def _submit(self, fn, *args) -> None:
        self._pool.submit(fn, *args)

    def _run_read(self, number: int, started: float) -> None:
        try:
            self._read()
            self.reads += 1
        except Exception:  # noqa: BLE001 - the copy keeps its age; decisions wait and fail closed
            self.failures += 1
            log.warning("%s: a read failed; the copy in hand keeps ageing", self, exc_info=True)
        finally:
            ended = self._clock.monotonic_s()
            with self._lock:
                self._in_flight.pop(number, None)
                self._latencies.append(max(0.0, ended - started))
            self._wake.set()   # a read's latency changes the period

    # -- the thread -----------------------------------------------------------------------------
    def start(self) -> "Refresher":
        """Run the schedule on a thread of its own (daemon) until :meth:`stop`."""
        if self._thread is not None:
            return self
        self._pool = ThreadPoolExecutor(max_workers=self.max_in_flight,
                                        thread_name_prefix=f"kafkastore-refresh-{self.name}")
        self._thread = threading.Thread(target=self._loop, name=f"kafkastore-refresher-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                wait = self.step(self._clock.monotonic_s())
            except Exception:  # noqa: BLE001 - the schedule must go on
                log.warning("%s: scheduling failed", self, exc_info=True)
                wait = self.bound_s / 8
            self._wake.wait(wait)
            self._wake.clear()

    def stop(self) -> None:
        """Stop starting reads (reads in flight end by themselves)."""
        self._stopped.set()
        self._wake.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
