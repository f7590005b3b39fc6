"""The one clock: every read of time in the library goes through a :class:`Clock`.

One unit per quantity:

* :meth:`Clock.wall_ms` -- wall-clock time, integer epoch **milliseconds** (Kafka's
  timestamps, retention, session deadlines, manifest timestamps, upload ages);
* :meth:`Clock.monotonic_s` -- a monotonic reading in float **seconds**, for durations
  and deadlines that must not jump with the wall clock (timeouts, back-off budgets,
  caches' ages, throughput);
* :meth:`Clock.sleep` -- wait, in float **seconds**.

The entry points (``kafkastore.cli``, ``kafkastore.protocol.server``, the pipelines' jobs)
use :data:`SYSTEM`, or whatever clock they are given, and pass it down; library code below
them never reads ``time.time()``/``time.monotonic()`` itself (``tests/test_clock_rule.py``
checks it). Tests pass a :class:`ManualClock` and move time by hand.

Older constructors took bare callables (epoch-ms, epoch-seconds); :func:`as_clock`
adapts them, so ``LogWriter(clock=lambda: now[0])`` keeps working.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from .errors import ConfigError

__all__ = ["Clock", "ManualClock", "SYSTEM", "SKEW_ENV", "as_clock", "skewed", "from_env"]


class Clock:
    """A source of time. The default instance reads the system clock; each quantity can be
    replaced by a callable (``Clock(sleep=slept.append)`` for a test that must not wait).

    ``now_ms=`` and ``monotonic=`` are the older names of ``wall_ms=`` and ``monotonic_s=``
    (``kafkastore.commit.Clock`` took them); they are accepted and mean the same.
    """

    __slots__ = ("_wall_ms", "_monotonic_s", "_sleep")

    def __init__(self, *, wall_ms: Callable[[], int] | None = None,
                 monotonic_s: Callable[[], float] | None = None,
                 sleep: Callable[[float], Any] | None = None,
                 now_ms: Callable[[], int] | None = None,
                 monotonic: Callable[[], float] | None = None):
        self._wall_ms = wall_ms or now_ms or _system_wall_ms
        self._monotonic_s = monotonic_s or monotonic or _system_monotonic_s
        self._sleep = sleep or _system_sleep

    def wall_ms(self) -> int:
        """Wall-clock time in integer epoch milliseconds."""
        now = self._wall_ms()
        return now if isinstance(now, int) else int(now)

    def monotonic_s(self) -> float:
        """A monotonic reading in seconds (only differences between readings mean anything)."""
        return self._monotonic_s()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        self._sleep(seconds)

    def __repr__(self) -> str:
        return "SYSTEM" if self is SYSTEM else f"{type(self).__name__}()"


def _system_monotonic_s() -> float:
    return time.monotonic()


def _system_sleep(seconds: float) -> None:
    time.sleep(seconds)


def _system_wall_ms() -> int:
    # time.time, read at each call: a test that patches time.time moves SYSTEM too.
    return int(time.time() * 1000)


#: The real clock; the default everywhere a clock is optional.
SYSTEM = Clock()


class ManualClock(Clock):
    """A clock that moves only when told: :meth:`advance`, :meth:`set_wall_ms`, or
    :meth:`sleep` (which advances instead of waiting, so code that backs off runs at once).
    Wall and monotonic time move together. Thread-safe; ``slept`` records every sleep."""

    __slots__ = ("_now_s", "_wall0_ms", "_lock", "slept")

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_s: float = 1000.0):
        # The base class's callables are not used: every reading is overridden below.
        self._wall0_ms = int(wall_ms) - int(monotonic_s * 1000)
        self._now_s = float(monotonic_s)
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def wall_ms(self) -> int:
        with self._lock:
            return self._wall0_ms + int(round(self._now_s * 1000))

    def monotonic_s(self) -> float:
        with self._lock:
            return self._now_s

    def sleep(self, seconds: float) -> None:
        """Record the sleep and advance time by it, without waiting."""
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move both wall and monotonic time forward by ``seconds``."""
        if seconds < 0:
            raise ConfigError("a clock does not go back: advance by >= 0 seconds")
        with self._lock:
            self._now_s += seconds

    def advance_ms(self, ms: int) -> None:
        """:meth:`advance` in milliseconds."""
        self.advance(ms / 1000)

    def set_wall_ms(self, wall_ms: int) -> None:
        """Step the wall clock to ``wall_ms`` (it may go back, as a real one can); monotonic
        time does not move."""
        with self._lock:
            self._wall0_ms = int(wall_ms) - int(round(self._now_s * 1000))


def as_clock(clock: Clock | Callable[[], float] | None, unit: str = "ms") -> Clock:
    """The :class:`Clock` for an argument that may be a clock, None (:data:`SYSTEM`), or an
    older bare callable reading the wall clock in ``unit`` (``"ms"`` or ``"s"``), or
    (``unit="monotonic_s"``) a monotonic clock in seconds (the caches' old ``clock=``).

    A bare callable replaces only the wall clock, as it did before: monotonic time and
    sleeping stay the system's (a test's ``lambda: next(ticks)`` is read exactly as often
    as the wall clock was read before).
    """
    if clock is None:
        return SYSTEM
    if isinstance(clock, Clock):
        return clock
    if not callable(clock):
        raise ConfigError(f"a clock must be a kafkastore.clock.Clock or a callable, got {clock!r}")
    if unit == "ms":
        return Clock(wall_ms=clock)
    if unit == "s":
        return Clock(wall_ms=lambda: clock() * 1000)
    if unit == "monotonic_s":
        return Clock(monotonic_s=clock)
    raise ConfigError(f"unit must be 'ms', 's' or 'monotonic_s', got {unit!r}")


#: Test hook: a ``serve`` process started with this variable (integer milliseconds, may be
#: negative) reads a wall clock that far off the system's, as a machine whose clock drifted
#: would. Read only at the serve entry point (``from_env``); the fault harness uses it to run
#: one broker with a skewed clock. Monotonic time and sleeping are not affected.
SKEW_ENV = "KAFKASTORE_CLOCK_SKEW_MS"


def skewed(skew_ms: int, base: Clock | None = None) -> Clock:
    """A clock whose wall time is ``base``'s (default :data:`SYSTEM`) plus ``skew_ms``;
    monotonic time and sleep are ``base``'s."""
    base = base or SYSTEM
    skew = int(skew_ms)
    return Clock(wall_ms=lambda: base.wall_ms() + skew, monotonic_s=base.monotonic_s,
                 sleep=base.sleep)


def from_env(environ=None) -> Clock:
    """:data:`SYSTEM`, or (test hook) a :func:`skewed` clock when :data:`SKEW_ENV` is set to
    a non-zero integer; any other value is a one-line :class:`ConfigError`."""
    import os

    raw = (os.environ if environ is None else environ).get(SKEW_ENV, "").strip()
    if not raw:
        return SYSTEM
    try:
        skew = int(raw)
    except ValueError:
        raise ConfigError(f"{SKEW_ENV} must be an integer number of milliseconds, got {raw!r}") from None
    return SYSTEM if skew == 0 else skewed(skew)
