"""Raw SASL logins from a chosen loopback address (the failed-login budget tests)."""
from __future__ import annotations

import socket

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.protocol.wire import Wire

SASL_AUTHENTICATION_FAILED = 58


class WireFrom(Wire):
    """A raw connection from a chosen loopback address."""

    def __init__(self, bootstrap: str, source: str, timeout: float = 5.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0))
        self.correlation = 0


def plain_login(bootstrap: str, source: str, user: str, password: str) -> str:
    """'ok', 'failed' (checked and refused), 'refused' (over the budget: refused unchecked, or
    the connection closed at accept)."""
    try:
        w = WireFrom(bootstrap, source)
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


def scram_guess(bootstrap: str, source: str, user: str) -> str:
    """One SCRAM-SHA-256 login with a made-up proof: 'failed' or 'refused'."""
    try:
        w = WireFrom(bootstrap, source)
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
