"""Stalled TLS handshakes count toward the connection caps from accept on and time out: many
sockets that never finish a handshake are capped, memory stays bounded, and an authenticated
client still connects and produces meanwhile."""
from __future__ import annotations

import os
import socket
import ssl
import time

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.tls import self_signed


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _stalled(port: int, source: str) -> socket.socket:
    """A socket that sends half a ClientHello and nothing more."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(b"\x16\x03\x01\x02\x00\x01")
    return s


def test_stalled_tls_handshakes_are_capped_and_time_out(tmp_path):
    from confluent_kafka import Producer

    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "secure", 1)
    opts = ServeOptions(port=0, ssl_context=ctx, credentials={"alice": "s3cret"},
                        commit_interval_ms=1, max_connections=300, max_connections_per_ip=100,
                        max_unauthenticated_connections=100,
                        max_unauthenticated_connections_per_ip=40,
                        tls_handshake_timeout_ms=2000, sasl_auth_timeout_ms=3000)
    with BrokerThread(Storage(root), opts) as b:
        port = b.server.port
        rss_before = _rss_mb()
        socks = []
        for i in range(600):      # 150 per address from four addresses
            try:
                socks.append(_stalled(port, f"127.0.0.{2 + i // 150}"))
            except OSError:
                pass
        time.sleep(0.5)
        assert b.server.unauthenticated_count() <= 100
        assert len(b.server._conns) <= 300
        conf = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "s3cret",
                "ssl.ca.location": cert}
        p = Producer(conf)
        for i in range(5):
            p.produce("secure", value=b"during-%d" % i)
        assert p.flush(30) == 0
        grown = _rss_mb() - rss_before
        # The stalled sockets are closed at the handshake deadline: every one sees EOF or a reset.
        closed = 0
        for s in socks:
            s.settimeout(15)
            try:
                closed += s.recv(1) == b""
            except OSError:
                closed += 1
            s.close()
        assert closed == len(socks)
        # The server releases a slot in its handler's cleanup, just after closing the socket.
        deadline = time.monotonic() + 10
        while b.server.unauthenticated_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.server.unauthenticated_count() == 0
    print(f"rss grew {grown:.1f} MB under {len(socks)} stalled handshakes")
    assert grown < 200
