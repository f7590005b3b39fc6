"""Soak: does a partition's cost stay flat as its history grows? (library part)

    .venv/bin/python bench/soak.py [--commits N] [--records-per-commit R] [--s3 [--s3-commits M]]

One partition, N small commits (default 100,000) through
:class:`kafkastore.write.log_writer.LogWriter` (``send`` R records, ``flush``: one segment
and one manifest version each) on a ``file://`` root in a temporary
directory; with ``--s3`` also M commits (default 10,000) on moto's S3 server
started here on 127.0.0.1 in its own process (``python -m tests.helpers.atomic_moto``: moto
with S3's atomic conditional PUTs; with ``--moto-in-process`` a ``ThreadedMotoServer`` in
this one, made atomic the same way, as tests/conftest.py does).

Printed for the first 10% and the last 10% of the commits, and the ratio
last/first (flat history means ratios near 1):

* time per commit (send + flush, wall clock), the writer thread's CPU time per
  commit (``time.thread_time``: far less sensitive to other processes on the
  machine than wall time; background merging and gc threads are not in it; its user-mode
  part, without the kernel's fsyncs, is steadier still), and bytes written and requests per commit
  (requests of every thread, by kind, so background merging and gc count; and the
  writer thread's own);
* reading the head cold (as a new process would: this process's remembered
  manifest heads are dropped first): requests and bytes of
  ``ManifestStore.latest()``;
* consume from the start: :meth:`PartitionReader.read` of the first 1000 records
  (a new reader: topic metadata, head, indexes, segments);
* load planning: :meth:`PartitionReader.plan` of the whole partition into
  128 MB splits (what a load's driver does per partition): time, and the requests and
  bytes it read (topic metadata, the warm head, no index of a whole segment);
* the manifest versions listed in the partition's ``_manifest/`` (what gc and expiry
  list), at every twentieth of the commits: with housekeeping on it must stay flat
  (expiry keeping pace), not grow with the history.

The point-in-time figures (head, consume, planning) are taken once right
after the first 10% of commits and once at the end. Requests and bytes are
counted by wrapping the store's fsspec filesystem (bench/counting_fs.py);
on file:// that makes each object its own write (no ``writev`` batching), the
same for every commit. Other processes on the machine make times noisy:
compare ratios, and rerun. No assertion is made on speed.
"""
from __future__ import annotations

import argparse
import inspect
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from counting_fs import CountingFS  # noqa: E402
from produce import start_moto  # noqa: E402
from short_gc_broker import shorten_gc  # noqa: E402

from kafkastore.write.log_writer import LogWriter as Broker  # noqa: E402
from kafkastore.manifest import ManifestStore  # noqa: E402
from kafkastore.read.reader import PartitionReader  # noqa: E402
from kafkastore.clock import skewed  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from kafkastore.topics.admin import create_topic  # noqa: E402

TOPIC = "soak"
SPLIT_BYTES = 128 * 1024 * 1024


class _ReadLog:
    """Within ``with``: every ``cat_file`` of ``fs`` as (path, bytes read)."""

    def __init__(self, fs: CountingFS):
        self.fs = fs
        self.reads: list[tuple[str, int]] = []

    def __enter__(self) -> list[tuple[str, int]]:
        inner = type(self.fs).cat_file

        def logged(path, start=None, end=None, **kwargs):
            try:
                data = inner(self.fs, path, start=start, end=end, **kwargs)
            except FileNotFoundError:
                self.reads.append((path, 0))
                raise
            self.reads.append((path, len(data)))
            return data

        self.fs.cat_file = logged
        return self.reads

    def __exit__(self, *exc) -> None:
        del self.fs.cat_file


def _user_cpu() -> float:
    """This thread's user-mode CPU seconds (Linux), else 0: the kernel's share of thread CPU
    (fsync, file system calls) moves with the machine's load; the Python work does not."""
    if hasattr(resource, "RUSAGE_THREAD"):
        return resource.getrusage(resource.RUSAGE_THREAD).ru_utime
    return 0.0


