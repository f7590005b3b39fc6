"""Codecs and Kafka's framings: names, round trips, exact framing, errors, bounds."""
from __future__ import annotations

import gzip
import os
import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkastore.format.compression import (
    XERIAL_HEADER, Compression, compress, decompress)
from kafkastore.errors import CompressionError, ConfigError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]
LZ4_MAGIC = bytes.fromhex("04224d18")


def compressible(n: int, seed: int = 1) -> bytes:
    """Text-like data: compresses, but not to nothing."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(b"abcdefghijklmnop", k=rnd.randint(2, 9))) for _ in range(300)]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


# ------------------------------------------------------------------ names

@pytest.mark.parametrize("name,codec", [
    ("none", Compression.NONE), ("uncompressed", Compression.NONE),
    ("gzip", Compression.GZIP), ("snappy", Compression.SNAPPY),
    ("lz4", Compression.LZ4), ("zstd", Compression.ZSTD), ("ZSTD", Compression.ZSTD),
    (0, Compression.NONE), (4, Compression.ZSTD), (Compression.LZ4, Compression.LZ4),
])
def test_parse(name, codec):
    assert Compression.parse(name) is codec


def test_enum_values_are_kafka_ids():
    assert [(c.name, int(c)) for c in Compression] == [
        ("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]
    assert Compression.ZSTD.kafka_name == "zstd"


@pytest.mark.parametrize("bad", ["brotli", "", "producer", 5, -1, True, None, 2.0])
def test_parse_rejects_with_valid_names(bad):
    with pytest.raises(ConfigError) as info:
        Compression.parse(bad)
    for name in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert name in str(info.value)


def test_unknown_codec_id_is_compression_error():
    with pytest.raises(CompressionError):
        decompress(7, b"abc")
    with pytest.raises(CompressionError):
        compress("brotli", b"abc")


# ------------------------------------------------------------- round trips

@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 200_000])
def test_round_trip_sizes(codec, size):
    data = compressible(size)
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compresses(codec):
    data = compressible(100_000)
    assert len(compress(codec, data)) < len(data) // 2


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_and_bytearray(codec):
    data = compressible(5000)
    packed = compress(codec, memoryview(bytearray(data)))
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CODECS), st.binary(max_size=70_000))
def test_round_trip_property(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec,level", [
    (Compression.GZIP, 1), (Compression.GZIP, 9), (Compression.LZ4, 9),
    (Compression.ZSTD, 1), (Compression.ZSTD, 19)])
def test_levels(codec, level):
    data = compressible(50_000)
    assert decompress(codec, compress(codec, data, level=level)) == data


# ---------------------------------------------------------- snappy framing

def test_snappy_xerial_framing_exact():
    """As snappy-java's SnappyOutputStream: 16-byte header, then a
    [BE int32 length][raw snappy] chunk per 32 KiB of input."""
    from cramjam import snappy

    data = compressible(100_000)
    out = compress(Compression.SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    assert XERIAL_HEADER == out[:16]
    pos, pieces = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        pieces.append(bytes(snappy.decompress_raw(out[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(out)
    assert [len(p) for p in pieces] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(pieces) == data


def test_snappy_reads_raw_block():
    import snappy  # python-snappy, as non-Java clients use it
    from cramjam import snappy as cs

    data = compressible(70_000)
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data
    assert decompress(Compression.SNAPPY, bytes(cs.compress_raw(data))) == data


def test_snappy_reads_concatenated_xerial_streams():
    a, b = compressible(40_000, 1), compressible(1000, 2)
    both = compress(Compression.SNAPPY, a) + compress(Compression.SNAPPY, b)
    assert decompress(Compression.SNAPPY, both) == a + b


def test_snappy_ignores_xerial_version_byte_order():
    # Some writers put version/compat little-endian; the reader does not care.
    packed = bytearray(compress(Compression.SNAPPY, b"hello hello hello"))
    packed[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(Compression.SNAPPY, bytes(packed)) == b"hello hello hello"


@pytest.mark.parametrize("mangle", [
    lambda p: p[:-1],                                   # truncated chunk
    lambda p: p[:18],                                   # truncated chunk length
    lambda p: p[:16] + struct.pack(">i", -5) + p[20:],  # negative chunk length
    lambda p: p[:16] + struct.pack(">i", 1 << 30) + p[20:],  # chunk past the end
    lambda p: p[:12],                                   # truncated header
])
def test_snappy_bad_framing(mangle):
    packed = compress(Compression.SNAPPY, compressible(1000))
    with pytest.raises(CompressionError):
        decompress(Compression.SNAPPY, mangle(packed))


# ------------------------------------------------------------ lz4 framing

def lz4_blocks(frame: bytes) -> list[bytes]:
    """Each block of a frame, decompressed on its own (fails if blocks are linked)."""
    import lz4.block

    pos, blocks = 7, []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        raw, size = size & 0x80000000, size & 0x7FFFFFFF
        body = frame[pos:pos + size]
        pos += size
        blocks.append(body if raw else lz4.block.decompress(body, uncompressed_size=65536))
    assert pos == len(frame), "no content checksum may follow the end mark"
    return blocks


def test_lz4_frame_as_kafka_writes_it():
    """KafkaLZ4BlockOutputStream: FLG 0x60 (v1, independent blocks, no checksums,
    no content size), BD 0x40 (64 KiB blocks), header checksum 0x82."""
    # A random 40 KiB chunk repeated: linked blocks would refer back across blocks.
    chunk = random.Random(3).randbytes(40_000)
    data = chunk * 5
    frame = compress(Compression.LZ4, data)
    assert frame[:7] == LZ4_MAGIC + bytes([0x60, 0x40, 0x82])
    blocks = lz4_blocks(frame)
    assert [len(b) for b in blocks] == [65536, 65536, 65536, 200_000 - 3 * 65536]
    assert b"".join(blocks) == data


@pytest.mark.parametrize("kwargs", [
    {},  # lz4's defaults: content size and content checksum stored
    {"block_checksum": True, "block_size": 6},  # checksummed 1 MiB blocks (BLOCKSIZE_MAX1MB)
    {"block_linked": True},
])
def test_lz4_reads_any_frame(kwargs):
    import lz4.frame

    data = compressible(300_000)
    assert decompress(Compression.LZ4, lz4.frame.compress(data, **kwargs)) == data


def test_lz4_bad_frames():
    frame = compress(Compression.LZ4, compressible(10_000))
    for bad in (frame[:-1], frame[:5], b"\x00" + frame[1:], frame + b"junk", b""):
        with pytest.raises(CompressionError):
            decompress(Compression.LZ4, bad)


# ----------------------------------------------------------- zstd framing

def test_zstd_frame_has_no_content_size():
    import zstandard

    frame = compress(Compression.ZSTD, compressible(10_000))
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert not params.has_checksum


def test_zstd_reads_frames_with_content_size_and_concatenated():
    import zstandard

    a, b = compressible(50_000, 1), compressible(70_000, 2)
    with_size = zstandard.ZstdCompressor(write_checksum=True).compress(a)
    assert zstandard.get_frame_parameters(with_size).content_size == len(a)
    assert decompress(Compression.ZSTD, with_size) == a
    assert decompress(Compression.ZSTD, with_size + compress(Compression.ZSTD, b)) == a + b


def test_zstd_bad_frames():
    frame = compress(Compression.ZSTD, compressible(10_000))
    for bad in (frame[:-1], frame[:3], b"\x00" + frame[1:], frame + b"junk", b""):
        with pytest.raises(CompressionError):
            decompress(Compression.ZSTD, bad)


# ----------------------------------------------------------- gzip framing

def test_gzip_is_a_gzip_stream():
    data = compressible(10_000)
    packed = compress(Compression.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data


def test_gzip_reads_concatenated_members():
    a, b = compressible(1000, 1), compressible(2000, 2)
    assert decompress(Compression.GZIP, gzip.compress(a) + gzip.compress(b)) == a + b


def test_gzip_bad_streams():
    packed = compress(Compression.GZIP, compressible(10_000))
    for bad in (packed[:-1], packed[:5], zlib.compress(b"abc"), packed + b"junk", b""):
        with pytest.raises(CompressionError):
            decompress(Compression.GZIP, bad)


# ---------------------------------------------------------------- bombs

@pytest.mark.parametrize("codec", COMPRESSED)
def test_output_bound(codec):
    data = bytes(4 << 20)  # 4 MiB of zeros: compresses to a few KiB
    packed = compress(codec, data)
    assert len(packed) < 300_000
    with pytest.raises(CompressionError, match="more than"):
        decompress(codec, packed, max_size=1 << 20)
    with pytest.raises(CompressionError, match="more than"):
        decompress(codec, packed, max_size=len(data) - 1)
    assert decompress(codec, packed, max_size=len(data)) == data


def test_snappy_size_preamble_checked_before_allocating():
    # A raw snappy block that claims 2 GiB of output.
    with pytest.raises(CompressionError, match="more than"):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x07\x00\x00")


# ------------------------------------------------------- garbage in, errors out

@settings(max_examples=300)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300))
def test_garbage_only_raises_compression_error(codec, data):
    try:
        decompress(codec, data, max_size=1 << 20)
    except CompressionError:
        pass


@settings(max_examples=300)
@given(st.sampled_from(COMPRESSED), st.data())
def test_mutated_payload_only_raises_compression_error(codec, draw):
    packed = bytearray(compress(codec, compressible(3000)))
    for _ in range(draw.draw(st.integers(1, 4))):
        i = draw.draw(st.integers(0, len(packed) - 1))
        packed[i] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(packed)))
    try:
        out = decompress(codec, bytes(packed[:cut]), max_size=1 << 20)
    except CompressionError:
        return
    assert len(out) <= 1 << 20


def test_random_payloads_do_not_escape():
    rnd = random.Random(7)
    for codec in COMPRESSED:
        for _ in range(200):
            data = os.urandom(rnd.randint(0, 64))
            for head in (b"", b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
                         LZ4_MAGIC, bytes.fromhex("28b52ffd"), b"\x1f\x8b\x08"):
                try:
                    decompress(codec, head + data, max_size=1 << 20)
                except CompressionError:
                    pass
