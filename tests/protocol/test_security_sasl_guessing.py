"""Guessing SASL passwords on the Kafka listener is bounded per client address: past its
budget of failed logins an address's logins are refused before any check and its new
connections closed at accept, while clients from other addresses log in and produce."""
from __future__ import annotations

import socket

import pytest
from confluent_kafka import Producer
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics import create_topic
from tests.protocol.wire import Wire

SASL_AUTHENTICATION_FAILED = 58
BUDGET = 8
USERS = {"alice": "alice-pw"}


class _WireFrom(Wire):
    """A raw connection from a chosen loopback address."""

    def __init__(self, bootstrap: str, source: str, timeout: float = 5.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0))
        self.correlation = 0


def _plain_login(bootstrap: str, source: str, user: str, password: str) -> str:
    """'ok', 'failed' (checked and refused), 'refused' (over the budget: refused unchecked, or
    the connection closed at accept)."""
    try:
        w = _WireFrom(bootstrap, source)
    except OSError:
        return "refused"
    try:
        if int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) != 0:
            return "failed"
        r = w.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))
    except (ConnectionError, OSError):
        return "refused"
    finally:
        w.sock.close()
    if int(r.error_code) == 0:
        return "ok"
    assert int(r.error_code) == SASL_AUTHENTICATION_FAILED
    return "refused" if "too many failed logins" in (r.error_message or "") else "failed"


def _scram_guess(bootstrap: str, source: str, user: str) -> str:
    """One SCRAM-SHA-256 login with a made-up proof: 'failed' or 'refused'."""
    try:
        w = _WireFrom(bootstrap, source)
        w.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        first = w.call(SaslAuthenticateRequest(auth_bytes=f"n,,n={user},r=abc".encode()))
        if int(first.error_code) != 0:
            return "refused" if "too many" in (first.error_message or "") else "failed"
        nonce = dict(kv.split("=", 1) for kv in bytes(first.auth_bytes).decode().split(","))["r"]
        r = w.call(SaslAuthenticateRequest(auth_bytes=f"c=biws,r={nonce},p=AAAA".encode()))
        w.sock.close()
    except (ConnectionError, OSError):
        return "refused"
    return "refused" if "too many" in (r.error_message or "") else "failed"


@pytest.fixture
def broker(tmp_path):
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "t", 1)
    # A long window: the lockout cannot lapse while the test runs, however slow the machine.
    opts = ServeOptions(port=0, credentials=USERS, commit_interval_ms=2,
                        sasl_max_failed_logins_per_ip=BUDGET, sasl_failed_login_window_ms=120_000)
    with BrokerThread(Storage(root), opts) as b:
        yield b


def test_plain_guessing_is_cut_off_per_address_while_others_log_in(broker):
    outcomes = [_plain_login(broker.bootstrap, "127.0.0.2", "alice", f"guess{i}") for i in range(40)]
    # At most the budget's worth of guesses were checked; every later one was refused unchecked.
    assert outcomes.count("failed") == BUDGET, outcomes
    assert outcomes[BUDGET:] == ["refused"] * (40 - BUDGET), outcomes
    # Even the right password is refused from the guessing address while it is locked out...
    assert _plain_login(broker.bootstrap, "127.0.0.2", "alice", "alice-pw") == "refused"
    # ...but another address logs in, with the raw protocol and with a real client.
    assert _plain_login(broker.bootstrap, "127.0.0.1", "alice", "alice-pw") == "ok"
    p = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                  "sasl.password": "alice-pw", "message.timeout.ms": 10000})
    errors = []
    p.produce("t", b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors == [None]


def test_scram_guessing_is_cut_off_per_address(broker):
    outcomes = [_scram_guess(broker.bootstrap, "127.0.0.3", f"ghost{i}") for i in range(30)]
    assert outcomes.count("failed") == BUDGET, outcomes
    assert outcomes[BUDGET:] == ["refused"] * (30 - BUDGET), outcomes
    assert _plain_login(broker.bootstrap, "127.0.0.4", "alice", "alice-pw") == "ok"


def test_failed_logins_from_one_address_do_not_count_against_another(broker):
    for i in range(BUDGET - 1):
        assert _plain_login(broker.bootstrap, "127.0.0.5", "alice", f"x{i}") == "failed"
    for i in range(BUDGET - 1):
        assert _plain_login(broker.bootstrap, "127.0.0.6", "alice", f"y{i}") == "failed"
    assert _plain_login(broker.bootstrap, "127.0.0.5", "alice", "alice-pw") == "ok"
    assert _plain_login(broker.bootstrap, "127.0.0.6", "alice", "alice-pw") == "ok"
