"""Adopting a Kafka partition directory (built with kafka-python's batch builder) and
verifying what the manifests list."""
from __future__ import annotations

import struct

import pytest

from kafkastore.read.verify import verify_partition
from kafkastore.write.kafka_import import import_kafka_dir
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.format.control import encode_marker_batch
from kafkastore.errors import ConfigError, KafkaStoreError
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import READ_UNCOMMITTED, PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.kafka_dir import kafka_batch, write_kafka_dir

kp_records = pytest.importorskip("kafka.record.default_records")

T = "orders"


def txn_kafka_dir(parent, name=f"{T}-0"):
    """Offsets 0-4 plain; 5-7 transactional (pid 7) then ABORT at 8; 9-11 plain; 12-13
    transactional (pid 8) then COMMIT at 14; two segments (0 and 9)."""
    seg0 = [
        kafka_batch(0, [b"p0", b"p1", b"p2", b"p3", b"p4"], codec=kp_records.DefaultRecordBatch.CODEC_GZIP),
        kafka_batch(5, [b"a0", b"a1", b"a2"], pid=7, epoch=0, seq=0, txn=True),
        encode_marker_batch(offset=8, timestamp=1_700_000_001_000, producer_id=7,
                            producer_epoch=0, commit=False),
    ]
    seg9 = [
        kafka_batch(9, [b"q0", b"q1", b"q2"], pid=3, epoch=0, seq=0),
        kafka_batch(12, [b"c0", b"c1"], pid=8, epoch=0, seq=0, txn=True),
        encode_marker_batch(offset=14, timestamp=1_700_000_002_000, producer_id=8,
                            producer_epoch=0, commit=True),
    ]
    return write_kafka_dir(parent, name, {0: seg0, 9: seg9})


def values(storage, p=0, isolation="read_committed"):
    return PartitionReader(storage, T, p).read(-2, isolation=isolation).column("value").to_pylist()


def test_import_kafka_dir_with_aborted_transaction(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 2)
    d = txn_kafka_dir(tmp_path)
    res = import_kafka_dir(storage, str(d), T, 1)
    assert (res.segments, res.log_start_offset, res.high_watermark) == (2, 0, 15)
    assert res.records == 15                                  # markers count as records
    m = ManifestStore(storage, T, 1).latest()
    assert [(s.base_offset, s.next_offset) for s in m.segments] == [(0, 9), (9, 15)]
    assert m.segments[0].aborted_txns == ((7, 5, 8),)
    plain = [b"p0", b"p1", b"p2", b"p3", b"p4", b"q0", b"q1", b"q2", b"c0", b"c1"]
    assert values(storage, 1) == plain
    assert values(storage, 1, READ_UNCOMMITTED) == plain[:5] + [b"a0", b"a1", b"a2"] + plain[5:]
    t = PartitionReader(storage, T, 1).read(-2)
    assert t.column("offset").to_pylist() == [0, 1, 2, 3, 4, 9, 10, 11, 12, 13]
    assert t.column("headers").to_pylist()[0] == [{"key": "src", "value": b"kafka"}]
    assert verify_partition(storage, T, 1).ok
    # Only the segments were uploaded: none of the leftovers.
    names = {o.path.rsplit("/", 1)[1] for o in storage.list(f"topics/{T}/1")}
    assert not any(n.endswith((".snapshot", ".txnindex", ".deleted", "checkpoint", ".metadata"))
                   for n in names)
    # A broker appends after the imported log.
    b = Broker(storage)
    b.send(T, b"new", partition=1)
    [r] = b.flush()
    assert r.base_offset == 15
    assert values(storage, 1)[-1] == b"new"


