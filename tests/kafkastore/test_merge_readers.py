"""Readers that keep their own position across commits, on delta manifests and merged segments:
the ``__consumer_offsets`` cache (advanced from the last offset it read) and a consumer's
incremental reads, while merges replace the segments they read before."""
from __future__ import annotations

from kafkastore.groups.offsets import OFFSETS_TOPIC, OffsetAndMetadata, OffsetsStore
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import merge_partition
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from tests.helpers.logdata import flush_each_record


def test_consumer_offsets_cache_survives_merges_of_its_segments(root_url):
    """The cache reads on from the offset it stopped at; a merge rewrites the segments under
    it (same offsets, new ids, indexes built) and the delta versions carry the change."""
    s = Storage(root_url)
    store = OffsetsStore(s, partitions=1, clock=lambda: 1000)
    want: dict[str, dict] = {}
    for i in range(40):  # 40 small commits: 40 index-free segments, versions mostly deltas
        g = f"g{i % 5}"
        om = OffsetAndMetadata(i, 0, f"m{i}", 1000 + i)
        store.commit_offsets(g, {("t", i % 3): om})
        want.setdefault(g, {})[("t", i % 3)] = om
        if i in (17, 31):  # merge mid-way: the store's next read starts inside merged segments
            merge_partition(s, OFFSETS_TOPIC, 0, min_segments=0, rounds=10, pack=True)
    m = ManifestStore(s, OFFSETS_TOPIC, 0).latest()
    assert len(m.segments) < 12  # merged (40 commits made 40 segments)
    for g, offsets in want.items():
        assert store.group(g).offsets == offsets  # the incremental cache
        assert OffsetsStore(Storage(root_url)).group(g).offsets == offsets  # a fresh read
    assert store.skipped_records == 0
    hw = PartitionReader(s, OFFSETS_TOPIC, 0).high_watermark
    rows = PartitionReader(s, OFFSETS_TOPIC, 0).read(0).to_pylist()
    assert [r["offset"] for r in rows] == list(range(hw)) and hw == 40


def test_a_consumer_reading_on_from_its_position_across_merges(root_url):
    """A consumer that polls from its last offset sees every record once while merges
    replace the segments it already read and the one it is in the middle of."""
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.topics.admin import create_topic

    s = Storage(root_url)
    create_topic(s, "ev", 1)
    b = Broker(s, housekeeping=False)
    seen: list[int] = []
    pos = 0
    for i in range(36):
        b.send("ev", b"v%d" % i, partition=0)
        b.send("ev", b"w%d" % i, partition=0)
        b.flush()
        if i % 3 == 0:
            rows = PartitionReader(s, "ev", 0).read(pos, max_records=3).to_pylist()
            seen += [r["offset"] for r in rows]
            pos = seen[-1] + 1 if seen else pos
        if i % 10 == 9:
            merge_partition(s, "ev", 0, min_segments=0, rounds=10, pack=True)
    seen += [r["offset"] for r in PartitionReader(s, "ev", 0).read(pos).to_pylist()]
    assert seen == list(range(72))


def test_a_small_merged_segment_uploads_no_empty_index(local_root):
    """A merge whose result is under index.interval.bytes has an empty .index (Kafka's sparse
    rule): like a small flush it is not uploaded (index_size 0 reads as absent)."""
    from kafkastore import layout
    from kafkastore.read.verify import verify_partition

    s = Storage(local_root)
    flush_each_record(s, "ev", 8)
    merge_partition(s, "ev", 0, min_segments=0, rounds=10, pack=True)
    (seg,) = ManifestStore(s, "ev", 0).latest().segments
    assert seg.index_size == 0 and seg.timeindex_size > 0
    objects = {o.path: o.size for o in s.list(layout.partition_dir("ev", 0))}
    paths = seg.paths("ev", 0)
    assert paths[".index"] not in objects and objects[paths[".timeindex"]] == seg.timeindex_size
    assert all(size > 0 for path, size in objects.items() if "/_manifest/" not in path)
    r = PartitionReader(s, "ev", 0)
    assert [x["offset"] for x in r.read(3).to_pylist()] == list(range(3, 8))
    assert verify_partition(s, "ev", 0).ok


def test_the_housekeeper_sees_a_config_altered_while_it_runs(local_root):
    """A long-running process's housekeeper re-reads the topic config once per gc interval:
    after `alter` lowers segment.bytes, it no longer merges past the new cap."""
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.maintenance.housekeeper import Housekeeper
    from kafkastore.topics.admin import alter_topic, create_topic

    s = Storage(local_root)
    create_topic(s, "ev", 1)
    b = Broker(s, housekeeping=False)
    store = ManifestStore(s, "ev", 0)
    now = [s.clock.wall_ms()]
    hk = Housekeeper(s, clock=lambda: now[0], min_segments=0)

    def flushes(n):
        for i in range(n):
            b.send("ev", b"v%d" % i, partition=0)
            b.flush()

    flushes(8)
    assert hk.poke("ev", 0, store.latest())
    hk.wait()
    assert hk.merges and not hk.errors
    alter_topic(s, "ev", set_configs={"segment.bytes": 14})  # no two segments fit any more
    now[0] += hk.gc_interval_ms
    flushes(8)
    before = store.latest()
    hk.poke("ev", 0, before)
    hk.wait()
    assert not hk.errors
    assert [x.segment_id for x in store.latest().segments] == [x.segment_id for x in before.segments]
    hk.close()


def test_import_continues_a_delta_format_log_and_merges_with_it(tmp_path, local_root):
    """`import` onto a partition whose versions are deltas (and index-free flush segments),
    then merging across the imported segment, then produce again: one dense log."""
    import json

    import pytest

    pytest.importorskip("kafka.record.default_records")
    from kafkastore import layout
    from kafkastore.read.verify import verify_partition
    from kafkastore.write.kafka_import import import_kafka_dir
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.topics.admin import create_topic
    from tests.helpers.kafka_dir import kafka_batch, write_kafka_dir

    s = Storage(local_root)
    create_topic(s, "ev", 1)
    b = Broker(s, housekeeping=False)
    for i in range(20):
        b.send("ev", b"p%d" % i, partition=0)
        b.flush()
    assert json.loads(s.get(layout.manifest_path("ev", 0, 20)))["kind"] == "delta"
    d = write_kafka_dir(tmp_path, "k", {20: [kafka_batch(20, [b"i0", b"i1", b"i2"])]}, leftovers=False)
    res = import_kafka_dir(s, str(d), "ev", 0)
    assert res.high_watermark == 23
    for i in range(12):
        b.send("ev", b"q%d" % i, partition=0)
        b.flush()
    merge_partition(s, "ev", 0, min_segments=0, rounds=10, pack=True)
    # the imported batch is stamped 2023: segment.ms keeps it apart from today's neighbours,
    # which merge on each side
    assert [(x.base_offset, x.next_offset) for x in ManifestStore(s, "ev", 0).latest().segments] \
        == [(0, 20), (20, 23), (23, 35)]
    values = PartitionReader(s, "ev", 0).read(0).column("value").to_pylist()
    assert values == ([b"p%d" % i for i in range(20)] + [b"i0", b"i1", b"i2"]
                      + [b"q%d" % i for i in range(12)])
    assert verify_partition(s, "ev", 0).ok
