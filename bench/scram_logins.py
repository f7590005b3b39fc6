"""Benchmark: SCRAM-SHA-256 logins a broker serves, for a user stored under the root
(``kafkastore users``: stored keys) against one of ``--sasl-credentials`` (keys derived with
PBKDF2 once per user and mechanism for the broker's life; every login until 4098a59).

    .venv/bin/python bench/scram_logins.py [--logins 200] [--rounds 2]

One in-process broker (``BrokerThread``) on a temporary ``file://`` root; each login is a new
connection: SaslHandshake, client-first, client-final (the client's own PBKDF2 is cached, so
the time is the broker's and the round trips'). Prints logins per second per kind, each round.
Other processes on the machine make the numbers noisy: compare kinds within one run.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest  # noqa: E402
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest  # noqa: E402

from kafkastore.protocol.server import BrokerThread, ServeOptions  # noqa: E402
from kafkastore.cluster.scram import ScramUsers  # noqa: E402
from kafkastore.storage import Storage  # noqa: E402
from tests.protocol.wire import Wire  # noqa: E402

_salted: dict = {}


def login(bootstrap: str, user: str, password: str) -> None:
    """One full SCRAM-SHA-256 exchange on a new connection (asserted to succeed)."""
    w = Wire(bootstrap, timeout=5)
    try:
        w.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        first = f"n={user},r=benchnonce"
        r = w.call(SaslAuthenticateRequest(auth_bytes=("n,," + first).encode()))
        server_first = bytes(r.auth_bytes).decode()
        f = dict(kv.split("=", 1) for kv in server_first.split(","))
        key = (user, f["s"], f["i"])
        if key not in _salted:
            _salted[key] = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(f["s"]), int(f["i"]))
        client_key = hmac.new(_salted[key], b"Client Key", hashlib.sha256).digest()
        final = f"c=biws,r={f['r']}"
        auth = f"{first},{server_first},{final}".encode()
        sig = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
        r = w.call(SaslAuthenticateRequest(auth_bytes=f"{final},p={proof}".encode()))
        assert int(r.error_code) == 0, r
    finally:
        w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logins", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = "file://" + tempfile.mkdtemp(prefix="scram-bench-")
    ScramUsers(Storage(root)).add("stored", "SCRAM-SHA-256", "pw")
    with BrokerThread(Storage(root), ServeOptions(port=0, credentials={"filed": "pw"})) as b:
        for _ in range(args.rounds):
            for user in ("stored", "filed"):
                login(b.bootstrap, user, "pw")  # warm: the client's PBKDF2, the broker's cache
                t = time.perf_counter()
                for _ in range(args.logins):
                    login(b.bootstrap, user, "pw")
                dt = time.perf_counter() - t
                print(f"{user:>6}: {args.logins / dt:6.0f} logins/s ({1000 * dt / args.logins:.2f} ms each)")


if __name__ == "__main__":
    main()