def test_import_open_transaction_sets_the_lso(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    d = write_kafka_dir(tmp_path, "x", {0: [
        kafka_batch(0, [b"a", b"b"]),
        kafka_batch(2, [b"t0", b"t1"], pid=9, epoch=0, seq=0, txn=True),
        kafka_batch(4, [b"c"]),
    ]}, leftovers=False)
    import_kafka_dir(storage, str(d), T, 0)
    r = PartitionReader(storage, T, 0)
    assert (r.last_stable_offset, r.high_watermark) == (2, 5)
    assert values(storage) == [b"a", b"b"]
    assert values(storage, isolation=READ_UNCOMMITTED) == [b"a", b"b", b"t0", b"t1", b"c"]


def test_import_must_continue_the_log(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    b = Broker(storage)
    for i in range(3):
        b.send(T, b"%d" % i)
    b.flush()
    at0 = write_kafka_dir(tmp_path, "at0", {0: [kafka_batch(0, [b"x"])]}, leftovers=False)
    with pytest.raises(KafkaStoreError):
        import_kafka_dir(storage, str(at0), T, 0)
    assert ManifestStore(storage, T, 0).latest().high_watermark == 3
    at3 = write_kafka_dir(tmp_path, "at3", {3: [kafka_batch(3, [b"x", b"y"])]}, leftovers=False)
    res = import_kafka_dir(storage, str(at3), T, 0)
    assert (res.log_start_offset, res.high_watermark) == (0, 5)
    assert values(storage) == [b"0", b"1", b"2", b"x", b"y"]


def test_import_gap_between_segments_absorbed(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    d = write_kafka_dir(tmp_path, "g", {0: [kafka_batch(0, [b"a", b"b"])],
                                         10: [kafka_batch(10, [b"c"])]}, leftovers=False)
    res = import_kafka_dir(storage, str(d), T, 0)
    assert f"{0:020d}.log: no offsets in [2, 10) before the next segment" in " ".join(res.notes)
    assert f"{10:020d}.log: indexes rebuilt" in " ".join(res.notes)
    m = ManifestStore(storage, T, 0).latest()
    assert [(s.base_offset, s.next_offset) for s in m.segments] == [(0, 10), (10, 11)]
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("offset").to_pylist() == [0, 1, 10]
    assert PartitionReader(storage, T, 0).read(5).column("offset").to_pylist() == [10]


def test_import_bad_input(tmp_path, local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    d = write_kafka_dir(tmp_path, "ok", {0: [kafka_batch(0, [b"a"])]}, leftovers=False)
    with pytest.raises(ConfigError, match="partitions 0..0"):
        import_kafka_dir(storage, str(d), T, 1)
    with pytest.raises(ConfigError):
        import_kafka_dir(storage, str(tmp_path / "missing"), T, 0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError):
        import_kafka_dir(storage, str(empty), T, 0)
    bad = write_kafka_dir(tmp_path, "bad", {0: [kafka_batch(0, [b"a"]), kafka_batch(1, [b"b"])]},
                          leftovers=False)
    data = bytearray((bad / f"{0:020d}.log").read_bytes())
    data[70] ^= 0xFF                                  # inside the first batch's records
    (bad / f"{0:020d}.log").write_bytes(bytes(data))
    with pytest.raises(KafkaStoreError, match="offset 0"):
        import_kafka_dir(storage, str(bad), T, 0)
    assert ManifestStore(storage, T, 0).latest() is None
    assert storage.list(f"topics/{T}/0") == []         # validated before anything is uploaded


def test_verify_partition_ok_and_corrupt(local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    b = Broker(storage, batch_size=200)
    for i in range(50):
        b.send(T, b"%030d" % i)
        if i == 24:
            b.flush()
    b.flush()
    report = verify_partition(storage, T, 0)
    assert report.ok
    assert len(report.lines()) == 2 and all(": ok (" in line for line in report.lines())
    m = ManifestStore(storage, T, 0).latest()
    seg = m.segments[1]
    path = seg.paths(T, 0)[".log"]
    data = bytearray(storage.get(path))
    pos = 0
    for _ in range(2):                                 # the third batch of the segment
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    base = struct.unpack_from(">q", data, pos)[0]
    data[pos + 70] ^= 0x01
    storage.put(path, bytes(data))
    report = verify_partition(storage, T, 0)
    assert not report.ok
    bad = [line for line in report.lines() if "ok (" not in line]
    name = path.rsplit("/", 1)[1]
    assert any(name in line and f"offset {base}" in line and f"position {pos}" in line
               for line in bad), bad
    assert any("checksum" in line for line in bad)
    assert ": ok (" in report.lines()[0] and "25 records, offsets 0..24" in report.lines()[0]
    # A missing object is a finding too, not a crash.
    storage.delete([m.segments[0].paths(T, 0)[".log"]])
    report = verify_partition(storage, T, 0)
    assert not report.ok and any("no object" in line for line in report.lines())


def test_verify_empty_partition(local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    report = verify_partition(storage, T, 0)
    assert report.ok and report.lines() == [f"{T}/0 (manifest v0): ok (empty)"]
