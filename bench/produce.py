"""Benchmark: producing through kafkastore's log writer
(:class:`kafkastore.write.log_writer.LogWriter`) to file:// and to S3 (moto).

    .venv/bin/python bench/produce.py [--records N] [--partitions P] [--profile]

N records (default 1,000,000) with 16-byte random keys and 100-byte random
values (incompressible, no compression, create time, no headers) go through
``LogWriter.send`` (one call per record), ``LogWriter.send_many`` (lists in one
call: converted to Arrow buffers in one C pass, then as send_arrow) and
``LogWriter.send_arrow`` (an Arrow table; checks, murmur2 and batching
vectorised, all the batches of a partition encoded by one C call into one
buffer, the partitions on threads side by side, segments indexed vectorised
and uploaded from that buffer), with a flush (segment upload + manifest
commit per partition, the partitions side by side) every ``--flush-every``
records, to:

* a ``file://`` root in a temporary directory (the writes are fsync'ed);
* an ``s3://`` root on moto's S3 server, started here on 127.0.0.1
  (``ThreadedMotoServer``; loopback HTTP, in-memory objects).

Also reported: the fixed cost of one commit on ``file://`` (a one-record
flush: three segment objects and a manifest version, their fsyncs), and what
the run's commits cost at that price as a share of the ceiling: a floor no
encoder speed removes (flush more records at a time to amortise it).

Each mode runs ``--repeat`` times (default 3) and the fastest run is reported,
as the ceiling is the fastest of 3 writes. Reported: records/s and MB/s of
``.log`` bytes written (wall clock; in brackets the rate by the CPU time of
this process, which is steadier on a busy machine; for S3 it includes the moto
server threads), next to the ceiling: the same number of bytes written to one
local file by one sequential write + fsync, as a ratio. ``--cli`` adds
``kafkastore produce`` of an N-line JSON file (console script in a subprocess,
minus the time of producing a one-line file: interpreter start and imports)
against the rate at which ``pyarrow.json.read_json`` alone parses the file in a
fresh process too (minus its import: the same conditions as the CLI's; the
warm rate of repeated parses in this process is printed beside it), with the
peak RSS of the produce process (sampled; the input is read in bounded
chunks). The CLI runs first, while the benchmark process is still small.
``--profile`` adds a cProfile of the broker's hot path (send,
seal, encode) over 200,000 records.

Other processes on the machine make the numbers noisy (the load average is
printed): compare ratios and rerun. Data generation is not timed. No
assertion is made on speed.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pyarrow as pa  # noqa: E402

from kafkastore.write.log_writer import LogWriter as Broker  # noqa: E402
from kafkastore.manifest import ManifestStore  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402

KEY_SIZE = 16
VALUE_SIZE = 100
TOPIC = "bench"
TS = 1_700_000_000_000
MODES = ("send", "send_many", "send_arrow")


def make_data(n: int, seed: int = 0) -> tuple[list[bytes], list[bytes]]:
    rnd = random.Random(seed)
    blob = rnd.randbytes(n * (KEY_SIZE + VALUE_SIZE))
    keys, values = [], []
    pos = 0
    for _ in range(n):
        keys.append(blob[pos:pos + KEY_SIZE])
        values.append(blob[pos + KEY_SIZE:pos + KEY_SIZE + VALUE_SIZE])
        pos += KEY_SIZE + VALUE_SIZE
    return keys, values


def log_bytes(storage: Storage, partitions: int) -> tuple[int, int, int]:
    """(total .log bytes, records, segments) that the manifests list."""
    size = records = segments = 0
    for p in range(partitions):
        m = ManifestStore(storage, TOPIC, p).latest()
        if m is not None:
            size += m.size
            records += m.high_watermark
            segments += len(m.segments)
    return size, records, segments


def produce(url: str, keys, values, *, partitions: int, flush_every: int, mode: str,
            storage_options=None, table=None) -> dict:
    storage = Storage(url, storage_options)
    create_topic(storage, TOPIC, partitions)
    broker = Broker(storage)
    broker.topic(TOPIC)
    n = len(values)
    # The input of each flush, made before the clock starts (as the data is): list
    # slices for send_many, zero-copy table slices for send_arrow.
    chunks = [(start, min(n, start + flush_every)) for start in range(0, n, flush_every)]
    if mode == "send_many":
        inputs = [(values[a:b], keys[a:b], [TS] * (b - a)) for a, b in chunks]
    elif mode == "send_arrow":
        inputs = [table.slice(a, b - a) for a, b in chunks]
    else:
        inputs = chunks
    wall, cpu = time.perf_counter(), time.process_time()
    for chunk in inputs:
        if mode == "send_arrow":
            broker.send_arrow(TOPIC, chunk)
        elif mode == "send_many":
            broker.send_many(TOPIC, chunk[0], chunk[1], timestamps=chunk[2])
        else:
            send = broker.send
            for i in range(*chunk):
                send(TOPIC, values[i], keys[i], (), TS)
        broker.flush()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    size, records, segments = log_bytes(storage, partitions)
    assert records == n, (records, n)
    commits = partitions * -(-n // flush_every)
    return {"wall": wall, "cpu": cpu, "bytes": size, "segments": segments, "commits": commits}


def ceiling(nbytes: int, directory: str) -> float:
    """Seconds to write ``nbytes`` to one new local file: one write call, then fsync."""
    data = os.urandom(min(nbytes, 1 << 26)) * (nbytes // (1 << 26) + 1)
    data = memoryview(data)[:nbytes]
    path = os.path.join(directory, "ceiling.bin")
    best = None
    for _ in range(3):
        t = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = data
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        elapsed = time.perf_counter() - t
        best = elapsed if best is None else min(best, elapsed)
        os.unlink(path)
    return best


def commit_cost(directory: str, rounds: int = 20) -> float:
    """Median seconds of one commit of one record on ``file://`` (fixed cost per commit)."""
    storage = Storage(f"file://{directory}/root-commit-cost")
    create_topic(storage, TOPIC, 1)
    broker = Broker(storage)
    one = pa.table({"value": pa.array([b"x" * VALUE_SIZE], pa.binary())})
    times = []
    for _ in range(rounds):
        broker.send_arrow(TOPIC, one, partition=0)
        t = time.perf_counter()
        broker.flush()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def start_moto(bucket: str = "bench", *, own_process: bool = False):
    """moto's S3 server on loopback with ``bucket`` created, the AWS environment pointed at
    it (also used by bench/soak.py and bench/soak_serve.py); returns the server (``stop()``).

    ``own_process`` runs it as ``python -m moto.server`` in a child process, so its request
    handling does not share this process's GIL with the code measured (the soaks: a writer,
    its background merging and gc, and moto would otherwise take turns on one interpreter).
    Either way moto decides conditional PUTs atomically, as S3 does (tests/helpers/atomic_moto,
    the same S3 as the tests' and the fault harness's)."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    if own_process:
        server = _MotoProcess()
        endpoint = server.endpoint
    else:
        from moto.server import ThreadedMotoServer

        from tests.helpers.atomic_moto import make_conditional_puts_atomic

        make_conditional_puts_atomic()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    os.environ.update({
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint,
    })
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return server


class _MotoProcess:
    """``python -m tests.helpers.atomic_moto`` (moto's server with atomic conditional PUTs)
    on a free loopback port, ready when constructed."""

    def __init__(self):
        import socket
        import subprocess

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        repo = os.path.dirname(HERE)   # tests.helpers.atomic_moto, wherever the bench runs from
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (repo, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.atomic_moto",
                                      "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"moto's server did not start on {self.endpoint}")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except Exception:  # noqa: BLE001 - a bench's teardown
            self.proc.kill()


def report(name: str, n: int, r: dict, ceiling_s: float) -> None:
    mb = r["bytes"] / 1e6
    rate = mb / r["wall"]
    ceil_rate = mb / ceiling_s
    print(f"  {name:<28} {n / r['wall']:>11,.0f} rec/s {rate:>8.1f} MB/s  "
          f"(cpu {n / r['cpu']:>9,.0f} rec/s)  {r['segments']:>3} segments  "
          f"ratio to ceiling {rate / ceil_rate:6.3f}")


def profile_hot_path(keys, values, tmp: str) -> None:
    n = min(len(values), 200_000)
    storage = Storage(f"file://{tmp}/profile")
    create_topic(storage, TOPIC, 4)
    broker = Broker(storage)
    broker.topic(TOPIC)
    prof = cProfile.Profile()
    prof.enable()
    send = broker.send
    for i in range(n):
        send(TOPIC, values[i], keys[i], (), TS)
    broker.flush()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    print(f"\ncProfile of send + seal + encode + flush, {n:,} records (tottime order):")
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    print("\n".join(lines[start:start + 14]))


def run_child(cmd: list[str], stdin_path: str, env: dict) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``cmd`` reading ``stdin_path``. The RSS is sampled
    every 10 ms once the child runs ``cmd`` (before its exec it is a copy of this big
    process, which getrusage would report)."""
    import subprocess

    import psutil

    with open(stdin_path, "rb") as f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=f, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env)
        ps, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            try:
                if "produce" in ps.cmdline():
                    peak = max(peak, ps.memory_info().rss)
            except psutil.Error:
                pass
            try:
                proc.wait(0.01)
            except subprocess.TimeoutExpired:
                pass
        wall = time.perf_counter() - t
        err = proc.stderr.read()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.decode(errors='replace')}")
    return wall, peak / 2**20


