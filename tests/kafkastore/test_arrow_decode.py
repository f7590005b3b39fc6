"""kafkastore.format.arrow_decode: both implementations (C kernel and pure Python)
against batches built by kafka-python, aiokafka and kafkastore itself, and
against reference decoders (kafka-python's iterator, record_batch.decode_batch)."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format import arrow_decode as ad
from kafkastore.format.compression import Compression
from kafkastore.format.control import encode_marker_batch
from kafkastore.format.crc import crc32c
from kafkastore.errors import CorruptRecordError, CrcMismatchError, KafkaStoreError
from kafkastore.format.record_batch import Record, decode_batch, encode_batch
from kafkastore.format.segment_scan import iter_batches
from kafkastore.format.transactions import AbortedTxn, is_aborted
from tests.helpers.threads import run_at_once
from tests.helpers.decoders import assert_decoders_agree

IMPLS = {"pure": ad.decode_to_arrow_pure}
if ad.NATIVE_AVAILABLE:
    IMPLS["native"] = ad.decode_to_arrow_native

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]
COLUMNS = [f.name for f in ad.KAFKA_SCHEMA]


@pytest.fixture(params=["pure", "native"])
def decode(request):
    if request.param not in IMPLS:
        pytest.skip("kafkastore.format._native is not built")
    return IMPLS[request.param]


# ------------------------------------------------------------- builders

def kp_batch(records, *, codec=0, base_offset=0, transactional=False, producer_id=-1,
             producer_epoch=-1, base_sequence=-1):
    """A batch from kafka-python's builder; records = (delta, ts, key, value, headers)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, int(codec), transactional, producer_id, producer_epoch,
                                  base_sequence, 1 << 30)
    for delta, ts, key, value, headers in records:
        b.append(delta, ts, key, value, list(headers))
    buf = b.build()
    struct.pack_into(">q", buf, 0, base_offset)  # base offset: not covered by the CRC
    return bytes(buf)


def aiokafka_batch(records, *, codec=0, base_offset=0):
    from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 30)
    for delta, ts, key, value, headers in records:
        b.append(delta, ts, key, value, list(headers))
    buf = b.build()
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def sample_records(n, *, start_ts=1_700_000_000_000, headers=True):
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value-%d-" % i) * (i % 5 + 1)
        hdrs = ()
        if headers and i % 3:
            hdrs = (("trace", b"t%d" % i), ("empty", b""), ("nul", None), ("ü-ключ", b"\x00\xff"))[
                :i % 5]
        out.append((i, start_ts + i * 10 - (i % 4) * 3, key, value, hdrs))
    return out


def fix_crc(buf: bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at ``pos`` (after editing its bytes)."""
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + 12 + length])))
    return buf


# ------------------------------------------------------------ reference

def reference_columns(buf, *, topic="t", partition=0, start=0, end=None, aborted=(),
                      include_headers=True):
    """The expected columns, from kafkastore.format.record_batch's decoder."""
    cols = {name: [] for name in COLUMNS}
    for pos, h in iter_batches(buf):
        if end is not None and h.base_offset >= end:
            break
        if h.is_control or h.last_offset < start or is_aborted(h, aborted):
            continue
        _, records = decode_batch(buf, pos)
        for r in records:
            if r.offset < start or (end is not None and r.offset >= end):
                continue
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            cols["topic"].append(topic)
            cols["partition"].append(partition)
            cols["offset"].append(r.offset)
            cols["timestamp"].append(r.timestamp * 1000)
            cols["timestampType"].append(h.timestamp_type)
            cols["headers"].append(
                [{"key": k, "value": v} for k, v in r.headers]
                if include_headers and r.headers else None)
    return cols


def kafka_python_columns(buf, *, topic="t", partition=0):
    """The expected columns, from kafka-python's own iterator (no filters)."""
    from kafka.record.default_records import DefaultRecordBatch

    cols = {name: [] for name in COLUMNS}
    pos = 0
    while pos < len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        batch = DefaultRecordBatch(bytes(buf[pos:pos + 12 + length]))
        assert batch.validate_crc()
        pos += 12 + length
        if batch.is_control_batch:
            continue
        for r in batch:
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            cols["topic"].append(topic)
            cols["partition"].append(partition)
            cols["offset"].append(r.offset)
            cols["timestamp"].append(r.timestamp * 1000)
            cols["timestampType"].append(r.timestamp_type)
            cols["headers"].append([{"key": k, "value": v} for k, v in r.headers] or None)
    return cols


def columns_of(batch: pa.RecordBatch):
    assert batch.schema.equals(ad.KAFKA_SCHEMA)
    batch.validate(full=True)
    cols = {}
    for name in COLUMNS:
        col = batch.column(name)
        if name == "timestamp":
            col = col.cast(pa.int64())
        cols[name] = col.to_pylist()
    return cols


def assert_columns_equal(got, expected):
    for name in COLUMNS:
        assert got[name] == expected[name], name


def segment(*batches) -> bytes:
    return b"".join(batches)


# ----------------------------------------------------------------- schema

def test_schema_is_sparks_kafka_schema():
    s = ad.KAFKA_SCHEMA
    assert s.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                       "timestampType", "headers"]
    assert s.field("key").type == pa.binary()
    assert s.field("value").type == pa.binary()
    assert s.field("topic").type == pa.string()
    assert s.field("partition").type == pa.int32()
    assert s.field("offset").type == pa.int64()
    assert s.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert s.field("timestampType").type == pa.int32()
    hdr = s.field("headers").type
    assert pa.types.is_list(hdr)
    assert hdr.value_type == pa.struct([("key", pa.string()), ("value", pa.binary())])


