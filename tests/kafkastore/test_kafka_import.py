"""Adopting a Kafka partition directory as a broker leaves it."""
from __future__ import annotations

import os

import pytest

from kafkastore.errors import ConfigError, CorruptRecordError, CrcMismatchError
from kafkastore.write.kafka_import import parse_kafka_dir_name, read_kafka_partition_dir
from kafkastore.errors import OffsetOrderError
from kafkastore.format.segment_build import rebuild_indexes

from tests.helpers.segments import build_log, simple_batches

INDEX_PREALLOC = 1 << 20  # brokers use segment.index.bytes = 10 MiB; 1 MiB keeps tests quick


@pytest.mark.parametrize("name, expected", [
    ("orders-0", ("orders", 0)),
    ("orders-12", ("orders", 12)),
    ("my-topic-3", ("my-topic", 3)),
    ("__consumer_offsets-49", ("__consumer_offsets", 49)),
    ("a.b_c-7", ("a.b_c", 7)),
    ("/var/lib/kafka/data/orders-3/", ("orders", 3)),
    ("orders", None),
    ("orders-", None),
    ("-3", None),
    ("orders-x", None),
    ("orders--1", ("orders-", 1)),        # topic "orders-", as Kafka reads it
    ("orders-3.9f8e7d6c5b4a49d8a1b2c3d4e5f60718-delete", None),
    ("orders-3.9f8e7d6c5b4a49d8a1b2c3d4e5f60718-future", None),
    ("orders-3.9f8e7d6c5b4a49d8a1b2c3d4e5f60718-stray", None),
    ("bad topic-1", None),
    ("orders-٣", None),
    ("", None),
])
def test_parse_kafka_dir_name(name, expected):
    assert parse_kafka_dir_name(name) == expected


def _write(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)


