"""The data source's split planning and reading on index-free flush segments, on merged ones,
and for a plan made before a merge (read after it), without Spark: the planned input partitions
are read by the reader's own ``read`` as Spark's workers do."""
from __future__ import annotations

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import merge_partition
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.source.datasource import KafkaStoreDataSource

T = "trickle"


def _offsets(reader, parts):
    out = []
    for part in parts:
        for batch in reader.read(part):
            out += [(p, o) for p, o in zip(batch.column("partition").to_pylist(),
                                           batch.column("offset").to_pylist())]
    return sorted(out)


def _reader(root, **options):
    ds = KafkaStoreDataSource({"root": root, "topic": T, **options})
    return ds.reader(ds.schema())


@pytest.mark.parametrize("backend", ["file", "s3"])  # (memory: not visible to Spark workers)
def test_planning_on_index_free_and_merged_segments(backend, tmp_path, request):
    from tests.helpers.roots import make_root_url

    root = make_root_url(backend, tmp_path, request)
    storage = Storage(root)
    create_topic(storage, T, 2, configs={"index.interval.bytes": "256"})
    b = Broker(storage, housekeeping=False)
    for i in range(40):  # one small flush per round per partition: index-free segments
        for p in (0, 1):
            b.send(T, b"x" * 60, key=b"k%d" % i, partition=p)
        b.flush()
    want = sorted((p, o) for p in (0, 1) for o in range(40))
    assert all(s.index_size == 0 for s in ManifestStore(storage, T, 0).latest().segments)

    before = _reader(root, minPartitions=16, maxBytesPerPartition=400)
    planned_before = before.partitions()
    assert len(planned_before) >= 16  # one split per index-free segment at least
    assert _offsets(before, planned_before) == want

    for p in (0, 1):
        merge_partition(storage, T, p, min_segments=0, rounds=10, pack=True)
    merged = ManifestStore(storage, T, 0).latest().segments
    assert len(merged) == 1 and merged[0].index_size > 0
    # the plan made before the merge still reads (files kept until gc's grace)
    assert _offsets(before, planned_before) == want
    # a plan made after: the merged segment is cut at its index entries
    after = _reader(root, minPartitions=16, maxBytesPerPartition=400)
    parts = after.partitions()
    assert len(parts) >= 16
    assert _offsets(after, parts) == want
    few = _reader(root)
    assert len(few.partitions()) == 2 and _offsets(few, few.partitions()) == want
