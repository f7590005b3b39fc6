"""gc never deletes a live segment file, whatever lands between its steps (the
40,000-commit soak through bench/counting_fs.py printed "no object ...log" for a live flush
segment; the cause was the bench removing its root while a merge job still ran, and this
checks the interleaving it was suspected of).

At every storage operation gc makes (listing versions to expire, reading versions, the
checkpoint it may commit, listing candidates, reading the head and the checkpoint chain,
each delete), a writer flushes one small segment and a merge commits, then gc goes on. gc runs
with a clock far past the grace, so every unlisted file is old enough to go: only the
referenced set protects the live ones. The root is reached through bench/counting_fs.py's
CountingFS, as the soak's was.
"""
from __future__ import annotations

import pytest

from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import merge_partition
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.roots import make_root_url
from tests.helpers.counting import counting_fs

T, P = "events", 0
LATER = 3600 * 1000


def live_files_missing(storage) -> list[str]:
    m = ManifestStore(storage, T, P).latest()
    stored = {o.path for o in storage.list(layout.partition_dir(T, P))}
    return [p for s in m.segments for ext, p in s.paths(T, P).items()
            if p not in stored and (ext == ".log" or (ext == ".index" and s.index_size)
                                    or (ext == ".timeindex" and s.timeindex_size))]


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_gc_never_deletes_a_live_file_whatever_lands_between_its_steps(backend, tmp_path, request):
    url = make_root_url(backend, tmp_path, request)
    inner = Storage(url)
    create_topic(inner, T, 1)
    faulty = FaultyFS(counting_fs(inner.fs))
    storage = Storage(url, fs=faulty)
    writer = Broker(storage, housekeeping=False)
    sent = 0

    def flush_and_merge(op=None, path=None):
        nonlocal sent
        writer.send(T, b"v%d" % sent, partition=P)
        sent += 1
        writer.flush()
        merge_partition(storage, T, P, min_segments=0, fan_in=2, max_runs=2)

    for _ in range(24):
        flush_and_merge()
    # how many storage operations one gc makes here (the steps to interleave at)
    seen = faulty.inject(("write", "read", "stat", "list", "delete"), "before", count=None,
                         callback=lambda op, path: None)
    collect_garbage(storage, T, P, now_ms=inner.clock.wall_ms() + LATER)
    faulty.clear()
    steps = seen.fired
    assert steps > 5
    for step in range(steps):
        calls = [0]

        def at_step(op, path, step=step):
            calls[0] += 1
            if calls[0] == step + 1:
                flush_and_merge()

        faulty.inject(("write", "read", "stat", "list", "delete"), "before", count=None,
                      callback=at_step)
        collect_garbage(storage, T, P, now_ms=inner.clock.wall_ms() + LATER)
        faulty.clear()
        assert live_files_missing(inner) == [], f"gc step {step} ({calls[0]} operations)"
    r = PartitionReader(inner, T, P)
    rows = r.read(r.log_start_offset).to_pylist()
    assert [row["value"] for row in rows] == [b"v%d" % i for i in range(sent)]
