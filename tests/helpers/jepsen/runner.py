"""The fault harness's runner, Jepsen-style: a cluster of ``kafkastore serve`` processes over
one root, client workloads, a seeded schedule mixing every fault kind, then a final phase
that reads what the log holds and hands it all to the :mod:`checker`.

* **Cluster** (:class:`Cluster`): 2 or 3 brokers over one root, ``file://`` or ``s3://``.
  On S3 the brokers talk to the store through the :class:`FaultProxy` in front of a moto
  server on loopback (started here, in its own process, unless an endpoint is given); the
  runner itself reads the store directly. A broker may run with a skewed wall clock
  (``KAFKASTORE_CLOCK_SKEW_MS``, the project's clock injection).
* **Faults** (:func:`fault_schedule`): SIGKILL and restart; SIGSTOP/SIGCONT for longer than
  the consumers' session timeout and the producers' transaction timeout; a restart with the
  clock skewed by 60-90 s either way; on S3 also writes the store applied whose response is
  lost (a dropped connection, or a 500/503), 500/503 storms and latency.
* **Workloads**: objects with ``topics`` (``{topic: partitions}``, created here),
  ``start(bootstrap, stop)``, ``join(timeout)`` and ``history()`` (the checker's keys, with
  partitions keyed ``(topic, partition)``). ``tests.helpers.jepsen.workloads.default_workloads``
  supplies them; while that module does not exist, the built-in :class:`QueueWorkload` runs.
* **Final phase**: faults cleared, every broker running; the runner waits past the
  transaction timeout until no partition's last stable offset is behind its high watermark
  (or the wait ends), then reads every workload topic under read_committed and
  read_uncommitted, the LSO and HWM of each partition, and the files the latest manifests
  list that the store does not hold.

Test/bench code: reads the system clock itself.
"""
from __future__ import annotations

import faulthandler
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.helpers.serve_procs import free_port

from .checker import check, count_resent
from .s3_fault_proxy import FaultProxy

#: The checkout these helpers run from (its ``tests`` package starts moto for the runs).
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

#: Client timeouts the workloads use; a pause fault lasts longer than both.
SESSION_TIMEOUT_MS = 6000
TXN_TIMEOUT_MS = 10000
PAUSE_S = (11.0, 16.0)
#: The brokers' heartbeat on S3 roots: a 9 s authority lease, below every pause.
S3_HEARTBEAT_MS = 3000
SKEW_MS = (60_000, 90_000)
BUCKET = "kafkastore-jepsen"

PROCESS_FAULTS = ("sigkill", "sigstop", "skew-restart")
S3_FAULTS = ("s3-lose", "s3-storm", "s3-latency")


# -- the cluster -----------------------------------------------------------------------------
class Moto:
    """moto's S3 server in its own process on 127.0.0.1 (its own interpreter: the runner's
    client threads and the fault proxy do not share a GIL with it)."""

    def __init__(self, logdir: str):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(os.path.join(logdir, "moto.log"), "wb")
        # S3's conditional PUTs are atomic; moto's are not unless told (tests/helpers/atomic_moto).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (_REPO_ROOT, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.atomic_moto",
                                      "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self._log, stderr=self._log, env=env)
        import boto3

        deadline = time.monotonic() + 60
        while True:
            try:
                boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                             aws_secret_access_key="testing",
                             region_name="us-east-1").list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("moto server did not start (see moto.log)") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Terminate the server process."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def _aws_env(endpoint: str) -> dict:
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint}


@dataclass
class Broker:
    """One broker slot: a fixed node id and port, the current process and clock skew."""
    node_id: int
    port: int
    proc: subprocess.Popen | None = None
    skew_ms: int = 0
    starts: int = 0


