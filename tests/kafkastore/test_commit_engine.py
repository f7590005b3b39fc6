"""The one commit engine (kafkastore.commit) on an in-memory versioned store and a fake clock:
back-off, budget, read-back after unknown outcomes, and exactly-once under random faults.
Nothing here sleeps."""
from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.commit import RETRY, Backoff, Budget, Clock, CommitEngine, CommitTarget, Done
from kafkastore.errors import (CommitConflict, CommitGaveUpError, CommitUnknownError, ConfigError,
                               StorageError, StoragePermissionError)


class FakeClock:
    """Time that moves only when the engine sleeps."""

    def __init__(self):
        self.t = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s

    def clock(self) -> Clock:
        return Clock(sleep=self.sleep, monotonic=lambda: self.t, now_ms=lambda: int(self.t * 1000))


class MemLog:
    """Versions 1, 2, ... each holding (commit id, items): the state is the latest items."""

    def __init__(self):
        self.versions: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.rivals = 0

    def latest(self) -> tuple[int, tuple[str, ...]]:
        v = max(self.versions, default=0)
        return v, self.versions[v][1] if v else ()

    def rival_commit(self) -> None:
        v, items = self.latest()
        self.rivals += 1
        self.versions[v + 1] = (uuid.uuid4().hex, items + (f"rival{self.rivals}",))


class MemTarget(CommitTarget):
    """Appends ``item`` as version N+1 of a :class:`MemLog`. ``put_faults`` / ``read_faults``
    script what happens on each put / read-back (default: nothing)."""

    def __init__(self, log: MemLog, item: str = "mine", put_faults=(), read_faults=(),
                 reusable: bool = True):
        self.log, self.item = log, item
        self.put_faults, self.read_faults = iter(put_faults), iter(read_faults)
        self.reusable = reusable
        self.puts = 0
        self.late = None     # a put whose request is still in flight: it lands at the next step
        self.used: set[str] = set()

    def _land_late(self):
        if self.late is not None and self.late[0] not in self.log.versions:
            self.log.versions[self.late[0]] = (self.late[1], self.late[2])
        self.late = None

    def read(self):
        self._land_late()
        return self.log.latest()

    def plan(self, base, attempt):
        v, items = base
        if not self.reusable and self.item in items:
            return Done("late")   # the stable identity recognises an earlier attempt's landing
        return v + 1, uuid.uuid4().hex, items + (self.item,)

    def put(self, planned):
        self._land_late()
        if not self.reusable and planned[1] in self.used:
            raise RuntimeError("a single-use commit was put twice")
        self.used.add(planned[1])
        self.puts += 1
        fault = next(self.put_faults, "ok")
        if fault == "rival":        # another writer takes the slot just before us
            self.log.rival_commit()
        if fault == "fail":         # the request never reached the store
            raise StorageError("connection refused")
        if fault == "late":         # the response is lost; the write lands after the read-back
            self.late = planned
            raise StorageError("timed out")
        if fault == "refused":
            raise StoragePermissionError("access denied")
        if planned[0] in self.log.versions:
            raise CommitConflict(f"version {planned[0]} exists")
        self.log.versions[planned[0]] = (planned[1], planned[2])
        if fault == "lost":         # it landed, the response did not
            raise StorageError("connection reset")

    def read_back(self, planned):
        if next(self.read_faults, "ok") == "fail":
            raise StorageError("read timed out")
        held = self.log.versions.get(planned[0])
        return None if held is None else held[0] == planned[1]

    def result(self, planned, *, attempts, read_back):
        return planned[0], attempts, read_back

    def describe(self, planned):
        return f"version {planned[0]}"


class UpperRandom(random.Random):
    """Always the top of the jitter range, to see the caps themselves."""

    def uniform(self, a, b):
        return b


def engine(fc: FakeClock, **kw) -> CommitEngine:
    kw.setdefault("rng", random.Random(3))
    return CommitEngine(clock=fc.clock(), **kw)


def test_backoff_grows_to_its_cap_and_is_jittered_within_bounds():
    log, fc = MemLog(), FakeClock()
    backoff = Backoff(initial_s=0.01, max_s=0.16)
    r = engine(fc, backoff=backoff, rng=UpperRandom()).run(MemTarget(log, put_faults=["rival"] * 8))
    assert r == (9, 9, False)
    assert fc.slept == [0.01, 0.02, 0.04, 0.08, 0.16, 0.16, 0.16, 0.16]   # doubles, then capped
    fc = FakeClock()
    engine(fc, backoff=backoff, rng=random.Random(11)).run(MemTarget(log, put_faults=["rival"] * 30))
    assert len(fc.slept) == 30 and len(set(fc.slept)) == 30               # jittered
    for n, d in enumerate(fc.slept, 1):
        assert 0 <= d <= backoff.cap(n)
    assert max(fc.slept[10:]) > backoff.cap(2)   # later waits may exceed early caps: it grows


def test_attempt_budget_gives_up_with_the_one_error():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["rival"] * 10)
    with pytest.raises(CommitGaveUpError, match="after 3 conflicting attempts") as info:
        engine(fc, budget=Budget(max_attempts=3)).run(t)
    assert isinstance(info.value, CommitConflict)
    assert t.puts == 3 and len(fc.slept) == 2
    assert "mine" not in log.latest()[1]


