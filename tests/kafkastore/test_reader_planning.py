"""PartitionReader as the Spark data source uses it: exact, bounded timestamp lookups and
read plans (splits, the aborted transactions each range carries)."""
from __future__ import annotations

import random

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import AdvanceLogStart, ManifestStore
from kafkastore.read.reader import PartitionReader, read_range
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

T0 = 1_700_000_000_000


def _fill(storage: Storage, topic: str, stamps: list[int], *, value_size: int = 10,
          flush_every: int = 0, batch_size: int = 300) -> Broker:
    """One partition whose record at offset i has timestamp stamps[i]."""
    broker = Broker(storage, batch_size=batch_size)
    for i, ts in enumerate(stamps):
        broker.send(topic, b"v" * value_size, key=str(i).encode(), timestamp=ts, partition=0)
        if flush_every and (i + 1) % flush_every == 0:
            broker.flush()
    broker.flush()
    return broker


def _brute_force(stamps: list[int], target: int, start: int = 0) -> int:
    return next((o for o in range(start, len(stamps)) if stamps[o] >= target), len(stamps))


@pytest.mark.parametrize("interval", [1, 4096])
def test_offset_for_timestamp_is_exact(local_root, interval):
    """Every offset below the answer has a smaller timestamp: pushdown may skip them all."""
    storage = Storage(local_root)
    create_topic(storage, "ts", 1, {"index.interval.bytes": interval})
    rng = random.Random(7)
    # Timestamps wander (not monotonic), with repeats, over three segments.
    stamps = [T0 + i * 10 + rng.randint(-40, 40) for i in range(300)]
    _fill(storage, "ts", stamps, flush_every=100)
    reader = PartitionReader(storage, "ts", 0)
    assert len(reader.manifest.segments) == 3
    targets = sorted(set(stamps))[::7] + [T0 - 1000, max(stamps), max(stamps) + 1]
    for target in targets:
        assert reader.offset_for_timestamp(target) == _brute_force(stamps, target), target


def test_offset_for_timestamp_starts_at_the_log_start(local_root):
    storage = Storage(local_root)
    create_topic(storage, "ls", 1, {"index.interval.bytes": 1})
    _fill(storage, "ls", [T0 + i for i in range(40)], flush_every=20)
    ManifestStore(storage, "ls", 0).commit(lambda m: ([AdvanceLogStart(25)], []))
    reader = PartitionReader(storage, "ls", 0)
    assert reader.offset_for_timestamp(T0) == 25
    assert reader.offset_for_timestamp(T0 + 30) == 30


def test_offset_for_timestamp_reads_a_window_not_the_segment(local_root):
    storage = Storage(local_root)
    create_topic(storage, "big", 1, {"index.interval.bytes": 4096})
    _fill(storage, "big", [T0 + i for i in range(3000)], value_size=200, batch_size=4000)
    reader = PartitionReader(storage, "big", 0)
    assert reader.manifest.segments[0].size > 500_000
    reads = []
    original = storage.get_range

    def spy(rel, start, end):
        if rel.endswith(".log"):
            reads.append(end - start)
        return original(rel, start, end)

    storage.get_range = spy
    assert reader.offset_for_timestamp(T0 + 1500) == 1500
    assert reads and max(reads) <= 64 << 10
    reads.clear()
    assert reader.offset_for_timestamp(T0 + 10_000) == 3000   # none: the high watermark
    assert not reads                                           # the segment's max timestamp says so


def test_plan_splits_at_batch_boundaries_and_covers_each_record_once(local_root):
    storage = Storage(local_root)
    create_topic(storage, "split", 1, {"index.interval.bytes": 1})
    _fill(storage, "split", [T0 + i for i in range(200)], flush_every=70, batch_size=200)
    reader = PartitionReader(storage, "split", 0)
    for max_bytes in (None, 1, 500, 3000):
        for start, end in ((0, 200), (13, 151), (69, 71), (150, 150)):
            offsets = []
            for rr in reader.plan(start, end, max_bytes=max_bytes):
                offsets.extend(read_range(storage, rr).column("offset").to_pylist())
            assert offsets == list(range(start, end)), (max_bytes, start, end)
    assert len(reader.plan(0, 200, max_bytes=1)) > len(reader.plan(0, 200))


def test_plan_carries_only_the_aborted_transactions_that_matter(local_root):
    storage = Storage(local_root)
    create_topic(storage, "tx", 1)
    broker = Broker(storage)
    broker.send("tx", b"plain", partition=0)                 # 0
    broker.begin_transaction()
    broker.send("tx", b"gone", partition=0)                  # 1, abort marker at 2
    broker.abort_transaction()
    for _ in range(3):
        broker.send("tx", b"plain", partition=0)             # 3-5
    broker.flush()
    reader = PartitionReader(storage, "tx", 0)
    pid = broker.producer_id
    assert {rr.aborted for rr in reader.plan(0, 6)} == {((pid, 1, 2),)}
    assert {rr.aborted for rr in reader.plan(3, 6)} == {()}   # after the transaction
    assert {rr.aborted for rr in reader.plan(0, 1)} == {()}   # before it
    values = [v for rr in reader.plan(0, 6) for v in read_range(storage, rr).column("value").to_pylist()]
    assert values == [b"plain"] * 4
