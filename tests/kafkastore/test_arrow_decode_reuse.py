"""The C decoder's memory reuse: values written into the caller's input
(``reuse_input=True``), cached column blocks, populate-ahead allocation.

Whatever memory a decode reuses, its result is the pure decoder's, and no
earlier call's bytes show up in a later result.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format import arrow_decode as ad
from kafkastore.format.compression import Compression
from kafkastore.errors import CorruptRecordError
from kafkastore.format.record_batch import Record, encode_batch

pytestmark = pytest.mark.skipif(not ad.NATIVE_AVAILABLE, reason="kafkastore.format._native is not built")

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]


def log_of(batches, *, first_offset=0, log_append_time=False):
    """batches: lists of (key, value, headers) per batch, with a codec; consecutive offsets."""
    out, offset = [], first_offset
    kw = dict(timestamp_type=1, max_timestamp=77) if log_append_time else {}
    for recs, codec in batches:
        out.append(encode_batch([Record(offset + i, 1_000 + offset + i, k, v, h)
                                 for i, (k, v, h) in enumerate(recs)], compression=codec, **kw))
        offset += len(recs)
    return b"".join(out), offset


def value_address(rb):
    return rb.column("value").buffers()[2].address


def test_values_are_written_into_the_input_and_match_pure():
    seg, _ = log_of([([(b"k%d" % i, b"v%05d" % i * 20, ()) for i in range(300)],
                      Compression.NONE)] * 20)
    buf = bytearray(seg)
    got = ad.decode_to_arrow_native(buf, topic="t", partition=3, reuse_input=True)
    assert got.equals(ad.decode_to_arrow_pure(seg, topic="t", partition=3))
    # the value column lives in the caller's buffer (no fresh memory for it)
    base = memoryview(buf).cast("B")
    assert value_address(got) == ad.pa.py_buffer(base).address
    with pytest.raises(BufferError):  # a bytearray the batch points into cannot resize
        buf.extend(b"x")


def test_reuse_input_has_no_effect_on_read_only_memory_or_by_default():
    seg, _ = log_of([([(b"k", b"v" * 500, ())] * 200, Compression.NONE)] * 3)
    expected = ad.decode_to_arrow_pure(seg, topic="t", partition=0)
    for kw in ({"reuse_input": True}, {}):
        got = ad.decode_to_arrow_native(seg, topic="t", partition=0, **kw)
        assert got.equals(expected)
    buf = bytearray(seg)
    got = ad.decode_to_arrow_native(buf, topic="t", partition=0)   # not asked: not touched
    assert got.equals(expected) and bytes(buf) == seg
    assert ad.decode_to_arrow_pure(bytearray(seg), topic="t", partition=0,
                                   reuse_input=True).equals(expected)


def test_lend_rules():
    from kafkastore.format import _native

    d = _native.Decoder(0, 2**63 - 1, True, True, [])
    assert d.lend(b"read only") is False
    assert d.lend(bytearray(b"writable")) is True
    assert d.lend(bytearray(b"twice")) is False       # one lent buffer per decode
    d.finish()
    seg, _ = log_of([([(b"k", b"v", ())], Compression.NONE)])
    d.feed(seg)
    assert d.lend(bytearray(seg)) is False            # rows already decoded elsewhere


def test_compressed_batch_larger_than_its_bytes_moves_values_out():
    """A batch whose values are bigger than its compressed bytes cannot be written in place
    (it would overwrite input not read yet): the values move to fresh memory, same result."""
    seg, _ = log_of([([(b"k%d" % i, bytes(2000), ()) for i in range(100)], Compression.ZSTD),
                     ([(b"x", b"plain" * 50, ())] * 3000, Compression.NONE)])
    assert len(seg) > 2 * 100 * 2000  # room in the buffer: only the next batch is in the way
    buf = bytearray(seg)
    got = ad.decode_to_arrow_native(buf, topic="t", partition=0, reuse_input=True)
    assert got.equals(ad.decode_to_arrow_pure(seg, topic="t", partition=0))
    assert value_address(got) != ad.pa.py_buffer(buf).address


def test_big_then_small_never_shows_earlier_bytes():
    """Blocks from the cache and lent input hold old bytes: a small decode after a big one
    (in both orders of reuse) gives exactly the pure result, and the big result is intact."""
    big, _ = log_of([([(b"BIGKEY%d" % i, b"B" * 700, (("h", b"big"),)) for i in range(200)],
                      Compression.NONE)] * 30, log_append_time=True)
    small, _ = log_of([([(None if i % 2 else b"s", b"s" * i, ()) for i in range(50)],
                        Compression.NONE)])
    want_big = ad.decode_to_arrow_pure(big, topic="t", partition=0)
    want_small = ad.decode_to_arrow_pure(small, topic="t", partition=0)
    for reuse_big in (False, True):
        for reuse_small in (False, True):
            kept = ad.decode_to_arrow_native(bytearray(big), topic="t", partition=0,
                                             reuse_input=reuse_big)
            del kept  # its blocks go to the cache
            kept = ad.decode_to_arrow_native(bytearray(big), topic="t", partition=0,
                                             reuse_input=reuse_big)
            for _ in range(3):
                got = ad.decode_to_arrow_native(bytearray(small), topic="t", partition=0,
                                                reuse_input=reuse_small)
                assert got.equals(want_small)
            assert kept.equals(want_big)


def test_cached_blocks_of_nonzero_columns_come_back_zeroed():
    """timestampType and the headers offsets are only written where non-zero: a block
    cached from a log-append-time, all-headers decode must not leak into a create-time,
    header-less decode of the same size (same block size: the cache hands it over)."""
    recs = [[(b"k%d" % i, b"v" * 300, (("h", b"x"),)) for i in range(250)]] * 24
    la, _ = log_of([(r, Compression.NONE) for r in recs], log_append_time=True)
    ct, _ = log_of([([(k, v, ()) for k, v, _ in r], Compression.NONE) for r in recs])
    want = ad.decode_to_arrow_pure(ct, topic="t", partition=0)
    assert set(want.column("timestampType").to_pylist()) == {0}
    for _ in range(3):
        del_me = ad.decode_to_arrow_native(la, topic="t", partition=0)
        assert set(del_me.column("timestampType").to_pylist()) == {1}
        del del_me
        assert ad.decode_to_arrow_native(ct, topic="t", partition=0).equals(want)


@pytest.mark.parametrize("mode", [0, 2, 4])
def test_populate_ahead_across_growth(mode):
    """Presized buffers, buffers that grow past the presize (compressed batches), and
    both allocation modes: same rows as pure."""
    seg, _ = log_of([([(b"k%d" % i, b"v" * (i % 300), ()) for i in range(400)], codec)
                     for codec in [Compression.NONE, Compression.LZ4, Compression.NONE,
                                   Compression.ZSTD] * 4])
    old = ad._native._set_alloc_mode(mode)
    cache = ad._native.set_buffer_cache(0)
    try:
        for reuse in (False, True):
            got = ad.decode_to_arrow_native(bytearray(seg), topic="t", partition=0,
                                            reuse_input=reuse)
            assert got.equals(ad.decode_to_arrow_pure(seg, topic="t", partition=0))
    finally:
        ad._native._set_alloc_mode(old)
        ad._native.set_buffer_cache(cache)


record_st = st.tuples(st.none() | st.binary(max_size=12),
                      st.none() | st.binary(max_size=30) | st.integers(0, 3000).map(bytes),
                      st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)),
                               max_size=2).map(tuple))
batch_st = st.tuples(st.lists(record_st, min_size=1, max_size=10), st.sampled_from(CODECS))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_st, max_size=6), st.lists(batch_st, max_size=3), st.data())
def test_reuse_input_equals_pure(first, second, data):
    """Any log, offset range and headers flag: the C kernel writing values into the input
    gives the pure decoder's batch; then a second log in the same process does too."""
    for batches in (first, second):
        seg, total = log_of(batches)
        kw = dict(topic="p", partition=1, include_headers=data.draw(st.booleans()),
                  start_offset=data.draw(st.integers(0, total + 1)),
                  end_offset=data.draw(st.none() | st.integers(0, total + 1)))
        got = ad.decode_to_arrow_native(bytearray(seg), reuse_input=True, **kw)
        assert got.equals(ad.decode_to_arrow_pure(seg, **kw))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_reuse_input_errors_like_pure(data):
    """Damaged bytes: the same typed error at the same place, written into or not."""
    seg, _ = log_of([([(b"k", b"v" * 40, ())] * 20, Compression.NONE),
                     ([(b"k", b"w" * 40, ())] * 20, data.draw(st.sampled_from(CODECS)))])
    buf = bytearray(seg)
    for _ in range(data.draw(st.integers(1, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))

    def outcome(fn, b, **kw):
        try:
            return ("ok", fn(b, topic="t", partition=0, segment="s", **kw))
        except CorruptRecordError as e:
            return (type(e).__name__, e.offset, e.position, str(e))

    a = outcome(ad.decode_to_arrow_native, bytearray(buf), reuse_input=True)
    b = outcome(ad.decode_to_arrow_pure, bytes(buf))
    if a[0] == "ok" and b[0] == "ok":
        assert a[1].equals(b[1])
    else:
        assert a[:3] == b[:3]


# ------------------------------------------------- the read path (loads)

def test_storage_get_range_writable(root_url):
    from kafkastore.storage import Storage

    storage = Storage(root_url)
    storage.put("seg.log", bytes(range(100)))
    for start, end in [(0, 10), (95, 200), (100, 120), (20, 10), (0, 100)]:
        got = storage.get_range("seg.log", start, end, writable=True)
        assert bytes(got) == storage.get_range("seg.log", start, end)
    got = storage.get_range("seg.log", 5, 50, writable=True)
    if root_url.startswith("file://"):   # read straight into writable memory
        assert not memoryview(got).readonly
        memoryview(got)[0] = 255
        assert storage.get_range("seg.log", 5, 6) == b"\x05"   # the object is untouched
    with pytest.raises(FileNotFoundError):
        storage.get_range("nope", 0, 10, writable=True)


def test_read_range_reuse_input_equals_plain_read(root_url):
    """Whole segments (read with one byte more, cut off by a view) and planned sub-ranges:
    the same batch with and without reuse_input, on every backend."""
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.read.reader import READ_UNCOMMITTED, PartitionReader, read_range
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic

    storage = Storage(root_url)
    create_topic(storage, "r", 1, {"segment.bytes": 60_000})
    b = Broker(storage, batch_size=4096)
    for i in range(1500):
        b.send("r", b"value-%d-" % i * (i % 20), key=b"k%d" % (i % 7), partition=0,
               headers=[("h", b"%d" % i)] if i % 5 == 0 else None)
        if i % 400 == 399:
            b.flush()
    b.flush()
    reader = PartitionReader(storage, "r", 0)
    for max_bytes in (None, 20_000):
        kw = {} if max_bytes is None else {"max_bytes": max_bytes}
        ranges = reader.plan(0, 1500, **kw)
        assert ranges
        for rr in ranges:
            plain = read_range(storage, rr, isolation=READ_UNCOMMITTED)
            reused = read_range(storage, rr, isolation=READ_UNCOMMITTED, reuse_input=True)
            assert reused.equals(plain)
            assert reused.num_rows == plain.num_rows > 0


@pytest.mark.parametrize("value,mode,warns", [("plain", 0, False), ("huge", 1, False),
                                              ("populate", 2, False), ("auto", 4, False),
                                              ("nonsense", 4, True)])
def test_alloc_mode_from_the_environment(value, mode, warns):
    import os
    import subprocess
    import sys

    env = dict(os.environ, KAFKASTORE_DECODE_ALLOC=value)
    out = subprocess.run([sys.executable, "-W", "always", "-c",
                          "from kafkastore.format import arrow_decode as ad; "
                          "print(ad._native._set_alloc_mode(4))"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(mode)
    assert ("KAFKASTORE_DECODE_ALLOC" in out.stderr) == warns


def test_auto_mode_measures_both_kinds_of_pages():
    """Mode 4 times its populate calls: after decodes into fresh memory it has a cost for
    4 KiB pages and one for huge pages (a trial), and the rows are the pure decoder's."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("anonymous mappings and MADV_POPULATE_WRITE are Linux's")
    seg, _ = log_of([([(b"k%d" % i, b"v" * 1000, ()) for i in range(500)],
                      Compression.NONE)] * 30)   # ~15 MB of values: several 2 MiB chunks
    want = ad.decode_to_arrow_pure(seg, topic="t", partition=0)
    old = ad._native._set_alloc_mode(4)
    cache = ad._native.set_buffer_cache(0)
    try:
        for _ in range(3):
            assert ad.decode_to_arrow_native(seg, topic="t", partition=0).equals(want)
        small, huge, chunks = ad._native._alloc_stats()
    finally:
        ad._native._set_alloc_mode(old)
        ad._native.set_buffer_cache(cache)
    assert chunks > 0 and small > 0 and huge > 0
    with pytest.raises(ValueError):
        ad._native._set_alloc_mode(9)


def test_growing_a_block_advised_in_pieces():
    """A block whose chunks were advised differently (huge pages for the block, 4 KiB pages
    for chunks populated in mode 4) is several kernel mappings, which mremap refuses to
    grow: the decoder copies instead of failing with MemoryError."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("anonymous mappings are Linux's")
    from kafkastore.format import _native

    batches = [encode_batch([Record(b * 100 + i, 5, b"k", b"v" * 2000, ()) for i in range(20)])
               for b in range(150)]
    seg = b"".join(batches)
    want = ad.decode_to_arrow_pure(seg, topic="t", partition=0)
    old_mode, cache = _native._set_alloc_mode(4), _native.set_buffer_cache(0)
    old_small, old_huge, _ = _native._alloc_stats(1, 1000)   # 4 KiB pages measured cheaper
    try:
        dec = ad._NativeDecoder(0, 2**63 - 1, True, True, [])
        pos = 0
        for i, b in enumerate(batches):   # small feeds: no presize, buffers grow by doubling
            _native._set_alloc_mode(3 if i % 5 == 0 else 4)
            dec.feed(seg, pos, pos + len(b))
            pos += len(b)
        cols = dec.finish()
    finally:
        _native._set_alloc_mode(old_mode)
        _native.set_buffer_cache(cache)
        _native._alloc_stats(old_small, old_huge)
    assert cols["rows"] == want.num_rows
    assert cols["value"].equals(want.column("value"))


def _collapse_works() -> bool:
    """Whether this kernel collapses anonymous memory into huge pages (MADV_COLLAPSE,
    Linux 6.1, THP not "never", a free huge page): probed on a mapping of our own."""
    import ctypes
    import mmap

    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False
        m = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:
        return False
    try:
        m.write(b"x" * (4 << 20))
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        start = -addr % (2 << 20)
        m.madvise(mmap.MADV_HUGEPAGE, start, 2 << 20)
        m.madvise(25, start, 2 << 20)   # MADV_COLLAPSE
        return True
    except (OSError, ValueError, AttributeError):
        return False
    finally:
        import gc

        gc.collect()   # the from_buffer view holds an export of m
        try:
            m.close()
        except BufferError:
            pass


def _huge_bytes_at(address: int) -> int:
    """AnonHugePages (bytes) of this process's mapping that holds `address`."""
    inside, huge = False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                huge = int(line.split()[1]) * 1024
    return huge


def test_a_reused_block_is_collapsed_into_huge_pages():
    """Auto mode (4) gives fresh memory 4 KiB pages when those fault in cheaper, but a block
    the cache hands out again and again is being reused, and a warm decode of 4 KiB pages
    pays for TLB misses: once the process has reused a few blocks (COLLAPSE_AFTER, 16), the
    touched part of a block taken is collapsed into huge pages, so the value column of a
    later warm decode lies in huge pages (and its rows are the same)."""
    import sys

    if not sys.platform.startswith("linux") or not _collapse_works():
        pytest.skip("needs Linux's MADV_COLLAPSE and transparent huge pages")
    from kafkastore.format import _native

    seg = b"".join(encode_batch([Record(b * 100 + i, 5, b"k", b"%04d" % i * 1000, ())
                                 for i in range(100)]) for b in range(24))   # ~9.6 MB of values
    want = ad.decode_to_arrow_pure(seg, topic="t", partition=0)
    old_mode = _native._set_alloc_mode(2)      # the first decode: 4 KiB pages, populated
    limit = _native.set_buffer_cache(256 << 20)  # clears the cache, keeps blocks again
    try:
        first = ad.decode_to_arrow_native(seg, topic="t", partition=0)
        assert first.equals(want)
        first_at = value_address(first)
        del first                               # its blocks go to the cache
        _native._set_alloc_mode(4)
        for _ in range(20):                     # more reuses of its block than COLLAPSE_AFTER
            later = ad.decode_to_arrow_native(seg, topic="t", partition=0)
            assert value_address(later) == first_at   # the cached block, reused
            huge = _huge_bytes_at(value_address(later))
            del later
        later = ad.decode_to_arrow_native(seg, topic="t", partition=0)
        assert later.equals(want)
        assert huge >= 2 << 20 and _huge_bytes_at(value_address(later)) >= 2 << 20
    finally:
        _native._set_alloc_mode(old_mode)
        _native.set_buffer_cache(limit)
