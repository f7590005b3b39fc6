"""A broker that fenced itself handles no request read on a connection opened before the
fence: after a pause past the liveness window, the requests waiting in its sockets were sent
before the pause, and their clients may have given up on them (a TxnOffsetCommit whose client
timed out and aborted would join the producer's next transaction). The connection is closed;
clients reconnect and resend what they still want."""
from __future__ import annotations

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage

from .wire import Wire

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


@pytest.fixture
def broker(tmp_path):
    b = BrokerThread(Storage(f"file://{tmp_path}"), ServeOptions(port=0, heartbeat_ms=500)).start()
    yield b
    b.stop()


def test_a_connection_opened_before_a_fence_is_closed_unanswered(broker):
    old = Wire(broker.bootstrap)
    assert int(old.call(API_VERSIONS).error_code) == 0
    broker.server.brokers.fence("a pause past the liveness window (test)")
    with pytest.raises(ConnectionError):
        old.call(API_VERSIONS)
    new = Wire(broker.bootstrap)       # a connection opened after the fence is served
    assert int(new.call(API_VERSIONS).error_code) == 0
    assert int(new.call(API_VERSIONS).error_code) == 0


def test_a_lapsed_lease_found_by_the_request_closes_its_connection(broker):
    """The request that finds the lease lapsed (the process just resumed, before its heartbeat
    thread noticed) fences the broker and is itself not handled."""
    w = Wire(broker.bootstrap)
    assert int(w.call(API_VERSIONS).error_code) == 0
    membership = broker.server.brokers
    before = membership.fence_epoch
    # As if paused: the last successful registration put was sent long ago.
    with membership._fence_lock:
        membership._lease_from = membership.clock.monotonic_s() - 60
    with pytest.raises(ConnectionError):
        w.call(API_VERSIONS)
    assert membership.fence_epoch == before + 1
    assert int(Wire(broker.bootstrap).call(API_VERSIONS).error_code) == 0
