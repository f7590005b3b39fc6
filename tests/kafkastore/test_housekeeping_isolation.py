"""Housekeeping stays off the ack path: a merge's uploads stuck in their I/O do not hold a
produce commit up (its fsyncs run on pools of their own), and on S3 housekeeping's requests
go through clients and an event-loop thread of their own. No timed assertions: the produce
must finish while the housekeeping is still held at its gate (a generous bound only turns a
hang into a failure)."""
from __future__ import annotations

import asyncio
import threading

import pytest

import kafkastore.storage.object_writes as storage_mod
import kafkastore.threads as threads_mod
from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import Housekeeper
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.roots import make_root_url

T = "events"
HANG_S = 60   # only a hang reaches this


def _fill(storage, partition: int, flushes: int, value: bytes) -> None:
    b = Broker(storage, housekeeping=False)
    for i in range(flushes):
        for j in range(4):
            b.send(T, value + b"%d-%d" % (i, j), key=b"k%d" % j, partition=partition)
        b.flush()


def _records(storage, partition: int) -> list:
    r = PartitionReader(storage, T, partition)
    return r.read(r.log_start_offset).to_pylist()


def test_a_merge_upload_held_at_a_gate_does_not_hold_a_produce_commit(tmp_path, monkeypatch):
    """Two merges whose uploads are stuck in their writes (every thread the fsync pool had
    before it was split: the merges' own threads and the pool's 4) and a produce commit of a
    segment with indexes (three files fsynced side by side) lands anyway."""
    url = f"file://{tmp_path}/root"
    storage = Storage(url)
    create_topic(storage, T, 3, {"index.interval.bytes": 1024})
    big = b"x" * 1500   # every flush's segment is longer than the index interval: 3 files
    for p in (0, 1):
        _fill(storage, p, flushes=8, value=big)
    before = {p: _records(storage, p) for p in (0, 1)}

    gate, arrived, lock = threading.Event(), [0], threading.Lock()
    all_held = threading.Event()
    durably = storage_mod._write_durably

    held_dirs = tuple(f"/{layout.partition_dir(T, p)}/" for p in (0, 1))

    def gated(tmp, data):
        # The merges' writes (partitions 0 and 1) wait at the gate; the produce (partition 2)
        # is never gated.
        if not gate.is_set() and any(d in tmp for d in held_dirs):
            with lock:
                arrived[0] += 1
                if arrived[0] >= 6:   # two merges, three files each
                    all_held.set()
            gate.wait(HANG_S)
        return durably(tmp, data)

    monkeypatch.setattr(storage_mod, "_write_durably", gated)
    # Pools of this test's own (a pool is made once per process, at the size its first user
    # asked for): the housekeeper's has the two threads asked for, the fsync pool its 4.
    pools: dict = {}
    monkeypatch.setattr(threads_mod, "_POOLS", pools)
    hk = Housekeeper(storage, min_segments=0, workers=2, gc_interval_ms=10**9)
    store = {p: ManifestStore(storage, T, p) for p in (0, 1)}
    try:
        for p in (0, 1):
            assert hk.poke(T, p, store[p].latest())
        assert all_held.wait(HANG_S), f"only {arrived[0]} housekeeping writes reached the gate"

        done, failed = threading.Event(), []

        def produce():
            try:
                b = Broker(storage, housekeeping=False)
                for j in range(4):
                    b.send(T, big + b"late-%d" % j, key=b"late", partition=2)
                b.flush()
            except BaseException as exc:  # noqa: BLE001 -- reported below
                failed.append(exc)
            finally:
                done.set()

        threading.Thread(target=produce, daemon=True).start()
        assert done.wait(HANG_S), "the produce commit waited for housekeeping's held uploads"
        assert not failed, failed
        assert not gate.is_set()   # the merges are still held: the produce did not wait
        assert [r["value"][-6:] for r in _records(storage, 2)] == [b"late-%d" % j for j in range(4)]
    finally:
        gate.set()
        assert hk.close(timeout_s=HANG_S)
        for _, pool in pools.values():
            pool.shutdown(wait=False)
    assert not hk.errors, hk.errors
    for p in (0, 1):   # the held merges landed afterwards, losing nothing
        assert hk.merges and _records(storage, p) == before[p]
        assert len(store[p].latest().segments) < 8


def test_housekeeping_storage_on_s3_has_its_own_clients_and_event_loop(tmp_path, request):
    """A housekeeping request stuck on its event loop does not hold the writer's put up."""
    url = make_root_url("s3", tmp_path, request)
    storage = Storage(url)
    twin = storage.for_housekeeping()
    assert twin is storage.for_housekeeping()   # one per storage
    assert twin.url == storage.url and twin.clock is storage.clock
    assert twin.fs is not storage.fs and twin._commit_fs is not storage._commit_fs
    assert twin.fs.loop is twin._commit_fs.loop
    stuck, release = threading.Event(), threading.Event()

    async def occupy():   # stands for a long request of a merge or gc on that loop
        stuck.set()
        while not release.is_set():
            await asyncio.sleep(0.01)

    held = asyncio.run_coroutine_threadsafe(occupy(), twin.fs.loop)
    try:
        assert stuck.wait(HANG_S)
        done = threading.Event()

        def put():
            storage.put("probe/a", b"ack path")
            storage.put_if_absent("probe/b", b"commit")
            done.set()

        threading.Thread(target=put, daemon=True).start()
        assert done.wait(HANG_S), "the writer's requests waited for housekeeping's event loop"
        assert not release.is_set() and not held.done()
    finally:
        release.set()
        held.result(HANG_S)
    assert twin.get("probe/a") == b"ack path" and twin.get("probe/b") == b"commit"


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_housekeeping_storage_elsewhere_is_the_storage_itself(backend, tmp_path, request):
    storage = Storage(make_root_url(backend, tmp_path, request))
    assert storage.for_housekeeping() is storage
