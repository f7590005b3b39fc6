"""Benchmark: what guessing passwords against the schema registry's basic auth costs and tells.

    .venv/bin/python bench/registry_auth.py [--guesses 60] [--produces 300] [--threads 8]

One in-process broker (``BrokerThread``, SASL credentials file plus a SCRAM user of the root,
schema registry on) over a temporary ``file://`` root. Prints:

1. the median time of a basic-auth request with an unknown name and with a known name and a
   wrong password (each guess from its own loopback address, so the per-address limit does not
   answer them 429), and their ratio: equal work means a ratio near 1;
2. the p50 and p99 latency of a produce (confluent-kafka, SASL PLAIN, one message then flush)
   alone and while ``--threads`` threads guess passwords, each from one address (answered 429
   after the failure budget) and each guess from a new address (every guess runs PBKDF2,
   bounded by the verifier's slots), and the ratios to the quiet figures; then the same while
   the threads guess SASL/PLAIN logins on the Kafka listener (one address per thread: closed
   at accept past the failed-login budget; a new address per guess: every guess checked).
   The guessers are separate processes; a control row runs as many processes that only burn
   CPU, so the share of the slowdown that is the machine's contention alone shows;
3. with ``--slowloris``: 300 sockets from 300 loopback addresses dribbling a header byte every
   0.5 s and reconnecting when cut off, the share of 100 authenticated requests answered, their
   median latency, and the threads and connections the registry holds meanwhile.
Other processes on the machine make the numbers noisy: compare within one run.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Producer  # noqa: E402

from kafkastore.protocol.server import BrokerThread, ServeOptions  # noqa: E402
from kafkastore.cluster.scram import ScramUsers  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402


def request(port: int, user: str, password: str, source: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    conn.request("GET", "/subjects", headers={"Authorization": f"Basic {token}"})
    status = conn.getresponse().status
    conn.close()
    return status


def addresses(prefix: int):
    n = 0
    while True:
        n += 1
        yield f"127.{prefix}.{n // 250 % 250}.{n % 250 + 1}"


def timed_guesses(port: int, user: str, n: int, source) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        status = request(port, user, "wrong", next(source))
        out.append(time.perf_counter() - t0)
        assert status == 401, status
        time.sleep(0.03)       # under the registry's budget of unverified checks per second
    return out


def produce_latency(bootstrap: str, n: int) -> tuple[float, float]:
    """(p50, p99) of one message's produce-and-flush, seconds."""
    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "app-pw",
                  "linger.ms": 0})
    p.produce("bench", b"warm")
    p.flush(30)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        p.produce("bench", b"x" * 100)
        p.flush(30)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def sasl_guess(bootstrap: str, password: str, source: str) -> None:
    """One SASL/PLAIN login with ``password`` from ``source`` over the raw Kafka protocol
    (handshake, authenticate; the broker refuses and closes, or closes at accept)."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from kafkastore.protocol.wire import codec

    host, port = bootstrap.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    except OSError:
        return
    try:
        for cid, req in enumerate((SaslHandshakeRequest(mechanism="PLAIN"),
                                   SaslAuthenticateRequest(auth_bytes=f"\0app\0{password}".encode())), 1):
            s.sendall(codec.encode_request(req, cid))
            head = s.recv(4)
            if len(head) < 4:
                return
            size, got = int.from_bytes(head, "big"), b""
            while len(got) < size:
                chunk = s.recv(size - len(got))
                if not chunk:
                    return
                got += chunk
    except OSError:
        pass
    finally:
        s.close()


def _guess_sasl(bootstrap: str, i: int, per_thread_address: bool, stop, count) -> None:
    fresh, fixed = addresses(150 + i), f"127.60.0.{i + 1}"
    while not stop.is_set():
        sasl_guess(bootstrap, f"guess{count.value}", fixed if per_thread_address else next(fresh))
        count.value += 1


def _burn(_where, i: int, per_thread_address: bool, stop, count) -> None:
    while not stop.is_set():
        sum(range(10_000))
        count.value += 1


def burning(_where, threads: int, per_thread_address: bool, stop):
    """The control: ``threads`` processes that only burn CPU (the machine's contention alone)."""
    return _spawn(_burn, None, threads, per_thread_address, stop)


def sasl_guessing(bootstrap: str, threads: int, per_thread_address: bool, stop):
    """``threads`` processes guessing SASL/PLAIN logins on the Kafka listener."""
    return _spawn(_guess_sasl, bootstrap, threads, per_thread_address, stop)


def _ms(pair) -> str:
    return f"p50 {pair[0] * 1000:.2f} ms, p99 {pair[1] * 1000:.2f} ms"


def _guess_registry(port: int, i: int, per_thread_address: bool, stop, count) -> None:
    fresh, fixed = addresses(100 + i), f"127.50.0.{i + 1}"
    while not stop.is_set():
        request(port, "carol", f"guess{count.value}", fixed if per_thread_address else next(fresh))
        count.value += 1


def guessing(port: int, threads: int, per_thread_address: bool, stop):
    """``threads`` guessing processes (not threads of this process: the broker's CPU and GIL
    must pay only for answering them) against the registry's basic auth."""
    return _spawn(_guess_registry, port, threads, per_thread_address, stop)


def _spawn(target, where, n: int, per_thread_address: bool, stop):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    counts = [ctx.Value("q", 0, lock=False) for _ in range(n)]
    procs = [ctx.Process(target=target, args=(where, i, per_thread_address, stop, counts[i]),
                         daemon=True) for i in range(n)]
    for pr in procs:
        pr.start()
    return counts, procs


def slowloris(port: int, server, auth: str) -> None:
    stop, socks = threading.Event(), {}

    def attack():
        while not stop.is_set():
            for k in range(300):
                s = socks.get(k)
                if s is None:
                    s = socket.socket()
                    try:
                        s.bind((f"127.9.{k // 200}.{k % 200 + 1}", 0))
                        s.connect(("127.0.0.1", port))
                        s.sendall(b"G")
                        socks[k] = s
                    except OSError:
                        s.close()
                else:
                    try:
                        s.send(b"E")
                    except OSError:
                        s.close()
                        socks.pop(k)
            stop.wait(0.5)

    t = threading.Thread(target=attack, daemon=True)
    t.start()
    time.sleep(3)
    ok, lat = 0, []
    for _ in range(100):
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/subjects", headers={"Authorization": auth})
            ok += conn.getresponse().status == 200
            conn.close()
        except OSError:
            pass
        lat.append(time.perf_counter() - t0)
        time.sleep(0.05)
    print(f"slowloris (300 dribbling sockets): {ok}/100 authenticated requests answered, median "
          f"{statistics.median(lat) * 1000:.1f} ms; threads {threading.active_count()}, registry "
          f"connections {server.open_connections()}, evicted {server.evicted_connections}, "
          f"refused {server.refused_connections}")
    stop.set()
    t.join(10)
    for s in socks.values():
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--guesses", type=int, default=60)
    ap.add_argument("--produces", type=int, default=300)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--slowloris", action="store_true")
    args = ap.parse_args()
    root = "file://" + tempfile.mkdtemp(prefix="bench-registry-auth-")
    storage = Storage(root)
    ScramUsers(storage).add("carol", "SCRAM-SHA-256", "carol-pw")
    b = BrokerThread(storage, ServeOptions(port=0, credentials={"app": "app-pw"},
                                           auto_create_topics=True,
                                           schema_registry_listen=("127.0.0.1", 0))).start()
    try:
        port = b.server.schema_registry.port
        src = addresses(30)
        timed_guesses(port, "carol", 5, src)            # warm
        u, w = [], []
        for _ in range(args.guesses):          # interleaved: drift in load hits both alike
            u += timed_guesses(port, "nobody", 1, src)
            w += timed_guesses(port, "carol", 1, src)
        unknown, wrong = statistics.median(u), statistics.median(w)
        print(f"basic auth, median of {args.guesses}: unknown name {unknown * 1000:.2f} ms, "
              f"known name wrong password {wrong * 1000:.2f} ms, ratio {wrong / unknown:.2f}")
        quiet = produce_latency(b.bootstrap, args.produces)
        print(f"produce alone: {_ms(quiet)}")
        cpu = time.process_time   # the broker's process (the guessers are others)
        for target, start in (("nothing (control: CPU-burning processes)", lambda *a: burning(None, *a)),
                              ("registry basic auth", lambda *a: guessing(port, *a)),
                              ("Kafka SASL/PLAIN", lambda *a: sasl_guessing(b.bootstrap, *a))):
            for per_address in ((True,) if target.startswith("nothing") else (True, False)):
                import multiprocessing
                stop = multiprocessing.get_context("spawn").Event()
                counts, ts = start(args.threads, per_address, stop)
                time.sleep(2)        # the processes started and guessing
                cpu0, wall0 = cpu(), time.perf_counter()
                loud = produce_latency(b.bootstrap, args.produces)
                used, wall = cpu() - cpu0, time.perf_counter() - wall0
                stop.set()
                for t in ts:
                    t.join(30)
                counts = [c.value for c in counts]
                kind = "one address per thread" if per_address else "a new address per guess"
                print(f"produce while {args.threads} processes guess {target} ({kind}, "
                      f"{sum(counts)} guesses): {_ms(loud)}, ratio p50 {loud[0] / quiet[0]:.2f}, "
                      f"p99 {loud[1] / quiet[1]:.2f} (broker process CPU {used:.1f} s in {wall:.1f} s)")
        if args.slowloris:
            slowloris(port, b.server.schema_registry._server,
                      "Basic " + base64.b64encode(b"app:app-pw").decode())
    finally:
        b.stop()


if __name__ == "__main__":
    main()
