"""zstd compression reuses one compressor per thread and level (building one per batch cost
as much as compressing a small batch), and the reused compressor writes exactly the bytes
a fresh one writes."""
from __future__ import annotations

import threading

import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.format.compression import Compression, compress, decompress


def _fresh(data: bytes, level: int) -> bytes:
    obj = zstandard.ZstdCompressor(level=level, write_content_size=False,
                                   write_checksum=False).compressobj()
    return obj.compress(data) + obj.flush()


def _in_new_thread(fn):
    """``fn()`` on a thread of its own (so it starts without any per-thread compressor)."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_a_thread_builds_one_compressor_per_level(monkeypatch):
    built = []
    real = zstandard.ZstdCompressor

    def counting(*args, **kwargs):
        built.append(kwargs.get("level"))
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdCompressor", counting)

    def work():
        for i in range(20):
            compress(Compression.ZSTD, b"record %d " % i * 50)
        for i in range(5):
            compress(Compression.ZSTD, b"other %d " % i * 50, level=7)

    _in_new_thread(work)
    assert sorted(built) == [3, 7]
    _in_new_thread(work)   # another thread builds its own
    assert len(built) == 4


@settings(max_examples=60, deadline=None)
@given(payloads=st.lists(st.tuples(st.binary(max_size=3000), st.sampled_from([1, 3, 9])),
                         min_size=1, max_size=8))
def test_a_reused_compressor_writes_what_a_fresh_one_writes(payloads):
    for data, level in payloads:
        out = compress(Compression.ZSTD, data, level=level)
        assert out == _fresh(data, level)
        assert decompress(Compression.ZSTD, out) == data
