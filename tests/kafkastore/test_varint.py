"""Zig-zag varints: known vectors, agreement with kafka-python, bounds."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kafkastore.errors import CorruptRecordError
from kafkastore.format.varint import (
    INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, decode_varint, decode_varlong,
    encode_varint, encode_varlong, size_of_varint, write_varint)

int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)

# Vectors from the protobuf spec / Kafka's ByteUtilsTest.
VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"),
    (64, "8001"), (-65, "8101"), (300, "d804"),
    (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize("value,hexed", VECTORS)
def test_known_vectors(value, hexed):
    assert encode_varint(value).hex() == hexed
    assert encode_varlong(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)
    assert decode_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


def test_varlong_extremes():
    assert encode_varlong(INT64_MIN).hex() == "ff" * 9 + "01"
    assert encode_varlong(INT64_MAX).hex() == "fe" + "ff" * 8 + "01"
    assert decode_varlong(bytes.fromhex("ff" * 9 + "01")) == (INT64_MIN, 10)


def test_decode_at_position_returns_new_position():
    buf = b"\xaa\xbb" + encode_varint(300) + encode_varint(-1)
    value, pos = decode_varint(buf, 2)
    assert (value, pos) == (300, 4)
    assert decode_varint(buf, pos) == (-1, 5)


@given(int32s)
def test_varint_round_trip_and_size(value):
    data = encode_varint(value)
    assert decode_varint(data + b"\x00junk") == (value, len(data))
    assert size_of_varint(value) == len(data) <= 5
    out = bytearray(b"x")
    write_varint(value, out)
    assert bytes(out) == b"x" + data


@given(int64s)
def test_varlong_round_trip_and_size(value):
    data = encode_varlong(value)
    assert decode_varlong(data) == (value, len(data))
    assert size_of_varint(value) == len(data) <= 10
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == data


@given(int64s)
def test_agrees_with_kafka_python(value):
    from kafka.record.util import decode_varint as kp_decode, encode_varint as kp_encode

    out = bytearray()
    kp_encode(value, out.append)
    assert bytes(out) == encode_varlong(value)
    assert kp_decode(bytearray(encode_varlong(value)), 0) == (value, len(out))


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x81\x81\x81\x81"])
def test_truncated_varint_raises(data):
    with pytest.raises(CorruptRecordError, match="truncated varint"):
        decode_varint(data)


def test_too_long_varint_raises():
    # Six bytes with the continuation bit: more than an int32 can take.
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(b"\x80" * 5 + b"\x00")
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(b"\x80" * 10 + b"\x00")


def test_varint_with_bits_past_32_raises():
    # 5 bytes, but the last one carries bits 32..34.
    with pytest.raises(CorruptRecordError, match="too large"):
        decode_varint(b"\xff\xff\xff\xff\x1f")
    # The same value is a fine varlong.
    assert decode_varlong(b"\xff\xff\xff\xff\x1f")[1] == 5


def test_varlong_with_bits_past_64_raises():
    with pytest.raises(CorruptRecordError, match="too large"):
        decode_varlong(b"\xff" * 9 + b"\x03")


def test_encode_out_of_range():
    with pytest.raises(ValueError):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError):
        encode_varlong(INT64_MIN - 1)


@given(st.binary(max_size=12), st.integers(0, 12))
def test_decode_of_arbitrary_bytes_only_raises_corrupt(data, pos):
    for decode in (decode_varint, decode_varlong):
        try:
            value, new = decode(data, pos)
        except CorruptRecordError:
            continue
        assert pos < new <= len(data)
        assert INT64_MIN <= value <= INT64_MAX


def test_decode_stops_at_end():
    buf = encode_varint(300) + b"\x00"
    assert decode_varint(buf, 0, 2) == (300, 2)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(buf, 0, 1)  # the second byte is past the bound
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varlong(buf, 0, 1)
    assert decode_varint(buf, 0, 99) == (300, 2)  # an end past the buffer is the buffer's end
