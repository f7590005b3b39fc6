"""The metrics listener cannot be exhausted by connections that send nothing or dribble: 1,500
idle and half-sent sockets (plain HTTP, and stalled TLS handshakes) leave the threads and
file handles of a `kafkastore serve` process bounded, and a scrape still succeeds while they
are held; with SASL on, a scrape needs basic auth as a SASL user before any metric is read."""
from __future__ import annotations

import base64
import os
import socket
import ssl
import statistics
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers.serve_procs import metrics_port, start_serve, stop_serve
from tests.helpers.tls import self_signed

ATTACK_SOCKETS = 1500
ADDRESSES = 15          # 100 sockets from each of 127.0.0.2 .. 127.0.0.16
#: What the process may hold beyond its baseline: the listener's cap of 64 connections (one
#: thread and one handle each) with room for the broker's own pools.
SLACK = 64 + 40


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _attack(port: int, tls: bool) -> list[socket.socket]:
    """Sockets that connect and then send nothing, half a request line, or half a ClientHello."""
    socks = []
    for i in range(ATTACK_SOCKETS):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.bind((f"127.0.0.{2 + i % ADDRESSES}", 0))
            s.connect(("127.0.0.1", port))
            if tls:
                s.sendall(b"\x16\x03\x01\x02\x00\x01")
            elif i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x")
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def _scrape(url: str, context=None, auth: str | None = None) -> tuple[int, bytes, float]:
    req = urllib.request.Request(url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, r.read(), time.perf_counter() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.perf_counter() - started


def _check_bounded_under_attack(proc, port: int, tls: bool, url: str, context=None, auth=None):
    pid = proc.pid
    status, body, _ = _scrape(url, context, auth)
    assert status == 200 and b"kafkastore_connections" in body
    threads0, fds0 = _threads(pid), _fds(pid)
    socks = _attack(port, tls)
    try:
        time.sleep(1.0)
        threads, fds = _threads(pid), _fds(pid)
        latencies = []
        for _ in range(5):
            status, body, seconds = _scrape(url, context, auth)
            assert status == 200 and b"kafkastore_connections" in body
            latencies.append(seconds)
        print(f"\n{'TLS' if tls else 'plain'}: {len(socks)} attack sockets held; broker threads "
              f"{threads0} -> {threads}, file handles {fds0} -> {fds}; scrape latency under "
              f"attack median {statistics.median(latencies) * 1000:.1f} ms, "
              f"max {max(latencies) * 1000:.1f} ms")
        assert len(socks) >= ATTACK_SOCKETS // 2   # the attack did reach the listener
        assert threads <= threads0 + SLACK, (threads0, threads)
        assert fds <= fds0 + SLACK, (fds0, fds)
    finally:
        for s in socks:
            s.close()


def test_idle_and_dribbling_sockets_do_not_exhaust_the_metrics_listener(tmp_path):
    proc = start_serve(f"file://{tmp_path}/root", extra=["--metrics-listen", "127.0.0.1:0"])
    try:
        port = metrics_port(proc)
        _check_bounded_under_attack(proc, port, False, f"http://127.0.0.1:{port}/metrics")
    finally:
        stop_serve(proc)


def test_stalled_tls_handshakes_do_not_exhaust_the_metrics_listener(tmp_path):
    cert, key = self_signed(tmp_path)
    creds = tmp_path / "users.txt"
    creds.write_text("alice:s3cret\n")
    proc = start_serve(f"file://{tmp_path}/root",
                       extra=["--metrics-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
                              "--sasl-credentials", str(creds)])
    try:
        port = metrics_port(proc)
        context = ssl.create_default_context(cafile=cert)
        url = f"https://127.0.0.1:{port}/metrics"
        _check_bounded_under_attack(proc, port, True, url, context, "alice:s3cret")
    finally:
        stop_serve(proc)


@pytest.fixture
def sasl_metrics(tmp_path):
    creds = tmp_path / "users.txt"
    creds.write_text("alice:s3cret\n")
    proc = start_serve(f"file://{tmp_path}/root",
                       extra=["--metrics-listen", "127.0.0.1:0", "--sasl-credentials", str(creds)])
    try:
        yield f"http://127.0.0.1:{metrics_port(proc)}/metrics"
    finally:
        stop_serve(proc)


def test_metrics_need_basic_auth_when_the_broker_requires_sasl(sasl_metrics):
    status, body, _ = _scrape(sasl_metrics)
    assert status == 401 and b"kafkastore_" not in body
    status, body, _ = _scrape(sasl_metrics, auth="alice:wrong")
    assert status == 401 and b"kafkastore_" not in body
    status, body, _ = _scrape(sasl_metrics, auth="alice:s3cret")
    assert status == 200 and b"kafkastore_connections" in body


def test_metrics_guessing_is_refused_past_the_address_budget(sasl_metrics):
    statuses = [_scrape(sasl_metrics, auth=f"alice:guess{i}")[0] for i in range(15)]
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