def test_implementation_switch():
    assert ad.IMPLEMENTATION in ("native", "pure")
    if ad.NATIVE_AVAILABLE and os.environ.get("KAFKASTORE_NO_EXTENSIONS") != "1":
        assert ad.IMPLEMENTATION == "native"
    code = "from kafkastore.format import arrow_decode as ad; print(ad.IMPLEMENTATION)"
    env = dict(os.environ, KAFKASTORE_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.stdout.strip() == "pure"


def test_without_the_extension():
    """When kafkastore.format._native cannot be imported everything still works (pure)."""
    code = (
        "import sys; sys.modules['kafkastore.format._native'] = None\n"
        "from kafkastore.format import arrow_decode as ad\n"
        "from kafkastore.format.record_batch import Record, encode_batch\n"
        "assert ad.IMPLEMENTATION == 'pure' and not ad.NATIVE_AVAILABLE\n"
        "b = ad.decode_to_arrow(encode_batch([Record(0, 1, b'k', b'v')]), topic='t', partition=2)\n"
        "assert b.column('topic').to_pylist() == ['t'] and b.column('partition').to_pylist() == [2]\n"
        "try:\n"
        "    ad.decode_to_arrow_native(b'', topic='t', partition=0)\n"
        "except RuntimeError:\n"
        "    print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_empty_buffer(decode):
    batch = decode(b"", topic="t", partition=3)
    assert batch.num_rows == 0
    assert batch.schema.equals(ad.KAFKA_SCHEMA)
    batch.validate(full=True)


# ------------------------------------------------------------ every codec

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_kafka_python_batches_every_codec(decode, codec):
    recs = sample_records(120)
    buf = segment(kp_batch(recs[:50], codec=codec, base_offset=0),
                  kp_batch([(r[0] - 50,) + r[1:] for r in recs[50:]], codec=codec,
                           base_offset=50))
    assert buf[21 + 1] & 7 == int(codec)  # really compressed
    got = columns_of(decode(buf, topic="orders", partition=7))
    assert_columns_equal(got, kafka_python_columns(buf, topic="orders", partition=7))
    assert_columns_equal(got, reference_columns(buf, topic="orders", partition=7))
    assert got["offset"] == list(range(120))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_aiokafka_batches_every_codec(decode, codec):
    recs = sample_records(300)
    buf = segment(*(aiokafka_batch([(r[0] - b,) + r[1:] for r in recs[b:b + 100]],
                                   codec=codec, base_offset=1000 + b)
                    for b in range(0, 300, 100)))
    got = columns_of(decode(buf, topic="x", partition=0))
    assert_columns_equal(got, kafka_python_columns(buf, topic="x"))
    assert got["offset"] == list(range(1000, 1300))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_encode_batch_every_codec(decode, codec):
    recs = [Record(10 + 2 * i, 1_600_000_000_000 + i, None if i == 3 else b"k%d" % i,
                   None if i == 4 else b"v" * i, (("h", b"%d" % i),) if i % 2 else ())
            for i in range(40)]
    buf = segment(encode_batch(recs[:20], compression=codec),
                  encode_batch(recs[20:], compression=codec, last_offset=recs[-1].offset + 5))
    got = columns_of(decode(buf, topic="t", partition=1))
    assert_columns_equal(got, reference_columns(buf, topic="t", partition=1))
    assert_columns_equal(got, kafka_python_columns(buf, topic="t", partition=1))
    assert got["offset"] == [r.offset for r in recs]
    assert got["key"][3] is None and got["value"][4] is None


def test_memoryview_bytearray_and_slices(decode):
    buf = segment(*(kp_batch(sample_records(10), base_offset=b) for b in (0, 10, 20)))
    expected = columns_of(decode(buf, topic="t", partition=0))
    assert columns_of(decode(bytearray(buf), topic="t", partition=0)) == expected
    assert columns_of(decode(memoryview(buf), topic="t", partition=0)) == expected
    # A batch-aligned byte range of a segment.
    (length,) = struct.unpack_from(">i", buf, 8)
    part = memoryview(buf)[12 + length:]
    assert columns_of(decode(part, topic="t", partition=0))["offset"] == list(range(10, 30))


# ------------------------------------------------------------ offset ranges

def three_batches():
    return segment(kp_batch(sample_records(10), base_offset=0),
                   kp_batch(sample_records(10), base_offset=10, codec=Compression.ZSTD),
                   kp_batch(sample_records(10), base_offset=20))


@pytest.mark.parametrize("start,end", [
    (0, None), (0, 30), (10, 20), (10, None), (0, 10), (20, 30),     # batch boundaries
    (3, 17), (9, 11), (15, 16), (29, None), (0, 1), (12, 12),        # inside batches
    (30, None), (100, 200), (-5, 3), (25, 5),
])
def test_offset_range(decode, start, end):
    buf = three_batches()
    got = columns_of(decode(buf, topic="t", partition=0, start_offset=start, end_offset=end))
    hi = 30 if end is None else min(end, 30)
    assert got["offset"] == list(range(max(start, 0), hi))
    assert_columns_equal(got, reference_columns(buf, start=start, end=end))


def test_batches_at_or_past_end_offset_are_not_read(decode):
    good = kp_batch(sample_records(5), base_offset=0)
    bad = bytearray(kp_batch(sample_records(5), base_offset=5))
    bad[-1] ^= 0xFF  # CRC now wrong
    buf = good + bytes(bad)
    assert decode(buf, topic="t", partition=0, end_offset=5).num_rows == 5
    with pytest.raises(CrcMismatchError):
        decode(buf, topic="t", partition=0, end_offset=6)


def test_offset_gaps_from_compaction(decode):
    recs = [Record(o, 1000 + o, b"k", b"v") for o in (100, 103, 104, 110)]
    buf = encode_batch(recs, last_offset=119)
    got = columns_of(decode(buf, topic="t", partition=0))
    assert got["offset"] == [100, 103, 104, 110]
    assert columns_of(decode(buf, topic="t", partition=0, start_offset=104))["offset"] == [104, 110]
    assert columns_of(decode(buf, topic="t", partition=0, start_offset=111)) == \
        columns_of(decode(b"", topic="t", partition=0))


# ---------------------------------------------------- control and aborted

def transactional_log():
    """pid 7 commits [0, 4), pid 8 aborts [4, 8) (interleaved), pid 7 again aborted."""
    def txn(pid, base, n):
        return kp_batch([(i, 1000 + base + i, b"k%d" % (base + i), b"v", ()) for i in range(n)],
                        base_offset=base, transactional=True, producer_id=pid,
                        producer_epoch=0, base_sequence=base)

    return segment(
        txn(7, 0, 2),
        txn(8, 2, 3),
        txn(7, 5, 2),
        encode_marker_batch(offset=7, timestamp=2000, producer_id=7, producer_epoch=0,
                            commit=True),
        txn(8, 8, 1),
        encode_marker_batch(offset=9, timestamp=2001, producer_id=8, producer_epoch=0,
                            commit=False),
        kp_batch([(0, 3000, b"plain", b"v", ())], base_offset=10),
        txn(7, 11, 2),
        encode_marker_batch(offset=13, timestamp=2002, producer_id=7, producer_epoch=0,
                            commit=False),
    )


def test_control_batches_never_produce_rows(decode):
    got = columns_of(decode(transactional_log(), topic="t", partition=0))
    # read_uncommitted-like (no aborted list): all data, no markers
    assert got["offset"] == [0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12]


def test_aborted_transactions_dropped(decode):
    aborted = [AbortedTxn(8, 2, 9), AbortedTxn(7, 11, 13)]
    got = columns_of(decode(transactional_log(), topic="t", partition=0, aborted=aborted))
    assert got["offset"] == [0, 1, 5, 6, 10]
    assert_columns_equal(got, reference_columns(transactional_log(), aborted=aborted))
    # tuples work too, and a non-matching producer id drops nothing
    got = columns_of(decode(transactional_log(), topic="t", partition=0,
                            aborted=[(8, 2, 9), (7, 11, 13)]))
    assert got["offset"] == [0, 1, 5, 6, 10]
    got = columns_of(decode(transactional_log(), topic="t", partition=0,
                            aborted=[(99, 0, 100)]))
    assert got["offset"] == [0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12]


def test_aborted_only_hits_transactional_batches(decode):
    buf = kp_batch([(0, 1, b"k", b"v", ())], base_offset=5, producer_id=8, producer_epoch=0,
                   base_sequence=0)
    assert decode(buf, topic="t", partition=0, aborted=[(8, 0, 10)]).num_rows == 1


# ------------------------------------------------------ headers, nulls, time

def test_headers_and_nulls(decode):
    recs = [
        (0, 1, None, None, ()),
        (1, 2, b"", b"", (("a", b"1"), ("", None))),
        (2, 3, b"k", None, (("a", None), ("b", b""), ("a", b"dup"))),
        (3, 4, None, b"v", (("ключ-€", b"\xff\x00"),)),
    ]
    buf = kp_batch(recs)
    got = columns_of(decode(buf, topic="t", partition=0))
    assert got["key"] == [None, b"", b"k", None]
    assert got["value"] == [None, b"", None, b"v"]
    assert got["headers"] == [
        None,  # no headers: null, as Spark's Kafka source
        [{"key": "a", "value": b"1"}, {"key": "", "value": None}],
        [{"key": "a", "value": None}, {"key": "b", "value": b""}, {"key": "a", "value": b"dup"}],
        [{"key": "ключ-€", "value": b"\xff\x00"}],
    ]
    off = decode(buf, topic="t", partition=0, include_headers=False)
    assert off.schema.equals(ad.KAFKA_SCHEMA)
    assert off.column("headers").null_count == 4
    assert columns_of(off)["key"] == got["key"]


def test_log_append_time(decode):
    recs = [Record(i, 1000 + i, b"k", b"v") for i in range(5)]
    buf = segment(encode_batch(recs, timestamp_type=1, max_timestamp=99_999),
                  encode_batch([Record(5, 7, None, b"x")]))
    got = columns_of(decode(buf, topic="t", partition=0))
    assert got["timestamp"] == [99_999_000] * 5 + [7000]
    assert got["timestampType"] == [1] * 5 + [0]
    assert_columns_equal(got, kafka_python_columns(buf))
    ts = decode(buf, topic="t", partition=0).column("timestamp")
    assert ts.type == pa.timestamp("us", tz="UTC")
    assert ts[0].as_py().year == 1970


def test_negative_and_extreme_timestamps(decode):
    buf = encode_batch([Record(0, -1, b"k", b"v"), Record(1, 0, b"k", b"v"),
                        Record(2, 253402300799999, b"k", b"v")])
    assert columns_of(decode(buf, topic="t", partition=0))["timestamp"] == \
        [-1000, 0, 253402300799999000]
    with pytest.raises(CorruptRecordError, match="out of range"):
        decode(encode_batch([Record(0, 1 << 60, b"k", b"v")]), topic="t", partition=0)


def test_topic_and_partition_columns(decode):
    buf = kp_batch(sample_records(3))
    got = columns_of(decode(buf, topic="ünïcode.topic", partition=2**31 - 1))
    assert got["topic"] == ["ünïcode.topic"] * 3
    assert got["partition"] == [2**31 - 1] * 3
    assert columns_of(decode(buf, topic="", partition=0))["topic"] == [""] * 3


@pytest.mark.parametrize("native", [False, True])
def test_constant_column_too_large(native):
    with pytest.raises(KafkaStoreError, match="2 GiB"):
        ad._constant_columns("x" * 1000, 0, 3_000_000, native=native)


def test_bad_arguments(decode):
    with pytest.raises(TypeError):
        decode(b"", topic=b"t", partition=0)
    for bad in (-1, 2**31):
        with pytest.raises(ValueError):
            decode(b"", topic="t", partition=bad)


# ------------------------------------------------------------- corruption

def located(excinfo, *, offset, position, segment_name="seg-1"):
    e = excinfo.value
    assert e.segment == segment_name
    assert e.offset == offset
    assert e.position == position


def two_batches():
    a = kp_batch(sample_records(20), base_offset=100)
    b = kp_batch(sample_records(20), base_offset=120)
    return a, b


def test_crc_flip(decode):
    a, b = two_batches()
    buf = bytearray(a + b)
    buf[len(a) + 70] ^= 0x01
    with pytest.raises(CrcMismatchError) as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    located(ei, offset=120, position=len(a))
    # base_position shifts positions (a byte range read from the middle of a segment)
    with pytest.raises(CrcMismatchError) as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1", base_position=4096)
    located(ei, offset=120, position=4096 + len(a))
    # verify_crc=False decodes it (the flipped byte is inside a value)
    assert decode(bytes(buf), topic="t", partition=0, verify_crc=False).num_rows == 40


def test_crc_flip_in_compressed_batch(decode):
    a = kp_batch(sample_records(30), codec=Compression.LZ4, base_offset=0)
    buf = bytearray(a)
    buf[-3] ^= 0x40
    with pytest.raises(CrcMismatchError) as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    located(ei, offset=0, position=0)


@pytest.mark.parametrize("cut", [1, 7, 8, 30, 60, 61, 100])
def test_truncation(decode, cut):
    a, b = two_batches()
    buf = (a + b)[:len(a) + cut]
    with pytest.raises(CorruptRecordError) as ei:
        decode(buf, topic="t", partition=0, segment="seg-1")
    assert not isinstance(ei.value, CrcMismatchError)
    located(ei, offset=120 if cut >= 8 else None, position=len(a))


def record_region(buf, pos=0):
    return pos + 61


def test_bad_varint(decode):
    buf = bytearray(kp_batch(sample_records(5), base_offset=50))
    # first record's length varint: 6 continuation bytes is longer than any varint
    buf[61:62] = b"\xff\xff\xff\xff\xff\x01"
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    fix_crc(buf)
    with pytest.raises(CorruptRecordError) as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    assert not isinstance(ei.value, CrcMismatchError)
    located(ei, offset=50, position=0)


@pytest.mark.parametrize("delta", [-1, 1])
def test_record_count_mismatch(decode, delta):
    buf = bytearray(kp_batch(sample_records(5), base_offset=50))
    struct.pack_into(">i", buf, 23, 10)  # room in last offset delta for more records
    struct.pack_into(">i", buf, 57, 5 + delta)
    fix_crc(buf)
    pre = kp_batch(sample_records(3), base_offset=40)
    with pytest.raises(CorruptRecordError) as ei:
        decode(pre + bytes(buf), topic="t", partition=0, segment="seg-1")
    assert not isinstance(ei.value, CrcMismatchError)
    located(ei, offset=50, position=len(pre))


def test_record_length_past_batch(decode):
    buf = bytearray(kp_batch([(0, 1, b"k", b"v", ())]))
    buf[61] = 0x7E  # length 63 > what is left
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="record 0"):
        decode(bytes(buf), topic="t", partition=0)


def test_invalid_utf8_header_key(decode):
    buf = bytearray(kp_batch([(0, 1, b"k", b"v", (("ab", b"x"),))]))
    i = bytes(buf).index(b"ab")
    buf[i] = 0xC3  # a lead byte without its continuation byte
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode(bytes(buf), topic="t", partition=0)
    # not checked when the headers are not asked for
    assert decode(bytes(buf), topic="t", partition=0, include_headers=False).num_rows == 1


def test_bad_magic_and_length(decode):
    good = kp_batch(sample_records(2), base_offset=9)
    buf = bytearray(good)
    buf[16] = 1
    with pytest.raises(CorruptRecordError, match="magic") as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    located(ei, offset=9, position=0)
    buf = bytearray(good)
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordError, match="length") as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    located(ei, offset=9, position=0)