class Cluster:
    """``n`` serve processes over ``root``. ``kind`` is ``"file"`` or ``"s3"``; on S3 the
    brokers reach the store through a :class:`FaultProxy` (``self.proxy``) in front of
    ``s3_endpoint`` (a moto server started here when None)."""

    def __init__(self, kind: str, n: int, workdir: str, *, s3_endpoint: str | None = None,
                 skewed_start_ms: int = 0, log=print):
        self.kind, self.workdir, self.log = kind, workdir, log
        self.moto = self.proxy = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if kind == "s3":
            if s3_endpoint is None:
                self.moto = Moto(workdir)
                s3_endpoint = self.moto.endpoint
            self.s3_endpoint = s3_endpoint
            import boto3

            s3 = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
            try:
                s3.create_bucket(Bucket=BUCKET)
            except Exception:  # already there (a shared endpoint)
                pass
            self.proxy = FaultProxy(s3_endpoint).start()
            self.env.update(_aws_env(self.proxy.endpoint))
            self.root = f"s3://{BUCKET}/root-{os.path.basename(workdir)}"
        elif kind == "file":
            self.root = f"file://{workdir}/root"
        else:
            raise ValueError(f"root kind {kind!r}: file or s3")
        # On S3 the fault proxy adds up to 3 s to each request for seconds on end: a 3 s
        # lease (the default 1 s heartbeat) lapses at every latency spell and the brokers
        # fence themselves every few seconds (162 times in a 10-minute run), dropping the
        # transactions they coordinate. Kafka's own session is 9 s; pauses still outlast it.
        self.serve_flags = ["--heartbeat-ms", str(S3_HEARTBEAT_MS)] if kind == "s3" else []
        self.brokers = [Broker(i, free_port()) for i in range(n)]
        self.crashes = 0     # broker processes found exited on their own
        if skewed_start_ms:
            self.brokers[-1].skew_ms = skewed_start_ms

    def storage(self):
        """A :class:`Storage` on the root that reaches the store directly (no faults)."""
        from kafkastore.storage import Storage

        if self.kind == "s3":
            return Storage(self.root, {"endpoint_url": self.s3_endpoint, "key": "testing",
                                       "secret": "testing"})
        return Storage(self.root)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def start_all(self) -> None:
        """Start every broker, all at once (a serve process takes seconds to import and
        register on a loaded machine; one after the other made every run that much longer)."""
        errors: list = []

        def one(b: Broker) -> None:
            try:
                self.start(b)
            except Exception as exc:   # noqa: BLE001 - raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(b,), daemon=True) for b in self.brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def start(self, b: Broker, timeout: float = 120.0) -> None:
        """Start ``b``'s process and wait until it serves; a start that fails (the store
        answering 503 to its registration, the port still held) is tried again."""
        deadline = time.monotonic() + timeout
        while True:
            b.starts += 1
            path = os.path.join(self.workdir, f"broker{b.node_id}.{b.starts}.log")
            env = dict(self.env)
            if b.skew_ms:
                env["KAFKASTORE_CLOCK_SKEW_MS"] = str(b.skew_ms)
            with open(path, "wb") as out:
                b.proc = subprocess.Popen(
                    [sys.executable, "-m", "kafkastore.cli", "--root", self.root, "serve",
                     "--listen", f"127.0.0.1:{b.port}", "--node-id", str(b.node_id),
                     *self.serve_flags],
                    stdout=out, stderr=subprocess.STDOUT, env=env)
            while b.proc.poll() is None and time.monotonic() < deadline:
                with open(path, "rb") as f:
                    if b" serving " in f.read():
                        return
                time.sleep(0.1)
            if b.proc.poll() is None:
                b.proc.kill()
                b.proc.wait()
                raise RuntimeError(f"broker {b.node_id} did not serve in {timeout} s ({path})")
            self.log(f"broker {b.node_id} exited at start (status {b.proc.returncode}); again")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {b.node_id} could not start ({path})")
            time.sleep(1.0)

    def kill(self, b: Broker) -> None:
        """SIGKILL ``b`` and reap it (a process that had already exited is a crash)."""
        if b.proc is None:
            return
        if b.proc.poll() is None:
            b.proc.kill()
        elif b.proc.returncode != -signal.SIGKILL:
            self.crashes += 1
            self.log(f"broker {b.node_id} had exited with status {b.proc.returncode}")
        b.proc.wait()

    def restart(self, b: Broker, skew_ms: int = 0) -> None:
        """SIGKILL ``b`` and start it again with clock skew ``skew_ms``."""
        self.kill(b)
        b.skew_ms = skew_ms
        self.start(b)

    def pause(self, b: Broker, seconds: float) -> None:
        """SIGSTOP ``b`` for ``seconds``, then SIGCONT."""
        if b.proc is None or b.proc.poll() is not None:
            return
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)

    def ensure_running(self) -> None:
        """Restart any broker whose process died (a crash is logged, not hidden)."""
        for b in self.brokers:
            if b.proc is None or b.proc.poll() is not None:
                self.kill(b)
                self.start(b)

    def crashed(self) -> int:
        """How many broker processes exited on their own (not killed by the harness)."""
        return self.crashes + sum(1 for b in self.brokers
                                  if b.proc is not None and b.proc.poll() not in (None, -signal.SIGKILL))

    def stop(self) -> None:
        """SIGTERM every broker (SIGKILL after 10 s), the proxy and moto."""
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is None:
                try:
                    os.kill(b.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
                b.proc.terminate()
        for b in self.brokers:
            if b.proc is not None:
                try:
                    b.proc.wait(10)
                except subprocess.TimeoutExpired:
                    b.proc.kill()
                    b.proc.wait()
        if self.proxy is not None:
            self.proxy.stop()
        if self.moto is not None:
            self.moto.stop()


# -- the fault schedule ----------------------------------------------------------------------
@dataclass
class FaultStep:
    """One step of the schedule: wait ``gap_s``, then inject ``kind`` (``params``).
    ``first``: part of the first pass through every kind (injected even past the run's end)."""
    gap_s: float
    kind: str
    params: dict = field(default_factory=dict)
    first: bool = False


def fault_kinds(root_kind: str) -> tuple[str, ...]:
    """Every fault kind the schedule mixes on a root kind."""
    return PROCESS_FAULTS + (S3_FAULTS if root_kind == "s3" else ())


def fault_schedule(rng: random.Random, root_kind: str, n_brokers: int,
                   gap_s: tuple[float, float] = (2.0, 5.0), pause_s: tuple[float, float] = PAUSE_S):
    """An endless seeded sequence of :class:`FaultStep`. The first steps go once through
    every kind (in a seeded order), and a run injects all of them even if that takes longer
    than asked, so every run, however short, has every kind."""
    kinds = list(fault_kinds(root_kind))
    first = kinds[:]
    rng.shuffle(first)
    while True:
        in_first = bool(first)
        kind = first.pop(0) if first else rng.choice(kinds)
        victim = rng.randrange(n_brokers)
        params: dict = {"victim": victim}
        if kind == "sigstop":
            params["seconds"] = round(rng.uniform(*pause_s), 1)
        elif kind == "skew-restart":
            params["skew_ms"] = rng.choice((-1, 1)) * rng.randrange(*SKEW_MS)
        elif kind == "s3-lose":
            # The write lands; its answer is lost (dropped connection) or a 5xx.
            params.update(how=rng.choice(("lose", "fail")), status=rng.choice((500, 503)),
                          duration_s=round(rng.uniform(2, 6), 1), methods=("PUT",),
                          path_part=rng.choice(("/_manifest/", "", "__transaction_state",
                                                "__consumer_offsets")))
        elif kind == "s3-storm":
            params.update(duration_s=round(rng.uniform(3, 12), 1), status=rng.choice((500, 503)),
                          methods=rng.choice(((), ("PUT",), ("GET", "HEAD"))))
        elif kind == "s3-latency":
            params.update(duration_s=round(rng.uniform(5, 15), 1),
                          delay_s=round(rng.uniform(0.3, 3.0), 2))
        yield FaultStep(round(rng.uniform(*gap_s), 2), kind, params, in_first)


def inject(cluster: Cluster, step: FaultStep) -> None:
    """Apply one fault step (process faults block while they last; S3 faults are timed)."""
    p = dict(step.params)
    b = cluster.brokers[p.pop("victim")]
    if step.kind == "sigkill":
        cluster.restart(b, skew_ms=0)
    elif step.kind == "sigstop":
        cluster.pause(b, p["seconds"])
    elif step.kind == "skew-restart":
        cluster.restart(b, skew_ms=p["skew_ms"])
    elif step.kind == "s3-lose":
        cluster.proxy.add(p.pop("how"), **p)
    elif step.kind == "s3-storm":
        cluster.proxy.add("storm", **p)
    elif step.kind == "s3-latency":
        cluster.proxy.add("latency", **p)
    else:
        raise ValueError(step.kind)


# -- the built-in workload -------------------------------------------------------------------
class QueueWorkload:
    """A queue: an idempotent and a non-idempotent confluent-kafka producer, and a consumer
    group (read_committed, synchronous commit after each record)."""

    def __init__(self, topic: str = "jepsen-queue", partitions: int = 2, group: str = "jepsen-g"):
        self.topic, self.group = topic, group
        self.topics = {topic: partitions}
        self._lock = threading.Lock()
        self._acked: list = []
        self._polls: list = []
        self._commits: list = []
        self._threads: list[threading.Thread] = []

    def start(self, bootstrap: str, stop: threading.Event) -> None:
        """Start the producer and consumer threads."""
        self._threads = [
            threading.Thread(target=self._produce, args=(bootstrap, True, "idem", stop)),
            threading.Thread(target=self._produce, args=(bootstrap, False, "plain", stop)),
            threading.Thread(target=self._consume, args=(bootstrap, stop))]
        for t in self._threads:
            t.start()

    def join(self, timeout: float) -> None:
        """Wait for the threads (the producers flush what they hold)."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def history(self) -> dict:
        """The checker's keys this workload knows."""
        with self._lock:
            return {"acked": list(self._acked), "polls": list(self._polls),
                    "commits": list(self._commits), "at_least_once": ("plain-",)}

    def _produce(self, bootstrap, idempotent, tag, stop):
        from confluent_kafka import Producer

        parts = self.topics[self.topic]
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent,
                      "acks": "all", "message.timeout.ms": 60000, "linger.ms": 5,
                      "log_level": 2})
        i = 0

        def done(err, msg):
            if err is None:
                with self._lock:
                    self._acked.append(msg.value().decode())

        while not stop.is_set():
            try:
                p.produce(self.topic, f"{tag}-{i}".encode(), partition=i % parts, on_delivery=done)
                i += 1
            except BufferError:
                pass
            p.poll(0.02)
        try:
            p.flush(90)
        except Exception as e:  # a fatal producer error ends this producer; unacked not counted
            print(f"producer {tag}: {e}", flush=True)

    def _consume(self, bootstrap, stop):
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": SESSION_TIMEOUT_MS, "isolation.level": "read_committed",
                      "log_level": 2})

        def on_assign(consumer, parts):
            with self._lock:
                for tp in parts:
                    self._polls.append(("c0", (tp.topic, tp.partition), None))

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_assign)
        pending: dict = {}     # (topic, partition) -> next offset to commit
        last_commit = time.monotonic()
        while not stop.is_set():
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                key = (msg.topic(), msg.partition())
                with self._lock:
                    self._polls.append(("c0", key, msg.offset()))
                pending[key] = msg.offset() + 1
            # A synchronous commit of what was polled, at most every 0.5 s (a commit per
            # record would cap the consumer at the store's commit rate).
            if pending and time.monotonic() - last_commit >= 0.5:
                todo, pending = pending, {}
                last_commit = time.monotonic()
                try:
                    c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in todo.items()],
                             asynchronous=False)
                    with self._lock:
                        self._commits += [(self.group, k, o) for k, o in todo.items()]
                except Exception:  # an unacknowledged commit records nothing
                    pass
        c.close()