def make_kafka_dir(tmp_path, *, segments=((0, 10), (30, 10), (60, 6)), last_active=True,
                   interval=300):
    """A directory shaped like a broker's ``orders-0``: closed segments with trimmed indexes,
    an active last segment with preallocated (zero padded) indexes, and the other files."""
    d = tmp_path / "orders-0"
    d.mkdir()
    built = []
    for i, (base, n) in enumerate(segments):
        seg = build_log(base, simple_batches(base, n, value_size=60), interval)
        built.append(seg)
        stem = d / f"{base:020d}"
        _write(f"{stem}.log", seg.log)
        active = last_active and i == len(segments) - 1
        pad_i = INDEX_PREALLOC - len(seg.index) if active else 0
        pad_t = (INDEX_PREALLOC // 12) * 12 - len(seg.timeindex) if active else 0
        _write(f"{stem}.index", seg.index + bytes(pad_i))
        _write(f"{stem}.timeindex", seg.timeindex + bytes(pad_t))
        _write(f"{stem}.snapshot", b"\x00\x01snapshot")
        _write(f"{stem}.txnindex", b"")
    (d / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (d / "partition.metadata").write_text("version: 0\ntopic_id: 5V5p3Q5fS9uQeK7H2x1yZA\n")
    # leftovers of interrupted deletes / cleanings, and an orphan index
    _write(d / f"{0:020d}.log.deleted", b"junk")
    _write(d / f"{0:020d}.index.deleted", b"junk")
    _write(d / f"{0:020d}.log.cleaned", b"junk")
    _write(d / f"{0:020d}.log.swap", b"junk")
    _write(d / f"{999:020d}.index", bytes(80))
    (d / "subdir").mkdir()
    return d, built


def test_import_realistic_directory(tmp_path):
    d, built = make_kafka_dir(tmp_path)
    assert parse_kafka_dir_name(str(d)) == ("orders", 0)
    segments = read_kafka_partition_dir(d, index_interval_bytes=300)
    assert [s.base_offset for s in segments] == [0, 30, 60]
    for seg, b in zip(segments, built):
        assert seg.log == b.log
        assert seg.index == b.index and seg.timeindex == b.timeindex   # padding trimmed
        assert not seg.index_rebuilt and seg.truncated_bytes == 0 and seg.notes == []
        assert seg.stats == b.stats
        assert seg.path.endswith(f"{seg.base_offset:020d}.log")
    assert segments[-1].stats.next_offset == 78


def test_torn_tail_of_last_segment_cut(tmp_path):
    d, built = make_kafka_dir(tmp_path)
    last = d / f"{60:020d}.log"
    extra = simple_batches(78, 1, value_size=60)[0]
    _write(last, built[-1].log + extra[:len(extra) // 2] + bytes(4096))
    segments = read_kafka_partition_dir(d, index_interval_bytes=300)
    seg = segments[-1]
    assert seg.log == built[-1].log
    assert seg.truncated_bytes == len(extra) // 2 + 4096
    assert seg.notes and "torn tail" in seg.notes[0]
    assert seg.stats.next_offset == 78


def test_torn_tail_of_earlier_segment_raises(tmp_path):
    d, built = make_kafka_dir(tmp_path)
    path = d / f"{30:020d}.log"
    _write(path, built[1].log[:-5])
    with pytest.raises(CorruptRecordError) as e:
        read_kafka_partition_dir(d)
    assert str(path) in str(e.value) and "must be complete" in str(e.value)
    assert e.value.segment == str(path) and e.value.position is not None


def test_corruption_inside_last_segment_raises(tmp_path):
    d, built = make_kafka_dir(tmp_path)
    path = d / f"{60:020d}.log"
    log = bytearray(built[-1].log)
    log[100] ^= 0x55
    _write(path, bytes(log))
    with pytest.raises(CrcMismatchError) as e:
        read_kafka_partition_dir(d)
    assert e.value.segment == str(path) and e.value.offset == 60 and e.value.position == 0


def test_missing_and_corrupt_indexes_rebuilt(tmp_path):
    d, built = make_kafka_dir(tmp_path)
    os.remove(d / f"{0:020d}.index")
    _write(d / f"{30:020d}.timeindex", os.urandom(36))
    segments = read_kafka_partition_dir(d, index_interval_bytes=300)
    assert segments[0].index_rebuilt and "missing .index" in segments[0].notes[0]
    assert segments[1].index_rebuilt and "not valid" in segments[1].notes[0]
    assert not segments[2].index_rebuilt
    for seg, b in zip(segments, built):
        assert (seg.index, seg.timeindex) == (b.index, b.timeindex)
        assert (seg.index, seg.timeindex) == rebuild_indexes(seg.log, seg.base_offset, 300)


def test_overlap_raises_and_gap_is_noted(tmp_path):
    d, _ = make_kafka_dir(tmp_path, segments=((0, 10), (25, 5)))
    with pytest.raises(CorruptRecordError) as e:
        read_kafka_partition_dir(d)
    assert "overlap" in str(e.value)
    (tmp_path / "x").mkdir()
    d2, _ = make_kafka_dir(tmp_path / "x", segments=((0, 10), (40, 5)), last_active=False)
    segments = read_kafka_partition_dir(d2)
    assert "[30, 40)" in segments[0].notes[0]


def test_file_name_above_first_batch_raises(tmp_path):
    d = tmp_path / "orders-1"
    d.mkdir()
    _write(d / f"{5:020d}.log", b"".join(simple_batches(0, 3)))
    with pytest.raises(OffsetOrderError) as e:
        read_kafka_partition_dir(d)
    assert "below the segment's base offset 5" in str(e.value)


def test_empty_active_segment_kept(tmp_path):
    # Right after a roll the new active segment is empty; it still fixes the log end offset.
    d, built = make_kafka_dir(tmp_path, segments=((0, 10),), last_active=False)
    _write(d / f"{30:020d}.log", b"")
    _write(d / f"{30:020d}.index", bytes(INDEX_PREALLOC))
    _write(d / f"{30:020d}.timeindex", bytes(INDEX_PREALLOC // 12 * 12))
    segments = read_kafka_partition_dir(d)
    assert [s.base_offset for s in segments] == [0, 30]
    empty = segments[1]
    assert empty.stats.is_empty and empty.stats.next_offset == 30 and empty.log == b""
    assert (empty.index, empty.timeindex, empty.index_rebuilt) == (b"", b"", False)


def test_not_a_partition_directory(tmp_path):
    with pytest.raises(ConfigError):
        read_kafka_partition_dir(tmp_path / "nope")
    (tmp_path / "empty-0").mkdir()
    with pytest.raises(ConfigError) as e:
        read_kafka_partition_dir(tmp_path / "empty-0")
    assert "no Kafka segment files" in str(e.value)
