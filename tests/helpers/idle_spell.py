"""An idle spell without waiting for it: a broker's monotonic clock jumps forward.

A broker built on ``Storage(root, clock=JumpClock())`` reads the system clock, except that
:func:`idle` moves its monotonic reading on by a number of seconds, as a long idle spell
or a pause would. Its lease lapses with the jump, so :func:`idle` fences the broker as its
own check would, and a connection opened before the jump is closed unanswered: the caller
reconnects (and logs in again), as a client does after a real pause.
"""
from __future__ import annotations

from kafkastore.clock import SYSTEM, Clock


class JumpClock(Clock):
    """The system clock whose monotonic reading can be moved forward (an idle spell)."""

    __slots__ = ("skipped",)

    def __init__(self):
        self.skipped = 0.0
        super().__init__(monotonic_s=lambda: SYSTEM.monotonic_s() + self.skipped)


def idle(clock: JumpClock, broker, seconds: float) -> None:
    """Move ``broker``'s monotonic clock (``clock``, its storage's) on by ``seconds`` and fence
    it if its lease lapsed (it has when ``seconds`` is past the liveness window), as the
    broker's own check would on its next heartbeat: connections opened before are closed."""
    clock.skipped += seconds
    broker.server.brokers.fence_if_lapsed()
