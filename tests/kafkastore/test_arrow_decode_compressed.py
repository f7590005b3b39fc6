"""The C kernel's sizing of its columns for compressed batches (a region of 64 KiB or more:
room reserved from the first decompressed batch for the compressed batches still to come),
and the zstd records handed over in the bytearray they were decompressed into: the same rows
as the pure decoder, whatever the estimate gets wrong, and the same typed error on damage."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import CorruptRecordError
from kafkastore.format import arrow_decode as ad
from kafkastore.format.compression import Compression, decompress, decompress_buffer
from kafkastore.format.crc import crc32c
from kafkastore.format.record_batch import Record, encode_batch

pytestmark = pytest.mark.skipif(not ad.NATIVE_AVAILABLE,
                                reason="kafkastore.format._native is not built")

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]


def batches(shape, *, seed=0):
    """One batch per (records, value bytes, codec) of ``shape``, offsets consecutive.
    Values are random bytes (size -1: null): compressed regions stay large enough (64 KiB)
    for the kernel to size its columns ahead."""
    rng = random.Random(seed)
    out, offset = [], 0
    for count, size, codec in shape:
        recs = [Record(offset + i, 1_000 + i, b"k%d" % (offset + i),
                       rng.randbytes(size) if size >= 0 else None,
                       (("h", b"%d" % i),) if i % 7 == 0 else ())
                for i in range(count)]
        out.append(encode_batch(recs, compression=codec))
        offset += count
    return out


def both(buf, **kw):
    kw = dict(topic="t", partition=0, segment="s", **kw)
    out = []
    for fn in (ad.decode_to_arrow_native, ad.decode_to_arrow_pure):
        try:
            out.append(("ok", fn(buf, **kw)))
        except CorruptRecordError as e:
            out.append((type(e).__name__, e.offset, e.position))
    return out


def assert_agree(buf, **kw):
    native, pure = both(buf, **kw)
    if native[0] == "ok" and pure[0] == "ok":
        assert native[1].equals(pure[1])
    else:
        assert native == pure
    return native


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("order", ["small first", "large first", "mixed"])
def test_estimate_too_small_or_too_large_still_decodes_every_row(codec, order):
    """The room reserved at the first compressed batch is that batch's size times the
    compressed batches left: far too small (tiny batch first) or far too large (huge batch
    first), the rows are the pure decoder's."""
    small, large = (2, 10, codec), (400, 900, codec)
    shape = {"small first": [small] + [large] * 6,
             "large first": [large] + [small] * 40,
             "mixed": [small, (300, 50, Compression.NONE), large, small, large,
                       (1, -1, codec), large]}[order]
    buf = b"".join(batches(shape))
    assert len(buf) >= 64 << 10  # the size from which the kernel sizes its columns ahead
    got = assert_agree(buf)
    assert got[0] == "ok" and got[1].num_rows == sum(c for c, _, _ in shape)
    # a second decode reuses the first's cached blocks
    assert_agree(buf)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 600), st.sampled_from([-1, 0, 3, 120, 2000]),
                          st.sampled_from(CODECS)), min_size=1, max_size=12),
       st.data())
def test_native_equals_pure_on_large_compressed_regions(shape, data):
    parts = batches(shape, seed=data.draw(st.integers(0, 9)))
    buf = b"".join(parts)
    total = sum(c for c, _, _ in shape)
    start = data.draw(st.integers(0, total))
    end = data.draw(st.none() | st.integers(0, total + 1))
    assert_agree(buf, start_offset=start, end_offset=end)
    # the value column written into the caller's input (reuse_input) as well
    expected = ad.decode_to_arrow_pure(buf, topic="t", partition=0, start_offset=start,
                                       end_offset=end)
    got = ad.decode_to_arrow_native(bytearray(buf), topic="t", partition=0, start_offset=start,
                                    end_offset=end, reuse_input=True)
    assert got.equals(expected)


def fix_crc(buf: bytearray, pos: int) -> None:
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + 12 + length])))


def positions(parts):
    out, pos = [], 0
    for p in parts:
        out.append(pos)
        pos += len(p)
    return out


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.GZIP, Compression.LZ4])
@pytest.mark.parametrize("count", [0x7FFFFFFF, 401, 1, 0, -5])
def test_a_compressed_batch_whose_record_count_lies(codec, count):
    """A record count far above (or below) what the records hold, CRC fixed up so the walk
    reaches the records: the estimate never trusts it beyond the bytes, both decoders raise
    the same CorruptRecordError at the same batch (or, for no lie, agree on the rows)."""
    parts = batches([(400, 120, codec)] * 8)
    at = positions(parts)[2]
    buf = bytearray(b"".join(parts))
    struct.pack_into(">i", buf, at + 57, count)
    fix_crc(buf, at)
    native = assert_agree(bytes(buf))
    if count != 400:
        assert native[0] in ("CorruptRecordError", "CrcMismatchError")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_or_cut_compressed_regions_agree(data):
    """Random edits in a later compressed batch (CRC fixed up or not) and a cut anywhere:
    the same rows or the same typed error and location from both decoders, no crash."""
    codec = data.draw(st.sampled_from(CODECS[1:]))
    parts = batches([(300, 200, codec)] * 6)
    k = data.draw(st.integers(1, 5))
    at = positions(parts)[k]
    buf = bytearray(b"".join(parts))
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(at + 21, at + len(parts[k]) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        fix_crc(buf, at)
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(at, len(buf)))]
    assert_agree(bytes(buf))


def test_decompress_buffer_is_decompress():
    """decompress_buffer gives the bytes decompress gives (zstd: the bytearray they were
    written into, no copy), and refuses what decompress refuses."""
    from kafkastore.errors import CompressionError
    from kafkastore.format.compression import compress

    data = b"abc" * 10_000
    for codec in CODECS:
        payload = compress(codec, data)
        out = decompress_buffer(codec, payload)
        assert bytes(out) == decompress(codec, payload) == data
        assert isinstance(decompress(codec, payload), bytes)
    with pytest.raises(CompressionError):
        decompress_buffer(Compression.ZSTD, compress(Compression.ZSTD, data), 100)
    with pytest.raises(CompressionError):
        decompress_buffer(Compression.ZSTD, compress(Compression.ZSTD, data)[:-3])
