"""One writer of segments (kafkastore.segment_writer).

Every producer of segments (Broker, serve's Appender, import, compaction, merging) turns
uploaded bytes into a manifest entry through one function, uploads through one policy,
re-uploads stale files by one rule, and checks a client's sequence numbers by Kafka's rule once.
"""
from __future__ import annotations

import ast
import pathlib
import time

import pytest
from hypothesis import given, settings, strategies as st

import kafkastore
from kafkastore import layout
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.manifest import AppendSegments, BatchMetadata, ManifestStore, ProducerState
from kafkastore.read.reader import PartitionReader
from kafkastore.topics.admin import create_topic
from kafkastore.write.segments import (APPEND, DUPLICATE, FENCED, OUT_OF_ORDER, Uploads,
                                       check_sequence, write_segment)
from kafkastore.storage import Storage
from tests.helpers.segments import TS0 as TS, make_batch, simple_batches

T, P = "events", 0
LIBRARY = pathlib.Path(kafkastore.__file__).parent


def _builds_entries(path: pathlib.Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == "SegmentEntry":
                return True
    return False


def test_only_the_segment_writer_builds_manifest_entries_from_uploaded_bytes():
    builders = sorted(str(p.relative_to(LIBRARY)) for p in LIBRARY.rglob("*.py") if _builds_entries(p))
    assert builders == ["write/segments.py"]


def _built(base: int, n: int, **kw):
    builder = SegmentBuilder(base, index_interval_bytes=kw.pop("index_interval_bytes", 4096))
    for batch in simple_batches(base, n, **kw):
        builder.append(batch)
    return builder.build()


def _objects(storage: Storage, entry) -> list[str]:
    present = {o.path for o in storage.list(layout.partition_dir(T, P))}
    return sorted(ext for ext, path in entry.paths(T, P).items() if path in present)


def test_a_small_segment_goes_up_as_its_log_alone_and_lands_where_it_is_shifted(local_root):
    storage = Storage(local_root)
    built = _built(0, 3)
    assert len(built.log) < 4096 and built.timeindex
    entry = write_segment(storage, T, P, built.stats, built.log, built.index, built.timeindex,
                          writer_id=7, leader_epoch=2, shift=100, index_interval_bytes=4096)
    assert (entry.base_offset, entry.next_offset) == (100, 100 + built.stats.next_offset)
    assert (entry.index_size, entry.timeindex_size, entry.size) == (0, 0, len(built.log))
    assert (entry.writer_id, entry.leader_epoch) == (7, 2)
    assert entry.max_timestamp_offset == built.stats.offset_of_max_timestamp + 100
    assert _objects(storage, entry) == [".log"]


def test_a_single_large_batch_goes_up_as_its_log_alone_and_reads_as_with_its_indexes(local_root):
    """A segment of one batch longer than index.interval.bytes has no .index entry (Kafka's
    sparse rule indexes a batch only after the bytes before it), so its .timeindex could
    only name an offset that a reader then scans for from position 0: the writer uploads
    the .log alone (a transaction's batch at a partition is one file and the manifest
    version), and reads by offset and by timestamp answer as they did with the indexes."""
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    builder = SegmentBuilder(0, index_interval_bytes=4096)
    stamps = [TS + 10 * i for i in range(40)]
    builder.append(make_batch(0, stamps, value_size=400))
    built = builder.build()
    assert len(built.log) > 4096 and not built.index and built.timeindex
    entry = write_segment(storage, T, P, built.stats, built.log, built.index, built.timeindex,
                          writer_id=0, leader_epoch=0, index_interval_bytes=4096)
    assert (entry.index_size, entry.timeindex_size, entry.size) == (0, 0, len(built.log))
    assert _objects(storage, entry) == [".log"]
    ManifestStore(storage, T, P).commit(lambda m: ([AppendSegments((entry,))], []))
    reader = PartitionReader(storage, T, P)
    assert reader.offset_for_timestamp(TS + 10 * 17 - 3) == 17
    assert reader.offset_for_timestamp(TS + 10 * 40) == 40
    assert reader.read(25, 27).column("offset").to_pylist() == [25, 26]


def test_a_large_segment_goes_up_whole_and_an_import_keeps_empty_indexes(root_url):
    storage = Storage(root_url)   # local files: one put_many; elsewhere: PUTs side by side
    big = _built(0, 40, value_size=400, index_interval_bytes=1024)
    assert big.index and len(big.log) > 4096
    entry = write_segment(storage, T, P, big.stats, (big.log[:100], big.log[100:]), big.index,
                          big.timeindex, writer_id=0, leader_epoch=0, index_interval_bytes=4096)
    assert _objects(storage, entry) == [".index", ".log", ".timeindex"]
    assert storage.get(entry.paths(T, P)[".log"]) == big.log and entry.size == len(big.log)
    one = SegmentBuilder(500)
    one.append(make_batch(500))
    small = one.build()
    assert not small.index
    kept = write_segment(storage, T, P, small.stats, small.log, small.index, small.timeindex,
                         writer_id=-1, leader_epoch=0, empty_indexes=True, next_offset=510)
    assert _objects(storage, kept) == [".index", ".log", ".timeindex"] and kept.next_offset == 510


def test_a_retry_uploads_again_only_what_grew_too_old(local_root, monkeypatch):
    monkeypatch.setattr(ManifestStore, "min_keep_ms", 400)   # files older than 200 ms are stale
    storage = Storage(local_root)
    store = ManifestStore(storage, T, P)
    calls = []

    def upload(i):
        calls.append(i)
        built = _built(10 * i, 2)
        return write_segment(storage, T, P, built.stats, built.log, built.index, built.timeindex,
                             writer_id=0, leader_epoch=0)

    uploads = Uploads(store)
    first = list(uploads.get(0, 2, upload))
    assert uploads.get(0, 2, upload) == first and calls == [0, 1]   # young: kept
    assert [e.segment_id for e in uploads.get(1, 1, upload)] != [first[0].segment_id]
    time.sleep(0.3)
    again = uploads.get(0, 2, upload)
    assert calls == [0, 1, 0, 0, 1]
    assert {e.segment_id for e in again}.isdisjoint({e.segment_id for e in first})
    assert store.stale_uploads(again) == []


def _state(epoch, *batches):
    return ProducerState(epoch=epoch, batches=tuple(BatchMetadata(f, l, 100 + f, 100 + l, -1)
                                                    for f, l in batches))


@pytest.mark.parametrize("state, epoch, first, last, verdict", [
    (None, 3, 17, 19, APPEND),                       # a producer the partition does not know
    (_state(3, (0, 4)), 3, 5, 9, APPEND),
    (_state(3, (0, 4)), 3, 0, 4, DUPLICATE),
    (_state(3, (0, 4)), 3, 6, 9, OUT_OF_ORDER),
    (_state(3, (0, 4)), 2, 5, 9, FENCED),
    (_state(3, (0, 4)), 4, 0, 2, APPEND),
    (_state(3, (0, 4)), 4, 5, 6, OUT_OF_ORDER),
    (_state(3), 3, 5, 6, OUT_OF_ORDER),              # no batch in this epoch yet: starts at 0
    (_state(3), 3, 0, 6, APPEND),
    (_state(3, (2147483640, 2147483647)), 3, 0, 3, APPEND),   # the sequence wraps
])
def test_kafkas_sequence_rule(state, epoch, first, last, verdict):
    got, value = check_sequence(state, 9, epoch, first, last)
    assert got == verdict
    if verdict == DUPLICATE:
        assert (value.first_offset, value.last_offset) == (100, 104)
    if verdict == APPEND:
        assert value.epoch == epoch


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=12), st.data())
def test_batches_in_order_append_and_any_retained_one_is_a_duplicate(counts, data):
    state, seq = None, 0
    for n in counts:
        verdict, state_or = check_sequence(state, 1, 0, seq, seq + n - 1)
        assert verdict == APPEND
        state = state_or.with_batch(BatchMetadata(seq, seq + n - 1, seq, seq + n - 1, -1))
        seq += n
    retained = data.draw(st.sampled_from(state.batches))
    verdict, dup = check_sequence(state, 1, 0, retained.first_sequence, retained.last_sequence)
    assert verdict == DUPLICATE and dup == retained
    assert check_sequence(state, 1, 0, seq + 1, seq + 1)[0] == OUT_OF_ORDER
