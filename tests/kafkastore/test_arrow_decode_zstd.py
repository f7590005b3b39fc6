"""zstd batches decompressed inside the C kernel's walk (``Decoder.inline_zstd``, the
system's libzstd opened at run time): the rows are the pure decoder's and those of the
per-batch path through Python, whatever the frames look like (with or without a content
size, several frames in one payload, batches larger than the thread's scratch buffer),
and what the kernel cannot decompress goes back to Python, which raises the same typed
error as before."""
from __future__ import annotations

import random
import struct

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import CompressionError, CorruptRecordError
from kafkastore.format import arrow_decode as ad
from kafkastore.format.compression import Compression
from kafkastore.format.crc import crc32c
from kafkastore.format.record_batch import Record, encode_batch
from tests.helpers.threads import run_at_once

_native = ad._native
pytestmark = pytest.mark.skipif(not ad.NATIVE_AVAILABLE or not _native.HAVE_ZSTD,
                                reason="the C kernel is not built, or libzstd.so.1 is missing")

HEADER_SIZE = 61


def records(first: int, count: int, size: int, rng: random.Random) -> list[Record]:
    """``count`` records from offset ``first``: random values of ``size`` bytes (-1: null
    values), a null key every 5th record, a header every 7th."""
    return [Record(first + i, 1_000 + first + i, None if i % 5 == 4 else b"k%d" % (first + i),
                   rng.randbytes(size) if size >= 0 else None,
                   (("h", b"%d" % i),) if i % 7 == 0 else ())
            for i in range(count)]


def zstd_batch(recs: list[Record], frame) -> bytes:
    """One zstd batch whose payload ``frame(records_section)`` writes (so the test picks
    the frames: content size or not, one or several)."""
    plain = bytearray(encode_batch(recs))
    payload = frame(bytes(plain[HEADER_SIZE:]))
    buf = plain[:HEADER_SIZE] + payload
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | int(Compression.ZSTD))
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def streaming(data: bytes) -> bytes:
    """A frame without content size (zstd-jni's streaming output, as kafkastore writes)."""
    c = zstandard.ZstdCompressor().compressobj()
    return c.compress(data) + c.flush()


def with_size(data: bytes) -> bytes:
    """A frame that states its content size (librdkafka's)."""
    return zstandard.ZstdCompressor(write_content_size=True).compress(data)


def two_frames(data: bytes) -> bytes:
    """The records section cut in two frames, one after the other."""
    half = len(data) // 2
    return streaming(data[:half]) + with_size(data[half:])


FRAMES = {"streaming": streaming, "with size": with_size, "two frames": two_frames}


def segment(shape, seed=0) -> bytes:
    """Batches of (records, value bytes, frame name or None for uncompressed)."""
    rng = random.Random(seed)
    out, offset = [], 0
    for count, size, frame in shape:
        recs = records(offset, count, size, rng)
        out.append(encode_batch(recs) if frame is None else zstd_batch(recs, FRAMES[frame]))
        offset += count
    return b"".join(out)


@pytest.fixture
def per_batch_path():
    """Turns the kernel's zstd off for the test (every zstd batch goes through Python)."""
    old = _native._set_inline_zstd(False)
    yield
    _native._set_inline_zstd(old)


def outcome(fn, buf, **kw):
    try:
        return "ok", fn(buf, topic="t", partition=0, segment="s", **kw)
    except CorruptRecordError as e:
        cause = type(e.__cause__).__name__ if e.__cause__ is not None else None
        return type(e).__name__, e.offset, e.position, cause, "decompress" in str(e)


def assert_same(a, b):
    if a[0] == "ok" and b[0] == "ok":
        assert a[1].equals(b[1])
    else:
        assert a == b


def three_ways(buf, **kw):
    """The kernel's zstd, the per-batch path through Python and the pure decoder agree."""
    inline = outcome(ad.decode_to_arrow_native, buf, **kw)
    old = _native._set_inline_zstd(False)
    try:
        per_batch = outcome(ad.decode_to_arrow_native, buf, **kw)
    finally:
        _native._set_inline_zstd(old)
    pure = outcome(ad.decode_to_arrow_pure, buf, **kw)
    assert_same(inline, per_batch)
    assert_same(inline, pure)
    return inline


def test_a_zstd_region_is_decoded_in_one_walk():
    """feed() decodes the zstd batches itself: no batch is handed back to Python."""
    buf = segment([(200, 100, "streaming"), (50, 10, None), (300, 40, "with size")])
    d = ad._NativeDecoder(0, 2**63 - 1, True, True, [])
    assert d.inline_zstd(1 << 30) is True
    assert d.feed(buf) is None
    cols = d.finish()
    assert cols["rows"] == 550 and cols["offset"].to_pylist() == list(range(550))


def test_without_inline_zstd_the_decoder_hands_zstd_batches_back():
    """The Decoder's default (and its Protocol) is unchanged: a zstd batch comes back."""
    buf = segment([(20, 10, "streaming")])
    d = ad._NativeDecoder(0, 2**63 - 1, True, True, [])
    assert d.feed(buf)[:2] == (0, int(Compression.ZSTD))


@pytest.mark.parametrize("frame", list(FRAMES))
def test_every_frame_shape_decodes_to_the_pure_rows(frame):
    buf = segment([(300, 120, frame), (1, -1, frame), (40, 0, frame), (200, 30, None),
                   (500, 60, frame)])
    got = three_ways(buf)
    assert got[0] == "ok" and got[1].num_rows == 1041