def probe(storage: Storage, fs: CountingFS) -> dict[str, float]:
    """Point-in-time costs: cold head read, consume-from-start, load planning."""
    out: dict[str, float] = {}
    store = ManifestStore(storage, TOPIC, 0)
    store.forget_cached()
    before = fs.snapshot()
    with _ReadLog(fs) as reads:
        head = store.latest()
    used = fs.snapshot() - before
    out["head_requests"] = used.total_requests
    out["head_kinds"] = {k: v for k, v in sorted(used.requests.items()) if v}
    out["head_bytes"] = used.bytes["read"]
    # What the head read's bytes are: the hint, the checkpoint (a full version: every live
    # segment and producer), and the deltas after it (one per commit since the checkpoint).
    manifests = [(p, n) for p, n in reads if "/_manifest/" in p]
    hint = [n for p, n in manifests if p.endswith("_last_checkpoint.json")]
    versions = [n for p, n in manifests if not p.endswith("_last_checkpoint.json") and n]
    out["head_hint_bytes"] = sum(hint)
    out["head_checkpoint_bytes"] = versions[0] if versions else 0
    out["head_deltas"] = max(0, len(versions) - 1)
    out["head_delta_bytes"] = sum(versions[1:])
    store.forget_cached()
    t = time.perf_counter()
    reader = PartitionReader(storage, TOPIC, 0)
    table = reader.read(reader.log_start_offset, reader.log_start_offset + 1000)
    out["consume_ms"] = (time.perf_counter() - t) * 1000
    if table.num_rows != min(1000, head.high_watermark - head.log_start_offset):
        raise SystemExit(f"consume read {table.num_rows} records")
    t = time.perf_counter()
    before = fs.snapshot()
    reader = PartitionReader(storage, TOPIC, 0)
    splits = reader.plan(reader.log_start_offset, reader.high_watermark, max_bytes=SPLIT_BYTES)
    out["plan_ms"] = (time.perf_counter() - t) * 1000
    used = fs.snapshot() - before   # of every thread: background merges count too
    out["plan_requests"], out["plan_bytes"] = used.total_requests, used.bytes["read"]
    out["splits"] = len(splits)
    out["live_segments"] = len(head.segments)
    out["versions"] = head.version
    return out