def test_corrupt_compressed_payload(decode):
    buf = bytearray(kp_batch(sample_records(30), codec=Compression.ZSTD, base_offset=3))
    buf[70:80] = b"\x00" * 10
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="decompress") as ei:
        decode(bytes(buf), topic="t", partition=0, segment="seg-1")
    located(ei, offset=3, position=0)


def test_unknown_codec(decode):
    buf = bytearray(kp_batch(sample_records(3)))
    buf[22] |= 0x07
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="codec"):
        decode(bytes(buf), topic="t", partition=0)


# ---------------------------------------------------------- native details

@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
def test_native_crc32c_matches_library():
    import crc32c as lib

    from kafkastore.format import _native

    data = os.urandom(70_000)
    for n in (0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 24575, 24576, 24577, 70_000):
        for start in (0, 1, 3):
            chunk = data[start:start + n]
            assert _native.crc32c(chunk) == lib.crc32c(chunk) == _native.crc32c_sw(chunk)
            assert _native.crc32c(chunk, 0x1234) == lib.crc32c(chunk, 0x1234)


@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
def test_native_decoder_one_batch_at_a_time():
    """The C API: feed a region, or batches one at a time, decompressing in Python."""
    from kafkastore.format import _native
    from kafkastore.format.compression import decompress

    buf = three_batches()
    d = ad._NativeDecoder(0, 2**63 - 1, True, True, [])
    pos = 0
    while True:
        pending = d.feed(buf, pos)
        if pending is None:
            break
        pos, codec, rs, re_ = pending
        assert codec == Compression.ZSTD
        d.feed_records(buf, pos, decompress(codec, buf[rs:re_]))
        pos = re_
    cols = d.finish()
    assert cols["rows"] == 30 and cols["offset"].to_pylist() == list(range(30))
    # finish() resets: the decoder can be reused
    assert d.finish()["rows"] == 0
    # after an error the decoder refuses to go on
    d = _native.Decoder(0, 2**63 - 1, True, True, [])
    with pytest.raises(_native.DecodeError):
        d.feed(b"\x00" * 30)
    with pytest.raises(RuntimeError):
        d.feed(buf)