def load_workloads(seed: int, root_kind: str = "file") -> list:
    """``workloads.default_workloads(seed)`` when that module provides it, else the queue.
    On S3 roots the transactional clients get Kafka's default 60 s transaction timeout
    (the proxy's latency spells outlast the file:// runs' 10 s)."""
    try:
        from . import workloads
    except ImportError:
        return [QueueWorkload()]
    make = getattr(workloads, "default_workloads", None)
    if make is None:
        return [QueueWorkload()]
    if root_kind == "s3":
        return list(make(seed, txn_timeout_ms=workloads.S3_TXN_TIMEOUT_MS))
    return list(make(seed))


def write_events(path: str, workloads: list) -> int:
    """The workloads' client outcomes, stamped with wall time, one a line in time order
    (``<UTC time> <workload> <kind> <what> <detail>``): to match an outcome with the brokers'
    logs and the coordinator's records. Returns the number of lines."""
    import datetime

    rows = []
    for w in workloads:
        events = getattr(w, "events", None)
        rows += [(t, w.name, kind, what, detail) for t, kind, what, detail in (events() if events else ())]
    rows.sort(key=lambda r: r[0])
    with open(path, "w") as f:
        for t, name, kind, what, detail in rows:
            stamp = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            f.write(f"{stamp} {name} {kind} {what} {detail}".rstrip() + "\n")
    return len(rows)


