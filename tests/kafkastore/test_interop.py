"""Interop both ways with kafka-python and aiokafka (pure and C), every codec.

Batches their producers build decode here record for record; batches written
here decode with their consumers' readers record for record, with headers,
null keys and values, timestamps, producer id/epoch/sequence and the
transactional flag.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkastore.format.compression import Compression, compress, decompress
from kafkastore.format.control import encode_marker_batch
from kafkastore.format.record_batch import Record, decode_batch, encode_batch
from kafkastore.format.segment_scan import iter_batches

kp_records = pytest.importorskip("kafka.record.default_records")
kp_memory = pytest.importorskip("kafka.record.memory_records")
kp_codec = pytest.importorskip("kafka.codec")
aio_records = pytest.importorskip("aiokafka.record.default_records")
aio_memory = pytest.importorskip("aiokafka.record.memory_records")
aio_codec = pytest.importorskip("aiokafka.codec")
aio_control = pytest.importorskip("aiokafka.record.control_record")
try:
    from aiokafka.record import _crecords as aio_c
except ImportError:  # pragma: no cover - wheels ship the C extension
    aio_c = None

CODECS = list(Compression)

BUILDERS = {
    "kafka-python": kp_records.DefaultRecordBatchBuilder,
    "aiokafka-py": aio_records._DefaultRecordBatchBuilderPy,
}
BATCH_READERS = {
    "kafka-python": kp_records.DefaultRecordBatch,
    "aiokafka-py": aio_records._DefaultRecordBatchPy,
}
MEMORY_READERS = {
    "kafka-python": kp_memory.MemoryRecords,
    "aiokafka-py": aio_memory._MemoryRecordsPy,
}
if aio_c is not None:
    BUILDERS["aiokafka-c"] = aio_c.DefaultRecordBatchBuilder
    BATCH_READERS["aiokafka-c"] = aio_c.DefaultRecordBatch
    MEMORY_READERS["aiokafka-c"] = aio_c.MemoryRecords


def test_aiokafka_c_extension_is_tested():
    # Guard: if the C extension went missing, the matrix would silently shrink.
    assert aio_c is not None
    assert aio_records.DefaultRecordBatchBuilder is aio_c.DefaultRecordBatchBuilder


def sample_records(n: int = 60, base: int = 0, seed: int = 0) -> list[Record]:
    """Mixed records, compressible enough that every builder really compresses."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % 7}".encode()
        value = None if i % 11 == 3 else (b"payload %d " % i) * rnd.randint(1, 30)
        headers = ()
        if i % 3 == 0:
            headers = (("trace-id", b"abc%d" % i), ("\u00fcnicode-\u2603", None), ("empty", b""))
        out.append(Record(base + i, 1_700_000_000_000 + rnd.randint(-5000, 5000),
                          key, value, headers))
    return out


def as_tuples(records) -> list[tuple]:
    """Their record objects or ours, in one comparable shape."""
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in records]


# ------------------------------------------------------- theirs -> ours

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("builder_name", list(BUILDERS))
@pytest.mark.parametrize("txn", [False, True], ids=["plain", "txn"])
def test_their_batches_decode_here(builder_name, codec, txn):
    pid, epoch, seq = (4711, 3, 99) if txn else (-1, -1, -1)
    builder = BUILDERS[builder_name](2, int(codec), int(txn), pid, epoch, seq, 1 << 20)
    records = sample_records()
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    batch = bytes(builder.build())

    header, decoded = decode_batch(batch)
    assert header.compression is codec  # the builder really used the codec
    assert decoded == records
    assert header.record_count == len(records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, seq)
    assert header.is_transactional == txn and not header.is_control
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert [p for p, _ in iter_batches(batch * 3)] == [0, len(batch), 2 * len(batch)]


@pytest.mark.parametrize("builder_name", list(BUILDERS))
def test_their_sparse_offsets_decode_here(builder_name):
    builder = BUILDERS[builder_name](2, 0, 0, -1, -1, -1, 1 << 20)
    records = [Record(o, 1000 + o, b"k%d" % o, None) for o in (0, 3, 4, 10)]
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, [])
    header, decoded = decode_batch(bytes(builder.build()))
    assert decoded == records and header.last_offset == 10


# ------------------------------------------------------- ours -> theirs

def check_their_batch(batch_obj, ours: bytes, records, *, codec, pid, epoch, seq, txn):
    assert batch_obj.validate_crc()
    assert batch_obj.magic == 2
    assert batch_obj.base_offset == records[0].offset
    assert batch_obj.compression_type == int(codec)
    assert batch_obj.is_transactional == txn and not batch_obj.is_control_batch
    assert (batch_obj.producer_id, batch_obj.producer_epoch, batch_obj.base_sequence) == (
        pid, epoch, seq)
    assert batch_obj.first_timestamp == records[0].timestamp
    assert batch_obj.max_timestamp == max(r.timestamp for r in records)
    assert batch_obj.next_offset == records[-1].offset + 1
    theirs = list(batch_obj)
    assert as_tuples(theirs) == as_tuples(records)
    assert all(r.timestamp_type == 0 for r in theirs)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("reader_name", list(BATCH_READERS))