def big_segment(n_batches=40, per_batch=200):
    """~1.5 MB: large enough for the GIL release, presizing and the block cache."""
    return segment(*(aiokafka_batch([(i, 1000 + i, b"key-%06d" % (b * per_batch + i),
                                      bytes([b % 256]) * 180, (("h", b"%d" % i),) if i % 9 else ())
                                     for i in range(per_batch)],
                                    base_offset=b * per_batch)
                     for b in range(n_batches)))


@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
def test_native_threads_and_buffer_cache():
    """Decodes in threads at once (the GIL is released, freed buffers are reused)."""
    segs = [big_segment(), big_segment(30, 300)]
    expected = [ad.decode_to_arrow_pure(s, topic="t", partition=0) for s in segs]
    failures = []

    def work(k):
        try:
            for j in range(8):
                i = (k + j) % 2
                got = ad.decode_to_arrow_native(segs[i], topic="t", partition=0)
                if not got.equals(expected[i]):
                    failures.append((k, j))
                del got
        except Exception as e:  # pragma: no cover - reported below
            failures.append(repr(e))

    run_at_once(work, 4)
    assert failures == []


@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
def test_native_buffer_cache_off_and_fork():
    from kafkastore.format import _native

    seg = big_segment()
    expected = ad.decode_to_arrow_pure(seg, topic="t", partition=0)
    old = _native.set_buffer_cache(0)
    try:
        assert ad.decode_to_arrow_native(seg, topic="t", partition=0).equals(expected)
    finally:
        _native.set_buffer_cache(old)
    # fill the cache, then decode in a forked child (Spark's daemon forks workers)
    for _ in range(2):
        assert ad.decode_to_arrow_native(seg, topic="t", partition=0).equals(expected)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        ok = all(ad.decode_to_arrow_native(seg, topic="t", partition=0).equals(expected)
                 for _ in range(3))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ad.decode_to_arrow_native(seg, topic="t", partition=0).equals(expected)