def test_batches_larger_than_the_scratch_buffer():
    """Records sections of 1 MiB and 9 MiB (above the 256 KiB the thread starts with, and
    above the 8 MiB it keeps), in both frame shapes, between small batches."""
    buf = segment([(5, 10, "streaming"), (1000, 1024, "streaming"), (3, 10, "with size"),
                   (300, 30_000, "with size"), (7, 10, "streaming"), (3, 3_000_000, "two frames")])
    got = three_ways(buf)
    assert got[0] == "ok" and got[1].num_rows == 1318
    # and again: the thread's scratch buffer was dropped or kept, the rows are the same
    assert three_ways(buf)[1].equals(got[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 400), st.sampled_from([-1, 0, 3, 120, 2000]),
                          st.sampled_from([None, *FRAMES])), min_size=1, max_size=10),
       st.data())
def test_inline_equals_per_batch_and_pure(shape, data):
    buf = segment(shape, seed=data.draw(st.integers(0, 9)))
    total = sum(c for c, _, _ in shape)
    start = data.draw(st.integers(0, total))
    end = data.draw(st.none() | st.integers(0, total + 1))
    headers = data.draw(st.booleans())
    three_ways(buf, start_offset=start, end_offset=end, include_headers=headers)
    # the value column written into the caller's input (reuse_input) as well
    expected = ad.decode_to_arrow_pure(buf, topic="t", partition=0, start_offset=start,
                                       end_offset=end, include_headers=headers)
    got = ad.decode_to_arrow_native(bytearray(buf), topic="t", partition=0, start_offset=start,
                                    end_offset=end, include_headers=headers, reuse_input=True)
    assert got.equals(expected)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_zstd_payloads_raise_what_python_raises(data):
    """Edits in a zstd payload (CRC fixed up, so the walk reaches the decompression), or a
    cut: the same rows or the same typed error, location and cause, all three ways."""
    frame = data.draw(st.sampled_from(list(FRAMES)))
    parts = [zstd_batch(records(i * 200, 200, 80, random.Random(i)), FRAMES[frame])
             for i in range(4)]
    k = data.draw(st.integers(0, 3))
    at = sum(map(len, parts[:k]))
    buf = bytearray(b"".join(parts))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(at + HEADER_SIZE, at + len(parts[k]) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, at + 17, crc32c(bytes(buf[at + 21:at + len(parts[k])])))
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(at, len(buf)))]
    three_ways(bytes(buf))


def test_trailing_bytes_after_the_frame_are_refused_as_before():
    junk = lambda data: streaming(data) + b"\x00\x01\x02\x03"  # noqa: E731
    buf = segment([(100, 50, "streaming")]) + zstd_batch(records(100, 100, 50,
                                                                 random.Random(1)), junk)
    got = three_ways(buf)
    assert got[:3] == ("CorruptRecordError", 100, len(segment([(100, 50, "streaming")])))
    assert got[3] == CompressionError.__name__ and got[4]


def test_past_the_decompression_bound_python_raises(monkeypatch):
    """A batch that decompresses past the bound: the kernel hands it back and Python raises
    its 'decompresses to more than' error, as with the per-batch path."""
    buf = segment([(10, 10, "streaming"), (100, 1000, "with size"), (100, 1000, "streaming")])
    monkeypatch.setattr(ad, "MAX_DECOMPRESSED_SIZE", 50_000)
    got = three_ways(buf)
    assert got[0] == "CorruptRecordError" and got[3] == CompressionError.__name__
    with pytest.raises(CorruptRecordError, match="more than 50000 bytes"):
        ad.decode_to_arrow_native(buf, topic="t", partition=0)


def test_decodes_from_many_threads_at_once():
    """Each thread has its own decompression context and scratch buffer."""
    segs = [segment([(300, 50 + 30 * i, "streaming"), (200, 7, "with size")] * 3, seed=i)
            for i in range(4)]
    expected = [ad.decode_to_arrow_pure(s, topic="t", partition=0) for s in segs]
    bad = []

    def work(i):
        for _ in range(5):
            if not ad.decode_to_arrow_native(segs[i], topic="t", partition=0).equals(expected[i]):
                bad.append(i)

    run_at_once(work, 4)
    assert bad == []


def test_per_batch_path_fixture_turns_it_off(per_batch_path):
    d = ad._NativeDecoder(0, 2**63 - 1, True, True, [])
    assert d.inline_zstd(1 << 30) is False
    assert d.feed(segment([(20, 10, "streaming")])) is not None


def test_values_that_decompress_past_their_batch_are_not_written_over_the_next_one():
    """reuse_input=True with zstd batches whose values take far more room than the batch's
    compressed bytes: writing them into the input would overwrite the batches not read
    yet, so the kernel moves the values to memory of its own first; the rows are the pure
    decoder's."""
    parts, offset = [], 0
    for i in range(6):
        recs = [Record(offset + j, 1_000 + j, b"k", bytes([65 + i]) * 3_000, ())
                for j in range(50)]
        parts.append(zstd_batch(recs, streaming) if i % 2 == 0 else encode_batch(recs))
        offset += 50
    buf = b"".join(parts)
    expected = ad.decode_to_arrow_pure(buf, topic="t", partition=0)
    got = ad.decode_to_arrow_native(bytearray(buf), topic="t", partition=0, reuse_input=True)
    assert got.equals(expected)
