"""A merge job on a slow store commits what it built in time instead of building every planned
run and then finding its first uploads too old to commit (on a loaded machine's moto
S3, every 32-run job of a backlog took over 30 s and merged nothing, so live segments grew
with every commit)."""
from __future__ import annotations

import uuid

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.clock import ManualClock
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import merge_partition
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS

T = "slow"
SECONDS_PER_READ = 2.0   # every .log read "takes" this long: a run of 4 inputs, 8 s


def test_a_slow_merge_job_commits_the_runs_built_in_time():
    url = f"memory://slow-merge-{uuid.uuid4().hex}"
    clock = ManualClock()
    fs = FaultyFS(Storage(url).fs)
    storage = Storage(url, fs=fs, clock=clock)
    create_topic(storage, T, 1)
    broker = Broker(storage, housekeeping=False)
    for i in range(40):
        broker.send(T, b"v%d" % i, partition=0)
        broker.flush()
    store = ManifestStore(storage, T, 0)
    assert len(store.latest().segments) == 40

    fs.inject("read", "before", match=lambda op, path: path.endswith(".log"), count=None,
              callback=lambda op, path: clock.advance(SECONDS_PER_READ))
    report = merge_partition(storage, T, 0, fan_in=4, min_segments=32, max_runs=32)

    assert report.planned >= 8           # 8+ runs of 4: 64+ s of reads in all
    assert not report.dropped, report.dropped
    # Half of the 30 s upload age limit spent building: the runs built by then (each 8 s).
    assert 1 <= len(report.merged) <= 3
    m = store.latest()
    assert len(m.segments) == 40 - 3 * len(report.merged)
    fs.clear()
    reader = PartitionReader(storage, T, 0)
    assert reader.read(0, 40).column("value").to_pylist() == [b"v%d" % i for i in range(40)]