# ------------------------------------------------------------- properties

header_st = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8))
record_st = st.tuples(
    st.integers(0, 3),                                   # offset gap - 1
    st.integers(-(1 << 41), 1 << 41),                    # timestamp
    st.none() | st.binary(max_size=20),                  # key
    st.none() | st.binary(max_size=40),                  # value
    st.lists(header_st, max_size=3).map(tuple),          # headers
)
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=12),
    st.sampled_from(CODECS),
    st.sampled_from([0, 1]),                             # timestamp type
    st.sampled_from(["plain", "txn7", "txn8", "marker"]),
)


def build_log(batches):
    out = []
    offset = 0
    for recs, codec, ts_type, kind in batches:
        if kind == "marker":
            out.append(encode_marker_batch(offset=offset, timestamp=5, producer_id=8,
                                           producer_epoch=0, commit=False))
            offset += 1
            continue
        records = []
        for gap, ts, key, value, headers in recs:
            records.append(Record(offset + gap, ts, key, value, headers))
            offset += gap + 1
        kw = {}
        if kind != "plain":
            kw = dict(transactional=True, producer_id=int(kind[3:]), producer_epoch=0,
                      base_sequence=0)
        out.append(encode_batch(records, compression=codec, timestamp_type=ts_type,
                                max_timestamp=77 if ts_type else None, **kw))
    return b"".join(out), offset


