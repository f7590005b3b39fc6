"""The data source's ``startingOffsetsFromGroup``: a batch job starts where a consumer group stands."""
from __future__ import annotations

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError
from kafkastore.groups.offsets import OFFSETS_TOPIC, OffsetAndMetadata, OffsetsStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.source.datasource import parse_options, plan_offsets, read_topic


@pytest.fixture
def root(local_root):
    s = Storage(local_root)
    create_topic(s, "ev", 3)
    b = Broker(s)
    for p in range(3):
        for i in range(6):
            b.send("ev", b"%d-%d" % (p, i), partition=p)
    b.flush()
    OffsetsStore(s).commit_offsets("g", {("ev", 0): OffsetAndMetadata(4), ("ev", 1): OffsetAndMetadata(6),
                                         ("other", 0): OffsetAndMetadata(1)})
    return local_root


def test_starts_at_the_groups_committed_offsets(spark, root):
    def ends():
        s = Storage(root)
        return [PartitionReader(s, OFFSETS_TOPIC, p).high_watermark for p in range(8)]

    before = ends()
    df = read_topic(spark, root, "ev", startingOffsetsFromGroup="g",
                    startingOffsets={"ev": {"2": 5}})
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    # p0 from its commit 4, p1 committed at the end (nothing), p2 uncommitted: startingOffsets
    assert got == [(0, 4), (0, 5), (2, 5)]
    # reading never writes to the group
    assert ends() == before
    assert OffsetsStore(Storage(root)).group("g").offsets[("ev", 0)].offset == 4


def test_unknown_group_reads_from_the_starting_options(root):
    ranges = plan_offsets(root, "ev", startingOffsetsFromGroup="nobody")
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [(0, 0, 6), (1, 0, 6), (2, 0, 6)]


def test_empty_group_id_is_refused():
    with pytest.raises(ConfigError, match="startingOffsetsFromGroup"):
        parse_options({"root": "file:///x", "topic": "t", "startingOffsetsFromGroup": " "})
