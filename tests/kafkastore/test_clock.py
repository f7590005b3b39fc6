"""kafkastore.clock: one clock type, one unit per quantity, a manual clock for tests."""
from __future__ import annotations

import threading
import time

import pytest

from kafkastore.clock import SYSTEM, Clock, ManualClock, as_clock
from kafkastore.errors import ConfigError


def test_system_clock_reads_wall_ms_and_monotonic_seconds():
    before = int(time.time() * 1000)
    wall = SYSTEM.wall_ms()
    after = int(time.time() * 1000)
    assert isinstance(wall, int) and before - 1 <= wall <= after + 1
    m1 = SYSTEM.monotonic_s()
    SYSTEM.sleep(0.01)
    assert SYSTEM.monotonic_s() - m1 >= 0.009


def test_each_quantity_can_be_replaced_and_old_keywords_still_work():
    slept = []
    c = Clock(sleep=slept.append, now_ms=lambda: 42.9, monotonic=lambda: 7.5)
    c.sleep(0.25)
    assert slept == [0.25]
    assert (c.wall_ms(), c.monotonic_s()) == (42, 7.5)
    c2 = Clock(wall_ms=lambda: 1, monotonic_s=lambda: 2.0)
    assert (c2.wall_ms(), c2.monotonic_s()) == (1, 2.0)


def test_manual_clock_moves_only_when_told_and_sleep_does_not_wait():
    c = ManualClock(wall_ms=10_000, monotonic_s=5.0)
    assert (c.wall_ms(), c.monotonic_s()) == (10_000, 5.0)
    started = time.monotonic()
    c.sleep(3600)
    assert time.monotonic() - started < 1
    assert c.slept == [3600]
    assert (c.wall_ms(), c.monotonic_s()) == (10_000 + 3_600_000, 3605.0)
    c.advance_ms(250)
    assert (c.wall_ms(), c.monotonic_s()) == (3_610_250, 3605.25)


def test_manual_wall_clock_may_step_back_but_monotonic_time_may_not():
    c = ManualClock(wall_ms=50_000, monotonic_s=1.0)
    c.set_wall_ms(20_000)
    assert (c.wall_ms(), c.monotonic_s()) == (20_000, 1.0)
    c.advance(1)
    assert c.wall_ms() == 21_000
    with pytest.raises(ConfigError):
        c.advance(-1)


def test_manual_clock_is_thread_safe():
    c = ManualClock(wall_ms=0, monotonic_s=0.0)
    threads = [threading.Thread(target=lambda: [c.advance_ms(1) for _ in range(1000)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.wall_ms() == 4000


def test_as_clock_adapts_none_clocks_and_old_bare_callables():
    assert as_clock(None) is SYSTEM
    m = ManualClock()
    assert as_clock(m) is m
    now = [5_000]
    ms = as_clock(lambda: now[0])
    assert ms.wall_ms() == 5_000
    now[0] = 6_500
    assert ms.wall_ms() == 6_500
    assert as_clock(lambda: 12.5, "s").wall_ms() == 12_500
    # Only the wall clock is replaced: monotonic time stays the system's.
    assert abs(ms.monotonic_s() - time.monotonic()) < 1
    with pytest.raises(ConfigError):
        as_clock(5)
    with pytest.raises(ConfigError):
        as_clock(lambda: 1, "h")


def test_the_storages_clock_is_the_clock_of_everything_built_on_it(tmp_path):
    """Injected at the top: one ManualClock in the Storage dates topics, manifest commits
    and broker registrations, and moves the registry's liveness, with no other argument."""
    from kafkastore.manifest import ManifestStore, SetExtra
    from kafkastore.protocol.membership import BrokerMembership
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic, load_topic

    clock = ManualClock(wall_ms=1_234_567_000)
    storage = Storage(f"file://{tmp_path}", clock=clock)
    create_topic(storage, "t", 1)
    assert load_topic(storage, "t").created_ms == 1_234_567_000
    clock.advance_ms(5)
    m = ManifestStore(storage, "t", 0).commit(lambda base: ([SetExtra("k", 1)], []),
                                              operation="test")
    assert m.commit.timestamp_ms == 1_234_567_005

    registry = BrokerMembership(storage, heartbeat_ms=1000)
    node = registry.register(None, "127.0.0.1", 9092)
    assert [b[0] for b in registry.refresh()] == [node]
    clock.advance(3600)  # an hour without a heartbeat: no longer live
    assert registry.refresh() == []


def test_skew_hook_offsets_only_the_wall_clock():
    """The fault harness's skewed broker: KAFKASTORE_CLOCK_SKEW_MS moves wall time by the
    given milliseconds; monotonic time stays the base clock's."""
    from kafkastore.clock import SKEW_ENV, from_env, skewed

    base = ManualClock(wall_ms=1_000_000, monotonic_s=50.0)
    ahead = skewed(90_000, base)
    assert ahead.wall_ms() == 1_090_000 and ahead.monotonic_s() == 50.0
    base.advance(2)
    assert ahead.wall_ms() == 1_092_000 and ahead.monotonic_s() == 52.0
    assert skewed(-600_000, base).wall_ms() == 1_002_000 - 600_000

    assert from_env({}) is SYSTEM
    assert from_env({SKEW_ENV: "0"}) is SYSTEM
    env_clock = from_env({SKEW_ENV: "60000"})
    assert 59_000 <= env_clock.wall_ms() - SYSTEM.wall_ms() <= 61_000
    with pytest.raises(ConfigError):
        from_env({SKEW_ENV: "a minute"})