def merge_histories(histories: list[dict]) -> dict:
    """One history from the workloads' histories (lists concatenated, dicts merged)."""
    out: dict = {"acked": [], "committed_txns": {}, "aborted_txns": {}, "polls": [],
                 "commits": [], "at_least_once": ()}
    for h in histories:
        out["acked"] += list(h.get("acked", ()))
        out["polls"] += list(h.get("polls", ()))
        out["commits"] += list(h.get("commits", ()))
        out["committed_txns"].update(h.get("committed_txns", {}))
        out["aborted_txns"].update(h.get("aborted_txns", {}))
        out["at_least_once"] += tuple(h.get("at_least_once", ()))
    return out


# -- the final phase ---------------------------------------------------------------------------
def _value(v):
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v


def _partitions(topics: dict) -> list[tuple[str, int]]:
    return [(t, p) for t, n in sorted(topics.items()) for p in range(n)]


def offsets(storage, topics: dict) -> tuple[dict, dict]:
    """``(lso, hwm)`` per ``(topic, partition)`` from the latest manifests."""
    from kafkastore.read.reader import PartitionReader

    lso, hwm = {}, {}
    for t, p in _partitions(topics):
        r = PartitionReader(storage, t, p)
        lso[(t, p)], hwm[(t, p)] = r.last_stable_offset, r.high_watermark
    return lso, hwm


