"""Connections that have not authenticated have their own budget (in all and per address) and
their own deadline, so idle unauthenticated sockets never keep an authenticated client out."""
from __future__ import annotations

import socket
import time
import uuid

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.protocol.server import BrokerThread
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.acl_broker import acl_options, sasl_wire
from tests.helpers.wire_requests import batch, produce
from tests.protocol.wire import Wire


def _idle_socket(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def _closed_by_broker(s: socket.socket, wait_s: float) -> bool:
    s.settimeout(wait_s)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_idle_unauthenticated_sockets_cannot_lock_out_a_real_client(tmp_path):
    root = f"file://{tmp_path}"
    topic = f"pre-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), topic, 1)
    opts = acl_options(max_connections=20, max_connections_per_ip=20,
                       max_unauthenticated_connections=10,
                       max_unauthenticated_connections_per_ip=4)
    with BrokerThread(Storage(root), opts) as broker:
        port = broker.server.port
        idle = [_idle_socket(port, f"127.0.0.{2 + i // 8}") for i in range(24)]
        time.sleep(0.5)
        assert broker.server.unauthenticated_count() <= 10
        w = sasl_wire(broker, "admin")          # still gets in, authenticates and produces
        assert produce(w, topic, 0, batch([b"v"]))[0] == 0
        w.close()
        for s in idle:
            s.close()


def test_an_unauthenticated_connection_is_closed_at_its_deadline_even_if_busy(tmp_path):
    root = f"file://{tmp_path}"
    opts = acl_options(sasl_auth_timeout_ms=500)
    with BrokerThread(Storage(root), opts) as broker:
        w = Wire(broker.bootstrap, timeout=10)
        closed = False
        for _ in range(60):               # ApiVersions every 0.25 s does not keep it open
            try:
                w.call(ApiVersionsRequest(client_software_name="x", client_software_version="1"))
            except OSError:
                closed = True
                break
            time.sleep(0.25)
        assert closed
        good = sasl_wire(broker, "admin")     # an authenticated one stays past the deadline
        good.sock.settimeout(1.5)
        assert not good.closed()
        good.close()
