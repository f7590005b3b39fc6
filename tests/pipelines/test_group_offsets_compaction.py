"""``kafkastore compact __consumer_offsets`` keeps the latest record per key; groups read the same."""
from __future__ import annotations

from kafkastore.groups.offsets import (OFFSETS_TOPIC, OffsetAndMetadata, OffsetsStore, decode_key,
                                       partition_for_group)
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from pipelines.jobs.log_compaction import compact_topic


def test_compaction_keeps_latest_offset_per_key(spark, local_root):
    s = Storage(local_root)
    store = OffsetsStore(s, partitions=1)
    for i in range(6):
        store.commit_offsets("g", {("t", 0): OffsetAndMetadata(i), ("t", 1): OffsetAndMetadata(10 + i)})
    store.commit_offsets("gone", {("t", 0): OffsetAndMetadata(1)})
    store.delete_group("gone")
    store.commit_offsets("g", {("t", 2): OffsetAndMetadata(7)})   # the head segment
    before = OffsetsStore(Storage(local_root)).group("g").offsets

    report = compact_topic(spark, local_root, OFFSETS_TOPIC, force=True)
    assert report.ok

    keys = PartitionReader(s, OFFSETS_TOPIC, partition_for_group("g", 1)).read(0).column("key").to_pylist()
    decoded = [decode_key(k) for k in keys]
    assert len(decoded) == len(set(decoded))          # one record per key survives
    after = OffsetsStore(Storage(local_root))
    assert after.group("g").offsets == before == {
        ("t", 0): OffsetAndMetadata(5), ("t", 1): OffsetAndMetadata(15), ("t", 2): OffsetAndMetadata(7)}
    assert after.groups() == ["g"]
    # the store that read before compaction keeps going from where it was
    store.commit_offsets("g", {("t", 0): OffsetAndMetadata(6)})
    assert store.group("g").offsets[("t", 0)].offset == 6
