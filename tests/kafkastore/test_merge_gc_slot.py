"""The housekeeper's gc runs beside its merges, not in front of them (a gc that
replayed ~20k versions held the one job slot for minutes while live segments piled up)."""
from __future__ import annotations

import threading
import time

import pytest

from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.housekeeper import Housekeeper
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.roots import make_root_url

T, P = "events", 0


def fill(storage, flushes):
    b = Broker(storage, housekeeping=False)
    for i in range(flushes):
        for j in range(3):
            b.send(T, b"v%d-%d" % (i, j), key=b"k%d" % j, partition=P)
        b.flush()


def snapshot(storage):
    r = PartitionReader(storage, T, P)
    return r.read(r.log_start_offset).to_pylist()


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_a_slow_gc_does_not_stop_a_merge_from_landing(backend, tmp_path, request):
    url = make_root_url(backend, tmp_path, request)
    inner = Storage(url)
    create_topic(inner, T, 1)
    fill(inner, flushes=16)
    expected = snapshot(inner)
    fs = FaultyFS(inner.fs)
    storage = Storage(url, fs=fs)
    store = ManifestStore(inner, T, P)
    now = [inner.clock.wall_ms() + 10 * 60_000]  # gc is due at the first poke
    hk = Housekeeper(storage, clock=lambda: now[0], min_segments=0, gc_interval_ms=0)
    hk._started_ms -= 1
    gc_listing, release = threading.Event(), threading.Event()

    def stall(op, path):  # gc's first listing (version expiry) hangs until released
        gc_listing.set()
        release.wait(30)

    fs.inject("list", "before", match=layout.partition_dir(T, P), count=1, callback=stall)
    try:
        assert hk.poke(T, P)  # no manifest: gc only
        assert gc_listing.wait(10)
        # a commit lands while gc is stuck: its merge must land now, not after the gc
        before = store.latest()
        assert hk.poke(T, P, before)
        deadline = time.monotonic() + 20
        while store.latest().version == before.version and time.monotonic() < deadline:
            time.sleep(0.02)
        merged = store.latest()
        assert merged.commit.operation == "merge", "the merge waited for the gc"
        assert len(merged.segments) < len(before.segments)
    finally:
        release.set()
    hk.wait()
    assert not hk.errors and hk.gc_runs == 1
    assert snapshot(inner) == expected
    hk.close()


def test_the_gc_of_a_removed_root_is_dropped_quietly(tmp_path):
    """A root removed under a housekeeper (a bench's temporary root, a deleted topic): its gc
    finds an unknown topic once, owes nothing after that, and records no error."""
    import shutil

    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, T, 1)
    fill(storage, 2)
    now = [storage.clock.wall_ms()]
    hk = Housekeeper(storage, clock=lambda: now[0], min_segments=0)
    hk.sweep_s = 0.02
    hk.poke(T, P, ManifestStore(storage, T, P).latest())
    hk.wait()
    shutil.rmtree(tmp_path / "root")
    now[0] += 10 * 60_000
    deadline = time.monotonic() + 10
    while (T, P) in hk._quiet and time.monotonic() < deadline:
        time.sleep(0.02)
    hk.wait()
    assert (T, P) not in hk._quiet and hk.errors == []
    hk.close()
