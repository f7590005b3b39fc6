"""Unknown outcomes of a manifest commit are settled by reading back, on every backend.

An S3 client retries a PUT whose response it lost (a 5xx, a reset connection); when the
first attempt was applied, the retry's ``If-None-Match: *`` answers 412, which reaches us
as a plain conflict although the version is ours. Treated as a lost race, the batch was
appended a second time: records of producers without a producer id were stored twice.
"""
from __future__ import annotations

import pytest

from kafkastore.broker import Broker
from kafkastore.manifest import AppendSegments, ManifestStore, SegmentEntry
from kafkastore.storage import Storage
from kafkastore.reader import PartitionReader
from kafkastore.topics import create_topic
from tests.faults import faulty_storage

T = "t"


def _values(storage):
    t = PartitionReader(storage, T, 0).read(-2)
    return t.column("value").to_pylist()


def _conflict_after_write(op, path):
    return FileExistsError(17, "precondition failed (a retry of our own PUT)", path)


def _append_one(store, sid):
    """Commit one 10-record segment at the head, as a batch without a producer id is
    placed: the plan only reads the high watermark, so it would apply twice."""
    def build(base):
        at = base.high_watermark if base is not None else 0
        return [AppendSegments((SegmentEntry(
            base_offset=at, next_offset=at + 10, record_count=10, size=100, min_timestamp=1,
            max_timestamp=2, segment_id=sid, writer_id=1, leader_epoch=0, checksum=1),))], []
    return store.commit(build, operation="append")


@pytest.mark.parametrize("fault", ["conflict after the write", "lost response"])
def test_a_commit_applied_but_not_acknowledged_is_not_appended_twice(root_url, fault,
                                                                     metadata_only_commits):
    storage, fs = faulty_storage(root_url)
    store = ManifestStore(storage, T, 0)
    _append_one(store, "first")
    if fault == "lost response":
        fs.lose_response(match="_manifest/0")
    else:
        fs.inject("write", "after", match="_manifest/0", error=_conflict_after_write)
    landed = _append_one(store, "second")
    assert fs.log, "the fault did not fire"
    head = ManifestStore(Storage(root_url), T, 0).latest()
    assert landed.version == head.version == 2
    assert [s.segment_id for s in head.segments] == ["first", "second"]
    assert head.high_watermark == 20


def test_a_real_lost_race_still_retries_on_top_of_the_winner(local_root):
    """Reading back after a conflict must not mistake another writer's version for ours."""
    storage, fs = faulty_storage(local_root)
    create_topic(storage, T, 1)
    other = Broker(storage)
    other.send(T, b"other", partition=0)

    def race(op, path):
        if not race.done:
            race.done = True
            other.flush()   # lands the same version number first
    race.done = False
    fs.on_write(lambda op, path: race(op, path), match="_manifest/0")
    mine = Broker(storage)
    mine.send(T, b"mine", partition=0)
    mine.flush()
    assert sorted(_values(storage)) == [b"mine", b"other"]
