"""Benchmark: Kafka v2 segment -> records, kafkastore's Arrow decoder vs the Python clients.

    .venv/bin/python bench/decode.py [--records N] [--repeat R]

Builds one segment of N records (default 1,000,000: 16-byte keys, 100-byte
values, no headers, 500 records a batch, create time), once uncompressed and
once zstd, and times in this one process:

* kafkastore.format.arrow_decode, C kernel: one pyarrow.RecordBatch with every
  column of Spark's Kafka schema, CRC-32C of every batch checked (zstd batches
  decompressed in the kernel's walk when the system has libzstd.so.1);
* the same API with the pure-Python decoder (the fallback);
* aiokafka's C record iterator (aiokafka.record._crecords MemoryRecords /
  DefaultRecordBatch), calling validate_crc() on every batch and touching
  key, value, offset, timestamp and headers of every record;
* kafka-python's pure-Python iterator, the same way.

The C kernel and aiokafka's iterator run in turns (ours, aiokafka, ours, ...:
R timed runs each after four warm-ups), so that load from other processes falls
on both alike. Rates are records per second of the best of R runs by wall
clock (median and the very first call, which pays for fresh memory, in
brackets) and the median by the process's CPU time (user + sys: what a run
costs, hardly moved by other processes, unlike its wall time when the
machine is busy); the ratio ours / aiokafka is given both ways, and the load
average next to it. The pure-Python decoders run once. Other processes on
the machine make wall-clock numbers noisy: compare the ratios, and rerun.
``--cold RUNS`` adds the cold rate: the segment decoded once in a fresh
process, per allocation mode of the C kernel and with ``reuse_input``. What
is timed: ``decode_to_arrow`` alone, the first call on this segment in a new
interpreter, whose output memory is fresh (never touched by the process). Not
timed, and reported once: the import of kafkastore (pyarrow, numpy) and a
first decode of a tiny segment (code paths, lazy imports); the file read (the
file was just written, so it is in the page cache: no disk I/O). Rates by
wall clock and by the process's CPU time (user + sys, steadier on a busy
machine), next to the second decode in the same process (warm: the buffer
cache holds the first call's blocks).
The segment building time is not measured. No assertion is made on speed.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafkastore.format import arrow_decode as ad  # noqa: E402
from kafkastore.format.compression import Compression, compress  # noqa: E402
from kafkastore.format.crc import crc32c  # noqa: E402

KEY_SIZE = 16
VALUE_SIZE = 100
PER_BATCH = 500
BASE_TS = 1_700_000_000_000


# ------------------------------------------------------------- the data

def build_segment(n: int, codec: Compression) -> bytes:
    """n records in batches of PER_BATCH, built with aiokafka's C builder
    (uncompressed), then compressed and re-framed with kafkastore's codecs."""
    from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

    value = bytes(range(VALUE_SIZE))
    out = []
    offset = 0
    while offset < n:
        count = min(PER_BATCH, n - offset)
        b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(count):
            o = offset + i
            b.append(i, BASE_TS + o, b"key-%012d" % o, value, [])
        buf = b.build()
        struct.pack_into(">q", buf, 0, offset)  # base offset (outside the CRC)
        if codec != Compression.NONE:
            payload = compress(codec, bytes(buf[61:]))
            buf = bytearray(buf[:61]) + payload
            struct.pack_into(">i", buf, 8, len(buf) - 12)
            struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | int(codec))
            struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
        out.append(bytes(buf))
        offset += count
    return b"".join(out)


# ------------------------------------------------------------- decoders

def ours_native(seg: bytes) -> int:
    return ad.decode_to_arrow_native(seg, topic="bench", partition=0).num_rows


def ours_pure(seg: bytes) -> int:
    return ad.decode_to_arrow_pure(seg, topic="bench", partition=0).num_rows


def aiokafka_c(seg: bytes) -> int:
    from aiokafka.record._crecords.memory_records import MemoryRecords

    records = MemoryRecords(seg)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise RuntimeError("CRC mismatch")
        for r in batch:
            r.key, r.value, r.offset, r.timestamp, r.headers  # noqa: B018 - touch every field
            n += 1
    return n


def kafka_python(seg: bytes) -> int:
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(seg)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise RuntimeError("CRC mismatch")
        for r in batch:
            r.key, r.value, r.offset, r.timestamp, r.headers  # noqa: B018
            n += 1
    return n


#: Warm-ups per fast decoder before the timed runs. A process's one-off costs are paid in
#: its first few decodes: fresh memory on the first, and the C kernel's collapse of its
#: reused buffer blocks into huge pages once it has reused 16 large blocks (about the
#: third decode of a 1M-record segment; 30-270 ms of system time, once). The warm figure
#: is the steady state after them; the first call is printed beside it.
WARM_UPS = 4