def test_time_budget_gives_up_on_the_fake_clock():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["rival"] * 1000)
    with pytest.raises(CommitGaveUpError):
        engine(fc, backoff=Backoff(1.0, 1.0), rng=UpperRandom(),
               budget=Budget(max_seconds=5.0)).run(t)
    assert t.puts == 6 and fc.t == 5.0       # attempts at t = 0..5; none starts after 5 s
    with pytest.raises(ConfigError):
        Budget(max_attempts=0)
    with pytest.raises(ConfigError):
        Budget(max_seconds=0)


def test_unbounded_by_default_while_others_make_progress():
    log, fc = MemLog(), FakeClock()
    v, attempts, _ = engine(fc).run(MemTarget(log, put_faults=["rival"] * 200))
    assert attempts == 201 and log.latest()[1][-1] == "mine" and log.rivals == 200


def test_lost_response_read_back_as_ours():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["lost"], read_faults=["fail", "fail"])
    assert engine(fc).run(t) == (1, 1, True)
    assert log.latest() == (1, ("mine",)) and t.puts == 1


def test_failed_put_read_back_absent_puts_the_same_commit_again():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["fail", "fail"])
    assert engine(fc).run(t) == (1, 1, True)   # one plan, three puts
    assert t.puts == 3 and log.latest() == (1, ("mine",))


def test_failed_put_while_another_wins_is_read_back_as_conflict():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["fail", "rival"])
    assert engine(fc).run(t) == (2, 2, False)
    assert log.latest()[1] == ("rival1", "mine")


def test_undecidable_outcome_raises_commit_unknown_and_keeps_what_landed():
    log, fc = MemLog(), FakeClock()
    with pytest.raises(CommitUnknownError, match="cannot be read back"):
        engine(fc).run(MemTarget(log, put_faults=["lost"], read_faults=["fail"] * 10))
    assert log.latest() == (1, ("mine",))          # nothing deleted
    with pytest.raises(CommitUnknownError, match="cannot tell whether version 2"):
        engine(fc, unknown_retries=2).run(MemTarget(log, put_faults=["fail"] * 10))


def test_refused_put_is_definite_but_after_doubt_is_read_back():
    log, fc = MemLog(), FakeClock()
    with pytest.raises(StoragePermissionError):
        engine(fc).run(MemTarget(log, put_faults=["refused"]))
    assert log.latest() == (0, ())
    assert engine(fc).run(MemTarget(log, put_faults=["fail", "refused"])) == (1, 1, True)


def test_single_use_commits_plan_again_and_recognise_a_late_landing():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["fail"], reusable=False)
    assert engine(fc).run(t) == (1, 2, False) and t.puts == 2
    with pytest.raises(CommitUnknownError, match="budget ran out"):
        engine(fc, budget=Budget(max_attempts=2)).run(
            MemTarget(log, "again", put_faults=["fail"] * 5, reusable=False))


def test_a_late_landing_is_recognised_as_ours():
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=["late"])
    assert engine(fc).run(t) == (1, 1, True) and log.latest() == (1, ("mine",))
    t = MemTarget(log, "single", put_faults=["late"], reusable=False)
    assert engine(fc).run(t) == "late" and log.latest() == (2, ("mine", "single"))


def test_result_may_ask_for_another_attempt():
    class Once(MemTarget):
        def result(self, planned, **kw):
            self.result = lambda planned, **kw: planned[0]
            return RETRY
    log, fc = MemLog(), FakeClock()
    assert engine(fc).run(Once(log)) == 2 and log.latest()[1] == ("mine", "mine")


FAULTS = st.sampled_from(["ok", "rival", "fail", "lost", "late", "rival", "late"])


@settings(max_examples=300, deadline=None)
@given(put_faults=st.lists(FAULTS, max_size=12), read_faults=st.lists(
    st.sampled_from(["ok", "fail"]), max_size=12), reusable=st.booleans(),
    budget=st.one_of(st.none(), st.integers(1, 6)))
def test_random_interleavings_never_apply_twice_nor_lose_a_commit(put_faults, read_faults,
                                                                   reusable, budget):
    log, fc = MemLog(), FakeClock()
    t = MemTarget(log, put_faults=put_faults, read_faults=read_faults, reusable=reusable)
    try:
        engine(fc, budget=Budget(max_attempts=budget)).run(t)
        outcome = "ok"
    except CommitGaveUpError:
        outcome = "gave up"
    except CommitUnknownError:
        outcome = "unknown"
    v, items = log.latest()
    # Every version is its predecessor plus exactly one commit: none built on a stale base.
    for n in range(1, v + 1):
        assert log.versions[n][1][:-1] == (log.versions[n - 1][1] if n > 1 else ())
    # Nobody's commit is lost, nobody's applied twice.
    assert sorted(i for i in items if i.startswith("rival")) == sorted(
        f"rival{k}" for k in range(1, log.rivals + 1))
    mine = items.count("mine")
    assert mine == {"ok": 1, "gave up": 0}.get(outcome, mine) and mine <= 1
