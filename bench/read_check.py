"""Benchmark: the cost of checking a read range against its manifest entry.

    .venv/bin/python bench/read_check.py [--records N] [--per-batch B] [--repeat R]

Builds one segment of N records (16-byte keys, 100-byte values, B records a
batch) and times, in this one process, best of R runs:

* baseline: ``decode_to_arrow`` of the whole segment (CRCs checked), what a
  read cost before the checks;
* checked: :func:`kafkastore.read.reader.check_range` followed by the same decode,
  for the whole object (size and CRC-32C) and for a partial range (header walk:
  offsets, order, index anchors; here the same bytes as a range that does not
  end the object).

Prints both rates and the ratio checked/baseline. No assertion on speed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore.format.arrow_decode import decode_to_arrow  # noqa: E402
from kafkastore.format.crc import crc32c  # noqa: E402
from kafkastore.read.reader import ReadRange, check_range  # noqa: E402
from kafkastore.format.record_batch import Record, encode_batch  # noqa: E402
from kafkastore.format.segment_build import SegmentBuilder  # noqa: E402


def build(n: int, per_batch: int) -> tuple[bytes, int]:
    builder = SegmentBuilder(0)
    for start in range(0, n, per_batch):
        recs = [Record(i, 1_700_000_000_000 + i, b"k%015d" % i, b"v" * 100)
                for i in range(start, min(n, start + per_batch))]
        data = bytearray(encode_batch([Record(r.offset - start, r.timestamp, r.key, r.value)
                                       for r in recs]))
        data[0:8] = start.to_bytes(8, "big")
        builder.append(bytes(data))
    return builder.build().log, n


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--per-batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    log, n = build(a.records, a.per_batch)
    rr = ReadRange("t", 0, "bench.log", 0, 0, len(log), 0, n, segment_next_offset=n,
                   segment_size=len(log), segment_records=n, segment_checksum=crc32c(log))

    def baseline():
        decode_to_arrow(log, topic="t", partition=0, start_offset=0, end_offset=n)

    part = ReadRange("t", 0, "bench.log", 0, 0, len(log), 0, n, segment_next_offset=n,
                     segment_size=len(log) + 1, first_anchor=0, last_anchor=n - 1)

    def checked():
        check_range(rr, log)
        decode_to_arrow(log, topic="t", partition=0, start_offset=0, end_offset=n)

    def walked():
        check_range(part, log)
        decode_to_arrow(log, topic="t", partition=0, start_offset=0, end_offset=n)

    base = chk = walk = float("inf")
    for _ in range(a.repeat):  # interleaved, so all see the same machine load
        base = min(base, best(baseline, 1))
        chk = min(chk, best(checked, 1))
        walk = min(walk, best(walked, 1))
    print(f"{n} records, {a.per_batch} a batch, {len(log)} bytes")
    print(f"baseline decode               {n / base:>14,.0f} records/s")
    print(f"whole-object check + decode   {n / chk:>14,.0f} records/s  ratio {chk / base:.3f}")
    print(f"header walk + decode          {n / walk:>14,.0f} records/s  ratio {walk / base:.3f}")


if __name__ == "__main__":
    main()