def cli_produce_bench(n: int, tmp: str, partitions: int, repeat: int) -> None:
    """``kafkastore produce`` of an n-line JSON file against pyarrow parsing that file."""
    import json

    import pyarrow.json as pj

    path = os.path.join(tmp, "records.jsonl")
    rnd = random.Random(1)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"key": "%016x" % rnd.getrandbits(64),
                                "value": "%0100x" % rnd.getrandbits(400), "timestamp": TS}))
            f.write("\n")
    size = os.path.getsize(path)
    parse_s = None
    for _ in range(repeat):
        t = time.perf_counter()
        parsed = pj.read_json(path)
        parse_s = min(parse_s or 1e9, time.perf_counter() - t)
        assert parsed.num_rows == n
        del parsed
    root = f"file://{tmp}/root-cli"
    create_topic(Storage(root), TOPIC, partitions)
    create_topic(Storage(root), "one", 1)
    script = os.path.join(os.path.dirname(sys.executable), "kafkastore")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    one = os.path.join(tmp, "one.jsonl")
    with open(one, "w") as f:
        f.write('{"value": "x"}\n')
    # pyarrow alone in a fresh process too (as the CLI runs): its import subtracted
    py = sys.executable
    bare = min(run_child([py, "-c", "import pyarrow.json"], one, env)[0] for _ in range(repeat))
    fresh = min(run_child([py, "-c", "import sys, pyarrow.json as j; j.read_json(sys.argv[1])",
                           path], one, env)[0] for _ in range(repeat)) - bare
    for flush in (None, 100_000):
        extra = ["--flush-every", str(flush)] if flush else []
        # fixed cost (interpreter, imports): produce of a one-line file, subtracted
        startup = min(run_child([script, "--root", root, "produce", "one"], one, env)[0]
                      for _ in range(repeat))
        wall, rss = min(run_child([script, "--root", root, "produce", TOPIC] + extra, path, env)
                        for _ in range(repeat))
        work = max(wall - startup, 1e-9)
        print(f"  CLI produce {'--flush-every ' + str(flush) if flush else '(atomic)':<22} "
              f"{n / work:>11,.0f} lines/s (wall {wall:.2f} s minus {startup:.2f} s for a 1-line file), "
              f"ratio to pyarrow parse {fresh / work:5.2f} (in a fresh process; {parse_s / work:4.2f} "
              f"to this process's warm parse), peak RSS {rss:,.0f} MB")
    print(f"  pyarrow.json.read_json alone: {n / fresh:,.0f} lines/s in a fresh process (minus "
          f"{bare:.2f} s for its import), {n / parse_s:,.0f} lines/s warm in this process "
          f"({size / 1e6 / parse_s:,.0f} MB/s, file {size / 1e6:.0f} MB)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--flush-every", type=int, default=100_000,
                    help="records between flushes (one commit per partition each)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each mode; the fastest is reported (the ceiling is the "
                         "fastest of 3 too)")
    ap.add_argument("--no-s3", action="store_true", help="skip the moto S3 runs")
    ap.add_argument("--profile", action="store_true", help="also profile the hot path")
    ap.add_argument("--cli", action="store_true",
                    help="also time `kafkastore produce` of an N-line file against pyarrow "
                         "parsing the same file")
    args = ap.parse_args(argv)
    n = args.records

    print(f"kafkastore produce benchmark: {n:,} records, {KEY_SIZE}-byte keys, "
          f"{VALUE_SIZE}-byte values, {args.partitions} partitions, flush every "
          f"{args.flush_every:,}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.cli:
        # First, while this process is small (a child starts as a copy of it).
        print(f"CLI produce of a JSON-lines file (subprocess, console script; the fastest of "
              f"{args.repeat}):")
        tmp = tempfile.mkdtemp(prefix="kafkastore-bench-")
        try:
            cli_produce_bench(n, tmp, args.partitions, args.repeat)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print()
    t = time.perf_counter()
    keys, values = make_data(n)
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                      "timestamp": pa.array([TS] * n, pa.int64())})
    print(f"(data generated in {time.perf_counter() - t:.1f} s, not timed)\n")

    tmp = tempfile.mkdtemp(prefix="kafkastore-bench-")
    results = []
    try:
        for mode in MODES:
            runs = []
            for i in range(args.repeat):
                url = f"file://{tmp}/root-{mode}-{i}"
                runs.append(produce(url, keys, values, partitions=args.partitions,
                                    flush_every=args.flush_every, mode=mode, table=table))
                shutil.rmtree(url[len("file://"):], ignore_errors=True)
            results.append((f"file://  {mode}", min(runs, key=lambda r: r["wall"])))
        if not args.no_s3:
            server = start_moto()
            try:
                for mode in MODES:
                    runs = [produce(f"s3://bench/root-{mode}-{i}", keys, values,
                                    partitions=args.partitions, flush_every=args.flush_every,
                                    mode=mode, table=table) for i in range(args.repeat)]
                    results.append((f"s3 (moto) {mode}", min(runs, key=lambda r: r["wall"])))
            finally:
                server.stop()
        nbytes = results[0][1]["bytes"]
        ceiling_s = ceiling(nbytes, tmp)
        print(f"ceiling: {nbytes / 1e6:.1f} MB (the .log bytes written) in one sequential "
              f"write + fsync: {nbytes / 1e6 / ceiling_s:,.0f} MB/s ({ceiling_s:.3f} s)\n")
        print(f"through the log writer (the fastest of {args.repeat} runs by wall clock; CPU of "
              f"this process in brackets):")
        for name, r in results:
            report(name, n, r, ceiling_s)
        fixed = commit_cost(tmp)
        commits = results[0][1]["commits"]
        print(f"fixed cost of one commit (one record, file://): {fixed * 1000:.1f} ms; the "
              f"{commits} commits of a run at that price: {commits * fixed * 1000:.0f} ms = "
              f"{commits * fixed / ceiling_s:.2f} x the ceiling's time")
        if args.profile:
            profile_hot_path(keys, values, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
