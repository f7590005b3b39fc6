"""The shape that keeps housekeeping off the ack path, checked on a real housekeeper over a
real file:// root: its merge and gc jobs run on housekeeping's own threads in the
housekeeping lane (never on the caller's thread or an ack-path pool), and the housekeeper's
lock, which the ack path's ``poke`` takes after every commit, is never held across a storage
call."""
from __future__ import annotations

import threading

from kafkastore import threads
from kafkastore.maintenance.housekeeper import Housekeeper
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter

T, P = "hk", 0
_VERBS = ("get", "put", "put_many", "put_if_absent", "list", "exists", "delete")


class _OwnedLock:
    """A lock that knows which thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None

    def __enter__(self):
        self._lock.acquire()
        self.owner = threading.get_ident()
        return self

    def __exit__(self, *exc) -> None:
        self.owner = None
        self._lock.release()


def test_jobs_run_in_their_lane_and_never_hold_the_pokes_lock_across_a_store_call(
        tmp_path, monkeypatch):
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    w = LogWriter(storage, housekeeping=False)
    for i in range(12):
        w.send(T, b"v%d" % i, key=b"k", partition=P)
        w.flush()
    manifest = ManifestStore(storage, T, P).latest()

    hk = Housekeeper(storage, gc_interval_ms=0, min_segments=0, fan_in=2)
    lock = hk._lock = _OwnedLock()
    calls: list[tuple[str, str | None, bool]] = []   # (thread, lane, housekeeper lock held)

    def recording(verb, orig):
        def call(self, *args, **kwargs):
            calls.append((threading.current_thread().name, threads.current_lane(),
                          lock.owner == threading.get_ident()))
            return orig(self, *args, **kwargs)
        return call

    for verb in _VERBS:
        monkeypatch.setattr(Storage, verb, recording(verb, getattr(Storage, verb)))

    assert hk.poke(T, P, manifest)
    assert hk.wait(60)
    hk.close()
    assert not hk.errors
    assert hk.merges >= 1 and hk.gc_runs >= 1

    jobs = [c for c in calls if c[0] != threading.current_thread().name]
    assert jobs, "the jobs made storage calls"
    assert all(lane == threads.HOUSEKEEPING for _, lane, _ in jobs), jobs
    assert all(name.startswith("kafkastore-housekeeping") for name, _, _ in jobs), \
        {name for name, _, _ in jobs}
    assert not any(held for _, _, held in calls)