def measure_in_turns(fns, seg: bytes, n: int, repeat: int) -> dict:
    """{fn: (best wall, median wall, first call, median CPU)} records/s, the decoders run in
    turns (WARM_UPS warm-ups each, the first one timed, then ``repeat`` rounds of one timed
    run each)."""
    first, walls, cpus = {}, {fn: [] for fn in fns}, {fn: [] for fn in fns}
    for fn in fns:
        for i in range(WARM_UPS):
            gc.collect()
            t = time.perf_counter()
            if fn(seg) != n:
                raise RuntimeError(f"{fn.__name__} decoded the wrong number of records")
            if i == 0:
                first[fn] = n / (time.perf_counter() - t)
    for _ in range(repeat):
        for fn in fns:
            gc.collect()
            c, t = time.process_time(), time.perf_counter()
            got = fn(seg)
            dt, dc = time.perf_counter() - t, time.process_time() - c
            if got != n:
                raise RuntimeError(f"{fn.__name__} decoded {got} of {n} records")
            walls[fn].append(n / dt)
            cpus[fn].append(n / max(dc, 1e-9))
    return {fn: (max(walls[fn]), statistics.median(walls[fn]), first[fn],
                 statistics.median(cpus[fn])) for fn in fns}


def measure(fn, seg: bytes, n: int, repeat: int, warm_up: bool) -> tuple[float, float, float]:
    """(best, median, first) records/s over `repeat` runs (after a warm-up run if asked)."""
    first = None
    if warm_up:
        gc.collect()
        t = time.perf_counter()
        if fn(seg) != n:
            raise RuntimeError(f"{fn.__name__} decoded the wrong number of records")
        first = n / (time.perf_counter() - t)
    rates = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        got = fn(seg)
        dt = time.perf_counter() - t
        if got != n:
            raise RuntimeError(f"{fn.__name__} decoded {got} of {n} records")
        rates.append(n / dt)
    return max(rates), statistics.median(rates), rates[0] if first is None else first


def fmt_rate(rate: float) -> str:
    return f"{rate / 1e6:7.2f} M rec/s"


_COLD_CHILD = r"""
import os, resource, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[4])
from kafkastore.format import arrow_decode as ad, _native
t_import = time.perf_counter() - t0
mode, reuse = int(sys.argv[2]), sys.argv[3] == "1"
if mode >= 0:
    _native._set_alloc_mode(mode)
tiny = open(sys.argv[1] + ".tiny", "rb").read()
t0 = time.perf_counter()
ad.decode_to_arrow(tiny, topic="t", partition=0)    # code paths and lazy imports, not memory
t_first = time.perf_counter() - t0
def load():
    if not reuse:
        return open(sys.argv[1], "rb").read()
    data = bytearray(os.path.getsize(sys.argv[1]))
    with open(sys.argv[1], "rb") as f:
        f.readinto(data)
    return data
def timed(data):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w = time.perf_counter()
    n = ad.decode_to_arrow(data, topic="t", partition=0, reuse_input=reuse).num_rows
    w = time.perf_counter() - w
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return (n / w, n / (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime),
            r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt)
cold = timed(load())
warm = timed(load())
print(*cold, *warm, t_import, t_first)
"""

#: (allocation mode, reuse_input, label) per cold figure.
COLD_MODES = (
    (4, False, "auto (default)"),
    (2, False, "populate, 4 KiB pages"),
    (0, False, "fault page by page"),
    (1, False, "transparent huge pages"),
    (4, True, "auto + reuse_input=True"),
)


