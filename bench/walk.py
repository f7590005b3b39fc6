"""Benchmark: the batch walker and the pure record decoder against an earlier revision.

    .venv/bin/python bench/walk.py [--base REV] [--records N] [--repeat R]

An earlier change put every walk over batch framing behind ``segment.iter_batches`` and
both pure record decoders behind ``record_batch.decode_records``. This times,
in this one process, the code of this tree against the code of git revision
REV (default ``HEAD~1``; extracted with ``git archive`` into a temporary
package ``kafkastore_base``, the built C extension copied next to it), on one
segment of N records (16-byte keys, 100-byte values, every tenth record with a
header, 500 records a batch; and 5 a batch for the scans):

* the pure Arrow decoder (``decode_to_arrow_pure``), CRC unchecked, with and
  without headers (the pure CRC-32C fallback would hide the decoder);
* ``decode_batch`` of every batch (records as Python objects);
* ``recover`` (the import path: scan, CRCs by the C library) and ``scan_log``
  without CRCs (the walk alone).

Times are CPU time of this thread (``time.thread_time``), best of R runs,
alternating the two trees, so other processes on a busy machine disturb them
little. Prints both and the ratio this/base. ``KAFKASTORE_NO_EXTENSIONS=1``
works as everywhere. No assertion on speed.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def extract(rev: str, into: str) -> None:
    """``kafkastore/`` of ``rev`` as package ``kafkastore_base`` under ``into`` (imports are relative)."""
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev, "kafkastore"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=tar, check=True)
    os.rename(os.path.join(into, "kafkastore"), os.path.join(into, "kafkastore_base"))
    # The built kernels, where each tree keeps its format modules (kafkastore/format/ now,
    # the package's top before the format layer moved there).
    base = os.path.join(into, "kafkastore_base")
    for so in glob.glob(os.path.join(ROOT, "kafkastore", "**", "_native*.so"), recursive=True):
        home = os.path.join(base, "format")
        shutil.copy(so, home if os.path.isdir(home) else base)


def _format_module(pkg: str, *names: str):
    """``pkg``'s first format module of ``names`` that exists: under ``format/``, or at the top
    in older trees (the segment walk is ``format/segment_scan`` now, ``segment`` before)."""
    for where in (f"{pkg}.format.", f"{pkg}."):
        for name in names:
            try:
                return importlib.import_module(where + name)
            except ModuleNotFoundError:
                continue
    raise ModuleNotFoundError(f"none of {names} in {pkg}")


def cases(pkg: str, log: bytes, small: bytes) -> dict:
    ad = _format_module(pkg, "arrow_decode")
    seg = _format_module(pkg, "segment_scan", "segment")
    rb = _format_module(pkg, "record_batch")
    positions = [p for p, _ in seg.scan_log(log).batches]
    return {
        "pure decode_to_arrow": lambda: ad.decode_to_arrow_pure(
            log, topic="t", partition=0, verify_crc=False),
        "pure decode_to_arrow, no headers": lambda: ad.decode_to_arrow_pure(
            log, topic="t", partition=0, verify_crc=False, include_headers=False),
        "decode_batch, every batch": lambda: [rb.decode_batch(log, p, verify_crc=False)
                                              for p in positions],
        "recover (500 a batch)": lambda: seg.recover(log, base_offset=0),
        "recover (5 a batch)": lambda: seg.recover(small, base_offset=0),
        "scan_log, no CRC (5 a batch)": lambda: seg.scan_log(small, base_offset=0,
                                                             verify_crc=False),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="HEAD~1", help="git revision to compare with")
    p.add_argument("--records", type=int, default=30_000)
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="kafkastore-walk-")
    try:
        extract(args.base, tmp)
        sys.path.insert(0, tmp)
        from kafkastore.format.record_batch import Record, encode_batch
        n = args.records
        recs = [Record(i, 1_600_000_000_000 + i, b"k%015d" % i, b"v" * 100,
                       (("h", b"x"),) if i % 10 == 0 else ()) for i in range(n)]
        log = b"".join(encode_batch(recs[i:i + 500]) for i in range(0, n, 500))
        small = b"".join(encode_batch(recs[i:i + 5]) for i in range(0, n, 5))
        base, this = cases("kafkastore_base", log, small), cases("kafkastore", log, small)
        if not base["pure decode_to_arrow"]().equals(this["pure decode_to_arrow"]()):
            raise SystemExit("the two trees decode differently")
        print(f"{n:,} records; base {args.base}; CPU ms, best of {args.repeat}")
        print(f"{'case':34s} {'base':>9s} {'this':>9s} {'this/base':>10s}")
        for name in base:
            tb, tt = [], []
            for _ in range(args.repeat):
                for fn, times in ((base[name], tb), (this[name], tt)):
                    t = time.thread_time()
                    fn()
                    times.append(time.thread_time() - t)
            print(f"{name:34s} {min(tb) * 1e3:9.1f} {min(tt) * 1e3:9.1f} {min(tt) / min(tb):10.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
