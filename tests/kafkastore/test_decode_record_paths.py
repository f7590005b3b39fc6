"""The C kernel reads a record by one of two paths: a fast one for the common shape (one-
or two-byte varints, no headers, inside the offset range) and the full one for anything
else, which also names damage. A batch may switch between them at any record. These
properties draw records at the shapes' edges (lengths and deltas whose varints take one,
two or three bytes, nulls, headers, offsets cut by the range) and check that the rows are
the pure decoder's, and that damage gives the same error at the same place, uncompressed
and zstd."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format import arrow_decode as ad
from kafkastore.format.compression import Compression
from kafkastore.format.crc import crc32c
from kafkastore.format.record_batch import Record, encode_batch
from tests.helpers.decoders import assert_decoders_agree

pytestmark = pytest.mark.skipif(not ad.NATIVE_AVAILABLE,
                                reason="kafkastore.format._native is not built")

# zig-zag varints: 0-63 take one byte, 64-8191 two, 8192 and more three.
EDGE_LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 255, 256, 257, 8191, 8192, 9000]
EDGE_DELTAS = [0, 1, 63, 64, 8191, 8192, 1 << 20]

length_st = st.integers(0, 300) | st.sampled_from(EDGE_LENGTHS)
field_st = st.none() | length_st
record_st = st.tuples(
    st.sampled_from([1] * 8 + [2, 65, 8193]),                       # offset step
    st.integers(-3000, 3000) | st.sampled_from(EDGE_DELTAS),       # timestamp delta
    field_st,                                                       # key length (None: null)
    field_st,                                                       # value length
    st.sampled_from([(), (), (), (("h", b"v"),), (("k", None),)]),  # headers
)


def make_batch(shape, base_offset: int, codec: Compression) -> tuple[bytes, int]:
    """One batch from ``shape`` (see record_st) at ``base_offset``; its next offset."""
    recs, offset = [], base_offset
    for i, (step, ts_delta, klen, vlen, headers) in enumerate(shape):
        key = None if klen is None else bytes((i + j) % 251 for j in range(klen))
        value = None if vlen is None else bytes((7 * i + j) % 253 for j in range(vlen))
        recs.append(Record(offset, 1_700_000_000_000 + ts_delta, key, value, headers))
        offset += step
    return encode_batch(recs, compression=codec), offset


def build(batches, codec: Compression) -> tuple[bytes, int]:
    out, offset = [], 0
    for shape in batches:
        batch, offset = make_batch(shape, offset, codec)
        out.append(batch)
    return b"".join(out), offset


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(record_st, min_size=1, max_size=20), min_size=1, max_size=3),
       st.sampled_from([Compression.NONE, Compression.ZSTD]), st.data())
def test_both_record_paths_give_the_pure_decoders_rows(batches, codec, data):
    buf, total = build(batches, codec)
    start = data.draw(st.integers(0, total))
    end = data.draw(st.none() | st.integers(0, total + 1))
    include_headers = data.draw(st.booleans())
    kw = dict(topic="t", partition=1, start_offset=start, end_offset=end,
              include_headers=include_headers)
    native = ad.decode_to_arrow_native(buf, **kw)
    native.validate(full=True)
    assert native.equals(ad.decode_to_arrow_pure(buf, **kw))



@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_st, min_size=2, max_size=12), st.data())
def test_damage_on_either_path_is_named_the_same(shape, data):
    """Byte edits inside the records of an uncompressed batch (CRC fixed up so the
    records are read): the same rows or the same typed error at the same place."""
    batch, _ = make_batch(shape, 0, Compression.NONE)
    buf = bytearray(batch)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(61, len(buf) - 1))
        buf[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7f, 0x80, 0xff]) | st.integers(0, 255))
    buf[17:21] = crc32c(bytes(buf[21:])).to_bytes(4, "big")
    assert_decoders_agree(bytes(buf))


def test_a_batch_switching_paths_at_every_record():
    """Records alternating between the fast shape and each shape the full path takes."""
    slow = [(1, 0, 3, 9000, ()), (1, 8192, 3, 5, ()), (1, 0, 3, 5, (("h", b"v"),)),
            (8193, 0, 3, 5, ()), (1, 0, None, None, ()), (1, 0, 9000, 0, ())]
    shape = []
    for s in slow:
        shape += [(1, 1, 16, 100, ()), s, (1, 2, 16, 100, ())]
    for codec in (Compression.NONE, Compression.ZSTD):
        buf, total = build([shape], codec)
        for start, end in ((0, None), (5, total - 3), (total - 1, None)):
            kw = dict(topic="t", partition=0, start_offset=start, end_offset=end)
            got = ad.decode_to_arrow_native(buf, **kw)
            assert got.equals(ad.decode_to_arrow_pure(buf, **kw))
        assert got.num_rows == 1


def test_a_batch_of_the_fast_shape_cut_by_the_offset_range():
    """Every record of the fast shape: the range still cuts at the right records."""
    shape = [(1, i, 16, 100, ()) for i in range(40)]
    for codec in (Compression.NONE, Compression.ZSTD):
        buf, _ = build([shape, shape], codec)
        for start, end in ((0, None), (0, 3), (3, 41), (39, 79), (45, 46), (80, None)):
            kw = dict(topic="t", partition=0, start_offset=start, end_offset=end)
            got = ad.decode_to_arrow_native(buf, **kw)
            assert got.equals(ad.decode_to_arrow_pure(buf, **kw))
            assert got["offset"].to_pylist() == list(range(start, min(end or 80, 80)))