def wait_stable(cluster: Cluster, topics: dict, seconds: float, log=print) -> None:
    """Wait up to ``seconds`` until no partition's LSO is behind its HWM (the transaction
    coordinators abort what timed out; nothing is left open after the clients stopped)."""
    deadline = time.monotonic() + seconds
    while True:
        lso, hwm = offsets(cluster.storage(), topics)
        behind = {k: (lso[k], hwm[k]) for k in hwm if lso[k] < hwm[k]}
        if not behind or time.monotonic() > deadline:
            if behind:
                log(f"after {seconds:.0f} s, LSO still behind HWM at {behind}")
            return
        time.sleep(1.0)


def final_read(storage, topics: dict) -> dict:
    """``{isolation: {(topic, partition): [(offset, value)]}}`` for both isolations."""
    from kafkastore.read.reader import EARLIEST, PartitionReader

    out: dict = {}
    for iso in ("read_committed", "read_uncommitted"):
        out[iso] = {}
        for t, p in _partitions(topics):
            tab = PartitionReader(storage, t, p).read(EARLIEST, isolation=iso)
            out[iso][(t, p)] = list(zip(tab.column("offset").to_pylist(),
                                        [_value(v) for v in tab.column("value").to_pylist()]))
    return out


def missing_files(storage, topics: dict) -> list[str]:
    """Segment objects the latest manifest of a workload partition lists and the store
    does not hold."""
    from kafkastore.manifest import ManifestStore

    missing = []
    for t, p in _partitions(topics):
        m = ManifestStore(storage, t, p).latest()
        for seg in (m.segments if m is not None else ()):
            paths = seg.paths(t, p)
            want = [".log"] + ([".index"] if seg.index_size else []) + \
                   ([".timeindex"] if seg.timeindex_size else [])
            missing += [paths[e] for e in want if not storage.exists(paths[e])]
    return missing


