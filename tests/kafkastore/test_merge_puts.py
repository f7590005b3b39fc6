"""Objects written per produce commit on moto's S3: a small Broker flush puts
one .log object and one manifest version per partition; the indexes come with merging.

Run with ``-s`` to print the figures (PUTs per commit and per MB); with
``KAFKASTORE_PUT_FIGURES=1`` also at 128 partitions and with 1 MiB flushes (a minute on moto).
"""
from __future__ import annotations

import os

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.roots import make_root_url

T = "puts"


def count_puts(url, partitions, records_per_partition=10, value=b"x" * 100, flushes=3):
    inner = Storage(url)
    create_topic(inner, T, partitions)
    fs = FaultyFS(inner.fs)
    storage = Storage(url, fs=fs)
    writes: list[str] = []
    fs.on_write(lambda op, path: writes.append(path), count=None)
    b = Broker(storage, housekeeping=False)
    payload = 0
    for _ in range(flushes):
        for p in range(partitions):
            for _ in range(records_per_partition):
                b.send(T, value, partition=p)
                payload += len(value)
        b.flush()
    fs.clear()
    commits = partitions * flushes
    return len(writes), commits, payload, writes


FIGURES = os.environ.get("KAFKASTORE_PUT_FIGURES") == "1"


@pytest.mark.parametrize("partitions", [1, 16] + ([128] if FIGURES else []))
def test_a_small_flush_puts_two_objects_per_partition(request, tmp_path, partitions):
    url = make_root_url("s3", tmp_path, request)
    puts, commits, payload, writes = count_puts(url, partitions, flushes=10 if FIGURES else 3)
    logs = [w for w in writes if w.endswith(".log")]
    manifests = [w for w in writes if "/_manifest/" in w]
    versions = [w for w in manifests if w.rsplit("/", 1)[-1][:20].isdigit()]
    assert len(logs) == commits and not [w for w in writes if w.endswith("index")]
    assert len(versions) == commits  # one version per commit; other manifest objects are
    assert puts - len(manifests) == commits  # the manifest store's checkpoints / hints
    print(f"\nS3 PUTs, {partitions} partition(s), {commits} commits of "
          f"{payload // commits} payload bytes: {puts} PUTs = {puts / commits:.2f} per commit "
          f"({len(logs) / commits:.2f} segment object, {len(manifests) / commits:.2f} manifest "
          f"objects), {puts / (payload / 2 ** 20):.0f} per MB of payload")
    # every partition still reads what it was sent (index-free segments)
    inner = Storage(url)
    for p in (0, partitions - 1):
        r = PartitionReader(inner, T, p)
        assert r.read(0).num_rows == 10 * (10 if FIGURES else 3)
        assert r.offset_for_timestamp(0) == 0
        assert [s.index_size + s.timeindex_size for s in ManifestStore(inner, T, p).latest().segments] == [0] * (10 if FIGURES else 3)


@pytest.mark.skipif(not FIGURES, reason="figures only (KAFKASTORE_PUT_FIGURES=1)")
@pytest.mark.parametrize("partitions", [1, 16])
def test_figures_for_one_mib_flushes(request, tmp_path, partitions):
    url = make_root_url("s3", tmp_path, request)
    puts, commits, payload, writes = count_puts(url, partitions, records_per_partition=1024,
                                                value=b"y" * 1024, flushes=2)
    print(f"\nS3 PUTs, {partitions} partition(s), {commits} commits of {payload // commits} "
          f"payload bytes: {puts} PUTs = {puts / commits:.2f} per commit, "
          f"{puts / (payload / 2 ** 20):.2f} per MB of payload")
