"""Coordinator state writes of many transactional ids share one commit of their
``__transaction_state`` partition, and each keeps its own fencing conditions.

While one state write is being committed, writes of other ids wait and then go together in
the next commit (one fsync'd manifest commit for many producers' steps). Each write in such
a group is still checked on its own, at that commit's attempt: the id's stored state must be
the one its step was planned on, and its coordinator must still hold the authority it acted
under; a write that fails either is refused alone, the others land."""
from __future__ import annotations

import threading
import time

import pytest

from kafkastore.errors import TxnStateFencedError
from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage


def _ongoing(tid: str, pid: int, start_ms: int = 1_000) -> T.TxnMetadata:
    return T.TxnMetadata(tid, pid, 0, 60_000, T.TxnState.ONGOING, frozenset({("x", 0)}),
                         start_ms, start_ms)


class _HeldFirstFlush:
    """Holds the first commit of ``__transaction_state`` at a gate until released (a slow
    fsync), counting the commits; the writes themselves are the real ones."""

    def __init__(self, monkeypatch):
        from kafkastore.write.log_writer import LogWriter

        self.entered, self.release = threading.Event(), threading.Event()
        self.flushes = 0
        real = LogWriter.flush

        def flush(broker):
            self.flushes += 1
            if self.flushes == 1:
                self.entered.set()
                assert self.release.wait(60)
            return real(broker)

        monkeypatch.setattr(LogWriter, "flush", flush)


def _waiting(store: TxnStore, n: int) -> None:
    """Until ``n`` puts queue behind the one being written (or 30 s; a store without a
    queue, one write at a time, gets half a second to block its writers)."""
    queued = getattr(store, "_queued", None)
    if queued is None:
        time.sleep(0.5)
        return
    deadline = time.monotonic() + 30
    while sum(len(q) for q in store._queued.values()) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def _run(fn, *args) -> tuple[threading.Thread, list]:
    out: list = []

    def target():
        try:
            fn(*args)
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out.append(exc)

    t = threading.Thread(target=target)
    t.start()
    return t, out


def _first_commit_held(store, gate) -> tuple[threading.Thread, list]:
    """Write ``a`` and hold its commit at ``gate``: the writes after it queue behind it."""
    first, r1 = _run(store.put, _ongoing("a", 2), None)
    assert gate.entered.wait(30)
    return first, r1


def _release(gate, *threads: threading.Thread) -> None:
    gate.release.set()
    for t in threads:
        t.join(60)


def test_two_ids_state_writes_queued_behind_a_commit_land_in_one_commit(tmp_path, monkeypatch):
    storage = Storage(f"file://{tmp_path}/root")
    store = TxnStore(storage, partitions=1)
    store.put(_ongoing("seed", 1))          # the partition exists before the gate
    gate = _HeldFirstFlush(monkeypatch)

    first, r1 = _first_commit_held(store, gate)
    second, r2 = _run(store.put, _ongoing("b", 3), None)
    third, r3 = _run(store.put, _ongoing("c", 4), None)
    _waiting(store, 2)
    _release(gate, first, second, third)

    assert r1 == r2 == r3 == [None]
    assert gate.flushes == 2                 # a's commit, then b's and c's together
    fresh = TxnStore(storage, partitions=1)
    assert [fresh.get(t).producer_id for t in ("a", "b", "c")] == [2, 3, 4]
    reader = PartitionReader(storage, T.TXN_TOPIC, 0)
    assert reader.high_watermark == 4        # seed, a, b, c: nothing written twice