@pytest.mark.parametrize("txn", [False, True], ids=["plain", "txn"])
def test_our_batches_decode_there(reader_name, codec, txn):
    pid, epoch, seq = (123456789012, 7, 2_000_000_000) if txn else (-1, -1, -1)
    # Offsets from a compacted log: a large base and gaps.
    records = [Record(10_000_000_000 + 3 * r.offset, r.timestamp, r.key, r.value, r.headers)
               for r in sample_records(seed=1)]
    ours = encode_batch(records, compression=codec, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=txn)
    batch_obj = BATCH_READERS[reader_name](ours)
    check_their_batch(batch_obj, ours, records, codec=codec, pid=pid, epoch=epoch,
                      seq=seq, txn=txn)


@pytest.mark.parametrize("reader_name", list(MEMORY_READERS))
def test_our_log_reads_there_batch_by_batch(reader_name):
    batches, expected = [], []
    for i, codec in enumerate(CODECS):
        records = sample_records(n=20, base=100 * i, seed=i)
        batches.append(encode_batch(records, compression=codec))
        expected.append(records)
    memory = MEMORY_READERS[reader_name](b"".join(batches))
    seen = []
    while memory.has_next():
        batch_obj = memory.next_batch()
        assert batch_obj.validate_crc()
        seen.append(as_tuples(list(batch_obj)))
    assert seen == [as_tuples(r) for r in expected]


@pytest.mark.parametrize("reader_name", list(BATCH_READERS))
def test_our_log_append_time_batch_there(reader_name):
    records = sample_records(n=5)
    ours = encode_batch(records, timestamp_type=1, max_timestamp=1_800_000_000_000)
    theirs = list(BATCH_READERS[reader_name](ours))
    assert [r.timestamp for r in theirs] == [1_800_000_000_000] * 5
    assert [r.timestamp_type for r in theirs] == [1] * 5


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_our_markers_read_there(commit):
    ours = encode_marker_batch(offset=77, timestamp=5, producer_id=12, producer_epoch=1,
                               commit=commit, coordinator_epoch=3)
    kp = kp_records.DefaultRecordBatch(ours)
    assert kp.validate_crc() and kp.is_control_batch and kp.is_transactional
    (rec,) = list(kp)
    assert (rec.offset, rec.commit, rec.abort, rec.version) == (77, commit, not commit, 0)
    for reader in (aio_records._DefaultRecordBatchPy, *([aio_c.DefaultRecordBatch] if aio_c else [])):
        batch_obj = reader(ours)
        assert batch_obj.validate_crc() and batch_obj.is_control_batch
        (rec,) = list(batch_obj)
        marker = aio_control.ControlRecord.parse(rec.key)
        assert marker == (aio_control.COMMIT_MARKER if commit else aio_control.ABORT_MARKER)


# ------------------------------------------------------------- codecs alone

CODEC_PAIRS = {
    Compression.GZIP: ("gzip_encode", "gzip_decode"),
    Compression.SNAPPY: ("snappy_encode", "snappy_decode"),
    Compression.LZ4: ("lz4_encode", "lz4_decode"),
    Compression.ZSTD: ("zstd_encode", "zstd_decode"),
}


@pytest.mark.parametrize("codec", list(CODEC_PAIRS), ids=lambda c: c.name)
@pytest.mark.parametrize("lib", [kp_codec, aio_codec], ids=["kafka-python", "aiokafka"])
@pytest.mark.parametrize("size", [1, 1000, 300_000])
def test_codec_payloads_both_ways(lib, codec, size):
    data = sample_records(n=1)[0].value * (size // 10 + 1)
    data = data[:size]
    encode, decode = (getattr(lib, name) for name in CODEC_PAIRS[codec])
    assert decompress(codec, bytes(encode(data))) == data
    assert bytes(decode(compress(codec, data))) == data


def test_raw_snappy_from_non_xerial_writers():
    data = b"raw snappy block " * 100
    assert decompress(Compression.SNAPPY, kp_codec.snappy_encode(data, xerial_compatible=False)) == data
    assert decompress(Compression.SNAPPY, aio_codec.snappy_encode(data, xerial_compatible=False)) == data


def test_our_snappy_framing_matches_kafka_python_xerial():
    # Both follow snappy-java: same header, same 32 KiB chunking, same blocks.
    data = b"".join(b"line %d of text\n" % i for i in range(10_000))
    assert compress(Compression.SNAPPY, data) == kp_codec.snappy_encode(data)


# ----------------------------------------------------------- property tests

record_parts = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=120)),
    st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=10))),
             max_size=3),
    st.integers(0, (1 << 62)),
    st.integers(1, 50),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_parts, min_size=1, max_size=15), st.sampled_from(CODECS),
       st.integers(0, 1 << 40))
def test_property_ours_read_by_all_of_theirs(parts, codec, base):
    offset, records = base, []
    for key, value, headers, ts, gap in parts:
        offset += gap if records else 0
        records.append(Record(offset, ts, key, value, tuple(headers)))
    ours = encode_batch(records, compression=codec)
    for name, reader in BATCH_READERS.items():
        batch_obj = reader(ours)
        assert batch_obj.validate_crc(), name
        assert as_tuples(list(batch_obj)) == as_tuples(records), name


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_parts, min_size=1, max_size=15), st.sampled_from(CODECS),
       st.sampled_from(list(BUILDERS)))
def test_property_theirs_read_here(parts, codec, builder_name):
    builder = BUILDERS[builder_name](2, int(codec), 0, -1, -1, -1, 1 << 20)
    offset, records = 0, []
    for key, value, headers, ts, gap in parts:
        offset += gap if records else 0
        records.append(Record(offset, ts, key, value, tuple(headers)))
        builder.append(offset, ts, key, value, list(headers))
    assert decode_batch(bytes(builder.build()))[1] == records