def batch_headers_of(storage, topic: str, partition: int, offsets: set[int]) -> dict[int, tuple]:
    """``{offset: (base offset, producer id, epoch, base sequence, records)}``: the batch
    holding each offset of ``offsets`` in the partition's latest manifest (for diagnosing a
    duplicate: one producer sequence written twice, or the same record under two)."""
    from kafkastore.format.record_batch import parse_header
    from kafkastore.manifest import ManifestStore

    out: dict = {}
    m = ManifestStore(storage, topic, partition).latest()
    for seg in (m.segments if m is not None else ()):
        if not any(seg.base_offset <= o < seg.next_offset for o in offsets):
            continue
        data = storage.get(seg.paths(topic, partition)[".log"])
        pos = 0
        while pos + 61 <= len(data):
            h = parse_header(data, pos)
            for o in offsets:
                if h.base_offset <= o <= h.base_offset + h.last_offset_delta:
                    out[o] = (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                              h.record_count)
            pos += h.size
    return out


def duplicate_batches(storage, final_uncommitted: dict, at_least_once, limit: int = 30
                      ) -> tuple[int, int, list[str]]:
    """Values written more than once by producers that promise once (idempotent and
    transactional), split by who wrote the copies: ``(by the broker, by the client, lines)``.

    A broker must append one producer sequence once: two copies under the same producer id
    and epoch (or without a producer id) are the broker's duplicate, an anomaly. Copies each
    under another epoch of the same producer id were sent again by the client after it
    bumped its epoch (KIP-360: librdkafka renumbers what it still holds, records it had sent
    and not heard back about included) -- what Kafka's broker would store too, reported but
    not an anomaly. ``lines`` name the batches of the first ``limit`` values per partition."""
    broker = client = 0
    lines: list[str] = []
    for (t, p), recs in final_uncommitted.items():
        where: dict = {}
        for off, v in recs:
            where.setdefault(v, []).append(off)
        dups = [(v, offs) for v, offs in where.items() if len(offs) > 1
                and not str(v).startswith(tuple(at_least_once))]
        if not dups:
            continue
        headers = batch_headers_of(storage, t, p, {o for _, offs in dups for o in offs})
        for n, (v, offs) in enumerate(dups):
            writers = [headers.get(o) for o in offs]
            epochs = [(h[1], h[2]) for h in writers if h is not None]
            renumbered = (len(epochs) == len(offs) and len({pid for pid, _ in epochs}) == 1
                          and epochs[0][0] >= 0 and len(set(epochs)) == len(epochs))
            client += renumbered
            broker += not renumbered
            if n < limit:
                lines.append(f"{t}/{p} {v} ({'client, epoch bump' if renumbered else 'BROKER'}): "
                             + "; ".join(f"offset {o} in batch (base, pid, epoch, seq, n)={h}"
                                         for o, h in zip(offs, writers)))
    return broker, client, lines


def verify_problems(storage, topics: dict) -> list[str]:
    """``kafkastore verify``'s problems (CRCs, indexes, manifest chain) over the topics."""
    from kafkastore.read.verify import verify_partition

    out = []
    for t, p in _partitions(topics):
        report = verify_partition(storage, t, p)
        if not report.ok:
            out += [line for line in report.lines() if line]
    return out


