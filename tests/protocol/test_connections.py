"""Connection limits: 512 KB before SASL authentication, bytes in flight per
connection, connections per address and in all, idle connections closed."""
from __future__ import annotations

import datetime
import os
import socket
import struct
import time

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.produce.v9 import request as prod_req

from kafkastore.protocol.wire import codec
from kafkastore.protocol.connection import MAX_UNAUTHENTICATED_REQUEST_BYTES
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire
from tests.helpers.serve_procs import start_serve, stop_serve
from tests.helpers.wire_requests import batch

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _push(sock: socket.socket, claimed: int, send: int) -> None:
    """A frame header claiming ``claimed`` bytes, then up to ``send`` of them (until refused)."""
    sock.settimeout(5)
    try:
        sock.sendall(struct.pack(">i", claimed))
        chunk = b"\0" * (64 << 10)
        for _ in range(send // len(chunk)):
            sock.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass


def _closed(sock: socket.socket, timeout: float = 5) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if sock.recv(1 << 16) == b"":
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_unauthenticated_partial_frames_are_refused_without_buffering(tmp_path):
    opts = ServeOptions(port=0, credentials={"alice": "pw"})
    with BrokerThread(Storage(f"file://{tmp_path}/r"), opts) as b:
        w = Wire(b.bootstrap, timeout=5)
        assert int(w.call(API_VERSIONS).error_code) == 0  # small requests still answered
        before = _rss()
        socks = []
        for claimed in (1 << 20, 90 << 20, 90 << 20, 90 << 20, 90 << 20):
            s = socket.create_connection(("127.0.0.1", b.server.port))
            _push(s, claimed, 8 << 20)
            socks.append(s)
        assert all(_closed(s) for s in socks)
        assert _rss() - before < 30 << 20
        # Just under the limit is read (and then refused as not a SASL request, as before).
        s = socket.create_connection(("127.0.0.1", b.server.port))
        _push(s, MAX_UNAUTHENTICATED_REQUEST_BYTES, MAX_UNAUTHENTICATED_REQUEST_BYTES)
        assert _closed(s)
        for s in socks + [s]:
            s.close()
        w.close()


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _answers(s: socket.socket) -> bool:
    s.settimeout(5)
    try:
        s.sendall(codec.encode_request(API_VERSIONS, 1))
        return len(s.recv(4)) == 4
    except (ConnectionResetError, BrokenPipeError, socket.timeout):
        return False


def test_connection_caps_per_address_and_in_all(tmp_path):
    opts = ServeOptions(port=0, max_connections=3, max_connections_per_ip=2)
    with BrokerThread(Storage(f"file://{tmp_path}/r"), opts) as b:
        port = b.server.port
        a1, a2 = _connect(port, "127.0.0.1"), _connect(port, "127.0.0.1")
        assert _answers(a1) and _answers(a2)
        a3 = _connect(port, "127.0.0.1")
        assert not _answers(a3)  # third from one address
        c1 = _connect(port, "127.0.0.2")
        assert _answers(c1)
        d1 = _connect(port, "127.0.0.3")
        assert not _answers(d1)  # fourth in all
        a1.close()
        time.sleep(0.3)
        d2 = _connect(port, "127.0.0.3")
        assert _answers(d2)  # a slot came free
        assert b.server.refused_connections == 2
        for s in (a2, a3, c1, d1, d2):
            s.close()


def test_idle_connections_are_closed_busy_ones_kept(tmp_path):
    root = f"file://{tmp_path}/r"
    create_topic(Storage(root), "idle", 1)
    with BrokerThread(Storage(root), ServeOptions(port=0, connections_max_idle_ms=300)) as b:
        idle = Wire(b.bootstrap, timeout=5)
        assert int(idle.call(API_VERSIONS).error_code) == 0
        busy = Wire(b.bootstrap, timeout=5)
        # A long poll longer than the idle time: the connection is not idle while it waits.
        r = busy.call(fetch_req.FetchRequest(
            max_wait=datetime.timedelta(milliseconds=1000), min_bytes=1, isolation_level=0,
            topics=(fetch_req.FetchTopic(topic="idle", partitions=(fetch_req.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))
        assert int(r.responses[0].partitions[0].error_code) == 0
        assert _closed(idle.sock, 2)
        busy.close()
        idle.close()


def test_request_bytes_in_flight_per_connection_are_bounded(tmp_path):
    """A client pipelining large produce requests without waiting: the broker reads the next one
    only when the bytes in flight leave room (memory per connection ~ one request limit)."""
    root = f"file://{tmp_path}/r"
    create_topic(Storage(root), "big", 1)
    limit = 256 << 10
    opts = ServeOptions(port=0, max_request_bytes=limit, commit_interval_ms=200)
    with BrokerThread(Storage(root), opts) as b:
        data = batch([os.urandom(150 << 10)])
        req = prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
            prod_req.TopicProduceData(name="big", partition_data=(
                prod_req.PartitionProduceData(index=0, records=data),)),))
        w = Wire(b.bootstrap, timeout=20)
        for _ in range(6):
            w.send(req)
        for _ in range(6):
            _, r = codec.decode_response(w.recv_frame(), 0, 9)
            assert int(r.responses[0].partition_responses[0].error_code) == 0
        w.close()
        assert 0 < b.server.peak_connection_bytes <= limit


def test_serve_flags_set_the_connection_limits(tmp_path):
    """`kafkastore serve --max-connections-per-ip 1 --connections-max-idle-ms 300`: a second
    connection from one address is refused, and an idle one is closed."""
    proc = start_serve(f"file://{tmp_path}/r", extra=["--max-connections-per-ip", "1",
                                                       "--connections-max-idle-ms", "300"])
    try:
        bootstrap = proc.bootstrap
        first = Wire(bootstrap, timeout=10)
        assert int(first.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
                   .error_code) == 0
        second = Wire(bootstrap, timeout=10)
        assert second.recv_frame() is None  # refused: closed without an answer
        second.close()
        time.sleep(1.0)
        assert first.recv_frame() is None   # idle past 300 ms: closed by the broker
        first.close()
    finally:
        stop_serve(proc)