def test_a_write_in_a_group_whose_state_moved_is_refused_alone(tmp_path, monkeypatch):
    storage = Storage(f"file://{tmp_path}/root")
    store = TxnStore(storage, partitions=1)
    stale = _ongoing("b", 3)
    store.put(stale)
    # Another coordinator moves b on (a newer epoch) before b's step below is written.
    TxnStore(storage, partitions=1, broker_id=1).put(_ongoing("b", 3, start_ms=5_000), based_on=stale)
    gate = _HeldFirstFlush(monkeypatch)

    first, r1 = _first_commit_held(store, gate)
    second, r2 = _run(store.put, T.TxnMetadata("b", 3, 0, 60_000, T.TxnState.PREPARE_COMMIT,
                                               stale.partitions, 1_000, 2_000), stale)
    third, r3 = _run(store.put, _ongoing("c", 4), None)
    _waiting(store, 2)
    _release(gate, first, second, third)

    assert r1 == r3 == [None]
    assert len(r2) == 1 and isinstance(r2[0], TxnStateFencedError)
    fresh = TxnStore(storage, partitions=1)
    assert fresh.get("b").state is T.TxnState.ONGOING and fresh.get("b").txn_start_ms == 5_000
    assert fresh.get("c").producer_id == 4


def test_a_write_in_a_group_whose_coordinator_lost_its_authority_is_refused_alone(tmp_path, monkeypatch):
    storage = Storage(f"file://{tmp_path}/root")
    store = TxnStore(storage, partitions=1)
    store.put(_ongoing("seed", 1))
    gate = _HeldFirstFlush(monkeypatch)
    authority = {"held": True}

    first, r1 = _first_commit_held(store, gate)
    second, r2 = _run(store.put, _ongoing("b", 3), None, lambda: authority["held"])
    third, r3 = _run(store.put, _ongoing("c", 4), None)
    _waiting(store, 2)
    authority["held"] = False               # fenced while its write waited for the commit
    _release(gate, first, second, third)

    assert r1 == r3 == [None]
    assert len(r2) == 1 and isinstance(r2[0], TxnStateFencedError)
    fresh = TxnStore(storage, partitions=1)
    assert fresh.get("b") is None and fresh.get("c").producer_id == 4


def test_a_second_write_of_one_id_in_a_group_is_checked_against_the_first(tmp_path, monkeypatch):
    storage = Storage(f"file://{tmp_path}/root")
    store = TxnStore(storage, partitions=1)
    store.put(_ongoing("seed", 1))
    gate = _HeldFirstFlush(monkeypatch)

    first, r1 = _first_commit_held(store, gate)
    # Two steps planned on the same state of b: only one may land.
    second, r2 = _run(store.put, _ongoing("b", 3), None)
    _waiting(store, 1)
    third, r3 = _run(store.put, _ongoing("b", 7), None)
    _waiting(store, 2)
    _release(gate, first, second, third)

    assert r1 == r2 == [None]
    assert len(r3) == 1 and isinstance(r3[0], TxnStateFencedError)
    assert TxnStore(storage, partitions=1).get("b").producer_id == 3


def test_a_store_failure_in_a_group_fails_every_write_of_the_group(tmp_path, monkeypatch):
    """No write of a group is answered as written when its commit never happened."""
    from kafkastore.errors import StorageError

    storage = Storage(f"file://{tmp_path}/root")
    store = TxnStore(storage, partitions=1)
    store.put(_ongoing("seed", 1))
    gate = _HeldFirstFlush(monkeypatch)

    first, r1 = _first_commit_held(store, gate)
    second, r2 = _run(store.put, _ongoing("b", 3), None)
    third, r3 = _run(store.put, _ongoing("c", 4), None)
    _waiting(store, 2)

    def unreadable(partitions=None):
        raise StorageError("the store is gone")

    # A cold cache (a fence dropped it): the group reads the partition before its commit
    # (with the cache its steps' reads left, the first attempt reads nothing).
    store.forget()
    monkeypatch.setattr(store, "refresh", unreadable)   # the group's read before its commit fails
    _release(gate, first, second, third)

    assert r1 == [None]
    assert len(r2) == len(r3) == 1 and all(isinstance(r[0], StorageError) for r in (r2, r3))
    fresh = TxnStore(storage, partitions=1)
    assert fresh.get("b") is None and fresh.get("c") is None