def cold_runs(seg: bytes, small: bytes, runs: int) -> None:
    """The first decode of a segment in fresh processes, per allocation mode of the kernel.

    Each run is a new interpreter: import kafkastore (pyarrow, numpy), decode a tiny
    segment once (code paths, lazy imports), read the segment file (in the page cache:
    it was just written) into bytes (or, for reuse_input, a bytearray), then time
    decode_to_arrow alone, the first decode of fresh memory; then read it again and time
    a second decode (the warm figure: the buffer cache has the first call's blocks).
    """
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "seg.log")
        with open(path, "wb") as f:
            f.write(seg)
        with open(path + ".tiny", "wb") as f:
            f.write(small)
        once = []
        for mode, reuse, name in COLD_MODES:
            rates = []
            for _ in range(runs):
                out = subprocess.run([sys.executable, "-c", _COLD_CHILD, path, str(mode),
                                      "1" if reuse else "0", os.path.dirname(HERE)],
                                     capture_output=True, text=True, check=True).stdout.split()
                rates.append([float(x) for x in out])
            med = [statistics.median(r[i] for r in rates) for i in range(12)]
            once.append(med[10:])
            print(f"  cold, {name:<25} {fmt_rate(med[0])} wall, {med[1] / 1e6:5.1f}M by CPU "
                  f"(user {med[2] * 1e3:.0f} ms, sys {med[3] * 1e3:.0f} ms, "
                  f"{med[4]:.0f} faults);  warm {med[5] / 1e6:.1f}M wall, "
                  f"{med[6] / 1e6:.1f}M by CPU; median of {runs}")
        print(f"  once per process, not timed above: import kafkastore.format.arrow_decode "
              f"{statistics.median(o[0] for o in once) * 1e3:.0f} ms, first (tiny) decode "
              f"{statistics.median(o[1] for o in once) * 1e3:.0f} ms")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5, help="timed runs per fast decoder")
    p.add_argument("--slow-repeat", type=int, default=1,
                   help="timed runs for the pure-Python decoders")
    p.add_argument("--cold", type=int, default=3, metavar="RUNS",
                   help="fresh processes per allocation mode for the cold figure (0: skip)")
    args = p.parse_args(argv)
    n = args.records

    native = ad.NATIVE_AVAILABLE
    print(f"kafkastore decode benchmark: {n:,} records, {KEY_SIZE} B keys, {VALUE_SIZE} B values, "
          f"no headers, {PER_BATCH} records/batch, CRC checked by every decoder")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs; "
          f"C kernel {'built' if native else 'NOT built'}"
          + (f", SSE4.2 CRC {'yes' if ad._native.HAVE_SSE42 else 'no'}, zstd decompressed in "
             f"the C walk (libzstd) {'yes' if getattr(ad._native, 'HAVE_ZSTD', 0) else 'no'}"
             if native else ""))
    if not native:
        print("build it with: .venv/bin/python setup.py build_ext --inplace")

    # One-time costs (lazy imports: pyarrow pulls in pandas on its first
    # pa.array() call) are paid here, on a small segment, not in the timings.
    for codec in (Compression.NONE, Compression.ZSTD):
        small = build_segment(min(n, 2000), codec)
        for fn in ([ours_native] if native else []) + [aiokafka_c, kafka_python, ours_pure]:
            fn(small)

    for codec in (Compression.NONE, Compression.ZSTD):
        t = time.perf_counter()
        seg = build_segment(n, codec)
        print()
        print(f"== {codec.kafka_name}: segment {len(seg) / 1e6:.1f} MB "
              f"(built in {time.perf_counter() - t:.1f} s)")
        results, by_cpu = {}, {}
        fast = ([("kafkastore Arrow, C kernel", ours_native)] if native else []) + [
            ("aiokafka C iterator", aiokafka_c)]
        load = os.getloadavg()[0]
        turns = measure_in_turns([fn for _, fn in fast], seg, n, args.repeat)
        for name, fn in fast:
            best, median, first, cpu = turns[fn]
            results[fn], by_cpu[fn] = best, cpu
            print(f"  {name:<33} {fmt_rate(best)}   (median {median / 1e6:.2f}, first call "
                  f"{first / 1e6:.2f}; by CPU time {cpu / 1e6:.2f}; {args.repeat} runs in turns)")
        runs = [
            ("kafka-python pure iterator", kafka_python, args.slow_repeat),
            ("kafkastore Arrow, pure fallback", ours_pure, args.slow_repeat),
        ]
        for name, fn, repeat in runs:
            best, median, first = measure(fn, seg, n, repeat, warm_up=repeat > 1)
            results[fn] = best
            print(f"  {name:<33} {fmt_rate(best)}   (median {median / 1e6:.2f}, first call "
                  f"{first / 1e6:.2f}; {repeat} run{'s' if repeat > 1 else ''})")
        if native and args.cold:
            cold_runs(seg, build_segment(min(n, 2000), codec), args.cold)
        ours = results.get(ours_native, results[ours_pure])
        label = "C kernel" if native else "pure fallback"
        print(f"  ratio ours ({label}) / aiokafka C:     {ours / results[aiokafka_c]:6.2f}x  "
              f"(best wall; by median CPU time "
              f"{by_cpu.get(ours_native, float('nan')) / by_cpu[aiokafka_c]:.2f}x; "
              f"1-min load {load:.1f} on {os.cpu_count()} CPUs)")
        print(f"  ratio ours ({label}) / kafka-python:   {ours / results[kafka_python]:6.2f}x")
        print(f"  ratio pure fallback / aiokafka C:        "
              f"{results[ours_pure] / results[aiokafka_c]:6.2f}x")
        del seg
    return 0


if __name__ == "__main__":
    sys.exit(main())