@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_st, min_size=0, max_size=5), st.data())
def test_native_equals_pure_equals_reference(batches, data):
    buf, total = build_log(batches)
    start = data.draw(st.integers(-1, total + 1))
    end = data.draw(st.none() | st.integers(-1, total + 2))
    aborted = data.draw(st.lists(st.tuples(st.sampled_from([7, 8]), st.integers(0, total),
                                           st.integers(0, total)), max_size=2))
    include_headers = data.draw(st.booleans())
    kw = dict(topic="prop", partition=5, start_offset=start, end_offset=end,
              aborted=aborted, include_headers=include_headers)
    native = ad.decode_to_arrow_native(buf, **kw)
    pure = ad.decode_to_arrow_pure(buf, **kw)
    assert native.equals(pure)
    expected = reference_columns(buf, topic="prop", partition=5, start=start, end=end,
                                 aborted=[AbortedTxn(*a) for a in aborted],
                                 include_headers=include_headers)
    assert_columns_equal(columns_of(native), expected)



@pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_native_and_pure_agree_on_damaged_bytes(data):
    """Random byte edits inside the records, CRC fixed up so the walk is reached:
    both implementations give the same rows or the same typed error and location."""
    recs = sample_records(8)
    codec = data.draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]))
    pre = kp_batch(recs[:3], base_offset=0)
    buf = bytearray(pre + kp_batch(recs, codec=codec, base_offset=3))
    n_edits = data.draw(st.integers(1, 4))
    for _ in range(n_edits):
        i = data.draw(st.integers(len(pre) + 21, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        fix_crc(buf, len(pre))
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(len(pre), len(buf)))]
    assert_decoders_agree(bytes(buf))


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
def test_every_allocation_mode_decodes_the_same(mode):
    """The C kernel's allocation modes (plain, huge pages, populate, both) only change how
    fresh memory is obtained, never the result."""
    if not ad.NATIVE_AVAILABLE:
        pytest.skip("kafkastore.format._native is not built")
    records = [Record(i, 1000 + i, b"k%d" % i, b"v" * (i % 1000), (("h", b"x"),) if i % 3 else ())
               for i in range(5000)]
    seg = b"".join(encode_batch(records[i:i + 500]) for i in range(0, 5000, 500))
    old = ad._native._set_alloc_mode(mode)
    cache = ad._native.set_buffer_cache(0)   # fresh blocks, not cached ones
    try:
        got = ad.decode_to_arrow_native(seg, topic="t", partition=0)
    finally:
        ad._native._set_alloc_mode(old)
        ad._native.set_buffer_cache(cache)
    assert got.equals(ad.decode_to_arrow_pure(seg, topic="t", partition=0))
