"""The v2 record batch: layout, round trips, CRC, framing, and every error path."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from kafkastore.format import crc as crc_mod
from kafkastore.format.compression import Compression
from kafkastore.format.crc import crc32c, crc32c_pure
from kafkastore.errors import (
    CompressionError, ConfigError, CorruptRecordError, CrcMismatchError)
from kafkastore.format.record_batch import (
    ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, CRC_OFFSET, DELETE_HORIZON_MASK,
    HEADER_SIZE, HEADER_STRUCT, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader,
    Record, check_crc, decode_batch, encode_batch, parse_header)
from kafkastore.format.segment_scan import iter_batches
from kafkastore.format.varint import encode_varint, encode_varlong

CODECS = list(Compression)
FIELDS = BatchHeader.__dataclass_fields__.keys()


# ------------------------------------------------------------------ helpers

def rewrite(batch: bytes, *, fix_crc: bool = True, **fields) -> bytes:
    """``batch`` with some header fields replaced (and the CRC recomputed)."""
    values = dict(zip(FIELDS, HEADER_STRUCT.unpack_from(batch)))
    values.update(fields)
    out = bytearray(batch)
    HEADER_STRUCT.pack_into(out, 0, *values.values())
    if fix_crc:
        struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def raw_batch(payload: bytes, *, record_count: int, last_offset_delta: int | None = None,
              attributes: int = 0, base_offset: int = 100, base_timestamp: int = 1000,
              fix_crc: bool = True) -> bytes:
    """A batch around hand-made record bytes."""
    if last_offset_delta is None:
        last_offset_delta = max(record_count - 1, 0)
    header = HEADER_STRUCT.pack(
        base_offset, HEADER_SIZE - 12 + len(payload), -1, 2, 0, attributes,
        last_offset_delta, base_timestamp, base_timestamp, -1, -1, -1, record_count)
    batch = bytearray(header + payload)
    if fix_crc:
        struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def record_body(offset_delta=0, key=b"k", value=b"v", headers=(), ts_delta=0) -> bytes:
    out = b"\x00" + encode_varlong(ts_delta) + encode_varint(offset_delta)
    for field in (key, value):
        out += encode_varint(-1) if field is None else encode_varint(len(field)) + field
    out += encode_varint(len(headers))
    for hk, hv in headers:
        out += encode_varint(len(hk)) + hk
        out += encode_varint(-1) if hv is None else encode_varint(len(hv)) + hv
    return out


SAMPLE = [
    Record(10, 1_700_000_000_000, b"key", b"value", (("h1", b"x"), ("h2", None))),
    Record(11, 1_699_999_999_000, None, b"no key"),
    Record(15, 1_700_000_005_000, b"tomb", None),           # a gap, a tombstone
    Record(16, 1_700_000_001_000, b"", b"", (("\u00e9t\u00e9", b""),)),
]


# ------------------------------------------------------------------ layout

def test_layout_constants():
    assert HEADER_SIZE == 61 == HEADER_STRUCT.size
    assert (CRC_OFFSET, ATTRIBUTES_OFFSET) == (17, 21)
    assert (COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, CONTROL_MASK,
            DELETE_HORIZON_MASK) == (0x07, 0x08, 0x10, 0x20, 0x40)


# Independent vectors: sarama's record_test.go (IBM/sarama), whose encoder is
# tested against real brokers. Written there with a Go CRC-32C.
SARAMA_EMPTY = bytes([0] * 8 + [0, 0, 0, 49] + [0] * 4 + [2, 89, 95, 183, 221] + [0] * 40)
SARAMA_CONTROL = bytes([0] * 8 + [0, 0, 0, 49] + [0] * 4 + [2, 81, 46, 67, 217, 0, 32] + [0] * 38)
_SARAMA_HEAD = [0] * 8 + [0, 0, 0, 70] + [0] * 4 + [2, 84, 121, 97, 253] + [0] * 6
_SARAMA_TS = [0, 0, 1, 88, 141, 205, 89, 56]
_SARAMA_RECORD = [40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12]
SARAMA_PLAIN = bytes(_SARAMA_HEAD + _SARAMA_TS + [0] * 22 + [0, 0, 0, 1] + _SARAMA_RECORD)
SARAMA_SNAPPY_RAW = bytes(  # raw (not xerial) snappy, as non-Java clients write it
    [0] * 8 + [0, 0, 0, 72] + [0] * 4 + [2, 21, 0, 159, 97, 0, 2] + [0] * 4 + _SARAMA_TS
    + [0] * 22 + [0, 0, 0, 1] + [21, 80] + _SARAMA_RECORD)
SARAMA_LZ4 = bytes(  # an LZ4 frame with content checksum and an uncompressed block
    [0] * 8 + [0, 0, 0, 89] + [0] * 4 + [2, 169, 74, 119, 197, 0, 3] + [0] * 4 + _SARAMA_TS
    + [0] * 22 + [0, 0, 0, 1]
    + [4, 34, 77, 24, 100, 112, 185, 21, 0, 0, 128] + _SARAMA_RECORD[:]
    + [0, 0, 0, 0, 12, 59, 239, 146])


def test_encodes_empty_batches_byte_for_byte():
    fields = dict(base_offset=0, last_offset=0, partition_leader_epoch=0, producer_id=0,
                  producer_epoch=0, base_sequence=0, max_timestamp=0)
    assert encode_batch([], **fields) == SARAMA_EMPTY
    assert encode_batch([], control=True, **fields) == SARAMA_CONTROL


@pytest.mark.parametrize("vector,codec", [
    (SARAMA_PLAIN, Compression.NONE), (SARAMA_SNAPPY_RAW, Compression.SNAPPY),
    (SARAMA_LZ4, Compression.LZ4)])
def test_decodes_foreign_vectors(vector, codec):
    header, records = decode_batch(vector)
    assert header.compression is codec
    assert (header.base_timestamp, header.max_timestamp, header.record_count) == (
        1479847795000, 0, 1)
    assert records == [Record(0, 1479847795005, b"\x01\x02\x03\x04", b"\x05\x06\x07",
                              (("\x08\x09\x0a", b"\x0b\x0c"),))]


def test_header_fields_and_properties():
    batch = encode_batch(SAMPLE, compression="zstd", producer_id=42, producer_epoch=3,
                         base_sequence=17, partition_leader_epoch=9, transactional=True)
    h = parse_header(batch)
    assert h == BatchHeader(
        base_offset=10, batch_length=len(batch) - 12, partition_leader_epoch=9, magic=2,
        crc=struct.unpack_from(">I", batch, 17)[0], attributes=0x14, last_offset_delta=6,
        base_timestamp=1_700_000_000_000, max_timestamp=1_700_000_005_000,
        producer_id=42, producer_epoch=3, base_sequence=17, record_count=4)
    assert h.size == len(batch)
    assert (h.last_offset, h.next_offset) == (16, 17)
    assert h.compression is Compression.ZSTD
    assert h.timestamp_type == 0
    assert h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert h.delete_horizon_ms is None


def test_header_is_frozen():
    h = parse_header(encode_batch(SAMPLE))
    with pytest.raises(AttributeError):
        h.base_offset = 1  # type: ignore[misc]


# ------------------------------------------------------------- round trips

@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_sample(codec):
    batch = encode_batch(SAMPLE, compression=codec)
    header, records = decode_batch(batch)
    assert records == SAMPLE
    assert header.compression is codec


def test_decode_at_position_and_memoryview():
    a, b = encode_batch(SAMPLE[:2]), encode_batch(SAMPLE[2:], compression="gzip")
    log = memoryview(bytearray(b"\xff" * 3 + a + b))
    assert decode_batch(log, 3)[1] == SAMPLE[:2]
    assert decode_batch(log, 3 + len(a))[1] == SAMPLE[2:]


def test_compaction_keeps_last_offset_and_base_offset():
    # Records 12 and 14 survived of [10, 19]; the batch still spans 10..19.
    kept = [Record(12, 5, b"a", b"1"), Record(14, 6, b"b", b"2")]
    batch = encode_batch(kept, base_offset=10, last_offset=19, compression="lz4")
    h, records = decode_batch(batch)
    assert (h.base_offset, h.last_offset, h.record_count) == (10, 19, 2)
    assert records == kept


def test_empty_batch_keeps_producer_state():
    batch = encode_batch([], base_offset=50, last_offset=57, producer_id=7, producer_epoch=2,
                         base_sequence=30, compression="zstd", max_timestamp=1234,
                         transactional=True)
    h, records = decode_batch(batch)
    assert records == []
    assert len(batch) == HEADER_SIZE
    assert (h.base_offset, h.next_offset, h.record_count) == (50, 58, 0)
    assert h.compression is Compression.NONE  # Kafka writes empty batches uncompressed
    assert (h.base_timestamp, h.max_timestamp) == (1234, 1234)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 30)


def test_empty_batch_without_timestamp():
    h = parse_header(encode_batch([], base_offset=0, last_offset=0))
    assert (h.base_timestamp, h.max_timestamp) == (-1, -1)


def test_delete_horizon_is_the_base_timestamp():
    records = [Record(0, 500, b"k", None), Record(1, 400, b"j", b"v")]
    batch = encode_batch(records, delete_horizon_ms=86_400_000)
    h, out = decode_batch(batch)
    assert h.has_delete_horizon and h.attributes & 0x40
    assert h.base_timestamp == h.delete_horizon_ms == 86_400_000
    assert h.max_timestamp == 500
    assert out == records  # record timestamps survive (deltas are from the horizon)


def test_log_append_time_uses_max_timestamp():
    records = [Record(0, 5, b"a", b"1"), Record(1, 9, b"b", b"2")]
    batch = encode_batch(records, timestamp_type=1, max_timestamp=777)
    h, out = decode_batch(batch)
    assert h.timestamp_type == 1 and h.max_timestamp == 777
    assert [r.timestamp for r in out] == [777, 777]
    assert [(r.offset, r.key, r.value) for r in out] == [(0, b"a", b"1"), (1, b"b", b"2")]


def test_control_flag():
    h = parse_header(encode_batch([Record(3, 1, b"\0\0\0\1", b"\0\0\0\0\0\0")],
                                  control=True, transactional=True, producer_id=1,
                                  producer_epoch=0))
    assert h.is_control and h.is_transactional


def test_encode_accepts_bytearray_and_memoryview_fields():
    rec = Record(0, 1, bytearray(b"k"), memoryview(b"v"), (("h", bytearray(b"x")),))
    assert decode_batch(encode_batch([rec]))[1] == [Record(0, 1, b"k", b"v", (("h", b"x"),))]


def test_large_batch_round_trip():
    records = [Record(i, 1000 + i % 17, str(i).encode(), os.urandom(i % 200))
               for i in range(5000)]
    for codec in CODECS:
        assert decode_batch(encode_batch(records, compression=codec))[1] == records


# ---------------------------------------------------------- encode errors

@pytest.mark.parametrize("records,kwargs,match", [
    ([Record(5, 1), Record(5, 2)], {}, "increase"),
    ([Record(5, 1), Record(7, 2), Record(6, 3)], {}, "increase"),
    ([], {}, "empty batch"),
    ([], {"base_offset": 3}, "empty batch"),
    ([Record(5, 1)], {"base_offset": 6}, "outside"),
    ([Record(5, 1)], {"last_offset": 4}, "outside"),
    ([Record(0, 1), Record(1 << 31, 1)], {}, "within"),
    ([Record(0, 1)], {"timestamp_type": 2}, "timestamp_type"),
    ([Record(0, 1)], {"compression": "brotli"}, "brotli"),
    ([Record(0, 1)], {"producer_epoch": 1 << 15}, "out of range"),
    ([Record(0, -(1 << 63)), Record(1, (1 << 63) - 1)], {}, "too far"),
])
def test_encode_rejects(records, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        encode_batch(records, **kwargs)


# ------------------------------------------------------------------- CRC

def test_crc32c_vectors():
    # RFC 3720 B.4 and the classic check value.
    assert crc32c(b"123456789") == crc32c_pure(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == crc32c_pure(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == crc32c_pure(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(b"") == 0


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32c_pure_matches_native_and_continues(a, b):
    assert crc32c_pure(a + b) == crc32c(a + b)
    assert crc32c(b, crc32c(a)) == crc32c(a + b) == crc32c_pure(b, crc32c_pure(a))


def test_crc_native_in_use_and_env_forces_pure():
    assert crc_mod.NATIVE  # crc32c is installed here
    code = ("import kafkastore.format.crc as c; "
            "print(c.NATIVE, c.crc32c is c.crc32c_pure, c.crc32c(b'123456789'))")
    env = dict(os.environ, KAFKASTORE_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.dirname(crc_mod.__file__) + "/..")
    assert out.stdout.split() == ["False", "True", str(0xE3069283)]


def test_crc_mismatch_names_offset_and_position():
    first = encode_batch([Record(0, 1, b"a", b"b")])
    second = bytearray(encode_batch([Record(1, 1, b"c", b"d"), Record(2, 2, None, b"e")]))
    second[-1] ^= 0x01
    log = first + bytes(second)
    with pytest.raises(CrcMismatchError) as info:
        list(iter_batches(log, segment="00000000000000000000-abc.log"))
    err = info.value
    assert (err.offset, err.position, err.segment) == (1, len(first),
                                                       "00000000000000000000-abc.log")
    assert "offset 1" in str(err) and f"position {len(first)}" in str(err)
    assert "00000000000000000000-abc.log" in str(err)
    with pytest.raises(CrcMismatchError) as info:
        decode_batch(log, len(first))
    assert (info.value.offset, info.value.position) == (1, len(first))
    with pytest.raises(CrcMismatchError):
        check_crc(log, len(first), parse_header(log, len(first)))


def test_crc_not_checked_when_disabled():
    batch = bytearray(encode_batch(SAMPLE))
    batch[CRC_OFFSET] ^= 0xFF  # the CRC itself is wrong, the data is fine
    assert decode_batch(bytes(batch), verify_crc=False)[1] == SAMPLE
    assert [p for p, _ in iter_batches(bytes(batch), verify_crc=False)] == [0]
    with pytest.raises(CrcMismatchError):
        decode_batch(bytes(batch))


def test_partition_leader_epoch_is_outside_the_crc():
    batch = encode_batch(SAMPLE)
    restamped = rewrite(batch, fix_crc=False, partition_leader_epoch=12345)
    h, records = decode_batch(restamped)
    assert h.partition_leader_epoch == 12345 and records == SAMPLE


# ------------------------------------------------------------- framing

def test_iter_batches_walks_a_log():
    batches = [encode_batch([Record(i * 10 + j, j, b"k", b"v") for j in range(3)],
                            compression=CODECS[i % 5]) for i in range(7)]
    log = b"".join(batches)
    walked = list(iter_batches(log))
    assert [p for p, _ in walked] == [sum(map(len, batches[:i])) for i in range(7)]
    assert [h.base_offset for _, h in walked] == [i * 10 for i in range(7)]
    assert list(iter_batches(b"")) == []


def test_iter_batches_yields_good_prefix_then_raises_on_torn_tail():
    a, b = encode_batch(SAMPLE[:2]), encode_batch(SAMPLE[2:])
    seen = []
    with pytest.raises(CorruptRecordError) as info:
        for pos, h in iter_batches(a + b[:-3], segment="seg"):
            seen.append(pos)
    assert seen == [0]
    assert (info.value.position, info.value.offset, info.value.segment) == (len(a), 15, "seg")
    assert "past the end" in str(info.value)


def test_truncated_header():
    batch = encode_batch(SAMPLE)
    with pytest.raises(CorruptRecordError, match="truncated batch header") as info:
        parse_header(batch[:40])
    assert (info.value.offset, info.value.position) == (10, 0)
    with pytest.raises(CorruptRecordError, match="truncated batch header") as info:
        list(iter_batches(batch + batch[:5]))
    assert info.value.position == len(batch) and info.value.offset is None


def test_truncated_batch():
    batch = encode_batch(SAMPLE, compression="snappy")
    for cut in (HEADER_SIZE, len(batch) - 1):
        with pytest.raises(CorruptRecordError, match="past the end") as info:
            decode_batch(batch[:cut])
        assert (info.value.offset, info.value.position) == (10, 0)


def test_batch_length_past_buffer():
    batch = rewrite(encode_batch(SAMPLE), fix_crc=False, batch_length=1 << 30)
    with pytest.raises(CorruptRecordError, match="past the end"):
        parse_header(batch)


def test_batch_length_too_small():
    batch = rewrite(encode_batch(SAMPLE), fix_crc=False, batch_length=48)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        parse_header(batch)


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_wrong_magic(magic):
    batch = rewrite(encode_batch(SAMPLE), fix_crc=False, magic=magic)
    with pytest.raises(CorruptRecordError, match=f"unsupported magic {magic}") as info:
        decode_batch(batch)
    assert info.value.offset == 10 and info.value.position == 0
    assert not isinstance(info.value, CrcMismatchError)


@pytest.mark.parametrize("fields,match", [
    ({"record_count": -1}, "negative record count"),
    ({"last_offset_delta": -1}, "negative last offset delta"),
    ({"record_count": 8}, "exceeds last offset delta"),
    ({"record_count": 1000, "last_offset_delta": 5000}, "cannot fit"),
    ({"attributes": 5}, "unknown compression codec 5"),
])
def test_implausible_header_fields(fields, match):
    batch = encode_batch(SAMPLE)
    # With a matching CRC, the writer was wrong: CorruptRecordError.
    with pytest.raises(CorruptRecordError, match=match) as info:
        parse_header(rewrite(batch, **fields))
    assert not isinstance(info.value, CrcMismatchError)
    assert info.value.offset == 10
    # With a stale CRC, the bytes were damaged: CrcMismatchError.
    with pytest.raises(CrcMismatchError):
        parse_header(rewrite(batch, fix_crc=False, **fields))


# -------------------------------------------------------------- record errors

def test_record_count_mismatch_too_few_records():
    batch = rewrite(encode_batch(SAMPLE), record_count=5)
    with pytest.raises(CorruptRecordError, match="header says 5, batch holds 4") as info:
        decode_batch(batch)
    assert (info.value.offset, info.value.position) == (10, 0)


def test_record_count_mismatch_bytes_left_over():
    batch = rewrite(encode_batch(SAMPLE, compression="gzip"), record_count=3)
    with pytest.raises(CorruptRecordError, match="3 records decoded, .* bytes left over"):
        decode_batch(batch)


def test_bad_varint_in_record():
    payload = raw_record(record_body())[:1] + b"\xff\xff\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordError, match="varint") as info:
        decode_batch(raw_batch(b"\x80\x80\x80\x80\x80\x01" + payload, record_count=1))
    assert (info.value.offset, info.value.position) == (100, 0)
    # The timestamp delta varlong runs past its record.
    body = b"\x00" + b"\xff" * 4
    with pytest.raises(CorruptRecordError, match="varlong"):
        decode_batch(raw_batch(raw_record(body) + raw_record(record_body()),
                               record_count=2))


@pytest.mark.parametrize("payload,match", [
    (encode_varint(100) + record_body(), "length 100 exceeds"),
    (encode_varint(-3) + record_body(), "length -3 exceeds"),
    (raw_record(b"") + bytes(6), "empty record"),
    (raw_record(record_body()[:3] + encode_varint(50) + b"abc"), "key length 50"),
    (raw_record(record_body()[:3] + encode_varint(-2) + b"\x00\x00"), "invalid key length -2"),
    (raw_record(record_body(value=None)[:-1] + encode_varint(-1)), "invalid header count -1"),
    (raw_record(record_body(value=None)[:-1] + encode_varint(1000)), "invalid header count 1000"),
    (raw_record(record_body(headers=[(b"\xff\xfe", b"x")])), "not valid UTF-8"),
    (raw_record(record_body(headers=[(b"h", b"x")])[:-4] + encode_varint(-1) + b"h\x00"),
     "header key length -1"),
    (raw_record(record_body() + b"\x00\x00"), "fields end"),
    (raw_record(record_body(offset_delta=1)), "offset delta 1"),
])
def test_record_level_corruption(payload, match):
    with pytest.raises(CorruptRecordError, match=match) as info:
        decode_batch(raw_batch(payload, record_count=1))
    assert (info.value.offset, info.value.position) == (100, 0)


def test_offsets_must_increase_within_batch():
    payload = raw_record(record_body(offset_delta=2)) + raw_record(record_body(offset_delta=1))
    with pytest.raises(CorruptRecordError, match="not increasing"):
        decode_batch(raw_batch(payload, record_count=2, last_offset_delta=2))


def test_bad_compressed_payload_names_location():
    batch = raw_batch(b"definitely not zstd", record_count=1, attributes=Compression.ZSTD)
    with pytest.raises(CompressionError, match="offset 100, position 0"):
        decode_batch(batch)


def test_decompression_bound_applies():
    records = [Record(i, 0, None, bytes(10_000)) for i in range(100)]
    batch = encode_batch(records, compression="zstd")
    assert decode_batch(batch)[1] == records
    with pytest.raises(CompressionError, match="more than"):
        decode_batch(batch, max_decompressed_size=100_000)


# --------------------------------------------------------- property tests

header_values = st.one_of(st.none(), st.binary(max_size=20))
record_parts = st.tuples(
    st.one_of(st.none(), st.binary(max_size=60)),                   # key
    st.one_of(st.none(), st.binary(max_size=200)),                  # value
    st.lists(st.tuples(st.text(max_size=12), header_values), max_size=4),
    st.integers(0, (1 << 63) - 1),                                  # timestamp (Kafka: >= 0)
    st.integers(1, 1 << 20),                                        # offset gap before it
)


@st.composite
def record_lists(draw, min_size=1, max_size=25):
    parts = draw(st.lists(record_parts, min_size=min_size, max_size=max_size))
    offset = draw(st.integers(0, 1 << 62))
    records = []
    for key, value, headers, ts, gap in parts:
        offset += gap if records else 0
        records.append(Record(offset, ts, key, value, tuple(headers)))
    assume(records[-1].offset - records[0].offset < 1 << 31)
    return records


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(), st.sampled_from(CODECS), st.integers(-1, 1 << 40),
       st.integers(-1, 32767), st.integers(-1, (1 << 31) - 1), st.booleans())
def test_round_trip_property(records, codec, pid, epoch, seq, txn):
    batch = encode_batch(records, compression=codec, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, transactional=txn)
    header, out = decode_batch(batch)
    assert out == records
    assert header.size == len(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, seq)
    assert header.is_transactional == txn
    assert header.compression is codec
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert (header.base_offset, header.last_offset) == (records[0].offset, records[-1].offset)
    assert [h for _, h in iter_batches(batch + batch)] == [header, header]


ALLOWED = (CorruptRecordError, CompressionError)


def _decode_everything(buf: bytes) -> None:
    for verify in (True, False):
        try:
            decode_batch(buf, verify_crc=verify, max_decompressed_size=1 << 20)
        except ALLOWED:
            pass
        try:
            for _ in iter_batches(buf, verify_crc=verify):
                pass
        except ALLOWED:
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_only_raise_corrupt(data):
    _decode_everything(data)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 4), st.integers(0, 20), st.integers(-2, 40), st.binary(max_size=300),
       st.booleans())
def test_arbitrary_records_behind_a_valid_header(codec, count, last_delta, payload, fix_crc):
    # A header that passes the framing checks, random bytes as the records:
    # exercises the record parser and every decompressor on garbage.
    buf = raw_batch(payload, record_count=count, last_offset_delta=last_delta,
                    attributes=codec, fix_crc=fix_crc)
    _decode_everything(buf)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(max_size=8), st.sampled_from(CODECS), st.data())
def test_mutated_batches_only_raise_corrupt(records, codec, data):
    batch = bytearray(encode_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(1, 5))):
        kind = data.draw(st.sampled_from(["set", "cut", "insert", "delete"]))
        i = data.draw(st.integers(0, max(len(batch) - 1, 0)))
        if kind == "set" and batch:
            batch[i] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del batch[i:]
        elif kind == "insert":
            batch[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif batch:
            del batch[i:i + data.draw(st.integers(1, 8))]
    _decode_everything(bytes(batch))
    # Also with the CRC fixed up, so the record parser sees the damage.
    if len(batch) >= HEADER_SIZE:
        struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
        _decode_everything(bytes(batch))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(max_size=6), st.sampled_from(CODECS), st.data())
def test_any_byte_flip_under_the_crc_is_detected(records, codec, data):
    batch = encode_batch(records, compression=codec)
    i = data.draw(st.integers(CRC_OFFSET, len(batch) - 1))  # the CRC field and what it covers
    flip = data.draw(st.integers(1, 255))
    damaged = bytearray(batch)
    damaged[i] ^= flip
    damaged = bytes(damaged)
    with pytest.raises(CrcMismatchError) as info:
        decode_batch(damaged)
    assert (info.value.offset, info.value.position) == (records[0].offset, 0)
    with pytest.raises(CrcMismatchError):
        list(iter_batches(damaged))


def test_every_single_byte_flip_of_one_batch():
    """Exhaustive version of the property above for one compressed batch."""
    batch = encode_batch(SAMPLE, compression="lz4", producer_id=3, producer_epoch=1,
                         base_sequence=0, transactional=True)
    rnd = random.Random(5)
    for i in range(CRC_OFFSET, len(batch)):
        damaged = bytearray(batch)
        damaged[i] ^= rnd.randint(1, 255)
        with pytest.raises(CrcMismatchError):
            decode_batch(bytes(damaged))
