"""SASL hardening: PLAIN authorization ids, malformed SCRAM, no user enumeration."""
from __future__ import annotations

import logging

import pytest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage

from .wire import Wire

SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    root = "file://" + str(tmp_path_factory.mktemp("sasl-root"))
    with BrokerThread(Storage(root), ServeOptions(port=0, credentials={"alice": "pw", "bob": "pw2"})) as b:
        yield b


def _step(bootstrap, mechanism, *messages):
    """Handshake, then each message in turn; the answers (error code, bytes) and whether the
    broker closed the connection afterwards."""
    w = Wire(bootstrap, timeout=5)
    assert int(w.call(SaslHandshakeRequest(mechanism=mechanism)).error_code) == 0
    out = []
    for m in messages:
        r = w.call(SaslAuthenticateRequest(auth_bytes=m))
        out.append((int(r.error_code), bytes(r.auth_bytes)))
        if r.error_code:
            break
    closed = w.closed() if out[-1][0] else None
    w.close()
    return out, closed


def test_plain_authorization_id_must_be_the_user(sasl_broker):
    assert _step(sasl_broker.bootstrap, "PLAIN", b"\x00alice\x00pw")[0] == [(0, b"")]
    assert _step(sasl_broker.bootstrap, "PLAIN", b"alice\x00alice\x00pw")[0] == [(0, b"")]
    answers, closed = _step(sasl_broker.bootstrap, "PLAIN", b"bob\x00alice\x00pw")
    assert answers[0][0] == SASL_AUTHENTICATION_FAILED and closed


@pytest.mark.parametrize("message", [b"n,", b"n", b"", b"x,,n=alice,r=abc", b"n,,", b"n,,r=abc",
                                     b"n,a=bob,n=alice,r=abc", b"\xff\xfe"])
def test_malformed_scram_first_message_fails_cleanly(sasl_broker, caplog, message):
    caplog.set_level(logging.INFO, logger="kafkastore")
    answers, closed = _step(sasl_broker.bootstrap, "SCRAM-SHA-256", message)
    assert answers[0][0] == SASL_AUTHENTICATION_FAILED and closed
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def _server_first(bootstrap, user):
    answers, _ = _step(bootstrap, "SCRAM-SHA-256", b"n,,n=" + user + b",r=fixednonce")
    code, data = answers[0]
    fields = dict(kv.split("=", 1) for kv in data.decode().split(","))
    return code, fields


def test_scram_answers_do_not_reveal_which_users_exist(sasl_broker):
    known1, known2 = _server_first(sasl_broker.bootstrap, b"alice"), _server_first(sasl_broker.bootstrap, b"alice")
    ghost1, ghost2 = _server_first(sasl_broker.bootstrap, b"mallory"), _server_first(sasl_broker.bootstrap, b"mallory")
    for code, fields in (known1, known2, ghost1, ghost2):
        assert code == 0 and set(fields) == {"r", "s", "i"} and fields["r"].startswith("fixednonce")
    # Same shape, fixed per user (as a stored salt is), different between users.
    assert known1[1]["s"] == known2[1]["s"] and ghost1[1]["s"] == ghost2[1]["s"]
    assert known1[1]["s"] != ghost1[1]["s"]
    assert len(known1[1]["s"]) == len(ghost1[1]["s"]) and known1[1]["i"] == ghost1[1]["i"]
    # The final step fails the same way for an unknown user as for a wrong password.
    fails = []
    for user in (b"alice", b"mallory"):
        w = Wire(sasl_broker.bootstrap, timeout=5)
        w.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        first = w.call(SaslAuthenticateRequest(auth_bytes=b"n,,n=" + user + b",r=abc"))
        nonce = dict(kv.split("=", 1) for kv in bytes(first.auth_bytes).decode().split(","))["r"]
        r = w.call(SaslAuthenticateRequest(auth_bytes=f"c=biws,r={nonce},p=AAAA".encode()))
        fails.append((int(r.error_code), r.error_message))
        w.close()
    assert fails[0] == fails[1] and fails[0][0] == SASL_AUTHENTICATION_FAILED


def test_a_logged_in_connection_cannot_switch_principal(sasl_broker):
    """A second SaslHandshake / SaslAuthenticate on an authenticated connection is
    ILLEGAL_SASL_STATE, and the connection keeps its principal."""
    w = Wire(sasl_broker.bootstrap, timeout=5)
    assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
    assert int(w.call(SaslAuthenticateRequest(auth_bytes=b"\0bob\0pw2")).error_code) == 0
    assert int(w.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == ILLEGAL_SASL_STATE
    assert int(w.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0pw")).error_code) == ILLEGAL_SASL_STATE
    w.close()


def test_root_scram_users_and_unknown_names_look_alike_on_every_broker(tmp_path):
    """A real user of the root (32-byte stored salt, its iterations) and an unknown name get
    server-first messages of the same shape, each the same on every broker of the root."""
    from kafkastore.cluster.scram import ScramUsers

    root = f"file://{tmp_path}/root"
    ScramUsers(Storage(root)).add("carol", "SCRAM-SHA-256", "s3cret")
    seen = []
    for _ in range(2):
        with BrokerThread(Storage(root), ServeOptions(port=0, sasl=True)) as b:
            seen.append((_server_first(b.bootstrap, b"carol")[1], _server_first(b.bootstrap, b"nobody")[1]))
    (carol1, ghost1), (carol2, ghost2) = seen
    assert carol1["s"] == carol2["s"] and ghost1["s"] == ghost2["s"]      # stable across brokers
    assert len(carol1["s"]) == len(ghost1["s"]) and carol1["i"] == ghost1["i"]
    assert ScramUsers(Storage(root)).lookup("carol", "SCRAM-SHA-256") is not None
