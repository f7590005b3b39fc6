"""The refresher keeps a copy younger than its bound on a slow store by starting reads before
the copy expires (reads overlap), and never vouches for a copy by itself.

Driven step by step on a manual clock: each read "takes" ``latency`` seconds of that clock
(it ends when the clock has moved that far), so nothing here depends on how fast the machine
is. A copy's age is counted from the start of the read that produced it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.clock import ManualClock
from kafkastore.cluster.refresher import Refresher

TICK = 0.01


def _simulate(latency: float, bound: float = 2.0, seconds: float = 30.0, fail: bool = False):
    """Run a refresher for ``seconds``; (oldest age after warm-up, most reads in flight)."""
    clock = ManualClock(monotonic_s=0.0)
    copy = {"read_at": None}
    pending = []   # (ends at, fn, number, started)
    running = {}

    def read():
        if fail:
            raise OSError("the store is down")
        started = running["started"]
        if copy["read_at"] is None or started > copy["read_at"]:
            copy["read_at"] = started

    refresher = Refresher("doc", read, bound, clock=clock)
    submit = lambda fn, number, started: pending.append((started + latency, fn, number, started))  # noqa: E731
    next_at = 0.0
    oldest, most = 0.0, 0
    steps = int(seconds / TICK)
    for i in range(steps):
        now = clock.monotonic_s()
        for item in sorted(p for p in pending if p[0] <= now + 1e-9):
            pending.remove(item)
            running["started"] = item[3]
            item[1](item[2], item[3])
        if now >= next_at - 1e-9:
            next_at = now + refresher.step(now, submit=submit)
        most = max(most, refresher.in_flight())
        if now > latency + bound and copy["read_at"] is not None:
            oldest = max(oldest, now - copy["read_at"])
        clock.advance(TICK)
    return oldest, most, copy["read_at"], refresher


@pytest.mark.parametrize("latency", [0.001, 0.05, 0.3, 0.6, 1.0, 1.2])
def test_the_copy_stays_younger_than_the_bound_while_the_store_answers_in_time(latency):
    oldest, _, _, _ = _simulate(latency)
    assert oldest < 2.0


def test_reads_overlap_when_the_store_is_slow():
    """At a second a read the next read starts before the one in flight ends (a read
    started only after the previous one ended would leave copies up to period + 1 s old)."""
    _, most, _, _ = _simulate(1.0)
    assert most >= 2


def test_a_fast_store_is_read_at_most_every_half_bound():
    _, most, _, refresher = _simulate(0.001, seconds=20.0)
    assert most == 1
    assert refresher.reads <= 20.0 / (2.0 / 2) + 1


def test_reads_in_flight_are_capped_when_the_store_hangs():
    _, most, _, refresher = _simulate(1000.0, seconds=30.0)
    assert most == refresher.max_in_flight


def test_failing_reads_never_make_the_copy_fresh():
    _, _, read_at, refresher = _simulate(0.05, fail=True, seconds=10.0)
    assert read_at is None
    assert refresher.failures > 0 and refresher.reads == 0


@settings(max_examples=25, deadline=None)
@given(latency=st.floats(min_value=0.0, max_value=1.2), bound=st.sampled_from([1.0, 2.0, 4.0]))
def test_the_copy_stays_younger_than_the_bound_for_any_latency_within_reach(latency, bound):
    """Within reach: a read shorter than the bound less its margin and the shortest period."""
    latency = latency * bound / 2.0
    oldest, _, _, _ = _simulate(latency, bound=bound, seconds=8 * bound)
    assert oldest < bound