def soak(url: str, commits: int, per_commit: int, housekeeping: bool | None,
         gc_ms: int | None = None, segment_bytes: int | None = None,
         clock_skew_ms: int = 0) -> None:
    inner = Storage(url)
    fs = CountingFS(inner.fs)
    # With ``clock_skew_ms`` the writer's process (and so its housekeeper) reads a clock that
    # far off the store's, as a broker with a wrong clock does: gc then deletes no file.
    clock = skewed(clock_skew_ms) if clock_skew_ms else None
    storage = Storage(url, fs=fs, **({"clock": clock} if clock else {}))
    # With ``gc_ms`` gc runs that often with that grace (the topic's file.delete.delay.ms and
    # the store's grace floor), so its deletes -- a steady cost once the first grace has
    # passed -- fall in the first window too. With the defaults (60 s each) the first gc
    # deletes about 120 s in, after the first window, which then compares warm-up with
    # steady state.
    # Merging rewrites each byte once per generation until segments reach segment.bytes, so
    # a partition smaller than segment.bytes pays one more generation every 4x of history
    # (log4 of its size); a smaller ``segment_bytes`` reaches that cap within the soak.
    configs = {"file.delete.delay.ms": gc_ms} if gc_ms else {}
    if segment_bytes:
        configs["segment.bytes"] = segment_bytes
    if gc_ms:
        shorten_gc(gc_ms)  # before the storage's housekeeper is made (by the Broker below)
    create_topic(storage, TOPIC, 1, configs or None)
    kwargs = {}
    if housekeeping is not None and "housekeeping" in inspect.signature(Broker).parameters:
        kwargs["housekeeping"] = housekeeping
    broker = Broker(storage, **kwargs)
    window = max(1, commits // 10)
    times, cpu, user, nbytes, nreq, wreq = [], [], [], [], [], []
    kinds: dict[str, list[int]] = {k: [] for k in ("write", "read", "stat", "list", "delete")}
    me = threading.get_ident()
    probes = {}
    listed: list[int] = []   # stored manifest versions, at every twentieth of the commits
    value = b"v" * 100
    started = time.perf_counter()
    for i in range(commits):
        before, mine = fs.snapshot(), fs.snapshot(me)
        t, c, u = time.perf_counter(), time.thread_time(), _user_cpu()
        for r in range(per_commit):
            broker.send(TOPIC, value, key=b"k%d" % r, partition=0)
        broker.flush()
        times.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
        user.append(_user_cpu() - u)
        used = fs.snapshot() - before
        nbytes.append(used.bytes["write"])
        nreq.append(used.total_requests)
        wreq.append((fs.snapshot(me) - mine).total_requests)
        for k, v in kinds.items():
            v.append(used.requests[k])
        if i + 1 == window:
            probes["first"] = probe(storage, fs)
        if (i + 1) % max(1, commits // 20) == 0:
            # Between two commits' snapshots: this listing is in no commit's counts.
            listed.append(len(ManifestStore(storage, TOPIC, 0).versions()))
            print(f"  {i + 1}/{commits} commits, {time.perf_counter() - started:.0f} s, "
                  f"last {statistics.mean(times[-window:]) * 1000:.1f} ms/commit, "
                  f"{listed[-1]} manifest versions listed", file=sys.stderr)
    probes["last"] = probe(storage, fs)
    close = getattr(broker, "close", None)
    if close is not None:
        close()
    hk = getattr(broker, "housekeeper", None)
    if hk is not None:
        # Stop the background merging and gc before the root is checked and removed: a merge
        # job still reading its inputs while the temporary root is deleted fails with "no
        # object ...log" (what the 40,000-commit runs of the last session printed at exit).
        hk.close(wait=False)
        hk.wait(600)
    head = ManifestStore(storage, TOPIC, 0).latest()
    missing = [s.stem for s in head.segments
               if not storage.exists(s.paths(TOPIC, 0)[".log"])]

    def row(name, first, last, fmt="{:.2f}"):
        ratio = last / first if first else float("nan")
        print(f"  {name:<34} {fmt.format(first):>12} {fmt.format(last):>12} {ratio:>8.2f}")

    first_w, last_w = slice(0, window), slice(commits - window, commits)
    print(f"{url.split('://')[0]}: {commits} commits of {per_commit} records "
          f"(windows of {window} commits; probes after commit {window} and {commits})")
    print(f"  {'':<34} {'first 10%':>12} {'last 10%':>12} {'last/first':>8}")
    row("time per commit (ms)", statistics.mean(times[first_w]) * 1000, statistics.mean(times[last_w]) * 1000)
    row("writer thread CPU per commit (ms)", statistics.mean(cpu[first_w]) * 1000,
        statistics.mean(cpu[last_w]) * 1000)
    row("  of which user (not kernel) CPU", statistics.mean(user[first_w]) * 1000,
        statistics.mean(user[last_w]) * 1000)
    row("bytes written per commit", statistics.mean(nbytes[first_w]), statistics.mean(nbytes[last_w]), "{:.0f}")
    row("requests per commit (all threads)", statistics.mean(nreq[first_w]), statistics.mean(nreq[last_w]))
    for k, v in kinds.items():
        row(f"  of which {k}", statistics.mean(v[first_w]), statistics.mean(v[last_w]))
    row("requests per commit (writer only)", statistics.mean(wreq[first_w]), statistics.mean(wreq[last_w]))
    # Every tenth, not just the first and the last: a step early on that then stays flat is
    # a warm-up (gc's first deletes, the file system's directories filling to their steady
    # size), not growth with history, which would keep rising tenth after tenth.
    tenths = [statistics.mean(times[k * window:(k + 1) * window]) * 1000 for k in range(10)
              if times[k * window:(k + 1) * window]]
    print(f"  {'time per commit by tenth (ms)':<34} " + " ".join(f"{t:.2f}" for t in tenths))
    f, l_ = probes["first"], probes["last"]
    row("head read cold: requests", f["head_requests"], l_["head_requests"], "{:.0f}")
    print(f"  {'head read cold: requests by kind':<34} {f['head_kinds']}  ->  {l_['head_kinds']}")
    row("head read cold: bytes", f["head_bytes"], l_["head_bytes"], "{:.0f}")
    row("  of which checkpoint", f["head_checkpoint_bytes"], l_["head_checkpoint_bytes"], "{:.0f}")
    row("  of which deltas", f["head_delta_bytes"], l_["head_delta_bytes"], "{:.0f}")
    row("  deltas read after the checkpoint", f["head_deltas"], l_["head_deltas"], "{:.0f}")
    row("consume first 1000 records (ms)", f["consume_ms"], l_["consume_ms"])
    row("load planning (ms)", f["plan_ms"], l_["plan_ms"])
    row("load planning: requests", f["plan_requests"], l_["plan_requests"], "{:.0f}")
    row("load planning: bytes read", f["plan_bytes"], l_["plan_bytes"], "{:.0f}")
    row("live segments", f["live_segments"], l_["live_segments"], "{:.0f}")
    row("manifest version", f["versions"], l_["versions"], "{:.0f}")
    # Flat when expiry keeps pace: set by the commit rate and the grace, not the history.
    print(f"  {'manifest versions listed by 20th':<34} " + " ".join(str(n) for n in listed))
    if hk is not None:
        print(f"  housekeeping: {hk.merges} runs merged, {hk.gc_runs} gc runs, "
              f"{len(hk.errors)} errors{': ' + hk.errors[0] if hk.errors else ''}")
    print(f"  live segments whose .log is missing at the end: {len(missing)}"
          f"{' (first ' + missing[0] + ')' if missing else ''}")
    if missing:
        raise SystemExit(f"{len(missing)} live segment(s) lost their .log")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=100_000, help="commits on file:// (default 100000)")
    ap.add_argument("--records-per-commit", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="also soak moto's S3 server")
    ap.add_argument("--s3-commits", type=int, default=10_000, help="commits on S3 (default 10000)")
    ap.add_argument("--moto-in-process", action="store_true",
                    help="run moto's server in this process (as before: it then shares the GIL "
                         "with the writer and its background work) rather than its own")
    ap.add_argument("--no-file", action="store_true", help="skip the file:// soak")
    ap.add_argument("--gc-ms", type=int, default=6000,
                    help="gc interval and grace (file.delete.delay.ms) in ms, short so that gc's "
                         "steady cost is in the first window too (0: the defaults, 60 s each)")
    ap.add_argument("--segment-bytes", type=int, default=None,
                    help="the topic's segment.bytes (default: the topic default, 1 GiB); merging's "
                         "cost per commit stops growing once the partition holds this much")
    hk = ap.add_mutually_exclusive_group()
    hk.add_argument("--housekeeping", dest="housekeeping", action="store_true", default=None,
                    help="the broker merges small segments as it goes (if this version has it)")
    hk.add_argument("--no-housekeeping", dest="housekeeping", action="store_false")
    ap.add_argument("--clock-skew-ms", type=int, default=0,
                    help="the writer's clock this far off the store's (e.g. 80000: gc deletes no "
                         "file then; do old manifest versions still expire?)")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs", file=sys.stderr)
    if not args.no_file:
        tmp = tempfile.mkdtemp(prefix="kafkastore-soak-")
        try:
            soak(f"file://{tmp}/root", args.commits, args.records_per_commit, args.housekeeping,
                 args.gc_ms, args.segment_bytes, args.clock_skew_ms)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.s3:
        server = start_moto("soak", own_process=not args.moto_in_process)
        try:
            soak(f"s3://soak/root-{int(time.time())}", args.s3_commits, args.records_per_commit,
                 args.housekeeping, args.gc_ms, args.segment_bytes, args.clock_skew_ms)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