def open_txns_at_end(storage, topics: dict) -> int:
    """Open transactions left at workload partitions (reported, for diagnosis)."""
    from kafkastore.write.transactions import open_transactions

    return sum(len(open_transactions(storage, t)) for t in topics)


# -- the run -----------------------------------------------------------------------------------
#: After this long in the final phase (and again each time as long) the runner writes every
#: thread's stack to the workdir's stacks.txt: the phase's own bounded waits add up to less.
FINAL_PHASE_STACKS_AFTER_S = 900

@dataclass
class RunOptions:
    """What one run does."""
    root_kind: str = "file"
    seconds: float = 60.0
    seed: int = 1
    brokers: int = 2
    skewed_start_ms: int = 0
    s3_endpoint: str | None = None
    workdir: str | None = None    # keeps broker logs; a temporary one (removed) when None
    fault_gap_s: tuple = (2.0, 5.0)
    pause_s: tuple = PAUSE_S       # SIGSTOP lengths: keep above both client timeouts
    #: Longest wait for every LSO to reach its HWM at the end: a transaction's timeout is
    #: measured on wall clocks, and one begun under a clock 90 s ahead times out that much
    #: later on a correct one (the wait ends as soon as nothing is behind).
    settle_s: float = TXN_TIMEOUT_MS / 1000 + SKEW_MS[1] / 1000 + 20.0
    workloads: list | None = None


