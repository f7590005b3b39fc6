"""Records per second of the old-format conversions (Produce v0-2 up, Fetch v0-3 down).

    .venv/bin/python bench/legacy_convert.py [records] [value_bytes]

One message set / v2 batch of ``records`` records (default 1000, 100-byte values, keyed),
each codec the old format has, magic 0 and 1; each conversion repeated for a second.
"""
from __future__ import annotations

import sys
import time

from kafkastore.format import legacy_records as L
from kafkastore.format.record_batch import Record, encode_batch


def rate(fn, n: int) -> float:
    """Records per second of ``fn`` (converting ``n`` records per call), over about a second."""
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < 1:
        fn()
        calls += 1
    return calls * n / (time.perf_counter() - start)


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 1000
    size = int(argv[1]) if len(argv) > 1 else 100
    recs = [Record(i, 1_700_000_000_000 + i, b"key-%d" % i, b"v" * size) for i in range(n)]
    for codec in ("none", "gzip", "snappy", "lz4"):
        v2 = encode_batch(recs, compression=codec)
        for magic in (0, 1):
            old = L.encode_message_set(recs, magic, compression=codec)
            up = rate(lambda: L.up_convert(old), n)
            down = rate(lambda: L.down_convert(v2, magic, 0), n)
            print(f"{codec:6s} magic {magic}: up-convert {up:10,.0f} records/s   "
                  f"down-convert {down:10,.0f} records/s")


if __name__ == "__main__":
    main(sys.argv[1:])