def run_cluster(opts: RunOptions, log=print) -> tuple[dict, dict]:
    """One run: start the cluster and workloads, inject faults for ``opts.seconds``, then
    the final phase. Returns (anomaly counts, extra figures for the table)."""
    from kafkastore.topics.admin import create_topic

    own_dir = opts.workdir is None
    workdir = tempfile.mkdtemp(prefix="jepsen-") if own_dir else opts.workdir
    os.makedirs(workdir, exist_ok=True)
    rng = random.Random(opts.seed)
    workloads = opts.workloads if opts.workloads is not None else load_workloads(opts.seed,
                                                                                 opts.root_kind)
    topics: dict = {}
    for w in workloads:
        topics.update(w.topics)
    cluster = Cluster(opts.root_kind, opts.brokers, workdir, s3_endpoint=opts.s3_endpoint,
                      skewed_start_ms=opts.skewed_start_ms, log=log)
    faults: Counter = Counter()
    stop = threading.Event()
    stacks = None
    try:
        storage = cluster.storage()
        for t, n in topics.items():
            create_topic(storage, t, n)
        cluster.start_all()
        log(f"cluster {cluster.root} on {cluster.bootstrap}; workdir {workdir}; "
            f"workloads {[type(w).__name__ for w in workloads]}")
        for w in workloads:
            w.start(cluster.bootstrap, stop)
        end = time.monotonic() + opts.seconds
        for step in fault_schedule(rng, opts.root_kind, opts.brokers, opts.fault_gap_s,
                                   opts.pause_s):
            if not step.first and time.monotonic() + step.gap_s > end - 5:
                break
            time.sleep(step.gap_s)
            log(f"fault {step.kind} {step.params}")
            inject(cluster, step)
            faults[step.kind] += 1
        stop.set()
        if cluster.proxy is not None:
            cluster.proxy.clear()
        # The final phase has bounded waits only; if it still takes longer, every thread's
        # stack goes to stacks.txt in the workdir, every FINAL_PHASE_STACKS_AFTER_S, to say where.
        stacks = open(os.path.join(workdir, "stacks.txt"), "w")
        faulthandler.dump_traceback_later(FINAL_PHASE_STACKS_AFTER_S, repeat=True, file=stacks)
        for w in workloads:
            w.join(150)
        cluster.ensure_running()
        crashed = cluster.crashed()
        settle = max([opts.settle_s] + [getattr(w, "txn_timeout_s", 0) + SKEW_MS[1] / 1000 + 20
                                        for w in workloads])
        wait_stable(cluster, topics, settle, log=log)
        storage = cluster.storage()
        lso, hwm = offsets(storage, topics)
        final = final_read(storage, topics)
        missing = missing_files(storage, topics)
        problems = verify_problems(storage, topics)
        open_left = open_txns_at_end(storage, topics)
        at_least_once = tuple(p for w in workloads for p in w.history().get("at_least_once", ()))
        dup_broker, dup_client, dup_lines = duplicate_batches(storage, final["read_uncommitted"],
                                                              at_least_once)
        if dup_lines:   # the store goes with the run (moto): say where duplicates sit now
            with open(os.path.join(workdir, "duplicates.txt"), "w") as f:
                f.write("\n".join(dup_lines) + "\n")
            log(f"{len(dup_lines)} duplicated values' batches in {workdir}/duplicates.txt")
    finally:
        stop.set()
        cluster.stop()
        faulthandler.cancel_dump_traceback_later()
        if stacks is not None:
            stacks.close()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    for line in problems[:20]:
        log(f"verify: {line}")
    history = merge_histories([w.history() for w in workloads])
    history.update(final_committed=final["read_committed"], final_uncommitted=final["read_uncommitted"],
                   lso=lso, hwm=hwm, open_txns={}, missing_files=missing)
    if not own_dir:   # kept for a re-check offline
        import pickle

        with open(os.path.join(workdir, "history.pickle"), "wb") as f:
            pickle.dump(history, f)
        write_events(os.path.join(workdir, "events.txt"), workloads)
    counts = check(history)
    # the checker counts every value stored twice; the batches say who wrote the copies
    counts["duplicated"] = dup_broker
    for w in workloads:   # anomalies a workload counts itself (the exactly-once pipeline's)
        more = getattr(w, "extra_anomalies", None)
        for k, v in (more(final["read_committed"]) if more is not None else {}).items():
            counts[k] = counts.get(k, 0) + v
    errors: Counter = Counter()
    for w in workloads:
        errs = getattr(w, "errors", None)
        errors.update(errs() if errs is not None else {})
    if errors:
        log(f"client errors (not anomalies): {dict(errors.most_common(15))}")
    extra = {"root": opts.root_kind, "seed": opts.seed, "seconds": opts.seconds,
             "brokers": opts.brokers,
             "records-acked": len(history["acked"]),
             "records-in-log": sum(len(v) for v in final["read_uncommitted"].values()),
             "txns-committed": len(history["committed_txns"]),
             "txns-aborted": len(history["aborted_txns"]),
             "polls": sum(1 for x in history["polls"] if x[2] is not None),
             "offset-commits": len(history["commits"]),
             **{f"fault-{k}": faults[k] for k in fault_kinds(opts.root_kind)},
             "faults-total": sum(faults.values())}
    if cluster.proxy is not None:
        extra.update({f"s3-requests-{k}": v for k, v in cluster.proxy.counts.items()})
    extra.update({"client-errors": sum(errors.values()), "brokers-crashed": crashed, "open-txns-at-end": open_left,
                  "verify-problems": len(problems),
                  "resent-after-epoch-bump (client)": dup_client,
                  "resent-by-non-idempotent (allowed)": count_resent(final["read_uncommitted"],
                                                                     history["at_least_once"])})
    dups = [v for v, n in Counter(v for recs in final["read_uncommitted"].values()
                                  for _, v in recs).items() if n > 1
            and not str(v).startswith(tuple(history["at_least_once"]))]
    if dups:
        log(f"duplicated values: {dups[:20]}")
    return counts, extra


def run(root: str, seconds: float, seed: int, log=print) -> tuple[dict, dict]:
    """Compatibility entry: a 2-broker file:// run at ``root``'s directory's parent."""
    if not root.startswith("file://"):
        raise ValueError("run() takes a file:// root; use run_cluster for S3")
    workdir = os.path.dirname(root.removeprefix("file://"))
    return run_cluster(RunOptions(root_kind="file", seconds=seconds, seed=seed,
                                  workdir=os.path.join(workdir, "jepsen")), log=log)
